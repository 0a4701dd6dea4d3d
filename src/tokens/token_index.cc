#include "tokens/token_index.h"

#include <cstdint>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include <immintrin.h>
#include <sys/mman.h>

#include "core/random.h"
#include "formats/checksum.h"

namespace stoker::tokens {

Result<PackMode> ParsePackMode(const std::string& s) {
  if (s == "concat") return PackMode::kConcat;
  if (s == "best_fit" || s == "bfd") return PackMode::kBestFit;
  if (s == "first_fit" || s == "ffd") return PackMode::kFirstFit;
  return InvalidArgument("packing '{}' is not one of concat, best_fit, first_fit", s);
}

const char* PackModeName(PackMode m) {
  switch (m) {
    case PackMode::kConcat: return "concat";
    case PackMode::kBestFit: return "best_fit";
    case PackMode::kFirstFit: return "first_fit";
  }
  return "?";
}

KeyedPermutation::KeyedPermutation(uint64_t n, uint64_t key, bool identity)
    : n_(n), identity_(identity || n <= 1) {
  uint32_t bits = 0;
  while ((uint64_t{1} << bits) < n) ++bits;
  const uint32_t wa = bits - bits / 2;
  wb_ = bits / 2;
  ma_ = (1u << wa) - 1;
  mb_ = (1u << wb_) - 1;
  for (int i = 0; i < 4; ++i) k_[i] = static_cast<uint32_t>(SplitMix64(key + static_cast<uint64_t>(i)) >> 32);
}

namespace {

#if defined(__x86_64__)
__attribute__((target("avx2"))) inline __m256i FeistelF8(__m256i v, __m256i key) {
  __m256i h = _mm256_mullo_epi32(_mm256_xor_si256(v, key), _mm256_set1_epi32(0x9E3779B1u));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 15));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0x85EBCA77u)));
  return _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
}

// KeyedPermutation::Round4 on 8 lanes (the same arithmetic, lane by lane).
__attribute__((target("avx2"))) void Round4Avx2(uint32_t* x, uint64_t m, uint32_t wb, uint32_t ma,
                                                uint32_t mb, const uint32_t* k) {
  const __m128i sh = _mm_cvtsi32_si128(static_cast<int>(wb));
  const __m256i vma = _mm256_set1_epi32(static_cast<int>(ma));
  const __m256i vmb = _mm256_set1_epi32(static_cast<int>(mb));
  const __m256i k0 = _mm256_set1_epi32(static_cast<int>(k[0]));
  const __m256i k1 = _mm256_set1_epi32(static_cast<int>(k[1]));
  const __m256i k2 = _mm256_set1_epi32(static_cast<int>(k[2]));
  const __m256i k3 = _mm256_set1_epi32(static_cast<int>(k[3]));
  for (uint64_t i = 0; i + 8 <= m; i += 8) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    __m256i a = _mm256_srl_epi32(v, sh), b = _mm256_and_si256(v, vmb), t;
    t = _mm256_xor_si256(a, _mm256_and_si256(FeistelF8(b, k0), vma));
    a = b, b = t;
    t = _mm256_xor_si256(a, _mm256_and_si256(FeistelF8(b, k1), vmb));
    a = b, b = t;
    t = _mm256_xor_si256(a, _mm256_and_si256(FeistelF8(b, k2), vma));
    a = b, b = t;
    t = _mm256_xor_si256(a, _mm256_and_si256(FeistelF8(b, k3), vmb));
    a = b, b = t;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(x + i), _mm256_or_si256(_mm256_sll_epi32(a, sh), b));
  }
}
const bool kHaveAvx2 = [] {
  __builtin_cpu_init();  // this may run before libgcc's own constructor
  return __builtin_cpu_supports("avx2") != 0;
}();
#endif

}  // namespace

