#include "formats/parquet_dataset.h"

#include <cstdint>
#include <iterator>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "formats/arrow_io.h"
#include "formats/builtin.h"
#include "formats/unavailable.h"
#include "formats/parquet_thrift.h"
#include "formats/sample_buffers.h"

#if STOKER_HAVE_PARQUET
#include <arrow/buffer.h>
#include <arrow/io/interfaces.h>
#include <arrow/io/memory.h>
#include <parquet/api/reader.h>
#include <parquet/api/writer.h>
#include <parquet/page_index.h>
#endif

namespace stoker {

#if STOKER_HAVE_PARQUET

bool ParquetAvailable() { return true; }

namespace {

class EnvArrowSink final : public arrow::io::OutputStream {
 public:
  explicit EnvArrowSink(std::unique_ptr<WritableFile> f) : f_(std::move(f)) {}
  arrow::Status Close() override {
    if (closed_) return arrow::Status::OK();
    closed_ = true;
    Status st = f_->Close();
    return st.ok() ? arrow::Status::OK() : arrow::Status::IOError(st.message());
  }
  bool closed() const override { return closed_; }
  arrow::Result<int64_t> Tell() const override {
    return static_cast<int64_t>(f_->bytes_written());
  }
  arrow::Status Write(const void* data, int64_t n) override {
    Status st = f_->Append(data, static_cast<size_t>(n));
    return st.ok() ? arrow::Status::OK() : arrow::Status::IOError(st.message());
  }
  arrow::Status Flush() override {
    Status st = f_->Flush();
    return st.ok() ? arrow::Status::OK() : arrow::Status::IOError(st.message());
  }

 private:
  std::unique_ptr<WritableFile> f_;
  bool closed_ = false;
};

enum class Role { kKey, kLabel, kField };

struct Col {
  int index = 0;  // leaf column index in the file
  std::string name;
  Role role = Role::kField;
  parquet::Type::type type = parquet::Type::BYTE_ARRAY;
  int16_t max_def = 0;
  int type_length = 0;
};

// Page index of one column chunk: where each data page starts and its first row.
struct ChunkPages {
  bool usable = false;
  bool direct = false;  // eligible for direct page reads (PageValues)
  parquet::Compression::type codec = parquet::Compression::UNCOMPRESSED;
  std::vector<parquet::PageLocation> pages;
};

struct Cursor {
  int rg = -1;
  int64_t next = 0;  // next row within the row group
  std::shared_ptr<parquet::RowGroupReader> rgr;
  std::vector<std::shared_ptr<parquet::ColumnReader>> readers;  // one per Col
};

// Reads one value of `c` from `r` into `out`; *present=false when it is null.
Status ReadOne(const Col& c, parquet::ColumnReader* r, std::vector<uint8_t>* out,
               int64_t* as_int, bool* present, const std::string& path, uint64_t row) {
  int16_t def = 0;
  int64_t values = 0, levels = 0;
#define check()                                                                   \
  if (levels != 1)                                                                \
    return Corrupt("{}: column '{}' ended before row {}", path, c.name, row)
  *present = true;
  switch (c.type) {
    case parquet::Type::BYTE_ARRAY: {
      parquet::ByteArray v;
      levels = static_cast<parquet::ByteArrayReader*>(r)->ReadBatch(1, &def, nullptr, &v, &values);
      check();
      if (values == 0) break;
      out->assign(v.ptr, v.ptr + v.len);
      return Status::OK();
    }
    case parquet::Type::FIXED_LEN_BYTE_ARRAY: {
      parquet::FixedLenByteArray v;
      levels = static_cast<parquet::FixedLenByteArrayReader*>(r)->ReadBatch(1, &def, nullptr,
                                                                             &v, &values);
      check();
      if (values == 0) break;
      out->assign(v.ptr, v.ptr + c.type_length);
      return Status::OK();
    }
    case parquet::Type::INT32: {
      int32_t v = 0;
      levels = static_cast<parquet::Int32Reader*>(r)->ReadBatch(1, &def, nullptr, &v, &values);
      check();
      if (values == 0) break;
      *as_int = v;
      out->resize(4);
      std::memcpy(out->data(), &v, 4);
      return Status::OK();
    }
    case parquet::Type::INT64: {
      int64_t v = 0;
      levels = static_cast<parquet::Int64Reader*>(r)->ReadBatch(1, &def, nullptr, &v, &values);
      check();
      if (values == 0) break;
      *as_int = v;
      out->resize(8);
      std::memcpy(out->data(), &v, 8);
      return Status::OK();
    }
    case parquet::Type::FLOAT: {
      float v = 0;
      levels = static_cast<parquet::FloatReader*>(r)->ReadBatch(1, &def, nullptr, &v, &values);
      check();
      if (values == 0) break;
      out->resize(4);
      std::memcpy(out->data(), &v, 4);
      return Status::OK();
    }
    case parquet::Type::DOUBLE: {
      double v = 0;
      levels = static_cast<parquet::DoubleReader*>(r)->ReadBatch(1, &def, nullptr, &v, &values);
      check();
      if (values == 0) break;
      out->resize(8);
      std::memcpy(out->data(), &v, 8);
      return Status::OK();
    }
    case parquet::Type::BOOLEAN: {
      bool v = false;
      levels = static_cast<parquet::BoolReader*>(r)->ReadBatch(1, &def, nullptr, &v, &values);
      check();
      if (values == 0) break;
      out->assign(1, v ? 1 : 0);
      return Status::OK();
    }
    default:
      return Corrupt("{}: column '{}' has a type stoker does not read", path, c.name);
  }
#undef check
  *present = false;
  return Status::OK();
}

// Skips up to n values of a flat column; returns how many were skipped.
int64_t SkipValues(parquet::Type::type t, parquet::ColumnReader* r, int64_t n) {
  switch (t) {
    case parquet::Type::BYTE_ARRAY: return static_cast<parquet::ByteArrayReader*>(r)->Skip(n);
    case parquet::Type::FIXED_LEN_BYTE_ARRAY:
      return static_cast<parquet::FixedLenByteArrayReader*>(r)->Skip(n);
    case parquet::Type::INT32: return static_cast<parquet::Int32Reader*>(r)->Skip(n);
    case parquet::Type::INT64: return static_cast<parquet::Int64Reader*>(r)->Skip(n);
    case parquet::Type::FLOAT: return static_cast<parquet::FloatReader*>(r)->Skip(n);
    case parquet::Type::DOUBLE: return static_cast<parquet::DoubleReader*>(r)->Skip(n);
    case parquet::Type::BOOLEAN: return static_cast<parquet::BoolReader*>(r)->Skip(n);
    default: return 0;
  }
}


// ---------------------------------------------------------------------------------------
// Direct page reads ("fast path"). The page index (OffsetIndex) gives each data page's file
// offset; for an uncompressed, dictionary-free, PLAIN-encoded v1 data page of a flat
// column with no nulls, a value's bytes lie at a computable file offset. stoker parses the
// page header (Thrift compact protocol, parquet-format's PageHeader) itself, keeps where
// each value of the page is, and preads a large value straight into the sample's buffer.
// Pages of small values (keys, labels) are read whole and kept. Anything else goes
// through Arrow's page and column readers.

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // little-endian hosts only
  return v;
}

// Where the values of one data page lie.
struct PageValues {
  std::vector<std::pair<uint64_t, uint32_t>> values;  // (file offset, length) per row
  uint64_t page_offset = 0, page_end = 0;
  std::vector<uint8_t> bytes;  // the whole page when its values are small; else empty
};

class ParquetDataset final : public Dataset {
 public:
  static Result<std::unique_ptr<ParquetDataset>> Open(
      const std::string& path, const DatasetOptions& opts,
      const std::vector<std::string>* columns = nullptr) {
    Env* env = opts.env ? opts.env : Env::Default();
    std::unique_ptr<ParquetDataset> ds(new ParquetDataset());
    ds->path_ = path;
    if (columns) ds->only_ = *columns;
    ds->select_ = columns != nullptr;
    STOKER_ASSIGN_OR_RETURN(auto file, env->NewRandomAccessFile(path));
    ds->file_ = std::make_shared<EnvArrowFile>(std::move(file));
    auto raw = env->NewRandomAccessFile(path);
    if (raw.ok()) ds->raw_ = std::move(raw).value();
    STOKER_RETURN_IF_ERROR(CatchArrow(
        StatusCode::kCorrupt, fmt::format("{}: not a readable Parquet file", path), [&] {
          ds->props_.enable_buffered_stream();
          ds->props_.set_buffer_size(1 << 20);
          ds->reader_ = parquet::ParquetFileReader::Open(ds->file_, ds->props_);
          return ds->Index();
        }));
    ds->shards_.push_back({path, 0, ds->n_});
    return ds;
  }

