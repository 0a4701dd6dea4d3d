// One way to find stoker's Python side, for every CLI front that needs it: `stoker tune
// dataloader` (runs `python -m stoker`), `stoker watch` (puts the probe's bootstrap on the
// job's PYTHONPATH) and `stoker demo` (runs the PyTorch half of the demo).
//
// The interpreter, first that applies:
//   1. $STOKER_PYTHON (a path, or a name looked up on PATH);
//   2. python3 / python beside this binary, when it is a regular executable file (the
//      environment `pip install .` installed both into; a build tree's python/ folder is a
//      directory and never counts);
//   3. the interpreter the build was configured with (scripts/build.sh: the repository's
//      .venv), when this binary runs from its build tree;
//   4. python3 on PATH.
// The package: <this binary's folder>/python/stoker (a build tree), else where the
// interpreter finds `stoker` (importlib.util.find_spec, which does not import it).
#pragma once

#include <string>
#include <vector>

namespace stoker::cli {

struct PythonSide {
  std::string python;       // the interpreter (a path, or a name to look up on PATH)
  bool search_path = false; // python is a name: execvp
  std::string how;          // which rule chose it, for messages
  std::string pythonpath;   // the folder holding stoker/ to put first on PYTHONPATH, or ""
  std::string package_dir;  // .../stoker, or "" when not found
};

// Finds the interpreter; with `need_package`, also the package (may run the interpreter).
PythonSide FindPythonSide(bool need_package);

// "A:B" PYTHONPATH with `first` in front of the current value.
std::string PrependPythonPath(const std::string& first);

// Replaces the process with `<python> -m stoker WHAT... ARGS...` (the Python fronts: tune,
// tokenize, verify-tokens); returns only on failure, with the exit code.
int ForwardToPython(const std::vector<std::string>& what, std::vector<std::string> args);

}  // namespace stoker::cli
