#include "formats/wds.h"

#include <cstdint>
#include <iterator>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstring>

#include "core/thread_pool.h"
#include "formats/builtin.h"
#include "formats/index_cache.h"
#include "io/gzip.h"
#include "io/sniff.h"

namespace stoker {

bool SplitWdsName(const std::string& name, std::string* key, std::string* ext) {
  size_t slash = name.rfind('/');
  size_t base = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = name.find('.', base);
  // webdataset's regex needs at least one character before the dot
  if (dot == std::string::npos || dot == base) return false;
  *key = name.substr(0, dot);
  ext->assign(name, dot + 1, std::string::npos);
  for (char& c : *ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return true;
}

bool IsWdsMetaName(const std::string& name) {
  if (name.size() < 4 || name[0] != '_' || name[1] != '_') return false;
  size_t slash = name.find('/');
  size_t seg = slash == std::string::npos ? name.size() : slash;
  return seg >= 4 && name[seg - 1] == '_' && name[seg - 2] == '_';
}

Status GroupWdsMembers(const std::string& shard, const std::vector<TarMember>& members,
                       WdsShardIndex* out) {
  out->path = shard;
  std::string key, ext;
  for (const TarMember& m : members) {
    if (IsWdsMetaName(m.name)) continue;
    if (!SplitWdsName(m.name, &key, &ext)) continue;
    bool same = !out->keys.empty() && out->keys.back() == key;
    if (same) {
      for (size_t c = out->first.back(); c < out->comps.size(); ++c)
        if (out->comps[c].ext == ext) {
          // Drop the sample that holds the duplicate: it is not well-formed.
          out->comps.resize(out->first.back());
          out->first.pop_back();
          out->keys.pop_back();
          return Corrupt("{}: member '{}' at offset {}: duplicate field '{}' in sample '{}'",
                         shard, m.name, m.header_offset, ext, key);
        }
    } else {
      out->keys.push_back(key);
      out->first.push_back(static_cast<uint32_t>(out->comps.size()));
    }
    out->comps.push_back({ext, m.name, m.data_offset, m.size});
  }
  return Status::OK();
}

std::string FormatWdsIndex(const WdsShardIndex& idx) {
  std::string s = fmt::format("v1.2 {}\n", idx.samples());
  for (size_t i = 0; i < idx.samples(); ++i) {
    size_t end = i + 1 < idx.samples() ? idx.first[i + 1] : idx.comps.size();
    for (size_t c = idx.first[i]; c < end; ++c) {
      const WdsComponent& w = idx.comps[c];
      if (c > idx.first[i]) s += ' ';
      s += fmt::format("{} {} {} {}", w.ext, w.offset, w.size, w.name);
    }
    s += '\n';
  }
  return s;
}

namespace {

bool ParseU64(std::string_view s, uint64_t* v) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

std::vector<std::string_view> SplitSpaces(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

bool ParseLabel(const std::vector<uint8_t>& d, int64_t* label) {
  size_t b = 0, e = d.size();
  while (b < e && std::isspace(d[b])) ++b;
  while (e > b && std::isspace(d[e - 1])) --e;
  if (b == e || e - b > 19) return false;
  const char* p = reinterpret_cast<const char*>(d.data());
  auto r = std::from_chars(p + b, p + e, *label);
  return r.ec == std::errc() && r.ptr == p + e;
}

}  // namespace

Status ParseWdsIndex(const std::string& text, const std::string& shard, uint64_t file_size,
                     WdsShardIndex* out) {
  *out = WdsShardIndex();
  out->path = shard;
  std::string_view t(text);
  size_t nl = t.find('\n');
  if (nl == std::string_view::npos) return Corrupt("index of {}: no header line", shard);
  auto head = SplitSpaces(t.substr(0, nl));
  uint64_t n = 0;
  if (head.size() != 2 || head[0] != "v1.2" || !ParseU64(head[1], &n))
    return Corrupt("index of {}: expected 'v1.2 <samples>' as the first line", shard);
  size_t pos = nl + 1;
  uint64_t last_end = 0;
  std::string key, ext;
  while (pos < t.size()) {
    size_t e = t.find('\n', pos);
    if (e == std::string_view::npos) e = t.size();
    auto tok = SplitSpaces(t.substr(pos, e - pos));
    size_t line_no = out->keys.size() + 2;
    pos = e + 1;
    if (tok.empty()) continue;
    if (tok.size() % 4 != 0)
      return Corrupt("index of {}: line {}: expected 'ext offset size name' groups", shard,
                     line_no);
    bool started = false;
    for (size_t k = 0; k < tok.size(); k += 4) {
      WdsComponent c;
      c.name = std::string(tok[k + 3]);
      if (!ParseU64(tok[k + 1], &c.offset) || !ParseU64(tok[k + 2], &c.size))
        return Corrupt("index of {}: line {}: bad offset or size", shard, line_no);
      if (c.offset % kTarBlock != 0 || c.offset < last_end || c.offset < kTarBlock ||
          c.size > file_size || c.offset > file_size - c.size)
        return Corrupt("index of {}: line {}: range {}+{} does not fit the {}-byte shard",
                       shard, line_no, c.offset, c.size, file_size);
      last_end = c.offset + c.size;
      if (IsWdsMetaName(c.name) || !SplitWdsName(c.name, &key, &ext)) continue;
      if (ext != [&] {
            std::string e2(tok[k]);
            for (char& ch : e2) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
            return e2;
          }())
        return Corrupt("index of {}: line {}: ext '{}' does not match member '{}'", shard,
                       line_no, tok[k], c.name);
      if (!started) {
        if (!out->keys.empty() && out->keys.back() == key)
          return Corrupt("index of {}: line {}: key '{}' repeats the previous sample", shard,
                         line_no, key);
        out->keys.push_back(key);
        out->first.push_back(static_cast<uint32_t>(out->comps.size()));
        started = true;
      } else if (key != out->keys.back()) {
        return Corrupt("index of {}: line {}: members of different keys in one sample", shard,
                       line_no);
      }
      for (size_t q = out->first.back(); q < out->comps.size(); ++q)
        if (out->comps[q].ext == ext)
          return Corrupt("index of {}: line {}: duplicate field '{}'", shard, line_no, ext);
      c.ext = ext;
      out->comps.push_back(std::move(c));
    }
  }
  if (out->keys.size() != n)
    return Corrupt("index of {}: header says {} samples, found {}", shard, n, out->keys.size());
  return Status::OK();
}

std::string WdsIndexPath(const std::string& shard) {
  std::string base = BaseName(shard);
  size_t dot = base.find('.', 1);
  std::string stem = dot == std::string::npos ? base : base.substr(0, dot);
  if (shard.find('/') == std::string::npos) return stem + ".idx";
  return JoinPath(DirName(shard), stem + ".idx");
}

namespace {

// Indexes one shard: index file when present and consistent, else a header scan.
struct ShardResult {
  WdsShardIndex idx;
  Status error;  // damage (kept samples are in idx)
  std::string note;
  bool gzip = false;
};

// After damage, keep only samples known to be complete: the last one survives when the
// damaged member is known to start a different key; a damaged header hides the next key,
// so the last sample might be missing a field and is dropped.
void DropIncompleteLastSample(const TarScan& scan, WdsShardIndex* idx) {
  std::string dkey, dext;
  bool keep_last = !scan.damaged_name.empty() && SplitWdsName(scan.damaged_name, &dkey, &dext) &&
                   !idx->keys.empty() && dkey != idx->keys.back();
  if (!keep_last && !idx->keys.empty()) {
    idx->comps.resize(idx->first.back());
    idx->first.pop_back();
    idx->keys.pop_back();
  }
}

// Why a shard whose first block is not a tar header is not read: what the file is.
Status NotATar(const RandomAccessFile& file, const Status& scan_error) {
  uint8_t h[kTarBlock];
  auto got = file.ReadAt(0, sizeof h, h);
  if (got.ok() && *got == sizeof h && std::memcmp(h + 257, "ustar", 5) == 0)
    return scan_error;  // a tar whose first header is damaged
  return Corrupt("{}: not a tar archive or a gzip-compressed tar: it is {} (webdataset shards "
                 "are .tar, .tar.gz or .tgz)",
                 file.path(), DescribeFile(file));
}

// An index's first and last entries against the tar headers before them (two small reads).
Status EndsMatchHeaders(const RandomAccessFile& file, const WdsShardIndex& idx,
                        const std::string& ipath) {
  if (idx.comps.empty()) return Status::OK();
  for (const WdsComponent* c : {&idx.comps.front(), &idx.comps.back()}) {
    auto sz = ReadTarHeaderSize(file, c->offset - kTarBlock);
    if (!sz.ok() || *sz != c->size)
      return Corrupt("{}: index entry for '{}' does not match the tar header at offset {}",
                     ipath, c->name, c->offset - kTarBlock);
  }
  return Status::OK();
}

ShardResult IndexShard(Env* env, const SiblingFiles& siblings, const std::string& path,
                       bool use_index) {
  ShardResult r;
  r.idx.path = path;
  auto h = IndexingHandle::Open(env, path);
  if (!h.ok()) {
    r.error = h.status();
    return r;
  }
  const RandomAccessFile& file = h->probe();
  if (file.size() == 0) {
    r.error = Corrupt("{}: not a tar archive: it is an empty file", path);
    return r;
  }
  if (IsGzipFile(file)) {
    // Streamed once through zlib to list the members (never written out); reads then go
    // through a per-shard stream (WdsDataset::ReadStreamed). Index files are not used:
    // their offsets cannot be reached without decompressing up to them.
    r.gzip = true;
    GzipStreamFile stream(h->ForScan());
    TarScan scan = ScanTar(stream);
    Status g = GroupWdsMembers(path, scan.members, &r.idx);
    if (!g.ok()) {
      r.error = g;
      return r;
    }
    if (!scan.error.ok()) {
      r.error = scan.error.code() == StatusCode::kCorrupt
                    ? scan.error.WithContext("gzip-compressed shard")
                    : scan.error;
      DropIncompleteLastSample(scan, &r.idx);
    }
    r.note = fmt::format(
        "{}: gzip-compressed, read sequentially (no random access: a read behind the stream "
        "restarts it; plain .tar shards keep random access)",
        path);
    return r;
  }
  if (use_index) {
    std::string ipath = WdsIndexPath(path);
    bool found = siblings.Exists(ipath);
    if (!found && siblings.Exists(path + ".idx")) {
      ipath = path + ".idx";
      found = true;
    }
    if (found) {
      std::vector<uint8_t> bytes;
      Status st = env->ReadFile(ipath, &bytes);
      WdsShardIndex idx;
      if (st.ok())
        st = ParseWdsIndex(std::string(bytes.begin(), bytes.end()), path, file.size(), &idx);
      if (st.ok()) st = EndsMatchHeaders(file, idx, ipath);
      if (st.ok()) {
        r.idx = std::move(idx);
        return r;
      }
      r.note = fmt::format("ignored index {} ({}); scanned the shard instead", ipath,
                           st.message());
    }
  }
  // An object shard with no index beside it: the index an earlier scan on this machine
  // left in the local index cache (keyed by URL, size and ETag), else a scan (kept there).
  const std::string cached =
      use_index ? IndexCacheEntry(path, file.size(), file.version(), "wds") : std::string();
  if (!cached.empty()) {
    std::string text;
    WdsShardIndex idx;
    if (ReadIndexCache(cached, &text) && ParseWdsIndex(text, path, file.size(), &idx).ok() &&
        EndsMatchHeaders(file, idx, cached).ok()) {
      r.idx = std::move(idx);
      return r;
    }
  }
  TarScan scan = ScanTar(*h->ForScan());
  Status g = GroupWdsMembers(path, scan.members, &r.idx);
  if (!g.ok()) {
    r.error = g;
    return r;
  }
  if (scan.error.ok() && !cached.empty()) WriteIndexCache(cached, FormatWdsIndex(r.idx));
  if (!scan.error.ok() && scan.error_offset == 0 && scan.members.empty() &&
      scan.error.code() == StatusCode::kCorrupt) {
    r.error = NotATar(file, scan.error);
    return r;
  }
  if (!scan.error.ok()) {
    r.error = scan.error;
    DropIncompleteLastSample(scan, &r.idx);
  }
  return r;
}

}  // namespace

Result<std::unique_ptr<WdsDataset>> WdsDataset::Open(const std::string& spec,
                                                     const DatasetOptions& opts_in,
                                                     const WdsOptions& wopts) {
  Env* env = opts_in.env ? opts_in.env : Env::Default();
  STOKER_ASSIGN_OR_RETURN(auto paths, ResolveShardList(env, spec, {"tar", "tar.gz", "tgz"}));
  std::unique_ptr<WdsDataset> ds(new WdsDataset(env, wopts));
  const SiblingFiles siblings =
      wopts.use_index_files ? SiblingFiles(env, paths) : SiblingFiles(env, {});
  std::vector<ShardResult> results = IndexShards<ShardResult>(
      paths, "wds-index",
      [&](const std::string& p) { return IndexShard(env, siblings, p, wopts.use_index_files); });
  for (size_t i = 0; i < results.size(); ++i) {
    ShardResult& r = results[i];
    if (!r.note.empty()) ds->notes_.push_back(r.note);
    if (!r.error.ok()) {
      if (!opts_in.skip_bad_shards) return r.error;
      ds->errors_.push_back(fmt::format("{} (kept {} complete samples)", r.error.message(),
                                        r.idx.samples()));
    }
    ShardInfo info{paths[i], ds->total_, ds->total_ + r.idx.samples()};
    ds->total_ = info.end;
    ds->shards_.push_back(info);
    ds->streams_.push_back(r.gzip ? std::make_unique<StreamCursor>() : nullptr);
    ds->index_.push_back(std::move(r.idx));
  }
  return ds;
}

void WdsDataset::Locate(uint64_t index, uint32_t* shard, uint32_t* local) const {
  auto it = std::upper_bound(shards_.begin(), shards_.end(), index,
                             [](uint64_t i, const ShardInfo& s) { return i < s.end; });
  *shard = static_cast<uint32_t>(it - shards_.begin());
  *local = static_cast<uint32_t>(index - it->begin);
}

Status WdsDataset::Read(uint64_t index, Sample* out) const {
  out->Clear();
  if (index >= total_) return InvalidArgument("sample index {} out of range ({})", index, total_);
  uint32_t s, i;
  Locate(index, &s, &i);
  const WdsShardIndex& idx = index_[s];
  out->key = idx.keys[i];
  size_t end = i + 1 < idx.samples() ? idx.first[i + 1] : idx.comps.size();
  out->location.clear();  // reuses the recycled sample's capacity
  fmt::format_to(std::back_inserter(out->location), "{}:member '{}'", idx.path,
                 idx.comps[idx.first[i]].name);
  if (streams_[s]) {
    STOKER_RETURN_IF_ERROR(ReadStreamed(s, i, out));
    return FinishSample(idx, i, out);
  }
  STOKER_ASSIGN_OR_RETURN(auto file, files_.Get(s, idx.path));
  // One pread for the whole sample when the members after the first are small and close
  // (e.g. x.jpg then x.cls): the first member's buffer takes the span and the others are
  // copied out of its tail. Saves a system call per extra member.
  size_t first = idx.first[i];
  if (end - first >= 2) {
    const WdsComponent& a = idx.comps[first];
    const WdsComponent& z = idx.comps[end - 1];
    bool ordered = true;
    for (size_t c = first + 1; c < end && ordered; ++c)
      ordered = idx.comps[c].offset >= idx.comps[c - 1].offset + idx.comps[c - 1].size;
    uint64_t span = ordered ? z.offset + z.size - a.offset : 0;
    if (ordered && span - a.size <= 8192) {
      const size_t base = out->num_fields;
      for (size_t c = first; c < end; ++c) {
        if (out->num_fields == out->fields.size()) out->fields.emplace_back();
        out->fields[out->num_fields++].name = idx.comps[c].ext;
      }
      std::vector<uint8_t>& head = out->fields[base].data;
      head.resize(span);
      Status st = file->ReadExact(a.offset, span, head.data());
      if (!st.ok()) return st.WithContext(fmt::format("{}:member '{}'", idx.path, a.name));
      for (size_t c = first + 1; c < end; ++c) {
        const WdsComponent& w = idx.comps[c];
        const uint8_t* src = head.data() + (w.offset - a.offset);
        out->fields[base + (c - first)].data.assign(src, src + w.size);
      }
      head.resize(a.size);
      return FinishSample(idx, i, out);
    }
  }
  for (size_t c = idx.first[i]; c < end; ++c) {
    const WdsComponent& w = idx.comps[c];
    // Like AddField, but keeps the spare buffer's old bytes: resize then only initializes
    // the growth, and pread overwrites everything.
    if (out->num_fields == out->fields.size()) out->fields.emplace_back();
    Field* f = &out->fields[out->num_fields++];
    f->name = w.ext;
    f->data.resize(w.size);
    Status st = file->ReadExact(w.offset, w.size, f->data.data());
    if (!st.ok()) return st.WithContext(fmt::format("{}:member '{}'", idx.path, w.name));
  }
  return FinishSample(idx, i, out);
}

Status WdsDataset::FinishSample(const WdsShardIndex& idx, uint32_t i, Sample* out) const {
  const size_t first = idx.first[i];
  for (size_t k = 0; k < out->num_fields; ++k) {
    Field& f = out->fields[k];
    // A member "x.jpg.gz" is the field "jpg", decompressed (webdataset's gzfilter).
    if (f.name.size() > 3 && f.name.compare(f.name.size() - 3, 3, ".gz") == 0) {
      const std::string& member = idx.comps[first + k].name;
      thread_local std::vector<uint8_t> plain;
      Status st = GunzipBuffer(f.data.data(), f.data.size(), &plain);
      if (!st.ok()) return st.WithContext(fmt::format("{}:member '{}'", idx.path, member));
      f.data.swap(plain);
      f.name.resize(f.name.size() - 3);
      for (size_t j = 0; j < out->num_fields; ++j)
        if (j != k && out->fields[j].name == f.name)
          return Corrupt("{}:member '{}': decompresses to field '{}', which sample '{}' already "
                         "has",
                         idx.path, member, f.name, idx.keys[i]);
    }
    int64_t label;
    if (f.name == "cls" && ParseLabel(f.data, &label)) out->label = label;
  }
  return Status::OK();
}

Status WdsDataset::ReadMembers(GzipReader* rd, const WdsShardIndex& idx, uint32_t i,
                               std::vector<Field>* fields, size_t* n) const {
  size_t end = i + 1 < idx.samples() ? idx.first[i + 1] : idx.comps.size();
  for (size_t c = idx.first[i]; c < end; ++c) {
    const WdsComponent& w = idx.comps[c];
    if (w.offset < rd->position())
      return Corrupt("{}:member '{}': members out of order in a compressed shard", idx.path,
                     w.name);
    uint64_t gap = w.offset - rd->position();
    Result<size_t> got = rd->Read(nullptr, gap);
    if (got.ok() && *got == gap) {
      if (*n == fields->size()) fields->emplace_back();
      Field* f = &(*fields)[(*n)++];
      f->name = w.ext;
      f->data.resize(w.size);
      got = rd->Read(f->data.data(), w.size);
      if (got.ok() && *got == w.size) continue;
    }
    Status st = got.ok() ? Corrupt("{}: stream ends inside member '{}' (offset {})", idx.path,
                                   w.name, w.offset)
                         : got.status().WithContext(fmt::format("{}:member '{}'", idx.path,
                                                                w.name));
    return st;
  }
  return Status::OK();
}

Status WdsDataset::ReadStreamed(uint32_t s, uint32_t i, Sample* out) const {
  const WdsShardIndex& idx = index_[s];
  StreamCursor& c = *streams_[s];
  std::lock_guard<std::mutex> lk(c.mu);
  auto it = c.ahead.find(i);
  if (it != c.ahead.end()) {
    for (Field& f : it->second) {
      if (out->num_fields == out->fields.size()) out->fields.emplace_back();
      Field& dst = out->fields[out->num_fields++];
      dst.name = std::move(f.name);
      dst.data.swap(f.data);
      cache_bytes_ -= dst.data.size();
    }
    c.ahead.erase(it);
    return Status::OK();
  }
  if (c.delivered.size() != idx.samples()) c.delivered.assign(idx.samples(), false);
  // A sample asked for twice: a new pass over the data (the next epoch).
  if (c.delivered[i]) c.delivered.assign(idx.samples(), false);
  const uint64_t start = idx.comps[idx.first[i]].offset;
  if (!c.rd || start < c.rd->position() || i < c.next) {
    if (c.rd) stream_restarts_.fetch_add(1, std::memory_order_relaxed);
    STOKER_ASSIGN_OR_RETURN(auto file, files_.Get(s, idx.path));
    c.rd = std::make_unique<GzipReader>(file);
    c.next = 0;
  }
  // Samples between the stream position and `i` are decompressed anyway: keep the ones not
  // yet delivered (a shuffle buffer asks for them soon) while the budget allows.
  for (; c.next < i; ++c.next) {
    uint32_t j = c.next;
    if (c.delivered[j] || c.ahead.count(j)) continue;
    size_t end = j + 1 < idx.samples() ? idx.first[j + 1] : idx.comps.size();
    uint64_t bytes = 0;
    for (size_t k = idx.first[j]; k < end; ++k) bytes += idx.comps[k].size;
    if (cache_bytes_.load() + bytes > opts_.stream_cache_bytes) continue;
    std::vector<Field> fields;
    size_t n = 0;
    Status st = ReadMembers(c.rd.get(), idx, j, &fields, &n);
    if (!st.ok()) {
      c.rd.reset();
      return st;
    }
    cache_bytes_ += bytes;
    c.ahead.emplace(j, std::move(fields));
  }
  Status st = ReadMembers(c.rd.get(), idx, i, &out->fields, &out->num_fields);
  if (!st.ok()) {
    c.rd.reset();
    return st;
  }
  c.next = i + 1;
  c.delivered[i] = true;
  return Status::OK();
}

Status WdsDataset::CheckRandomAccess() const {
  for (size_t s = 0; s < streams_.size(); ++s)
    if (streams_[s])
      return InvalidArgument(
          "{} is gzip-compressed and read sequentially: it has no random access (decompress "
          "it to a plain .tar, e.g. with gunzip, for random access through the index)",
          index_[s].path);
  return Status::OK();
}

size_t WdsDataset::compressed_shards() const {
  size_t n = 0;
  for (const auto& c : streams_) n += c != nullptr;
  return n;
}

std::string WdsDataset::Key(uint64_t index) const {
  uint32_t s, i;
  Locate(index, &s, &i);
  return index_[s].keys[i];
}

std::string WdsDataset::Location(uint64_t index) const {
  uint32_t s, i;
  Locate(index, &s, &i);
  return fmt::format("{}:member '{}'", index_[s].path, index_[s].comps[index_[s].first[i]].name);
}

void WdsDataset::ByteRange(uint64_t index, uint32_t* shard, uint64_t* begin,
                           uint64_t* end) const {
  uint32_t s, i;
  Locate(index, &s, &i);
  const WdsShardIndex& idx = index_[s];
  size_t last = (i + 1 < idx.samples() ? idx.first[i + 1] : idx.comps.size()) - 1;
  *shard = s;
  *begin = idx.comps[idx.first[i]].offset - kTarBlock;
  uint64_t e = idx.comps[last].offset + idx.comps[last].size;
  *end = (e + kTarBlock - 1) / kTarBlock * kTarBlock;
}

// ---------------------------------------------------------------------------------------

Result<std::unique_ptr<WdsWriter>> WdsWriter::Open(const std::string& pattern,
                                                   const WriterOptions& opts_in) {
  WriterOptions opts = opts_in;
  STOKER_RETURN_IF_ERROR(Prepare(pattern, &opts));
  return std::unique_ptr<WdsWriter>(new WdsWriter(pattern, opts));
}

Status WdsWriter::BeginShard(WritableFile* file) {
  tar_ = std::make_unique<TarWriter>(file);
  cur_ = WdsShardIndex();
  cur_.path = shard_path();
  return Status::OK();
}

Status WdsWriter::EndShard() { return tar_->Finish(); }

Status WdsWriter::WriteIndex(const std::string& path) {
  std::string text = FormatWdsIndex(cur_);
  return opts().env->WriteFileAtomic(WdsIndexPath(path), text.data(), text.size());
}

Status WdsWriter::CheckSample(const Sample& s) {
  const std::string& key = s.key;
  size_t slash = key.rfind('/');
  if (key.empty() || key.back() == '/' ||
      key.find('.', slash == std::string::npos ? 0 : slash + 1) != std::string::npos)
    return InvalidArgument(
        "sample '{}': a WebDataset key must be non-empty with no '.' in its base name", key);
  if (IsWdsMetaName(key + ".x"))
    return InvalidArgument("sample '{}': keys of the form __name__ are reserved", key);
  if (key == last_key_)
    return InvalidArgument("sample '{}': same key as the previous sample", key);
  for (size_t i = 0; i < s.num_fields; ++i) {
    const std::string& n = s.fields[i].name;
    if (n.empty() || n.find('/') != std::string::npos ||
        std::any_of(n.begin(), n.end(), [](char c) { return std::isupper(static_cast<unsigned char>(c)); }))
      return InvalidArgument(
          "sample '{}': field '{}' cannot be a tar member extension (needs lower case, no '/')",
          key, n);
    for (size_t j = 0; j < i; ++j)
      if (s.fields[j].name == n)
        return InvalidArgument("sample '{}': duplicate field '{}'", key, n);
  }
  return Status::OK();
}

Status WdsWriter::AppendSample(const Sample& s) {
  const std::string& key = s.key;
  bool has_cls = false;
  for (size_t i = 0; i < s.num_fields; ++i) has_cls |= s.fields[i].name == "cls";
  cur_.keys.push_back(key);
  cur_.first.push_back(static_cast<uint32_t>(cur_.comps.size()));
  auto add = [&](const std::string& ext, const void* p, size_t n) -> Status {
    std::string name = key + "." + ext;
    STOKER_ASSIGN_OR_RETURN(uint64_t off, tar_->Add(name, p, n));
    cur_.comps.push_back({ext, name, off, n});
    return Status::OK();
  };
  for (size_t i = 0; i < s.num_fields; ++i)
    STOKER_RETURN_IF_ERROR(add(s.fields[i].name, s.fields[i].data.data(), s.fields[i].data.size()));
  if (!has_cls && s.label >= 0) {
    std::string cls = std::to_string(s.label);
    STOKER_RETURN_IF_ERROR(add("cls", cls.data(), cls.size()));
  }
  last_key_ = key;
  return Status::OK();
}

void RegisterWdsFormat() {
  RegisterDatasetFormat({"wds",
                         {"tar", "tgz"},
                         [](const std::string& path, const DatasetOptions& opts)
                             -> Result<std::unique_ptr<Dataset>> {
                           auto r = WdsDataset::Open(path, opts);
                           if (!r.ok()) return r.status();
                           return std::unique_ptr<Dataset>(std::move(r).value());
                         },
                         "WebDataset tar shards (.tar, .tar.gz or .tgz: a file, a brace "
                         "pattern or a directory)"});
  RegisterDatasetWriter("wds", [](const std::string& path, const WriterOptions& opts)
                                   -> Result<std::unique_ptr<DatasetWriter>> {
    auto r = WdsWriter::Open(path, opts);
    if (!r.ok()) return r.status();
    return std::unique_ptr<DatasetWriter>(std::move(r).value());
  });
}

}  // namespace stoker
