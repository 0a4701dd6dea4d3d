// The finding rules: one function per finding id over the shared analysis context, and
// the table that lists them (Rules()). See analysis.h for how to add one.
#include <cstdint>
#include <algorithm>
#include <cmath>
#include <map>

#include "doctor/analysis.h"
#include "doctor/text.h"
#include "doctor/watch_rules.h"
#include "gpu/offload_model.h"

namespace stoker::doctor {

namespace {

std::string DataLoaderFix(const std::string& loader, bool gpu, int cpus) {
  std::string workers = cpus > 0 ? fmt::format("up to about {} (the cores per GPU)", cpus)
                                 : "up to the number of cores per GPU (start with 4-8)";
  std::string pin = gpu ? " Add pin_memory=True and move batches with "
                          ".to(device, non_blocking=True) so the copy overlaps compute."
                        : "";
  if (loader == "single-process") {
    return fmt::format(
        "The DataLoader runs in the training process (num_workers=0): set num_workers {} so "
        "batches are prepared in parallel while the model trains, with "
        "persistent_workers=True (no re-fork each epoch) and prefetch_factor=2-4.{} If the "
        "workers are still too slow, make each sample cheaper: a faster format or storage "
        "(stoker convert, local cache), smaller stored images, or augmentation on the GPU.",
        workers, pin);
  }
  return fmt::format(
      "The DataLoader workers do not keep up. If cores are idle, raise num_workers ({}); "
      "raise prefetch_factor (batches in flight = prefetch_factor x num_workers) to absorb "
      "jitter; keep persistent_workers=True.{} If the cores are busy, make each sample "
      "cheaper: a faster format or storage (stoker convert, a local NVMe cache), decode at "
      "reduced size, or move augmentation to the GPU (DALI, torchvision.transforms.v2 on "
      "CUDA tensors); the stoker pipeline does this with a self-tuning thread budget.",
      workers, pin);
}

struct CopyCounts {
  uint64_t pageable = 0, pinned = 0;
  int64_t pageable_bytes = 0;
};

// Host-to-device copies over every rank and GPU.
CopyCounts CountCopies(const Report& rep) {
  CopyCounts k;
  for (const auto& r : rep.ranks) {
    for (const auto& g : r.gpus) {
      k.pageable += g.h2d_pageable, k.pinned += g.h2d_pinned,
          k.pageable_bytes += g.h2d_pageable_bytes;
    }
  }
  return k;
}

// What the GPU ranks have, over all ranks.
struct GpuFlags {
  bool tc_capable = false, tc_used = false, tc_eligible = false, dp = false;
  int64_t peak = -1, total = 0;
  double mem_frac() const {
    return total > 0 ? static_cast<double>(peak) / static_cast<double>(total) : 0;
  }
};

GpuFlags Flags(const Report& rep) {
  GpuFlags g;
  for (const auto& r : rep.ranks) {
    g.tc_capable |= r.tc_capable, g.tc_used |= r.tensor_cores_used,
        g.tc_eligible |= r.tc_eligible;
    g.dp |= r.dataparallel_multi_gpu;
    g.peak = std::max(g.peak, r.peak_mem_bytes);
    g.total = std::max(g.total, r.total_mem_bytes);
  }
  return g;
}

// host.optimizer is reported (host.launch then leaves the optimizer's idle time to it).
bool OptimizerFinding(const Analysis& a) {
  return a.gpu() && a.B().idle_optimizer >= a.th->host_warn;
}

std::optional<Finding> Straggler(const Analysis& a, const GpuLogReport* log) {
  const Report& rep = *a.rep;
  const Thresholds& th = *a.th;
  if (a.straggler < 0) return std::nullopt;
  const RankReport& sr = rep.ranks[a.straggler];
  if (a.imbalance < th.imbalance_verdict / 2) return std::nullopt;
  Finding f;
  f.id = "imbalance.straggler";
  f.rank = sr.rank;
  f.severity = a.imbalance >= th.imbalance_verdict ? "high" : "medium";
  f.title = fmt::format("Rank {} is the straggler: the other ranks wait for it", sr.rank);
  std::string cause_txt =
      rep.cross.straggler_cause == "data_wait"
          ? fmt::format("its DataLoader wait is {} per step vs {} on the others",
                        Ms(sr.f.data_wait * sr.step_s_mean), Ms(a.others_data_s))
          : rep.cross.straggler_cause == "compute"
                ? fmt::format("its compute is {} per step vs {} on the others",
                              Ms(sr.f.compute * sr.step_s_mean), Ms(a.others_compute_s))
                : "its host overhead (outside operators) is larger";
  f.evidence = fmt::format(
      "Rank {} works {} per step outside communication, {} more than the median of the "
      "other ranks ({} of the {} step); {}. The other ranks spend that time waiting in "
      "the collective (exposed communication spread {} per step).",
      sr.rank, Ms(a.straggler_work_s), Ms(rep.cross.straggler_excess_s), Pct(a.imbalance),
      Ms(rep.step_s), cause_txt,
      Ms(rep.cross.comm_spread_s));
  f.fix = rep.cross.straggler_cause == "data_wait"
              ? fmt::format("Look at rank {}'s input: its data is slower to load (a slower "
                            "disk or network path, larger or uneven shards, fewer "
                            "DataLoader workers or cores on that node). Give it the same "
                            "num_workers/pin_memory settings, balance the shards, or cache "
                            "its data locally.",
                            sr.rank)
              : fmt::format("Look at rank {}'s node: a slower or throttled GPU/CPU, other "
                            "processes on it, or more work per step (uneven batch or "
                            "sequence lengths). Compare its GPU log (nvidia-smi) with the "
                            "others'.",
                            sr.rank);
  f.expected_speedup = SpeedupFromRemoving(rep.step_s, rep.cross.straggler_excess_s);
  return f;
}

std::optional<Finding> InputDataLoader(const Analysis& a, const GpuLogReport* log) {
  const Report& rep = *a.rep;
  const Thresholds& th = *a.th;
  const Fractions& B = a.B();
  const DoctorInputs& in = *a.in;
  if (!(B.data_wait >= th.input_warn || (rep.gpu && B.idle_data >= th.input_warn))) {
    return std::nullopt;
  }
  return InputFinding(B.data_wait, B.idle_data, rep.step_s, rep.steps,
                           a.worst_data->dataloader, rep.gpu, in.options.cpus, th,
                           rep.ranks.size() > 1 ? -1 : a.worst_data->rank);
}

std::optional<Finding> H2dPageable(const Analysis& a, const GpuLogReport* log) {
  const Report& rep = *a.rep;
  const Thresholds& th = *a.th;
  const Fractions& B = a.B();
  const CopyCounts k = CountCopies(rep);
  const uint64_t pageable = k.pageable, pinned = k.pinned;
  const int64_t pageable_bytes = k.pageable_bytes;
  if (pageable == 0) return std::nullopt;
  // What pinning removes: pageable copies no kernel hides, and the GPU idle while the
  // host is blocked staging a copy.
  double lost = B.h2d_pageable + B.idle_copy;
  Finding f;
  f.id = "h2d.pageable";
  f.severity = lost >= th.input_warn ? "high" : (lost >= 0.01 ? "medium" : "low");
  f.title = "Host-to-device copies from pageable memory";
  f.evidence = fmt::format(
      "{} Memcpy HtoD (Pageable -> Device) ({:.1f} MB) against {} from pinned memory; "
      "copies not hidden behind kernels take {} of the step ({} from pageable memory), and "
      "the GPU is idle for {} of the step ({} per step) while the host is blocked in "
      "cudaMemcpy calls. A cudaMemcpyAsync from pageable memory is staged and synchronous "
      "for the host (Nsight Systems rule cuda_memcpy_async).",
      pageable, static_cast<double>(pageable_bytes) / 1e6, pinned, Pct1(B.h2d),
      Pct1(B.h2d_pageable), Pct1(B.idle_copy), Ms(B.idle_copy * rep.step_s));
  f.fix =
      "Set pin_memory=True on the DataLoader and copy with "
      "tensor.to(device, non_blocking=True); allocate other host tensors that go to the "
      "GPU each step with pin_memory=True.";
  f.expected_speedup = SpeedupFromRemoving(rep.step_s, lost * rep.step_s);
  return f;
}

std::optional<Finding> H2dExposed(const Analysis& a, const GpuLogReport* log) {
  const Report& rep = *a.rep;
  const Thresholds& th = *a.th;
  const Fractions& B = a.B();
  if (CountCopies(rep).pageable > 0 || B.h2d + B.idle_copy < th.input_warn) return std::nullopt;
  double lost = B.h2d + B.idle_copy;
  Finding f;
  f.id = "h2d.exposed";
  f.severity = lost >= th.input_verdict ? "high" : "medium";
  f.title = "Host-to-device copies are not overlapped with compute";
  f.evidence = fmt::format(
      "Copies to the GPU that no kernel overlaps take {} of the step, and the GPU is idle "
      "for {} of the step while the host is blocked in cudaMemcpy calls ({} per step in "
      "all).",
      Pct1(B.h2d), Pct1(B.idle_copy), Ms(lost * rep.step_s));
  f.fix = "Copy the next batch while the current one trains: non_blocking=True copies from "
          "pinned memory (pin_memory=True), issued early (a CUDA-stream prefetcher), or let "
          "the stoker pipeline's prefetch stage do the copy; replace synchronous "
          "cudaMemcpy/tensor.to(device) calls in the step with non_blocking ones.";
  f.expected_speedup = SpeedupFromRemoving(rep.step_s, lost * rep.step_s);
  return f;
}

std::optional<Finding> CommExposed(const Analysis& a, const GpuLogReport* log) {
  const Report& rep = *a.rep;
  const Thresholds& th = *a.th;
  const Fractions& B = a.B();
  const DoctorInputs& in = *a.in;
  if (a.comm_transfer < th.comm_warn) return std::nullopt;
  // The dominant kind of collective decides the advice.
  std::map<std::string, int64_t> kinds;
  for (const auto& t : in.traces) {
    for (const auto& [name, ns] : t.collectives) {
      std::string l = name;
      std::transform(l.begin(), l.end(), l.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      std::string k = "all_reduce";
      if (l.find("all_to_all") != l.npos || l.find("alltoall") != l.npos ||
          l.find("sendrecv") != l.npos || l.find("send") != l.npos ||
          l.find("recv") != l.npos) {
        k = "all_to_all";
      } else if (l.find("gather") != l.npos || l.find("reduce_scatter") != l.npos ||
                 l.find("reducescatter") != l.npos) {
        k = "all_gather";
      } else if (l.find("broadcast") != l.npos) {
        k = "broadcast";
      }
      kinds[k] += ns;
    }
  }
  std::string kind = "all_reduce";
  int64_t best_ns = -1, all_ns = 0;
  for (const auto& [k, ns] : kinds) {
    all_ns += ns;
    if (ns > best_ns) best_ns = ns, kind = k;
  }
  Finding f;
  f.id = "comm.exposed";
  f.severity = a.comm_transfer >= th.comm_verdict ? "high" : "medium";
  f.title = "Communication is not hidden behind compute";
  f.evidence = fmt::format(
      "Collectives take {} of the step, {} of it overlapped by compute; {} of the step "
      "({} per step) is exposed communication",
      Pct(B.comm_total), Pct(B.comm_overlap), Pct(B.comm), Ms(B.comm * rep.step_s));
  if (best_ns > 0 && all_ns > 0) {
    f.evidence += fmt::format(", mostly {} ({} of collective time)", kind,
                              Pct(static_cast<double>(best_ns) / static_cast<double>(all_ns)));
  }
  f.evidence += ".";
  if (B.comm - a.comm_transfer >= 0.01) {
    f.evidence += fmt::format(
        " The rank that waits least still has {} ({} per step) exposed; the rest is "
        "ranks waiting for slower ones{}.",
        Pct(a.comm_transfer), Ms(a.comm_transfer * rep.step_s),
        rep.cross.straggler_rank >= 0 ? " (see the straggler)" : "");
  }
  const int world = a.world_size;
  if (world > static_cast<int>(rep.ranks.size())) {
    f.evidence += fmt::format(
        " Only {} of the job's {} ranks {} in the input: part of this may be waiting "
        "for ranks not shown; give every rank's trace to separate transfer from waiting.",
        rep.ranks.size(), world, rep.ranks.size() == 1 ? "is" : "are");
  }
  if (kind == "all_to_all") {
    f.fix = "All-to-all exchanges (embedding lookups or MoE tokens) are exposed: overlap "
            "them with compute (fetch the next batch's sparse features one step ahead, as "
            "TorchRec's TrainPipelineSparseDist does), send fewer bytes (bf16/fp16 or "
            "quantized communication, smaller embedding dimensions), and balance the "
            "features or tokens per rank.";
  } else if (kind == "all_gather") {
    f.fix = "Sharded-parameter gathers and gradient reduce-scatters (FSDP/ZeRO) are "
            "exposed: enable prefetching (FSDP backward_prefetch=BACKWARD_PRE, "
            "forward_prefetch=True), use larger wrap units or hybrid sharding inside a node, "
            "and a larger batch per GPU so that compute hides the traffic.";
  } else if (kind == "broadcast") {
    f.fix = "Broadcasts run every step: with DDP, broadcast_buffers=False unless the "
            "buffers (e.g. BatchNorm statistics) must be identical on all ranks each step; "
            "broadcast other state less often.";
  } else {
    f.fix = "Overlap and shrink gradient communication: with DDP tune bucket_cap_mb "
            "(larger buckets mean fewer, more efficient all-reduces; smaller ones start "
            "earlier), use gradient accumulation with no_sync() to all-reduce every k "
            "steps, a larger batch per GPU, or gradient compression (DDP comm hooks, "
            "bf16/fp16 compression).";
  }
  bool gloo_gpu = false;
  for (const auto& t : in.traces) {
    if (t.backend == "gloo" && t.has_gpu()) gloo_gpu = true;
  }
  if (gloo_gpu) f.fix += " The trace uses the gloo backend on GPUs: use nccl.";
  f.expected_speedup = SpeedupFromRemoving(rep.step_s, a.comm_transfer * rep.step_s);
  return f;
}

std::optional<Finding> HostSync(const Analysis& a, const GpuLogReport* log) {
  const Report& rep = *a.rep;
  const Thresholds& th = *a.th;
  const Fractions& B = a.B();
  if (!rep.gpu || B.idle_sync < th.host_warn) return std::nullopt;
  uint64_t calls = 0, d2h = 0;
  for (const auto& r : rep.ranks) calls += r.sync_calls, d2h += r.d2h_copy_calls;
  Finding f;
  f.id = "host.sync";
  f.severity = B.idle_sync >= th.host_verdict ? "high" : "medium";
  f.title = "Host synchronizations drain the GPU";
  f.evidence = fmt::format(
      "{} cudaStreamSynchronize/cudaDeviceSynchronize calls take {} of host time, and {} "
      "copies to the host block it; the GPU sits idle for {} of the step ({} per step) "
      "while the host waits in them or has not launched again since (Nsight rules "
      "cuda_api_sync, cuda_memcpy_sync).",
      calls, Pct(B.sync), d2h, Pct(B.idle_sync), Ms(B.idle_sync * rep.step_s));
  f.fix = "Remove per-step synchronizations: loss.item(), .cpu(), print(tensor), "
          "torch.cuda.synchronize() and non-pinned copies to the host. Accumulate metrics "
          "on the GPU and read them every N steps.";
  f.expected_speedup = SpeedupFromRemoving(rep.step_s, B.idle_sync * rep.step_s);
  return f;
}

std::optional<Finding> HostOptimizer(const Analysis& a, const GpuLogReport* log) {
  const Report& rep = *a.rep;
  const Thresholds& th = *a.th;
  const Fractions& B = a.B();
  const DoctorInputs& in = *a.in;
  if (!OptimizerFinding(a)) return std::nullopt;
  Finding f;
  f.id = "host.optimizer";
  f.severity = B.idle_optimizer >= th.host_verdict ? "high" : "medium";
  f.title = "The GPU waits while the host runs the optimizer step";
  std::string opt_name;
  for (const auto& t : in.traces) {
    if (opt_name.empty()) opt_name = t.optimizer_name;
  }
  f.evidence = fmt::format(
      "Optimizer.step/zero_grad{} take {} of the step on the host ({} per step); the GPU "
      "is idle for {} of the step ({} per step) inside them: the host prepares and launches the "
      "optimizer's many small kernels slower than the GPU runs them.",
      opt_name.empty() ? "" : " (" + opt_name + ")", Pct(B.optimizer),
      Ms(B.optimizer * rep.step_s), Pct(B.idle_optimizer),
      Ms(B.idle_optimizer * rep.step_s));
  static const char* kTorchOptim[] = {"SGD",   "Adam",    "AdamW",  "Adamax", "NAdam",
                                      "RAdam", "RMSprop", "Adagrad", "Adadelta", "ASGD",
                                      "Rprop"};
  bool torch_optim = false;
  for (const char* o : kTorchOptim) torch_optim = torch_optim || opt_name == o;
  if (torch_optim) {
    f.fix = fmt::format(
        "torch.optim.{} runs one small kernel per parameter tensor unless told otherwise: "
        "pass foreach=True{} (or torch.compile the optimizer step), and call "
        "zero_grad(set_to_none=True).",
        opt_name,
        (opt_name == "Adam" || opt_name == "AdamW" || opt_name == "SGD")
            ? ", or fused=True for the single-kernel CUDA implementation"
            : "");
  } else {
    f.fix = fmt::format(
        "Use a multi-tensor implementation of the optimizer{}: its foreach/fused variant "
        "if it has one (torch.optim: foreach=True or fused=True; apex/DeepSpeed fused "
        "optimizers), or torch.compile the optimizer step; do its bookkeeping less often "
        "(e.g. preconditioner updates every N steps); call zero_grad(set_to_none=True).",
        opt_name.empty() ? "" : " (" + opt_name + ")");
  }
  f.expected_speedup = SpeedupFromRemoving(rep.step_s, B.idle_optimizer * rep.step_s);
  return f;
}

std::optional<Finding> HostLaunch(const Analysis& a, const GpuLogReport* log) {
  const Report& rep = *a.rep;
  const Thresholds& th = *a.th;
  const Fractions& B = a.B();
  const double launch_idle = B.idle_host - (OptimizerFinding(a) ? B.idle_optimizer : 0.0);
  if (!rep.gpu || launch_idle < th.host_warn) return std::nullopt;
  double kps = 0, mk = 0;
  for (const auto& r : rep.ranks) {
    kps += r.kernels_per_step / static_cast<double>(rep.ranks.size());
    for (const auto& g : r.gpus) mk = std::max(mk, g.mean_kernel_us);
  }
  Finding f;
  f.id = "host.launch";
  f.severity = launch_idle >= th.host_verdict ? "high" : "medium";
  f.title = "The GPU waits for the host to launch work (launch or Python overhead)";
  f.evidence = fmt::format(
      "The GPU is idle for {} of the step ({} per step) outside DataLoader waits, copies "
      "and syncs{}; {:.0f} kernels per step, {:.0f} µs each on average.",
      Pct(launch_idle), Ms(launch_idle * rep.step_s),
      OptimizerFinding(a) ? " and the optimizer step" : "", kps, mk);
  f.fix = mk < 20 ? "Many short kernels: capture the step with CUDA Graphs or "
                    "torch.compile(mode=\"reduce-overhead\"), fuse small ops, or raise the "
                    "batch size so each kernel does more work."
                  : "The host falls behind between kernels: look for Python work in the "
                    "step (logging, metric code, per-sample loops), move it off the "
                    "critical path, or use torch.compile to cut framework overhead.";
  f.fix += " The profiler itself adds host time per operator (more with record_shapes "
           "and with_stack): confirm the gap on an unprofiled run (stoker watch) before "
           "optimizing.";
  f.expected_speedup = SpeedupFromRemoving(rep.step_s, launch_idle * rep.step_s);
  return f;
}

std::optional<Finding> HostOverhead(const Analysis& a, const GpuLogReport* log) {
  const Report& rep = *a.rep;
  const Thresholds& th = *a.th;
  const Fractions& B = a.B();
  if (rep.gpu || B.idle < th.host_warn * 2) return std::nullopt;
  Finding f;
  f.id = "host.overhead";
  f.severity = B.idle >= th.host_verdict ? "high" : "low";
  f.title = "Time in the training loop outside any operator";
  f.evidence = fmt::format(
      "{} of the step ({} per step) is spent outside PyTorch operators and DataLoader "
      "waits: Python code in the loop, logging, the profiler itself.",
      Pct(B.idle), Ms(B.idle * rep.step_s));
  f.fix = "Profile the Python side (py-spy, torch.profiler with with_stack=True) and move "
          "per-step Python work (logging, metrics, checkpoint checks) out of the loop or "
          "to every N steps.";
  f.expected_speedup = SpeedupFromRemoving(rep.step_s, B.idle * rep.step_s);
  return f;
}

std::optional<Finding> ComputeAmp(const Analysis& a, const GpuLogReport* log) {
  const Fractions& B = a.B();
  const GpuFlags g = Flags(*a.rep);
  if (!(a.gpu() && g.tc_capable && !g.tc_used && g.tc_eligible)) return std::nullopt;
  Finding f;
  f.id = "compute.amp";
  f.severity = B.compute >= 0.5 ? "medium" : "low";
  f.title = "Tensor cores are not used";
  f.evidence = "The GPU has tensor cores (compute capability >= 7.0) and the trace has "
               "GEMM/convolution kernels, but no tensor-core kernels (TensorBoard plugin "
               "rule R6).";
  f.fix = "Enable automatic mixed precision: with torch.autocast(\"cuda\", "
          "dtype=torch.bfloat16) around the forward pass (fp16 needs a GradScaler), or "
          "at least torch.backends.cuda.matmul.allow_tf32 = True on Ampere and newer.";
  return f;
}

std::optional<Finding> ComputeDataParallel(const Analysis& a, const GpuLogReport* log) {
  const GpuFlags g = Flags(*a.rep);
  if (!a.gpu() || !g.dp) return std::nullopt;
  Finding f;
  f.id = "compute.dataparallel";
  f.severity = "medium";
  f.title = "DataParallel on several GPUs";
  f.evidence = "DataParallel.forward runs with kernels on more than one GPU.";
  f.fix = "Use DistributedDataParallel (one process per GPU): DataParallel replicates the "
          "model every step and is bound by one Python thread (TensorBoard plugin R2).";
  return f;
}

std::optional<Finding> MemoryLimit(const Analysis& a, const GpuLogReport* log) {
  const Thresholds& th = *a.th;
  const GpuFlags g = Flags(*a.rep);
  const double mf = g.mem_frac();
  if (!(a.gpu() && g.peak > 0 && g.total > 0 && mf >= th.mem_limit)) return std::nullopt;
  Finding f;
  f.id = "memory.limit";
  f.severity = "medium";
  f.title = "Device memory is at the limit";
  f.evidence = fmt::format("Peak allocated memory is {} of the device's.", Pct(mf));
  f.fix = "Activation (gradient) checkpointing or mixed precision free memory for a "
          "larger batch (TensorBoard plugin R7).";
  return f;
}

std::optional<Finding> ComputeBatch(const Analysis& a, const GpuLogReport* log) {
  const Thresholds& th = *a.th;
  const Fractions& B = a.B();
  const GpuFlags g = Flags(*a.rep);
  const double mf = g.mem_frac();
  if (!(a.gpu() && g.peak > 0 && g.total > 0 && mf < th.mem_limit && B.compute < th.low_util &&
        a.input_score < th.input_verdict && B.comm < th.comm_verdict)) {
    return std::nullopt;
  }
  Finding f;
  f.id = "compute.batch";
  f.severity = "medium";
  f.title = "Low GPU utilization with memory to spare";
  f.evidence = fmt::format(
      "Compute kernels run {} of the step and peak memory is {} of the device's.",
      Pct(B.compute), Pct(mf));
  f.fix = "Raise the batch size (scale the learning rate accordingly) so each kernel "
          "does more work (TensorBoard plugin R5).";
  return f;
}

std::optional<Finding> GpuStarvation(const Analysis& a, const GpuLogReport* log) {
  const Thresholds& th = *a.th;
  const GpuLogReport& g = *log;
  if (g.starvation_periods <= 0) return std::nullopt;
  Finding f;
  f.id = "gpu.starvation";
  f.severity = g.starved_gpu_frac >= th.input_verdict ? "high" : "medium";
  f.title = "Periods where the GPU is starved";
  std::string per_gpu;
  for (const auto& [gpu, secs] : g.starvation_by_gpu) {
    if (!per_gpu.empty()) per_gpu += ", ";
    per_gpu += gpu >= 0 ? fmt::format("GPU {} {:.1f} s", gpu, secs) : fmt::format("{:.1f} s", secs);
  }
  f.evidence = fmt::format(
      "{}: {} period{} with utilization below {:.0f}% for at least {:.1f} s ({}); the most "
      "starved GPU{} is starved {} of the {:.0f} s sampled, the longest period {:.1f} s; "
      "mean utilization {:.0f}%.",
      g.path, g.starvation_periods, g.starvation_periods == 1 ? "" : "s",
      th.low_util * 100, th.starvation_gap_s, per_gpu,
      g.starved_gpu >= 0 ? fmt::format(" ({})", g.starved_gpu) : std::string(),
      Pct(g.starved_gpu_frac), g.duration_s, g.longest_starvation_s, g.util_mean);
  if (g.starvation_by_gpu.size() < static_cast<size_t>(std::max(1, g.gpus)) && g.gpus > 1) {
    f.evidence += " Only some GPUs starve: if they train one job, look at what differs "
                  "(their ranks' input, their node).";
  }
  f.fix = "Record a profiler trace over one of these periods (torch.profiler with a "
          "schedule) and run stoker doctor on it to tell data waits from host overhead; "
          "periodic gaps often come from evaluation, checkpointing or the DataLoader "
          "restarting its workers each epoch (persistent_workers=True).";
  f.expected_speedup = SpeedupFromRemoving(1.0, g.starved_gpu_frac);
  return f;
}

std::optional<Finding> GpuThrottle(const Analysis& a, const GpuLogReport* log) {
  const Thresholds& th = *a.th;
  const GpuLogReport& g = *log;
  if (std::isnan(g.throttled_busy_frac) || g.throttled_busy_frac < th.throttle_verdict / 2) {
    return std::nullopt;
  }
  Finding f;
  f.id = "gpu.throttle";
  f.severity = g.throttled_busy_frac >= th.throttle_verdict ? "high" : "medium";
  f.title = "Clocks are throttled while the GPU is busy";
  f.evidence = fmt::format(
      "{}: {} of busy samples report {} (max temperature {:.0f} C, max power {:.0f} W{}).",
      g.path, Pct(g.throttled_busy_frac), telemetry::ThrottleReasonNames(g.throttle_bits_seen),
      g.temp_max_c, g.power_max_w,
      std::isnan(g.power_limit_w) ? std::string()
                                  : fmt::format(", limit {:.0f} W", g.power_limit_w));
  if (!std::isnan(g.throttled_sm_clock_mhz) && !std::isnan(g.max_sm_clock_mhz) &&
      g.max_sm_clock_mhz > 0) {
    f.evidence += fmt::format(" The SM clock averages {:.0f} MHz in those samples, {} of "
                              "the {:.0f} MHz maximum.",
                              g.throttled_sm_clock_mhz,
                              Pct(g.throttled_sm_clock_mhz / g.max_sm_clock_mhz),
                              g.max_sm_clock_mhz);
  }
  f.fix = (g.throttle_bits_seen & telemetry::kThrottleThermalMask)
              ? "Thermal or hardware slowdown: check cooling and airflow, fans, and the "
                "node's other load; report the node to the cluster admins."
              : "Power capping: the GPU holds its power limit by lowering clocks. At the "
                "default limit under full load this is normal operation; if the limit is "
                "below the board's default (nvidia-smi -q -d POWER), raise it or ask for "
                "the cluster's power policy, and check whether other GPUs share the budget.";
  return f;
}

std::optional<Finding> GpuSmActivity(const Analysis& a, const GpuLogReport* log) {
  const Thresholds& th = *a.th;
  const GpuLogReport& g = *log;
  if (!(!std::isnan(g.sm_active_mean) && g.sm_active_mean < 0.5 && !std::isnan(g.util_mean) &&
        g.util_mean >= th.busy_util_pct)) {
    return std::nullopt;
  }
  Finding f;
  f.id = "gpu.sm_activity";
  f.severity = "medium";
  f.title = "The GPU is busy but its SMs are mostly idle";
  f.evidence = fmt::format(
      "{}: utilization averages {:.0f}% (a kernel is running), but SM activity averages "
      "{:.2f} (DCGM: below 0.5 likely indicates ineffective GPU use; 0.8 is needed).",
      g.path, g.util_mean, g.sm_active_mean);
  f.fix = "The kernels do not fill the GPU: raise the batch size (or sequence packing), "
          "fuse small kernels (torch.compile), and check with a profiler trace which "
          "kernels dominate.";
  return f;
}

std::optional<Finding> GpuTensorCores(const Analysis& a, const GpuLogReport* log) {
  const GpuLogReport& g = *log;
  if (!(!std::isnan(g.tensor_active_mean) && g.tensor_active_mean < 0.01 &&
        !std::isnan(g.sm_active_mean) && g.sm_active_mean >= 0.3)) {
    return std::nullopt;
  }
  Finding f;
  f.id = "gpu.tensor_cores";
  f.severity = "low";
  f.title = "Tensor cores are idle";
  f.evidence = fmt::format("{}: tensor pipe activity averages {:.3f} while SM activity is "
                           "{:.2f}.",
                           g.path, g.tensor_active_mean, g.sm_active_mean);
  f.fix = "If the model is matmul/convolution heavy, enable mixed precision "
          "(torch.autocast with bf16/fp16) or TF32 (torch.backends.cuda.matmul.allow_tf32).";
  return f;
}

std::optional<Finding> GpuMemoryHeadroom(const Analysis& a, const GpuLogReport* log) {
  const Thresholds& th = *a.th;
  const GpuLogReport& g = *log;
  if (!(!std::isnan(g.mem_used_max_frac) && g.mem_used_max_frac < 0.5 &&
        !std::isnan(g.util_mean) && g.util_mean < th.low_util * 100 * 1.6)) {
    return std::nullopt;
  }
  Finding f;
  f.id = "gpu.memory_headroom";
  f.severity = "info";
  f.title = "GPU memory to spare";
  f.evidence = fmt::format("{}: at most {} of GPU memory is used.", g.path,
                           Pct(g.mem_used_max_frac));
  f.fix = "A larger batch fits: it amortizes per-step overhead (raise the learning rate "
          "with it, or keep the global batch with fewer accumulation steps).";
  return f;
}

std::optional<Finding> CpuSaturated(const Analysis& a, const GpuLogReport* log) {
  const Thresholds& th = *a.th;
  const GpuLogReport& g = *log;
  if (!(!std::isnan(g.proc_cpu_cores_mean) && !std::isnan(g.cpus) && g.cpus > 0 &&
        g.proc_cpu_cores_mean >= 0.85 * g.cpus && !std::isnan(g.util_mean) &&
        g.util_mean < th.low_util * 100)) {
    return std::nullopt;
  }
  Finding f;
  f.id = "cpu.saturated";
  f.severity = "high";
  f.title = "The CPU is saturated while the GPU waits";
  f.evidence = fmt::format("{}: the training process tree uses {:.1f} of {:.0f} cores on "
                           "average while GPU utilization averages {:.0f}%.",
                           g.path, g.proc_cpu_cores_mean, g.cpus, g.util_mean);
  f.fix = "Preprocessing is CPU-bound: decode less (smaller stored images, DCT-scaled JPEG "
          "decode), move augmentation to the GPU, or get more cores per GPU; more "
          "DataLoader workers will not help.";
  return f;
}

// The GPU path's offload model (src/gpu/offload_model.h, the same one gpu_decode=auto and
// `stoker plan` use) on the pipeline's measured CPU cost per image, the step's demand
// (samples/s over the share of time the consumer was not waiting) and the GPU's busy
// share (a GPU log's utilization, else the trace's compute share).
std::optional<Finding> GpuPreprocessOffload(const Analysis& a, const GpuLogReport* log) {
  const auto& p = *a.rep->pipeline;
  if (p.bottleneck_kind != "decode" && p.bottleneck_kind != "ops") return std::nullopt;
  if (p.samples_per_s <= 0 || p.cores_busy <= 0) return std::nullopt;
  gpu::OffloadInputs in;
  in.cpu_cores = p.cpus > 0 ? p.cpus : p.threads;
  in.cpu_s_per_image = p.cores_busy / p.samples_per_s;
  in.required_images_per_s = p.samples_per_s / std::max(0.05, 1.0 - p.consumer_wait_frac);
  std::string busy_from;
  if (a.any_util && !std::isnan(a.util_mean)) {
    in.gpu_busy_frac = a.util_mean / 100.0;
    busy_from = "GPU utilization";
  } else if (a.has_trace() && a.gpu()) {
    in.gpu_busy_frac = a.B().compute;
    busy_from = "compute share of the trace";
  } else {
    return std::nullopt;
  }
  const gpu::OffloadDecision d = gpu::DecideOffload(in);
  if (!d.use_gpu) return std::nullopt;
  Finding f;
  f.id = "gpu.preprocess_offload";
  f.severity = p.consumer_wait_frac >= a.th->input_verdict ? "high" : "medium";
  f.title = "Decoding on the GPU would feed the step";
  f.evidence = fmt::format(
      "{:.1f} ms of CPU per image on {} cores: the CPU path can feed {:.0f} images/s, the "
      "step takes {:.0f} when not waiting; the GPU is {} busy ({}), so nvJPEG and a fused "
      "augment kernel can deliver {:.0f} images/s for about {} more GPU time.",
      in.cpu_s_per_image * 1e3, in.cpu_cores, d.cpu_rate, in.required_images_per_s,
      Pct(in.gpu_busy_frac), busy_from, d.gpu_rate, Pct(d.gpu_load_added));
  f.fix = "Decode and augment on the GPU: stoker.Pipeline(..., device=\"cuda\", "
          "gpu_decode=\"on\") (or \"auto\", which measures first), DALI's mixed decoder, or "
          "torchvision.io.decode_jpeg(device=\"cuda\"); see docs/gpu.md.";
  const double delivered = std::min(d.gpu_rate, in.required_images_per_s);
  f.expected_speedup = delivered / std::max(1e-9, p.samples_per_s);
  return f;
}

// A run whose reads went mostly to the source although it had a node-wide cache: a cold
// epoch (the cache filling) or a cache too small to hold what the epoch reads.
std::optional<Finding> CacheCold(const Analysis& a, const GpuLogReport*) {
  const auto& p = *a.rep->pipeline;
  if (!p.cache || p.cache_hit_rate >= 0.5) return std::nullopt;
  const double total = static_cast<double>(p.cache_fetched_bytes + p.cache_stream_bytes);
  if (total <= 0) return std::nullopt;
  Finding f;
  f.id = "cache.cold";
  const bool too_small = p.cache_stream_bytes > p.cache_fetched_bytes;
  f.severity = p.consumer_wait_frac >= a.th->input_verdict ? "medium" : "info";
  f.title = too_small ? "The node-wide cache is too small for what the epoch reads"
                      : "A cold-cache epoch: this run filled the node-wide cache";
  f.evidence = fmt::format(
      "{} of the bytes came from the cache; {:.1f} MB were fetched into it and {:.1f} MB read "
      "through uncached; readers waited {:.2f} s for fetches{}; {} evictions; the consumer waits "
      "{} of the time.",
      Pct(p.cache_hit_rate), p.cache_fetched_bytes / 1e6, p.cache_stream_bytes / 1e6,
      p.cache_stall_s, p.wall_s > 0 ? fmt::format(" in {:.1f} s", p.wall_s) : std::string(),
      p.cache_evictions, Pct(p.consumer_wait_frac));
  if (too_small) {
    f.fix = fmt::format(
        "Files that do not fit stream through from the source every epoch: raise cache_limit "
        "(now {:.1f} GB) to the dataset's size, or convert to smaller shards so more of them "
        "fit (the cache holds whole files).",
        p.cache_limit_bytes / 1e9);
  } else {
    f.fix = "Expected on the first epoch: later epochs read from the cache. Judge the pipeline "
            "on a warm epoch; to keep the first one fed, raise read parallelism or pre-warm "
            "the cache (one `stoker bench pipeline --decode raw --cache-dir ...` pass).";
  }
  return f;
}

// A Kafka source whose read threads spend most of their time waiting for the broker: the
// pipeline is bound by the fetches, not by decode or the CPUs.
std::optional<Finding> KafkaBrokerWait(const Analysis& a, const GpuLogReport*) {
  const auto& p = *a.rep->pipeline;
  auto wait = p.source_counters.find("kafka_fetch_wait_s");
  if (wait == p.source_counters.end() || p.wall_s <= 0) return std::nullopt;
  // The fetch wait is summed over the reads that waited (one per partition stream at a
  // time; the others wait on that read): against the run's wall time, >= 50% means a
  // stream was waiting on the broker for at least half of the run.
  const double share = wait->second / p.wall_s;
  if (share < 0.5 || p.bottleneck != "read") return std::nullopt;
  auto get = [&](const char* k) {
    auto it = p.source_counters.find(k);
    return it == p.source_counters.end() ? 0.0 : it->second;
  };
  const double msgs = get("kafka_messages"), bytes = get("kafka_bytes");
  Finding f;
  f.id = "source.kafka_wait";
  f.severity = p.consumer_wait_frac >= a.th->input_verdict ? "high" : "medium";
  f.title = "Reads wait on the Kafka broker";
  f.evidence = fmt::format(
      "reads waited {:.1f} s for the broker in a {:.1f} s run ({:.1f}x the wall time, summed "
      "over threads); {:.0f} messages ({:.1f} MB): {:.1f} MB/s from the broker; consumer lag "
      "{:.0f} messages; the consumer waits {} of the time.",
      wait->second, p.wall_s, share, msgs, bytes / 1e6, bytes / 1e6 / p.wall_s,
      get("kafka_lag"), Pct(p.consumer_wait_frac));
  f.fix = "stoker reads each partition as one stream, so a topic's read parallelism is its "
          "partition count: spread the topic over more partitions; let fetches carry more "
          "(librdkafka's fetch.min.bytes small, fetch.wait.max.ms 50-100, "
          "max.partition.fetch.bytes >= 1 MB, as rdkafka.NAME=VALUE in the kafka: URL); put "
          "the brokers near the trainers; for data trained on many times, land it in shards or "
          "a Delta table once and read those (docs/kafka.md).";
  return f;
}

std::optional<Finding> PipelineStage(const Analysis& a, const GpuLogReport* log) {
  const Thresholds& th = *a.th;
  const auto& p = *a.rep->pipeline;
  if (p.bottleneck_kind == "consumer" || p.bottleneck.empty()) return std::nullopt;
  Finding f;
  f.id = "pipeline.stage";
  f.severity = p.consumer_wait_frac >= th.input_verdict ? "high" : "info";
  f.title = fmt::format("The '{}' stage bounds the stoker pipeline", p.bottleneck);
  std::string stages;
  for (const auto& s : p.stages) {
    if (!stages.empty()) stages += ", ";
    stages += fmt::format("{} {} busy x{}", s.name, Pct(s.busy_frac), s.threads);
  }
  f.evidence = fmt::format(
      "{:.0f} samples/s; the consumer waits {} of the time; stages: {}; {:.1f} cores busy{}.",
      p.samples_per_s, Pct(p.consumer_wait_frac), stages, p.cores_busy,
      p.cpus > 0 ? fmt::format(" of {}", p.cpus) : std::string());
  if (p.bottleneck_kind == "storage") {
    f.fix = "Storage-bound: read larger sequential shards (WebDataset/TFRecord, stoker "
            "convert), add a local NVMe cache, raise read parallelism for network storage.";
  } else if (p.bottleneck_kind == "decode" || p.bottleneck_kind == "ops") {
    const char* what = p.bottleneck_kind == "decode" ? "Decode" : "Augmentation";
    const char* cheaper = p.bottleneck_kind == "decode"
                              ? "store smaller images, use DCT-scaled/region decode, or "
                                "decode on the GPU (nvJPEG/DALI)"
                              : "move augmentation to the GPU or simplify it";
    if (!p.cores_saturated) {
      f.fix = fmt::format("{}-bound with idle cores ({:.1f} of {} busy): give the pipeline "
                          "more threads (stoker tune, or raise --threads/cpu_budget).",
                          what, p.cores_busy, p.cpus > 0 ? p.cpus : p.threads);
    } else if (p.cpus > 0) {
      f.fix = fmt::format("{}-bound with the {} cores saturated: {}.", what, p.cpus, cheaper);
    } else {
      // Saturated against its own threads; the machine's cores are not recorded.
      f.fix = fmt::format("{}-bound, its {} thread{} busy all the time: if the machine has "
                          "idle cores, give the pipeline more threads (stoker tune, "
                          "--threads); if not, {}.",
                          what, p.threads, p.threads == 1 ? "" : "s", cheaper);
    }
  } else {
    f.fix = "Batching/prefetch-bound: raise prefetch and the memory budget.";
  }
  return f;
}

// --- Ray Data stats ----------------------------------------------------------------------

// Severity of a Ray finding that explains the consumer's wait: high when the loop is
// input-bound, medium when it waits for part of its time, info when it keeps up; medium
// without the iterator's breakdown (the wait is not known).
const char* RaySeverity(const RayReport& r, const Thresholds& th) {
  if (std::isnan(r.consumer_wait_frac)) return "medium";
  return r.consumer_wait_frac >= th.input_verdict ? "high"
         : r.consumer_wait_frac >= th.input_warn  ? "medium"
                                                  : "info";
}

// Tiny tasks: Ray pays its scheduling and object transfer per task (about 10 ms+ per task
// measured on a 2-core node, ../shared/reference/ray-scaleout.md), so tasks that work for
// a few milliseconds leave the cluster mostly scheduling.
constexpr double kRayTinyTaskS = 0.02;   // mean remote wall time per task
constexpr int64_t kRayManyTasks = 50;    // tasks of one operator
constexpr double kRayMinBlockBytes = 1 << 20;  // DEFAULT_TARGET_MIN_BLOCK_SIZE, 1 MiB

// Many tasks, each short, and on average less than one of them running: the operator's
// time goes to Ray's per-task overhead, not to its work.
bool RayTinyTasks(const RayOperatorRow& o) {
  return o.tasks >= kRayManyTasks && !std::isnan(o.wall_mean_s) && o.wall_mean_s < kRayTinyTaskS &&
         !std::isnan(o.concurrency) && o.concurrency < 1.0;
}

std::string RayOpNumbers(const RayOperatorRow& o) {
  std::string s = fmt::format("{} of remote wall time", Ms(o.wall_s));
  if (o.tasks >= 0) {
    s += fmt::format(" in {} task{}", o.tasks, o.tasks == 1 ? "" : "s");
    if (!std::isnan(o.wall_mean_s)) s += fmt::format(" ({} each on average)", Ms(o.wall_mean_s));
  }
  s += fmt::format(", CPU {}", Ms(o.cpu_s));
  return s;
}

// The operator with the largest share of Ray Data's work (remote wall time summed over its
// tasks); what to do depends on whether the training loop waits for Ray Data.
std::optional<Finding> RayOperator(const Analysis& a, const GpuLogReport* log) {
  const Thresholds& th = *a.th;
  const RayReport& r = *a.rep->ray;
  if (r.bottleneck < 0) return std::nullopt;
  const RayOperatorRow& o = r.ops[r.bottleneck];
  Finding f;
  f.id = "ray.operator";
  f.severity = RaySeverity(r, th);
  f.title = fmt::format("Ray Data operator '{}' does {} of the work", o.name, Pct(o.share));
  std::string others;
  for (const auto& x : r.ops) {
    if (&x == &o) continue;
    others += fmt::format("{}{} {} ({})", others.empty() ? "" : ", ", x.name, Ms(x.wall_s),
                          Pct(x.share));
  }
  f.evidence = fmt::format("{}: {}", o.name, RayOpNumbers(o));
  if (!std::isnan(o.concurrency) && !std::isnan(o.elapsed_s)) {
    f.evidence += fmt::format("; {:.2f} tasks running at a time over its {}", o.concurrency,
                              Ms(o.elapsed_s));
  }
  if (o.nodes > 0) f.evidence += fmt::format(" on {} node{}", o.nodes, o.nodes == 1 ? "" : "s");
  f.evidence += others.empty() ? " (the only operator)." : fmt::format("; the others: {}.", others);
  bool waits = !std::isnan(r.consumer_wait_frac) && r.consumer_wait_frac >= th.input_warn;
  if ((waits || std::isnan(r.consumer_wait_frac)) && RayTinyTasks(o)) {
    f.fix = fmt::format("Its tasks are tiny and mostly not running (see ray.task_overhead): "
                        "more CPUs or a larger pool would not help '{}'; fewer, bigger tasks "
                        "would.",
                        o.name);
  } else if (waits || std::isnan(r.consumer_wait_frac)) {
    f.fix = fmt::format(
        "{} the training loop waits for it: give '{}' more parallelism -- more CPU nodes or "
        "cores for Ray, a larger pool (map_batches(..., compute=ray.data.TaskPoolStrategy("
        "size=N)), or ActorPoolStrategy for a class UDF; `concurrency=` before Ray 2.60), "
        "num_cpus matching the threads it uses -- or make it cheaper per row. For image "
        "decode and augmentation, stoker.ray.RayPipeline runs stoker's C++ engine on Ray "
        "actors (no per-task scheduling; docs/ray.md).",
        std::isnan(r.consumer_wait_frac) ? "If" : "It bounds Ray Data and", o.name);
  } else {
    f.fix = "Ray Data keeps up with the training loop: this is where its CPU goes, nothing "
            "to change for throughput.";
  }
  return f;
}

// A loop waiting this share of its time did no work of its own (a drain, a benchmark).
constexpr double kRayDrainWait = 0.95;

// The training loop's wait in iter_batches, split the way Ray splits it.
std::optional<Finding> RayConsumerWait(const Analysis& a, const GpuLogReport* log) {
  const Thresholds& th = *a.th;
  const RayReport& r = *a.rep->ray;
  if (std::isnan(r.consumer_wait_frac) || r.consumer_wait_frac < th.input_warn) return std::nullopt;
  Finding f;
  f.id = "ray.consumer_wait";
  f.severity = RaySeverity(r, th);
  f.title = r.consumer_wait_frac >= th.input_verdict
                ? "The training loop is input-bound: it waits for Ray Data in iter_batches"
                : "Part of the training loop waits for Ray Data";
  f.evidence = fmt::format(
      "Blocked in iter_batches {} after the first batch (the first batch: {}), against {} in "
      "the loop's own code: {} of its time waits{}.",
      Ms(r.wait_s), Ms(r.first_batch_s), Ms(r.user_s), Pct(r.consumer_wait_frac),
      r.batches > 0 ? fmt::format(" ({} batches)", r.batches) : std::string());
  // Ray's own split of the blocked time.
  struct Part { const char* name; double s; };
  Part parts[] = {{"production wait (no block ready)", r.production_wait_s},
                  {"data transfer (ray.get)", r.data_transfer_s},
                  {"batching", r.batching_s},
                  {"format", r.format_s},
                  {"collate", r.collate_s},
                  {"host-to-device", r.finalize_s}};
  std::string split;
  const Part* top = nullptr;
  for (const auto& p : parts) {
    if (std::isnan(p.s) || p.s <= 0) continue;
    split += fmt::format("{}{} {}", split.empty() ? "" : ", ", p.name, Ms(p.s));
    if (top == nullptr || p.s > top->s) top = &p;
  }
  if (!split.empty()) f.evidence += " Of the blocked time: " + split + ".";
  std::string op = r.bottleneck >= 0 ? r.ops[r.bottleneck].name : std::string("the slowest operator");
  if (top == nullptr || top == &parts[0]) {
    f.fix = fmt::format("Ray Data produces blocks slower than the loop consumes them: speed "
                        "up '{}' (see ray.operator); a deeper prefetch (iter_batches("
                        "prefetch_batches=N)) only hides bursts.",
                        op);
  } else if (top == &parts[1]) {
    f.fix = "Blocks are ready but slow to fetch: they live on other nodes or are large; "
            "raise prefetch_batches so transfers overlap the step, keep blocks near the "
            "trainer (locality_hints in streaming_split), or make blocks smaller.";
  } else {
    f.fix = "The iterator's own work (batching, formatting, collate) holds the loop: use "
            "batch_format=\"numpy\", a batch_size that is a multiple of the block's rows, "
            "and prefetch_batches >= 2 so it runs ahead in its thread.";
  }
  // A loop that did (almost) no work of its own drained Ray Data like a benchmark: the
  // wait says what Ray Data delivers, not what training would gain.
  double step = r.wait_s + r.user_s;
  if (step > 0 && std::isfinite(step) && r.consumer_wait_frac < kRayDrainWait) {
    f.expected_speedup = SpeedupFromRemoving(step, r.wait_s);
  }
  return f;
}

std::optional<Finding> RayTaskOverhead(const Analysis& a, const GpuLogReport* log) {
  const Thresholds& th = *a.th;
  const RayReport& r = *a.rep->ray;
  const RayOperatorRow* worst = nullptr;
  for (const auto& o : r.ops) {
    if (!RayTinyTasks(o)) continue;
    if (worst == nullptr || o.concurrency < worst->concurrency) worst = &o;
  }
  if (worst == nullptr) return std::nullopt;
  const RayOperatorRow& o = *worst;
  Finding f;
  f.id = "ray.task_overhead";
  f.severity = RaySeverity(r, th);
  if (f.severity == "info") f.severity = "low";
  f.title = fmt::format("Operator '{}' runs many tiny tasks: Ray's per-task overhead dominates",
                        o.name);
  f.evidence = fmt::format(
      "{} tasks of {} remote wall time on average ({} in all) over the operator's {}: {:.2f} "
      "tasks running at a time, the rest of the time goes to scheduling and moving blocks",
      o.tasks, Ms(o.wall_mean_s), Ms(o.wall_s), Ms(o.elapsed_s), o.concurrency);
  if (!std::isnan(o.bytes_per_block) && o.bytes_per_block < kRayMinBlockBytes) {
    f.evidence += fmt::format("; {:.0f} bytes per output block (Ray aims for at least 1 MiB)",
                              o.bytes_per_block);
  }
  f.evidence += ".";
  f.fix = "Fewer, bigger tasks: lower override_num_blocks (or leave Ray to size read "
          "tasks), a larger batch_size in map_batches, raise DataContext.target_min_block_size; "
          "for stoker.ray.datasource raise task_bytes; or keep the work in long-lived actors "
          "(ActorPoolStrategy, stoker.ray.RayPipeline) instead of one task per small block.";
  if (o.elapsed_s > 0 && o.concurrency > 0 && std::isfinite(o.elapsed_s)) {
    // If the same work ran at one task at a time without gaps.
    f.expected_speedup = std::min(SpeedupFromRemoving(o.elapsed_s, o.elapsed_s - o.wall_s),
                                  20.0);
  }
  return f;
}

std::optional<Finding> RaySpill(const Analysis& a, const GpuLogReport* log) {
  const RayReport& r = *a.rep->ray;
  if (std::isnan(r.spilled_mb) || r.spilled_mb <= 0) return std::nullopt;
  Finding f;
  f.id = "ray.spill";
  f.severity = "medium";
  f.title = "Ray spilled objects to disk";
  f.evidence = fmt::format("{:.0f} MB spilled from the object store to disk while the dataset "
                           "ran.",
                           r.spilled_mb);
  f.fix = "Keep fewer blocks in flight: consume as you go instead of materialize(), cap "
          "Ray Data's object-store share (DataContext.execution_options.resource_limits), "
          "smaller blocks; or give the object store more memory (--object-store-memory).";
  return f;
}

// Ray Data keeps up: the training loop's own code is the slow side.
std::optional<Finding> RayConsumerBound(const Analysis& a, const GpuLogReport* log) {
  const Report& rep = *a.rep;
  if (rep.primary != Verdict::kComputeBound || rep.has_trace || !rep.ray ||
      std::isnan(rep.ray->consumer_wait_frac)) {
    return std::nullopt;
  }
  const RayReport& r = *rep.ray;
  Finding f;
  f.id = "ray.consumer_bound";
  f.severity = "info";
  f.title = "Ray Data keeps up: the training loop's own work sets the pace";
  f.evidence = fmt::format("The loop's own code took {}; it waited {} for Ray Data after the "
                           "first batch ({}).",
                           Ms(r.user_s), Ms(r.wait_s), Pct1(r.consumer_wait_frac));
  f.fix = "Nothing to change in Ray Data for throughput (fewer CPUs for it would do): to go "
          "faster, make the step cheaper (profile it: stoker doctor on a torch.profiler "
          "trace).";
  return f;
}

std::optional<Finding> ComputeBound(const Analysis& a, const GpuLogReport* log) {
  const Report& rep = *a.rep;
  const Fractions& B = a.B();
  if (rep.primary != Verdict::kComputeBound || !rep.has_trace) return std::nullopt;
  Finding f;
  f.id = "compute.bound";
  f.severity = "info";
  f.title = rep.gpu ? "The GPU is busy computing: the input pipeline keeps up"
                    : "The step is spent in compute: the input pipeline keeps up";
  f.evidence = fmt::format("Compute takes {} of the {} step; the DataLoader wait is {}.",
                           Pct(B.compute), Ms(rep.step_s), Pct1(B.data_wait));
  f.fix = rep.gpu ? "To go faster, make the model cheaper: mixed precision (torch.autocast), "
                    "torch.compile, fused optimizers, a larger batch if memory allows."
                  : "To go faster, make the model cheaper or run it on an accelerator; more "
                    "DataLoader workers will not help.";
  return f;
}

std::optional<Finding> EvidenceMissing(const Analysis& a, const GpuLogReport* log) {
  const Report& rep = *a.rep;
  if (rep.primary != Verdict::kUnknown) return std::nullopt;
  Finding f;
  f.id = "evidence.missing";
  f.severity = "info";
  f.title = "Nothing in the inputs shows where the step time goes";
  if (!rep.gpu_logs.empty()) {
    const GpuLogReport& g = rep.gpu_logs.front();
    f.evidence = fmt::format(
        "{}: {} samples over {:.0f} s with no GPU utilization (no GPU or driver while "
        "sampling){}; no profiler trace.",
        g.path, g.samples, g.duration_s,
        std::isnan(g.proc_cpu_cores_mean)
            ? std::string()
            : fmt::format(", the process tree used {:.1f}{} cores on average",
                          g.proc_cpu_cores_mean,
                          std::isnan(g.cpus) ? std::string() : fmt::format(" of {:.0f}", g.cpus)));
  } else if (rep.ray && !rep.has_trace) {
    f.evidence = fmt::format("{}: Ray Data's per-operator stats without the iterator's time "
                             "breakdown: which operator works most is known, not whether the "
                             "training loop waited for it.",
                             rep.ray->path);
  } else {
    f.evidence = "The traces have no step windows to break down.";
  }
  f.fix = RecordNext(a);
  return f;
}

// A language model's trace (aten::embedding over [batch, sequence] token ids, recorded
// with record_shapes=True): tokens/s per GPU and the share of the step spent waiting for
// token batches, with fixes for token loading when that share matters.
std::optional<Finding> InputTokens(const Analysis& a, const GpuLogReport* log) {
  const Report& rep = *a.rep;
  const Thresholds& th = *a.th;
  const Fractions& B = a.B();
  double tokens = 0;
  for (const auto& t : a.in->traces) tokens = std::max(tokens, t.TokensPerStep());
  if (tokens <= 0 || !(rep.step_s > 0)) return std::nullopt;
  const double wait = rep.gpu ? std::max(B.data_wait, B.idle_data) : B.data_wait;
  Finding f;
  f.id = "input.tokens";
  f.severity = wait >= th.input_verdict ? "high" : (wait >= th.input_warn ? "medium" : "info");
  f.title = fmt::format("Language model: {:.0f} tokens/s per {}, {} of the step waiting for "
                        "token batches",
                        tokens / rep.step_s, rep.gpu ? "GPU" : "process", Pct1(wait));
  f.evidence = fmt::format(
      "aten::embedding reads {:.0f} token ids per step ({} per step, median over {} steps): "
      "{:.0f} tokens/s per {}{}; the host waits for the next batch {} of the step ({} per "
      "step){}.",
      tokens, Ms(rep.step_s), rep.steps, tokens / rep.step_s, rep.gpu ? "GPU" : "process",
      a.world_size > 1 ? fmt::format(" ({:.0f} for {} ranks)", tokens / rep.step_s * a.world_size,
                                     a.world_size)
                       : "",
      Pct1(B.data_wait), Ms(B.data_wait * rep.step_s),
      rep.gpu ? fmt::format(", the GPU is idle {} of the step during those waits", Pct1(B.idle_data))
              : "");
  if (wait >= th.input_warn) {
    f.fix =
        "Assemble token batches ahead of the step on their own threads: stoker.TokenPipeline("
        "..., prefetch=4, threads=2) packs from memory-mapped stores (Megatron .bin/.idx, "
        "nanoGPT memmaps, Arrow) with no per-sample Python; or a DataLoader with num_workers "
        ">= 2, persistent_workers=True, pin_memory=True. Build the sample and shuffle indices "
        "once and reuse them (stoker's index cache, Megatron's .npy cache) so an epoch start "
        "does not stall, and copy each batch with .to(device, non_blocking=True).";
  } else {
    f.fix = fmt::format("None needed: token loading costs {} per step.", Ms(B.data_wait * rep.step_s));
  }
  return f;
}

}  // namespace

const std::vector<Rule>& Rules() {
  // clang-format off
  static const std::vector<Rule> kRules = {
    // Traces.
    {"imbalance.straggler", RuleScope::kTrace,
     "straggler excess >= half of {imbalance_verdict} of the step (high at {imbalance_verdict})",
     "the excess", "stoker", &Straggler},
    {"input.dataloader", RuleScope::kTrace,
     "data wait >= {input_warn}, or GPU idle during data waits >= {input_warn} (high at "
     "{input_verdict})",
     "GPU idle during data waits (CPU-only: the wait); with num_workers=0 and --cpus N, "
     "bounded by loading on N cores",
     "TensorBoard plugin R1 (5%); TensorFlow input analyzer (20%)", &InputDataLoader},
    {"input.tokens", RuleScope::kTrace,
     "a trace with aten::embedding over 2-D token ids (record_shapes=True); medium at "
     "{input_warn} of the step waiting for batches, high at {input_verdict}",
     "", "stoker (tokens/s per GPU, as Megatron logs it)", &InputTokens},
    {"h2d.pageable", RuleScope::kTrace,
     "any Memcpy HtoD (Pageable -> Device); high when what it removes is >= {input_warn}",
     "h2d_pageable + idle_copy", "Nsight Systems rule cuda_memcpy_async", &H2dPageable},
    {"h2d.exposed", RuleScope::kTrace,
     "no pageable copies, and exposed copies + copy-call idle >= {input_warn}",
     "h2d + idle_copy", "TensorFlow input analyzer (host-to-device is input time)",
     &H2dExposed},
    {"comm.exposed", RuleScope::kTrace,
     "exposed communication (of the rank with least) >= {comm_warn} (high at {comm_verdict})",
     "exposed communication", "TensorFlow/xprof collectives (3%); TensorBoard plugin R4 (10%)",
     &CommExposed},
    {"host.sync", RuleScope::kTrace,
     "GPU: idle after host syncs >= {host_warn} (high at {host_verdict})", "that idle time",
     "Nsight Systems rules cuda_api_sync, cuda_memcpy_sync", &HostSync},
    {"host.optimizer", RuleScope::kTrace,
     "GPU: idle while the host runs the optimizer step >= {host_warn} (high at {host_verdict})",
     "that idle time", "TensorFlow kernel-launch time (3%)", &HostOptimizer},
    {"host.launch", RuleScope::kTrace,
     "GPU: other idle >= {host_warn} (high at {host_verdict})",
     "that idle time, less the optimizer's when host.optimizer is reported",
     "TensorFlow kernel-launch / all-other time (3%, 15%)", &HostLaunch},
    {"host.overhead", RuleScope::kTrace,
     "CPU-only: time outside operators >= twice {host_warn} (high at {host_verdict})",
     "that time", "TensorFlow all-other time", &HostOverhead},
    {"compute.amp", RuleScope::kTrace,
     "compute capability >= 7, GEMM/conv kernels, no tensor-core kernel names", "",
     "TensorBoard plugin R6", &ComputeAmp},
    {"compute.dataparallel", RuleScope::kTrace, "DataParallel with kernels on > 1 GPU", "",
     "TensorBoard plugin R2", &ComputeDataParallel},
    {"memory.limit", RuleScope::kTrace, "peak memory >= {mem_limit} of the device's", "",
     "TensorBoard plugin R7", &MemoryLimit},
    {"compute.batch", RuleScope::kTrace,
     "compute < {low_util} with memory to spare, input and communication below their verdicts",
     "", "TensorBoard plugin R5", &ComputeBatch},
    // GPU logs (each log).
    {"gpu.starvation", RuleScope::kGpuLog,
     "runs of >= 2 samples below {low_util} utilization lasting >= {starvation_gap_s} (high "
     "when the most starved GPU is starved >= {input_verdict} of the time)",
     "the most starved GPU's starved share", "Nsight Systems gpu_gaps (500 ms)", &GpuStarvation},
    {"gpu.throttle", RuleScope::kGpuLog,
     "power/thermal throttle bits in >= half of {throttle_verdict} of busy samples (high at "
     "{throttle_verdict})",
     "", "stoker", &GpuThrottle},
    {"gpu.sm_activity", RuleScope::kGpuLog,
     "SM activity < 0.5 while utilization >= {busy_util_pct}", "",
     "DCGM guidance (< 0.5 likely ineffective use)", &GpuSmActivity},
    {"gpu.tensor_cores", RuleScope::kGpuLog, "tensor-pipe activity < 0.01 while SM activity >= 0.3",
     "", "DCGM profiling metrics", &GpuTensorCores},
    {"gpu.memory_headroom", RuleScope::kGpuLog,
     "<= 50% memory used and utilization < 1.6 x {low_util}", "", "TensorBoard plugin R5",
     &GpuMemoryHeadroom},
    {"cpu.saturated", RuleScope::kGpuLog,
     "watch: process tree >= 85% of the cores while GPU utilization < {low_util}", "", "stoker",
     &CpuSaturated},
    // Pipeline metrics.
    {"pipeline.stage", RuleScope::kPipeline,
     "the bounding stage (not the consumer); high when the consumer waits >= {input_verdict}",
     "", "stoker (stage busy and wait shares)", &PipelineStage},
    {"gpu.preprocess_offload", RuleScope::kPipeline,
     "decode/augment bounds the pipeline and the offload model (src/gpu/offload_model.h) "
     "says the GPU path delivers more than the CPU path, with the GPU's busy share from a GPU "
     "log or the trace",
     "the pipeline's rate up to the step's demand", "stoker offload model (gpu_decode=auto)",
     &GpuPreprocessOffload},
    {"cache.cold", RuleScope::kPipeline,
     "cache_dir set and under half the bytes read came from the cache (too small when more "
     "streamed through than was fetched); medium when the consumer waits >= {input_verdict}",
     "", "stoker (cache hit rate, bytes fetched and streamed)", &CacheCold},
    {"source.kafka_wait", RuleScope::kPipeline,
     "a kafka: source, the read stage bounds the pipeline, and reads waited for the broker "
     ">= 50% of the wall time (summed over threads); high when the consumer waits >= "
     "{input_verdict}",
     "", "stoker (kafka_fetch_wait_s, kafka_lag)", &KafkaBrokerWait},
    // Ray Data stats.
    {"ray.consumer_wait", RuleScope::kRay,
     "the training loop waits >= {input_warn} of its time in iter_batches after the first "
     "batch (high at {input_verdict})",
     "the wait", "TensorBoard plugin R1 / TensorFlow input-pipeline analyzer",
     &RayConsumerWait},
    {"ray.operator", RuleScope::kRay,
     "the operator with the largest share of remote wall time; high when the loop waits >= "
     "{input_verdict}, info when it waits < {input_warn}",
     "", "stoker (Ray Data per-operator stats)", &RayOperator},
    {"ray.task_overhead", RuleScope::kRay,
     ">= 50 tasks of < 20 ms mean remote wall time and < 1 task running at a time",
     "the operator's time outside its tasks",
     "stoker: ~10 ms+ per task measured (docs/ray.md); Ray's 1 MiB target minimum block size",
     &RayTaskOverhead},
    {"ray.spill", RuleScope::kRay, "Ray reports bytes spilled to disk", "", "Ray Data stats",
     &RaySpill},
    // After the verdict.
    {"compute.bound", RuleScope::kVerdict, "the compute_bound verdict on a trace", "",
     "stoker", &ComputeBound},
    {"ray.consumer_bound", RuleScope::kVerdict,
     "the compute_bound verdict on Ray Data stats (the loop waits < {input_warn})", "",
     "stoker", &RayConsumerBound},
    {"evidence.missing", RuleScope::kVerdict,
     "the unknown verdict: no trace with steps, no GPU utilization sample, no pipeline "
     "metrics, no Ray Data iterator breakdown",
     "", "stoker", &EvidenceMissing},
  };
  // clang-format on
  return kRules;
}

Finding InputFinding(double data_frac, double idle_data_frac, double step_s, int steps,
                     const std::string& loader, bool gpu, int cpus, const Thresholds& th,
                     int rank) {
  Finding f;
  f.id = "input.dataloader";
  f.rank = rank;
  double lost = gpu ? idle_data_frac : data_frac;
  f.severity = lost >= th.input_verdict ? "high" : (lost >= th.input_warn ? "medium" : "low");
  f.title = lost >= th.input_verdict ? "The training loop is input-bound: it waits for the DataLoader"
                                     : "Part of each step waits for the DataLoader";
  if (gpu) {
    f.evidence = fmt::format(
        "{} of the {} step ({} over {} steps) is spent in DataLoader.__next__; the GPU is idle "
        "for {} of the step while the host waits for data.",
        Pct(data_frac), Ms(step_s), Ms(data_frac * step_s) + " per step", steps,
        Pct(idle_data_frac));
  } else {
    f.evidence = fmt::format(
        "{} of the {} step ({} per step, over {} steps) is spent waiting in "
        "DataLoader.__next__.",
        Pct(data_frac), Ms(step_s), Ms(data_frac * step_s), steps);
  }
  f.fix = DataLoaderFix(loader, gpu, cpus);
  if (loader == "single-process" && data_frac < 1.0 && step_s > 0) {
    // num_workers=0: each batch is loaded in the wait; workers hide it when together they
    // make a batch per step of the rest of the loop.
    double load_s = data_frac * step_s, rest_s = (1.0 - data_frac) * step_s;
    int need = static_cast<int>(std::ceil(load_s / std::max(rest_s, 1e-6) - 1e-9));
    need = std::clamp(need, 1, 1024);
    f.fix += fmt::format(
        " Loading takes about {} per batch against {} for the rest of the step, so about {} "
        "worker{} (each on a free core) {} it fully{}.",
        Ms(load_s), Ms(rest_s), need, need == 1 ? "" : "s", need == 1 ? "hides" : "hide",
        cpus > 0 && need > cpus ? fmt::format("; with {} cores the loading, not the model, "
                                              "will still set the pace",
                                              cpus)
                                : "; add one or two for jitter");
    f.expected_speedup = SpeedupFromRemoving(step_s, lost * step_s);
    if (cpus > 0 && need > cpus) {
      // cpus workers make a batch every load_s / cpus at best: the step cannot get shorter.
      double floor_s = load_s / cpus;
      double new_step = std::max(step_s * (1.0 - lost), floor_s);
      f.expected_speedup = std::min(*f.expected_speedup, step_s / new_step);
      f.evidence += fmt::format(" With {} cores for workers the step can shrink to about {} "
                                "(loading-bound).",
                                cpus, Ms(new_step));
    }
    return f;
  }
  f.expected_speedup = SpeedupFromRemoving(step_s, lost * step_s);
  return f;
}


namespace {

// The thresholds a rule's text can name as {field}, with how to show their value.
struct ThresholdField {
  const char* name;
  double Thresholds::*field;
  enum { kFrac, kSeconds, kPercent } unit;
};
constexpr ThresholdField kFields[] = {
    {"input_warn", &Thresholds::input_warn, ThresholdField::kFrac},
    {"input_verdict", &Thresholds::input_verdict, ThresholdField::kFrac},
    {"comm_warn", &Thresholds::comm_warn, ThresholdField::kFrac},
    {"comm_verdict", &Thresholds::comm_verdict, ThresholdField::kFrac},
    {"host_warn", &Thresholds::host_warn, ThresholdField::kFrac},
    {"host_verdict", &Thresholds::host_verdict, ThresholdField::kFrac},
    {"imbalance_verdict", &Thresholds::imbalance_verdict, ThresholdField::kFrac},
    {"compute_bound", &Thresholds::compute_bound, ThresholdField::kFrac},
    {"low_util", &Thresholds::low_util, ThresholdField::kFrac},
    {"mem_limit", &Thresholds::mem_limit, ThresholdField::kFrac},
    {"throttle_verdict", &Thresholds::throttle_verdict, ThresholdField::kFrac},
    {"starvation_gap_s", &Thresholds::starvation_gap_s, ThresholdField::kSeconds},
    {"busy_util_pct", &Thresholds::busy_util_pct, ThresholdField::kPercent},
};

}  // namespace

// "{input_warn}" -> "5%" (the value in effect), for the listings.
std::string FillThresholds(const std::string& text, const Thresholds& th) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t open = text.find('{', i);
    if (open == std::string::npos) break;
    size_t close = text.find('}', open);
    if (close == std::string::npos) break;
    out += text.substr(i, open - i);
    std::string name = text.substr(open + 1, close - open - 1);
    const ThresholdField* f = nullptr;
    for (const auto& k : kFields) {
      if (name == k.name) f = &k;
    }
    if (f == nullptr) {
      out += text.substr(open, close - open + 1);
    } else {
      double v = th.*(f->field);
      out += f->unit == ThresholdField::kFrac      ? fmt::format("{:g}%", v * 100)
             : f->unit == ThresholdField::kPercent ? fmt::format("{:g}%", v)
                                                   : fmt::format("{:g} s", v);
    }
    i = close + 1;
  }
  return out + text.substr(std::min(i, text.size()));
}

std::vector<RuleInfo> ListRules(const Thresholds& th) {
  std::vector<RuleInfo> out;
  for (const Rule& r : Rules()) {
    const char* scope = r.scope == RuleScope::kTrace      ? "trace"
                        : r.scope == RuleScope::kGpuLog   ? "GPU log"
                        : r.scope == RuleScope::kPipeline ? "pipeline metrics"
                        : r.scope == RuleScope::kRay      ? "Ray Data stats"
                                                          : "the verdict";
    out.push_back({r.id, scope, FillThresholds(r.when, th), r.gain, r.source});
  }
  // What `stoker watch`'s in-process probe measures has its own facts (ProbeFacts) and
  // table (watch_rules.h); listed here so one listing names every finding.
  for (const ProbeRule& r : ProbeRules())
    out.push_back({r.id, "stoker watch probe", FillThresholds(r.when, th), r.gain,
                   "stoker (docs/doctor.md, the probe)"});
  return out;
}

}  // namespace stoker::doctor