void KeyedPermutation::Block(uint64_t first, uint64_t m, uint32_t* out) const {
  if (identity_) {
    for (uint64_t i = 0; i < m; ++i) out[i] = static_cast<uint32_t>(first + i);
    return;
  }
  uint64_t done = 0;
#if defined(__x86_64__)
  if (kHaveAvx2) {
    done = m / 8 * 8;
    for (uint64_t i = 0; i < done; ++i) out[i] = static_cast<uint32_t>(first + i);
    Round4Avx2(out, done, wb_, ma_, mb_, k_);
    for (uint64_t i = 0; i < done; ++i) {  // cycle walking: the lanes still outside [0, n)
      uint32_t x = out[i];
      while (x >= n_) x = Round4(x);
      out[i] = x;
    }
  }
#endif
  for (uint64_t i = done; i < m; ++i) out[i] = static_cast<uint32_t>((*this)(first + i));
}

Result<CorpusDocs> SelectDocuments(const TokenStore& store, const TokenIndexOptions& o) {
  const uint64_t d = store.num_documents();
  if (d >= std::numeric_limits<uint32_t>::max())
    return InvalidArgument("{}: {} documents; the token index holds at most 2^32 - 1",
                           store.files()[0], d);
  if (!(o.split_begin >= 0 && o.split_begin < o.split_end && o.split_end <= 1.0))
    return InvalidArgument("split [{}, {}) is not a range inside [0, 1]", o.split_begin,
                           o.split_end);
  auto at = [&](double f) {
    return static_cast<uint64_t>(f * static_cast<double>(d) + 0.5);
  };
  uint64_t b = at(o.split_begin), e = at(o.split_end);
  CorpusDocs out;
  out.first = b;
  // One pass checks and counts (lengths read in blocks); the ids are stored only when some
  // were skipped.
  constexpr uint64_t kBlock = 4096;
  uint32_t lens[kBlock];
  for (uint64_t b0 = b; b0 < e; b0 += kBlock) {
    const uint64_t m = std::min(kBlock, e - b0);
    store.DocumentLengths(b0, m, lens);
    uint64_t zeros = 0, sum = 0;
    uint32_t mx = 0;
    for (uint64_t i = 0; i < m; ++i) {
      zeros += lens[i] == 0;
      sum += lens[i];
      mx = std::max(mx, lens[i]);
    }
    if (zeros > 0) {
      if (!o.skip_empty)
        for (uint64_t i = 0; i < m; ++i)
          if (lens[i] == 0)
            return Corrupt("{} is empty (no tokens); skip empty documents to go on (skip_empty)",
                           store.Location(b0 + i));
      out.skipped_empty += zeros;
    }
    if (mx == std::numeric_limits<uint32_t>::max())
      for (uint64_t i = 0; i < m; ++i)
        if (lens[i] == mx)
          return InvalidArgument("{} has {} tokens or more, more than 2^32 - 2",
                                 store.Location(b0 + i), mx);
    out.tokens += sum;
    out.max_doc_len = std::max<uint64_t>(out.max_doc_len, mx);
  }
  out.count = e - b - out.skipped_empty;
  if (out.skipped_empty > 0) {
    auto ids = std::make_shared<std::vector<uint32_t>>();
    ids->reserve(out.count);
    for (uint64_t i = b; i < e; ++i)
      if (store.DocumentLength(i) > 0) ids->push_back(static_cast<uint32_t>(i));
    out.ids = std::move(ids);
  }
  if (out.count == 0)
    return InvalidArgument("{}: the split [{}, {}) holds no non-empty document",
                           store.files()[0], o.split_begin, o.split_end);
  return out;
}

