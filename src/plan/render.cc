// Text, JSON and HTML (inline SVG charts) for a PlanReport.
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/html.h"
#include "plan/plan.h"

namespace stoker::plan {
namespace {

std::string Bytes(double b) {
  if (b >= 1e12) return fmt::format("{:.1f} TB", b / 1e12);
  if (b >= 1e9) return fmt::format("{:.1f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  return fmt::format("{:.0f} KB", b / 1e3);
}

std::string Dur(double s) {
  if (s >= 3600) return fmt::format("{:.1f} h", s / 3600);
  if (s >= 60) return fmt::format("{:.1f} min", s / 60);
  if (s >= 1) return fmt::format("{:.1f} s", s);
  return fmt::format("{:.1f} ms", s * 1e3);
}

std::string Rate(double mb_s) {
  return mb_s >= 1000 ? fmt::format("{:.1f} GB/s", mb_s / 1000) : fmt::format("{:.0f} MB/s", mb_s);
}

std::string ScenarioLine(const Scenario& s) {
  return fmt::format("  {:<18} {:>10.0f} samples/s  GPU {:>5.1f}%  epoch {:>9}  stall/step mean {} "
                     "p99 {}  CPU {:.0f}%  hit {:.0f}%  [{}]\n",
                     s.name, s.cluster_samples_per_s, 100 * s.gpu_util, Dur(s.epoch_s),
                     Dur(s.node.stall_mean_s), Dur(s.node.stall_p99_s), 100 * s.node.cpu_util,
                     100 * s.node.hit_rate, s.node.bottleneck);
}

nlohmann::json ScenarioJson(const Scenario& s) {
  return {{"name", s.name},
          {"cluster_samples_per_s", s.cluster_samples_per_s},
          {"gpu_util", s.gpu_util},
          {"epoch_s", s.epoch_s},
          {"node",
           {{"samples_per_s", s.node.samples_per_s},
            {"gpu_util", s.node.gpu_util},
            {"step_s", s.node.step_s},
            {"stall_mean_s", s.node.stall_mean_s},
            {"stall_p99_s", s.node.stall_p99_s},
            {"cpu_util", s.node.cpu_util},
            {"worker_read_frac", s.node.worker_read_frac},
            {"link_util", s.node.link_util},
            {"storage_mb_s", s.node.storage_mb_s},
            {"storage_req_s", s.node.storage_req_s},
            {"hit_rate", s.node.hit_rate},
            {"first_step_s", s.node.first_step_s},
            {"queue_mean_samples", s.node.queue_mean},
            {"bottleneck", s.node.bottleneck}}}};
}

std::string Esc(const std::string& s) { return html::Escape(s); }

// A line chart with two series, one y axis each (left: y, right: y2 * y2scale).
std::string Chart(const std::string& title, const std::vector<CurvePoint>& pts, bool logx,
                  const std::string& xlabel, const std::string& ylabel, const std::string& y2label,
                  double y2scale, const std::string& (*xfmt)(double, std::string&)) {
  html::LineChart c;
  c.title = title;
  c.x_label = xlabel;
  c.y_label = ylabel;
  c.y2_label = y2label;
  c.log2_x = logx;
  c.width = 560;
  c.height = 260;
  c.x_format = [xfmt](double x) {
    std::string buf;
    return xfmt(x, buf);
  };
  html::Series a, b;
  b.right_axis = true;
  b.dashed = true;
  b.color = html::SeriesColor(3);
  for (const auto& p : pts) {
    a.points.push_back({p.x, p.y});
    b.points.push_back({p.x, p.y2 * y2scale});
  }
  c.series = {std::move(a), std::move(b)};
  return html::Render(c);
}

const std::string& FmtCount(double x, std::string& buf) {
  buf = x >= 1000 ? fmt::format("{:.0f}k", x / 1000) : fmt::format("{:.0f}", x);
  return buf;
}
const std::string& FmtBytes(double x, std::string& buf) {
  buf = Bytes(x);
  return buf;
}

}  // namespace

std::string FormatReport(const PlanReport& r) {
  const PlanInputs& in = r.in;
  std::string o;
  o += fmt::format("stoker plan: {} GPUs ({} nodes x {}), {:.0f} samples/s per GPU at batch {}\n",
                   in.gpus, r.nodes, in.gpus_per_node, in.gpu_samples_per_s, in.batch_size);
  o += fmt::format("  dataset {} samples x {} ({}), {}; CPU {:.2f} ms/sample; storage {}\n",
                   in.dataset_samples, Bytes(in.sample_bytes), in.format,
                   Bytes(double(in.dataset_samples) * in.sample_bytes), in.cpu_ms_per_sample,
                   in.storage.name);
  o += fmt::format("  simulated with {} cores/node{}, {} workers/node{}, cache {}/node\n\n", r.cores_used,
                   in.cores_per_node > 0 ? "" : " (the needed count)", r.workers_used,
                   in.workers_per_node > 0 ? "" : " (auto)", Bytes(in.cache_bytes_per_node));
  o += fmt::format("bottleneck: {}; expected GPU utilization {:.1f}% (warm), {:.1f}% (cold)\n",
                   r.bottleneck, 100 * r.warm.gpu_util, 100 * r.cold.gpu_util);
  o += ScenarioLine(r.cold);
  o += ScenarioLine(r.warm);
  o += ScenarioLine(r.gpu_decode);
  o += fmt::format("  {} epochs: {}\n\n", in.epochs, Dur(r.total_time_s));
  o += "needs (to feed the GPUs at their full rate):\n";
  o += fmt::format("  CPU: {:.2f} cores/GPU without queueing; {} cores/node ({:.2f}/GPU) for {:.0f}% "
                   "utilization in the simulation\n",
                   r.cores_per_gpu_analytic, r.cores_per_node_needed,
                   double(r.cores_per_node_needed) / in.gpus_per_node, 100 * in.target_util);
  o += fmt::format("  workers/threads: {} per node to hide the storage latency\n", r.workers_per_node_needed);
  o += fmt::format("  storage, cold epoch: {} per node, {} in total; {:.0f} requests/s per node, "
                   "{:.0f} in total\n",
                   Rate(r.storage_mb_s_node), Rate(r.storage_mb_s_total), r.storage_req_s_node,
                   r.storage_req_s_total);
  o += fmt::format("  storage, warm epochs with this cache: {} in total\n", Rate(r.warm_storage_mb_s_total));
  o += fmt::format("  cache: {} per node for a {:.0f}% hit rate ({} for every later epoch from cache)\n",
                   Bytes(r.cache_bytes_for_target), 100 * in.target_hit_rate, Bytes(r.cache_bytes_all));
  o += fmt::format("GPU preprocessing {}: {}\n", r.gpu_decode_pays ? "pays" : "does not pay",
                   r.gpu_decode_reason);
  if (!r.offload_verdict.empty())
    o += fmt::format("  offload model (gpu_decode=auto, doctor): {}: {}\n", r.offload_verdict,
                     r.offload_reason);
  for (const auto& n : r.notes) o += "note: " + n + "\n";
  o += fmt::format("(planned in {:.0f} ms)\n", r.compute_ms);
  return o;
}

std::string ReportJson(const PlanReport& r) {
  const PlanInputs& in = r.in;
  nlohmann::json j;
  j["inputs"] = {{"gpus", in.gpus},
                 {"gpus_per_node", in.gpus_per_node},
                 {"gpu_samples_per_s", in.gpu_samples_per_s},
                 {"batch_size", in.batch_size},
                 {"dataset_samples", in.dataset_samples},
                 {"sample_bytes", in.sample_bytes},
                 {"format", in.format},
                 {"cpu_ms_per_sample", in.cpu_ms_per_sample},
                 {"cores_per_node", in.cores_per_node},
                 {"workers_per_node", in.workers_per_node},
                 {"cache_bytes_per_node", in.cache_bytes_per_node},
                 {"epochs", in.epochs},
                 {"storage",
                  {{"name", in.storage.name},
                   {"latency_ms", in.storage.latency_ms},
                   {"latency_p99_ms", in.storage.latency_p99_ms},
                   {"stream_mb_s", in.storage.stream_mb_s},
                   {"node_mb_s", in.storage.node_mb_s},
                   {"aggregate_mb_s", in.storage.aggregate_mb_s},
                   {"aggregate_req_s", in.storage.aggregate_req_s},
                   {"request_bytes", in.storage.request_bytes},
                   {"source", in.storage.source}}}};
  j["nodes"] = r.nodes;
  j["cores_used"] = r.cores_used;
  j["workers_used"] = r.workers_used;
  j["bottleneck"] = r.bottleneck;
  j["expected_gpu_util"] = r.expected_gpu_util;
  j["cold"] = ScenarioJson(r.cold);
  j["warm"] = ScenarioJson(r.warm);
  j["gpu_decode"] = ScenarioJson(r.gpu_decode);
  j["needs"] = {{"cores_per_gpu_analytic", r.cores_per_gpu_analytic},
                {"cores_per_node", r.cores_per_node_needed},
                {"cores_per_gpu", double(r.cores_per_node_needed) / in.gpus_per_node},
                {"workers_per_node", r.workers_per_node_needed},
                {"storage_mb_s_node", r.storage_mb_s_node},
                {"storage_mb_s_total", r.storage_mb_s_total},
                {"storage_req_s_node", r.storage_req_s_node},
                {"storage_req_s_total", r.storage_req_s_total},
                {"warm_storage_mb_s_total", r.warm_storage_mb_s_total},
                {"cache_bytes_per_node_for_target", r.cache_bytes_for_target},
                {"cache_bytes_per_node_all", r.cache_bytes_all},
                {"cores_per_node_gpu_decode", r.cores_per_node_needed_gpu_decode}};
  j["total_time_s"] = r.total_time_s;
  j["gpu_decode_pays"] = r.gpu_decode_pays;
  j["gpu_decode_reason"] = r.gpu_decode_reason;
  j["offload_verdict"] = r.offload_verdict;
  j["offload_reason"] = r.offload_reason;
  j["notes"] = r.notes;
  auto curve = [](const std::vector<CurvePoint>& c, const char* x, const char* y, const char* y2) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& p : c) a.push_back({{x, p.x}, {y, p.y}, {y2, p.y2}});
    return a;
  };
  j["curves"] = {{"gpus_vs_cores", curve(r.gpus_vs_cores, "gpus", "cores_needed", "gpu_util")},
                 {"cache_vs_epoch", curve(r.cache_vs_epoch, "cache_bytes_per_node", "warm_epoch_s", "hit_rate")}};
  j["compute_ms"] = r.compute_ms;
  return j.dump(2);
}

