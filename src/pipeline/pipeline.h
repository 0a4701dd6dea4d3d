// The stoker input pipeline: source → read → decode → augment → batch → prefetch.
//
//   auto p = Pipeline::Create(opts);            // opens the dataset, plans the epoch
//   p->StartEpoch(0);
//   while (true) {
//     auto b = p->Next();                        // blocks until batch is ready
//     if (!b.ok()) { if (IsEndOfStream(b.status())) break; ... error ... }
//     use((*b)->images(), (*b)->labels ...);    // buffer returns to the pool on release
//   }
//
// Every random choice is a pure function of (seed, epoch, sample index): the batches are
// identical for any thread count. Thread-safety: one consumer thread calls Next();
// Stats() may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/clock.h"
#include "core/status.h"
#include "formats/dataset.h"
#include "ops/image_ops.h"
#include "pipeline/stats.h"

namespace stoker {

enum class ErrorPolicy { kFail, kSkip };
enum class RankBalance { kPad, kDrop };  // equalize per-rank sample counts
enum class StallAction { kFail, kWarn };
enum class ComputeDevice { kCpu, kCuda };
enum class GpuDecode { kAuto, kOn, kOff };  // decode + augment on the GPU (docs/gpu.md)
enum class DecodeMode {
  kTrain,  // RandomResizedCrop(image_size) + random horizontal flip + normalize
  kVal,    // Resize(val_resize) + CenterCrop(image_size) + normalize
  kRaw,    // no decode: batches carry the raw bytes of one field
};

struct PipelineOptions {
  std::string data;  // dataset spec: path, "fmt:path", brace pattern
  DatasetOptions dataset;

  DecodeMode mode = DecodeMode::kTrain;
  int image_size = 224;
  int val_resize = 256;
  OutputSpec output;                // layout, mean/std; width/height from image_size
  RandomResizedCropParams rrc;
  double flip_prob = 0.5;
  bool dct_scale = true;            // JPEG decode at reduced DCT scale when it covers the crop
  bool region_decode = true;        // decode only the crop's rows/columns
  bool exif_orientation = false;    // JPEGs in their EXIF orientation (torchvision's PIL
                                    // loader ignores it: off, as there)
  std::string raw_field;            // kRaw: the field to carry ("" = first field)

  int batch_size = 256;
  bool drop_last = false;           // drop the epoch's final partial batch

  bool shuffle = true;
  uint64_t seed = 0;
  size_t shuffle_buffer = 8192;     // samples, for sharded formats (index-domain buffer)
  // Stream sources that hold what a shuffle buffer reads ahead (Kafka): the buffer holds at
  // most this many MB of samples, by the source's size estimate (Dataset::
  // sample_bytes_estimate); 0 = samples only. options() reports the buffer in effect.
  size_t shuffle_buffer_mb = 64;
  // Shards read side by side (tf.data's interleave: `interleave` samples of each of
  // `interleave_cycle` shards in turn; a shard that ends gives its place to the next): the
  // partitions of a Kafka topic stream together, as a consumer assigned them all reads
  // them. -1: the source's choice (Dataset::interleave(): Kafka 64 and its partitions up
  // to 8; files 0, one shard after another). options() reports what is in effect.
  int64_t interleave = -1;
  int64_t interleave_cycle = -1;

  int rank = -1, world_size = -1;   // -1: from RANK/WORLD_SIZE, OMPI_*, SLURM_*, else 0/1
  RankBalance balance = RankBalance::kPad;

  int threads = 0;                  // 0 = auto (autotuner, CPU budget = available cores)
  // Every worker runs read, decode and augment for its own sample (no hand-off between
  // threads); `threads` workers, default one per core. threads == 1 is always fused.
  bool fused = false;
  int prefetch = 0;                 // ready batches buffered; 0 = auto
  int64_t memory_budget = 0;        // bytes for batch and sample buffers; 0 = auto
  int cpu_budget = 0;               // cores the pipeline may use; 0 = all available

  // Node-wide local cache of the dataset's files (io/cache_env.h, docs/cache.md): "" = off.
  std::string cache_dir;
  int64_t cache_limit = 0;          // bytes; 0 = auto (80 % of the free space there)

