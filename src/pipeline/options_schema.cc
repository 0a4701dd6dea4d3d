#include "pipeline/options_schema.h"

#include <cstdint>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace stoker {

// ---------------------------------------------------------------------------------------
// OptionValue

OptionValue OptionValue::Auto() { return OptionValue{}; }
OptionValue OptionValue::Bool(bool v) {
  OptionValue r;
  r.kind = Kind::kBool;
  r.b = v;
  return r;
}
OptionValue OptionValue::Int(int64_t v) {
  OptionValue r;
  r.kind = Kind::kInt;
  r.i = v;
  return r;
}
OptionValue OptionValue::Double(double v) {
  OptionValue r;
  r.kind = Kind::kDouble;
  r.d = v;
  return r;
}
OptionValue OptionValue::String(std::string v) {
  OptionValue r;
  r.kind = Kind::kString;
  r.s = std::move(v);
  return r;
}
OptionValue OptionValue::List(std::vector<double> v) {
  OptionValue r;
  r.kind = Kind::kList;
  r.list = std::move(v);
  return r;
}
OptionValue OptionValue::Other(std::string repr) {
  OptionValue r;
  r.kind = Kind::kOther;
  r.repr = std::move(repr);
  return r;
}
bool OptionValue::operator==(const OptionValue& o) const {
  if (kind != o.kind) return false;
  switch (kind) {
    case Kind::kAuto: return true;
    case Kind::kBool: return b == o.b;
    case Kind::kInt: return i == o.i;
    case Kind::kDouble: return d == o.d;
    case Kind::kString: return s == o.s;
    case Kind::kList: return list == o.list;
    case Kind::kOther: return repr == o.repr;
  }
  return false;
}

namespace {

// Numbers as a user reads them; `decimal` keeps ".0" on integral values (ranges of real
// options read "[0.0, 1.0]", as Python prints them).
std::string Num(double v, bool decimal) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (decimal && v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.1f}", v);
  return fmt::format("{}", v);
}

std::string Shown(const OptionValue& v) { return v.repr.empty() ? OptionValueText(v) : v.repr; }

}  // namespace

std::string OptionValueText(const OptionValue& v) {
  switch (v.kind) {
    case OptionValue::Kind::kAuto: return "auto";
    case OptionValue::Kind::kBool: return v.b ? "true" : "false";
    case OptionValue::Kind::kInt: return fmt::format("{}", v.i);
    case OptionValue::Kind::kDouble: return Num(v.d, false);
    case OptionValue::Kind::kString: return v.s;
    case OptionValue::Kind::kList: {
      std::string out;
      for (double d : v.list) {
        if (!out.empty()) out += ',';
        out += Num(d, false);
      }
      return out;
    }
    case OptionValue::Kind::kOther: return v.repr;
  }
  return "";
}

const char* OptionTypeName(OptionType t) {
  switch (t) {
    case OptionType::kBool: return "bool";
    case OptionType::kInt: return "int";
    case OptionType::kDouble: return "float";
    case OptionType::kString: return "str";
    case OptionType::kEnum: return "enum";
    case OptionType::kBytes: return "bytes";
    case OptionType::kFloats: return "floats";
    case OptionType::kRange: return "range";
  }
  return "?";
}