namespace {

// The lengths of the split's documents, in document order, copied once (a sequential read
// of the store's index) into one huge-page-backed block: the build then reads them in
// shuffled order, and random reads of a mapped .idx (4 KiB pages: a TLB and a cache miss
// per document) cost ~5x more than of this block.
// Memory for a large build array, 2 MiB aligned and marked for transparent huge pages:
// the build reads and writes it at random places, where 4 KiB pages cost a TLB miss (and
// a page fault) per few documents. nullptr when out of memory.
void* AllocHuge(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t rounded = (std::max<size_t>(bytes, 1) + kHuge - 1) / kHuge * kHuge;
  void* p = nullptr;
  if (posix_memalign(&p, kHuge, rounded) != 0) return nullptr;
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE);  // a hint; without it the memory still works
#endif
  return p;
}

class LengthTable {
 public:
  Status Fill(const TokenStore& store, const CorpusDocs& cd) {
    store_ = &store;
    cd_ = &cd;
    n_ = cd.size();
    v_.reset(static_cast<uint16_t*>(AllocHuge(2 * n_)));
    if (!v_)
      return Internal("cannot allocate {} bytes for the document lengths of {}", 2 * n_,
                      store.files()[0]);
    constexpr uint64_t kBlock = 4096;
    uint32_t tmp[kBlock];
    for (uint64_t b0 = 0; b0 < n_; b0 += kBlock) {
      const uint64_t m = std::min(kBlock, n_ - b0);
      if (!cd.ids) {
        store.DocumentLengths(cd.first + b0, m, tmp);
      } else {
        for (uint64_t i = 0; i < m; ++i)
          tmp[i] = static_cast<uint32_t>(store.DocumentLength((*cd.ids)[b0 + i]));
      }
      for (uint64_t i = 0; i < m; ++i) v_[b0 + i] = static_cast<uint16_t>(std::min<uint32_t>(tmp[i], kLong));
    }
    return Status::OK();
  }
  // Lengths of documents idx[0..m) into out: the 16-bit table, then the exact length of the
  // (rare) documents of kLong tokens or more.
  void Gather(const uint32_t* idx, uint64_t m, uint32_t* out) const {
    for (uint64_t i = 0; i < m; ++i) out[i] = v_[idx[i]];  // independent loads: overlapped
    for (uint64_t i = 0; i < m; ++i)
      if (out[i] == kLong) out[i] = static_cast<uint32_t>(store_->DocumentLength(cd_->at(idx[i])));
  }
  uint32_t operator[](uint64_t i) const {
    return v_[i] < kLong ? v_[i] : static_cast<uint32_t>(store_->DocumentLength(cd_->at(i)));
  }

 private:
  static constexpr uint32_t kLong = 0xffff;
  std::unique_ptr<uint16_t[], FreeDeleter> v_;
  const TokenStore* store_ = nullptr;
  const CorpusDocs* cd_ = nullptr;
  uint64_t n_ = 0;
};

// Best-fit: the bin with the least room that still fits. Bins are bucketed by their room
// (0..S) with a bitset over non-empty buckets, so a lookup scans S/64 words at most.
class BestFitBins {
 public:
  explicit BestFitBins(uint64_t cap) : cap_(cap), buckets_(cap + 1), bits_((cap + 64) / 64) {}
  uint32_t Place(uint64_t len) {
    uint64_t w = len / 64;
    uint64_t word = bits_[w] & (~0ull << (len % 64));
    while (word == 0 && ++w < bits_.size()) word = bits_[w];
    uint32_t bin;
    uint64_t room;
    if (w >= bits_.size()) {
      bin = static_cast<uint32_t>(nbins_++);
      room = cap_;
    } else {
      room = w * 64 + static_cast<uint64_t>(__builtin_ctzll(word));
      bin = buckets_[room].back();
      buckets_[room].pop_back();
      if (buckets_[room].empty()) bits_[room / 64] &= ~(1ull << (room % 64));
    }
    uint64_t left = room - len;
    if (left > 0) {
      buckets_[left].push_back(bin);
      bits_[left / 64] |= 1ull << (left % 64);
    }
    return bin;
  }
  uint64_t bins() const { return nbins_; }

 private:
  uint64_t cap_;
  std::vector<std::vector<uint32_t>> buckets_;
  std::vector<uint64_t> bits_;
  uint64_t nbins_ = 0;
};

