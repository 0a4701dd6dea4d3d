#include "formats/wds.h"

#include <iterator>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>

#include "core/thread_pool.h"
#include "formats/builtin.h"

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

namespace {

// Indexes one shard: index file when present and consistent, else a header scan.
struct ShardResult {
  WdsShardIndex idx;
  Status error;  // damage (kept samples are in idx)
  std::string note;
};

ShardResult IndexShard(Env* env, const std::string& path, bool use_index) {
  ShardResult r;
  r.idx.path = path;
  auto f = env->NewRandomAccessFile(path);
  if (!f.ok()) {
    r.error = f.status();
    return r;
  }
  const RandomAccessFile& file = **f;
  if (use_index) {
    std::string ipath = WdsIndexPath(path);
    if (!env->FileExists(ipath) && env->FileExists(path + ".idx")) ipath = path + ".idx";
    if (env->FileExists(ipath)) {
      std::vector<uint8_t> bytes;
      Status st = env->ReadFile(ipath, &bytes);
      WdsShardIndex idx;
      if (st.ok())
        st = ParseWdsIndex(std::string(bytes.begin(), bytes.end()), path, file.size(), &idx);
      if (st.ok() && !idx.comps.empty()) {
        for (const WdsComponent* c : {&idx.comps.front(), &idx.comps.back()}) {
          auto sz = ReadTarHeaderSize(file, c->offset - kTarBlock);
          if (!sz.ok() || *sz != c->size) {
            st = Corrupt("{}: index entry for '{}' does not match the tar header at offset {}",
                         ipath, c->name, c->offset - kTarBlock);
            break;
          }
        }
      }
      if (st.ok()) {
        r.idx = std::move(idx);
        return r;
      }
      r.note = fmt::format("ignored index {} ({}); scanned the shard instead", ipath,
                           st.message());
    }
  }
  TarScan scan = ScanTar(file);
  Status g = GroupWdsMembers(path, scan.members, &r.idx);
  if (!g.ok()) {
    r.error = g;
    return r;
  }
  if (!scan.error.ok()) {
    r.error = scan.error;
    // Keep only samples known to be complete: the last one survives when the damaged
    // member is known to start a different key; a damaged header hides the next key, so
    // the last sample might be missing a field and is dropped.
    std::string dkey, dext;
    bool keep_last = !scan.damaged_name.empty() &&
                     SplitWdsName(scan.damaged_name, &dkey, &dext) && !r.idx.keys.empty() &&
                     dkey != r.idx.keys.back();
    if (!keep_last && !r.idx.keys.empty()) {
      r.idx.comps.resize(r.idx.first.back());
      r.idx.first.pop_back();
      r.idx.keys.pop_back();
    }
  }
  return r;
}

}  // namespace

Result<std::unique_ptr<WdsDataset>> WdsDataset::Open(const std::string& spec,
                                                     const DatasetOptions& opts_in,
                                                     const WdsOptions& wopts) {
  Env* env = opts_in.env ? opts_in.env : Env::Default();
  STOKER_ASSIGN_OR_RETURN(auto paths, ResolveShardList(env, spec, {"tar"}));
  std::unique_ptr<WdsDataset> ds(new WdsDataset(env, wopts.max_open_files));
  std::vector<ShardResult> results(paths.size());
  {
    int threads = std::min<int>(static_cast<int>(paths.size()), std::min(8, AvailableCpus()));
    if (threads <= 1) {
      for (size_t i = 0; i < paths.size(); ++i)
        results[i] = IndexShard(env, paths[i], wopts.use_index_files);
    } else {
      ThreadPool pool(threads, "wds-index");
      for (size_t i = 0; i < paths.size(); ++i)
        pool.Schedule([&, i] { results[i] = IndexShard(env, paths[i], wopts.use_index_files); });
      pool.Wait();
    }
  }
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
  STOKER_ASSIGN_OR_RETURN(auto file, files_.Get(s, idx.path));
  out->key = idx.keys[i];
  size_t end = i + 1 < idx.samples() ? idx.first[i + 1] : idx.comps.size();
  out->location.clear();  // reuses the recycled sample's capacity
  fmt::format_to(std::back_inserter(out->location), "{}:member '{}'", idx.path,
                 idx.comps[idx.first[i]].name);
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
      for (size_t k = base; k < out->num_fields; ++k) {
        int64_t label;
        if (out->fields[k].name == "cls" && ParseLabel(out->fields[k].data, &label))
          out->label = label;
      }
      return Status::OK();
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
    if (w.ext == "cls") {
      int64_t label;
      if (ParseLabel(f->data, &label)) out->label = label;
    }
  }
  return Status::OK();
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

