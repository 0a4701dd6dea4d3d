// The reports of stoker watch's in-process probe (python/stoker/probe.py): one JSON-lines
// file per Python process of the job, probe-<pid>.jsonl, in the folder the watch gave the
// job in STOKER_PROBE_DIR. Records (one JSON object a line, "kind" says which):
//   start     {pid, ppid, rank, local_rank, world_size, python, executable, argv,
//              chained_sitecustomize}
//   torch     {version, cuda}                        torch.utils.data was imported
//   loader    {loader, num_workers, pin_memory, prefetch_factor, persistent_workers,
//              batch_size, drop_last, dataset_len, dataset, collate_fn}
//   workers   {loader, pids: [...]}                  the DataLoader's worker processes
//   steps     {loader, wait: [s...], compute: [s...], gpu_wait?: [...], gpu_step?: [...]}
//   profiler  {ok: true, trace, first_step, end_step} or {ok: false, error}
//   error     {error}
//   exit      {steps}
// The reader is incremental (the watch polls it while the job runs) and tolerant: a line
// that is not a JSON object, or a field of the wrong type, is counted and skipped, never
// fatal; a partial last line waits for the rest.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace stoker::telemetry {

struct ProbeLoader {
  int id = 0;
  bool settings = false;  // a loader record was seen
  int num_workers = -1, prefetch_factor = -1, batch_size = -1;
  bool pin_memory = false, persistent_workers = false;
  int64_t dataset_len = -1;
  std::string dataset;
  std::vector<int> worker_pids;
  std::vector<double> wait_s, compute_s;          // per step, host clock
  std::vector<double> gpu_wait_s, gpu_step_s;     // per step, CUDA events (may be empty)
};

struct ProbeProcess {
  int pid = 0, ppid = 0, rank = -1, local_rank = -1, world_size = -1;
  std::string python, executable, chained_sitecustomize;
  std::vector<std::string> argv;
  bool started = false, exited = false;
  bool torch = false;
  std::string torch_version;
  std::vector<ProbeLoader> loaders;
  std::vector<std::string> traces;            // profiler windows written
  std::vector<std::string> profiler_errors;
  std::vector<std::string> errors;
  uint64_t bad_lines = 0;

  // The loader with the most steps (the training loop's), or nullptr.
  const ProbeLoader* main_loader() const;
  size_t steps() const;
};

// Applies one line to `p`. kCorrupt for a line that is not a JSON object with a string
// "kind" (the caller counts it); unknown kinds and fields are ignored.
Status ApplyProbeLine(std::string_view line, ProbeProcess* p);

// Reads probe-*.jsonl in a folder, incrementally: Poll() reads what was appended since the
// last call. Not thread-safe.
class ProbeReader {
 public:
  explicit ProbeReader(std::string dir) : dir_(std::move(dir)) {}
  void Poll();
  // Processes in pid order.
  std::vector<const ProbeProcess*> processes() const;
  const std::string& dir() const { return dir_; }

 private:
  struct FileState {
    uint64_t offset = 0;
    std::string partial;
    ProbeProcess proc;
  };
  std::string dir_;
  std::map<std::string, FileState> files_;
};

}  // namespace stoker::telemetry