std::string OptionSpec::cli_flag() const {
  std::string f = "--" + name;
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

namespace {
// Upper bounds this large are limits of the C++ type, not advice: checked, not shown.
bool Huge(double max) { return max >= 2147483647.0; }

std::string Interval(const OptionSpec& s, const char* each) {
  bool dec = s.type != OptionType::kInt && s.type != OptionType::kBytes;
  std::string lo = Num(s.min, dec), hi = Num(s.max, dec);
  if (std::isfinite(s.min) && std::isfinite(s.max) && !Huge(s.max))
    return fmt::format("{}{}{}, {}]", each, s.min_exclusive ? "in (" : "in [", lo, hi);
  if (std::isfinite(s.min)) return fmt::format("{}{} {}", each, s.min_exclusive ? ">" : ">=", lo);
  return "";
}
}  // namespace

std::string OptionSpec::range_text() const {
  std::string interval = Interval(*this, "");
  if (!interval.empty() && interval.rfind("in ", 0) == 0) interval = interval.substr(3);
  std::string each = Interval(*this, "each ");
  switch (type) {
    case OptionType::kEnum: {
      std::string out;
      for (const auto& c : choices) {
        if (!out.empty()) out += ", ";
        out += c;
      }
      return out;
    }
    case OptionType::kFloats:
      return each.empty() ? fmt::format("{} numbers", count)
                          : fmt::format("{} numbers, {}", count, each);
    case OptionType::kRange:
      return each.empty() ? "min <= max" : fmt::format("min <= max, {}", each);
    default: return interval;
  }
}

// ---------------------------------------------------------------------------------------
// The table. Each row: name, type, range, doc, and how it maps onto PipelineOptions. The
// default is the PipelineOptions field's own default (read back through `get`), so the
// struct and the table cannot disagree.

namespace {

// A field of PipelineOptions, for const and non-const access.
#define STOKER_FIELD(expr) [](auto& o) -> auto& { return o.expr; }

OptionSpec Base(std::string name, std::string group, OptionType type, std::string doc) {
  OptionSpec s;
  s.name = std::move(name);
  s.group = std::move(group);
  s.type = type;
  s.doc = std::move(doc);
  return s;
}

template <typename F>
OptionSpec StrRow(std::string name, std::string group, F field, std::string doc) {
  OptionSpec s = Base(std::move(name), std::move(group), OptionType::kString, std::move(doc));
  s.set = [field](PipelineOptions& o, const OptionValue& v) { field(o) = v.s; };
  s.get = [field](const PipelineOptions& o) { return OptionValue::String(field(o)); };
  return s;
}

template <typename F>
OptionSpec BoolRow(std::string name, std::string group, F field, std::string doc) {
  OptionSpec s = Base(std::move(name), std::move(group), OptionType::kBool, std::move(doc));
  s.set = [field](PipelineOptions& o, const OptionValue& v) { field(o) = v.b; };
  s.get = [field](const PipelineOptions& o) { return OptionValue::Bool(field(o)); };
  return s;
}

// An integer field; with `auto_doc`, "auto" is stored as `sentinel` (and read back as auto).
template <typename F>
OptionSpec IntRow(std::string name, std::string group, F field, double lo, double hi,
                  std::string doc, std::string auto_doc = "", int64_t sentinel = 0) {
  OptionSpec s = Base(std::move(name), std::move(group), OptionType::kInt, std::move(doc));
  s.min = lo;
  s.max = hi;
  bool has_auto = !auto_doc.empty();
  s.auto_doc = std::move(auto_doc);
  s.zero_is_auto = has_auto && sentinel == 0;
  s.set = [field, sentinel](PipelineOptions& o, const OptionValue& v) {
    using T = std::remove_reference_t<decltype(field(o))>;
    field(o) = static_cast<T>(v.kind == OptionValue::Kind::kAuto ? sentinel : v.i);
  };
  s.get = [field, sentinel, has_auto](const PipelineOptions& o) {
    int64_t x = static_cast<int64_t>(field(o));
    return has_auto && x == sentinel ? OptionValue::Auto() : OptionValue::Int(x);
  };
  return s;
}

template <typename F>
OptionSpec DoubleRow(std::string name, std::string group, F field, double lo, double hi,
                     std::string doc) {
  OptionSpec s = Base(std::move(name), std::move(group), OptionType::kDouble, std::move(doc));
  s.min = lo;
  s.max = hi;
  s.set = [field](PipelineOptions& o, const OptionValue& v) { field(o) = v.d; };
  s.get = [field](const PipelineOptions& o) { return OptionValue::Double(field(o)); };
  return s;
}

template <typename E, typename F>
OptionSpec EnumRow(std::string name, std::string group, F field,
                   std::vector<std::pair<std::string, E>> choices, std::string doc) {
  OptionSpec s = Base(std::move(name), std::move(group), OptionType::kEnum, std::move(doc));
  for (const auto& c : choices) s.choices.push_back(c.first);
  s.set = [field, choices](PipelineOptions& o, const OptionValue& v) {
    for (const auto& [n, e] : choices)
      if (n == v.s) field(o) = e;
  };
  s.get = [field, choices](const PipelineOptions& o) {
    for (const auto& [n, e] : choices)
      if (field(o) == e) return OptionValue::String(n);
    return OptionValue::String("?");
  };
  return s;
}

// Three floats stored `scale` times the option's value (mean/std: the option is in 0..1
// units as torchvision's Normalize, the engine works in 0..255).
template <typename F>
OptionSpec FloatsRow(std::string name, std::string group, F field, double scale, double lo,
                     double hi, bool lo_exclusive, std::string doc) {
  OptionSpec s = Base(std::move(name), std::move(group), OptionType::kFloats, std::move(doc));
  s.count = 3;
  s.min = lo;
  s.max = hi;
  s.min_exclusive = lo_exclusive;
  s.set = [field, scale](PipelineOptions& o, const OptionValue& v) {
    // In float, as the struct's own defaults are written (0.485f * 255): the default
    // given explicitly is then bit-identical to the default left alone.
    for (int i = 0; i < 3; ++i)
      field(o)[i] = static_cast<float>(v.list[i]) * static_cast<float>(scale);
  };
  s.get = [field, scale](const PipelineOptions& o) {
    std::vector<double> out;
    // The engine keeps floats: read back at float precision (0.485, not 0.48500001430511).
    for (int i = 0; i < 3; ++i)
      out.push_back(std::strtod(fmt::format("{:.7g}", field(o)[i] / scale).c_str(), nullptr));
    return OptionValue::List(out);
  };
  return s;
}

template <typename F, typename G>
OptionSpec RangeRow(std::string name, std::string group, F lo_field, G hi_field, double lo,
                    double hi, bool lo_exclusive, std::string doc) {
  OptionSpec s = Base(std::move(name), std::move(group), OptionType::kRange, std::move(doc));
  s.count = 2;
  s.min = lo;
  s.max = hi;
  s.min_exclusive = lo_exclusive;
  s.set = [lo_field, hi_field](PipelineOptions& o, const OptionValue& v) {
    lo_field(o) = v.list[0];
    hi_field(o) = v.list[1];
  };
  s.get = [lo_field, hi_field](const PipelineOptions& o) {
    return OptionValue::List({lo_field(o), hi_field(o)});
  };
  return s;
}

OptionSpec WithAlias(OptionSpec s, std::string flag, std::string unit = "") {
  s.aliases.push_back({std::move(flag), std::move(unit)});
  return s;
}

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kIntMax = 2147483647.0;

std::vector<OptionSpec> MakeRows() {
  std::vector<OptionSpec> r;
  // data
  OptionSpec data = StrRow(
      "data", "data", STOKER_FIELD(data),
      "dataset: a folder (ImageFolder layout), shards (train-{000..099}.tar), or fmt:path "
      "(tfrecord:, lmdb:, hdf5:, parquet:, wds:, folder:)");
  data.required = true;
  r.push_back(std::move(data));

  // decode and augmentation
  r.push_back(WithAlias(
      EnumRow<DecodeMode>("decode", "decode", STOKER_FIELD(mode),
                          {{"train", DecodeMode::kTrain},
                           {"val", DecodeMode::kVal},
                           {"raw", DecodeMode::kRaw}},
                          "train: RandomResizedCrop + random flip + normalize; val: Resize(val_resize) "
                          "+ CenterCrop + normalize; raw: no decode, the bytes of one field"),
      "--mode"));
  r.push_back(IntRow("image_size", "decode", STOKER_FIELD(image_size), 8, 8192,
                     "output height and width"));
  r.push_back(IntRow("val_resize", "decode", STOKER_FIELD(val_resize), 1, 65536,
                     "decode=val: the shorter side is resized to this before the center crop"));
  r.push_back(EnumRow<OutputLayout>(
      "layout", "decode", STOKER_FIELD(output.layout),
      {{"float", OutputLayout::kFloatCHW}, {"uint8", OutputLayout::kUint8HWC}},
      "float: normalized float32 [N,3,H,W]; uint8: [N,H,W,3], not normalized"));
  r.push_back(FloatsRow("mean", "decode", STOKER_FIELD(output.mean), 255.0, 0.0, 1.0, false,
                        "per-channel mean subtracted (0..1 units, as torchvision's Normalize)"));
  r.push_back(FloatsRow("std", "decode", STOKER_FIELD(output.std), 255.0, 0.0, 1.0, true,
                        "per-channel standard deviation divided by (0..1 units)"));
  r.push_back(RangeRow("scale", "decode", STOKER_FIELD(rrc.scale_min), STOKER_FIELD(rrc.scale_max),
                       0.0, 1.0, true, "RandomResizedCrop: area fraction (min, max)"));
  r.push_back(RangeRow("ratio", "decode", STOKER_FIELD(rrc.ratio_min), STOKER_FIELD(rrc.ratio_max),
                       0.0, kInf, true, "RandomResizedCrop: aspect ratio (min, max)"));
  r.push_back(DoubleRow("flip_prob", "decode", STOKER_FIELD(flip_prob), 0.0, 1.0,
                        "decode=train: probability of a horizontal flip"));
  r.push_back(BoolRow("dct_scale", "decode", STOKER_FIELD(dct_scale),
                      "decode JPEGs at a reduced DCT scale when it still covers the output"));
  r.push_back(BoolRow("region_decode", "decode", STOKER_FIELD(region_decode),
                      "decode only the crop's rows and columns of a JPEG"));
  r.push_back(BoolRow("exif_orientation", "decode", STOKER_FIELD(exif_orientation),
                      "decode JPEGs in their EXIF orientation (off: as torchvision's PIL "
                      "loader, which ignores it)"));
  r.push_back(StrRow("raw_field", "decode", STOKER_FIELD(raw_field),
                     "decode=raw: the field to carry (empty: the first field)"));

  // batches and order
  r.push_back(WithAlias(IntRow("batch_size", "batches", STOKER_FIELD(batch_size), 1, kIntMax,
                               "samples per batch"),
                        "--batch"));
  r.push_back(BoolRow("drop_last", "batches", STOKER_FIELD(drop_last),
                      "drop the epoch's final partial batch"));
  r.push_back(BoolRow("shuffle", "batches", STOKER_FIELD(shuffle),
                      "shuffle every epoch (false: dataset order)"));
  r.push_back(IntRow("seed", "batches", STOKER_FIELD(seed), 0, 9.2233720368547748e18,
                     "seed of the shuffle and of every random augmentation"));
  r.push_back(IntRow("shuffle_buffer", "batches", STOKER_FIELD(shuffle_buffer), 1, 1e12,
                     "sharded formats: shuffle buffer in samples (after the shard order is shuffled)"));
  r.push_back(IntRow("shuffle_buffer_mb", "batches", STOKER_FIELD(shuffle_buffer_mb), 0, 1e9,
                     "stream sources (Kafka), which hold what the shuffle buffer reads ahead: "
                     "at most this many MB of samples in it (0: shuffle_buffer alone)"));
  r.push_back(IntRow("interleave", "batches", STOKER_FIELD(interleave), 0, kIntMax,
                     "samples of a shard read in turn with interleave_cycle shards side by "
                     "side, as tf.data's interleave (0: one shard after another)",
                     "the source's choice: 64 for a Kafka topic's partitions, 0 for files",
                     -1));
  r.push_back(IntRow("interleave_cycle", "batches", STOKER_FIELD(interleave_cycle), 1, kIntMax,
                     "with interleave: shards read side by side",
                     "the source's choice: a Kafka topic's partitions, at most 8", -1));

  // ranks
  r.push_back(IntRow("rank", "ranks", STOKER_FIELD(rank), 0, kIntMax, "this process's rank",
                     "torch.distributed when initialized (Python), else RANK, "
                     "OMPI_COMM_WORLD_RANK, SLURM_PROCID, else 0",
                     -1));
  r.push_back(IntRow("world_size", "ranks", STOKER_FIELD(world_size), 1, kIntMax,
                     "number of ranks (give it with rank)",
                     "as rank: WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS, else 1", -1));
  r.push_back(EnumRow<RankBalance>("balance", "ranks", STOKER_FIELD(balance),
                                   {{"pad", RankBalance::kPad}, {"drop", RankBalance::kDrop}},
                                   "equal batches per rank: pad repeats a few samples (as "
                                   "DistributedSampler), drop drops the remainder"));

  // resources
  r.push_back(IntRow("threads", "resources", STOKER_FIELD(threads), 1, kIntMax,
                     "worker threads; a number means that many fused workers (each reads, "
                     "decodes and augments its own sample)",
                     "the autotuner: read and compute threads sized to the CPU budget"));
  r.push_back(BoolRow("fused", "resources", STOKER_FIELD(fused),
                      "with threads=auto: one fused worker per core instead of read threads in "
                      "front of compute threads"));
  r.push_back(IntRow("prefetch", "resources", STOKER_FIELD(prefetch), 1, 64,
                     "ready batches buffered ahead of the consumer",
                     "the autotuner, within the memory budget"));
  {
    OptionSpec s = IntRow("memory_budget", "resources", STOKER_FIELD(memory_budget), 1, 9.2e18,
                          "bytes for batch and sample buffers (a number, or 512MB, 8GiB)",
                          "this rank's share of a quarter of RAM (at most 8 GiB per node)");
    s.type = OptionType::kBytes;
    r.push_back(WithAlias(std::move(s), "--memory-budget-mb", "MB"));
  }
  r.push_back(IntRow("cpu_budget", "resources", STOKER_FIELD(cpu_budget), 1, kIntMax,
                     "cores the pipeline may use",
                     "this rank's share of the node's cores (LOCAL_WORLD_SIZE, "
                     "OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_NTASKS_PER_NODE, else the stoker "
                     "pipelines alive on the node)"));

  // cache
  r.push_back(StrRow("cache_dir", "cache", STOKER_FIELD(cache_dir),
                     "node-wide local cache (NVMe or RAM disk) of the dataset's files: fetched "
                     "ahead in the epoch's order, shared by the ranks of the node, evicted by "
                     "next use (docs/cache.md); empty = off"));
  {
    OptionSpec s = IntRow("cache_limit", "cache", STOKER_FIELD(cache_limit), 1, 9.2e18,
                          "bytes the cache may hold (a number, or 200G, 512MiB)",
                          "80 % of the space free on cache_dir's file system");
    s.type = OptionType::kBytes;
    r.push_back(std::move(s));
  }

  // errors
  r.push_back(EnumRow<ErrorPolicy>("on_error", "errors", STOKER_FIELD(on_error),
                                   {{"fail", ErrorPolicy::kFail}, {"skip", ErrorPolicy::kSkip}},
                                   "a bad sample: fail (stop, naming the file and sample) or "
                                   "skip (count it, keep its key and reason)"));
  {
    OptionSpec s = BoolRow("skip_bad_shards", "errors", STOKER_FIELD(dataset.skip_bad_shards),
                           "skip shards or files that cannot be indexed instead of failing");
    s.auto_doc = "true with on_error=skip, else false";
    s.set = [](PipelineOptions& o, const OptionValue& v) {
      o.dataset.skip_bad_shards =
          v.kind == OptionValue::Kind::kAuto ? o.on_error == ErrorPolicy::kSkip : v.b;
    };
    s.default_text = "auto";  // resolved from on_error, which comes first in the table
    r.push_back(std::move(s));
  }
  r.push_back(DoubleRow("stall_timeout", "errors", STOKER_FIELD(stall_timeout_s), 0.0, kInf,
                        "seconds the consumer may wait with no batch produced before the stall "
                        "watchdog reports what each worker is blocked on (0 = off; the CLI's "
                        "default is 300)"));
  r.push_back(EnumRow<StallAction>("on_stall", "errors", STOKER_FIELD(on_stall),
                                   {{"fail", StallAction::kFail}, {"warn", StallAction::kWarn}},
                                   "a stall: fail (raise StallError naming the stage, sample and "
                                   "file of each busy worker) or warn (report it, keep waiting)"));

  // the GPU path (docs/gpu.md)
  r.push_back(EnumRow<ComputeDevice>(
      "device", "gpu", STOKER_FIELD(device),
      {{"cpu", ComputeDevice::kCpu}, {"cuda", ComputeDevice::kCuda}},
      "where batches are delivered: cpu (host memory) or cuda (device memory; Python's "
      "device= also takes cuda:N or a torch.device)"));
  r.push_back(EnumRow<GpuDecode>(
      "gpu_decode", "gpu", STOKER_FIELD(gpu_decode),
      {{"auto", GpuDecode::kAuto}, {"on", GpuDecode::kOn}, {"off", GpuDecode::kOff}},
      "device=cuda: decode JPEGs and augment on the GPU (nvJPEG + one fused kernel; "
      "per-image CPU fallback). auto: only when measurements say the CPU path cannot feed "
      "the step and the GPU has headroom; off: the CPU path and a copy"));
  r.push_back(IntRow("gpu_hybrid_threshold", "gpu", STOKER_FIELD(gpu_hybrid_threshold), 0, 9.2e18,
                     "GPU decode: images with more pixels than this run their Huffman stage on "
                     "the GPU, smaller ones on a CPU thread (DALI's hybrid_huffman_threshold)"));

  PipelineOptions defaults;
  for (auto& s : r) {
    if (s.required) s.default_text = "";
    if (s.default_text.empty() && !s.required) s.default_text = OptionValueText(s.get(defaults));
  }
  return r;
}

#undef STOKER_FIELD

bool ParseInt(std::string_view t, int64_t* out) {
  if (t.empty()) return false;
  auto r = std::from_chars(t.data(), t.data() + t.size(), *out);
  return r.ec == std::errc() && r.ptr == t.data() + t.size();
}

bool ParseDouble(std::string_view t, double* out) {
  if (t.empty()) return false;
  std::string s(t);
  char* end = nullptr;
  errno = 0;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && errno == 0 && std::isfinite(*out);
}

// "512MB", "8GiB", "1.5G", "4096" -> bytes. Decimal (kB, MB, GB, TB) and binary (KiB,
// MiB, GiB, TiB) units, case-insensitive; a bare K/M/G/T is decimal.
bool ParseSize(std::string_view t, int64_t* out) {
  size_t n = 0;
  while (n < t.size() && (std::isdigit(static_cast<unsigned char>(t[n])) || t[n] == '.')) ++n;
  double v = 0;
  if (!ParseDouble(t.substr(0, n), &v) || v < 0) return false;
  std::string unit;
  for (char c : t.substr(n))
    if (c != ' ') unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},         {"b", 1},          {"k", 1e3},        {"kb", 1e3},
      {"kib", 1024.0}, {"m", 1e6},        {"mb", 1e6},       {"mib", 1048576.0},
      {"g", 1e9},      {"gb", 1e9},       {"gib", 1073741824.0}, {"t", 1e12},
      {"tb", 1e12},    {"tib", 1099511627776.0}};
  for (const auto& [u, mult] : kUnits) {
    if (unit == u) {
      double bytes = v * mult;
      if (bytes >= 9.2e18) return false;
      *out = static_cast<int64_t>(bytes);
      return true;
    }
  }
  return false;
}

