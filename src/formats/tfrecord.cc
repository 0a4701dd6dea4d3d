#include "formats/tfrecord.h"

#include <cstdint>
#include <iterator>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <deque>

#include "core/thread_pool.h"
#include "formats/builtin.h"
#include "formats/checksum.h"
#include "formats/index_cache.h"
#include "formats/sample_buffers.h"
#include "formats/sharded.h"

namespace stoker {
namespace {

uint64_t Le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint32_t Le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
void PutLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Records above this are treated as corruption (a flipped length bit), not allocated.
constexpr uint64_t kMaxRecord = 1ull << 34;

}  // namespace

Result<uint64_t> ParseTFRecordHeader(const uint8_t* h, const std::string& path, uint64_t record,
                                     uint64_t offset) {
  uint64_t len = Le64(h);
  uint32_t want = UnmaskCrc32c(Le32(h + 8));
  if (Crc32c(h, 8) != want)
    return Corrupt("{}: record {} at offset {}: bad length CRC", path, record, offset);
  if (len > kMaxRecord)
    return Corrupt("{}: record {} at offset {}: implausible length {}", path, record, offset, len);
  return len;
}

Status CheckTFRecordData(const uint8_t* data, size_t n, const uint8_t* footer,
                         const std::string& path, uint64_t record, uint64_t offset) {
  if (Crc32c(data, n) != UnmaskCrc32c(Le32(footer)))
    return Corrupt("{}: record {} at offset {}: bad data CRC", path, record, offset);
  return Status::OK();
}

void AppendTFRecordFrame(const uint8_t* data, size_t n, std::vector<uint8_t>* out) {
  uint8_t h[kTFRecordHeader];
  PutLe64(h, n);
  PutLe32(h + 8, MaskCrc32c(Crc32c(h, 8)));
  out->insert(out->end(), h, h + kTFRecordHeader);
  out->insert(out->end(), data, data + n);
  uint8_t f[4];
  PutLe32(f, MaskCrc32c(Crc32c(data, n)));
  out->insert(out->end(), f, f + 4);
}

TFRecordScan ScanTFRecordFile(const RandomAccessFile& file) {
  TFRecordScan scan;
  const uint64_t size = file.size();
  uint64_t off = 0;
  uint8_t h[kTFRecordHeader];
  for (uint64_t rec = 0; off < size; ++rec) {
    if (size - off < kTFRecordHeader) {
      scan.error = Corrupt("{}: record {} at offset {}: truncated header ({} of 12 bytes)",
                           file.path(), rec, off, size - off);
      return scan;
    }
    Status st = file.ReadExact(off, kTFRecordHeader, h);
    if (!st.ok()) {
      scan.error = st;
      return scan;
    }
    auto len = ParseTFRecordHeader(h, file.path(), rec, off);
    if (!len.ok()) {
      scan.error = len.status();
      return scan;
    }
    uint64_t total = kTFRecordHeader + *len + kTFRecordFooter;
    if (total > size - off) {
      scan.error = Corrupt("{}: record {} at offset {}: truncated (needs {} bytes, {} left)",
                           file.path(), rec, off, total, size - off);
      return scan;
    }
    scan.records.push_back({off, total});
    off += total;
  }
  return scan;
}

TFRecordScan ParseTFRecordBuffer(const uint8_t* data, size_t n, const std::string& path) {
  TFRecordScan scan;
  uint64_t off = 0;
  for (uint64_t rec = 0; off < n; ++rec) {
    if (n - off < kTFRecordHeader) {
      scan.error = Corrupt("{}: record {} at offset {}: truncated header", path, rec, off);
      return scan;
    }
    auto len = ParseTFRecordHeader(data + off, path, rec, off);
    if (!len.ok()) {
      scan.error = len.status();
      return scan;
    }
    uint64_t total = kTFRecordHeader + *len + kTFRecordFooter;
    if (total > n - off) {
      scan.error = Corrupt("{}: record {} at offset {}: truncated (needs {} bytes, {} left)",
                           path, rec, off, total, n - off);
      return scan;
    }
    Status st = CheckTFRecordData(data + off + kTFRecordHeader, *len,
                                  data + off + kTFRecordHeader + *len, path, rec, off);
    if (!st.ok()) {
      scan.error = st;
      return scan;
    }
    scan.records.push_back({off, total});
    off += total;
  }
  return scan;
}

std::string FormatTFRecordIndex(const std::vector<TFRecordEntry>& recs) {
  std::string s;
  s.reserve(recs.size() * 16);
  for (const auto& r : recs) s += fmt::format("{} {}\n", r.offset, r.size);
  return s;
}

Status ParseTFRecordIndex(const std::string& text, const std::string& path, uint64_t file_size,
                          std::vector<TFRecordEntry>* out) {
  out->clear();
  uint64_t expect = 0;
  size_t pos = 0, line = 0;
  while (pos < text.size()) {
    size_t e = text.find('\n', pos);
    if (e == std::string::npos) e = text.size();
    std::string_view l(text.data() + pos, e - pos);
    pos = e + 1;
    ++line;
    while (!l.empty() && (l.back() == '\r' || l.back() == ' ')) l.remove_suffix(1);
    if (l.empty()) continue;
    size_t sp = l.find(' ');
    uint64_t off = 0, size = 0;
    if (sp == std::string_view::npos ||
        std::from_chars(l.data(), l.data() + sp, off).ptr != l.data() + sp ||
        std::from_chars(l.data() + sp + 1, l.data() + l.size(), size).ptr != l.data() + l.size())
      return Corrupt("index of {}: line {}: expected '<offset> <size>'", path, line);
    if (off != expect || size < kTFRecordHeader + kTFRecordFooter || size > file_size - off)
      return Corrupt("index of {}: line {}: record {}+{} does not follow the previous one "
                     "inside the {}-byte file",
                     path, line, off, size, file_size);
    out->push_back({off, size});
    expect = off + size;
  }
  if (expect != file_size)
    return Corrupt("index of {}: records cover {} of {} bytes", path, expect, file_size);
  return Status::OK();
}

// ---------------------------------------------------------------------------------------
// gzip


struct TFRecordFileWriter::Z {
  z_stream zs{};
  std::vector<uint8_t> out;
};

TFRecordFileWriter::TFRecordFileWriter(WritableFile* out, bool gzip) : out_(out) {
  if (gzip) {
    z_.reset(new Z);
    z_->out.resize(256 << 10);
    if (deflateInit2(&z_->zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) z_.reset();
  }
}

TFRecordFileWriter::~TFRecordFileWriter() {
  if (z_) deflateEnd(&z_->zs);
}

Status TFRecordFileWriter::Put(const uint8_t* p, size_t n) {
  offset_ += n;
  if (!z_) return out_->Append(p, n);
  z_stream& zs = z_->zs;
  zs.next_in = const_cast<uint8_t*>(p);
  zs.avail_in = static_cast<uInt>(n);
  while (zs.avail_in > 0) {
    zs.next_out = z_->out.data();
    zs.avail_out = static_cast<uInt>(z_->out.size());
    if (deflate(&zs, Z_NO_FLUSH) == Z_STREAM_ERROR) return Internal("deflate failed");
    size_t k = z_->out.size() - zs.avail_out;
    if (k) STOKER_RETURN_IF_ERROR(out_->Append(z_->out.data(), k));
  }
  return Status::OK();
}

Status TFRecordFileWriter::Append(const uint8_t* data, size_t n) {
  uint8_t h[kTFRecordHeader];
  PutLe64(h, n);
  PutLe32(h + 8, MaskCrc32c(Crc32c(h, 8)));
  uint8_t f[4];
  PutLe32(f, MaskCrc32c(Crc32c(data, n)));
  STOKER_RETURN_IF_ERROR(Put(h, sizeof h));
  STOKER_RETURN_IF_ERROR(Put(data, n));
  return Put(f, sizeof f);
}

Status TFRecordFileWriter::Finish() {
  if (!z_) return Status::OK();
  z_stream& zs = z_->zs;
  zs.next_in = nullptr;
  zs.avail_in = 0;
  for (;;) {
    zs.next_out = z_->out.data();
    zs.avail_out = static_cast<uInt>(z_->out.size());
    int rc = deflate(&zs, Z_FINISH);
    size_t k = z_->out.size() - zs.avail_out;
    if (k) STOKER_RETURN_IF_ERROR(out_->Append(z_->out.data(), k));
    if (rc == Z_STREAM_END) break;
    if (rc != Z_OK && rc != Z_BUF_ERROR) return Internal("deflate finish failed");
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------------------
// Example <-> Sample

namespace {

// Copies a bytes value into a field whose buffer keeps its capacity and size (no zero-fill
// of the part that is overwritten anyway).
void CopyValue(const uint8_t* record, size_t off, size_t len, Field* f) {
  f->data.resize(len);
  if (len) std::memcpy(f->data.data(), record + off, len);
}

Status ExampleToSampleImpl(const uint8_t* record, const std::vector<ExampleFeature>& feats,
                           bool raw_names, Sample* out);

}  // namespace

Status ExampleToSample(const uint8_t* record, const std::vector<ExampleFeature>& feats,
                       bool raw_names, Sample* out) {
  return ExampleToSampleImpl(record, feats, raw_names, out);
}

namespace {

Status ExampleToSampleImpl(const uint8_t* record, const std::vector<ExampleFeature>& feats,
                           bool raw_names, Sample* out) {
  static const char* kLabelKeys[] = {"image/class/label", "label", "cls"};
  int label_feat = -1;
  for (const char* k : kLabelKeys) {
    for (size_t i = 0; i < feats.size() && label_feat < 0; ++i)
      if (feats[i].name == k && feats[i].kind == ExampleFeature::Kind::kInt64 &&
          feats[i].ints.size() == 1)
        label_feat = static_cast<int>(i);
    if (label_feat >= 0) break;
  }
  if (label_feat >= 0) out->label = feats[label_feat].ints[0];
  bool has_jpg = false;
  for (const auto& f : feats)
    if (f.name == "jpg") has_jpg = true;
  for (size_t i = 0; i < feats.size(); ++i) {
    const ExampleFeature& f = feats[i];
    if (static_cast<int>(i) == label_feat) continue;
    if (f.kind == ExampleFeature::Kind::kBytes) {
      if (f.name == "__key__" && f.bytes.size() == 1) {
        out->key.assign(reinterpret_cast<const char*>(record + f.bytes[0].first),
                        f.bytes[0].second);
        continue;
      }
      std::string name = (!raw_names && !has_jpg && f.name == "image/encoded") ? "jpg" : f.name;
      for (size_t v = 0; v < f.bytes.size(); ++v) {
        Field* fld = AddFieldForOverwrite(out, v == 0 ? name : fmt::format("{}#{}", name, v));
        CopyValue(record, f.bytes[v].first, f.bytes[v].second, fld);
      }
    } else if (f.kind == ExampleFeature::Kind::kInt64) {
      Field* fld = out->AddField(f.name);
      std::string s;
      for (size_t v = 0; v < f.ints.size(); ++v) s += (v ? " " : "") + std::to_string(f.ints[v]);
      fld->data.assign(s.begin(), s.end());
    } else if (f.kind == ExampleFeature::Kind::kFloat) {
      Field* fld = out->AddField(f.name);
      std::string s;
      for (size_t v = 0; v < f.floats.size(); ++v)
        s += (v ? " " : "") + fmt::format("{}", f.floats[v]);
      fld->data.assign(s.begin(), s.end());
    }
  }
  return Status::OK();
}

}  // namespace

void SampleToExample(const Sample& s, std::vector<uint8_t>* out) {
  ExampleBuilder b;
  b.AddBytes("__key__", reinterpret_cast<const uint8_t*>(s.key.data()), s.key.size());
  bool has_label_field = false;
  for (size_t i = 0; i < s.num_fields; ++i) {
    const Field& f = s.fields[i];
    if (f.name == "label") has_label_field = true;
    b.AddBytes(f.name == "jpg" ? "image/encoded" : f.name, f.data.data(), f.data.size());
  }
  if (s.label >= 0 && !has_label_field) b.AddInt64("label", {s.label});
  b.SerializeTo(out);
}

// ---------------------------------------------------------------------------------------
// Dataset

struct TFRecordDataset::ShardState::Cursor {
  std::mutex mu;
  std::unique_ptr<GzipReader> rd;
  uint64_t next = 0;  // record the reader is positioned at
  std::deque<std::pair<uint64_t, std::vector<uint8_t>>> recent;  // last frames read
};

namespace {

std::string Stem(const std::string& path) {
  std::string b = BaseName(path);
  size_t dot = b.find('.', 1);
  return dot == std::string::npos ? b : b.substr(0, dot);
}

struct ShardIndexResult {
  std::vector<TFRecordEntry> records;
  bool gzip = false;
  Status error;
  std::string note;
};

ShardIndexResult IndexTFRecordShard(Env* env, const SiblingFiles& siblings,
                                    const std::string& path) {
  ShardIndexResult r;
  auto h = IndexingHandle::Open(env, path);
  if (!h.ok()) {
    r.error = h.status();
    return r;
  }
  const std::shared_ptr<RandomAccessFile>& file = h->shared_probe();
  if (IsGzipFile(*file)) {
    r.gzip = true;
    GzipReader rd(h->ForScan());
    uint8_t h[kTFRecordHeader];
    for (uint64_t rec = 0;; ++rec) {
      uint64_t off = rd.position();
      auto got = rd.Read(h, sizeof h);
      if (!got.ok()) {
        r.error = got.status();
        return r;
      }
      if (*got == 0) break;
      if (*got < sizeof h) {
        r.error = Corrupt("{}: record {} at uncompressed offset {}: truncated header", path, rec,
                          off);
        return r;
      }
      auto len = ParseTFRecordHeader(h, path, rec, off);
      if (!len.ok()) {
        r.error = len.status();
        return r;
      }
      auto skipped = rd.Read(nullptr, *len + kTFRecordFooter);
      if (!skipped.ok()) {
        r.error = skipped.status();
        return r;
      }
      if (*skipped < *len + kTFRecordFooter) {
        r.error = Corrupt("{}: record {} at uncompressed offset {}: truncated", path, rec, off);
        return r;
      }
      r.records.push_back({off, kTFRecordHeader + *len + kTFRecordFooter});
    }
    return r;
  }
  for (const std::string& ipath : {path + ".idx", JoinPath(DirName(path), Stem(path) + ".idx")}) {
    if (!siblings.Exists(ipath)) continue;
    std::vector<uint8_t> bytes;
    Status st = env->ReadFile(ipath, &bytes);
    if (st.ok())
      st = ParseTFRecordIndex(std::string(bytes.begin(), bytes.end()), path, file->size(),
                              &r.records);
    if (st.ok()) return r;
    r.note = fmt::format("ignored index {} ({}); scanned the file instead", ipath, st.message());
    r.records.clear();
    break;
  }
  // No index beside it: the local index cache (an object file scanned before), else a scan.
  const std::string cached = IndexCacheEntry(path, file->size(), file->version(), "tfrecord");
  if (!cached.empty()) {
    std::string text;
    if (ReadIndexCache(cached, &text) &&
        ParseTFRecordIndex(text, path, file->size(), &r.records).ok())
      return r;
    r.records.clear();
  }
  TFRecordScan scan = ScanTFRecordFile(*h->ForScan());
  r.records = std::move(scan.records);
  r.error = scan.error;
  if (r.error.ok() && !cached.empty()) WriteIndexCache(cached, FormatTFRecordIndex(r.records));
  return r;
}

}  // namespace

TFRecordDataset::~TFRecordDataset() = default;

Result<std::unique_ptr<TFRecordDataset>> TFRecordDataset::Open(const std::string& spec,
                                                               const DatasetOptions& opts,
                                                               const TFRecordOptions& topts) {
  Env* env = opts.env ? opts.env : Env::Default();
  STOKER_ASSIGN_OR_RETURN(
      auto paths, ResolveShardList(env, spec, {"tfrecord", "tfrec", "tfrecord.gz", "tfrec.gz"}));
  std::unique_ptr<TFRecordDataset> ds(new TFRecordDataset(env, topts));
  const SiblingFiles siblings(env, paths);
  std::vector<ShardIndexResult> results = IndexShards<ShardIndexResult>(
      paths, "tfr-index",
      [&](const std::string& p) { return IndexTFRecordShard(env, siblings, p); });
  ds->shard_info_.resize(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    ShardIndexResult& r = results[i];
    if (!r.note.empty()) ds->notes_.push_back(r.note);
    if (!r.error.ok()) {
      if (!opts.skip_bad_shards) return r.error;
      ds->errors_.push_back(
          fmt::format("{} (kept {} complete records)", r.error.message(), r.records.size()));
    }
    ShardState& s = ds->shard_info_[i];
    s.path = paths[i];
    s.stem = Stem(paths[i]);
    s.gzip = r.gzip;
    s.records = std::move(r.records);
    if (s.gzip) s.cursor = std::make_shared<ShardState::Cursor>();
    ShardInfo info{paths[i], ds->total_, ds->total_ + s.records.size()};
    ds->total_ = info.end;
    ds->shards_.push_back(info);
  }
  return ds;
}

void TFRecordDataset::Locate(uint64_t index, uint32_t* shard, uint64_t* local) const {
  auto it = std::upper_bound(shards_.begin(), shards_.end(), index,
                             [](uint64_t i, const ShardInfo& s) { return i < s.end; });
  *shard = static_cast<uint32_t>(it - shards_.begin());
  *local = index - it->begin;
}

TFRecordEntry TFRecordDataset::Record(uint64_t index, uint32_t* shard) const {
  uint64_t local;
  Locate(index, shard, &local);
  return shard_info_[*shard].records[local];
}

Status TFRecordDataset::ReadGzipRecord(uint32_t shard, uint64_t local,
                                       std::vector<uint8_t>* frame) const {
  const ShardState& s = shard_info_[shard];
  ShardState::Cursor& c = *s.cursor;
  std::lock_guard<std::mutex> lk(c.mu);
  for (const auto& [rec, bytes] : c.recent)
    if (rec == local) {
      *frame = bytes;
      return Status::OK();
    }
  if (!c.rd || local < c.next) {
    STOKER_ASSIGN_OR_RETURN(auto file, files_.Get(shard, s.path));
    c.rd = std::make_unique<GzipReader>(file);
    c.next = 0;
  }
  constexpr size_t kRecent = 16;
  while (c.next <= local) {
    const TFRecordEntry& e = s.records[c.next];
    std::vector<uint8_t> buf;
    if (c.recent.size() >= kRecent) {
      buf = std::move(c.recent.front().second);
      c.recent.pop_front();
    }
    buf.resize(e.size);
    auto got = c.rd->Read(buf.data(), e.size);
    if (!got.ok() || *got < e.size) {
      c.rd.reset();
      if (!got.ok()) return got.status();
      return Corrupt("{}: record {} at uncompressed offset {}: truncated", s.path, c.next,
                     e.offset);
    }
    c.recent.emplace_back(c.next, std::move(buf));
    ++c.next;
  }
  *frame = c.recent.back().second;
  return Status::OK();
}

Status TFRecordDataset::ReadRecord(uint64_t index, std::vector<uint8_t>* payload) const {
  if (index >= total_) return InvalidArgument("sample index {} out of range ({})", index, total_);
  uint32_t shard;
  uint64_t local;
  Locate(index, &shard, &local);
  const ShardState& s = shard_info_[shard];
  const TFRecordEntry& e = s.records[local];
  thread_local std::vector<uint8_t> frame;
  if (s.gzip) {
    STOKER_RETURN_IF_ERROR(ReadGzipRecord(shard, local, &frame));
  } else {
    STOKER_ASSIGN_OR_RETURN(auto file, files_.Get(shard, s.path));
    frame.resize(e.size);
    STOKER_RETURN_IF_ERROR(file->ReadExact(e.offset, e.size, frame.data()));
  }
  STOKER_ASSIGN_OR_RETURN(uint64_t len, ParseTFRecordHeader(frame.data(), s.path, local, e.offset));
  if (len != e.length())
    return Corrupt("{}: record {} at offset {}: length {} differs from the index ({})", s.path,
                   local, e.offset, len, e.length());
  const uint8_t* data = frame.data() + kTFRecordHeader;
  if (opts_.verify_crc)
    STOKER_RETURN_IF_ERROR(CheckTFRecordData(data, len, data + len, s.path, local, e.offset));
  payload->assign(data, data + len);
  return Status::OK();
}

Status TFRecordDataset::Read(uint64_t index, Sample* out) const {
  out->Clear();
  if (index >= total_) return InvalidArgument("sample index {} out of range ({})", index, total_);
  uint32_t shard;
  uint64_t local;
  Locate(index, &shard, &local);
  const ShardState& s = shard_info_[shard];
  const TFRecordEntry& e = s.records[local];
  thread_local std::vector<uint8_t> frame;
  thread_local std::vector<ExampleFeature> feats;
  if (s.gzip) {
    STOKER_RETURN_IF_ERROR(ReadGzipRecord(shard, local, &frame));
  } else {
    STOKER_ASSIGN_OR_RETURN(auto file, files_.Get(shard, s.path));
    frame.resize(e.size);
    STOKER_RETURN_IF_ERROR(file->ReadExact(e.offset, e.size, frame.data()));
  }
  STOKER_ASSIGN_OR_RETURN(uint64_t len, ParseTFRecordHeader(frame.data(), s.path, local, e.offset));
  if (len != e.length())
    return Corrupt("{}: record {} at offset {}: length {} differs from the index ({})", s.path,
                   local, e.offset, len, e.length());
  const uint8_t* data = frame.data() + kTFRecordHeader;
  // Decode first (so that a record that does not decode but has a bad CRC is reported as a
  // CRC error), copy the values out, then check the data CRC over the record, which the
  // pread has just brought into cache. (Checking while copying, in one pass, measured
  // slower here than memcpy plus a separate crc32-instruction pass.)
  Status st = DecodeExample(data, len, &feats);
  if (!st.ok()) {
    if (opts_.verify_crc)
      STOKER_RETURN_IF_ERROR(CheckTFRecordData(data, len, data + len, s.path, local, e.offset));
    return st.WithContext(fmt::format("{}: record {} at offset {}", s.path, local, e.offset));
  }
  // format_to reuses the recycled sample's string capacity.
  out->key.clear();
  fmt::format_to(std::back_inserter(out->key), "{}/{}", s.stem, local);
  out->location.clear();
  fmt::format_to(std::back_inserter(out->location), "{}:record {} (offset {})", s.path, local,
                 e.offset);
  st = ExampleToSampleImpl(data, feats, opts_.raw_names, out);
  if (!st.ok() || !opts_.verify_crc) return st;
  st = CheckTFRecordData(data, len, data + len, s.path, local, e.offset);
  if (!st.ok()) out->Clear();
  return st;
}

std::string TFRecordDataset::Key(uint64_t index) const {
  thread_local Sample s;
  if (Read(index, &s).ok()) return s.key;
  uint32_t shard;
  uint64_t local;
  Locate(index, &shard, &local);
  return fmt::format("{}/{}", shard_info_[shard].stem, local);
}

std::string TFRecordDataset::Location(uint64_t index) const {
  uint32_t shard;
  uint64_t local;
  Locate(index, &shard, &local);
  return fmt::format("{}:record {} (offset {})", shard_info_[shard].path, local,
                     shard_info_[shard].records[local].offset);
}

// ---------------------------------------------------------------------------------------
// Writer

Result<std::unique_ptr<TFRecordWriter>> TFRecordWriter::Open(const std::string& pattern_in,
                                                             const WriterOptions& opts_in) {
  WriterOptions opts = opts_in;
  std::string pattern = pattern_in;
  if (opts.gzip && (pattern.size() < 3 || pattern.compare(pattern.size() - 3, 3, ".gz") != 0))
    pattern += ".gz";
  STOKER_RETURN_IF_ERROR(Prepare(pattern, &opts));
  return std::unique_ptr<TFRecordWriter>(new TFRecordWriter(pattern, opts));
}

Status TFRecordWriter::BeginShard(WritableFile* file) {
  rec_ = std::make_unique<TFRecordFileWriter>(file, opts().gzip);
  cur_.clear();
  return Status::OK();
}

Status TFRecordWriter::WriteIndex(const std::string& path) {
  if (opts().gzip) return Status::OK();  // offsets in a gzip stream cannot be seeked to
  std::string text = FormatTFRecordIndex(cur_);
  return opts().env->WriteFileAtomic(path + ".idx", text.data(), text.size());
}

Status TFRecordWriter::AppendSample(const Sample& s) {
  buf_.clear();
  SampleToExample(s, &buf_);
  uint64_t off = rec_->offset();
  STOKER_RETURN_IF_ERROR(rec_->Append(buf_.data(), buf_.size()));
  cur_.push_back({off, rec_->offset() - off});
  return Status::OK();
}

void RegisterTFRecordFormat() {
  auto open = [](bool raw, bool crc = true) {
    return [raw, crc](const std::string& path,
                      const DatasetOptions& opts) -> Result<std::unique_ptr<Dataset>> {
      TFRecordOptions t;
      t.raw_names = raw;
      t.verify_crc = crc;
      auto r = TFRecordDataset::Open(path, opts, t);
      if (!r.ok()) return r.status();
      return std::unique_ptr<Dataset>(std::move(r).value());
    };
  };
  RegisterDatasetFormat({"tfrecord",
                         {"tfrecord", "tfrec"},
                         open(false),
                         "TFRecord files of tf.train.Example (plain or gzip; DALI .idx used)"});
  RegisterDatasetFormat({"tfrecord-raw",
                         {},
                         open(true),
                         "TFRecord with the original feature names (image/encoded kept)"});
  RegisterDatasetFormat({"tfrecord-nocrc",
                         {},
                         open(false, false),
                         "TFRecord without the data CRC check (as DALI reads; the length CRC "
                         "is still checked)"});
  RegisterDatasetWriter("tfrecord", [](const std::string& path, const WriterOptions& opts)
                                        -> Result<std::unique_ptr<DatasetWriter>> {
    auto r = TFRecordWriter::Open(path, opts);
    if (!r.ok()) return r.status();
    return std::unique_ptr<DatasetWriter>(std::move(r).value());
  });
}

}  // namespace stoker
