#include <csignal>
#include <cstdio>

#include "cli/commands.h"

namespace stoker::cli {

static Action g_action;
void SetAction(Action a) { g_action = std::move(a); }

int Fail(const Status& st) {
  std::fprintf(stderr, "stoker: %s\n", st.message().c_str());
  switch (st.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kIOError:
    case StatusCode::kUnimplemented:
      return 2;
    default:
      return 1;
  }
}

}  // namespace stoker::cli

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"stoker: keeps GPUs fed. Diagnose input-bound training, feed it with a "
               "self-tuning C++ pipeline, and measure storage and formats."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "stoker 0.1.0");
  CLI::App* bench = app.add_subcommand("bench", "measure: pipeline, storage, formats");
  bench->require_subcommand(1);
  stoker::cli::RegisterGenCommands(app);
  stoker::cli::RegisterBenchCommands(app, *bench);
  stoker::cli::RegisterBenchIoCommand(*bench);
  stoker::cli::RegisterBenchFormatsCommand(*bench);
  stoker::cli::RegisterDemoCommand(app);
  stoker::cli::RegisterConvertCommands(app);
  stoker::cli::RegisterBenchReadCommand(*bench);
  stoker::cli::RegisterDoctorCommands(app);
  stoker::cli::RegisterBenchDecodeCommand(*bench);
  stoker::cli::RegisterTuneCommands(app);
  stoker::cli::RegisterPlanCommands(app);
  stoker::cli::RegisterBenchTokensCommand(*bench);
  stoker::cli::RegisterIndexCommand(app);
  stoker::cli::RegisterOptionsCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (!stoker::cli::g_action) return 2;
  return stoker::cli::g_action();
}