  uint64_t size() const override { return n_; }
  const std::vector<ShardInfo>& shards() const override { return shards_; }
  std::string format() const override { return "parquet"; }
  // Pages read so far that the direct path could use (for tests).
  size_t direct_pages() const {
    std::lock_guard<std::mutex> lk(page_mu_);
    size_t k = 0;
    for (const auto& [key, pv] : page_cache_) k += pv != nullptr;
    return k;
  }
  std::vector<std::string> index_errors() const override { return skipped_; }
  bool random_access_is_cheap() const override { return page_index_; }
  std::string Location(uint64_t i) const override {
    auto [rg, off] = Locate(i);
    return fmt::format("{}:row {} (row group {}, offset {})", path_, i, rg, off);
  }
  std::string Key(uint64_t i) const override {
    Sample s;
    if (!Read(i, &s).ok()) return std::to_string(i);
    return s.key;
  }

  Status Read(uint64_t index, Sample* out) const override {
    out->Clear();
    if (index >= n_)
      return InvalidArgument("{}: sample index {} out of range ({} rows)", path_, index, n_);
    auto [rg, off] = Locate(index);
    return CatchArrow(StatusCode::kCorrupt,
                      fmt::format("{}: row {} (row group {}, offset {})", path_, index, rg, off),
                      [&, rg = rg, off = off]() -> Status {
                        if (direct_) return ReadDirect(rg, off, index, out);
                        STOKER_ASSIGN_OR_RETURN(std::unique_ptr<Cursor> cur,
                                                TakeCursor(rg, off, index));
                        if (cur) {
                          Status st = ReadRow(cur.get(), index, out);
                          if (st.ok()) {
                            ++cur->next;
                            GiveCursor(std::move(cur));
                          }
                          return st;
                        }
                        return ReadViaPageIndex(rg, off, index, out);
                      });
  }

