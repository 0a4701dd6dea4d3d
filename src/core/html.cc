#include "core/html.h"

#include <fmt/format.h>

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

}  // namespace stoker::html
