#include <cstdint>
#include "telemetry/interval.h"

namespace stoker::telemetry {

IntervalSet Union(const IntervalSet& a, const IntervalSet& b) {
  std::vector<Interval> out;
  out.reserve(a.size() + b.size());
  const auto& x = a.intervals();
  const auto& y = b.intervals();
  size_t i = 0, j = 0;
  while (i < x.size() || j < y.size()) {
    Interval n;
    if (j >= y.size() || (i < x.size() && x[i].begin <= y[j].begin)) {
      n = x[i++];
    } else {
      n = y[j++];
    }
    if (!out.empty() && n.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, n.end);
    } else {
      out.push_back(n);
    }
  }
  return IntervalSet::FromSorted(std::move(out));
}

IntervalSet Intersect(const IntervalSet& a, const IntervalSet& b) {
  std::vector<Interval> out;
  const auto& x = a.intervals();
  const auto& y = b.intervals();
  size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    int64_t lo = std::max(x[i].begin, y[j].begin);
    int64_t hi = std::min(x[i].end, y[j].end);
    if (lo < hi) out.push_back({lo, hi});
    if (x[i].end < y[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return IntervalSet::FromSorted(std::move(out));
}

IntervalSet Subtract(const IntervalSet& a, const IntervalSet& b) {
  std::vector<Interval> out;
  const auto& x = a.intervals();
  const auto& y = b.intervals();
  size_t j = 0;
  for (const auto& iv : x) {
    int64_t cur = iv.begin;
    while (j < y.size() && y[j].end <= cur) ++j;
    size_t k = j;
    while (k < y.size() && y[k].begin < iv.end) {
      if (y[k].begin > cur) out.push_back({cur, y[k].begin});
      cur = std::max(cur, y[k].end);
      if (cur >= iv.end) break;
      ++k;
    }
    if (cur < iv.end) out.push_back({cur, iv.end});
  }
  return IntervalSet::FromSorted(std::move(out));
}

int64_t MeasureIn(const IntervalSet& s, int64_t begin, int64_t end) {
  const auto& v = s.intervals();
  auto it = std::lower_bound(v.begin(), v.end(), begin,
                             [](const Interval& iv, int64_t t) { return iv.end <= t; });
  int64_t total = 0;
  for (; it != v.end() && it->begin < end; ++it) {
    total += std::min(it->end, end) - std::max(it->begin, begin);
  }
  return total;
}

std::vector<int64_t> MeasureInWindows(const IntervalSet& s, const std::vector<Interval>& windows) {
  std::vector<int64_t> out(windows.size(), 0);
  for (size_t w = 0; w < windows.size(); ++w) {
    out[w] = MeasureIn(s, windows[w].begin, windows[w].end);
  }
  return out;
}

}  // namespace stoker::telemetry
