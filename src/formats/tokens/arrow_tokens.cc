// Token columns in Arrow IPC (stream or file: the Hugging Face `datasets` cache is an IPC
// stream) and Parquet files, through the Arrow C++ libraries of the pyarrow wheel.
//
// Arrow IPC: the file is memory-mapped and wrapped in a non-owning arrow::Buffer, so the
// record batches' value buffers are views of the mapping (zero-copy, unless the writer
// compressed the bodies). Parquet pages are encoded, so the column is decoded once, at open.
#include <cstdint>
#include <cstring>

#include "formats/tokens/mapped_file.h"
#include "formats/tokens/token_store_internal.h"

#if STOKER_HAVE_PARQUET
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/io/memory.h>
#include <arrow/ipc/reader.h>
#include <arrow/ipc/writer.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/writer.h>
#endif

namespace stoker {

#if STOKER_HAVE_PARQUET
namespace {

Status FromArrow(const arrow::Status& st, const std::string& path) {
  if (st.ok()) return Status::OK();
  return Corrupt("{}: {}", path, st.ToString());
}
#define STOKER_ARROW_OK(expr, path) STOKER_RETURN_IF_ERROR(FromArrow((expr), path))

Result<TokenDType> DTypeOfArrow(const arrow::DataType& t, const std::string& path) {
  switch (t.id()) {
    case arrow::Type::UINT8: return TokenDType::kUInt8;
    case arrow::Type::INT8: return TokenDType::kInt8;
    case arrow::Type::INT16: return TokenDType::kInt16;
    case arrow::Type::UINT16: return TokenDType::kUInt16;
    case arrow::Type::INT32: return TokenDType::kInt32;
    case arrow::Type::UINT32: return TokenDType::kUInt32;
    case arrow::Type::INT64: return TokenDType::kInt64;
    default:
      return InvalidArgument("{}: token values of type {} (need an integer type)", path,
                             t.ToString());
  }
}

bool IsTokenList(const arrow::DataType& t) {
  if (t.id() != arrow::Type::LIST && t.id() != arrow::Type::LARGE_LIST) return false;
  const auto& v = *t.field(0)->type();
  return arrow::is_integer(v.id());
}

Result<int> FindColumn(const arrow::Schema& s, const std::string& want, const std::string& path) {
  if (!want.empty()) {
    int i = s.GetFieldIndex(want);
    if (i < 0) return NotFound("{}: no column '{}' (columns: {})", path, want, s.ToString());
    if (!IsTokenList(*s.field(i)->type()))
      return InvalidArgument("{}: column '{}' is {}, not a list of integer token ids", path, want,
                             s.field(i)->type()->ToString());
    return i;
  }
  int i = s.GetFieldIndex("input_ids");
  if (i >= 0 && IsTokenList(*s.field(i)->type())) return i;
  for (int k = 0; k < s.num_fields(); ++k)
    if (IsTokenList(*s.field(k)->type())) return k;
  return NotFound("{}: no list<int> token column (columns: {}); name one with ?column=NAME",
                  path, s.ToString());
}

class ArrowStore final : public SpanStore {
 public:
  ArrowStore(std::string fmt, bool zero_copy)
      : SpanStore(TokenDType::kInt32), format_(std::move(fmt)), zero_copy_(zero_copy) {}
  std::string format() const override { return format_; }
  bool zero_copy() const override { return zero_copy_; }

