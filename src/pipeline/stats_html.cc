#include "pipeline/stats_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "core/html.h"

namespace stoker {
namespace {

using html::Escape;

// At most `n` points, evenly spread, the last one kept (a chart labels every x).
std::vector<StatsPoint> Thin(const std::vector<StatsPoint>& pts, size_t n) {
  if (pts.size() <= n) return pts;
  std::vector<StatsPoint> out;
  for (size_t i = 0; i < n; ++i) out.push_back(pts[i * (pts.size() - 1) / (n - 1)]);
  return out;
}

std::string Row(const std::string& k, const std::string& v) {
  return "<tr><th>" + Escape(k) + "</th><td>" + Escape(v) + "</td></tr>\n";
}

// The partitions with a kafka_lag_pN counter, in order.
std::vector<int> LagPartitions(const std::map<std::string, double>& c) {
  std::vector<int> out;
  for (const auto& [k, v] : c)
    if (k.rfind("kafka_lag_p", 0) == 0) out.push_back(std::atoi(k.c_str() + 11));
  std::sort(out.begin(), out.end());
  return out;
}

std::string KafkaSection(const PipelineStats& st, const std::vector<StatsPoint>& pts) {
  const auto& c = st.source_counters;
  auto get = [&](const std::string& k) {
    auto it = c.find(k);
    return it == c.end() ? 0.0 : it->second;
  };
  double read_busy = st.stages.empty() ? 0 : st.stages[0].busy_s;
  std::string s = "<h2>Kafka</h2>\n<table>\n";
  s += Row("messages read", fmt::format("{:.0f}", get("kafka_messages")));
  s += Row("bytes read", fmt::format("{:.1f} MB", get("kafka_bytes") / 1e6));
  s += Row("fetch wait", fmt::format("{:.3f} s ({:.1f} % of the read stage's busy time, "
                                     "summed over read threads)",
                                     get("kafka_fetch_wait_s"),
                                     read_busy > 0 ? 100 * get("kafka_fetch_wait_s") / read_busy : 0));
  s += Row("stream restarts (seeks)", fmt::format("{:.0f}", get("kafka_seeks")));
  s += Row("missing offsets", fmt::format("{:.0f}", get("kafka_missing_offsets")));
  s += Row("lag, all partitions", fmt::format("{:.0f} messages", get("kafka_lag")));
  s += "</table>\n";
  std::vector<int> parts = LagPartitions(c);
  if (!parts.empty()) {
    s += "<h3>Lag per partition at the end</h3>\n<p>Messages between the last delivered "
         "offset and the partition's high watermark.</p>\n<table><tr><th>partition</th>"
         "<th>lag (messages)</th></tr>\n";
    for (int p : parts)
      s += fmt::format("<tr><td>{}</td><td>{:.0f}</td></tr>\n", p,
                       get(fmt::format("kafka_lag_p{}", p)));
    s += "</table>\n";
  }
  std::vector<StatsPoint> thin = Thin(pts, 24);
  if (thin.size() >= 2) {
    html::LineChart lag;
    lag.title = "Kafka lag per partition";
    lag.x_label = "seconds since start";
    lag.y_label = "lag (messages)";
    lag.x_format = [](double x) { return fmt::format("{:.1f}", x); };
    std::set<int> seen;
    for (const auto& p : thin)
      for (int q : LagPartitions(p.source_counters)) seen.insert(q);
    for (int q : seen) {
      html::Series sr;
      sr.name = fmt::format("partition {}", q);
      std::string key = fmt::format("kafka_lag_p{}", q);
      for (const auto& p : thin)
        if (auto it = p.source_counters.find(key); it != p.source_counters.end())
          sr.points.push_back({p.t_s, it->second});
      lag.series.push_back(std::move(sr));
    }
    s += html::Render(lag);
    html::LineChart wait;
    wait.title = "Kafka fetch wait (read threads waiting for the broker)";
    wait.x_label = "seconds since start";
    wait.y_label = "fetch wait per second of run (s/s)";
    wait.x_format = lag.x_format;
    html::Series sr;
    sr.name = "fetch wait";
    for (size_t i = 1; i < thin.size(); ++i) {
      double dt = thin[i].t_s - thin[i - 1].t_s;
      auto w = [](const StatsPoint& p) {
        auto it = p.source_counters.find("kafka_fetch_wait_s");
        return it == p.source_counters.end() ? 0.0 : it->second;
      };
      if (dt > 0) sr.points.push_back({thin[i].t_s, (w(thin[i]) - w(thin[i - 1])) / dt});
    }
    wait.series.push_back(std::move(sr));
    s += html::Render(wait);
  }
  return s;
}

}  // namespace

std::string StatsToHtml(const PipelineStats& st, const StatsRunInfo& run,
                        const std::vector<StatsPoint>& pts) {
  std::string s = html::PageOpen("stoker bench pipeline");
  s += "<h1>stoker bench pipeline</h1>\n<p>" + Escape(run.data) + "</p>\n<table>\n";
  s += Row("samples", fmt::format("{} in {} batches{}", st.samples, st.batches,
                                  run.epochs > 0 ? fmt::format(", {} epoch(s)", run.epochs) : ""));
  s += Row("wall time", fmt::format("{:.2f} s", st.wall_s));
  s += Row("throughput", fmt::format("{:.1f} samples/s, {:.1f} MB/s read", st.samples_per_s,
                                     st.mb_per_s));
  s += Row("threads, prefetch", fmt::format("{}{}, {}", st.threads, st.autotune ? " (auto)" : "",
                                            st.prefetch));
  s += Row("bottleneck", st.bottleneck);
  s += Row("consumer wait", fmt::format("{:.2f} s ({:.1f} %)", st.consumer_wait_s,
                                        100 * st.consumer_wait_frac));
  s += Row("memory budget", fmt::format("{:.0f} MB", st.memory_budget / 1e6));
  if (run.peak_rss_bytes >= 0) s += Row("peak RSS", fmt::format("{:.0f} MB", run.peak_rss_bytes / 1e6));
  if (st.skipped) s += Row("skipped", fmt::format("{}", st.skipped));
  s += "</table>\n";

  std::vector<StatsPoint> thin = Thin(pts, 24);
  if (thin.size() >= 2) {
    html::LineChart tp;
    tp.title = "Throughput";
    tp.x_label = "seconds since start";
    tp.y_label = "samples/s";
    tp.x_format = [](double x) { return fmt::format("{:.1f}", x); };
    html::Series sr;
    sr.name = "samples/s";
    for (size_t i = 1; i < thin.size(); ++i) {
      double dt = thin[i].t_s - thin[i - 1].t_s;
      if (dt > 0) sr.points.push_back({thin[i].t_s, (thin[i].samples - thin[i - 1].samples) / dt});
    }
    tp.series.push_back(std::move(sr));
    s += html::Render(tp);
  }

  s += "<h2>Stages</h2>\n<table><tr><th>stage</th><th>threads</th><th>items</th><th>busy s</th>"
       "<th>CPU s</th><th>wait input s</th><th>wait output s</th><th>busy</th></tr>\n";
  for (const auto& g : st.stages)
    s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.3f}</td><td>{:.3f}</td>"
                     "<td>{:.3f}</td><td>{:.3f}</td><td>{:.1f} %</td></tr>\n",
                     Escape(g.name), g.threads, g.items, g.busy_s, g.cpu_s, g.wait_input_s,
                     g.wait_output_s, 100 * g.busy_frac);
  s += "</table>\n";

  if (st.cache.enabled) {
    const auto& c = st.cache;
    s += "<h2>Node cache</h2>\n<table>\n";
    s += Row("directory", c.dir);
    s += Row("hit rate", fmt::format("{:.1f} %", 100 * c.hit_rate));
    s += Row("fetched", fmt::format("{:.1f} MB ({} entries, {} found fetched)", c.fetched_bytes / 1e6,
                                    c.fetches, c.shared_entries));
    s += Row("streamed", fmt::format("{:.1f} MB", c.stream_bytes / 1e6));
    s += Row("stall", fmt::format("{:.2f} s", c.stall_s));
    s += Row("evictions", fmt::format("{}", c.evictions));
    s += Row("occupancy", fmt::format("{:.1f} / {:.1f} MB (max {:.1f})", c.occupancy_bytes / 1e6,
                                      c.limit_bytes / 1e6, c.max_occupancy_bytes / 1e6));
    s += "</table>\n";
  }

  if (!st.source_notes.empty() || !st.source_counters.empty()) {
    s += "<h2>Source</h2>\n";
    if (!st.source_notes.empty()) {
      s += "<ul>\n";
      for (const auto& n : st.source_notes) s += "<li>" + Escape(n) + "</li>\n";
      s += "</ul>\n";
    }
    if (!st.source_counters.empty()) {
      s += "<table><tr><th>counter</th><th>value</th></tr>\n";
      for (const auto& [k, v] : st.source_counters)
        s += fmt::format("<tr><td>{}</td><td>{:g}</td></tr>\n", Escape(k), v);
      s += "</table>\n";
    }
  }
  bool kafka = false;
  for (const auto& [k, v] : st.source_counters) kafka |= k.rfind("kafka_", 0) == 0;
  if (kafka) s += KafkaSection(st, pts);

  if (!st.tuning.empty() || !st.warnings.empty()) {
    s += "<h2>Autotuner and warnings</h2>\n<ul>\n";
    for (const auto& t : st.tuning) s += fmt::format("<li>{:.2f} s: {}</li>\n", t.t_s, Escape(t.what));
    for (const auto& w : st.warnings) s += "<li>warning: " + Escape(w) + "</li>\n";
    s += "</ul>\n";
  }
  s += html::PageClose();
  return s;
}

}  // namespace stoker
