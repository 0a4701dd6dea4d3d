#include "formats/format_bench.h"

#include <algorithm>
#include <map>
#include <numeric>

#include <nlohmann/json.hpp>

#include "core/random.h"
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

std::vector<uint64_t> Permutation(uint64_t n, uint64_t seed, uint64_t stream) {
  std::vector<uint64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  Rng rng(seed, 0, 0, stream);
  for (uint64_t i = n; i > 1; --i) std::swap(p[i - 1], p[rng.Next() % i]);
  return p;
}

// The order a shuffled epoch reads: shards in shuffled order, each read sequentially (the
// shuffle buffer reorders in memory only); a full permutation when random access is cheap.
std::vector<uint64_t> ShuffledEpochOrder(const Dataset& ds, uint64_t seed) {
  if (ds.random_access_is_cheap()) return Permutation(ds.size(), seed, 7);
  std::vector<ShardInfo> shards = ds.shards();
  Rng rng(seed, 1, 0, 9);
  for (size_t i = shards.size(); i > 1; --i) std::swap(shards[i - 1], shards[rng.Next() % i]);
  std::vector<uint64_t> order;
  order.reserve(ds.size());
  for (const auto& s : shards)
    for (uint64_t i = s.begin; i < s.end; ++i) order.push_back(i);
  return order;
}

struct Timed {
  double seconds = 0;
  uint64_t bytes = 0;
};

Result<Timed> TimedPassOnce(Env* env, Clock* clock, const std::string& spec,
                            const std::vector<std::string>& files, bool cold, int kind,
                            uint64_t seed) {
  if (cold) STOKER_RETURN_IF_ERROR(DropAll(env, files));
  DatasetOptions dopts;
  dopts.env = env;
  int64_t t0 = clock->NowNanos();
  STOKER_ASSIGN_OR_RETURN(auto ds, OpenDataset(spec, dopts));
  std::vector<uint64_t> order;
  if (kind == 0) {
    order.resize(ds->size());
    std::iota(order.begin(), order.end(), 0);
  } else if (kind == 1) {
    order = Permutation(ds->size(), seed, 3);
  } else {
    order = ShuffledEpochOrder(*ds, seed);
  }
  Sample s;
  Timed t;
  for (uint64_t i : order) {
    STOKER_RETURN_IF_ERROR(ds->Read(i, &s));
    t.bytes += s.bytes();
  }
  t.seconds = (clock->NowNanos() - t0) * 1e-9;
  return t;
}

// The fastest of `repeats` runs (the machine may be shared; noise only ever slows a run).
Result<Timed> TimedPass(Env* env, Clock* clock, const std::string& spec,
                        const std::vector<std::string>& files, bool cold, int kind,
                        uint64_t seed, int repeats = 1) {
  Timed best;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    STOKER_ASSIGN_OR_RETURN(Timed t, TimedPassOnce(env, clock, spec, files, cold, kind, seed));
    if (r == 0 || t.seconds < best.seconds) best = t;
  }
  return best;
}

void Fill(const Timed& t, uint64_t n, double* sps, double* mb) {
  *sps = t.seconds > 0 ? n / t.seconds : 0;
  *mb = t.seconds > 0 ? t.bytes / t.seconds / 1e6 : 0;
}

Status MeasureFormat(Env* env, Clock* clock, const std::string& spec,
                     const std::vector<std::string>& files, uint64_t n,
                     const FormatBenchOptions& o, FormatBenchRow* row) {
  for (int state = 0; state < 2; ++state) {
    bool cold = state == 0;
    if (cold && !o.cold) continue;
    if (!cold && !o.warm) continue;
    if (!cold) STOKER_RETURN_IF_ERROR(TimedPass(env, clock, spec, files, false, 0, o.seed).status());
    ReadSpeeds& rs = cold ? row->cold : row->warm;
    STOKER_ASSIGN_OR_RETURN(Timed seq,
                            TimedPass(env, clock, spec, files, cold, 0, o.seed, o.repeats));
    Fill(seq, n, &rs.seq_sps, &rs.seq_mb_s);
    STOKER_ASSIGN_OR_RETURN(Timed rnd,
                            TimedPass(env, clock, spec, files, cold, 1, o.seed, o.repeats));
    Fill(rnd, n, &rs.rand_sps, &rs.rand_mb_s);
    STOKER_ASSIGN_OR_RETURN(Timed shf,
                            TimedPass(env, clock, spec, files, cold, 2, o.seed, o.repeats));
    Fill(shf, n, &rs.shuffled_sps, &rs.shuffled_mb_s);
    (cold ? row->has_cold : row->has_warm) = true;
  }
  return Status::OK();
}

