#include "formats/hdf5_dataset.h"

#include <cstdint>
#include <iterator>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "formats/builtin.h"
#include "formats/unavailable.h"
#include "formats/hdf5_heap.h"
#include "formats/sample_buffers.h"

#if STOKER_HAVE_HDF5
#include <hdf5.h>
#endif

namespace stoker {

#if STOKER_HAVE_HDF5

bool Hdf5Available() { return true; }

namespace {

// The one lock around every HDF5 call in the process (the serial HDF5 build is not
// thread-safe). Also turns off HDF5's automatic error printing: the library never prints.
std::mutex& H5Mu() {
  static std::mutex mu;
  return mu;
}

void H5InitLocked() {
  static bool done = false;
  if (!done) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    done = true;
  }
}

herr_t WalkCb(unsigned n, const H5E_error2_t* e, void* data) {
  auto* s = static_cast<std::string*>(data);
  if (n < 3 && e->desc && *e->desc) {
    if (!s->empty()) *s += "; ";
    *s += e->desc;
  }
  return 0;
}

// The innermost messages of HDF5's error stack (then clears it).
std::string H5ErrorString() {
  std::string s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, WalkCb, &s);
  H5Eclear2(H5E_DEFAULT);
  return s.empty() ? "unknown HDF5 error" : s;
}

void CloseId(hid_t* id, herr_t (*fn)(hid_t)) {
  if (*id >= 0) fn(*id);
  *id = -1;
}

enum class Kind { kVlen, kVlenString, kFixedString, kFixedArray, kInt };

struct Column {
  std::string name;
  Kind kind = Kind::kVlen;
  hid_t dset = -1, fspace = -1, mspace = -1, mtype = -1;
  int rank = 1;
  hsize_t dims[H5S_MAX_RANK] = {0};
  size_t elem_size = 1;   // kVlen: bytes per element; kFixed*: bytes per row
  H5T_str_t strpad = H5T_STR_NULLTERM;
  // Read-ahead block for sequential scans: rows [blk_start, blk_start + blk_count) in
  // memory-type layout (hvl_t / char* / fixed rows).
  uint64_t blk_start = 0, blk_count = 0;
  std::vector<uint8_t> blk;
  hid_t blk_mspace = -1;

  // Bytes of one element in memory.
  size_t MemSize() const {
    if (kind == Kind::kVlen) return sizeof(hvl_t);
    if (kind == Kind::kVlenString) return sizeof(char*);
    return elem_size;
  }
  void DropBlock() {
    if (blk_count && (kind == Kind::kVlen || kind == Kind::kVlenString))
      H5Dvlen_reclaim(mtype, blk_mspace, H5P_DEFAULT, blk.data());
    CloseId(&blk_mspace, H5Sclose);
    blk_count = 0;
  }
  void Close() {
    DropBlock();
    CloseId(&mspace, H5Sclose);
    CloseId(&fspace, H5Sclose);
    CloseId(&mtype, H5Tclose);
    CloseId(&dset, H5Dclose);
  }
};

// Direct reads ("fast path"): libhdf5 tells where a column's raw bytes lie in the file
// (H5Dget_offset for contiguous datasets, H5Dget_chunk_info_by_coord per chunk), and stoker
// reads them with pread through Env, outside the process-wide HDF5 lock. Used for
// unfiltered datasets whose file type needs no conversion:
//  * fixed-size rows (arrays, fixed strings, integer labels): a row is `unit` bytes at
//    chunk address + row offset; small rows are read a chunk at a time and kept;
//  * variable-length data (h5py's vlen uint8, vlen strings): the raw row is the 16-byte
//    on-disk vlen reference (u32 element count, u64 global heap collection address, u32
//    object index; HDF5 file format spec, "Variable-length data" and "Global Heap"), and
//    the bytes are read from the global heap object it names.
// Anything unexpected (filters, type conversion, a user block, 4-byte addresses, a heap
// object that does not match) leaves the column to libhdf5 (the slow path).
struct FastCol {
  enum class Mode { kOff, kRows, kVlen };
  Mode mode = Mode::kOff;
  bool contiguous = false;
  uint64_t addr = 0;        // contiguous: file address of row 0
  uint64_t chunk_rows = 0;  // rows per chunk (contiguous: rows per cached block)
  uint64_t unit = 0;        // raw bytes per row
  size_t elem = 1;          // kVlen: bytes per element
  bool cache = false;       // keep whole chunks of raw rows in memory
  bool int_label = false;   // kRows of an integer label: convert to int64
  bool is_signed = true;
  // Lazily resolved, guarded by Hdf5Dataset::fast_mu_.
  std::vector<uint64_t> chunk_addr;  // 0: not resolved yet; kNoChunk: not allocated
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> chunk_bytes;
};
constexpr uint64_t kNoChunk = ~0ull;

