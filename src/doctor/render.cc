#include "doctor/render.h"

#include <algorithm>
#include <cmath>

#include "core/html.h"
#include "doctor/text.h"

namespace stoker::doctor {
namespace {

// " (steps from Optimizer.step)" when the steps are not ProfilerStep#N, else "".
std::string StepsFrom(const Report& r) {
  if (r.steps_from == "ProfilerStep#N") return "";
  return " (steps from " + r.steps_from + ")";
}

std::string Gain(const Finding& f) {
  return f.expected_speedup ? X(*f.expected_speedup) : std::string("-");
}

struct Part {
  const char* key;
  const char* label;
  const char* color;
  char glyph;
};
// The parts of a step, in drawing order; they sum to the step.
const std::vector<Part>& Parts(bool gpu) {
  static const std::vector<Part> kGpu = {
      {"compute", "compute", "#4c9f70", 'C'},   {"comm", "communication", "#3b75af", 'M'},
      {"h2d", "host-to-device", "#f3a712", 'H'}, {"other_gpu", "other GPU", "#8c8c8c", 'o'},
      {"idle_data", "idle: data", "#e4572e", 'D'}, {"idle_copy", "idle: copy", "#b5651d", 'P'},
      {"idle_sync", "idle: sync", "#9b59b6", 'S'},
      {"idle_host", "idle: host", "#cfcfcf", '.'}};
  static const std::vector<Part> kCpu = {
      {"data_wait", "data wait", "#e4572e", 'D'}, {"compute", "compute", "#4c9f70", 'C'},
      {"optimizer", "optimizer", "#17becf", 'O'}, {"comm", "communication", "#3b75af", 'M'},
      {"idle", "other host", "#cfcfcf", '.'}};
  return gpu ? kGpu : kCpu;
}

double Get(const Fractions& f, const std::string& k) {
  if (k == "data_wait") return f.data_wait;
  if (k == "compute") return f.compute;
  if (k == "comm") return f.comm;
  if (k == "comm_total") return f.comm_total;
  if (k == "comm_overlap") return f.comm_overlap;
  if (k == "h2d") return f.h2d;
  if (k == "h2d_pageable") return f.h2d_pageable;
  if (k == "other_gpu") return f.other_gpu;
  if (k == "idle") return f.idle;
  if (k == "idle_data") return f.idle_data;
  if (k == "idle_copy") return f.idle_copy;
  if (k == "idle_sync") return f.idle_sync;
  if (k == "idle_optimizer") return f.idle_optimizer;
  if (k == "idle_host") return f.idle_host;
  if (k == "sync") return f.sync;
  if (k == "optimizer") return f.optimizer;
  return 0;
}

nlohmann::json Num(double v) {
  if (!std::isfinite(v)) return nullptr;
  return std::round(v * 1e6) / 1e6;
}

nlohmann::json FractionsJson(const Fractions& f) {
  return {{"data_wait_frac", Num(f.data_wait)},   {"compute_frac", Num(f.compute)},
          {"comm_frac", Num(f.comm)},             {"comm_total_frac", Num(f.comm_total)},
          {"comm_overlap_frac", Num(f.comm_overlap)}, {"h2d_frac", Num(f.h2d)},
          {"h2d_pageable_frac", Num(f.h2d_pageable)}, {"other_gpu_frac", Num(f.other_gpu)},
          {"idle_frac", Num(f.idle)},             {"idle_data_frac", Num(f.idle_data)},
          {"idle_copy_frac", Num(f.idle_copy)},   {"idle_sync_frac", Num(f.idle_sync)},
          {"idle_host_frac", Num(f.idle_host)},   {"idle_optimizer_frac", Num(f.idle_optimizer)},
          {"sync_frac", Num(f.sync)},             {"optimizer_frac", Num(f.optimizer)}};
}

std::vector<std::string> Wrap(const std::string& s, size_t width) {
  std::vector<std::string> out;
  std::string line;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(' ', i);
    if (j == std::string::npos) j = s.size();
    std::string w = s.substr(i, j - i);
    if (!line.empty() && line.size() + 1 + w.size() > width) {
      out.push_back(line);
      line.clear();
    }
    if (!line.empty()) line += ' ';
    line += w;
    i = j + 1;
  }
  if (!line.empty()) out.push_back(line);
  return out;
}

std::string Esc(const std::string& s) { return html::Escape(s); }

std::string MdEsc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '|') o += "\\|";
    else if (c == '\n') o += ' ';
    else o += c;
  }
  return o;
}

}  // namespace

