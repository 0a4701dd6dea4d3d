#include "formats/tokens/token_store.h"

#include <cstdint>
#include <algorithm>
#include <bit>
#include <cstring>
#include <fnmatch.h>
#include <limits>

#include "formats/checksum.h"
#include "formats/dataset.h"
#include "formats/tokens/mapped_file.h"
#include "formats/tokens/token_store_internal.h"

namespace stoker {

size_t TokenDTypeSize(TokenDType t) {
  switch (t) {
    case TokenDType::kUInt8:
    case TokenDType::kInt8:
      return 1;
    case TokenDType::kInt16:
    case TokenDType::kUInt16:
      return 2;
    case TokenDType::kInt32:
    case TokenDType::kUInt32:
      return 4;
    case TokenDType::kInt64:
      return 8;
  }
  return 0;
}

const char* TokenDTypeName(TokenDType t) {
  switch (t) {
    case TokenDType::kUInt8: return "uint8";
    case TokenDType::kInt8: return "int8";
    case TokenDType::kInt16: return "int16";
    case TokenDType::kInt32: return "int32";
    case TokenDType::kInt64: return "int64";
    case TokenDType::kUInt16: return "uint16";
    case TokenDType::kUInt32: return "uint32";
  }
  return "?";
}

Result<TokenDType> ParseTokenDType(const std::string& n) {
  for (TokenDType t : {TokenDType::kUInt8, TokenDType::kInt8, TokenDType::kInt16,
                       TokenDType::kInt32, TokenDType::kInt64, TokenDType::kUInt16,
                       TokenDType::kUInt32})
    if (n == TokenDTypeName(t)) return t;
  return InvalidArgument("token dtype '{}' is not one of uint8, int8, int16, int32, int64, "
                         "uint16, uint32", n);
}

TokenDType OptimalTokenDType(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::kUInt16 : TokenDType::kInt32;
}

namespace {

template <typename S>
S LoadAs(const uint8_t* p) {
  S v;
  std::memcpy(&v, p, sizeof(S));
  return v;
}

template <typename S, typename T>
void CopyConv(const uint8_t* src, uint64_t n, T* out) {
  if constexpr (sizeof(S) == sizeof(T) && std::is_signed_v<S> == std::is_signed_v<T>) {
    std::memcpy(out, src, n * sizeof(T));
  } else {
    for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<T>(LoadAs<S>(src + i * sizeof(S)));
  }
}

template <typename S>
void MinMaxOf(const uint8_t* src, uint64_t n, int64_t* lo, int64_t* hi) {
  S mn = std::numeric_limits<S>::max(), mx = std::numeric_limits<S>::lowest();
  for (uint64_t i = 0; i < n; ++i) {
    S v = LoadAs<S>(src + i * sizeof(S));
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
  }
  *lo = static_cast<int64_t>(mn);
  *hi = static_cast<int64_t>(mx);
}

}  // namespace

int64_t TokenSpan::At(uint64_t i) const {
  const uint8_t* p = data + i * TokenDTypeSize(dtype);
  switch (dtype) {
    case TokenDType::kUInt8: return *p;
    case TokenDType::kInt8: return static_cast<int8_t>(*p);
    case TokenDType::kInt16: return LoadAs<int16_t>(p);
    case TokenDType::kUInt16: return LoadAs<uint16_t>(p);
    case TokenDType::kInt32: return LoadAs<int32_t>(p);
    case TokenDType::kUInt32: return LoadAs<uint32_t>(p);
    case TokenDType::kInt64: return LoadAs<int64_t>(p);
  }
  return 0;
}

template <typename T>
void TokenSpan::CopyTo(uint64_t begin, uint64_t n, T* out) const {
  const uint8_t* p = data + begin * TokenDTypeSize(dtype);
  switch (dtype) {
    case TokenDType::kUInt8: CopyConv<uint8_t>(p, n, out); break;
    case TokenDType::kInt8: CopyConv<int8_t>(p, n, out); break;
    case TokenDType::kInt16: CopyConv<int16_t>(p, n, out); break;
    case TokenDType::kUInt16: CopyConv<uint16_t>(p, n, out); break;
    case TokenDType::kInt32: CopyConv<int32_t>(p, n, out); break;
    case TokenDType::kUInt32: CopyConv<uint32_t>(p, n, out); break;
    case TokenDType::kInt64: CopyConv<int64_t>(p, n, out); break;
  }
}
template void TokenSpan::CopyTo<int32_t>(uint64_t, uint64_t, int32_t*) const;
template void TokenSpan::CopyTo<int64_t>(uint64_t, uint64_t, int64_t*) const;

void TokenSpan::Prefetch(uint64_t begin, uint64_t n) const {
  if (n == 0) return;
  // The first line, and the first line of every following page: that starts the page walk
  // (a TLB miss per random 4 KiB page) and the hardware's stream prefetcher, which fetches
  // the rest of the page. Every line was tried too: as fast, with 16x the instructions.
  const uint64_t isz = TokenDTypeSize(dtype);
  const uintptr_t first = reinterpret_cast<uintptr_t>(data + begin * isz);
  const uintptr_t last = first + n * isz - 1;  // inside the document: nothing past it
  __builtin_prefetch(reinterpret_cast<const void*>(first), 0, 3);
  for (uintptr_t a = (first | 4095) + 1; a <= last; a += 4096)
    __builtin_prefetch(reinterpret_cast<const void*>(a), 0, 3);
}

void TokenSpan::MinMax(uint64_t begin, uint64_t n, int64_t* lo, int64_t* hi) const {
  const uint8_t* p = data + begin * TokenDTypeSize(dtype);
  switch (dtype) {
    case TokenDType::kUInt8: MinMaxOf<uint8_t>(p, n, lo, hi); break;
    case TokenDType::kInt8: MinMaxOf<int8_t>(p, n, lo, hi); break;
    case TokenDType::kInt16: MinMaxOf<int16_t>(p, n, lo, hi); break;
    case TokenDType::kUInt16: MinMaxOf<uint16_t>(p, n, lo, hi); break;
    case TokenDType::kInt32: MinMaxOf<int32_t>(p, n, lo, hi); break;
    case TokenDType::kUInt32: MinMaxOf<uint32_t>(p, n, lo, hi); break;
    case TokenDType::kInt64: MinMaxOf<int64_t>(p, n, lo, hi); break;
  }
}

// ---------------------------------------------------------------- Megatron .idx

namespace {
constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kMegatronHeader = 34;
}  // namespace

int32_t MegatronIndexView::length(uint64_t i) const { return LoadAs<int32_t>(lengths + 4 * i); }
int64_t MegatronIndexView::pointer(uint64_t i) const {
  return LoadAs<int64_t>(pointers + 8 * i);
}
int64_t MegatronIndexView::document_index(uint64_t i) const {
  return LoadAs<int64_t>(document_indices + 8 * i);
}

Status ParseMegatronIndex(const std::string& path, const uint8_t* idx, uint64_t size,
                          uint64_t bin_size, MegatronIndexView* out) {
  if (size < kMegatronHeader)
    return Corrupt("{}: {} bytes, shorter than the 34-byte Megatron index header", path, size);
  if (std::memcmp(idx, kMegatronMagic, 9) != 0)
    return Corrupt("{}: not a Megatron index (magic is not MMIDIDX)", path);
  uint64_t version = LoadAs<uint64_t>(idx + 9);
  if (version != 1) return Corrupt("{}: index version {} (only 1 exists)", path, version);
  uint8_t code = idx[17];
  if (!(code >= 1 && code <= 8) || code == 6 || code == 7)
    return Corrupt("{}: dtype code {} is not an integer token type (1-5, 8)", path, code);
  out->dtype = static_cast<TokenDType>(code);
  uint64_t s = LoadAs<uint64_t>(idx + 18), d = LoadAs<uint64_t>(idx + 26);
  // Each sequence needs 12 bytes and each document index 8: bound before multiplying.
  if (s > size / 12 || d > size / 8)
    return Corrupt("{}: header claims {} sequences and {} document indices, more than a "
                   "{}-byte file holds", path, s, d, size);
  uint64_t need = kMegatronHeader + 12 * s + 8 * d;
  if (size != need && size != need + s)
    return Corrupt("{}: {} bytes, but {} sequences and {} document indices need {} (or {} "
                   "with modes): truncated or not an index", path, size, s, d, need, need + s);
  out->sequence_count = s;
  out->document_count = d;
  out->lengths = idx + kMegatronHeader;
  out->pointers = out->lengths + 4 * s;
  out->document_indices = out->pointers + 8 * s;
  out->modes = size == need + s && s > 0 ? out->document_indices + 8 * d : nullptr;
  if (d == 0 || out->document_index(0) != 0)
    return Corrupt("{}: document_indices must start with 0", path);
  for (uint64_t i = 1; i < d; ++i) {
    int64_t a = out->document_index(i - 1), b = out->document_index(i);
    if (b < a || static_cast<uint64_t>(b) > s)
      return Corrupt("{}: document_indices[{}] = {} after {} (must be non-decreasing, <= {})",
                     path, i, b, a, s);
  }
  if (static_cast<uint64_t>(out->document_index(d - 1)) != s)
    return Corrupt("{}: last document index {} != sequence count {}", path,
                   out->document_index(d - 1), s);
  const uint64_t isz = TokenDTypeSize(out->dtype);
  uint64_t expect = 0;
  for (uint64_t i = 0; i < s; ++i) {
    int32_t len = out->length(i);
    int64_t ptr = out->pointer(i);
    if (len < 0) return Corrupt("{}: document {} has negative length {}", path, i, len);
    if (ptr < 0 || static_cast<uint64_t>(ptr) != expect)
      return Corrupt("{}: document {} starts at byte {} of the .bin, expected {} (the .idx "
                     "does not describe this .bin)", path, i, ptr, expect);
    expect += static_cast<uint64_t>(len) * isz;
    if (expect > bin_size)
      return Corrupt("{}: document {} ends at byte {}, beyond the .bin's {} bytes (the .idx "
                     "does not match its .bin, or the .bin is truncated)", path, i, expect,
                     bin_size);
  }
  if (expect != bin_size)
    return Corrupt("{}: the index describes {} bytes of tokens but the .bin has {} (the .idx "
                   "does not match its .bin)", path, expect, bin_size);
  return Status::OK();
}

namespace {

class MegatronStore final : public TokenStore {
 public:
  static Result<std::unique_ptr<TokenStore>> Open(const std::string& prefix, Env* env) {
    auto s = std::unique_ptr<MegatronStore>(new MegatronStore());
    s->files_ = {prefix + ".bin", prefix + ".idx"};
    STOKER_ASSIGN_OR_RETURN(s->bin_, MappedFile::Open(env, s->files_[0]));
    STOKER_ASSIGN_OR_RETURN(s->idx_, MappedFile::Open(env, s->files_[1]));
    STOKER_RETURN_IF_ERROR(ParseMegatronIndex(s->files_[1], s->idx_->data(), s->idx_->size(),
                                              s->bin_->size(), &s->view_));
    s->tokens_ = s->bin_->size() / TokenDTypeSize(s->view_.dtype);
    return std::unique_ptr<TokenStore>(std::move(s));
  }
  uint64_t num_documents() const override { return view_.sequence_count; }
  uint64_t num_tokens() const override { return tokens_; }
  TokenDType dtype() const override { return view_.dtype; }
  TokenSpan Document(uint64_t i) const override {
    return {bin_->data() + view_.pointer(i), static_cast<uint64_t>(view_.length(i)),
            view_.dtype};
  }
  uint64_t DocumentLength(uint64_t i) const override {
    return static_cast<uint64_t>(view_.length(i));
  }
  void PrefetchDocument(uint64_t i) const override { view_.Prefetch(i); }
  void DocumentLengths(uint64_t first, uint64_t n, uint32_t* out) const override {
    // int32 lengths, checked non-negative at open (they add up to the .bin's size).
    if (n) std::memcpy(out, view_.lengths + 4 * first, 4 * n);
  }
  std::string Location(uint64_t i) const override {
    return fmt::format("{}: document {}", files_[0], i);
  }
  std::string format() const override { return "megatron"; }
  const std::vector<std::string>& files() const override { return files_; }

