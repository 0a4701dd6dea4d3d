#include "formats/lmdb_dataset.h"

#include <cstdint>
#include <signal.h>

#include <iterator>
#include <unistd.h>

#include <cstring>
#include <mutex>

#include "core/fault_guard.h"
#include "formats/builtin.h"
#include "formats/unavailable.h"

#if STOKER_HAVE_LMDB
#include <lmdb.h>
#include <nlohmann/json.hpp>
#endif

namespace stoker {

namespace {

template <typename T>
void PutLE(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out->append(b, sizeof(T));
}

template <typename T>
bool GetLE(const uint8_t*& p, const uint8_t* end, T* v) {
  if (static_cast<size_t>(end - p) < sizeof(T)) return false;
  std::memcpy(v, p, sizeof(T));
  p += sizeof(T);
  return true;
}

constexpr char kMagic[4] = {'S', 'T', 'K', '1'};
constexpr const char* kMetaKey = "__stoker__";

}  // namespace

void EncodeLmdbSample(const Sample& s, std::string* out) {
  out->clear();
  out->append(kMagic, 4);
  PutLE<uint32_t>(out, static_cast<uint32_t>(s.key.size()));
  out->append(s.key);
  PutLE<int64_t>(out, s.label);
  PutLE<uint32_t>(out, static_cast<uint32_t>(s.num_fields));
  for (size_t i = 0; i < s.num_fields; ++i) {
    const Field& f = s.fields[i];
    PutLE<uint16_t>(out, static_cast<uint16_t>(f.name.size()));
    out->append(f.name);
    PutLE<uint32_t>(out, static_cast<uint32_t>(f.data.size()));
    out->append(reinterpret_cast<const char*>(f.data.data()), f.data.size());
  }
}

Status DecodeLmdbSample(const uint8_t* data, size_t n, Sample* out) {
  const uint8_t* p = data;
  const uint8_t* end = data + n;
  if (n < 4 || std::memcmp(p, kMagic, 4) != 0)
    return Corrupt("value does not start with the stoker magic 'STK1' ({} bytes)", n);
  p += 4;
  uint32_t klen = 0;
  if (!GetLE(p, end, &klen) || static_cast<size_t>(end - p) < klen)
    return Corrupt("truncated value: key length {} at byte 4 of {}", klen, n);
  out->key.assign(reinterpret_cast<const char*>(p), klen);
  p += klen;
  int64_t label = 0;
  uint32_t nf = 0;
  if (!GetLE(p, end, &label) || !GetLE(p, end, &nf))
    return Corrupt("truncated value: no label / field count after the key ({} bytes)", n);
  out->label = label;
  if (nf > 4096) return Corrupt("implausible field count {}", nf);
  for (uint32_t i = 0; i < nf; ++i) {
    uint16_t nlen = 0;
    if (!GetLE(p, end, &nlen) || static_cast<size_t>(end - p) < nlen)
      return Corrupt("truncated value: name of field {} at byte {}", i, p - data);
    std::string name(reinterpret_cast<const char*>(p), nlen);
    p += nlen;
    uint32_t dlen = 0;
    if (!GetLE(p, end, &dlen) || static_cast<size_t>(end - p) < dlen)
      return Corrupt("truncated value: field '{}' claims {} bytes at byte {} of {}", name, dlen,
                     p - data, n);
    Field* f = out->AddField(name);
    f->data.assign(p, p + dlen);
    p += dlen;
  }
  if (p != end) return Corrupt("{} trailing bytes after the last field", end - p);
  return Status::OK();
}

const char* SniffFieldName(const uint8_t* d, size_t n) {
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return "jpg";
  if (n >= 8 && std::memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) return "png";
  return "data";
}

#if STOKER_HAVE_LMDB

bool LmdbAvailable() { return true; }

namespace {

Status MdbError(int rc, const std::string& what, const std::string& path) {
  std::string m = mdb_strerror(rc);
  if (rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND || rc == MDB_INVALID ||
      rc == MDB_VERSION_MISMATCH || rc == MDB_BAD_TXN)
    return Corrupt("{}: {}: {}", path, what, m);
  return IOError("{}: {}: {}", path, what, m);
}

std::string IndexKey(uint64_t i) { return fmt::format("{:010d}", i); }

class LmdbDataset final : public Dataset {
 public:
  static Result<std::unique_ptr<LmdbDataset>> Open(const std::string& path,
                                                   const DatasetOptions& opts) {
    std::unique_ptr<LmdbDataset> ds(new LmdbDataset());
    ds->path_ = path;
    while (ds->path_.size() > 1 && ds->path_.back() == '/') ds->path_.pop_back();
    Env* env = opts.env ? opts.env : Env::Default();
    STOKER_ASSIGN_OR_RETURN(FileInfo info, env->Stat(ds->path_));
    ds->subdir_ = info.is_dir;
    ds->data_file_ = ds->subdir_ ? JoinPath(ds->path_, "data.mdb") : ds->path_;
    STOKER_ASSIGN_OR_RETURN(FileInfo dinfo, env->Stat(ds->data_file_));
    ds->file_size_ = dinfo.size;
    {
      std::lock_guard<std::mutex> lk(ds->mu_);
      STOKER_RETURN_IF_ERROR(ds->OpenEnvLocked());
    }
    STOKER_RETURN_IF_ERROR(ds->Index());
    ds->shards_.push_back({ds->path_, 0, ds->size()});
    return ds;
  }

