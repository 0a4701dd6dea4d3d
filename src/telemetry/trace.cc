#include "telemetry/trace.h"

#include <cstdint>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <unordered_map>

#include "telemetry/json_scan.h"

namespace stoker::telemetry {

const HostThread* TraceSummary::FindThread(int64_t key) const {
  for (const auto& t : threads) {
    if (t.key == key) return &t;
  }
  return nullptr;
}

double TraceSummary::TokensPerStep() const {
  int64_t top = 0;
  for (const auto& [b, n] : embedding_inputs) top = std::max(top, n);
  if (top == 0 || steps.empty()) return 0;
  // The token embedding's calls in time order; each step counts those inside it.
  std::vector<int64_t> at;
  for (const auto& [b, n] : embedding_inputs)
    if (n == top) at.push_back(b);
  std::sort(at.begin(), at.end());
  std::vector<double> per_step;
  for (const auto& w : steps) {
    auto calls = std::lower_bound(at.begin(), at.end(), w.end) -
                 std::lower_bound(at.begin(), at.end(), w.begin);
    if (calls > 0) per_step.push_back(static_cast<double>(calls) * static_cast<double>(top));
  }
  if (per_step.empty()) return 0;
  std::nth_element(per_step.begin(), per_step.begin() + per_step.size() / 2, per_step.end());
  return per_step[per_step.size() / 2];
}

namespace {

using json::Scan;

// Doubles from the file to integers without undefined behaviour: clamped to +-2^62 (NaN
// to 0), so that sums of a time and a duration cannot overflow.
constexpr double kClamp = 4.611686018427388e18;  // 2^62
int64_t ClampI64(double d) {
  if (!(d == d)) return 0;
  if (d > kClamp) return static_cast<int64_t>(kClamp);
  if (d < -kClamp) return -static_cast<int64_t>(kClamp);
  return static_cast<int64_t>(d);
}

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}
bool StartsWith(std::string_view s, std::string_view p);

// The range python/stoker/pipeline.py (PROFILER_RANGE) puts around each wait for a batch
// while a profiler records: a data wait, like PyTorch's "enumerate(DataLoader)#...".
constexpr std::string_view kStokerPipelineRange = "stoker.Pipeline.__next__";

// A span that may be a user annotation (record_function): Kineto's user_annotation
// category; in the category-less export (no "cat" at all), a name that is no framework
// operator, autograd node, module or known annotation.
bool MaybeAnnotation(std::string_view cat, std::string_view n) {
  if (n.size() < 2 || n.size() > 200) return false;
  if (n[0] == 'a' && StartsWith(n, "aten::")) return false;
  // ProfilerStep#N, enumerate(DataLoader)#..., Optimizer.step#..., nccl:/gloo:/c10d::
  // collectives, aten::/autograd:: operators: handled as what they are, not annotations.
  if (n[0] == '[' || n.find('#') != n.npos || n.find(':') != n.npos) return false;
  if (n == kStokerPipelineRange) return false;  // a data wait, not a step marker
  if (!cat.empty()) return cat == "user_annotation";
  if (n.find("Backward") != n.npos || StartsWith(n, "nn.Module") || StartsWith(n, "cuda") ||
      (n.size() > 8 && n.compare(n.size() - 8, 8, ".forward") == 0)) {
    return false;
  }
  return n != "detach" && n != "detach_" && n != "record_param_comms";
}

bool StartsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}
bool Contains(std::string_view s, std::string_view p) { return s.find(p) != s.npos; }

// A value that is either a number or a string (pid/tid).
struct IdValue {
  bool present = false;
  bool is_num = false;
  int64_t num = 0;
  std::string_view str;
  int64_t Key() const {
    if (is_num) return num;
    return static_cast<int64_t>(std::hash<std::string_view>{}(str) | (1ULL << 62));
  }
};

struct RawEvent {
  std::string_view ph, cat, name;
  bool name_escaped = false;
  IdValue pid, tid;
  double ts = 0, dur = 0;
  bool has_ts = false, has_dur = false, ts_int = true;
  int64_t device = -1, stream = -1, bytes = -1;
  int64_t total_allocated = -1;
  int64_t correlation = -1;
  int64_t input_tokens = -1;  // aten::embedding: the product of its 2-D first input's dims
};

// Parses the value at p as a number (ints and floats); strings and others are skipped.
Scan NumberOrSkip(const char*& p, const char* end, double* d, bool* ok, bool* is_int,
                  const char** err) {
  json::SkipWs(p, end);
  if (p >= end) return Scan::kNeedMore;
  if (*p == '-' || (*p >= '0' && *p <= '9')) {
    int64_t i;
    Scan s = json::Number(p, end, d, &i, is_int, err);
    if (s == Scan::kOk) *ok = true;
    return s;
  }
  *ok = false;
  return json::SkipValue(p, end, err);
}

