#include "tools/format_bench.h"

#include <cstdint>
#include <algorithm>
#include <map>
#include <numeric>

#include <time.h>

#include <nlohmann/json.hpp>

#include "core/html.h"
#include "core/random.h"
#include "pipeline/plan.h"
#include "formats/checksum.h"
#include "formats/dataset.h"
#include "formats/writer.h"

namespace stoker {

namespace {

bool IsSingleFile(const std::string& fmt) {
  return fmt == "lmdb" || fmt == "hdf5" || fmt == "parquet";
}

std::string FirstExtension(const std::string& fmt) {
  const auto& reg = DatasetFormats();
  auto it = reg.find(fmt);
  if (it != reg.end() && !it->second.extensions.empty()) return it->second.extensions[0];
  return fmt;
}

Status ClearDir(Env* env, const std::string& dir) {
  auto entries = env->ListDir(dir);
  if (!entries.ok()) return Status::OK();
  for (const auto& e : *entries)
    if (!e.is_dir) STOKER_RETURN_IF_ERROR(env->RemoveFile(JoinPath(dir, e.name)));
  return Status::OK();
}

Result<uint64_t> DirBytes(Env* env, const std::string& dir, std::vector<std::string>* files) {
  STOKER_ASSIGN_OR_RETURN(auto entries, env->ListDir(dir));
  uint64_t total = 0;
  for (const auto& e : entries) {
    if (e.is_dir) continue;
    std::string p = JoinPath(dir, e.name);
    STOKER_ASSIGN_OR_RETURN(FileInfo fi, env->Stat(p));
    total += fi.size;
    if (files) files->push_back(p);
  }
  return total;
}

Status DropAll(Env* env, const std::vector<std::string>& files) {
  for (const auto& f : files) STOKER_RETURN_IF_ERROR(env->DropCache(f));
  return Status::OK();
}

// Read orders come from the pipeline's epoch planner (pipeline/plan.h), so the bench
// reads what a training epoch reads: a full permutation (random access), or shards in
// shuffled order each read sequentially (a shuffle buffer of one: the real buffer reorders
// in memory only, it does not change which bytes are read next).
std::vector<uint64_t> PlannedOrder(const Dataset& ds, uint64_t seed, bool permutation) {
  EpochPlanOptions o;
  o.shuffle = true;
  o.global_shuffle = permutation;
  o.seed = seed;
  o.shuffle_buffer = 1;
  return GlobalOrder(ds.shards(), ds.size(), 0, o);
}

struct Timed {
  double seconds = 0;
  double cpu_seconds = 0;  // the reading thread's CPU time
  uint64_t bytes = 0;
};

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// Keeps the fastest wall time and, separately, the smallest CPU time of several runs
// (noise on a shared machine only ever slows a run down).
void KeepBest(const Timed& t, bool first, Timed* best) {
  if (first) {
    *best = t;
    return;
  }
  best->seconds = std::min(best->seconds, t.seconds);
  best->cpu_seconds = std::min(best->cpu_seconds, t.cpu_seconds);
  best->bytes = t.bytes;
}

std::vector<uint64_t> PassOrder(const Dataset& ds, int kind, uint64_t seed) {
  std::vector<uint64_t> order;
  if (kind == 0) {
    order.resize(ds.size());
    std::iota(order.begin(), order.end(), 0);
  } else if (kind == 1) {
    order = PlannedOrder(ds, seed, /*permutation=*/true);
  } else {
    order = PlannedOrder(ds, seed, /*permutation=*/ds.random_access_is_cheap());
  }
  return order;
}

Result<Timed> ReadPass(Clock* clock, const Dataset& ds, const std::vector<uint64_t>& order,
                       Sample* s) {
  Timed t;
  int64_t t0 = clock->NowNanos();
  double c0 = ThreadCpuSeconds();
  for (uint64_t i : order) {
    STOKER_RETURN_IF_ERROR(ds.Read(i, s));
    t.bytes += s->bytes();
  }
  t.cpu_seconds = ThreadCpuSeconds() - c0;
  t.seconds = (clock->NowNanos() - t0) * 1e-9;
  return t;
}

void Fill(const Timed& t, uint64_t n, double* sps, double* mb, double* secs, double* cpu) {
  *sps = t.seconds > 0 ? n / t.seconds : 0;
  *mb = t.seconds > 0 ? t.bytes / t.seconds / 1e6 : 0;
  *secs = t.seconds;
  *cpu = t.cpu_seconds;
}

// The raw baseline's flat file: the payload bytes of every sample, back to back.
struct RawFile {
  std::string path;
  uint64_t size = 0;
  std::vector<std::pair<uint64_t, uint64_t>> recs;  // (offset, length) per sample
  std::vector<uint64_t> perm;                         // the random pass's order
  std::vector<uint8_t> buf;                           // the reused buffer
  std::unique_ptr<RandomAccessFile> file;             // open for warm passes
  uint32_t crc_sink = 0;