 private:
  std::vector<std::string> files_;
  std::unique_ptr<MappedFile> bin_, idx_;
  MegatronIndexView view_;
  uint64_t tokens_ = 0;
};

}  // namespace

// ---------------------------------------------------------------- span stores

uint64_t SpanStore::FileOf(uint64_t doc) const {
  auto it = std::upper_bound(file_first_doc_.begin(), file_first_doc_.end(), doc);
  return static_cast<uint64_t>(it - file_first_doc_.begin()) - 1;
}

std::string SpanStore::Location(uint64_t i) const {
  uint64_t f = FileOf(i);
  return fmt::format("{}: document {} (document {} of the file)", files_[f], i,
                     i - file_first_doc_[f]);
}

void SpanStore::AddFile(const std::string& path) {
  files_.push_back(path);
  file_first_doc_.push_back(doc_ptr_.size());
}

void SpanStore::AddDoc(const uint8_t* p, uint64_t len) {
  doc_ptr_.push_back(p);
  doc_len_.push_back(len);
  tokens_ += len;
}

void SpanStore::SplitDocs(const uint8_t* base, uint64_t n, int64_t eos, bool eos_starts) {
  if (eos < 0 || n == 0) {
    AddDoc(base, n);
    return;
  }
  TokenSpan all{base, n, dtype_};
  const size_t isz = TokenDTypeSize(dtype_);
  uint64_t start = 0;
  auto scan = [&](auto tag) {
    using S = decltype(tag);
    const S e = static_cast<S>(eos);
    for (uint64_t i = 0; i < n; ++i) {
      if (LoadAs<S>(base + i * sizeof(S)) != e) continue;
      if (eos_starts) {  // EOS opens a document (llm.c prepends it)
        if (i > start) AddDoc(base + start * isz, i - start);
        start = i;
      } else {  // EOS closes one (nanoGPT and Megatron append it)
        AddDoc(base + start * isz, i + 1 - start);
        start = i + 1;
      }
    }
  };
  switch (dtype_) {
    case TokenDType::kUInt16: scan(uint16_t{}); break;
    case TokenDType::kUInt32: scan(uint32_t{}); break;
    case TokenDType::kInt32: scan(int32_t{}); break;
    case TokenDType::kInt64: scan(int64_t{}); break;
    default:
      for (uint64_t i = 0; i < n; ++i) {
        if (all.At(i) != eos) continue;
        AddDoc(base + start * isz, i + 1 - start);
        start = i + 1;
      }
  }
  if (start < n) AddDoc(base + start * isz, n - start);
}

namespace {

class RawStore final : public SpanStore {
 public:
  RawStore(TokenDType t, std::string fmt) : SpanStore(t), format_(std::move(fmt)) {}
  std::string format() const override { return format_; }
  Status AddRaw(Env* env, const std::string& path, int64_t eos) {
    STOKER_ASSIGN_OR_RETURN(auto m, MappedFile::Open(env, path));
    const size_t isz = TokenDTypeSize(dtype_);
    if (m->size() % isz != 0)
      return Corrupt("{}: {} bytes is not a whole number of {} tokens (truncated?)", path,
                     m->size(), TokenDTypeName(dtype_));
    AddFile(path);
    SplitDocs(m->data(), m->size() / isz, eos, false);
    maps_.push_back(std::move(m));
    return Status::OK();
  }
  Status AddLlmc(Env* env, const std::string& path, int64_t eos) {
    STOKER_ASSIGN_OR_RETURN(auto m, MappedFile::Open(env, path));
    TokenDType t;
    uint64_t n = 0;
    STOKER_RETURN_IF_ERROR(ParseLlmcHeader(path, m->data(), m->size(), &t, &n));
    if (!maps_.empty() && t != dtype_)
      return Corrupt("{}: {} tokens, but the first shard {} holds {}", path, TokenDTypeName(t),
                     files_[0], TokenDTypeName(dtype_));
    dtype_ = t;
    AddFile(path);
    SplitDocs(m->data() + kLlmcHeaderBytes, n, eos, true);
    maps_.push_back(std::move(m));
    return Status::OK();
  }