uint64_t LoadLE(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// One global heap collection's objects (index → data offset in the file and size), and
// the collection's bytes when it is small enough to keep.
struct HeapCollection {
  std::vector<Hdf5HeapObject> objs;
  uint64_t addr = 0, size = 0;
  std::vector<uint8_t> bytes;  // empty for large collections
};

// Inspects dataset `name` of file `f` (open, under the lock). Returns false (with a reason)
// when the dataset is of a kind stoker does not read.
Status DescribeColumn(hid_t f, const std::string& path, const std::string& name, Column* c,
                      bool* supported, std::string* why) {
  *supported = true;
  c->name = name;
  c->dset = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  if (c->dset < 0) return Corrupt("{}: cannot open dataset '/{}': {}", path, name, H5ErrorString());
  c->fspace = H5Dget_space(c->dset);
  c->rank = H5Sget_simple_extent_ndims(c->fspace);
  if (c->rank < 1 || c->rank > H5S_MAX_RANK) {
    *supported = false;
    *why = fmt::format("dataset '/{}' is a scalar", name);
    return Status::OK();
  }
  H5Sget_simple_extent_dims(c->fspace, c->dims, nullptr);
  hid_t ft = H5Dget_type(c->dset);
  H5T_class_t cls = H5Tget_class(ft);
  hsize_t row_elems = 1;
  for (int d = 1; d < c->rank; ++d) row_elems *= c->dims[d];
  if (cls == H5T_STRING && c->rank == 1) {
    c->strpad = H5Tget_strpad(ft);
    if (H5Tis_variable_str(ft) > 0) {
      c->kind = Kind::kVlenString;
      c->mtype = H5Tcopy(H5T_C_S1);
      H5Tset_size(c->mtype, H5T_VARIABLE);
      H5Tset_cset(c->mtype, H5Tget_cset(ft));
    } else {
      c->kind = Kind::kFixedString;
      c->mtype = H5Tcopy(ft);
      c->elem_size = H5Tget_size(ft);
    }
  } else if (cls == H5T_VLEN && c->rank == 1) {
    hid_t super = H5Tget_super(ft);
    H5T_class_t scls = H5Tget_class(super);
    if (scls == H5T_INTEGER || scls == H5T_FLOAT) {
      hid_t native = H5Tget_native_type(super, H5T_DIR_ASCEND);
      c->kind = Kind::kVlen;
      c->mtype = H5Tvlen_create(native);
      c->elem_size = H5Tget_size(native);
      H5Tclose(native);
    } else {
      *supported = false;
      *why = fmt::format("dataset '/{}' is variable-length of a non-numeric type", name);
    }
    H5Tclose(super);
  } else if (cls == H5T_INTEGER && name == "label" && c->rank == 1) {
    c->kind = Kind::kInt;
    c->mtype = H5Tcopy(H5T_NATIVE_INT64);
    c->elem_size = 8;
  } else if (cls == H5T_INTEGER || cls == H5T_FLOAT || cls == H5T_OPAQUE) {
    c->kind = Kind::kFixedArray;
    c->mtype = cls == H5T_OPAQUE ? H5Tcopy(ft) : H5Tget_native_type(ft, H5T_DIR_ASCEND);
    c->elem_size = H5Tget_size(c->mtype) * row_elems;
  } else {
    *supported = false;
    *why = fmt::format("dataset '/{}' has an HDF5 type class stoker does not read ({})", name,
                       static_cast<int>(cls));
  }
  H5Tclose(ft);
  if (*supported) {
    hsize_t mdims[H5S_MAX_RANK];
    mdims[0] = 1;
    int mrank = c->kind == Kind::kFixedArray ? c->rank : 1;
    for (int d = 1; d < mrank; ++d) mdims[d] = c->dims[d];
    c->mspace = H5Screate_simple(mrank, mdims, nullptr);
  }
  return Status::OK();
}

class Hdf5Dataset final : public Dataset {
 public:
  static Result<std::unique_ptr<Hdf5Dataset>> Open(const std::string& path,
                                                   const DatasetOptions& opts) {
    Env* env = opts.env ? opts.env : Env::Default();
    STOKER_ASSIGN_OR_RETURN(FileInfo info, env->Stat(path));
    if (info.is_dir) return InvalidArgument("{}: is a directory, not an HDF5 file", path);
    std::unique_ptr<Hdf5Dataset> ds(new Hdf5Dataset());
    ds->path_ = path;
    auto raw = env->NewRandomAccessFile(path);
    if (raw.ok()) ds->raw_ = std::move(raw).value();
    std::lock_guard<std::mutex> lk(H5Mu());
    STOKER_RETURN_IF_ERROR(ds->OpenLocked());
    ds->SetupFastLocked();
    ds->shards_.push_back({path, 0, ds->n_});
    return ds;
  }

  // Columns read with direct preads (for tests and the docs' claims).
  size_t fast_columns() const {
    size_t k = 0;
    for (const auto& f : fast_) k += f.mode != FastCol::Mode::kOff;
    return k;
  }

  ~Hdf5Dataset() override {
    std::lock_guard<std::mutex> lk(H5Mu());
    if (file_pid_ == ::getpid()) CloseLocked();
  }

  uint64_t size() const override { return n_; }
  const std::vector<ShardInfo>& shards() const override { return shards_; }
  std::string format() const override { return "hdf5"; }
  std::vector<std::string> index_errors() const override { return skipped_; }
  std::string Location(uint64_t i) const override {
    return fmt::format("{}:record {}", path_, i);
  }

  std::string Key(uint64_t i) const override {
    if (key_col_ < 0) return std::to_string(i);
    std::lock_guard<std::mutex> lk(H5Mu());
    std::vector<uint8_t> buf;
    if (!EnsureProcessLocked().ok() || !ReadRowLocked(cols_[key_col_], i, &buf, false).ok())
      return std::to_string(i);
    return std::string(buf.begin(), buf.end());
  }

  Status Read(uint64_t index, Sample* out) const override {
    out->Clear();
    if (index >= n_)
      return InvalidArgument("{}: sample index {} out of range ({} samples)", path_, index, n_);
    if (pid_.load(std::memory_order_acquire) != ::getpid()) {
      std::lock_guard<std::mutex> lk(H5Mu());
      STOKER_RETURN_IF_ERROR(EnsureProcessLocked());
    }
    uint64_t prev = last_.exchange(index, std::memory_order_relaxed);
    bool sequential = index == prev + 1;
    thread_local std::vector<uint8_t> scratch;
    for (size_t c = 0; c < cols_.size(); ++c) {
      Column& col = cols_[c];
      bool is_key = static_cast<int>(c) == key_col_, is_label = static_cast<int>(c) == label_col_;
      std::vector<uint8_t>* dst =
          is_key || is_label ? &scratch : &AddFieldForOverwrite(out, col.name)->data;
      STOKER_ASSIGN_OR_RETURN(bool done, FastRow(c, index, dst));
      if (!done) {
        std::lock_guard<std::mutex> lk(H5Mu());
        STOKER_RETURN_IF_ERROR(ReadRowLocked(col, index, dst, sequential));
      }
      if (is_key) {
        out->key.assign(dst->begin(), dst->end());
      } else if (is_label) {
        int64_t v = -1;
        if (dst->size() >= sizeof v) std::memcpy(&v, dst->data(), sizeof v);
        out->label = v;
      }
    }
    if (key_col_ < 0) out->key = std::to_string(index);
    out->location.clear();
    fmt::format_to(std::back_inserter(out->location), "{}:record {}", path_, index);
    return Status::OK();
  }

 private:
  Hdf5Dataset() = default;

  Status EnsureProcessLocked() const {
    if (pid_.load() == ::getpid()) return Status::OK();
    // Forked child: drop the handles inherited from the parent and open our own.
    CloseLocked();
    return const_cast<Hdf5Dataset*>(this)->OpenLocked();
  }

  void CloseLocked() const {
    for (auto& c : cols_) c.Close();
    CloseId(&file_, H5Fclose);
  }

  Status OpenLocked() {
    H5InitLocked();
    cols_.clear();
    skipped_.clear();
    key_col_ = label_col_ = -1;
    file_ = H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file_ < 0) {
      std::string err = H5ErrorString();
      return Corrupt("{}: not a readable HDF5 file ({})", path_, err);
    }
    file_pid_ = ::getpid();
    H5G_info_t ginfo;
    if (H5Gget_info(file_, &ginfo) < 0)
      return Corrupt("{}: cannot list the root group: {}", path_, H5ErrorString());
    std::vector<std::string> names;
    for (hsize_t i = 0; i < ginfo.nlinks; ++i) {
      ssize_t len = H5Lget_name_by_idx(file_, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0,
                                       H5P_DEFAULT);
      if (len < 0) return Corrupt("{}: cannot read link {} of '/': {}", path_, i, H5ErrorString());
      std::string name(static_cast<size_t>(len) + 1, '\0');
      H5Lget_name_by_idx(file_, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                         H5P_DEFAULT);
      name.resize(static_cast<size_t>(len));
      H5O_info_t oinfo;
      if (H5Oget_info_by_name(file_, name.c_str(), &oinfo, H5P_DEFAULT) < 0) {
        H5Eclear2(H5E_DEFAULT);
        continue;
      }
      if (oinfo.type == H5O_TYPE_DATASET) names.push_back(name);
    }
    std::string first;
    for (const auto& name : names) {
      Column c;
      bool ok = false;
      std::string why;
      Status st = DescribeColumn(file_, path_, name, &c, &ok, &why);
      if (!st.ok()) {
        c.Close();
        return st;
      }
      if (!ok) {
        c.Close();
        skipped_.push_back(fmt::format("{}: {}; skipped", path_, why));
        continue;
      }
      if (cols_.empty()) {
        n_ = c.dims[0];
        first = name;
      } else if (c.dims[0] != n_) {
        uint64_t rows = c.dims[0];
        c.Close();
        return Corrupt("{}: dataset '/{}' has {} rows but '/{}' has {}", path_, name, rows, first,
                       n_);
      }
      if (name == "key" && c.kind != Kind::kFixedArray && c.kind != Kind::kInt)
        key_col_ = static_cast<int>(cols_.size());
      if (name == "label" && c.kind == Kind::kInt) label_col_ = static_cast<int>(cols_.size());
      cols_.push_back(c);
    }
    size_t fields = cols_.size() - (key_col_ >= 0) - (label_col_ >= 0);
    if (cols_.empty() || fields == 0)
      return Corrupt("{}: no sample fields: expected root datasets such as /key, /label and "
                     "/jpg with one row per sample (see docs/storage.md)",
                     path_);
    // Published last: a reader that sees this process's pid sees the columns.
    pid_.store(::getpid(), std::memory_order_release);
    return Status::OK();
  }

  // Decides, once at open, which columns are read directly (see FastCol).
  void SetupFastLocked() {
    fast_.assign(cols_.size(), FastCol{});
    if (!raw_) return;
    hid_t fcpl = H5Fget_create_plist(file_);
    size_t sizeof_addr = 0, sizeof_size = 0;
    hsize_t userblock = 1;
    bool ok = fcpl >= 0 && H5Pget_sizes(fcpl, &sizeof_addr, &sizeof_size) >= 0 &&
              H5Pget_userblock(fcpl, &userblock) >= 0 && sizeof_addr == 8 && sizeof_size == 8 &&
              userblock == 0;
    if (fcpl >= 0) H5Pclose(fcpl);
    H5Eclear2(H5E_DEFAULT);
    if (!ok) return;
    for (size_t k = 0; k < cols_.size(); ++k) {
      SetupFastColumnLocked(cols_[k], &fast_[k]);
      H5Eclear2(H5E_DEFAULT);
    }
  }

  void SetupFastColumnLocked(const Column& c, FastCol* f) const {
    hid_t dcpl = H5Dget_create_plist(c.dset);
    if (dcpl < 0) return;
    int nfilters = H5Pget_nfilters(dcpl);
    H5D_layout_t layout = H5Pget_layout(dcpl);
    hsize_t cdims[H5S_MAX_RANK] = {0};
    int crank = layout == H5D_CHUNKED ? H5Pget_chunk(dcpl, H5S_MAX_RANK, cdims) : 0;
    H5Pclose(dcpl);
    if (nfilters != 0) return;
    hid_t ft = H5Dget_type(c.dset);
    if (ft < 0) return;
    FastCol x;
    bool ok = true;
    switch (c.kind) {
      case Kind::kVlen: {
        hid_t super = H5Tget_super(ft), msuper = H5Tget_super(c.mtype);
        ok = super >= 0 && msuper >= 0 && H5Tequal(super, msuper) > 0;
        if (super >= 0) H5Tclose(super);
        if (msuper >= 0) H5Tclose(msuper);
        x.mode = FastCol::Mode::kVlen;
        x.unit = 16;
        x.elem = c.elem_size;
        x.cache = true;
        break;
      }
      case Kind::kVlenString:
        x.mode = FastCol::Mode::kVlen;
        x.unit = 16;
        x.cache = true;
        break;
      case Kind::kFixedString:
        x.mode = FastCol::Mode::kRows;
        x.unit = c.elem_size;
        x.cache = x.unit <= 256;
        break;
      case Kind::kFixedArray: {
        // The file type must be what the reader hands out (native order, no conversion).
        hid_t native = H5Tget_class(ft) == H5T_OPAQUE ? H5Tcopy(ft)
                                                       : H5Tget_native_type(ft, H5T_DIR_ASCEND);
        ok = native >= 0 && H5Tequal(ft, native) > 0;
        if (native >= 0) H5Tclose(native);
        x.mode = FastCol::Mode::kRows;
        x.unit = c.elem_size;
        x.cache = x.unit <= 256;
        break;
      }
      case Kind::kInt: {
        size_t size = H5Tget_size(ft);
        ok = H5Tget_order(ft) == H5T_ORDER_LE &&
             (size == 1 || size == 2 || size == 4 || size == 8);
        x.mode = FastCol::Mode::kRows;
        x.unit = size;
        x.int_label = true;
        x.is_signed = H5Tget_sign(ft) == H5T_SGN_2;
        x.cache = true;
        break;
      }
    }
    H5Tclose(ft);
    if (!ok || x.unit == 0 || n_ == 0) return;
    if (layout == H5D_CONTIGUOUS) {
      haddr_t a = H5Dget_offset(c.dset);
      if (a == HADDR_UNDEF || x.unit > raw_->size() / n_ || a > raw_->size() - n_ * x.unit)
        return;  // not stored (yet), or not inside the file
      x.contiguous = true;
      x.addr = a;
      x.chunk_rows = x.cache ? std::max<uint64_t>(1, (64u << 10) / x.unit) : n_;
    } else if (layout == H5D_CHUNKED) {
      if (crank != c.rank || cdims[0] == 0) return;
      for (int d = 1; d < c.rank; ++d)
        if (cdims[d] != c.dims[d]) return;  // a chunk must hold whole rows
      x.chunk_rows = cdims[0];
      if (x.unit > raw_->size() / x.chunk_rows) return;  // a chunk larger than the file
    } else {
      return;  // compact or virtual
    }
    uint64_t chunks = (n_ + x.chunk_rows - 1) / x.chunk_rows;
    x.chunk_addr.assign(chunks, 0);
    if (x.cache) x.chunk_bytes.resize(chunks);
    *f = std::move(x);
  }

  // File address of chunk `chunk` of column k, kNoChunk when it is not stored as plain
  // whole rows (unallocated, filtered): those rows go through libhdf5.
  Result<uint64_t> ChunkAddr(size_t k, uint64_t chunk) const {
    FastCol& f = fast_[k];
    if (f.contiguous) return f.addr + chunk * f.chunk_rows * f.unit;
    {
      std::lock_guard<std::mutex> lk(fast_mu_);
      if (f.chunk_addr[chunk]) return f.chunk_addr[chunk];
    }
    uint64_t a = kNoChunk;
    {
      std::lock_guard<std::mutex> lk(H5Mu());
      STOKER_RETURN_IF_ERROR(EnsureProcessLocked());
      hsize_t off[H5S_MAX_RANK] = {0};
      off[0] = chunk * f.chunk_rows;
      unsigned mask = 0;
      haddr_t addr = HADDR_UNDEF;
      hsize_t size = 0;
      if (H5Dget_chunk_info_by_coord(cols_[k].dset, off, &mask, &addr, &size) < 0)
        H5Eclear2(H5E_DEFAULT);
      else if (addr != HADDR_UNDEF && mask == 0 && size == f.chunk_rows * f.unit && addr != 0 &&
               size <= raw_->size() && addr <= raw_->size() - size)
        a = addr;  // (a damaged file may claim any size or address: those go to libhdf5)
    }
    std::lock_guard<std::mutex> lk(fast_mu_);
    f.chunk_addr[chunk] = a;
    return a;
  }

  // Raw bytes of row i of a cached column (nullptr: use libhdf5). `hold` keeps them alive.
  Result<const uint8_t*> CachedRow(size_t k, uint64_t i,
                                   std::shared_ptr<const std::vector<uint8_t>>* hold) const {
    FastCol& f = fast_[k];
    uint64_t chunk = i / f.chunk_rows;
    {
      std::lock_guard<std::mutex> lk(fast_mu_);
      if (f.chunk_bytes[chunk]) {
        *hold = f.chunk_bytes[chunk];
        return (*hold)->data() + (i - chunk * f.chunk_rows) * f.unit;
      }
    }
    STOKER_ASSIGN_OR_RETURN(uint64_t addr, ChunkAddr(k, chunk));
    if (addr == kNoChunk) return static_cast<const uint8_t*>(nullptr);
    uint64_t rows = f.chunk_rows;
    if (f.contiguous) rows = std::min<uint64_t>(rows, n_ - chunk * f.chunk_rows);
    auto buf = std::make_shared<std::vector<uint8_t>>(rows * f.unit);
    Status st = raw_->ReadExact(addr, buf->size(), buf->data());
    if (!st.ok())
      return st.WithContext(fmt::format("{}: record {}: raw rows of '/{}'", path_, i,
                                        cols_[k].name));
    std::lock_guard<std::mutex> lk(fast_mu_);
    if (!f.chunk_bytes[chunk]) f.chunk_bytes[chunk] = std::move(buf);
    *hold = f.chunk_bytes[chunk];
    return (*hold)->data() + (i - chunk * f.chunk_rows) * f.unit;
  }

  // Finds object `index` of the global heap collection at `coll`: its file offset and
  // size, and the collection (with its bytes) when it is small enough to keep. kCorrupt
  // (without file and record: the caller adds them) when the reference does not lead to
  // such an object. Those rows are not handed to libhdf5, which trusts the heap and can
  // crash on a damaged one (seen in H5HG_read).
  Status HeapObject(uint64_t coll, uint64_t index, uint64_t* off, uint64_t* size,
                    std::shared_ptr<const HeapCollection>* hold, uint64_t* coll_size) const {
    auto find = [&](const HeapCollection& hc) -> Status {
      for (const auto& o : hc.objs)
        if (o.index == index) {
          *off = o.offset;
          *size = o.size;
          *coll_size = hc.size;
          return Status::OK();
        }
      return Corrupt("global heap collection at {} has no object {}", coll, index);
    };
    {
      std::lock_guard<std::mutex> lk(fast_mu_);
      auto it = heap_cache_.find(coll);
      if (it != heap_cache_.end()) {
        *hold = it->second;
        return find(*it->second);
      }
    }
    const uint64_t fsize = raw_->size();
    if (coll == 0 || coll > fsize || fsize - coll < 32)
      return Corrupt("global heap address {} lies outside the {}-byte file", coll, fsize);
    uint8_t h[32];
    NextHeader& next = NextHeaderSlot();
    if (next.owner == id_ && next.addr == coll) {
      std::memcpy(h, next.bytes, sizeof h);  // read with the previous object
    } else {
      STOKER_RETURN_IF_ERROR(raw_->ReadExact(coll, sizeof h, h));
    }
    STOKER_ASSIGN_OR_RETURN(uint64_t cs, ParseHdf5HeapHeader(h, coll, fsize));
    *coll_size = cs;
    if (cs > kKeepCollection) {
      // A large collection: normally one object (one sample's bytes) right after the header.
      uint64_t oi, os;
      Hdf5FirstHeapObject(h, &oi, &os);
      if (oi == index && os <= cs - 32) {
        *off = coll + 32;
        *size = os;
        hold->reset();
        return Status::OK();
      }
      if (cs > kMaxWalkedCollection)
        return Corrupt("global heap collection at {} ({} bytes) has no object {} first", coll,
                       cs, index);
    }
    // Read the collection whole and list its objects (kept when small).
    auto hc = std::make_shared<HeapCollection>();
    hc->addr = coll;
    hc->size = cs;
    hc->bytes.resize(cs);
    STOKER_RETURN_IF_ERROR(raw_->ReadExact(coll, cs, hc->bytes.data()));
    hc->objs = ListHdf5HeapObjects(hc->bytes.data(), cs, coll);
    *hold = hc;
    if (cs <= kKeepCollection) {
      std::lock_guard<std::mutex> lk(fast_mu_);
      if (heap_cache_.size() >= kHeapCacheEntries) heap_cache_.clear();
      heap_cache_[coll] = hc;
    }
    return find(*hc);
  }

  // Row i of column k by direct reads. False: this row goes through libhdf5.
  Result<bool> FastRow(size_t k, uint64_t i, std::vector<uint8_t>* out) const {
    const FastCol& f = fast_[k];
    const Column& c = cols_[k];
    if (f.mode == FastCol::Mode::kOff) return false;
    std::shared_ptr<const std::vector<uint8_t>> hold;
    if (f.mode == FastCol::Mode::kRows && !f.cache) {
      uint64_t addr;
      if (f.contiguous) {
        addr = f.addr + i * f.unit;
      } else {
        uint64_t chunk = i / f.chunk_rows;
        STOKER_ASSIGN_OR_RETURN(addr, ChunkAddr(k, chunk));
        if (addr == kNoChunk) return false;
        addr += (i - chunk * f.chunk_rows) * f.unit;
      }
      out->resize(f.unit);
      Status st = raw_->ReadExact(addr, f.unit, out->data());
      if (!st.ok()) return st.WithContext(fmt::format("{}: record {} of '/{}'", path_, i, c.name));
      if (c.kind == Kind::kFixedString) {
        std::vector<uint8_t> row = *out;
        Extract(c, row.data(), out);
      }
      return true;
    }
    STOKER_ASSIGN_OR_RETURN(const uint8_t* row, CachedRow(k, i, &hold));
    if (!row) return false;
    if (f.mode == FastCol::Mode::kRows) {
      if (f.int_label) {
        uint64_t u = LoadLE(row, f.unit);
        int64_t v = static_cast<int64_t>(u);
        if (f.is_signed && f.unit < 8 && (u >> (8 * f.unit - 1)) & 1)
          v = static_cast<int64_t>(u | (~uint64_t{0} << (8 * f.unit)));
        out->resize(8);
        std::memcpy(out->data(), &v, 8);
      } else {
        Extract(c, row, out);
      }
      return true;
    }
    // Variable length: the on-disk reference, then the heap object.
    const Hdf5VlenRef ref = ParseHdf5VlenRef(row);
    const uint64_t count = ref.count, coll = ref.coll, index = ref.index;
    if (count == 0) {
      out->clear();
      return true;
    }
    uint64_t off = 0, size = 0;
    std::shared_ptr<const HeapCollection> hc;
    uint64_t cs = 0;
    Status hst = HeapObject(coll, index, &off, &size, &hc, &cs);
    if (hst.ok() && size != count * f.elem)
      hst = Corrupt("global heap object {} at {} holds {} bytes, the row refers to {}", index,
                    coll, size, count * f.elem);
    if (!hst.ok())
      return hst.WithContext(fmt::format("{}: record {} of '/{}' (damaged file)", path_, i,
                                         c.name));
    if (hc) {
      const uint8_t* p = hc->bytes.data() + (off - hc->addr);
      out->assign(p, p + size);
    } else {
      // A collection of its own (one large object): also read the rest of the collection
      // and the next one's header in the same pread. A sequential scan then finds the next
      // sample's header already read (the writer allocates collections one after another).
      uint64_t extra = coll + cs + 32 - (off + size);
      bool ahead = cs >= 32 + size && extra <= kReadAheadSlack && coll + cs + 32 <= raw_->size();
      out->resize(size + (ahead ? extra : 0));
      Status st = raw_->ReadExact(off, out->size(), out->data());
      if (!st.ok())
        return st.WithContext(fmt::format("{}: record {} of '/{}' (heap object at {})", path_, i,
                                          c.name, off));
      if (ahead) {
        NextHeader& next = NextHeaderSlot();
        next.owner = id_;
        next.addr = coll + cs;
        std::memcpy(next.bytes, out->data() + out->size() - 32, 32);
      }
      out->resize(size);
    }
    if (c.kind == Kind::kVlenString) {
      const void* nul = std::memchr(out->data(), 0, out->size());
      if (nul) out->resize(static_cast<const uint8_t*>(nul) - out->data());
    }
    return true;
  }

  Status Select(const Column& c, uint64_t i) const {
    hsize_t start[H5S_MAX_RANK] = {0}, count[H5S_MAX_RANK];
    start[0] = i;
    count[0] = 1;
    for (int d = 1; d < c.rank; ++d) count[d] = c.dims[d];
    if (H5Sselect_hyperslab(c.fspace, H5S_SELECT_SET, start, nullptr, count, nullptr) < 0)
      return Corrupt("{}: record {}: selecting row of '/{}': {}", path_, i, c.name,
                     H5ErrorString());
    return Status::OK();
  }

  Status ReadRaw(const Column& c, uint64_t i, void* dst) const {
    STOKER_RETURN_IF_ERROR(Select(c, i));
    if (H5Dread(c.dset, c.mtype, c.mspace, c.fspace, H5P_DEFAULT, dst) < 0)
      return Corrupt("{}: record {}: reading '/{}': {}", path_, i, c.name, H5ErrorString());
    return Status::OK();
  }

  // Copies one element (memory-type layout) into `out`.
  static void Extract(const Column& c, const uint8_t* elem, std::vector<uint8_t>* out) {
    switch (c.kind) {
      case Kind::kVlen: {
        hvl_t v;
        std::memcpy(&v, elem, sizeof v);
        const auto* p = static_cast<const uint8_t*>(v.p);
        if (p) out->assign(p, p + v.len * c.elem_size);
        else out->clear();
        return;
      }
      case Kind::kVlenString: {
        const char* str;
        std::memcpy(&str, elem, sizeof str);
        if (str) out->assign(str, str + std::strlen(str));
        else out->clear();
        return;
      }
      case Kind::kFixedString: {
        size_t n = c.elem_size;
        if (c.strpad == H5T_STR_SPACEPAD) {
          while (n > 0 && elem[n - 1] == ' ') --n;
        } else {
          const void* nul = std::memchr(elem, 0, n);
          if (nul) n = static_cast<const uint8_t*>(nul) - elem;
        }
        out->assign(elem, elem + n);
        return;
      }
      case Kind::kFixedArray:
      case Kind::kInt:
        out->assign(elem, elem + c.elem_size);
        return;
    }
  }

  Status ReadBlock(Column& c, uint64_t start, uint64_t count) const {
    hsize_t st[H5S_MAX_RANK] = {0}, cnt[H5S_MAX_RANK];
    st[0] = start;
    cnt[0] = count;
    int mrank = c.kind == Kind::kFixedArray ? c.rank : 1;
    for (int d = 1; d < c.rank; ++d) cnt[d] = c.dims[d];
    if (H5Sselect_hyperslab(c.fspace, H5S_SELECT_SET, st, nullptr, cnt, nullptr) < 0)
      return Corrupt("{}: records {}..{}: selecting rows of '/{}': {}", path_, start,
                     start + count, c.name, H5ErrorString());
    c.blk.resize(count * c.MemSize());
    c.blk_mspace = H5Screate_simple(mrank, cnt, nullptr);
    if (H5Dread(c.dset, c.mtype, c.blk_mspace, c.fspace, H5P_DEFAULT, c.blk.data()) < 0) {
      CloseId(&c.blk_mspace, H5Sclose);
      return Corrupt("{}: records {}..{}: reading '/{}': {}", path_, start, start + count,
                     c.name, H5ErrorString());
    }
    c.blk_start = start;
    c.blk_count = count;
    return Status::OK();
  }

  // One row of `c`: from the read-ahead block when it holds the row; a new block when
  // the access is sequential; else a single-row read.
  Status ReadRowLocked(Column& c, uint64_t i, std::vector<uint8_t>* out, bool sequential) const {
    size_t ms = c.MemSize();
    if (c.blk_count && i >= c.blk_start && i < c.blk_start + c.blk_count) {
      Extract(c, c.blk.data() + (i - c.blk_start) * ms, out);
      return Status::OK();
    }
    if (sequential) {
      c.DropBlock();
      // ~4 MiB of fixed rows, or 32 variable-length rows, per block.
      uint64_t rows = c.kind == Kind::kVlen || c.kind == Kind::kVlenString
                          ? 32
                          : std::max<uint64_t>(1, (4u << 20) / std::max<size_t>(1, ms));
      STOKER_RETURN_IF_ERROR(ReadBlock(c, i, std::min<uint64_t>(rows, n_ - i)));
      Extract(c, c.blk.data(), out);
      return Status::OK();
    }
    if (c.kind == Kind::kFixedArray) {
      out->resize(c.elem_size);
      return ReadRaw(c, i, out->data());
    }
    one_.resize(ms);
    STOKER_RETURN_IF_ERROR(ReadRaw(c, i, one_.data()));
    Extract(c, one_.data(), out);
    if (c.kind == Kind::kVlen || c.kind == Kind::kVlenString)
      H5Dvlen_reclaim(c.mtype, c.mspace, H5P_DEFAULT, one_.data());
    return Status::OK();
  }

  std::string path_;
  uint64_t n_ = 0;
  std::vector<ShardInfo> shards_;
  std::vector<std::string> skipped_;
  std::unique_ptr<RandomAccessFile> raw_;  // direct reads (FastCol)
  // Guarded by H5Mu(). cols_ is rebuilt only while pid_ does not match (a forked child).
  mutable hid_t file_ = -1;
  mutable std::vector<Column> cols_;
  mutable int key_col_ = -1, label_col_ = -1;
  mutable std::atomic<pid_t> pid_{0};  // set once the columns are open
  mutable pid_t file_pid_ = 0;         // the process that opened file_
  mutable std::vector<uint8_t> scratch_, one_;
  mutable std::atomic<uint64_t> last_{UINT64_MAX - 1};
  // Direct-read state: fast_ is fixed at open; its lazy parts and heap_cache_ are
  // guarded by fast_mu_ (taken after H5Mu() when both are held, never before).
  static constexpr uint64_t kKeepCollection = 64u << 10;
  static constexpr size_t kHeapCacheEntries = 4096;
  static constexpr uint64_t kReadAheadSlack = 8192;
  static constexpr uint64_t kMaxWalkedCollection = 64ull << 20;
  // The global heap collection header that follows the last large object this thread
  // read (of the dataset with id `owner`); checked like any header before use.
  struct NextHeader {
    uint64_t owner = 0, addr = 0;
    uint8_t bytes[32];
  };
  static NextHeader& NextHeaderSlot() {
    thread_local NextHeader slot;
    return slot;
  }
  const uint64_t id_ = NextReaderId();
  mutable std::mutex fast_mu_;
  mutable std::vector<FastCol> fast_;
  mutable std::unordered_map<uint64_t, std::shared_ptr<const HeapCollection>> heap_cache_;
};

