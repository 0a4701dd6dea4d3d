#include "io/object_env.h"
#include "io/object_prefetch.h"

#include "io/readahead.h"

#include <cstdint>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <cstdlib>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#if defined(STOKER_HAVE_ARROW_S3)
#include <arrow/filesystem/filesystem.h>
#include <arrow/filesystem/s3fs.h>
#include <arrow/io/interfaces.h>
#include <arrow/util/key_value_metadata.h>
#if defined(STOKER_HAVE_ARROW_GCS)
#include <arrow/filesystem/gcsfs.h>
#endif
#endif

namespace stoker {

bool IsObjectStoreUri(std::string_view p) {
  return p.substr(0, 5) == "s3://" || p.substr(0, 5) == "gs://";
}

namespace {

std::atomic<uint64_t> g_get{0}, g_bytes{0}, g_retries{0}, g_head{0}, g_list{0}, g_written{0},
    g_cut{0};

// STOKER_S3_TRACE=1: one line per request on stderr (what, URL, range, milliseconds), to see
// where a run's round trips go.
bool TraceOn() {
  static const bool on = [] {
    const char* v = std::getenv("STOKER_S3_TRACE");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

class TraceRequest {
 public:
  TraceRequest(const char* what, const std::string& url, uint64_t off = 0, uint64_t len = 0)
      : what_(what), url_(TraceOn() ? url : std::string()), off_(off), len_(len),
        t0_(TraceOn() ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{}) {}
  ~TraceRequest() {
    if (!TraceOn()) return;
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    static const auto start = std::chrono::steady_clock::now();
    double at = std::chrono::duration<double, std::milli>(t0_ - start).count();
    if (len_)
      fmt::print(stderr, "[s3] {:9.1f} ms {:<5} {} [{}, {}) {:.1f} ms\n", at, what_, url_, off_,
                 off_ + len_, ms);
    else
      fmt::print(stderr, "[s3] {:9.1f} ms {:<5} {} {:.1f} ms\n", at, what_, url_, ms);
  }

 private:
  const char* what_;
  std::string url_;
  uint64_t off_, len_;
  std::chrono::steady_clock::time_point t0_;
};

// Routes object URLs to the object-store Env and everything else to the local one.
class SchemeRouterEnv final : public Env {
 public:
  explicit SchemeRouterEnv(Env* local) : local_(local) {}
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const OpenOptions& opts) override {
    return Pick(path)->NewRandomAccessFile(path, opts);
  }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return Pick(path)->NewWritableFile(path);
  }
  Result<FileInfo> Stat(const std::string& path) override { return Pick(path)->Stat(path); }
  Result<std::vector<DirEntry>> ListDir(const std::string& path) override {
    return Pick(path)->ListDir(path);
  }
  Status CreateDirs(const std::string& path) override { return Pick(path)->CreateDirs(path); }
  Status RenameFile(const std::string& a, const std::string& b) override {
    if (IsObjectStoreUri(a) != IsObjectStoreUri(b))
      return InvalidArgument("rename {} to {}: both must be on the same storage", a, b);
    return Pick(a)->RenameFile(a, b);
  }
  Status RemoveFile(const std::string& path) override { return Pick(path)->RemoveFile(path); }
  Status DropCache(const std::string& path) override { return Pick(path)->DropCache(path); }

 private:
  Env* Pick(const std::string& path) {
    return IsObjectStoreUri(path) ? ObjectStoreEnv() : local_;
  }
  Env* local_;
};

}  // namespace

Env* NewSchemeRouterEnv(Env* local) { return new SchemeRouterEnv(local); }

ObjectStoreCounters GetObjectStoreCounters() {
  ObjectStoreCounters c;
  c.get_requests = g_get.load();
  c.bytes_read = g_bytes.load();
  c.retries = g_retries.load();
  c.head_requests = g_head.load();
  c.list_requests = g_list.load();
  c.objects_written = g_written.load();
  c.cut_responses = g_cut.load();
  return c;
}


namespace object_internal {

int64_t ParseIsoUtc(const std::string& s) {
  struct tm t {};
  int y, mo, d, h, mi, sec;
  char z = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &y, &mo, &d, &h, &mi, &sec, &z) != 7 ||
      z != 'Z' || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
    return -1;
  t.tm_year = y - 1900;
  t.tm_mon = mo - 1;
  t.tm_mday = d;
  t.tm_hour = h;
  t.tm_min = mi;
  t.tm_sec = sec;
  return static_cast<int64_t>(timegm(&t)) * 1'000'000'000;
}

namespace {
// Markers for the tail of a read: arbitrary bytes, two so that data equal to one is taken on
// the next attempt.
constexpr uint8_t kMarker[2][8] = {{0xC7, 0x1A, 0x5E, 0x93, 0x0D, 0xB4, 0x62, 0xF8},
                                   {0x38, 0xE5, 0xA1, 0x6C, 0xF2, 0x4B, 0x9D, 0x07}};
constexpr const char* kEmptyObjectEtag = "d41d8cd98f00b204e9800998ecf8427e";

std::string Unquote(const std::string& e) {
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') return e.substr(1, e.size() - 2);
  return e;
}
}  // namespace

Status ReadChecked(const std::string& url, uint64_t object_size, uint64_t off, size_t len,
                   uint8_t* dst, const ReadFn& read, const RetryPolicy& policy, uint64_t* cut) {
  size_t done = 0;
  int cuts = 0;
  for (int attempt = 0; done < len; ++attempt) {
    size_t want = len - done;
    uint8_t* d = dst + done;
    size_t k = std::min<size_t>(sizeof kMarker[0], want);
    const uint8_t* marker = kMarker[attempt & 1];
    std::memcpy(d + want - k, marker, k);
    STOKER_ASSIGN_OR_RETURN(size_t got, read(off + done, want, d));
    if (got == 0) {
      // The server says the object ends before the size it had at open: it changed or was
      // truncated during the read.
      return Corrupt(
          "{}: read bytes [{}, {}): the object ended at {} but had {} bytes when opened: it "
          "changed or was truncated during the read",
          url, off, off + len, off + done, object_size);
    }
    if (got >= want && std::memcmp(d + want - k, marker, k) == 0) {
      // Reported complete, but the end of the range was never written: the response was cut
      // (inside its headers) and the client took it for a whole one. Ask again.
      ++cuts;
      if (cut) ++*cut;
    } else {
      done += std::min(got, want);
    }
    if (done < len) {
      bool expired = policy.expired && policy.expired();
      if (expired || attempt + 1 >= policy.max_attempts) {
        if (cuts > 0)
          return DeadlineExceeded(
              "{}: read bytes [{}, {}): {} of {} attempts came back cut short (the connection "
              "closed inside the response; the client reported success), got {} of {} bytes",
              url, off, off + len, cuts, attempt + 1, done, len);
        return DeadlineExceeded("{}: read bytes [{}, {}): got {} of {} bytes before the deadline",
                                url, off, off + len, done, len);
      }
      if (policy.backoff) policy.backoff(attempt);
    }
  }
  return Status::OK();
}

Result<HeadAnswer> HeadChecked(const std::string& url, const HeadFn& head, bool want_etag,
                               const RetryPolicy& policy, uint64_t* cut) {
  HeadAnswer last;
  int same = 0;
  for (int attempt = 0;; ++attempt) {
    STOKER_ASSIGN_OR_RETURN(HeadAnswer a, head());
    if (!want_etag) return a;  // not an S3 client's answer (GCS's JSON API: parsed bodies)
    bool complete = !a.etag.empty() && (a.size > 0 || Unquote(a.etag) == kEmptyObjectEtag);
    if (complete) return a;
    same = (attempt > 0 && a.size == last.size && a.etag == last.etag) ? same + 1 : 1;
    // An empty object uploaded in parts has a multipart ETag ("<md5>-1"), not the MD5 of
    // nothing: the same answer three times is taken. A single-part ETag with size 0 is a cut
    // answer (that object is not empty), and so is an answer without an ETag (S3 always
    // sends one): never taken.
    if (same >= 3 && a.etag.find('-') != std::string::npos) return a;
    last = a;
    if (cut) ++*cut;
    if ((policy.expired && policy.expired()) || attempt + 1 >= std::max(policy.max_attempts, 3))
      return DeadlineExceeded(
          "{}: stat: {} HEAD answers came back incomplete (no {}; the connection closed inside "
          "the response) before the deadline",
          url, attempt + 1, a.size == 0 ? "Content-Length" : "ETag");
    if (policy.backoff) policy.backoff(attempt);
  }
}

}  // namespace object_internal