 private:
  std::string format_;
  std::vector<std::unique_ptr<MappedFile>> maps_;
};

}  // namespace

Status ParseLlmcHeader(const std::string& path, const uint8_t* data, uint64_t size,
                       TokenDType* dtype, uint64_t* num_tokens) {
  if (size < kLlmcHeaderBytes)
    return Corrupt("{}: {} bytes, shorter than the 1024-byte llm.c header (truncated)", path,
                   size);
  int32_t magic = LoadAs<int32_t>(data), version = LoadAs<int32_t>(data + 4);
  int32_t count = LoadAs<int32_t>(data + 8);
  if (magic == kLlmcMagicGpt2) {
    if (version != 1)
      return Corrupt("{}: llm.c GPT-2 shard (magic 20240520) with version {}, expected 1",
                     path, version);
    *dtype = TokenDType::kUInt16;
  } else if (magic == kLlmcMagicLlama3) {
    if (version != 7)
      return Corrupt("{}: llm.c Llama-3 shard (magic 20240801) with version {}, expected 7",
                     path, version);
    *dtype = TokenDType::kUInt32;
  } else {
    return Corrupt("{}: magic {} is not an llm.c shard's (20240520 or 20240801)", path, magic);
  }
  if (count < 0) return Corrupt("{}: negative token count {} in the header", path, count);
  uint64_t want = kLlmcHeaderBytes + static_cast<uint64_t>(count) * TokenDTypeSize(*dtype);
  if (size != want)
    return Corrupt("{}: header says {} tokens ({} bytes with the header), the file has {} bytes "
                   "({})", path, count, want, size, size < want ? "truncated" : "trailing bytes");
  *num_tokens = static_cast<uint64_t>(count);
  return Status::OK();
}

// ---------------------------------------------------------------- checksums

struct TokenStreamHasher::Impl {
  XXH64Hasher h;
};
TokenStreamHasher::TokenStreamHasher() : impl_(std::make_unique<Impl>()) {}
TokenStreamHasher::~TokenStreamHasher() = default;
void TokenStreamHasher::Add(const int64_t* ids, size_t n) {
  static_assert(std::endian::native == std::endian::little);
  impl_->h.Update(ids, n * sizeof(int64_t));
}
uint64_t TokenStreamHasher::Digest() const { return impl_->h.Digest(); }

uint64_t TokenStreamChecksum(const TokenStore& store) {
  TokenStreamHasher h;
  std::vector<int64_t> buf(1 << 16);
  for (uint64_t d = 0; d < store.num_documents(); ++d) {
    TokenSpan sp = store.Document(d);
    for (uint64_t at = 0; at < sp.length; at += buf.size()) {
      uint64_t n = std::min<uint64_t>(buf.size(), sp.length - at);
      sp.CopyTo(at, n, buf.data());
      h.Add(buf.data(), n);
    }
  }
  return h.Digest();
}

// ---------------------------------------------------------------- opening

Result<std::vector<std::string>> ExpandTokenPaths(Env* env, const std::string& pattern) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= pattern.size()) {
    size_t comma = pattern.find(',', start);
    // Commas inside braces belong to the brace pattern.
    size_t brace = pattern.find('{', start);
    if (brace != std::string::npos && comma != std::string::npos && brace < comma) {
      size_t close = pattern.find('}', brace);
      comma = close == std::string::npos ? std::string::npos : pattern.find(',', close);
    }
    std::string part = pattern.substr(start, comma == std::string::npos ? std::string::npos
                                                                        : comma - start);
    if (!part.empty()) {
      STOKER_ASSIGN_OR_RETURN(auto names, ExpandBraces(part));
      for (const auto& n : names) {
        std::string base = BaseName(n);
        if (base.find_first_of("*?[") == std::string::npos) {
          out.push_back(n);
          continue;
        }
        std::string dir = DirName(n);
        STOKER_ASSIGN_OR_RETURN(auto entries, env->ListDir(dir.empty() ? "." : dir));
        size_t before = out.size();
        for (const auto& e : entries)
          if (!e.is_dir && fnmatch(base.c_str(), e.name.c_str(), 0) == 0)
            out.push_back(dir.empty() ? e.name : JoinPath(dir, e.name));
        if (out.size() == before) return NotFound("no file matches {}", n);
      }
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out.empty()) return InvalidArgument("no token files in '{}'", pattern);
  return out;
}

