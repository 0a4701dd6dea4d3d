// The per-epoch sample index of one token corpus: which tokens make sample p of epoch e.
// A pure function of (corpus, options, seed, epoch): no threads, no clocks.
//
// Concatenation (Megatron GPTDataset semantics): the split's documents, shuffled per epoch,
// are concatenated; sample k holds tokens [kS, kS + S] of that stream (S + 1 tokens: input
// ids are the first S, labels the last S), so consecutive samples share one token and
// samples cross document boundaries. drop_last_partial (Megatron's training default) keeps
// N = (T - 1) // S samples; without it N = ceil(T / S) and the last one is padded, so
// every token of the epoch is an input exactly once.
//
// Packing (kBestFit, kFirstFit): documents are cut into pieces of at most S tokens and
// packed into bins of S tokens without crossing a document boundary; the rest of a bin is
// padding (counted). Best-fit sorts the pieces by length (decreasing) and puts each into
// the fullest bin that still has room; first-fit keeps the shuffled order and takes the
// first bin with room.
//
// Then the samples (or bins) are shuffled. The arrays are the ones Megatron builds —
// document index, sample index, shuffle index — and are cached in a file beside the data,
// memory-mapped when reused.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/tokens/mapped_file.h"
#include "formats/tokens/token_store.h"

namespace stoker::tokens {

enum class PackMode { kConcat, kBestFit, kFirstFit };
Result<PackMode> ParsePackMode(const std::string& s);  // concat | best_fit | first_fit
const char* PackModeName(PackMode m);

struct TokenIndexOptions {
  int64_t seq_len = 2048;
  PackMode mode = PackMode::kConcat;
  uint64_t seed = 0;
  bool shuffle = true;               // documents and samples
  bool drop_last_partial = true;     // concatenation: drop (true) or pad the last sample
  // Held-out splits by document: this corpus uses documents [begin*D, end*D) (Megatron's
  // contiguous "969,30,1" ranges).
  double split_begin = 0.0, split_end = 1.0;
  bool skip_empty = false;           // empty documents: error (false) or skip and count
  // Where the index files go: "" = a ".stoker-index" folder beside the first data file,
  // "none" = build in memory, never cached.
  std::string cache_dir;
};

// A piece of a sample: `len` tokens of document `doc` starting at token `offset`.
struct Piece {
  uint64_t doc = 0;
  uint64_t offset = 0;
  uint64_t len = 0;
};

// The documents of a corpus's split, checked for emptiness once.
struct CorpusDocs {
  std::vector<uint32_t> docs;  // document ids, ascending
  uint64_t tokens = 0;
  uint64_t skipped_empty = 0;
  uint64_t max_doc_len = 0;
};
Result<CorpusDocs> SelectDocuments(const TokenStore& store, const TokenIndexOptions& o);

struct IndexBuildInfo {
  double seconds = 0;        // 0 when loaded from the cache
  bool from_cache = false;
  std::string cache_path;    // empty when not cached
  uint64_t bytes = 0;        // size of the index arrays
};

class EpochIndex {
 public:
  // Builds (or loads from the cache) epoch `epoch` of `store`. `salt` separates the random
  // streams of the corpora of a blend.
  static Result<std::shared_ptr<const EpochIndex>> Get(const TokenStore& store,
                                                       const CorpusDocs& docs,
                                                       const TokenIndexOptions& o,
                                                       uint64_t epoch, uint64_t salt,
                                                       Env* env = nullptr);

  uint64_t num_samples() const { return num_samples_; }
  uint64_t tokens() const { return tokens_; }        // tokens of the epoch (all documents)
  uint64_t pad_tokens() const { return pad_tokens_; }  // packing: padding of all bins
  const IndexBuildInfo& info() const { return info_; }

  // Sample p (0 <= p < num_samples, after the sample shuffle). Concatenation: the pieces of
  // the S + 1 token window (the last may be cut short at the end of the epoch). Packing: the
  // pieces of the bin, S tokens at most. Returns the unshuffled sample position.
  uint64_t Sample(uint64_t p, std::vector<Piece>* out) const;

 private:
  struct SampleStart {
    uint32_t pos, off;
  };
  struct Seg {
    uint32_t pos, off, len;
  };
  static Result<std::shared_ptr<EpochIndex>> Build(const CorpusDocs& docs,
                                                   const TokenStore& store,
                                                   const TokenIndexOptions& o, uint64_t epoch,
                                                   uint64_t salt);
  Status Save(Env* env, const std::string& path) const;
  static Result<std::shared_ptr<EpochIndex>> Load(Env* env, const std::string& path,
                                                  const TokenStore& store, PackMode mode,
                                                  int64_t seq_len);

  PackMode mode_ = PackMode::kConcat;
  int64_t seq_len_ = 0;
  uint64_t num_samples_ = 0, tokens_ = 0, pad_tokens_ = 0;
  const TokenStore* store_ = nullptr;
  // Views of either the owned vectors or the mapped cache file.
  const uint32_t* doc_order_ = nullptr;  // [num_docs]: document ids in epoch order
  uint64_t num_docs_ = 0;
  const SampleStart* sample_index_ = nullptr;  // concat: [N + 1]
  const uint32_t* bin_start_ = nullptr;        // packing: [N + 1] into segs_
  const Seg* segs_ = nullptr;
  uint64_t num_segs_ = 0;
  const uint32_t* shuffle_ = nullptr;          // [N]
  std::vector<uint32_t> own_docs_, own_bins_, own_shuffle_;
  std::vector<SampleStart> own_samples_;
  std::vector<Seg> own_segs_;
  std::unique_ptr<MappedFile> mapped_;
  IndexBuildInfo info_;
};

// Megatron BlendedDataset's rule: sample i goes to the corpus whose count lags its weight
// the most (argmax_d w_d * max(i, 1) - count_d, lowest d on ties). Weights are normalized.
class BlendCursor {
 public:
  explicit BlendCursor(std::vector<double> weights);
  // Corpus of the next global sample, and that sample's index within the corpus.
  std::pair<size_t, uint64_t> Next();
  // Replays the rule from 0 to `samples`.
  void Seek(uint64_t samples);
  uint64_t position() const { return pos_; }
  const std::vector<uint64_t>& counts() const { return counts_; }
  const std::vector<double>& weights() const { return w_; }

 private:
  std::vector<double> w_;
  std::vector<uint64_t> counts_;
  uint64_t pos_ = 0;
};

// Random streams of the token pipeline (Rng's `stream` argument).
enum TokenRngStream : uint64_t { kStreamDocShuffle = 20, kStreamSampleShuffle = 21 };

}  // namespace stoker::tokens