// First-fit: the lowest-numbered bin with room, found in a max segment tree over the bins.
class FirstFitBins {
 public:
  FirstFitBins(uint64_t cap, uint64_t max_bins) : cap_(cap) {
    n_ = 1;
    while (n_ < max_bins) n_ <<= 1;
    tree_.assign(2 * n_, static_cast<uint32_t>(cap));  // unopened bins have full room
  }
  uint32_t Place(uint64_t len) {
    size_t i = 1;
    while (i < n_) i = tree_[2 * i] >= len ? 2 * i : 2 * i + 1;
    uint32_t bin = static_cast<uint32_t>(i - n_);
    nbins_ = std::max<uint64_t>(nbins_, bin + 1ull);
    tree_[i] -= static_cast<uint32_t>(len);
    for (i >>= 1; i >= 1; i >>= 1) tree_[i] = std::max(tree_[2 * i], tree_[2 * i + 1]);
    return bin;
  }
  uint64_t bins() const { return nbins_; }

 private:
  uint64_t cap_;
  size_t n_;
  std::vector<uint32_t> tree_;
  uint64_t nbins_ = 0;
};

constexpr char kIndexMagic[8] = {'S', 'T', 'K', 'T', 'I', 'D', 'X', '2'};
constexpr uint32_t kIndexVersion = 2;
struct IndexHeader {
  char magic[8];
  uint32_t version, mode;
  int64_t seq_len;
  uint64_t num_docs, num_samples, num_segs, tokens, pad_tokens;
};
static_assert(sizeof(IndexHeader) == 64);

}  // namespace

namespace {

// Concatenation: sample k (1 <= k <= n) starts at token k*S of the epoch's stream of
// documents in shuffled order, at (position, offset) of the document that holds that token
// (a start exactly at a document's end is the next document's offset 0); starts at or past
// the stream's end (the padded last sample) are (D, 0). out[0] = (0, 0).
//
// One streaming pass over the positions in blocks of 256: the block's documents (the
// Feistel rounds vectorized), their lengths (256 independent random reads of the length
// table, issued together so that their cache misses overlap), then the running token
// count emits a start at every multiple of S.
template <typename Start>
void BuildConcatStarts(const KeyedPermutation& perm, const LengthTable& len, uint64_t D,
                       uint64_t S, uint64_t n, Start* out) {
  out[0] = {0, 0};
  uint64_t k = 1, next = S, base = 0;  // next = k*S; base = tokens before position p
  constexpr uint64_t kBlock = 256;
  uint32_t idx[kBlock], j[kBlock];
  for (uint64_t b0 = 0; b0 < D && k <= n; b0 += kBlock) {
    const uint64_t m = std::min(kBlock, D - b0);
    perm.Block(b0, m, idx);
    len.Gather(idx, m, j);
    for (uint64_t i = 0; i < m && k <= n; ++i) {
      const uint64_t end = base + j[i];
      // Most documents are shorter than S and hold at most one start: that one is written
      // without a branch (out[k] is scratch until k moves on; k <= n + 1).
      out[k] = {static_cast<uint32_t>(b0 + i), static_cast<uint32_t>(next - base)};
      const uint64_t hit = static_cast<uint64_t>(next < end) & static_cast<uint64_t>(k <= n);
      k += hit;
      next += hit * S;
      while (next < end && k <= n) {
        out[k++] = {static_cast<uint32_t>(b0 + i), static_cast<uint32_t>(next - base)};
        next += S;
      }
      base = end;
    }
  }
  for (; k <= n; ++k) out[k] = {static_cast<uint32_t>(D), 0};  // past the end (padding)
}

}  // namespace