 private:
  ParquetDataset() = default;

  std::pair<int, int64_t> Locate(uint64_t i) const {
    auto it = std::upper_bound(rg_start_.begin(), rg_start_.end(), i);
    int rg = static_cast<int>(it - rg_start_.begin()) - 1;
    return {rg, static_cast<int64_t>(i - rg_start_[rg])};
  }

  Status Index() {
    auto md = reader_->metadata();
    const parquet::SchemaDescriptor* schema = md->schema();
    for (int c = 0; c < schema->num_columns(); ++c) {
      const parquet::ColumnDescriptor* d = schema->Column(c);
      std::string name = d->path()->ToDotString();
      if (select_ && std::find(only_.begin(), only_.end(), name) == only_.end()) continue;
      if (d->max_repetition_level() > 0 || name.find('.') != std::string::npos) {
        skipped_.push_back(fmt::format("{}: column '{}' is nested or repeated; skipped", path_, name));
        continue;
      }
      Col col;
      col.index = c;
      col.name = name;
      col.type = d->physical_type();
      col.max_def = d->max_definition_level();
      col.type_length = d->type_length();
      switch (col.type) {
        case parquet::Type::BYTE_ARRAY:
        case parquet::Type::FIXED_LEN_BYTE_ARRAY:
        case parquet::Type::INT32:
        case parquet::Type::INT64:
        case parquet::Type::FLOAT:
        case parquet::Type::DOUBLE:
        case parquet::Type::BOOLEAN:
          break;
        default:
          skipped_.push_back(fmt::format("{}: column '{}' has an unsupported type; skipped", path_, name));
          continue;
      }
      bool is_int = col.type == parquet::Type::INT32 || col.type == parquet::Type::INT64;
      if (name == "key" && (col.type == parquet::Type::BYTE_ARRAY ||
                            col.type == parquet::Type::FIXED_LEN_BYTE_ARRAY))
        col.role = Role::kKey;
      else if (name == "label" && is_int)
        col.role = Role::kLabel;
      cols_.push_back(col);
    }
    bool has_field = std::any_of(cols_.begin(), cols_.end(),
                                 [](const Col& c) { return c.role == Role::kField; });
    if (!has_field && !select_)
      return Corrupt("{}: no readable field columns (expected e.g. 'key', 'label', 'jpg')", path_);
    uint64_t total = 0;
    for (int rg = 0; rg < md->num_row_groups(); ++rg) {
      rg_start_.push_back(total);
      total += static_cast<uint64_t>(md->RowGroup(rg)->num_rows());
    }
    n_ = total;
    rg_start_.push_back(total);  // sentinel
    // Page index (preloaded: initializing it is not thread-safe). Arrow trusts the index
    // locations in the footer when it slices its read buffer (a negative or too-long
    // length made it read far outside the buffer: found by parquet_fuzz), so check every
    // column's locations against the file first.
    const int64_t file_size = file_->GetSize().ValueOr(0);
    for (int rg = 0; rg < md->num_row_groups(); ++rg) {
      auto rgmd = md->RowGroup(rg);
      for (int c = 0; c < rgmd->num_columns(); ++c) {
        auto ccmd = rgmd->ColumnChunk(c);
        for (const auto& [what, loc] :
             {std::pair{"offset index", ccmd->GetOffsetIndexLocation()},
              std::pair{"column index", ccmd->GetColumnIndexLocation()}}) {
          if (loc && (loc->offset < 0 || loc->length <= 0 || loc->offset > file_size ||
                      loc->length > file_size - loc->offset))
            return Corrupt("{}: row group {} column {}: {} at offset {} ({} bytes) lies outside "
                           "the file ({} bytes)",
                           path_, rg, c, what, loc->offset, loc->length, file_size);
        }
      }
    }
    std::shared_ptr<parquet::PageIndexReader> pir = reader_->GetPageIndexReader();
    page_index_ = pir != nullptr && md->num_row_groups() > 0;
    pages_.resize(md->num_row_groups());
    for (int rg = 0; rg < md->num_row_groups() && page_index_; ++rg) {
      auto rgmd = md->RowGroup(rg);
      std::shared_ptr<parquet::RowGroupPageIndexReader> rpi = pir->RowGroup(rg);
      pages_[rg].resize(cols_.size());
      for (size_t c = 0; c < cols_.size(); ++c) {
        auto ccmd = rgmd->ColumnChunk(cols_[c].index);
        std::shared_ptr<parquet::OffsetIndex> oi =
            rpi ? rpi->GetOffsetIndex(cols_[c].index) : nullptr;
        if (!oi || ccmd->has_dictionary_page() || oi->page_locations().empty()) {
          page_index_ = false;
          break;
        }
        ChunkPages& cp = pages_[rg][c];
        cp.usable = true;
        cp.codec = ccmd->compression();
        cp.pages = oi->page_locations();
        const parquet::ColumnDescriptor* d = schema->Column(cols_[c].index);
        cp.direct = raw_ && cp.codec == parquet::Compression::UNCOMPRESSED &&
                    d->max_repetition_level() == 0 && cols_[c].type != parquet::Type::BOOLEAN;
      }
    }
    direct_ = page_index_;
    return Status::OK();
  }

  // ---- direct page reads (see PageValues) ----

