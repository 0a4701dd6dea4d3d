#include "tokens/token_index.h"

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <thread>
#include <vector>

#include <immintrin.h>
#include <sys/mman.h>
#include <unistd.h>

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
// The positions (pos) and values (val) of the x[i] >= n, i < m (m a multiple of 8), in
// order: 8 lanes at a time, compacted with a permutation looked up by the comparison's mask
// (no branch per lane). pos and val have room for m + 8.
struct CompactTable {
  uint64_t t[256];
  constexpr CompactTable() : t() {
    for (int mask = 0; mask < 256; ++mask) {
      uint64_t v = 0;
      int k = 0;
      for (int b = 0; b < 8; ++b)
        if (mask & (1 << b)) v |= static_cast<uint64_t>(b) << (8 * k++);
      t[mask] = v;
    }
  }
};
constexpr CompactTable kCompact;

__attribute__((target("avx2,popcnt"))) uint64_t CollectOutside(const uint32_t* x, uint64_t m,
                                                                uint32_t n, uint32_t* pos,
                                                                uint32_t* val) {
  const __m256i vn = _mm256_set1_epi32(static_cast<int>(n));
  __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i eight = _mm256_set1_epi32(8);
  uint64_t c = 0;
  for (uint64_t i = 0; i < m; i += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i ge = _mm256_cmpeq_epi32(_mm256_max_epu32(v, vn), v);  // v >= n, unsigned
    const unsigned mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(ge)));
    const __m256i perm =
        _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(kCompact.t[mask])));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pos + c),
                        _mm256_permutevar8x32_epi32(idx, perm));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(val + c), _mm256_permutevar8x32_epi32(v, perm));
    c += static_cast<uint64_t>(__builtin_popcount(mask));
    idx = _mm256_add_epi32(idx, eight);
  }
  return c;
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
    // Vector rounds in chunks; the lanes that land outside [0, n) (cycle walking: fewer than
    // 1 in 2, ~7 % for a corpus's n) are gathered and walked 8 at a time too. Walking them
    // one by one cost more than the vector rounds themselves: a dependent chain of 4 scalar
    // rounds and a mispredicted branch each.
    constexpr uint64_t kChunk = 256;
    uint32_t pos[kChunk + 8], val[kChunk + 8];
    for (uint64_t c0 = 0; c0 + 8 <= m; c0 += kChunk) {
      const uint64_t cm = std::min(kChunk, m - c0) / 8 * 8;
      uint32_t* o = out + c0;
      for (uint64_t i = 0; i < cm; ++i) o[i] = static_cast<uint32_t>(first + c0 + i);
      Round4Avx2(o, cm, wb_, ma_, mb_, k_);
      uint64_t c = CollectOutside(o, cm, static_cast<uint32_t>(n_), pos, val);
      while (c > 0) {
        for (uint64_t i = c; i < (c + 7) / 8 * 8; ++i) val[i] = 0;
        Round4Avx2(val, (c + 7) / 8 * 8, wb_, ma_, mb_, k_);
        uint64_t left = 0;
        for (uint64_t i = 0; i < c; ++i) {  // write back; keep the ones still outside
          const uint32_t x = val[i];
          o[pos[i]] = x;
          pos[left] = pos[i];
          val[left] = x;
          left += x >= n_;
        }
        c = left;
      }
      done = c0 + cm;
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

// out[i] = min(in[i], 65535) for i < n (the length table's 16 bits), 16 at a time with
// AVX2 where the CPU has it (the baseline x86-64 build has no unsigned 32-bit min).
#if defined(__x86_64__)
__attribute__((target("avx2"))) void NarrowAvx2(const uint32_t* in, uint64_t n, uint16_t* out) {
  const __m256i cap = _mm256_set1_epi32(0xffff);
  uint64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a =
        _mm256_min_epu32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)), cap);
    const __m256i b =
        _mm256_min_epu32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 8)), cap);
    // packus works within 128-bit lanes: a0 b0 a1 b1 -> a0 a1 b0 b1
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), p);
  }
  for (; i < n; ++i) out[i] = static_cast<uint16_t>(std::min<uint32_t>(in[i], 0xffff));
}
#endif
void Narrow(const uint32_t* in, uint64_t n, uint16_t* out) {
#if defined(__x86_64__)
  if (kHaveAvx2) return NarrowAvx2(in, n, out);
#endif
  for (uint64_t i = 0; i < n; ++i)
    out[i] = static_cast<uint16_t>(std::min<uint32_t>(in[i], 0xffff));
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
      Narrow(tmp, m, v_.get() + b0);
    }
    return Status::OK();
  }
  // The table (for prefetches: entry i is document i's length, saturated at kLong).
  const uint16_t* data() const { return v_.get(); }
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

