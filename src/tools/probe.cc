#include "tools/probe.h"

#include <cstdint>
#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/html.h"
#include "core/random.h"
#include "io/object_env.h"

namespace stoker {

namespace {

constexpr size_t kAlign = 4096;

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBuf = std::unique_ptr<uint8_t, AlignedFree>;

AlignedBuf AllocAligned(size_t n) {
  size_t rounded = (n + kAlign - 1) / kAlign * kAlign;
  return AlignedBuf(static_cast<uint8_t*>(std::aligned_alloc(kAlign, rounded)));
}

std::string FsTypeName(const std::string& path) {
  struct statfs s;
  if (::statfs(path.c_str(), &s) != 0) return "unknown";
  static const std::map<uint64_t, const char*> kNames = {
      {0xEF53, "ext4"},        {0x58465342, "xfs"},     {0x01021994, "tmpfs"},
      {0x794c7630, "overlay"}, {0x6969, "nfs"},         {0x0BD00BD0, "lustre"},
      {0x47504653, "gpfs"},    {0x65735546, "fuse"},    {0x9123683E, "btrfs"},
      {0x2FC12FC1, "zfs"},     {0x00C36400, "ceph"},    {0xFF534D42, "cifs"},
      {0x19830326, "beegfs"},  {0x858458f6, "ramfs"},   {0x73717368, "squashfs"},
      {0x5346544e, "ntfs"},    {0x4d44, "vfat"},        {0x2011BAB0, "exfat"}};
  auto it = kNames.find(static_cast<uint64_t>(s.f_type) & 0xFFFFFFFFu);
  if (it != kNames.end()) return it->second;
  return fmt::format("0x{:x}", static_cast<uint64_t>(s.f_type));
}

// True when the file system accepts O_DIRECT reads of this file.
bool DirectWorks(const std::string& file) {
  int fd = ::open(file.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return false;
  AlignedBuf buf = AllocAligned(kAlign);
  ssize_t r = ::pread(fd, buf.get(), kAlign, 0);
  ::close(fd);
  return r >= 0;
}

Status CreateTestFile(Env* env, Clock* clock, const std::string& file, uint64_t bytes,
                      double* mb_s) {
  std::string partial = file + ".partial";
  STOKER_ASSIGN_OR_RETURN(auto wf, env->NewWritableFile(partial));
  std::vector<uint64_t> chunk((1u << 20) / 8);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  int64_t t0 = clock->NowNanos();
  for (uint64_t done = 0; done < bytes;) {
    for (auto& w : chunk) {  // xorshift64: incompressible, so compressing storage can't cheat
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      w = x;
    }
    size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size() * 8, bytes - done));
    STOKER_RETURN_IF_ERROR(wf->Append(chunk.data(), n));
    done += n;
  }
  STOKER_RETURN_IF_ERROR(wf->Sync());
  STOKER_RETURN_IF_ERROR(wf->Close());
  double s = (clock->NowNanos() - t0) * 1e-9;
  *mb_s = s > 0 ? bytes / s / 1e6 : 0;
  return env->RenameFile(partial, file);
}

double Percentile(std::vector<uint32_t>& v, double q) {
  if (v.empty()) return 0;
  size_t k = static_cast<size_t>(q * (v.size() - 1));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k] / 1000.0;  // ns → us
}