  // The values of page p of column chunk (rg, k); nullptr when the page is not one the
  // direct path reads (Arrow's readers take it).
  Result<std::shared_ptr<const PageValues>> DirectPage(int rg, size_t k, size_t p) const {
    const uint64_t key = (static_cast<uint64_t>(rg) << 40) | (static_cast<uint64_t>(k) << 28) | p;
    {
      std::lock_guard<std::mutex> lk(page_mu_);
      auto it = page_cache_.find(key);
      if (it != page_cache_.end()) return it->second;
    }
    const ChunkPages& cp = pages_[rg][k];
    const parquet::PageLocation& loc = cp.pages[p];
    const Col& col = cols_[k];
    std::shared_ptr<PageValues> pv;
    if (cp.direct && loc.offset >= 0 && loc.compressed_page_size > 0 &&
        static_cast<uint64_t>(loc.offset) <= raw_->size() &&
        static_cast<uint64_t>(loc.compressed_page_size) <=
            raw_->size() - static_cast<uint64_t>(loc.offset)) {
      uint64_t page_size = static_cast<uint64_t>(loc.compressed_page_size);
      thread_local std::vector<uint8_t> prefix;
      prefix.resize(std::min<uint64_t>(page_size, kPrefix));
      NextPrefix& next = NextPrefixSlot();
      if (next.owner == id_ && next.offset == static_cast<uint64_t>(loc.offset) &&
          next.bytes.size() >= prefix.size()) {
        std::memcpy(prefix.data(), next.bytes.data(), prefix.size());  // read with the last value
      } else {
        STOKER_RETURN_IF_ERROR(raw_->ReadExact(loc.offset, prefix.size(), prefix.data()));
      }
      PageHeaderInfo h;
      if (ParsePageHeader(prefix.data(), prefix.size(), &h) && h.type == 0 && h.encoding == 0 &&
          h.num_values > 0 && h.compressed_size == h.uncompressed_size &&
          h.header_len + static_cast<uint64_t>(h.compressed_size) == page_size) {
        pv = std::make_shared<PageValues>();
        pv->page_offset = static_cast<uint64_t>(loc.offset);
        pv->page_end = pv->page_offset + page_size;
        bool small = page_size <= 1024 || page_size / static_cast<uint64_t>(h.num_values) <= 2048;
        if (small && page_size > prefix.size()) {
          pv->bytes.resize(page_size);
          STOKER_RETURN_IF_ERROR(raw_->ReadExact(loc.offset, page_size, pv->bytes.data()));
        } else if (small) {
          pv->bytes = prefix;
        }
        if (!LocateValues(col, h, page_size, prefix, pv.get())) pv.reset();
      }
    }
    std::lock_guard<std::mutex> lk(page_mu_);
    if (page_cache_bytes_ > kPageCacheBytes || page_cache_.size() > kPageCacheEntries) {
      page_cache_.clear();
      page_cache_bytes_ = 0;
    }
    page_cache_bytes_ += 64 + (pv ? pv->bytes.size() + 16 * pv->values.size() : 0);
    return page_cache_.emplace(key, std::move(pv)).first->second;
  }

  // Fills pv->values for a v1 PLAIN page: skips the definition levels (which must say
  // "no nulls"), then walks the values. Lengths of large BYTE_ARRAY values that lie past
  // the prefix are read with small preads.
  bool LocateValues(const Col& col, const PageHeaderInfo& h, uint64_t page_size,
                    const std::vector<uint8_t>& prefix, PageValues* pv) const {
    const bool have_all = !pv->bytes.empty();
    auto load4 = [&](uint64_t pos, uint32_t* v) -> bool {
      if (pos + 4 > page_size) return false;
      if (have_all) {
        *v = LoadU32(pv->bytes.data() + pos);
        return true;
      }
      if (pos + 4 <= prefix.size()) {
        *v = LoadU32(prefix.data() + pos);
        return true;
      }
      uint8_t b[4];
      if (!raw_->ReadExact(pv->page_offset + pos, 4, b).ok()) return false;
      *v = LoadU32(b);
      return true;
    };
    uint64_t pos = h.header_len;
    const uint64_t n = static_cast<uint64_t>(h.num_values);
    if (col.max_def > 0) {
      // Definition levels: u32 length, then an RLE/bit-packed hybrid run. Only a single
      // RLE run of max_def over every value (no nulls) is read here.
      uint32_t len;
      if (!load4(pos, &len) || len < 2 || len > 16 || pos + 4 + len > page_size) return false;
      uint8_t run[16];
      for (uint32_t i = 0; i < len; ++i) {
        uint64_t q = pos + 4 + i;
        if (have_all) run[i] = pv->bytes[q];
        else if (q < prefix.size()) run[i] = prefix[q];
        else return false;
      }
      CompactReader rr(run, len);
      uint64_t header;
      uint8_t value;
      if (!rr.Varint(&header) || (header & 1) || (header >> 1) < n || !rr.Byte(&value) ||
          value != col.max_def || rr.pos() != len)
        return false;
      pos += 4 + len;
    }
    pv->values.reserve(n);
    size_t width = 0;
    switch (col.type) {
      case parquet::Type::INT32: case parquet::Type::FLOAT: width = 4; break;
      case parquet::Type::INT64: case parquet::Type::DOUBLE: width = 8; break;
      case parquet::Type::FIXED_LEN_BYTE_ARRAY: width = static_cast<size_t>(col.type_length); break;
      case parquet::Type::BYTE_ARRAY: width = 0; break;
      default: return false;
    }
    for (uint64_t i = 0; i < n; ++i) {
      uint32_t len = static_cast<uint32_t>(width);
      if (width == 0) {
        if (!load4(pos, &len)) return false;
        pos += 4;
      }
      if (len > page_size - pos) return false;
      pv->values.push_back({pv->page_offset + pos, len});
      pos += len;
    }
    return pos == page_size;
  }

