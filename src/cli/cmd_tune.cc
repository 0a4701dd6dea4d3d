// stoker tune dataloader --script data.py --batch-size 64 [--time 60] [--json r.json] ...
//
// The DataLoader tuner runs the user's own PyTorch Dataset, so it lives in Python
// (stoker.tune_dataloader, python/stoker/tune.py). This command is its front: it replaces
// itself (execv) with `<python> -m stoker tune dataloader <arguments>`, passing every
// argument through unchanged, so both spellings take the same flags, print the same report
// and exit with the same codes. `stoker tune dataloader --help` shows the Python side's help.
//
// The interpreter and the package are found as for every Python front (cli/python_side.h):
// $STOKER_PYTHON, a python3 beside this binary, the build's interpreter from a build tree,
// python3 on PATH; a build tree's python/ folder goes first on PYTHONPATH.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/python_side.h"

namespace stoker::cli {
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