class Hdf5Writer final : public DatasetWriter {
 public:
  static Result<std::unique_ptr<DatasetWriter>> Open(const std::string& path,
                                                     const WriterOptions& opts) {
    std::unique_ptr<Hdf5Writer> w(new Hdf5Writer());
    w->path_ = path;
    w->partial_ = path + ".partial";
    w->env_ = opts.env ? opts.env : Env::Default();
    std::string dir = DirName(path);
    if (!dir.empty() && dir != ".") STOKER_RETURN_IF_ERROR(w->env_->CreateDirs(dir));
    std::lock_guard<std::mutex> lk(H5Mu());
    H5InitLocked();
    w->file_ = H5Fcreate(w->partial_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (w->file_ < 0)
      return IOError("{}: cannot create HDF5 file: {}", w->partial_, H5ErrorString());
    return std::unique_ptr<DatasetWriter>(std::move(w));
  }

  ~Hdf5Writer() override {
    std::lock_guard<std::mutex> lk(H5Mu());
    CloseAllLocked();
  }

  Status Write(const Sample& s) override {
    if (closed_) return InvalidArgument("{}: Write after Close", path_);
    std::lock_guard<std::mutex> lk(H5Mu());
    if (count_ == 0 && buffered_ == 0) STOKER_RETURN_IF_ERROR(CreateLocked(s));
    if (s.num_fields != names_.size())
      return InvalidArgument("{}: sample {} ('{}') has {} fields, the first sample had {} "
                             "(HDF5 needs the same fields in every sample)",
                             path_, count_ + buffered_, s.key, s.num_fields, names_.size());
    if (s.key.find('\0') != std::string::npos)
      return InvalidArgument("{}: sample {}: key contains a NUL byte", path_, count_ + buffered_);
    keys_.push_back(s.key);
    labels_.push_back(s.label);
    for (size_t f = 0; f < names_.size(); ++f) {
      const Field* fld = s.Find(names_[f]);
      if (!fld)
        return InvalidArgument("{}: sample {} ('{}') has no field '{}' (the first sample did)",
                               path_, count_ + buffered_, s.key, names_[f]);
      data_[f].push_back(fld->data);
      buffered_bytes_ += fld->data.size();
    }
    ++buffered_;
    if (buffered_ >= kChunk || buffered_bytes_ >= (64u << 20)) return FlushLocked();
    return Status::OK();
  }

  Status Close() override {
    if (closed_) return Status::OK();
    closed_ = true;
    {
      std::lock_guard<std::mutex> lk(H5Mu());
      if (count_ == 0 && buffered_ == 0) {
        Sample empty;
        STOKER_RETURN_IF_ERROR(CreateLocked(empty));
      }
      STOKER_RETURN_IF_ERROR(FlushLocked());
      if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0)
        return IOError("{}: flushing: {}", partial_, H5ErrorString());
      CloseAllLocked();
    }
    STOKER_RETURN_IF_ERROR(env_->RenameFile(partial_, path_));
    STOKER_ASSIGN_OR_RETURN(FileInfo info, env_->Stat(path_));
    shards_.push_back({path_, count_, info.size});
    return Status::OK();
  }