// "Input Dims" of an aten::embedding event ([[B, S], [V, H], ...]): B * S in *tokens when
// the first input has two dims (token ids [batch, sequence]); anything else is skipped.
Scan ParseEmbeddingDims(const char*& p, const char* end, int64_t* tokens, const char** err) {
  json::SkipWs(p, end);
  if (p >= end) return Scan::kNeedMore;
  if (*p != '[') return json::SkipValue(p, end, err);
  ++p;
  json::SkipWs(p, end);
  if (p >= end) return Scan::kNeedMore;
  if (*p == ']') {
    ++p;
    return Scan::kOk;
  }
  bool first = true;
  while (true) {
    json::SkipWs(p, end);
    if (p >= end) return Scan::kNeedMore;
    if (first && *p == '[') {  // the first input's dims
      ++p;
      double dims[3] = {0, 0, 0};
      int n = 0;
      bool all_ints = true;
      while (true) {
        json::SkipWs(p, end);
        if (p >= end) return Scan::kNeedMore;
        if (*p == ']') {
          ++p;
          break;
        }
        double d;
        bool ok = false, is_int = true;
        Scan s = NumberOrSkip(p, end, &d, &ok, &is_int, err);
        if (s != Scan::kOk) return s;
        if (!ok || !is_int) all_ints = false;
        if (n < 3) dims[n] = d;
        ++n;
        json::SkipWs(p, end);
        if (p >= end) return Scan::kNeedMore;
        if (*p == ',') ++p;
      }
      if (all_ints && n == 2 && dims[0] >= 1 && dims[1] >= 1 && dims[0] * dims[1] < 1e12)
        *tokens = static_cast<int64_t>(dims[0] * dims[1]);
    } else {
      Scan s = json::SkipValue(p, end, err);
      if (s != Scan::kOk) return s;
    }
    first = false;
    json::SkipWs(p, end);
    if (p >= end) return Scan::kNeedMore;
    if (*p == ',') {
      ++p;
      continue;
    }
    if (*p == ']') {
      ++p;
      return Scan::kOk;
    }
    *err = "expected ',' or ']' in Input Dims";
    return Scan::kError;
  }
}


Scan ParseId(const char*& p, const char* end, IdValue* v, const char** err) {
  json::SkipWs(p, end);
  if (p >= end) return Scan::kNeedMore;
  if (*p == '"') {
    bool esc;
    Scan s = json::String(p, end, &v->str, &esc, err);
    if (s == Scan::kOk) v->present = true, v->is_num = false;
    return s;
  }
  if (*p == '-' || (*p >= '0' && *p <= '9')) {
    double d;
    bool is_int;
    Scan s = json::Number(p, end, &d, &v->num, &is_int, err);
    if (s == Scan::kOk) {
      v->present = true;
      v->is_num = true;
      if (!is_int) v->num = ClampI64(d);
    }
    return s;
  }
  return json::SkipValue(p, end, err);
}

Scan ParseArgs(const char*& p, const char* end, RawEvent* ev, const char** err) {
  json::SkipWs(p, end);
  if (p >= end) return Scan::kNeedMore;
  if (*p != '{') return json::SkipValue(p, end, err);
  ++p;
  json::SkipWs(p, end);
  if (p >= end) return Scan::kNeedMore;
  if (*p == '}') {
    ++p;
    return Scan::kOk;
  }
  while (true) {
    json::SkipWs(p, end);
    if (p >= end) return Scan::kNeedMore;
    if (*p != '"') {
      *err = "expected a key in args";
      return Scan::kError;
    }
    std::string_view key;
    bool esc;
    Scan s = json::String(p, end, &key, &esc, err);
    if (s != Scan::kOk) return s;
    json::SkipWs(p, end);
    if (p >= end) return Scan::kNeedMore;
    if (*p != ':') {
      *err = "expected ':' in args";
      return Scan::kError;
    }
    ++p;
    int64_t* target = nullptr;
    bool embedding_dims = false;
    switch (key.size()) {  // dispatch on length first: most args keys are skipped
      case 6:
        if (key == "device") target = &ev->device;
        else if (key == "stream") target = &ev->stream;
        break;
      case 5:
        if (key == "bytes") target = &ev->bytes;
        break;
      case 15:
        if (key == "Total Allocated") target = &ev->total_allocated;
        break;
      case 11:
        if (key == "correlation") target = &ev->correlation;
        break;
      case 10:
        embedding_dims = key == "Input Dims" && ev->name == "aten::embedding";
        break;
      default:
        break;
    }
    if (embedding_dims) {
      s = ParseEmbeddingDims(p, end, &ev->input_tokens, err);
      if (s != Scan::kOk) return s;
    } else if (target != nullptr) {
      double d;
      bool ok = false, is_int;
      s = NumberOrSkip(p, end, &d, &ok, &is_int, err);
      if (s != Scan::kOk) return s;
      if (ok) *target = ClampI64(d);
    } else {
      s = json::SkipValue(p, end, err);
      if (s != Scan::kOk) return s;
    }
    json::SkipWs(p, end);
    if (p >= end) return Scan::kNeedMore;
    if (*p == ',') {
      ++p;
      continue;
    }
    if (*p == '}') {
      ++p;
      return Scan::kOk;
    }
    *err = "expected ',' or '}' in args";
    return Scan::kError;
  }
}

