#include "cli/commands.h"

namespace stoker::cli {

void RegisterBenchCommands(CLI::App& app, CLI::App& bench) {}

}  // namespace stoker::cli