  const std::vector<WrittenShard>& shards() const override { return shards_; }

 private:
  static constexpr hsize_t kChunk = 1024;
  Hdf5Writer() = default;

  void CloseAllLocked() {
    for (hid_t& d : dsets_) CloseId(&d, H5Dclose);
    CloseId(&key_ds_, H5Dclose);
    CloseId(&label_ds_, H5Dclose);
    CloseId(&str_type_, H5Tclose);
    CloseId(&vlen_type_, H5Tclose);
    CloseId(&file_, H5Fclose);
  }

  Result<hid_t> MakeDataset(const std::string& name, hid_t ftype) {
    hsize_t dims[1] = {0}, maxdims[1] = {H5S_UNLIMITED}, chunk[1] = {kChunk};
    hid_t space = H5Screate_simple(1, dims, maxdims);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, chunk);
    hid_t d = H5Dcreate2(file_, name.c_str(), ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(space);
    if (d < 0)
      return IOError("{}: creating dataset '/{}': {}", partial_, name, H5ErrorString());
    return d;
  }

  Status CreateLocked(const Sample& s) {
    str_type_ = H5Tcopy(H5T_C_S1);
    H5Tset_size(str_type_, H5T_VARIABLE);
    H5Tset_cset(str_type_, H5T_CSET_UTF8);
    vlen_type_ = H5Tvlen_create(H5T_NATIVE_UINT8);
    hid_t file_vlen = H5Tvlen_create(H5T_STD_U8LE);
    STOKER_ASSIGN_OR_RETURN(key_ds_, MakeDataset("key", str_type_));
    STOKER_ASSIGN_OR_RETURN(label_ds_, MakeDataset("label", H5T_STD_I64LE));
    for (size_t i = 0; i < s.num_fields; ++i) {
      const std::string& n = s.fields[i].name;
      if (n.empty() || n == "key" || n == "label" || n.find('/') != std::string::npos ||
          n == "." || std::find(names_.begin(), names_.end(), n) != names_.end()) {
        H5Tclose(file_vlen);
        return InvalidArgument("{}: field name '{}' cannot be an HDF5 dataset name (empty, "
                               "'key', 'label', contains '/', or repeated)",
                               path_, n);
      }
      names_.push_back(n);
      auto d = MakeDataset(n, file_vlen);
      if (!d.ok()) {
        H5Tclose(file_vlen);
        return d.status();
      }
      dsets_.push_back(*d);
    }
    H5Tclose(file_vlen);
    data_.resize(names_.size());
    return Status::OK();
  }

