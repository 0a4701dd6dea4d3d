// Round trips, random access, concurrency and bad input for the LMDB, HDF5 and Parquet
// readers and writers (one parameterized suite over the three formats).
#include <cstdint>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "formats/dataset.h"
#include "formats/hdf5_dataset.h"
#include "formats/lmdb_dataset.h"
#include "formats/parquet_dataset.h"
#include "formats/writer.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& tag) {
  std::string d = fs::temp_directory_path() /
                  ("stoker_fmt_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Deterministic samples: key, label, a "jpg" field of varying size (0 bytes included,
// some larger than an LMDB page and a Parquet page) and a small "cls" field.
std::vector<Sample> MakeSamples(int n, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::vector<Sample> out(n);
  for (int i = 0; i < n; ++i) {
    Sample& s = out[i];
    s.key = "train/" + std::to_string(100000 + i);
    s.label = i % 11;
    size_t len = (i % 17 == 0) ? 0 : (i % 13 == 0 ? 70000 + rng() % 50000 : rng() % 6000);
    Field* f = s.AddField("jpg");
    f->data.resize(len);
    for (auto& b : f->data) b = static_cast<uint8_t>(rng());
    if (len >= 3) f->data[0] = 0xFF, f->data[1] = 0xD8, f->data[2] = 0xFF;
    std::string cls = std::to_string(i % 11);
    s.AddField("cls")->data.assign(cls.begin(), cls.end());
  }
  return out;
}

void ExpectSameSample(const Sample& want, const Sample& got, uint64_t i) {
  ASSERT_EQ(got.key, want.key) << "sample " << i;
  EXPECT_EQ(got.label, want.label) << "sample " << i;
  ASSERT_EQ(got.num_fields, want.num_fields) << "sample " << i;
  for (size_t f = 0; f < want.num_fields; ++f) {
    const Field* g = got.Find(want.fields[f].name);
    ASSERT_NE(g, nullptr) << "sample " << i << " field " << want.fields[f].name;
    EXPECT_TRUE(g->data == want.fields[f].data) << "sample " << i << " field " << g->name;
  }
}

bool Available(const std::string& fmt) {
  if (fmt == "lmdb") return LmdbAvailable();
  if (fmt == "hdf5") return Hdf5Available();
  return ParquetAvailable();
}

std::string Ext(const std::string& fmt) {
  if (fmt == "lmdb") return ".lmdb";
  if (fmt == "hdf5") return ".h5";
  return ".parquet";
}

class ColumnarFormat : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!Available(GetParam())) GTEST_SKIP() << GetParam() << " not built in";
    dir_ = TempDir(GetParam());
    path_ = dir_ + "/data" + Ext(GetParam());
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void WriteAll(const std::vector<Sample>& samples) {
    auto w = OpenDatasetWriter(GetParam() + ":" + path_);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (const auto& s : samples) ASSERT_TRUE((*w)->Write(s).ok());
    ASSERT_TRUE((*w)->Close().ok());
    ASSERT_EQ((*w)->shards().size(), 1u);
    EXPECT_EQ((*w)->shards()[0].samples, samples.size());
    EXPECT_EQ((*w)->shards()[0].bytes, fs::file_size(path_));
  }
  std::string dir_, path_;
};

TEST_P(ColumnarFormat, RoundTripSequentialAndRandom) {
  auto samples = MakeSamples(300);
  WriteAll(samples);
  EXPECT_FALSE(fs::exists(path_ + ".partial"));
  // Opened by extension, without a prefix.
  auto ds = OpenDataset(path_);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->format(), GetParam());
  ASSERT_EQ((*ds)->size(), samples.size());
  ASSERT_EQ((*ds)->shards().size(), 1u);
  EXPECT_EQ((*ds)->shards()[0].end, samples.size());
  Sample s;
  for (uint64_t i = 0; i < samples.size(); ++i) {
    ASSERT_TRUE((*ds)->Read(i, &s).ok()) << i;
    ExpectSameSample(samples[i], s, i);
  }
  std::vector<uint64_t> order(samples.size());
  for (uint64_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  for (uint64_t i : order) {
    ASSERT_TRUE((*ds)->Read(i, &s).ok()) << i;
    ExpectSameSample(samples[i], s, i);
    EXPECT_EQ((*ds)->Key(i), samples[i].key);
  }
  EXPECT_FALSE((*ds)->Read(samples.size(), &s).ok());
  EXPECT_NE((*ds)->Location(5).find(path_), std::string::npos);
  // What stoker writes is read by direct preads, not through the libraries' row readers.
  if (GetParam() == "hdf5") {
    EXPECT_EQ(Hdf5DirectColumns(**ds), 4);  // key, label, jpg, cls
  }
  if (GetParam() == "parquet") {
    EXPECT_GT(ParquetDirectPages(**ds), 0);
  }
}

