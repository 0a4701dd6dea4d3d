// Token stores: tokenized corpora as documents of token ids, memory-mapped and read
// without copying, random access by document. One interface over the formats LLM training
// uses:
//
//   megatron:PREFIX      Megatron-LM indexed dataset, PREFIX.bin + PREFIX.idx (byte-compatible
//                        with megatron.core.datasets.indexed_dataset; one document per sequence)
//   nanogpt:FILE.bin     raw uint16 (or ?dtype=uint32) token memmap, no header (nanoGPT)
//   llmc:SHARDS          llm.c shards: int32[256] header (magic 20240520 uint16 / 20240801
//                        uint32, version, token count) + tokens
//   arrow:FILE.arrow     Arrow IPC stream or file with a list<int> token column (the
//                        Hugging Face `datasets` cache format), values viewed in the mmap
//   parquet:FILE.parquet Parquet with a list<int> token column (decoded once into memory:
//                        Parquet pages are encoded, so this one is not zero-copy)
//
// Options after '?': dtype=uint16|uint32|int32 (raw files), eos=ID (raw and llm.c files:
// split documents at this token; without it one file = one document), column=NAME (arrow,
// parquet; default input_ids, else the first list<int> column). Several files: a brace
// pattern (shard_{000..009}.bin), a '*' in the file name, or a comma-separated list.
//
// Thread safety: every const method may be called from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/env.h"

namespace stoker {

// Element types, numbered as Megatron's DType enum (codes 1..8); kUInt32 is ours (llm.c
// Llama-3 shards, raw memmaps) and never written to a Megatron .idx.
enum class TokenDType : uint8_t {
  kUInt8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kUInt16 = 8,
  kUInt32 = 100,
};
size_t TokenDTypeSize(TokenDType t);
const char* TokenDTypeName(TokenDType t);
Result<TokenDType> ParseTokenDType(const std::string& name);
// Megatron's DType.optimal_dtype: uint16 when vocab < 65500, else int32.
TokenDType OptimalTokenDType(int64_t vocab_size);

// A document's tokens, pointing into the store's mapping.
struct TokenSpan {
  const uint8_t* data = nullptr;
  uint64_t length = 0;  // tokens
  TokenDType dtype = TokenDType::kUInt16;

  int64_t At(uint64_t i) const;
  // Copies tokens [begin, begin+n) converted to T (int32_t or int64_t).
  template <typename T>
  void CopyTo(uint64_t begin, uint64_t n, T* out) const;
  // Largest / smallest token id in [begin, begin+n).
  void MinMax(uint64_t begin, uint64_t n, int64_t* lo, int64_t* hi) const;
  // Starts loading tokens [begin, begin+n) into the cache (software prefetch of every cache
  // line; never faults, changes nothing). For a copy that comes later: the random pages of
  // a mapped corpus otherwise miss one by one.
  void Prefetch(uint64_t begin, uint64_t n) const;
};

class TokenStore {
 public:
  virtual ~TokenStore() = default;
  virtual uint64_t num_documents() const = 0;
  virtual uint64_t num_tokens() const = 0;
  virtual TokenDType dtype() const = 0;
  // Document i (i < num_documents(), checked by the caller). Valid while the store lives.
  virtual TokenSpan Document(uint64_t i) const = 0;
  virtual uint64_t DocumentLength(uint64_t i) const { return Document(i).length; }
  // Starts loading what Document(i) / DocumentLength(i) read (the store's index entries)
  // into the cache; a hint with no effect on results (default: nothing).
  virtual void PrefetchDocument(uint64_t i) const { (void)i; }
  // The lengths of documents [first, first + n), saturated at 2^32 - 1 (a caller that needs
  // exact lengths checks for that value). A store with a length array overrides it.
  virtual void DocumentLengths(uint64_t first, uint64_t n, uint32_t* out) const {
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t l = DocumentLength(first + i);
      out[i] = l > 0xffffffffu ? 0xffffffffu : static_cast<uint32_t>(l);
    }
  }
  // "corpus_text_document.bin: document 17" (the file that holds it, and its number).
  virtual std::string Location(uint64_t i) const = 0;
  virtual std::string format() const = 0;
  // The files read, in order (for cache keys and messages).
  virtual const std::vector<std::string>& files() const = 0;
  // True when documents are views of a mapping (false: decoded into memory).
  virtual bool zero_copy() const { return true; }
};