  // Column k of row `off` of row group rg through a direct page read. False: not possible.
  Result<bool> DirectColumn(int rg, int64_t off, size_t k, uint64_t index,
                            std::vector<uint8_t>* buf, Sample* out) const {
    const ChunkPages& cp = pages_[rg][k];
    if (!cp.direct) return false;
    auto it = std::upper_bound(cp.pages.begin(), cp.pages.end(), off,
                               [](int64_t v, const parquet::PageLocation& p) {
                                 return v < p.first_row_index;
                               });
    if (it == cp.pages.begin()) return false;
    size_t p = static_cast<size_t>(it - cp.pages.begin()) - 1;
    STOKER_ASSIGN_OR_RETURN(auto pv, DirectPage(rg, k, p));
    if (!pv) return false;
    uint64_t row = static_cast<uint64_t>(off - cp.pages[p].first_row_index);
    if (row >= pv->values.size()) return false;
    auto [foff, len] = pv->values[row];
    const Col& c = cols_[k];
    std::vector<uint8_t>* dst = buf;
    if (c.role == Role::kField) dst = &AddFieldForOverwrite(out, c.name)->data;
    if (!pv->bytes.empty()) {
      const uint8_t* src = pv->bytes.data() + (foff - pv->page_offset);
      dst->assign(src, src + len);
    } else {
      // The page's last value: read the next page's header with it (one pread per value
      // in a sequential scan). The next page must follow directly in the same chunk.
      uint64_t extra = 0;
      if (row + 1 == pv->values.size() && p + 1 < cp.pages.size() && foff + len == pv->page_end &&
          static_cast<uint64_t>(cp.pages[p + 1].offset) == pv->page_end) {
        uint64_t next_size = static_cast<uint64_t>(cp.pages[p + 1].compressed_page_size);
        extra = std::min<uint64_t>(next_size, kPrefix);
        if (pv->page_end + extra > raw_->size()) extra = 0;
      }
      dst->resize(len + extra);
      Status st = raw_->ReadExact(foff, dst->size(), dst->data());
      if (!st.ok())
        return st.WithContext(fmt::format("{}: row {}: column '{}'", path_, index, c.name));
      if (extra) {
        NextPrefix& next = NextPrefixSlot();
        next.owner = id_;
        next.offset = pv->page_end;
        next.bytes.assign(dst->data() + len, dst->data() + len + extra);
      }
      dst->resize(len);
    }
    if (c.role == Role::kKey) {
      out->key.assign(dst->begin(), dst->end());
    } else if (c.role == Role::kLabel) {
      if (c.type == parquet::Type::INT32 && len == 4) {
        int32_t v;
        std::memcpy(&v, dst->data(), 4);
        out->label = v;
      } else if (len == 8) {
        int64_t v;
        std::memcpy(&v, dst->data(), 8);
        out->label = v;
      }
    }
    return true;
  }

  // Every column of a row: direct page reads where possible, else Arrow's readers for that
  // column's page.
  Status ReadDirect(int rg, int64_t off, uint64_t index, Sample* out) const {
    thread_local std::vector<uint8_t> buf;
    for (size_t k = 0; k < cols_.size(); ++k) {
      STOKER_ASSIGN_OR_RETURN(bool done, DirectColumn(rg, off, k, index, &buf, out));
      if (!done) STOKER_RETURN_IF_ERROR(ReadColumnViaPageIndex(rg, off, index, k, &buf, out));
    }
    Finish(index, out);
    return Status::OK();
  }

  Result<std::unique_ptr<Cursor>> TakeCursor(int rg, int64_t off, uint64_t index) const {
    std::unique_lock<std::mutex> lk(mu_);
    for (size_t i = 0; i < cursors_.size(); ++i) {
      if (cursors_[i]->rg == rg && cursors_[i]->next == off) {
        auto c = std::move(cursors_[i]);
        cursors_.erase(cursors_.begin() + i);
        return c;
      }
    }
    // A sequential pattern (the previous row was read) or no page index: (re)position a
    // cursor. Otherwise the page index serves the one row.
    bool sequential = index > 0 && std::find(recent_.begin(), recent_.end(), index - 1) != recent_.end();
    if (page_index_ && !sequential && off != 0) {
      recent_[recent_pos_++ % recent_.size()] = index;
      return std::unique_ptr<Cursor>();
    }
    std::unique_ptr<Cursor> c;
    if (!cursors_.empty()) {
      // Reuse one already in this row group and before the row if there is one.
      size_t pick = 0;
      for (size_t i = 0; i < cursors_.size(); ++i)
        if (cursors_[i]->rg == rg && cursors_[i]->next <= off) pick = i;
      c = std::move(cursors_[pick]);
      cursors_.erase(cursors_.begin() + pick);
    } else {
      c = std::make_unique<Cursor>();
    }
    lk.unlock();
    if (c->rg != rg || c->next > off) {
      c->rg = rg;
      c->next = 0;
      c->rgr = reader_->RowGroup(rg);
      c->readers.clear();
      for (const Col& col : cols_) c->readers.push_back(c->rgr->Column(col.index));
    }
    if (c->next < off) {
      for (size_t k = 0; k < cols_.size(); ++k) {
        int64_t want = off - c->next, skipped = 0;
        while (skipped < want) {
          int64_t s = SkipValues(cols_[k].type, c->readers[k].get(), want - skipped);
          if (s <= 0) break;
          skipped += s;
        }
        if (skipped != want)
          return Corrupt("{}: column '{}' ended early", path_, cols_[k].name);
      }
      c->next = off;
    }
    return c;
  }

