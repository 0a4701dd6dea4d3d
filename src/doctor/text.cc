#include "doctor/text.h"

#include <fmt/format.h>

namespace stoker::doctor {

std::string Pct(double f) { return fmt::format("{:.0f}%", f * 100); }
std::string Pct1(double f) { return fmt::format("{:.1f}%", f * 100); }
std::string Ms(double s) {
  if (s >= 10) return fmt::format("{:.1f} s", s);
  if (s >= 1) return fmt::format("{:.2f} s", s);
  if (s >= 0.01) return fmt::format("{:.0f} ms", s * 1e3);
  return fmt::format("{:.1f} ms", s * 1e3);
}
std::string X(double v) { return fmt::format("{:.2f}x", v); }

}  // namespace stoker::doctor
