#include "io/object_env.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace stoker
