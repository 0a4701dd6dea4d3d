// Builds one epoch's concat index of a token corpus many times in one process (a fresh
// cache file each time) and prints the median and minimum wall and CPU time of
// EpochIndex::Get, the span that `stoker bench tokens` reports as index_build_s.
// index_ab.sh compiles it against this tree's token_index.cc and against another
// revision's, and runs the two alternately: a before/after at the same load.
//
//   index_inproc PREFIX CACHE_DIR [BUILDS]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "formats/tokens/token_store.h"
#include "tokens/token_index.h"

using namespace stoker;
using namespace stoker::tokens;

namespace {
double Wall() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
double Cpu() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PREFIX CACHE_DIR [BUILDS]\n", argv[0]);
    return 2;
  }
  auto store = OpenTokenStore(std::string("megatron:") + argv[1]);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  TokenIndexOptions o;
  o.seq_len = 2048;
  o.cache_dir = argv[2];
  auto docs = SelectDocuments(**store, o);
  if (!docs.ok()) return 1;
  const int builds = argc > 3 ? std::atoi(argv[3]) : 40;
  std::vector<double> wall, cpu;
  for (int i = 0; i < builds; ++i) {
    const double w0 = Wall(), c0 = Cpu();
    auto ix = EpochIndex::Get(**store, *docs, o, 0, 0);
    wall.push_back(1e3 * (Wall() - w0));
    cpu.push_back(1e3 * (Cpu() - c0));
    if (!ix.ok()) return 1;
    if (!(*ix)->info().cache_path.empty()) ::unlink((*ix)->info().cache_path.c_str());
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  std::printf("%s: %d builds, wall ms median %.2f min %.2f, CPU ms median %.2f min %.2f\n",
              argv[0], builds, wall[wall.size() / 2], wall[0], cpu[cpu.size() / 2], cpu[0]);
  return 0;
}
