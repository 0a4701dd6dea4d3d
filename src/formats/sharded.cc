#include "formats/sharded.h"

#include <cstdint>
#include <cctype>
#include <cstring>
#include <mutex>

namespace stoker {

namespace {

// The first bytes of an object fetched once, on the first read that falls inside them; other
// reads go to the object.
class PrefixBufferedFile final : public RandomAccessFile {
 public:
  static constexpr uint64_t kPrefix = 4096;
  explicit PrefixBufferedFile(std::unique_ptr<RandomAccessFile> f) : f_(std::move(f)) {}
  Result<size_t> ReadAt(uint64_t offset, size_t n, uint8_t* dst) const override {
    const uint64_t have = std::min<uint64_t>(kPrefix, f_->size());
    if (offset >= have || n > have - offset) return f_->ReadAt(offset, n, dst);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!loaded_) {
        std::string buf(have, '\0');
        STOKER_RETURN_IF_ERROR(f_->ReadExact(0, have, reinterpret_cast<uint8_t*>(buf.data())));
        prefix_ = std::move(buf);
        loaded_ = true;
      }
    }
    std::memcpy(dst, prefix_.data() + offset, n);
    return n;
  }
  uint64_t size() const override { return f_->size(); }
  const std::string& path() const override { return f_->path(); }
  std::string version() const override { return f_->version(); }

 private:
  std::unique_ptr<RandomAccessFile> f_;
  mutable std::mutex mu_;
  mutable bool loaded_ = false;
  mutable std::string prefix_;  // written once under mu_, then only read
};

}  // namespace

Result<IndexingHandle> IndexingHandle::Open(Env* env, const std::string& path) {
  IndexingHandle h;
  h.env_ = env;
  h.path_ = path;
  h.object_ = IsObjectStoreUri(path);
  OpenOptions probe;
  probe.direct = h.object_;
  STOKER_ASSIGN_OR_RETURN(auto f, env->NewRandomAccessFile(path, probe));
  if (h.object_)
    h.probe_ = std::make_shared<PrefixBufferedFile>(std::move(f));
  else
    h.probe_ = std::move(f);
  return h;
}

SiblingFiles::SiblingFiles(Env* env, const std::vector<std::string>& shards) : env_(env) {
  for (const std::string& s : shards) {
    if (!IsObjectStoreUri(s)) continue;
    std::string dir = DirName(s);
    if (listed_.count(dir)) continue;
    auto entries = env->ListDir(dir);
    if (!entries.ok()) continue;  // each probe asks the store
    std::set<std::string>& names = listed_[dir];
    for (const DirEntry& e : *entries)
      if (!e.is_dir) names.insert(e.name);
  }
}

bool SiblingFiles::Exists(const std::string& path) const {
  if (IsObjectStoreUri(path)) {
    auto it = listed_.find(DirName(path));
    if (it != listed_.end()) return it->second.count(BaseName(path)) > 0;
  }
  return env_->FileExists(path);
}

std::shared_ptr<RandomAccessFile> IndexingHandle::ForScan() const {
  if (!object_) return probe_;
  auto g = env_->NewRandomAccessFile(path_);
  return g.ok() ? std::shared_ptr<RandomAccessFile>(std::move(g).value()) : probe_;
}

