#include "io/gzip.h"

#include <cstdint>
#include <zlib.h>

#include <algorithm>
#include <cstring>

namespace stoker {

bool IsGzipFile(const RandomAccessFile& file) {
  uint8_t m[2];
  auto r = file.ReadAt(0, 2, m);
  return r.ok() && *r == 2 && m[0] == 0x1f && m[1] == 0x8b;
}

struct GzipReader::State {
  z_stream zs{};
  std::vector<uint8_t> in;
  std::vector<uint8_t> skip;
  bool init = false;
};

GzipReader::GzipReader(std::shared_ptr<RandomAccessFile> file)
    : file_(std::move(file)), st_(new State) {
  st_->in.resize(256 << 10);
  if (inflateInit2(&st_->zs, 15 + 32) == Z_OK) st_->init = true;
}

GzipReader::~GzipReader() {
  if (st_->init) inflateEnd(&st_->zs);
}

Result<size_t> GzipReader::Read(uint8_t* dst, size_t n) {
  if (!st_->init) return Internal("zlib init failed for {}", file_->path());
  z_stream& zs = st_->zs;
  size_t done = 0;
  while (done < n && !eof_) {
    if (zs.avail_in == 0 && in_pos_ < file_->size()) {
      size_t want = static_cast<size_t>(std::min<uint64_t>(st_->in.size(), file_->size() - in_pos_));
      STOKER_ASSIGN_OR_RETURN(size_t got, file_->ReadAt(in_pos_, want, st_->in.data()));
      if (got == 0) return Corrupt("{}: short read at offset {}", file_->path(), in_pos_);
      in_pos_ += got;
      zs.next_in = st_->in.data();
      zs.avail_in = static_cast<uInt>(got);
    }
    uint8_t* out = dst;
    size_t room = n - done;
    if (!dst) {
      if (st_->skip.size() < (64u << 10)) st_->skip.resize(64 << 10);
      out = st_->skip.data();
      room = std::min(room, st_->skip.size());
    } else {
      out = dst + done;
    }
    room = std::min<size_t>(room, 1u << 30);
    zs.next_out = out;
    zs.avail_out = static_cast<uInt>(room);
    int rc = inflate(&zs, Z_NO_FLUSH);
    size_t produced = room - zs.avail_out;
    done += produced;
    out_pos_ += produced;
    if (rc == Z_STREAM_END) {
      if (zs.avail_in > 0 || in_pos_ < file_->size()) {
        inflateReset(&zs);  // another gzip member follows
      } else {
        eof_ = true;
      }
    } else if (rc == Z_BUF_ERROR) {
      if (zs.avail_in == 0 && in_pos_ >= file_->size())
        return Corrupt("{}: gzip stream ends early (at uncompressed offset {})", file_->path(),
                       out_pos_);
    } else if (rc != Z_OK) {
      return Corrupt("{}: gzip data error near compressed offset {} ({})", file_->path(),
                     in_pos_ - zs.avail_in, zs.msg ? zs.msg : "inflate failed");
    }
    if (rc == Z_OK && produced == 0 && zs.avail_in == 0 && in_pos_ >= file_->size())
      return Corrupt("{}: gzip stream ends early (at uncompressed offset {})", file_->path(),
                     out_pos_);
  }
  return done;
}

Status GunzipFile(const RandomAccessFile& file, std::vector<uint8_t>* out) {
  // A non-owning shared_ptr: the reader does not outlive this call.
  std::shared_ptr<RandomAccessFile> f(const_cast<RandomAccessFile*>(&file),
                                      [](RandomAccessFile*) {});
  GzipReader rd(f);
  out->clear();
  std::vector<uint8_t> buf(1 << 20);
  for (;;) {
    STOKER_ASSIGN_OR_RETURN(size_t n, rd.Read(buf.data(), buf.size()));
    out->insert(out->end(), buf.data(), buf.data() + n);
    if (n < buf.size()) return Status::OK();
  }
}

Status GunzipBuffer(const uint8_t* data, size_t n, std::vector<uint8_t>* out, uint64_t max_out) {
  out->clear();
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) return Internal("zlib init failed");
  zs.next_in = const_cast<uint8_t*>(data);
  zs.avail_in = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
  size_t fed = zs.avail_in;
  Status st;
  for (;;) {
    if (out->size() >= max_out) {
      st = Corrupt("gzip data decompresses to more than {} bytes", max_out);
      break;
    }
    size_t room = static_cast<size_t>(std::min<uint64_t>(
        std::max<size_t>(out->size(), 64u << 10), max_out + 1 - out->size()));
    size_t old = out->size();
    out->resize(old + room);
    zs.next_out = out->data() + old;
    zs.avail_out = static_cast<uInt>(std::min<size_t>(room, 1u << 30));
    size_t avail = zs.avail_out;
    int rc = inflate(&zs, Z_NO_FLUSH);
    out->resize(old + (avail - zs.avail_out));
    if (zs.avail_in == 0 && fed < n) {
      size_t more = std::min<size_t>(n - fed, 1u << 30);
      zs.next_in = const_cast<uint8_t*>(data + fed);
      zs.avail_in = static_cast<uInt>(more);
      fed += more;
    }
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      // Another gzip member follows (as `cat a.gz b.gz`); trailing zero padding ends it.
      bool zeros = true;
      for (uInt i = 0; i < zs.avail_in && zeros; ++i) zeros = zs.next_in[i] == 0;
      if (zeros && fed == n) break;
      inflateReset(&zs);
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      st = Corrupt("gzip data ends early ({} compressed bytes gave {})", n, out->size());
      break;
    }
    st = Corrupt("gzip data error at compressed byte {} of {} ({})", fed - zs.avail_in, n,
                 zs.msg ? zs.msg : "inflate failed");
    break;
  }
  inflateEnd(&zs);
  if (!st.ok()) out->clear();
  return st;
}

GzipStreamFile::GzipStreamFile(std::shared_ptr<RandomAccessFile> file) : file_(std::move(file)) {}
GzipStreamFile::~GzipStreamFile() = default;

Result<size_t> GzipStreamFile::ReadAt(uint64_t offset, size_t n, uint8_t* dst) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (size_ != kUnknownSize && offset >= size_) return size_t{0};
  if (!rd_ || offset < rd_->position()) {
    if (rd_) ++restarts_;
    rd_ = std::make_unique<GzipReader>(file_);
  }
  if (offset > rd_->position()) {
    uint64_t skip = offset - rd_->position();
    STOKER_ASSIGN_OR_RETURN(size_t got, rd_->Read(nullptr, skip));
    if (got < skip) {
      size_ = rd_->position();
      return size_t{0};
    }
  }
  STOKER_ASSIGN_OR_RETURN(size_t got, rd_->Read(dst, n));
  if (got < n) size_ = rd_->position();
  return got;
}

uint64_t GzipStreamFile::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return size_;
}
uint64_t GzipStreamFile::position() const {
  std::lock_guard<std::mutex> lk(mu_);
  return rd_ ? rd_->position() : 0;
}
uint64_t GzipStreamFile::restarts() const {
  std::lock_guard<std::mutex> lk(mu_);
  return restarts_;
}

}  // namespace stoker
