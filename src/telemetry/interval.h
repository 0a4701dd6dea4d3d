// IntervalSet: a union of half-open time intervals [begin, end) in integer nanoseconds,
// kept compact while events stream in (nested CPU ops and back-to-back kernels merge), so
// memory grows with the number of disjoint busy periods, not with the number of events.
// Not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace stoker::telemetry {

struct Interval {
  int64_t begin = 0, end = 0;
  int64_t length() const { return end - begin; }
};

class IntervalSet {
 public:
  void Add(int64_t begin, int64_t end) {
    if (end <= begin) return;
    // Fast path: events of one thread or stream arrive mostly in time order.
    if (!v_.empty() && sorted_ && begin >= v_.back().begin) {
      if (begin <= v_.back().end) {
        v_.back().end = std::max(v_.back().end, end);
        return;
      }
      v_.push_back({begin, end});
      return;
    }
    if (!v_.empty() && begin < v_.back().begin) sorted_ = false;
    v_.push_back({begin, end});
    if (!sorted_ && v_.size() > 2 * compact_size_ + 4096) Compact();
  }
  // Sorts and merges; after this, intervals() is sorted and disjoint.
  void Compact() {
    if (!sorted_) {
      std::sort(v_.begin(), v_.end(),
                [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
    }
    size_t w = 0;
    for (size_t i = 0; i < v_.size(); ++i) {
      if (w > 0 && v_[i].begin <= v_[w - 1].end) {
        v_[w - 1].end = std::max(v_[w - 1].end, v_[i].end);
      } else {
        v_[w++] = v_[i];
      }
    }
    v_.resize(w);
    sorted_ = true;
    compact_size_ = w;
  }
  const std::vector<Interval>& intervals() const { return v_; }  // call Compact() first
  bool empty() const { return v_.empty(); }
  size_t size() const { return v_.size(); }
  int64_t Total() const {
    int64_t t = 0;
    for (const auto& i : v_) t += i.length();
    return t;
  }
  void Shift(int64_t d) {
    for (auto& i : v_) i.begin += d, i.end += d;
  }
  void Scale(double f) {
    for (auto& i : v_) {
      i.begin = static_cast<int64_t>(static_cast<double>(i.begin) * f);
      i.end = static_cast<int64_t>(static_cast<double>(i.end) * f);
    }
  }
  static IntervalSet FromSorted(std::vector<Interval> v) {
    IntervalSet s;
    s.v_ = std::move(v);
    s.sorted_ = true;
    s.compact_size_ = s.v_.size();
    return s;
  }

 private:
  std::vector<Interval> v_;
  bool sorted_ = true;
  size_t compact_size_ = 0;
};

// Set algebra on compacted sets (sorted, disjoint). All linear.
IntervalSet Union(const IntervalSet& a, const IntervalSet& b);
IntervalSet Intersect(const IntervalSet& a, const IntervalSet& b);
IntervalSet Subtract(const IntervalSet& a, const IntervalSet& b);
// Total length of `s` inside [begin, end).
int64_t MeasureIn(const IntervalSet& s, int64_t begin, int64_t end);
// Total length of `s` inside each window; windows sorted by begin and disjoint.
std::vector<int64_t> MeasureInWindows(const IntervalSet& s, const std::vector<Interval>& windows);

}  // namespace stoker::telemetry