  // Adds every row of a list<int> array (one chunk).
  Status AddChunk(const std::string& path, const std::shared_ptr<arrow::Array>& a) {
    std::shared_ptr<arrow::Array> values;
    if (a->type_id() == arrow::Type::LIST) {
      values = std::static_pointer_cast<arrow::ListArray>(a)->values();
    } else {
      values = std::static_pointer_cast<arrow::LargeListArray>(a)->values();
    }
    STOKER_ASSIGN_OR_RETURN(TokenDType t, DTypeOfArrow(*values->type(), path));
    if (!have_dtype_) {
      dtype_ = t;
      have_dtype_ = true;
    } else if (t != dtype_) {
      return InvalidArgument("{}: token values are {} here but {} in an earlier chunk", path,
                             TokenDTypeName(t), TokenDTypeName(dtype_));
    }
    if (values->null_count() > 0)
      return Corrupt("{}: the token column has {} null token ids", path, values->null_count());
    const size_t isz = TokenDTypeSize(t);
    const auto& vb = values->data()->buffers[1];
    const uint8_t* base = vb ? vb->data() + values->offset() * isz : nullptr;
    const int64_t nvalues = values->length();
    auto add = [&](auto* list) -> Status {
      for (int64_t r = 0; r < list->length(); ++r) {
        int64_t b = list->value_offset(r), e = list->value_offset(r + 1);
        if (b < 0 || e < b || e > nvalues)
          return Corrupt("{}: row {}: list offsets [{}, {}) outside the {} values", path,
                         num_documents(), b, e, nvalues);
        AddDoc(base ? base + b * isz : nullptr, static_cast<uint64_t>(e - b));
      }
      return Status::OK();
    };
    if (a->type_id() == arrow::Type::LIST) {
      STOKER_RETURN_IF_ERROR(add(static_cast<const arrow::ListArray*>(a.get())));
    } else {
      STOKER_RETURN_IF_ERROR(add(static_cast<const arrow::LargeListArray*>(a.get())));
    }
    keep_.push_back(a);
    return Status::OK();
  }
  void Keep(std::unique_ptr<MappedFile> m) { maps_.push_back(std::move(m)); }
  using SpanStore::AddFile;

