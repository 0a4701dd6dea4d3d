// device=cuda with GPU decode (src/gpu/device_pipeline.h) bound for stoker.Pipeline.
#pragma once

#include <pybind11/pybind11.h>

namespace stoker::py {
void RegisterDevicePipeline(pybind11::module_& m);
}  // namespace stoker::py
