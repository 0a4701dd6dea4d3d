// PipelineOptions from the keyword dict the Python layer builds (stoker/_pipeline.py
// validates names and types first; this checks again, so the extension is safe to call
// directly).
#pragma once

#include <pybind11/pybind11.h>

#include "pipeline/pipeline.h"

namespace stoker::py {

struct PyPipelineOptions {
  PipelineOptions opts;
  bool pinned = false;  // batch buffers from the CUDA pinned-memory allocator
};

// Throws StatusError(kInvalidArgument) naming the key on an unknown key or a bad value.
PyPipelineOptions OptionsFromDict(const pybind11::dict& d);

}  // namespace stoker::py