// One trace event object.
Scan ParseEvent(const char*& p, const char* end, RawEvent* ev, const char** err) {
  json::SkipWs(p, end);
  if (p >= end) return Scan::kNeedMore;
  if (*p != '{') {
    // Not an object: skip it (it is valid JSON but not an event).
    return json::SkipValue(p, end, err);
  }
  ++p;
  json::SkipWs(p, end);
  if (p >= end) return Scan::kNeedMore;
  if (*p == '}') {
    ++p;
    return Scan::kOk;
  }
  while (true) {
    json::SkipWs(p, end);
    if (p >= end) return Scan::kNeedMore;
    if (*p != '"') {
      *err = "expected a key";
      return Scan::kError;
    }
    std::string_view key;
    bool esc;
    Scan s = json::String(p, end, &key, &esc, err);
    if (s != Scan::kOk) return s;
    json::SkipWs(p, end);
    if (p >= end) return Scan::kNeedMore;
    if (*p != ':') {
      *err = "expected ':'";
      return Scan::kError;
    }
    ++p;
    json::SkipWs(p, end);
    if (p >= end) return Scan::kNeedMore;
    // Keys by length and first letter (no string compares on the hot path).
    enum class K { kOther, kPh, kCat, kName, kTs, kDur, kPid, kTid, kArgs } k = K::kOther;
    const char* kp = key.data();
    switch (key.size()) {
      case 2:
        if (kp[0] == 'p' && kp[1] == 'h') k = K::kPh;
        else if (kp[0] == 't' && kp[1] == 's') k = K::kTs;
        break;
      case 3:
        if (kp[0] == 'c' && kp[1] == 'a' && kp[2] == 't') k = K::kCat;
        else if (kp[0] == 'd' && kp[1] == 'u' && kp[2] == 'r') k = K::kDur;
        else if (kp[0] == 'p' && kp[1] == 'i' && kp[2] == 'd') k = K::kPid;
        else if (kp[0] == 't' && kp[1] == 'i' && kp[2] == 'd') k = K::kTid;
        break;
      case 4:
        if (key == "name") k = K::kName;
        else if (key == "args") k = K::kArgs;
        break;
      default:
        break;
    }
    switch (k) {
      case K::kPh:
      case K::kCat:
      case K::kName:
        if (*p == '"') {
          std::string_view v;
          bool e2;
          s = json::String(p, end, &v, &e2, err);
          if (s != Scan::kOk) return s;
          if (k == K::kPh) ev->ph = v;
          else if (k == K::kCat) ev->cat = v;
          else ev->name = v, ev->name_escaped = e2;
        } else {
          s = json::SkipValue(p, end, err);
          if (s != Scan::kOk) return s;
        }
        break;
      case K::kTs:
      case K::kDur: {
        double d;
        bool ok = false, is_int = true;
        s = NumberOrSkip(p, end, &d, &ok, &is_int, err);
        if (s != Scan::kOk) return s;
        if (ok) {
          if (k == K::kTs) ev->ts = d, ev->has_ts = true, ev->ts_int = is_int;
          else ev->dur = d, ev->has_dur = true;
        }
        break;
      }
      case K::kPid:
        s = ParseId(p, end, &ev->pid, err);
        if (s != Scan::kOk) return s;
        break;
      case K::kTid:
        s = ParseId(p, end, &ev->tid, err);
        if (s != Scan::kOk) return s;
        break;
      case K::kArgs:
        s = ParseArgs(p, end, ev, err);
        if (s != Scan::kOk) return s;
        break;
      case K::kOther:
        s = json::SkipValue(p, end, err);
        if (s != Scan::kOk) return s;
        break;
    }
    json::SkipWs(p, end);
    if (p >= end) return Scan::kNeedMore;
    if (*p == ',') {
      ++p;
      continue;
    }
    if (*p == '}') {
      ++p;
      return Scan::kOk;
    }
    *err = "expected ',' or '}' in an event";
    return Scan::kError;
  }
}

bool IsCommKernel(std::string_view n) {
  return StartsWith(n, "nccl") || StartsWith(n, "hccl") || StartsWith(n, "rccl") ||
         Contains(n, "ncclKernel") || Contains(n, "ncclDevKernel");
}
// Kernel-name markers of tensor-core use (TensorBoard plugin tensor_core.py, plus the
// tensorop/wgmma spellings of newer CUTLASS/cuBLAS kernels).
bool IsTensorCoreKernel(std::string_view n) {
  static const char* kMarks[] = {"h884", "s884", "h1688", "s1688", "hmma", "i8816", "16816",
                                 "xmma_gemm", "xmma_implicit_gemm", "c1688", "tensorop",
                                 "wgmma", "s16816", "h16816", "bf16816", "884gemm"};
  for (const char* m : kMarks) {
    if (n.find(m) != std::string_view::npos) return true;
  }
  return false;
}

bool IsSyncCall(std::string_view n) {
  return n == "cudaStreamSynchronize" || n == "cudaDeviceSynchronize" ||
         n == "cudaEventSynchronize" || n == "cuStreamSynchronize" ||
         n == "cuCtxSynchronize" || n == "cuEventSynchronize" || n == "hipStreamSynchronize" ||
         n == "hipDeviceSynchronize" || n == "cudaStreamSynchronize_ptsz";
}
bool IsLaunch(std::string_view n) {
  return StartsWith(n, "cudaLaunch") || StartsWith(n, "cuLaunch") || n == "cudaGraphLaunch" ||
         StartsWith(n, "hipLaunch") || StartsWith(n, "hipExtLaunch");
}

enum class Cat { kOther, kKernel, kMemcpy, kMemset, kRuntime, kGpuAnnotation, kPython,
                 kCpu, kTrace, kFlow };

Cat Classify(std::string_view cat) {
  if (cat.empty()) return Cat::kCpu;
  switch (cat[0] | 0x20) {
    case 'k':
      if (IEquals(cat, "kernel")) return Cat::kKernel;
      break;
    case 'g':
      if (IEquals(cat, "gpu_memcpy")) return Cat::kMemcpy;
      if (IEquals(cat, "gpu_memset")) return Cat::kMemset;
      if (IEquals(cat, "gpu_user_annotation")) return Cat::kGpuAnnotation;
      break;
    case 'm':
      if (IEquals(cat, "memcpy")) return Cat::kMemcpy;
      if (IEquals(cat, "memset")) return Cat::kMemset;
      break;
    case 'c':
      if (IEquals(cat, "cuda_runtime") || IEquals(cat, "cuda_driver")) return Cat::kRuntime;
      if (IEquals(cat, "cpu_op") || IEquals(cat, "cpu_instant_event")) return Cat::kCpu;
      break;
    case 'r':
      if (IEquals(cat, "runtime")) return Cat::kRuntime;
      break;
    case 'o':
      if (IEquals(cat, "operator")) return Cat::kCpu;
      break;
    case 'u':
      if (IEquals(cat, "user_annotation")) return Cat::kCpu;
      break;
    case 'p':
      if (IEquals(cat, "python_function")) return Cat::kPython;
      break;
    case 't':
      if (IEquals(cat, "trace")) return Cat::kTrace;
      break;
    case 'a':
      if (IEquals(cat, "ac2g") || IEquals(cat, "async_cpu_to_gpu") || IEquals(cat, "async"))
        return Cat::kFlow;
      break;
    case 'f':
      if (IEquals(cat, "fwdbwd") || IEquals(cat, "flow")) return Cat::kFlow;
      break;
  }
  return Cat::kOther;
}

