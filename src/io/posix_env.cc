#include <cstdint>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "io/env.h"
#include "io/object_env.h"

namespace stoker {
namespace {

Status ErrnoStatus(const std::string& what, const std::string& path, int err) {
  if (err == ENOENT) return NotFound("{} {}: {}", what, path, std::strerror(err));
  return IOError("{} {}: {}", what, path, std::strerror(err));
}

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }
  Result<size_t> ReadAt(uint64_t offset, size_t n, uint8_t* dst) const override {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, dst + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return IOError("read {} at offset {}: {}", path_, offset + done, std::strerror(errno));
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }
  uint64_t size() const override { return size_; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  int fd_;
  uint64_t size_;
};

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) (void)Close();
  }
  Status Append(const void* data, size_t n) override {
    const char* p = static_cast<const char*>(data);
    // Small writes are buffered; large ones go straight through.
    if (buf_.size() + n > kBuf) STOKER_RETURN_IF_ERROR(Flush());
    if (n >= kBuf) return WriteRaw(p, n);
    buf_.insert(buf_.end(), p, p + n);
    written_ += n;
    return Status::OK();
  }
  Status Flush() override {
    if (buf_.empty()) return Status::OK();
    Status st = WriteRaw(buf_.data(), buf_.size(), /*count=*/false);
    buf_.clear();
    return st;
  }
  Status Sync() override {
    STOKER_RETURN_IF_ERROR(Flush());
    if (::fdatasync(fd_) != 0) return ErrnoStatus("sync", path_, errno);
    return Status::OK();
  }
  Status Close() override {
    if (fd_ < 0) return Status::OK();
    Status st = Flush();
    if (::close(fd_) != 0 && st.ok()) st = ErrnoStatus("close", path_, errno);
    fd_ = -1;
    return st;
  }
  uint64_t bytes_written() const override { return written_; }
  const std::string& path() const override { return path_; }

 private:
  static constexpr size_t kBuf = 1 << 20;
  Status WriteRaw(const char* p, size_t n, bool count = true) {
    size_t done = 0;
    while (done < n) {
      ssize_t w = ::write(fd_, p + done, n - done);
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("write", path_, errno);
      }
      done += static_cast<size_t>(w);
    }
    if (count) written_ += n;
    return Status::OK();
  }
  std::string path_;
  int fd_;
  std::vector<char> buf_;
  uint64_t written_ = 0;
};

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const OpenOptions& opts) override {
    int flags = O_RDONLY | O_CLOEXEC;
    int fd = -1;
    if (opts.direct) fd = ::open(path.c_str(), flags | O_DIRECT);
    if (fd < 0) fd = ::open(path.c_str(), flags);
    if (fd < 0) return ErrnoStatus("open", path, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int e = errno;
      ::close(fd);
      return ErrnoStatus("stat", path, e);
    }
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      return InvalidArgument("open {}: is a directory", path);
    }
    return std::unique_ptr<RandomAccessFile>(
        new PosixRandomAccessFile(path, fd, static_cast<uint64_t>(st.st_size)));
  }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus("create", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }
  Result<FileInfo> Stat(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("stat", path, errno);
    FileInfo fi;
    fi.size = static_cast<uint64_t>(st.st_size);
    fi.is_dir = S_ISDIR(st.st_mode);
    fi.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
    return fi;
  }
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override {
    DIR* d = ::opendir(path.c_str());
    if (!d) return ErrnoStatus("list", path, errno);
    std::vector<DirEntry> out;
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      bool is_dir = false;
      if (e->d_type == DT_DIR) {
        is_dir = true;
      } else if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) {
        struct stat st;
        if (::stat(JoinPath(path, name).c_str(), &st) == 0) is_dir = S_ISDIR(st.st_mode);
      }
      out.push_back({std::move(name), is_dir});
    }
    ::closedir(d);
    std::sort(out.begin(), out.end(),
              [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    return out;
  }
  Status CreateDirs(const std::string& path) override {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return IOError("mkdir {}: {}", path, ec.message());
    return Status::OK();
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return ErrnoStatus("rename", from, errno);
    return Status::OK();
  }
  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return ErrnoStatus("remove", path, errno);
    return Status::OK();
  }
  Status DropCache(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open", path, errno);
    ::fdatasync(fd);
    int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    if (rc != 0) return IOError("fadvise {}: {}", path, std::strerror(rc));
    return Status::OK();
  }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv posix;
  // s3:// and gs:// paths go to the object-store Env (io/object_env.cc), the rest to posix.
  static Env* env = NewSchemeRouterEnv(&posix);
  return env;
}

Status RandomAccessFile::ReadExact(uint64_t offset, size_t n, uint8_t* dst) const {
  STOKER_ASSIGN_OR_RETURN(size_t got, ReadAt(offset, n, dst));
  if (got != n)
    return Corrupt("{}: truncated: wanted {} bytes at offset {}, file has {}", path(), n, offset,
                   size());
  return Status::OK();
}

Status Env::ReadFile(const std::string& path, std::vector<uint8_t>* out) {
  STOKER_ASSIGN_OR_RETURN(auto f, NewRandomAccessFile(path));
  out->resize(f->size());
  return f->ReadExact(0, out->size(), out->data());
}

Status Env::WriteFile(const std::string& path, const void* data, size_t n) {
  STOKER_ASSIGN_OR_RETURN(auto f, NewWritableFile(path));
  STOKER_RETURN_IF_ERROR(f->Append(data, n));
  return f->Close();
}

Status Env::WriteFileAtomic(const std::string& path, const void* data, size_t n) {
  std::string tmp = path + ".tmp";
  STOKER_RETURN_IF_ERROR(WriteFile(tmp, data, n));
  return RenameFile(tmp, path);
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  if (!b.empty() && b[0] == '/') return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}
std::string BaseName(const std::string& path) {
  auto p = path.find_last_of('/');
  return p == std::string::npos ? path : path.substr(p + 1);
}
std::string DirName(const std::string& path) {
  auto p = path.find_last_of('/');
  if (p == std::string::npos) return ".";
  if (p == 0) return "/";
  return path.substr(0, p);
}
std::string Extension(const std::string& path) {
  std::string b = BaseName(path);
  auto p = b.find_last_of('.');
  if (p == std::string::npos) return "";
  std::string e = b.substr(p + 1);
  for (auto& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

}  // namespace stoker
