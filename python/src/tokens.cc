// Bindings of the token stores, writers and the token pipeline (stoker.TokenPipeline).
// Arrays are views: a store's documents view its mapping (the array keeps the store alive),
// a batch's arrays view the batch (NumPy base object or DLPack deleter keeps it alive).
#include "tokens.h"

#include <cstdint>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>

#include "batch.h"
#include "cuda_host.h"
#include "dlpack.h"
#include "errors.h"
#include "formats/tokens/token_store.h"
#include "tokens/token_pipeline.h"

namespace stoker::py {
namespace pyb = pybind11;
using namespace pybind11::literals;
using tokens::TokenBatchPtr;

namespace {

pyb::dtype NumpyOf(TokenDType t) {
  switch (t) {
    case TokenDType::kUInt8: return pyb::dtype::of<uint8_t>();
    case TokenDType::kInt8: return pyb::dtype::of<int8_t>();
    case TokenDType::kInt16: return pyb::dtype::of<int16_t>();
    case TokenDType::kUInt16: return pyb::dtype::of<uint16_t>();
    case TokenDType::kInt32: return pyb::dtype::of<int32_t>();
    case TokenDType::kUInt32: return pyb::dtype::of<uint32_t>();
    case TokenDType::kInt64: return pyb::dtype::of<int64_t>();
  }
  return pyb::dtype::of<int64_t>();
}

class PyTokenStore {
 public:
  PyTokenStore(const std::string& spec) {
    pyb::gil_scoped_release nogil;
    s_ = ValueOrThrow(OpenTokenStore(spec));
  }
  uint64_t len() const { return s_->num_documents(); }
  pyb::array Document(const std::shared_ptr<PyTokenStore>& self, int64_t i) const {
    if (i < 0) i += static_cast<int64_t>(s_->num_documents());
    if (i < 0 || static_cast<uint64_t>(i) >= s_->num_documents())
      throw pyb::index_error(fmt::format("document {} of {}", i, s_->num_documents()));
    TokenSpan sp = s_->Document(static_cast<uint64_t>(i));
    auto* keep = new std::shared_ptr<PyTokenStore>(self);
    pyb::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<PyTokenStore>*>(p); });
    pyb::array a(NumpyOf(sp.dtype), {static_cast<pyb::ssize_t>(sp.length)}, {},
                 sp.data ? sp.data : reinterpret_cast<const uint8_t*>(&kEmpty), base);
    pyb::detail::array_proxy(a.ptr())->flags &= ~pyb::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    return a;
  }
  pyb::array_t<int64_t> Lengths() const {
    pyb::array_t<int64_t> out(static_cast<pyb::ssize_t>(s_->num_documents()));
    auto* d = out.mutable_data();
    for (uint64_t i = 0; i < s_->num_documents(); ++i) d[i] = static_cast<int64_t>(s_->DocumentLength(i));
    return out;
  }
  const TokenStore& store() const { return *s_; }

 private:
  static constexpr int64_t kEmpty = 0;
  std::unique_ptr<TokenStore> s_;
};

class PyTokenWriter {
 public:
  PyTokenWriter(const std::string& spec, const std::string& dtype, int64_t vocab_size,
                uint64_t shard_tokens, const std::string& column, uint64_t rows_per_batch) {
    TokenWriterOptions o;
    o.dtype = ValueOrThrow(ParseTokenDType(dtype));
    o.vocab_size = vocab_size;
    o.shard_tokens = shard_tokens;
    o.column = column;
    o.rows_per_batch = rows_per_batch;
    w_ = ValueOrThrow(OpenTokenWriter(spec, o));
  }
  void Add(pyb::array_t<int64_t, pyb::array::c_style | pyb::array::forcecast> ids) {
    const int64_t* p = ids.data();
    size_t n = static_cast<size_t>(ids.size());
    pyb::gil_scoped_release nogil;
    ThrowIfError(w_->AddDocument(p, n));
    hash_.Add(p, n);
  }
  std::string checksum() const { return fmt::format("{:016x}", hash_.Digest()); }
  std::vector<std::string> Finish() {
    pyb::gil_scoped_release nogil;
    ThrowIfError(w_->Finish());
    return w_->outputs();
  }
  uint64_t documents() const { return w_->documents(); }
  uint64_t tokens() const { return w_->tokens(); }