class Builder {
 public:
  explicit Builder(TraceSummary* out) : out_(out) {}

  int64_t ToNs(double raw) {
    if (!have_base_) {
      base_ = raw;
      have_base_ = true;
    }
    return ClampI64(std::nearbyint((raw - base_) * 1000.0));
  }

  void AddCollective(std::string_view n, int64_t ns) {
    auto it = collectives_.find(n);
    if (it == collectives_.end()) {
      if (collectives_.size() >= 64) n = "other";
      it = collectives_.emplace(std::string(n), 0).first;
    }
    it->second += ns;
  }

  GpuActivity& Gpu(int64_t dev) {
    auto it = gpu_index_.find(dev);
    if (it != gpu_index_.end()) return gpus_[it->second];
    gpu_index_[dev] = gpus_.size();
    gpus_.emplace_back();
    gpus_.back().device = static_cast<int>(dev);
    return gpus_.back();
  }
  IntervalSet& Thread(int64_t key) {
    auto it = thread_index_.find(key);
    if (it != thread_index_.end()) return threads_[it->second].ops;
    thread_index_[key] = threads_.size();
    threads_.emplace_back();
    threads_.back().key = key;
    return threads_.back().ops;
  }

  void Add(const RawEvent& ev) {
    ++out_->events;
    if (ev.ph.size() != 1) return;
    char ph = ev.ph[0];
    if (ph == 'i' || ph == 'I') {
      if (ev.total_allocated >= 0 && ev.name == "[memory]") {
        out_->peak_mem_bytes = std::max(out_->peak_mem_bytes, ev.total_allocated);
      }
      return;
    }
    if (ph != 'X' || !ev.has_ts) return;
    if (!ev.ts_int) any_fraction_ = true;
    if (first_raw_ts_ == 0) first_raw_ts_ = ev.ts;
    if (!ev.cat.empty() && ev.cat[0] >= 'A' && ev.cat[0] <= 'Z') old_cats_ = true;
    Cat c = Classify(ev.cat);
    if (c == Cat::kFlow || c == Cat::kPython || c == Cat::kGpuAnnotation || c == Cat::kTrace) {
      return;
    }
    int64_t b = ToNs(ev.ts);
    int64_t e = b + std::clamp<int64_t>(ClampI64(std::nearbyint(ev.dur * 1000.0)), 0, int64_t{1} << 61);
    if (!ev.has_dur) e = b;
    std::string_view n = ev.name;
    ++out_->kept_events;
    if (c == Cat::kCpu) {
      steps_.host_begin = std::min(steps_.host_begin, b);
      steps_.host_end = std::max(steps_.host_end, e);
    }
    switch (c) {
      case Cat::kKernel: {
        int64_t dev = ev.device >= 0 ? ev.device : (ev.pid.is_num ? ev.pid.num : 0);
        GpuActivity& g = Gpu(dev);
        bool comm = IsCommKernel(n);
        g.kernels++;
        if (comm) {
          g.comm_kernels++;
          g.comm_kernel_ns += e - b;
          g.comm.Add(b, e);
          AddCollective(n, e - b);
        } else {
          g.kernel_ns += e - b;
          g.compute.Add(b, e);
        }
        g.first_ns = std::min(g.first_ns, b);
        g.last_ns = std::max(g.last_ns, e);
        if (!comm) {
          if (IsTensorCoreKernel(n)) {
            out_->tc_kernel_ns += e - b;
          } else if (Contains(n, "gemm") || Contains(n, "conv") || Contains(n, "Conv") ||
                     Contains(n, "Gemm")) {
            out_->gemm_kernel_ns += e - b;
          }
        }
        auto kit = kernel_stats_.find(n);
        if (kit == kernel_stats_.end()) kit = kernel_stats_.emplace(std::string(n), KernelStat{}).first;
        auto& ks = kit->second;
        ks.count++;
        ks.total_ns += e - b;
        ks.comm = comm;
        return;
      }
      case Cat::kMemcpy: {
        int64_t dev = ev.device >= 0 ? ev.device : (ev.pid.is_num ? ev.pid.num : 0);
        GpuActivity& g = Gpu(dev);
        g.memcpys++;
        if (ev.correlation >= 0) {  // only the directions the doctor attributes
          if (Contains(n, "HtoD")) {
            copy_kinds_.push_back({ev.correlation, kCopyH2D});
          } else if (Contains(n, "DtoH")) {
            copy_kinds_.push_back({ev.correlation, kCopyD2H});
          }
        }
        if (Contains(n, "HtoD")) {
          if (Contains(n, "Pageable")) {
            g.h2d_pageable.Add(b, e);
            g.h2d_pageable_count++;
            if (ev.bytes > 0) g.h2d_pageable_bytes += ev.bytes;
          } else {
            g.h2d_pinned.Add(b, e);
            g.h2d_pinned_count++;
            if (ev.bytes > 0) g.h2d_pinned_bytes += ev.bytes;
          }
        } else if (Contains(n, "DtoH")) {
          g.d2h.Add(b, e);
        } else {
          g.other.Add(b, e);
        }
        g.first_ns = std::min(g.first_ns, b);
        g.last_ns = std::max(g.last_ns, e);
        return;
      }
      case Cat::kMemset: {
        int64_t dev = ev.device >= 0 ? ev.device : (ev.pid.is_num ? ev.pid.num : 0);
        GpuActivity& g = Gpu(dev);
        g.memsets++;
        g.other.Add(b, e);
        g.first_ns = std::min(g.first_ns, b);
        g.last_ns = std::max(g.last_ns, e);
        return;
      }
      case Cat::kRuntime:
        if (IsLaunch(n)) {
          out_->launches++;
          out_->launch_ns += e - b;
        } else if (IsSyncCall(n)) {
          out_->sync_calls++;
          out_->sync.Add(b, e);
        } else if (StartsWith(n, "cudaMemcpy") || StartsWith(n, "hipMemcpy")) {
          out_->memcpy_calls.Add(b, e);
          if (ev.correlation >= 0) copy_calls_.push_back({ev.correlation, b, e});
        }
        return;
      default:
        break;
    }
    // Host-side annotations and operators. Most operators ("aten::...") cannot be one of
    // the special names below: check their first letter before any prefix compare.
    int64_t key = static_cast<int64_t>(static_cast<uint64_t>(ev.pid.Key()) * 1000003u +
                                       static_cast<uint64_t>(ev.tid.Key()));
    char c0 = n.empty() ? '\0' : n[0];
    // A possible iteration marker waits for Finish(), which adds it to the thread's
    // operators unless it turns out to be the marker.
    if (e > b && MaybeAnnotation(ev.cat, n) && steps_.AddAnnotation(n, {key, b, e})) return;
    if (ev.input_tokens > 0 && out_->embedding_inputs.size() < (1u << 20))
      out_->embedding_inputs.push_back({b, ev.input_tokens});
    if (!(c0 == 'P' || c0 == 'e' || c0 == 'O' || c0 == 'n' || c0 == 'g' || c0 == 'r' ||
          c0 == 'c' || c0 == 'm' || c0 == 'u' || c0 == 'D' || c0 == '[' || c0 == 's')) {
      Thread(key).Add(b, e);
      return;
    }
    if (StartsWith(n, "ProfilerStep#")) {
      StepWindow w;
      w.number = std::strtoll(std::string(n.substr(13)).c_str(), nullptr, 10);
      w.begin = b;
      w.end = e;
      out_->steps.push_back(w);
      step_threads_[key]++;
      return;
    }
    // PyTorch Lightning's profiler wraps the fetch as "[_TrainingEpochLoop].train_dataloader_next"
    // (older versions "[TrainingEpochLoop].train_dataloader_next").
    const bool stoker_pipeline = n == kStokerPipelineRange;
    if (StartsWith(n, "enumerate(DataLoader)#") || StartsWith(n, "enumerate(DataPipe)#") ||
        stoker_pipeline ||
        (c0 == '[' && n.size() > 23 &&
         n.compare(n.size() - 23, 23, "].train_dataloader_next") == 0)) {
      out_->data_wait.Add(b, e);
      out_->dataloader_calls++;
      steps_.loader_calls.push_back({key, b, e});
      if (out_->dataloader_iter.empty() && stoker_pipeline) {
        out_->dataloader_iter = "stoker.Pipeline";
      } else if (out_->dataloader_iter.empty() && c0 != '[') {
        size_t h = n.find('#');
        std::string_view it = n.substr(h + 1);
        it = it.substr(0, it.find('.'));
        out_->dataloader_iter = std::string(it);
      }
      return;
    }
    if (StartsWith(n, "Optimizer.step#") || StartsWith(n, "Optimizer.zero_grad#")) {
      out_->optimizer.Add(b, e);
      if (StartsWith(n, "Optimizer.step#")) steps_.optimizer_steps.push_back({key, b, e});
      if (out_->optimizer_name.empty() && StartsWith(n, "Optimizer.step#")) {
        std::string_view cls = n.substr(15);
        cls = cls.substr(0, std::min<size_t>(cls.find('.'), 64));
        out_->optimizer_name = std::string(cls);
      }
      Thread(key).Add(b, e);
      return;
    }
    if (StartsWith(n, "nccl:") || StartsWith(n, "gloo:") || n == "record_param_comms" ||
        StartsWith(n, "c10d::") || StartsWith(n, "mpi:") || StartsWith(n, "ucc:")) {
      out_->host_comm.Add(b, e);
      AddCollective(n, e - b);
      return;
    }
    if (n == "DataParallel.forward") out_->uses_dataparallel = true;
    if (n == "DistributedDataParallel.forward") out_->uses_ddp = true;
    Thread(key).Add(b, e);
  }