  Status Append(hid_t d, const std::string& name, hid_t mtype, const void* buf) {
    hsize_t total[1] = {count_ + buffered_}, start[1] = {count_}, n[1] = {buffered_};
    if (H5Dset_extent(d, total) < 0)
      return IOError("{}: extending '/{}': {}", partial_, name, H5ErrorString());
    hid_t fs = H5Dget_space(d);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, nullptr, n, nullptr);
    hid_t ms = H5Screate_simple(1, n, nullptr);
    herr_t rc = H5Dwrite(d, mtype, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    if (rc < 0) return IOError("{}: writing '/{}': {}", partial_, name, H5ErrorString());
    return Status::OK();
  }

  Status FlushLocked() {
    if (buffered_ == 0) return Status::OK();
    std::vector<const char*> kp(buffered_);
    for (size_t i = 0; i < buffered_; ++i) kp[i] = keys_[i].c_str();
    STOKER_RETURN_IF_ERROR(Append(key_ds_, "key", str_type_, kp.data()));
    STOKER_RETURN_IF_ERROR(Append(label_ds_, "label", H5T_NATIVE_INT64, labels_.data()));
    std::vector<hvl_t> v(buffered_);
    for (size_t f = 0; f < names_.size(); ++f) {
      for (size_t i = 0; i < buffered_; ++i)
        v[i] = hvl_t{data_[f][i].size(), data_[f][i].empty() ? nullptr : data_[f][i].data()};
      STOKER_RETURN_IF_ERROR(Append(dsets_[f], names_[f], vlen_type_, v.data()));
      data_[f].clear();
    }
    count_ += buffered_;
    buffered_ = 0;
    buffered_bytes_ = 0;
    keys_.clear();
    labels_.clear();
    return Status::OK();
  }

