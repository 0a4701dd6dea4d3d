// Unit tests of each analysis on small hand-made traces whose answers are known by
// construction (times in µs in the traces, as the profiler writes them).
#include "doctor/doctor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "doctor/render.h"

namespace stoker::doctor {
namespace {

using telemetry::TraceSummary;

class TraceBuilder {
 public:
  TraceBuilder& X(const std::string& cat, const std::string& name, double ts, double dur,
                  const std::string& pid = "1", const std::string& tid = "1",
                  const std::string& args = "{}") {
    ev_.push_back(fmt::format(
        R"({{"ph": "X", "cat": "{}", "name": "{}", "pid": {}, "tid": {}, "ts": {}, "dur": {}, "args": {}}})",
        cat, name, pid, tid, ts, dur, args));
    return *this;
  }
  TraceBuilder& Step(int n, double ts, double dur) {
    return X("user_annotation", "ProfilerStep#" + std::to_string(n), ts, dur);
  }
  TraceBuilder& Data(double ts, double dur, bool single = true) {
    return X("user_annotation",
             std::string("enumerate(DataLoader)#_") +
                 (single ? "SingleProcess" : "MultiProcessing") + "DataLoaderIter.__next__",
             ts, dur);
  }
  TraceBuilder& Kernel(const std::string& name, double ts, double dur, int stream = 7) {
    return X("kernel", name, ts, dur, "0", std::to_string(stream),
             fmt::format(R"({{"device": 0, "stream": {}}})", stream));
  }
  TraceBuilder& Op(const std::string& name, double ts, double dur, const std::string& tid = "1") {
    return X("cpu_op", name, ts, dur, "1", tid);
  }
  std::string Str(const std::string& extra = "") const {
    std::string s = R"({"schemaVersion": 1, )" + extra + R"("traceEvents": [)";
    for (size_t i = 0; i < ev_.size(); ++i) s += (i ? ",\n" : "\n") + ev_[i];
    return s + "]}";
  }
  TraceSummary Summary(int rank = 0, const std::string& extra = "") const {
    std::string s = Str(extra);
    auto src = telemetry::MemoryByteSource(s, "test.json");
    auto r = telemetry::ReadTrace(src.get());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    TraceSummary t = r.ok() ? std::move(*r) : TraceSummary();
    t.rank = rank;
    return t;
  }