  // kind 0: 1 MiB blocks; 1: one pread per record in random order; 2: one pread per record
  // in file order; 3: as 2, plus a CRC32C of each record (the floor for a format that
  // checks a CRC over every byte it reads, as TFRecord does).
  Result<Timed> Pass(Clock* clock, const RandomAccessFile& f, int kind) {
    Timed t;
    int64_t s0 = clock->NowNanos();
    double c0 = ThreadCpuSeconds();
    if (kind == 0) {
      for (uint64_t off = 0; off < size;) {
        STOKER_ASSIGN_OR_RETURN(size_t got, f.ReadAt(off, 1u << 20, buf.data()));
        if (got == 0) break;
        off += got;
        t.bytes += got;
      }
    } else {
      uint32_t crc = 0;
      for (uint64_t k = 0; k < recs.size(); ++k) {
        uint64_t i = kind == 1 ? perm[k] : k;
        STOKER_RETURN_IF_ERROR(f.ReadExact(recs[i].first, recs[i].second, buf.data()));
        if (kind == 3) crc ^= Crc32c(buf.data(), recs[i].second);
        t.bytes += recs[i].second;
      }
      if (kind == 3) crc_sink = crc;
    }
    t.cpu_seconds = ThreadCpuSeconds() - c0;
    t.seconds = (clock->NowNanos() - s0) * 1e-9;
    return t;
  }
};

// Warm: the dataset is opened once, read once to fill the page cache (and the process's
// mappings), then every pass repeats on the open dataset, as epochs of a training job do.
// Each warm pass is paired with a raw pass of the same kind run just before it (both
// sequential raw methods for a sequential pass), so the ratio compares runs made under the
// same machine conditions. Cold: every repeat drops the files' cached pages and reopens
// the dataset first.
Status MeasureFormat(Env* env, Clock* clock, const std::string& spec,
                     const std::vector<std::string>& files, uint64_t n,
                     const FormatBenchOptions& o, RawFile* raw, FormatBenchRow* row) {
  DatasetOptions dopts;
  dopts.env = env;
  const int repeats = std::max(1, o.repeats);
  for (int state = 0; state < 2; ++state) {
    bool cold = state == 0;
    if (cold && !o.cold) continue;
    if (!cold && !o.warm) continue;
    ReadSpeeds& rs = cold ? row->cold : row->warm;
    Sample s;
    std::unique_ptr<Dataset> warm_ds;
    double best_open = 0;
    auto open = [&](bool first) -> Result<const Dataset*> {
      if (!cold && warm_ds) return warm_ds.get();
      warm_ds.reset();  // LMDB: unmap before the pages are dropped
      // Warm too starts from a dropped cache, filled by one sequential pass below: how a
      // file's pages came into the cache (written, read in order, read at random) changes
      // the cost of copying them out by up to ~40% here (folio sizes), so every format and
      // the raw file get their pages the same way.
      STOKER_RETURN_IF_ERROR(DropAll(env, files));
      int64_t t0 = clock->NowNanos();
      STOKER_ASSIGN_OR_RETURN(warm_ds, OpenDataset(spec, dopts));
      double secs = (clock->NowNanos() - t0) * 1e-9;
      best_open = first ? secs : std::min(best_open, secs);
      if (!cold) STOKER_RETURN_IF_ERROR(ReadPass(clock, *warm_ds, PassOrder(*warm_ds, 0, o.seed), &s).status());
      return warm_ds.get();
    };
    bool first_open = true;
    for (int kind = 0; kind < 3; ++kind) {
      Timed best, ref, ref2;
      for (int r = 0; r < repeats; ++r) {
        STOKER_ASSIGN_OR_RETURN(const Dataset* ds, open(first_open));
        first_open = false;
        if (!cold && raw && raw->file && kind < 2) {
          STOKER_ASSIGN_OR_RETURN(Timed t, raw->Pass(clock, *raw->file, kind));
          KeepBest(t, r == 0, &ref);
          if (kind == 0) {
            STOKER_ASSIGN_OR_RETURN(Timed t2, raw->Pass(clock, *raw->file, 2));
            KeepBest(t2, r == 0, &ref2);
          }
        }
        std::vector<uint64_t> order = PassOrder(*ds, kind, o.seed);
        STOKER_ASSIGN_OR_RETURN(Timed t, ReadPass(clock, *ds, order, &s));
        KeepBest(t, r == 0, &best);
        if (cold) warm_ds.reset();
      }
      if (kind == 0) {
        Fill(best, n, &rs.seq_sps, &rs.seq_mb_s, &rs.seq_s, &rs.seq_cpu_s);
        if (!cold && ref.seconds > 0) {
          row->ref_seq_s = std::min(ref.seconds, ref2.seconds);
          row->ref_seq_cpu_s = std::min(ref.cpu_seconds, ref2.cpu_seconds);
        }
      }
      if (kind == 1) {
        Fill(best, n, &rs.rand_sps, &rs.rand_mb_s, &rs.rand_s, &rs.rand_cpu_s);
        if (!cold && ref.seconds > 0) {
          row->ref_rand_s = ref.seconds;
          row->ref_rand_cpu_s = ref.cpu_seconds;
        }
      }
      if (kind == 2)
        Fill(best, n, &rs.shuffled_sps, &rs.shuffled_mb_s, &rs.shuffled_s, &rs.shuffled_cpu_s);
    }
    rs.open_s = best_open;
    (cold ? row->has_cold : row->has_warm) = true;
  }
  return Status::OK();
}

// Baseline: the same payload bytes in one flat file. Sequential: 1 MiB reads, and one
// pread per record in file order (the faster counts); random: one pread per record in
// random order. Every read goes into one reused buffer. The file stays (open) for the
// raw passes paired with each format's warm passes.
Status MeasureRaw(Env* env, Clock* clock, const std::string& dir,
                  const std::vector<Sample>& samples, const FormatBenchOptions& o,
                  FormatBenchRow* row, FormatBenchResult* res, RawFile* raw) {
  raw->path = JoinPath(dir, "raw.bin");
  int64_t t0 = clock->NowNanos();
  {
    STOKER_ASSIGN_OR_RETURN(auto wf, env->NewWritableFile(raw->path));
    uint64_t off = 0;
    for (const auto& s : samples) {
      uint64_t len = 0;
      for (size_t f = 0; f < s.num_fields; ++f) {
        STOKER_RETURN_IF_ERROR(wf->Append(s.fields[f].data.data(), s.fields[f].data.size()));
        len += s.fields[f].data.size();
      }
      raw->recs.push_back({off, len});
      off += len;
    }
    STOKER_RETURN_IF_ERROR(wf->Close());
  }
  row->convert_s = (clock->NowNanos() - t0) * 1e-9;
  STOKER_ASSIGN_OR_RETURN(FileInfo fi, env->Stat(raw->path));
  raw->size = fi.size;
  row->bytes_on_disk = fi.size;
  row->files = 1;
  row->samples = samples.size();
  uint64_t n = samples.size();
  size_t max_len = 1;
  for (const auto& r : raw->recs) max_len = std::max<size_t>(max_len, r.second);
  raw->buf.resize(std::max<size_t>(max_len, 1u << 20));
  {
    EpochPlanOptions po;
    po.global_shuffle = true;
    po.seed = o.seed;
    raw->perm = GlobalOrder({ShardInfo{raw->path, 0, n}}, n, 0, po);
  }
  const int repeats = std::max(1, o.repeats);
  for (int state = 0; state < 2; ++state) {
    bool cold = state == 0;
    if ((cold && !o.cold) || (!cold && !o.warm)) continue;
    ReadSpeeds& rs = cold ? row->cold : row->warm;
    if (!cold) {
      STOKER_RETURN_IF_ERROR(env->DropCache(raw->path));  // filled like the formats' files
      STOKER_ASSIGN_OR_RETURN(raw->file, env->NewRandomAccessFile(raw->path));
      STOKER_RETURN_IF_ERROR(raw->Pass(clock, *raw->file, 2).status());
    }
    Timed best[4];
    for (int kind = 0; kind < 4; ++kind) {
      if (kind == 3 && cold) continue;
      for (int r = 0; r < repeats; ++r) {
        std::unique_ptr<RandomAccessFile> f;
        if (cold) {
          STOKER_RETURN_IF_ERROR(env->DropCache(raw->path));
          STOKER_ASSIGN_OR_RETURN(f, env->NewRandomAccessFile(raw->path));
        }
        STOKER_ASSIGN_OR_RETURN(Timed t, raw->Pass(clock, cold ? *f : *raw->file, kind));
        KeepBest(t, r == 0, &best[kind]);
      }
    }
    // The stronger sequential baseline: the faster of blocks and per-record preads.
    const Timed& block = best[0];
    const Timed& record = best[2];
    if (!cold) {
      res->raw_crc_s = best[3].seconds;
      res->raw_crc_cpu_s = best[3].cpu_seconds;
    }
    if (!cold || !o.warm) {
      res->raw_block_s = block.seconds;
      res->raw_block_cpu_s = block.cpu_seconds;
      res->raw_record_s = record.seconds;
      res->raw_record_cpu_s = record.cpu_seconds;
      res->raw_seq_method = record.seconds < block.seconds ? "per-record preads" : "1 MiB blocks";
    }
    Timed seq = record.seconds < block.seconds ? record : block;
    seq.cpu_seconds = std::min(record.cpu_seconds, block.cpu_seconds);
    Fill(seq, n, &rs.seq_sps, &rs.seq_mb_s, &rs.seq_s, &rs.seq_cpu_s);
    Fill(best[1], n, &rs.rand_sps, &rs.rand_mb_s, &rs.rand_s, &rs.rand_cpu_s);
    if (!cold) {
      row->ref_seq_s = rs.seq_s;
      row->ref_seq_cpu_s = rs.seq_cpu_s;
      row->ref_rand_s = rs.rand_s;
      row->ref_rand_cpu_s = rs.rand_cpu_s;
    }
    // One flat file: a shuffled epoch over shards is a scan.
    rs.shuffled_sps = rs.seq_sps;
    rs.shuffled_mb_s = rs.seq_mb_s;
    rs.shuffled_s = rs.seq_s;
    rs.shuffled_cpu_s = rs.seq_cpu_s;
    (cold ? row->has_cold : row->has_warm) = true;
  }
  row->ok = true;
  return Status::OK();
}

std::string Recommend(const FormatBenchResult& r) {
  const FormatBenchRow* best_shuf = nullptr;
  const FormatBenchRow* best_rand = nullptr;
  const FormatBenchRow* smallest = nullptr;
  auto shuf = [](const FormatBenchRow& x) {
    return x.has_cold ? x.cold.shuffled_sps : x.warm.shuffled_sps;
  };
  auto rnd = [](const FormatBenchRow& x) {
    return x.has_warm ? x.warm.rand_sps : x.cold.rand_sps;
  };
  for (const auto& row : r.rows) {
    if (!row.ok || row.format == "raw") continue;
    if (!best_shuf || shuf(row) > shuf(*best_shuf)) best_shuf = &row;
    if (!best_rand || rnd(row) > rnd(*best_rand)) best_rand = &row;
    if (!smallest || row.bytes_on_disk < smallest->bytes_on_disk) smallest = &row;
  }
  if (!best_shuf) return "No format could be written and read back.";
  // Formats within 10% of the fastest shuffled-epoch read are a tie: the storage, not the
  // format, sets the rate, and the choice can rest on tooling and random access.
  std::vector<std::string> close;
  for (const auto& row : r.rows)
    if (row.ok && row.format != "raw" && &row != best_shuf &&
        shuf(row) >= 0.9 * shuf(*best_shuf))
      close.push_back(row.format);
  std::string s = fmt::format(
      "Recommendation: {} for training (fastest shuffled-epoch read: {:.0f} samples/s{}). ",
      best_shuf->format, shuf(*best_shuf), best_shuf->has_cold ? " cold" : " warm");
  if (!close.empty()) {
    std::string names;
    for (const auto& c : close) names += (names.empty() ? "" : ", ") + c;
    s += fmt::format("{} within 10% of it (a tie: the storage sets the rate; choose by tooling "
                     "and random access). ",
                     names);
  }
  if (best_rand != best_shuf)
    s += fmt::format("For random access by index use {} ({:.0f} samples/s). ", best_rand->format,
                     rnd(*best_rand));
  s += fmt::format("Smallest on disk: {} ({:.1f} MB).", smallest->format,
                   smallest->bytes_on_disk / 1e6);
  return s;
}

}  // namespace

Result<FormatBenchResult> RunFormatBench(const FormatBenchOptions& o) {
  Env* env = o.env ? o.env : Env::Default();
  Clock* clock = o.clock ? o.clock : Clock::Real();
  if (o.work_dir.empty()) return InvalidArgument("bench formats: no work directory");
  if (o.samples == 0) return InvalidArgument("bench formats: --samples must be > 0");
  DatasetOptions dopts;
  dopts.env = env;
  STOKER_ASSIGN_OR_RETURN(auto src, OpenDataset(o.source, dopts));
  uint64_t total = src->size();
  if (total == 0) return InvalidArgument("{}: the data set is empty", o.source);
  uint64_t n = std::min<uint64_t>(o.samples, total);
  FormatBenchResult res;
  res.source = o.source;
  res.samples = n;
  std::vector<Sample> samples(n);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t idx = i * total / n;
    STOKER_RETURN_IF_ERROR(src->Read(idx, &samples[i]));
    res.payload_bytes += samples[i].bytes();
  }
  if (o.progress) o.progress(fmt::format("read {} samples ({:.1f} MB) from {}", n,
                                         res.payload_bytes / 1e6, o.source));
  STOKER_RETURN_IF_ERROR(env->CreateDirs(o.work_dir));