void EpochIndex::SetPermutations(const TokenIndexOptions& o, uint64_t epoch, uint64_t salt) {
  doc_perm_ = KeyedPermutation(num_docs_, MixKey(o.seed, epoch, salt, kStreamDocShuffle),
                               !o.shuffle);
  sample_perm_ = KeyedPermutation(num_samples_, MixKey(o.seed, epoch, salt, kStreamSampleShuffle),
                                  !o.shuffle);
}

Result<std::shared_ptr<EpochIndex>> EpochIndex::Build(const CorpusDocs& cd, const TokenStore& store,
                                                      const TokenIndexOptions& o, uint64_t epoch,
                                                      uint64_t salt) {
  auto ix = std::shared_ptr<EpochIndex>(new EpochIndex());
  ix->mode_ = o.mode;
  ix->seq_len_ = o.seq_len;
  ix->store_ = &store;
  ix->docs_ = cd;
  ix->num_docs_ = cd.size();
  const uint64_t S = static_cast<uint64_t>(o.seq_len);
  const uint64_t D = cd.size();
  // The document order first (its permutation needs only D); the sample one once N is known.
  ix->doc_perm_ = KeyedPermutation(D, MixKey(o.seed, epoch, salt, kStreamDocShuffle), !o.shuffle);
  const KeyedPermutation& perm = ix->doc_perm_;
  LengthTable len;
  STOKER_RETURN_IF_ERROR(len.Fill(store, cd));
  ix->tokens_ = cd.tokens;
  const uint64_t T = cd.tokens;
  if (o.mode == PackMode::kConcat) {
    uint64_t n = o.drop_last_partial ? (T - 1) / S : (T + S - 1) / S;
    if (n == 0)
      return InvalidArgument("{}: {} tokens make no sample of seq_len {} (+1 for the labels)",
                             store.files()[0], T, S);
    if (n >= std::numeric_limits<uint32_t>::max())
      return InvalidArgument("{} samples in one epoch; the index holds at most 2^32 - 1", n);
    ix->own_samples_.reset(static_cast<SampleStart*>(AllocHuge(8 * (n + 2))));  // +1 scratch
    if (!ix->own_samples_)
      return Internal("cannot allocate {} bytes for the sample index of {}", 8 * (n + 1),
                      store.files()[0]);  // every entry is written below
    ix->own_samples_n_ = n + 1;
    BuildConcatStarts(perm, len, D, S, n, ix->own_samples_.get());
    ix->num_samples_ = n;
  } else {
    std::vector<Seg> segs;
    segs.reserve(D + T / S + 1);
    for (uint64_t p = 0; p < D; ++p) {
      const uint64_t l = len[perm(p)];
      for (uint64_t off = 0; off < l; off += S)
        segs.push_back({static_cast<uint32_t>(p), static_cast<uint32_t>(off),
                        static_cast<uint32_t>(std::min(S, l - off))});
    }
    if (segs.size() >= std::numeric_limits<uint32_t>::max())
      return InvalidArgument("{} pieces in one epoch; the index holds at most 2^32 - 1",
                             segs.size());
    std::vector<uint32_t> bin_of(segs.size());
    uint64_t nbins = 0;
    if (o.mode == PackMode::kBestFit) {
      // Decreasing length, stable (counting sort over 1..S).
      std::vector<uint32_t> count(S + 2, 0);
      for (const auto& s : segs) ++count[S - s.len + 1];
      for (uint64_t i = 1; i < count.size(); ++i) count[i] += count[i - 1];
      std::vector<uint32_t> sorted(segs.size());
      for (uint32_t i = 0; i < segs.size(); ++i) sorted[count[S - segs[i].len]++] = i;
      BestFitBins bins(S);
      for (uint32_t i : sorted) bin_of[i] = bins.Place(segs[i].len);
      nbins = bins.bins();
    } else {
      FirstFitBins bins(S, segs.size());
      for (uint32_t i = 0; i < segs.size(); ++i) bin_of[i] = bins.Place(segs[i].len);
      nbins = bins.bins();
    }
    // Group the pieces by bin (in document order within a bin).
    ix->own_bins_.assign(nbins + 1, 0);
    for (uint32_t b : bin_of) ++ix->own_bins_[b + 1];
    for (uint64_t i = 1; i <= nbins; ++i) ix->own_bins_[i] += ix->own_bins_[i - 1];
    ix->own_segs_.resize(segs.size());
    std::vector<uint32_t> fill(ix->own_bins_.begin(), ix->own_bins_.end() - 1);
    for (uint32_t i = 0; i < segs.size(); ++i) ix->own_segs_[fill[bin_of[i]]++] = segs[i];
    ix->num_samples_ = nbins;
    ix->pad_tokens_ = nbins * S - T;
  }
  ix->SetPermutations(o, epoch, salt);
  ix->sample_index_ = ix->own_samples_.get();
  ix->bin_start_ = ix->own_bins_.empty() ? nullptr : ix->own_bins_.data();
  ix->segs_ = ix->own_segs_.empty() ? nullptr : ix->own_segs_.data();
  ix->num_segs_ = ix->own_segs_.size();
  ix->info_.bytes = 8 * ix->own_samples_n_ + 4 * ix->own_bins_.size() + 12 * ix->num_segs_;
  return ix;
}

