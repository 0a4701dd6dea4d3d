// Parquet page headers read without Arrow: a small reader of the Thrift compact protocol
// and parquet-format's PageHeader (the fields the direct page reads of parquet_dataset.cc
// need). Pure functions over bytes, no Arrow dependency; fuzzed by fuzz/parquet_thrift_fuzz.cc.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker {

struct PageHeaderInfo {
  int32_t type = -1;  // 0 DATA_PAGE, 2 DICTIONARY_PAGE, 3 DATA_PAGE_V2
  int32_t uncompressed_size = -1, compressed_size = -1;
  int32_t num_values = -1, encoding = -1;
  size_t header_len = 0;
};

// Thrift compact protocol over p[0, n): every read is bounds-checked and returns false
// when the bytes end or are malformed (nesting deeper than 16 is malformed).
class CompactReader {
 public:
  CompactReader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= n_) return false;
      uint8_t b = p_[pos_++];
      *v |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  bool ZigZag(int64_t* v) {
    uint64_t u;
    if (!Varint(&u)) return false;
    *v = static_cast<int64_t>(u >> 1) ^ -static_cast<int64_t>(u & 1);
    return true;
  }
  bool Skip(size_t k) {
    if (n_ - pos_ < k) return false;
    pos_ += k;
    return true;
  }
  bool Byte(uint8_t* b) {
    if (pos_ >= n_) return false;
    *b = p_[pos_++];
    return true;
  }
  // Skips one value of compact type `t`.
  bool SkipValue(int t, int depth) {
    if (depth > 16) return false;
    uint64_t u;
    switch (t) {
      case 1: case 2: return true;           // bool in a field header
      case 3: return Skip(1);                // byte
      case 4: case 5: case 6: return Varint(&u);
      case 7: return Skip(8);                // double
      case 8: return Varint(&u) && Skip(u);  // binary
      case 9: case 10: {                     // list, set
        uint8_t h;
        if (!Byte(&h)) return false;
        uint64_t size = h >> 4;
        int et = h & 0x0f;
        if (size == 15 && !Varint(&size)) return false;
        for (uint64_t i = 0; i < size; ++i)
          if (!Element(et, depth)) return false;
        return true;
      }
      case 11: {  // map
        uint64_t size;
        if (!Varint(&size)) return false;
        if (size == 0) return true;
        uint8_t kv;
        if (!Byte(&kv)) return false;
        for (uint64_t i = 0; i < size; ++i)
          if (!Element(kv >> 4, depth) || !Element(kv & 0x0f, depth)) return false;
        return true;
      }
      case 12: return Struct(depth + 1, [](int16_t, int) { return 0; });
      default: return false;
    }
  }
  // One element of a list, set or map: there a bool is a whole byte (in a struct field it
  // lives in the field header), so every element consumes input and a huge declared size
  // cannot loop without reading (a map of bools did: found by parquet_thrift_fuzz).
  bool Element(int t, int depth) { return t == 1 || t == 2 ? Skip(1) : SkipValue(t, depth + 1); }
  // Walks a struct; on_field(id, type) returns 1 if it consumed the value, 0 to skip it,
  // -1 on error.
  template <typename F>
  bool Struct(int depth, F on_field) {
    int16_t last = 0;
    for (;;) {
      uint8_t h;
      if (!Byte(&h)) return false;
      if (h == 0) return true;
      int t = h & 0x0f;
      int16_t id;
      if (h >> 4) {
        id = static_cast<int16_t>(last + (h >> 4));
      } else {
        int64_t v;
        if (!ZigZag(&v)) return false;
        id = static_cast<int16_t>(v);
      }
      last = id;
      int r = on_field(id, t);
      if (r < 0) return false;
      if (r == 0 && !SkipValue(t, depth)) return false;
    }
  }
  bool I32(int t, int32_t* v) {
    int64_t x;
    if (t != 5 || !ZigZag(&x)) return false;
    *v = static_cast<int32_t>(x);
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

// Parses a PageHeader at the start of p[0, n). False if it does not fit or is malformed.
bool ParsePageHeader(const uint8_t* p, size_t n, PageHeaderInfo* h);

}  // namespace stoker