  FormatBenchRow raw;
  raw.format = "raw";
  RawFile rawfile;
  STOKER_RETURN_IF_ERROR(MeasureRaw(env, clock, o.work_dir, samples, o, &raw, &res, &rawfile));
  res.rows.push_back(raw);
  if (o.progress) o.progress("measured raw baseline");

  std::vector<std::string> formats = o.formats;
  if (formats.empty()) formats = DatasetWriterFormats();
  for (const auto& fmt_name : formats) {
    FormatBenchRow row;
    row.format = fmt_name;
    row.samples = n;
    std::string dir = JoinPath(o.work_dir, fmt_name);
    Status st = env->CreateDirs(dir);
    if (st.ok()) st = ClearDir(env, dir);
    bool single = IsSingleFile(fmt_name);
    std::string ext = FirstExtension(fmt_name);
    std::string out = single ? JoinPath(dir, "data." + ext) : JoinPath(dir, "shard-%06d." + ext);
    std::string spec;
    if (st.ok()) {
      WriterOptions wo;
      wo.env = env;
      wo.shard_bytes = 1ull << 40;
      wo.samples_per_shard = single ? 0 : (o.samples_per_shard ? o.samples_per_shard
                                                                : std::max<uint64_t>(1, n / 8));
      int64_t t0 = clock->NowNanos();
      auto w = OpenDatasetWriter(fmt_name + ":" + out, wo);
      if (!w.ok()) {
        st = w.status();
      } else {
        for (const auto& s : samples) {
          st = (*w)->Write(s);
          if (!st.ok()) break;
        }
        if (st.ok()) st = (*w)->Close();
        row.convert_s = (clock->NowNanos() - t0) * 1e-9;
        if (st.ok()) {
          const auto& shards = (*w)->shards();
          if (shards.size() == 1)
            spec = fmt_name + ":" + shards[0].path;
          else
            spec = fmt_name + ":" +
                   JoinPath(dir, fmt::format("shard-{{{:06d}..{:06d}}}.{}", 0,
                                             shards.size() - 1, ext));
        }
      }
    }
    std::vector<std::string> files;
    if (st.ok()) {
      auto bytes = DirBytes(env, dir, &files);
      if (bytes.ok()) row.bytes_on_disk = *bytes, row.files = files.size();
      else st = bytes.status();
    }
    if (st.ok()) st = MeasureFormat(env, clock, spec, files, n, o, &rawfile, &row);
    row.ok = st.ok();
    if (!st.ok()) row.error = st.message();
    if (!o.keep) ClearDir(env, dir).IgnoreError();
    if (o.progress)
      o.progress(row.ok ? fmt::format("measured {}", fmt_name)
                        : fmt::format("{} failed: {}", fmt_name, row.error));
    res.rows.push_back(row);
  }
  rawfile.file.reset();
  if (!o.keep) env->RemoveFile(rawfile.path).IgnoreError();
  res.recommendation = Recommend(res);
  return res;
}