// Baseline: the same payload bytes in one flat file; sequential 1 MiB reads into a reused
// buffer, and one pread per record (random order) into a reused buffer.
Status MeasureRaw(Env* env, Clock* clock, const std::string& dir,
                  const std::vector<Sample>& samples, const FormatBenchOptions& o,
                  FormatBenchRow* row) {
  std::string path = JoinPath(dir, "raw.bin");
  std::vector<std::pair<uint64_t, uint64_t>> recs;
  int64_t t0 = clock->NowNanos();
  {
    STOKER_ASSIGN_OR_RETURN(auto wf, env->NewWritableFile(path));
    uint64_t off = 0;
    for (const auto& s : samples) {
      uint64_t len = 0;
      for (size_t f = 0; f < s.num_fields; ++f) {
        STOKER_RETURN_IF_ERROR(wf->Append(s.fields[f].data.data(), s.fields[f].data.size()));
        len += s.fields[f].data.size();
      }
      recs.push_back({off, len});
      off += len;
    }
    STOKER_RETURN_IF_ERROR(wf->Close());
  }
  row->convert_s = (clock->NowNanos() - t0) * 1e-9;
  STOKER_ASSIGN_OR_RETURN(FileInfo fi, env->Stat(path));
  row->bytes_on_disk = fi.size;
  row->files = 1;
  row->samples = samples.size();
  uint64_t n = samples.size();
  size_t max_len = 1;
  for (const auto& r : recs) max_len = std::max<size_t>(max_len, r.second);
  std::vector<uint8_t> buf(std::max<size_t>(max_len, 1u << 20));
  auto pass_once = [&](bool cold, int kind) -> Result<Timed> {
    if (cold) STOKER_RETURN_IF_ERROR(env->DropCache(path));
    Timed t;
    int64_t s0 = clock->NowNanos();
    STOKER_ASSIGN_OR_RETURN(auto f, env->NewRandomAccessFile(path));
    if (kind == 1) {
      for (uint64_t i : Permutation(n, o.seed, 3)) {
        STOKER_RETURN_IF_ERROR(f->ReadExact(recs[i].first, recs[i].second, buf.data()));
        t.bytes += recs[i].second;
      }
    } else {
      for (uint64_t off = 0; off < fi.size;) {
        STOKER_ASSIGN_OR_RETURN(size_t got, f->ReadAt(off, 1u << 20, buf.data()));
        if (got == 0) break;
        off += got;
        t.bytes += got;
      }
    }
    t.seconds = (clock->NowNanos() - s0) * 1e-9;
    return t;
  };
  auto pass = [&](bool cold, int kind) -> Result<Timed> {
    Timed best;
    for (int r = 0; r < std::max(1, o.repeats); ++r) {
      STOKER_ASSIGN_OR_RETURN(Timed t, pass_once(cold, kind));
      if (r == 0 || t.seconds < best.seconds) best = t;
    }
    return best;
  };
  for (int state = 0; state < 2; ++state) {
    bool cold = state == 0;
    if ((cold && !o.cold) || (!cold && !o.warm)) continue;
    if (!cold) STOKER_RETURN_IF_ERROR(pass(false, 0).status());
    ReadSpeeds& rs = cold ? row->cold : row->warm;
    STOKER_ASSIGN_OR_RETURN(Timed seq, pass(cold, 0));
    Fill(seq, n, &rs.seq_sps, &rs.seq_mb_s);
    STOKER_ASSIGN_OR_RETURN(Timed rnd, pass(cold, 1));
    Fill(rnd, n, &rs.rand_sps, &rs.rand_mb_s);
    rs.shuffled_sps = rs.seq_sps;  // one flat file: a shuffled epoch over shards is a scan
    rs.shuffled_mb_s = rs.seq_mb_s;
    (cold ? row->has_cold : row->has_warm) = true;
  }
  if (!o.keep) env->RemoveFile(path).IgnoreError();
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
  std::string s = fmt::format(
      "Recommendation: {} for training (fastest shuffled-epoch read: {:.0f} samples/s{}). ",
      best_shuf->format, shuf(*best_shuf), best_shuf->has_cold ? " cold" : " warm");
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
  STOKER_RETURN_IF_ERROR(MeasureRaw(env, clock, o.work_dir, samples, o, &raw));
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
    if (st.ok()) st = MeasureFormat(env, clock, spec, files, n, o, &row);
    row.ok = st.ok();
    if (!st.ok()) row.error = st.message();
    if (!o.keep) ClearDir(env, dir).IgnoreError();
    if (o.progress)
      o.progress(row.ok ? fmt::format("measured {}", fmt_name)
                        : fmt::format("{} failed: {}", fmt_name, row.error));
    res.rows.push_back(row);
  }
  res.recommendation = Recommend(res);
  return res;
}

