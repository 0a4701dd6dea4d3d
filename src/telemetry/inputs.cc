#include "telemetry/inputs.h"

#include <algorithm>
#include <cstring>
#include <regex>
#include <set>

#include "telemetry/byte_source.h"

namespace stoker::telemetry {

const char* InputKindName(InputKind k) {
  switch (k) {
    case InputKind::kTrace: return "trace";
    case InputKind::kGpuLog: return "GPU log";
    case InputKind::kPipelineMetrics: return "pipeline metrics";
    case InputKind::kRayDataStats: return "Ray Data stats";
    case InputKind::kUnknown: return "unknown";
  }
  return "unknown";
}

namespace {

// Keys only a Chrome/Kineto trace object has at its top level.
bool LooksLikeTraceObject(std::string_view head) {
  return head.find("\"traceEvents\"") != head.npos ||
         head.find("\"schemaVersion\"") != head.npos ||
         head.find("\"deviceProperties\"") != head.npos;
}

// Ranks beyond this are not believed (a file name or a corrupt distributedInfo).
constexpr int kMaxRank = 1 << 20;

}  // namespace

InputKind SniffInput(std::string_view head) {
  size_t i = 0;
  while (i < head.size() && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' ||
                             head[i] == '\t'))
    ++i;
  if (i >= head.size()) return InputKind::kUnknown;
  char c = head[i];
  if (c == '[') return InputKind::kTrace;  // the bare Chrome event array
  if (c == '{') {
    if (LooksLikeTraceObject(head)) return InputKind::kTrace;
    if (LooksLikePipelineMetrics(head)) return InputKind::kPipelineMetrics;
    return InputKind::kUnknown;
  }
  if (LooksLikeRayDataStats(head)) return InputKind::kRayDataStats;
  if (LooksLikeGpuLog(head)) return InputKind::kGpuLog;
  return InputKind::kUnknown;
}

int RankFromFileName(const std::string& path) {
  static const std::regex re(R"((?:rank|worker)[-_.]?(\d{1,7}))", std::regex::icase);
  std::smatch m;
  std::string base = BaseName(path);
  if (std::regex_search(base, m, re)) {
    long v = std::strtol(m[1].str().c_str(), nullptr, 10);  // at most 7 digits: no overflow
    return v <= kMaxRank ? static_cast<int>(v) : -1;
  }
  return -1;
}

bool IsListableInput(const std::string& name) {
  auto ends = [&](const char* s) {
    size_t n = std::strlen(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  return ends(".json") || ends(".json.gz") || ends(".csv") || ends(".log") || ends(".txt") ||
         ends(".csv.gz") || ends(".log.gz");
}

Result<Inputs> ReadInputs(Env* env, const std::vector<std::string>& paths,
                          const InputReadOptions& opts) {
  Inputs in;
  std::vector<std::string> files;
  for (const auto& p : paths) {
    auto st = env->Stat(p);
    if (!st.ok()) return NotFound("{}: no such file or folder", p);
    if (st->is_dir) {
      STOKER_ASSIGN_OR_RETURN(auto entries, env->ListDir(p));
      size_t before = files.size();
      for (const auto& e : entries) {
        if (e.is_dir) continue;
        if (IsListableInput(e.name)) {
          files.push_back(JoinPath(p, e.name));
        } else {
          in.notes.push_back(fmt::format("skipped {} in {}", e.name, p));
        }
      }
      if (files.size() == before) {
        // A TensorBoard log dir keeps each run's traces one level down
        // (plugins/profile/<run>/): name the subfolders that have some.
        std::string sub;
        int shown = 0;
        for (const auto& e : entries) {
          if (!e.is_dir) continue;
          auto inner = env->ListDir(JoinPath(p, e.name));
          if (!inner.ok()) continue;
          bool has = std::any_of(inner->begin(), inner->end(), [](const auto& f) {
            return !f.is_dir && IsListableInput(f.name);
          });
          if (has && shown++ < 5) sub += (sub.empty() ? "" : ", ") + JoinPath(p, e.name);
        }
        return InvalidArgument("{}: the folder has no trace, log or metrics files "
                               "(*.json, *.json.gz, *.csv, *.log){}",
                               p,
                               sub.empty() ? std::string()
                                           : "; these subfolders have some (give one run's "
                                             "folder): " + sub);
      }
    } else {
      files.push_back(p);
    }
  }
  for (const auto& f : files) {
    STOKER_ASSIGN_OR_RETURN(std::string head, ReadHead(env, f, 64 << 10));
    if (head.empty()) return InvalidArgument("{}: empty file", f);
    if (head.find('\0') != std::string::npos) {
      return InvalidArgument("{}: a binary file: not a trace (JSON), a GPU log (CSV/dmon) or "
                             "pipeline metrics (JSON) or Ray Data stats (text)",
                             f);
    }
    switch (SniffInput(head)) {
      case InputKind::kTrace: {
        STOKER_ASSIGN_OR_RETURN(auto t, ReadTrace(env, f, opts.trace));
        if (t.rank < 0) t.rank = RankFromFileName(f);
        in.traces.push_back(std::move(t));
        break;
      }
      case InputKind::kGpuLog: {
        STOKER_ASSIGN_OR_RETURN(auto l, ReadGpuLog(env, f, opts.gpu_log));
        in.gpu_logs.push_back(std::move(l));
        break;
      }
      case InputKind::kPipelineMetrics: {
        STOKER_ASSIGN_OR_RETURN(auto m, ReadPipelineMetrics(env, f));
        in.pipelines.push_back(std::move(m));
        break;
      }
      case InputKind::kRayDataStats: {
        STOKER_ASSIGN_OR_RETURN(auto r, ReadRayDataStats(env, f));
        in.ray_stats.push_back(std::move(r));
        break;
      }
      case InputKind::kUnknown:
        return InvalidArgument(
            "{}: not a PyTorch profiler trace (Chrome trace JSON), an nvidia-smi/dcgmi log or "
            "stoker pipeline metrics (JSON with \"stages\") or Ray Data stats (ds.stats() text)",
            f);
    }
  }
  // Ranks: unique; fill unknown ones in file order.
  std::set<int> used;
  for (auto& t : in.traces) {
    if (t.rank > kMaxRank) t.rank = -1;
    if (t.rank >= 0 && !used.insert(t.rank).second) {
      in.notes.push_back(fmt::format("{}: rank {} appears in another file too; numbered anew",
                                     t.path, t.rank));
      t.rank = -1;
    }
  }
  int next = 0;
  for (auto& t : in.traces) {
    if (t.rank >= 0) continue;
    while (used.count(next)) ++next;
    t.rank = next;
    used.insert(next);
  }
  return in;
}

}  // namespace stoker::telemetry
