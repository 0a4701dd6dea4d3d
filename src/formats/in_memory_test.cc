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

// Counts the metadata questions a dataset's open asks its Env.
class CountingEnv : public EnvWrapper {
 public:
  explicit CountingEnv(Env* t) : EnvWrapper(t) {}
  Result<FileInfo> Stat(const std::string& p) override {
    stats++;
    return EnvWrapper::Stat(p);
  }
  Result<std::vector<DirEntry>> ListDir(const std::string& p) override {
    lists++;
    return EnvWrapper::ListDir(p);
  }
  int stats = 0, lists = 0;
};

// Object shards: which have an index beside them is answered by one listing of their
// directory, not by a Stat per index name per shard (on S3 a missing key costs a HEAD and a
// LIST); a shard without one is scanned.
TEST(InMemory, ObjectShardIndicesAreFoundByOneListing) {
  MemoryEnv mem;
  WriterOptions wo;
  wo.env = &mem;
  wo.samples_per_shard = 4;
  auto w = OpenDatasetWriter("wds:s3://bucket/d/train-%03d.tar", wo);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE((*w)->Write(testing::MakeSample(i)).ok());
  ASSERT_TRUE((*w)->Close().ok());
  ASSERT_TRUE(mem.Stat("s3://bucket/d/train-000.idx").ok());
  ASSERT_TRUE(mem.RemoveFile("s3://bucket/d/train-001.idx").ok());
  CountingEnv env(&mem);
  DatasetOptions o;
  o.env = &env;
  auto ds = OpenDataset("wds:s3://bucket/d/train-{000..002}.tar", o);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(env.lists, 1);
  EXPECT_EQ(env.stats, 0);
  ASSERT_EQ((*ds)->size(), 10u);
  Sample s;
  for (uint64_t i = 0; i < 10; ++i) {
    ASSERT_TRUE((*ds)->Read(i, &s).ok());
    EXPECT_EQ(s.Find("jpg")->data, testing::MakeSample(i).Find("jpg")->data) << i;
  }
}

}  // namespace
}  // namespace stoker
