#include "cli/commands.h"

namespace stoker::cli {

void RegisterGenCommands(CLI::App& app) {
  auto* gen = app.add_subcommand("gen", "generate synthetic datasets");
  gen->require_subcommand(1);
}

}  // namespace stoker::cli