nlohmann::json ReportToJson(const Report& r) {
  nlohmann::json j;
  j["schema"] = "stoker.doctor/1";
  j["verdict"] = {{"primary", VerdictName(r.primary)},
                  {"confidence", Num(r.confidence)},
                  {"summary", r.summary}};
  nlohmann::json b = FractionsJson(r.breakdown);
  b["step_s"] = Num(r.step_s);
  b["steps"] = r.steps;
  b["steps_from"] = r.has_trace ? nlohmann::json(r.steps_from) : nlohmann::json(nullptr);
  b["gpu"] = r.gpu;
  j["breakdown"] = b;
  j["throughput"] = {{"steps_per_s", Num(r.steps_per_s)},
                     {"samples_per_s", r.batch_size > 0 ? Num(r.samples_per_s) : nullptr},
                     {"batch_size", r.batch_size > 0 ? nlohmann::json(r.batch_size) : nullptr}};
  j["findings"] = nlohmann::json::array();
  for (const auto& f : r.findings) {
    j["findings"].push_back({{"id", f.id},
                             {"severity", f.severity},
                             {"title", f.title},
                             {"evidence", f.evidence},
                             {"fix", f.fix},
                             {"expected_speedup", f.expected_speedup
                                                      ? Num(*f.expected_speedup)
                                                      : nlohmann::json(nullptr)},
                             {"rank", f.rank >= 0 ? nlohmann::json(f.rank) : nullptr}});
  }
  j["ranks"] = nlohmann::json::array();
  for (const auto& rk : r.ranks) {
    nlohmann::json x = {{"rank", rk.rank},
                        {"path", rk.path},
                        {"format", rk.format},
                        {"gpu", rk.gpu},
                        {"dataloader", rk.dataloader},
                        {"steps", rk.steps},
                        {"steps_from", rk.steps_from},
                        {"step_s_mean", Num(rk.step_s_mean)},
                        {"step_s_p50", Num(rk.step_s_p50)},
                        {"step_s_p90", Num(rk.step_s_p90)},
                        {"steps_per_s", Num(rk.steps_per_s)},
                        {"breakdown", FractionsJson(rk.f)},
                        {"sync_calls", rk.sync_calls},
                        {"d2h_copy_calls", rk.d2h_copy_calls},
                        {"kernels_per_step", Num(rk.kernels_per_step)}};
    x["gpus"] = nlohmann::json::array();
    for (const auto& g : rk.gpus) {
      x["gpus"].push_back({{"device", g.device},
                           {"name", g.name},
                           {"breakdown", FractionsJson(g.f)},
                           {"kernels", g.kernels},
                           {"comm_kernels", g.comm_kernels},
                           {"mean_kernel_us", Num(g.mean_kernel_us)},
                           {"h2d_pageable", g.h2d_pageable},
                           {"h2d_pinned", g.h2d_pinned},
                           {"h2d_pageable_bytes", g.h2d_pageable_bytes}});
    }
    x["step_rows"] = nlohmann::json::array();
    for (const auto& s : rk.step_rows) {
      x["step_rows"].push_back({{"step", s.number},
                                {"start_s", Num(s.start_s)},
                                {"dur_s", Num(s.dur_s)},
                                {"breakdown", FractionsJson(s.f)}});
    }
    j["ranks"].push_back(std::move(x));
  }
  j["cross_rank"] = {{"ranks", r.cross.ranks},
                     {"step_spread_s", Num(r.cross.step_spread_s)},
                     {"data_wait_spread_s", Num(r.cross.data_wait_spread_s)},
                     {"comm_spread_s", Num(r.cross.comm_spread_s)},
                     {"straggler_rank", r.cross.straggler_rank >= 0
                                            ? nlohmann::json(r.cross.straggler_rank)
                                            : nullptr},
                     {"straggler_excess_s", Num(r.cross.straggler_excess_s)},
                     {"straggler_cause", r.cross.straggler_cause}};
  j["gpu_logs"] = nlohmann::json::array();
  for (const auto& g : r.gpu_logs) {
    j["gpu_logs"].push_back({{"path", g.path},
                             {"format", g.format},
                             {"gpus", g.gpus},
                             {"samples", g.samples},
                             {"duration_s", Num(g.duration_s)},
                             {"util_mean", Num(g.util_mean)},
                             {"busy_frac", Num(g.busy_frac)},
                             {"starvation_periods", g.starvation_periods},
                             {"starvation_s", Num(g.starvation_s)},
                             {"longest_starvation_s", Num(g.longest_starvation_s)},
                             {"mem_used_max_frac", Num(g.mem_used_max_frac)},
                             {"power_mean_w", Num(g.power_mean_w)},
                             {"power_max_w", Num(g.power_max_w)},
                             {"temp_max_c", Num(g.temp_max_c)},
                             {"throttled_busy_frac", Num(g.throttled_busy_frac)},
                             {"throttle_reasons", telemetry::ThrottleReasonNames(g.throttle_bits_seen)},
                             {"throttled_sm_clock_mhz", Num(g.throttled_sm_clock_mhz)},
                             {"max_sm_clock_mhz", Num(g.max_sm_clock_mhz)},
                             {"power_limit_w", Num(g.power_limit_w)},
                             {"starved_gpu", g.starved_gpu >= 0 ? nlohmann::json(g.starved_gpu)
                                                                : nlohmann::json(nullptr)},
                             {"starved_gpu_frac", Num(g.starved_gpu_frac)},
                             {"sm_active_mean", Num(g.sm_active_mean)},
                             {"tensor_active_mean", Num(g.tensor_active_mean)},
                             {"proc_cpu_cores_mean", Num(g.proc_cpu_cores_mean)},
                             {"cpus", Num(g.cpus)},
                             {"read_mib_s_mean", Num(g.read_mib_s_mean)}});
  }
  if (r.pipeline) {
    const auto& p = *r.pipeline;
    nlohmann::json st = nlohmann::json::array();
    for (const auto& s : p.stages) {
      st.push_back({{"name", s.name},
                    {"threads", s.threads},
                    {"items", s.items},
                    {"busy_frac", Num(s.busy_frac)},
                    {"wait_input_frac", Num(s.wait_input_frac)},
                    {"wait_output_frac", Num(s.wait_output_frac)}});
    }
    j["pipeline"] = {{"path", p.path},
                     {"samples_per_s", Num(p.samples_per_s)},
                     {"bottleneck", p.bottleneck},
                     {"bottleneck_kind", p.bottleneck_kind},
                     {"consumer_wait_frac", Num(p.consumer_wait_frac)},
                     {"cores_busy", Num(p.cores_busy)},
                     {"cores_saturated", p.cores_saturated},
                     {"stages", st}};
  } else {
    j["pipeline"] = nullptr;
  }
  if (r.ray) {
    const auto& y = *r.ray;
    auto count = [](int64_t v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& o : y.ops) {
      ops.push_back({{"number", o.number},
                     {"name", o.name},
                     {"tasks", count(o.tasks)},
                     {"blocks", count(o.blocks)},
                     {"rows", count(o.rows)},
                     {"bytes", count(o.bytes)},
                     {"elapsed_s", Num(o.elapsed_s)},
                     {"wall_s", Num(o.wall_s)},
                     {"cpu_s", Num(o.cpu_s)},
                     {"wall_mean_s", Num(o.wall_mean_s)},
                     {"share", Num(o.share)},
                     {"concurrency", Num(o.concurrency)},
                     {"nodes", o.nodes >= 0 ? nlohmann::json(o.nodes) : nlohmann::json(nullptr)}});
    }
    j["ray"] = {{"path", y.path},
                {"operators", ops},
                {"bottleneck", y.bottleneck >= 0 ? nlohmann::json(y.ops[y.bottleneck].name)
                                                 : nlohmann::json(nullptr)},
                {"iterator", y.iterator},
                {"consumer_wait_frac", Num(y.consumer_wait_frac)},
                {"blocked_s", Num(y.blocked_s)},
                {"first_batch_s", Num(y.first_batch_s)},
                {"wait_s", Num(y.wait_s)},
                {"user_s", Num(y.user_s)},
                {"production_wait_s", Num(y.production_wait_s)},
                {"data_transfer_s", Num(y.data_transfer_s)},
                {"batching_s", Num(y.batching_s)},
                {"format_s", Num(y.format_s)},
                {"batches", count(y.batches)},
                {"rows", count(y.rows)},
                {"rows_per_s", Num(y.rows_per_s)},
                {"spilled_mb", Num(y.spilled_mb)}};
  } else {
    j["ray"] = nullptr;
  }
  j["inputs"] = r.inputs;
  j["notes"] = r.notes;
  return j;
}

