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

TEST(Html, PageHasTheSharedStyleTheExtraCssAndAnEscapedTitle) {
  std::string p = PageOpen("a < b", ".x{color:red}");
  EXPECT_EQ(p.rfind("<!doctype html>", 0), 0u);
  EXPECT_NE(p.find("<title>a &lt; b</title>"), std::string::npos);
  EXPECT_NE(p.find("border-collapse"), std::string::npos);
  EXPECT_NE(p.find(".x{color:red}</style>"), std::string::npos);
  EXPECT_EQ(PageClose(), "</body></html>\n");
}

TEST(Html, LineChartPlacesPointsOnTheirAxes) {
  LineChart c;
  c.title = "t & u";
  c.width = 400;
  c.height = 100;
  c.categorical_x = true;
  Series a;
  a.name = "4 KiB";
  a.points = {{1, 10}, {8, 20}, {2, 0}};
  a.tips = {"one", "eight", "two"};
  c.series.push_back(a);
  c.y_lines.push_back({30, "need 30"});
  std::string s = Render(c);
  EXPECT_EQ(s.rfind("<svg width=\"400\" height=\"100\"", 0), 0u);
  EXPECT_NE(s.find("t &amp; u"), std::string::npos);
  EXPECT_NE(s.find("<title>eight</title>"), std::string::npos);
  EXPECT_NE(s.find(">4 KiB</text>"), std::string::npos);
  EXPECT_NE(s.find(">need 30</text>"), std::string::npos);
  // Categorical x: 1, 2, 8 evenly spaced over [L, W - R] = [70, 250] (a legend takes 150).
  EXPECT_NE(s.find("<circle cx='70.0'"), std::string::npos) << s;
  EXPECT_NE(s.find("<circle cx='250.0'"), std::string::npos) << s;
  EXPECT_NE(s.find("<circle cx='160.0'"), std::string::npos) << s;
  // y max = 30 * 1.1 (the reference line); y=0 sits on the bottom (H - B = 55).
  EXPECT_NE(s.find("cy='55.0'"), std::string::npos) << s;
  EXPECT_EQ(s.substr(s.size() - 7), "</svg>\n");
  // Nothing to draw: nothing.
  EXPECT_EQ(Render(LineChart{}), "");
}

TEST(Html, SecondAxisScalesItsOwnSeries) {
  LineChart c;
  c.width = 300;
  c.height = 130;  // T=30, B=45: plot height 55
  c.y2_label = "right";
  Series a, b;
  a.points = {{0, 100}, {1, 50}};
  b.points = {{0, 1}, {1, 0.5}};
  b.right_axis = true;
  c.series = {a, b};
  std::string s = Render(c);
  // Each series' maximum is 1/1.1 of its axis: the same height (30 + 55 * 0.1/1.1 = 35.0).
  size_t first = s.find("cy='35.0'");
  ASSERT_NE(first, std::string::npos) << s;
  EXPECT_NE(s.find("cy='35.0'", first + 1), std::string::npos) << s;
  EXPECT_NE(s.find(">right</text>"), std::string::npos);
}

}  // namespace
}  // namespace stoker::html
