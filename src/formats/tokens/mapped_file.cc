#include "formats/tokens/mapped_file.h"

#include <cstdint>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace stoker {

MappedFile::~MappedFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

Result<std::unique_ptr<MappedFile>> MappedFile::Open(Env* env, const std::string& path,
                                                     bool populate) {
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  if (env != nullptr && env != Env::Default()) {
    STOKER_RETURN_IF_ERROR(env->ReadFile(path, &f->copy_));
    f->data_ = f->copy_.data();
    f->size_ = f->copy_.size();
    return f;
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound("{}: no such file", path);
    return IOError("{}: open: {}", path, std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return IOError("{}: fstat: {}", path, std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return InvalidArgument("{} is a directory, not a token file", path);
  }
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_SHARED | (populate ? MAP_POPULATE : 0),
                     fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return IOError("{}: mmap {} bytes: {}", path, f->size_, std::strerror(e));
    }
    f->map_ = p;
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file
  return f;
}

void MappedFile::Advise(int advice) const {
  if (map_ != nullptr) ::madvise(map_, size_, advice);
}

}  // namespace stoker
