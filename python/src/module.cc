// stoker._stoker: the pybind11 extension. Thin by design: the engine runs in C++ threads,
// Python only receives finished batches (zero-copy) and never runs per-sample code.
// Every call that can block (opening a dataset, waiting for a batch, stopping) releases
// the GIL. Errors: see errors.h (the one translation point).
#include <cstdint>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <zlib.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "device.h"
#include "batch.h"
#include "cuda_host.h"
#include "delta_binding.h"
#include "kafka_binding.h"
#include "errors.h"
#include "options.h"
#include "tokens.h"
#include "pipeline/pipeline.h"
#include "pipeline/stats_json.h"

#ifdef STOKER_HAVE_DOCTOR
#include "doctor_binding.h"
#endif

namespace stoker::py {
namespace pyb = pybind11;
using namespace pybind11::literals;

namespace {

ArrayKind ParseKind(const std::string& s) {
  if (s == "numpy") return ArrayKind::kNumpy;
  if (s == "dlpack") return ArrayKind::kDlpack;
  throw StatusError(InvalidArgument("array kind '{}' is not one of numpy, dlpack", s));
}

pyb::dict RankToDict(const RankInfo& r) {
  return pyb::dict("rank"_a = r.rank, "world_size"_a = r.world_size, "source"_a = r.source);
}

// The stats as the one codec writes them (pipeline/stats_json.h): the same keys and
// values as `stoker bench pipeline --json`.
pyb::dict StatsToDict(const PipelineStats& s) {
  return pyb::module_::import("json").attr("loads")(StatsToJson(s, nullptr, -1));
}

std::unique_ptr<Pipeline> CreateNoGil(const PipelineOptions& opts) {
  pyb::gil_scoped_release nogil;
  return ValueOrThrow(Pipeline::Create(opts));
}

class PyPipeline {
 public:
  explicit PyPipeline(const pyb::dict& options) {
    PyPipelineOptions po = OptionsFromDict(options);
    p_ = std::shared_ptr<Pipeline>(CreateNoGil(po.opts));
    pinned_ = po.pinned;
  }
  ~PyPipeline() {
    if (p_) {
      pyb::gil_scoped_release nogil;
      p_->Stop();  // batches still viewed from Python stay valid; the workers end now
    }
  }

  void StartEpoch(int epoch, uint64_t start_batch) {
    pyb::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    ThrowIfError(p_->StartEpoch(epoch, start_batch));
  }

  // Elastic resume: the epoch after its first `consumed` global positions.
  void ResumeEpoch(int epoch, uint64_t consumed) {
    pyb::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    ThrowIfError(p_->ResumeEpoch(epoch, consumed));
  }
  uint64_t pass_batches() const { return p_->pass_batches(); }
  uint64_t consumed_after(uint64_t batches) const { return p_->ConsumedAfter(batches); }
  std::string fingerprint() const { return p_->Fingerprint(); }

  // The next batch as a dict, or None at the end of the epoch.
  pyb::object Next(const std::string& kind, bool with_keys) {
    ArrayKind k = ParseKind(kind);
    BatchPtr b;
    Status st;
    // Waits with the GIL released in slices of 100 ms, looking at Python's signals between
    // them, so Ctrl-C raises KeyboardInterrupt even while a read hangs.
    for (;;) {
      bool timed_out = false;
      {
        pyb::gil_scoped_release nogil;
        std::lock_guard<std::mutex> lock(mu_);
        Result<BatchPtr> r = p_->NextWithin(100'000'000, &timed_out);
        if (!r.ok()) {
          st = r.status();
        } else if (!timed_out) {
          b = std::move(r).value();
        }
      }
      if (!timed_out) break;
      if (PyErr_CheckSignals() != 0) throw pyb::error_already_set();
    }
    if (!st.ok()) {
      if (IsEndOfStream(st)) return pyb::none();
      throw StatusError(st);
    }
    pyb::dict d = BatchToDict(BatchKeep{b}, k, with_keys);
    d["_epoch"] = b->epoch;
    d["_batch"] = b->index;
    // Address of the batch's main buffer, so tests can check that views do not copy.
    d["_ptr"] = reinterpret_cast<uintptr_t>(b->images ? b->images
                                                      : static_cast<const void*>(b->raw.data()));
    return d;
  }

