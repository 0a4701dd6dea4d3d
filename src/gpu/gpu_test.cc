// The GPU path without a GPU: the header probe and routing on real JPEGs written by
// libjpeg-turbo (baseline, progressive, arithmetic, CMYK, corrupt), the offload model on
// scripted measurements, the fused kernel's math against the CPU path, and the device
// stage end to end on a fake CUDA table whose "device" is the host (fake_cuda.h).
#include <cstdint>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "codec/image.h"
#include "codec/test_images.h"
#include "gpu/device_pipeline.h"
#include "gpu/device_stage.h"
#include "gpu/fake_cuda.h"
#include "gpu/jpeg_probe.h"
#include "gpu/offload_model.h"
#include "gpu/resize_kernel.h"
#include "gpu/route.h"
#include "ops/image_ops.h"

namespace stoker::gpu {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> Jpeg(int w, int h, uint64_t seed, JpegEncodeOptions o = {}) {
  std::vector<uint8_t> rgb = stoker::testing::SyntheticRgb(w, h, seed);
  std::vector<uint8_t> px;
  if (o.components == 4) {
    px.resize(static_cast<size_t>(w) * h * 4);
    for (size_t i = 0; i < static_cast<size_t>(w) * h; ++i) {
      px[4 * i] = 255 - rgb[3 * i];
      px[4 * i + 1] = 255 - rgb[3 * i + 1];
      px[4 * i + 2] = 255 - rgb[3 * i + 2];
      px[4 * i + 3] = 0;
    }
  } else if (o.components == 1) {
    px.resize(static_cast<size_t>(w) * h);
    for (size_t i = 0; i < px.size(); ++i) px[i] = rgb[3 * i + 1];
  } else {
    px = rgb;
  }
  std::vector<uint8_t> out;
  EXPECT_TRUE(EncodeJpegEx(px.data(), w, h, o, &out).ok());
  return out;
}

JpegEncodeOptions Progressive() {
  JpegEncodeOptions o;
  o.progressive = true;
  return o;
}
JpegEncodeOptions Arithmetic() {
  JpegEncodeOptions o;
  o.arithmetic = true;
  return o;
}
JpegEncodeOptions Cmyk() {
  JpegEncodeOptions o;
  o.components = 4;
  return o;
}
JpegEncodeOptions Gray() {
  JpegEncodeOptions o;
  o.components = 1;
  return o;
}

// ---- probe and routes ---------------------------------------------------------------

TEST(JpegProbe, ReadsTheFrameOfEachKind) {
  auto base = Jpeg(64, 48, 1);
  auto t = ProbeJpeg(base.data(), base.size());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->coding, JpegCoding::kBaseline);
  EXPECT_EQ(t->width, 64);
  EXPECT_EQ(t->height, 48);
  EXPECT_EQ(t->components, 3);
  EXPECT_EQ(t->precision, 8);
  EXPECT_EQ(t->sampling[0], 0x22);  // 4:2:0
  EXPECT_FALSE(t->arithmetic);

  auto prog = Jpeg(64, 48, 2, Progressive());
  t = ProbeJpeg(prog.data(), prog.size());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->coding, JpegCoding::kProgressive);

  auto arith = Jpeg(64, 48, 3, Arithmetic());
  t = ProbeJpeg(arith.data(), arith.size());
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->arithmetic);
  EXPECT_EQ(t->coding, JpegCoding::kArithmetic);

  auto cmyk = Jpeg(40, 30, 4, Cmyk());
  t = ProbeJpeg(cmyk.data(), cmyk.size());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->components, 4);
  EXPECT_TRUE(t->adobe);
  EXPECT_TRUE(t->cmyk());
}