 private:
  std::unique_ptr<TokenWriter> w_;
  TokenStreamHasher hash_;
};

// --- batches

struct View {
  const char* name;
  const void* data;
  bool is64;
  std::vector<int64_t> shape;
};

pyb::object Capsule(const TokenBatchPtr& keep, const View& v) {
  static const int64_t kZero = 0;  // an empty field still needs a valid pointer
  return DlpackCapsule(keep, v.data ? v.data : &kZero,
                       {kDLInt, static_cast<uint8_t>(v.is64 ? 64 : 32), 1}, v.shape);
}

// Window layout: "window" is the [B, S + 1] buffer; with NumPy, "input_ids" and "labels"
// are strided [B, S] views of it (same memory, labels one element later). With DLPack only
// the window goes out and stoker/tokens.py slices the tensor (torch views, no copy).
pyb::dict BatchDict(const TokenBatchPtr& b, bool dlpack) {
  const int64_t B = b->batch_size, S = b->seq_len;
  std::vector<View> views;
  if (b->windowed) {
    views.push_back({"window", b->window.data(), b->int64, {B, S + 1}});
  } else {
    views.push_back({"input_ids", b->input_ids.data(), b->int64, {B, S}});
    views.push_back({"labels", b->labels.data(), b->int64, {B, S}});
  }
  if (b->has_position_ids)
    views.push_back({"position_ids", b->position_ids.data(), b->int64, {B, S}});
  views.push_back({"cu_seqlens", b->cu_seqlens.data(), false,
                   {static_cast<int64_t>(b->cu_seqlens.size())}});
  views.push_back({"pieces", b->pieces.data(), true, {static_cast<int64_t>(b->pieces.size() / 5), 5}});
  views.push_back({"sample_ids", b->sample_ids.data(), true, {B}});
  views.push_back({"epochs", b->epochs.data(), true, {B}});
  pyb::dict out;
  if (dlpack) {
    for (const auto& v : views) out[v.name] = Capsule(b, v);
  } else {
    pyb::capsule base(new TokenBatchPtr(b), [](void* p) { delete static_cast<TokenBatchPtr*>(p); });
    for (const auto& v : views) {
      pyb::dtype dt = v.is64 ? pyb::dtype::of<int64_t>() : pyb::dtype::of<int32_t>();
      if (v.data == nullptr) {
        out[v.name] = pyb::array(dt, v.shape);
      } else {
        out[v.name] = pyb::array(dt, v.shape, {}, v.data, base);
      }
    }
    if (b->windowed) {
      const pyb::ssize_t isz = b->int64 ? 8 : 4;
      pyb::dtype dt = b->int64 ? pyb::dtype::of<int64_t>() : pyb::dtype::of<int32_t>();
      std::vector<pyb::ssize_t> shape = {B, S}, strides = {(S + 1) * isz, isz};
      out["input_ids"] = pyb::array(dt, shape, strides, b->input_data(), base);
      out["labels"] = pyb::array(dt, shape, strides, b->label_data(), base);
    }
  }
  out["layout"] = b->windowed ? "window" : "separate";
  out["max_seqlen"] = b->max_seqlen;
  out["step"] = b->step;
  out["tokens"] = b->tokens;
  out["pad_tokens"] = b->pad_tokens;
  return out;
}

template <typename T>
T Get(const pyb::dict& d, const char* k, T def) {
  return d.contains(k) && !d[k].is_none() ? d[k].cast<T>() : def;
}

