// Iterations of a trace that has no ProfilerStep#N events: a trace recorded without a
// profiler schedule and prof.step(), or with the older torch.autograd.profiler API.
//
// The trace reader keeps what repeats once per iteration (StepEvidence) and, when the
// trace has no ProfilerStep#N, InferSteps() makes the step windows from the first of these
// that repeats at least three times, in this order:
//   1. a user annotation (record_function("train_step"), Kineto's user_annotation category;
//      in the category-less export, a repeating non-framework span on the main thread),
//      each occurrence starting an iteration;
//   2. Optimizer.step calls, each ending an iteration (what prof.step() after opt.step()
//      marks);
//   3. DataLoader __next__ calls, each starting an iteration;
//   4. bursts of GPU work separated by idle gaps (the largest gaps, when they recur);
//   5. otherwise the whole capture is one window.
// TraceReadOptions::steps_from forces one source (e.g. optimizer steps in a trace whose
// ProfilerStep marks micro-batches).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "telemetry/interval.h"

namespace stoker::telemetry {

struct TraceSummary;

enum class StepSource {
  kAuto,          // ProfilerStep#N when present, else inferred in the order above
  kProfilerStep,  // ProfilerStep#N only (an error without them)
  kAnnotation,
  kOptimizer,
  kDataLoader,
  kGpuBursts,
  kWhole,
};
// "ProfilerStep#N", "annotation", "Optimizer.step", "DataLoader.__next__",
// "GPU kernel bursts", "whole capture"
const char* StepSourceName(StepSource s);
// The CLI spellings: auto, profiler, annotation, optimizer, dataloader, gpu, whole.
// False for anything else.
bool ParseStepSource(std::string_view name, StepSource* out);

struct MarkedSpan {
  int64_t thread = 0;  // the reader's pid/tid key
  int64_t begin = 0, end = 0;
};

struct StepEvidence {
  std::vector<MarkedSpan> optimizer_steps;  // Optimizer.step#...
  std::vector<MarkedSpan> loader_calls;     // DataLoader / DataPipe __next__
  // Candidate user annotations by name (at most kMaxNames names; a name with more than
  // kMaxSpans occurrences is dropped: no iteration marker repeats that often).
  std::map<std::string, std::vector<MarkedSpan>, std::less<>> annotations;
  static constexpr size_t kMaxNames = 256, kMaxSpans = 200'000;
  int64_t host_begin = INT64_MAX, host_end = INT64_MIN;  // every host span
  // False when not kept (too many names, or this name repeats too often): the caller then
  // treats the span as an ordinary host operator.
  bool AddAnnotation(std::string_view name, const MarkedSpan& s);
  void Scale(double f);  // ns input: times / 1000
};

// The annotation that would mark iterations ("" when none): the repeating candidate that
// covers most time, if it covers at least a fifth of the span of its occurrences. The
// marker is not host work of its own; every other candidate is an ordinary operator span.
std::string PickAnnotation(const StepEvidence& ev);

// Fills t->steps, t->steps_from and t->steps_note (and t->main_thread when no ProfilerStep
// chose it) from the evidence, for `want` (kAuto: the order above). Returns false when the
// requested source does not repeat (then t->steps is left empty).
bool InferSteps(const StepEvidence& ev, StepSource want, TraceSummary* t);

}  // namespace stoker::telemetry