TEST(JpegProbe, CorruptHeadersNameTheOffset) {
  auto base = Jpeg(64, 48, 1);
  // Every truncation of the header is an error, never a crash or a bogus success.
  auto t = ProbeJpeg(base.data(), base.size());
  ASSERT_TRUE(t.ok());
  size_t sos = 0;
  for (size_t i = 2; i + 1 < base.size(); ++i)
    if (base[i] == 0xFF && base[i + 1] == 0xDA) {
      sos = i;
      break;
    }
  ASSERT_GT(sos, 20u);
  for (size_t n = 0; n < sos + 4; ++n) {
    auto r = ProbeJpeg(base.data(), n);
    EXPECT_FALSE(r.ok()) << n;
    if (!r.ok()) EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  }
  std::vector<uint8_t> junk = {0xFF, 0xD8, 0xFF, 0xE0, 0xFF, 0xFF, 1, 2, 3};
  auto r = ProbeJpeg(junk.data(), junk.size());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("offset 2"), std::string::npos) << r.status().message();
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  EXPECT_FALSE(ProbeJpeg(png.data(), png.size()).ok());
}

TEST(Route, SendsWhatNvjpegRefusesToTheCpuAndSplitsTheRestBySize) {
  HybridPolicy p;
  p.device_huffman_min_pixels = 100 * 100;
  struct Case {
    std::vector<uint8_t> bytes;
    DecodeRoute route;
    FallbackReason reason;
  };
  std::vector<uint8_t> corrupt = Jpeg(64, 48, 9);
  corrupt.resize(40);
  std::vector<uint8_t> png;
  auto rgb = stoker::testing::SyntheticRgb(16, 16, 3);
  ASSERT_TRUE(EncodePng(rgb.data(), 16, 16, &png).ok());
  std::vector<Case> cases = {
      {Jpeg(64, 48, 1), DecodeRoute::kGpuHostHuffman, FallbackReason::kNone},
      {Jpeg(128, 100, 1), DecodeRoute::kGpuDeviceHuffman, FallbackReason::kNone},
      {Jpeg(100, 100, 1), DecodeRoute::kGpuHostHuffman, FallbackReason::kNone},  // not above
      {Jpeg(64, 48, 1, Gray()), DecodeRoute::kGpuHostHuffman, FallbackReason::kNone},
      {Jpeg(64, 48, 2, Progressive()), DecodeRoute::kCpu, FallbackReason::kProgressive},
      {Jpeg(64, 48, 3, Arithmetic()), DecodeRoute::kCpu, FallbackReason::kArithmetic},
      {Jpeg(64, 48, 4, Cmyk()), DecodeRoute::kCpu, FallbackReason::kCmyk},
      {corrupt, DecodeRoute::kCpu, FallbackReason::kCorrupt},
      {png, DecodeRoute::kCpu, FallbackReason::kNotJpeg},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    RouteDecision d = RouteImage(cases[i].bytes.data(), cases[i].bytes.size(), p);
    EXPECT_EQ(d.route, cases[i].route) << i << " " << DecodeRouteName(d.route);
    EXPECT_EQ(d.reason, cases[i].reason) << i << " " << FallbackReasonName(d.reason);
  }
  // Without the GPU-hybrid backend every image's Huffman stage runs on the CPU.
  p.device_huffman_available = false;
  EXPECT_EQ(RouteImage(cases[1].bytes.data(), cases[1].bytes.size(), p).route,
            DecodeRoute::kGpuHostHuffman);
  // SplitBatch keeps batch order within each route.
  std::vector<const uint8_t*> ptr;
  std::vector<size_t> len;
  for (auto& c : cases) {
    ptr.push_back(c.bytes.data());
    len.push_back(c.bytes.size());
  }
  p.device_huffman_available = true;
  BatchSplit s = SplitBatch(ptr, len, p);
  EXPECT_EQ(s.host_huffman, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(s.device_huffman, (std::vector<int>{1}));
  EXPECT_EQ(s.cpu, (std::vector<int>{4, 5, 6, 7, 8}));
  FallbackCounts fc;
  for (int i : s.cpu) fc.Add(s.decisions[i].reason);
  EXPECT_EQ(fc.total(), 5);
  EXPECT_EQ(fc.ToString(), "not-jpeg=1 cmyk=1 progressive=1 arithmetic=1 corrupt=1");
}

// ---- the offload model ----------------------------------------------------------------

TEST(OffloadModel, DecidesFromTheNumbers) {
  OffloadInputs in;
  in.cpu_cores = 8;
  in.cpu_s_per_image = 8e-3;  // 1000 images/s on 8 cores
  in.gpu_busy_frac = 0.5;
  in.required_images_per_s = 800;
  EXPECT_EQ(DecideOffload(in).verdict, OffloadVerdict::kCpuKeepsUp);

  in.required_images_per_s = 3000;  // the CPU path feeds a third of it
  OffloadDecision d = DecideOffload(in);
  EXPECT_EQ(d.verdict, OffloadVerdict::kOffload) << d.reason;
  EXPECT_TRUE(d.use_gpu);
  EXPECT_NEAR(d.cpu_rate, 1000, 1e-6);
  // The GPU has (0.5 - 0.05 reserve) / 0.25 ms = 1800 images/s to give; the host part
  // (30 % of 8 ms on 8 cores) 3333: the GPU path delivers 1800, using 45 % of the GPU.
  EXPECT_NEAR(d.gpu_rate, 1800, 1e-6);
  EXPECT_NEAR(d.gpu_load_added, 1800 * 0.25e-3, 1e-9);
  EXPECT_NE(d.reason.find("1000 of the 3000"), std::string::npos) << d.reason;

  in.gpu_busy_frac = 0.97;  // compute-bound already: no headroom
  d = DecideOffload(in);
  EXPECT_EQ(d.verdict, OffloadVerdict::kGpuBusy) << d.reason;
  EXPECT_FALSE(d.use_gpu);

  in.gpu_busy_frac = 0.3;
  in.host_s_per_image = 8e-3;  // the GPU path would leave all the host work: no gain
  EXPECT_EQ(DecideOffload(in).verdict, OffloadVerdict::kNoGain);

  in.host_s_per_image = 0;
  in.required_images_per_s = 0;
  EXPECT_EQ(DecideOffload(in).verdict, OffloadVerdict::kUnknown);
  in.required_images_per_s = 3000;
  in.gpu_busy_frac = -1;
  EXPECT_EQ(DecideOffload(in).verdict, OffloadVerdict::kUnknown);
  in.cpu_s_per_image = 0;
  EXPECT_EQ(DecideOffload(in).verdict, OffloadVerdict::kUnknown);
}

TEST(AutoOffload, WaitsForAWindowThenDecidesAndHolds) {
  FakeClock clock;
  AutoOffload::Config cfg;
  cfg.window_s = 5;
  cfg.min_images = 100;
  cfg.min_dwell_s = 30;
  AutoOffload a(cfg, 4, &clock);
  // Input-bound: 4 cores at 10 ms/image = 400 images/s; the step would take 1200/s (it
  // waited for data 2/3 of the time).
  auto feed_cpu_window = [&](double gpu_busy) {
    for (int s = 0; s < 6; ++s) {
      clock.AdvanceMillis(1000);
      a.ObserveCpuDecode(4.0, 400);  // 4 cores busy for the second: 400 images
      a.ObserveConsumed(400);
      a.ObserveConsumerWait(2.0 / 3.0);
      a.ObserveGpuBusy(gpu_busy);
    }
  };
  clock.AdvanceMillis(1000);
  EXPECT_FALSE(a.Decide().use_gpu);  // window not complete
  EXPECT_EQ(a.Decide().verdict, OffloadVerdict::kUnknown);
  feed_cpu_window(0.30);
  const OffloadDecision& d = a.Decide();
  EXPECT_TRUE(d.use_gpu) << d.reason;
  // The CPU path's cost is kept from its last window (the GPU path does not measure it).
  EXPECT_NEAR(a.inputs().cpu_s_per_image, 0.01, 1e-12);
  a.ObserveGpuPath(0.25e-3, 2e-3);
  auto gpu_seconds = [&](int seconds, int64_t images_per_s, double busy) {
    for (int s = 0; s < seconds; ++s) {
      clock.AdvanceMillis(1000);
      a.ObserveConsumed(images_per_s);
      a.ObserveGpuBusy(busy);
    }
  };
  // Within the dwell the decision holds whatever the numbers say.
  gpu_seconds(6, 1200, 1.0);
  EXPECT_TRUE(a.Decide().use_gpu);
  // After the dwell: 99 % busy of which 1200/s * 0.25 ms = 30 % is ours: the step leaves
  // 31 % free, enough for 1040 images/s, more than the CPU path's 400: stays on the GPU.
  gpu_seconds(36, 1200, 0.99);
  const OffloadDecision& d2 = a.Decide();
  EXPECT_EQ(d2.verdict, OffloadVerdict::kOffload) << d2.reason;
  // The step becomes compute-bound: the GPU is 100 % busy, only 10 % of it ours, and the
  // step takes 400 images/s. The GPU could give 200 images/s: back to the CPU path.
  gpu_seconds(36, 400, 1.0);
  const OffloadDecision& d3 = a.Decide();
  EXPECT_EQ(d3.verdict, OffloadVerdict::kGpuBusy) << d3.reason;
  EXPECT_FALSE(d3.use_gpu);
}

// ---- the kernel's math against the CPU path ---------------------------------------------

TEST(ResizeKernel, HostRunMatchesTheCpuPathOnTheSamePlan) {
  Rng rng(7);
  int worst_u8 = 0;
  double worst_f = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const int w = 40 + static_cast<int>(rng.Int(0, 300)), h = 40 + static_cast<int>(rng.Int(0, 300));
    auto jpg = Jpeg(w, h, trial);
    DecodedImage img;
    DecodeRequest req;
    req.allow_dct_scale = false;
    ASSERT_TRUE(DecodeImage(jpg.data(), jpg.size(), req, &img).ok());
    OutputSpec spec;
    spec.width = 16 + static_cast<int>(rng.Int(0, 100));
    spec.height = 16 + static_cast<int>(rng.Int(0, 100));
    spec.layout = trial % 2 ? OutputLayout::kUint8HWC : OutputLayout::kFloatCHW;
    ResizePlan plan;
    if (trial % 3 == 2) {
      plan = CenterCropResizePlan(img, CenterCropRectFor(w, h, spec.width + 8, spec.width));
      spec.height = spec.width;
    } else {
      RandomResizedCropParams p;
      plan = CropResizePlan(img, RandomResizedCropRect(w, h, p, rng));
    }
    const bool flip = trial % 4 == 1;
    std::vector<uint8_t> cpu(spec.bytes()), gpu(spec.bytes());
    ResizeScratch scratch;
    ApplyResizePlan(img, plan, flip, spec, cpu.data(), &scratch);
    ResizeJob j = JobFromPlan(plan, img.width, img.height, flip);
    j.src = reinterpret_cast<uintptr_t>(img.pixels.data());
    j.dst = reinterpret_cast<uintptr_t>(gpu.data());
    ResizeLaunch L;
    L.out_w = spec.width;
    L.out_h = spec.height;
    L.layout_uint8 = spec.layout == OutputLayout::kUint8HWC;
    for (int c = 0; c < 3; ++c) {
      L.scale[c] = L.layout_uint8 ? 1.f : 1.f / spec.std[c];
      L.bias[c] = L.layout_uint8 ? 0.f : -spec.mean[c] / spec.std[c];
    }
    L.num_jobs = 1;
    RunResizeJobsOnHost(&j, L);
    if (L.layout_uint8) {
      worst_u8 = std::max(worst_u8, stoker::testing::MaxAbsDiff(cpu.data(), gpu.data(), cpu.size()));
    } else {
      const float* a = reinterpret_cast<const float*>(cpu.data());
      const float* b = reinterpret_cast<const float*>(gpu.data());
      for (size_t i = 0; i < cpu.size() / 4; ++i) worst_f = std::max(worst_f, double(std::fabs(a[i] - b[i])));
    }
  }
  // Same taps and weights, another summation order: float rounding only (docs/gpu.md).
  EXPECT_LE(worst_u8, 1);
  EXPECT_LT(worst_f, 1e-4);
}

