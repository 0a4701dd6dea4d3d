#include "core/html.h"

#include <gtest/gtest.h>

namespace stoker::html {
namespace {

TEST(Html, EscapesTextAndAttributes) {
  EXPECT_EQ(Escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  EXPECT_EQ(Escape(""), "");
  EXPECT_EQ(SvgOpen(10, 20).rfind("<svg width=\"10\" height=\"20\"", 0), 0u);
  EXPECT_EQ(SvgOpen(1, 1).find("http"), std::string::npos);
  EXPECT_NE(SvgOpen(1, 1).find("role=\"img\""), std::string::npos);
}

}  // namespace
}  // namespace stoker::html