 private:
  std::string format_;
  bool zero_copy_;
  bool have_dtype_ = false;
  std::vector<std::unique_ptr<MappedFile>> maps_;
  std::vector<std::shared_ptr<arrow::Array>> keep_;
};

Status AddArrowFile(ArrowStore* store, Env* env, const std::string& path, const std::string& col) {
  STOKER_ASSIGN_OR_RETURN(auto m, MappedFile::Open(env, path));
  auto buf = std::make_shared<arrow::Buffer>(m->data(), static_cast<int64_t>(m->size()));
  auto input = std::make_shared<arrow::io::BufferReader>(buf);
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches;
  std::shared_ptr<arrow::Schema> schema;
  const bool is_file = m->size() >= 8 && std::memcmp(m->data(), "ARROW1", 6) == 0;
  auto ipc = arrow::ipc::IpcReadOptions::Defaults();
  ipc.use_threads = false;
  if (is_file) {
    auto r = arrow::ipc::RecordBatchFileReader::Open(input, ipc);
    STOKER_ARROW_OK(r.status(), path);
    schema = (*r)->schema();
    for (int i = 0; i < (*r)->num_record_batches(); ++i) {
      auto b = (*r)->ReadRecordBatch(i);
      STOKER_ARROW_OK(b.status(), path);
      batches.push_back(*b);
    }
  } else {
    auto r = arrow::ipc::RecordBatchStreamReader::Open(input, ipc);
    STOKER_ARROW_OK(r.status(), path + " (not an Arrow IPC stream or file)");
    schema = (*r)->schema();
    while (true) {
      std::shared_ptr<arrow::RecordBatch> b;
      STOKER_ARROW_OK((*r)->ReadNext(&b), path);
      if (!b) break;
      batches.push_back(b);
    }
  }
  STOKER_ASSIGN_OR_RETURN(int ci, FindColumn(*schema, col, path));
  store->AddFile(path);
  for (auto& b : batches) {
    STOKER_ARROW_OK(b->column(ci)->ValidateFull(), path);
    STOKER_RETURN_IF_ERROR(store->AddChunk(path, b->column(ci)));
  }
  store->Keep(std::move(m));
  return Status::OK();
}

Status AddParquetFile(ArrowStore* store, Env* env, const std::string& path, const std::string& col) {
  STOKER_ASSIGN_OR_RETURN(auto m, MappedFile::Open(env, path));
  auto buf = std::make_shared<arrow::Buffer>(m->data(), static_cast<int64_t>(m->size()));
  auto input = std::make_shared<arrow::io::BufferReader>(buf);
  auto reader = parquet::arrow::OpenFile(input, arrow::default_memory_pool());
  // Parquet throws from some metadata paths; OpenFile catches and returns a Status.
  STOKER_ARROW_OK(reader.status(), path);
  std::shared_ptr<arrow::Schema> schema;
  STOKER_ARROW_OK((*reader)->GetSchema(&schema), path);
  STOKER_ASSIGN_OR_RETURN(int ci, FindColumn(*schema, col, path));
  std::shared_ptr<arrow::ChunkedArray> chunks;
  STOKER_ARROW_OK((*reader)->ReadColumn(ci, &chunks), path);
  store->AddFile(path);
  for (const auto& c : chunks->chunks()) STOKER_RETURN_IF_ERROR(store->AddChunk(path, c));
  return Status::OK();  // the decoded arrays are owned by the store; the mapping can go
}

// Arrow IPC stream (as `datasets` writes its cache) or Parquet, one list<int> column.
class ArrowWriter final : public TokenWriter {
 public:
  Status Open(const std::string& fmt, const std::string& path, const TokenWriterOptions& o) {
    fmt_ = fmt;
    path_ = path;
    o_ = o;
    env_ = o.env ? o.env : Env::Default();
    arrow::Type::type vt;
    switch (o.dtype) {
      case TokenDType::kUInt16: vt = arrow::Type::UINT16; value_type_ = arrow::uint16(); break;
      case TokenDType::kUInt32: vt = arrow::Type::UINT32; value_type_ = arrow::uint32(); break;
      case TokenDType::kInt64: vt = arrow::Type::INT64; value_type_ = arrow::int64(); break;
      default: vt = arrow::Type::INT32; value_type_ = arrow::int32(); o_.dtype = TokenDType::kInt32;
    }
    (void)vt;
    schema_ = arrow::schema({arrow::field(o.column, arrow::list(value_type_))});
    std::string dir = DirName(path);
    if (!dir.empty()) STOKER_RETURN_IF_ERROR(env_->CreateDirs(dir));
    auto out = arrow::io::FileOutputStream::Open(path + ".tmp");
    STOKER_ARROW_OK(out.status(), path);
    out_ = *out;
    if (fmt == "arrow") {
      auto w = arrow::ipc::MakeStreamWriter(out_, schema_);
      STOKER_ARROW_OK(w.status(), path);
      ipc_ = *w;
    } else {
      auto w = parquet::arrow::FileWriter::Open(*schema_, arrow::default_memory_pool(), out_);
      STOKER_ARROW_OK(w.status(), path);
      pq_ = std::move(*w);
    }
    offsets_.push_back(0);
    return Status::OK();
  }
  Status AddDocument(const int64_t* ids, size_t n) override {
    STOKER_RETURN_IF_ERROR(EncodeTokenIds(path_, docs_, ids, n, o_.dtype, o_.vocab_size, &values_));
    offsets_.push_back(static_cast<int32_t>(values_.size() / TokenDTypeSize(o_.dtype)));
    ++docs_;
    tokens_ += n;
    if (offsets_.size() - 1 >= o_.rows_per_batch) return FlushBatch();
    return Status::OK();
  }
  Status Finish() override {
    if (offsets_.size() > 1) STOKER_RETURN_IF_ERROR(FlushBatch());
    if (ipc_) STOKER_ARROW_OK(ipc_->Close(), path_);
    if (pq_) STOKER_ARROW_OK(pq_->Close(), path_);
    STOKER_ARROW_OK(out_->Close(), path_);
    return env_->RenameFile(path_ + ".tmp", path_);
  }
  uint64_t documents() const override { return docs_; }
  uint64_t tokens() const override { return tokens_; }
  std::vector<std::string> outputs() const override { return {path_}; }