#if !defined(STOKER_HAVE_ARROW_S3)

namespace {
Status NoS3(const std::string& path) {
  return Unimplemented(
      "{}: stoker was built without S3 support (Arrow's S3FileSystem from the pyarrow wheel: "
      "pip install 'pyarrow<21' into .venv and reconfigure): object storage is unavailable",
      path);
}
class UnavailableObjectEnv final : public Env {
 public:
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& p,
                                                                const OpenOptions&) override {
    return NoS3(p);
  }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& p) override {
    return NoS3(p);
  }
  Result<FileInfo> Stat(const std::string& p) override { return NoS3(p); }
  Result<std::vector<DirEntry>> ListDir(const std::string& p) override { return NoS3(p); }
  Status CreateDirs(const std::string& p) override { return NoS3(p); }
  Status RenameFile(const std::string& a, const std::string&) override { return NoS3(a); }
  Status RemoveFile(const std::string& p) override { return NoS3(p); }
  Status DropCache(const std::string& p) override { return NoS3(p); }
};
}  // namespace

bool ObjectStoreAvailable() { return false; }
Env* ObjectStoreEnv() {
  static UnavailableObjectEnv env;
  return &env;
}
void ResetObjectStoreConfigForTesting() {}
void PrefetchObject(const std::string&, uint64_t) {}
ObjectPrefetchCounters GetObjectPrefetchCounters() { return {}; }

#else  // STOKER_HAVE_ARROW_S3