 private:
  std::vector<std::string> ev_;
};

Report Diag(std::vector<TraceSummary> traces, DoctorOptions o = {}) {
  DoctorInputs in;
  in.traces = std::move(traces);
  in.options = o;
  auto r = Diagnose(in);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : Report();
}

const Finding* Find(const Report& r, const std::string& id) {
  for (const auto& f : r.findings) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

// The TensorBoard plugin's golden vector (tb_plugin/test/test_profiler.py
// test_all_categories): DataLoader 180 of a 400 µs step, kernel 15, memcpy 10, memset 5.
TEST(Doctor, TensorBoardPluginVector) {
  TraceBuilder b;
  b.Step(1, 50, 400).Data(100, 180)
      .Op("aten::to", 200, 60).Op("aten::nll_loss_backward", 340, 70)
      .X("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 405, 10, "0", "7", R"({"device": 0})")
      .X("cuda_runtime", "cudaMemcpyAsync", 360, 20)
      .X("gpu_memset", "Memset (Device)", 420, 5, "0", "7", R"({"device": 0})")
      .X("cuda_runtime", "cudaMemsetAsync", 390, 10)
      .Kernel("void cunn_ClassNLLCriterion_updateGradInput_kernel", 430, 15)
      .X("cuda_runtime", "cudaLaunchKernel", 405, 5);
  Report r = Diag({b.Summary()});
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_TRUE(r.gpu);
  EXPECT_NEAR(r.step_s, 400e-6, 1e-12);
  const Fractions& f = r.breakdown;
  EXPECT_NEAR(f.data_wait, 180.0 / 400, 1e-9);
  EXPECT_NEAR(f.compute, 15.0 / 400, 1e-9);
  EXPECT_NEAR(f.h2d, 10.0 / 400, 1e-9);
  EXPECT_NEAR(f.h2d_pageable, 10.0 / 400, 1e-9);
  EXPECT_NEAR(f.other_gpu, 5.0 / 400, 1e-9);
  EXPECT_NEAR(f.idle, 370.0 / 400, 1e-9);
  EXPECT_NEAR(f.idle_data, 180.0 / 400, 1e-9);
  EXPECT_NEAR(f.idle_copy, 0.0, 1e-9);  // no correlation ids: the copy's direction is unknown
  EXPECT_NEAR(f.idle_host, 190.0 / 400, 1e-9);
  const Finding* in = Find(r, "input.dataloader");
  ASSERT_NE(in, nullptr);
  EXPECT_NEAR(*in->expected_speedup, 400.0 / 220, 1e-6);
  EXPECT_NE(in->fix.find("num_workers"), std::string::npos);
  ASSERT_NE(Find(r, "h2d.pageable"), nullptr);
  EXPECT_NE(Find(r, "h2d.pageable")->fix.find("pin_memory=True"), std::string::npos);
}

TEST(Doctor, InputBoundGpuLoop) {
  // 4 steps of 100 ms: 30 ms waiting for data with the GPU idle, then 70 ms of kernels.
  TraceBuilder b;
  for (int i = 0; i < 4; ++i) {
    double s = i * 100000.0;
    b.Step(i, s, 100000).Data(s, 30000, false).Kernel("sgemm", s + 30000, 70000);
  }
  Report r = Diag({b.Summary()}, {.batch_size = 64});
  EXPECT_EQ(r.primary, Verdict::kInputBound);
  EXPECT_NEAR(r.breakdown.data_wait, 0.30, 1e-9);
  EXPECT_NEAR(r.breakdown.idle_data, 0.30, 1e-9);
  EXPECT_NEAR(r.breakdown.compute, 0.70, 1e-9);
  EXPECT_NEAR(r.steps_per_s, 10.0, 1e-9);
  EXPECT_NEAR(r.samples_per_s, 640.0, 1e-6);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings[0].id, "input.dataloader");
  EXPECT_NEAR(*r.findings[0].expected_speedup, 1.0 / 0.7, 1e-6);  // 30 ms of 100 -> 1.43x
  EXPECT_NE(r.findings[0].fix.find("prefetch_factor"), std::string::npos);  // multi-process
  EXPECT_GT(r.confidence, 0.6);
  EXPECT_NE(r.summary.find("1.43x"), std::string::npos);
}

TEST(Doctor, ComputeBoundGpuLoop) {
  TraceBuilder b;
  for (int i = 0; i < 5; ++i) {
    double s = i * 100000.0;
    b.Step(i, s, 100000).Data(s, 500).Kernel("sgemm", s + 1000, 98000);
  }
  Report r = Diag({b.Summary()});
  EXPECT_EQ(r.primary, Verdict::kComputeBound);
  EXPECT_NEAR(r.breakdown.compute, 0.98, 1e-9);
  EXPECT_EQ(Find(r, "input.dataloader"), nullptr);
  EXPECT_NE(Find(r, "compute.bound"), nullptr);
}

TEST(Doctor, CommunicationBoundAndOverlap) {
  // Compute [0, 60], nccl [50, 90] ms: 40 ms of communication, 10 overlapped, 30 exposed.
  TraceBuilder b;
  for (int i = 0; i < 3; ++i) {
    double s = i * 100000.0;
    b.Step(i, s, 100000).Kernel("sgemm", s, 60000)
        .Kernel("ncclKernel_AllReduce_RING_LL_Sum_float", s + 50000, 40000, 20);
  }
  Report r = Diag({b.Summary()});
  EXPECT_EQ(r.primary, Verdict::kCommunicationBound);
  EXPECT_NEAR(r.breakdown.comm_total, 0.40, 1e-9);
  EXPECT_NEAR(r.breakdown.comm, 0.30, 1e-9);
  EXPECT_NEAR(r.breakdown.comm_overlap, 0.25, 1e-9);
  const Finding* f = Find(r, "comm.exposed");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(*f->expected_speedup, 1.0 / 0.7, 1e-6);
  EXPECT_NE(f->fix.find("bucket_cap_mb"), std::string::npos);
}

TEST(Doctor, HostSyncDrainsTheGpu) {
  // A 40 ms kernel, the host blocks in cudaStreamSynchronize until it ends, then the GPU
  // idles 60 ms until the next step's launch.
  TraceBuilder b;
  for (int i = 0; i < 3; ++i) {
    double s = i * 100000.0;
    b.Step(i, s, 100000).Kernel("sgemm", s, 40000)
        .X("cuda_runtime", "cudaStreamSynchronize", s + 5000, 35010);
  }
  Report r = Diag({b.Summary()});
  EXPECT_EQ(r.primary, Verdict::kHostBound);
  EXPECT_NEAR(r.breakdown.idle_sync, 0.60, 1e-6);
  EXPECT_NEAR(r.breakdown.idle_host, 0.0, 1e-6);
  const Finding* f = Find(r, "host.sync");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(*f->expected_speedup, 2.5, 1e-3);
  EXPECT_NE(f->fix.find(".item()"), std::string::npos);
}

TEST(Doctor, LaunchBoundGpuLoop) {
  // 200 kernels of 5 µs with 45 µs gaps: the GPU is busy 10% of the time.
  TraceBuilder b;
  for (int i = 0; i < 2; ++i) {
    double s = i * 10000.0;
    b.Step(i, s, 10000);
    for (int k = 0; k < 200; ++k) b.Kernel("elementwise", s + k * 50, 5);
  }
  Report r = Diag({b.Summary()});
  EXPECT_EQ(r.primary, Verdict::kHostBound);
  EXPECT_NEAR(r.breakdown.compute, 0.10, 1e-9);
  const Finding* f = Find(r, "host.launch");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->fix.find("CUDA Graphs"), std::string::npos);
}

TEST(Doctor, StagedPageableCopyIdlesTheGpu) {
  // Each 100 ms step: the DataLoader returns at once, the host is blocked 20 ms in a
  // cudaMemcpyAsync from pageable memory (the GPU idle), the copy itself takes 2 ms on the
  // GPU, then 78 ms of kernels. Pinning removes the 20 ms wait and the 2 ms exposed copy.
  TraceBuilder b;
  for (int i = 0; i < 4; ++i) {
    double s = i * 100000.0;
    b.Step(i, s, 100000).Data(s, 100, false)
        .X("cuda_runtime", "cudaMemcpyAsync", s + 100, 20000, "1", "1",
           fmt::format(R"({{"correlation": {}}})", 100 + i))
        .X("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", s + 20100, 1900, "0", "7",
           fmt::format(R"({{"device": 0, "bytes": 19267584, "correlation": {}}})", 100 + i))
        .Kernel("sgemm", s + 22000, 78000);
  }
  Report r = Diag({b.Summary()});
  EXPECT_NEAR(r.breakdown.idle_copy, 0.20, 1e-9);
  EXPECT_NEAR(r.breakdown.h2d_pageable, 0.019, 1e-9);
  EXPECT_NEAR(r.breakdown.idle_data, 0.001, 1e-9);
  EXPECT_NEAR(r.breakdown.idle_host, 0.0, 1e-9);
  // TensorFlow's input time: waiting for input plus the host-to-device transfer.
  EXPECT_EQ(r.primary, Verdict::kInputBound);
  EXPECT_NE(r.summary.find("host-to-device copies 22%"), std::string::npos) << r.summary;
  const Finding* f = Find(r, "h2d.pageable");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, "high");
  EXPECT_NEAR(*f->expected_speedup, 100.0 / (100 - 21.9), 1e-6);
  EXPECT_EQ(r.findings[0].id, "h2d.pageable");
  EXPECT_EQ(Find(r, "input.dataloader"), nullptr);
}

TEST(Doctor, BlockingReadBackIsASync) {
  // loss.item(): a DtoH copy into pageable memory blocks the host 30 ms while the copy
  // waits for another stream; the GPU copy comes after the GPU event listed first (the
  // correlation join does not depend on order). The GPU then idles 10 ms more until the
  // host launches the next kernel.
  TraceBuilder b;
  for (int i = 0; i < 3; ++i) {
    double s = i * 100000.0;
    b.Step(i, s, 100000).Kernel("sgemm", s, 50000)
        .X("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", s + 79990, 10, "0", "7",
           fmt::format(R"({{"device": 0, "correlation": {}}})", 7 + i))
        .X("cuda_runtime", "cudaMemcpyAsync", s + 50000, 30000, "1", "1",
           fmt::format(R"({{"correlation": {}}})", 7 + i))
        .Kernel("sgemm", s + 90000, 10000);
  }
  Report r = Diag({b.Summary()});
  EXPECT_NEAR(r.breakdown.idle_sync, 0.3999, 1e-9);
  EXPECT_NEAR(r.breakdown.idle_copy, 0.0, 1e-9);
  EXPECT_NEAR(r.breakdown.idle_host, 0.0, 1e-9);
  EXPECT_EQ(r.ranks[0].d2h_copy_calls, 3u);
  EXPECT_EQ(r.primary, Verdict::kHostBound);
  const Finding* f = Find(r, "host.sync");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->evidence.find("3 copies to the host"), std::string::npos) << f->evidence;
}