  void Stop() {
    pyb::gil_scoped_release nogil;
    p_->Stop();
  }

  uint64_t batches_per_epoch() const { return p_->batches_per_epoch(); }
  uint64_t samples_per_epoch() const { return p_->samples_per_epoch(); }
  uint64_t dataset_size() const { return p_->dataset().size(); }
  std::string format() const { return p_->dataset().format(); }
  bool pinned() const { return pinned_; }
  pyb::object delta() const { return DeltaInfo(p_->dataset()); }
  pyb::object kafka() const { return KafkaInfo(p_->dataset()); }
  pyb::dict Stats() const { return StatsToDict(p_->Stats()); }
  pyb::dict Rank() const { return RankToDict(p_->Stats().rank); }

  pyb::array_t<int64_t> EpochOrder(int epoch) const {
    std::vector<uint64_t> order;
    {
      pyb::gil_scoped_release nogil;
      order = ValueOrThrow(p_->EpochOrder(epoch));
    }
    pyb::array_t<int64_t> out(static_cast<pyb::ssize_t>(order.size()));
    auto* dst = out.mutable_data();
    for (size_t i = 0; i < order.size(); ++i) dst[i] = static_cast<int64_t>(order[i]);
    return out;
  }

  pyb::dict Options() const { return OptionsToDict(p_->options()); }