tokens::TokenPipelineOptions PipelineOptionsFromDict(const pyb::dict& d) {
  tokens::TokenPipelineOptions o;
  o.data = d["data"].cast<std::vector<std::string>>();
  o.weights = Get<std::vector<double>>(d, "weights", {});
  o.index.seq_len = Get<int64_t>(d, "seq_len", 2048);
  o.index.mode = ValueOrThrow(tokens::ParsePackMode(Get<std::string>(d, "packing", "concat")));
  o.index.seed = Get<uint64_t>(d, "seed", 0);
  o.index.shuffle = Get<bool>(d, "shuffle", true);
  o.index.drop_last_partial = Get<bool>(d, "drop_last_partial", true);
  auto split = Get<std::vector<double>>(d, "split", {0.0, 1.0});
  if (split.size() != 2) throw StatusError(InvalidArgument("split must be (begin, end)"));
  o.index.split_begin = split[0];
  o.index.split_end = split[1];
  o.index.skip_empty = Get<bool>(d, "skip_empty", false);
  o.index.cache_dir = Get<std::string>(d, "cache_dir", "");
  o.batch_size = Get<int>(d, "batch_size", 8);
  o.rank = Get<int>(d, "rank", 0);
  o.world_size = Get<int>(d, "world_size", 1);
  o.int64_output = Get<std::string>(d, "dtype", "int32") == "int64";
  o.pad_id = Get<int64_t>(d, "pad_id", 0);
  o.ignore_index = Get<int64_t>(d, "ignore_index", -100);
  o.vocab_size = Get<int64_t>(d, "vocab_size", 0);
  o.reset_position_ids = Get<bool>(d, "reset_position_ids", true);
  o.window = Get<std::string>(d, "layout", "window") == "window";
  {
    pyb::object pos = pyb::none();
    if (d.contains("position_ids")) pos = d["position_ids"];
    if (pos.is_none()) {
      o.position_ids = tokens::TokenPipelineOptions::PositionIds::kAuto;
    } else {
      o.position_ids = pos.cast<bool>() ? tokens::TokenPipelineOptions::PositionIds::kOn
                                        : tokens::TokenPipelineOptions::PositionIds::kOff;
    }
  }
  if (Get<bool>(d, "pinned", false)) o.allocator = ValueOrThrow(CudaPinnedAllocator());
  o.threads = Get<int>(d, "threads", 1);
  o.prefetch = Get<int>(d, "prefetch", 2);
  return o;
}

pyb::dict StateDict(const tokens::TokenState& s) {
  return pyb::dict("seed"_a = s.seed, "samples_consumed"_a = s.samples_consumed,
                   "epoch"_a = s.epoch, "sample_in_epoch"_a = s.sample_in_epoch,
                   "blend_counts"_a = s.blend_counts, "config_hash"_a = s.config_hash);
}

class PyTokenPipeline {
 public:
  explicit PyTokenPipeline(const pyb::dict& options) {
    auto o = PipelineOptionsFromDict(options);
    pyb::gil_scoped_release nogil;
    p_ = ValueOrThrow(tokens::TokenPipeline::Create(o));
  }
  pyb::dict Next(const std::string& kind) {
    if (kind != "numpy" && kind != "dlpack")
      throw StatusError(InvalidArgument("array kind '{}' is not one of numpy, dlpack", kind));
    TokenBatchPtr b;
    {
      pyb::gil_scoped_release nogil;
      std::lock_guard<std::mutex> l(mu_);
      b = ValueOrThrow(p_->Next());
    }
    return BatchDict(b, kind == "dlpack");
  }
  pyb::dict State() const { return StateDict(p_->state()); }
  void Restore(const pyb::dict& d) {
    tokens::TokenState s;
    s.seed = d["seed"].cast<uint64_t>();
    s.samples_consumed = d["samples_consumed"].cast<uint64_t>();
    s.blend_counts = Get<std::vector<uint64_t>>(d, "blend_counts", {});
    s.config_hash = Get<uint64_t>(d, "config_hash", 0);
    pyb::gil_scoped_release nogil;
    std::lock_guard<std::mutex> l(mu_);
    ThrowIfError(p_->Restore(s));
  }
  void Seek(uint64_t consumed) {
    pyb::gil_scoped_release nogil;
    std::lock_guard<std::mutex> l(mu_);
    ThrowIfError(p_->SeekSamples(consumed));
  }
  pyb::dict Stats() const {
    auto s = p_->stats();
    return pyb::dict("batches"_a = s.batches, "samples"_a = s.samples, "tokens"_a = s.tokens,
                     "pad_tokens"_a = s.pad_tokens, "assemble_s"_a = s.assemble_s,
                     "wait_s"_a = s.wait_s, "index_build_s"_a = s.index_build_s,
                     "index_bytes"_a = s.index_bytes, "indices_built"_a = s.indices_built,
                     "indices_cached"_a = s.indices_cached, "skipped_empty"_a = s.skipped_empty);
  }
  uint64_t samples_per_epoch() const { return p_->samples_per_epoch(); }
  uint64_t steps_per_epoch() const { return p_->steps_per_epoch(); }