TEST(Doctor, SlowOptimizerStepIsItsOwnFinding) {
  // 60 ms of kernels, then a 30 ms optimizer step on the host during which the GPU runs
  // only 100 short kernels of 50 µs (5 ms), then 10 ms of other host work.
  TraceBuilder b;
  for (int i = 0; i < 3; ++i) {
    double s = i * 100000.0;
    b.Step(i, s, 100000).Kernel("sgemm", s, 60000)
        .X("user_annotation", "Optimizer.step#Adam.step", s + 60000, 30000);
    for (int k = 0; k < 100; ++k) b.Kernel("multi_tensor_apply", s + 60000 + k * 300, 50);
  }
  Report r = Diag({b.Summary()});
  EXPECT_NEAR(r.breakdown.optimizer, 0.30, 1e-9);
  EXPECT_NEAR(r.breakdown.idle_optimizer, 0.25, 1e-9);
  EXPECT_NEAR(r.breakdown.idle_host, 0.35, 1e-9);
  EXPECT_EQ(r.primary, Verdict::kHostBound);
  const Finding* o = Find(r, "host.optimizer");
  ASSERT_NE(o, nullptr);
  EXPECT_NE(o->fix.find("fused=True"), std::string::npos);
  EXPECT_NEAR(*o->expected_speedup, 100.0 / 75, 1e-6);
  const Finding* l = Find(r, "host.launch");  // the other 10 ms, not counted twice
  ASSERT_NE(l, nullptr);
  EXPECT_NEAR(*l->expected_speedup, 100.0 / 90, 1e-6);
}

