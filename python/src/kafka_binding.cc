#include "kafka_binding.h"

#include <cstdint>
#include <pybind11/stl.h>

#include "errors.h"
#include "formats/kafka_dataset.h"

namespace stoker::py {
namespace pyb = pybind11;
using namespace pybind11::literals;

namespace {

pyb::list WindowsToList(const std::vector<KafkaPartitionWindow>& ws) {
  pyb::list out;
  for (const auto& w : ws) {
    out.append(pyb::dict("partition"_a = w.partition, "begin"_a = w.begin, "end"_a = w.end,
                         "low"_a = w.low, "high"_a = w.high));
  }
  return out;
}

std::string Body(const std::string& spec) {
  return spec.rfind("kafka:", 0) == 0 ? spec.substr(6) : spec;
}

}  // namespace

pyb::object KafkaInfo(const Dataset& ds) {
  const auto* w = KafkaWindowsOf(ds);
  if (!w) return pyb::none();
  return WindowsToList(*w);
}

void RegisterKafka(pybind11::module_& m) {
  m.def("kafka_window", [](const std::string& spec) {
    auto parsed = ValueOrThrow(ParseKafkaSpec(Body(spec)));
    Result<std::vector<KafkaPartitionWindow>> r = Status(StatusCode::kInternal, "unset");
    {
      pyb::gil_scoped_release nogil;
      r = ResolveKafkaWindow(parsed);
    }
    return WindowsToList(ValueOrThrow(std::move(r)));
  }, "spec"_a, "The offset window per partition a kafka: spec resolves to on the broker now.");
  m.def("kafka_pinned_spec", [](const std::string& spec, const pyb::dict& ranges) {
    auto parsed = ValueOrThrow(ParseKafkaSpec(Body(spec)));
    std::map<int32_t, std::pair<int64_t, int64_t>> r;
    for (auto item : ranges) {
      auto be = item.second.cast<std::pair<int64_t, int64_t>>();
      r[item.first.cast<int32_t>()] = be;
    }
    return KafkaSpecWithRanges(parsed, r);
  }, "spec"_a, "ranges"_a, "The spec with its window pinned to {partition: (begin, end)}.");
}

}  // namespace stoker::py