Result<std::unique_ptr<WdsWriter>> WdsWriter::Open(const std::string& pattern,
                                                   const WriterOptions& opts_in) {
  WriterOptions opts = opts_in;
  if (!opts.env) opts.env = Env::Default();
  STOKER_ASSIGN_OR_RETURN(std::string first, FormatShardPattern(pattern, 0));
  std::string dir = DirName(first);
  if (!dir.empty() && dir != ".") STOKER_RETURN_IF_ERROR(opts.env->CreateDirs(dir));
  std::unique_ptr<WdsWriter> w(new WdsWriter(pattern, opts));
  w->next_shard_ = static_cast<int>(opts.first_shard);
  return w;
}

WdsWriter::~WdsWriter() {
  // Not closed: the open shard stays "<name>.partial" (it never verifies).
  if (file_) file_->Close().IgnoreError();
}

Status WdsWriter::StartShard() {
  STOKER_ASSIGN_OR_RETURN(shard_path_, FormatShardPattern(pattern_, next_shard_));
  ++next_shard_;
  STOKER_ASSIGN_OR_RETURN(file_, opts_.env->NewWritableFile(shard_path_ + ".partial"));
  tar_ = std::make_unique<TarWriter>(file_.get());
  cur_ = WdsShardIndex();
  cur_.path = shard_path_;
  return Status::OK();
}

Status WdsWriter::FinishShard() {
  STOKER_RETURN_IF_ERROR(tar_->Finish());
  STOKER_RETURN_IF_ERROR(file_->Sync());
  STOKER_RETURN_IF_ERROR(file_->Close());
  uint64_t bytes = tar_->offset();
  file_.reset();
  tar_.reset();
  if (opts_.write_index) {
    std::string text = FormatWdsIndex(cur_);
    STOKER_RETURN_IF_ERROR(
        opts_.env->WriteFileAtomic(WdsIndexPath(shard_path_), text.data(), text.size()));
  }
  STOKER_RETURN_IF_ERROR(opts_.env->RenameFile(shard_path_ + ".partial", shard_path_));
  done_.push_back({shard_path_, cur_.samples(), bytes});
  return Status::OK();
}

Status WdsWriter::Write(const Sample& s) {
  if (closed_) return InvalidArgument("write after Close");
  std::string key = s.key;
  size_t slash = key.rfind('/');
  if (key.empty() || key.back() == '/' ||
      key.find('.', slash == std::string::npos ? 0 : slash + 1) != std::string::npos)
    return InvalidArgument(
        "sample '{}': a WebDataset key must be non-empty with no '.' in its base name", key);
  if (IsWdsMetaName(key + ".x"))
    return InvalidArgument("sample '{}': keys of the form __name__ are reserved", key);
  if (key == last_key_)
    return InvalidArgument("sample '{}': same key as the previous sample", key);
  bool has_cls = false;
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
    if (n == "cls") has_cls = true;
  }
  if (!file_) STOKER_RETURN_IF_ERROR(StartShard());
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
  bool full = tar_->offset() >= opts_.shard_bytes ||
              (opts_.samples_per_shard > 0 && cur_.samples() >= opts_.samples_per_shard);
  if (full) STOKER_RETURN_IF_ERROR(FinishShard());
  return Status::OK();
}

Status WdsWriter::Close() {
  if (closed_) return Status::OK();
  // An empty dataset still gets one (empty) shard, unless this run resumes after others.
  if (!file_ && done_.empty() && opts_.first_shard == 0) STOKER_RETURN_IF_ERROR(StartShard());
  if (file_) STOKER_RETURN_IF_ERROR(FinishShard());
  closed_ = true;
  return Status::OK();
}

void RegisterWdsFormat() {
  RegisterDatasetFormat({"wds",
                         {"tar"},
                         [](const std::string& path, const DatasetOptions& opts)
                             -> Result<std::unique_ptr<Dataset>> {
                           auto r = WdsDataset::Open(path, opts);
                           if (!r.ok()) return r.status();
                           return std::unique_ptr<Dataset>(std::move(r).value());
                         },
                         "WebDataset tar shards (a .tar, a brace pattern or a directory)"});
  RegisterDatasetWriter("wds", [](const std::string& path, const WriterOptions& opts)
                                   -> Result<std::unique_ptr<DatasetWriter>> {
    auto r = WdsWriter::Open(path, opts);
    if (!r.ok()) return r.status();
    return std::unique_ptr<DatasetWriter>(std::move(r).value());
  });
}

}  // namespace stoker