IndexHeader MakeHeader(PackMode mode, int64_t seq_len, uint64_t num_docs, uint64_t num_samples,
                       uint64_t num_segs, uint64_t tokens, uint64_t pad_tokens) {
  IndexHeader h{};
  std::memcpy(h.magic, kIndexMagic, 8);
  h.version = kIndexVersion;
  h.mode = static_cast<uint32_t>(mode);
  h.seq_len = seq_len;
  h.num_docs = num_docs;
  h.num_samples = num_samples;
  h.num_segs = num_segs;
  h.tokens = tokens;
  h.pad_tokens = pad_tokens;
  return h;
}

}  // namespace

namespace {

// Concatenation: sample k starts at token k*S of the epoch's stream of documents in
// shuffled order, at (position, offset) of the document that holds that token (a start
// exactly at a document's end is the next document's offset 0); entries past the stream's
// end (the padded last sample) are (D, 0). Entries 0..n are produced, in order, into a
// window of `cap` entries whose finished ones `put(window, count)` takes away whenever it
// fills (the cache file's writer), or that holds them all (cap > n + 2 * kBuildBlock + 3).
//
// One streaming pass over the positions in blocks of kBuildBlock: the block's documents
// (the Feistel rounds vectorized), their lengths (independent random reads of the length
// table, issued together so that their cache misses overlap), then the starts. With cum_i
// the tokens before position i, document i holds starts [ceil(cum_i / S), ceil(cum_{i+1} /
// S)): each is a function of the running sum alone, so nothing else is carried from one
// document to the next (the division is a shift, or a multiply by a fixed-point
// reciprocal). Every
// document writes its first two possible starts without a branch — an entry that is not
// its own is scratch, overwritten by the document that holds it (which comes later) — and
// loops only when it holds three or more (~2 % of documents at S = 2048).
constexpr uint64_t kBuildBlock = 256;

// ceil(x / S), three ways: a shift when S is a power of two; else x * M >> 64 with
// M = floor(2^64 / S) + 1, exact while x * S < 2^64 (the error term x * (M S - 2^64) / 2^64
// stays below 1 / S); else (a corpus of more than 2^64 / S tokens) a division.
enum class DivKind { kShift, kReciprocal, kDivide };
class CeilDiv {
 public:
  CeilDiv(uint64_t s, uint64_t max_x)
      : s_(s),
        m_(s > 1 ? ~uint64_t{0} / s + 1 : 0),
        shift_(static_cast<uint32_t>(__builtin_ctzll(s))) {
    if ((s & (s - 1)) == 0) {
      kind_ = DivKind::kShift;
    } else if (max_x < ~uint64_t{0} / s) {
      kind_ = DivKind::kReciprocal;
    } else {
      kind_ = DivKind::kDivide;
    }
  }
  DivKind kind() const { return kind_; }
  template <DivKind kKind>
  uint64_t Ceil(uint64_t x) const {
    if constexpr (kKind == DivKind::kShift) return (x + s_ - 1) >> shift_;
    if constexpr (kKind == DivKind::kReciprocal)
      return static_cast<uint64_t>((static_cast<unsigned __int128>(x + s_ - 1) * m_) >> 64);
    return x / s_ + (x % s_ != 0);
  }

