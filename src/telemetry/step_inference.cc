#include "telemetry/step_inference.h"

#include <cstdint>
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include <fmt/format.h>

#include "telemetry/trace.h"

namespace stoker::telemetry {

const char* StepSourceName(StepSource s) {
  switch (s) {
    case StepSource::kAuto: return "auto";
    case StepSource::kProfilerStep: return "ProfilerStep#N";
    case StepSource::kAnnotation: return "annotation";
    case StepSource::kOptimizer: return "Optimizer.step";
    case StepSource::kDataLoader: return "DataLoader.__next__";
    case StepSource::kGpuBursts: return "GPU kernel bursts";
    case StepSource::kWhole: return "whole capture";
  }
  return "auto";
}

bool StepEvidence::AddAnnotation(std::string_view name, const MarkedSpan& s) {
  auto it = annotations.find(name);
  if (it == annotations.end()) {
    if (annotations.size() >= kMaxNames) return false;
    it = annotations.emplace(std::string(name), std::vector<MarkedSpan>()).first;
  }
  if (it->second.size() >= kMaxSpans) return false;
  it->second.push_back(s);
  return true;
}

bool ParseStepSource(std::string_view name, StepSource* out) {
  static constexpr std::pair<std::string_view, StepSource> kNames[] = {
      {"auto", StepSource::kAuto},           {"profiler", StepSource::kProfilerStep},
      {"annotation", StepSource::kAnnotation}, {"optimizer", StepSource::kOptimizer},
      {"dataloader", StepSource::kDataLoader}, {"gpu", StepSource::kGpuBursts},
      {"whole", StepSource::kWhole}};
  for (const auto& [n, s] : kNames) {
    if (n == name) {
      *out = s;
      return true;
    }
  }
  return false;
}

void StepEvidence::Scale(double f) {
  auto scale = [f](std::vector<MarkedSpan>& v) {
    for (auto& s : v) {
      s.begin = static_cast<int64_t>(std::llround(static_cast<double>(s.begin) * f));
      s.end = static_cast<int64_t>(std::llround(static_cast<double>(s.end) * f));
    }
  };
  scale(optimizer_steps);
  scale(loader_calls);
  for (auto& [name, v] : annotations) scale(v);
  if (host_begin <= host_end) {
    host_begin = static_cast<int64_t>(std::llround(static_cast<double>(host_begin) * f));
    host_end = static_cast<int64_t>(std::llround(static_cast<double>(host_end) * f));
  }
}

namespace {

constexpr size_t kMinRepeats = 3;  // a marker must repeat to delimit iterations

// The spans on the thread that has most of them, sorted, without overlaps (a nested or
// recursive occurrence is not a new iteration).
std::vector<MarkedSpan> OnMainThread(const std::vector<MarkedSpan>& v, int64_t* thread) {
  std::unordered_map<int64_t, size_t> count;
  for (const auto& s : v) count[s.thread]++;
  int64_t best = 0;
  size_t best_n = 0;
  for (const auto& [k, n] : count) {
    if (n > best_n || (n == best_n && k < best)) best = k, best_n = n;
  }
  std::vector<MarkedSpan> out;
  for (const auto& s : v) {
    if (s.thread == best) out.push_back(s);
  }
  std::sort(out.begin(), out.end(),
            [](const MarkedSpan& a, const MarkedSpan& b) { return a.begin < b.begin; });
  std::vector<MarkedSpan> flat;
  for (const auto& s : out) {
    if (!flat.empty() && s.begin < flat.back().end) continue;
    flat.push_back(s);
  }
  *thread = best;
  return flat;
}

// Each marker starts an iteration: [b_i, b_i+1).
std::vector<StepWindow> FromStarts(const std::vector<MarkedSpan>& m) {
  std::vector<StepWindow> w;
  for (size_t i = 0; i + 1 < m.size(); ++i) {
    w.push_back({static_cast<int64_t>(i), m[i].begin, m[i + 1].begin});
  }
  return w;
}

// Each marker ends an iteration: [e_i, e_i+1).
std::vector<StepWindow> FromEnds(const std::vector<MarkedSpan>& m) {
  std::vector<StepWindow> w;
  for (size_t i = 0; i + 1 < m.size(); ++i) {
    w.push_back({static_cast<int64_t>(i), m[i].end, m[i + 1].end});
  }
  return w;
}

// The user annotation that marks iterations: the repeating one that covers most time, when
// it covers at least a fifth of the span from its first to its last occurrence.
bool Annotation(const StepEvidence& ev, std::vector<StepWindow>* w, int64_t* thread,
                std::string* what) {
  const std::vector<MarkedSpan>* pick = nullptr;
  std::vector<MarkedSpan> best;
  int64_t best_total = 0, best_thread = 0;
  for (const auto& [name, v] : ev.annotations) {
    if (v.size() < kMinRepeats || v.size() >= StepEvidence::kMaxSpans) continue;
    int64_t th = 0;
    std::vector<MarkedSpan> m = OnMainThread(v, &th);
    if (m.size() < kMinRepeats) continue;
    int64_t total = 0;
    for (const auto& s : m) total += s.end - s.begin;
    int64_t span = m.back().end - m.front().begin;
    if (span <= 0 || total * 5 < span) continue;
    if (total > best_total) {
      best_total = total, best = std::move(m), best_thread = th, pick = &v;
      *what = name;
    }
  }
  if (pick == nullptr) return false;
  *w = FromStarts(best);
  *thread = best_thread;
  return true;
}

}  // namespace

std::string PickAnnotation(const StepEvidence& ev) {
  std::vector<StepWindow> w;
  int64_t thread = 0;
  std::string name;
  return Annotation(ev, &w, &thread, &name) ? name : std::string();
}

namespace {

// Bursts of GPU work: the idle gaps of at least 30% of the largest one (and 100 µs) split
// the capture, when the pieces are alike (coefficient of variation <= 0.5).
bool GpuBursts(const TraceSummary& t, std::vector<StepWindow>* w) {
  IntervalSet busy;
  for (const auto& g : t.gpus) {
    busy = Union(busy, Union(Union(Union(g.compute, g.comm), Union(g.h2d_pageable, g.h2d_pinned)),
                             Union(g.d2h, g.other)));
  }
  const auto& v = busy.intervals();
  if (v.size() < kMinRepeats) return false;
  int64_t gmax = 0;
  for (size_t i = 1; i < v.size(); ++i) gmax = std::max(gmax, v[i].begin - v[i - 1].end);
  const int64_t cut = std::max<int64_t>(100'000, static_cast<int64_t>(0.3 * static_cast<double>(gmax)));
  std::vector<int64_t> starts = {v.front().begin};
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i].begin - v[i - 1].end >= cut) starts.push_back(v[i].begin);
  }
  if (starts.size() < kMinRepeats) return false;
  std::vector<StepWindow> out;
  for (size_t i = 0; i + 1 < starts.size(); ++i) {
    out.push_back({static_cast<int64_t>(i), starts[i], starts[i + 1]});
  }
  double mean = 0, var = 0;
  for (const auto& s : out) mean += static_cast<double>(s.end - s.begin);
  mean /= static_cast<double>(out.size());
  for (const auto& s : out) {
    double d = static_cast<double>(s.end - s.begin) - mean;
    var += d * d;
  }
  var /= static_cast<double>(out.size());
  if (mean <= 0 || std::sqrt(var) > 0.5 * mean) return false;
  *w = std::move(out);
  return true;
}

}  // namespace

