// Page-locked (pinned) host memory for batch buffers, from the CUDA runtime loaded at run
// time with dlopen: the extension neither links CUDA nor needs it to build. Pinned buffers
// let torch copy a batch to the GPU asynchronously (non_blocking=True) straight from the
// pipeline's memory, with no staging copy.
#pragma once

#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/status.h"

namespace stoker::py {

// Library names or paths tried in order by the first CudaPinnedAllocator() call
// (the Python layer puts torch's own libcudart first, so both share one runtime).
void SetCudaRuntimeCandidates(std::vector<std::string> candidates);

// The process-wide pinned allocator (never destroyed: batches may outlive pipelines).
// kUnimplemented when no CUDA runtime can be loaded or no device is visible; the message
// lists what was tried.
Result<HostAllocator*> CudaPinnedAllocator();

// Path of the loaded runtime, or "" before the first successful CudaPinnedAllocator().
std::string CudaRuntimePath();

}  // namespace stoker::py