Status EpochIndex::Save(Env* env, const std::string& path) const {
  IndexHeader h{};
  std::memcpy(h.magic, kIndexMagic, 8);
  h.version = kIndexVersion;
  h.mode = static_cast<uint32_t>(mode_);
  h.seq_len = seq_len_;
  h.num_docs = num_docs_;
  h.num_samples = num_samples_;
  h.num_segs = num_segs_;
  h.tokens = tokens_;
  h.pad_tokens = pad_tokens_;
  // The permutations are not stored (a pure function of seed, epoch, corpus); only the
  // sample index is.
  std::string dir = DirName(path);
  if (!dir.empty()) STOKER_RETURN_IF_ERROR(env->CreateDirs(dir));
  // Written straight from the arrays under a temporary name, then renamed into place.
  const std::string tmp = path + ".tmp";
  {
    STOKER_ASSIGN_OR_RETURN(auto f, env->NewWritableFile(tmp));
    STOKER_RETURN_IF_ERROR(f->Append(&h, sizeof(h)));
    if (mode_ == PackMode::kConcat) {
      STOKER_RETURN_IF_ERROR(f->Append(sample_index_, 8 * (num_samples_ + 1)));
    } else {
      STOKER_RETURN_IF_ERROR(f->Append(bin_start_, 4 * (num_samples_ + 1)));
      if (num_segs_) STOKER_RETURN_IF_ERROR(f->Append(segs_, 12 * num_segs_));
    }
    STOKER_RETURN_IF_ERROR(f->Close());
  }
  return env->RenameFile(tmp, path);
}