  ~LmdbDataset() override {
    std::lock_guard<std::mutex> lk(mu_);
    if (env_ && pid_ == ::getpid()) {
      for (MDB_txn* t : free_txns_) mdb_txn_abort(t);
      mdb_env_close(env_);
    }
  }

  uint64_t size() const override { return native_ ? count_ : keys_.size(); }
  const std::vector<ShardInfo>& shards() const override { return shards_; }
  std::string format() const override { return "lmdb"; }
  bool random_access_is_cheap() const override { return true; }

  std::string Location(uint64_t i) const override {
    return fmt::format("{}:record {} (key '{}')", path_, i, RecordKey(i));
  }

  std::string Key(uint64_t i) const override {
    if (!native_) return i < keys_.size() ? keys_[i] : std::string();
    Sample s;
    if (!Read(i, &s).ok()) return IndexKey(i);
    return s.key;
  }

  Status Read(uint64_t index, Sample* out) const override {
    out->Clear();
    if (index >= size())
      return InvalidArgument("{}: sample index {} out of range ({} samples)", path_, index,
                             size());
    STOKER_ASSIGN_OR_RETURN(MDB_txn * txn, AcquireTxn());
    std::string k = RecordKey(index);
    MDB_val key{k.size(), const_cast<char*>(k.data())};
    MDB_val val{0, nullptr};
    int rc = 0;
    auto get = [&] { rc = mdb_get(txn, dbi_, &key, &val); };
    if (int sig = RunFaultGuarded(get)) {
      // liblmdb ran off a damaged page: this transaction is not to be reused.
      mdb_txn_abort(txn);
      return Corrupt("{}: record {} (key '{}'): damaged LMDB page (liblmdb faulted with {} "
                     "following it)",
                     path_, index, k, sig == SIGBUS ? "SIGBUS" : "SIGSEGV");
    }
    Status st;
    if (rc == MDB_NOTFOUND) {
      st = Corrupt("{}: record {}: key '{}' is missing", path_, index, k);
    } else if (rc != 0) {
      st = MdbError(rc, fmt::format("record {} (key '{}')", index, k), path_);
    } else if (!InMap(val)) {
      st = Corrupt("{}: record {} (key '{}'): value lies outside the file (corrupt page)",
                   path_, index, k);
    } else {
      const auto* p = static_cast<const uint8_t*>(val.mv_data);
      if (native_) {
        st = DecodeLmdbSample(p, val.mv_size, out);
        if (!st.ok())
          st = st.WithContext(fmt::format("{}: record {} (key '{}')", path_, index, k));
      } else {
        out->key = k;
        Field* f = out->AddField(SniffFieldName(p, val.mv_size));
        f->data.assign(p, p + val.mv_size);
      }
    }
    ReleaseTxn(txn);
    if (!st.ok()) return st;
    out->location.clear();  // reuses the recycled sample's capacity
    fmt::format_to(std::back_inserter(out->location), "{}:record {}", path_, index);
    return Status::OK();
  }

  int env_opens() const {
    std::lock_guard<std::mutex> lk(mu_);
    return opens_;
  }

 private:
  LmdbDataset() = default;

  std::string RecordKey(uint64_t i) const {
    if (native_) return IndexKey(i);
    return i < keys_.size() ? keys_[i] : std::string();
  }

  // liblmdb trusts its pages; a corrupt overflow node can claim any size. The value must
  // at least fit in the file (the map is exactly the file, see OpenEnvLocked).
  bool InMap(const MDB_val& v) const { return v.mv_data != nullptr && v.mv_size <= file_size_; }

