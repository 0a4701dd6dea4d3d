// stoker tune dataloader --script data.py --batch-size 64 [--time 60] [--json r.json] ...
//
// The DataLoader tuner runs the user's own PyTorch Dataset, so it lives in Python
// (stoker.tune_dataloader, python/stoker/tune.py). This command is its front: it replaces
// itself (execv) with `<python> -m stoker tune dataloader <arguments>`, passing every
// argument through unchanged, so both spellings take the same flags, print the same report
// and exit with the same codes. `stoker tune dataloader --help` shows the Python side's help.
//
// The interpreter: $STOKER_PYTHON; else a python3 next to this binary (the environment
// `pip install .` installed both into); else python3 on PATH. When this binary runs from a
// build tree (<build>/stoker beside <build>/python/stoker/), that directory goes first on
// PYTHONPATH so the matching package is imported.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace stoker::cli {
namespace {

std::string SelfDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string p(buf, static_cast<size_t>(n));
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? "" : p.substr(0, slash);
}

bool IsExecutable(const std::string& p) { return ::access(p.c_str(), X_OK) == 0; }

}  // namespace

int ForwardToPython(const std::vector<std::string>& what, std::vector<std::string> args) {
  const std::string dir = SelfDir();
  std::string python;
  bool search_path = false;
  if (const char* env = std::getenv("STOKER_PYTHON"); env && *env) {
    python = env;
    search_path = python.find('/') == std::string::npos;
  } else if (!dir.empty() && IsExecutable(dir + "/python3")) {
    python = dir + "/python3";
  } else if (!dir.empty() && IsExecutable(dir + "/python")) {
    python = dir + "/python";
  } else {
    python = "python3";
    search_path = true;
  }
  if (!dir.empty() && ::access((dir + "/python/stoker/__init__.py").c_str(), R_OK) == 0) {
    std::string pp = dir + "/python";
    if (const char* old = std::getenv("PYTHONPATH"); old && *old) pp += std::string(":") + old;
    ::setenv("PYTHONPATH", pp.c_str(), 1);
  }
  ::setenv("STOKER_PROG", "stoker", 1);  // argparse's usage lines name this command

  std::vector<std::string> full = {python, "-m", "stoker"};
  full.insert(full.end(), what.begin(), what.end());
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : full) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  if (search_path) {
    ::execvp(argv[0], argv.data());
  } else {
    ::execv(argv[0], argv.data());
  }
  std::fprintf(stderr,
               "stoker: cannot run %s (%s): `stoker %s` runs in Python; install the package "
               "(pip install .) or set STOKER_PYTHON to an interpreter that can import stoker\n",
               python.c_str(), std::strerror(errno), what.empty() ? "" : what[0].c_str());
  return 2;
}

void RegisterTuneCommands(CLI::App& app) {
  CLI::App* tune = app.add_subcommand("tune", "find settings: a PyTorch DataLoader's, the batch size");
  tune->require_subcommand(1);
  CLI::App* dl = tune->add_subcommand(
      "dataloader",
      "sweep num_workers, prefetch_factor, persistent_workers, pin_memory on your Dataset "
      "(runs `python -m stoker tune dataloader`; --help shows its flags)");
  // Everything after `dataloader`, --help included, belongs to the Python side.
  dl->prefix_command();
  dl->set_help_flag();
  dl->allow_extras();
  dl->callback([dl]() {
    std::vector<std::string> args = dl->remaining();
    SetAction([args]() { return ForwardToPython({"tune", "dataloader"}, args); });
  });
  // stoker tune batch-size: the batch-size sweep (python/stoker/tune_batch.py), same front.
  CLI::App* bs = tune->add_subcommand(
      "batch-size",
      "sweep batch sizes on your training step: largest that fits, the throughput knee, LR "
      "and pipeline advice (runs `python -m stoker tune batch-size`; --help shows its flags)");
  bs->prefix_command();
  bs->set_help_flag();
  bs->allow_extras();
  bs->callback([bs]() {
    std::vector<std::string> args = bs->remaining();
    SetAction([args]() { return ForwardToPython({"tune", "batch-size"}, args); });
  });
}

}  // namespace stoker::cli