// ---- the device stage on the fake table --------------------------------------------------

class DeviceStageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("stoker_gpu_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    int k = 0;
    auto put = [&](int cls, const std::vector<uint8_t>& b) {
      fs::create_directories(dir_ / ("c" + std::to_string(cls)));
      std::ofstream f(dir_ / ("c" + std::to_string(cls)) / fmt::format("{:03d}.jpg", k++),
                      std::ios::binary);
      f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    };
    for (int i = 0; i < 14; ++i) put(i % 2, Jpeg(60 + 7 * i, 50 + 5 * i, 100 + i));
    put(0, Jpeg(90, 70, 1, Progressive()));
    put(1, Jpeg(90, 70, 2, Arithmetic()));
    put(0, Jpeg(90, 70, 3, Cmyk()));
    put(1, Jpeg(80, 60, 4, Gray()));
    std::vector<uint8_t> corrupt = Jpeg(80, 60, 5);
    corrupt.resize(30);
    put(0, corrupt);
    rejected_ = Jpeg(77, 66, 6);
    put(1, rejected_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  PipelineOptions Opts(DecodeMode mode) {
    PipelineOptions o;
    o.data = dir_.string();
    o.mode = mode;
    o.image_size = 32;
    o.val_resize = 40;
    o.output.width = o.output.height = 32;
    o.batch_size = 8;
    o.seed = 5;
    o.rank = 0;
    o.world_size = 1;
    o.threads = 1;
    o.on_error = ErrorPolicy::kSkip;
    o.dct_scale = false;      // the GPU path decodes at full size: compare like with like
    o.region_decode = false;
    return o;
  }

  // Dataset index -> output image of a CPU pipeline run.
  std::map<uint64_t, std::vector<uint8_t>> CpuRun(const PipelineOptions& o, int epoch) {
    std::map<uint64_t, std::vector<uint8_t>> m;
    auto p = Pipeline::Create(o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_TRUE((*p)->StartEpoch(epoch).ok());
    while (true) {
      auto b = (*p)->Next();
      if (!b.ok()) break;
      const Batch& bt = **b;
      for (int i = 0; i < bt.size; ++i) {
        const uint8_t* s = static_cast<const uint8_t*>(bt.images) + i * bt.image_bytes;
        m[bt.sample_indices[i]].assign(s, s + bt.image_bytes);
      }
    }
    return m;
  }

  fs::path dir_;
  std::vector<uint8_t> rejected_;
};

TEST_F(DeviceStageTest, MatchesTheCpuPathRoutesAndCountsFallbacks) {
  for (DecodeMode mode : {DecodeMode::kTrain, DecodeMode::kVal}) {
    testing::FakeCuda fake;
    fake.reject_bytes.push_back(rejected_);
    PipelineOptions o = Opts(mode);
    DeviceStageConfig cfg;
    cfg.hybrid.device_huffman_min_pixels = 100 * 80;
    auto stage = DeviceStage::Create(fake.api(), o, cfg);
    ASSERT_TRUE(stage.ok()) << stage.status().ToString();
    EXPECT_EQ(fake.kernel_name, kResizeKernelName);
    PipelineOptions ro = o;
    ro.mode = DecodeMode::kRaw;
    ro.raw_field = "jpg";
    auto raw = Pipeline::Create(ro);
    ASSERT_TRUE(raw.ok()) << raw.status().ToString();
    const int epoch = 1;
    auto cpu = CpuRun(o, epoch);
    ASSERT_TRUE((*raw)->StartEpoch(epoch).ok());
    CUstream consumer = fake.NewStream();
    std::set<uint64_t> seen;
    float worst = 0;
    int skipped = 0;
    while (true) {
      auto rb = (*raw)->Next();
      if (!rb.ok()) break;
      auto db = (*stage)->Process(**rb);
      ASSERT_TRUE(db.ok()) << db.status().ToString();
      DeviceBatch& b = **db;
      ASSERT_TRUE((*stage)->HandOver(&b, consumer).ok());
      skipped += static_cast<int>(b.skipped.size());
      for (int i = 0; i < b.size; ++i) {
        const uint64_t idx = b.sample_indices[i];
        EXPECT_TRUE(seen.insert(idx).second);
        ASSERT_TRUE(cpu.count(idx)) << idx;
        const float* g = reinterpret_cast<const float*>(static_cast<uintptr_t>(b.images) + i * b.image_bytes);
        const float* c = reinterpret_cast<const float*>(cpu[idx].data());
        for (size_t k = 0; k < b.image_bytes / 4; ++k) worst = std::max(worst, std::fabs(g[k] - c[k]));
      }
      ASSERT_TRUE((*stage)->Release(&b).ok());
    }
    // Every sample the CPU path delivered, and only those (the corrupt one is skipped by both).
    EXPECT_EQ(seen.size(), cpu.size());
    EXPECT_EQ(seen.size(), 19u);
    EXPECT_EQ(skipped, 1);
    EXPECT_LT(worst, 1e-4) << "mode " << static_cast<int>(mode);
    const DeviceStageStats& st = (*stage)->stats();
    EXPECT_EQ(st.fallbacks[FallbackReason::kProgressive], 1);
    EXPECT_EQ(st.fallbacks[FallbackReason::kArithmetic], 1);
    EXPECT_EQ(st.fallbacks[FallbackReason::kCmyk], 1);
    EXPECT_EQ(st.fallbacks[FallbackReason::kCorrupt], 1);
    EXPECT_EQ(st.fallbacks[FallbackReason::kGpuRejected], 1);
    EXPECT_EQ(st.fallbacks.total(), 5);
    EXPECT_EQ(st.skipped, 1);
    EXPECT_GT(st.gpu_host_huffman, 0);
    EXPECT_GT(st.gpu_device_huffman, 0);
    EXPECT_EQ(st.gpu_host_huffman + st.gpu_device_huffman + st.cpu, 20);
    // nvJPEG never saw what the router sent to the CPU.
    for (const auto& s : fake.submitted) {
      RouteDecision d = RouteImage(s.data(), s.size(), HybridPolicy{});
      EXPECT_NE(d.route, DecodeRoute::kCpu) << FallbackReasonName(d.reason);
    }
  }
}

TEST_F(DeviceStageTest, OrdersWorkWithEventsAndNeverWaitsOnTheConsumer) {
  testing::FakeCuda fake;
  PipelineOptions o = Opts(DecodeMode::kTrain);
  DeviceStageConfig cfg;
  cfg.slots = 2;
  auto stage = DeviceStage::Create(fake.api(), o, cfg);
  ASSERT_TRUE(stage.ok());
  const uintptr_t own = testing::FakeCuda::Id((*stage)->stream());
  PipelineOptions ro = o;
  ro.mode = DecodeMode::kRaw;
  ro.raw_field = "jpg";
  auto raw = Pipeline::Create(ro);
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE((*raw)->StartEpoch(0).ok());
  CUstream consumer = fake.NewStream();
  const uintptr_t cons = testing::FakeCuda::Id(consumer);
  std::vector<DeviceBatchPtr> held;
  while (true) {
    auto rb = (*raw)->Next();
    if (!rb.ok()) break;
    const size_t log0 = fake.log.size();
    auto db = (*stage)->Process(**rb);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*stage)->HandOver(db->get(), consumer).ok());
    // Within a batch: the kernel after every decode and copy, the ready event last on our
    // stream, then the consumer's wait on it.
    std::vector<std::string> mine(fake.log.begin() + static_cast<long>(log0), fake.log.end());
    ASSERT_GE(mine.size(), 3u);
    const std::string ready = fmt::format("record e{} s{}", testing::FakeCuda::Id((*db)->ready), own);
    EXPECT_EQ(mine[mine.size() - 2], ready);
    EXPECT_EQ(mine.back(), fmt::format("wait s{} e{}", cons, testing::FakeCuda::Id((*db)->ready)));
    auto launch = std::find(mine.begin(), mine.end(), fmt::format("launch s{}", own));
    ASSERT_NE(launch, mine.end());
    for (auto it = launch + 1; it != mine.end(); ++it) {
      EXPECT_EQ(it->rfind("nvjpeg", 0), std::string::npos) << *it;
    }
    held.push_back(*db);
    if (held.size() == 2) held.erase(held.begin());  // the consumer keeps one batch
  }
  held.clear();
  // Host waits only on events recorded on the stage's own stream.
  for (const auto& line : fake.log) {
    if (line.rfind("sync e", 0) != 0) continue;
    const uintptr_t e = std::stoull(line.substr(6));
    EXPECT_EQ(fake.recorded_on[e], own) << line;
  }
  // A slot handed back by the consumer is reused only after the stage's stream waited
  // for the release event recorded on the consumer's stream.
  std::map<uintptr_t, bool> released_on_consumer;
  bool saw_reuse_wait = false;
  for (const auto& line : fake.log) {
    unsigned long long e = 0, s = 0;
    if (std::sscanf(line.c_str(), "record e%llu s%llu", &e, &s) == 2 && s == cons)
      released_on_consumer[e] = true;
    if (std::sscanf(line.c_str(), "wait s%llu e%llu", &s, &e) == 2 && s == own) {
      EXPECT_TRUE(released_on_consumer[e]) << line;
      saw_reuse_wait = true;
    }
  }
  EXPECT_TRUE(saw_reuse_wait);
}