  void GiveCursor(std::unique_ptr<Cursor> c) const {
    std::lock_guard<std::mutex> lk(mu_);
    if (cursors_.size() >= 64) cursors_.erase(cursors_.begin());
    cursors_.push_back(std::move(c));
  }

  // Reads column k's value of the current row into `out` (fields straight into the
  // sample's reused buffer; a null value leaves the field out).
  Status ReadColumn(size_t k, parquet::ColumnReader* r, uint64_t index,
                    std::vector<uint8_t>* buf, Sample* out) const {
    const Col& c = cols_[k];
    int64_t ival = -1;
    bool present = false;
    if (c.role == Role::kField) {
      Field* f = out->AddField(c.name);
      STOKER_RETURN_IF_ERROR(ReadOne(c, r, &f->data, &ival, &present, path_, index));
      if (!present) --out->num_fields;
      return Status::OK();
    }
    STOKER_RETURN_IF_ERROR(ReadOne(c, r, buf, &ival, &present, path_, index));
    if (!present) return Status::OK();
    if (c.role == Role::kKey) out->key.assign(buf->begin(), buf->end());
    else out->label = ival;
    return Status::OK();
  }

  Status ReadRow(Cursor* cur, uint64_t index, Sample* out) const {
    std::vector<uint8_t> buf;
    for (size_t k = 0; k < cols_.size(); ++k)
      STOKER_RETURN_IF_ERROR(ReadColumn(k, cur->readers[k].get(), index, &buf, out));
    Finish(index, out);
    return Status::OK();
  }

  void Finish(uint64_t index, Sample* out) const {
    if (out->key.empty()) out->key = std::to_string(index);
    out->location.clear();  // reuses the recycled sample's capacity
    fmt::format_to(std::back_inserter(out->location), "{}:row {}", path_, index);
  }

  Status ReadViaPageIndex(int rg, int64_t off, uint64_t index, Sample* out) const {
    std::vector<uint8_t> buf;
    for (size_t k = 0; k < cols_.size(); ++k)
      STOKER_RETURN_IF_ERROR(ReadColumnViaPageIndex(rg, off, index, k, &buf, out));
    Finish(index, out);
    return Status::OK();
  }

  // One column of a row: Arrow's page and column readers over the page holding the row.
  Status ReadColumnViaPageIndex(int rg, int64_t off, uint64_t index, size_t k,
                                std::vector<uint8_t>* bufp, Sample* out) const {
    const parquet::SchemaDescriptor* schema = reader_->metadata()->schema();
    int64_t rg_rows = static_cast<int64_t>(rg_start_[rg + 1] - rg_start_[rg]);
    std::vector<uint8_t>& buf = *bufp;
    {
      const ChunkPages& cp = pages_[rg][k];
      auto it = std::upper_bound(cp.pages.begin(), cp.pages.end(), off,
                                 [](int64_t v, const parquet::PageLocation& p) {
                                   return v < p.first_row_index;
                                 });
      if (it == cp.pages.begin())
        return Corrupt("{}: row {}: page index of column '{}' does not cover offset {}", path_,
                       index, cols_[k].name, off);
      const parquet::PageLocation& loc = *(it - 1);
      int64_t page_rows =
          (it == cp.pages.end() ? rg_rows : it->first_row_index) - loc.first_row_index;
      auto data = file_->ReadAt(loc.offset, loc.compressed_page_size);
      if (!data.ok())
        return IOError("{}: row {}: reading page of column '{}': {}", path_, index,
                       cols_[k].name, data.status().ToString());
      auto stream = std::make_shared<arrow::io::BufferReader>(*data);
      auto pr = parquet::PageReader::Open(stream, page_rows, cp.codec, page_props_);
      auto cr = parquet::ColumnReader::Make(schema->Column(cols_[k].index), std::move(pr));
      int64_t want = off - loc.first_row_index, skipped = 0;
      while (skipped < want) {
        int64_t s = SkipValues(cols_[k].type, cr.get(), want - skipped);
        if (s <= 0) break;
        skipped += s;
      }
      if (skipped != want)
        return Corrupt("{}: row {}: page of column '{}' holds fewer rows than its index says",
                       path_, index, cols_[k].name);
      STOKER_RETURN_IF_ERROR(ReadColumn(k, cr.get(), index, &buf, out));
    }
    return Status::OK();
  }

