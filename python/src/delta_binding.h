// stoker._stoker bindings of the Delta Lake source: the snapshot a table spec resolves to
// (stoker.delta uses it to follow a growing table and to record versions in state_dict()).
#pragma once

#include <pybind11/pybind11.h>

#include "formats/dataset.h"

namespace stoker::py {

void RegisterDelta(pybind11::module_& m);
// {"table", "version", "timestamp_ms", "files", "checkpoint"} of a Delta dataset, or None.
pybind11::object DeltaInfo(const Dataset& ds);

}  // namespace stoker::py