TraceSummary CpuRank(int rank, double data_ms, double comm_ms) {
  // A CPU-only DDP-like step of 100 ms: DataLoader, 40 ms of operators, an all-reduce on
  // another thread during which the main thread waits, then the optimizer.
  TraceBuilder b;
  for (int i = 0; i < 4; ++i) {
    double s = i * 100000.0;
    b.Step(i, s, 100000).Data(s, data_ms * 1000)
        .Op("aten::linear", s + data_ms * 1000, 40000)
        .X("user_annotation", "gloo:all_reduce", s + (data_ms + 40) * 1000, comm_ms * 1000, "1", "2")
        .X("user_annotation", "Optimizer.step#SGD.step", s + 95000, 5000);
  }
  return b.Summary(rank);
}

TEST(Doctor, CpuOnlyBreakdown) {
  Report r = Diag({CpuRank(0, 5, 50)});
  EXPECT_FALSE(r.gpu);
  EXPECT_NEAR(r.breakdown.data_wait, 0.05, 1e-9);
  EXPECT_NEAR(r.breakdown.compute, 0.40, 1e-9);
  EXPECT_NEAR(r.breakdown.comm, 0.50, 1e-9);
  EXPECT_NEAR(r.breakdown.optimizer, 0.05, 1e-9);
  EXPECT_NEAR(r.breakdown.idle, 0.0, 1e-9);
  EXPECT_EQ(r.primary, Verdict::kCommunicationBound);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.back().find("no GPU events"), std::string::npos);
  // No GPU findings from a CPU-only trace.
  for (const auto& f : r.findings) {
    EXPECT_TRUE(f.id.rfind("h2d", 0) != 0 && f.id.rfind("host.sync", 0) != 0 &&
                f.id.rfind("compute.amp", 0) != 0)
        << f.id;
  }
}

// A language model (token embedding over [8, 1024] ids each step) on a GPU, waiting 40 ms
// of every 100 ms step for its batch: tokens/s per GPU, the wait, the token-loading fixes.
TEST(Doctor, LanguageModelTokensPerSecondAndTheWaitForBatches) {
  auto lm = [](double wait_ms) {
    TraceBuilder b;
    for (int i = 0; i < 4; ++i) {
      double t0 = i * 100'000.0;
      b.Step(i, t0, 100'000);
      b.Data(t0, wait_ms * 1000);
      b.X("cpu_op", "aten::embedding", t0 + wait_ms * 1000 + 10, 20, "1", "1",
          R"({"Input Dims": [[8, 1024], [32000, 512], [], [], []]})");
      b.X("cpu_op", "aten::embedding", t0 + wait_ms * 1000 + 40, 20, "1", "1",
          R"({"Input Dims": [[1, 1024], [1024, 512], [], [], []]})");
      b.Kernel("ampere_sgemm_128x64", t0 + wait_ms * 1000 + 100, (100 - wait_ms) * 1000 - 200);
    }
    return b.Summary();
  };
  Report r = Diag({lm(40)});
  const Finding* f = Find(r, "input.tokens");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, "high");
  EXPECT_NE(f->title.find("Language model: 81920 tokens/s per GPU"), std::string::npos) << f->title;
  EXPECT_NE(f->evidence.find("reads 8192 token ids per step"), std::string::npos) << f->evidence;
  EXPECT_NE(f->fix.find("TokenPipeline"), std::string::npos);
  EXPECT_EQ(r.primary, Verdict::kInputBound);
  // Fed: the same model with a 1 ms wait only reports the rate.
  Report fed = Diag({lm(1)});
  const Finding* g = Find(fed, "input.tokens");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->severity, "info");
  EXPECT_NE(g->fix.find("None needed"), std::string::npos) << g->fix;
  // An image model (no embedding) gets no token finding.
  EXPECT_EQ(Find(Diag({CpuRank(0, 5, 50)}), "input.tokens"), nullptr);
}

TEST(Doctor, StragglerRankIsTheImbalance) {
  // Rank 1 waits 50 ms for data; rank 0 waits for rank 1 in the all-reduce.
  Report r = Diag({CpuRank(0, 5, 50), CpuRank(1, 50, 5)});
  EXPECT_EQ(r.primary, Verdict::kImbalance);
  EXPECT_EQ(r.cross.straggler_rank, 1);
  EXPECT_EQ(r.cross.straggler_cause, "data_wait");
  EXPECT_NEAR(r.cross.straggler_excess_s, 0.045, 1e-9);
  EXPECT_NEAR(r.cross.data_wait_spread_s, 0.045, 1e-9);
  const Finding* f = Find(r, "imbalance.straggler");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->rank, 1);
  EXPECT_NEAR(*f->expected_speedup, 100.0 / 55, 1e-6);
  EXPECT_NE(r.summary.find("rank 1"), std::string::npos);
}