  std::string path_;
  std::shared_ptr<EnvArrowFile> file_;
  parquet::ReaderProperties props_;       // cursors: buffered 1 MiB column streams
  parquet::ReaderProperties page_props_;  // one page already in memory: no extra buffer
  std::unique_ptr<parquet::ParquetFileReader> reader_;
  std::vector<Col> cols_;
  std::vector<uint64_t> rg_start_;
  std::vector<std::vector<ChunkPages>> pages_;
  bool page_index_ = false;
  uint64_t n_ = 0;
  std::vector<ShardInfo> shards_;
  std::vector<std::string> skipped_;
  bool select_ = false;            // only the columns named in only_
  std::vector<std::string> only_;

  std::unique_ptr<stoker::RandomAccessFile> raw_;  // direct page reads
  bool direct_ = false;
  static constexpr uint64_t kPrefix = 1024;  // bytes read to parse a page header
  // The start of the page that follows the last large value this thread read (of the
  // dataset with id `owner`), read in the same pread; parsed like any page header.
  struct NextPrefix {
    uint64_t owner = 0, offset = 0;
    std::vector<uint8_t> bytes;
  };
  static NextPrefix& NextPrefixSlot() {
    thread_local NextPrefix slot;
    return slot;
  }
  const uint64_t id_ = NextReaderId();
  static constexpr uint64_t kPageCacheBytes = 64ull << 20;
  static constexpr size_t kPageCacheEntries = 1u << 20;
  mutable std::mutex page_mu_;  // guards page_cache_ and page_cache_bytes_
  mutable std::unordered_map<uint64_t, std::shared_ptr<const PageValues>> page_cache_;
  mutable uint64_t page_cache_bytes_ = 0;

  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Cursor>> cursors_;
  mutable std::array<uint64_t, 64> recent_{};
  mutable size_t recent_pos_ = 0;
};

class ParquetWriter final : public DatasetWriter {
 public:
  static constexpr uint64_t kRowGroupBytes = 32ull << 20;
  static constexpr size_t kRowGroupRows = 8192;

  static Result<std::unique_ptr<DatasetWriter>> Open(const std::string& path,
                                                     const WriterOptions& opts) {
    std::unique_ptr<ParquetWriter> w(new ParquetWriter());
    w->path_ = path;
    w->partial_ = path + ".partial";
    w->env_ = opts.env ? opts.env : Env::Default();
    std::string dir = DirName(path);
    if (!dir.empty() && dir != ".") STOKER_RETURN_IF_ERROR(w->env_->CreateDirs(dir));
    return std::unique_ptr<DatasetWriter>(std::move(w));
  }

  Status Write(const Sample& s) override {
    if (closed_) return InvalidArgument("{}: Write after Close", path_);
    if (!writer_)
      STOKER_RETURN_IF_ERROR(CatchArrow(StatusCode::kIOError,
                                        fmt::format("{}: starting Parquet file", partial_),
                                        [&] { return Start(s); }));
    uint64_t row = count_ + keys_.size();
    if (s.num_fields != names_.size())
      return InvalidArgument("{}: sample {} ('{}') has {} fields, the first sample had {}",
                             path_, row, s.key, s.num_fields, names_.size());
    keys_.push_back(s.key);
    labels_.push_back(s.label);
    for (size_t f = 0; f < names_.size(); ++f) {
      const Field* fld = s.Find(names_[f]);
      if (!fld)
        return InvalidArgument("{}: sample {} ('{}') has no field '{}' (the first sample did)",
                               path_, row, s.key, names_[f]);
      data_[f].push_back(fld->data);
      buffered_bytes_ += fld->data.size();
    }
    if (buffered_bytes_ >= kRowGroupBytes || keys_.size() >= kRowGroupRows)
      return FlushRowGroup();
    return Status::OK();
  }

  Status Close() override {
    if (closed_) return Status::OK();
    closed_ = true;
    STOKER_RETURN_IF_ERROR(CatchArrow(
        StatusCode::kIOError, fmt::format("{}: finishing Parquet file", partial_), [&] {
          if (!writer_) {
            Sample empty;
            STOKER_RETURN_IF_ERROR(Start(empty));
          }
          STOKER_RETURN_IF_ERROR(FlushRowGroup());
          writer_->Close();
          return Status::OK();
        }));
    auto st = sink_->Close();
    if (!st.ok()) return IOError("{}: {}", partial_, st.ToString());
    STOKER_RETURN_IF_ERROR(env_->RenameFile(partial_, path_));
    STOKER_ASSIGN_OR_RETURN(FileInfo info, env_->Stat(path_));
    shards_.push_back({path_, count_, info.size});
    return Status::OK();
  }

  const std::vector<WrittenShard>& shards() const override { return shards_; }

 private:
  ParquetWriter() = default;