  void Finish(const nlohmann::json& meta, const TraceReadOptions& opts) {
    // Units.
    bool ns = false;
    if (opts.unit == TraceReadOptions::Unit::kNanos) {
      ns = true;
    } else if (opts.unit == TraceReadOptions::Unit::kAuto) {
      auto it = meta.find("displayTimeUnit");
      if (it != meta.end() && it->is_string() && it->get<std::string>() == "ns" &&
          !any_fraction_ && first_raw_ts_ > 1e17) {
        ns = true;
      }
    }
    out_->ns_input = ns;
    if (old_cats_ && out_->format == "kineto") out_->format = "kineto (old categories)";
    out_->base_us = ns ? base_ / 1000.0 : base_;
    for (auto& g : gpus_) {
      for (IntervalSet* s : {&g.compute, &g.comm, &g.h2d_pageable, &g.h2d_pinned, &g.d2h,
                             &g.other}) {
        s->Compact();
        if (ns) s->Scale(1e-3);
      }
      if (ns) {
        g.kernel_ns /= 1000, g.comm_kernel_ns /= 1000;
        g.first_ns /= 1000, g.last_ns /= 1000;
      }
    }
    std::sort(gpus_.begin(), gpus_.end(),
              [](const GpuActivity& a, const GpuActivity& b) { return a.device < b.device; });
    out_->gpus = std::move(gpus_);
    // Annotations: the one that marks iterations (for a trace without ProfilerStep#N) is
    // not host work; the others are operator spans of their threads.
    const bool infer = out_->steps.empty() || (opts.steps_from != StepSource::kAuto &&
                                               opts.steps_from != StepSource::kProfilerStep);
    const std::string marker =
        infer && (opts.steps_from == StepSource::kAuto || opts.steps_from == StepSource::kAnnotation)
            ? PickAnnotation(steps_)
            : std::string();
    for (auto it = steps_.annotations.begin(); it != steps_.annotations.end();) {
      if (it->first == marker) {
        ++it;
        continue;
      }
      for (const auto& s : it->second) Thread(s.thread).Add(s.begin, s.end);
      it = steps_.annotations.erase(it);
    }
    for (auto& t : threads_) {
      t.ops.Compact();
      if (ns) t.ops.Scale(1e-3);
    }
    out_->threads = std::move(threads_);
    // Copy calls by direction: join each host cudaMemcpy* call to its GPU copy by the
    // correlation id (the two events can come in any order).
    std::sort(copy_kinds_.begin(), copy_kinds_.end(),
              [](const CopyKind& a, const CopyKind& b) { return a.corr < b.corr; });
    for (const auto& c : copy_calls_) {
      auto it = std::lower_bound(copy_kinds_.begin(), copy_kinds_.end(), c.corr,
                                 [](const CopyKind& k, int64_t v) { return k.corr < v; });
      if (it == copy_kinds_.end() || it->corr != c.corr) continue;
      if (it->kind == kCopyH2D) {
        out_->h2d_calls.Add(c.begin, c.end);
      } else if (it->kind == kCopyD2H) {
        out_->d2h_calls.Add(c.begin, c.end);
        out_->d2h_call_count++;
      }
    }
    std::vector<CopyCall>().swap(copy_calls_);
    std::vector<CopyKind>().swap(copy_kinds_);
    for (IntervalSet* s : {&out_->data_wait, &out_->optimizer, &out_->host_comm, &out_->sync,
                           &out_->memcpy_calls, &out_->h2d_calls, &out_->d2h_calls}) {
      s->Compact();
      if (ns) s->Scale(1e-3);
    }
    if (ns) out_->launch_ns /= 1000, out_->tc_kernel_ns /= 1000, out_->gemm_kernel_ns /= 1000;
    auto& st = out_->steps;
    if (ns) {
      for (auto& w : st) w.begin /= 1000, w.end /= 1000;
    }
    std::sort(st.begin(), st.end(),
              [](const StepWindow& a, const StepWindow& b) { return a.begin < b.begin; });
    // The same step can appear twice (e.g. two annotations); drop duplicates.
    st.erase(std::unique(st.begin(), st.end(),
                         [](const StepWindow& a, const StepWindow& b) {
                           return a.number == b.number && a.begin == b.begin;
                         }),
             st.end());
    int64_t best = 0;
    uint64_t best_n = 0;
    for (const auto& [k, n] : step_threads_) {
      if (n > best_n) best = k, best_n = n;
    }
    out_->main_thread = best;
    if (infer) {
      if (ns) steps_.Scale(1e-3);
      if (!st.empty()) {
        out_->steps_note = fmt::format("{} ProfilerStep#N events ignored (steps from {}); ",
                                       st.size(), StepSourceName(opts.steps_from));
        st.clear();
      } else {
        out_->steps_note = "no ProfilerStep#N events: ";
      }
      std::string ignored = out_->steps_note;
      if (opts.steps_from != StepSource::kProfilerStep && InferSteps(steps_, opts.steps_from, out_)) {
        out_->steps_note = ignored + out_->steps_note;
      }
    }
    decltype(steps_.annotations)().swap(steps_.annotations);
    std::vector<KernelStat> ks;
    ks.reserve(kernel_stats_.size());
    for (auto& [name, s] : kernel_stats_) {
      KernelStat k = s;
      k.name = name.find('\\') != std::string::npos ? json::Unescape(name) : name;
      if (ns) k.total_ns /= 1000;
      ks.push_back(std::move(k));
    }
    std::sort(ks.begin(), ks.end(),
              [](const KernelStat& a, const KernelStat& b) { return a.total_ns > b.total_ns; });
    if (ks.size() > 20) ks.resize(20);
    out_->top_kernels = std::move(ks);
    for (auto& [name, t] : collectives_) {
      out_->collectives.emplace_back(
          name.find('\\') != std::string::npos ? json::Unescape(name) : name, ns ? t / 1000 : t);
    }
    std::sort(out_->collectives.begin(), out_->collectives.end(),
              [](const auto& a, const auto& b) { return a.second > b.second; });

    // Metadata.
    if (auto it = meta.find("distributedInfo"); it != meta.end() && it->is_object()) {
      const auto& d = *it;
      if (d.contains("rank") && d["rank"].is_number_integer()) out_->rank = d["rank"].get<int>();
      if (d.contains("world_size") && d["world_size"].is_number_integer())
        out_->world_size = d["world_size"].get<int>();
      if (d.contains("backend") && d["backend"].is_string())
        out_->backend = d["backend"].get<std::string>();
    }
    if (auto it = meta.find("deviceProperties"); it != meta.end() && it->is_array()) {
      for (const auto& d : *it) {
        if (!d.is_object()) continue;
        DeviceProps p;
        if (d.contains("id") && d["id"].is_number_integer()) p.id = d["id"].get<int>();
        if (d.contains("name") && d["name"].is_string()) p.name = d["name"].get<std::string>();
        if (d.contains("totalGlobalMem") && d["totalGlobalMem"].is_number_integer())
          p.total_mem = d["totalGlobalMem"].get<int64_t>();
        if (d.contains("computeMajor") && d["computeMajor"].is_number_integer())
          p.compute_major = d["computeMajor"].get<int>();
        if (d.contains("computeMinor") && d["computeMinor"].is_number_integer())
          p.compute_minor = d["computeMinor"].get<int>();
        if (d.contains("numSms") && d["numSms"].is_number_integer())
          p.num_sms = d["numSms"].get<int>();
        out_->devices.push_back(std::move(p));
      }
    }
  }