TEST(Doctor, EveryRankInputBoundIsInputBoundNotImbalance) {
  // Both ranks wait 50 / 62 ms of 100 for data: the loaders are the problem on both; rank 1
  // is still named as the straggler.
  Report r = Diag({CpuRank(0, 50, 17), CpuRank(1, 62, 5)});
  EXPECT_EQ(r.primary, Verdict::kInputBound);
  EXPECT_EQ(r.cross.straggler_rank, 1);
  EXPECT_NE(Find(r, "imbalance.straggler"), nullptr);
  EXPECT_NE(Find(r, "input.dataloader"), nullptr);
}

TEST(Doctor, SingleProcessLoaderGainIsBoundedByTheCores) {
  // num_workers=0, 90 ms of loading and 10 ms of compute per step: 9 workers would hide it;
  // with 2 cores for workers a batch comes every 45 ms at best -> 100/45 = 2.22x, not 10x.
  TraceBuilder b;
  for (int i = 0; i < 4; ++i) {
    double s = i * 100000.0;
    b.Step(i, s, 100000).Data(s, 90000).Op("aten::linear", s + 90000, 10000);
  }
  Report unbounded = Diag({b.Summary()});
  const Finding* u = Find(unbounded, "input.dataloader");
  ASSERT_NE(u, nullptr);
  EXPECT_NEAR(*u->expected_speedup, 10.0, 1e-6);
  EXPECT_NE(u->fix.find("about 9 workers"), std::string::npos) << u->fix;
  Report bounded = Diag({b.Summary()}, {.cpus = 2});
  const Finding* f = Find(bounded, "input.dataloader");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(*f->expected_speedup, 100.0 / 45, 1e-6);
  EXPECT_NE(f->evidence.find("loading-bound"), std::string::npos) << f->evidence;
}

TEST(Doctor, BalancedRanksAreNotImbalanced) {
  Report r = Diag({CpuRank(0, 30, 5), CpuRank(1, 31, 4)});
  EXPECT_EQ(r.cross.straggler_rank, -1);
  EXPECT_EQ(r.primary, Verdict::kInputBound);
}

TEST(Doctor, DiagnoseStepsUsesTheSameRules) {
  std::vector<StepTiming> slow(10, {0.030, 0.100});
  auto a = DiagnoseSteps(slow, {.batch_size = 32});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->primary, Verdict::kInputBound);
  ASSERT_FALSE(a->findings.empty());
  EXPECT_EQ(a->findings[0].id, "input.dataloader");
  EXPECT_NEAR(*a->findings[0].expected_speedup, 1.0 / 0.7, 1e-9);
  EXPECT_NEAR(a->samples_per_s, 320.0, 1e-9);
  // Same wording as a trace with the same numbers.
  TraceBuilder b;
  for (int i = 0; i < 10; ++i) b.Step(i, i * 100000.0, 100000).Data(i * 100000.0, 30000, false).Op("aten::mm", i * 100000.0 + 30000, 70000);
  Report t = Diag({b.Summary()});
  const Finding* tf = Find(t, "input.dataloader");
  ASSERT_NE(tf, nullptr);
  EXPECT_EQ(tf->title, a->findings[0].title);
  EXPECT_EQ(tf->severity, a->findings[0].severity);

  auto fast = DiagnoseSteps(std::vector<StepTiming>(5, {0.001, 0.1}));
  ASSERT_TRUE(fast.ok());
  EXPECT_EQ(fast->primary, Verdict::kComputeBound);
  EXPECT_TRUE(fast->findings.empty());
  auto mid = DiagnoseSteps(std::vector<StepTiming>(5, {0.01, 0.1}));
  ASSERT_TRUE(mid.ok());
  EXPECT_EQ(mid->primary, Verdict::kHealthy);
  EXPECT_FALSE(DiagnoseSteps({}).ok());
  EXPECT_FALSE(DiagnoseSteps({{0.2, 0.1}}).ok());
  EXPECT_FALSE(DiagnoseSteps({{-1, 0.1}}).ok());
}

telemetry::GpuLog SyntheticLog() {
  telemetry::GpuLog log;
  log.path = "gpu.csv";
  log.format = "nvidia-smi csv";
  for (int i = 0; i < 20; ++i) {
    telemetry::GpuSample s;
    s.t_s = i * 0.5;
    s.gpu = 0;
    bool starved = i >= 5 && i <= 12;
    s.util = starved ? 10 : 90;
    s.mem_used_mib = 20000;
    s.mem_total_mib = 80000;
    s.power_w = starved ? 100 : 400;
    s.temp_c = 60 + i;
    s.throttle = (i == 1 || i == 14 || i == 15) ? 0x4 : (starved ? 0x1 : 0);
    log.samples.push_back(s);
  }
  return log;
}

