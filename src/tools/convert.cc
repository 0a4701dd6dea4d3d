#include "tools/convert.h"

#include <cstdint>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "formats/checksum.h"

namespace stoker {

using json = nlohmann::json;

uint64_t SampleContentHash(const Sample& s) {
  XXH64Hasher h;
  h.Update(s.key);
  h.Update("\0", 1);
  h.UpdateU64(static_cast<uint64_t>(s.label));
  for (size_t i = 0; i < s.num_fields; ++i) {
    const Field& f = s.fields[i];
    if (s.label >= 0 && f.name == "cls") continue;
    h.Update(f.name);
    h.Update("\0", 1);
    h.UpdateU64(f.data.size());
    h.Update(f.data.data(), f.data.size());
  }
  return h.Digest();
}

std::string HashHex(uint64_t h) { return fmt::format("{:016x}", h); }

namespace {

Result<uint64_t> ParseHex(const std::string& s) {
  if (s.size() != 16) return Corrupt("bad checksum '{}' in manifest", s);
  uint64_t v = 0;
  for (char c : s) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return Corrupt("bad checksum '{}' in manifest", s);
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

uint64_t ShardChecksum(const uint64_t* hashes, size_t n) {
  XXH64Hasher h;
  for (size_t i = 0; i < n; ++i) h.UpdateU64(hashes[i]);
  return h.Digest();
}

uint64_t DatasetChecksum(const std::vector<ManifestShard>& shards) {
  XXH64Hasher h;
  for (const auto& s : shards) {
    h.UpdateU64(s.checksum);
    h.UpdateU64(s.samples);
  }
  return h.Digest();
}

struct Manifest {
  bool complete = false;
  std::string source, dst, format, open_spec, error;
  uint64_t total_samples = 0, next_sample = 0;
  uint64_t shard_bytes = 0, samples_per_shard = 0;
  bool gzip = false;
  std::vector<ManifestShard> shards;
};

json ToJson(const Manifest& m) {
  json j;
  j["stoker_manifest"] = 1;
  j["complete"] = m.complete;
  j["source"] = m.source;
  j["dst"] = m.dst;
  j["format"] = m.format;
  j["total_samples"] = m.total_samples;
  j["next_sample"] = m.next_sample;
  j["missing"] = m.complete ? json::array() : json::array({m.next_sample, m.total_samples});
  j["options"] = {{"shard_bytes", m.shard_bytes},
                  {"samples_per_shard", m.samples_per_shard},
                  {"gzip", m.gzip}};
  if (!m.open_spec.empty()) j["open_spec"] = m.open_spec;
  json shards = json::array();
  uint64_t samples = 0, bytes = 0;
  for (const auto& s : m.shards) {
    shards.push_back({{"path", s.path},
                      {"first_sample", s.first_sample},
                      {"samples", s.samples},
                      {"bytes", s.bytes},
                      {"checksum", HashHex(s.checksum)}});
    samples += s.samples;
    bytes += s.bytes;
  }
  j["shards"] = shards;
  j["samples"] = samples;
  j["bytes"] = bytes;
  j["checksum"] = HashHex(DatasetChecksum(m.shards));
  if (!m.error.empty()) j["error"] = m.error;
  return j;
}

Result<Manifest> ReadManifest(Env* env, const std::string& path) {
  std::vector<uint8_t> bytes;
  STOKER_RETURN_IF_ERROR(env->ReadFile(path, &bytes));
  json j = json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("stoker_manifest"))
    return Corrupt("{}: not a stoker manifest", path);
  Manifest m;
  try {
    m.complete = j.at("complete").get<bool>();
    m.source = j.value("source", "");
    m.dst = j.value("dst", "");
    m.format = j.value("format", "");
    m.open_spec = j.value("open_spec", "");
    m.error = j.value("error", "");
    m.total_samples = j.at("total_samples").get<uint64_t>();
    m.next_sample = j.at("next_sample").get<uint64_t>();
    const json& o = j.at("options");
    m.shard_bytes = o.value("shard_bytes", uint64_t{0});
    m.samples_per_shard = o.value("samples_per_shard", uint64_t{0});
    m.gzip = o.value("gzip", false);
    for (const json& s : j.at("shards")) {
      ManifestShard ms;
      ms.path = s.at("path").get<std::string>();
      ms.first_sample = s.at("first_sample").get<uint64_t>();
      ms.samples = s.at("samples").get<uint64_t>();
      ms.bytes = s.at("bytes").get<uint64_t>();
      STOKER_ASSIGN_OR_RETURN(ms.checksum, ParseHex(s.at("checksum").get<std::string>()));
      m.shards.push_back(std::move(ms));
    }
  } catch (const std::exception& e) {  // nlohmann's type errors, kept inside this function
    return Corrupt("{}: malformed manifest ({})", path, e.what());
  }
  return m;
}

Status WriteManifest(Env* env, const std::string& path, const Manifest& m) {
  std::string text = ToJson(m).dump(2) + "\n";
  return env->WriteFileAtomic(path, text.data(), text.size());
}

std::string DstDir(const std::string& writer_path) {
  std::string p = writer_path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return DirName(p);
}

}  // namespace

std::string BracePatternFor(const std::vector<std::string>& names) {
  if (names.size() == 1) return names[0];
  const std::string& a = names.front();
  const std::string& b = names.back();
  size_t pre = 0;
  while (pre < a.size() && pre < b.size() && a[pre] == b[pre]) ++pre;
  while (pre > 0 && std::isdigit(static_cast<unsigned char>(a[pre - 1]))) --pre;
  size_t suf = 0;
  while (suf < a.size() - pre && suf < b.size() - pre &&
         a[a.size() - 1 - suf] == b[b.size() - 1 - suf])
    ++suf;
  while (suf > 0 && std::isdigit(static_cast<unsigned char>(a[a.size() - suf]))) --suf;
  std::string ma = a.substr(pre, a.size() - pre - suf), mb = b.substr(pre, b.size() - pre - suf);
  bool numeric = !ma.empty() && !mb.empty() &&
                 ma.find_first_not_of("0123456789") == std::string::npos &&
                 mb.find_first_not_of("0123456789") == std::string::npos;
  if (numeric) {
    std::string pat = a.substr(0, pre) + "{" + ma + ".." + mb + "}" + a.substr(a.size() - suf);
    auto exp = ExpandBraces(pat);
    if (exp.ok() && *exp == names) return pat;
  }
  std::string pat = "{";
  for (size_t i = 0; i < names.size(); ++i) pat += (i ? "," : "") + names[i];
  return pat + "}";
}

std::string ManifestPathFor(Env* env, const std::string& dst) {
  auto st = env->Stat(dst);
  if (st.ok() && st->is_dir) return JoinPath(dst, kManifestName);
  if (st.ok() && dst.size() > 5 && dst.compare(dst.size() - 5, 5, ".json") == 0) return dst;
  auto colon = dst.find(':');
  std::string path = colon == std::string::npos ? dst : dst.substr(colon + 1);
  return JoinPath(DstDir(path), kManifestName);
}

Result<ConvertResult> Convert(const std::string& src, const std::string& dst,
                              const ConvertOptions& opts_in) {
  ConvertOptions opts = opts_in;
  Env* env = opts.writer.env ? opts.writer.env : Env::Default();
  opts.writer.env = env;
  if (!opts.read.env) opts.read.env = env;
  auto colon = dst.find(':');
  if (colon == std::string::npos)
    return InvalidArgument("destination '{}' needs a format prefix, e.g. wds:out/train-%06d.tar",
                           dst);
  std::string fmt_name = dst.substr(0, colon), wpath = dst.substr(colon + 1);
  // A stream destination (a Kafka topic) has no files: no manifest, no shards to resume
  // after; the writer's delivery reports are what says it is complete.
  const bool stream_dst = fmt_name == "kafka";
  if (stream_dst && opts.resume)
    return InvalidArgument("{}: --resume continues after complete shard files; a topic has none "
                           "(convert again into a new topic, or read the part that arrived "
                           "with kafka:...?end=N)",
                           dst);
  std::string dir = stream_dst ? std::string() : DstDir(wpath);
  ConvertResult res;
  res.manifest_path = stream_dst ? std::string() : JoinPath(dir, kManifestName);

  STOKER_ASSIGN_OR_RETURN(auto ds, OpenDataset(src, opts.read));
  if (!stream_dst) STOKER_RETURN_IF_ERROR(env->CreateDirs(dir));
  const uint64_t total = ds->size();

  Manifest m;
  m.source = src;
  m.dst = dst;
  m.format = fmt_name;
  m.total_samples = total;
  m.shard_bytes = opts.writer.shard_bytes;
  m.samples_per_shard = opts.writer.samples_per_shard;
  m.gzip = opts.writer.gzip;
  if (opts.resume && env->FileExists(res.manifest_path)) {
    STOKER_ASSIGN_OR_RETURN(Manifest old, ReadManifest(env, res.manifest_path));
    if (old.source != src || old.dst != dst || old.total_samples != total ||
        old.shard_bytes != m.shard_bytes || old.samples_per_shard != m.samples_per_shard ||
        old.gzip != m.gzip)
      return InvalidArgument(
          "{}: --resume needs the same source, destination and shard options as the run that "
          "wrote it (source '{}', destination '{}', {} samples)",
          res.manifest_path, old.source, old.dst, old.total_samples);
    for (const auto& s : old.shards) {
      std::string p = JoinPath(dir, s.path);
      auto st = env->Stat(p);
      if (!st.ok()) return Corrupt("{}: shard {} listed as complete is missing", res.manifest_path, p);
      if (!st->is_dir && st->size != s.bytes)
        return Corrupt("{}: shard {} has {} bytes, the manifest says {}", res.manifest_path, p,
                       st->size, s.bytes);
    }
    if (old.complete) {
      res.already_complete = true;
      res.shards = old.shards;
      for (const auto& s : old.shards) {
        res.samples += s.samples;
        res.bytes += s.bytes;
      }
      res.checksum = DatasetChecksum(old.shards);
      return res;
    }
    m.shards = old.shards;
    m.next_sample = old.shards.empty() ? 0 : old.shards.back().first_sample + old.shards.back().samples;
  }
  const uint64_t start = m.next_sample;
  res.resumed_from = start;
  opts.writer.first_shard = m.shards.size();
  STOKER_ASSIGN_OR_RETURN(auto writer, OpenDatasetWriter(dst, opts.writer));
  if (!stream_dst) STOKER_RETURN_IF_ERROR(WriteManifest(env, res.manifest_path, m));

  // Readers fill a window of slots ahead of the writer; the writer consumes in order.
  int threads = opts.threads > 0 ? opts.threads : std::max(1, AvailableCpus());
  const uint64_t window = std::max<uint64_t>(8, 4 * static_cast<uint64_t>(threads));
  struct Slot {
    Sample s;
    Status st;
    uint64_t hash = 0;
    bool ready = false;
  };
  std::vector<Slot> slots(window);
  std::mutex mu;
  std::condition_variable cv_space, cv_ready;
  uint64_t claim = start, written = start;
  bool stop = false;
  auto worker = [&] {
    for (;;) {
      uint64_t i;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv_space.wait(lk, [&] { return stop || claim >= total || claim < written + window; });
        if (stop || claim >= total) return;
        i = claim++;
      }
      Slot& sl = slots[i % window];
      sl.st = ds->Read(i, &sl.s);
      if (sl.st.ok()) sl.hash = SampleContentHash(sl.s);
      {
        std::lock_guard<std::mutex> lk(mu);
        sl.ready = true;
      }
      cv_ready.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads && static_cast<uint64_t>(t) < total - start; ++t)
    pool.emplace_back(worker);

  std::vector<uint64_t> pending;  // hashes of samples not yet in a finished shard
  uint64_t shard_first = start;
  auto collect = [&]() -> Status {
    if (stream_dst) return Status::OK();  // shards (partitions) are known at Close
    const auto& ws = writer->shards();
    while (m.shards.size() - (opts.writer.first_shard) < ws.size()) {
      const WrittenShard& w = ws[m.shards.size() - opts.writer.first_shard];
      if (w.samples > pending.size())
        return Internal("writer reports {} samples in {}, only {} were written", w.samples,
                        w.path, pending.size());
      ManifestShard s;
      s.path = w.path.compare(0, dir.size() + 1, dir + "/") == 0 ? w.path.substr(dir.size() + 1)
                                                                 : BaseName(w.path);
      s.first_sample = shard_first;
      s.samples = w.samples;
      s.bytes = w.bytes;
      s.checksum = ShardChecksum(pending.data(), w.samples);
      pending.erase(pending.begin(), pending.begin() + static_cast<ptrdiff_t>(w.samples));
      shard_first += w.samples;
      m.shards.push_back(s);
      m.next_sample = shard_first;
      STOKER_RETURN_IF_ERROR(WriteManifest(env, res.manifest_path, m));
    }
    return Status::OK();
  };

  Status failure;
  for (uint64_t i = start; i < total; ++i) {
    Slot& sl = slots[i % window];
    {
      std::unique_lock<std::mutex> lk(mu);
      cv_ready.wait(lk, [&] { return sl.ready; });
    }
    if (!sl.st.ok()) {
      failure = sl.st.WithContext(fmt::format("reading sample {} of {}", i, src));
      break;
    }
    Status st = writer->Write(sl.s);
    if (st.ok()) {
      pending.push_back(sl.hash);
      res.payload_bytes += sl.s.bytes();
      st = collect();
    }
    if (!st.ok()) {
      failure = st.WithContext(fmt::format("writing sample {} ('{}')", i, sl.s.key));
      break;
    }
    {
      std::lock_guard<std::mutex> lk(mu);
      sl.ready = false;
      written = i + 1;
    }
    cv_space.notify_all();
    if (opts.progress) opts.progress(i + 1, total);
  }
  {
    std::lock_guard<std::mutex> lk(mu);
    stop = true;
  }
  cv_space.notify_all();
  for (auto& t : pool) t.join();
  if (failure.ok()) {
    failure = writer->Close();
    if (failure.ok()) failure = collect();
  }
  if (!failure.ok()) {
    if (stream_dst) return failure;
    m.complete = false;
    m.error = failure.message();
    WriteManifest(env, res.manifest_path, m).IgnoreError();
    return failure;
  }
  if (stream_dst) {
    // One entry per partition written (messages, bytes); the checksum covers every sample's
    // content in source order.
    uint64_t delivered = 0;
    for (const auto& w : writer->shards()) {
      ManifestShard s;
      s.path = w.path;
      s.samples = w.samples;
      s.bytes = w.bytes;
      delivered += w.samples;
      res.shards.push_back(s);
      res.samples += w.samples;
      res.bytes += w.bytes;
    }
    if (delivered != total - start)
      return Internal("{}: {} samples written, {} delivered", dst, total - start, delivered);
    res.checksum = ShardChecksum(pending.data(), pending.size());
    return res;
  }
  m.complete = true;
  m.next_sample = total;
  std::vector<std::string> names;
  for (const auto& s : m.shards) names.push_back(s.path);
  m.open_spec = fmt_name + ":" + BracePatternFor(names);
  STOKER_RETURN_IF_ERROR(WriteManifest(env, res.manifest_path, m));
  res.shards = m.shards;
  for (const auto& s : m.shards) {
    res.samples += s.samples;
    res.bytes += s.bytes;
  }
  res.checksum = DatasetChecksum(m.shards);
  return res;
}

Result<VerifyResult> Verify(const std::string& dst, Env* env, int threads,
                            std::function<void(uint64_t, uint64_t)> progress) {
  if (!env) env = Env::Default();
  std::string mpath = ManifestPathFor(env, dst);
  if (!env->FileExists(mpath)) return NotFound("{}: no stoker manifest (was this written by stoker convert?)", mpath);
  STOKER_ASSIGN_OR_RETURN(Manifest m, ReadManifest(env, mpath));
  std::string dir = DirName(mpath);
  VerifyResult vr;
  if (!m.complete) {
    vr.problems.push_back(fmt::format(
        "{}: conversion incomplete: samples [{}, {}) of {} are missing ({}); continue it with "
        "stoker convert --resume",
        mpath, m.next_sample, m.total_samples, m.total_samples,
        m.error.empty() ? "interrupted" : m.error));
    return vr;
  }
  for (const auto& s : m.shards) {
    std::string p = JoinPath(dir, s.path);
    auto st = env->Stat(p);
    if (!st.ok()) {
      vr.problems.push_back(fmt::format("shard {}: missing", p));
    } else if (!st->is_dir && st->size != s.bytes) {
      vr.problems.push_back(
          fmt::format("shard {}: {} bytes, the manifest says {}", p, st->size, s.bytes));
    }
  }
  if (!vr.problems.empty()) return vr;
  auto colon = m.open_spec.find(':');
  if (colon == std::string::npos) return Corrupt("{}: manifest has no open_spec", mpath);
  std::string spec = m.open_spec.substr(0, colon + 1) + JoinPath(dir, m.open_spec.substr(colon + 1));
  DatasetOptions dopts;
  dopts.env = env;
  auto opened = OpenDataset(spec, dopts);
  if (!opened.ok()) {
    vr.problems.push_back(fmt::format("cannot open {}: {}", spec, opened.status().message()));
    return vr;
  }
  auto& ds = *opened;
  const auto& dshards = ds->shards();
  if (dshards.size() != m.shards.size()) {
    vr.problems.push_back(fmt::format("{} opens as {} shards, the manifest lists {}", spec,
                                      dshards.size(), m.shards.size()));
    return vr;
  }
  uint64_t n = ds->size();
  std::vector<uint64_t> hashes(n);
  std::vector<std::string> read_errors(m.shards.size());
  if (threads <= 0) threads = std::max(1, AvailableCpus());
  std::atomic<uint64_t> next{0}, done{0};
  auto work = [&] {
    Sample s;
    for (;;) {
      uint64_t begin = next.fetch_add(64);
      if (begin >= n) return;
      uint64_t end = std::min(n, begin + 64);
      for (uint64_t i = begin; i < end; ++i) {
        Status st = ds->Read(i, &s);
        hashes[i] = st.ok() ? SampleContentHash(s) : 0;
        if (!st.ok()) {
          // Find the shard for the message; first error per shard wins (benign race on
          // distinct strings guarded by the lock below).
          static std::mutex emu;
          std::lock_guard<std::mutex> lk(emu);
          for (size_t k = 0; k < dshards.size(); ++k)
            if (i >= dshards[k].begin && i < dshards[k].end && read_errors[k].empty())
              read_errors[k] = st.message();
        }
      }
      done += end - begin;
    }
  };
  {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(work);
    if (progress) {
      while (done.load() < n) {
        progress(done.load(), n);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      progress(n, n);
    }
    for (auto& t : pool) t.join();
  }
  std::vector<ManifestShard> got;
  for (size_t k = 0; k < m.shards.size(); ++k) {
    const ManifestShard& want = m.shards[k];
    const ShardInfo& si = dshards[k];
    std::string p = JoinPath(dir, want.path);
    ManifestShard g = want;
    g.samples = si.end - si.begin;
    g.checksum = ShardChecksum(hashes.data() + si.begin, g.samples);
    got.push_back(g);
    if (!read_errors[k].empty()) {
      vr.problems.push_back(fmt::format("shard {}: unreadable sample: {}", p, read_errors[k]));
    } else if (g.samples != want.samples) {
      vr.problems.push_back(fmt::format("shard {}: {} samples, the manifest says {}", p,
                                        g.samples, want.samples));
    } else if (g.checksum != want.checksum) {
      vr.problems.push_back(fmt::format("shard {}: checksum {} differs from the manifest's {}",
                                        p, HashHex(g.checksum), HashHex(want.checksum)));
    }
  }
  for (const auto& e : ds->index_errors()) vr.problems.push_back(e);
  vr.samples = n;
  vr.checksum = DatasetChecksum(got);
  vr.ok = vr.problems.empty();
  return vr;
}

}  // namespace stoker
