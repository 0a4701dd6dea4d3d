// Writers for the raw, llm.c and Megatron token formats (Arrow and Parquet: arrow_tokens.cc).
#include <cstdint>
#include <cstring>
#include <limits>

#include "formats/tokens/token_store.h"
#include "formats/tokens/token_store_internal.h"

namespace stoker {

Status EncodeTokenIds(const std::string& where, uint64_t doc, const int64_t* ids, size_t n,
                    TokenDType t, int64_t vocab, std::vector<uint8_t>* out) {
  int64_t lo = 0, hi = 0;
  switch (t) {
    case TokenDType::kUInt8: hi = 255; break;
    case TokenDType::kInt8: lo = -128; hi = 127; break;
    case TokenDType::kInt16: lo = -32768; hi = 32767; break;
    case TokenDType::kUInt16: hi = 65535; break;
    case TokenDType::kInt32: lo = std::numeric_limits<int32_t>::min(); hi = std::numeric_limits<int32_t>::max(); break;
    case TokenDType::kUInt32: hi = std::numeric_limits<uint32_t>::max(); break;
    case TokenDType::kInt64: lo = std::numeric_limits<int64_t>::min(); hi = std::numeric_limits<int64_t>::max(); break;
  }
  const size_t isz = TokenDTypeSize(t);
  size_t base = out->size();
  out->resize(base + n * isz);
  uint8_t* dst = out->data() + base;
  for (size_t i = 0; i < n; ++i) {
    int64_t v = ids[i];
    if (vocab > 0 && (v < 0 || v >= vocab))
      return InvalidArgument("{}: document {}, token {}: id {} is outside the vocabulary "
                             "[0, {})", where, doc, i, v, vocab);
    if (v < lo || v > hi)
      return InvalidArgument("{}: document {}, token {}: id {} does not fit {}", where, doc, i,
                             v, TokenDTypeName(t));
    switch (isz) {
      case 1: { auto x = static_cast<uint8_t>(v); std::memcpy(dst + i, &x, 1); break; }
      case 2: { auto x = static_cast<uint16_t>(v); std::memcpy(dst + 2 * i, &x, 2); break; }
      case 4: { auto x = static_cast<uint32_t>(v); std::memcpy(dst + 4 * i, &x, 4); break; }
      default: std::memcpy(dst + 8 * i, &v, 8);
    }
  }
  return Status::OK();
}

namespace {

// Appends to PATH.tmp; Commit() renames it to PATH.
class TmpFile {
 public:
  Status Open(Env* env, const std::string& path) {
    env_ = env;
    path_ = path;
    std::string dir = DirName(path);
    if (!dir.empty()) STOKER_RETURN_IF_ERROR(env->CreateDirs(dir));
    STOKER_ASSIGN_OR_RETURN(f_, env->NewWritableFile(path + ".tmp"));
    return Status::OK();
  }
  Status Append(const void* p, size_t n) { return f_->Append(p, n); }
  Status Commit() {
    STOKER_RETURN_IF_ERROR(f_->Close());
    return env_->RenameFile(path_ + ".tmp", path_);
  }
  const std::string& path() const { return path_; }