namespace {

namespace afs = arrow::fs;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string EnvStr(const char* name, const std::string& def = "") {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : def;
}
double EnvNum(const char* name, double def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  return end && *end == 0 && d > 0 ? d : def;
}
bool EnvTrue(const char* name) {
  std::string v = EnvStr(name);
  return v == "1" || v == "true" || v == "TRUE" || v == "yes";
}

struct Config {
  int max_attempts = 8;
  double retry_base_ms = 50, retry_cap_ms = 5000;
  double connect_timeout_s = 3, request_timeout_s = 10, deadline_s = 60;
  uint64_t part_bytes = 8ull << 20;
  // Read-ahead blocks (0: off) and how many are fetched ahead, in parallel (one GET each).
  // Measured (bench/remote, S3Proxy behind 20 ms and 25 MB/s per connection, 16
  // connections, with the look-ahead across shards): 2 MiB x 16 ahead read 10 MB shards at
  // 107 MB/s and 100 MB shards at 168-178 (2 MiB x 8: 86-101 and 136; 4 MiB x 12: 77 and 190;
  // 8 MiB x 4: 119 on 100 MB shards); on 100 MB shards 2 MiB x 24 194-200, x 32 158-160 —
  // the bytes in flight per file set the rate, up to what the connections carry. A file
  // smaller than the window is fetched whole (10 MB shards are unchanged by the depth).
  uint64_t block_bytes = 2ull << 20;
  int blocks_ahead = 24;
  uint64_t readahead_budget = 512ull << 20;
  int threads = 16;
  static Config FromEnv() {
    Config c;
    c.max_attempts = static_cast<int>(EnvNum("AWS_MAX_ATTEMPTS", c.max_attempts));
    c.retry_base_ms = EnvNum("STOKER_S3_RETRY_BASE_MS", c.retry_base_ms);
    c.connect_timeout_s = EnvNum("STOKER_S3_CONNECT_TIMEOUT_S", c.connect_timeout_s);
    c.request_timeout_s = EnvNum("STOKER_S3_REQUEST_TIMEOUT_S", c.request_timeout_s);
    c.deadline_s = EnvNum("STOKER_S3_DEADLINE_S", c.deadline_s);
    c.part_bytes = static_cast<uint64_t>(EnvNum("STOKER_S3_PART_MB", 8) * (1 << 20));
    c.threads = static_cast<int>(EnvNum("STOKER_S3_THREADS", c.threads));
    const char* blk = std::getenv("STOKER_S3_BLOCK_MB");
    if (blk && std::string(blk) == "0") {
      c.block_bytes = 0;
    } else {
      c.block_bytes = static_cast<uint64_t>(EnvNum("STOKER_S3_BLOCK_MB", 2) * (1 << 20));
    }
    // A block is one ranged GET (never split into parts on the pool that runs prefetches).
    c.block_bytes = std::min(c.block_bytes, c.part_bytes + c.part_bytes / 2);
    c.readahead_budget = static_cast<uint64_t>(EnvNum("STOKER_S3_READAHEAD_MB", 512) * (1 << 20));
    c.blocks_ahead = static_cast<int>(EnvNum("STOKER_S3_READAHEAD_BLOCKS", c.blocks_ahead));
    return c;
  }
};

// The deadline of the object-store call running on this thread (0 = none): the retry
// strategy starts no attempt after it. The AWS SDK retries synchronous calls on the caller's
// thread, so a thread-local reaches it.
thread_local int64_t tl_deadline_ns = 0;
thread_local std::string tl_last_error;

class DeadlineScope {
 public:
  explicit DeadlineScope(double seconds) : saved_(tl_deadline_ns) {
    int64_t d = NowNs() + static_cast<int64_t>(seconds * 1e9);
    if (tl_deadline_ns == 0 || d < tl_deadline_ns) tl_deadline_ns = d;
    tl_last_error.clear();
  }
  ~DeadlineScope() { tl_deadline_ns = saved_; }
  bool expired() const { return tl_deadline_ns != 0 && NowNs() >= tl_deadline_ns; }

 private:
  int64_t saved_;
};

double BackoffCapMs(const Config& c, int64_t attempted) {
  return std::min(c.retry_cap_ms,
                  c.retry_base_ms * static_cast<double>(1ull << std::min<int64_t>(attempted, 20)));
}

// The retry policy of our own re-asks (responses the client took for complete although cut):
// the same backoff as the SDK's retries, inside the call's deadline.
object_internal::RetryPolicy Policy(const Config& c, const DeadlineScope& dl) {
  object_internal::RetryPolicy p;
  p.max_attempts = c.max_attempts;
  p.expired = [&dl] { return dl.expired(); };
  p.backoff = [c](int attempt) {
    thread_local std::mt19937_64 rng(std::random_device{}());
    std::uniform_real_distribution<double> u(0.0, BackoffCapMs(c, attempt));
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(u(rng) * 1e3)));
  };
  return p;
}

// Exponential backoff with full jitter (AWS's "Exponential Backoff And Jitter"): attempt k
// waits uniform(0, min(cap, base * 2^k)).
class BackoffRetryStrategy final : public afs::S3RetryStrategy {
 public:
  explicit BackoffRetryStrategy(const Config& c) : cfg_(c) {}
  bool ShouldRetry(const AWSErrorDetail& e, int64_t attempted) override {
    tl_last_error = e.exception_name.empty() ? e.message : e.exception_name + ": " + e.message;
    if (attempted + 1 >= cfg_.max_attempts) return false;
    bool retryable = e.should_retry || e.exception_name == "SlowDown" ||
                     e.exception_name == "InternalError" ||
                     e.exception_name == "ServiceUnavailable" ||
                     e.exception_name == "RequestTimeout";
    if (!retryable) return false;
    if (tl_deadline_ns != 0 &&
        NowNs() + static_cast<int64_t>(Cap(attempted) * 1e6) > tl_deadline_ns)
      return false;
    g_retries.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  int64_t CalculateDelayBeforeNextRetry(const AWSErrorDetail&, int64_t attempted) override {
    thread_local std::mt19937_64 rng(std::random_device{}());
    std::uniform_real_distribution<double> u(0.0, Cap(attempted));
    return static_cast<int64_t>(u(rng));
  }

 private:
  double Cap(int64_t attempted) const { return BackoffCapMs(cfg_, attempted); }
  Config cfg_;
};

// A small pool for the parts of large reads (each part is one ranged GET on its own
// connection from the SDK's pool).
class PartPool {
 public:
  explicit PartPool(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
  }
  void Schedule(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      q_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return !q_.empty(); });
        fn = std::move(q_.front());
        q_.erase(q_.begin());
      }
      fn();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::function<void()>> q_;
  std::vector<std::thread> threads_;  // detached at exit with the process (never joined)
};

std::string ArrowMsg(const arrow::Status& st) {
  std::string m = st.message();
  if (!tl_last_error.empty() && m.find(tl_last_error) == std::string::npos)
    m += " (last error: " + tl_last_error + ")";
  return m;
}

Status FromArrow(const arrow::Status& st, const std::string& what) {
  if (st.ok()) return Status::OK();
  std::string m = ArrowMsg(st);
  if (st.IsIOError() && (m.find("NETWORK_CONNECTION") != std::string::npos ||
                         m.find("curlCode") != std::string::npos ||
                         m.find("timed out") != std::string::npos))
    return DeadlineExceeded("{}: {}", what, m);
  if (m.find("AWS Error RESOURCE_NOT_FOUND") != std::string::npos ||
      m.find("NoSuchKey") != std::string::npos || m.find("NoSuchBucket") != std::string::npos ||
      m.find("Path does not exist") != std::string::npos)
    return NotFound("{}: {}", what, m);
  return IOError("{}: {}", what, m);
}