  Status Start(const Sample& s) {
    using parquet::schema::GroupNode;
    using parquet::schema::PrimitiveNode;
    parquet::schema::NodeVector nodes;
    nodes.push_back(PrimitiveNode::Make("key", parquet::Repetition::REQUIRED,
                                        parquet::LogicalType::String(),
                                        parquet::Type::BYTE_ARRAY));
    nodes.push_back(PrimitiveNode::Make("label", parquet::Repetition::REQUIRED,
                                        parquet::Type::INT64));
    for (size_t i = 0; i < s.num_fields; ++i) {
      const std::string& n = s.fields[i].name;
      if (n.empty() || n == "key" || n == "label" ||
          std::find(names_.begin(), names_.end(), n) != names_.end())
        return InvalidArgument("{}: field name '{}' cannot be a Parquet column (empty, 'key', "
                               "'label' or repeated)", path_, n);
      names_.push_back(n);
      nodes.push_back(PrimitiveNode::Make(n, parquet::Repetition::REQUIRED,
                                          parquet::Type::BYTE_ARRAY));
    }
    data_.resize(names_.size());
    auto schema = std::static_pointer_cast<GroupNode>(
        GroupNode::Make("schema", parquet::Repetition::REQUIRED, nodes));
    auto props = parquet::WriterProperties::Builder()
                     .compression(parquet::Compression::UNCOMPRESSED)
                     ->disable_dictionary()
                     ->data_pagesize(64 << 10)
                     ->write_batch_size(1)
                     ->enable_write_page_index()
                     ->build();
    STOKER_ASSIGN_OR_RETURN(auto wf, env_->NewWritableFile(partial_));
    sink_ = std::make_shared<EnvArrowSink>(std::move(wf));
    writer_ = parquet::ParquetFileWriter::Open(sink_, schema, props);
    return Status::OK();
  }

  Status FlushRowGroup() {
    size_t n = keys_.size();
    if (n == 0 && count_ > 0) return Status::OK();
    parquet::RowGroupWriter* rg = writer_->AppendRowGroup();
    std::vector<parquet::ByteArray> ba(n);
    for (size_t i = 0; i < n; ++i)
      ba[i] = parquet::ByteArray(static_cast<uint32_t>(keys_[i].size()),
                                 reinterpret_cast<const uint8_t*>(keys_[i].data()));
    static_cast<parquet::ByteArrayWriter*>(rg->NextColumn())
        ->WriteBatch(static_cast<int64_t>(n), nullptr, nullptr, ba.data());
    static_cast<parquet::Int64Writer*>(rg->NextColumn())
        ->WriteBatch(static_cast<int64_t>(n), nullptr, nullptr, labels_.data());
    for (size_t f = 0; f < names_.size(); ++f) {
      for (size_t i = 0; i < n; ++i)
        ba[i] = parquet::ByteArray(static_cast<uint32_t>(data_[f][i].size()), data_[f][i].data());
      static_cast<parquet::ByteArrayWriter*>(rg->NextColumn())
          ->WriteBatch(static_cast<int64_t>(n), nullptr, nullptr, ba.data());
      data_[f].clear();
    }
    rg->Close();
    count_ += n;
    keys_.clear();
    labels_.clear();
    buffered_bytes_ = 0;
    return Status::OK();
  }

  std::string path_, partial_;
  Env* env_ = nullptr;
  std::shared_ptr<EnvArrowSink> sink_;
  std::unique_ptr<parquet::ParquetFileWriter> writer_;
  std::vector<std::string> names_;
  std::vector<std::string> keys_;
  std::vector<int64_t> labels_;
  std::vector<std::vector<std::vector<uint8_t>>> data_;
  uint64_t count_ = 0, buffered_bytes_ = 0;
  bool closed_ = false;
  std::vector<WrittenShard> shards_;
};

}  // namespace

Result<std::unique_ptr<Dataset>> OpenParquetDataset(const std::string& path,
                                                    const DatasetOptions& opts) {
  STOKER_ASSIGN_OR_RETURN(auto ds, ParquetDataset::Open(path, opts));
  return std::unique_ptr<Dataset>(std::move(ds));
}

Result<std::unique_ptr<Dataset>> OpenParquetDatasetColumns(
    const std::string& path, const DatasetOptions& opts, const std::vector<std::string>& columns) {
  STOKER_ASSIGN_OR_RETURN(auto ds, ParquetDataset::Open(path, opts, &columns));
  return std::unique_ptr<Dataset>(std::move(ds));
}

Result<std::unique_ptr<DatasetWriter>> OpenParquetWriter(const std::string& path,
                                                         const WriterOptions& opts) {
  return ParquetWriter::Open(path, opts);
}

int ParquetDirectPages(const Dataset& ds) {
  const auto* p = dynamic_cast<const ParquetDataset*>(&ds);
  return p ? static_cast<int>(p->direct_pages()) : -1;
}

#else  // !STOKER_HAVE_PARQUET

constexpr MissingLibrary kMissingParquet = {"parquet", "Apache Parquet",
                                   "pip install pyarrow into the venv and re-run cmake; see "
                                   "docs/storage.md"};

bool ParquetAvailable() { return false; }
Result<std::unique_ptr<Dataset>> OpenParquetDataset(const std::string& path,
                                                    const DatasetOptions&) {
  return FormatUnavailable(kMissingParquet, path);
}
Result<std::unique_ptr<Dataset>> OpenParquetDatasetColumns(const std::string& path,
                                                           const DatasetOptions&,
                                                           const std::vector<std::string>&) {
  return FormatUnavailable(kMissingParquet, path);
}
Result<std::unique_ptr<DatasetWriter>> OpenParquetWriter(const std::string& path,
                                                         const WriterOptions&) {
  return FormatUnavailable(kMissingParquet, path);
}

int ParquetDirectPages(const Dataset&) { return -1; }

#endif

void RegisterParquetFormat() {
  RegisterDatasetFormat({"parquet", {"parquet", "pq"}, OpenParquetDataset,
                         "Parquet file: columns key, label and one binary column per field"});
  RegisterDatasetWriter("parquet", OpenParquetWriter);
}

}  // namespace stoker