 private:
  Env* env_ = nullptr;
  std::string path_;
  std::unique_ptr<WritableFile> f_;
};

class MegatronWriter final : public TokenWriter {
 public:
  Status Open(const std::string& prefix, const TokenWriterOptions& o) {
    o_ = o;
    env_ = o.env ? o.env : Env::Default();
    if (o.dtype == TokenDType::kUInt32)
      return InvalidArgument("Megatron indexed datasets have no uint32 type (use int32)");
    prefix_ = prefix;
    return bin_.Open(env_, prefix + ".bin");
  }
  Status AddDocument(const int64_t* ids, size_t n) override {
    if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      return InvalidArgument("{}.bin: document {} has {} tokens, more than an int32 length",
                             prefix_, lengths_.size(), n);
    buf_.clear();
    STOKER_RETURN_IF_ERROR(
        EncodeTokenIds(prefix_ + ".bin", lengths_.size(), ids, n, o_.dtype, o_.vocab_size, &buf_));
    STOKER_RETURN_IF_ERROR(bin_.Append(buf_.data(), buf_.size()));
    lengths_.push_back(static_cast<int32_t>(n));
    tokens_ += n;
    return Status::OK();
  }
  Status Finish() override {
    STOKER_RETURN_IF_ERROR(bin_.Commit());
    TmpFile idx;
    STOKER_RETURN_IF_ERROR(idx.Open(env_, prefix_ + ".idx"));
    const uint64_t s = lengths_.size(), d = s + 1;
    std::vector<uint8_t> h(34);
    std::memcpy(h.data(), "MMIDIDX\0\0", 9);
    uint64_t version = 1;
    std::memcpy(h.data() + 9, &version, 8);
    h[17] = static_cast<uint8_t>(o_.dtype);
    std::memcpy(h.data() + 18, &s, 8);
    std::memcpy(h.data() + 26, &d, 8);
    STOKER_RETURN_IF_ERROR(idx.Append(h.data(), h.size()));
    STOKER_RETURN_IF_ERROR(idx.Append(lengths_.data(), 4 * s));
    std::vector<int64_t> v(s);
    int64_t ptr = 0;
    const int64_t isz = static_cast<int64_t>(TokenDTypeSize(o_.dtype));
    for (uint64_t i = 0; i < s; ++i) {
      v[i] = ptr;
      ptr += lengths_[i] * isz;
    }
    STOKER_RETURN_IF_ERROR(idx.Append(v.data(), 8 * s));
    v.resize(d);
    for (uint64_t i = 0; i < d; ++i) v[i] = static_cast<int64_t>(i);
    STOKER_RETURN_IF_ERROR(idx.Append(v.data(), 8 * d));
    return idx.Commit();
  }
  uint64_t documents() const override { return lengths_.size(); }
  uint64_t tokens() const override { return tokens_; }
  std::vector<std::string> outputs() const override { return {prefix_ + ".bin", prefix_ + ".idx"}; }

 private:
  TokenWriterOptions o_;
  Env* env_ = nullptr;
  std::string prefix_;
  TmpFile bin_;
  std::vector<int32_t> lengths_;
  std::vector<uint8_t> buf_;
  uint64_t tokens_ = 0;
};

class RawWriter final : public TokenWriter {
 public:
  Status Open(const std::string& path, const TokenWriterOptions& o) {
    o_ = o;
    return f_.Open(o.env ? o.env : Env::Default(), path);
  }
  Status AddDocument(const int64_t* ids, size_t n) override {
    buf_.clear();
    STOKER_RETURN_IF_ERROR(EncodeTokenIds(f_.path(), docs_, ids, n, o_.dtype, o_.vocab_size, &buf_));
    ++docs_;
    tokens_ += n;
    return f_.Append(buf_.data(), buf_.size());
  }
  Status Finish() override { return f_.Commit(); }
  uint64_t documents() const override { return docs_; }
  uint64_t tokens() const override { return tokens_; }
  std::vector<std::string> outputs() const override { return {f_.path()}; }