std::string RenderJson(const Report& r) {
  // Strings from the input (file names, annotation names) may be invalid UTF-8: replace
  // such bytes instead of throwing.
  return ReportToJson(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string RenderText(const Report& r, const TextOptions& o) {
  auto bold = [&](const std::string& s) { return o.color ? "\033[1m" + s + "\033[0m" : s; };
  auto col = [&](const std::string& s, const char* c) {
    return o.color ? std::string("\033[") + c + "m" + s + "\033[0m" : s;
  };
  std::string out;
  std::string what;
  if (r.has_trace) {
    what = fmt::format("{} rank{}, {} steps{}{}", r.ranks.size(), r.ranks.size() == 1 ? "" : "s",
                       r.steps, StepsFrom(r), r.gpu ? "" : ", CPU-side trace");
  }
  if (!r.gpu_logs.empty()) what += (what.empty() ? "" : ", ") + fmt::format("{} GPU log(s)", r.gpu_logs.size());
  if (r.pipeline) what += (what.empty() ? "" : ", ") + std::string("pipeline metrics");
  if (r.ray) what += (what.empty() ? "" : ", ") + std::string("Ray Data stats");
  out += bold("stoker doctor") + "  (" + what + ")\n";
  const char* vc = r.primary == Verdict::kHealthy || r.primary == Verdict::kComputeBound ? "32"
                   : r.primary == Verdict::kUnknown                                      ? "33"
                                                                                        : "31";
  out += "\n  " + bold(col(std::string(VerdictName(r.primary)), vc)) +
         fmt::format("  confidence {:.2f}\n", r.confidence);
  for (const auto& l : Wrap(r.summary, 96)) out += "  " + l + "\n";
  if (r.has_trace) {
    out += "\n";
    std::string tp = fmt::format("  step {}  ({:.2f} steps/s", Ms(r.step_s), r.steps_per_s);
    if (r.batch_size > 0) tp += fmt::format(", {:.0f} samples/s", r.samples_per_s);
    out += tp + ")\n";
    // Breakdown bar.
    const auto& parts = Parts(r.gpu);
    std::string bar, legend;
    int width = 60, used = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      double f = std::max(0.0, Get(r.breakdown, parts[i].key));
      int w = static_cast<int>(std::lround(f * width));
      if (i + 1 == parts.size()) w = std::max(0, width - used);
      w = std::min(w, width - used);
      bar += std::string(w, parts[i].glyph);
      used += w;
      if (f >= 0.005) legend += fmt::format("{}={} {}  ", parts[i].glyph, parts[i].label, Pct(f));
    }
    out += "  [" + bar + "]\n";
    for (const auto& l : Wrap(legend, 96)) out += "  " + l + "\n";
    if (r.gpu) {
      out += fmt::format("  host: DataLoader wait {}, sync {}, optimizer {}; comm overlapped {}\n",
                         Pct(r.breakdown.data_wait), Pct(r.breakdown.sync),
                         Pct(r.breakdown.optimizer), Pct(r.breakdown.comm_overlap));
    }
  }
  if (!r.findings.empty()) {
    out += "\n" + bold("Findings") + " (by expected gain)\n";
    int k = 0;
    for (const auto& f : r.findings) {
      if (k >= o.max_findings) {
        out += fmt::format("  ... {} more in --json/--md/--html\n",
                           r.findings.size() - static_cast<size_t>(k));
        break;
      }
      ++k;
      std::string sev = f.severity == "high" ? col("high", "31")
                        : f.severity == "medium" ? col("medium", "33") : f.severity;
      out += fmt::format("  {}. [{}] {}", k, sev, bold(f.title));
      if (f.expected_speedup) out += fmt::format("  -> up to {}", Gain(f));
      out += "\n";
      bool first = true;
      for (const auto& l : Wrap(f.evidence, 90)) {
        out += std::string(first ? "     evidence: " : "               ") + l + "\n";
        first = false;
      }
      first = true;
      for (const auto& l : Wrap(f.fix, 90)) {
        out += std::string(first ? "     fix:      " : "               ") + l + "\n";
        first = false;
      }
    }
  }
  if (r.ranks.size() > 1) {
    out += "\n" + bold("Ranks") + "\n";
    out += fmt::format("  {:>5} {:>10} {:>10} {:>10} {:>10}\n", "rank", "step", "data wait",
                       "compute", "comm");
    for (const auto& rk : r.ranks) {
      out += fmt::format("  {:>5} {:>10} {:>10} {:>10} {:>10}{}\n", rk.rank, Ms(rk.step_s_mean),
                         Ms(rk.f.data_wait * rk.step_s_mean), Ms(rk.f.compute * rk.step_s_mean),
                         Ms(rk.f.comm * rk.step_s_mean),
                         rk.rank == r.cross.straggler_rank ? "  <- straggler" : "");
    }
  }
  for (const auto& g : r.gpu_logs) {
    if (std::isnan(g.util_mean)) {
      out += fmt::format("\n  {} ({}): {} samples over {:.0f} s, no GPU samples", g.path, g.format,
                         g.samples, g.duration_s);
    } else {
      out += fmt::format("\n  {} ({}): {} samples over {:.0f} s, util mean {:.0f}%, busy {}", g.path,
                         g.format, g.samples, g.duration_s, g.util_mean,
                         std::isnan(g.busy_frac) ? "?" : Pct(g.busy_frac));
    }
    if (!std::isnan(g.mem_used_max_frac)) out += fmt::format(", memory max {}", Pct(g.mem_used_max_frac));
    if (!std::isnan(g.proc_cpu_cores_mean)) {
      out += fmt::format(", process tree CPU {:.1f}{} cores", g.proc_cpu_cores_mean,
                         std::isnan(g.cpus) ? std::string() : fmt::format(" of {:.0f}", g.cpus));
    }
    if (!std::isnan(g.read_mib_s_mean)) out += fmt::format(", disk read {:.1f} MiB/s", g.read_mib_s_mean);
    out += "\n";
  }
  if (r.ray) {
    const auto& y = *r.ray;
    out += fmt::format("\n  Ray Data operators ({}):\n", y.path);
    out += fmt::format("  {:<34} {:>6} {:>10} {:>10} {:>6} {:>8}\n", "operator", "tasks",
                       "wall", "cpu", "share", "running");
    for (size_t i = 0; i < y.ops.size(); ++i) {
      const auto& o = y.ops[i];
      std::string name = o.name.size() > 34 ? o.name.substr(0, 31) + "..." : o.name;
      out += fmt::format("  {:<34} {:>6} {:>10} {:>10} {:>6} {:>8}{}\n", name,
                         o.tasks >= 0 ? std::to_string(o.tasks) : std::string("-"), Ms(o.wall_s),
                         Ms(o.cpu_s), Pct(o.share),
                         std::isnan(o.concurrency) ? std::string("-")
                                                   : fmt::format("{:.2f}", o.concurrency),
                         static_cast<int>(i) == y.bottleneck ? "  <- most work" : "");
    }
    if (y.iterator) {
      out += fmt::format("  iterator: blocked {} (first batch {}), user code {}",
                         Ms(y.blocked_s), Ms(y.first_batch_s), Ms(y.user_s));
      if (!std::isnan(y.consumer_wait_frac)) {
        out += fmt::format(", waits {} after the first batch", Pct(y.consumer_wait_frac));
      }
      out += "\n";
    }
  }
  for (const auto& n : r.notes) out += "  note: " + n + "\n";
  return out;
}

std::string RenderMarkdown(const Report& r) {
  std::string o;
  o += "## stoker doctor: `" + std::string(VerdictName(r.primary)) +
       fmt::format("` (confidence {:.2f})\n\n", r.confidence);
  o += r.summary + "\n\n";
  if (r.has_trace) {
    o += fmt::format("Step time **{}** ({:.2f} steps/s", Ms(r.step_s), r.steps_per_s);
    if (r.batch_size > 0) o += fmt::format(", {:.0f} samples/s", r.samples_per_s);
    o += fmt::format(") over {} steps{}, {} rank(s).\n\n", r.steps, StepsFrom(r), r.ranks.size());
    o += "| part of the step | share |\n|---|---:|\n";
    for (const auto& p : Parts(r.gpu)) {
      o += fmt::format("| {} | {} |\n", p.label, Pct(Get(r.breakdown, p.key)));
    }
    if (r.gpu) {
      o += fmt::format("| host: DataLoader wait | {} |\n| host: synchronize | {} |\n",
                       Pct(r.breakdown.data_wait), Pct(r.breakdown.sync));
    }
    o += "\n";
  }
  if (!r.findings.empty()) {
    o += "### Findings\n\n| # | severity | finding | expected gain |\n|---|---|---|---:|\n";
    int k = 0;
    for (const auto& f : r.findings) {
      o += fmt::format("| {} | {} | {} | {} |\n", ++k, f.severity, MdEsc(f.title), Gain(f));
    }
    o += "\n";
    k = 0;
    for (const auto& f : r.findings) {
      o += fmt::format("**{}. {}** (`{}`)\n\n- Evidence: {}\n- Fix: {}\n\n", ++k, f.title, f.id,
                       f.evidence, f.fix);
    }
  }
  if (r.ranks.size() > 1) {
    o += "### Ranks\n\n| rank | step | data wait | compute | exposed comm |\n|---:|---:|---:|---:|---:|\n";
    for (const auto& rk : r.ranks) {
      o += fmt::format("| {}{} | {} | {} | {} | {} |\n", rk.rank,
                       rk.rank == r.cross.straggler_rank ? " (straggler)" : "", Ms(rk.step_s_mean),
                       Ms(rk.f.data_wait * rk.step_s_mean), Ms(rk.f.compute * rk.step_s_mean),
                       Ms(rk.f.comm * rk.step_s_mean));
    }
    o += "\n";
  }
  if (!r.gpu_logs.empty()) {
    o += "### GPU logs\n\n| log | samples | util mean | starved periods | memory max | throttled (busy) |\n|---|---:|---:|---:|---:|---:|\n";
    for (const auto& g : r.gpu_logs) {
      o += fmt::format("| {} | {} | {} | {} | {} | {} |\n", MdEsc(g.path), g.samples,
                       std::isnan(g.util_mean) ? std::string("-")
                                               : fmt::format("{:.0f}%", g.util_mean),
                       g.starvation_periods,
                       std::isnan(g.mem_used_max_frac) ? "-" : Pct(g.mem_used_max_frac),
                       std::isnan(g.throttled_busy_frac) ? "-" : Pct(g.throttled_busy_frac));
    }
    o += "\n";
  }
  if (r.ray) {
    const auto& y = *r.ray;
    o += "### Ray Data operators\n\n| operator | tasks | remote wall | remote CPU | share | "
         "tasks running |\n|---|---:|---:|---:|---:|---:|\n";
    for (size_t i = 0; i < y.ops.size(); ++i) {
      const auto& o2 = y.ops[i];
      o += fmt::format("| {}{} | {} | {} | {} | {} | {} |\n", MdEsc(o2.name),
                       static_cast<int>(i) == y.bottleneck ? " (most work)" : "",
                       o2.tasks >= 0 ? std::to_string(o2.tasks) : std::string("-"),
                       Ms(o2.wall_s), Ms(o2.cpu_s), Pct(o2.share),
                       std::isnan(o2.concurrency) ? std::string("-")
                                                  : fmt::format("{:.2f}", o2.concurrency));
    }
    if (y.iterator) {
      o += fmt::format("\nIterator: blocked {} (first batch {}), user code {}{}.\n",
                       Ms(y.blocked_s), Ms(y.first_batch_s), Ms(y.user_s),
                       std::isnan(y.consumer_wait_frac)
                           ? std::string()
                           : fmt::format(", waits {} after the first batch",
                                         Pct(y.consumer_wait_frac)));
    }
    o += "\n";
  }
  o += "<sub>Inputs: " + MdEsc([&] {
    std::string s;
    for (const auto& i : r.inputs) s += (s.empty() ? "" : "; ") + i;
    return s;
  }()) + "</sub>\n";
  return o;
}

namespace {

// Stacked bars, one per step.
std::string StepBarsSvg(const RankReport& rk) {
  const auto& parts = Parts(rk.gpu);
  size_t n = std::min<size_t>(rk.step_rows.size(), 200);
  if (n == 0) return "";
  double maxd = 0;
  for (size_t i = 0; i < n; ++i) maxd = std::max(maxd, rk.step_rows[i].dur_s);
  int W = 820, H = 220, L = 50, B = 20;
  double bw = static_cast<double>(W - L - 10) / static_cast<double>(n);
  std::string s = html::SvgOpen(W, H + 10);
  s += fmt::format("<text x=\"2\" y=\"12\" class=\"ax\">{}</text>", Esc(Ms(maxd)));
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"axl\"/>", L, H - B, W - 10, H - B);
  for (size_t i = 0; i < n; ++i) {
    const auto& row = rk.step_rows[i];
    double y = H - B;
    double x = L + i * bw;
    double h_total = (H - B - 10) * row.dur_s / maxd;
    for (const auto& p : parts) {
      double f = std::max(0.0, Get(row.f, p.key));
      double h = h_total * f;
      if (h <= 0) continue;
      y -= h;
      s += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\">"
          "<title>step {}: {} {} ({})</title></rect>",
          x + 0.5, y, std::max(0.5, bw - 1), h, p.color, row.number, p.label, Pct(f),
          Esc(Ms(f * row.dur_s)));
    }
  }
  s += "</svg>";
  return s;
}

