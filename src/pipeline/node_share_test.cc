#include "pipeline/node_share.h"

#include <cstdint>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/thread_pool.h"
#include "pipeline/pipeline.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;

GetEnvFn Env(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* k) -> const char* {
    auto it = shared->find(k);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

class NodeShareRegistry : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("stoker_registry_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// A child process that registers a pipeline (as another rank would) and waits to be killed.
struct RegisteredChild {
  explicit RegisteredChild(const fs::path& dir) {
    int ready[2];
    if (::pipe(ready) != 0) return;
    pid = ::fork();
    if (pid == 0) {
      auto e = PipelineRegistry(dir.string()).Register();
      char c = e.ok() ? 1 : 0;
      ssize_t w = ::write(ready[1], &c, 1);
      (void)w;
      ::pause();
      ::_exit(0);
    }
    char c = 0;
    registered = pid > 0 && ::read(ready[0], &c, 1) == 1 && c == 1;
    ::close(ready[0]);
    ::close(ready[1]);
  }
  void Kill() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
  ~RegisteredChild() { Kill(); }
  pid_t pid = -1;
  bool registered = false;
};

TEST(NodeShare, FromTheLaunchersEnvironment) {
  auto none = NodeShareFromEnv(Env({}));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->ranks, 0);

  auto torchrun = NodeShareFromEnv(Env({{"LOCAL_WORLD_SIZE", "4"}, {"LOCAL_RANK", "3"}}));
  ASSERT_TRUE(torchrun.ok());
  EXPECT_EQ(torchrun->ranks, 4);
  EXPECT_EQ(torchrun->local_rank, 3);
  EXPECT_EQ(torchrun->source, "LOCAL_WORLD_SIZE=4");

  auto mpi = NodeShareFromEnv(Env({{"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  ASSERT_TRUE(mpi.ok());
  EXPECT_EQ(mpi->ranks, 2);
  EXPECT_EQ(mpi->local_rank, -1);

  // SLURM writes repeated counts as "4(x2)".
  auto slurm = NodeShareFromEnv(Env({{"SLURM_NTASKS_PER_NODE", "4(x2)"}, {"SLURM_LOCALID", "1"}}));
  ASSERT_TRUE(slurm.ok());
  EXPECT_EQ(slurm->ranks, 4);
  EXPECT_EQ(slurm->local_rank, 1);

  // torchrun's variable wins over the others.
  auto both = NodeShareFromEnv(Env({{"SLURM_NTASKS_PER_NODE", "8"}, {"LOCAL_WORLD_SIZE", "2"}}));
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->ranks, 2);

  auto bad = NodeShareFromEnv(Env({{"LOCAL_WORLD_SIZE", "four"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("LOCAL_WORLD_SIZE=four"), std::string::npos);
}

TEST(NodeShare, SplitsCoresAndMemory) {
  const int64_t gb = 1000000000;
  NodeShare four{4, -1, "LOCAL_WORLD_SIZE=4", false};
  Budgets b = SplitBudgets(0, 0, 2, 8 * gb, gb / 2, four);
  EXPECT_EQ(b.cpus, 1);  // never below one core
  EXPECT_EQ(b.memory, 2 * gb);
  EXPECT_TRUE(b.shared);
  EXPECT_NE(b.why.find("4 ranks share this node (LOCAL_WORLD_SIZE=4)"), std::string::npos) << b.why;

  // With the local rank known, the remainder goes to the first ranks: 6 cores, 4 ranks.
  int total = 0;
  std::vector<int> got;
  for (int r = 0; r < 4; ++r) {
    NodeShare s{4, r, "x", false};
    got.push_back(SplitBudgets(0, 0, 6, 8 * gb, 0, s).cpus);
    total += got.back();
  }
  EXPECT_EQ(got, (std::vector<int>{2, 2, 1, 1}));
  EXPECT_EQ(total, 6);
  // Without it, the nearest share.
  EXPECT_EQ(SplitBudgets(0, 0, 16, 8 * gb, 0, NodeShare{4, -1, "x", false}).cpus, 4);
  EXPECT_EQ(SplitBudgets(0, 0, 6, 8 * gb, 0, NodeShare{4, -1, "x", false}).cpus, 2);

  // A share never goes below what one pipeline needs.
  EXPECT_EQ(SplitBudgets(0, 0, 2, 8 * gb, 3 * gb, four).memory, 3 * gb);

  // Alone: the whole node.
  Budgets alone = SplitBudgets(0, 0, 2, 8 * gb, 0, NodeShare{});
  EXPECT_EQ(alone.cpus, 2);
  EXPECT_EQ(alone.memory, 8 * gb);
  EXPECT_FALSE(alone.shared);

  // Explicit values win over the share.
  Budgets expl = SplitBudgets(2, 5 * gb, 2, 8 * gb, 0, four);
  EXPECT_EQ(expl.cpus, 2);
  EXPECT_EQ(expl.memory, 5 * gb);
  EXPECT_FALSE(expl.shared);
  EXPECT_NE(expl.why.find("(options)"), std::string::npos);
  Budgets cpu_only = SplitBudgets(2, 0, 2, 8 * gb, 0, four);
  EXPECT_EQ(cpu_only.cpus, 2);
  EXPECT_EQ(cpu_only.memory, 2 * gb);
}

TEST_F(NodeShareRegistry, CountsLiveProcessesAndForgetsDeadOnes) {
  PipelineRegistry reg(dir_.string());
  EXPECT_EQ(reg.CountAlive(), 0);  // no folder yet
  {
    auto a = reg.Register();
    ASSERT_TRUE(a.ok()) << a.status().message();
    auto b = reg.Register();  // a second pipeline in the same process
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(reg.CountAlive(), 1);  // processes, not pipelines

    // Another live process registers (a child, as another rank would).
    RegisteredChild child(dir_);
    ASSERT_TRUE(child.registered);
    EXPECT_EQ(reg.CountAlive(), 2);
    // It is killed (as a crash would): its entry stays behind but does not count, and is
    // removed.
    child.Kill();
    size_t files_before = std::distance(fs::directory_iterator(dir_), fs::directory_iterator());
    EXPECT_EQ(files_before, 3u);
    EXPECT_EQ(reg.CountAlive(), 1);
    size_t files_after = std::distance(fs::directory_iterator(dir_), fs::directory_iterator());
    EXPECT_EQ(files_after, 2u);
  }
  // Both entries of this process went with their handles.
  EXPECT_EQ(reg.CountAlive(), 0);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(NodeShareRegistry, AReusedProcessIdDoesNotCount) {
  PipelineRegistry reg(dir_.string());
  auto mine = reg.Register();
  ASSERT_TRUE(mine.ok());
  // An entry naming a live process id (our parent) with another start time: the process
  // that wrote it is gone and the id was given to another one.
  std::ofstream(dir_ / (std::to_string(::getppid()) + "-1-0")).put('\n');
  // And names that are not entries at all.
  std::ofstream(dir_ / "README").put('\n');
  EXPECT_EQ(reg.CountAlive(), 1);
  EXPECT_FALSE(fs::exists(dir_ / (std::to_string(::getppid()) + "-1-0")));
}

TEST_F(NodeShareRegistry, BudgetFollowsTheRegistryAndTheEnvironmentWins) {
  PipelineOptions o;
  RankInfo rank{1, 4, "options"};
  const int64_t gb = 1000000000;
  // Another rank of the job is alive (a registered child).
  RegisteredChild child(dir_);
  ASSERT_TRUE(child.registered);

  auto nb = NodeBudget::Create(o, rank, 0, 4, 8 * gb, Env({}), dir_.string());
  ASSERT_TRUE(nb.ok()) << nb.status().message();
  EXPECT_EQ((*nb)->budgets().cpus, 2);  // 4 cores, 2 live pipelines
  EXPECT_EQ((*nb)->budgets().memory, 4 * gb);
  EXPECT_NE((*nb)->budgets().why.find("2 stoker pipelines alive on this node"), std::string::npos)
      << (*nb)->budgets().why;
  EXPECT_EQ((*nb)->max_cpus(), 4);

  // The environment wins over the registry (and nothing registers).
  auto env = NodeBudget::Create(o, rank, 0, 4, 8 * gb, Env({{"LOCAL_WORLD_SIZE", "4"}}),
                                dir_.string());
  ASSERT_TRUE(env.ok());
  EXPECT_EQ((*env)->budgets().cpus, 1);
  std::string what;
  EXPECT_FALSE((*env)->Refresh(5'000'000'000, &what));

  // An explicit budget wins over both.
  PipelineOptions expl;
  expl.cpu_budget = 3;
  auto e3 = NodeBudget::Create(expl, rank, 0, 4, 8 * gb, Env({{"LOCAL_WORLD_SIZE", "4"}}),
                               dir_.string());
  ASSERT_TRUE(e3.ok());
  EXPECT_EQ((*e3)->budgets().cpus, 3);

  // A single-rank job does not use the registry.
  auto solo = NodeBudget::Create(o, RankInfo{0, 1, "default"}, 0, 4, 8 * gb, Env({}), "");
  ASSERT_TRUE(solo.ok());
  EXPECT_EQ((*solo)->budgets().cpus, 4);
  EXPECT_FALSE((*solo)->budgets().shared);

  // The other rank ends: the next refresh (at most once a second) gives the cores back.
  child.Kill();
  EXPECT_TRUE((*nb)->Refresh(1'000'000'000, &what));
  EXPECT_EQ((*nb)->budgets().cpus, 4);
  EXPECT_NE(what.find("cpu budget 2 -> 4"), std::string::npos) << what;
  EXPECT_FALSE((*nb)->Refresh(1'500'000'000, &what));  // too soon, and nothing changed
}

// End to end: a rank started as torchrun starts it gets its share, says so in the
// autotuner's log and in its stats; an explicit budget wins.
TEST_F(NodeShareRegistry, APipelineTakesItsShareAndSaysSo) {
  for (int i = 0; i < 40; ++i) {
    fs::create_directories(dir_ / "data" / "c0");
    std::ofstream(dir_ / "data" / "c0" / ("f" + std::to_string(i) + ".jpg")) << "sample " << i;
  }
  ::setenv("LOCAL_WORLD_SIZE", "4", 1);
  ::setenv("LOCAL_RANK", "2", 1);
  PipelineOptions o;
  o.data = (dir_ / "data").string();
  o.mode = DecodeMode::kRaw;
  o.batch_size = 4;
  o.rank = 2;
  o.world_size = 4;
  auto p = Pipeline::Create(o);
  PipelineOptions expl = o;
  expl.cpu_budget = 3;
  auto q = Pipeline::Create(expl);
  ::unsetenv("LOCAL_WORLD_SIZE");
  ::unsetenv("LOCAL_RANK");
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_TRUE(q.ok()) << q.status().message();
  PipelineStats st = (*p)->Stats();
  int cores = AvailableCpus();
  EXPECT_EQ(st.cpu_budget, std::max(1, cores / 4 + (2 < cores % 4 ? 1 : 0)));
  EXPECT_NE(st.budget_source.find("4 ranks share this node (LOCAL_WORLD_SIZE=4)"), std::string::npos)
      << st.budget_source;
  ASSERT_FALSE(st.tuning.empty());
  EXPECT_EQ(st.tuning[0].what, st.budget_source);
  PipelineStats sq = (*q)->Stats();
  EXPECT_EQ(sq.cpu_budget, 3);
  EXPECT_NE(sq.budget_source.find("cpu budget 3 (options)"), std::string::npos) << sq.budget_source;
  EXPECT_EQ(sq.memory_budget, st.memory_budget);  // memory is still the node's share
}

}  // namespace
}  // namespace stoker
