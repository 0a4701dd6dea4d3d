#include "cli/python_side.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

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

bool IsExecutableFile(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

bool IsFile(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Runs `python -c code` and returns its first line of output ("" on failure).
std::string Ask(const PythonSide& s, const char* code) {
  std::string cmd = "'" + s.python + "' -c '" + code + "' 2>/dev/null";
  if (s.python.find('\'') != std::string::npos) return "";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return "";
  char buf[4096] = {0};
  std::string out = std::fgets(buf, sizeof(buf), f) ? buf : "";
  ::pclose(f);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

}  // namespace

PythonSide FindPythonSide(bool need_package) {
  PythonSide s;
  const std::string dir = SelfDir();
  bool build_tree = !dir.empty() && IsFile(dir + "/python/stoker/__init__.py");
  if (const char* env = std::getenv("STOKER_PYTHON"); env && *env) {
    s.python = env;
    s.search_path = s.python.find('/') == std::string::npos;
    s.how = "$STOKER_PYTHON";
  } else if (!dir.empty() && IsExecutableFile(dir + "/python3")) {
    s.python = dir + "/python3";
    s.how = "beside the stoker binary";
  } else if (!dir.empty() && IsExecutableFile(dir + "/python")) {
    s.python = dir + "/python";
    s.how = "beside the stoker binary";
#ifdef STOKER_BUILD_PYTHON_EXE
  } else if (build_tree && IsExecutableFile(STOKER_BUILD_PYTHON_EXE)) {
    s.python = STOKER_BUILD_PYTHON_EXE;
    s.how = "the build's interpreter";
#endif
  } else {
    s.python = "python3";
    s.search_path = true;
    s.how = "python3 on PATH";
  }
  if (build_tree) {
    s.pythonpath = dir + "/python";
    s.package_dir = dir + "/python/stoker";
  } else if (need_package) {
    std::string p = Ask(s, "import importlib.util as u; s = u.find_spec(\"stoker\"); "
                           "print(s.submodule_search_locations[0] if s else \"\")");
    if (!p.empty() && IsFile(p + "/probe.py")) {
      s.package_dir = p;
      size_t slash = p.rfind('/');
      s.pythonpath = slash == std::string::npos ? "" : p.substr(0, slash);
    }
  }
  return s;
}

std::string PrependPythonPath(const std::string& first) {
  std::string pp = first;
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) pp += std::string(":") + old;
  return pp;
}

// Replaces the process with `<python> -m stoker WHAT... ARGS...`; returns only on failure.
int ForwardToPython(const std::vector<std::string>& what, std::vector<std::string> args) {
  PythonSide side = FindPythonSide(/*need_package=*/false);
  const std::string& python = side.python;
  if (!side.pythonpath.empty())
    ::setenv("PYTHONPATH", PrependPythonPath(side.pythonpath).c_str(), 1);
  ::setenv("STOKER_PROG", "stoker", 1);  // argparse's usage lines name this command

  std::vector<std::string> full = {python, "-m", "stoker"};
  full.insert(full.end(), what.begin(), what.end());
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : full) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  if (side.search_path) {
    ::execvp(argv[0], argv.data());
  } else {
    ::execv(argv[0], argv.data());
  }
  std::fprintf(stderr,
               "stoker: cannot run %s (%s, %s): `stoker %s` runs in Python; install the "
               "package (pip install .) or set STOKER_PYTHON to an interpreter that can "
               "import stoker\n",
               python.c_str(), side.how.c_str(), std::strerror(errno),
               what.empty() ? "" : what[0].c_str());
  return 2;
}

}  // namespace stoker::cli