  Status OpenEnvLocked() const {
    MDB_env* env = nullptr;
    int rc = mdb_env_create(&env);
    if (rc != 0) return MdbError(rc, "mdb_env_create", path_);
    // Map exactly the file (LMDB raises it to the B-tree's last page if that is larger,
    // which the size check below rejects): no page of the map lies past end of file.
    if (file_size_ > 0) mdb_env_set_mapsize(env, file_size_);
    unsigned flags = MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS;
    if (!subdir_) flags |= MDB_NOSUBDIR;
    rc = mdb_env_open(env, path_.c_str(), flags, 0644);
    if (rc != 0) {
      mdb_env_close(env);
      if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH)
        return Corrupt("{}: not an LMDB file: {}", data_file_, mdb_strerror(rc));
      return MdbError(rc, "opening LMDB environment", path_);
    }
    // A truncated file would fault (SIGBUS) when a page past its end is touched: check
    // that every page the meta page claims lies inside the file.
    MDB_envinfo info;
    MDB_stat stat;
    mdb_env_info(env, &info);
    mdb_env_stat(env, &stat);
    uint64_t need = (static_cast<uint64_t>(info.me_last_pgno) + 1) * stat.ms_psize;
    if (need > file_size_) {
      mdb_env_close(env);
      return Corrupt("{}: truncated LMDB file: {} bytes, the B-tree needs {}", data_file_,
                     file_size_, need);
    }
    MDB_txn* txn = nullptr;
    rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn);
    if (rc != 0) {
      mdb_env_close(env);
      return MdbError(rc, "mdb_txn_begin", path_);
    }
    MDB_dbi dbi;
    rc = mdb_dbi_open(txn, nullptr, 0, &dbi);
    if (rc != 0) {
      mdb_txn_abort(txn);
      mdb_env_close(env);
      return MdbError(rc, "mdb_dbi_open", path_);
    }
    mdb_txn_reset(txn);
    env_ = env;
    dbi_ = dbi;
    pid_ = ::getpid();
    free_txns_.assign(1, txn);
    ++opens_;
    return Status::OK();
  }

  Result<MDB_txn*> AcquireTxn() const {
    std::unique_lock<std::mutex> lk(mu_);
    if (pid_ != ::getpid()) {
      // Forked child: the parent's env and transactions must not be used (nor closed)
      // here. Leave them and open our own.
      env_ = nullptr;
      free_txns_.clear();
      STOKER_RETURN_IF_ERROR(OpenEnvLocked());
    }
    if (!free_txns_.empty()) {
      MDB_txn* t = free_txns_.back();
      free_txns_.pop_back();
      lk.unlock();
      int rc = mdb_txn_renew(t);
      if (rc != 0) {
        mdb_txn_abort(t);
        return MdbError(rc, "mdb_txn_renew", path_);
      }
      return t;
    }
    MDB_env* env = env_;
    lk.unlock();
    MDB_txn* t = nullptr;
    int rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &t);
    if (rc != 0) return MdbError(rc, "mdb_txn_begin", path_);
    return t;
  }

  void ReleaseTxn(MDB_txn* t) const {
    mdb_txn_reset(t);
    std::lock_guard<std::mutex> lk(mu_);
    if (pid_ == ::getpid()) {
      free_txns_.push_back(t);
    }
  }

  // Native layout: the meta key gives the count. Otherwise: scan all keys once.
  Status Index() {
    STOKER_ASSIGN_OR_RETURN(MDB_txn * txn, AcquireTxn());
    MDB_val key{std::strlen(kMetaKey), const_cast<char*>(kMetaKey)};
    MDB_val val;
    int rc = 0;
    auto get = [&] { rc = mdb_get(txn, dbi_, &key, &val); };
    if (int sig = RunFaultGuarded(get)) {
      mdb_txn_abort(txn);
      return Corrupt("{}: damaged LMDB page (liblmdb faulted with {} reading the metadata key)",
                     path_, sig == SIGBUS ? "SIGBUS" : "SIGSEGV");
    }
    Status st;
    if (rc == 0 && InMap(val)) {
      auto j = nlohmann::json::parse(static_cast<const char*>(val.mv_data),
                                     static_cast<const char*>(val.mv_data) + val.mv_size,
                                     nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object() || !j.contains("samples") ||
          !j["samples"].is_number_unsigned()) {
        st = Corrupt("{}: key '{}' does not hold stoker's LMDB metadata", path_, kMetaKey);
      } else {
        native_ = true;
        count_ = j["samples"].get<uint64_t>();
      }
    } else if (rc != 0 && rc != MDB_NOTFOUND) {
      st = MdbError(rc, "reading the metadata key", path_);
    } else {
      MDB_cursor* cur = nullptr;
      rc = mdb_cursor_open(txn, dbi_, &cur);
      if (rc != 0) {
        st = MdbError(rc, "mdb_cursor_open", path_);
      } else {
        MDB_val k, v;
        uint64_t n = 0;
        MDB_cursor_op op = MDB_FIRST;
        auto next = [&] { rc = mdb_cursor_get(cur, &k, &v, op); };
        for (;; ++n, op = MDB_NEXT) {
          if (int sig = RunFaultGuarded(next)) {
            mdb_cursor_close(cur);  // read-only txn cursors are freed by hand
            mdb_txn_abort(txn);
            return Corrupt("{}: damaged LMDB page (liblmdb faulted with {} scanning keys after "
                           "record {})",
                           path_, sig == SIGBUS ? "SIGBUS" : "SIGSEGV", n);
          }
          if (rc != 0) break;
          std::string ks(static_cast<const char*>(k.mv_data), k.mv_size);
          if (ks.rfind("__", 0) == 0) continue;
          keys_.push_back(std::move(ks));
        }
        if (rc != MDB_NOTFOUND)
          st = MdbError(rc, fmt::format("scanning keys (after record {})", n), path_);
        mdb_cursor_close(cur);
      }
    }
    ReleaseTxn(txn);
    return st;
  }

  std::string path_, data_file_;
  bool subdir_ = false;
  uint64_t file_size_ = 0;
  bool native_ = false;
  uint64_t count_ = 0;
  std::vector<std::string> keys_;
  std::vector<ShardInfo> shards_;

  mutable std::mutex mu_;
  mutable MDB_env* env_ = nullptr;
  mutable MDB_dbi dbi_ = 0;
  mutable pid_t pid_ = 0;
  mutable int opens_ = 0;
  mutable std::vector<MDB_txn*> free_txns_;
};