std::string Quote(std::string_view s) { return fmt::format("'{}'", s); }

std::string ChoicesText(const OptionSpec& s) {
  std::string out;
  for (const auto& c : s.choices) {
    if (!out.empty()) out += ", ";
    out += Quote(c);
  }
  return out;
}

// The range part of a message: "must be >= 1", "must be in [8, 8192]".
std::string MustBe(const OptionSpec& s) { return Interval(s, ""); }

bool InRange(const OptionSpec& s, double v) {
  if (std::isnan(v)) return false;
  if (s.min_exclusive ? !(v > s.min) : v < s.min) return false;
  return v <= s.max;
}

bool IsNumber(const OptionValue& v) {
  return v.kind == OptionValue::Kind::kInt || v.kind == OptionValue::Kind::kDouble;
}
double AsDouble(const OptionValue& v) {
  return v.kind == OptionValue::Kind::kInt ? static_cast<double>(v.i) : v.d;
}

}  // namespace

const std::vector<OptionSpec>& PipelineOptionSchema() {
  static const std::vector<OptionSpec> rows = MakeRows();
  return rows;
}

const OptionSpec* FindOption(std::string_view key) {
  for (const auto& s : PipelineOptionSchema()) {
    if (s.name == key || s.cli_flag() == key) return &s;
    for (const auto& a : s.aliases)
      if (a.flag == key) return &s;
  }
  return nullptr;
}

