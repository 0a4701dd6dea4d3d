#include "telemetry/ray_stats.h"

#include <charconv>
#include <cstdint>
#include <optional>

namespace stoker::telemetry {

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

bool Eat(std::string_view* s, std::string_view prefix) {
  if (s->substr(0, prefix.size()) != prefix) return false;
  s->remove_prefix(prefix.size());
  return true;
}

// A plain decimal number (Python's str() of an int or float: "12", "26.78", "1e-05").
bool ParseNumber(std::string_view s, double* out) {
  s = Trim(s);
  if (s.empty()) return false;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool ParseCount(std::string_view s, int64_t* out) {
  double v = 0;
  if (!ParseNumber(s, &v) || v < 0 || v > 9e15) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// "A min, B max, C mean, D total" of durations (seconds) or plain numbers.
bool ParseMinMaxMeanTotal(std::string_view s, bool durations, RayStat* out) {
  static constexpr std::string_view kLabels[] = {" min", " max", " mean", " total"};
  double v[4];
  for (int i = 0; i < 4; ++i) {
    size_t comma = s.find(',');
    std::string_view part = Trim(i < 3 ? s.substr(0, comma) : s);
    if (i < 3 && comma == std::string_view::npos) return false;
    // "avg" is the iterator's word for the mean.
    std::string_view label = kLabels[i];
    if (part.size() >= label.size() && part.substr(part.size() - label.size()) == label) {
      part.remove_suffix(label.size());
    } else if (i == 2 && part.size() >= 4 && part.substr(part.size() - 4) == " avg") {
      part.remove_suffix(4);
    } else {
      return false;
    }
    if (!(durations ? ParseRayDuration(part, &v[i]) : ParseNumber(part, &v[i]))) return false;
    if (v[i] < 0) return false;
    if (i < 3) s.remove_prefix(comma + 1);
  }
  *out = RayStat{v[0], v[1], v[2], v[3]};
  return true;
}

// The number after `'key': ` in the verbose extra-metrics dict (NAN when absent or not a
// plain number).
double ExtraMetric(std::string_view dict, std::string_view key) {
  std::string pat = "'" + std::string(key) + "': ";
  size_t at = dict.find(pat);
  if (at == std::string_view::npos) return NAN;
  std::string_view rest = dict.substr(at + pat.size());
  size_t end = rest.find_first_of(",}");
  double v = NAN;
  if (!ParseNumber(rest.substr(0, end), &v) || v < 0) return NAN;
  return v;
}

enum class Section { kNone, kOperator, kIterator, kBlocked, kDataset, kClusterMem, kDatasetMem,
                     kRuntime, kOther };

// "Operator 3 Name: suffix" / "Suboperator 0 Name: suffix": the header's parts.
struct Header {
  bool group = false;  // "Operator N Name: executed in Xs" of fused sub-operators
  RayOperatorStats op;
};

// nullopt: not a header. Error text in *err when a header is malformed.
std::optional<Header> ParseHeader(std::string_view line, std::string* err) {
  Header h;
  if (Eat(&line, "Suboperator ")) {
    h.op.sub_operator = true;
  } else if (!Eat(&line, "Operator ")) {
    return std::nullopt;
  }
  size_t i = 0;
  while (i < line.size() && IsDigit(line[i])) ++i;
  if (i == 0 || i > 9 || i >= line.size() || line[i] != ' ') return std::nullopt;
  h.op.number = static_cast<int>(std::strtol(std::string(line.substr(0, i)).c_str(), nullptr, 10));
  line.remove_prefix(i + 1);
  size_t colon = line.rfind(": ");
  std::string_view name, suffix;
  if (colon == std::string_view::npos) {
    if (line.empty() || line.back() != ':') {
      *err = "an operator header without ': '";
      return std::nullopt;
    }
    name = line.substr(0, line.size() - 1);
  } else {
    name = line.substr(0, colon);
    suffix = Trim(line.substr(colon + 2));
  }
  if (Trim(name).empty()) {
    *err = "an operator header without a name";
    return std::nullopt;
  }
  h.op.name = std::string(Trim(name));
  if (suffix.empty()) return h;
  if (suffix == "[execution cached]") {
    h.op.cached = true;
    return h;
  }
  if (Eat(&suffix, "executed in ")) {
    h.group = true;
    double v;
    if (suffix.empty() || suffix.back() != 's' || !ParseNumber(suffix.substr(0, suffix.size() - 1), &v)) {
      *err = "cannot read the time of 'executed in'";
      return std::nullopt;
    }
    h.op.elapsed_s = v;
    return h;
  }
  size_t tasks = suffix.find(" tasks executed, ");
  if (tasks != std::string_view::npos) {
    if (!ParseCount(suffix.substr(0, tasks), &h.op.tasks)) {
      *err = "cannot read the task count";
      return std::nullopt;
    }
    suffix.remove_prefix(tasks + 17);
  }
  size_t blocks = suffix.find(" blocks produced");
  if (blocks == std::string_view::npos || !ParseCount(suffix.substr(0, blocks), &h.op.blocks)) {
    *err = "expected 'N blocks produced' after the operator's name";
    return std::nullopt;
  }
  suffix.remove_prefix(blocks + 16);
  if (Eat(&suffix, " in ")) {
    double v;
    if (suffix.empty() || suffix.back() != 's' ||
        !ParseNumber(suffix.substr(0, suffix.size() - 1), &v) || v < 0) {
      *err = "cannot read the time of 'blocks produced in'";
      return std::nullopt;
    }
    h.op.elapsed_s = v;
  } else if (!suffix.empty()) {
    *err = "unexpected text after 'blocks produced'";
    return std::nullopt;
  }
  return h;
}

}  // namespace

bool ParseRayDuration(std::string_view s, double* out) {
  s = Trim(s);
  double scale = 1;
  if (s.size() > 2 && s.substr(s.size() - 2) == "ms") {
    scale = 1e-3, s.remove_suffix(2);
  } else if (s.size() > 2 && s.substr(s.size() - 2) == "us") {
    scale = 1e-6, s.remove_suffix(2);
  } else if (s.size() > 1 && s.back() == 's') {
    s.remove_suffix(1);
  } else {
    return false;
  }
  double v = 0;
  if (!ParseNumber(s, &v) || v < 0) return false;
  *out = v * scale;
  return true;
}

bool LooksLikeRayDataStats(std::string_view head) {
  if (head.find("Dataset iterator time breakdown:") != std::string_view::npos) return true;
  size_t pos = 0;
  while (pos < head.size()) {
    size_t end = head.find('\n', pos);
    std::string_view line = Trim(head.substr(pos, end == std::string_view::npos ? head.npos : end - pos));
    std::string err;
    if (auto h = ParseHeader(line, &err)) return true;
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  return false;
}

Result<RayDataStats> ParseRayDataStats(std::string_view text, const std::string& name) {
  RayDataStats st;
  st.path = name;
  Section sec = Section::kNone;
  RayOperatorStats* op = nullptr;
  int lineno = 0;
  size_t pos = 0;
  auto bad = [&](const std::string& what) {
    return InvalidArgument("{}:{}: {} (Ray Data stats)", name, lineno, what);
  };
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    std::string_view raw = text.substr(pos, end == std::string_view::npos ? text.npos : end - pos);
    pos = end == std::string_view::npos ? text.size() + 1 : end + 1;
    ++lineno;
    std::string_view line = Trim(raw);
    if (line.empty()) continue;
    std::string err;
    if (auto h = ParseHeader(line, &err)) {
      if (h->group) {
        op = nullptr;  // the fused sub-operators follow, each with its numbers
        sec = Section::kOperator;
        continue;
      }
      h->op.line = lineno;
      st.ops.push_back(std::move(h->op));
      op = &st.ops.back();
      sec = Section::kOperator;
      continue;
    }
    if (!err.empty()) return bad(fmt::format("{}: '{}'", err, line.substr(0, 120)));

    // Section headers.
    if (line == "Dataset iterator time breakdown:") { sec = Section::kIterator; st.iter.present = true; continue; }
    if (line == "Per-stage training-thread blocked time breakdown:") { sec = Section::kBlocked; st.iter.present = true; continue; }
    if (line == "Dataset throughput:") { sec = Section::kDataset; continue; }
    if (line == "Cluster memory:") { sec = Section::kClusterMem; continue; }
    if (line == "Dataset memory:") { sec = Section::kDatasetMem; continue; }
    if (line == "Runtime Metrics:") { sec = Section::kRuntime; continue; }
    if (line == "Block locations:") { sec = Section::kOther; continue; }

    std::string_view s = line;
    auto dur = [&](std::string_view v, double* out) -> Status {
      if (!ParseRayDuration(v, out)) {
        return bad(fmt::format("cannot read '{}' as a duration", Trim(v).substr(0, 60)));
      }
      return Status::OK();
    };
    auto mmmt = [&](std::string_view v, bool durations, RayStat* out) -> Status {
      if (!ParseMinMaxMeanTotal(v, durations, out)) {
        return bad(fmt::format("cannot read '{}' as 'A min, B max, C mean, D total'",
                               Trim(v).substr(0, 80)));
      }
      return Status::OK();
    };
    auto rows_per_s = [&](std::string_view v, double* out) -> Status {
      v = Trim(v);
      if (v.size() < 7 || v.substr(v.size() - 7) != " rows/s" ||
          !ParseNumber(v.substr(0, v.size() - 7), out) || *out < 0) {
        return bad(fmt::format("cannot read '{}' as 'N rows/s'", v.substr(0, 60)));
      }
      return Status::OK();
    };
    auto megabytes = [&](std::string_view v, double* out) -> Status {
      v = Trim(v);
      if (v.size() < 3 || v.substr(v.size() - 2) != "MB" ||
          !ParseNumber(v.substr(0, v.size() - 2), out) || *out < 0) {
        return bad(fmt::format("cannot read '{}' as 'N MB'", v.substr(0, 60)));
      }
      return Status::OK();
    };

    // Lines outside the bulleted sections.
    if (Eat(&s, "Streaming split coordinator overhead time: ")) {
      STOKER_RETURN_IF_ERROR(dur(s, &st.iter.split_coordinator_s));
      continue;
    }
    if (Eat(&s, "Total batches consumed: ") || Eat(&s, "Total rows consumed: ")) {
      int64_t n;
      if (!ParseCount(s, &n)) return bad(fmt::format("cannot read '{}' as a count", s.substr(0, 40)));
      (line[6] == 'b' ? st.iter.batches : st.iter.rows) = n;
      continue;
    }
    if (!Eat(&s, "* ")) {
      ++st.lines_skipped;
      continue;
    }
    switch (sec) {
      case Section::kOperator: {
        if (op == nullptr) {
          ++st.lines_skipped;  // numbers of a fused group's header: none are printed
          continue;
        }
        if (Eat(&s, "Remote wall time: ")) {
          STOKER_RETURN_IF_ERROR(mmmt(s, true, &op->wall_s));
        } else if (Eat(&s, "Remote cpu time: ")) {
          STOKER_RETURN_IF_ERROR(mmmt(s, true, &op->cpu_s));
        } else if (Eat(&s, "Block transform time: ")) {
          STOKER_RETURN_IF_ERROR(mmmt(s, true, &op->transform_s));
        } else if (Eat(&s, "Function body: ")) {
          STOKER_RETURN_IF_ERROR(mmmt(s, true, &op->function_body_s));
        } else if (Eat(&s, "Output num rows per block: ")) {
          STOKER_RETURN_IF_ERROR(mmmt(s, false, &op->rows_per_block));
        } else if (Eat(&s, "Output size bytes per block: ")) {
          STOKER_RETURN_IF_ERROR(mmmt(s, false, &op->bytes_per_block));
        } else if (Eat(&s, "Output rows per task: ")) {
          size_t c = s.rfind(", ");
          std::string_view n = c == std::string_view::npos ? s : s.substr(c + 2);
          int64_t tasks;
          if (n.size() < 11 || n.substr(n.size() - 11) != " tasks used" ||
              !ParseCount(n.substr(0, n.size() - 11), &tasks)) {
            return bad(fmt::format("cannot read the tasks used in '{}'", s.substr(0, 80)));
          }
          if (op->tasks < 0) op->tasks = tasks;
        } else if (Eat(&s, "Tasks per node: ")) {
          size_t c = s.rfind("; ");
          std::string_view n = c == std::string_view::npos ? s : s.substr(c + 2);
          int64_t nodes;
          if (n.size() < 11 || n.substr(n.size() - 11) != " nodes used" ||
              !ParseCount(n.substr(0, n.size() - 11), &nodes) || nodes > (1 << 20)) {
            return bad(fmt::format("cannot read the nodes used in '{}'", s.substr(0, 80)));
          }
          op->nodes = static_cast<int>(nodes);
        } else if (Eat(&s, "Ray Data throughput: ")) {
          STOKER_RETURN_IF_ERROR(rows_per_s(s, &op->rows_per_s));
        } else if (Eat(&s, "Estimated single task throughput: ")) {
          STOKER_RETURN_IF_ERROR(rows_per_s(s, &op->single_task_rows_per_s));
        } else if (Eat(&s, "Extra metrics: ")) {
          op->extra_task_scheduling_s = ExtraMetric(s, "task_scheduling_time_s");
          op->extra_submission_backpressure_s = ExtraMetric(s, "task_submission_backpressure_time");
          op->extra_output_backpressure_s = ExtraMetric(s, "task_output_backpressure_time_s");
          op->extra_spilled_bytes = ExtraMetric(s, "obj_store_mem_spilled");
          op->extra_tasks_failed = ExtraMetric(s, "num_tasks_failed");
        } else {
          ++st.lines_skipped;  // Input prep, Output block build, Stage k, Total ... rows
        }
        break;
      }
      case Section::kIterator: {
        RayIteratorStats& it = st.iter;
        if (Eat(&s, "Total time overall: ")) {
          STOKER_RETURN_IF_ERROR(dur(s, &it.total_s));
        } else if (Eat(&s, "Total time in Ray Data iterator initialization code: ")) {
          STOKER_RETURN_IF_ERROR(dur(s, &it.init_s));
        } else if (Eat(&s, "Total time user thread is blocked by Ray Data iter_batches: ")) {
          STOKER_RETURN_IF_ERROR(dur(s, &it.blocked_s));
        } else if (Eat(&s, "Total time spent waiting for the first batch after starting "
                           "iteration: ")) {
          STOKER_RETURN_IF_ERROR(dur(s, &it.first_batch_s));
        } else if (Eat(&s, "Total execution time for user thread: ")) {
          STOKER_RETURN_IF_ERROR(dur(s, &it.user_s));
        } else if (Eat(&s, "In get RefBundles: ")) {
          STOKER_RETURN_IF_ERROR(mmmt(s, true, &it.get_ref_bundles_s));
        } else if (Eat(&s, "In ray.get(): ")) {
          STOKER_RETURN_IF_ERROR(mmmt(s, true, &it.ray_get_s));
        } else if (Eat(&s, "In batch creation: ")) {
          STOKER_RETURN_IF_ERROR(mmmt(s, true, &it.batch_creation_s));
        } else if (Eat(&s, "In batch formatting: ")) {
          STOKER_RETURN_IF_ERROR(mmmt(s, true, &it.format_s));
        } else if (Eat(&s, "In collate_fn: ")) {
          STOKER_RETURN_IF_ERROR(mmmt(s, true, &it.collate_s));
        } else if (Eat(&s, "In host->device transfer: ")) {
          STOKER_RETURN_IF_ERROR(mmmt(s, true, &it.finalize_s));
        } else {
          ++st.lines_skipped;
        }
        break;
      }
      case Section::kBlocked: {
        RayIteratorStats& it = st.iter;
        double* dst = nullptr;
        if (Eat(&s, "production wait: ")) dst = &it.production_wait_s;
        else if (Eat(&s, "data transfer (ray.get): ")) dst = &it.data_transfer_s;
        else if (Eat(&s, "batching: ")) dst = &it.batching_s;
        else if (Eat(&s, "format: ")) dst = &it.format_blocked_s;
        else if (Eat(&s, "collate: ")) dst = &it.collate_blocked_s;
        else if (Eat(&s, "finalize (host->device): ")) dst = &it.finalize_blocked_s;
        if (dst == nullptr) {
          ++st.lines_skipped;
        } else {
          STOKER_RETURN_IF_ERROR(dur(s, dst));
        }
        break;
      }
      case Section::kDataset:
        if (Eat(&s, "Ray Data throughput: ")) {
          STOKER_RETURN_IF_ERROR(rows_per_s(s, &st.rows_per_s));
        } else {
          ++st.lines_skipped;
        }
        break;
      case Section::kClusterMem:
        if (Eat(&s, "Spilled to disk: ")) {
          STOKER_RETURN_IF_ERROR(megabytes(s, &st.cluster_spilled_mb));
        } else if (Eat(&s, "Restored from disk: ")) {
          STOKER_RETURN_IF_ERROR(megabytes(s, &st.cluster_restored_mb));
        } else {
          ++st.lines_skipped;
        }
        break;
      case Section::kDatasetMem:
        if (Eat(&s, "Spilled to disk: ")) {
          STOKER_RETURN_IF_ERROR(megabytes(s, &st.dataset_spilled_mb));
        } else {
          ++st.lines_skipped;
        }
        break;
      case Section::kRuntime:
        if (Eat(&s, "Total: ")) {
          size_t paren = s.find(" (");
          STOKER_RETURN_IF_ERROR(dur(s.substr(0, paren), &st.runtime_total_s));
        } else {
          ++st.lines_skipped;
        }
        break;
      case Section::kNone:
        return bad(fmt::format("'{}' before any 'Operator N <name>: ...' header",
                               line.substr(0, 80)));
      case Section::kOther:
        ++st.lines_skipped;
        break;
    }
  }
  if (st.ops.empty()) {
    return InvalidArgument("{}: Ray Data stats without any 'Operator N <name>: ... blocks "
                           "produced' section (was the dataset executed before ds.stats()?)",
                           name);
  }
  return st;
}

Result<RayDataStats> ReadRayDataStats(Env* env, const std::string& path) {
  std::vector<uint8_t> data;
  STOKER_RETURN_IF_ERROR(env->ReadFile(path, &data));
  return ParseRayDataStats(
      std::string_view(reinterpret_cast<const char*>(data.data()), data.size()), path);
}

}  // namespace stoker::telemetry