TEST(Doctor, GpuLogStarvationAndThrottling) {
  GpuLogReport g = AnalyzeGpuLog(SyntheticLog(), Thresholds{});
  EXPECT_EQ(g.gpus, 1);
  EXPECT_NEAR(g.util_mean, (12 * 90 + 8 * 10) / 20.0, 1e-9);
  EXPECT_NEAR(g.busy_frac, 0.6, 1e-9);
  EXPECT_EQ(g.starvation_periods, 1);
  EXPECT_NEAR(g.starvation_s, 4.0, 1e-9);  // 2.5 s .. 6.5 s
  EXPECT_NEAR(g.mem_used_max_frac, 0.25, 1e-9);
  EXPECT_NEAR(g.throttled_busy_frac, 3.0 / 12, 1e-9);  // GpuIdle (0x1) does not count
  EXPECT_EQ(g.throttle_bits_seen, 0x4);
  EXPECT_NEAR(g.temp_max_c, 79, 1e-9);
  DoctorInputs in;
  in.gpu_logs.push_back(SyntheticLog());
  auto r = Diagnose(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->primary, Verdict::kThrottled);
  EXPECT_NE(Find(*r, "gpu.starvation"), nullptr);
  EXPECT_NE(Find(*r, "gpu.throttle"), nullptr);
  EXPECT_NE(Find(*r, "gpu.throttle")->fix.find("power"), std::string::npos);
}

TEST(Doctor, GpuLogStarvationPerGpuAndSmActivity) {
  telemetry::GpuLog log;
  log.path = "two.csv";
  // GPU 0 busy throughout; GPU 1 starved from 2.0 to 6.0 s, plus one lone low sample at
  // 8.0 s (one sample is noise, not a period). 0.5 s spacing over 10 s.
  for (int i = 0; i <= 20; ++i) {
    for (int gpu = 0; gpu < 2; ++gpu) {
      telemetry::GpuSample s;
      s.t_s = i * 0.5;
      s.gpu = gpu;
      bool low = gpu == 1 && ((i >= 4 && i < 12) || i == 16);
      s.util = low ? 5 : 95;
      s.sm_active = 0.3;
      s.tensor_active = 0.0;
      log.samples.push_back(s);
    }
  }
  GpuLogReport g = AnalyzeGpuLog(log, Thresholds{});
  EXPECT_EQ(g.starvation_periods, 1);
  EXPECT_NEAR(g.starvation_s, 4.0, 1e-9);
  EXPECT_EQ(g.starved_gpu, 1);
  EXPECT_NEAR(g.starved_gpu_frac, 0.4, 1e-9);
  DoctorInputs in;
  in.gpu_logs.push_back(log);
  auto r = Diagnose(in);
  ASSERT_TRUE(r.ok());
  const Finding* f = Find(*r, "gpu.starvation");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(*f->expected_speedup, 1.0 / 0.6, 1e-9);
  EXPECT_NE(f->evidence.find("GPU 1 4.0 s"), std::string::npos) << f->evidence;
  EXPECT_NE(Find(*r, "gpu.sm_activity"), nullptr);   // util ~86%, SM activity 0.3
  EXPECT_NE(Find(*r, "gpu.tensor_cores"), nullptr);
}

TEST(Doctor, PipelineMetricsNameTheStage) {
  telemetry::PipelineMetrics m;
  m.path = "bench.json";
  m.samples_per_s = 900;
  m.consumer_wait_frac = 0.4;
  m.bottleneck = "decode";
  m.cpus = 4;
  m.stages = {{"read", 100, 1, 0.1, 0.0, 0.8}, {"decode", 100, 3, 0.99, 0.0, 0.0},
              {"batch", 100, 1, 0.05, 0.9, 0.0}};
  PipelineReport p = AnalyzePipeline(m, 0);
  EXPECT_EQ(p.bottleneck_kind, "decode");
  EXPECT_NEAR(p.cores_busy, 0.1 + 2.97 + 0.05, 1e-9);
  EXPECT_FALSE(p.cores_saturated);  // 3.12 of 4
  m.stages[0].threads = 1, m.stages[1].threads = 4;
  m.stages[1].busy_frac = 0.95;
  p = AnalyzePipeline(m, 0);
  EXPECT_TRUE(p.cores_saturated);
  DoctorInputs in;
  in.pipelines.push_back(m);
  auto r = Diagnose(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->primary, Verdict::kInputBound);
  const Finding* f = Find(*r, "pipeline.stage");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->fix.find("saturated"), std::string::npos);
  m.bottleneck = "";
  m.stages[0].busy_frac = 0.99, m.stages[0].wait_output_frac = 0, m.stages[1].busy_frac = 0.2;
  EXPECT_EQ(AnalyzePipeline(m, 0).bottleneck_kind, "storage");
}