std::string FormatBenchTable(const FormatBenchResult& r) {
  std::string s = fmt::format("bench formats: {} samples ({:.1f} MB payload) from {}\n", r.samples,
                              r.payload_bytes / 1e6, r.source);
  s += fmt::format(
      "{:<9} {:>8} {:>5} {:>7} {:>7} | {:>8} {:>7} {:>8} {:>8} | {:>8} {:>7} {:>8} {:>8} | "
      "{:>6} {:>6} {:>6} {:>6}\n",
      "format", "disk MB", "files", "conv s", "open ms", "cold seq", "MB/s", "rand/s", "shuf/s",
      "warm seq", "MB/s", "rand/s", "shuf/s", "seq%", "seq%c", "rand x", "rnd xc");
  const FormatBenchRow* raw = nullptr;
  for (const auto& row : r.rows)
    if (row.format == "raw") raw = &row;
  auto pct = [](double base, double t) { return t > 0 ? 100 * base / t : 0.0; };
  auto times = [](double base, double t) { return base > 0 ? t / base : 0.0; };
  for (const auto& row : r.rows) {
    if (!row.ok) {
      s += fmt::format("{:<9} failed: {}\n", row.format, row.error);
      continue;
    }
    // Ratios against the raw baseline from warm passes (cold when there are none):
    // sequential as % of raw throughput, random as a multiple of raw pread time; each in
    // wall-clock and in CPU time (c).
    bool w = row.has_warm && row.ref_seq_s > 0;
    const ReadSpeeds& x = w ? row.warm : row.cold;
    double seqp = 0, seqc = 0, rx = 0, rxc = 0;
    if (w) {
      seqp = pct(row.ref_seq_s, x.seq_s);
      seqc = pct(row.ref_seq_cpu_s, x.seq_cpu_s);
      rx = times(row.ref_rand_s, x.rand_s);
      rxc = times(row.ref_rand_cpu_s, x.rand_cpu_s);
    } else if (raw && raw->has_cold && row.has_cold) {
      seqp = pct(raw->cold.seq_s, x.seq_s);
      seqc = pct(raw->cold.seq_cpu_s, x.seq_cpu_s);
      rx = times(raw->cold.rand_s, x.rand_s);
      rxc = times(raw->cold.rand_cpu_s, x.rand_cpu_s);
    }
    double open_ms = (row.has_warm ? row.warm.open_s : row.cold.open_s) * 1e3;
    s += fmt::format(
        "{:<9} {:>8.1f} {:>5} {:>7.2f} {:>7.1f} | {:>8.0f} {:>7.1f} {:>8.0f} {:>8.0f} | {:>8.0f} "
        "{:>7.1f} {:>8.0f} {:>8.0f} | {:>5.0f}% {:>5.0f}% {:>5.2f}x {:>5.2f}x\n",
        row.format, row.bytes_on_disk / 1e6, row.files, row.convert_s, open_ms, row.cold.seq_sps,
        row.cold.seq_mb_s, row.cold.rand_sps, row.cold.shuffled_sps, row.warm.seq_sps,
        row.warm.seq_mb_s, row.warm.rand_sps, row.warm.shuffled_sps, seqp, seqc, rx, rxc);
  }
  s += "(samples/s unless noted; cold = page cache dropped with fadvise DONTNEED and the data "
       "set reopened; open = opening and indexing, not in the read times; seq% = warm sequential "
       "throughput vs raw, rand x = warm random-access time / raw pread time, each against raw "
       "passes run alternately with the format's own; c = by the reading thread's CPU time; "
       "targets: seq% >= 90, rand x <= 2)\n";
  if (raw)
    s += fmt::format(
        "raw sequential baseline: {} (1 MiB blocks {:.1f} ms, cpu {:.1f} ms; per-record preads "
        "{:.1f} ms, cpu {:.1f} ms)\n",
        r.raw_seq_method, r.raw_block_s * 1e3, r.raw_block_cpu_s * 1e3, r.raw_record_s * 1e3,
        r.raw_record_cpu_s * 1e3);
  if (raw && r.raw_crc_s > 0 && r.raw_record_s > 0)
    s += fmt::format(
        "per-record preads + CRC32C of every byte: {:.1f} ms, cpu {:.1f} ms ({:.0f}% of the "
        "per-record pread throughput: the ceiling for a format that checks a data CRC, such "
        "as TFRecord)\n",
        r.raw_crc_s * 1e3, r.raw_crc_cpu_s * 1e3, 100 * r.raw_record_s / r.raw_crc_s);
  s += r.recommendation + "\n";
  return s;
}