Status RunPoint(Env* env, Clock* clock, const std::string& file, uint64_t usable, bool direct,
                const ProbeOptions& o, ProbePoint* pt) {
  STOKER_RETURN_IF_ERROR(env->DropCache(file));
  OpenOptions oo;
  oo.direct = direct || IsObjectStoreUri(file);  // object stores: every read one request
  STOKER_ASSIGN_OR_RETURN(auto f, env->NewRandomAccessFile(file, oo));
  const int threads = pt->threads;
  const size_t block = pt->block;
  const bool seq = pt->pattern == "seq";
  const int64_t deadline_ns =
      static_cast<int64_t>(o.seconds_per_point * 1e9);
  std::atomic<uint64_t> total_bytes{0}, total_ops{0};
  std::vector<std::vector<uint32_t>> lat(threads);
  std::vector<Status> errs(threads);
  int64_t t0 = clock->NowNanos();
  uint64_t region = usable / threads / block * block;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      AlignedBuf buf = AllocAligned(block);
      Rng rng(o.seed, static_cast<uint64_t>(block), static_cast<uint64_t>(threads),
              static_cast<uint64_t>(t));
      uint64_t slots = (usable - block) / kAlign + 1;
      uint64_t pos = static_cast<uint64_t>(t) * region, end = pos + region;
      auto& my = lat[t];
      for (;;) {
        int64_t now = clock->NowNanos();
        if (now - t0 >= deadline_ns) break;
        uint64_t off;
        if (seq) {
          if (pos >= end) break;
          off = pos;
          pos += block;
        } else {
          if (total_bytes.load(std::memory_order_relaxed) >= usable) break;
          off = (rng.Next() % slots) * kAlign;
        }
        auto r = f->ReadAt(off, block, buf.get());
        int64_t after = clock->NowNanos();
        if (!r.ok()) {
          errs[t] = r.status();
          break;
        }
        if (my.size() < (1u << 20)) my.push_back(static_cast<uint32_t>(std::min<int64_t>(after - now, UINT32_MAX)));
        total_bytes.fetch_add(*r, std::memory_order_relaxed);
        total_ops.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (auto& th : ts) th.join();
  double secs = (clock->NowNanos() - t0) * 1e-9;
  for (const auto& e : errs)
    if (!e.ok()) return e;
  std::vector<uint32_t> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  pt->bytes = total_bytes.load();
  pt->ops = total_ops.load();
  pt->seconds = secs;
  pt->mb_s = secs > 0 ? pt->bytes / secs / 1e6 : 0;
  pt->iops = secs > 0 ? pt->ops / secs : 0;
  pt->p50_us = Percentile(all, 0.50);
  pt->p99_us = Percentile(all, 0.99);
  return Status::OK();
}

}  // namespace

std::string FormatBlock(uint64_t b) {
  if (b >= (1ull << 30) && b % (1ull << 30) == 0) return fmt::format("{} GiB", b >> 30);
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return fmt::format("{} MiB", b >> 20);
  if (b >= 1024 && b % 1024 == 0) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} B", b);
}