TEST(Doctor, GpuPreprocessOffloadUsesTheOffloadModel) {
  telemetry::PipelineMetrics m;
  m.path = "bench.json";
  m.samples_per_s = 400;       // 4 cores busy: 10 ms of CPU per image
  m.consumer_wait_frac = 0.6;  // the step would take 1000/s
  m.bottleneck = "decode";
  m.cpus = 4;
  m.stages = {{"read", 100, 1, 0.0, 0.0, 0.0}, {"decode", 100, 4, 1.0, 0.0, 0.0},
              {"batch", 100, 1, 0.0, 0.9, 0.0}};
  DoctorInputs in;
  in.pipelines.push_back(m);
  // Without a GPU's busy share the model cannot say: no finding.
  auto r = Diagnose(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Find(*r, "gpu.preprocess_offload"), nullptr);
  // A GPU log at 30 % utilization: the GPU has room for 1000 images/s of decode.
  telemetry::GpuLog log;
  log.path = "smi.csv";
  log.format = "nvidia-smi csv";
  log.has_timestamps = true;
  for (int i = 0; i < 20; ++i) {
    telemetry::GpuSample g;
    g.t_s = i;
    g.gpu = 0;
    g.util = 30;
    log.samples.push_back(g);
  }
  in.gpu_logs.push_back(log);
  r = Diagnose(in);
  ASSERT_TRUE(r.ok());
  const Finding* f = Find(*r, "gpu.preprocess_offload");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->evidence.find("feed 400 images/s"), std::string::npos) << f->evidence;
  EXPECT_NE(f->evidence.find("takes 1000"), std::string::npos) << f->evidence;
  ASSERT_TRUE(f->expected_speedup.has_value());
  EXPECT_NEAR(*f->expected_speedup, 2.5, 1e-6);
  // A busy GPU (97 %): the model says no, and so does the doctor.
  for (auto& g : in.gpu_logs[0].samples) g.util = 97;
  r = Diagnose(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Find(*r, "gpu.preprocess_offload"), nullptr);
  // The rule is listed with its source.
  bool listed = false;
  for (const auto& row : ListRules(Thresholds{}))
    listed |= row.id == std::string("gpu.preprocess_offload");
  EXPECT_TRUE(listed);
}

TEST(Doctor, RenderingsCarryTheVerdictAndStayOffline) {
  TraceBuilder b;
  for (int i = 0; i < 4; ++i) {
    double s = i * 100000.0;
    b.Step(i, s, 100000).Data(s, 30000).Kernel("sgemm", s + 30000, 70000);
  }
  DoctorInputs in;
  in.traces = {b.Summary(0), b.Summary(1)};
  in.gpu_logs.push_back(SyntheticLog());
  auto rr = Diagnose(in);
  ASSERT_TRUE(rr.ok());
  const Report& r = *rr;
  auto j = ReportToJson(r);
  EXPECT_EQ(j["schema"], "stoker.doctor/1");
  EXPECT_EQ(j["verdict"]["primary"], VerdictName(r.primary));
  for (const char* k : {"data_wait_frac", "compute_frac", "comm_frac", "h2d_frac", "idle_frac"}) {
    EXPECT_TRUE(j["breakdown"].contains(k)) << k;
  }
  ASSERT_TRUE(j["findings"].is_array());
  for (const auto& f : j["findings"]) {
    for (const char* k : {"id", "severity", "evidence", "fix", "expected_speedup"}) {
      EXPECT_TRUE(f.contains(k)) << k;
    }
  }
  EXPECT_EQ(j["ranks"].size(), 2u);
  std::string html = RenderHtml(r);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("<polyline"), std::string::npos);  // the GPU log plot
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  std::string md = RenderMarkdown(r);
  EXPECT_NE(md.find(VerdictName(r.primary)), std::string::npos);
  EXPECT_NE(md.find("| # | severity |"), std::string::npos);
  std::string text = RenderText(r);
  EXPECT_NE(text.find(VerdictName(r.primary)), std::string::npos);
  EXPECT_NE(text.find("Findings"), std::string::npos);
}

TEST(Doctor, InvalidUtf8FromTheTraceDoesNotBreakTheJson) {
  TraceBuilder b;
  b.Step(1, 0, 1000).X("user_annotation", "enumerate(DataLoader)#\xff\xfeIter.__next__", 0, 900);
  Report r = Diag({b.Summary()});
  EXPECT_EQ(r.ranks[0].dataloader, "\xff\xfeIter");
  std::string js = RenderJson(r);  // nlohmann would throw on the raw bytes
  EXPECT_NE(js.find("input_bound"), std::string::npos);
  EXPECT_FALSE(RenderHtml(r).empty());
}

TEST(Doctor, LoadInputsSniffsAndRejectsUnknownFiles) {
  namespace fs = std::filesystem;
  fs::path d = fs::temp_directory_path() / ("stoker_doctor_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  TraceBuilder b;
  b.Step(1, 0, 1000).Data(0, 100);
  std::ofstream(d / "rank-1.json") << b.Str();
  std::ofstream(d / "gpu.csv") << "timestamp, utilization.gpu [%]\n2024/01/01 00:00:00, 50 %\n";
  std::ofstream(d / "notes.md") << "hello";
  auto in = LoadInputs(Env::Default(), {d.string()});
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->traces.size(), 1u);
  EXPECT_EQ(in->traces[0].rank, 1);  // from the file name
  EXPECT_EQ(in->gpu_logs.size(), 1u);
  ASSERT_EQ(in->notes.size(), 1u);
  EXPECT_NE(in->notes[0].find("notes.md"), std::string::npos);
  std::ofstream(d / "other.txt") << "just some text\n";
  auto bad = LoadInputs(Env::Default(), {d.string()});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("other.txt"), std::string::npos);
  fs::create_directories(d / "outer" / "run1");
  std::ofstream(d / "outer" / "run1" / "host.pt.trace.json") << b.Str();
  auto nested = LoadInputs(Env::Default(), {(d / "outer").string()});
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("run1"), std::string::npos) << nested.status().ToString();
  auto missing = LoadInputs(Env::Default(), {(d / "nope.json").string()});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.json"), std::string::npos);
  fs::remove_all(d);
}

