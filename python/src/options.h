// PipelineOptions from the keyword dict the Python layer passes (python/stoker/pipeline.py),
// through the options table (pipeline/options_schema.h): the same names, checks and
// messages as the CLI. The extension is safe to call directly.
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
// Every option's value in `o`, by name ("auto" where it is auto): a dict OptionsFromDict
// takes back.
pybind11::dict OptionsToDict(const PipelineOptions& o);
// The options table: one dict per row (name, type, default as a Python value, doc, group,
// range, auto, choices, min, max, count, required, cli, aliases).
pybind11::list OptionSchema();

}  // namespace stoker::py
