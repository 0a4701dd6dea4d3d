// The planner against hand-computed cases: each test states the arithmetic it expects.
#include "plan/plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace stoker::plan {
namespace {

// One node, one GPU, batch 10 at 1000 samples/s (a 10 ms step), 1 ms CPU per sample,
// storage without latency or limits.
NodeModel Base() {
  NodeModel m;
  m.gpus = 1;
  m.batch = 10;
  m.step_s = 0.010;
  m.cpu_s = 0.001;
  m.cores = 4;
  m.workers = 8;
  m.request_bytes = 100e3;
  m.latency_s = 0;
  m.steps = 200;
  return m;
}

TEST(PlanSim, GpuBoundWhenThePipelineHasSpareCapacity) {
  // 4 cores / 1 ms = 4000 samples/s of CPU against 1000 needed.
  auto r = Simulate(Base());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NEAR(r->samples_per_s, 1000, 10);
  EXPECT_GT(r->gpu_util, 0.99);
  EXPECT_EQ(r->bottleneck, "gpu");
  EXPECT_NEAR(r->cpu_util, 0.25, 0.02);
}

TEST(PlanSim, CpuBound) {
  NodeModel m = Base();
  m.cores = 1;
  m.cpu_s = 0.002;  // one core: 500 samples/s, half of what the GPU takes
  auto r = Simulate(m);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->samples_per_s, 500, 10);
  EXPECT_NEAR(r->gpu_util, 0.5, 0.02);
  EXPECT_EQ(r->bottleneck, "cpu");
  EXPECT_GT(r->cpu_util, 0.97);
}

TEST(PlanSim, LatencyBoundWithTooFewWorkers) {
  // 2 workers, each 10 ms read + 1 ms CPU per sample: 2 / 11 ms = 181.8 samples/s.
  NodeModel m = Base();
  m.workers = 2;
  m.latency_s = 0.010;
  auto r = Simulate(m);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->samples_per_s, 2 / 0.011, 3);
  EXPECT_EQ(r->bottleneck, "storage latency (workers)");
  // Little's law: 12 workers cover 1000/s x 11 ms = 11 in flight.
  m.workers = 12;
  auto r2 = Simulate(m);
  ASSERT_TRUE(r2.ok());
  EXPECT_GT(r2->gpu_util, 0.97);
}

TEST(PlanSim, BandwidthBound) {
  // 1 MB samples through a 100 MB/s link: 100 samples/s.
  NodeModel m = Base();
  m.request_bytes = 1e6;
  m.link_bps = 100e6;
  m.workers = 32;
  auto r = Simulate(m);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->samples_per_s, 100, 2);
  EXPECT_EQ(r->bottleneck, "storage bandwidth");
  EXPECT_GT(r->link_util, 0.97);
  EXPECT_NEAR(r->storage_mb_s, 100, 2);
}

TEST(PlanSim, RequestRateBound) {
  NodeModel m = Base();
  m.req_per_s = 300;
  m.workers = 32;
  auto r = Simulate(m);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->samples_per_s, 300, 5);
  EXPECT_EQ(r->bottleneck, "request rate");
  // Packing 4 samples per request lifts it to 1200 > 1000: the GPU is fed.
  m.samples_per_request = 4;
  m.request_bytes = 400e3;
  auto r2 = Simulate(m);
  ASSERT_TRUE(r2.ok());
  EXPECT_GT(r2->gpu_util, 0.97);
}

TEST(PlanSim, CacheHitsSkipTheStorage) {
  NodeModel m = Base();
  m.request_bytes = 1e6;
  m.link_bps = 100e6;
  m.workers = 32;
  m.hit_rate = 0.5;  // half the reads from cache: storage carries 100 MB/s = 100 misses/s
  m.cache_bps = 3000e6;
  auto r = Simulate(m);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->samples_per_s, 200, 8);
  EXPECT_NEAR(r->hit_rate, 0.5, 0.05);
}

TEST(PlanSim, LatencyTailShowsAsStallsAndTheSlowestNodeCosts) {
  // Capacity just above demand: 11 workers x (1 ms CPU + 9 ms mean read) = 1100/s.
  NodeModel m = Base();
  m.workers = 11;
  m.latency_s = 0.009;
  m.steps = 400;
  auto flat = Simulate(m);
  m.latency_p99_s = 0.080;
  auto tail = Simulate(m);
  ASSERT_TRUE(flat.ok() && tail.ok());
  EXPECT_LT(flat->stall_p99_s, 1e-6);
  EXPECT_GT(tail->stall_p99_s, 0.001);
  // Synchronous steps over 512 nodes wait for the worst node: more than the mean stall.
  EXPECT_GT(ExpectedMax(tail->stalls, 512), 2 * tail->stall_mean_s);
}

