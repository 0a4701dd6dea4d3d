#include "telemetry/byte_source.h"

#include <cstdint>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace stoker::telemetry {
namespace {

// Raw bytes: either a file (chunked ReadAt) or memory.
class RawInput {
 public:
  virtual ~RawInput() = default;
  virtual Result<size_t> Read(uint8_t* dst, size_t n) = 0;
  virtual uint64_t offset() const = 0;
  virtual uint64_t size() const = 0;
};

class FileInput final : public RawInput {
 public:
  explicit FileInput(std::unique_ptr<RandomAccessFile> f) : f_(std::move(f)) {}
  Result<size_t> Read(uint8_t* dst, size_t n) override {
    if (off_ >= f_->size()) return size_t{0};
    STOKER_ASSIGN_OR_RETURN(size_t got, f_->ReadAt(off_, n, dst));
    off_ += got;
    return got;
  }
  uint64_t offset() const override { return off_; }
  uint64_t size() const override { return f_->size(); }

 private:
  std::unique_ptr<RandomAccessFile> f_;
  uint64_t off_ = 0;
};

class MemInput final : public RawInput {
 public:
  explicit MemInput(std::string_view d) : d_(d) {}
  Result<size_t> Read(uint8_t* dst, size_t n) override {
    size_t k = std::min(n, d_.size() - off_);
    if (k > 0) std::memcpy(dst, d_.data() + off_, k);
    off_ += k;
    return k;
  }
  uint64_t offset() const override { return off_; }
  uint64_t size() const override { return d_.size(); }

 private:
  std::string_view d_;
  size_t off_ = 0;
};

class Source final : public ByteSource {
 public:
  Source(std::unique_ptr<RawInput> in, std::string name)
      : in_(std::move(in)), name_(std::move(name)) {}
  ~Source() override {
    if (z_init_) inflateEnd(&zs_);
  }

  Status Init() {
    // Sniff the gzip magic from the first raw bytes.
    in_buf_.resize(std::min<uint64_t>(1 << 20, std::max<uint64_t>(4096, in_->size())));
    STOKER_ASSIGN_OR_RETURN(size_t got, in_->Read(in_buf_.data(), in_buf_.size()));
    in_len_ = got;
    in_pos_ = 0;
    gzip_ = got >= 2 && in_buf_[0] == 0x1f && in_buf_[1] == 0x8b;
    if (gzip_) {
      std::memset(&zs_, 0, sizeof(zs_));
      if (inflateInit2(&zs_, 15 + 32) != Z_OK) return Internal("{}: inflateInit failed", name_);
      z_init_ = true;
    }
    return Status::OK();
  }

  Result<size_t> Read(char* dst, size_t n) override {
    if (n == 0) return size_t{0};
    if (!gzip_) {
      if (in_pos_ < in_len_) {
        size_t k = std::min(n, in_len_ - in_pos_);
        std::memcpy(dst, in_buf_.data() + in_pos_, k);
        in_pos_ += k;
        return k;
      }
      return in_->Read(reinterpret_cast<uint8_t*>(dst), n);
    }
    while (true) {
      if (z_done_) return size_t{0};
      if (in_pos_ >= in_len_) {
        STOKER_ASSIGN_OR_RETURN(size_t got, in_->Read(in_buf_.data(), in_buf_.size()));
        in_len_ = got;
        in_pos_ = 0;
        if (got == 0) {
          if (member_started_) {
            return Corrupt("{}: truncated gzip stream at compressed byte {}", name_,
                           in_->offset());
          }
          z_done_ = true;
          return size_t{0};
        }
      }
      zs_.next_in = in_buf_.data() + in_pos_;
      zs_.avail_in = static_cast<uInt>(in_len_ - in_pos_);
      zs_.next_out = reinterpret_cast<Bytef*>(dst);
      zs_.avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
      int rc = inflate(&zs_, Z_NO_FLUSH);
      size_t consumed = (in_len_ - in_pos_) - zs_.avail_in;
      in_pos_ += consumed;
      size_t produced = reinterpret_cast<char*>(zs_.next_out) - dst;
      if (consumed > 0 || produced > 0) member_started_ = true;
      if (rc == Z_STREAM_END) {
        // Another gzip member may follow (concatenated .gz files).
        inflateReset(&zs_);
        member_started_ = false;
        if (produced > 0) return produced;
        continue;
      }
      if (rc == Z_BUF_ERROR && consumed == 0 && produced == 0 && in_pos_ < in_len_) {
        return Corrupt("{}: corrupt gzip data near compressed byte {}", name_, in_->offset());
      }
      if (rc != Z_OK && rc != Z_BUF_ERROR) {
        return Corrupt("{}: corrupt gzip data near compressed byte {}: {}", name_,
                       in_->offset() - (in_len_ - in_pos_), zs_.msg ? zs_.msg : "inflate error");
      }
      if (produced > 0) return produced;
    }
  }
  const std::string& name() const override { return name_; }
  uint64_t raw_offset() const override { return in_->offset(); }
  uint64_t raw_size() const override { return in_->size(); }

 private:
  std::unique_ptr<RawInput> in_;
  std::string name_;
  std::vector<uint8_t> in_buf_;
  size_t in_len_ = 0, in_pos_ = 0;
  bool gzip_ = false, z_init_ = false, z_done_ = false, member_started_ = false;
  z_stream zs_{};
};

}  // namespace

Result<std::unique_ptr<ByteSource>> OpenByteSource(Env* env, const std::string& path) {
  STOKER_ASSIGN_OR_RETURN(auto f, env->NewRandomAccessFile(path));
  auto s = std::make_unique<Source>(std::make_unique<FileInput>(std::move(f)), path);
  STOKER_RETURN_IF_ERROR(s->Init());
  return std::unique_ptr<ByteSource>(std::move(s));
}

std::unique_ptr<ByteSource> MemoryByteSource(std::string_view data, std::string name) {
  auto s = std::make_unique<Source>(std::make_unique<MemInput>(data), std::move(name));
  s->Init().IgnoreError();  // memory reads cannot fail; inflateInit failure shows on Read
  return s;
}

Result<std::string> ReadHead(Env* env, const std::string& path, size_t n) {
  STOKER_ASSIGN_OR_RETURN(auto src, OpenByteSource(env, path));
  std::string out(n, '\0');
  size_t have = 0;
  while (have < n) {
    auto r = src->Read(out.data() + have, n - have);
    if (!r.ok()) {
      if (have > 0) break;  // a truncated gzip still has a readable head
      return r.status();
    }
    if (*r == 0) break;
    have += *r;
  }
  out.resize(have);
  return out;
}

}  // namespace stoker::telemetry
