// The pipeline on real JPEG/PNG files: determinism of decoded, augmented batches across
// thread counts, output shape and normalization, and bad images under both policies.
#include <cstdint>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "codec/image.h"
#include "core/clock.h"
#include "codec/test_images.h"
#include "pipeline/pipeline.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;

class ImagePipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("stoker_imgpipe_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    for (int c = 0; c < 2; ++c) fs::create_directories(dir_ / ("c" + std::to_string(c)));
    for (int i = 0; i < 20; ++i) {
      int w = 120 + 13 * i, h = 90 + 7 * (i % 5);
      auto rgb = testing::SyntheticRgb(w, h, 100 + i);
      std::vector<uint8_t> bytes;
      bool png = i % 7 == 3;
      Status st = png ? EncodePng(rgb.data(), w, h, &bytes) : EncodeJpeg(rgb.data(), w, h, 85, &bytes);
      ASSERT_TRUE(st.ok()) << st.ToString();
      Write(dir_ / ("c" + std::to_string(i % 2)) / ("img" + std::to_string(i) + (png ? ".png" : ".jpg")),
            bytes);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  static void Write(const fs::path& p, const std::vector<uint8_t>& b) {
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), b.size());
  }
  PipelineOptions Opts() {
    PipelineOptions o;
    o.data = dir_.string();
    o.batch_size = 6;
    o.image_size = 32;
    o.seed = 9;
    o.rank = 0;
    o.world_size = 1;
    return o;
  }
  // All batches of one epoch: keys and image bytes.
  static std::pair<std::vector<std::string>, std::vector<uint8_t>> Epoch(Pipeline& p, int e,
                                                                         Status* err) {
    std::vector<std::string> keys;
    std::vector<uint8_t> bytes;
    EXPECT_TRUE(p.StartEpoch(e).ok());
    for (;;) {
      auto b = p.Next();
      if (!b.ok()) {
        if (!IsEndOfStream(b.status())) *err = b.status();
        break;
      }
      const Batch& bt = **b;
      keys.insert(keys.end(), bt.keys.begin(), bt.keys.end());
      auto* d = static_cast<const uint8_t*>(bt.images);
      bytes.insert(bytes.end(), d, d + bt.image_bytes * bt.size);
    }
    return {keys, bytes};
  }
  fs::path dir_;
};