class LmdbWriter final : public DatasetWriter {
 public:
  static Result<std::unique_ptr<DatasetWriter>> Open(const std::string& path,
                                                     const WriterOptions& opts) {
    std::unique_ptr<LmdbWriter> w(new LmdbWriter());
    w->path_ = path;
    w->partial_ = path + ".partial";
    w->env_io_ = opts.env ? opts.env : Env::Default();
    std::string dir = DirName(path);
    if (!dir.empty() && dir != ".") STOKER_RETURN_IF_ERROR(w->env_io_->CreateDirs(dir));
    if (w->env_io_->FileExists(w->partial_))
      STOKER_RETURN_IF_ERROR(w->env_io_->RemoveFile(w->partial_));
    STOKER_RETURN_IF_ERROR(w->OpenEnv());
    return std::unique_ptr<DatasetWriter>(std::move(w));
  }

  ~LmdbWriter() override {
    if (txn_) mdb_txn_abort(txn_);
    if (env_) mdb_env_close(env_);
  }

  Status Write(const Sample& s) override {
    if (closed_) return InvalidArgument("{}: Write after Close", path_);
    std::string v;
    EncodeLmdbSample(s, &v);
    pending_bytes_ += v.size();
    pending_.push_back({IndexKey(count_), std::move(v)});
    ++count_;
    STOKER_RETURN_IF_ERROR(PutLast());
    if (pending_bytes_ >= (64u << 20) || pending_.size() >= 4096) return Commit();
    return Status::OK();
  }

  Status Close() override {
    if (closed_) return Status::OK();
    closed_ = true;
    std::string meta = nlohmann::json{{"format", "stoker-lmdb"}, {"version", 1},
                                      {"samples", count_}}
                           .dump();
    pending_.push_back({kMetaKey, meta});
    STOKER_RETURN_IF_ERROR(PutLast());
    STOKER_RETURN_IF_ERROR(Commit());
    int rc = mdb_env_sync(env_, 1);
    if (rc != 0) return MdbError(rc, "mdb_env_sync", partial_);
    mdb_env_close(env_);
    env_ = nullptr;
    STOKER_RETURN_IF_ERROR(env_io_->RenameFile(partial_, path_));
    STOKER_ASSIGN_OR_RETURN(FileInfo info, env_io_->Stat(path_));
    shards_.push_back({path_, count_, info.size});
    return Status::OK();
  }

  const std::vector<WrittenShard>& shards() const override { return shards_; }

 private:
  LmdbWriter() = default;

