#include "pipeline/batch_assembler.h"

#include <cstdint>
#include <algorithm>
#include <cstring>

namespace stoker {

void BatchAssembler::Reset(int epoch, uint64_t index_base, uint64_t samples) {
  MutexLock l(&mu_);
  epoch_ = epoch;
  index_base_ = index_base;
  samples_ = samples;
  num_batches_ = (samples + lay_.batch_size - 1) / lay_.batch_size;
  next_pos_ = 0;
  consumer_batch_ = 0;
  ready_cv_.Wait(&mu_, [&]() REQUIRES(mu_) { return finalizing_ == 0; });
  batches_.clear();
  fatal_ = Status::OK();
  last_ready_ns_ = clock_->NowNanos();
}

void BatchAssembler::Clear() {
  MutexLock l(&mu_);
  // A worker Stop() detached may still be finalizing a batch (without the lock).
  ready_cv_.Wait(&mu_, [&]() REQUIRES(mu_) { return finalizing_ == 0; });
  batches_.clear();
  spare_raw_.clear();
}

void BatchAssembler::SetPrefetch(int prefetch) {
  MutexLock l(&mu_);
  prefetch_ = prefetch;
  admit_cv_.SignalAll();
}

void BatchAssembler::WakeAll() {
  MutexLock l(&mu_);
  admit_cv_.SignalAll();
  ready_cv_.SignalAll();
}

uint64_t BatchAssembler::consumer_batch() const {
  MutexLock l(&mu_);
  return consumer_batch_;
}

uint64_t BatchAssembler::num_batches() const {
  MutexLock l(&mu_);
  return num_batches_;
}

BatchState& BatchAssembler::ReserveLocked(uint64_t b) {
  auto it = batches_.find(b);
  if (it != batches_.end()) return it->second;
  BatchState& bs = batches_[b];
  uint64_t begin = b * lay_.batch_size;
  bs.expected = bs.remaining =
      static_cast<int>(std::min<uint64_t>(lay_.batch_size, samples_ - begin));
  bs.ok.assign(bs.expected, 0);
  bs.batch = pool_->Get();
  Batch& bt = *bs.batch;
  bt.epoch = epoch_;
  bt.index = index_base_ + b;
  bt.size = bs.expected;
  bt.height = bt.width = lay_.image_size;
  bt.layout = lay_.layout;
  bt.image_bytes = lay_.image_bytes;
  bt.labels.assign(bs.expected, -1);
  bt.keys.resize(bs.expected);
  bt.sample_indices.assign(bs.expected, 0);
  // bt.raw keeps its size from the batch buffer's last use: Finalize resizes it to this
  // batch's bytes, zero-filling only growth (a clear() here had it zero-fill the whole
  // batch before the copy overwrote it: a tenth of the time for 32 KB raw samples).
  if (!lay_.raw) bt.raw.clear();
  bt.raw_offsets.clear();
  if (lay_.raw) {
    bs.raw_slots.resize(bs.expected);
    for (auto& slot : bs.raw_slots) {
      if (spare_raw_.empty()) break;
      slot = std::move(spare_raw_.back());
      spare_raw_.pop_back();
    }
  }
  return bs;
}

// Waits for a position in the window; false (with *out) when none is to be had.
bool BatchAssembler::AdmitWaitLocked(const std::function<bool()>& active, Admit* out) {
  admit_cv_.Wait(&mu_, [&]() REQUIRES(mu_) {
    return stop_->load() || next_pos_ >= samples_ || !active() ||
           BatchOf(next_pos_) < consumer_batch_ + static_cast<uint64_t>(prefetch_.load()) + 1;
  });
  if (stop_->load()) {
    *out = Admit::kStop;
  } else if (!active()) {
    *out = Admit::kInactive;
  } else if (next_pos_ >= samples_) {
    *out = Admit::kDone;
  } else {
    return true;
  }
  return false;
}

BatchAssembler::Admit BatchAssembler::NextRun(const std::function<bool()>& active, Run* run) {
  MutexLock l(&mu_);
  Admit a;
  if (!AdmitWaitLocked(active, &a)) return a;
  const uint64_t pos = next_pos_;
  const uint64_t b = BatchOf(pos);
  const uint64_t end = std::min(samples_, (b + 1) * static_cast<uint64_t>(lay_.batch_size));
  next_pos_ = end;
  run->pos = pos;
  run->n = static_cast<int>(end - pos);
  run->bs = &ReserveLocked(b);  // std::map nodes do not move
  run->bs->direct = true;
  run->bs->batch->raw_offsets.clear();
  return Admit::kOk;
}

void BatchAssembler::FinishRun(const Run& run, const std::vector<std::pair<int, Status>>& failed) {
  BatchState* done = nullptr;
  {
    MutexLock l(&mu_);
    BatchState& bs = *run.bs;
    const int slot = static_cast<int>(run.pos % static_cast<uint64_t>(lay_.batch_size));
    for (int i = 0; i < run.n; ++i) bs.ok[slot + i] = 1;
    for (const auto& [i, err] : failed) {
      bs.ok[slot + i] = 0;
      const uint64_t pos = run.pos + static_cast<uint64_t>(i);
      if (lay_.fail_on_error && pos < bs.error_pos) {
        bs.error = err;
        bs.error_pos = pos;
      }
    }
    bs.remaining -= run.n;
    if (bs.remaining == 0) {
      done = &bs;  // std::map nodes do not move
      ++finalizing_;
    }
  }
  if (done) Complete(done);
}

BatchAssembler::Admit BatchAssembler::Next(const std::function<bool()>& active, Item* it) {
  MutexLock l(&mu_);
  Admit a;
  if (!AdmitWaitLocked(active, &a)) return a;
  uint64_t pos = next_pos_++;
  uint64_t b = BatchOf(pos);
  it->pos = pos;
  it->bs = &ReserveLocked(b);  // std::map nodes do not move
  it->slot = static_cast<int>(pos - b * lay_.batch_size);
  return Admit::kOk;
}

void BatchAssembler::Finish(Item* it, const Status& err) {
  BatchState* done = nullptr;
  {
    MutexLock l(&mu_);
    BatchState& bs = *it->bs;
    int slot = it->slot;
    if (err.ok()) {
      bs.ok[slot] = 1;
      bs.batch->labels[slot] = it->label;
      // The item's key is not used after this; the batch's old string keeps its capacity.
      std::swap(bs.batch->keys[slot], it->sample.key);
      bs.batch->sample_indices[slot] = it->index;
    } else if (lay_.fail_on_error && it->pos < bs.error_pos) {
      bs.error = err;
      bs.error_pos = it->pos;
    }
    if (--bs.remaining == 0) {
      done = &bs;  // std::map nodes do not move
      ++finalizing_;
    }
  }
  if (done) Complete(done);
}

void BatchAssembler::Complete(BatchState* done) {
  Finalize(*done);
  MutexLock l(&mu_);
  --finalizing_;
  if (lay_.raw) {
    for (auto& slot : done->raw_slots) spare_raw_.push_back(std::move(slot));
    done->raw_slots.clear();
  }
  done->ready = true;
  last_ready_ns_ = clock_->NowNanos();
  ready_cv_.SignalAll();
}

// The batch's last sample is done: compacts skipped slots.
void BatchAssembler::Finalize(BatchState& bs) {
  int64_t t0 = clock_->NowNanos();
  Batch& bt = *bs.batch;
  const size_t ib = lay_.image_bytes;
  int w = 0;
  for (int r = 0; r < bs.expected; ++r) {
    if (!bs.ok[r]) continue;
    if (w != r) {
      if (ib > 0)
        std::memmove(static_cast<uint8_t*>(bt.images) + w * ib,
                     static_cast<uint8_t*>(bt.images) + r * ib, ib);
      bt.labels[w] = bt.labels[r];
      bt.keys[w] = std::move(bt.keys[r]);
      bt.sample_indices[w] = bt.sample_indices[r];
      if (lay_.raw) std::swap(bs.raw_slots[w], bs.raw_slots[r]);
    }
    ++w;
  }
  bt.size = w;
  bt.labels.resize(w);
  bt.keys.resize(w);
  bt.sample_indices.resize(w);
  if (lay_.raw && bs.direct) {
    bt.raw_offsets.resize(w + 1);  // the run wrote them (w + 1: its samples' and the end)
  } else if (lay_.raw) {
    size_t total = 0;
    for (int i = 0; i < w; ++i) total += bs.raw_slots[i].size();
    bt.raw.resize(total);
    bt.raw_offsets.resize(w + 1);
    size_t off = 0;
    for (int i = 0; i < w; ++i) {
      bt.raw_offsets[i] = off;
      if (!bs.raw_slots[i].empty())
        std::memcpy(bt.raw.data() + off, bs.raw_slots[i].data(), bs.raw_slots[i].size());
      off += bs.raw_slots[i].size();
    }
    bt.raw_offsets[w] = off;
  }
  sc_->items++;
  sc_->busy_ns += clock_->NowNanos() - t0;
  sc_->bytes += static_cast<uint64_t>(w) * ib;
}

BatchAssembler::Take BatchAssembler::TakeNext(BatchState* out, Status* fatal, bool* starved,
                                              int64_t slice_ns) {
  MutexLock l(&mu_);
  if (consumer_batch_ >= num_batches_) return Take::kEnd;
  const uint64_t b = consumer_batch_;
  auto ready = [&]() REQUIRES(mu_) {
    if (stop_->load() || !fatal_.ok()) return true;
    auto it = batches_.find(b);
    return it != batches_.end() && it->second.ready;
  };
  *starved = !ready();
  if (slice_ns > 0) {
    if (!ready()) ready_cv_.WaitForNanos(&mu_, slice_ns);
    if (!ready()) return Take::kTimedOut;
  } else {
    ready_cv_.Wait(&mu_, ready);
  }
  if (!fatal_.ok()) {
    *fatal = fatal_;
    return Take::kFatal;
  }
  auto it = batches_.find(b);
  if (it == batches_.end() || !it->second.ready) return Take::kStopped;
  *out = std::move(it->second);
  batches_.erase(it);
  consumer_batch_++;
  admit_cv_.SignalAll();
  return Take::kReady;
}

void BatchAssembler::SetFatal(const Status& st) {
  MutexLock l(&mu_);
  fatal_ = st;
}

}  // namespace stoker