TEST_F(DeviceStageTest, OutOfDeviceMemoryFallsBackPerImageOrNamesTheBatch) {
  testing::FakeCuda fake;
  PipelineOptions o = Opts(DecodeMode::kTrain);
  PipelineOptions ro = o;
  ro.mode = DecodeMode::kRaw;
  ro.raw_field = "jpg";
  ro.shuffle = false;
  auto raw = Pipeline::Create(ro);
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE((*raw)->StartEpoch(0).ok());
  auto rb = (*raw)->Next();
  ASSERT_TRUE(rb.ok());
  // Scratch for the decoded images does not fit: the images that do not fit go to the CPU.
  fake.fail_alloc_above = 120000;  // the output (98 KB) fits, the scratch does not
  auto stage = DeviceStage::Create(fake.api(), o, DeviceStageConfig{});
  ASSERT_TRUE(stage.ok());
  auto db = (*stage)->Process(**rb);
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  EXPECT_EQ((*db)->size, 8);
  EXPECT_GT((*stage)->stats().fallbacks[FallbackReason::kGpuMemory], 0);
  EXPECT_GT((*stage)->stats().gpu_host_huffman + (*stage)->stats().gpu_device_huffman, 0);
  // No room for the output batch itself: a clear error naming the batch size.
  fake.fail_alloc_above = 1000;
  auto stage2 = DeviceStage::Create(fake.api(), o, DeviceStageConfig{});
  ASSERT_TRUE(stage2.ok());
  auto db2 = (*stage2)->Process(**rb);
  ASSERT_FALSE(db2.ok());
  EXPECT_NE(db2.status().message().find("batch of 8 images"), std::string::npos)
      << db2.status().message();
}

