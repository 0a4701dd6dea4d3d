#include "tools/synth.h"

#include <cstdint>
#include <gtest/gtest.h>

#include <filesystem>

#include "codec/image.h"
#include "formats/formats_testing.h"

namespace stoker {
namespace {

TEST(Synth, PixelsArePureFunctionsOfSeedAndIndex) {
  std::vector<uint8_t> a, b, c;
  int wa, ha, wb, hb, wc, hc;
  SynthPixels(7, 3, 10, &a, &wa, &ha);
  SynthPixels(7, 3, 10, &b, &wb, &hb);
  SynthPixels(7, 4, 10, &c, &wc, &hc);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (uint64_t i = 0; i < 16; ++i) {
    int w, h;
    SynthPixels(1, i, 10, &a, &w, &h);
    EXPECT_GE(w, 400);
    EXPECT_LE(w, 640);
    double aspect = double(w) / h;
    EXPECT_GE(aspect, 0.59);
    EXPECT_LE(aspect, 1.41);
  }
}

TEST(Synth, JpegSizeIsImageNetLike) {
  std::vector<uint8_t> jpg;
  uint64_t total = 0;
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(SynthJpeg(5, i, 10, 90, &jpg).ok());
    auto info = ReadImageInfo(jpg.data(), jpg.size());
    ASSERT_TRUE(info.ok());
    EXPECT_GE(info->width, 400);
    total += jpg.size();
  }
  EXPECT_GT(total / 4, 50u << 10);   // does not compress trivially
  EXPECT_LT(total / 4, 250u << 10);
}

TEST(Synth, FolderAndWdsLayoutsAndTheCachedRerun) {
  std::string dir = testing::FreshDir("synth");
  SynthOptions o;
  o.out = dir + "/folder";
  o.count = 6;
  o.classes = 3;
  o.threads = 2;
  auto r = GenerateImages(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->cached);
  EXPECT_TRUE(std::filesystem::exists(o.out + "/class_0002/img_00000005.jpg"));
  auto again = GenerateImages(o);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->cached);
  SynthOptions other = o;
  other.seed = 9;
  EXPECT_EQ(GenerateImages(other).status().code(), StatusCode::kInvalidArgument);

  SynthOptions w = o;
  w.out = dir + "/wds";
  w.format = "wds";
  w.shard_samples = 4;
  ASSERT_TRUE(GenerateImages(w).ok());
  auto ds = OpenDataset(w.out);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->size(), 6u);
  EXPECT_EQ((*ds)->shards().size(), 2u);
  auto folder = OpenDataset(o.out);
  ASSERT_TRUE(folder.ok());
  Sample a, b;
  for (uint64_t i = 0; i < 6; ++i) {
    ASSERT_TRUE((*ds)->Read(i, &a).ok());
    EXPECT_EQ(a.label, static_cast<int64_t>(i % 3));
    // The folder dataset orders by class directory: find the same image there.
    bool found = false;
    for (uint64_t j = 0; j < 6 && !found; ++j) {
      ASSERT_TRUE((*folder)->Read(j, &b).ok());
      if (b.key == fmt::format("class_{:04d}/img_{:08d}", i % 3, i)) {
        found = true;
        EXPECT_EQ(a.Find("jpg")->data, b.Find("jpg")->data);
        EXPECT_EQ(b.label, a.label);
      }
    }
    EXPECT_TRUE(found) << i;
  }
}

}  // namespace
}  // namespace stoker
