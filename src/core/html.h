// The small HTML/SVG helper every report uses (the doctor's report, the storage probe's,
// bench formats, stoker plan, remote-storage benches): escaping, the page around a report,
// the opening tag of an inline SVG chart, and one line chart (numeric or categorical x, one or
// two y axes, any number of series, reference lines), so every chart is a standalone,
// accessible image in the same font and colours.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stoker::html {

// & < > " ' as entities: safe in element text and in quoted attributes.
std::string Escape(std::string_view s);

// <svg width=W height=H role="img" font-family="sans-serif" font-size="12"> for a chart
// inline in an HTML page (no namespace URL: the reports reference nothing outside
// themselves); close with "</svg>".
std::string SvgOpen(int width, int height);

// "<!doctype html>...<title>T</title><style>(the shared style)EXTRA</style></head><body>";
// close with PageClose(). The shared style: sans-serif body, tables with thin borders,
// grey <pre> blocks, charts as blocks.
std::string PageOpen(std::string_view title, std::string_view extra_css = "");
std::string PageClose();

// The colour of series i (a fixed palette of eight, as matplotlib's default cycle).
const char* SeriesColor(size_t i);

struct Series {
  std::string name;                              // in the legend
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in this order
  std::vector<std::string> tips;                 // optional hover text per point
  bool dashed = false;
  bool right_axis = false;  // against the second y axis (LineChart::y2_label)
  std::string color;        // empty: SeriesColor(index)
};

struct LineChart {
  std::string title, x_label, y_label;
  std::string y2_label;     // non-empty: a second y axis on the right
  bool log2_x = false;      // x positions on a log2 scale
  bool categorical_x = false;  // the distinct x values evenly spaced, in sorted order
  std::function<std::string(double)> x_format;  // tick labels (default: {:g})
  std::vector<std::pair<double, std::string>> y_lines;  // dashed reference lines (left axis)
  std::vector<Series> series;
  int width = 640, height = 340;
};

// The chart as an inline <svg>; "" when no series has a point.
std::string Render(const LineChart& c);

}  // namespace stoker::html