std::string Legend(bool gpu) {
  std::string s = "<div class=\"legend\">";
  for (const auto& p : Parts(gpu)) {
    s += fmt::format("<span><i style=\"background:{}\"></i>{}</span>", p.color, p.label);
  }
  return s + "</div>";
}

const char* KindColor(const std::string& k) {
  if (k == "compute") return "#4c9f70";
  if (k == "comm") return "#3b75af";
  if (k == "h2d") return "#f3a712";
  if (k == "data") return "#e4572e";
  if (k == "sync") return "#9b59b6";
  if (k == "copy") return "#b5651d";
  if (k == "optimizer") return "#17becf";
  if (k == "cpu") return "#4c9f70";
  return "#8c8c8c";
}

std::string TimelineSvg(const RankReport& rk) {
  if (rk.timeline_lanes.empty()) return "";
  double span = 0;
  for (const auto& s : rk.timeline) span = std::max(span, s.end_s);
  size_t last = std::min<size_t>(rk.step_rows.size(), 3);
  if (last > 0) span = std::max(span, rk.step_rows[last - 1].start_s + rk.step_rows[last - 1].dur_s);
  if (span <= 0) return "";
  int W = 820, L = 170, lane_h = 18;
  int H = static_cast<int>(rk.timeline_lanes.size()) * lane_h + 24;
  std::string s = html::SvgOpen(W, H);
  double sx = (W - L - 10) / span;
  for (size_t i = 0; i < rk.timeline_lanes.size(); ++i) {
    s += fmt::format("<text x=\"2\" y=\"{}\" class=\"ax\">{}</text>", i * lane_h + 13,
                     Esc(rk.timeline_lanes[i]));
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#f4f4f4\"/>", L,
                     i * lane_h + 2, W - L - 10, lane_h - 4);
  }
  for (const auto& g : rk.timeline) {
    double x = L + g.begin_s * sx, w = std::max(0.6, (g.end_s - g.begin_s) * sx);
    s += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"/>", x,
                     g.lane * lane_h + 2, w, lane_h - 4, KindColor(g.kind));
  }
  for (size_t i = 0; i < last; ++i) {
    double x = L + rk.step_rows[i].start_s * sx;
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"0\" x2=\"{:.1f}\" y2=\"{}\" class=\"step\"/>"
                     "<text x=\"{:.1f}\" y=\"{}\" class=\"ax\">step {}</text>",
                     x, x, H - 12, x + 2, H - 2, rk.step_rows[i].number);
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"ax\" text-anchor=\"end\">{}</text>", W - 10,
                   H - 2, Esc(Ms(span)));
  return s + "</svg>";
}