TEST(PlanSim, Deterministic) {
  NodeModel m = Base();
  m.latency_s = 0.005;
  m.latency_p99_s = 0.05;
  auto a = Simulate(m), b = Simulate(m);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->samples_per_s, b->samples_per_s);
  m.seed = 2;
  auto c = Simulate(m);
  EXPECT_NE(a->samples_per_s, c->samples_per_s);
}

TEST(PlanSim, RejectsBadModels) {
  NodeModel m = Base();
  m.step_s = 0;
  EXPECT_FALSE(Simulate(m).ok());
  m = Base();
  m.hit_rate = 1.5;
  EXPECT_FALSE(Simulate(m).ok());
}

TEST(ExpectedMaxTest, HandComputed) {
  // Two equally likely values 0 and 1: max of n draws is 1 unless all are 0.
  EXPECT_DOUBLE_EQ(ExpectedMax({0, 1}, 1), 0.5);
  EXPECT_DOUBLE_EQ(ExpectedMax({1, 0}, 2), 0.75);
  EXPECT_DOUBLE_EQ(ExpectedMax({3, 3, 3}, 100), 3);
  EXPECT_DOUBLE_EQ(ExpectedMax({}, 4), 0);
}

PlanInputs Inputs() {
  PlanInputs in;
  in.gpus = 16;
  in.gpus_per_node = 8;
  in.gpu_samples_per_s = 1000;
  in.batch_size = 50;
  in.dataset_samples = 1000000;
  in.sample_bytes = 100e3;
  in.cpu_ms_per_sample = 2;
  in.storage = *NamedStorage("nvme");
  in.storage.latency_ms = 0;
  in.storage.latency_p99_ms = 0;
  in.storage.node_mb_s = 0;
  return in;
}

TEST(PlanTest, CoresPerGpuAndStorageNeeds) {
  // Per node 8 x 1000 = 8000 samples/s x 2 ms = 16 cores; 15 would give 15/16 = 93.8% < 95%.
  auto r = Plan(Inputs());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->nodes, 2);
  EXPECT_DOUBLE_EQ(r->cores_per_gpu_analytic, 2.0);
  EXPECT_EQ(r->cores_per_node_needed, 16);
  // 8000 samples/s x 100 KB = 800 MB/s and 8000 requests/s per node; twice that in total.
  EXPECT_DOUBLE_EQ(r->storage_mb_s_node, 800);
  EXPECT_DOUBLE_EQ(r->storage_mb_s_total, 1600);
  EXPECT_DOUBLE_EQ(r->storage_req_s_total, 16000);
  EXPECT_GT(r->warm.gpu_util, 0.95);
  EXPECT_EQ(r->bottleneck, "gpu");
}

TEST(PlanTest, GivenTooFewCoresNamesCpu) {
  PlanInputs in = Inputs();
  in.cores_per_node = 8;  // half of the 16 needed: 50%
  auto r = Plan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->bottleneck, "cpu");
  EXPECT_NEAR(r->warm.gpu_util, 0.5, 0.02);
  EXPECT_FALSE(r->notes.empty());
}

TEST(PlanTest, CacheSizingAndColdVersusWarm) {
  PlanInputs in = Inputs();
  in.cores_per_node = 32;
  // Storage: 400 MB/s per node = 4000 samples/s, half of what a node needs.
  in.storage.node_mb_s = 400;
  in.storage.latency_ms = 1;
  // Global reshuffle: each node needs the whole 100 GB dataset cached to always hit.
  in.cache_bytes_per_node = 100e9;
  in.epochs = 3;
  in.target_hit_rate = 0.8;
  auto r = Plan(in);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_DOUBLE_EQ(r->cache_bytes_all, 100e9);
  EXPECT_DOUBLE_EQ(r->cache_bytes_for_target, 80e9);
  EXPECT_NEAR(r->cold.gpu_util, 0.5, 0.03);
  EXPECT_GT(r->warm.gpu_util, 0.95);
  // Cold epoch: 1e6 samples at 2 x 4000/s = 125 s; warm at 16000/s = 62.5 s.
  EXPECT_NEAR(r->cold.epoch_s, 125, 6);
  EXPECT_NEAR(r->warm.epoch_s, 62.5, 3);
  EXPECT_NEAR(r->total_time_s, r->cold.epoch_s + 2 * r->warm.epoch_s, 1e-6);
  // The cache curve: epoch time falls as the cache grows; the last point hits every time.
  ASSERT_EQ(r->cache_vs_epoch.size(), 9u);
  EXPECT_GT(r->cache_vs_epoch.front().y, r->cache_vs_epoch.back().y);
  EXPECT_DOUBLE_EQ(r->cache_vs_epoch.back().y2, 1.0);
  // Node-local shards: a node needs only its half.
  in.global_shuffle = false;
  auto r2 = Plan(in);
  ASSERT_TRUE(r2.ok());
  EXPECT_DOUBLE_EQ(r2->cache_bytes_all, 50e9);
}