Result<std::vector<std::string>> ResolveShardList(Env* env, const std::string& spec,
                                                  std::initializer_list<const char*> exts) {
  std::vector<std::string> out;
  if (spec.find('{') != std::string::npos) {
    STOKER_ASSIGN_OR_RETURN(out, ExpandBraces(spec));
    return out;
  }
  auto st = env->Stat(spec);
  if (!st.ok()) return st.status();
  if (!st->is_dir) return std::vector<std::string>{spec};
  STOKER_ASSIGN_OR_RETURN(auto entries, env->ListDir(spec));
  for (const auto& e : entries) {
    if (e.is_dir) continue;
    std::string name = e.name;
    bool match = false;
    for (const char* x : exts) {
      std::string suffix = std::string(".") + x;
      if (name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        match = true;
    }
    if (match) out.push_back(JoinPath(spec, name));
  }
  if (out.empty()) return InvalidArgument("{}: no shard files found in the directory", spec);
  return out;
}

Result<std::string> FormatShardPattern(const std::string& pattern, int shard) {
  std::string out;
  int conversions = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c != '%') {
      out += c;
      continue;
    }
    if (i + 1 < pattern.size() && pattern[i + 1] == '%') {
      out += '%';
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool zero = false;
    if (j < pattern.size() && pattern[j] == '0') {
      zero = true;
      ++j;
    }
    int width = 0;
    while (j < pattern.size() && std::isdigit(static_cast<unsigned char>(pattern[j])) && width < 100)
      width = width * 10 + (pattern[j++] - '0');
    if (j >= pattern.size() || pattern[j] != 'd')
      return InvalidArgument("shard pattern '{}': only %d or %0Nd are allowed", pattern);
    std::string num = std::to_string(shard);
    if (static_cast<int>(num.size()) < width)
      num = std::string(width - num.size(), zero ? '0' : ' ') + num;
    out += num;
    ++conversions;
    i = j;
  }
  if (conversions > 1)
    return InvalidArgument("shard pattern '{}' has more than one %d", pattern);
  if (conversions == 0 && shard > 0)
    return InvalidArgument(
        "output '{}' needs a %d (e.g. train-%06d.tar) to hold more than one shard", pattern);
  return out;
}

ShardedWriter::ShardedWriter(std::string pattern, WriterOptions opts)
    : pattern_(std::move(pattern)), opts_(std::move(opts)) {
  next_shard_ = static_cast<int>(opts_.first_shard);
}

Status ShardedWriter::Prepare(const std::string& pattern, WriterOptions* opts) {
  if (!opts->env) opts->env = Env::Default();
  STOKER_ASSIGN_OR_RETURN(std::string first, FormatShardPattern(pattern, 0));
  std::string dir = DirName(first);
  if (!dir.empty() && dir != ".") STOKER_RETURN_IF_ERROR(opts->env->CreateDirs(dir));
  return Status::OK();
}

ShardedWriter::~ShardedWriter() {
  if (file_) file_->Close().IgnoreError();
}

Status ShardedWriter::StartShard() {
  STOKER_ASSIGN_OR_RETURN(shard_path_, FormatShardPattern(pattern_, next_shard_));
  ++next_shard_;
  STOKER_ASSIGN_OR_RETURN(file_, opts_.env->NewWritableFile(shard_path_ + ".partial"));
  return BeginShard(file_.get());
}

Status ShardedWriter::FinishShard() {
  STOKER_RETURN_IF_ERROR(EndShard());
  STOKER_RETURN_IF_ERROR(file_->Sync());
  STOKER_RETURN_IF_ERROR(file_->Close());
  uint64_t bytes = file_->bytes_written();
  uint64_t samples = shard_samples();
  file_.reset();
  if (opts_.write_index) STOKER_RETURN_IF_ERROR(WriteIndex(shard_path_));
  STOKER_RETURN_IF_ERROR(opts_.env->RenameFile(shard_path_ + ".partial", shard_path_));
  done_.push_back({shard_path_, samples, bytes});
  return Status::OK();
}

Status ShardedWriter::Write(const Sample& s) {
  if (closed_) return InvalidArgument("write after Close");
  STOKER_RETURN_IF_ERROR(CheckSample(s));
  if (!file_) STOKER_RETURN_IF_ERROR(StartShard());
  STOKER_RETURN_IF_ERROR(AppendSample(s));
  bool full = shard_bytes() >= opts_.shard_bytes ||
              (opts_.samples_per_shard > 0 && shard_samples() >= opts_.samples_per_shard);
  if (full) STOKER_RETURN_IF_ERROR(FinishShard());
  return Status::OK();
}

Status ShardedWriter::Close() {
  if (closed_) return Status::OK();
  if (!file_ && done_.empty() && opts_.first_shard == 0) STOKER_RETURN_IF_ERROR(StartShard());
  if (file_) STOKER_RETURN_IF_ERROR(FinishShard());
  closed_ = true;
  return Status::OK();
}

}  // namespace stoker
