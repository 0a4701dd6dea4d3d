// gzip streams over the Env seam (zlib): whole-file and in-memory decompression, a
// sequential reader, and a RandomAccessFile view of a gzip file's decompressed bytes that
// is cheap for forward reads (a read behind the position restarts from the start).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/env.h"

namespace stoker {

// True if the file starts with the gzip magic bytes.
bool IsGzipFile(const RandomAccessFile& file);
// Decompresses a whole gzip/zlib file (concatenated members accepted).
Status GunzipFile(const RandomAccessFile& file, std::vector<uint8_t>* out);
// Decompresses gzip bytes held in memory (concatenated members accepted) into `out`; at
// most `max_out` bytes (a larger result is kCorrupt: a decompression bomb or damage).
// Errors say what went wrong; the caller adds which file and member.
Status GunzipBuffer(const uint8_t* data, size_t n, std::vector<uint8_t>* out,
                    uint64_t max_out = 1ull << 30);

// Sequential gzip reader over a RandomAccessFile.
class GzipReader {
 public:
  explicit GzipReader(std::shared_ptr<RandomAccessFile> file);
  ~GzipReader();
  GzipReader(const GzipReader&) = delete;
  GzipReader& operator=(const GzipReader&) = delete;
  // Reads up to n bytes; fewer only at the end of the stream. dst may be null (skip).
  Result<size_t> Read(uint8_t* dst, size_t n);
  uint64_t position() const { return out_pos_; }

 private:
  std::shared_ptr<RandomAccessFile> file_;
  struct State;
  std::unique_ptr<State> st_;
  uint64_t in_pos_ = 0, out_pos_ = 0;
  bool eof_ = false;
};

// The decompressed bytes of a gzip file as a RandomAccessFile. size() is unknown until
// the stream has been read to its end (kUnknownSize before). Reads at or after the stream
// position decompress forward (skipping what lies between); a read behind it restarts the
// stream from the start, counted in restarts(). Thread-safe (one stream, one lock): made
// for sequential use.
class GzipStreamFile final : public RandomAccessFile {
 public:
  static constexpr uint64_t kUnknownSize = ~uint64_t{0};
  explicit GzipStreamFile(std::shared_ptr<RandomAccessFile> file);
  ~GzipStreamFile() override;
  Result<size_t> ReadAt(uint64_t offset, size_t n, uint8_t* dst) const override;
  uint64_t size() const override;
  const std::string& path() const override { return file_->path(); }
  uint64_t position() const;
  uint64_t restarts() const;

 private:
  std::shared_ptr<RandomAccessFile> file_;
  mutable std::mutex mu_;
  mutable std::unique_ptr<GzipReader> rd_;
  mutable uint64_t size_ = kUnknownSize;
  mutable uint64_t restarts_ = 0;
};

}  // namespace stoker