namespace {

struct Spec {
  std::string fmt, path;
  TokenStoreOptions o;
};

Result<Spec> ParseSpec(const std::string& spec, const TokenStoreOptions& opts) {
  Spec s;
  s.o = opts;
  std::string rest = spec;
  static const char* kFormats[] = {"megatron", "nanogpt", "raw", "llmc", "arrow", "parquet"};
  for (const char* f : kFormats) {
    std::string p = std::string(f) + ":";
    if (rest.rfind(p, 0) == 0) {
      s.fmt = f == std::string("raw") ? "nanogpt" : f;
      rest = rest.substr(p.size());
      break;
    }
  }
  size_t q = rest.find('?');
  if (q != std::string::npos) {
    std::string query = rest.substr(q + 1);
    rest = rest.substr(0, q);
    size_t pos = 0;
    while (pos <= query.size()) {
      size_t amp = query.find('&', pos);
      std::string kv = query.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
      size_t eq = kv.find('=');
      if (!kv.empty()) {
        if (eq == std::string::npos) return InvalidArgument("option '{}' in '{}' needs =", kv, spec);
        std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
        if (k == "dtype") {
          STOKER_ASSIGN_OR_RETURN(s.o.raw_dtype, ParseTokenDType(v));
        } else if (k == "eos") {
          char* end = nullptr;
          s.o.eos = std::strtoll(v.c_str(), &end, 10);
          if (v.empty() || *end) return InvalidArgument("eos={} is not an integer", v);
        } else if (k == "column") {
          s.o.column = v;
        } else {
          return InvalidArgument("unknown token store option '{}' in '{}' (dtype, eos, column)",
                                 k, spec);
        }
      }
      if (amp == std::string::npos) break;
      pos = amp + 1;
    }
  }
  s.path = rest;
  return s;
}

}  // namespace