TEST_F(DeviceStageTest, CorruptSampleFailsNamingItWithOnErrorFail) {
  testing::FakeCuda fake;
  PipelineOptions o = Opts(DecodeMode::kTrain);
  o.on_error = ErrorPolicy::kFail;
  auto stage = DeviceStage::Create(fake.api(), o, DeviceStageConfig{});
  ASSERT_TRUE(stage.ok());
  PipelineOptions ro = o;
  ro.mode = DecodeMode::kRaw;
  ro.raw_field = "jpg";
  auto raw = Pipeline::Create(ro);
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE((*raw)->StartEpoch(0).ok());
  Status err;
  while (true) {
    auto rb = (*raw)->Next();
    if (!rb.ok()) break;
    auto db = (*stage)->Process(**rb);
    if (!db.ok()) {
      err = db.status();
      break;
    }
  }
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.message().find("c0/018"), std::string::npos) << err.message();
}

// Both paths of device=cuda give the same samples in the same order; gpu_decode=on
// decodes on the "GPU", off on the CPU and copies.
std::vector<std::pair<uint64_t, std::vector<float>>> DeviceRun(DevicePipeline& p, int epoch,
                                                               CUstream consumer) {
  std::vector<std::pair<uint64_t, std::vector<float>>> out;
  EXPECT_TRUE(p.StartEpoch(epoch).ok());
  while (true) {
    auto b = p.Next();
    if (!b.ok()) {
      EXPECT_TRUE(IsEndOfStream(b.status())) << b.status().ToString();
      break;
    }
    EXPECT_TRUE(p.HandOver(b->get(), consumer).ok());
    for (int i = 0; i < (*b)->size; ++i) {
      const float* g = reinterpret_cast<const float*>(static_cast<uintptr_t>((*b)->images) +
                                                      i * (*b)->image_bytes);
      out.emplace_back((*b)->sample_indices[i], std::vector<float>(g, g + (*b)->image_bytes / 4));
    }
    EXPECT_TRUE(p.Release(b->get()).ok());
  }
  return out;
}