bool InferSteps(const StepEvidence& ev, StepSource want, TraceSummary* t) {
  std::vector<StepWindow> w;
  int64_t thread = 0;
  std::string name;
  auto done = [&](StepSource s, std::string note) {
    t->steps = std::move(w);
    t->steps_from = StepSourceName(s);
    if (s == StepSource::kAnnotation) t->steps_from += " '" + name + "'";
    t->steps_note = std::move(note);
    if (s != StepSource::kGpuBursts && s != StepSource::kWhole) t->main_thread = thread;
    return true;
  };
  const bool any = want == StepSource::kAuto;
  if ((any || want == StepSource::kAnnotation) && Annotation(ev, &w, &thread, &name)) {
    return done(StepSource::kAnnotation,
                fmt::format("{} iterations from the repeating annotation '{}' (each occurrence "
                            "starts one)",
                            w.size(), name));
  }
  if (any || want == StepSource::kOptimizer) {
    auto m = OnMainThread(ev.optimizer_steps, &thread);
    if (m.size() >= kMinRepeats) {
      w = FromEnds(m);
      return done(StepSource::kOptimizer,
                  fmt::format("{} iterations between the ends of {} Optimizer.step calls",
                              w.size(), m.size()));
    }
  }
  if (any || want == StepSource::kDataLoader) {
    auto m = OnMainThread(ev.loader_calls, &thread);
    if (m.size() >= kMinRepeats) {
      w = FromStarts(m);
      return done(StepSource::kDataLoader,
                  fmt::format("{} iterations between the starts of {} DataLoader __next__ calls",
                              w.size(), m.size()));
    }
  }
  if ((any || want == StepSource::kGpuBursts) && GpuBursts(*t, &w)) {
    return done(StepSource::kGpuBursts,
                fmt::format("{} iterations from the bursts of GPU work between idle gaps",
                            w.size()));
  }
  if (any || want == StepSource::kWhole) {
    int64_t b = ev.host_begin, e = ev.host_end;
    for (const auto& g : t->gpus) {
      if (!g.has_activity()) continue;
      b = std::min(b, g.first_ns);
      e = std::max(e, g.last_ns);
    }
    if (b >= e) return false;
    w.push_back({0, b, e});
    return done(StepSource::kWhole,
                "nothing repeats once per iteration: the whole capture is analysed as one "
                "window");
  }
  return false;
}

}  // namespace stoker::telemetry
