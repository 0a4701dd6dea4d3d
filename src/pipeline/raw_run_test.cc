// The pipeline's raw run path (Dataset::ReadRawRun, what a Kafka topic read with value=raw
// takes): a source that reads runs must give the same batches as the same source read one
// Read per sample, with failures inside a run named and skipped or failed as for Read,
// equal batch counts per rank, and exact resume with runs in flight.
#include <cstdint>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "formats/dataset.h"
#include "pipeline/pipeline.h"

namespace stoker {
namespace {

std::atomic<uint64_t> g_run_calls{0}, g_run_samples{0}, g_reads{0};
std::atomic<int> g_run_sleep_ms{0};

// "runs:N:SHARDS:BAD,BAD:R": N samples in SHARDS equal shards ("partitions"); sample i is
// the bytes "value-<i>" repeated 1 + i % 5 times, key "t/<i>"; the BAD indices fail with
// kCorrupt naming them; R = 1 reads raw runs, 0 only Read (the reference).
class RunDataset final : public Dataset {
 public:
  RunDataset(uint64_t n, int shards, std::set<uint64_t> bad, bool runs)
      : n_(n), bad_(std::move(bad)), runs_(runs) {
    for (int s = 0; s < shards; ++s) {
      ShardInfo si;
      si.path = "part-" + std::to_string(s);
      si.begin = n * s / shards;
      si.end = n * (s + 1) / shards;
      shards_.push_back(si);
    }
  }
  uint64_t size() const override { return n_; }
  const std::vector<ShardInfo>& shards() const override { return shards_; }
  std::string format() const override { return "runs"; }
  std::string Key(uint64_t i) const override { return "t/" + std::to_string(i); }
  std::string Location(uint64_t i) const override { return "runs offset " + std::to_string(i); }
  int max_read_threads() const override { return static_cast<int>(shards_.size()); }
  static std::string Value(uint64_t i) {
    std::string v;
    for (uint64_t k = 0; k <= i % 5; ++k) v += "value-" + std::to_string(i);
    return v;
  }
  Status Read(uint64_t i, Sample* out) const override {
    g_reads++;
    out->Clear();
    out->key = Key(i);
    out->location = Location(i);
    if (bad_.count(i)) return Corrupt("runs: offset {} is malformed", i);
    std::string v = Value(i);
    out->AddField("bin")->data.assign(v.begin(), v.end());
    return Status::OK();
  }
  bool CanReadRawRun(const std::string& field) const override {
    return runs_ && (field.empty() || field == "bin");
  }
  void ReadRawRun(const uint64_t* indices, size_t n, RawRunSink* sink) const override {
    g_run_calls++;
    g_run_samples += n;
    if (int ms = g_run_sleep_ms.load()) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    for (size_t k = 0; k < n; ++k) {
      uint64_t i = indices[k];
      if (bad_.count(i)) {
        sink->Fail(k, Corrupt("runs: offset {} is malformed", i));
        continue;
      }
      std::string v = Value(i);
      sink->Deliver(k, Key(i), reinterpret_cast<const uint8_t*>(v.data()), v.size());
    }
  }

