#include "core/html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace stoker::html {

std::string Escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string SvgOpen(int width, int height) {
  return fmt::format(
      "<svg width=\"{}\" height=\"{}\" role=\"img\" "
      "font-family=\"sans-serif\" font-size=\"12\">",
      width, height);
}

std::string PageOpen(std::string_view title, std::string_view extra_css) {
  return fmt::format(
      "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>"
      "body{{font-family:sans-serif;margin:24px auto;max-width:1000px;padding:0 16px}}"
      "table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;"
      "text-align:right}}pre{{background:#f6f6f6;padding:8px;white-space:pre-wrap}}"
      "svg{{display:block;margin:12px 0}}{}</style></head><body>\n",
      Escape(title), extra_css);
}

std::string PageClose() { return "</body></html>\n"; }

const char* SeriesColor(size_t i) {
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                  "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
  return kColors[i % 8];
}

std::string Render(const LineChart& c) {
  std::vector<double> xs;  // distinct x values, sorted
  double ymax[2] = {0, 0};
  for (const auto& s : c.series)
    for (const auto& [x, y] : s.points) {
      xs.push_back(x);
      double& m = ymax[s.right_axis ? 1 : 0];
      if (std::isfinite(y)) m = std::max(m, y);
    }
  if (xs.empty()) return "";
  for (const auto& [y, label] : c.y_lines) ymax[0] = std::max(ymax[0], y);
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  for (double& m : ymax) m = m > 0 ? m * 1.1 : 1;
  const bool two_axes = !c.y2_label.empty();
  bool legend = false;
  for (const auto& s : c.series) legend |= !s.name.empty();
  const int W = c.width, H = c.height, L = 70, T = 30, B = 45;
  const int R = legend ? 150 : (two_axes ? 64 : 24);
  auto pos = [&](double x) {
    if (c.categorical_x) return double(std::lower_bound(xs.begin(), xs.end(), x) - xs.begin());
    return c.log2_x ? std::log2(std::max(x, 1e-12)) : x;
  };
  double x0 = pos(xs.front()), x1 = pos(xs.back());
  auto X = [&](double x) {
    if (x1 <= x0) return L + (W - L - R) / 2.0;
    return L + (pos(x) - x0) / (x1 - x0) * (W - L - R);
  };
  auto Y = [&](double v, int axis) { return T + (H - T - B) * (1 - v / ymax[axis]); };
  auto xfmt = [&](double x) { return c.x_format ? c.x_format(x) : fmt::format("{:g}", x); };

  std::string s = SvgOpen(W, H) + fmt::format("<text x='{}' y='18' font-weight='bold'>{}</text>\n",
                                              L, Escape(c.title));
  for (int k = 0; k <= 4; ++k) {
    double v = ymax[0] * k / 4;
    s += fmt::format("<line x1='{}' x2='{}' y1='{:.1f}' y2='{:.1f}' stroke='#ddd'/>"
                     "<text x='{}' y='{:.1f}' text-anchor='end'>{:.3g}</text>\n",
                     L, W - R, Y(v, 0), Y(v, 0), L - 6, Y(v, 0) + 4, v);
    if (two_axes)
      s += fmt::format("<text x='{}' y='{:.1f}'>{:.3g}</text>\n", W - R + 6, Y(ymax[1] * k / 4, 1) + 4,
                       ymax[1] * k / 4);
  }
  for (double x : xs)
    s += fmt::format("<text x='{:.1f}' y='{}' text-anchor='middle'>{}</text>\n", X(x), H - B + 16,
                     Escape(xfmt(x)));
  s += fmt::format("<text x='{}' y='{}' text-anchor='middle'>{}</text>\n", (L + W - R) / 2, H - 8,
                   Escape(c.x_label));
  s += fmt::format("<text x='14' y='{0}' transform='rotate(-90 14 {0})' text-anchor='middle'>{1}</text>\n",
                   (T + H - B) / 2, Escape(c.y_label));
  if (two_axes)
    s += fmt::format("<text x='{0}' y='{1}' transform='rotate(90 {0} {1})' text-anchor='middle'>{2}</text>\n",
                     W - R + 48, (T + H - B) / 2, Escape(c.y2_label));
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& sr = c.series[i];
    const std::string color = sr.color.empty() ? SeriesColor(i) : sr.color;
    const int axis = sr.right_axis ? 1 : 0;
    std::string pts;
    for (size_t k = 0; k < sr.points.size(); ++k) {
      auto [x, y] = sr.points[k];
      if (!std::isfinite(y)) continue;
      pts += fmt::format("{:.1f},{:.1f} ", X(x), Y(y, axis));
      s += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='3' fill='{}'>", X(x), Y(y, axis), color);
      s += k < sr.tips.size() ? "<title>" + Escape(sr.tips[k]) + "</title></circle>\n" : "</circle>\n";
    }
    s += fmt::format("<polyline fill='none' stroke='{}' stroke-width='2'{} points='{}'/>\n", color,
                     sr.dashed ? " stroke-dasharray='5,3'" : "", pts);
    if (!sr.name.empty())
      s += fmt::format("<rect x='{}' y='{}' width='12' height='12' fill='{}'/><text x='{}' y='{}'>{}</text>\n",
                       W - R + (two_axes ? 60 : 12), T + 18 * i, color, W - R + (two_axes ? 78 : 30),
                       T + 18 * i + 10, Escape(sr.name));
  }
  for (const auto& [y, label] : c.y_lines)
    s += fmt::format("<line x1='{}' x2='{}' y1='{:.1f}' y2='{:.1f}' stroke='black' "
                     "stroke-dasharray='6,4'/><text x='{}' y='{:.1f}'>{}</text>\n",
                     L, W - R, Y(y, 0), Y(y, 0), L + 4, Y(y, 0) - 4, Escape(label));
  s += "</svg>\n";
  return s;
}

}  // namespace stoker::html
