// A pipeline batch handed to Python without copying: NumPy arrays whose base object keeps
// the C++ batch alive, or DLPack capsules whose deleter does. Either way the batch buffer
// goes back to the pipeline's pool only when the last array or tensor viewing it is gone.
#pragma once

#include <cstdint>
#include <pybind11/pybind11.h>

#include <memory>
#include <vector>

#include "dlpack.h"

#include "pipeline/pipeline.h"

namespace stoker::py {

// What a view holds: the batch. A BatchPtr may outlive its pipeline (the engine's pool is
// shared with the deleters, and the allocators are process-lifetime), so views do not keep
// the pipeline and its buffers alive.
struct BatchKeep {
  BatchPtr batch;
};

enum class ArrayKind { kNumpy, kDlpack };

// {"image": [N,3,H,W] float32 | [N,H,W,3] uint8, "label": int64[N], "index": int64[N]}
// for decoded batches; {"data": uint8[total], "offsets": int64[N+1], "label", "index"}
// for raw batches; plus "key": list[str] when with_keys. DLPack capsules report kDLCPU
// (also for pinned memory: torch detects pinning from the pointer).
pybind11::dict BatchToDict(const BatchKeep& keep, ArrayKind kind, bool with_keys);

// A DLPack capsule (kDLCPU, C-contiguous, 1 to 4 dimensions) viewing `data`; `keep` owns the
// memory and is released by the tensor's deleter (without the GIL). Used for image batches
// and token batches alike.
pybind11::object DlpackCapsule(std::shared_ptr<const void> keep, const void* data,
                               DLDataType dtype, const std::vector<int64_t>& shape,
                               DLDevice device = {kDLCPU, 0});

}  // namespace stoker::py
