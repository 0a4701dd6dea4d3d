#include "options.h"

#include <pybind11/stl.h>

#include <set>
#include <string>

#include "cuda_host.h"
#include "errors.h"

namespace stoker::py {
namespace pyb = pybind11;

namespace {

template <typename T>
T Get(const pyb::handle& v, const std::string& key, const char* type) {
  try {
    return v.cast<T>();
  } catch (const pyb::cast_error&) {
    throw StatusError(InvalidArgument("option '{}': expected {}, got {}", key, type,
                                      std::string(pyb::str(v.get_type().attr("__name__")))));
  }
}

void GetPair(const pyb::handle& v, const std::string& key, double* a, double* b) {
  auto seq = Get<std::vector<double>>(v, key, "a pair of numbers");
  if (seq.size() != 2) throw StatusError(InvalidArgument("option '{}': expected 2 numbers", key));
  *a = seq[0];
  *b = seq[1];
}

void GetTriple(const pyb::handle& v, const std::string& key, float out[3]) {
  auto seq = Get<std::vector<double>>(v, key, "3 numbers");
  if (seq.size() != 3) throw StatusError(InvalidArgument("option '{}': expected 3 numbers", key));
  for (int i = 0; i < 3; ++i) out[i] = static_cast<float>(seq[i]);
}

template <typename E>
E GetEnum(const pyb::handle& v, const std::string& key,
          std::initializer_list<std::pair<const char*, E>> choices) {
  auto s = Get<std::string>(v, key, "a string");
  std::string names;
  for (const auto& [name, val] : choices) {
    if (s == name) return val;
    names += names.empty() ? "" : ", ";
    names += name;
  }
  throw StatusError(InvalidArgument("option '{}': '{}' is not one of {}", key, s, names));
}

}  // namespace

PyPipelineOptions OptionsFromDict(const pyb::dict& d) {
  PyPipelineOptions r;
  PipelineOptions& o = r.opts;
  for (auto item : d) {
    std::string k = Get<std::string>(item.first, "<key>", "a string");
    pyb::handle v = item.second;
    if (k == "data") o.data = Get<std::string>(v, k, "a string");
    else if (k == "skip_bad_shards") o.dataset.skip_bad_shards = Get<bool>(v, k, "a bool");
    else if (k == "decode")
      o.mode = GetEnum<DecodeMode>(v, k, {{"train", DecodeMode::kTrain},
                                          {"val", DecodeMode::kVal},
                                          {"raw", DecodeMode::kRaw}});
    else if (k == "image_size") o.image_size = Get<int>(v, k, "an int");
    else if (k == "val_resize") o.val_resize = Get<int>(v, k, "an int");
    else if (k == "layout")
      o.output.layout = GetEnum<OutputLayout>(v, k, {{"float", OutputLayout::kFloatCHW},
                                                     {"uint8", OutputLayout::kUint8HWC}});
    else if (k == "mean") GetTriple(v, k, o.output.mean);
    else if (k == "std") GetTriple(v, k, o.output.std);
    else if (k == "scale") GetPair(v, k, &o.rrc.scale_min, &o.rrc.scale_max);
    else if (k == "ratio") GetPair(v, k, &o.rrc.ratio_min, &o.rrc.ratio_max);
    else if (k == "flip_prob") o.flip_prob = Get<double>(v, k, "a number");
    else if (k == "dct_scale") o.dct_scale = Get<bool>(v, k, "a bool");
    else if (k == "region_decode") o.region_decode = Get<bool>(v, k, "a bool");
    else if (k == "exif_orientation") o.exif_orientation = Get<bool>(v, k, "a bool");
    else if (k == "raw_field") o.raw_field = Get<std::string>(v, k, "a string");
    else if (k == "batch_size") o.batch_size = Get<int>(v, k, "an int");
    else if (k == "drop_last") o.drop_last = Get<bool>(v, k, "a bool");
    else if (k == "shuffle") o.shuffle = Get<bool>(v, k, "a bool");
    else if (k == "seed") o.seed = Get<uint64_t>(v, k, "a non-negative int");
    else if (k == "shuffle_buffer") o.shuffle_buffer = Get<size_t>(v, k, "a non-negative int");
    else if (k == "rank") o.rank = Get<int>(v, k, "an int");
    else if (k == "world_size") o.world_size = Get<int>(v, k, "an int");
    else if (k == "balance")
      o.balance = GetEnum<RankBalance>(v, k, {{"pad", RankBalance::kPad},
                                              {"drop", RankBalance::kDrop}});
    else if (k == "threads") o.threads = Get<int>(v, k, "an int");
    else if (k == "fused") o.fused = Get<bool>(v, k, "a bool");
    else if (k == "prefetch") o.prefetch = Get<int>(v, k, "an int");
    else if (k == "memory_budget") o.memory_budget = Get<int64_t>(v, k, "an int");
    else if (k == "cpu_budget") o.cpu_budget = Get<int>(v, k, "an int");
    else if (k == "on_error")
      o.on_error = GetEnum<ErrorPolicy>(v, k, {{"fail", ErrorPolicy::kFail},
                                               {"skip", ErrorPolicy::kSkip}});
    else if (k == "pinned") r.pinned = Get<bool>(v, k, "a bool");
    else throw StatusError(InvalidArgument("unknown pipeline option '{}'", k));
  }
  o.output.width = o.output.height = o.image_size;
  if (r.pinned) {
    o.allocator = ValueOrThrow(CudaPinnedAllocator());
  }
  return r;
}

}  // namespace stoker::py
