// Pipeline flags shared by `bench pipeline` and `demo`.
#pragma once

#include <string>

#include "cli/commands.h"
#include "pipeline/pipeline.h"

namespace stoker::cli {

struct PipelineFlags {
  std::string data;
  int batch = 256;
  std::string threads = "auto";
  std::string prefetch = "auto";
  int rank = -1, world_size = -1;
  uint64_t seed = 0;
  std::string on_error = "fail";
  std::string mode = "train";
  std::string layout = "float";
  std::string balance = "pad";
  int image_size = 224;
  bool no_shuffle = false;
  bool drop_last = false;
  bool fused = false;
  bool no_dct = false, no_region = false;
  bool exif_orientation = false;
  double memory_mb = 0;
  int cpu_budget = 0;
  size_t shuffle_buffer = 8192;
};

void AddPipelineFlags(CLI::App* cmd, PipelineFlags* f, bool with_data = true);
Result<PipelineOptions> ToOptions(const PipelineFlags& f);

// Human-readable per-stage table and bottleneck.
std::string FormatStats(const PipelineStats& st);
// JSON object (string) with the stable fields of `bench pipeline --json`.
std::string StatsJson(const PipelineStats& st, const PipelineOptions& o, int epochs);

}  // namespace stoker::cli