 private:
  TraceSummary* out_;
  bool have_base_ = false;
  double base_ = 0;
  double first_raw_ts_ = 0;
  bool any_fraction_ = false;
  bool old_cats_ = false;
  std::vector<GpuActivity> gpus_;
  std::unordered_map<int64_t, size_t> gpu_index_;
  std::vector<HostThread> threads_;
  std::unordered_map<int64_t, size_t> thread_index_;
  std::unordered_map<int64_t, uint64_t> step_threads_;
  StepEvidence steps_;  // what repeats once per iteration, for traces without ProfilerStep
  // Host copy calls and GPU copies, joined by correlation id in Finish().
  enum : uint8_t { kCopyH2D, kCopyD2H };
  struct CopyCall {
    int64_t corr, begin, end;
  };
  struct CopyKind {
    int64_t corr;
    uint8_t kind;
  };
  std::vector<CopyCall> copy_calls_;
  std::vector<CopyKind> copy_kinds_;
  struct SvHash {
    using is_transparent = void;
    size_t operator()(std::string_view v) const { return std::hash<std::string_view>{}(v); }
  };
  std::unordered_map<std::string, KernelStat, SvHash, std::equal_to<>> kernel_stats_;
  std::unordered_map<std::string, int64_t, SvHash, std::equal_to<>> collectives_;
};