  ErrorPolicy on_error = ErrorPolicy::kFail;
  // Stall watchdog: when Next() has waited this long with no batch produced, it fails with
  // kDeadlineExceeded (kWarn: reports through `log` and Stats().warnings, keeps waiting),
  // naming what each worker is blocked on. 0 = off.
  double stall_timeout_s = 0;
  StallAction on_stall = StallAction::kFail;
  // Where the pipeline's warnings go (also kept in Stats().warnings); called from any of
  // its threads, so it must be thread-safe. The library never prints.
  std::function<void(const std::string&)> log;
  Clock* clock = nullptr;           // default: real clock
  // The GPU path (src/gpu/device_stage.h, docs/gpu.md): with device=cuda, JPEG decode and
  // augmentation run on the GPU when gpu_decode is on, or when auto's measurements say it
  // pays off; batches are then device memory. The CPU engine itself ignores these.
  ComputeDevice device = ComputeDevice::kCpu;
  GpuDecode gpu_decode = GpuDecode::kAuto;
  int64_t gpu_hybrid_threshold = 1000 * 1000;  // pixels above which Huffman runs on the GPU
  HostAllocator* allocator = nullptr;  // batch buffers; default HostAllocator::Default()
};

// Resolves rank and world size from the options or the environment (RankInfo: stats.h).
Result<RankInfo> ResolveRank(int rank, int world_size);

// One batch: one contiguous buffer per field.
struct Batch {
  int epoch = 0;
  uint64_t index = 0;        // batch number within the epoch (for this rank)
  int size = 0;              // samples in this batch (short only at the end or after skips)
  // Images: [size, 3, H, W] float32 (kFloatCHW) or [size, H, W, 3] uint8 (kUint8HWC).
  void* images = nullptr;
  int height = 0, width = 0;
  OutputLayout layout = OutputLayout::kFloatCHW;
  size_t image_bytes = 0;    // per sample
  std::vector<int64_t> labels;
  std::vector<std::string> keys;
  std::vector<uint64_t> sample_indices;  // dataset indices, in batch order
  // kRaw: the field bytes of all samples back to back; offsets has size+1 entries.
  std::vector<uint8_t> raw;
  std::vector<uint64_t> raw_offsets;
};
using BatchPtr = std::shared_ptr<Batch>;

inline bool IsEndOfStream(const Status& s) { return s.code() == StatusCode::kOutOfRange; }

class Pipeline {
 public:
  static Result<std::unique_ptr<Pipeline>> Create(const PipelineOptions& opts);
  virtual ~Pipeline() = default;

  // Starts (or restarts) epoch `epoch`, skipping its first `start_batch` batches
  // (exact mid-epoch resume). Stops any epoch in flight.
  virtual Status StartEpoch(int epoch, uint64_t start_batch = 0) = 0;
  // Elastic resume: starts epoch `epoch` after its first `consumed` positions of the global
  // order (all ranks together, from ConsumedAfter() of a run at any world size). This
  // rank's share of the remainder has pass_batches() batches, the same on every rank.
  virtual Status ResumeEpoch(int epoch, uint64_t consumed) = 0;
  // The next batch, in order; kOutOfRange at the end of the epoch; on a failing sample
  // with ErrorPolicy::kFail, the error (naming file and member) after all earlier batches.
  Result<BatchPtr> Next() {
    bool timed_out = false;
    return NextWithin(-1, &timed_out);
  }
  // As Next(), but returns after at most max_wait_ns of real time (-1: no limit) with a
  // null batch and *timed_out = true when none was ready; the next call continues the same
  // wait (the stall watchdog and the consumer's wait time count it as one). For callers that
  // must look at something between waits, such as Python's Ctrl-C.
  virtual Result<BatchPtr> NextWithin(int64_t max_wait_ns, bool* timed_out) = 0;
  // Stops every worker thread (also done by the destructor). Idempotent and prompt: a
  // worker still blocked in a read a second after the stop (a hung mount) is detached, keeps
  // what it uses alive until its read returns, and then exits without touching any batch;
  // the pipeline then refuses StartEpoch (a warning in Stats() names the blocked read).
  // The Env the dataset reads through must outlive such a read (Env::Default() does).
  virtual void Stop() = 0;

  virtual uint64_t batches_per_epoch() const = 0;
  virtual uint64_t samples_per_epoch() const = 0;  // for this rank
  // Batches the pass begun by the last StartEpoch/ResumeEpoch delivers.
  virtual uint64_t pass_batches() const = 0;
  // Global positions of the epoch consumed once every rank has taken `batches` batches of
  // the current pass (what a checkpoint records).
  virtual uint64_t ConsumedAfter(uint64_t batches) const = 0;
  // Identifies the dataset (size, format, shards, sampled keys) for resume checks.
  virtual std::string Fingerprint() const = 0;
  virtual const Dataset& dataset() const = 0;
  virtual PipelineStats Stats() const = 0;
  virtual const PipelineOptions& options() const = 0;
  // Dataset indices of this rank's epoch, in delivery order (before skips).
  virtual Result<std::vector<uint64_t>> EpochOrder(int epoch) const = 0;
};

}  // namespace stoker