TEST_F(DeviceStageTest, DevicePipelineOnAndOffAgree) {
  testing::FakeCuda fake;
  PipelineOptions o = Opts(DecodeMode::kTrain);
  o.raw_field = "jpg";
  o.device = ComputeDevice::kCuda;
  o.gpu_decode = GpuDecode::kOn;
  auto on = DevicePipeline::Create(o, fake.api());
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE((*on)->gpu_decoding());
  o.gpu_decode = GpuDecode::kOff;
  auto off = DevicePipeline::Create(o, fake.api());
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE((*off)->gpu_decoding());
  CUstream consumer = fake.NewStream();
  auto a = DeviceRun(**on, 2, consumer);
  auto b = DeviceRun(**off, 2, consumer);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), 19u);
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first) << i;  // same order
    for (size_t k = 0; k < a[i].second.size(); ++k)
      worst = std::max(worst, std::fabs(a[i].second[k] - b[i].second[k]));
  }
  EXPECT_LT(worst, 1e-4);
  EXPECT_EQ((*on)->stage_stats().fallbacks.total(), 4);  // progressive, arithmetic, cmyk, corrupt
  EXPECT_EQ((*off)->stage_stats().fallbacks.total(), 0);
}

TEST_F(DeviceStageTest, AutoMovesDecodeToTheGpuWhenTheCpuCannotFeedTheStep) {
  for (bool starving : {false, true}) {
    testing::FakeCuda fake;
    FakeClock clock;
    clock.SetThreadCpuStep(5'000'000);  // every measured piece of CPU work: 5 ms
    PipelineOptions o = Opts(DecodeMode::kTrain);
    o.raw_field = "jpg";
    o.device = ComputeDevice::kCuda;
    o.gpu_decode = GpuDecode::kAuto;
    o.cpu_budget = 1;
    o.clock = &clock;
    DevicePipelineConfig cfg;
    cfg.auto_config.window_s = 0.01;
    cfg.auto_config.min_images = 10;
    cfg.auto_config.min_dwell_s = 0;
    cfg.gpu_busy = [] { return 0.2; };
    cfg.clock = &clock;
    auto p = DevicePipeline::Create(o, fake.api(), cfg);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_FALSE((*p)->gpu_decoding());  // auto starts on the CPU path
    ASSERT_TRUE((*p)->StartEpoch(0).ok());
    while (true) {
      auto b = (*p)->Next();
      if (!b.ok()) break;
      // The training step: 5 ms per batch (1600 images/s wanted) or 10 s (0.8 images/s).
      clock.AdvanceMillis(starving ? 5 : 10000);
    }
    ASSERT_TRUE((*p)->StartEpoch(1).ok());
    EXPECT_EQ((*p)->gpu_decoding(), starving) << (*p)->decision().reason;
    EXPECT_EQ((*p)->decision().verdict,
              starving ? OffloadVerdict::kOffload : OffloadVerdict::kCpuKeepsUp)
        << (*p)->decision().reason;
    // The switched pipeline delivers the epoch.
    int n = 0;
    while (true) {
      auto b = (*p)->Next();
      if (!b.ok()) break;
      n += (*b)->size;
    }
    EXPECT_EQ(n, 19);
  }
}

TEST(ResizeKernel, PtxIsEmbeddedWithTheHostsArgumentLayout) {
  const char* ptx = KernelPtx();
  if (ptx == nullptr) GTEST_SKIP() << "built with STOKER_CUDA=OFF or without a CUDA compiler";
  const std::string p(ptx);
  EXPECT_NE(p.find(std::string(".entry ") + kResizeKernelName), std::string::npos);
  // The launch struct is passed by value: its size in the PTX is the host's.
  EXPECT_NE(p.find(fmt::format("{}_param_1[{}]", kResizeKernelName, sizeof(ResizeLaunch))),
            std::string::npos);
  EXPECT_NE(p.find(".target sm_"), std::string::npos);
  EXPECT_EQ(p.find("call."), std::string::npos);  // no external device functions needed
}

TEST(DeviceStage, GpuTestsNeedAGpu) {
  auto api = LoadCudaApi();
  if (!api.ok()) GTEST_SKIP() << "no GPU here (" << api.status().message().substr(0, 80)
                              << "...); bench/gpu/check.sh runs the GPU tests on a GPU machine";
  EXPECT_FALSE((*api)->driver_path.empty());
}

}  // namespace
}  // namespace stoker::gpu