Result<std::shared_ptr<EpochIndex>> EpochIndex::Load(Env* env, const std::string& path,
                                                     const TokenStore& store,
                                                     const CorpusDocs& docs,
                                                     const TokenIndexOptions& o, uint64_t epoch,
                                                     uint64_t salt) {
  const PackMode mode = o.mode;
  STOKER_ASSIGN_OR_RETURN(auto m, MappedFile::Open(env, path));
  IndexHeader h{};
  if (m->size() < sizeof(h)) return Corrupt("{}: truncated index header", path);
  std::memcpy(&h, m->data(), sizeof(h));
  if (std::memcmp(h.magic, kIndexMagic, 8) != 0 || h.version != kIndexVersion ||
      h.mode != static_cast<uint32_t>(mode) || h.seq_len != o.seq_len ||
      h.num_docs != docs.size() || h.tokens != docs.tokens)
    return Corrupt("{}: not a token index for these options", path);
  uint64_t need = sizeof(h);
  need += mode == PackMode::kConcat ? 8 * (h.num_samples + 1)
                                    : 4 * (h.num_samples + 1) + 12 * h.num_segs;
  if (h.num_samples > m->size() || h.num_segs > m->size() || m->size() != need)
    return Corrupt("{}: {} bytes, the header needs {}", path, m->size(), need);
  auto ix = std::shared_ptr<EpochIndex>(new EpochIndex());
  ix->mode_ = mode;
  ix->seq_len_ = o.seq_len;
  ix->store_ = &store;
  ix->docs_ = docs;
  ix->num_docs_ = h.num_docs;
  ix->num_samples_ = h.num_samples;
  ix->num_segs_ = h.num_segs;
  ix->tokens_ = h.tokens;
  ix->pad_tokens_ = h.pad_tokens;
  const uint8_t* p = m->data() + sizeof(h);
  if (mode == PackMode::kConcat) {
    ix->sample_index_ = reinterpret_cast<const SampleStart*>(p);
  } else {
    ix->bin_start_ = reinterpret_cast<const uint32_t*>(p);
    p += 4 * (h.num_samples + 1);
    ix->segs_ = reinterpret_cast<const Seg*>(p);
  }
  // Cheap consistency checks, so a damaged cache file cannot index outside the corpus.
  if (mode == PackMode::kConcat) {
    for (uint64_t i = 0; i <= h.num_samples; i += 1 + h.num_samples / 64)
      if (ix->sample_index_[i].pos > h.num_docs) return Corrupt("{}: bad sample index", path);
    if (ix->sample_index_[h.num_samples].pos > h.num_docs)
      return Corrupt("{}: bad sample index", path);
  } else {
    if (ix->bin_start_[h.num_samples] != h.num_segs)
      return Corrupt("{}: bin index does not cover its pieces", path);
    for (uint64_t i = 0; i < h.num_segs; i += 1 + h.num_segs / 64)
      if (ix->segs_[i].pos >= h.num_docs) return Corrupt("{}: bad piece", path);
  }
  ix->SetPermutations(o, epoch, salt);
  ix->info_.bytes = m->size() - sizeof(h);
  ix->mapped_ = std::move(m);
  return ix;
}