std::string RanksSvg(const Report& r) {
  if (r.ranks.size() < 2) return "";
  bool gpu = r.gpu;
  const auto& parts = Parts(gpu);
  double maxs = 0;
  for (const auto& rk : r.ranks) maxs = std::max(maxs, rk.step_s_mean);
  int W = 820, L = 80, row_h = 22;
  size_t n = std::min<size_t>(r.ranks.size(), 64);
  int H = static_cast<int>(n) * row_h + 20;
  std::string s = html::SvgOpen(W, H);
  for (size_t i = 0; i < n; ++i) {
    const auto& rk = r.ranks[i];
    double x = L;
    s += fmt::format("<text x=\"2\" y=\"{}\" class=\"ax\">rank {}{}</text>", i * row_h + 15, rk.rank,
                     rk.rank == r.cross.straggler_rank ? " *" : "");
    double wt = (W - L - 80) * rk.step_s_mean / maxs;
    for (const auto& p : parts) {
      double f = std::max(0.0, Get(rk.f, p.key));
      double w = wt * f;
      if (w <= 0) continue;
      s += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\">"
                       "<title>rank {}: {} {}</title></rect>",
                       x, i * row_h + 3, w, row_h - 6, p.color, rk.rank, p.label,
                       Esc(Ms(f * rk.step_s_mean)));
      x += w;
    }
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"ax\">{}</text>", x + 4, i * row_h + 15,
                     Esc(Ms(rk.step_s_mean)));
  }
  return s + "</svg>";
}

