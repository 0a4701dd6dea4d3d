// stoker._stoker bindings of the Kafka source: the window a kafka: spec resolves to on the
// broker (stoker.kafka pins it, records it in state_dict() and moves it between epochs).
#pragma once

#include <pybind11/pybind11.h>

#include "formats/dataset.h"

namespace stoker::py {

void RegisterKafka(pybind11::module_& m);
// [{"partition", "begin", "end", "low", "high"}] of a Kafka dataset, or None.
pybind11::object KafkaInfo(const Dataset& ds);

}  // namespace stoker::py
