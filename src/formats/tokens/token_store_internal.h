// Private to src/formats/tokens: the store built from (pointer, length) spans, shared by
// the raw, llm.c, Arrow and Parquet readers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/tokens/token_store.h"

namespace stoker {

class SpanStore : public TokenStore {
 public:
  explicit SpanStore(TokenDType t) : dtype_(t) {}
  uint64_t num_documents() const override { return doc_ptr_.size(); }
  uint64_t num_tokens() const override { return tokens_; }
  TokenDType dtype() const override { return dtype_; }
  TokenSpan Document(uint64_t i) const override { return {doc_ptr_[i], doc_len_[i], dtype_}; }
  uint64_t DocumentLength(uint64_t i) const override { return doc_len_[i]; }
  void PrefetchDocument(uint64_t i) const override {
    __builtin_prefetch(&doc_ptr_[i]);
    __builtin_prefetch(&doc_len_[i]);
  }
  std::string Location(uint64_t i) const override;
  const std::vector<std::string>& files() const override { return files_; }

 protected:
  void AddFile(const std::string& path);
  void AddDoc(const uint8_t* p, uint64_t len);
  // Splits n tokens at `base` into documents at `eos` (after it, or before it when
  // eos_starts); eos < 0: one document.
  void SplitDocs(const uint8_t* base, uint64_t n, int64_t eos, bool eos_starts);
  uint64_t FileOf(uint64_t doc) const;

  TokenDType dtype_;
  std::vector<std::string> files_;
  std::vector<uint64_t> file_first_doc_;
  std::vector<const uint8_t*> doc_ptr_;
  std::vector<uint64_t> doc_len_;
  uint64_t tokens_ = 0;
};

// Checks ids against the vocabulary (vocab > 0) and the element type `t`, and appends them
// to `out` as `t`. kInvalidArgument naming `where`, the document and the token.
Status EncodeTokenIds(const std::string& where, uint64_t doc, const int64_t* ids, size_t n,
                      TokenDType t, int64_t vocab, std::vector<uint8_t>* out);

// Paths from a brace pattern, '*' globs in the file name and comma lists, in order.
Result<std::vector<std::string>> ExpandTokenPaths(Env* env, const std::string& pattern);

// fmt "arrow" or "parquet" (arrow_tokens.cc; kUnimplemented without the Arrow libraries).
Result<std::unique_ptr<TokenStore>> OpenArrowTokenStore(const std::string& fmt,
                                                        const std::string& path,
                                                        const TokenStoreOptions& o);
Result<std::unique_ptr<TokenWriter>> OpenArrowTokenWriter(const std::string& fmt,
                                                          const std::string& path,
                                                          const TokenWriterOptions& o);

}  // namespace stoker
