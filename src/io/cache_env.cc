// CacheEnv: see cache_env.h for the contract and docs/cache.md for the design.
//
// Layout of the cache directory (shared by every process of the node that opens it):
//   .lock                 the space lock: held (flock) while the directory is scanned and
//                         room is made, never while waiting for anything else
//   entries/<key>         a complete entry (appears by rename, the commit point)
//   entries/<key>.meta    its metadata: source path, size, source mtime, CRC32
//   entries/<key>.part    an entry being fetched (full size reserved with ftruncate)
//   locks/<key>.lock      the entry lock: held by the one process fetching <key>
//   procs/<pid>.plan      a live process's plan ("key first last" per line), flock'd
//                         shared by its owner for its lifetime (a dead owner's is removed)
//   procs/<pid>.pos       that process's position in its plan
#include "io/cache_env.h"
#include "io/object_env.h"

#include <cstdint>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/clock.h"
#include "core/mutex.h"
#include "core/thread_pool.h"

namespace stoker {
namespace {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

Status Errno(const std::string& what, const std::string& path) {
  return IOError("cache: {} {}: {}", what, path, std::strerror(errno));
}

// An open local file, closed when the last reader lets go of it.
struct LocalFd {
  explicit LocalFd(int f) : fd(f) {}
  ~LocalFd() { ::close(fd); }
  LocalFd(const LocalFd&) = delete;
  LocalFd& operator=(const LocalFd&) = delete;
  int fd;
};

// A held flock; released (and the descriptor closed) on destruction.
class FileLock {
 public:
  FileLock() = default;
  ~FileLock() { Release(); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  // kWouldBlock when `block` is false and another holds it.
  enum Result { kOk, kWouldBlock, kError };
  Result Acquire(const std::string& path, bool block) {
    Release();
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return kError;
    int rc;
    do rc = ::flock(fd_, LOCK_EX | (block ? 0 : LOCK_NB));
    while (rc != 0 && errno == EINTR);
    if (rc == 0) return kOk;
    Result r = errno == EWOULDBLOCK ? kWouldBlock : kError;
    Release();
    return r;
  }
  void Release() {
    if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

bool WriteAll(int fd, const void* data, size_t n, uint64_t off) {
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::pwrite(fd, p + done, n - done, static_cast<off_t>(off + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

bool ReadSmallFile(const std::string& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[65536];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    out->append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return true;
}

// Text file written to path.tmp and renamed.
bool WriteFileAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = WriteAll(fd, text.data(), text.size(), 0);
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

struct EntryMeta {
  std::string path;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint32_t crc = 0;
  std::string version;  // the source's ETag / generation when it has one ("" for files)
};

std::string FormatMeta(const EntryMeta& m) {
  std::string s = fmt::format("stoker-cache-entry v1\nsize {}\nmtime_ns {}\ncrc32 {}\npath {}\n",
                              m.size, m.mtime_ns, m.crc, m.path);
  if (!m.version.empty()) s += fmt::format("version {}\n", m.version);
  return s;
}

bool ParseMeta(const std::string& text, EntryMeta* m) {
  if (text.rfind("stoker-cache-entry v1\n", 0) != 0) return false;
  unsigned long long size = 0, crc = 0;
  long long mtime = 0;
  auto line = [&](const char* name) -> std::string {
    std::string k = std::string("\n") + name + " ";
    auto p = text.find(k);
    if (p == std::string::npos) return "";
    p += k.size();
    auto e = text.find('\n', p);
    return text.substr(p, e == std::string::npos ? std::string::npos : e - p);
  };
  std::string s = line("size"), t = line("mtime_ns"), c = line("crc32");
  if (s.empty() || t.empty() || c.empty()) return false;
  if (std::sscanf(s.c_str(), "%llu", &size) != 1 || std::sscanf(t.c_str(), "%lld", &mtime) != 1 ||
      std::sscanf(c.c_str(), "%llu", &crc) != 1)
    return false;
  m->size = size;
  m->mtime_ns = mtime;
  m->crc = static_cast<uint32_t>(crc);
  m->path = line("path");
  m->version = line("version");
  return !m->path.empty();
}

std::string NormalizePath(const std::string& path) {
  if (path.find("://") != std::string::npos || path.empty()) return path;
  std::error_code ec;
  auto abs = std::filesystem::absolute(path, ec);
  return ec ? path : abs.lexically_normal().string();
}

}  // namespace

std::string CacheEntryKey(const std::string& path) {
  std::string p = NormalizePath(path);
  uint64_t h = 1469598103934665603ULL;  // FNV-1a 64
  for (unsigned char c : p) h = (h ^ c) * 1099511628211ULL;
  return fmt::format("{:016x}", h);
}

struct CacheEnv::Impl {
  enum class State {
    kUnknown,   // not looked at (or evicted)
    kFetching,  // a thread of this process is fetching it
    kReady,     // fd holds the local entry
    kStream,    // reads stream through (too large, not in the plan, no room, fetch failed)
    kRemote,    // another process holds its entry lock (fetching it)
  };
  struct Entry {
    std::string key;
    State state = State::kUnknown;
    uint64_t gen = 0;  // plan generation the kStream / kRemote decision belongs to
    uint64_t noroom_progress = kNever;  // kStream for want of room, at this position
    uint64_t touched_gen = kNever;      // plan generation of its last LRU stamp
    // kFetching by this process: the .part being written and how many bytes of it are
    // written, so reads of the written prefix need not wait for the whole file.
    std::shared_ptr<LocalFd> part;
    uint64_t upto = 0;
    std::shared_ptr<LocalFd> fd;
    uint64_t size = 0;
  };
  struct OtherPlan {
    ino_t ino = 0;
    int64_t mtime_ns = 0;
    std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> spans;  // key, first, last
  };

  Env* backing = nullptr;
  CacheOptions o;
  std::string entries_dir, locks_dir, procs_dir, dir_lock_path, plan_path, pos_path;
  Clock* clock = Clock::Real();

  mutable Mutex mu;
  CondVar cv;
  std::unordered_map<std::string, Entry> entries GUARDED_BY(mu);
  std::unordered_map<std::string, FileInfo> source_info GUARDED_BY(mu);
  std::unordered_set<std::string> source_pending GUARDED_BY(mu);  // being asked (one asker)
  std::vector<CachePlanItem> plan GUARDED_BY(mu);
  std::unordered_map<std::string, std::vector<size_t>> plan_index GUARDED_BY(mu);
  bool have_plan GUARDED_BY(mu) = false;
  uint64_t plan_gen GUARDED_BY(mu) = 0;
  uint64_t progress GUARDED_BY(mu) = 0;
  bool progress_dirty GUARDED_BY(mu) = false;
  size_t cursor GUARDED_BY(mu) = 0;  // plan items before it are settled
  // No room at this (generation, progress): prefetching waits for progress.
  bool blocked GUARDED_BY(mu) = false;
  uint64_t blocked_gen GUARDED_BY(mu) = 0, blocked_progress GUARDED_BY(mu) = 0;
  int inflight GUARDED_BY(mu) = 0;
  bool stop GUARDED_BY(mu) = false;
  std::map<std::string, OtherPlan> other_plans GUARDED_BY(mu);  // by plan file path
  int plan_fd = -1;  // our published plan, flock'd shared while we live
  std::vector<std::thread> fetchers;
  struct DemandThread {
    std::thread t;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<DemandThread> demand_threads GUARDED_BY(mu);  // finished ones joined on the next
  // Held by a look-ahead fetcher from picking a file until its room is reserved, so that
  // room goes to files in plan order (a later file never takes the room of an earlier one).
  std::mutex pick_mu;
  // Asks the sources again at each epoch's plan (SetPlan). Declared last: destroyed (its
  // threads joined) before the members its tasks use.
  std::unique_ptr<ThreadPool> revalidator;

  CacheCounters c GUARDED_BY(mu);
  std::atomic<uint64_t> hit_reads{0}, hit_bytes{0}, stream_reads{0}, stream_bytes{0},
      source_bytes{0};
  std::atomic<int64_t> stall_ns{0};

  // ---- helpers ------------------------------------------------------------------------
  std::string EntryPath(const std::string& key) const { return entries_dir + "/" + key; }
  std::string LockPath(const std::string& key) const { return locks_dir + "/" + key + ".lock"; }

  Entry& EntryFor(const std::string& path) REQUIRES(mu) {
    auto it = entries.find(path);
    if (it == entries.end()) {
      it = entries.emplace(path, Entry{}).first;
      it->second.key = CacheEntryKey(path);
    }
    return it->second;
  }

  // The source's size, mtime and version of `path`, asked once per epoch (SetPlan) and
  // by one thread at a time: readers that open the file meanwhile wait for that answer.
  Result<FileInfo> SourceInfo(const std::string& path) EXCLUDES(mu) {
    {
      MutexLock l(&mu);
      for (;;) {
        auto it = source_info.find(path);
        if (it != source_info.end()) return it->second;
        if (!source_pending.count(path)) break;
        cv.Wait(&mu);
      }
      source_pending.insert(path);
    }
    auto fi = backing->Stat(path);
    MutexLock l(&mu);
    source_pending.erase(path);
    if (fi.ok()) source_info[path] = *fi;
    cv.SignalAll();
    return fi;
  }

  // Distance (plan positions) until `path` is needed again by this process: 0 in use,
  // kNever when not again this epoch.
  uint64_t OwnDistance(const std::string& path) const REQUIRES(mu) {
    auto it = plan_index.find(path);
    if (it == plan_index.end()) return kNever;
    uint64_t best = kNever;
    for (size_t i : it->second) {
      const auto& s = plan[i];
      if (s.last < progress) continue;
      best = std::min(best, s.first > progress ? s.first - progress : 0);
    }
    return best;
  }

  // A read of `path` moves this process's position to the span being read.
  void NoteRead(const std::string& path) REQUIRES(mu) {
    auto it = plan_index.find(path);
    if (it == plan_index.end()) return;
    for (size_t i : it->second) {
      const auto& s = plan[i];
      if (s.last < progress) continue;
      if (s.first > progress) {
        progress = s.first;
        progress_dirty = true;
        cv.SignalAll();
      }
      return;
    }
  }

  // Opens the complete entry of `path` when it is there and checks it; nullptr when not
  // (a damaged one is removed, under its lock, so that it is fetched again).
  std::shared_ptr<LocalFd> TryOpenEntry(const std::string& path, const std::string& key,
                                        bool* corrupt) EXCLUDES(mu) {
    *corrupt = false;
    std::string ep = EntryPath(key);
    int fd = ::open(ep.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nullptr;
    auto local = std::make_shared<LocalFd>(fd);
    std::string meta_text;
    EntryMeta m;
    struct stat st;
    bool ok = ReadSmallFile(ep + ".meta", &meta_text) && ParseMeta(meta_text, &m) &&
              ::fstat(fd, &st) == 0 && m.path == NormalizePath(path) &&
              static_cast<uint64_t>(st.st_size) == m.size;
    if (ok) {
      auto src = SourceInfo(path);
      // An object's version (ETag) names its bytes; Last-Modified has whole seconds, so an
      // object rewritten with the same size within the second keeps its mtime.
      ok = src.ok() && src->size == m.size && src->mtime_ns == m.mtime_ns &&
           src->version == m.version;
    }
    if (ok && o.verify_crc) {
      std::vector<uint8_t> buf(std::min<uint64_t>(o.chunk_bytes, std::max<uint64_t>(m.size, 1)));
      uLong crc = crc32(0L, Z_NULL, 0);
      uint64_t off = 0;
      while (ok && off < m.size) {
        ssize_t r = ::pread(fd, buf.data(), std::min<uint64_t>(buf.size(), m.size - off),
                            static_cast<off_t>(off));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) ok = false;
        else {
          crc = crc32(crc, buf.data(), static_cast<uInt>(r));
          off += static_cast<uint64_t>(r);
        }
      }
      ok = ok && static_cast<uint32_t>(crc) == m.crc;
    }
    if (!ok) {
      *corrupt = true;
      // Remove it only while nobody is (re)writing it, and only the file we looked at.
      FileLock lk;
      if (lk.Acquire(LockPath(key), /*block=*/false) == FileLock::kOk) {
        struct stat now;
        if (::stat(ep.c_str(), &now) == 0 && ::fstat(fd, &st) == 0 && now.st_ino == st.st_ino) {
          ::unlink(ep.c_str());
          ::unlink((ep + ".meta").c_str());
        }
      }
      return nullptr;
    }
    ::futimens(fd, nullptr);  // the LRU stamp: last opened now
    return local;
  }

  // The needs of every live process: key -> distance until needed (0: in use).
  std::unordered_map<std::string, uint64_t> CombinedNeeds() EXCLUDES(mu) {
    std::unordered_map<std::string, uint64_t> need;
    auto add = [&](const std::string& key, uint64_t d) {
      auto [it, fresh] = need.emplace(key, d);
      if (!fresh) it->second = std::min(it->second, d);
    };
    // Other processes' published plans.
    std::vector<std::string> files;
    if (DIR* d = ::opendir(procs_dir.c_str())) {
      while (struct dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n.size() > 5 && n.compare(n.size() - 5, 5, ".plan") == 0) files.push_back(n);
      }
      ::closedir(d);
    }
    for (const auto& n : files) {
      std::string fp = procs_dir + "/" + n;
      if (fp == plan_path) continue;
      int fd = ::open(fp.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {  // its owner is gone
        std::string pos = fp.substr(0, fp.size() - 5) + ".pos";
        ::unlink(fp.c_str());
        ::unlink(pos.c_str());
        ::close(fd);
        continue;
      }
      struct stat st;
      if (::fstat(fd, &st) != 0) {
        ::close(fd);
        continue;
      }
      int64_t mt = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
      ::close(fd);
      std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> spans;
      {
        MutexLock l(&mu);
        auto& op = other_plans[fp];
        if (op.ino != st.st_ino || op.mtime_ns != mt) {
          std::string text;
          op.spans.clear();
          if (ReadSmallFile(fp, &text)) {
            size_t p = 0;
            while (p < text.size()) {
              size_t e = text.find('\n', p);
              if (e == std::string::npos) e = text.size();
              char key[64];
              unsigned long long a = 0, b = 0;
              if (std::sscanf(text.c_str() + p, "%63s %llu %llu", key, &a, &b) == 3)
                op.spans.push_back({key, {a, b}});
              p = e + 1;
            }
          }
          op.ino = st.st_ino;
          op.mtime_ns = mt;
        }
        spans = op.spans;
      }
      std::string pos_text;
      unsigned long long pos = 0;
      if (ReadSmallFile(fp.substr(0, fp.size() - 5) + ".pos", &pos_text))
        std::sscanf(pos_text.c_str(), "%llu", &pos);
      for (const auto& [key, span] : spans) {
        if (span.second < pos) continue;
        add(key, span.first > pos ? span.first - pos : 0);
      }
    }
    MutexLock l(&mu);
    for (const auto& s : plan) {
      if (s.last < progress) continue;
      add(EntryFor(s.path).key, s.first > progress ? s.first - progress : 0);
    }
    return need;
  }

  // Makes room for `size` bytes of entry `key`, needed at `distance`, and creates its
  // .part file with the full size reserved. -1: no room (the caller streams).
  int Reserve(const std::string& key, uint64_t size, uint64_t distance) EXCLUDES(mu) {
    FileLock space;
    if (space.Acquire(dir_lock_path, /*block=*/true) != FileLock::kOk) return -1;
    std::string part = EntryPath(key) + ".part";
    ::unlink(part.c_str());  // ours: we hold the entry lock (a stale one of a killed fetch)
    struct Present {
      std::string key;
      int64_t size;
      int64_t mtime_ns;
    };
    std::vector<Present> present;
    int64_t used = 0;
    std::vector<std::string> names;
    if (DIR* d = ::opendir(entries_dir.c_str())) {
      while (struct dirent* e = ::readdir(d)) names.push_back(e->d_name);
      ::closedir(d);
    }
    if (o.test_hook) o.test_hook("reserve-scanned", key);
    for (const auto& n : names) {
      if (n == "." || n == "..") continue;
      std::string fp = entries_dir + "/" + n;
      struct stat st;
      if (::stat(fp.c_str(), &st) != 0) continue;
      auto dot = n.find('.');
      if (dot == std::string::npos) {
        int64_t mt = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
        present.push_back({n, st.st_size, mt});
        used += st.st_size;
      } else if (n.compare(dot, std::string::npos, ".part") == 0) {
        FileLock other;
        if (other.Acquire(LockPath(n.substr(0, dot)), /*block=*/false) == FileLock::kOk)
          ::unlink(fp.c_str());  // a fetch that died (kill -9) left it
        else
          used += st.st_size;
      }
    }
    int64_t want = static_cast<int64_t>(size);
    std::vector<std::string> evicted;
    if (used + want > o.limit) {
      auto need = CombinedNeeds();
      std::vector<std::pair<uint64_t, Present*>> victims;
      for (auto& p : present) {
        if (p.key == key) continue;
        auto it = need.find(p.key);
        uint64_t d = it == need.end() ? kNever : it->second;
        // Belady: only what is needed later than the new entry; never what is in use.
        if (d == 0 || (d <= distance && d != kNever)) continue;
        victims.push_back({d, &p});
      }
      // Not needed again first (least recently used first), then furthest needed first.
      std::sort(victims.begin(), victims.end(), [](const auto& a, const auto& b) {
        if (a.first != b.first) return a.first > b.first;
        return a.second->mtime_ns < b.second->mtime_ns;
      });
      int64_t freeable = 0;
      for (auto& v : victims) freeable += v.second->size;
      if (used + want - freeable > o.limit) {
        NoteOccupancy(used);
        return -1;
      }
      for (auto& v : victims) {
        if (used + want <= o.limit) break;
        std::string ep = EntryPath(v.second->key);
        if (::unlink(ep.c_str()) == 0) {
          used -= v.second->size;
          evicted.push_back(v.second->key);
        }
        ::unlink((ep + ".meta").c_str());
      }
      if (used + want > o.limit) {
        NoteOccupancy(used);
        DropEvicted(evicted);
        return -1;
      }
    }
    int fd = ::open(part.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      ::close(fd);
      ::unlink(part.c_str());
      fd = -1;
    }
    NoteOccupancy(used + (fd >= 0 ? want : 0));
    DropEvicted(evicted);
    return fd;
  }

  void NoteOccupancy(int64_t used) EXCLUDES(mu) {
    MutexLock l(&mu);
    c.occupancy = used;
    c.max_occupancy = std::max(c.max_occupancy, used);
  }

  // Forgets this process's descriptors of evicted entries (readers holding one finish).
  void DropEvicted(const std::vector<std::string>& keys) EXCLUDES(mu) {
    if (keys.empty()) return;
    MutexLock l(&mu);
    c.evictions += keys.size();
    for (auto& [path, e] : entries)
      if (e.state == State::kReady && std::find(keys.begin(), keys.end(), e.key) != keys.end()) {
        e.fd.reset();
        e.state = State::kUnknown;
      }
  }

  // Descriptors of entries another process removed: let them go, so the space is freed.
  void SweepUnlinked() REQUIRES(mu) {
    for (auto& [path, e] : entries) {
      if (e.state != State::kReady || !e.fd) continue;
      struct stat st;
      if (::fstat(e.fd->fd, &st) == 0 && st.st_nlink == 0) {
        e.fd.reset();
        e.state = State::kUnknown;
      }
    }
  }

  enum class FetchOutcome { kReady, kStream, kNoRoom, kBusy, kError };
  struct Fetched {
    FetchOutcome outcome = FetchOutcome::kStream;
    std::shared_ptr<LocalFd> fd;
    uint64_t size = 0;
    bool shared = false;  // another process had fetched it
    Status error;
  };

  // The entry of `path` complete in the directory (fetched by another process, or by this
  // one before), checked: kReady with its fd and size (shared), else kStream without one
  // (*corrupt: one was there and failed its checks).
  Fetched FoundEntry(const std::string& path, const std::string& key, bool* corrupt)
      EXCLUDES(mu) {
    Fetched f;
    f.fd = TryOpenEntry(path, key, corrupt);
    if (!f.fd) return f;
    struct stat st;
    f.size = ::fstat(f.fd->fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    f.outcome = FetchOutcome::kReady;
    f.shared = true;
    return f;
  }

  // Fetches `path` into the cache (or finds it fetched by another process). `block`: wait
  // for another process's fetch of it (a reader); else kBusy (the look-ahead moves on).
  // `order`: released once the room is reserved (the look-ahead's pick order).
  Fetched Fetch(const std::string& path, const std::string& key, uint64_t distance, bool block,
                std::unique_lock<std::mutex>* order = nullptr) EXCLUDES(mu) {
    Fetched f;
    FileLock entry_lock;
    FileLock::Result lr = entry_lock.Acquire(LockPath(key), block);
    if (lr == FileLock::kWouldBlock) {
      f.outcome = FetchOutcome::kBusy;
      return f;
    }
    if (lr == FileLock::kError) {
      f.outcome = FetchOutcome::kError;
      f.error = Errno("lock", LockPath(key));
      return f;
    }
    bool corrupt = false;
    if (Fetched found = FoundEntry(path, key, &corrupt); found.fd) return found;
    if (corrupt) {
      MutexLock l(&mu);
      c.corrupt_entries++;
    }
    auto src = SourceInfo(path);
    if (!src.ok()) {
      f.outcome = FetchOutcome::kError;
      f.error = src.status();
      return f;
    }
    if (static_cast<int64_t>(src->size) > o.limit) return f;  // kStream: never fits
    int part_fd = Reserve(key, src->size, distance);
    if (order && order->owns_lock()) order->unlock();
    if (part_fd < 0) {
      f.outcome = FetchOutcome::kNoRoom;
      return f;
    }
    std::string ep = EntryPath(key), part = ep + ".part";
    {
      int rfd = ::open(part.c_str(), O_RDONLY | O_CLOEXEC);
      MutexLock l(&mu);
      Entry& e = EntryFor(path);
      e.upto = 0;
      if (rfd >= 0) e.part = std::make_shared<LocalFd>(rfd);
    }
    uint32_t crc = 0;
    Status st = Copy(path, src->size, src->version, part_fd, &f.size, &crc);
    if (o.test_hook) o.test_hook("copied", key);
    {
      MutexLock l(&mu);
      EntryFor(path).part.reset();
    }
    ::close(part_fd);
    if (st.ok() && f.size != src->size)
      st = Corrupt("cache: {} changed while it was fetched ({} bytes, {} expected)", path, f.size,
                   src->size);
    if (!st.ok()) {
      ::unlink(part.c_str());
      f.outcome = st.code() == StatusCode::kCancelled ? FetchOutcome::kStream : FetchOutcome::kError;
      f.error = st;
      return f;
    }
    // Copy counted the fetch with its last bytes; a commit that fails takes it back.
    auto Uncount = [this] {
      MutexLock l(&mu);
      c.fetches--;
    };
    EntryMeta m{NormalizePath(path), src->size, src->mtime_ns, crc, src->version};
    if (o.test_hook) o.test_hook("commit", key);
    // The rename happens under the space lock: a scan (Reserve, of this process or another)
    // lists the directory and then stats each name, and a `.part` renamed between the two
    // would be counted neither as `.part` nor as entry, so a concurrent reservation took
    // room that was not free (the look-ahead fetched a later file with no eviction).
    FileLock space;
    if (space.Acquire(dir_lock_path, /*block=*/true) != FileLock::kOk) {
      ::unlink(part.c_str());
      f.outcome = FetchOutcome::kError;
      f.error = Errno("lock", dir_lock_path);
      Uncount();
      return f;
    }
    // The metadata first, the data's rename last: an entry is complete once it has a name.
    if (!WriteFileAtomically(ep + ".meta", FormatMeta(m)) ||
        ::rename(part.c_str(), ep.c_str()) != 0) {
      ::unlink(part.c_str());
      f.outcome = FetchOutcome::kError;
      f.error = Errno("commit entry", ep);
      Uncount();
      return f;
    }
    int fd = ::open(ep.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      f.outcome = FetchOutcome::kStream;  // evicted already; read through
      return f;
    }
    f.fd = std::make_shared<LocalFd>(fd);
    f.outcome = FetchOutcome::kReady;
    return f;
  }

  // Copies the source file into the reserved .part file, with its CRC32.
  Status Copy(const std::string& path, uint64_t size, const std::string& version, int part_fd,
              uint64_t* copied, uint32_t* crc_out) EXCLUDES(mu) {
    *copied = 0;
    uLong crc = crc32(0L, Z_NULL, 0);
    STOKER_ASSIGN_OR_RETURN(auto src, backing->NewRandomAccessFile(path));
    if (!version.empty() && !src->version().empty() && src->version() != version)
      return Corrupt("cache: {} changed before it was fetched (version {}, {} expected)", path,
                     src->version(), version);
    // An object is copied in reads of 1 MiB through its read-ahead, which keeps many ranged
    // GETs of the file in flight (one connection carries ~25-90 MB/s; 8 MiB reads one after
    // the other held a fetch to one), and readers waiting on the part go ahead each MiB.
    uint64_t piece = IsObjectStoreUri(path) ? std::min<uint64_t>(o.chunk_bytes, 1 << 20)
                                            : o.chunk_bytes;
    std::vector<uint8_t> buf(std::min<uint64_t>(piece, std::max<uint64_t>(size, 1)));
    uint64_t off = 0;
    while (off < size) {
      {
        MutexLock l(&mu);
        if (stop) return Cancelled("cache: closing");
      }
      size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - off));
      STOKER_ASSIGN_OR_RETURN(size_t got, src->ReadAt(off, n, buf.data()));
      source_bytes += got;
      if (got == 0) break;
      if (!WriteAll(part_fd, buf.data(), got, off)) return Errno("write", path);
      crc = crc32(crc, buf.data(), static_cast<uInt>(got));
      off += got;
      {
        MutexLock l(&mu);
        EntryFor(path).upto = off;  // readers of [0, off) may go ahead
        c.fetched_bytes += got;
        // The fetch is counted with its last bytes, under the same lock: a reader served
        // from the part can finish its epoch before the commit below runs, and stats read
        // then must not show all the bytes but one fetch short (CI saw 2 of 3).
        if (off == size) c.fetches++;
        cv.SignalAll();
      }
    }
    if (size == 0) {  // no chunk to count the fetch with
      MutexLock l(&mu);
      c.fetches++;
    }
    *copied = off;
    *crc_out = static_cast<uint32_t>(crc);
    return Status::OK();
  }

  // ---- the read path ------------------------------------------------------------------
  // The entry of `path` when it is there (this process has it, or finds it complete in the
  // directory and checked), else nullptr: nothing is fetched, nobody waited for.
  std::shared_ptr<LocalFd> ReadyEntry(const std::string& path) EXCLUDES(mu) {
    std::string key;
    {
      MutexLock l(&mu);
      Entry& e = EntryFor(path);
      if (e.state == State::kReady) return e.fd;
      if (e.state != State::kUnknown) return nullptr;
      e.state = State::kFetching;  // other readers of it wait for this look
      inflight++;
      key = e.key;
    }
    bool corrupt = false;
    Fetched f = FoundEntry(path, key, &corrupt);
    MutexLock l(&mu);
    inflight--;
    if (corrupt) c.corrupt_entries++;
    if (!f.fd) {
      EntryFor(path).state = State::kUnknown;
      cv.SignalAll();
      return nullptr;
    }
    auto r = Settle(path, f);
    return r.ok() ? *r : nullptr;
  }

  // The local entry for a read of `path` (fetching it first when it is wanted), or nullptr
  // to stream the read through.
  // `end`: the read's end offset; a read inside the prefix of a file this process is
  // fetching is served from the part written so far.
  Result<std::shared_ptr<LocalFd>> ForRead(const std::string& path, uint64_t end) EXCLUDES(mu) {
    int64_t t0 = 0;
    std::string key;
    uint64_t distance = 0;
    {
      MutexLock l(&mu);
      NoteRead(path);
      for (;;) {
        Entry& e = EntryFor(path);
        if (e.state == State::kReady) {
          if (t0) stall_ns += clock->NowNanos() - t0;
          if (e.touched_gen != plan_gen) {  // the LRU stamp: first read in this epoch
            e.touched_gen = plan_gen;
            ::futimens(e.fd->fd, nullptr);
          }
          return e.fd;
        }
        if (e.state == State::kStream && e.gen == plan_gen &&
            (e.noroom_progress == kNever || e.noroom_progress == progress)) {
          if (t0) stall_ns += clock->NowNanos() - t0;
          return std::shared_ptr<LocalFd>();
        }
        if (e.state == State::kFetching) {
          if (e.part && end <= e.upto) {
            if (t0) stall_ns += clock->NowNanos() - t0;
            return e.part;
          }
          if (!t0) t0 = clock->NowNanos();
          cv.Wait(&mu);
          continue;
        }
        key = e.key;
        bool wanted = have_plan ? plan_index.count(path) > 0 : o.demand_fetch;
        distance = OwnDistance(path);
        if (distance == kNever) distance = 0;
        e.state = State::kFetching;  // other readers of it wait for this one
        inflight++;
        if (!wanted) break;
        // Fetched on a thread of its own, so that this read (and others) can go ahead as
        // soon as the part they need is written.
        if (!t0) t0 = clock->NowNanos();
        for (size_t i = 0; i < demand_threads.size();) {
          if (demand_threads[i].done->load()) {
            demand_threads[i].t.join();
            demand_threads.erase(demand_threads.begin() + static_cast<long>(i));
          } else {
            ++i;
          }
        }
        auto done = std::make_shared<std::atomic<bool>>(false);
        demand_threads.push_back({std::thread([this, path, key, distance, done] {
          Fetched f = Fetch(path, key, distance, /*block=*/true);
          MutexLock l2(&mu);
          inflight--;
          (void)Settle(path, f);
          // A reader that found no room streams until the position moves (then tries again).
          if (f.outcome == FetchOutcome::kNoRoom) {
            Entry& e2 = EntryFor(path);
            e2.state = State::kStream;
            e2.gen = plan_gen;
            e2.noroom_progress = progress;
          }
          done->store(true);
        }), done});
      }
    }
    // Not in the plan: read through, but use an entry that is already there.
    bool corrupt = false;
    Fetched f = FoundEntry(path, key, &corrupt);
    MutexLock l(&mu);
    inflight--;
    return Settle(path, f);
  }

  // Records a fetch's outcome on the path's entry.
  Result<std::shared_ptr<LocalFd>> Settle(const std::string& path, Fetched& f) REQUIRES(mu) {
    Entry& e = EntryFor(path);
    cv.SignalAll();
    switch (f.outcome) {
      case FetchOutcome::kReady:
        e.noroom_progress = kNever;
        e.state = State::kReady;
        e.fd = f.fd;
        e.size = f.size;
        if (f.shared) c.shared_entries++;
        return f.fd;
      case FetchOutcome::kBusy:
        e.state = State::kRemote;
        e.gen = plan_gen;
        return std::shared_ptr<LocalFd>();
      case FetchOutcome::kNoRoom:
        e.state = State::kUnknown;  // may fit later
        return std::shared_ptr<LocalFd>();
      case FetchOutcome::kError:
      case FetchOutcome::kStream:
        e.noroom_progress = kNever;
        // A failed fetch streams: the reader then gets the source's own error for its read.
        e.state = State::kStream;
        e.gen = plan_gen;
        return std::shared_ptr<LocalFd>();
    }
    return std::shared_ptr<LocalFd>();
  }

  // ---- look-ahead ---------------------------------------------------------------------
  // The next plan item to prefetch, or -1.
  long PickNext() REQUIRES(mu) {
    if (!have_plan || stop) return -1;
    if (blocked && blocked_gen == plan_gen && blocked_progress == progress) return -1;
    blocked = false;
    // Items settled from the start need not be looked at again.
    while (cursor < plan.size()) {
      const auto& s = plan[cursor];
      auto it = entries.find(s.path);
      bool settled = s.last < progress ||
                     (it != entries.end() && (it->second.state == State::kReady ||
                                              (it->second.state == State::kStream &&
                                               it->second.gen == plan_gen)));
      if (!settled) break;
      ++cursor;
    }
    size_t looked = 0;
    for (size_t i = cursor; i < plan.size() && looked < 64 + 4u * o.max_fetches; ++i) {
      const auto& s = plan[i];
      if (s.last < progress) continue;
      ++looked;
      Entry& e = EntryFor(s.path);
      if (e.state == State::kUnknown) return static_cast<long>(i);
      if (e.state == State::kRemote && e.gen != plan_gen) return static_cast<long>(i);
    }
    return -1;
  }

  void FetcherLoop() EXCLUDES(mu) {
    int64_t last_sweep = 0;
    for (;;) {
      std::string path, key;
      uint64_t distance = 0;
      std::unique_lock<std::mutex> order(pick_mu);
      {
        MutexLock l(&mu);
        long i = -1;
        for (;;) {
          if (stop) return;
          int64_t now = clock->NowNanos();
          if (now - last_sweep > 100'000'000) {
            SweepUnlinked();
            last_sweep = now;
          }
          if (progress_dirty) {
            progress_dirty = false;
            std::string text = fmt::format("{:<20}\n", progress);
            int fd = ::open(pos_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            if (fd >= 0) {
              (void)WriteAll(fd, text.data(), text.size(), 0);
              ::close(fd);
            }
          }
          i = PickNext();
          if (i >= 0) break;
          cv.WaitForNanos(&mu, 100'000'000);
        }
        const auto& s = plan[static_cast<size_t>(i)];
        path = s.path;
        Entry& e = EntryFor(path);
        e.state = State::kFetching;
        key = e.key;
        distance = s.first > progress ? s.first - progress : 0;
        inflight++;
      }
      Fetched f = Fetch(path, key, distance, /*block=*/false, &order);
      if (order.owns_lock()) order.unlock();
      MutexLock l(&mu);
      inflight--;
      if (f.outcome == FetchOutcome::kNoRoom) {
        blocked = true;
        blocked_gen = plan_gen;
        blocked_progress = progress;
      }
      (void)Settle(path, f);
    }
  }
};

namespace {

// What CacheEnv hands out: reads go to the local entry when there is one, else through.
class CachedFile final : public RandomAccessFile {
 public:
  // `peek`: a handle opened with OpenOptions::direct (a format's checks at open: a few
  // bytes here and there) reads an entry that is there, and otherwise reads the source
  // directly, without read-ahead and without starting a fetch of the whole file.
  CachedFile(std::shared_ptr<CacheEnv::Impl> impl, std::string path, uint64_t size,
             std::string version, bool peek)
      : impl_(std::move(impl)), path_(std::move(path)), size_(size),
        version_(std::move(version)), peek_(peek) {}
  Result<size_t> ReadAt(uint64_t offset, size_t n, uint8_t* dst) const override {
    if (offset >= size_) return size_t{0};
    n = static_cast<size_t>(std::min<uint64_t>(n, size_ - offset));
    std::shared_ptr<LocalFd> local;
    if (peek_) {
      local = impl_->ReadyEntry(path_);
    } else {
      STOKER_ASSIGN_OR_RETURN(local, impl_->ForRead(path_, offset + n));
    }
    if (local) {
      size_t done = 0;
      while (done < n) {
        ssize_t r = ::pread(local->fd, dst + done, n - done, static_cast<off_t>(offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
          return IOError("read cache entry of {} at offset {}: {}", path_, offset + done,
                         std::strerror(errno));
        if (r == 0) break;
        done += static_cast<size_t>(r);
      }
      impl_->hit_reads++;
      impl_->hit_bytes += done;
      return done;
    }
    const RandomAccessFile* src = nullptr;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!backing_) {
        // An object store's direct handle reads without read-ahead blocks; a local file's
        // would be O_DIRECT, which takes aligned reads only: a peek there reads normally.
        OpenOptions opts;
        opts.direct = peek_ && IsObjectStoreUri(path_);
        auto f = impl_->backing->NewRandomAccessFile(path_, opts);
        if (!f.ok()) return f.status();
        backing_ = std::move(f).value();
      }
      src = backing_.get();
    }
    auto got = src->ReadAt(offset, n, dst);
    if (got.ok()) {
      impl_->stream_reads++;
      impl_->stream_bytes += *got;
      impl_->source_bytes += *got;
    }
    return got;
  }
  uint64_t size() const override { return size_; }
  const std::string& path() const override { return path_; }
  std::string version() const override { return version_; }

 private:
  std::shared_ptr<CacheEnv::Impl> impl_;
  std::string path_;
  uint64_t size_;
  std::string version_;
  bool peek_;
  mutable std::mutex mu_;
  mutable std::unique_ptr<RandomAccessFile> backing_;  // opened on the first streamed read
};

}  // namespace

Result<std::unique_ptr<CacheEnv>> CacheEnv::Open(Env* backing, const CacheOptions& o) {
  if (o.dir.empty()) return InvalidArgument("cache: no directory given");
  if (o.limit <= 0) return InvalidArgument("cache: the limit must be > 0 bytes, got {}", o.limit);
  if (o.max_fetches < 1) return InvalidArgument("cache: max_fetches must be >= 1");
  auto impl = std::make_shared<Impl>();
  impl->backing = backing;
  impl->o = o;
  if (impl->o.chunk_bytes == 0) impl->o.chunk_bytes = 8 << 20;
  impl->entries_dir = o.dir + "/entries";
  impl->locks_dir = o.dir + "/locks";
  impl->procs_dir = o.dir + "/procs";
  impl->dir_lock_path = o.dir + "/.lock";
  for (const auto& d : {impl->entries_dir, impl->locks_dir, impl->procs_dir}) {
    std::error_code ec;
    std::filesystem::create_directories(d, ec);
    if (ec) return IOError("cache: mkdir {}: {}", d, ec.message());
  }
  impl->plan_path = fmt::format("{}/{}.plan", impl->procs_dir, ::getpid());
  impl->pos_path = fmt::format("{}/{}.pos", impl->procs_dir, ::getpid());
  {
    MutexLock l(&impl->mu);
    impl->c.limit = o.limit;
  }
  std::unique_ptr<CacheEnv> env(new CacheEnv(backing));
  env->impl_ = impl;
  impl->revalidator = std::make_unique<ThreadPool>(2, "cache-stat");
  for (int i = 0; i < o.max_fetches; ++i)
    impl->fetchers.emplace_back([impl] { impl->FetcherLoop(); });
  return env;
}

CacheEnv::~CacheEnv() {
  {
    MutexLock l(&impl_->mu);
    impl_->stop = true;
    impl_->cv.SignalAll();
  }
  for (auto& t : impl_->fetchers) t.join();
  impl_->fetchers.clear();
  std::vector<Impl::DemandThread> demand;
  {
    MutexLock l(&impl_->mu);
    demand.swap(impl_->demand_threads);
  }
  for (auto& d : demand) d.t.join();
  if (impl_->plan_fd >= 0) {
    ::unlink(impl_->plan_path.c_str());
    ::unlink(impl_->pos_path.c_str());
    ::close(impl_->plan_fd);
    impl_->plan_fd = -1;
  }
}

Result<std::unique_ptr<RandomAccessFile>> CacheEnv::NewRandomAccessFile(const std::string& path,
                                                                        const OpenOptions& opts) {
  // The size from the source (a missing file fails here, naming it, as without a cache).
  STOKER_ASSIGN_OR_RETURN(FileInfo fi, impl_->SourceInfo(path));
  if (fi.is_dir) return InvalidArgument("open {}: is a directory", path);
  return std::unique_ptr<RandomAccessFile>(
      new CachedFile(impl_, path, fi.size, fi.version, opts.direct));
}

void CacheEnv::SetPlan(std::vector<CachePlanItem> plan) {
  std::sort(plan.begin(), plan.end(),
            [](const CachePlanItem& a, const CachePlanItem& b) { return a.first < b.first; });
  std::string text;
  std::vector<std::string> revalidate;
  {
    MutexLock l(&impl_->mu);
    // The first plan keeps the sources' answers the dataset's open just got; each later one
    // (an epoch) asks again, so that a source that changed between epochs is noticed, on
    // two threads in plan order, ahead of the readers.
    if (impl_->have_plan) {
      impl_->source_info.clear();
      std::unordered_set<std::string> seen;
      for (const auto& s : plan)
        if (seen.insert(s.path).second) revalidate.push_back(s.path);
    }
    impl_->plan = std::move(plan);
    impl_->plan_index.clear();
    for (size_t i = 0; i < impl_->plan.size(); ++i) {
      const auto& s = impl_->plan[i];
      impl_->plan_index[s.path].push_back(i);
      text += fmt::format("{} {} {}\n", impl_->EntryFor(s.path).key, s.first, s.last);
    }
    impl_->have_plan = true;
    impl_->plan_gen++;
    impl_->progress = 0;
    impl_->progress_dirty = true;
    impl_->cursor = 0;
    impl_->blocked = false;
    for (auto& [p, e] : impl_->entries)
      if (e.state == Impl::State::kStream || e.state == Impl::State::kRemote)
        e.state = Impl::State::kUnknown;
  }
  // Publish it for the other processes' eviction: written aside, locked, renamed in.
  std::string tmp = impl_->plan_path + ".tmp";
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    if (WriteAll(fd, text.data(), text.size(), 0) && ::flock(fd, LOCK_SH) == 0 &&
        ::rename(tmp.c_str(), impl_->plan_path.c_str()) == 0) {
      std::string pos = fmt::format("{:<20}\n", 0);
      int pfd = ::open(impl_->pos_path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (pfd >= 0) {
        (void)WriteAll(pfd, pos.data(), pos.size(), 0);
        ::close(pfd);
      }
      if (impl_->plan_fd >= 0) ::close(impl_->plan_fd);
      impl_->plan_fd = fd;
    } else {
      ::close(fd);
      ::unlink(tmp.c_str());
    }
  }
  {
    MutexLock l(&impl_->mu);
    impl_->cv.SignalAll();
  }
  Impl* impl = impl_.get();
  for (std::string& p : revalidate)
    impl_->revalidator->Schedule([impl, p = std::move(p)] {
      {
        MutexLock l(&impl->mu);
        if (impl->stop) return;
      }
      (void)impl->SourceInfo(p);
    });
}

void CacheEnv::WaitIdle() {
  MutexLock l(&impl_->mu);
  impl_->cv.Wait(&impl_->mu, [&]() REQUIRES(impl_->mu) {
    return impl_->stop || (impl_->inflight == 0 && impl_->PickNext() < 0);
  });
}

CacheCounters CacheEnv::counters() const {
  MutexLock l(&impl_->mu);
  CacheCounters c = impl_->c;
  c.hit_reads = impl_->hit_reads;
  c.hit_bytes = impl_->hit_bytes;
  c.stream_reads = impl_->stream_reads;
  c.stream_bytes = impl_->stream_bytes;
  c.source_bytes = impl_->source_bytes;
  c.stall_ns = impl_->stall_ns;
  return c;
}

int64_t CacheEnv::Occupancy() const {
  int64_t used = 0;
  if (DIR* d = ::opendir(impl_->entries_dir.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == ".." || n.find(".meta") != std::string::npos) continue;
      struct stat st;
      if (::stat((impl_->entries_dir + "/" + n).c_str(), &st) == 0) used += st.st_size;
    }
    ::closedir(d);
  }
  return used;
}

const CacheOptions& CacheEnv::options() const { return impl_->o; }

}  // namespace stoker