 private:
  std::shared_ptr<Pipeline> p_;
  std::mutex mu_;  // one consumer at a time (Next / StartEpoch), as the engine requires
  bool pinned_ = false;
};

// The same engine driven by a plain C++ loop, for tests and benches: what the Python
// binding must reproduce (outputs) and approach (speed).
pyb::list CppDigest(const pyb::dict& options, int epoch, uint64_t start_batch,
                    int64_t max_batches) {
  PyPipelineOptions po = OptionsFromDict(options);
  struct Row {
    uint64_t index;
    int size;
    std::vector<uint64_t> samples;
    std::vector<int64_t> labels;
    uint32_t crc;
  };
  std::vector<Row> rows;
  {
    pyb::gil_scoped_release nogil;
    auto p = ValueOrThrow(Pipeline::Create(po.opts));
    ThrowIfError(p->StartEpoch(epoch, start_batch));
    while (max_batches < 0 || static_cast<int64_t>(rows.size()) < max_batches) {
      Result<BatchPtr> r = p->Next();
      if (!r.ok()) {
        if (IsEndOfStream(r.status())) break;
        throw StatusError(r.status());
      }
      const Batch& b = **r;
      uLong crc = crc32(0L, Z_NULL, 0);
      if (b.images) {
        crc = crc32_z(crc, static_cast<const Bytef*>(b.images), b.image_bytes * b.size);
      } else {
        crc = crc32_z(crc, b.raw.data(), b.raw.size());
      }
      rows.push_back({b.index, b.size, b.sample_indices, b.labels, static_cast<uint32_t>(crc)});
    }
  }
  pyb::list out;
  for (const auto& r : rows) {
    out.append(pyb::dict("batch"_a = r.index, "size"_a = r.size, "index"_a = r.samples,
                         "label"_a = r.labels, "crc32"_a = r.crc));
  }
  return out;
}

// hold_previous: keep each batch alive until the next one arrives, as a Python
// `for b in loader` loop does (the C++ loop otherwise releases it before waiting).
pyb::dict CppDrain(const pyb::dict& options, int epochs, int warmup_batches,
                   bool hold_previous) {
  PyPipelineOptions po = OptionsFromDict(options);
  uint64_t samples = 0, batches = 0;
  double seconds = 0;
  PipelineStats stats;
  {
    pyb::gil_scoped_release nogil;
    auto p = ValueOrThrow(Pipeline::Create(po.opts));
    for (int e = 0; e < epochs; ++e) {
      ThrowIfError(p->StartEpoch(e));
      int seen = 0;
      BatchPtr previous;
      auto t0 = std::chrono::steady_clock::now();
      while (true) {
        Result<BatchPtr> r = p->Next();
        if (!r.ok()) {
          if (IsEndOfStream(r.status())) break;
          throw StatusError(r.status());
        }
        // The clock starts when the last warm-up batch arrives; the batches after it count.
        // (As bench/python_overhead.py times Python: N - w batches over N - w intervals.)
        if (++seen == warmup_batches) {
          t0 = std::chrono::steady_clock::now();
        } else if (seen > warmup_batches) {
          samples += (*r)->size;
          ++batches;
        }
        if (hold_previous) previous = std::move(r).value();
      }
      previous.reset();
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    stats = p->Stats();
  }
  return pyb::dict("samples"_a = samples, "batches"_a = batches, "seconds"_a = seconds,
                   "samples_per_s"_a = seconds > 0 ? samples / seconds : 0.0,
                   "stats"_a = StatsToDict(stats));
}

}  // namespace
}  // namespace stoker::py

PYBIND11_MODULE(_stoker, m) {
  using namespace stoker::py;
  m.doc() = "stoker's C++ engine (use the `stoker` package, not this module directly)";
  RegisterErrors(m);
  RegisterTokens(m);
  RegisterDelta(m);
  RegisterKafka(m);

  pyb::class_<PyPipeline>(m, "Pipeline")
      .def(pyb::init<const pyb::dict&>(), "options"_a)
      .def("start_epoch", &PyPipeline::StartEpoch, "epoch"_a, "start_batch"_a = 0)
      .def("resume_epoch", &PyPipeline::ResumeEpoch, "epoch"_a, "consumed"_a)
      .def_property_readonly("pass_batches", &PyPipeline::pass_batches)
      .def("consumed_after", &PyPipeline::consumed_after, "batches"_a)
      .def_property_readonly("fingerprint", &PyPipeline::fingerprint)
      .def("next", &PyPipeline::Next, "kind"_a = "numpy", "keys"_a = false)
      .def("stop", &PyPipeline::Stop)
      .def("stats", &PyPipeline::Stats)
      .def("epoch_order", &PyPipeline::EpochOrder, "epoch"_a)
      .def_property_readonly("rank_info", &PyPipeline::Rank)
      .def_property_readonly("options", &PyPipeline::Options)
      .def_property_readonly("batches_per_epoch", &PyPipeline::batches_per_epoch)
      .def_property_readonly("samples_per_epoch", &PyPipeline::samples_per_epoch)
      .def_property_readonly("dataset_size", &PyPipeline::dataset_size)
      .def_property_readonly("format", &PyPipeline::format)
      .def_property_readonly("pinned", &PyPipeline::pinned)
      .def_property_readonly("delta", &PyPipeline::delta)
      .def_property_readonly("kafka", &PyPipeline::kafka);

  m.def("resolve_rank", [](int rank, int world_size) {
    return RankToDict(ValueOrThrow(stoker::ResolveRank(rank, world_size)));
  }, "rank"_a = -1, "world_size"_a = -1);
  m.def("option_schema", &OptionSchema,
        "The pipeline options table (src/pipeline/options_schema.cc), one dict per option.");
  RegisterDevicePipeline(m);
  m.def("set_cuda_runtime_candidates", &SetCudaRuntimeCandidates, "candidates"_a);
  m.def("cuda_runtime_path", &CudaRuntimePath);
  m.def("pinned_memory_status", []() {
    auto r = CudaPinnedAllocator();
    return std::make_pair(r.ok(), r.ok() ? std::string() : r.status().message());
  }, "(available, reason): whether pinned batch buffers can be allocated");
  m.def("_cpp_digest", &CppDigest, "options"_a, "epoch"_a = 0, "start_batch"_a = 0,
        "max_batches"_a = -1);
  m.def("_cpp_drain", &CppDrain, "options"_a, "epochs"_a = 1, "warmup_batches"_a = 1,
        "hold_previous"_a = false);
  m.def("_raise_status", [](int code, const std::string& msg) {
    throw StatusError(stoker::Status(static_cast<stoker::StatusCode>(code), msg));
  }, "For tests of the translation: raises the exception for StatusCode `code`.");
#ifdef STOKER_HAVE_DOCTOR
  RegisterDoctor(m);
  m.attr("HAVE_DOCTOR") = true;
#else
  m.attr("HAVE_DOCTOR") = false;
#endif
}
