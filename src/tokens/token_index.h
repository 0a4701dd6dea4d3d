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
// Then the samples (or bins) are shuffled. Both shuffles are lazy: a keyed bijection
// (KeyedPermutation: a Feistel network with cycle walking) maps a position to a document or
// sample on demand, so neither permutation is stored. Only the sample index (concat: where
// each sample starts; packing: the bins' pieces) is built — one streaming pass over the
// documents in shuffled order — and cached in a file beside the data, memory-mapped when
// reused.
#pragma once

#include <cstdint>
#include <cstdlib>
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

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// A keyed pseudorandom bijection of [0, n), n < 2^32, evaluated per index: a 4-round
// unbalanced Feistel network over [0, 2^bits) (the smallest power of two >= n, so fewer than
// 2 evaluations per index on average), cycle-walked back into [0, n). A pure function of
// (n, key); nothing is stored. `identity` makes it the identity (shuffle off).
class KeyedPermutation {
 public:
  KeyedPermutation() = default;
  KeyedPermutation(uint64_t n, uint64_t key, bool identity = false);
  uint64_t size() const { return n_; }
  uint64_t operator()(uint64_t i) const {
    if (identity_) return i;
    uint32_t x = static_cast<uint32_t>(i);
    do x = Round4(x); while (x >= n_);
    return x;
  }
  // out[i] = (*this)(first + i) for i < m: the rounds of a block run on all its indices
  // at once (AVX2 where the CPU has it), the few that walk finish one by one.
  void Block(uint64_t first, uint64_t m, uint32_t* out) const;

 private:
  static uint32_t F(uint32_t v, uint32_t k) {
    uint32_t h = (v ^ k) * 0x9E3779B1u;
    h ^= h >> 15;
    h *= 0x85EBCA77u;
    h ^= h >> 13;
    return h;
  }
  // x = a·2^wb + b, a of wa bits, b of wb bits (wa >= wb); each round moves b up and
  // replaces it by a ^ F(b); after an even number of rounds the widths are back in place.
  uint32_t Round4(uint32_t x) const {
    uint32_t a = x >> wb_, b = x & mb_;
    uint32_t t = a ^ (F(b, k_[0]) & ma_);
    a = b, b = t;  // a: wb bits, b: wa bits
    t = a ^ (F(b, k_[1]) & mb_);
    a = b, b = t;  // a: wa bits, b: wb bits
    t = a ^ (F(b, k_[2]) & ma_);
    a = b, b = t;
    t = a ^ (F(b, k_[3]) & mb_);
    a = b, b = t;
    return (a << wb_) | b;
  }
  uint64_t n_ = 0;
  bool identity_ = true;
  uint32_t wb_ = 0, ma_ = 0, mb_ = 0;
  uint32_t k_[4] = {0, 0, 0, 0};
};

// A piece of a sample: `len` tokens of document `doc` starting at token `offset`.
struct Piece {
  uint64_t doc = 0;
  uint64_t offset = 0;
  uint64_t len = 0;
};

// The documents of a corpus's split, checked for emptiness once: documents
// [first, first + count) when none was skipped (nothing stored), else the ids kept.
struct CorpusDocs {
  uint64_t first = 0, count = 0;
  std::shared_ptr<const std::vector<uint32_t>> ids;  // ascending; null: the range above
  uint64_t size() const { return count; }
  uint64_t at(uint64_t i) const { return ids ? (*ids)[i] : first + i; }
  uint64_t tokens = 0;
  uint64_t skipped_empty = 0;
  uint64_t max_doc_len = 0;
};
Result<CorpusDocs> SelectDocuments(const TokenStore& store, const TokenIndexOptions& o);

struct IndexBuildInfo {
  double seconds = 0;        // 0 when loaded from the cache
  double cpu_seconds = 0;    // CPU time of the process meanwhile (all threads)
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

  // The document at position `pos` of this epoch's (shuffled) document order.
  uint64_t DocAt(uint64_t pos) const { return docs_.at(doc_perm_(pos)); }
  // The unshuffled sample at shuffled position p.
  uint64_t SampleAt(uint64_t p) const { return sample_perm_(p); }

  // Sample p (0 <= p < num_samples, after the sample shuffle). Concatenation: the pieces of
  // the S + 1 token window (the last may be cut short at the end of the epoch). Packing: the
  // pieces of the bin, S tokens at most. Returns the unshuffled sample position.
  uint64_t Sample(uint64_t p, std::vector<Piece>* out) const;

  // Sample in stages, for batch assembly: the cache misses of several samples overlap
  // instead of following each other. PrefetchEntry(k) starts loading unshuffled sample k's
  // index entry (k = SampleAt(p)); PrefetchDocuments(k), after it, the store's index
  // entries of the documents the sample probably covers; Pieces(k, out) reads them.
  // Sample(p) == Pieces(SampleAt(p)); the prefetches are hints that change nothing.
  void PrefetchEntry(uint64_t k) const;
  void PrefetchDocuments(uint64_t k) const;
  void Pieces(uint64_t k, std::vector<Piece>* out) const;

 private:
  struct SampleStart {
    uint32_t pos, off;
  };
  struct Seg {
    uint32_t pos, off, len;
  };
  // Concatenation with a non-empty `path`: the sample index is written into the cache file
  // as it is built and then mapped from it (in memory when the file cannot be written).
  // Packing: built in memory (Get saves it).
  static Result<std::shared_ptr<EpochIndex>> Build(const CorpusDocs& docs,
                                                   const TokenStore& store,
                                                   const TokenIndexOptions& o, uint64_t epoch,
                                                   uint64_t salt, Env* env,
                                                   const std::string& path);
  Status Save(Env* env, const std::string& path) const;
  static Result<std::shared_ptr<EpochIndex>> Load(Env* env, const std::string& path,
                                                  const TokenStore& store,
                                                  const CorpusDocs& docs,
                                                  const TokenIndexOptions& o, uint64_t epoch,
                                                  uint64_t salt);
  // The permutations of (seed, epoch, salt) once the sample count is known.
  void SetPermutations(const TokenIndexOptions& o, uint64_t epoch, uint64_t salt);

  PackMode mode_ = PackMode::kConcat;
  int64_t seq_len_ = 0;
  uint64_t num_samples_ = 0, tokens_ = 0, pad_tokens_ = 0;
  const TokenStore* store_ = nullptr;
  CorpusDocs docs_;
  KeyedPermutation doc_perm_, sample_perm_;  // position -> document index, sample
  uint64_t num_docs_ = 0;
  // Views of either the owned vectors or the mapped cache file. Positions (`pos`) are
  // positions in the shuffled document order (DocAt).
  const SampleStart* sample_index_ = nullptr;  // concat: [N + 1]
  const uint32_t* bin_start_ = nullptr;        // packing: [N + 1] into segs_
  const Seg* segs_ = nullptr;
  uint64_t num_segs_ = 0;
  std::vector<uint32_t> own_bins_;
  std::unique_ptr<SampleStart[], FreeDeleter> own_samples_;
  uint64_t own_samples_n_ = 0;
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