// Chunked input buffer over a ByteSource.
class Reader {
 public:
  Reader(ByteSource* src, size_t chunk) : src_(src), chunk_(chunk) {
    buf_.resize(std::max<size_t>(chunk, 4096));
  }
  const char* begin() const { return buf_.data() + pos_; }
  const char* end() const { return buf_.data() + len_; }
  void Advance(const char* p) { pos_ = static_cast<size_t>(p - buf_.data()); }
  uint64_t offset() const { return base_ + pos_; }
  bool eof() const { return eof_; }
  // Reads more input, keeping [pos_, len_). Returns false at the end of the stream.
  Result<bool> More() {
    if (eof_) return false;
    if (pos_ > 0) {
      std::memmove(buf_.data(), buf_.data() + pos_, len_ - pos_);
      base_ += pos_;
      len_ -= pos_;
      pos_ = 0;
    }
    if (len_ == buf_.size()) {
      if (buf_.size() >= kMaxBuffer) {
        return Corrupt("{}: a single JSON value at byte {} is larger than {} MiB",
                       src_->name(), base_, kMaxBuffer >> 20);
      }
      buf_.resize(buf_.size() * 2);
    }
    size_t want = std::min(chunk_, buf_.size() - len_);
    if (want == 0) want = buf_.size() - len_;
    STOKER_ASSIGN_OR_RETURN(size_t got, src_->Read(buf_.data() + len_, want));
    if (got == 0) {
      eof_ = true;
      return false;
    }
    len_ += got;
    return true;
  }
  // Skips whitespace (reading more as needed); returns the next char or -1 at EOF.
  Result<int> PeekNonWs() {
    while (true) {
      const char* p = begin();
      json::SkipWs(p, end());
      Advance(p);
      if (p < end()) return static_cast<int>(static_cast<unsigned char>(*p));
      STOKER_ASSIGN_OR_RETURN(bool more, More());
      if (!more) return -1;
    }
  }

  static constexpr size_t kMaxBuffer = size_t{256} << 20;

 private:
  ByteSource* src_;
  size_t chunk_;
  std::vector<char> buf_;
  size_t pos_ = 0, len_ = 0;
  uint64_t base_ = 0;
  bool eof_ = false;
};

Status Truncated(const ByteSource* src, uint64_t off, const char* what) {
  return Corrupt("{}: truncated JSON: the file ends at byte {} inside {}", src->name(), off,
                 what);
}

// Applies `fn(p, end, err)` to the value at the reader position, reading more input
// while the value is incomplete.
template <typename Fn>
Status WithValue(Reader& r, ByteSource* src, const char* what, Fn&& fn) {
  while (true) {
    const char* p = r.begin();
    const char* err = nullptr;
    Scan s = fn(p, r.end(), &err);
    if (s == Scan::kOk) {
      r.Advance(p);
      return Status::OK();
    }
    if (s == Scan::kError) {
      return Corrupt("{}: invalid JSON near byte {} in {}: {}", src->name(),
                     r.offset() + static_cast<uint64_t>(p - r.begin()), what,
                     err ? err : "syntax error");
    }
    STOKER_ASSIGN_OR_RETURN(bool more, r.More());
    if (!more) return Truncated(src, r.offset() + (r.end() - r.begin()), what);
  }
}

Status ReadEventArray(Reader& r, ByteSource* src, Builder* b) {
  // At '['.
  r.Advance(r.begin() + 1);
  STOKER_ASSIGN_OR_RETURN(int c, r.PeekNonWs());
  if (c < 0) return Truncated(src, r.offset(), "the event array");
  if (c == ']') {
    r.Advance(r.begin() + 1);
    return Status::OK();
  }
  while (true) {
    RawEvent ev;
    STOKER_RETURN_IF_ERROR(WithValue(r, src, "a trace event", [&](const char*& p, const char* e,
                                                                  const char** err) {
      ev = RawEvent{};
      return ParseEvent(p, e, &ev, err);
    }));
    b->Add(ev);
    STOKER_ASSIGN_OR_RETURN(c, r.PeekNonWs());
    if (c < 0) return Truncated(src, r.offset(), "the event array");
    if (c == ',') {
      r.Advance(r.begin() + 1);
      continue;
    }
    if (c == ']') {
      r.Advance(r.begin() + 1);
      return Status::OK();
    }
    return Corrupt("{}: invalid JSON near byte {}: expected ',' or ']' after a trace event",
                   src->name(), r.offset());
  }
}

}  // namespace