TEST(PlanTest, SharedStorageCapsTheCluster) {
  PlanInputs in = Inputs();
  in.cores_per_node = 32;
  in.storage.aggregate_mb_s = 3200;  // 2 nodes need 1600: fine; 8 nodes need 6400: half
  auto r = Plan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->warm.gpu_util, 0.95);
  const CurvePoint* at64 = nullptr;
  for (const auto& p : r->gpus_vs_cores)
    if (p.x == 64) at64 = &p;
  ASSERT_NE(at64, nullptr);
  EXPECT_NEAR(at64->y2, 0.5, 0.03);
  EXPECT_EQ(at64->y, 0);  // not reachable with more cores
}

TEST(PlanTest, GpuDecodePaysWhenCpuShortAndGpuHasHeadroom) {
  PlanInputs in = Inputs();
  in.cores_per_node = 8;      // CPU path: 50%
  in.decode_share = 0.75;     // GPU takes 1.5 of the 2 ms: 8 cores / 0.5 ms = 16000/s
  in.gpu_decode_ms = 0.05;    // 2.5 ms per 50-sample step on a 50 ms step: 5%
  auto r = Plan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->gpu_decode_pays) << r->gpu_decode_reason;
  EXPECT_NEAR(r->gpu_decode.cluster_samples_per_s, 16000 / 1.05, 300);
  // The pipeline's offload model (gpu_decode=auto, the doctor) agrees.
  EXPECT_EQ(r->offload_verdict, "offload") << r->offload_reason;
  // With enough cores the GPU time is pure cost.
  in.cores_per_node = 32;
  auto r2 = Plan(in);
  ASSERT_TRUE(r2.ok());
  EXPECT_FALSE(r2->gpu_decode_pays);
  EXPECT_EQ(r2->offload_verdict, "cpu-keeps-up") << r2->offload_reason;
}

TEST(PlanTest, ContradictoryInputsAreInvalidArgument) {
  auto bad = [](auto f) {
    PlanInputs in = Inputs();
    f(in);
    auto r = Plan(in);
    return !r.ok() && r.status().code() == StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(bad([](PlanInputs& in) { in.gpus = 12; }));                 // 1.5 nodes
  EXPECT_TRUE(bad([](PlanInputs& in) { in.gpus_per_node = 32; }));        // more than gpus
  EXPECT_TRUE(bad([](PlanInputs& in) { in.dataset_samples = 100; }));     // < one global step
  EXPECT_TRUE(bad([](PlanInputs& in) { in.gpu_samples_per_s = 0; }));
  EXPECT_TRUE(bad([](PlanInputs& in) {
    in.storage.latency_ms = 5;
    in.storage.latency_p99_ms = 1;
  }));
  EXPECT_TRUE(bad([](PlanInputs& in) {
    in.layout = Layout::kShards;
    in.shard_bytes = 1e3;
  }));
  EXPECT_TRUE(bad([](PlanInputs& in) { in.target_hit_rate = 0; }));
}

TEST(PlanTest, NamedProfilesAndReports) {
  for (const auto& n : NamedStorageNames()) EXPECT_TRUE(NamedStorage(n).ok()) << n;
  EXPECT_FALSE(NamedStorage("floppy").ok());
  PlanInputs in = Inputs();
  in.storage = *NamedStorage("s3");
  auto r = Plan(in);
  ASSERT_TRUE(r.ok());
  // 16000 GET/s against 5500 per prefix: the note says so, and the rate limits.
  EXPECT_EQ(r->bottleneck, "request rate");
  auto j = nlohmann::json::parse(ReportJson(*r));
  EXPECT_EQ(j["bottleneck"], "request rate");
  EXPECT_EQ(j["curves"]["cache_vs_epoch"].size(), 9u);
  std::string html = ReportHtml(*r);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(FormatReport(*r).find("bottleneck: request rate"), std::string::npos);
}

}  // namespace
}  // namespace stoker::plan
