// Ranks that share a node share its cores and memory. With four ranks on a 2-core node
// (torchrun --nproc-per-node 4, or `--rank r --world-size 4`), each pipeline's default CPU
// and memory budget is the node's share of one rank, not the whole node.
//
// How many processes share the node, first found wins:
//   1. LOCAL_WORLD_SIZE (torchrun), OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI),
//      SLURM_NTASKS_PER_NODE (srun), MPI_LOCALNRANKS (MPICH / Intel MPI);
//   2. for a job with world size > 1 and none of those: the stoker pipelines alive on this
//      node, counted in a small registry (one file per pipeline under
//      /dev/shm/stoker-<uid>/pipelines, else /tmp/...; $STOKER_PIPELINE_REGISTRY names
//      another folder, or "off"). A file names its process id and start time; files of
//      processes that are gone (a crash, a kill -9) or whose id was reused are ignored and
//      removed. Processes are counted, not pipelines (a train and a val loader in one
//      process are one rank). The count is read again while the pipeline runs, since
//      ranks start one after another;
//   3. else the pipeline has the node to itself.
// An explicit cpu_budget / memory_budget always wins.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "pipeline/stats.h"

namespace stoker {

struct PipelineOptions;

struct NodeShare {
  int ranks = 1;        // processes sharing the node's cores (this one included)
  int local_rank = -1;  // this process's index among them, when known (LOCAL_RANK, ...)
  std::string source;   // "LOCAL_WORLD_SIZE=4", "3 stoker pipelines alive on this node", ""
  bool from_registry = false;
};

// The environment's answer (step 1); ranks = 0 when no variable is set. `getenv` is
// injectable for tests. A variable that is set but not a positive integer is an error.
using GetEnvFn = std::function<const char*(const char*)>;
Result<NodeShare> NodeShareFromEnv(const GetEnvFn& getenv);

// The registry of live pipelines (step 2).
class PipelineRegistry {
 public:
  // $STOKER_PIPELINE_REGISTRY, else /dev/shm/stoker-<uid>/pipelines, else /tmp/...;
  // "" when the registry is off.
  static std::string DefaultDir();
  explicit PipelineRegistry(std::string dir) : dir_(std::move(dir)) {}

  // One entry while the returned handle lives (removed by its destructor).
  class Entry {
   public:
    explicit Entry(std::string path) : path_(std::move(path)) {}
    ~Entry();
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;

   private:
    std::string path_;
  };
  Result<std::unique_ptr<Entry>> Register();
  // Distinct live processes with an entry; removes the entries of dead ones.
  int CountAlive() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// The budgets for one rank: an explicit value wins, else the node's share.
struct Budgets {
  int cpus = 1;
  int64_t memory = 0;
  std::string why;      // for the autotuner's log and the stats ("options" when explicit)
  bool shared = false;  // a default was divided among ranks
};
// `node_cpus`: cores this process may use; `node_memory`: the default budget of a whole
// node; `min_memory`: the least a pipeline needs (a few batches), which a share never
// goes below.
Budgets SplitBudgets(int cpu_budget, int64_t memory_budget, int node_cpus, int64_t node_memory,
                     int64_t min_memory, const NodeShare& share);

// What the executor holds: resolves the share once, keeps this pipeline registered, and
// re-reads the registry while it runs.
class NodeBudget {
 public:
  // `min_memory` as for SplitBudgets; the node's defaults are AvailableCpus() and a quarter
  // of physical memory, at most 8 GiB.
  static Result<std::unique_ptr<NodeBudget>> Create(const PipelineOptions& o, const RankInfo& rank,
                                                    int64_t min_memory);
  // For tests: explicit node size, environment and registry folder ("" = no registry).
  static Result<std::unique_ptr<NodeBudget>> Create(const PipelineOptions& o, const RankInfo& rank,
                                                    int64_t min_memory, int node_cpus,
                                                    int64_t node_memory, const GetEnvFn& getenv,
                                                    const std::string& registry_dir);

  const Budgets& budgets() const { return budgets_; }
  // The most cores the budget can grow to (the node's, when the registry decides).
  int max_cpus() const;
  // At most once a second (by `now_ns`): when the share comes from the registry, counts
  // again; true when the CPU budget changed, with a line for the autotuner's log.
  bool Refresh(int64_t now_ns, std::string* what);

 private:
  NodeBudget() = default;
  int cpu_opt_ = 0, node_cpus_ = 1;
  int64_t mem_opt_ = 0, node_memory_ = 0, min_memory_ = 0;
  NodeShare share_;
  Budgets budgets_;
  std::unique_ptr<PipelineRegistry> registry_;
  std::unique_ptr<PipelineRegistry::Entry> entry_;
  int64_t last_refresh_ns_ = 0;
};

}  // namespace stoker