std::string ReportHtml(const PlanReport& r) {
  std::string o = html::PageOpen("stoker plan") + "<h1>stoker plan</h1>";
  o += "<pre>" + Esc(FormatReport(r)) + "</pre>";
  o += "<h2>What if: GPUs vs cores</h2><p>Blue: CPU cores the cluster needs in total (0 where "
       "cores cannot reach the utilization: shared storage limits it). Red (dashed): expected GPU "
       "utilization (%) with " +
       std::to_string(r.cores_used) + " cores per node.</p>";
  o += Chart("cores needed and GPU utilization vs GPUs", r.gpus_vs_cores, true, "GPUs in the cluster",
             "cores needed (total)", "GPU utilization %", 100, FmtCount);
  o += "<table><tr><th>GPUs</th><th>cores needed</th><th>GPU util %</th></tr>";
  for (const auto& p : r.gpus_vs_cores)
    o += fmt::format("<tr><td>{:.0f}</td><td>{:.0f}</td><td>{:.1f}</td></tr>", p.x, p.y, 100 * p.y2);
  o += "</table><h2>What if: cache size vs epoch time</h2><p>Blue: warm (epoch 2+) epoch time in "
       "seconds. Red (dashed): cache hit rate (%).</p>";
  o += Chart("warm epoch time vs local cache per node", r.cache_vs_epoch, false, "cache per node",
             "epoch s", "hit rate %", 100, FmtBytes);
  o += "<table><tr><th>cache/node</th><th>hit %</th><th>warm epoch s</th></tr>";
  for (const auto& p : r.cache_vs_epoch)
    o += fmt::format("<tr><td>{}</td><td>{:.0f}</td><td>{:.1f}</td></tr>", Bytes(p.x), 100 * p.y2, p.y);
  o += "</table>" + html::PageClose();
  return o;
}

}  // namespace stoker::plan