std::string FormatBenchTable(const FormatBenchResult& r) {
  std::string s = fmt::format("bench formats: {} samples ({:.1f} MB payload) from {}\n", r.samples,
                              r.payload_bytes / 1e6, r.source);
  s += fmt::format("{:<9} {:>9} {:>6} {:>8} | {:>9} {:>8} {:>9} {:>9} | {:>9} {:>8} {:>9} {:>9} | {:>6} {:>6}\n",
                   "format", "disk MB", "files", "conv s", "cold seq", "MB/s", "rand/s", "shuf/s",
                   "warm seq", "MB/s", "rand/s", "shuf/s", "seq%", "rand%");
  const FormatBenchRow* raw = nullptr;
  for (const auto& row : r.rows)
    if (row.format == "raw") raw = &row;
  for (const auto& row : r.rows) {
    if (!row.ok) {
      s += fmt::format("{:<9} failed: {}\n", row.format, row.error);
      continue;
    }
    // Warm ratios against the raw baseline: seq MB/s and random samples/s.
    double seqp = raw && raw->warm.seq_mb_s > 0 ? 100 * row.warm.seq_mb_s / raw->warm.seq_mb_s : 0;
    double randp = raw && raw->warm.rand_sps > 0 ? 100 * row.warm.rand_sps / raw->warm.rand_sps : 0;
    s += fmt::format("{:<9} {:>9.1f} {:>6} {:>8.2f} | {:>9.0f} {:>8.1f} {:>9.0f} {:>9.0f} | {:>9.0f} {:>8.1f} {:>9.0f} {:>9.0f} | {:>5.0f}% {:>5.0f}%\n",
                     row.format, row.bytes_on_disk / 1e6, row.files, row.convert_s,
                     row.cold.seq_sps, row.cold.seq_mb_s, row.cold.rand_sps, row.cold.shuffled_sps,
                     row.warm.seq_sps, row.warm.seq_mb_s, row.warm.rand_sps, row.warm.shuffled_sps,
                     seqp, randp);
  }
  s += "(samples/s unless noted; cold = page cache dropped with fadvise DONTNEED and reopened; "
       "seq% = warm sequential MB/s vs raw, rand% = warm random samples/s vs raw pread)\n";
  s += r.recommendation + "\n";
  return s;
}

std::string FormatBenchJson(const FormatBenchResult& r) {
  nlohmann::json j;
  j["source"] = r.source;
  j["samples"] = r.samples;
  j["payload_bytes"] = r.payload_bytes;
  j["recommendation"] = r.recommendation;
  auto speeds = [](const ReadSpeeds& s) {
    return nlohmann::json{{"seq_sps", s.seq_sps},           {"seq_mb_s", s.seq_mb_s},
                          {"rand_sps", s.rand_sps},         {"rand_mb_s", s.rand_mb_s},
                          {"shuffled_sps", s.shuffled_sps}, {"shuffled_mb_s", s.shuffled_mb_s}};
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
  std::string s = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' "
      "font-size='12'><text x='4' y='18' font-weight='bold'>{}</text>\n",
      W, H, title);
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
  std::string s =
      "<!doctype html>\n<html><head><meta charset='utf-8'><title>stoker bench formats</title>"
      "<style>body{font-family:sans-serif;margin:24px}pre{background:#f6f6f6;padding:8px}"
      "svg{display:block;margin:12px 0}</style></head><body>\n<h1>Format benchmark</h1>\n";
  std::string table = FormatBenchTable(r);
  std::string esc;
  for (char c : table) {
    if (c == '<') esc += "&lt;";
    else if (c == '>') esc += "&gt;";
    else if (c == '&') esc += "&amp;";
    else esc += c;
  }
  s += "<pre>" + esc + "</pre>\n";
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
  s += "</body></html>\n";
  return s;
}

}  // namespace stoker