std::string FormatBenchJson(const FormatBenchResult& r) {
  nlohmann::json j;
  j["source"] = r.source;
  j["samples"] = r.samples;
  j["payload_bytes"] = r.payload_bytes;
  j["recommendation"] = r.recommendation;
  j["raw_sequential_baseline"] = {{"method", r.raw_seq_method},
                                  {"block_1mib_s", r.raw_block_s},
                                  {"block_1mib_cpu_s", r.raw_block_cpu_s},
                                  {"per_record_s", r.raw_record_s},
                                  {"per_record_cpu_s", r.raw_record_cpu_s},
                                  {"per_record_crc32c_s", r.raw_crc_s},
                                  {"per_record_crc32c_cpu_s", r.raw_crc_cpu_s}};
  auto speeds = [](const ReadSpeeds& s) {
    return nlohmann::json{{"seq_sps", s.seq_sps},           {"seq_mb_s", s.seq_mb_s},
                          {"rand_sps", s.rand_sps},         {"rand_mb_s", s.rand_mb_s},
                          {"shuffled_sps", s.shuffled_sps}, {"shuffled_mb_s", s.shuffled_mb_s},
                          {"seq_s", s.seq_s},               {"seq_cpu_s", s.seq_cpu_s},
                          {"rand_s", s.rand_s},             {"rand_cpu_s", s.rand_cpu_s},
                          {"shuffled_s", s.shuffled_s},     {"shuffled_cpu_s", s.shuffled_cpu_s},
                          {"open_s", s.open_s}};
  };
  j["formats"] = nlohmann::json::array();
  for (const auto& row : r.rows) {
    nlohmann::json x{{"format", row.format}, {"ok", row.ok}};
    if (!row.ok) {
      x["error"] = row.error;
    } else {
      x["samples"] = row.samples;
      x["files"] = row.files;
      x["bytes_on_disk"] = row.bytes_on_disk;
      x["convert_s"] = row.convert_s;
      if (row.has_cold) x["cold"] = speeds(row.cold);
      if (row.has_warm) x["warm"] = speeds(row.warm);
      if (row.ref_seq_s > 0)
        x["paired_raw_warm"] = {{"seq_s", row.ref_seq_s},
                                {"seq_cpu_s", row.ref_seq_cpu_s},
                                {"rand_s", row.ref_rand_s},
                                {"rand_cpu_s", row.ref_rand_cpu_s}};
    }
    j["formats"].push_back(x);
  }
  return j.dump(2);
}