 private:
  uint64_t n_;
  std::set<uint64_t> bad_;
  bool runs_;
  std::vector<ShardInfo> shards_;
};

void RegisterRuns() {
  static bool once = [] {
    RegisterDatasetFormat(
        {"runs", {}, [](const std::string& spec, const DatasetOptions&) -> Result<std::unique_ptr<Dataset>> {
           // N:SHARDS:BAD,BAD:R
           std::vector<std::string> parts;
           size_t b = 0;
           for (;;) {
             size_t e = spec.find(':', b);
             parts.push_back(spec.substr(b, e == std::string::npos ? e : e - b));
             if (e == std::string::npos) break;
             b = e + 1;
           }
           if (parts.size() != 4) return InvalidArgument("runs: N:SHARDS:BAD:R");
           std::set<uint64_t> bad;
           size_t p = 0;
           while (p < parts[2].size()) {
             size_t c = parts[2].find(',', p);
             bad.insert(std::stoull(parts[2].substr(p, c == std::string::npos ? c : c - p)));
             if (c == std::string::npos) break;
             p = c + 1;
           }
           return std::unique_ptr<Dataset>(new RunDataset(std::stoull(parts[0]), std::stoi(parts[1]),
                                                          std::move(bad), parts[3] == "1"));
         },
         "test: raw runs"});
    return true;
  }();
  (void)once;
}

struct Out {
  std::vector<std::string> keys, values;
  std::vector<int64_t> labels;
  std::vector<int> sizes;
  Status error;
  uint64_t skipped = 0;
};

PipelineOptions Opts(const std::string& bad, bool runs) {
  RegisterRuns();
  PipelineOptions o;
  o.data = "runs:300:4:" + bad + ":" + (runs ? "1" : "0");
  o.mode = DecodeMode::kRaw;
  o.batch_size = 16;
  o.seed = 5;
  o.shuffle_buffer = 64;
  return o;
}

Out Collect(Pipeline& p, int epoch = 0, uint64_t start = 0, int max_batches = -1) {
  Out r;
  EXPECT_TRUE(p.StartEpoch(epoch, start).ok());
  for (int k = 0; max_batches < 0 || k < max_batches; ++k) {
    auto b = p.Next();
    if (!b.ok()) {
      if (!IsEndOfStream(b.status())) r.error = b.status();
      break;
    }
    const Batch& bt = **b;
    r.sizes.push_back(bt.size);
    EXPECT_EQ(bt.raw_offsets.size(), static_cast<size_t>(bt.size) + 1);
    EXPECT_EQ(bt.raw_offsets.back(), bt.raw.size());
    for (int i = 0; i < bt.size; ++i) {
      r.keys.push_back(bt.keys[i]);
      r.labels.push_back(bt.labels[i]);
      r.values.emplace_back(bt.raw.begin() + static_cast<ptrdiff_t>(bt.raw_offsets[i]),
                            bt.raw.begin() + static_cast<ptrdiff_t>(bt.raw_offsets[i + 1]));
    }
  }
  r.skipped = p.Stats().skipped;
  return r;
}

Out RunAll(PipelineOptions o, int epoch = 0) {
  auto p = Pipeline::Create(o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return {};
  return Collect(**p, epoch);
}

TEST(RawRuns, SameBatchesAsOneReadPerSample) {
  for (bool shuffle : {false, true}) {
    for (int threads : {0, 1, 3}) {
      auto o = Opts("", true);
      o.shuffle = shuffle;
      o.threads = threads;
      auto ref_o = o;
      ref_o.data = Opts("", false).data;
      g_run_calls = g_reads = 0;
      Out got = RunAll(o, 1);
      EXPECT_GT(g_run_calls.load(), 0u);
      EXPECT_EQ(g_reads.load(), 0u) << "the run path read samples one by one";
      // One call per batch (the whole batch is one run).
      EXPECT_EQ(g_run_calls.load(), (300u + 15) / 16);
      Out ref = RunAll(ref_o, 1);
      EXPECT_EQ(g_reads.load(), 300u);
      ASSERT_TRUE(got.error.ok()) << got.error.ToString();
      EXPECT_EQ(got.keys, ref.keys) << "shuffle " << shuffle << " threads " << threads;
      EXPECT_EQ(got.values, ref.values);
      EXPECT_EQ(got.labels, ref.labels);
      EXPECT_EQ(got.sizes, ref.sizes);
      ASSERT_EQ(got.keys.size(), 300u);
      for (size_t k = 0; k < got.keys.size(); ++k)
        EXPECT_EQ(got.values[k], RunDataset::Value(std::stoull(got.keys[k].substr(2))));
    }
  }
}

TEST(RawRuns, AMalformedSampleInsideARunIsNamedAfterTheEarlierBatches) {
  auto o = Opts("37", true);
  o.shuffle = false;  // sample 37 at position 37: batch 2
  Out r = RunAll(o);
  ASSERT_FALSE(r.error.ok());
  EXPECT_EQ(r.error.code(), StatusCode::kCorrupt);
  EXPECT_NE(r.error.message().find("sample 't/37' (runs offset 37)"), std::string::npos)
      << r.error.ToString();
  EXPECT_NE(r.error.message().find("offset 37 is malformed"), std::string::npos);
  EXPECT_EQ(r.sizes, (std::vector<int>{16, 16}));  // the batches before it were delivered
  // The same error as one Read per sample gives.
  o.data = Opts("37", false).data;
  Out ref = RunAll(o);
  EXPECT_EQ(ref.error.message(), r.error.message());
}

TEST(RawRuns, SkipModeCountsEveryFailedSampleOfARunAndLosesNothingElse) {
  for (bool shuffle : {false, true}) {
    auto o = Opts("0,15,16,17,150,299", true);
    o.on_error = ErrorPolicy::kSkip;
    o.shuffle = shuffle;
    Out r = RunAll(o);
    ASSERT_TRUE(r.error.ok()) << r.error.ToString();
    EXPECT_EQ(r.skipped, 6u);
    EXPECT_EQ(r.keys.size(), 294u);
    std::set<std::string> keys(r.keys.begin(), r.keys.end());
    EXPECT_EQ(keys.size(), 294u);
    for (uint64_t bad : {0, 15, 16, 17, 150, 299}) EXPECT_EQ(keys.count("t/" + std::to_string(bad)), 0u);
    for (size_t k = 0; k < r.keys.size(); ++k)
      EXPECT_EQ(r.values[k], RunDataset::Value(std::stoull(r.keys[k].substr(2))));
    // Batches are compacted as with Read: the same sizes, keys and bytes.
    auto ref_o = o;
    ref_o.data = Opts("0,15,16,17,150,299", false).data;
    Out ref = RunAll(ref_o);
    EXPECT_EQ(r.sizes, ref.sizes);
    EXPECT_EQ(r.keys, ref.keys);
    EXPECT_EQ(r.values, ref.values);
  }
}

TEST(RawRuns, RanksGetEqualBatchCountsAndDisjointSamples) {
  std::set<std::string> all;
  std::vector<size_t> batches;
  for (int rank = 0; rank < 3; ++rank) {
    auto o = Opts("", true);
    o.rank = rank;
    o.world_size = 3;
    auto p = Pipeline::Create(o);
    ASSERT_TRUE(p.ok());
    Out r = Collect(**p);
    ASSERT_TRUE(r.error.ok());
    batches.push_back(r.sizes.size());
    EXPECT_EQ(r.sizes.size(), (*p)->batches_per_epoch());
    for (const auto& k : r.keys) EXPECT_TRUE(all.insert(k).second) << k << " on two ranks";
  }
  EXPECT_EQ(batches, (std::vector<size_t>{7, 7, 7}));  // 100 samples per rank, batches of 16
  EXPECT_EQ(all.size(), 300u);
}

// Runs admitted ahead of the consumer (prefetch) are in flight when the job stops; the
// resume delivers exactly what the consumer had not received, whatever was read.
TEST(RawRuns, ResumeIsExactWithRunsInFlight) {
  auto o = Opts("", true);
  o.prefetch = 4;
  Out full = RunAll(o, 2);
  ASSERT_EQ(full.keys.size(), 300u);
  for (int stop_after : {1, 5, 18}) {
    auto p = Pipeline::Create(o);
    ASSERT_TRUE(p.ok());
    Out head = Collect(**p, 2, 0, stop_after);
    (*p)->Stop();
    p->reset();
    auto q = Pipeline::Create(o);
    ASSERT_TRUE(q.ok());
    Out tail = Collect(**q, 2, static_cast<uint64_t>(stop_after));
    std::vector<std::string> keys = head.keys;
    keys.insert(keys.end(), tail.keys.begin(), tail.keys.end());
    EXPECT_EQ(keys, full.keys) << "stopped after " << stop_after;
    // Elastic: the same position at world size 2 covers the rest once.
    auto e = o;
    e.world_size = 2;
    std::set<std::string> rest;
    for (int rank = 0; rank < 2; ++rank) {
      e.rank = rank;
      auto r = Pipeline::Create(e);
      ASSERT_TRUE(r.ok());
      ASSERT_TRUE((*r)->ResumeEpoch(2, static_cast<uint64_t>(stop_after) * 16).ok());
      for (;;) {
        auto b = (*r)->Next();
        if (!b.ok()) break;
        for (int i = 0; i < (*b)->size; ++i) EXPECT_TRUE(rest.insert((*b)->keys[i]).second);
      }
    }
    std::set<std::string> want(full.keys.begin() + stop_after * 16, full.keys.end());
    EXPECT_EQ(rest, want);
  }
}

// Stopping while runs are being read (and destroying the pipeline) joins cleanly; the
// runs write into batches that stay alive (ASan checks).
TEST(RawRuns, StopWithRunsInFlightIsClean) {
  auto o = Opts("", true);
  o.threads = 2;
  g_run_sleep_ms = 20;
  {
    auto p = Pipeline::Create(o);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE((*p)->StartEpoch(0).ok());
    auto b = (*p)->Next();
    ASSERT_TRUE(b.ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  g_run_sleep_ms = 0;
}

}  // namespace
}  // namespace stoker
