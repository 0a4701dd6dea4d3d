// Internal to the executor: admission and batch assembly, under the executor's one lock.
//
// Admission hands out pass positions in order, only for batches inside the window
// [consumer batch, consumer batch + prefetch + 1), and reserves the position's batch
// (a buffer from the pool) at that moment; the ticket carries the batch and the slot, so a
// sample's slot is looked up once. Workers write their sample into the slot without the
// lock, then Finish() records it; the last sample of a batch compacts skipped slots and
// marks it ready. The consumer takes batches strictly in order.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/mutex.h"
#include "core/status.h"
#include "pipeline/batch_pool.h"
#include "pipeline/pipeline.h"
#include "pipeline/stages.h"

namespace stoker {

struct BatchState {
  BatchPtr batch;
  int expected = 0;  // samples in this batch (before skips)
  int remaining = 0;
  std::vector<uint8_t> ok;  // per slot: 1 delivered, 0 skipped/failed
  std::vector<std::vector<uint8_t>> raw_slots;
  // A run (NextRun) wrote the bytes of its delivered samples straight into batch->raw and
  // raw_offsets: Finalize leaves them.
  bool direct = false;
  bool ready = false;
  Status error;  // first failing sample (by position) under kFail
  uint64_t error_pos = UINT64_MAX;
};

class BatchAssembler {
 public:
  struct Layout {
    int batch_size = 1;
    size_t image_bytes = 0;  // per sample; 0 in raw mode
    int image_size = 0;
    OutputLayout layout = OutputLayout::kFloatCHW;
    bool raw = false;
    bool fail_on_error = true;
  };
  // `stop` is the executor's stop flag; `batch_stage` gets the batch stage's metrics.
  BatchAssembler(const Layout& layout, BatchPool* pool, Clock* clock,
                 const std::atomic<bool>* stop, StageCounters* batch_stage)
      : lay_(layout), pool_(pool), clock_(clock), stop_(stop), sc_(batch_stage) {}

  // A new pass of `samples` positions (batches numbered from index_base) in `epoch`.
  void Reset(int epoch, uint64_t index_base, uint64_t samples) EXCLUDES(mu_);
  // Drops every batch (Stop()).
  void Clear() EXCLUDES(mu_);
  void SetPrefetch(int prefetch) EXCLUDES(mu_);
  int prefetch() const { return prefetch_.load(std::memory_order_relaxed); }
  // Wakes every waiter (stop flag set, or a worker's activity changed).
  void WakeAll() EXCLUDES(mu_);

  enum class Admit { kOk, kStop, kDone, kInactive };
  // Blocks until a position is available in the window. kInactive when active() turns
  // false (the worker was parked by the tuner); kDone when every position is handed out.
  Admit Next(const std::function<bool()>& active, Item* it) EXCLUDES(mu_);

  // Records the outcome of it's sample (err: already names the sample). The batch's last
  // sample finalizes it.
  void Finish(Item* it, const Status& err) EXCLUDES(mu_);

  // A whole batch admitted at once (raw runs: Dataset::ReadRawRun). Its worker is the
  // batch's only writer: it writes each delivered sample's key, label and dataset index
  // into the batch's slots and its bytes straight into batch->raw and raw_offsets
  // (BatchState::direct), without the lock.
  struct Run {
    uint64_t pos = 0;  // the batch's first position
    int n = 0;         // its samples
    BatchState* bs = nullptr;
  };
  // As Next, for every position of the next batch: one lock per batch. A pass's workers
  // use either Next or NextRun, so a batch is never shared between the two.
  Admit NextRun(const std::function<bool()>& active, Run* run) EXCLUDES(mu_);
  // Records a run's outcome: `failed` holds (sample of the run, error already naming the
  // sample); the others were delivered.
  void FinishRun(const Run& run, const std::vector<std::pair<int, Status>>& failed)
      EXCLUDES(mu_);

  enum class Take { kReady, kStopped, kFatal, kEnd, kTimedOut };
  // The consumer's next batch. `starved` is set when it was not ready on entry. With
  // slice_ns > 0, returns kTimedOut after that much real time without it.
  Take TakeNext(BatchState* out, Status* fatal, bool* starved, int64_t slice_ns) EXCLUDES(mu_);
  void SetFatal(const Status& st) EXCLUDES(mu_);

  // The consumer's batch (pass-relative) and the clock time a batch last became ready (or
  // the pass started).
  uint64_t consumer_batch() const EXCLUDES(mu_);
  int64_t last_ready_ns() const { return last_ready_ns_.load(std::memory_order_relaxed); }
  uint64_t num_batches() const EXCLUDES(mu_);

 private:
  BatchState& ReserveLocked(uint64_t b) REQUIRES(mu_);
  bool AdmitWaitLocked(const std::function<bool()>& active, Admit* out) REQUIRES(mu_);
  // Finalizes `done` (its last sample was recorded, finalizing_ counted) and marks it ready.
  void Complete(BatchState* done) EXCLUDES(mu_);
  // Compacts the batch and copies raw slots into it. Runs without the lock: once a batch's
  // last sample is finished, only the thread that finished it touches it until it is ready.
  void Finalize(BatchState& bs) EXCLUDES(mu_);
  uint64_t BatchOf(uint64_t pos) const { return pos / static_cast<uint64_t>(lay_.batch_size); }

  const Layout lay_;
  BatchPool* const pool_;
  Clock* const clock_;
  const std::atomic<bool>* const stop_;
  StageCounters* const sc_;

  mutable Mutex mu_;
  CondVar admit_cv_, ready_cv_;
  int epoch_ GUARDED_BY(mu_) = 0;
  uint64_t index_base_ GUARDED_BY(mu_) = 0;
  uint64_t samples_ GUARDED_BY(mu_) = 0;
  uint64_t num_batches_ GUARDED_BY(mu_) = 0;
  uint64_t next_pos_ GUARDED_BY(mu_) = 0;
  uint64_t consumer_batch_ GUARDED_BY(mu_) = 0;
  std::map<uint64_t, BatchState> batches_ GUARDED_BY(mu_);
  int finalizing_ GUARDED_BY(mu_) = 0;  // batches in Finalize: Reset and Clear wait for them
  // Raw slot buffers of finalized batches, handed to new ones: their capacity stays, so
  // steady state allocates no fresh pages per sample (kRaw).
  std::vector<std::vector<uint8_t>> spare_raw_ GUARDED_BY(mu_);
  Status fatal_ GUARDED_BY(mu_);
  std::atomic<int> prefetch_{2};
  std::atomic<int64_t> last_ready_ns_{0};
};

}  // namespace stoker