Result<std::unique_ptr<TokenStore>> OpenTokenStore(const std::string& spec,
                                                   const TokenStoreOptions& opts) {
  STOKER_ASSIGN_OR_RETURN(Spec s, ParseSpec(spec, opts));
  Env* env = s.o.env ? s.o.env : Env::Default();
  std::string path = s.path;
  if (s.fmt.empty()) {
    std::string ext = Extension(path);
    if (ext == "idx" || (ext == "bin" && env->FileExists(path.substr(0, path.size() - 4) + ".idx")) ||
        (ext.empty() && env->FileExists(path + ".idx"))) {
      s.fmt = "megatron";
    } else if (ext == "arrow") {
      s.fmt = "arrow";
    } else if (ext == "parquet") {
      s.fmt = "parquet";
    } else {
      STOKER_ASSIGN_OR_RETURN(auto first, ExpandTokenPaths(env, path));
      STOKER_ASSIGN_OR_RETURN(auto f, env->NewRandomAccessFile(first[0]));
      uint8_t head[4] = {0, 0, 0, 0};
      int32_t magic = 0;
      if (f->size() >= 4 && f->ReadExact(0, 4, head).ok()) std::memcpy(&magic, head, 4);
      s.fmt = magic == kLlmcMagicGpt2 || magic == kLlmcMagicLlama3 ? "llmc" : "nanogpt";
    }
  }
  if (s.fmt == "megatron") {
    std::string ext = Extension(path);
    if (ext == "idx" || ext == "bin") path = path.substr(0, path.size() - 4);
    return MegatronStore::Open(path, s.o.env);
  }
  if (s.fmt == "arrow" || s.fmt == "parquet") return OpenArrowTokenStore(s.fmt, path, s.o);
  STOKER_ASSIGN_OR_RETURN(auto paths, ExpandTokenPaths(env, path));
  if (s.fmt == "llmc") {
    auto st = std::make_unique<RawStore>(TokenDType::kUInt16, "llmc");
    for (const auto& p : paths) STOKER_RETURN_IF_ERROR(st->AddLlmc(s.o.env, p, s.o.eos));
    return std::unique_ptr<TokenStore>(std::move(st));
  }
  if (s.o.raw_dtype != TokenDType::kUInt16 && s.o.raw_dtype != TokenDType::kUInt32 &&
      s.o.raw_dtype != TokenDType::kInt32 && s.o.raw_dtype != TokenDType::kInt64)
    return InvalidArgument("raw token files hold uint16, uint32, int32 or int64, not {}",
                           TokenDTypeName(s.o.raw_dtype));
  auto st = std::make_unique<RawStore>(s.o.raw_dtype, "nanogpt");
  for (const auto& p : paths) STOKER_RETURN_IF_ERROR(st->AddRaw(s.o.env, p, s.o.eos));
  return std::unique_ptr<TokenStore>(std::move(st));
}

}  // namespace stoker
