// Formats read and written through io/'s MemoryEnv: the Env seam carries every byte.
#include <cstdint>
#include <gtest/gtest.h>

#include "formats/dataset.h"
#include "formats/formats_testing.h"
#include "formats/writer.h"
#include "io/memory_env.h"

namespace stoker {
namespace {

// A whole dataset written and read back through the Env seam, never touching the disk.
TEST(InMemory, WdsAndTfrecordRoundTrip) {
  for (const char* spec : {"wds:/mem/train-%03d.tar", "tfrecord:/mem/t-%03d.tfrecord"}) {
    MemoryEnv env;
    WriterOptions wo;
    wo.env = &env;
    wo.samples_per_shard = 4;
    auto w = OpenDatasetWriter(spec, wo);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE((*w)->Write(testing::MakeSample(i)).ok());
    ASSERT_TRUE((*w)->Close().ok());
    ASSERT_EQ((*w)->shards().size(), 3u);
    DatasetOptions o;
    o.env = &env;
    std::string fmt = std::string(spec).substr(0, std::string(spec).find(':'));
    auto ds = OpenDataset(fmt + ":/mem", o);
    ASSERT_TRUE(ds.ok()) << spec << ": " << ds.status().ToString();
    ASSERT_EQ((*ds)->size(), 10u);
    Sample s;
    for (uint64_t i = 0; i < 10; ++i) {
      ASSERT_TRUE((*ds)->Read(i, &s).ok());
      EXPECT_EQ(s.Find("jpg")->data, testing::MakeSample(i).Find("jpg")->data) << spec << i;
    }
  }
}

}  // namespace
}  // namespace stoker
