// The doctor's number formats, one copy for the rules, the verdict and every renderer, so
// that a share or a duration reads the same in a finding, the summary and a table.
#pragma once

#include <string>

namespace stoker::doctor {

std::string Pct(double f);   // a fraction as a whole percentage: 0.423 -> "42%"
std::string Pct1(double f);  // one decimal: 0.0423 -> "4.2%"
std::string Ms(double s);    // seconds, scaled: "12.0 s", "1.25 s", "48 ms", "2.4 ms"
std::string X(double v);     // a speedup: 1.434 -> "1.43x"

}  // namespace stoker::doctor
