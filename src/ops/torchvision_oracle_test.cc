// Differential test against torchvision: the same JPEGs and the same crop parameters go
// through torchvision (PIL decode, F.resized_crop / Resize+CenterCrop with antialias,
// hflip, Normalize; tests/oracles/torchvision_ops.py) and through stoker's decode + ops.
// Skipped when no Python with torchvision is found.
#include <cstdint>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <string>
#include <vector>

#include "codec/image.h"
#include "codec/test_images.h"
#include "io/env.h"
#include "ops/image_ops.h"

namespace stoker {
namespace {

std::string FindTorchvisionPython() {
  // The check runs a real torch <-> numpy conversion: a venv whose NumPy is too new for
  // the system torch imports fine but fails there ("Numpy is not available").
  for (std::string py : {std::string(STOKER_SOURCE_DIR) + "/.venv/bin/python",
                         std::string("/usr/bin/python3"), std::string("python3")}) {
    std::string cmd = py +
                      " -c 'import numpy, torch, torchvision, PIL; "
                      "torch.from_numpy(numpy.zeros(1)).numpy()' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

struct Diff {
  double mean = 0, max = 0;  // in normalized units
};

Diff Compare(const std::vector<float>& a, const std::vector<float>& b) {
  Diff d;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(static_cast<double>(a[i]) - b[i]);
    d.mean += e;
    d.max = std::max(d.max, e);
  }
  d.mean /= static_cast<double>(a.size());
  return d;
}

class TorchvisionOracle : public ::testing::Test {
 protected:
  void SetUp() override {
    python_ = FindTorchvisionPython();
    if (python_.empty()) GTEST_SKIP() << "no python with torchvision, PIL and numpy found";
    dir_ = ::testing::TempDir() + "stoker_tv_oracle_" + std::to_string(::getpid());
    ASSERT_TRUE(env_->CreateDirs(dir_).ok());
  }

  // Runs the oracle on `cases` and returns one float32 CHW tensor per case and path.
  void RunOracle(const nlohmann::json& cases, std::vector<std::vector<float>>* pil,
                 std::vector<std::vector<float>>* tensor, size_t floats) {
    const std::string manifest = JoinPath(dir_, "manifest.json");
    const std::string text = cases.dump();
    ASSERT_TRUE(env_->WriteFile(manifest, text.data(), text.size()).ok());
    const std::string cmd = python_ + " " + STOKER_SOURCE_DIR +
                            "/tests/oracles/torchvision_ops.py " + manifest + " " + dir_ +
                            " >/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    for (size_t k = 0; k < cases.size(); ++k) {
      for (auto [suffix, dst] : {std::pair{".pil.f32", pil}, {".tensor.f32", tensor}}) {
        std::vector<uint8_t> raw;
        ASSERT_TRUE(env_->ReadFile(JoinPath(dir_, std::to_string(k) + suffix), &raw).ok());
        ASSERT_EQ(raw.size(), floats * sizeof(float));
        std::vector<float> v(floats);
        std::memcpy(v.data(), raw.data(), raw.size());
        dst->push_back(std::move(v));
      }
    }
  }

  std::string WriteJpeg(int w, int h, uint64_t seed) {
    auto px = testing::SyntheticRgb(w, h, seed, /*noise=*/8);
    std::vector<uint8_t> jpg;
    JpegEncodeOptions o;
    o.quality = 90;
    EXPECT_TRUE(EncodeJpegEx(px.data(), w, h, o, &jpg).ok());
    const std::string path = JoinPath(dir_, std::to_string(seed) + ".jpg");
    EXPECT_TRUE(env_->WriteFile(path, jpg.data(), jpg.size()).ok());
    return path;
  }

  Env* env_ = Env::Default();
  std::string python_, dir_;
};

// Tolerances, in normalized units (one pixel level, 1/255, is ~0.0174 after dividing by
// std ~0.225). Both sides decode with libjpeg-turbo (ISLOW IDCT, fancy upsampling) and
// stoker's region decode is bit-exact, so the decoded pixels agree; what differs is the
// resampling arithmetic: PIL works in 8-bit fixed point with a uint8 intermediate
// between its two passes, stoker keeps floats. Measured (12 crops incl. whole image,
// upscaling and flips; 3 center crops): mean |diff| 0.0052 (0.3 levels), max 0.0174 (one
// level). torchvision's own tensor path (antialias=True) differs from its PIL path by
// about as much. Limits: mean half a level, max two levels.
constexpr double kExactMean = 0.5 / 255 / 0.225;
constexpr double kExactMax = 2.0 / 255 / 0.224;
// With DCT-domain downscaling the decoded pixels themselves differ (libjpeg's scaled
// IDCT is a different low-pass than PIL's triangle filter): measured mean 0.02-0.03
// (1-2 levels). Limit: 4 levels on average.
constexpr double kScaledMean = 4.0 / 255 / 0.226;

TEST_F(TorchvisionOracle, ResizedCropFlipNormalizeMatches) {
  OutputSpec spec;  // 224x224 float CHW, ImageNet mean/std
  // The 1200x960 image makes DCT scaling happen (crops of >= 448 px decode at 4/8, >= 896
  // at 2/8).
  std::vector<std::string> paths = {WriteJpeg(500, 375, 1), WriteJpeg(333, 500, 2),
                                    WriteJpeg(640, 480, 3), WriteJpeg(1200, 960, 4)};
  const int sizes[4][2] = {{500, 375}, {333, 500}, {640, 480}, {1200, 960}};
  std::vector<std::vector<uint8_t>> files(4);
  for (int f = 0; f < 4; ++f) ASSERT_TRUE(env_->ReadFile(paths[f], &files[f]).ok());

  struct Case {
    int file;
    CropRect crop;
    bool flip;
  };
  std::vector<Case> cases;
  nlohmann::json manifest = nlohmann::json::array();
  RandomResizedCropParams p;
  for (int k = 0; k < 16; ++k) {
    const int f = k % 4;
    Rng rng(77, 0, k);
    Case c{f, RandomResizedCropRect(sizes[f][0], sizes[f][1], p, rng), k % 2 == 1};
    if (k == 0) c.crop = CropRect{0, 0, sizes[f][0], sizes[f][1]};  // whole image
    if (k == 1) c.crop = CropRect{100, 50, 120, 90};                  // upscaling crop
    if (k == 3) c.crop = CropRect{0, 0, 1200, 960};                   // whole, 2/8 scale
    if (k == 7) c.crop = CropRect{301, 157, 611, 503};                // 4/8 scale, unaligned
    cases.push_back(c);
    manifest.push_back({{"path", paths[f]}, {"op", "rrc"}, {"i", c.crop.y}, {"j", c.crop.x},
                        {"h", c.crop.h}, {"w", c.crop.w}, {"flip", c.flip},
                        {"size", {spec.height, spec.width}}});
  }
  std::vector<std::vector<float>> pil, tensor;
  const size_t floats = spec.bytes() / sizeof(float);
  RunOracle(manifest, &pil, &tensor, floats);
  ASSERT_EQ(pil.size(), cases.size());

  ResizeScratch scratch;
  DecodedImage img;
  std::vector<float> out(floats);
  double worst_exact = 0, worst_scaled = 0, worst_tensor = 0, worst_max = 0;
  int scaled_cases = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    for (bool dct : {false, true}) {
      DecodeRequest req = CropDecodeRequest(c.crop, spec, dct);
      ASSERT_TRUE(DecodeImage(files[c.file].data(), files[c.file].size(), req, &img).ok());
      ResizeCropToOutput(img, c.crop, c.flip, spec, out.data(), &scratch);
      Diff d = Compare(out, pil[k]);
      if (!dct) {
        EXPECT_EQ(img.scale_num, 8);
        EXPECT_LT(d.mean, kExactMean) << "case " << k;
        EXPECT_LT(d.max, kExactMax) << "case " << k;
        worst_exact = std::max(worst_exact, d.mean);
        worst_max = std::max(worst_max, d.max);
        worst_tensor = std::max(worst_tensor, Compare(out, tensor[k]).mean);
      } else {
        EXPECT_LT(d.mean, kScaledMean) << "case " << k << " scale " << img.scale_num;
        if (img.scale_num < 8) {
          ++scaled_cases;
          worst_scaled = std::max(worst_scaled, d.mean);
        }
      }
    }
  }
  EXPECT_GE(scaled_cases, 2);
  std::printf("[oracle] resized_crop worst mean|diff| (normalized): exact decode %.4f "
              "(max %.4f; vs torchvision's tensor path %.4f), DCT-scaled %.4f\n",
              worst_exact, worst_max, worst_tensor, worst_scaled);
}

TEST_F(TorchvisionOracle, ResizeCenterCropMatches) {
  OutputSpec spec;
  const int sizes[4][2] = {{500, 375}, {375, 500}, {301, 257}, {1200, 900}};
  nlohmann::json manifest = nlohmann::json::array();
  std::vector<std::vector<uint8_t>> files(4);
  for (int f = 0; f < 4; ++f) {
    std::string path = WriteJpeg(sizes[f][0], sizes[f][1], 10 + f);
    ASSERT_TRUE(env_->ReadFile(path, &files[f]).ok());
    manifest.push_back({{"path", path}, {"op", "center"}, {"resize", 256}, {"crop", 224},
                        {"flip", f == 1}});
  }
  std::vector<std::vector<float>> pil, tensor;
  const size_t floats = spec.bytes() / sizeof(float);
  RunOracle(manifest, &pil, &tensor, floats);
  ResizeScratch scratch;
  DecodedImage img;
  std::vector<float> out(floats);
  double worst = 0, worst_max = 0, worst_scaled = 0;
  int scaled_cases = 0;
  for (int f = 0; f < 4; ++f) {
    CenterCropPlan plan = CenterCropRectFor(sizes[f][0], sizes[f][1], 256, 224);
    for (bool dct : {false, true}) {
      DecodeRequest req = CenterCropDecodeRequest(plan, spec, dct);
      ASSERT_TRUE(DecodeImage(files[f].data(), files[f].size(), req, &img).ok());
      ResizeCenterCropToOutput(img, plan, f == 1, spec, out.data(), &scratch);
      Diff d = Compare(out, pil[f]);
      // torchvision rounds the whole resized image to uint8 before cropping; the
      // difference stays at the rounding level.
      EXPECT_LT(d.mean, dct ? kScaledMean : kExactMean) << "image " << f << " dct " << dct;
      if (!dct) {
        EXPECT_LT(d.max, kExactMax) << "image " << f;
        worst = std::max(worst, d.mean);
        worst_max = std::max(worst_max, d.max);
      } else if (img.scale_num < 8) {
        ++scaled_cases;
        worst_scaled = std::max(worst_scaled, d.mean);
      }
    }
  }
  EXPECT_GE(scaled_cases, 1);
  std::printf("[oracle] resize+center_crop worst mean|diff| (normalized): exact decode %.4f "
              "(max %.4f), DCT-scaled %.4f\n", worst, worst_max, worst_scaled);
}

}  // namespace
}  // namespace stoker