 private:
  Status FlushBatch() {
    if (values_.size() / TokenDTypeSize(o_.dtype) > static_cast<size_t>(INT32_MAX))
      return InvalidArgument("{}: more than 2^31 tokens in one record batch; lower rows_per_batch",
                             path_);
    const int64_t rows = static_cast<int64_t>(offsets_.size() - 1);
    const int64_t nv = static_cast<int64_t>(values_.size() / TokenDTypeSize(o_.dtype));
    auto vdata = arrow::ArrayData::Make(value_type_, nv,
                                        {nullptr, arrow::Buffer::FromVector(values_)});
    auto odata = arrow::Buffer::FromVector(offsets_);
    auto list = std::make_shared<arrow::ListArray>(arrow::list(value_type_), rows, odata,
                                                   arrow::MakeArray(vdata));
    auto batch = arrow::RecordBatch::Make(schema_, rows, {list});
    if (ipc_) STOKER_ARROW_OK(ipc_->WriteRecordBatch(*batch), path_);
    if (pq_) STOKER_ARROW_OK(pq_->WriteRecordBatch(*batch), path_);
    values_ = {};
    offsets_ = {0};
    return Status::OK();
  }
  std::string fmt_, path_;
  TokenWriterOptions o_;
  Env* env_ = nullptr;
  std::shared_ptr<arrow::DataType> value_type_;
  std::shared_ptr<arrow::Schema> schema_;
  std::shared_ptr<arrow::io::FileOutputStream> out_;
  std::shared_ptr<arrow::ipc::RecordBatchWriter> ipc_;
  std::unique_ptr<parquet::arrow::FileWriter> pq_;
  std::vector<uint8_t> values_;
  std::vector<int32_t> offsets_;
  uint64_t docs_ = 0, tokens_ = 0;
};

}  // namespace

Result<std::unique_ptr<TokenStore>> OpenArrowTokenStore(const std::string& fmt,
                                                        const std::string& path,
                                                        const TokenStoreOptions& o) {
  Env* env = o.env ? o.env : Env::Default();
  STOKER_ASSIGN_OR_RETURN(auto paths, ExpandTokenPaths(env, path));
  auto store = std::make_unique<ArrowStore>(fmt, fmt == "arrow");
  for (const auto& p : paths) {
    try {
      STOKER_RETURN_IF_ERROR(fmt == "arrow" ? AddArrowFile(store.get(), o.env, p, o.column)
                                            : AddParquetFile(store.get(), o.env, p, o.column));
    } catch (const std::exception& e) {  // parquet's metadata parser throws
      return Corrupt("{}: {}", p, e.what());
    }
  }
  return std::unique_ptr<TokenStore>(std::move(store));
}

Result<std::unique_ptr<TokenWriter>> OpenArrowTokenWriter(const std::string& fmt,
                                                          const std::string& path,
                                                          const TokenWriterOptions& o) {
  auto w = std::make_unique<ArrowWriter>();
  STOKER_RETURN_IF_ERROR(w->Open(fmt, path, o));
  return std::unique_ptr<TokenWriter>(std::move(w));
}

#else

Result<std::unique_ptr<TokenStore>> OpenArrowTokenStore(const std::string& fmt,
                                                        const std::string& path,
                                                        const TokenStoreOptions&) {
  return Unimplemented("{}: stoker was built without the Arrow/Parquet libraries", path);
}
Result<std::unique_ptr<TokenWriter>> OpenArrowTokenWriter(const std::string& fmt,
                                                          const std::string& path,
                                                          const TokenWriterOptions&) {
  return Unimplemented("{}: stoker was built without the Arrow/Parquet libraries", path);
}

#endif

}  // namespace stoker