std::string LinePlotSvg(const std::vector<std::pair<std::string, const GpuLogSeries*>>& series,
                        const std::vector<double> GpuLogSeries::*field, double ymax,
                        const std::string& unit) {
  int W = 820, H = 160, L = 50, B = 20;
  double tmax = 0;
  double vmax = ymax;
  for (const auto& [name, s] : series) {
    for (double t : s->t_s) tmax = std::max(tmax, t);
    if (ymax <= 0) {
      for (double v : (s->*field)) {
        if (std::isfinite(v)) vmax = std::max(vmax, v);
      }
    }
  }
  if (tmax <= 0 || vmax <= 0) return "";
  static const char* kColors[] = {"#3b75af", "#e4572e", "#4c9f70", "#9b59b6",
                                  "#f3a712", "#17becf", "#8c564b", "#e377c2"};
  std::string s = html::SvgOpen(W, H);
  s += fmt::format("<text x=\"2\" y=\"12\" class=\"ax\">{:.0f}{}</text>", vmax, Esc(unit));
  s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"ax\" text-anchor=\"end\">{:.0f} s</text>",
                   W - 10, H - 4, tmax);
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"axl\"/>", L, H - B, W - 10,
                   H - B);
  int ci = 0;
  for (const auto& [name, ser] : series) {
    std::string pts;
    const auto& v = ser->*field;
    for (size_t i = 0; i < v.size() && i < ser->t_s.size(); ++i) {
      if (!std::isfinite(v[i])) continue;
      double x = L + (W - L - 10) * ser->t_s[i] / tmax;
      double y = (H - B) - (H - B - 14) * std::min(1.0, v[i] / vmax);
      pts += fmt::format("{:.1f},{:.1f} ", x, y);
    }
    if (pts.empty()) continue;
    s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.3\" points=\"{}\">"
                     "<title>{}</title></polyline>",
                     kColors[ci++ % 8], pts, Esc(name));
  }
  return s + "</svg>";
}

}  // namespace

