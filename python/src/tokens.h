// stoker._stoker.TokenStore, TokenWriter, TokenPipeline, blend_indices (tokens.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace stoker::py {
void RegisterTokens(pybind11::module_& m);
}  // namespace stoker::py