TEST_P(ColumnarFormat, ConcurrentReadersSeeIdenticalBytes) {
  auto samples = MakeSamples(200, 11);
  WriteAll(samples);
  auto ds = OpenDataset(GetParam() + ":" + path_);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Sample s;
      std::mt19937 rng(t);
      for (int k = 0; k < 300; ++k) {
        // Half sequential runs, half random jumps.
        uint64_t i = (k % 2) ? rng() % samples.size() : (t * 50 + k / 2) % samples.size();
        if (!(*ds)->Read(i, &s).ok() || s.key != samples[i].key ||
            s.Find("jpg")->data != samples[i].Find("jpg")->data)
          ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_P(ColumnarFormat, ChildProcessAfterForkReadsCorrectly) {
  auto samples = MakeSamples(120, 5);
  WriteAll(samples);
  auto ds = OpenDataset(path_);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  Sample s;
  ASSERT_TRUE((*ds)->Read(3, &s).ok());
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int rc = 0;
    Sample c;
    for (uint64_t i = 0; i < samples.size(); ++i) {
      if (!(*ds)->Read(i, &c).ok() || c.key != samples[i].key ||
          c.Find("jpg")->data != samples[i].Find("jpg")->data)
        rc = 1;
    }
    if (GetParam() == "lmdb" && LmdbEnvOpens(**ds) != 2) rc = 2;  // reopened in the child
    ::_exit(rc);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The parent's handle still works and was not reopened.
  ASSERT_TRUE((*ds)->Read(7, &s).ok());
  ExpectSameSample(samples[7], s, 7);
  if (GetParam() == "lmdb") EXPECT_EQ(LmdbEnvOpens(**ds), 1);
}

TEST_P(ColumnarFormat, EmptyDatasetRoundTrips) {
  WriteAll({});
  auto ds = OpenDataset(path_);
  // An empty HDF5/Parquet file has no field columns to describe a sample: either an
  // empty dataset or a clear error, never a crash.
  if (ds.ok()) EXPECT_EQ((*ds)->size(), 0u);
  else EXPECT_NE(ds.status().message().find(path_), std::string::npos);
}

TEST_P(ColumnarFormat, UnfinishedWriteLeavesNoFinalFile) {
  auto samples = MakeSamples(20);
  {
    auto w = OpenDatasetWriter(GetParam() + ":" + path_);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (const auto& s : samples) ASSERT_TRUE((*w)->Write(s).ok());
    // destroyed without Close
  }
  EXPECT_FALSE(fs::exists(path_));
  EXPECT_FALSE(OpenDataset(GetParam() + ":" + path_).ok());
}

TEST_P(ColumnarFormat, NotThisFormatIsACleanError) {
  {
    std::ofstream f(path_, std::ios::binary);
    for (int i = 0; i < 20000; ++i) f << "this is not a dataset " << i << "\n";
  }
  auto ds = OpenDataset(path_);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kCorrupt) << ds.status().ToString();
  EXPECT_NE(ds.status().message().find(path_), std::string::npos) << ds.status().ToString();
  // Empty file too.
  { std::ofstream f(path_, std::ios::binary | std::ios::trunc); }
  EXPECT_FALSE(OpenDataset(path_).ok());
}

TEST_P(ColumnarFormat, TruncatedFileIsAnErrorNotACrash) {
  auto samples = MakeSamples(100);
  WriteAll(samples);
  uint64_t full = fs::file_size(path_);
  for (double frac : {0.9, 0.5, 0.1}) {
    fs::resize_file(path_, static_cast<uint64_t>(full * frac));
    auto ds = OpenDataset(path_);
    if (!ds.ok()) {
      EXPECT_NE(ds.status().message().find(path_), std::string::npos) << ds.status().ToString();
      continue;
    }
    // Opened (the index survived): every read either succeeds with the right bytes or
    // fails naming the file.
    Sample s;
    for (uint64_t i = 0; i < (*ds)->size(); ++i) {
      Status st = (*ds)->Read(i, &s);
      if (st.ok()) ExpectSameSample(samples[i], s, i);
      else EXPECT_NE(st.message().find(path_), std::string::npos) << st.ToString();
    }
  }
}

TEST_P(ColumnarFormat, CorruptBytesNeverCrash) {
  auto samples = MakeSamples(100);
  WriteAll(samples);
  uint64_t size = fs::file_size(path_);
  std::mt19937 rng(42);
  for (int round = 0; round < 6; ++round) {
    WriteAll(samples);
    {
      std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
      // Flip a run of bytes in the middle (payload or B-tree/metadata pages).
      uint64_t at = (size / 7) * (round + 1);
      f.seekp(static_cast<std::streamoff>(at));
      for (int k = 0; k < 64; ++k) f.put(static_cast<char>(rng()));
    }
    auto ds = OpenDataset(path_);
    if (!ds.ok()) continue;
    Sample s;
    for (uint64_t i = 0; i < (*ds)->size(); ++i) (*ds)->Read(i, &s).IgnoreError();
  }
}

TEST_P(ColumnarFormat, DifferentFieldSetsAreRejectedWhereTheLayoutNeedsThem) {
  auto samples = MakeSamples(5);
  samples[3].num_fields = 1;  // drop "cls"
  auto w = OpenDatasetWriter(GetParam() + ":" + path_);
  ASSERT_TRUE(w.ok());
  Status st;
  for (const auto& s : samples) {
    st = (*w)->Write(s);
    if (!st.ok()) break;
  }
  if (GetParam() == "lmdb") {
    EXPECT_TRUE(st.ok());  // one value per sample: any field set
    ASSERT_TRUE((*w)->Close().ok());
    auto ds = OpenDataset(path_);
    ASSERT_TRUE(ds.ok());
    Sample s;
    ASSERT_TRUE((*ds)->Read(3, &s).ok());
    EXPECT_EQ(s.num_fields, 1u);
  } else {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("sample 3"), std::string::npos) << st.ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, ColumnarFormat,
                         ::testing::Values("lmdb", "hdf5", "parquet"),
                         [](const auto& info) { return info.param; });

TEST(LmdbValue, EveryTruncationIsCorruptNotACrash) {
  Sample s;
  s.key = "k1";
  s.label = 3;
  s.AddField("jpg")->data = {1, 2, 3, 4, 5};
  s.AddField("txt")->data = {'h', 'i'};
  std::string v;
  EncodeLmdbSample(s, &v);
  Sample out;
  ASSERT_TRUE(DecodeLmdbSample(reinterpret_cast<const uint8_t*>(v.data()), v.size(), &out).ok());
  EXPECT_EQ(out.key, "k1");
  EXPECT_EQ(out.label, 3);
  ASSERT_EQ(out.num_fields, 2u);
  EXPECT_EQ(out.Find("txt")->data, (std::vector<uint8_t>{'h', 'i'}));
  for (size_t n = 0; n < v.size(); ++n) {
    Status st = DecodeLmdbSample(reinterpret_cast<const uint8_t*>(v.data()), n, &out);
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << "prefix " << n;
  }
  v.push_back('x');
  EXPECT_FALSE(DecodeLmdbSample(reinterpret_cast<const uint8_t*>(v.data()), v.size(), &out).ok());
}

// Damaged B-tree pages: liblmdb trusts node offsets and key sizes, and some damaged bytes
// send it outside the map (6 of 300 such files crashed `stoker dump` before the fault
// guard). Every open and read must end in a sample or a Corrupt/IO error naming the file.
TEST(LmdbDamage, DamagedTreePagesAreErrorsNotCrashes) {
  std::string dir = TempDir("lmdb_damage");
  std::string good = dir + "/good.lmdb", bad = dir + "/bad.lmdb";
  {
    // Values of ~90 KB (overflow pages, as images are): node damage then points liblmdb at
    // overflow page numbers, sizes and offsets far outside the map.
    std::vector<Sample> samples = MakeSamples(60, 11);
    for (auto& s : samples) s.fields[0].data.resize(90000, 0x5a);
    auto w = OpenDatasetWriter("lmdb:" + good);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (const auto& s : samples) ASSERT_TRUE((*w)->Write(s).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  std::ifstream in(good, std::ios::binary);
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t ps = 4096;
  std::vector<size_t> tree_pages;  // leaf and branch pages (pgno matches, flags 1 or 2)
  for (size_t i = 2; i < data.size() / ps; ++i) {
    uint64_t pgno;
    uint16_t flags;
    std::memcpy(&pgno, &data[i * ps], 8);
    std::memcpy(&flags, &data[i * ps + 10], 2);
    if (pgno == i && (flags == 1 || flags == 2)) tree_pages.push_back(i);
  }
  ASSERT_FALSE(tree_pages.empty());
  int errors = 0, faults = 0, clean = 0;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> b = data;
    size_t pg = tree_pages[rng() % tree_pages.size()];
    for (int k = 0, n = 1 + static_cast<int>(rng() % 6); k < n; ++k)
      b[pg * ps + rng() % ps] = static_cast<uint8_t>(rng());
    {
      std::ofstream out(bad, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    }
    auto check = [&](const Status& st) {
      if (st.ok()) return;
      ++errors;
      EXPECT_TRUE(st.code() == StatusCode::kCorrupt || st.code() == StatusCode::kIOError ||
                  st.code() == StatusCode::kInvalidArgument)
          << "seed " << seed << ": " << st.ToString();
      EXPECT_NE(st.message().find(bad), std::string::npos) << "seed " << seed << ": " << st.ToString();
      if (st.message().find("damaged LMDB page") != std::string::npos) ++faults;
    };
    auto ds = OpenDataset("lmdb:" + bad);
    if (!ds.ok()) {
      check(ds.status());
      continue;
    }
    bool all_ok = true;
    Sample s;
    for (uint64_t i = 0; i < (*ds)->size() && i < 1000; ++i) {
      Status st = (*ds)->Read(i, &s);
      all_ok = all_ok && st.ok();
      check(st);
    }
    clean += all_ok;
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(clean, 0);
  // Some damage does make liblmdb fault; the guard turned it into errors.
  EXPECT_GT(faults, 0);
  fs::remove_all(dir);
}

// A fuzzer-found file (parquet_fuzz) whose footer puts a page index outside the file:
// Arrow's page-index reader trusted it and read far outside its buffer (SIGSEGV). It must
// be a Corrupt error naming the file.
TEST(ParquetDamage, PageIndexOutsideTheFileIsCorrupt) {
  std::string path = std::string(STOKER_SOURCE_DIR) + "/tests/data/parquet-bad-offset-index.parquet";
  auto ds = OpenParquetDataset(path, {});
  if (ds.status().code() == StatusCode::kUnimplemented) GTEST_SKIP() << "built without Parquet";
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kCorrupt) << ds.status().ToString();
  EXPECT_NE(ds.status().message().find(path), std::string::npos) << ds.status().ToString();
}

TEST(LmdbValue, SniffsImageFieldNames) {
  const uint8_t jpg[] = {0xFF, 0xD8, 0xFF, 0xE0};
  const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0};
  const uint8_t other[] = {1, 2, 3};
  EXPECT_STREQ(SniffFieldName(jpg, sizeof jpg), "jpg");
  EXPECT_STREQ(SniffFieldName(png, sizeof png), "png");
  EXPECT_STREQ(SniffFieldName(other, sizeof other), "data");
}

TEST(FormatRegistry, LmdbHdf5ParquetAreRegisteredWithWriters) {
  const auto& fmts = DatasetFormats();
  for (const char* n : {"lmdb", "hdf5", "parquet"}) EXPECT_TRUE(fmts.count(n)) << n;
  auto writers = DatasetWriterFormats();
  for (const char* n : {"lmdb", "hdf5", "parquet"})
    EXPECT_NE(std::find(writers.begin(), writers.end(), n), writers.end()) << n;
  EXPECT_EQ(SplitFormatPrefix("hdf5:/x/y.bin").first, "hdf5");
}

}  // namespace
}  // namespace stoker