Result<TraceSummary> ReadTrace(ByteSource* src, const TraceReadOptions& opts) {
  TraceSummary out;
  out.path = src->name();
  Builder b(&out);
  Reader r(src, opts.chunk_bytes);
  nlohmann::json meta = nlohmann::json::object();
  STOKER_ASSIGN_OR_RETURN(int c, r.PeekNonWs());
  if (c < 0) return InvalidArgument("{}: empty file: not a trace", src->name());
  bool have_events = false;
  if (c == '[') {
    out.format = "chrome event array";
    STOKER_RETURN_IF_ERROR(ReadEventArray(r, src, &b));
    have_events = true;
  } else if (c == '{') {
    out.format = "kineto";
    r.Advance(r.begin() + 1);
    STOKER_ASSIGN_OR_RETURN(c, r.PeekNonWs());
    if (c == '}') {
      r.Advance(r.begin() + 1);
    } else {
      while (true) {
        std::string key;
        STOKER_RETURN_IF_ERROR(WithValue(r, src, "a top-level key",
                                         [&](const char*& p, const char* e, const char** err) {
                                           json::SkipWs(p, e);
                                           if (p >= e) return Scan::kNeedMore;
                                           if (*p != '"') {
                                             *err = "expected a key";
                                             return Scan::kError;
                                           }
                                           std::string_view raw;
                                           bool esc;
                                           Scan s = json::String(p, e, &raw, &esc, err);
                                           if (s != Scan::kOk) return s;
                                           json::SkipWs(p, e);
                                           if (p >= e) return Scan::kNeedMore;
                                           if (*p != ':') {
                                             *err = "expected ':'";
                                             return Scan::kError;
                                           }
                                           ++p;
                                           key = std::string(raw);
                                           return Scan::kOk;
                                         }));
        STOKER_ASSIGN_OR_RETURN(c, r.PeekNonWs());
        if (c < 0) return Truncated(src, r.offset(), "the top-level object");
        if (key == "traceEvents" && c != '[') {
          return InvalidArgument("{}: \"traceEvents\" at byte {} is not an array of events",
                                 src->name(), r.offset());
        }
        if (key == "traceEvents" && c == '[') {
          STOKER_RETURN_IF_ERROR(ReadEventArray(r, src, &b));
          have_events = true;
        } else {
          std::string_view span;
          STOKER_RETURN_IF_ERROR(WithValue(r, src, "a top-level value",
                                           [&](const char*& p, const char* e, const char** err) {
                                             const char* s0 = p;
                                             Scan s = json::SkipValue(p, e, err);
                                             if (s == Scan::kOk) span = std::string_view(s0, p - s0);
                                             return s;
                                           }));
          if (key == "deviceProperties" || key == "distributedInfo" ||
              key == "displayTimeUnit" || key == "baseTimeNanoseconds") {
            auto v = nlohmann::json::parse(span.begin(), span.end(), nullptr, false);
            if (!v.is_discarded()) meta[key] = std::move(v);
          }
        }
        STOKER_ASSIGN_OR_RETURN(c, r.PeekNonWs());
        if (c < 0) return Truncated(src, r.offset(), "the top-level object");
        if (c == ',') {
          r.Advance(r.begin() + 1);
          continue;
        }
        if (c == '}') {
          r.Advance(r.begin() + 1);
          break;
        }
        return Corrupt("{}: invalid JSON near byte {}: expected ',' or '}}' at the top level",
                       src->name(), r.offset());
      }
    }
  } else {
    return InvalidArgument("{}: not a JSON trace (starts with '{}')", src->name(),
                           static_cast<char>(c));
  }
  STOKER_ASSIGN_OR_RETURN(c, r.PeekNonWs());
  if (c >= 0) {
    return Corrupt("{}: invalid JSON: unexpected data after the end at byte {}", src->name(),
                   r.offset());
  }
  if (!have_events) {
    return InvalidArgument("{}: a JSON object without \"traceEvents\": not a PyTorch profiler "
                           "trace", src->name());
  }
  b.Finish(meta, opts);
  if (out.events == 0) {
    return InvalidArgument("{}: empty trace: \"traceEvents\" has no events", src->name());
  }
  if (out.steps.empty()) {
    if (opts.steps_from == StepSource::kAuto || opts.steps_from == StepSource::kProfilerStep) {
      return InvalidArgument(
          "{}: the trace has no ProfilerStep#N events{}: profile with torch.profiler.profile("
          "schedule=...) and call prof.step() once per training iteration",
          src->name(),
          opts.steps_from == StepSource::kAuto ? " and no host span to analyse" : "");
    }
    return InvalidArgument("{}: steps from {} asked for, but the trace has fewer than 3 of them",
                           src->name(), StepSourceName(opts.steps_from));
  }
  bool any_step = false;
  for (const auto& w : out.steps) any_step = any_step || w.end > w.begin;
  if (!any_step) {
    return InvalidArgument("{}: the trace's {} ProfilerStep#N event{} no duration (\"dur\" "
                           "missing, zero or negative): no step to break down",
                           src->name(), out.steps.size(), out.steps.size() == 1 ? " has" : "s have");
  }
  return out;
}

Result<TraceSummary> ReadTrace(Env* env, const std::string& path, const TraceReadOptions& opts) {
  STOKER_ASSIGN_OR_RETURN(auto src, OpenByteSource(env, path));
  return ReadTrace(src.get(), opts);
}

}  // namespace stoker::telemetry
