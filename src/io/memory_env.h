// An Env whose files live in memory: for tests (a whole dataset written and read without
// touching the disk) and for tools that stage small outputs. Thread-safe. Paths are plain
// strings ("/a/b"); directories exist once created (CreateDirs) or implied by a file in
// them. A file is visible while it is written (as on POSIX); RenameFile replaces the target.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "io/env.h"

namespace stoker {

class MemoryEnv final : public Env {
 public:
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const OpenOptions& opts = {}) override;
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  Result<FileInfo> Stat(const std::string& path) override;
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override;
  Status CreateDirs(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status RemoveFile(const std::string& path) override;
  Status DropCache(const std::string& path) override { return Status::OK(); }

  size_t file_count() const;

 private:
  using Bytes = std::shared_ptr<std::vector<uint8_t>>;
  mutable std::mutex mu_;
  std::map<std::string, Bytes> files_;
  std::set<std::string> dirs_;
};

}  // namespace stoker
