#include "cli/commands.h"

namespace stoker::cli {

void RegisterDemoCommand(CLI::App& app) {
  app.add_subcommand("demo", "naive vs auto-tuned pipeline in front of an emulated GPU");
}

}  // namespace stoker::cli