struct TokenStoreOptions {
  Env* env = nullptr;  // nullptr: Env::Default(), whose files are memory-mapped. Another Env
                       // (a fault-injecting one in tests) reads the files through it instead.
  TokenDType raw_dtype = TokenDType::kUInt16;
  int64_t eos = -1;        // raw / llm.c: document boundary token (kept in the documents)
  std::string column;      // arrow / parquet token column
};

// Opens "fmt:path[?opts]" or a path whose extension or content names the format:
// PREFIX with PREFIX.idx → megatron, *.idx → megatron, *.bin starting with the llm.c magic
// → llmc, other *.bin → nanogpt, *.arrow → arrow, *.parquet → parquet.
Result<std::unique_ptr<TokenStore>> OpenTokenStore(const std::string& spec,
                                                   const TokenStoreOptions& opts = {});

// Writers. AddDocument appends one document (EOS, if wanted, is the caller's to add);
// Finish writes the index / footer and renames the files into place (nothing is left under
// the final names by a run that does not finish). Not thread-safe.
class TokenWriter {
 public:
  virtual ~TokenWriter() = default;
  virtual Status AddDocument(const int64_t* ids, size_t n) = 0;
  Status AddDocument(const std::vector<int64_t>& ids) { return AddDocument(ids.data(), ids.size()); }
  virtual Status Finish() = 0;
  virtual uint64_t documents() const = 0;
  virtual uint64_t tokens() const = 0;
  // The files written (after Finish).
  virtual std::vector<std::string> outputs() const = 0;
};

struct TokenWriterOptions {
  Env* env = nullptr;
  TokenDType dtype = TokenDType::kUInt16;
  int64_t vocab_size = 0;          // > 0: ids must be in [0, vocab_size)
  uint64_t shard_tokens = 0;       // llm.c: tokens per shard (0: 100M as llm.c's scripts)
  std::string column = "input_ids";  // arrow / parquet
  uint64_t rows_per_batch = 1024;  // arrow record batch / parquet row group size
};

// "megatron:PREFIX", "nanogpt:FILE.bin", "llmc:DIR/name_%06d.bin", "arrow:FILE.arrow"
// (IPC stream, as datasets writes), "parquet:FILE.parquet".
Result<std::unique_ptr<TokenWriter>> OpenTokenWriter(const std::string& spec,
                                                     const TokenWriterOptions& opts = {});

// Content checksum of a token stream, independent of the format and of document
// boundaries: XXH64 over every token id as int64 little-endian, in document order.
uint64_t TokenStreamChecksum(const TokenStore& store);
// The same, fed incrementally (writers use it while they write).
class TokenStreamHasher {
 public:
  TokenStreamHasher();
  ~TokenStreamHasher();
  void Add(const int64_t* ids, size_t n);
  uint64_t Digest() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// llm.c header constants.
inline constexpr int32_t kLlmcMagicGpt2 = 20240520;   // uint16 tokens, version 1
inline constexpr int32_t kLlmcMagicLlama3 = 20240801;  // uint32 tokens, version 7
inline constexpr size_t kLlmcHeaderBytes = 256 * 4;

// Parses an llm.c header (first 1024 bytes of `data`); sets dtype and token count.
// kCorrupt with `path` and the field on a bad magic, version, count or a file size that
// does not match the count.
Status ParseLlmcHeader(const std::string& path, const uint8_t* data, uint64_t file_size,
                       TokenDType* dtype, uint64_t* num_tokens);

// Parses and checks a Megatron .idx image against the size of its .bin. Fills the views
// (pointing into `idx`). kCorrupt naming `idx_path` and the field or document.
// The arrays start at unaligned offsets (34, 34 + 4S, ...), so they are read with memcpy.
struct MegatronIndexView {
  TokenDType dtype = TokenDType::kUInt16;
  uint64_t sequence_count = 0, document_count = 0;
  const uint8_t* lengths = nullptr;           // int32[sequence_count]
  const uint8_t* pointers = nullptr;          // int64[sequence_count] byte offsets into .bin
  const uint8_t* document_indices = nullptr;  // int64[document_count]
  const uint8_t* modes = nullptr;             // int8[sequence_count] or nullptr
  int32_t length(uint64_t i) const;
  int64_t pointer(uint64_t i) const;
  void Prefetch(uint64_t i) const {  // the cache lines of length(i) and pointer(i)
    __builtin_prefetch(lengths + 4 * i);
    __builtin_prefetch(pointers + 8 * i);
  }
  int64_t document_index(uint64_t i) const;
};
Status ParseMegatronIndex(const std::string& idx_path, const uint8_t* idx, uint64_t idx_size,
                          uint64_t bin_size, MegatronIndexView* out);

}  // namespace stoker
