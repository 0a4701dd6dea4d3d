// The pipeline's token mode: packed, shuffled, blended batches of token ids from one or
// more token stores, deterministic and resumable on any world size.
//
// The global sample stream. Global sample g (g = 0, 1, 2, ...) is a pure function of
// (corpora, weights, options, seed, g): the blend rule (Megatron BlendedDataset) picks the
// corpus d and that corpus's j-th sample; corpus d's epochs follow each other (epoch e is
// EpochIndex e, its own document and sample shuffle), so j maps to (epoch, position).
// Global step t is samples [C0 + t*W*B, C0 + (t+1)*W*B) of the stream (W ranks, micro
// batch B; C0 = samples consumed when the run started), and rank r takes the r-th block
// of B — Megatron's MegatronPretrainingSampler. Every rank gets the same number of steps.
//
// State = (seed, samples consumed, blend counts, config hash): resuming on another world
// size or batch size continues the same stream at the same sample, with nothing repeated
// or lost (MosaicML's elastic guarantee); a bare `consumed_samples` (Megatron) is enough.
//
// Batches: input_ids, labels (shifted; ignore_index where there is no next token of the
// same document in packing mode, or at padding), position_ids (reset at every document
// start), cu_seqlens (int32 offsets of the documents — and of the padding run — in the
// flattened B*S batch, for variable-length attention), and the pieces: (row, corpus,
// document, offset, length) of every run of tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/status.h"
#include "formats/tokens/token_store.h"
#include "tokens/token_index.h"

namespace stoker::tokens {

struct TokenPipelineOptions {
  std::vector<std::string> data;    // token store specs (OpenTokenStore)
  std::vector<double> weights;      // blend weights (empty: all 1)
  TokenIndexOptions index;          // seq_len, packing, seed, shuffle, split, cache
  int batch_size = 8;               // micro batch per rank
  int rank = 0, world_size = 1;
  bool int64_output = false;        // int32 (default) or int64 arrays
  int64_t pad_id = 0;
  int64_t ignore_index = -100;      // label where there is nothing to predict
  int64_t vocab_size = 0;           // > 0: every id delivered is checked to be below it
  bool reset_position_ids = true;   // false: 0..S-1 in every row
  // Concatenation: one [B, S + 1] token window per batch (`TokenBatch::window`), input_ids
  // and labels are views of it (rows S + 1 apart, labels one token later) — the
  // Megatron/nanoGPT layout, ~4 bytes written per token instead of ~12. false: separate
  // [B, S] input_ids and labels arrays. Packing modes always use separate arrays (a label
  // is ignore_index at a document's end, so it is not the next input).
  bool window = true;
  // position_ids: kAuto = delivered in packing modes only (document boundaries inside a
  // row), kOn = always, kOff = never.
  enum class PositionIds { kAuto, kOn, kOff };
  PositionIds position_ids = PositionIds::kAuto;
  // Batch token buffers (window / input_ids / labels / position_ids); nullptr = the
  // default host allocator. A pinned (page-locked) allocator makes them pinned: the
  // buffers are recycled with the batches, so pinning happens once per buffer.
  HostAllocator* allocator = nullptr;
  int threads = 1;                  // batch assembly threads
  int prefetch = 2;                 // batches assembled ahead
  // When Next() finds its batch not ready, the calling thread assembles a queued batch
  // itself instead of waiting (caller-runs: it would only wait otherwise), then waits.
  // Batches are the same either way; false: only the `threads` assemble.
  bool assemble_when_waiting = true;
  TokenStoreOptions store;
};

struct TokenBatch {
  uint64_t step = 0;           // global step (counted from sample 0 of the stream)
  uint64_t first_sample = 0;   // global sample index of row 0
  int batch_size = 0;
  int64_t seq_len = 0;
  bool int64 = false;
  // Window layout (`windowed`): `window` holds [B, S + 1] tokens, input_ids row r is
  // window[r*(S+1) .. r*(S+1)+S), labels row r starts one token later; `input_ids` and
  // `labels` stay empty. Otherwise `input_ids`, `labels` are [B, S]. `position_ids` is
  // [B, S] when `has_position_ids`, else empty. int32 or int64 (int64 when `int64`).
  bool windowed = false;
  bool has_position_ids = false;
  HostBuffer window, input_ids, labels, position_ids;
  // Layout-independent access: the first input / label of row 0 and the distance between
  // rows in elements (S + 1 windowed, S otherwise).
  const uint8_t* input_data() const {
    return static_cast<const uint8_t*>(windowed ? window.data() : input_ids.data());
  }
  const uint8_t* label_data() const {
    return windowed ? static_cast<const uint8_t*>(window.data()) + (int64 ? 8 : 4)
                    : static_cast<const uint8_t*>(labels.data());
  }
  int64_t row_stride() const { return windowed ? seq_len + 1 : seq_len; }
  // Bytes of token arrays this batch holds (what a consumer copies to the device).
  uint64_t token_bytes() const {
    return static_cast<uint64_t>(window.size() + input_ids.size() + labels.size() +
                                 position_ids.size());
  }
  std::vector<int32_t> cu_seqlens;  // [K + 1]
  int32_t max_seqlen = 0;
  std::vector<int64_t> pieces;      // [P, 5]: row, corpus, document, offset, length
  std::vector<int64_t> sample_ids;  // [B] global sample index
  std::vector<int64_t> epochs;      // [B] the corpus epoch of each row
  uint64_t pad_tokens = 0;          // input positions that are padding
  uint64_t tokens = 0;              // input positions that are tokens
};
using TokenBatchPtr = std::shared_ptr<const TokenBatch>;

struct TokenState {
  uint64_t seed = 0;
  uint64_t samples_consumed = 0;  // global samples before the next step
  uint64_t epoch = 0;             // epoch of corpus 0 at that sample (for display)
  uint64_t sample_in_epoch = 0;
  std::vector<uint64_t> blend_counts;  // per corpus: its samples consumed
  uint64_t config_hash = 0;       // corpora + packing options (not world or batch size)
};

struct TokenPipelineStats {
  uint64_t batches = 0, samples = 0, tokens = 0, pad_tokens = 0;
  double assemble_s = 0;     // thread time spent building batches
  double wait_s = 0;         // consumer time in Next() until its batch was there (with
                             // assemble_when_waiting: including batches it assembled)
  double index_build_s = 0;  // index build time (0 when every epoch came from the cache)
  double index_build_cpu_s = 0;  // CPU time of the process during those builds
  uint64_t index_bytes = 0;
  uint64_t indices_built = 0, indices_cached = 0;
  uint64_t skipped_empty = 0;
  // Batches Next() assembled itself while it waited (assemble_when_waiting), and of those,
  // batches a thread had started but not finished in twice the usual time (taken over).
  uint64_t assembled_by_consumer = 0, taken_over = 0;
};

class TokenPipeline {
 public:
  static Result<std::unique_ptr<TokenPipeline>> Create(const TokenPipelineOptions& o);
  ~TokenPipeline();