TEST(Doctor, HostileRankNumbersAreRenumberedNotFatal) {
  namespace fs = std::filesystem;
  fs::path d = fs::temp_directory_path() / ("stoker_doctor_r_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  TraceBuilder b;
  b.Step(1, 0, 1000).Data(0, 100);
  // A rank that would overflow stoi, one far too large to index, and a duplicate.
  std::ofstream(d / "rank99999999999999999999.json") << b.Str();
  std::ofstream(d / "a.json") << b.Str(R"("distributedInfo": {"rank": 2000000000}, )");
  std::ofstream(d / "b.json") << b.Str(R"("distributedInfo": {"rank": 3}, )");
  std::ofstream(d / "c.json") << b.Str(R"("distributedInfo": {"rank": 3}, )");
  auto in = LoadInputs(Env::Default(), {d.string()});
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  std::set<int> ranks;
  for (const auto& t : in->traces) ranks.insert(t.rank);
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
  bool noted = false;
  for (const auto& n : in->notes) noted = noted || n.find("rank 3") != std::string::npos;
  EXPECT_TRUE(noted);
  fs::remove_all(d);
}

TEST(Doctor, BenchJsonWithManySkippedSamplesIsPipelineMetrics) {
  // bench pipeline --json sorts its keys: "stages" comes after a long "skipped_items".
  namespace fs = std::filesystem;
  fs::path p = fs::temp_directory_path() / ("stoker_bench_" + std::to_string(::getpid()) + ".json");
  nlohmann::json j;
  j["samples_per_s"] = 100;
  j["consumer_wait_frac"] = 0.5;
  j["skipped_items"] = std::vector<std::string>(3000, std::string(40, 'k'));
  j["stages"] = {{{"name", "decode"}, {"busy_frac", 0.9}, {"threads", 2}}};
  std::ofstream(p) << j.dump(2);
  auto in = LoadInputs(Env::Default(), {p.string()});
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->pipelines.size(), 1u);
  fs::remove(p);
}

TEST(Doctor, PipelineCoresFromCpuTime) {
  // A read stage blocked on storage is busy but burns no core: CPU time says so.
  telemetry::PipelineMetrics m;
  m.path = "bench.json";
  m.wall_s = 10;
  m.cpus = 4;
  m.consumer_wait_frac = 0.5;
  m.bottleneck = "read";
  m.stages = {{"read", 100, 4, 0.99, 0.0, 0.0, 2.0}, {"decode", 100, 2, 0.3, 0.7, 0.0, 6.0}};
  PipelineReport p = AnalyzePipeline(m, 0);
  EXPECT_NEAR(p.cores_busy, 0.8, 1e-9);
  EXPECT_FALSE(p.cores_saturated);
  EXPECT_EQ(p.bottleneck_kind, "storage");
  m.stages[1].cpu_s = -1;  // not recorded for every stage: busy share x threads
  EXPECT_NEAR(AnalyzePipeline(m, 0).cores_busy, 0.99 * 4 + 0.3 * 2, 1e-9);
}

TEST(Doctor, HostOnlySamplesSayTheGpuWasNotSeen) {
  telemetry::GpuLog log;
  log.path = "w.csv";
  log.format = "stoker watch";
  for (int i = 0; i < 10; ++i) {
    telemetry::GpuSample s;
    s.t_s = i * 0.1;
    s.proc_cpu_cores = 1.5;
    s.cpus = 2;
    s.read_mib_s = 3;
    log.samples.push_back(s);
  }
  DoctorInputs in;
  in.gpu_logs.push_back(log);
  auto r = Diagnose(in);
  ASSERT_TRUE(r.ok());
  // No evidence: the verdict says so (never healthy), with what to record next.
  EXPECT_EQ(r->primary, Verdict::kUnknown);
  EXPECT_LE(r->confidence, 0.3);
  EXPECT_NE(r->summary.find("no GPU samples"), std::string::npos) << r->summary;
  EXPECT_NE(r->summary.find("Record next"), std::string::npos) << r->summary;
  ASSERT_EQ(r->findings.size(), 1u);
  EXPECT_EQ(r->findings[0].id, "evidence.missing");
  EXPECT_NE(r->summary.find("1.5 of 2 cores"), std::string::npos) << r->summary;
  std::string html = RenderHtml(*r);
  EXPECT_NE(html.find("CPU cores busy"), std::string::npos);
  EXPECT_NE(html.find("no GPU utilization samples"), std::string::npos);
  EXPECT_EQ(RenderMarkdown(*r).find("nan"), std::string::npos);
}

}  // namespace
}  // namespace stoker::doctor
