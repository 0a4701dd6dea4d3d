// The one I/O seam: every read and write of stoker goes through an Env, so tests can
// inject EIO, short reads and latency, or count reads (see FaultInjectionEnv).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace stoker {

// A file opened for positional reads. ReadAt is safe to call concurrently.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to n bytes at offset into dst; returns the bytes read (short only at EOF).
  virtual Result<size_t> ReadAt(uint64_t offset, size_t n, uint8_t* dst) const = 0;
  virtual uint64_t size() const = 0;
  virtual const std::string& path() const = 0;
  // The object's version as the store names it (S3/GCS ETag) when the Env knows one, else "".
  // A cache keys its entries on (path, size, version).
  virtual std::string version() const { return {}; }
  // Reads exactly n bytes or fails with kCorrupt ("truncated") naming path and offset.
  Status ReadExact(uint64_t offset, size_t n, uint8_t* dst) const;
};

// A file opened for appending. Not thread-safe.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(const void* data, size_t n) = 0;
  virtual Status Flush() = 0;
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
  virtual uint64_t bytes_written() const = 0;
  virtual const std::string& path() const = 0;
};

struct FileInfo {
  uint64_t size = 0;
  bool is_dir = false;
  int64_t mtime_ns = 0;
  std::string version;  // object stores: the ETag; "" where the Env has none (local files)
};

struct DirEntry {
  std::string name;  // base name
  bool is_dir = false;
};

struct OpenOptions {
  bool direct = false;  // O_DIRECT when the file system allows it (cold reads); object
                        // stores: no read-ahead blocks, every read is its own request
};

class Env {
 public:
  virtual ~Env() = default;
  virtual Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const OpenOptions& opts = {}) = 0;
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  virtual Result<FileInfo> Stat(const std::string& path) = 0;
  // Entries sorted by name.
  virtual Result<std::vector<DirEntry>> ListDir(const std::string& path) = 0;
  virtual Status CreateDirs(const std::string& path) = 0;
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  virtual Status RemoveFile(const std::string& path) = 0;
  // Drops the file's pages from the page cache (posix_fadvise DONTNEED).
  virtual Status DropCache(const std::string& path) = 0;

  bool FileExists(const std::string& path) { return Stat(path).ok(); }
  // Whole-file helpers.
  Status ReadFile(const std::string& path, std::vector<uint8_t>* out);
  Status WriteFile(const std::string& path, const void* data, size_t n);
  // Writes path.tmp then renames: a crash never leaves a half-written `path`.
  Status WriteFileAtomic(const std::string& path, const void* data, size_t n);

  static Env* Default();
};

// Forwards every call to a target Env; subclass to override a few methods.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const OpenOptions& opts = {}) override {
    return target_->NewRandomAccessFile(path, opts);
  }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return target_->NewWritableFile(path);
  }
  Result<FileInfo> Stat(const std::string& path) override { return target_->Stat(path); }
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override {
    return target_->ListDir(path);
  }
  Status CreateDirs(const std::string& path) override { return target_->CreateDirs(path); }
  Status RenameFile(const std::string& a, const std::string& b) override {
    return target_->RenameFile(a, b);
  }
  Status RemoveFile(const std::string& path) override { return target_->RemoveFile(path); }
  Status DropCache(const std::string& path) override { return target_->DropCache(path); }

 private:
  Env* target_;
};

// Path helpers.
std::string JoinPath(const std::string& a, const std::string& b);
std::string BaseName(const std::string& path);
std::string DirName(const std::string& path);
std::string Extension(const std::string& path);  // lower-case, without the dot; "" if none

}  // namespace stoker
