#include "formats/delta_dataset.h"

#include <cstdint>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include "formats/builtin.h"
#include "formats/parquet_dataset.h"
#include "formats/sharded.h"
#include "formats/unavailable.h"

namespace stoker {

bool DeltaAvailable() {
#if STOKER_HAVE_SIMDJSON
  return ParquetAvailable();
#else
  return false;
#endif
}

namespace {

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

Result<int64_t> ParseInt(const std::string& what, const std::string& s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size())
    return InvalidArgument("{}: '{}' is not an integer", what, s);
  return v;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

bool IsIntegerType(const std::string& t) {
  return t == "byte" || t == "short" || t == "integer" || t == "long";
}

const DeltaField* FindField(const DeltaMetadata& m, const std::string& name) {
  for (const auto& f : m.schema)
    if (f.name == name) return &f;
  return nullptr;
}

bool Matches(const DeltaPartitionFilter& f, const std::optional<std::string>& value,
             bool integer) {
  if (!value) return f.op == "!=";
  auto cmp = [&](const std::string& want) -> int {
    if (integer) {
      int64_t a = 0, b = 0;
      auto ra = std::from_chars(value->data(), value->data() + value->size(), a);
      auto rb = std::from_chars(want.data(), want.data() + want.size(), b);
      if (ra.ec == std::errc() && rb.ec == std::errc()) return a < b ? -1 : (a > b ? 1 : 0);
    }
    return value->compare(want) < 0 ? -1 : (value->compare(want) > 0 ? 1 : 0);
  };
  if (f.op == "in") {
    for (const auto& v : f.values)
      if (cmp(v) == 0) return true;
    return false;
  }
  int c = cmp(f.values[0]);
  if (f.op == "=") return c == 0;
  if (f.op == "!=") return c != 0;
  if (f.op == "<") return c < 0;
  if (f.op == "<=") return c <= 0;
  if (f.op == ">") return c > 0;
  return c >= 0;
}

}  // namespace

Result<int64_t> ParseDeltaTimestamp(const std::string& s_in) {
  std::string s = Trim(s_in);
  if (!s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return ParseInt("timestamp", s);
  // YYYY-MM-DD[(T| )HH:MM[:SS[.fff...]]][Z|+HH:MM|-HH:MM]
  auto bad = [&] {
    return InvalidArgument("timestamp '{}': expected ISO 8601 (2026-12-03T10:00:00Z) or epoch "
                           "milliseconds", s_in);
  };
  auto num = [&](size_t pos, size_t len, int64_t* out) {
    if (pos + len > s.size()) return false;
    int64_t v = 0;
    for (size_t i = pos; i < pos + len; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
  };
  int64_t y, mo, d, h = 0, mi = 0, sec = 0, ms = 0;
  if (!num(0, 4, &y) || s.size() < 10 || s[4] != '-' || !num(5, 2, &mo) || s[7] != '-' ||
      !num(8, 2, &d) || mo < 1 || mo > 12 || d < 1 || d > 31)
    return bad();
  size_t p = 10;
  if (p < s.size() && (s[p] == 'T' || s[p] == ' ')) {
    if (!num(p + 1, 2, &h) || p + 3 >= s.size() || s[p + 3] != ':' || !num(p + 4, 2, &mi))
      return bad();
    p += 6;
    if (p < s.size() && s[p] == ':') {
      if (!num(p + 1, 2, &sec)) return bad();
      p += 3;
      if (p < s.size() && s[p] == '.') {
        ++p;
        int digits = 0;
        while (p < s.size() && s[p] >= '0' && s[p] <= '9') {
          if (digits < 3) ms = ms * 10 + (s[p] - '0');
          ++digits;
          ++p;
        }
        if (digits == 0) return bad();
        for (int k = digits; k < 3; ++k) ms *= 10;
      }
    }
  }
  int64_t offset_min = 0;
  if (p < s.size()) {
    if (s[p] == 'Z' && p + 1 == s.size()) {
      ++p;
    } else if ((s[p] == '+' || s[p] == '-') && s.size() == p + 6 && s[p + 3] == ':') {
      int64_t oh, om;
      if (!num(p + 1, 2, &oh) || !num(p + 4, 2, &om)) return bad();
      offset_min = (s[p] == '-' ? -1 : 1) * (oh * 60 + om);
      p = s.size();
    } else {
      return bad();
    }
  }
  if (h > 23 || mi > 59 || sec > 60) return bad();
  int64_t days = DaysFromCivil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  return ((days * 24 + h) * 60 + mi - offset_min) * 60000 + sec * 1000 + ms;
}

Result<DeltaSpec> ParseDeltaSpec(const std::string& spec) {
  DeltaSpec out;
  size_t q = spec.find('?');
  out.table = spec.substr(0, q);
  while (out.table.size() > 1 && out.table.back() == '/') out.table.pop_back();
  if (out.table.empty()) return InvalidArgument("delta:{}: no table path", spec);
  if (q == std::string::npos) return out;
  for (const std::string& item : Split(spec.substr(q + 1), '&')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    std::string key = item.substr(0, eq);
    std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    std::string what = fmt::format("delta:{}: {}", out.table, key);
    if (key == "version") {
      STOKER_ASSIGN_OR_RETURN(int64_t v, ParseInt(what, value));
      out.snapshot.version = v;
    } else if (key == "timestamp") {
      auto t = ParseDeltaTimestamp(value);
      if (!t.ok()) return t.status().WithContext(what);
      out.snapshot.timestamp_ms = *t;
    } else if (key == "since") {
      STOKER_ASSIGN_OR_RETURN(int64_t v, ParseInt(what, value));
      out.snapshot.since = v;
    } else if (key == "columns") {
      std::vector<std::string> cols;
      for (auto& c : Split(value, ',')) {
        c = Trim(c);
        if (!c.empty()) cols.push_back(c);
      }
      if (cols.empty()) return InvalidArgument("{}: no column names", what);
      out.columns = cols;
    } else if (key == "where") {
      DeltaPartitionFilter f;
      size_t in = value.find(" in ");
      if (in != std::string::npos) {
        f.column = Trim(value.substr(0, in));
        f.op = "in";
        for (auto& v : Split(value.substr(in + 4), '|')) f.values.push_back(Trim(v));
      } else {
        size_t p = value.find_first_of("!<>=");
        if (p == std::string::npos || p == 0)
          return InvalidArgument("{}: '{}' is not COL OP VALUE (OP: = != < <= > >= in)", what,
                                 value);
        f.column = Trim(value.substr(0, p));
        size_t len = (p + 1 < value.size() && value[p + 1] == '=') ? 2 : 1;
        f.op = value.substr(p, len);
        if (f.op == "!" || f.op == "==") f.op = f.op == "==" ? "=" : "!";
        if (f.op == "!")
          return InvalidArgument("{}: '{}' is not COL OP VALUE (OP: = != < <= > >= in)", what,
                                 value);
        f.values.push_back(Trim(value.substr(p + len)));
      }
      if (f.column.empty()) return InvalidArgument("{}: '{}' names no column", what, value);
      out.where.push_back(std::move(f));
    } else if (key == "follow") {
      return InvalidArgument("delta:{}: follow= is an option of stoker.Pipeline (Python), which "
                             "re-opens the table between epochs; the engine reads one version",
                             out.table);
    } else {
      return InvalidArgument("delta:{}: unknown option '{}' (version, timestamp, since, columns, "
                             "where)", out.table, key);
    }
  }
  return out;
}

namespace {

class DeltaDataset final : public Dataset {
 public:
  static Result<std::unique_ptr<Dataset>> Open(const std::string& spec_str,
                                               const DatasetOptions& opts_in) {
    DatasetOptions opts = opts_in;
    if (!opts.env) opts.env = Env::Default();
    STOKER_ASSIGN_OR_RETURN(DeltaSpec spec, ParseDeltaSpec(spec_str));
    std::unique_ptr<DeltaDataset> ds(new DeltaDataset());
    STOKER_ASSIGN_OR_RETURN(ds->snap_, LoadDeltaSnapshot(opts.env, spec.table, spec.snapshot));
    const DeltaMetadata& md = ds->snap_.metadata;
    std::set<std::string> parts(md.partition_columns.begin(), md.partition_columns.end());
    auto schema_names = [&] {
      std::string s;
      for (const auto& f : md.schema) s += (s.empty() ? "" : ", ") + f.name;
      return s;
    };
    // Partition filters.
    std::vector<bool> integer;
    for (const auto& f : spec.where) {
      if (!parts.count(f.column)) {
        std::string pc;
        for (const auto& c : md.partition_columns) pc += (pc.empty() ? "" : ", ") + c;
        return InvalidArgument("delta:{}: where= filters partition columns ({}); '{}' is not one",
                               spec.table, pc.empty() ? "the table has none" : pc, f.column);
      }
      const DeltaField* fld = FindField(md, f.column);
      integer.push_back(fld && IsIntegerType(fld->type));
    }
    std::vector<DeltaFile> kept;
    for (auto& file : ds->snap_.files) {
      bool ok = true;
      for (size_t k = 0; k < spec.where.size() && ok; ++k) {
        auto it = file.partition.find(spec.where[k].column);
        std::optional<std::string> v = it == file.partition.end() ? std::nullopt : it->second;
        ok = Matches(spec.where[k], v, integer[k]);
      }
      if (ok) kept.push_back(std::move(file));
    }
    ds->snap_.files = std::move(kept);
    // Columns.
    std::vector<std::string> data_cols;
    if (spec.columns) {
      for (const auto& c : *spec.columns) {
        if (!FindField(md, c))
          return InvalidArgument("delta:{}: column '{}' is not in the table's schema ({})",
                                 spec.table, c, schema_names());
        if (parts.count(c)) ds->part_cols_.push_back(c);
        else data_cols.push_back(c);
      }
    } else {
      ds->part_cols_ = md.partition_columns;
    }
    bool has_key = FindField(md, "key") && !parts.count("key") &&
                   (!spec.columns || std::count(data_cols.begin(), data_cols.end(), "key"));
    ds->key_from_column_ = has_key;
    for (const auto& c : ds->part_cols_) {
      const DeltaField* fld = FindField(md, c);
      if (c == "label" && fld && IsIntegerType(fld->type)) ds->label_partition_ = c;
    }
    // Open the data files (footers) in parallel.
    std::vector<std::string> paths;
    for (const auto& f : ds->snap_.files) paths.push_back(DeltaDataPath(spec.table, f.path));
    using R = std::unique_ptr<Dataset>;
    struct Opened {
      Status status;
      R ds;
    };
    bool select = spec.columns.has_value();
    std::vector<Opened> opened = IndexShards<Opened>(paths, "delta-open", [&](const std::string& p) {
      Opened o;
      auto r = select ? OpenParquetDatasetColumns(p, opts, data_cols) : OpenParquetDataset(p, opts);
      if (r.ok()) o.ds = std::move(r).value();
      else o.status = r.status();
      return o;
    });
    uint64_t total = 0;
    for (size_t i = 0; i < opened.size(); ++i) {
      const DeltaFile& f = ds->snap_.files[i];
      if (!opened[i].status.ok()) {
        const Status& st = opened[i].status;
        bool missing = !opts.env->FileExists(paths[i]);
        std::string msg = missing
            ? fmt::format("Delta table {} (version {}): data file {} (added in version {}) is "
                          "missing: {}", spec.table, ds->snap_.version, paths[i], f.version,
                          st.message())
            : fmt::format("Delta table {} (version {}): data file {} (added in version {}): {}",
                          spec.table, ds->snap_.version, paths[i], f.version, st.message());
        if (opts.skip_bad_shards) {
          ds->skipped_.push_back(msg);
          continue;
        }
        return Status(missing ? StatusCode::kNotFound : st.code(), msg);
      }
      for (const auto& e : opened[i].ds->index_errors()) ds->skipped_.push_back(e);
      uint64_t n = opened[i].ds->size();
      if (n == 0) continue;
      ds->files_.push_back(std::move(opened[i].ds));
      ds->file_info_.push_back(&ds->snap_.files[i]);
      ds->shards_.push_back({paths[i], total, total + n});
      ds->start_.push_back(total);
      total += n;
    }
    ds->n_ = total;
    ds->start_.push_back(total);
    ds->notes_ = ds->snap_.notes;
    ds->notes_.push_back(fmt::format(
        "Delta table {} at version {}: {} data files{}, {} rows{}", spec.table, ds->snap_.version,
        ds->snap_.files.size(), spec.snapshot.since ? fmt::format(" added after version {}",
                                                                  *spec.snapshot.since)
                                                    : "",
        total, ds->snap_.checkpoint.empty() ? "" : ", log read from checkpoint " +
                                                       BaseName(ds->snap_.checkpoint)));
    return std::unique_ptr<Dataset>(std::move(ds));
  }

  uint64_t size() const override { return n_; }
  const std::vector<ShardInfo>& shards() const override { return shards_; }
  std::string format() const override { return "delta"; }
  std::vector<std::string> index_errors() const override { return skipped_; }
  std::vector<std::string> notes() const override { return notes_; }
  bool random_access_is_cheap() const override {
    return !files_.empty() && std::all_of(files_.begin(), files_.end(), [](const auto& f) {
      return f->random_access_is_cheap();
    });
  }
  Status CheckRandomAccess() const override {
    for (const auto& f : files_) STOKER_RETURN_IF_ERROR(f->CheckRandomAccess());
    return Status::OK();
  }

  Status Read(uint64_t index, Sample* out) const override {
    if (index >= n_) {
      out->Clear();
      return InvalidArgument("delta:{}: sample index {} out of range ({} rows)", snap_.table,
                             index, n_);
    }
    auto [k, local] = Locate(index);
    STOKER_RETURN_IF_ERROR(files_[k]->Read(local, out));
    const DeltaFile& f = *file_info_[k];
    for (const auto& c : part_cols_) {
      auto it = f.partition.find(c);
      if (it == f.partition.end() || !it->second) continue;
      if (c == label_partition_) {
        int64_t v = 0;
        auto r = std::from_chars(it->second->data(), it->second->data() + it->second->size(), v);
        if (r.ec == std::errc()) out->label = v;
        continue;
      }
      Field* fld = out->AddField(c);
      fld->data.assign(it->second->begin(), it->second->end());
    }
    if (!key_from_column_) {
      out->key.clear();
      fmt::format_to(std::back_inserter(out->key), "{}:{}", f.path, local);
    }
    return Status::OK();
  }
  std::string Key(uint64_t index) const override {
    if (index >= n_) return std::to_string(index);
    auto [k, local] = Locate(index);
    if (!key_from_column_) return fmt::format("{}:{}", file_info_[k]->path, local);
    return files_[k]->Key(local);
  }
  std::string Location(uint64_t index) const override {
    if (index >= n_) return fmt::format("delta:{}: row {}", snap_.table, index);
    auto [k, local] = Locate(index);
    return files_[k]->Location(local);
  }

  const DeltaSnapshot& snapshot() const { return snap_; }

 private:
  DeltaDataset() = default;
  std::pair<size_t, uint64_t> Locate(uint64_t i) const {
    auto it = std::upper_bound(start_.begin(), start_.end(), i);
    size_t k = static_cast<size_t>(it - start_.begin()) - 1;
    return {k, i - start_[k]};
  }

  DeltaSnapshot snap_;
  std::vector<std::unique_ptr<Dataset>> files_;
  std::vector<const DeltaFile*> file_info_;  // into snap_.files
  std::vector<uint64_t> start_;
  std::vector<ShardInfo> shards_;
  std::vector<std::string> part_cols_;
  std::string label_partition_;
  bool key_from_column_ = false;
  uint64_t n_ = 0;
  std::vector<std::string> skipped_, notes_;
};

}  // namespace

Result<std::unique_ptr<Dataset>> OpenDeltaDataset(const std::string& spec,
                                                  const DatasetOptions& opts) {
  if (!DeltaAvailable()) {
    static constexpr MissingLibrary kMissing = {
        "delta", "simdjson and Apache Parquet",
        "install libsimdjson-dev and pyarrow into the venv, then reconfigure; see docs/delta.md"};
    return FormatUnavailable(kMissing, spec);
  }
  return DeltaDataset::Open(spec, opts);
}

const DeltaSnapshot* DeltaSnapshotOf(const Dataset& ds) {
  const auto* d = dynamic_cast<const DeltaDataset*>(&ds);
  return d ? &d->snapshot() : nullptr;
}

void RegisterDeltaFormat() {
  RegisterDatasetFormat({"delta", {}, OpenDeltaDataset,
                         "Delta Lake table: delta:<table>[?version=N|timestamp=T][&since=M]"
                         "[&columns=a,b][&where=COL OP VALUE]; data files read as Parquet"});
}

}  // namespace stoker