// threads=auto moves to fused workers at an epoch start when reads cost under a tenth of
// the compute. On a fake clock every read takes 0 ns of wall time and every measured piece
// of work 1 ms of thread CPU (FakeClock::SetThreadCpuStep), so the switch happens at epoch
// 1 for sure, whatever the machine's load; the batches must not change with it.
TEST_F(ImagePipeline, AutoSwitchesToFusedWorkersWhenReadsAreCheapWithoutChangingBatches) {
  FakeClock clock;
  clock.SetThreadCpuStep(1'000'000);
  auto o = Opts();
  o.threads = 0;
  o.cpu_budget = 2;
  o.clock = &clock;
  auto p = Pipeline::Create(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto o1 = Opts();
  o1.threads = 1;
  auto ref = Pipeline::Create(o1);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  for (int e = 0; e < 3; ++e) {
    Status err, err1;
    auto got = Epoch(**p, e, &err);
    auto want = Epoch(**ref, e, &err1);
    ASSERT_TRUE(err.ok() && err1.ok()) << err.ToString() << err1.ToString();
    EXPECT_EQ(got.first, want.first) << "epoch " << e;
    EXPECT_TRUE(got.second == want.second) << "epoch " << e;
  }
  PipelineStats st = (*p)->Stats();
  bool switched = false;
  for (const auto& t : st.tuning) switched |= t.what.find("fused workers") != std::string::npos;
  EXPECT_TRUE(switched);
  EXPECT_EQ(st.threads, st.stages[0].threads);  // fused: the read threads are all there is
  EXPECT_EQ(st.stages[0].threads, st.stages[1].threads);
}

TEST_F(ImagePipeline, IdenticalBatchesForOneAndManyThreads) {
  std::vector<uint8_t> ref;
  std::vector<std::string> ref_keys;
  for (int threads : {1, 3, 0}) {
    auto o = Opts();
    o.threads = threads;
    auto p = Pipeline::Create(o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    Status err;
    auto [keys, bytes] = Epoch(**p, 1, &err);
    ASSERT_TRUE(err.ok()) << err.ToString();
    ASSERT_EQ(keys.size(), 20u);
    ASSERT_EQ(bytes.size(), 20u * 3 * 32 * 32 * sizeof(float));
    if (ref.empty()) {
      ref = bytes;
      ref_keys = keys;
    }
    EXPECT_EQ(keys, ref_keys) << "threads " << threads;
    EXPECT_TRUE(bytes == ref) << "threads " << threads;
  }
  // Another epoch draws other crops.
  auto p = Pipeline::Create(Opts());
  Status err;
  auto [keys, bytes] = Epoch(**p, 2, &err);
  EXPECT_NE(bytes, ref);
}

TEST_F(ImagePipeline, NormalizedFloatOutputIsInRangeAndUint8LayoutWorks) {
  auto o = Opts();
  o.mode = DecodeMode::kVal;
  auto p = Pipeline::Create(o);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->StartEpoch(0).ok());
  auto b = (*p)->Next();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const Batch& bt = **b;
  EXPECT_EQ(bt.layout, OutputLayout::kFloatCHW);
  const float* f = static_cast<const float*>(bt.images);
  double lo = 1e9, hi = -1e9, sum = 0;
  size_t n = bt.image_bytes / sizeof(float) * bt.size;
  for (size_t i = 0; i < n; ++i) {
    lo = std::min<double>(lo, f[i]);
    hi = std::max<double>(hi, f[i]);
    sum += f[i];
  }
  // (x/255 - mean)/std for x in 0..255 lies in [-2.12, 2.64].
  EXPECT_GE(lo, -2.2);
  EXPECT_LE(hi, 2.7);
  EXPECT_GT(hi - lo, 1.0);  // not a constant image

  o.output.layout = OutputLayout::kUint8HWC;
  auto q = Pipeline::Create(o);
  ASSERT_TRUE((*q)->StartEpoch(0).ok());
  auto c = (*q)->Next();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->image_bytes, 32u * 32 * 3);
  // Validation mode is deterministic: the same keys as the float run, same pixels up to
  // normalization (check one pixel).
  EXPECT_EQ((*c)->keys, bt.keys);
  const uint8_t* u = static_cast<const uint8_t*>((*c)->images);
  float expect = (u[0] - 0.485f * 255) / (0.229f * 255);  // pixel (0,0) channel R
  // The uint8 pixel is the float one rounded to the nearest level: half a level apart.
  EXPECT_NEAR(f[0], expect, 0.5f / (0.229f * 255) + 1e-4f);
}

TEST_F(ImagePipeline, CorruptAndTruncatedImages) {
  std::vector<uint8_t> good;
  auto rgb = testing::SyntheticRgb(200, 150, 5);
  ASSERT_TRUE(EncodeJpeg(rgb.data(), 200, 150, 85, &good).ok());
  std::vector<uint8_t> truncated(good.begin(), good.begin() + good.size() / 3);
  Write(dir_ / "c0" / "zz_truncated.jpg", truncated);
  Write(dir_ / "c1" / "zz_garbage.jpg", std::vector<uint8_t>(300, 0x42));
  {
    auto o = Opts();
    o.shuffle = false;
    auto p = Pipeline::Create(o);
    Status err;
    auto [keys, bytes] = Epoch(**p, 0, &err);
    ASSERT_FALSE(err.ok());
    EXPECT_NE(err.message().find("zz_truncated.jpg"), std::string::npos) << err.message();
  }
  {
    auto o = Opts();
    o.on_error = ErrorPolicy::kSkip;
    o.threads = 2;
    auto p = Pipeline::Create(o);
    Status err;
    auto [keys, bytes] = Epoch(**p, 0, &err);
    ASSERT_TRUE(err.ok()) << err.ToString();
    EXPECT_EQ(keys.size(), 20u);
    PipelineStats st = (*p)->Stats();
    EXPECT_EQ(st.skipped, 2u);
    std::string all;
    for (auto& s : st.skipped_items) all += s + "\n";
    EXPECT_NE(all.find("zz_truncated"), std::string::npos) << all;
    EXPECT_NE(all.find("zz_garbage"), std::string::npos) << all;
  }
}

}  // namespace
}  // namespace stoker