  std::string path_, partial_;
  Env* env_ = nullptr;
  hid_t file_ = -1, key_ds_ = -1, label_ds_ = -1, str_type_ = -1, vlen_type_ = -1;
  std::vector<std::string> names_;
  std::vector<hid_t> dsets_;
  std::vector<std::string> keys_;
  std::vector<int64_t> labels_;
  std::vector<std::vector<std::vector<uint8_t>>> data_;
  uint64_t count_ = 0, buffered_ = 0, buffered_bytes_ = 0;
  bool closed_ = false;
  std::vector<WrittenShard> shards_;
};

}  // namespace

Result<std::unique_ptr<Dataset>> OpenHdf5Dataset(const std::string& path,
                                                 const DatasetOptions& opts) {
  STOKER_ASSIGN_OR_RETURN(auto ds, Hdf5Dataset::Open(path, opts));
  return std::unique_ptr<Dataset>(std::move(ds));
}

Result<std::unique_ptr<DatasetWriter>> OpenHdf5Writer(const std::string& path,
                                                      const WriterOptions& opts) {
  return Hdf5Writer::Open(path, opts);
}

int Hdf5DirectColumns(const Dataset& ds) {
  const auto* h = dynamic_cast<const Hdf5Dataset*>(&ds);
  return h ? static_cast<int>(h->fast_columns()) : -1;
}

#else  // !STOKER_HAVE_HDF5

constexpr MissingLibrary kMissingHdf5 = {"hdf5", "libhdf5", "install libhdf5-dev and reconfigure"};

bool Hdf5Available() { return false; }
Result<std::unique_ptr<Dataset>> OpenHdf5Dataset(const std::string& path,
                                                 const DatasetOptions&) {
  return FormatUnavailable(kMissingHdf5, path);
}
Result<std::unique_ptr<DatasetWriter>> OpenHdf5Writer(const std::string& path,
                                                      const WriterOptions&) {
  return FormatUnavailable(kMissingHdf5, path);
}

int Hdf5DirectColumns(const Dataset&) { return -1; }

#endif

void RegisterHdf5Format() {
  RegisterDatasetFormat({"hdf5", {"h5", "hdf5"}, OpenHdf5Dataset,
                         "HDF5 file: root datasets /key, /label and one per field"});
  RegisterDatasetWriter("hdf5", OpenHdf5Writer);
}

}  // namespace stoker
