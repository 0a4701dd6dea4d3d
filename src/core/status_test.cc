#include "core/status.h"

#include <gtest/gtest.h>

namespace stoker {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument("{} is odd", x);
  return x / 2;
}

Status UseHalf(int x, int* out) {
  STOKER_ASSIGN_OR_RETURN(*out, Half(x));
  return Status::OK();
}

TEST(Status, PropagatesErrorsWithContext) {
  int v = 0;
  EXPECT_TRUE(UseHalf(4, &v).ok());
  EXPECT_EQ(v, 2);
  Status st = UseHalf(3, &v).WithContext("reading x");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "reading x: 3 is odd");
}

}  // namespace
}  // namespace stoker
