// Pipeline flags shared by `bench pipeline` (and any command that runs a pipeline): made
// from the options table (pipeline/options_schema.h), one flag per row, with the old
// spellings as aliases. `stoker options` prints the table.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "pipeline/options_schema.h"
#include "pipeline/pipeline.h"

namespace stoker::cli {

struct PipelineFlags {
  // Options as given on the command line, in order (the last of a repeated flag wins).
  std::vector<std::pair<std::string, OptionValue>> values;
};

void AddPipelineFlags(CLI::App* cmd, PipelineFlags* f, bool with_data = true);
// Checks every value against the table; errors name the option.
Result<PipelineOptions> ToOptions(const PipelineFlags& f);

// Human-readable per-stage table and bottleneck.
std::string FormatStats(const PipelineStats& st);

}  // namespace stoker::cli