// One scheme's Arrow file system plus the URL prefix ("s3://") it serves.
struct Backend {
  std::shared_ptr<afs::FileSystem> fs;
  std::string scheme;  // "s3://" or "gs://"
  bool s3_client = true;  // served by Arrow's S3FileSystem (S3, or GCS through HMAC keys)
};

class ObjectRandomAccessFile final : public RandomAccessFile {
 public:
  ObjectRandomAccessFile(std::string url, std::shared_ptr<arrow::io::RandomAccessFile> f,
                         uint64_t size, std::string etag, const Config& cfg, PartPool* pool)
      : url_(std::move(url)), f_(std::move(f)), size_(size), etag_(std::move(etag)),
        cfg_(cfg), pool_(pool) {}

  Result<size_t> ReadAt(uint64_t offset, size_t n, uint8_t* dst) const override {
    if (offset >= size_ || n == 0) return size_t{0};
    n = static_cast<size_t>(std::min<uint64_t>(n, size_ - offset));
    if (n <= cfg_.part_bytes + cfg_.part_bytes / 2) {
      STOKER_RETURN_IF_ERROR(ReadPart(offset, n, dst));
      return n;
    }
    // Large read: parallel ranged GETs of part_bytes; this thread does the first part.
    size_t parts = (n + cfg_.part_bytes - 1) / cfg_.part_bytes;
    struct Shared {
      std::mutex mu;
      std::condition_variable cv;
      size_t left;
      Status first_error;
    };
    auto sh = std::make_shared<Shared>();
    sh->left = parts - 1;
    for (size_t i = 1; i < parts; ++i) {
      uint64_t off = offset + i * cfg_.part_bytes;
      size_t len = static_cast<size_t>(std::min<uint64_t>(cfg_.part_bytes, offset + n - off));
      uint8_t* d = dst + i * cfg_.part_bytes;
      pool_->Schedule([this, sh, off, len, d] {
        Status st = ReadPart(off, len, d);
        std::lock_guard<std::mutex> lk(sh->mu);
        if (!st.ok() && sh->first_error.ok()) sh->first_error = st;
        if (--sh->left == 0) sh->cv.notify_all();
      });
    }
    Status st0 = ReadPart(offset, static_cast<size_t>(cfg_.part_bytes), dst);
    std::unique_lock<std::mutex> lk(sh->mu);
    sh->cv.wait(lk, [&] { return sh->left == 0; });
    if (!st0.ok()) return st0;
    if (!sh->first_error.ok()) return sh->first_error;
    return n;
  }
  uint64_t size() const override { return size_; }
  const std::string& path() const override { return url_; }
  std::string version() const override { return etag_; }

 private:
  Status ReadPart(uint64_t off, size_t len, uint8_t* dst) const {
    DeadlineScope dl(cfg_.deadline_s);
    // The SDK retries whole requests that fail; ReadChecked also catches the responses it
    // takes for complete although they were cut (nothing written), and resumes short reads.
    uint64_t cut = 0;
    Status st = object_internal::ReadChecked(
        url_, size_, off, len, dst,
        [&](uint64_t o, size_t n, uint8_t* d) -> Result<size_t> {
          g_get.fetch_add(1, std::memory_order_relaxed);
          TraceRequest trace("GET", url_, o, n);
          auto r = f_->ReadAt(static_cast<int64_t>(o), static_cast<int64_t>(n), d);
          if (!r.ok())
            return FromArrow(r.status(), fmt::format("{}: read bytes [{}, {}) (object size {})",
                                                     url_, off, off + len, size_));
          g_bytes.fetch_add(static_cast<uint64_t>(*r), std::memory_order_relaxed);
          return static_cast<size_t>(*r);
        },
        Policy(cfg_, dl), &cut);
    if (cut) {
      g_cut.fetch_add(cut, std::memory_order_relaxed);
      g_retries.fetch_add(cut, std::memory_order_relaxed);
    }
    return st;
  }

  std::string url_;
  std::shared_ptr<arrow::io::RandomAccessFile> f_;
  uint64_t size_;
  std::string etag_;
  Config cfg_;
  PartPool* pool_;
};

// A shared file as a unique one (the read-ahead decorator shares its file with prefetches).
class SharedFile final : public RandomAccessFile {
 public:
  explicit SharedFile(std::shared_ptr<RandomAccessFile> f) : f_(std::move(f)) {}
  Result<size_t> ReadAt(uint64_t o, size_t n, uint8_t* d) const override { return f_->ReadAt(o, n, d); }
  uint64_t size() const override { return f_->size(); }
  const std::string& path() const override { return f_->path(); }
  std::string version() const override { return f_->version(); }

 private:
  std::shared_ptr<RandomAccessFile> f_;
};

class ObjectWritableFile final : public WritableFile {
 public:
  ObjectWritableFile(std::string url, std::shared_ptr<arrow::io::OutputStream> out)
      : url_(std::move(url)), out_(std::move(out)) {}
  ~ObjectWritableFile() override {
    // Destroyed without Close (an error path): abort the multipart upload so that no
    // partial object ever becomes visible.
    if (out_) (void)out_->Abort();
  }
  Status Append(const void* data, size_t n) override {
    if (!out_) return IOError("{}: append after close", url_);
    auto st = out_->Write(data, static_cast<int64_t>(n));
    if (!st.ok()) return FromArrow(st, fmt::format("{}: write at offset {}", url_, written_));
    written_ += n;
    return Status::OK();
  }
  Status Flush() override { return Status::OK(); }  // parts go up as they fill
  Status Sync() override { return Status::OK(); }   // durable when Close completes
  Status Close() override {
    if (!out_) return Status::OK();
    DeadlineScope dl(600);
    auto st = out_->Close();  // completes the multipart upload: the object appears now
    out_.reset();
    if (!st.ok()) return FromArrow(st, fmt::format("{}: completing upload of {} bytes", url_, written_));
    g_written.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }
  uint64_t bytes_written() const override { return written_; }
  const std::string& path() const override { return url_; }