 private:
  TokenWriterOptions o_;
  TmpFile f_;
  std::vector<uint8_t> buf_;
  uint64_t docs_ = 0, tokens_ = 0;
};

// llm.c shards: documents fill a shard up to shard_tokens; one that does not fit is split
// across shards, as llm.c's fineweb.py does. The header needs the count, so a shard is
// buffered (shard_tokens x 2 or 4 bytes; llm.c's scripts do the same).
class LlmcWriter final : public TokenWriter {
 public:
  Status Open(const std::string& pattern, const TokenWriterOptions& o) {
    o_ = o;
    env_ = o.env ? o.env : Env::Default();
    if (o_.dtype != TokenDType::kUInt16 && o_.dtype != TokenDType::kUInt32)
      return InvalidArgument("llm.c shards hold uint16 (GPT-2) or uint32 (Llama-3) tokens");
    if (pattern.find('%') == std::string::npos)
      return InvalidArgument("llm.c shard pattern '{}' needs a %d (e.g. out/train_%06d.bin)",
                             pattern);
    pattern_ = pattern;
    if (o_.shard_tokens == 0) o_.shard_tokens = 100'000'000;
    if (o_.shard_tokens >= (1ull << 31)) return InvalidArgument("llm.c shards hold < 2^31 tokens");
    return Status::OK();
  }
  Status AddDocument(const int64_t* ids, size_t n) override {
    size_t done = 0;
    while (done < n) {
      uint64_t room = o_.shard_tokens - shard_count_;
      size_t take = static_cast<size_t>(std::min<uint64_t>(room, n - done));
      STOKER_RETURN_IF_ERROR(EncodeTokenIds(pattern_, docs_, ids + done, take, o_.dtype,
                                          o_.vocab_size, &buf_));
      shard_count_ += take;
      done += take;
      if (shard_count_ == o_.shard_tokens) STOKER_RETURN_IF_ERROR(FlushShard());
    }
    ++docs_;
    tokens_ += n;
    return Status::OK();
  }
  Status Finish() override { return shard_count_ > 0 || outputs_.empty() ? FlushShard() : Status::OK(); }
  uint64_t documents() const override { return docs_; }
  uint64_t tokens() const override { return tokens_; }
  std::vector<std::string> outputs() const override { return outputs_; }

 private:
  Status FlushShard() {
    char name[4096];
    std::snprintf(name, sizeof(name), pattern_.c_str(), static_cast<int>(outputs_.size()));
    TmpFile f;
    STOKER_RETURN_IF_ERROR(f.Open(env_, name));
    int32_t header[256] = {};
    header[0] = o_.dtype == TokenDType::kUInt16 ? kLlmcMagicGpt2 : kLlmcMagicLlama3;
    header[1] = o_.dtype == TokenDType::kUInt16 ? 1 : 7;
    header[2] = static_cast<int32_t>(shard_count_);
    STOKER_RETURN_IF_ERROR(f.Append(header, sizeof(header)));
    STOKER_RETURN_IF_ERROR(f.Append(buf_.data(), buf_.size()));
    STOKER_RETURN_IF_ERROR(f.Commit());
    outputs_.push_back(name);
    buf_.clear();
    shard_count_ = 0;
    return Status::OK();
  }
  TokenWriterOptions o_;
  Env* env_ = nullptr;
  std::string pattern_;
  std::vector<uint8_t> buf_;
  std::vector<std::string> outputs_;
  uint64_t shard_count_ = 0, docs_ = 0, tokens_ = 0;
};

}  // namespace

Result<std::unique_ptr<TokenWriter>> OpenTokenWriter(const std::string& spec,
                                                     const TokenWriterOptions& o) {
  size_t colon = spec.find(':');
  if (colon == std::string::npos)
    return InvalidArgument("token writer spec '{}' needs a format: megatron:PREFIX, "
                           "nanogpt:FILE.bin, llmc:PATTERN_%06d.bin, arrow:FILE, parquet:FILE",
                           spec);
  std::string fmt = spec.substr(0, colon), path = spec.substr(colon + 1);
  if (path.empty()) return InvalidArgument("token writer spec '{}' has no path", spec);
  if (fmt == "megatron") {
    auto w = std::make_unique<MegatronWriter>();
    STOKER_RETURN_IF_ERROR(w->Open(path, o));
    return std::unique_ptr<TokenWriter>(std::move(w));
  }
  if (fmt == "nanogpt" || fmt == "raw") {
    auto w = std::make_unique<RawWriter>();
    STOKER_RETURN_IF_ERROR(w->Open(path, o));
    return std::unique_ptr<TokenWriter>(std::move(w));
  }
  if (fmt == "llmc") {
    auto w = std::make_unique<LlmcWriter>();
    STOKER_RETURN_IF_ERROR(w->Open(path, o));
    return std::unique_ptr<TokenWriter>(std::move(w));
  }
  if (fmt == "arrow" || fmt == "parquet") return OpenArrowTokenWriter(fmt, path, o);
  return InvalidArgument("unknown token format '{}' (megatron, nanogpt, llmc, arrow, parquet)",
                         fmt);
}

}  // namespace stoker