std::string RenderHtml(const Report& r) {
  std::string h;
  h += html::PageOpen("stoker doctor report",
       "body{font:14px/1.45 system-ui,sans-serif;max-width:880px;margin:24px auto;color:#222}"
       "h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}"
       ".verdict{font-size:18px;padding:10px 14px;border-radius:6px;background:#fdecea}"
       ".ok{background:#e8f5e9}.unknown{background:#fff8e1}.ax{font-size:11px;fill:#555}.axl{stroke:#999}"
       ".step{stroke:#333;stroke-dasharray:3,3}"
       ".legend span{margin-right:12px;font-size:12px}.legend i{display:inline-block;width:10px;"
       "height:10px;margin-right:4px;vertical-align:middle}"
       "table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}"
       ".f{margin:10px 0;padding:8px 12px;border-left:4px solid #ccc;background:#fafafa}"
       ".f.high{border-color:#d32f2f}.f.medium{border-color:#f9a825}");
  h += "<h1>stoker doctor</h1>\n";
  bool ok = r.primary == Verdict::kHealthy || r.primary == Verdict::kComputeBound;
  h += fmt::format("<div class=\"verdict{}\"><b>{}</b> &middot; confidence {:.2f}<br>{}</div>\n",
                   ok ? " ok" : (r.primary == Verdict::kUnknown ? " unknown" : ""),
                   VerdictName(r.primary), r.confidence, Esc(r.summary));
  if (r.has_trace) {
    h += fmt::format("<p>Step time <b>{}</b>, {:.2f} steps/s", Esc(Ms(r.step_s)), r.steps_per_s);
    if (r.batch_size > 0) h += fmt::format(", {:.0f} samples/s", r.samples_per_s);
    h += fmt::format(", {} steps{} over {} rank(s).</p>\n", r.steps, Esc(StepsFrom(r)),
                     r.ranks.size());
    h += "<table><tr><th>part of the step</th><th>share</th></tr>";
    for (const auto& p : Parts(r.gpu)) {
      h += fmt::format("<tr><td><span style=\"color:{}\">&#9632;</span> {}</td><td>{}</td></tr>",
                       p.color, p.label, Pct(Get(r.breakdown, p.key)));
    }
    h += "</table>\n";
  }
  if (!r.findings.empty()) {
    h += "<h2>Findings, by expected gain</h2>\n";
    for (const auto& f : r.findings) {
      h += fmt::format("<div class=\"f {}\"><b>{}</b> <small>[{}, <code>{}</code>]</small>{}<br>"
                       "<b>Evidence:</b> {}<br><b>Fix:</b> {}</div>\n",
                       Esc(f.severity), Esc(f.title), Esc(f.severity), Esc(f.id),
                       f.expected_speedup ? " &rarr; up to <b>" + Gain(f) + "</b>" : "",
                       Esc(f.evidence), Esc(f.fix));
    }
  }
  for (size_t i = 0; i < r.ranks.size() && i < 4; ++i) {
    const auto& rk = r.ranks[i];
    h += fmt::format("<h2>Rank {}: step breakdown</h2><p><small>{}</small></p>\n", rk.rank,
                     Esc(rk.path));
    h += StepBarsSvg(rk) + Legend(rk.gpu) + "\n";
    h += fmt::format("<h2>Rank {}: activity timeline (first steps)</h2>\n", rk.rank);
    h += TimelineSvg(rk) + "\n";
  }
  if (r.ranks.size() > 1) {
    h += "<h2>Ranks compared (mean step)</h2>\n" + RanksSvg(r) + Legend(r.gpu) + "\n";
  }
  for (const auto& g : r.gpu_logs) {
    h += fmt::format("<h2>GPU log: {}</h2><p>{}, {} samples over {:.0f} s, {}, {} starvation "
                     "period(s).</p>\n",
                     Esc(g.path), Esc(g.format), g.samples, g.duration_s,
                     std::isnan(g.util_mean) ? std::string("no GPU utilization samples")
                                             : fmt::format("mean utilization {:.0f}%", g.util_mean),
                     g.starvation_periods);
    std::vector<std::pair<std::string, const GpuLogSeries*>> ser;
    for (const auto& s : g.series) ser.push_back({"GPU " + std::to_string(s.gpu), &s});
    h += "<p>Utilization (%)</p>" + LinePlotSvg(ser, &GpuLogSeries::util, 100, "%");
    std::string mem = LinePlotSvg(ser, &GpuLogSeries::mem_used_frac, 1.0, "");
    if (!mem.empty()) h += "<p>Memory used (fraction of total)</p>" + mem;
    std::string pw = LinePlotSvg(ser, &GpuLogSeries::power_w, 0, " W");
    if (!pw.empty()) h += "<p>Power (W)</p>" + pw;
    std::string tc = LinePlotSvg(ser, &GpuLogSeries::temp_c, 0, " C");
    if (!tc.empty()) h += "<p>Temperature (C)</p>" + tc;
    // Host columns repeat on every GPU's rows: plot them once.
    std::vector<std::pair<std::string, const GpuLogSeries*>> host;
    if (!g.series.empty()) host.push_back({"process tree", &g.series.front()});
    std::string cpu = LinePlotSvg(host, &GpuLogSeries::proc_cpu_cores,
                                  std::isnan(g.cpus) ? 0 : g.cpus, " cores");
    if (!cpu.empty()) h += "<p>CPU cores busy in the watched process tree</p>" + cpu;
    std::string rd = LinePlotSvg(host, &GpuLogSeries::read_mib_s, 0, " MiB/s");
    if (!rd.empty()) h += "<p>Disk read (MiB/s)</p>" + rd;
  }
  if (r.pipeline) {
    const auto& p = *r.pipeline;
    h += fmt::format("<h2>stoker pipeline</h2><p>{:.0f} samples/s, bottleneck <b>{}</b>, consumer "
                     "wait {}.</p><table><tr><th>stage</th><th>threads</th><th>busy</th>"
                     "<th>waiting for input</th><th>waiting for output</th></tr>",
                     p.samples_per_s, Esc(p.bottleneck), Pct(p.consumer_wait_frac));
    for (const auto& s : p.stages) {
      h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                       Esc(s.name), s.threads, Pct(s.busy_frac), Pct(s.wait_input_frac),
                       Pct(s.wait_output_frac));
    }
    h += "</table>\n";
  }
  if (r.ray) {
    const auto& y = *r.ray;
    h += "<h2>Ray Data operators</h2><table><tr><th>operator</th><th>tasks</th><th>remote "
         "wall</th><th>remote CPU</th><th>share</th><th>tasks running</th></tr>";
    for (size_t i = 0; i < y.ops.size(); ++i) {
      const auto& o = y.ops[i];
      h += fmt::format("<tr><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                       "</tr>",
                       Esc(o.name), static_cast<int>(i) == y.bottleneck ? " <b>(most work)</b>" : "",
                       o.tasks >= 0 ? std::to_string(o.tasks) : std::string("-"), Ms(o.wall_s),
                       Ms(o.cpu_s), Pct(o.share),
                       std::isnan(o.concurrency) ? std::string("-")
                                                 : fmt::format("{:.2f}", o.concurrency));
    }
    h += "</table>\n";
  }
  h += "<h2>Inputs</h2><ul>";
  for (const auto& i : r.inputs) h += "<li>" + Esc(i) + "</li>";
  for (const auto& n : r.notes) h += "<li><i>" + Esc(n) + "</i></li>";
  h += "</ul>" + html::PageClose();
  return h;
}

std::string RenderCausesMarkdown(const Thresholds& th) {
  std::string o = "| verdict | needs | score | threshold | source of the threshold |\n"
                  "| --- | --- | --- | --- | --- |\n";
  for (const auto& c : ListCauses(th)) {
    o += fmt::format("| `{}` | {} | {} | {} | {} |\n", c.verdict, MdEsc(c.applies_to),
                     MdEsc(c.score), MdEsc(c.threshold), MdEsc(c.source));
  }
  return o;
}

std::string RenderFindingRulesMarkdown(const Thresholds& th) {
  std::string o;
  o += "| finding | from | when | removed time for the gain | source |\n"
       "| --- | --- | --- | --- | --- |\n";
  for (const auto& r : ListRules(th)) {
    o += fmt::format("| `{}` | {} | {} | {} | {} |\n", r.id, MdEsc(r.applies_to), MdEsc(r.when),
                     r.gain.empty() ? "—" : MdEsc(r.gain), MdEsc(r.source));
  }
  return o;
}

std::string RenderRulesMarkdown(const Thresholds& th) {
  return RenderCausesMarkdown(th) + "\n" + RenderFindingRulesMarkdown(th);
}

}  // namespace stoker::doctor
