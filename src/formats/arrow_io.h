// What stoker's Arrow-based readers share (Parquet datasets, Delta Lake checkpoints): the
// one boundary with Arrow's throwing API, and an arrow::io view of a stoker file so that
// every Arrow read goes through Env. Internal: include only where STOKER_HAVE_PARQUET.
#pragma once

#if STOKER_HAVE_PARQUET

#include <cstdint>
#include <algorithm>
#include <memory>
#include <string>

#include <arrow/buffer.h>
#include <arrow/io/interfaces.h>

#include "core/status.h"
#include "io/env.h"

namespace stoker {

// The one boundary with Arrow's throwing API. Parquet's C++ readers and writers report
// malformed files and failed writes by throwing (parquet::ParquetException, std::exception);
// every call into them runs inside CatchArrow, which turns a throw into a Status with
// `code` and `context`. stoker's own code in this file never throws.
template <typename F>
inline Status CatchArrow(StatusCode code, const std::string& context, F&& f) noexcept {
  try {
    return f();
  } catch (const std::exception& e) {
    return Status(code, fmt::format("{}: {}", context, e.what()));
  } catch (...) {
    return Status(code, fmt::format("{}: unknown exception from Arrow", context));
  }
}

// arrow::io view of a stoker RandomAccessFile (so Parquet reads go through Env).
class EnvArrowFile final : public arrow::io::RandomAccessFile {
 public:
  explicit EnvArrowFile(std::unique_ptr<stoker::RandomAccessFile> f) : f_(std::move(f)) {}
  arrow::Status Close() override {
    closed_ = true;
    return arrow::Status::OK();
  }
  bool closed() const override { return closed_; }
  arrow::Result<int64_t> Tell() const override { return pos_; }
  arrow::Status Seek(int64_t p) override {
    pos_ = p;
    return arrow::Status::OK();
  }
  arrow::Result<int64_t> GetSize() override { return static_cast<int64_t>(f_->size()); }
  arrow::Result<int64_t> ReadAt(int64_t position, int64_t nbytes, void* out) override {
    if (position < 0 || nbytes < 0) return arrow::Status::Invalid("negative read");
    auto r = f_->ReadAt(static_cast<uint64_t>(position), static_cast<size_t>(nbytes),
                        static_cast<uint8_t*>(out));
    if (!r.ok()) return arrow::Status::IOError(r.status().message());
    return static_cast<int64_t>(*r);
  }
  arrow::Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position,
                                                       int64_t nbytes) override {
    int64_t size = static_cast<int64_t>(f_->size());
    if (position > size) position = size;
    nbytes = std::min(nbytes, size - position);
    ARROW_ASSIGN_OR_RAISE(auto buf, arrow::AllocateResizableBuffer(nbytes));
    ARROW_ASSIGN_OR_RAISE(int64_t n, ReadAt(position, nbytes, buf->mutable_data()));
    ARROW_RETURN_NOT_OK(buf->Resize(n));
    return std::shared_ptr<arrow::Buffer>(std::move(buf));
  }
  arrow::Result<int64_t> Read(int64_t nbytes, void* out) override {
    ARROW_ASSIGN_OR_RAISE(int64_t n, ReadAt(pos_, nbytes, out));
    pos_ += n;
    return n;
  }
  arrow::Result<std::shared_ptr<arrow::Buffer>> Read(int64_t nbytes) override {
    ARROW_ASSIGN_OR_RAISE(auto b, ReadAt(pos_, nbytes));
    pos_ += b->size();
    return b;
  }

 private:
  std::unique_ptr<stoker::RandomAccessFile> f_;
  int64_t pos_ = 0;
  bool closed_ = false;
};

}  // namespace stoker

#endif  // STOKER_HAVE_PARQUET