Result<OptionValue> CheckOption(const OptionSpec& s, const OptionValue& in) {
  using K = OptionValue::Kind;
  const bool has_auto = !s.auto_doc.empty();
  OptionValue v = in;
  if (has_auto && v.kind == K::kString && v.s == "auto") v = OptionValue::Auto();
  if (v.kind == K::kAuto) {
    if (has_auto) return OptionValue::Auto();
  }
  const std::string got = Shown(in);
  switch (s.type) {
    case OptionType::kBool:
      if (v.kind != K::kBool)
        return InvalidArgument("{} must be True or False{}, got {}", s.name,
                               has_auto ? " (or 'auto')" : "", got);
      return OptionValue::Bool(v.b);
    case OptionType::kInt: {
      std::string want;
      if (has_auto) {
        want = fmt::format("'auto' or an integer {}", MustBe(s));
      } else if (s.min == 0 && !s.min_exclusive && s.max > 1e18) {
        want = "a non-negative integer";
      }
      if (v.kind != K::kInt)
        return InvalidArgument("{} must be {}, got {}", s.name,
                               want.empty() ? "an integer" : want, got);
      // 0 is "auto" where auto is stored as 0 (threads, prefetch, cpu_budget).
      if (s.zero_is_auto && v.i == 0) return OptionValue::Auto();
      if (Huge(s.max) && static_cast<double>(v.i) > s.max)
        return InvalidArgument("{} must be at most {}, got {}", s.name, Num(s.max, false), got);
      if (!InRange(s, static_cast<double>(v.i)))
        return InvalidArgument("{} must be {}, got {}", s.name, want.empty() ? MustBe(s) : want,
                               got);
      return OptionValue::Int(v.i);
    }
    case OptionType::kBytes: {
      int64_t bytes = 0;
      bool ok = false;
      if (v.kind == K::kInt) {
        bytes = v.i;
        ok = true;
      } else if (v.kind == K::kDouble && v.d >= 0 && v.d < 9.2e18) {
        bytes = static_cast<int64_t>(v.d);
        ok = true;
      } else if (v.kind == K::kString) {
        ok = ParseSize(v.s, &bytes);
      }
      if (ok && s.zero_is_auto && bytes == 0) return OptionValue::Auto();
      if (!ok || !InRange(s, static_cast<double>(bytes)))
        return InvalidArgument("{} must be {}a byte count {} or a size such as 512MB or 8GiB, got {}",
                               s.name, has_auto ? "'auto', " : "", MustBe(s), got);
      return OptionValue::Int(bytes);
    }
    case OptionType::kDouble:
      if (!IsNumber(v) || v.kind == K::kBool)
        return InvalidArgument("{} must be a number, got {}", s.name, got);
      if (!InRange(s, AsDouble(v)))
        return InvalidArgument("{} must be {}, got {}", s.name, MustBe(s), got);
      return OptionValue::Double(AsDouble(v));
    case OptionType::kString:
      if (v.kind != K::kString) return InvalidArgument("{} must be a string, got {}", s.name, got);
      if (s.required && v.s.empty()) return InvalidArgument("{} must be given", s.name);
      return OptionValue::String(v.s);
    case OptionType::kEnum:
      if (v.kind != K::kString || std::find(s.choices.begin(), s.choices.end(), v.s) == s.choices.end())
        return InvalidArgument("{}={} is not one of {}", s.name,
                               v.kind == K::kString && in.repr.empty() ? Quote(v.s) : got,
                               ChoicesText(s));
      return OptionValue::String(v.s);
    case OptionType::kFloats:
    case OptionType::kRange: {
      const char* what = s.type == OptionType::kRange ? "2 numbers (min, max)" : nullptr;
      if (v.kind != K::kList)
        return InvalidArgument("{} must be {}, got {}", s.name,
                               what ? what : fmt::format("{} numbers", s.count), got);
      if (static_cast<int>(v.list.size()) != s.count)
        return InvalidArgument("{} must be {}, got {}", s.name,
                               what ? what : fmt::format("{} numbers", s.count), v.list.size());
      for (double d : v.list)
        if (!InRange(s, d))
          return InvalidArgument("{} values must be {}, got {}", s.name, MustBe(s), got);
      if (s.type == OptionType::kRange && v.list[0] > v.list[1])
        return InvalidArgument("{} must be (min, max), got {}", s.name, got);
      return OptionValue::List(v.list);
    }
  }
  return Internal("option {}: unknown type", s.name);
}

