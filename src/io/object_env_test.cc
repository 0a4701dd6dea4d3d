#include "io/object_env.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

namespace stoker {
namespace {

TEST(ObjectEnv, RouterSendsOnlyObjectUrlsToTheObjectStore) {
  EXPECT_TRUE(IsObjectStoreUri("s3://b/k"));
  EXPECT_TRUE(IsObjectStoreUri("gs://b/k"));
  EXPECT_FALSE(IsObjectStoreUri("/tmp/s3://x"));
  EXPECT_FALSE(IsObjectStoreUri("wds:s3://b/k"));  // format prefixes are split off first
  // A local path still goes to the POSIX Env through Env::Default().
  EXPECT_EQ(Env::Default()->Stat("/nonexistent-stoker-path").status().code(),
            StatusCode::kNotFound);
  // A URL without a bucket is the caller's error, in either build.
  auto st = Env::Default()->Stat("s3:///key").status();
  EXPECT_FALSE(st.ok());
  if (!ObjectStoreAvailable()) {
    EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
    EXPECT_NE(st.message().find("built without S3 support"), std::string::npos) << st.message();
  } else {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  }
  // Renames never cross storages.
  EXPECT_EQ(Env::Default()->RenameFile("/tmp/a", "s3://b/a").code(),
            StatusCode::kInvalidArgument);
}


using object_internal::HeadAnswer;
using object_internal::HeadChecked;
using object_internal::ReadChecked;
using object_internal::RetryPolicy;

RetryPolicy Attempts(int n, int* backoffs = nullptr) {
  RetryPolicy p;
  p.max_attempts = n;
  p.backoff = [backoffs](int) {
    if (backoffs) ++*backoffs;
  };
  return p;
}

std::vector<uint8_t> Object(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + 7);
  return v;
}

// What curl + the AWS SDK do with a response cut inside its headers: success, the full count,
// nothing written. ReadChecked must ask again and deliver the object's bytes.
TEST(ObjectReadChecked, AResponseThatWroteNothingIsAskedAgain) {
  auto obj = Object(4096);
  int calls = 0, backoffs = 0;
  auto read = [&](uint64_t off, size_t n, uint8_t* d) -> Result<size_t> {
    if (calls++ < 2) return n;  // "complete", nothing written
    std::memcpy(d, obj.data() + off, n);
    return n;
  };
  std::vector<uint8_t> dst(1000, 0);
  uint64_t cut = 0;
  ASSERT_TRUE(ReadChecked("s3://b/k", obj.size(), 100, dst.size(), dst.data(), read,
                          Attempts(8, &backoffs), &cut).ok());
  EXPECT_EQ(0, std::memcmp(dst.data(), obj.data() + 100, dst.size()));
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(cut, 2u);
  EXPECT_EQ(backoffs, 2);
}

// Without the check the caller would get whatever was in its buffer: the test above fails if
// ReadChecked trusts the count (calls == 1, the buffer still zeros and the marker).
TEST(ObjectReadChecked, DataEqualToAMarkerIsTakenOnTheNextAttempt) {
  // An object whose every 8 bytes could be a marker: find the marker by reading once into a
  // buffer through a read that writes nothing, then serve exactly those bytes as data.
  std::vector<uint8_t> marker(8);
  {
    std::vector<uint8_t> probe(8, 0);
    auto nothing = [](uint64_t, size_t n, uint8_t*) -> Result<size_t> { return n; };
    (void)ReadChecked("s3://b/k", 8, 0, 8, probe.data(), nothing, Attempts(1));
    marker = probe;
  }
  int calls = 0;
  auto read = [&](uint64_t, size_t n, uint8_t* d) -> Result<size_t> {
    ++calls;
    std::memcpy(d, marker.data(), n);
    return n;
  };
  std::vector<uint8_t> dst(8);
  ASSERT_TRUE(ReadChecked("s3://b/k", 8, 0, 8, dst.data(), read, Attempts(8)).ok());
  EXPECT_EQ(dst, marker);
  EXPECT_EQ(calls, 2);  // once mistaken for a cut response, then taken
}

TEST(ObjectReadChecked, ResponsesCutEveryTimeEndInAnErrorNamingUrlAndRange) {
  auto read = [](uint64_t, size_t n, uint8_t*) -> Result<size_t> { return n; };
  std::vector<uint8_t> dst(512);
  Status st = ReadChecked("s3://b/shard.tar", 4096, 1024, dst.size(), dst.data(), read, Attempts(4));
  ASSERT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("s3://b/shard.tar"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[1024, 1536)"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("cut short"), std::string::npos) << st.message();
}

TEST(ObjectReadChecked, ShortReadsResumeAndAnEarlyEndIsCorrupt) {
  auto obj = Object(3000);
  auto read = [&](uint64_t off, size_t n, uint8_t* d) -> Result<size_t> {
    size_t k = std::min<size_t>(n, 700);
    std::memcpy(d, obj.data() + off, k);
    return k;
  };
  std::vector<uint8_t> dst(3000);
  ASSERT_TRUE(ReadChecked("s3://b/k", 3000, 0, 3000, dst.data(), read, Attempts(8)).ok());
  EXPECT_EQ(dst, obj);
  auto ends = [](uint64_t off, size_t, uint8_t*) -> Result<size_t> { return off < 100 ? 100 : 0; };
  Status st = ReadChecked("s3://b/k", 3000, 0, 3000, dst.data(), ends, Attempts(8));
  EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.ToString();
  EXPECT_NE(st.message().find("ended at 100"), std::string::npos) << st.message();
}

TEST(ObjectReadChecked, ATinyReadStillDetectsACutResponse) {
  int calls = 0;
  auto read = [&](uint64_t, size_t n, uint8_t* d) -> Result<size_t> {
    if (calls++ == 0) return n;
    d[0] = 42;
    return n;
  };
  uint8_t b = 0;
  ASSERT_TRUE(ReadChecked("s3://b/k", 10, 3, 1, &b, read, Attempts(8)).ok());
  EXPECT_EQ(b, 42);
  EXPECT_EQ(calls, 2);
}

TEST(ObjectHeadChecked, ACutHeadWithoutSizeOrEtagIsAskedAgain) {
  int calls = 0;
  auto head = [&]() -> Result<HeadAnswer> {
    ++calls;
    if (calls == 1) return HeadAnswer{0, ""};             // cut before everything
    if (calls == 2) return HeadAnswer{0, "\"abc123\""};   // cut between ETag and Content-Length
    if (calls == 3) return HeadAnswer{3844608, ""};       // cut after Content-Length
    return HeadAnswer{3844608, "\"abc123\""};
  };
  uint64_t cut = 0;
  auto r = HeadChecked("s3://b/k", head, /*want_etag=*/true, Attempts(8), &cut);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size, 3844608u);
  EXPECT_EQ(r->etag, "\"abc123\"");
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(cut, 3u);
}

TEST(ObjectHeadChecked, AnEmptyObjectIsTakenAtOnceByItsEtagAndNeverWithoutOne) {
  int calls = 0;
  auto empty = [&]() -> Result<HeadAnswer> {
    ++calls;
    return HeadAnswer{0, "\"d41d8cd98f00b204e9800998ecf8427e\""};
  };
  auto r = HeadChecked("s3://b/k", empty, true, Attempts(8));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size, 0u);
  EXPECT_EQ(calls, 1);
  calls = 0;
  auto no_etag = [&]() -> Result<HeadAnswer> {
    ++calls;
    return HeadAnswer{77, ""};
  };
  r = HeadChecked("s3://b/k", no_etag, true, Attempts(8));
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);  // every HEAD cut the same way
  EXPECT_EQ(calls, 8);
  calls = 0;
  auto multipart_empty = [&]() -> Result<HeadAnswer> {
    ++calls;
    return HeadAnswer{0, "\"0a1b2c-1\""};
  };
  r = HeadChecked("s3://b/k", multipart_empty, true, Attempts(8));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(calls, 3);
  calls = 0;
  r = HeadChecked("gs://b/k", no_etag, /*want_etag=*/false, Attempts(8));  // GCS JSON API
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(calls, 1);
}

TEST(ObjectHeadChecked, ANonEmptyObjectSeenAsSizeZeroEveryTimeIsAnError) {
  // What S3Proxy behind a proxy that cuts every response after 250 bytes answers: the ETag
  // (a single-part one) and no Content-Length. Never taken, however often it comes.
  auto head = []() -> Result<HeadAnswer> { return HeadAnswer{0, "\"7b559bc72d65\""}; };
  auto r = HeadChecked("s3://b/k", head, true, Attempts(8));
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  int calls = 0;
  auto varying = [&]() -> Result<HeadAnswer> {
    return HeadAnswer{0, ++calls % 2 ? "" : "\"abc\""};
  };
  r = HeadChecked("s3://b/obj", varying, true, Attempts(5));
  ASSERT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_NE(r.status().message().find("s3://b/obj"), std::string::npos);
}

}  // namespace
}  // namespace stoker
