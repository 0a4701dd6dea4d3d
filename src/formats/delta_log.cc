#include "formats/delta_log.h"

#include <cstdint>
#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>

#if STOKER_HAVE_SIMDJSON
#include <simdjson.h>
#endif

#if STOKER_HAVE_PARQUET
#include <arrow/api.h>
#include <parquet/arrow/reader.h>
#include <parquet/file_reader.h>

#include "formats/arrow_io.h"
#endif

namespace stoker {

std::string DeltaPercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string DeltaDataPath(const std::string& table, const std::string& path) {
  if (path.rfind("file://", 0) == 0) return path.substr(7);
  if (path.find("://") != std::string::npos || (!path.empty() && path[0] == '/')) return path;
  return JoinPath(table, path);
}

namespace {

std::string VersionName(int64_t v) { return fmt::format("{:020d}", v); }

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

#if STOKER_HAVE_SIMDJSON

namespace {

namespace dom = simdjson::dom;

// "what" of a line for messages.
struct Where {
  const std::string& file;
  size_t line;
  std::string operator()(const char* what) const {
    return fmt::format("{}: line {}: {}", file, line, what);
  }
};

Status JsonError(const Where& w, const std::string& what, simdjson::error_code e) {
  return Corrupt("{}: line {}: {} ({})", w.file, w.line, what, simdjson::error_message(e));
}

Result<std::string> GetString(dom::object o, const char* key, const Where& w, bool required) {
  dom::element el;
  auto e = o.at_key(key).get(el);
  if (e == simdjson::NO_SUCH_FIELD || (!e && el.is_null())) {
    if (required) return Corrupt("{}: line {}: '{}' is missing", w.file, w.line, key);
    return std::string();
  }
  if (e) return JsonError(w, fmt::format("reading '{}'", key), e);
  std::string_view sv;
  if (el.get(sv)) return Corrupt("{}: line {}: '{}' is not a string", w.file, w.line, key);
  return std::string(sv);
}

Result<int64_t> GetInt(dom::object o, const char* key, const Where& w, int64_t dflt) {
  dom::element el;
  auto e = o.at_key(key).get(el);
  if (e == simdjson::NO_SUCH_FIELD || (!e && el.is_null())) return dflt;
  if (e) return JsonError(w, fmt::format("reading '{}'", key), e);
  int64_t v = 0;
  if (el.get(v)) return Corrupt("{}: line {}: '{}' is not an integer", w.file, w.line, key);
  return v;
}

Result<bool> GetBool(dom::object o, const char* key, const Where& w, bool dflt) {
  dom::element el;
  auto e = o.at_key(key).get(el);
  if (e == simdjson::NO_SUCH_FIELD || (!e && el.is_null())) return dflt;
  if (e) return JsonError(w, fmt::format("reading '{}'", key), e);
  bool v = false;
  if (el.get(v)) return Corrupt("{}: line {}: '{}' is not a boolean", w.file, w.line, key);
  return v;
}

Result<std::vector<std::string>> GetStringArray(dom::object o, const char* key, const Where& w) {
  std::vector<std::string> out;
  dom::element el;
  auto e = o.at_key(key).get(el);
  if (e == simdjson::NO_SUCH_FIELD || (!e && el.is_null())) return out;
  if (e) return JsonError(w, fmt::format("reading '{}'", key), e);
  dom::array arr;
  if (el.get(arr)) return Corrupt("{}: line {}: '{}' is not an array", w.file, w.line, key);
  for (dom::element x : arr) {
    std::string_view sv;
    if (x.get(sv))
      return Corrupt("{}: line {}: '{}' holds a value that is not a string", w.file, w.line, key);
    out.emplace_back(sv);
  }
  return out;
}

// partitionValues / configuration: an object of string (or null) values.
Status GetStringMap(dom::object o, const char* key, const Where& w,
                    std::map<std::string, std::optional<std::string>>* out) {
  dom::element el;
  auto e = o.at_key(key).get(el);
  if (e == simdjson::NO_SUCH_FIELD || (!e && el.is_null())) return Status::OK();
  if (e) return JsonError(w, fmt::format("reading '{}'", key), e);
  dom::object m;
  if (el.get(m)) return Corrupt("{}: line {}: '{}' is not an object", w.file, w.line, key);
  for (auto [k, v] : m) {
    if (v.is_null()) {
      (*out)[std::string(k)] = std::nullopt;
      continue;
    }
    std::string_view sv;
    if (v.get(sv))
      return Corrupt("{}: line {}: '{}.{}' is not a string", w.file, w.line, key, k);
    (*out)[std::string(k)] = std::string(sv);
  }
  return Status::OK();
}

Status ParseProtocol(dom::object o, const Where& w, DeltaProtocol* p) {
  STOKER_ASSIGN_OR_RETURN(int64_t r, GetInt(o, "minReaderVersion", w, -1));
  STOKER_ASSIGN_OR_RETURN(int64_t wr, GetInt(o, "minWriterVersion", w, -1));
  if (r < 0) return Corrupt("{}: line {}: protocol without minReaderVersion", w.file, w.line);
  p->min_reader = static_cast<int>(std::min<int64_t>(r, 1 << 20));
  p->min_writer = static_cast<int>(std::min<int64_t>(std::max<int64_t>(wr, 0), 1 << 20));
  STOKER_ASSIGN_OR_RETURN(p->reader_features, GetStringArray(o, "readerFeatures", w));
  STOKER_ASSIGN_OR_RETURN(p->writer_features, GetStringArray(o, "writerFeatures", w));
  return Status::OK();
}

Status ParseMetadata(dom::object o, const Where& w, DeltaMetadata* m) {
  STOKER_ASSIGN_OR_RETURN(m->id, GetString(o, "id", w, false));
  dom::object fmt_obj;
  if (!o.at_key("format").get(fmt_obj)) {
    STOKER_ASSIGN_OR_RETURN(std::string prov, GetString(fmt_obj, "provider", w, false));
    if (!prov.empty()) m->provider = prov;
  }
  STOKER_ASSIGN_OR_RETURN(std::string schema, GetString(o, "schemaString", w, true));
  auto fields = ParseDeltaSchema(schema);
  if (!fields.ok())
    return Corrupt("{}: line {}: schemaString: {}", w.file, w.line, fields.status().message());
  m->schema = std::move(fields).value();
  STOKER_ASSIGN_OR_RETURN(m->partition_columns, GetStringArray(o, "partitionColumns", w));
  std::map<std::string, std::optional<std::string>> conf;
  STOKER_RETURN_IF_ERROR(GetStringMap(o, "configuration", w, &conf));
  m->configuration.clear();
  for (auto& [k, v] : conf) m->configuration[k] = v.value_or("");
  return Status::OK();
}

Status ParseFileAction(dom::object o, const Where& w, bool is_add, DeltaFile* f) {
  STOKER_ASSIGN_OR_RETURN(std::string path, GetString(o, "path", w, true));
  if (path.empty()) return Corrupt("{}: line {}: empty file path", w.file, w.line);
  f->path = DeltaPercentDecode(path);
  STOKER_ASSIGN_OR_RETURN(f->data_change, GetBool(o, "dataChange", w, true));
  STOKER_ASSIGN_OR_RETURN(f->size, GetInt(o, "size", w, 0));
  dom::element dv;
  f->deletion_vector = !o.at_key("deletionVector").get(dv) && !dv.is_null();
  if (is_add) STOKER_RETURN_IF_ERROR(GetStringMap(o, "partitionValues", w, &f->partition));
  return Status::OK();
}

}  // namespace

Result<std::vector<DeltaField>> ParseDeltaSchema(std::string_view json) {
  dom::parser parser;
  dom::element doc;
  if (auto e = parser.parse(json.data(), json.size()).get(doc))
    return Corrupt("not JSON ({})", simdjson::error_message(e));
  dom::array fields;
  if (doc.at_key("fields").get(fields)) return Corrupt("no 'fields' array in the struct type");
  std::vector<DeltaField> out;
  for (dom::element fe : fields) {
    dom::object fo;
    if (fe.get(fo)) return Corrupt("a schema field is not an object");
    DeltaField f;
    std::string_view name;
    if (fo.at_key("name").get(name)) return Corrupt("a schema field has no name");
    f.name = std::string(name);
    dom::element type;
    if (fo.at_key("type").get(type)) return Corrupt("field '{}' has no type", f.name);
    std::string_view tname;
    if (!type.get(tname)) {
      f.type = std::string(tname);
    } else {
      dom::object to;
      std::string_view nested;
      if (type.get(to) || to.at_key("type").get(nested))
        return Corrupt("field '{}' has a malformed type", f.name);
      f.type = std::string(nested);
    }
    bool nullable = true;
    if (!fo.at_key("nullable").get(nullable)) f.nullable = nullable;
    out.push_back(std::move(f));
  }
  return out;
}

Status ApplyDeltaCommit(std::string_view json, const std::string& file, int64_t version,
                        DeltaLogState* state) {
  dom::parser parser;
  size_t line_no = 0, pos = 0;
  while (pos < json.size()) {
    size_t nl = json.find('\n', pos);
    if (nl == std::string_view::npos) nl = json.size();
    std::string_view line = json.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.remove_suffix(1);
    if (line.empty()) continue;
    Where w{file, line_no};
    dom::element doc;
    if (auto e = parser.parse(line.data(), line.size()).get(doc))
      return JsonError(w, "not a JSON action", e);
    dom::object action;
    if (doc.get(action)) return Corrupt("{}: line {}: an action is not a JSON object", file, line_no);
    for (auto [key, value] : action) {
      if (value.is_null()) continue;
      dom::object body;
      if (value.get(body))
        return Corrupt("{}: line {}: action '{}' is not an object", file, line_no, key);
      if (key == "add") {
        DeltaFile f;
        STOKER_RETURN_IF_ERROR(ParseFileAction(body, w, true, &f));
        f.version = version;
        std::string p = f.path;
        state->files[p] = std::move(f);
      } else if (key == "remove") {
        DeltaFile f;
        STOKER_RETURN_IF_ERROR(ParseFileAction(body, w, false, &f));
        if (state->track_removes_after >= 0 && version > state->track_removes_after &&
            f.data_change)
          state->data_removes.push_back(fmt::format("version {}: {}", version, f.path));
        state->files.erase(f.path);
      } else if (key == "metaData") {
        DeltaMetadata m;
        STOKER_RETURN_IF_ERROR(ParseMetadata(body, w, &m));
        state->metadata = std::move(m);
      } else if (key == "protocol") {
        DeltaProtocol p;
        STOKER_RETURN_IF_ERROR(ParseProtocol(body, w, &p));
        state->protocol = std::move(p);
      } else if (key == "commitInfo") {
        STOKER_ASSIGN_OR_RETURN(int64_t ict, GetInt(body, "inCommitTimestamp", w, -1));
        if (ict >= 0) state->in_commit_timestamp = ict;
      }
      // txn, cdc, domainMetadata, checkpointMetadata, sidecar: nothing a reader of the
      // snapshot's data needs (sidecars only appear with v2Checkpoint, which is refused).
    }
  }
  return Status::OK();
}

#else  // !STOKER_HAVE_SIMDJSON

Result<std::vector<DeltaField>> ParseDeltaSchema(std::string_view) {
  return Unimplemented("Delta Lake support needs simdjson (Debian libsimdjson-dev)");
}
Status ApplyDeltaCommit(std::string_view, const std::string& file, int64_t, DeltaLogState*) {
  return Unimplemented("{}: Delta Lake support needs simdjson (Debian libsimdjson-dev)", file);
}

#endif

// ---------------------------------------------------------------------------------------
// Checkpoints (Arrow's Parquet reader).

namespace {

#if STOKER_HAVE_PARQUET

template <typename T>
std::shared_ptr<T> Child(const std::shared_ptr<arrow::StructArray>& s, const char* name) {
  if (!s) return nullptr;
  return std::dynamic_pointer_cast<T>(s->GetFieldByName(name));
}

std::optional<std::string> StrAt(const std::shared_ptr<arrow::StringArray>& a, int64_t i) {
  if (!a || a->IsNull(i)) return std::nullopt;
  return std::string(a->GetView(i));
}

std::vector<std::string> ListAt(const std::shared_ptr<arrow::ListArray>& a, int64_t i) {
  std::vector<std::string> out;
  if (!a || a->IsNull(i)) return out;
  auto vals = std::dynamic_pointer_cast<arrow::StringArray>(a->values());
  if (!vals) return out;
  for (int64_t k = a->value_offset(i); k < a->value_offset(i + 1); ++k)
    if (vals->IsValid(k)) out.emplace_back(vals->GetView(k));
  return out;
}

std::map<std::string, std::optional<std::string>> MapAt(const std::shared_ptr<arrow::MapArray>& a,
                                                        int64_t i) {
  std::map<std::string, std::optional<std::string>> out;
  if (!a || a->IsNull(i)) return out;
  auto keys = std::dynamic_pointer_cast<arrow::StringArray>(a->keys());
  auto items = std::dynamic_pointer_cast<arrow::StringArray>(a->items());
  if (!keys || !items) return out;
  for (int64_t k = a->value_offset(i); k < a->value_offset(i + 1); ++k)
    if (keys->IsValid(k)) out[std::string(keys->GetView(k))] = StrAt(items, k);
  return out;
}

// Reads one checkpoint part: its add, metaData and protocol rows into `state`.
Status ReadCheckpointPart(Env* env, const std::string& path, int64_t version,
                          DeltaLogState* state) {
  STOKER_ASSIGN_OR_RETURN(auto raw, env->NewRandomAccessFile(path));
  auto file = std::make_shared<EnvArrowFile>(std::move(raw));
  return CatchArrow(StatusCode::kCorrupt, fmt::format("{}: checkpoint of version {}", path, version),
                    [&]() -> Status {
    auto opened = parquet::arrow::OpenFile(file, arrow::default_memory_pool());
    if (!opened.ok())
      return Corrupt("{}: checkpoint of version {} is not a readable Parquet file: {}", path,
                     version, opened.status().message());
    std::unique_ptr<parquet::arrow::FileReader> reader = std::move(opened).ValueUnsafe();
    const parquet::SchemaDescriptor* schema = reader->parquet_reader()->metadata()->schema();
    std::vector<int> leaves;
    for (int c = 0; c < schema->num_columns(); ++c) {
      std::string p = schema->Column(c)->path()->ToDotString();
      auto top = p.substr(0, p.find('.'));
      if (top != "add" && top != "metaData" && top != "protocol") continue;
      if (p.rfind("add.stats", 0) == 0 || p.rfind("add.tags", 0) == 0 ||
          p.rfind("add.partitionValues_parsed", 0) == 0)
        continue;
      leaves.push_back(c);
    }
    std::shared_ptr<arrow::Table> table;
    auto st = reader->ReadTable(leaves, &table);
    if (!st.ok())
      return Corrupt("{}: checkpoint of version {}: {}", path, version, st.message());
    auto combined = table->CombineChunksToBatch();
    if (!combined.ok())
      return Corrupt("{}: checkpoint of version {}: {}", path, version, combined.status().message());
    std::shared_ptr<arrow::RecordBatch> batch = *combined;
    auto col = [&](const char* name) {
      return std::dynamic_pointer_cast<arrow::StructArray>(batch->GetColumnByName(name));
    };
    auto add = col("add"), meta = col("metaData"), proto = col("protocol");
    if (!add && batch->GetColumnByName("add"))
      return Corrupt("{}: checkpoint of version {}: column 'add' is not a struct", path, version);
    auto add_path = Child<arrow::StringArray>(add, "path");
    auto add_pv = Child<arrow::MapArray>(add, "partitionValues");
    auto add_size = Child<arrow::Int64Array>(add, "size");
    auto add_dc = Child<arrow::BooleanArray>(add, "dataChange");
    auto add_dv = Child<arrow::StructArray>(add, "deletionVector");
    if (add && !add_path)
      return Corrupt("{}: checkpoint of version {}: add.path missing or not a string", path,
                     version);
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      if (add && add->IsValid(i)) {
        auto p = StrAt(add_path, i);
        if (!p || p->empty())
          return Corrupt("{}: checkpoint of version {}: row {}: add without a path", path,
                         version, i);
        DeltaFile f;
        f.path = DeltaPercentDecode(*p);
        f.partition = MapAt(add_pv, i);
        f.size = add_size && add_size->IsValid(i) ? add_size->Value(i) : 0;
        f.data_change = add_dc && add_dc->IsValid(i) ? add_dc->Value(i) : true;
        f.deletion_vector = add_dv && add_dv->IsValid(i);
        f.version = version;
        std::string key = f.path;
        state->files[key] = std::move(f);
      }
      if (meta && meta->IsValid(i)) {
        DeltaMetadata m;
        m.id = StrAt(Child<arrow::StringArray>(meta, "id"), i).value_or("");
        auto fmt_struct = Child<arrow::StructArray>(meta, "format");
        auto prov = StrAt(Child<arrow::StringArray>(fmt_struct, "provider"), i);
        if (prov && !prov->empty()) m.provider = *prov;
        auto schema_str = StrAt(Child<arrow::StringArray>(meta, "schemaString"), i);
        if (!schema_str)
          return Corrupt("{}: checkpoint of version {}: metaData without schemaString", path,
                         version);
        auto fields = ParseDeltaSchema(*schema_str);
        if (!fields.ok())
          return Corrupt("{}: checkpoint of version {}: schemaString: {}", path, version,
                         fields.status().message());
        m.schema = std::move(fields).value();
        m.partition_columns = ListAt(Child<arrow::ListArray>(meta, "partitionColumns"), i);
        for (auto& [k, v] : MapAt(Child<arrow::MapArray>(meta, "configuration"), i))
          m.configuration[k] = v.value_or("");
        state->metadata = std::move(m);
      }
      if (proto && proto->IsValid(i)) {
        DeltaProtocol pr;
        auto r = std::dynamic_pointer_cast<arrow::Int32Array>(proto->GetFieldByName("minReaderVersion"));
        auto w = std::dynamic_pointer_cast<arrow::Int32Array>(proto->GetFieldByName("minWriterVersion"));
        if (!r || r->IsNull(i))
          return Corrupt("{}: checkpoint of version {}: protocol without minReaderVersion", path,
                         version);
        pr.min_reader = r->Value(i);
        pr.min_writer = w && w->IsValid(i) ? w->Value(i) : 0;
        pr.reader_features = ListAt(Child<arrow::ListArray>(proto, "readerFeatures"), i);
        pr.writer_features = ListAt(Child<arrow::ListArray>(proto, "writerFeatures"), i);
        state->protocol = std::move(pr);
      }
    }
    return Status::OK();
  });
}

#else

Status ReadCheckpointPart(Env*, const std::string& path, int64_t, DeltaLogState*) {
  return Unimplemented("{}: reading Delta checkpoints needs the Parquet format (pyarrow's C++ "
                       "libraries; see docs/storage.md)", path);
}

#endif

struct Checkpoint {
  int64_t version = -1;
  int parts = 0;                    // expected parts (1 = single file)
  std::map<int, std::string> have;  // part number → file name
  bool complete() const { return parts > 0 && static_cast<int>(have.size()) == parts; }
};

struct LogListing {
  std::string dir;
  std::set<int64_t> commits;
  std::map<int64_t, Checkpoint> checkpoints;  // classic (single or multi-part)
  std::set<int64_t> v2_checkpoints;           // UUID-named: need v2Checkpoint (refused)
  bool has_last_checkpoint = false;
};

Result<LogListing> ListLog(Env* env, const std::string& table) {
  LogListing l;
  l.dir = JoinPath(table, "_delta_log");
  auto entries = env->ListDir(l.dir);
  if (!entries.ok()) {
    auto st = env->Stat(table);
    if (!st.ok()) return NotFound("Delta table {}: {}", table, st.status().message());
    return NotFound("{} is not a Delta table: no _delta_log directory ({})", table,
                    entries.status().message());
  }
  for (const auto& e : *entries) {
    if (e.is_dir) continue;
    const std::string& n = e.name;
    if (n == "_last_checkpoint") {
      l.has_last_checkpoint = true;
      continue;
    }
    if (n.size() < 21 || !AllDigits(std::string_view(n).substr(0, 20)) || n[20] != '.') continue;
    int64_t v = std::stoll(n.substr(0, 20));
    std::string rest = n.substr(21);
    if (rest == "json") {
      l.commits.insert(v);
    } else if (rest == "checkpoint.parquet") {
      Checkpoint& c = l.checkpoints[v];
      c.version = v;
      c.parts = 1;
      c.have[1] = n;
    } else if (rest.rfind("checkpoint.", 0) == 0 && rest.size() == 11 + 10 + 1 + 10 + 8 &&
               AllDigits(std::string_view(rest).substr(11, 10)) && rest[21] == '.' &&
               AllDigits(std::string_view(rest).substr(22, 10)) &&
               rest.compare(32, 8, ".parquet") == 0) {
      int part = std::stoi(rest.substr(11, 10)), total = std::stoi(rest.substr(22, 10));
      Checkpoint& c = l.checkpoints[v];
      if (c.parts == 1 && c.have.count(1) && c.have[1].find(".checkpoint.parquet") != std::string::npos)
        continue;  // a single-file checkpoint of the same version wins
      c.version = v;
      c.parts = total;
      if (part >= 1 && part <= total) c.have[part] = n;
    } else if (rest.rfind("checkpoint.", 0) == 0 &&
               (Extension(n) == "parquet" || Extension(n) == "json")) {
      l.v2_checkpoints.insert(v);
    }
  }
  if (l.commits.empty() && l.checkpoints.empty())
    return NotFound("{} is not a Delta table (or an empty one): no commits in {}", table, l.dir);
  return l;
}

// Supported reader features (see the header).
const std::set<std::string>& SupportedReaderFeatures() {
  static const std::set<std::string> s = {"timestampNtz", "vacuumProtocolCheck"};
  return s;
}

std::string FeatureName(const std::string& f) {
  if (f == "deletionVectors") return "deletion vectors (deletionVectors)";
  if (f == "columnMapping") return "column mapping (columnMapping)";
  if (f == "v2Checkpoint") return "V2 checkpoints (v2Checkpoint)";
  if (f == "typeWidening" || f == "typeWidening-preview") return "type widening (" + f + ")";
  if (f == "variantType" || f == "variantType-preview") return "the variant type (" + f + ")";
  return f;
}

Status CheckProtocol(const std::string& table, int64_t version, const DeltaProtocol& p,
                     const DeltaMetadata& m) {
  auto refuse = [&](const std::string& what) {
    return Unimplemented(
        "Delta table {} (version {}) needs reader feature{}, which stoker does not "
        "implement; rewrite the table without it (or read it with Spark / delta-rs)",
        table, version, what);
  };
  if (p.min_reader > 3)
    return Unimplemented("Delta table {} (version {}) needs reader version {}; stoker reads "
                         "versions 1 to 3", table, version, p.min_reader);
  if (p.min_reader == 3) {
    std::string missing;
    int n = 0;
    for (const auto& f : p.reader_features)
      if (!SupportedReaderFeatures().count(f)) {
        missing += (missing.empty() ? "" : ", ") + FeatureName(f);
        ++n;
      }
    if (n > 0) return refuse((n == 1 ? " " : "s ") + missing);
  }
  auto cm = m.configuration.find("delta.columnMapping.mode");
  if (cm != m.configuration.end() && cm->second != "none" && !cm->second.empty())
    return refuse(" " + FeatureName("columnMapping") + " mode '" + cm->second + "'");
  if (m.provider != "parquet")
    return Unimplemented("Delta table {} (version {}): data files of format '{}' (stoker reads "
                         "parquet)", table, version, m.provider);
  return Status::OK();
}

Result<int64_t> ReadLastCheckpointHint(Env* env, const LogListing& l, std::vector<std::string>* notes) {
  if (!l.has_last_checkpoint) return int64_t{-1};
  std::string path = JoinPath(l.dir, "_last_checkpoint");
  std::vector<uint8_t> bytes;
  Status st = env->ReadFile(path, &bytes);
  if (!st.ok()) {
    notes->push_back(fmt::format("{}: unreadable ({}); found checkpoints by listing", path,
                                 st.message()));
    return int64_t{-1};
  }
#if STOKER_HAVE_SIMDJSON
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  int64_t v = -1;
  if (parser.parse(reinterpret_cast<const char*>(bytes.data()), bytes.size()).get(doc) ||
      doc.at_key("version").get(v) || v < 0) {
    notes->push_back(fmt::format("{}: not a valid checkpoint hint; found checkpoints by listing",
                                 path));
    return int64_t{-1};
  }
  return v;
#else
  return int64_t{-1};
#endif
}

// Commit time of each version in [first, last]: the commit file's modification time, made
// strictly increasing (a commit never precedes the one before it), as Delta readers do.
Result<std::vector<std::pair<int64_t, int64_t>>> CommitTimes(Env* env, const LogListing& l,
                                                             int64_t last) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t prev = INT64_MIN;
  for (int64_t v : l.commits) {
    if (v > last) break;
    std::string path = JoinPath(l.dir, VersionName(v) + ".json");
    STOKER_ASSIGN_OR_RETURN(FileInfo info, env->Stat(path));
    int64_t ms = info.mtime_ns / 1000000;
    if (prev != INT64_MIN && ms <= prev) ms = prev + 1;
    prev = ms;
    out.emplace_back(v, ms);
  }
  return out;
}

std::string MissingCommitsMessage(const LogListing& l, int64_t from, int64_t to) {
  std::vector<int64_t> missing;
  for (int64_t v = from; v <= to && missing.size() < 4; ++v)
    if (!l.commits.count(v)) missing.push_back(v);
  std::string list;
  for (int64_t v : missing) list += fmt::format("{}{}.json", list.empty() ? "" : ", ", VersionName(v));
  return list;
}

}  // namespace