 private:
  std::string url_;
  std::shared_ptr<arrow::io::OutputStream> out_;
  uint64_t written_ = 0;
};

// Splits "http://host:port" into scheme and "host:port".
void ParseEndpoint(const std::string& url, std::string* scheme, std::string* host) {
  auto p = url.find("://");
  if (p == std::string::npos) {
    *scheme = "https";
    *host = url;
  } else {
    *scheme = url.substr(0, p);
    *host = url.substr(p + 3);
  }
  while (!host->empty() && host->back() == '/') host->pop_back();
}

class ArrowObjectEnv;
ArrowObjectEnv* TheEnv();

class ArrowObjectEnv final : public Env {
 public:
  ArrowObjectEnv() { Reset(); }

  void Reset() {
    std::lock_guard<std::mutex> lk(mu_);
    cfg_ = Config::FromEnv();
    SetReadAheadBudget(cfg_.readahead_budget);
    s3_.reset();
    gs_.reset();
    by_bucket_.clear();
    if (!pool_) pool_ = new PartPool(std::max(1, cfg_.threads));  // lives until exit
  }

  // At exit, before the SDK shuts down: the clients go first.
  void DropClients() {
    std::lock_guard<std::mutex> lk(mu_);
    s3_.reset();
    gs_.reset();
    by_bucket_.clear();
  }

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& url,
                                                                const OpenOptions& opts) override {
    if (!opts.direct) {
      std::lock_guard<std::mutex> lk(park_mu_);
      for (auto it = parked_.begin(); it != parked_.end(); ++it) {
        if (it->first != url) continue;
        auto file = std::move(it->second);
        parked_.erase(it);
        ++prefetch_.adopted;
        open_[url] = file;
        return std::unique_ptr<RandomAccessFile>(new SharedFile(std::move(file)));
      }
      auto p = pending_.find(url);
      if (p != pending_.end()) p->second = true;  // opened here first: the prefetch is moot
    }
    STOKER_ASSIGN_OR_RETURN(auto file, OpenObject(url, opts));
    if (opts.direct) return file;
    std::shared_ptr<RandomAccessFile> shared(std::move(file));
    {
      std::lock_guard<std::mutex> lk(park_mu_);
      open_[url] = shared;
      if (open_.size() > 4096)  // forget the closed ones now and then
        for (auto it = open_.begin(); it != open_.end();)
          it = it->second.expired() ? open_.erase(it) : std::next(it);
    }
    return std::unique_ptr<RandomAccessFile>(new SharedFile(std::move(shared)));
  }

  // PrefetchObject: see object_prefetch.h.
  void Prefetch(const std::string& url, uint64_t offset) {
    if (cfg_.block_bytes == 0) return;
    {
      std::lock_guard<std::mutex> lk(park_mu_);
      // Open already (a reader keeps its shards open across epochs): warm that file.
      auto o = open_.find(url);
      if (o != open_.end()) {
        if (auto live = o->second.lock()) {
          WarmReadAhead(*live, offset);
          ++prefetch_.hints;
          ++prefetch_.adopted;
          return;
        }
        open_.erase(o);
      }
      if (pending_.count(url)) return;
      for (const auto& p : parked_)
        if (p.first == url) return;
      pending_.emplace(url, false);
      ++prefetch_.hints;
    }
    pool_->Schedule([this, url, offset] {
      auto f = OpenObject(url, OpenOptions{});
      std::shared_ptr<RandomAccessFile> file;
      if (f.ok()) file = std::shared_ptr<RandomAccessFile>(std::move(f).value());
      std::lock_guard<std::mutex> lk(park_mu_);
      auto p = pending_.find(url);
      bool moot = p == pending_.end() || p->second;
      if (p != pending_.end()) pending_.erase(p);
      if (!file || moot) {
        ++prefetch_.dropped;
        return;
      }
      WarmReadAhead(*file, offset);
      parked_.emplace_front(url, std::move(file));
      while (parked_.size() > kMaxParked) {
        parked_.pop_back();
        ++prefetch_.dropped;
      }
    });
  }

  ObjectPrefetchCounters prefetch_counters() {
    std::lock_guard<std::mutex> lk(park_mu_);
    return prefetch_;
  }

  Result<std::unique_ptr<RandomAccessFile>> OpenObject(const std::string& url,
                                                       const OpenOptions& opts) {
    STOKER_ASSIGN_OR_RETURN(auto b, BackendFor(url));
    STOKER_ASSIGN_OR_RETURN(std::string key, KeyOf(url));
    DeadlineScope dl(cfg_.deadline_s);
    std::shared_ptr<arrow::io::RandomAccessFile> file;
    STOKER_ASSIGN_OR_RETURN(auto head, Head(b, key, url, dl, &file));
    auto object = std::make_shared<ObjectRandomAccessFile>(url, std::move(file), head.size,
                                                           std::move(head.etag), cfg_, pool_);
    if (opts.direct || cfg_.block_bytes == 0)
      return std::unique_ptr<RandomAccessFile>(new SharedFile(std::move(object)));
    // Small reads that follow each other (a tar scanned header by header, a shard's samples
    // in order) become one GET per block, the next block fetched while this one is used.
    ReadAheadOptions ra;
    ra.block_bytes = cfg_.block_bytes;
    ra.max_small_read = cfg_.block_bytes / 2;
    ra.ahead = cfg_.blocks_ahead;
    PartPool* pool = pool_;
    ra.executor = [pool](std::function<void()> fn) { pool->Schedule(std::move(fn)); };
    return NewReadAheadFile(std::move(object), ra);
  }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& url) override {
    STOKER_ASSIGN_OR_RETURN(auto b, BackendFor(url));
    STOKER_ASSIGN_OR_RETURN(std::string key, KeyOf(url));
    DeadlineScope dl(cfg_.deadline_s);
    auto out = b.fs->OpenOutputStream(key);
    if (!out.ok()) return Explain(b, url, out.status(), "create");
    return std::unique_ptr<WritableFile>(new ObjectWritableFile(url, std::move(*out)));
  }

  Result<FileInfo> Stat(const std::string& url) override {
    STOKER_ASSIGN_OR_RETURN(auto b, BackendFor(url));
    STOKER_ASSIGN_OR_RETURN(std::string key, KeyOf(url));
    DeadlineScope dl(cfg_.deadline_s);
    if (b.s3_client) {
      // One HEAD answers for an object (size, ETag, Last-Modified) when the answer is
      // complete and not empty; anything else (no such key, a prefix, an empty object or
      // a directory marker, an error) takes the checked path below.
      auto head = HeadOnce(b, key, url);
      if (head.ok() && head->size > 0 && !head->etag.empty() && head->mtime_ns >= 0) {
        FileInfo fi;
        fi.size = head->size;
        fi.mtime_ns = head->mtime_ns;
        fi.version = std::move(head->etag);
        return fi;
      }
    }
    g_head.fetch_add(1, std::memory_order_relaxed);
    auto info = [&] {
      TraceRequest trace("STAT", url);
      return b.fs->GetFileInfo(key);
    }();
    if (!info.ok()) return Explain(b, url, info.status(), "stat");
    FileInfo fi;
    switch (info->type()) {
      case afs::FileType::File: {
        fi.size = static_cast<uint64_t>(info->size());
        fi.mtime_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          info->mtime().time_since_epoch())
                          .count();
        // The ETag comes with a HEAD of the object (Arrow's FileInfo has no field for it); the
        // checked HEAD's size too (GetFileInfo's own HEAD may have been cut short).
        STOKER_ASSIGN_OR_RETURN(auto head, Head(b, key, url, dl, nullptr));
        fi.size = head.size;
        fi.version = std::move(head.etag);
        return fi;
      }
      case afs::FileType::Directory:
        fi.is_dir = true;
        return fi;
      default:
        return Explain(b, url, arrow::Status::IOError("Path does not exist"), "stat");
    }
  }

  Result<std::vector<DirEntry>> ListDir(const std::string& url) override {
    STOKER_ASSIGN_OR_RETURN(auto b, BackendFor(url));
    STOKER_ASSIGN_OR_RETURN(std::string key, KeyOf(url));
    DeadlineScope dl(cfg_.deadline_s);
    g_list.fetch_add(1, std::memory_order_relaxed);
    afs::FileSelector sel;
    sel.base_dir = key;
    sel.recursive = false;
    // Arrow's GcsFileSystem lists one level through objects only: it drops the "prefixes" of
    // a delimited listing, so a sub-folder without a marker object (what gcloud, gsutil and
    // the JSON API leave) is not listed. gs:// lists the subtree and folds it to one level.
    bool fold = IsGcsJsonApi(b);
    if (fold) sel.recursive = true;
    auto infos = [&] {
      TraceRequest trace("LIST", url);
      return b.fs->GetFileInfo(sel);
    }();
    if (!infos.ok()) return Explain(b, url, infos.status(), "list");
    std::vector<DirEntry> out;
    if (fold) {
      std::map<std::string, bool> first;  // first path component below key -> is a dir
      std::string base = key + "/";
      for (const auto& i : *infos) {
        const std::string& p = i.path();
        if (p.compare(0, base.size(), base) != 0 || p.size() == base.size()) continue;
        std::string rel = p.substr(base.size());
        auto slash = rel.find('/');
        bool dir = slash != std::string::npos || i.IsDirectory();
        if (slash != std::string::npos) rel.resize(slash);
        first[rel] = first[rel] || dir;
      }
      for (const auto& [name, dir] : first) out.push_back({name, dir});
    } else {
      for (const auto& i : *infos) out.push_back({i.base_name(), i.IsDirectory()});
    }
    std::sort(out.begin(), out.end(),
              [](const DirEntry& a, const DirEntry& c) { return a.name < c.name; });
    return out;
  }

  // Object stores have no directories: keys under a prefix exist by themselves.
  Status CreateDirs(const std::string&) override { return Status::OK(); }

  // Server-side copy then delete (S3 CopyObject: up to 5 GB per object). Writers upload to
  // "<key>.partial" and rename, so a reader never sees a shard before it is complete.
  Status RenameFile(const std::string& from, const std::string& to) override {
    STOKER_ASSIGN_OR_RETURN(auto b, BackendFor(from));
    STOKER_ASSIGN_OR_RETURN(auto b2, BackendFor(to));
    if (b.fs != b2.fs) return InvalidArgument("rename {} to {}: different stores", from, to);
    STOKER_ASSIGN_OR_RETURN(std::string a, KeyOf(from));
    STOKER_ASSIGN_OR_RETURN(std::string c, KeyOf(to));
    DeadlineScope dl(cfg_.deadline_s);
    auto st = b.fs->Move(a, c);
    if (!st.ok()) return Explain(b, from, st, "rename to " + to);
    return Status::OK();
  }

  Status RemoveFile(const std::string& url) override {
    STOKER_ASSIGN_OR_RETURN(auto b, BackendFor(url));
    STOKER_ASSIGN_OR_RETURN(std::string key, KeyOf(url));
    DeadlineScope dl(cfg_.deadline_s);
    auto st = b.fs->DeleteFile(key);
    if (!st.ok()) return Explain(b, url, st, "remove");
    return Status::OK();
  }
  Status DropCache(const std::string&) override { return Status::OK(); }

 private:
  static Result<std::string> KeyOf(const std::string& url) {
    std::string k = url.substr(5);
    while (!k.empty() && k.back() == '/') k.pop_back();
    if (k.empty() || k.front() == '/') return InvalidArgument("{}: no bucket in the URL", url);
    return k;
  }

  // One HEAD of an object (Arrow's OpenInputFile), unchecked. `file` gets the opened handle.
  Result<object_internal::HeadAnswer> HeadOnce(
      const Backend& b, const std::string& key, const std::string& url,
      std::shared_ptr<arrow::io::RandomAccessFile>* file = nullptr) {
    g_head.fetch_add(1, std::memory_order_relaxed);
    TraceRequest trace("HEAD", url);
    auto f = b.fs->OpenInputFile(key);
    if (!f.ok()) return Explain(b, url, f.status(), "open");
    auto sz = (*f)->GetSize();
    if (!sz.ok()) return FromArrow(sz.status(), url + ": size");
    object_internal::HeadAnswer a;
    a.size = static_cast<uint64_t>(*sz);
    auto md = (*f)->ReadMetadata();
    if (md.ok() && *md) {
      // GCS's JSON API: the object's generation (a new one on every write) is its
      // version; Arrow passes the metadata fields under their JSON names.
      auto e = (*md)->Get(IsGcsJsonApi(b) ? "generation" : "ETag");
      if (e.ok()) a.etag = *e;
      auto lm = (*md)->Get("Last-Modified");
      if (lm.ok()) a.mtime_ns = object_internal::ParseIsoUtc(*lm);
    }
    if (file) *file = std::move(*f);
    return a;
  }

  // HEAD of an object, checked for an answer cut inside its headers
  // (object_internal::HeadChecked). `file` gets the opened handle of the answer taken.
  Result<object_internal::HeadAnswer> Head(const Backend& b, const std::string& key,
                                           const std::string& url, const DeadlineScope& dl,
                                           std::shared_ptr<arrow::io::RandomAccessFile>* file) {
    uint64_t cut = 0;
    auto r = object_internal::HeadChecked(
        url, [&]() { return HeadOnce(b, key, url, file); },
        /*want_etag=*/b.s3_client, Policy(cfg_, dl), &cut);
    if (cut) {
      g_cut.fetch_add(cut, std::memory_order_relaxed);
      g_retries.fetch_add(cut, std::memory_order_relaxed);
    }
    return r;
  }

  // gs:// through Arrow's GcsFileSystem (google-cloud-cpp, JSON API), not through HMAC keys
  // on the XML API (the S3 client).
  static bool IsGcsJsonApi(const Backend& b) { return b.scheme == "gs://" && !b.s3_client; }

  // A clear error: missing bucket vs missing key vs denied.
  Status Explain(const Backend& b, const std::string& url, const arrow::Status& st,
                 const std::string& what) {
    std::string m = ArrowMsg(st);
    std::string bucket = url.substr(5, url.find('/', 5) == std::string::npos
                                           ? std::string::npos
                                           : url.find('/', 5) - 5);
    bool not_found = m.find("Path does not exist") != std::string::npos ||
                     m.find("NoSuchKey") != std::string::npos ||
                     m.find("RESOURCE_NOT_FOUND") != std::string::npos ||
                     m.find("NoSuchBucket") != std::string::npos ||
                     m.find("not found") != std::string::npos ||
                     (IsGcsJsonApi(b) && (m.find("NOT_FOUND") != std::string::npos ||
                                          m.find("No such file or directory") !=
                                              std::string::npos));
    if (IsGcsJsonApi(b) && (m.find("PERMISSION_DENIED") != std::string::npos ||
                            m.find("UNAUTHENTICATED") != std::string::npos))
      return IOError("{}: {}: access denied (check GOOGLE_APPLICATION_CREDENTIALS, the "
                     "account's roles on the bucket, or STORAGE_EMULATOR_HOST): {}", url, what, m);
    if (m.find("ACCESS_DENIED") != std::string::npos || m.find("AccessDenied") != std::string::npos ||
        m.find("SignatureDoesNotMatch") != std::string::npos ||
        m.find("InvalidAccessKeyId") != std::string::npos ||
        m.find("HTTP response code: 403") != std::string::npos)
      return IOError("{}: {}: access denied (check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                     "AWS_PROFILE or the bucket's policy): {}", url, what, m);
    if (not_found) {
      auto bi = b.fs->GetFileInfo(bucket);
      if (bi.ok() && bi->type() == afs::FileType::NotFound)
        return NotFound("{}: {}: no such bucket '{}'", url, what, bucket);
      return NotFound("{}: {}: no such object", url, what);
    }
    return FromArrow(st, fmt::format("{}: {}", url, what));
  }

  Result<Backend> BackendFor(const std::string& url) {
    std::lock_guard<std::mutex> lk(mu_);
    if (url.rfind("gs://", 0) == 0) {
      if (!gs_) {
        STOKER_ASSIGN_OR_RETURN(gs_, MakeGcs());
      }
      return Backend{gs_, "gs://", gs_s3_client_};
    }
    if (url.rfind("s3://", 0) != 0) return InvalidArgument("{}: not an object URL", url);
    std::string ep = EnvStr("AWS_ENDPOINT_URL_S3", EnvStr("AWS_ENDPOINT_URL"));
    std::string region = EnvStr("AWS_REGION", EnvStr("AWS_DEFAULT_REGION"));
    if (!ep.empty() || !region.empty()) {
      if (!s3_) {
        STOKER_ASSIGN_OR_RETURN(s3_, MakeS3(ep, region));
      }
      return Backend{s3_, "s3://"};
    }
    // AWS without a region: each bucket's region is looked up once.
    std::string bucket = url.substr(5, url.find('/', 5) - 5);
    auto it = by_bucket_.find(bucket);
    if (it != by_bucket_.end()) return Backend{it->second, "s3://"};
    auto r = afs::ResolveS3BucketRegion(bucket);
    std::string reg = r.ok() ? *r : "us-east-1";
    STOKER_ASSIGN_OR_RETURN(auto fs, MakeS3("", reg));
    by_bucket_[bucket] = fs;
    return Backend{fs, "s3://"};
  }

  Result<std::shared_ptr<afs::FileSystem>> MakeS3(const std::string& endpoint,
                                                  const std::string& region,
                                                  const std::string& key_id = "",
                                                  const std::string& secret = "") {
    STOKER_RETURN_IF_ERROR(EnsureInit());
    afs::S3Options o = afs::S3Options::Defaults();
    if (!key_id.empty()) {
      o.ConfigureAccessKey(key_id, secret);
    } else if (EnvTrue("AWS_NO_SIGN_REQUEST")) {
      o.ConfigureAnonymousCredentials();
    }
    o.region = region.empty() ? (endpoint.empty() ? "" : "us-east-1") : region;
    if (!endpoint.empty()) ParseEndpoint(endpoint, &o.scheme, &o.endpoint_override);
    std::string addressing = EnvStr("STOKER_S3_ADDRESSING");
    if (addressing == "virtual") o.force_virtual_addressing = true;
    o.connect_timeout = cfg_.connect_timeout_s;
    o.request_timeout = cfg_.request_timeout_s;
    o.retry_strategy = std::make_shared<BackoffRetryStrategy>(cfg_);
    o.allow_bucket_creation = false;
    o.allow_bucket_deletion = false;
    auto fs = afs::S3FileSystem::Make(o);
    if (!fs.ok()) return FromArrow(fs.status(), "s3: creating the client");
    return std::shared_ptr<afs::FileSystem>(*fs);
  }

  Result<std::shared_ptr<afs::FileSystem>> MakeGcs() {
    std::string hkey = EnvStr("STOKER_GCS_HMAC_KEY_ID"), hsec = EnvStr("STOKER_GCS_HMAC_SECRET");
    gs_s3_client_ = !hkey.empty() && !hsec.empty();
    if (gs_s3_client_)
      return MakeS3(EnvStr("STOKER_GCS_XML_ENDPOINT", "https://storage.googleapis.com"),
                    "auto", hkey, hsec);
#if defined(STOKER_HAVE_ARROW_GCS)
    std::string emu = EnvStr("STORAGE_EMULATOR_HOST");
    afs::GcsOptions o = emu.empty() ? afs::GcsOptions::Defaults() : afs::GcsOptions::Anonymous();
    if (!emu.empty()) ParseEndpoint(emu.find("://") == std::string::npos ? "http://" + emu : emu,
                                    &o.scheme, &o.endpoint_override);
    o.retry_limit_seconds = cfg_.deadline_s;
    auto fs = afs::GcsFileSystem::Make(o);
    if (!fs.ok()) return FromArrow(fs.status(), "gs: creating the client");
    return std::shared_ptr<afs::FileSystem>(*fs);
#else
    return Unimplemented(
        "gs://: this Arrow has no GcsFileSystem; set STOKER_GCS_HMAC_KEY_ID and "
        "STOKER_GCS_HMAC_SECRET to use GCS's XML API with HMAC keys");
#endif
  }

  static Status EnsureInit() {
    static Status st = [] {
      afs::S3GlobalOptions g = afs::S3GlobalOptions::Defaults();
      g.log_level = afs::S3LogLevel::Fatal;
      auto s = afs::InitializeS3(g);
      if (!s.ok() && !afs::IsS3Initialized())
        return IOError("s3: initializing the AWS SDK: {}", s.message());
      // Not finalized at exit: FinalizeS3 from an atexit handler crashed inside Arrow 20's
      // AwsInstance::Finalize (even with every client dropped first), while leaving it to
      // libarrow's own static destructor exits cleanly, with Arrow's warning "FinalizeS3 was
      // not called" on stderr. Our file systems live until exit.
      return Status::OK();
    }();
    return st;
  }

  std::mutex mu_;
  Config cfg_;
  std::shared_ptr<afs::FileSystem> s3_, gs_;
  bool gs_s3_client_ = false;
  std::map<std::string, std::shared_ptr<afs::FileSystem>> by_bucket_;
  PartPool* pool_ = nullptr;
  // Files opened ahead by Prefetch, waiting for the open that takes them (newest first).
  static constexpr size_t kMaxParked = 4;
  std::mutex park_mu_;
  std::list<std::pair<std::string, std::shared_ptr<RandomAccessFile>>> parked_;
  std::map<std::string, bool> pending_;  // being opened ahead; true: opened by a reader meanwhile
  // The latest read-ahead file opened for each URL, while it is open (Prefetch warms it).
  std::map<std::string, std::weak_ptr<RandomAccessFile>> open_;
  ObjectPrefetchCounters prefetch_;
};

ArrowObjectEnv* TheEnv() {
  static ArrowObjectEnv* env = new ArrowObjectEnv();  // never destroyed (see EnsureInit)
  return env;
}

}  // namespace

bool ObjectStoreAvailable() { return true; }
Env* ObjectStoreEnv() { return TheEnv(); }
void ResetObjectStoreConfigForTesting() { TheEnv()->Reset(); }
void PrefetchObject(const std::string& url, uint64_t offset) {
  if (IsObjectStoreUri(url)) TheEnv()->Prefetch(url, offset);
}
ObjectPrefetchCounters GetObjectPrefetchCounters() { return TheEnv()->prefetch_counters(); }

#endif  // STOKER_HAVE_ARROW_S3

}  // namespace stoker