Result<uint64_t> ParseByteSize(const std::string& s_in) {
  std::string s;
  for (char c : s_in)
    if (c != ' ') s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return InvalidArgument("bad size '{}': expected e.g. 64k, 1m, 1g", s_in);
  double v = std::strtod(s.substr(0, i).c_str(), nullptr);
  std::string suf = s.substr(i);
  double mult = 1;
  if (suf.empty() || suf == "b") mult = 1;
  else if (suf == "k" || suf == "kb" || suf == "kib") mult = 1024.0;
  else if (suf == "m" || suf == "mb" || suf == "mib") mult = 1024.0 * 1024;
  else if (suf == "g" || suf == "gb" || suf == "gib") mult = 1024.0 * 1024 * 1024;
  else if (suf == "t" || suf == "tb" || suf == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else return InvalidArgument("bad size suffix in '{}': use k, m, g or t", s_in);
  return static_cast<uint64_t>(v * mult);
}

Result<ProbeResult> RunStorageProbe(const ProbeOptions& o) {
  Env* env = o.env ? o.env : Env::Default();
  Clock* clock = o.clock ? o.clock : Clock::Real();
  if (o.path.empty()) return InvalidArgument("storage probe: no path given");
  if (o.block_sizes.empty() || o.concurrency.empty())
    return InvalidArgument("storage probe: no block sizes or concurrency levels");
  for (size_t b : o.block_sizes)
    if (b == 0 || b % kAlign != 0)
      return InvalidArgument("block size {} is not a multiple of 4 KiB", b);
  for (int c : o.concurrency)
    if (c < 1 || c > 1024) return InvalidArgument("concurrency {} out of range 1..1024", c);
  ProbeResult r;
  r.object_store = IsObjectStoreUri(o.path);
  auto stat = env->Stat(o.path);
  FileInfo info;
  if (stat.ok()) {
    info = *stat;
  } else if (r.object_store && stat.status().code() == StatusCode::kNotFound) {
    info.is_dir = true;  // a prefix with no objects yet: the test object goes under it
  } else {
    return stat.status();
  }
  bool remove_after = false;
  if (info.is_dir) {
    r.file = JoinPath(o.path, "stoker-probe.bin");
    auto existing = env->Stat(r.file);
    if (!existing.ok() || existing->size < o.file_bytes) {
      if (o.file_bytes < kAlign) return InvalidArgument("--size must be at least 4 KiB");
      STOKER_RETURN_IF_ERROR(CreateTestFile(env, clock, r.file, o.file_bytes, &r.write_mb_s));
      r.created = true;
      remove_after = !o.keep_file;
    }
  } else {
    r.file = o.path;
  }
  STOKER_ASSIGN_OR_RETURN(FileInfo finfo, env->Stat(r.file));
  r.file_bytes = finfo.size;
  uint64_t usable = finfo.size / kAlign * kAlign;
  if (usable < kAlign) return InvalidArgument("{}: file too small to probe", r.file);
  bool direct = false;
  if (r.object_store) {
    r.fs_type = r.file.substr(0, 2);  // "s3" or "gs"
    r.cache_mode = "none (object store: every read is a request)";
  } else {
    r.fs_type = FsTypeName(r.file);
    direct = o.allow_direct && DirectWorks(r.file);
    r.cache_mode = direct ? "O_DIRECT" : "fadvise(DONTNEED)";
  }

  std::vector<ProbePoint> plan;
  for (const char* pat : {"seq", "rand"}) {
    if ((std::string(pat) == "seq" && !o.sequential) || (std::string(pat) == "rand" && !o.random))
      continue;
    for (size_t b : o.block_sizes) {
      for (int c : o.concurrency) {
        if (b > usable) continue;
        if (std::string(pat) == "seq" && usable / c < b) continue;
        ProbePoint p;
        p.pattern = pat;
        p.block = b;
        p.threads = c;
        plan.push_back(p);
      }
    }
  }
  Status st;
  for (size_t i = 0; i < plan.size(); ++i) {
    st = RunPoint(env, clock, r.file, usable, direct, o, &plan[i]);
    if (!st.ok()) break;
    r.points.push_back(plan[i]);
    if (o.progress)
      o.progress(i + 1, plan.size(),
                 fmt::format("{} {} x{}: {:.0f} MB/s", plan[i].pattern, FormatBlock(plan[i].block),
                             plan[i].threads, plan[i].mb_s));
  }
  if (remove_after) env->RemoveFile(r.file).IgnoreError();
  if (!st.ok()) return st;
  const ProbePoint* first = nullptr;
  for (const auto& p : r.points)
    if (p.pattern == "rand" && p.ops > 0 &&
        (!first || p.block < first->block || (p.block == first->block && p.threads < first->threads)))
      first = &p;
  if (first) {
    r.ttfb_block = first->block;
    r.ttfb_p50_us = first->p50_us;
    r.ttfb_p99_us = first->p99_us;
  }
  return r;
}

FeedAdvice AdviseFeed(const ProbeResult& r, double samples_per_s, double sample_kb) {
  FeedAdvice a;
  a.need_mb_s = samples_per_s * sample_kb * 1024.0 / 1e6;
  double want_block = std::max(1.0, sample_kb * 1024.0);
  double best_dist = 1e300;
  for (const auto& p : r.points) {
    if (p.pattern != "rand") continue;
    double d = std::fabs(std::log(static_cast<double>(p.block) / want_block));
    if (d < best_dist - 1e-9) best_dist = d, a.random_block = p.block;
  }
  // Random: fewest readers reaching the need at the nearest block size. Throughput is
  // counted as IOPS x sample bytes (a read of a smaller sample moves fewer bytes).
  const ProbePoint* pick = nullptr;
  const ProbePoint* best = nullptr;
  double pick_mb = 0, best_mb = 0;
  for (const auto& p : r.points) {
    if (p.pattern != "rand" || p.block != a.random_block) continue;
    double mb = std::min(p.mb_s, p.iops * sample_kb * 1024.0 / 1e6);
    if (mb >= a.need_mb_s && (!pick || p.threads < pick->threads)) pick = &p, pick_mb = mb;
    if (!best || mb > best_mb) best = &p, best_mb = mb;
  }
  if (pick) {
    a.random_ok = true;
    a.random_readers = pick->threads;
    a.random_mb_s = pick_mb;
  } else if (best) {
    a.random_readers = best->threads;
    a.random_mb_s = best_mb;
  }
  for (const auto& p : r.points) {
    if (p.pattern != "seq") continue;
    bool ok = p.mb_s >= a.need_mb_s;
    bool better = ok ? (!a.sequential_ok || p.threads < a.sequential_readers ||
                        (p.threads == a.sequential_readers && p.mb_s > a.sequential_mb_s))
                     : (!a.sequential_ok && p.mb_s > a.sequential_mb_s);
    if (better) {
      a.sequential_ok = ok;
      a.sequential_readers = p.threads;
      a.sequential_block = p.block;
      a.sequential_mb_s = p.mb_s;
    }
  }
  if (r.object_store && a.sequential_block && a.sequential_readers > 0 && r.ttfb_p50_us > 0) {
    double per_request_mb_s = a.sequential_mb_s / a.sequential_readers;
    double open_s = 2 * r.ttfb_p50_us * 1e-6;  // HEAD + the first GET's first byte
    double bytes = 20.0 * open_s * per_request_mb_s * 1e6;  // open <= 5 % of the shard's read
    uint64_t mib = 16;
    while (mib * (1ull << 20) < bytes && mib < (1ull << 14)) mib *= 2;
    a.min_shard_bytes = mib << 20;
  }
  const char* readers = r.object_store ? "requests in flight" : "concurrent readers";
  std::string t = fmt::format("The job needs {:.1f} MB/s ({:.0f} samples/s x {:.0f} KiB).\n",
                              a.need_mb_s, samples_per_s, sample_kb);
  if (a.random_block) {
    if (a.random_ok)
      t += fmt::format("  Per-sample random reads (IOPS at {} blocks x {:.0f} KiB): OK with {} "
                       "{} ({:.1f} MB/s).\n",
                       FormatBlock(a.random_block), sample_kb, a.random_readers, readers,
                       a.random_mb_s);
    else
      t += fmt::format("  Per-sample random reads (IOPS at {} blocks x {:.0f} KiB): NOT enough, "
                       "best {:.1f} MB/s with {} {} ({:.0f}% of the need).\n",
                       FormatBlock(a.random_block), sample_kb, a.random_mb_s, a.random_readers,
                       readers,
                       a.need_mb_s > 0 ? 100.0 * a.random_mb_s / a.need_mb_s : 0.0);
  }
  if (a.sequential_block) {
    if (a.sequential_ok)
      t += fmt::format("  Sequential shard reads: OK with {} {} at {} blocks "
                       "({:.1f} MB/s).\n",
                       a.sequential_readers, readers, FormatBlock(a.sequential_block),
                       a.sequential_mb_s);
    else
      t += fmt::format("  Sequential shard reads: NOT enough, best {:.1f} MB/s ({} {}, {} "
                       "blocks).\n",
                       a.sequential_mb_s, a.sequential_readers, readers,
                       FormatBlock(a.sequential_block));
  }
  if (a.min_shard_bytes)
    t += fmt::format("  Shards of at least {} (a shard's open, HEAD + first byte at {:.1f} ms "
                     "each, then costs under 5 % of reading it at {:.1f} MB/s per request).\n",
                     FormatBlock(a.min_shard_bytes), r.ttfb_p50_us / 1e3,
                     a.sequential_mb_s / a.sequential_readers);
  if (a.random_ok)
    t += "Verdict: this storage can feed the job, even with per-sample reads.";
  else if (a.sequential_ok)
    t += r.object_store
             ? "Verdict: feed it from shards read sequentially (wds, tfrecord, parquet) with "
               "that many requests in flight, and a node cache (--cache-dir) for later epochs; "
               "one object per sample will starve it."
             : "Verdict: feed it from a sharded format read sequentially (wds, tfrecord) or cache "
               "the data on local NVMe; per-sample random reads will starve it.";
  else
    t += "Verdict: this storage cannot feed the job: cache the data set on local NVMe or in RAM, "
         "or store smaller samples.";
  a.text = t;
  return a;
}

std::string ProbeTable(const ProbeResult& r) {
  std::string s = fmt::format("storage probe: {} ({}, {}, file {}{}; page cache bypassed with {})\n",
                              r.file, r.fs_type, FormatBlock(r.file_bytes),
                              r.created ? "created" : "existing",
                              r.created ? fmt::format(", written at {:.0f} MB/s", r.write_mb_s) : "",
                              r.cache_mode);
  if (r.ttfb_block)
    s += fmt::format("{} of one {} read alone: p50 {:.0f} us, p99 {:.0f} us\n",
                     r.object_store ? "time to first byte (latency)" : "latency", FormatBlock(r.ttfb_block),
                     r.ttfb_p50_us, r.ttfb_p99_us);
  s += fmt::format("{:<5} {:>8} {:>7} {:>11} {:>11} {:>9} {:>9}\n", "mode", "block", "readers",
                   "MB/s", "IOPS", "p50 us", "p99 us");
  for (const auto& p : r.points)
    s += fmt::format("{:<5} {:>8} {:>7} {:>11.1f} {:>11.0f} {:>9.0f} {:>9.0f}\n", p.pattern,
                     FormatBlock(p.block), p.threads, p.mb_s, p.iops, p.p50_us, p.p99_us);
  return s;
}

std::string ProbeJson(const ProbeResult& r, const FeedAdvice* a) {
  nlohmann::json j;
  j["file"] = r.file;
  j["fs_type"] = r.fs_type;
  j["file_bytes"] = r.file_bytes;
  j["created"] = r.created;
  j["write_mb_s"] = r.write_mb_s;
  j["cache_mode"] = r.cache_mode;
  j["object_store"] = r.object_store;
  j["ttfb"] = {{"block", r.ttfb_block}, {"p50_us", r.ttfb_p50_us}, {"p99_us", r.ttfb_p99_us}};
  j["points"] = nlohmann::json::array();
  for (const auto& p : r.points)
    j["points"].push_back({{"pattern", p.pattern}, {"block", p.block}, {"threads", p.threads},
                           {"bytes", p.bytes}, {"ops", p.ops}, {"seconds", p.seconds},
                           {"mb_s", p.mb_s}, {"iops", p.iops}, {"p50_us", p.p50_us},
                           {"p99_us", p.p99_us}});
  if (a)
    j["feed"] = {{"need_mb_s", a->need_mb_s},         {"random_block", a->random_block},
                 {"random_ok", a->random_ok},         {"random_readers", a->random_readers},
                 {"random_mb_s", a->random_mb_s},     {"sequential_ok", a->sequential_ok},
                 {"sequential_readers", a->sequential_readers},
                 {"sequential_block", a->sequential_block},
                 {"sequential_mb_s", a->sequential_mb_s},
                 {"min_shard_bytes", a->min_shard_bytes}, {"text", a->text}};
  return j.dump(2);
}

namespace {

std::string Esc(const std::string& s) { return html::Escape(s); }

// One line chart: MB/s (y) against readers (x, categorical), one line per block size.
std::string Chart(const ProbeResult& r, const std::string& pattern, const std::string& title,
                  double need) {
  html::LineChart c;
  c.title = title;
  c.x_label = r.object_store ? "requests in flight" : "concurrent readers";
  c.y_label = "MB/s";
  c.categorical_x = true;
  if (need > 0) c.y_lines.push_back({need, fmt::format("job needs {:.0f} MB/s", need)});
  std::vector<size_t> blocks;
  for (const auto& p : r.points)
    if (p.pattern == pattern && std::find(blocks.begin(), blocks.end(), p.block) == blocks.end())
      blocks.push_back(p.block);
  for (size_t block : blocks) {
    html::Series sr;
    sr.name = FormatBlock(block);
    std::vector<const ProbePoint*> pts;
    for (const auto& p : r.points)
      if (p.pattern == pattern && p.block == block) pts.push_back(&p);
    std::sort(pts.begin(), pts.end(), [](auto* a, auto* b) { return a->threads < b->threads; });
    for (const auto* p : pts) {
      sr.points.push_back({double(p->threads), p->mb_s});
      sr.tips.push_back(fmt::format("{} x{}: {:.1f} MB/s, {:.0f} IOPS", FormatBlock(block),
                                    p->threads, p->mb_s, p->iops));
    }
    c.series.push_back(std::move(sr));
  }
  return html::Render(c);
}

}  // namespace

std::string ProbeHtml(const ProbeResult& r, const FeedAdvice* a) {
  double need = a ? a->need_mb_s : 0;
  std::string s = html::PageOpen("stoker bench io");
  s += fmt::format("<h1>Storage probe</h1>\n<p>{} ({}, {}; page cache bypassed with {})</p>\n",
                   Esc(r.file), Esc(r.fs_type), FormatBlock(r.file_bytes), Esc(r.cache_mode));
  if (r.ttfb_block)
    s += fmt::format("<p>{} of one {} read alone: p50 {:.0f} us, p99 {:.0f} us</p>\n",
                     r.object_store ? "Time to first byte" : "Latency", FormatBlock(r.ttfb_block),
                     r.ttfb_p50_us, r.ttfb_p99_us);
  if (a) s += "<pre>" + Esc(a->text) + "</pre>\n";
  s += Chart(r, "seq", "Sequential read", need);
  s += Chart(r, "rand", "Random read", need);
  s += "<table><tr><th>mode</th><th>block</th><th>readers</th><th>MB/s</th><th>IOPS</th>"
       "<th>p50 us</th><th>p99 us</th></tr>\n";
  for (const auto& p : r.points)
    s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1f}</td><td>{:.0f}</td>"
                     "<td>{:.0f}</td><td>{:.0f}</td></tr>\n",
                     p.pattern, FormatBlock(p.block), p.threads, p.mb_s, p.iops, p.p50_us, p.p99_us);
  s += "</table>\n" + html::PageClose();
  return s;
}

}  // namespace stoker