namespace {

std::string BarChart(const FormatBenchResult& r, const std::string& title,
                     double (*metric)(const FormatBenchRow&), const char* unit) {
  std::vector<std::pair<std::string, double>> bars;
  double vmax = 0;
  for (const auto& row : r.rows) {
    if (!row.ok) continue;
    double v = metric(row);
    bars.push_back({row.format, v});
    vmax = std::max(vmax, v);
  }
  if (bars.empty() || vmax <= 0) return "";
  const int W = 560, L = 90, R = 90, bh = 20, T = 28;
  int H = T + static_cast<int>(bars.size()) * (bh + 6) + 10;
  std::string s = html::SvgOpen(W, H) +
                  fmt::format("<text x='4' y='18' font-weight='bold'>{}</text>\n",
                              html::Escape(title));
  for (size_t i = 0; i < bars.size(); ++i) {
    int y = T + static_cast<int>(i) * (bh + 6);
    double w = (W - L - R) * bars[i].second / vmax;
    const char* color = bars[i].first == "raw" ? "#999" : "#1f77b4";
    s += fmt::format("<text x='{}' y='{}' text-anchor='end'>{}</text><rect x='{}' y='{}' "
                     "width='{:.1f}' height='{}' fill='{}'/><text x='{:.1f}' y='{}'>{:.0f} {}</text>\n",
                     L - 6, y + 14, bars[i].first, L, y, w, bh, color, L + w + 4, y + 14,
                     bars[i].second, unit);
  }
  return s + "</svg>\n";
}

}  // namespace

std::string FormatBenchHtml(const FormatBenchResult& r) {
  std::string s = html::PageOpen("stoker bench formats") + "<h1>Format benchmark</h1>\n";
  std::string table = FormatBenchTable(r);
  s += "<pre>" + html::Escape(table) + "</pre>\n";
  s += BarChart(r, "Cold shuffled-epoch read (samples/s)",
                [](const FormatBenchRow& x) { return x.cold.shuffled_sps; }, "/s");
  s += BarChart(r, "Warm sequential read (MB/s)",
                [](const FormatBenchRow& x) { return x.warm.seq_mb_s; }, "MB/s");
  s += BarChart(r, "Warm random access (samples/s)",
                [](const FormatBenchRow& x) { return x.warm.rand_sps; }, "/s");
  s += BarChart(r, "Cold random access (samples/s)",
                [](const FormatBenchRow& x) { return x.cold.rand_sps; }, "/s");
  s += BarChart(r, "Bytes on disk (MB)",
                [](const FormatBenchRow& x) { return x.bytes_on_disk / 1e6; }, "MB");
  s += html::PageClose();
  return s;
}

}  // namespace stoker
