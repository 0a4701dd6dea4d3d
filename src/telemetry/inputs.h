// What a file of telemetry is, and reading a list of files and folders into parsed inputs:
// profiler traces (one per rank), GPU logs (nvidia-smi, dmon, dcgmi, stoker watch) and
// stoker pipeline metrics, Ray Data's per-operator stats (text). The kind of a file is sniffed from its first bytes, never from
// its name; each reader's own LooksLike* test decides for its kind.
//
//   STOKER_ASSIGN_OR_RETURN(telemetry::Inputs in, telemetry::ReadInputs(env, {"runs/"}));
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/env.h"
#include "telemetry/gpu_log.h"
#include "telemetry/pipeline_metrics.h"
#include "telemetry/ray_stats.h"
#include "telemetry/trace.h"

namespace stoker::telemetry {

enum class InputKind { kTrace, kGpuLog, kPipelineMetrics, kRayDataStats, kUnknown };
// "trace", "GPU log", "pipeline metrics", "Ray Data stats", "unknown"
const char* InputKindName(InputKind k);

// The kind of a file from its head (the first 64 KiB, decompressed).
InputKind SniffInput(std::string_view head);

// Names a folder listing picks up: *.json, *.json.gz, *.csv, *.csv.gz, *.log, *.log.gz, *.txt.
bool IsListableInput(const std::string& name);

// rank-N, rank_N, rankN, workerN in the file's base name (-1 when none).
int RankFromFileName(const std::string& path);

struct Inputs {
  std::vector<TraceSummary> traces;  // ranks unique, filled in file order where unknown
  std::vector<GpuLog> gpu_logs;
  std::vector<PipelineMetrics> pipelines;
  std::vector<RayDataStats> ray_stats;  // Ray Data's ds.stats() text
  std::vector<std::string> notes;    // e.g. "skipped README.md in traces/"
};

struct InputReadOptions {
  TraceReadOptions trace;
  GpuLogOptions gpu_log;
};

// Reads files and folders (a folder: every listable file in it, sorted). A file of no known
// kind, empty, binary or malformed is an error naming the file.
Result<Inputs> ReadInputs(Env* env, const std::vector<std::string>& paths,
                          const InputReadOptions& opts = {});

}  // namespace stoker::telemetry