 private:
  uint64_t s_, m_;
  uint32_t shift_;
  DivKind kind_ = DivKind::kDivide;
};

template <typename Start>
Start StartEntry(uint64_t pos, uint64_t off) {
  Start e;
  e.pos = static_cast<uint32_t>(pos);
  e.off = static_cast<uint32_t>(off);
  return e;
}
// The same entry as one 64-bit word (pos in the low half, little-endian).
inline uint64_t PackedEntry(uint64_t pos, uint64_t off) {
  return static_cast<uint32_t>(pos) | (off << 32);
}

// The starts of documents pos0 + [i, m) of lengths j[i..m) into out (entry k at out[k - w0]),
// from cum (tokens before document pos0 + i) and b = ceil(cum / S); stops early before a
// document that holds three or more starts (the caller writes those, watching the window).
// Returns where it stopped. Each document also prefetches one length-table entry of the
// next block (table[ahead[i]]): spread over the loop, those cache misses overlap its
// arithmetic (a burst of 256 prefetches would fill the load queue and stall it). Kept out
// of line so that its loop keeps everything in registers.
template <DivKind kKind, typename Start>
__attribute__((noinline)) uint64_t EmitRun(const uint32_t* j, uint64_t i, uint64_t m,
                                           uint64_t pos0, uint64_t S, CeilDiv div,
                                           uint64_t* cum_io, uint64_t* b_io, Start* out,
                                           uint64_t w0, const uint16_t* table,
                                           const uint32_t* ahead) {
  static_assert(sizeof(Start) == 8 && offsetof(Start, pos) == 0 && offsetof(Start, off) == 4);
  static_assert(std::endian::native == std::endian::little);  // PackedEntry
  uint64_t cum = *cum_io, b = *b_io;
  const uint64_t next = S << 32;
  for (; i < m; ++i) {
    __builtin_prefetch(table + ahead[i]);
    const uint64_t cum1 = cum + j[i];
    const uint64_t b1 = div.Ceil<kKind>(cum1);
    if (__builtin_expect(b1 > b + 2, 0)) break;
    const uint64_t e0 = PackedEntry(pos0 + i, b * S - cum);  // start b in this document
    const uint64_t e1 = e0 + next;                           // start b + 1
    std::memcpy(out + (b - w0), &e0, 8);
    std::memcpy(out + (b - w0) + 1, &e1, 8);
    cum = cum1;
    b = b1;
  }
  *cum_io = cum;
  *b_io = b;
  return i;
}

template <DivKind kKind, typename Start, typename Put>
bool EmitConcatStarts(const KeyedPermutation& perm, const LengthTable& len, uint64_t D,
                      uint64_t S, uint64_t n, const CeilDiv& div, Start* buf, uint64_t cap,
                      Put&& put) {
  // The window: buf[i] is entry w0 + i. Entries below the current document's first start
  // are final; put() takes them when the next ones would pass `full`.
  const uint64_t full = cap - 2 * kBuildBlock - 3;
  uint64_t w0 = 0;
  auto room_for = [&](uint64_t k) {  // entry k may be written (after moving the window)
    if (k - w0 <= full) return true;
    if (!put(buf, k - w0)) return false;
    w0 = k;
    return true;
  };
  uint64_t cum = 0, b = 0;  // tokens before the current position; ceil(cum / S)
  // Software pipelined: the next block's documents are computed before this block's starts
  // are written, which prefetch their table entries (EmitRun), so the cache misses of one
  // block overlap the arithmetic of the one before.
  uint32_t idx[kBuildBlock] = {}, j[kBuildBlock];
  perm.Block(0, std::min(kBuildBlock, D), idx);
  for (uint64_t b0 = 0; b0 < D; b0 += kBuildBlock) {
    const uint64_t m = std::min(kBuildBlock, D - b0);
    len.Gather(idx, m, j);
    if (b0 + kBuildBlock < D)  // past the next block's end, idx keeps valid earlier entries
      perm.Block(b0 + kBuildBlock, std::min(kBuildBlock, D - b0 - kBuildBlock), idx);
    if (!room_for(b)) return false;  // then two entries a document fit in this block
    for (uint64_t i = 0;
         (i = EmitRun<kKind>(j, i, m, b0, S, div, &cum, &b, buf, w0, len.data(), idx)) < m;
         ++i) {
      // Document b0 + i holds starts b .. b1 - 1 (three or more).
      const uint64_t cum1 = cum + j[i];
      const uint64_t b1 = div.Ceil<kKind>(cum1);
      for (uint64_t k = b; k < b1; ++k) {
        if (!room_for(k)) return false;
        buf[k - w0] = StartEntry<Start>(b0 + i, k * S - cum);
      }
      cum = cum1;
      b = b1;
    }
  }
  // Entries b.. n are past the stream's end (padding; none in drop-last mode).
  for (uint64_t k = b; k <= n; ++k) {
    if (!room_for(k)) return false;
    buf[k - w0] = StartEntry<Start>(D, 0);
  }
  return put(buf, n + 1 - w0);
}

template <typename Start, typename Put>
bool BuildConcatStarts(const KeyedPermutation& perm, const LengthTable& len, uint64_t D,
                       uint64_t S, uint64_t T, uint64_t n, Start* buf, uint64_t cap, Put&& put) {
  const CeilDiv div(S, T + S);
  switch (div.kind()) {
    case DivKind::kShift:
      return EmitConcatStarts<DivKind::kShift>(perm, len, D, S, n, div, buf, cap, put);
    case DivKind::kReciprocal:
      return EmitConcatStarts<DivKind::kReciprocal>(perm, len, D, S, n, div, buf, cap, put);
    case DivKind::kDivide:
      break;
  }
  return EmitConcatStarts<DivKind::kDivide>(perm, len, D, S, n, div, buf, cap, put);
}

// The concatenation index written into `path` as it is built, and mapped: under a temporary
// name of this process and thread, mapped (populated), then renamed into place. A failed
// or interrupted build leaves no file under the final name; builds of the same index that
// run at once (ranks sharing a cache folder) each map the file they wrote.
template <typename Start>
Result<std::unique_ptr<MappedFile>> WriteConcatIndex(Env* env, const std::string& path,
                                                     const IndexHeader& h,
                                                     const KeyedPermutation& perm,
                                                     const LengthTable& len, uint64_t D,
                                                     uint64_t S, uint64_t T, uint64_t n) {
  const std::string dir = DirName(path);
  if (!dir.empty()) STOKER_RETURN_IF_ERROR(env->CreateDirs(dir));
  // 160 Ki entries (1.25 MiB) a write: at least the writer's 1 MiB, so each goes straight
  // to the file without another copy.
  constexpr uint64_t kWindow = 160 << 10;
  const uint64_t cap = kWindow + 2 * kBuildBlock + 4;
  std::unique_ptr<Start[], FreeDeleter> buf(static_cast<Start*>(AllocHuge(8 * cap)));
  if (!buf) return Internal("cannot allocate {} bytes to write {}", 8 * cap, path);
  const std::string tmp =
      fmt::format("{}.tmp.{}.{:x}", path, ::getpid(),
                  std::hash<std::thread::id>{}(std::this_thread::get_id()) & 0xffffff);
  STOKER_ASSIGN_OR_RETURN(auto f, env->NewWritableFile(tmp));
  Status st = f->Append(&h, sizeof(h));
  if (st.ok()) {
    BuildConcatStarts(perm, len, D, S, T, n, buf.get(), cap, [&](const Start* p, uint64_t c) {
      st = f->Append(p, 8 * c);
      return st.ok();
    });
  }
  buf.reset();  // before the mapping is populated: not both in the peak RSS
  Status closed = f->Close();
  if (st.ok()) st = closed;
  std::unique_ptr<MappedFile> m;
  if (st.ok()) {
    auto mapped = MappedFile::Open(env, tmp, /*populate=*/true);
    if (!mapped.ok()) {
      st = mapped.status();
    } else if ((*mapped)->size() != sizeof(h) + 8 * (n + 1)) {
      st = IOError("{}: {} bytes written, {} expected", tmp, (*mapped)->size(),
                   sizeof(h) + 8 * (n + 1));
    } else {
      m = std::move(mapped).value();
      st = env->RenameFile(tmp, path);
    }
  }
  if (!st.ok()) {
    (void)env->RemoveFile(tmp);
    return st;
  }
  return m;
}

double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
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
                                                      uint64_t salt, Env* env,
                                                      const std::string& path) {
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
    ix->num_samples_ = n;
    if (!path.empty()) {
      // Straight into the cache file, through a window of ~1 MiB that is written out as it
      // fills: the 8 bytes a sample are written once, from memory in cache, instead of
      // being built in a fresh array (its pages zeroed by the kernel at first touch) and
      // then copied into the file. The index is then the file's mapping, populated, as
      // when it comes from the cache. If the file cannot be written, the build is redone
      // in memory below (caching is best effort).
      const IndexHeader h = MakeHeader(o.mode, o.seq_len, D, n, 0, T, 0);
      auto m = WriteConcatIndex<SampleStart>(env, path, h, perm, len, D, S, T, n);
      if (m.ok()) {
        ix->mapped_ = std::move(m).value();
        ix->sample_index_ = reinterpret_cast<const SampleStart*>(ix->mapped_->data() + sizeof(h));
        ix->info_.cache_path = path;
      }
    }
    if (!ix->mapped_) {
      const uint64_t cap = n + 2 * kBuildBlock + 4;  // + scratch: no window moves
      ix->own_samples_.reset(static_cast<SampleStart*>(AllocHuge(8 * cap)));
      if (!ix->own_samples_)
        return Internal("cannot allocate {} bytes for the sample index of {}", 8 * cap,
                        store.files()[0]);  // every entry is written below
      ix->own_samples_n_ = n + 1;
      BuildConcatStarts(perm, len, D, S, T, n, ix->own_samples_.get(), cap,
                        [](const SampleStart*, uint64_t) { return true; });
      ix->sample_index_ = ix->own_samples_.get();
    }
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
  ix->bin_start_ = ix->own_bins_.empty() ? nullptr : ix->own_bins_.data();
  ix->segs_ = ix->own_segs_.empty() ? nullptr : ix->own_segs_.data();
  ix->num_segs_ = ix->own_segs_.size();
  ix->info_.bytes = (o.mode == PackMode::kConcat ? 8 * (ix->num_samples_ + 1) : 0) +
                    4 * ix->own_bins_.size() + 12 * ix->num_segs_;
  return ix;
}

Status EpochIndex::Save(Env* env, const std::string& path) const {
  const IndexHeader h =
      MakeHeader(mode_, seq_len_, num_docs_, num_samples_, num_segs_, tokens_, pad_tokens_);
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
  const double c0 = ProcessCpuSeconds();
  // Concatenation writes the cache file as it builds (Build); packing saves it after.
  STOKER_ASSIGN_OR_RETURN(auto ix, Build(docs, store, o, epoch, salt, env, path));
  if (!path.empty() && o.mode != PackMode::kConcat) {
    // Caching is best effort: a read-only data folder still trains (in memory).
    if (ix->Save(env, path).ok()) ix->info_.cache_path = path;
  }
  // The build time includes writing the cache file (as Megatron's does its .npy files).
  ix->info_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ix->info_.cpu_seconds = ProcessCpuSeconds() - c0;
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
