#include "io/memory_env.h"

#include <cstdint>
#include <algorithm>
#include <cstring>

namespace stoker {
namespace {

std::string Norm(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// Reads a snapshot-free view: the bytes are shared with the Env, so a file being written is
// read as it grows (the writer only appends; readers and the writer share the Env's lock).
class MemRead final : public RandomAccessFile {
 public:
  MemRead(std::string path, std::shared_ptr<std::vector<uint8_t>> data, std::mutex* mu)
      : path_(std::move(path)), data_(std::move(data)), mu_(mu) {}
  Result<size_t> ReadAt(uint64_t offset, size_t n, uint8_t* dst) const override {
    std::lock_guard<std::mutex> lk(*mu_);
    if (offset >= data_->size()) return size_t{0};
    size_t k = static_cast<size_t>(std::min<uint64_t>(n, data_->size() - offset));
    if (k) std::memcpy(dst, data_->data() + offset, k);
    return k;
  }
  uint64_t size() const override {
    std::lock_guard<std::mutex> lk(*mu_);
    return data_->size();
  }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  std::shared_ptr<std::vector<uint8_t>> data_;
  std::mutex* mu_;
};

class MemWrite final : public WritableFile {
 public:
  MemWrite(std::string path, std::shared_ptr<std::vector<uint8_t>> data, std::mutex* mu)
      : path_(std::move(path)), data_(std::move(data)), mu_(mu) {}
  Status Append(const void* p, size_t n) override {
    if (closed_) return IOError("{}: append after close", path_);
    std::lock_guard<std::mutex> lk(*mu_);
    const auto* b = static_cast<const uint8_t*>(p);
    data_->insert(data_->end(), b, b + n);
    written_ += n;
    return Status::OK();
  }
  Status Flush() override { return Status::OK(); }
  Status Sync() override { return Status::OK(); }
  Status Close() override {
    closed_ = true;
    return Status::OK();
  }
  uint64_t bytes_written() const override { return written_; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  std::shared_ptr<std::vector<uint8_t>> data_;
  std::mutex* mu_;
  uint64_t written_ = 0;
  bool closed_ = false;
};

}  // namespace

Result<std::unique_ptr<RandomAccessFile>> MemoryEnv::NewRandomAccessFile(const std::string& path,
                                                                         const OpenOptions&) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = files_.find(Norm(path));
  if (it == files_.end()) return NotFound("{}: no such file", path);
  return std::unique_ptr<RandomAccessFile>(new MemRead(path, it->second, &mu_));
}

Result<std::unique_ptr<WritableFile>> MemoryEnv::NewWritableFile(const std::string& path) {
  std::lock_guard<std::mutex> lk(mu_);
  std::string p = Norm(path);
  if (dirs_.count(p)) return IOError("{}: is a directory", path);
  auto data = std::make_shared<std::vector<uint8_t>>();
  files_[p] = data;  // truncates, as open(O_TRUNC)
  return std::unique_ptr<WritableFile>(new MemWrite(path, data, &mu_));
}

Result<FileInfo> MemoryEnv::Stat(const std::string& path) {
  std::lock_guard<std::mutex> lk(mu_);
  std::string p = Norm(path);
  auto it = files_.find(p);
  if (it != files_.end()) return FileInfo{it->second->size(), false, 0};
  if (dirs_.count(p)) return FileInfo{0, true, 0};
  std::string prefix = p + "/";
  for (auto f = files_.lower_bound(prefix); f != files_.end(); ++f) {
    if (f->first.compare(0, prefix.size(), prefix) != 0) break;
    return FileInfo{0, true, 0};  // implied by a file inside it
  }
  return NotFound("{}: no such file or directory", path);
}

Result<std::vector<DirEntry>> MemoryEnv::ListDir(const std::string& path) {
  STOKER_ASSIGN_OR_RETURN(FileInfo info, Stat(path));
  if (!info.is_dir) return IOError("{}: not a directory", path);
  std::lock_guard<std::mutex> lk(mu_);
  std::string prefix = Norm(path) + "/";
  std::map<std::string, bool> names;  // sorted, deduplicated
  auto add = [&](const std::string& full, bool is_dir) {
    if (full.compare(0, prefix.size(), prefix) != 0 || full.size() == prefix.size()) return;
    std::string rest = full.substr(prefix.size());
    size_t slash = rest.find('/');
    if (slash == std::string::npos) {
      names.emplace(rest, is_dir);
    } else {
      names[rest.substr(0, slash)] = true;
    }
  };
  for (const auto& [p, d] : files_) add(p, false);
  for (const auto& d : dirs_) add(d, true);
  std::vector<DirEntry> out;
  for (const auto& [n, d] : names) out.push_back({n, d});
  return out;
}

Status MemoryEnv::CreateDirs(const std::string& path) {
  std::lock_guard<std::mutex> lk(mu_);
  std::string p = Norm(path);
  for (size_t i = 1; i <= p.size(); ++i)
    if (i == p.size() || p[i] == '/') {
      std::string d = p.substr(0, i);
      if (files_.count(d)) return IOError("{}: {} is a file", path, d);
      dirs_.insert(d);
    }
  return Status::OK();
}

Status MemoryEnv::RenameFile(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = files_.find(Norm(from));
  if (it == files_.end()) return NotFound("{}: no such file", from);
  Bytes b = it->second;
  files_.erase(it);
  files_[Norm(to)] = std::move(b);
  return Status::OK();
}

Status MemoryEnv::RemoveFile(const std::string& path) {
  std::lock_guard<std::mutex> lk(mu_);
  if (files_.erase(Norm(path)) == 0) return NotFound("{}: no such file", path);
  return Status::OK();
}

size_t MemoryEnv::file_count() const {
  std::lock_guard<std::mutex> lk(mu_);
  return files_.size();
}

}  // namespace stoker
