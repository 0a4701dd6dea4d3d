// `stoker bench pipeline --html`: the run's stats as a self-contained HTML page (core/html.h)
// with charts over the run: throughput, and for a Kafka source (kafka_* counters) the lag
// of each partition and the time the read threads waited for the broker. Sections: the
// summary, the stages, the autotuner's events and warnings, the node cache (with
// cache_dir), the source's notes and counters, Kafka (when the source is a topic).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pipeline/stats.h"
#include "pipeline/stats_json.h"

namespace stoker {

// One look at a running pipeline (bench pipeline takes one every 100 ms).
struct StatsPoint {
  double t_s = 0;        // since the run began
  uint64_t samples = 0;  // delivered so far
  std::map<std::string, double> source_counters;
};

std::string StatsToHtml(const PipelineStats& st, const StatsRunInfo& run,
                        const std::vector<StatsPoint>& points);

}  // namespace stoker