  Status OpenEnv() {
    int rc = mdb_env_create(&env_);
    if (rc != 0) return MdbError(rc, "mdb_env_create", partial_);
    rc = mdb_env_set_mapsize(env_, mapsize_);
    if (rc != 0) return MdbError(rc, "mdb_env_set_mapsize", partial_);
    rc = mdb_env_open(env_, partial_.c_str(), MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC, 0644);
    if (rc != 0) return MdbError(rc, "creating LMDB file", partial_);
    return Begin();
  }

  Status Begin() {
    int rc = mdb_txn_begin(env_, nullptr, 0, &txn_);
    if (rc != 0) return MdbError(rc, "mdb_txn_begin", partial_);
    rc = mdb_dbi_open(txn_, nullptr, 0, &dbi_);
    if (rc != 0) return MdbError(rc, "mdb_dbi_open", partial_);
    return Status::OK();
  }

  int Put(const std::pair<std::string, std::string>& kv) {
    MDB_val k{kv.first.size(), const_cast<char*>(kv.first.data())};
    MDB_val v{kv.second.size(), const_cast<char*>(kv.second.data())};
    return mdb_put(txn_, dbi_, &k, &v, MDB_APPEND);
  }

  // Puts the newest pending record; when the map is full, grows it and replays the
  // uncommitted batch in a fresh transaction.
  Status PutLast() {
    int rc = Put(pending_.back());
    while (rc == MDB_MAP_FULL) {
      mdb_txn_abort(txn_);
      txn_ = nullptr;
      mapsize_ *= 2;
      rc = mdb_env_set_mapsize(env_, mapsize_);
      if (rc != 0) return MdbError(rc, "growing the map", partial_);
      STOKER_RETURN_IF_ERROR(Begin());
      for (const auto& kv : pending_) {
        rc = Put(kv);
        if (rc != 0) break;
      }
    }
    if (rc != 0) return MdbError(rc, fmt::format("writing record {}", count_ - 1), partial_);
    return Status::OK();
  }

  Status Commit() {
    int rc = mdb_txn_commit(txn_);
    txn_ = nullptr;
    if (rc != 0) return MdbError(rc, "mdb_txn_commit", partial_);
    pending_.clear();
    pending_bytes_ = 0;
    if (closed_) return Status::OK();
    return Begin();
  }

  std::string path_, partial_;
  Env* env_io_ = nullptr;
  MDB_env* env_ = nullptr;
  MDB_txn* txn_ = nullptr;
  MDB_dbi dbi_ = 0;
  size_t mapsize_ = 64u << 20;
  uint64_t count_ = 0;
  std::vector<std::pair<std::string, std::string>> pending_;
  uint64_t pending_bytes_ = 0;
  bool closed_ = false;
  std::vector<WrittenShard> shards_;
};

}  // namespace

Result<std::unique_ptr<Dataset>> OpenLmdbDataset(const std::string& path,
                                                 const DatasetOptions& opts) {
  STOKER_ASSIGN_OR_RETURN(auto ds, LmdbDataset::Open(path, opts));
  return std::unique_ptr<Dataset>(std::move(ds));
}

Result<std::unique_ptr<DatasetWriter>> OpenLmdbWriter(const std::string& path,
                                                      const WriterOptions& opts) {
  return LmdbWriter::Open(path, opts);
}

int LmdbEnvOpens(const Dataset& ds) {
  const auto* l = dynamic_cast<const LmdbDataset*>(&ds);
  return l ? l->env_opens() : -1;
}

#else  // !STOKER_HAVE_LMDB

constexpr MissingLibrary kMissingLmdb = {"lmdb", "liblmdb", "install liblmdb-dev and reconfigure"};

bool LmdbAvailable() { return false; }

Result<std::unique_ptr<Dataset>> OpenLmdbDataset(const std::string& path,
                                                 const DatasetOptions&) {
  return FormatUnavailable(kMissingLmdb, path);
}
Result<std::unique_ptr<DatasetWriter>> OpenLmdbWriter(const std::string& path,
                                                      const WriterOptions&) {
  return FormatUnavailable(kMissingLmdb, path);
}
int LmdbEnvOpens(const Dataset&) { return -1; }

#endif

void RegisterLmdbFormat() {
  RegisterDatasetFormat({"lmdb", {"lmdb", "mdb"}, OpenLmdbDataset,
                         "LMDB file or directory; one key per sample"});
  RegisterDatasetWriter("lmdb", OpenLmdbWriter);
}

}  // namespace stoker