 private:
  std::unique_ptr<tokens::TokenPipeline> p_;
  mutable std::mutex mu_;
};

}  // namespace

void RegisterTokens(pyb::module_& m) {
  pyb::class_<PyTokenStore, std::shared_ptr<PyTokenStore>>(m, "TokenStore")
      .def(pyb::init<const std::string&>(), "spec"_a)
      .def("__len__", &PyTokenStore::len)
      .def("document", [](const std::shared_ptr<PyTokenStore>& self, int64_t i) {
        return self->Document(self, i);
      }, "i"_a, "Document i as a read-only NumPy view of the mapped file (no copy).")
      .def("lengths", &PyTokenStore::Lengths)
      .def("location", [](const PyTokenStore& s, uint64_t i) { return s.store().Location(i); })
      .def_property_readonly("num_tokens", [](const PyTokenStore& s) { return s.store().num_tokens(); })
      .def_property_readonly("dtype", [](const PyTokenStore& s) { return std::string(TokenDTypeName(s.store().dtype())); })
      .def_property_readonly("format", [](const PyTokenStore& s) { return s.store().format(); })
      .def_property_readonly("files", [](const PyTokenStore& s) { return s.store().files(); })
      .def_property_readonly("zero_copy", [](const PyTokenStore& s) { return s.store().zero_copy(); });

  pyb::class_<PyTokenWriter>(m, "TokenWriter")
      .def(pyb::init<const std::string&, const std::string&, int64_t, uint64_t, const std::string&,
                     uint64_t>(),
           "spec"_a, "dtype"_a = "uint16", "vocab_size"_a = 0, "shard_tokens"_a = 0,
           "column"_a = "input_ids", "rows_per_batch"_a = 1024)
      .def("add", &PyTokenWriter::Add, "ids"_a)
      .def("finish", &PyTokenWriter::Finish)
      .def_property_readonly("documents", &PyTokenWriter::documents)
      .def_property_readonly("tokens", &PyTokenWriter::tokens)
      .def_property_readonly("checksum", &PyTokenWriter::checksum,
                             "XXH64 of the token stream written (TokenStreamChecksum)");

  m.def("token_checksum", [](const std::string& spec, int64_t eos) {
    TokenStoreOptions o;
    o.eos = eos;
    uint64_t docs, toks, ck;
    {
      pyb::gil_scoped_release nogil;
      auto s = ValueOrThrow(OpenTokenStore(spec, o));
      docs = s->num_documents();
      toks = s->num_tokens();
      ck = TokenStreamChecksum(*s);
    }
    return pyb::make_tuple(docs, toks, fmt::format("{:016x}", ck));
  }, "spec"_a, "eos"_a = -1, "(documents, tokens, checksum hex) of a token store");

  pyb::class_<PyTokenPipeline>(m, "TokenPipeline")
      .def(pyb::init<const pyb::dict&>(), "options"_a)
      .def("next", &PyTokenPipeline::Next, "kind"_a = "numpy")
      .def("state", &PyTokenPipeline::State)
      .def("restore", &PyTokenPipeline::Restore, "state"_a)
      .def("seek_samples", &PyTokenPipeline::Seek, "consumed_samples"_a)
      .def("stats", &PyTokenPipeline::Stats)
      .def_property_readonly("samples_per_epoch", &PyTokenPipeline::samples_per_epoch)
      .def_property_readonly("steps_per_epoch", &PyTokenPipeline::steps_per_epoch);

  m.def("blend_indices", [](std::vector<double> weights, uint64_t size) {
    tokens::BlendCursor c(std::move(weights));
    pyb::array_t<int64_t> ds(static_cast<pyb::ssize_t>(size)), js(static_cast<pyb::ssize_t>(size));
    auto* d = ds.mutable_data();
    auto* j = js.mutable_data();
    for (uint64_t i = 0; i < size; ++i) {
      auto [a, b] = c.Next();
      d[i] = static_cast<int64_t>(a);
      j[i] = static_cast<int64_t>(b);
    }
    return std::make_pair(ds, js);
  }, "weights"_a, "size"_a, "Megatron BlendedDataset's (dataset_index, dataset_sample_index).");
}

}  // namespace stoker::py