Result<int64_t> LatestDeltaVersion(Env* env, const std::string& table) {
  STOKER_ASSIGN_OR_RETURN(LogListing l, ListLog(env, table));
  int64_t latest = l.commits.empty() ? -1 : *l.commits.rbegin();
  for (const auto& [v, c] : l.checkpoints)
    if (c.complete()) latest = std::max(latest, v);
  return latest;
}

Result<DeltaSnapshot> LoadDeltaSnapshot(Env* env, const std::string& table,
                                        const DeltaSnapshotOptions& opts) {
  if (!env) env = Env::Default();
  if (opts.version && opts.timestamp_ms)
    return InvalidArgument("Delta table {}: give version= or timestamp=, not both", table);
  STOKER_ASSIGN_OR_RETURN(LogListing l, ListLog(env, table));
  DeltaSnapshot snap;
  snap.table = table;
  int64_t latest = l.commits.empty() ? -1 : *l.commits.rbegin();
  for (const auto& [v, c] : l.checkpoints)
    if (c.complete()) latest = std::max(latest, v);
  int64_t target = latest;
  if (opts.version) {
    if (*opts.version < 0 || *opts.version > latest)
      return NotFound("Delta table {}: version {} does not exist (the latest is {})", table,
                      *opts.version, latest);
    target = *opts.version;
  }
  std::vector<std::pair<int64_t, int64_t>> times;
  if (opts.timestamp_ms) {
    STOKER_ASSIGN_OR_RETURN(times, CommitTimes(env, l, latest));
    if (times.empty() || times.front().second > *opts.timestamp_ms)
      return NotFound("Delta table {}: no version was committed at or before timestamp {} ms "
                      "(the earliest commit in the log, version {}, is at {} ms)",
                      table, *opts.timestamp_ms, times.empty() ? -1 : times.front().first,
                      times.empty() ? -1 : times.front().second);
    for (const auto& [v, t] : times)
      if (t <= *opts.timestamp_ms) target = v;
  }
  if (opts.since && (*opts.since < -1 || *opts.since > target))
    return InvalidArgument("Delta table {}: since={} is not between -1 and the version read ({})",
                           table, *opts.since, target);

  int64_t hint = -1;
  STOKER_ASSIGN_OR_RETURN(hint, ReadLastCheckpointHint(env, l, &snap.notes));
  if (hint >= 0 && (!l.checkpoints.count(hint) || !l.checkpoints[hint].complete()))
    snap.notes.push_back(fmt::format(
        "{}: names the checkpoint of version {}, which is missing or incomplete in the log; "
        "replaying without it", JoinPath(l.dir, "_last_checkpoint"), hint));

  // The newest complete checkpoint the replay can start from (at or before `since` for an
  // incremental read, so every later add comes from a commit and has its version).
  int64_t limit = opts.since ? *opts.since : target;
  const Checkpoint* cp = nullptr;
  for (const auto& [v, c] : l.checkpoints) {
    if (v > limit) break;
    if (c.complete()) cp = &c;
    else
      snap.notes.push_back(fmt::format("{}: checkpoint of version {} has {} of its {} parts; "
                                       "skipped", l.dir, v, c.have.size(), c.parts));
  }
  int64_t first_commit = cp ? cp->version + 1 : 0;
  if (!cp && !l.commits.count(0)) {
    bool v2 = !l.v2_checkpoints.empty();
    return NotFound(
        "Delta table {}: version {} cannot be reconstructed: no classic checkpoint at or before "
        "it and commit {}.json is missing from {} (log cleaned up?{})",
        table, limit, VersionName(0), l.dir,
        v2 ? "; the table has V2 checkpoints, which stoker does not read" : "");
  }
  for (int64_t v = first_commit; v <= target; ++v) {
    if (!l.commits.count(v))
      return NotFound("Delta table {}: commit {} of version {} is missing from {} (needed to "
                      "read version {}; missing: {})",
                      table, VersionName(v) + ".json", v, l.dir, target,
                      MissingCommitsMessage(l, v, target));
  }

  DeltaLogState state;
  if (opts.since) state.track_removes_after = *opts.since;
  if (cp) {
    for (const auto& [part, name] : cp->have)
      STOKER_RETURN_IF_ERROR(ReadCheckpointPart(env, JoinPath(l.dir, name), cp->version, &state));
    snap.checkpoint = JoinPath(l.dir, cp->have.begin()->second);
  }
  std::vector<uint8_t> bytes;
  for (int64_t v = first_commit; v <= target; ++v) {
    std::string path = JoinPath(l.dir, VersionName(v) + ".json");
    Status st = env->ReadFile(path, &bytes);
    if (!st.ok())
      return st.WithContext(fmt::format("Delta table {}: commit of version {}", table, v));
    state.in_commit_timestamp.reset();
    STOKER_RETURN_IF_ERROR(ApplyDeltaCommit(
        std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path, v,
        &state));
  }
  if (!state.protocol)
    return Corrupt("Delta table {}: no protocol action in the log up to version {}", table, target);
  if (!state.metadata)
    return Corrupt("Delta table {}: no metaData action in the log up to version {}", table, target);
  snap.version = target;
  snap.protocol = *state.protocol;
  snap.metadata = *state.metadata;
  STOKER_RETURN_IF_ERROR(CheckProtocol(table, target, snap.protocol, snap.metadata));
  if (opts.since && !state.data_removes.empty())
    return InvalidArgument(
        "Delta table {}: reading only what versions {}..{} appended, but the table deleted or "
        "rewrote data in between ({}{}); incremental reads (since=, follow=new) follow "
        "append-only tables, read whole snapshots instead",
        table, *opts.since + 1, target, state.data_removes.front(),
        state.data_removes.size() > 1 ? fmt::format(" and {} more", state.data_removes.size() - 1)
                                      : "");
  for (auto& [p, f] : state.files) {
    if (f.deletion_vector)
      return Unimplemented(
          "Delta table {} (version {}): data file {} has a deletion vector; stoker does not "
          "implement reader feature {}",
          table, target, p, FeatureName("deletionVectors"));
    if (opts.since && (f.version <= *opts.since || !f.data_change)) continue;
    snap.files.push_back(std::move(f));
  }
  if (times.empty() && l.commits.count(target)) {
    auto info = env->Stat(JoinPath(l.dir, VersionName(target) + ".json"));
    if (info.ok()) snap.timestamp_ms = info->mtime_ns / 1000000;
  } else {
    for (const auto& [v, t] : times)
      if (v == target) snap.timestamp_ms = t;
  }
  return snap;
}

}  // namespace stoker