Result<std::shared_ptr<const EpochIndex>> EpochIndex::Get(const TokenStore& store,
                                                          const CorpusDocs& docs,
                                                          const TokenIndexOptions& o,
                                                          uint64_t epoch, uint64_t salt,
                                                          Env* env) {
  if (o.seq_len < 1 || o.seq_len > (1 << 24))
    return InvalidArgument("seq_len {} is not in [1, 2^24]", o.seq_len);
  if (env == nullptr) env = Env::Default();
  std::string path;
  if (o.cache_dir != "none") {
    // The key: the files (path, size, mtime), the options and the epoch.
    std::string desc = fmt::format("stoker-token-index-v2|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}",
                                   store.format(), store.num_documents(), store.num_tokens(),
                                   o.seq_len, PackModeName(o.mode), o.seed, o.shuffle,
                                   o.drop_last_partial, o.split_begin, o.split_end, o.skip_empty);
    for (const auto& f : store.files()) {
      auto st = env->Stat(f);
      desc += fmt::format("|{}:{}:{}", f, st.ok() ? st->size : 0, st.ok() ? st->mtime_ns : 0);
    }
    desc += fmt::format("|salt={}|epoch={}", salt, epoch);
    std::string dir = o.cache_dir;
    if (dir.empty()) {
      std::string d = DirName(store.files()[0]);
      dir = JoinPath(d.empty() ? "." : d, ".stoker-index");
    }
    path = JoinPath(dir, fmt::format("{}-{}-s{}-e{}.tokidx", fmt::format("{:016x}", XXH64(desc.data(), desc.size())),
                                     PackModeName(o.mode), o.seq_len, epoch));
    if (env->FileExists(path)) {
      auto loaded = Load(env, path, store, docs, o, epoch, salt);
      if (loaded.ok()) {
        (*loaded)->info_.from_cache = true;
        (*loaded)->info_.cache_path = path;
        return std::shared_ptr<const EpochIndex>(std::move(loaded).value());
      }
      // A damaged or foreign cache file is rebuilt (and replaced) below.
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  STOKER_ASSIGN_OR_RETURN(auto ix, Build(docs, store, o, epoch, salt));
  if (!path.empty()) {
    // Caching is best effort: a read-only data folder still trains (in memory).
    if (ix->Save(env, path).ok()) ix->info_.cache_path = path;
  }
  // The build time includes writing the cache file (as Megatron's does its .npy files).
  ix->info_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::shared_ptr<const EpochIndex>(std::move(ix));
}

uint64_t EpochIndex::Sample(uint64_t p, std::vector<Piece>* out) const {
  const uint64_t k = sample_perm_(p);
  Pieces(k, out);
  return k;
}

void EpochIndex::PrefetchEntry(uint64_t k) const {
  if (mode_ == PackMode::kConcat) {
    __builtin_prefetch(&sample_index_[k]);
  } else {
    __builtin_prefetch(&bin_start_[k]);
  }
}

void EpochIndex::PrefetchDocuments(uint64_t k) const {
  if (mode_ == PackMode::kConcat) {
    // The documents from the start's on, as many as S + 1 tokens take at the mean length
    // (plus the first one's remainder): a guess, for the prefetch only.
    const uint64_t pos = sample_index_[k].pos;
    const uint64_t mean = std::max<uint64_t>(1, tokens_ / std::max<uint64_t>(1, num_docs_));
    const uint64_t m = std::min<uint64_t>(8, 2 + static_cast<uint64_t>(seq_len_) / mean);
    for (uint64_t i = 0; i < m && pos + i < num_docs_; ++i) store_->PrefetchDocument(DocAt(pos + i));
  } else {
    for (uint32_t i = bin_start_[k]; i < bin_start_[k + 1]; ++i)
      store_->PrefetchDocument(DocAt(segs_[i].pos));
  }
}

void EpochIndex::Pieces(uint64_t k, std::vector<Piece>* out) const {
  out->clear();
  if (mode_ == PackMode::kConcat) {
    uint64_t left = static_cast<uint64_t>(seq_len_) + 1;
    uint64_t pos = sample_index_[k].pos, off = sample_index_[k].off;
    while (left > 0 && pos < num_docs_) {
      uint64_t doc = DocAt(pos);
      uint64_t room = store_->DocumentLength(doc) - off;
      uint64_t take = std::min(room, left);
      out->push_back({doc, off, take});
      left -= take;
      ++pos;
      off = 0;
    }
  } else {
    for (uint32_t i = bin_start_[k]; i < bin_start_[k + 1]; ++i)
      out->push_back({DocAt(segs_[i].pos), segs_[i].off, segs_[i].len});
  }
}

BlendCursor::BlendCursor(std::vector<double> weights) : w_(std::move(weights)) {
  double sum = 0;
  for (double w : w_) sum += w;
  for (double& w : w_) w = sum > 0 ? w / sum : 1.0 / static_cast<double>(w_.size());
  counts_.assign(w_.size(), 0);
}

std::pair<size_t, uint64_t> BlendCursor::Next() {
  double at = std::max(static_cast<double>(pos_), 1.0);
  size_t best = 0;
  double best_err = w_[0] * at - static_cast<double>(counts_[0]);
  for (size_t d = 1; d < w_.size(); ++d) {
    double err = w_[d] * at - static_cast<double>(counts_[d]);
    if (err > best_err) {
      best_err = err;
      best = d;
    }
  }
  ++pos_;
  return {best, counts_[best]++};
}

void BlendCursor::Seek(uint64_t samples) {
  counts_.assign(w_.size(), 0);
  pos_ = 0;
  if (w_.size() == 1) {
    counts_[0] = pos_ = samples;
    return;
  }
  while (pos_ < samples) Next();
}

}  // namespace stoker::tokens
