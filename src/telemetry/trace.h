// Streaming reader for PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzipped.
//
// The file is read in chunks and each element of `traceEvents` (or of a bare top-level
// event array, the older non-Kineto export) is parsed on its own; only what the doctor
// needs is kept, as merged interval sets, so memory grows with the number of disjoint
// busy periods, not with the file. Old and new category names are accepted
// (Kernel/kernel, Memcpy/gpu_memcpy, Runtime/cuda_runtime, Operator/cpu_op...).
//
// Times in a TraceSummary are integer nanoseconds relative to `base_us` (the first
// timestamp of the file, in µs). Trace timestamps are µs (the Chrome trace format);
// fractional µs (ns-resolution Kineto traces) are kept. A file whose displayTimeUnit is
// "ns" and whose timestamps are ns since the epoch (> 1e17) is read as ns.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/env.h"
#include "telemetry/byte_source.h"
#include "telemetry/interval.h"
#include "telemetry/step_inference.h"

namespace stoker::telemetry {

struct DeviceProps {
  int id = -1;
  std::string name;
  int64_t total_mem = 0;  // bytes
  int compute_major = 0, compute_minor = 0;
  int num_sms = 0;
};

struct StepWindow {
  int64_t number = -1;     // N of ProfilerStep#N
  int64_t begin = 0, end = 0;  // host-side window, ns
};

struct KernelStat {
  std::string name;
  uint64_t count = 0;
  int64_t total_ns = 0;
  bool comm = false;
};

// Everything that ran on one GPU (pid/args.device) in the trace.
struct GpuActivity {
  int device = -1;
  IntervalSet compute;       // kernels that are not communication
  IntervalSet comm;          // nccl/hccl/rccl kernels
  IntervalSet h2d_pageable;  // Memcpy HtoD (Pageable -> Device)
  IntervalSet h2d_pinned;    // Memcpy HtoD (Pinned -> Device) and other HtoD
  IntervalSet d2h;           // Memcpy DtoH
  IntervalSet other;         // DtoD copies, memsets, other GPU ops
  uint64_t kernels = 0, comm_kernels = 0, memcpys = 0, memsets = 0;
  uint64_t h2d_pageable_count = 0, h2d_pinned_count = 0;
  int64_t h2d_pageable_bytes = 0, h2d_pinned_bytes = 0;
  int64_t kernel_ns = 0, comm_kernel_ns = 0;  // summed durations (not merged)
  int64_t first_ns = INT64_MAX, last_ns = INT64_MIN;
  bool has_activity() const { return kernels + memcpys + memsets > 0; }
};

// One host thread's busy time (cpu ops, merged).
struct HostThread {
  int64_t key = 0;  // pid/tid hash
  IntervalSet ops;
};

struct TraceSummary {
  std::string path;
  std::string format;  // "kineto", "kineto (old categories)", "chrome event array"
  int rank = -1, world_size = 0;
  std::string backend;
  std::vector<DeviceProps> devices;
  double base_us = 0;  // the raw timestamp mapped to 0
  bool ns_input = false;

  std::vector<StepWindow> steps;  // sorted by begin
  // Where the steps come from: "ProfilerStep#N", or, for a trace without them, how they
  // were inferred (step_inference.h: "annotation 'train_step'", "Optimizer.step",
  // "DataLoader.__next__", "GPU kernel bursts", "whole capture"), with a sentence saying so.
  std::string steps_from = "ProfilerStep#N";
  std::string steps_note;
  int64_t main_thread = 0;        // key of the thread that runs ProfilerStep
  IntervalSet data_wait;          // enumerate(DataLoader)#...__next__ / DataPipe
  IntervalSet optimizer;          // Optimizer.step#... / Optimizer.zero_grad#...
  IntervalSet host_comm;          // nccl:* / gloo:* / record_param_comms ops (host side)
  IntervalSet sync;               // cudaStreamSynchronize / cudaDeviceSynchronize / ...
  IntervalSet memcpy_calls;       // cudaMemcpy / cudaMemcpyAsync (host side), all
  IntervalSet h2d_calls;          // ... those whose copy is HtoD (joined by correlation id)
  IntervalSet d2h_calls;          // ... those whose copy is DtoH (a blocking read-back)
  uint64_t d2h_call_count = 0;
  std::vector<HostThread> threads;
  std::vector<GpuActivity> gpus;  // only devices with activity, sorted by id
  std::vector<KernelStat> top_kernels;  // by total time, at most 20
  // Time per collective name: host ops (nccl:all_reduce, gloo:all_to_all, ...) and
  // communication kernels (ncclKernel_AllReduce_..., ncclDevKernel_SendRecv...), at most
  // 64 names (the rest under "other").
  std::vector<std::pair<std::string, int64_t>> collectives;

  uint64_t events = 0;        // elements of traceEvents
  uint64_t kept_events = 0;   // events that contributed to the summary
  uint64_t launches = 0;      // cudaLaunchKernel & co
  int64_t launch_ns = 0;
  uint64_t sync_calls = 0;
  uint64_t dataloader_calls = 0;
  std::string dataloader_iter;  // e.g. "_SingleProcessDataLoaderIter" (from the annotation)
  std::string optimizer_name;   // e.g. "FusedAdam" (from the first Optimizer.step#X.step)
  int64_t tc_kernel_ns = 0;     // kernels whose names mark tensor-core use (h884, hmma, ...)
  int64_t gemm_kernel_ns = 0;   // gemm/conv kernels (tensor-core eligible work)
  bool uses_dataparallel = false, uses_ddp = false;
  int64_t peak_mem_bytes = -1;  // from [memory] instant events ("Total Allocated")
  // aten::embedding calls whose first input is 2-D (token ids [batch, sequence]; recorded
  // with record_shapes=True): (begin, batch * sequence). A language model's token count.
  std::vector<std::pair<int64_t, int64_t>> embedding_inputs;
  // Tokens per step: per step window, the embedding calls with the largest input (the
  // token embedding, not a [1, S] position embedding) summed (micro-batches); the median
  // over steps. 0 when the trace has none.
  double TokensPerStep() const;

  const HostThread* FindThread(int64_t key) const;
  bool has_gpu() const { return !gpus.empty(); }
};

struct TraceReadOptions {
  enum class Unit { kAuto, kMicros, kNanos };
  Unit unit = Unit::kAuto;
  size_t chunk_bytes = 4 << 20;  // read size; one event may grow the buffer to 256 MiB
  StepSource steps_from = StepSource::kAuto;  // what delimits iterations
};

// Reads one trace file. Errors (kCorrupt/kInvalidArgument) name the file and the byte.
Result<TraceSummary> ReadTrace(Env* env, const std::string& path,
                               const TraceReadOptions& opts = {});
Result<TraceSummary> ReadTrace(ByteSource* src, const TraceReadOptions& opts = {});

}  // namespace stoker::telemetry