Status SetOption(PipelineOptions* o, std::string_view name, const OptionValue& v) {
  const OptionSpec* s = nullptr;
  for (const auto& row : PipelineOptionSchema())
    if (row.name == name) s = &row;
  if (!s) return InvalidArgument("unknown pipeline option '{}'", name);
  STOKER_ASSIGN_OR_RETURN(OptionValue checked, CheckOption(*s, v));
  s->set(*o, checked);
  return Status::OK();
}

Result<OptionValue> ParseOptionText(const OptionSpec& s, std::string_view text) {
  OptionValue v;
  std::string t(text);
  if (!s.auto_doc.empty() && t == "auto") return OptionValue::Auto();
  switch (s.type) {
    case OptionType::kBool: {
      std::string l;
      for (char c : t) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (l == "true" || l == "1" || l == "yes" || l == "on") {
        v = OptionValue::Bool(true);
      } else if (l == "false" || l == "0" || l == "no" || l == "off") {
        v = OptionValue::Bool(false);
      } else {
        v = OptionValue::String(t);
      }
      break;
    }
    case OptionType::kInt: {
      int64_t i = 0;
      v = ParseInt(t, &i) ? OptionValue::Int(i) : OptionValue::String(t);
      break;
    }
    case OptionType::kDouble: {
      double d = 0;
      v = ParseDouble(t, &d) ? OptionValue::Double(d) : OptionValue::String(t);
      break;
    }
    case OptionType::kFloats:
    case OptionType::kRange: {
      std::vector<double> list;
      size_t start = 0;
      bool ok = !t.empty();
      while (ok && start <= t.size()) {
        size_t comma = t.find(',', start);
        std::string part = t.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        double d = 0;
        ok = ParseDouble(part, &d);
        list.push_back(d);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      v = ok ? OptionValue::List(list) : OptionValue::String(t);
      break;
    }
    default:
      v = OptionValue::String(t);
  }
  v.repr = v.kind == OptionValue::Kind::kString ? Quote(t) : t;
  return v;
}

Result<PipelineOptions> OptionsFromValues(
    const std::vector<std::pair<std::string, OptionValue>>& values) {
  for (const auto& [k, v] : values)
    if (!FindOption(k) || FindOption(k)->name != k)
      return InvalidArgument("unknown pipeline option '{}'", k);
  PipelineOptions o;
  for (const auto& s : PipelineOptionSchema()) {
    const OptionValue* given = nullptr;
    for (const auto& [k, v] : values)
      if (k == s.name) given = &v;  // the last one wins, as on a command line
    if (given) {
      STOKER_ASSIGN_OR_RETURN(OptionValue checked, CheckOption(s, *given));
      s.set(o, checked);
    } else if (s.default_text == "auto" && s.get(o) != OptionValue::Auto()) {
      // A default that depends on rows before it (skip_bad_shards follows on_error).
      s.set(o, OptionValue::Auto());
    }
  }
  return o;
}

Status ValidatePipelineOptions(const PipelineOptions& o) {
  for (const auto& s : PipelineOptionSchema()) {
    if (s.name == "skip_bad_shards") continue;  // a plain bool in the struct
    STOKER_RETURN_IF_ERROR(CheckOption(s, s.get(o)).status());
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------------------
// Generated documentation.

namespace {
std::string FlagsText(const OptionSpec& s) {
  std::string f;
  if (s.type == OptionType::kBool) {
    std::string neg = "--no-" + s.cli_flag().substr(2);
    f = s.get && s.default_text == "true" ? fmt::format("`{}` / `{}`", neg, s.cli_flag())
                                          : fmt::format("`{}` / `{}`", s.cli_flag(), neg);
  } else {
    f = fmt::format("`{}`", s.cli_flag());
  }
  for (const auto& a : s.aliases)
    f += fmt::format(" (old: `{}`{})", a.flag, a.unit.empty() ? "" : " in " + a.unit);
  return f;
}

std::string Escape(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}
}  // namespace

std::string OptionsMarkdown() {
  std::string out =
      "# Pipeline options\n\n"
      "<!-- Generated by `stoker options --markdown > docs/options.md` from the table in\n"
      "     src/pipeline/options_schema.cc; options_schema_test fails when they differ. -->\n\n"
      "One table for every surface: the C++ `PipelineOptions` (`src/pipeline/pipeline.h`), the\n"
      "CLI flags of `stoker bench pipeline` and `stoker demo`, and the keyword arguments of\n"
      "`stoker.Pipeline(source, ...)` in Python. The name is the Python keyword; the CLI flag is\n"
      "the name with dashes, and a bool `x` is `--x` / `--no-x`. Old CLI spellings still work\n"
      "(shown as \"old\"). Where the default is `auto`, `auto` (in Python also `None`) asks for\n"
      "the behaviour described, and for `threads`, `prefetch`, `memory_budget` and `cpu_budget`\n"
      "so does `0`. Values are checked against the range column, with a message naming the\n"
      "option (`batch_size must be >= 1, got 0`).\n\n"
      "In Python, `data` is the positional `source`; `format=`, `output=`, `device=`,\n"
      "`pin_memory=` and `keys=` are options of the Python binding (see python.md).\n"
      "`stoker options` prints this table; `stoker options --json` gives it as JSON.\n";
  std::string group;
  for (const auto& s : PipelineOptionSchema()) {
    if (s.group != group) {
      group = s.group;
      out += fmt::format("\n## {}\n\n", group);
      out += "| option | CLI | type | default | range | what |\n";
      out += "| --- | --- | --- | --- | --- | --- |\n";
    }
    std::string def = s.required ? "(required)" : fmt::format("`{}`", s.default_text);
    if (s.type == OptionType::kString && s.default_text.empty() && !s.required) def = "`\"\"`";
    std::string doc = s.doc;
    if (!s.auto_doc.empty()) doc += "; auto: " + s.auto_doc;
    std::string type = OptionTypeName(s.type);
    if (s.type == OptionType::kFloats) type = fmt::format("{} floats", s.count);
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} |\n", s.name, FlagsText(s), type,
                       Escape(def), Escape(s.range_text()), Escape(doc));
  }
  return out;
}

std::string OptionsJson() {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& s : PipelineOptionSchema()) {
    nlohmann::json r;
    r["name"] = s.name;
    r["type"] = OptionTypeName(s.type);
    r["default"] = s.default_text;
    r["doc"] = s.doc;
    r["group"] = s.group;
    r["range"] = s.range_text();
    r["cli"] = s.cli_flag();
    r["required"] = s.required;
    if (!s.auto_doc.empty()) r["auto"] = s.auto_doc;
    if (!s.choices.empty()) r["choices"] = s.choices;
    if (std::isfinite(s.min)) r["min"] = s.min;
    if (std::isfinite(s.max)) r["max"] = s.max;
    if (s.min_exclusive) r["min_exclusive"] = true;
    if (s.count) r["count"] = s.count;
    auto& al = r["aliases"] = nlohmann::json::array();
    for (const auto& a : s.aliases) al.push_back({{"flag", a.flag}, {"unit", a.unit}});
    rows.push_back(std::move(r));
  }
  return rows.dump(2);
}

}  // namespace stoker