  // This rank's next batch. Not thread-safe (one consumer).
  Result<TokenBatchPtr> Next();

  TokenState state() const;
  // Continue from `s` (taken on any world size or batch size). kInvalidArgument when the
  // seed or the corpora/packing differ, or the blend counts do not match the stream.
  Status Restore(const TokenState& s);
  // Megatron's resume: only the number of samples consumed.
  Status SeekSamples(uint64_t consumed_samples);

  // Samples of one epoch of all corpora (epoch 0 sizes) and the steps every rank takes
  // for it: floor(samples / (world_size * batch_size)).
  uint64_t samples_per_epoch() const { return samples_per_epoch_; }
  uint64_t steps_per_epoch() const;
  const TokenPipelineOptions& options() const { return o_; }
  const TokenStore& store(size_t d) const { return *corpora_[d].store; }
  size_t num_corpora() const { return corpora_.size(); }
  TokenPipelineStats stats() const;
  // The index of corpus d, epoch e (built or loaded on first use).
  Result<std::shared_ptr<const EpochIndex>> Index(size_t d, uint64_t e);

 private:
  struct Corpus {
    std::unique_ptr<TokenStore> store;
    CorpusDocs docs;
    std::vector<std::shared_ptr<const EpochIndex>> epochs;
    std::vector<uint64_t> epoch_start;  // corpus sample number where epoch e starts
  };
  struct Row {
    uint64_t global = 0;
    size_t corpus = 0;
    uint64_t epoch = 0, position = 0;
    std::shared_ptr<const EpochIndex> index;
  };
  struct Plan {
    uint64_t step = 0, first_sample = 0;
    std::vector<Row> rows;
  };
  // Per batch in flight, reused: the rows' pieces and unshuffled sample numbers.
  struct Scratch {
    std::vector<std::pair<size_t, std::vector<Piece>>> rows;
    std::vector<uint64_t> samples;
  };
  class Prefetcher;

  explicit TokenPipeline(TokenPipelineOptions o);
  Status Init();
  // Maps corpus sample j to (epoch, position), building epochs as needed.
  Status Locate(size_t d, uint64_t j, Row* row);
  // The next step's plan into *p (its vectors reused).
  Status PlanStep(Plan* p);
  Status Assemble(const Plan& p, Scratch* s, TokenBatch* b) const;
  void ResetPrefetch();

  TokenPipelineOptions o_;
  std::vector<Corpus> corpora_;
  std::vector<const TokenStore*> stores_;  // corpora_[d].store
  std::unique_ptr<BlendCursor> blend_;
  uint64_t samples_per_epoch_ = 0;
  uint64_t config_hash_ = 0;
  uint64_t next_global_ = 0;  // first global sample of the next step to plan
  uint64_t delivered_global_ = 0;  // first global sample of the next step to deliver
  std::unique_ptr<Prefetcher> prefetch_;
  mutable std::mutex stats_mu_;
  mutable TokenPipelineStats stats_;
  friend class Prefetcher;
};

}  // namespace stoker::tokens
