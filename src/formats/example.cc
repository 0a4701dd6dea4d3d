#include "formats/example.h"

#include <cstdint>
#include <cstring>

namespace stoker {
namespace {

// A bounded cursor over a protobuf message; `base` is the message's offset in the record.
struct Reader {
  const uint8_t* p;
  size_t n;
  size_t pos = 0;
  size_t base = 0;

  bool Varint(uint64_t* v) {
    uint64_t r = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos >= n) return false;
      uint8_t b = p[pos++];
      if (shift == 63 && b > 1) return false;
      r |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        *v = r;
        return true;
      }
    }
    return false;
  }
  bool Len(size_t* off, size_t* len) {
    uint64_t l;
    if (!Varint(&l) || l > n - pos) return false;
    *off = pos;
    *len = static_cast<size_t>(l);
    pos += *len;
    return true;
  }
  // Skips a field of wire type wt.
  bool Skip(uint32_t wt) {
    uint64_t v;
    size_t o, l;
    switch (wt) {
      case 0: return Varint(&v);
      case 1: if (n - pos < 8) return false; pos += 8; return true;
      case 2: return Len(&o, &l);
      case 5: if (n - pos < 4) return false; pos += 4; return true;
      default: return false;  // groups (3, 4) and reserved types
    }
  }
  Reader Sub(size_t off, size_t len) const { return Reader{p + off, len, 0, base + off}; }
  size_t at() const { return base + pos; }
};

Status Bad(const char* what, size_t off) {
  return Corrupt("malformed tf.train.Example: {} at byte {}", what, off);
}

Status DecodeFeature(Reader r, ExampleFeature* f) {
  while (r.pos < r.n) {
    uint64_t tag;
    size_t at = r.at();
    if (!r.Varint(&tag)) return Bad("bad tag in Feature", at);
    uint32_t field = static_cast<uint32_t>(tag >> 3), wt = tag & 7;
    if (field < 1 || field > 3 || wt != 2) {
      if (!r.Skip(wt)) return Bad("bad field in Feature", at);
      continue;
    }
    size_t off, len;
    if (!r.Len(&off, &len)) return Bad("list runs past the end", at);
    Reader list = r.Sub(off, len);
    f->bytes.clear();
    f->floats.clear();
    f->ints.clear();
    if (field == 1) {
      f->kind = ExampleFeature::Kind::kBytes;
      while (list.pos < list.n) {
        size_t la = list.at();
        if (!list.Varint(&tag)) return Bad("bad tag in BytesList", la);
        if (tag == ((1 << 3) | 2)) {
          size_t vo, vl;
          if (!list.Len(&vo, &vl)) return Bad("bytes value runs past the end", la);
          f->bytes.emplace_back(list.base + vo, vl);
        } else if (!list.Skip(tag & 7)) {
          return Bad("bad field in BytesList", la);
        }
      }
    } else if (field == 2) {
      f->kind = ExampleFeature::Kind::kFloat;
      while (list.pos < list.n) {
        size_t la = list.at();
        if (!list.Varint(&tag)) return Bad("bad tag in FloatList", la);
        if (tag == ((1 << 3) | 2)) {  // packed
          size_t vo, vl;
          if (!list.Len(&vo, &vl) || vl % 4 != 0) return Bad("bad packed FloatList", la);
          size_t k = f->floats.size();
          f->floats.resize(k + vl / 4);
          if (vl) std::memcpy(f->floats.data() + k, list.p + vo, vl);  // empty: data() may be null
        } else if (tag == ((1 << 3) | 5)) {  // unpacked fixed32
          if (list.n - list.pos < 4) return Bad("truncated float", la);
          float v;
          std::memcpy(&v, list.p + list.pos, 4);
          list.pos += 4;
          f->floats.push_back(v);
        } else if (!list.Skip(tag & 7)) {
          return Bad("bad field in FloatList", la);
        }
      }
    } else {
      f->kind = ExampleFeature::Kind::kInt64;
      while (list.pos < list.n) {
        size_t la = list.at();
        if (!list.Varint(&tag)) return Bad("bad tag in Int64List", la);
        uint64_t v;
        if (tag == ((1 << 3) | 2)) {  // packed
          size_t vo, vl;
          if (!list.Len(&vo, &vl)) return Bad("bad packed Int64List", la);
          Reader pk = list.Sub(vo, vl);
          while (pk.pos < pk.n) {
            size_t pa = pk.at();
            if (!pk.Varint(&v)) return Bad("bad varint in packed Int64List", pa);
            f->ints.push_back(static_cast<int64_t>(v));
          }
        } else if (tag == ((1 << 3) | 0)) {
          if (!list.Varint(&v)) return Bad("bad varint in Int64List", la);
          f->ints.push_back(static_cast<int64_t>(v));
        } else if (!list.Skip(tag & 7)) {
          return Bad("bad field in Int64List", la);
        }
      }
    }
  }
  return Status::OK();
}

Status DecodeEntry(Reader r, ExampleFeature* f) {
  bool have_value = false;
  size_t voff = 0, vlen = 0;
  while (r.pos < r.n) {
    uint64_t tag;
    size_t at = r.at();
    if (!r.Varint(&tag)) return Bad("bad tag in feature map entry", at);
    if (tag == ((1 << 3) | 2)) {
      size_t o, l;
      if (!r.Len(&o, &l)) return Bad("feature name runs past the end", at);
      f->name.assign(reinterpret_cast<const char*>(r.p + o), l);
    } else if (tag == ((2 << 3) | 2)) {
      if (!r.Len(&voff, &vlen)) return Bad("feature value runs past the end", at);
      have_value = true;
    } else if (!r.Skip(tag & 7)) {
      return Bad("bad field in feature map entry", at);
    }
  }
  if (have_value) return DecodeFeature(r.Sub(voff, vlen), f);
  return Status::OK();
}

}  // namespace

Status DecodeExample(const uint8_t* data, size_t n, std::vector<ExampleFeature>* out) {
  out->clear();
  Reader ex{data, n};
  while (ex.pos < ex.n) {
    uint64_t tag;
    size_t at = ex.at();
    if (!ex.Varint(&tag)) return Bad("bad tag in Example", at);
    if (tag != ((1 << 3) | 2)) {
      if (!ex.Skip(tag & 7)) return Bad("bad field in Example", at);
      continue;
    }
    size_t fo, fl;
    if (!ex.Len(&fo, &fl)) return Bad("Features runs past the end", at);
    Reader feats = ex.Sub(fo, fl);
    while (feats.pos < feats.n) {
      size_t fa = feats.at();
      if (!feats.Varint(&tag)) return Bad("bad tag in Features", fa);
      if (tag != ((1 << 3) | 2)) {
        if (!feats.Skip(tag & 7)) return Bad("bad field in Features", fa);
        continue;
      }
      size_t eo, el;
      if (!feats.Len(&eo, &el)) return Bad("feature map entry runs past the end", fa);
      ExampleFeature f;
      STOKER_RETURN_IF_ERROR(DecodeEntry(feats.Sub(eo, el), &f));
      bool replaced = false;
      for (auto& g : *out)
        if (g.name == f.name) {
          g = std::move(f);
          replaced = true;
          break;
        }
      if (!replaced) out->push_back(std::move(f));
    }
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------------------

namespace {
size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}
void PutVarint(std::vector<uint8_t>* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<uint8_t>(v));
}
size_t LenField(size_t len) { return 1 + VarintSize(len) + len; }
}  // namespace

void ExampleBuilder::AddBytes(const std::string& name, const uint8_t* p, size_t n) {
  Item it;
  it.name = name;
  it.kind = ExampleFeature::Kind::kBytes;
  it.p = p;
  it.n = n;
  items_.push_back(std::move(it));
}
void ExampleBuilder::AddInt64(const std::string& name, std::vector<int64_t> v) {
  Item it;
  it.name = name;
  it.kind = ExampleFeature::Kind::kInt64;
  it.ints = std::move(v);
  items_.push_back(std::move(it));
}
void ExampleBuilder::AddFloat(const std::string& name, std::vector<float> v) {
  Item it;
  it.name = name;
  it.kind = ExampleFeature::Kind::kFloat;
  it.floats = std::move(v);
  items_.push_back(std::move(it));
}

void ExampleBuilder::SerializeTo(std::vector<uint8_t>* out) const {
  // Sizes inside out: list → Feature → map entry → Features.
  std::vector<size_t> list_len(items_.size()), feat_len(items_.size()), entry_len(items_.size());
  size_t features = 0;
  for (size_t i = 0; i < items_.size(); ++i) {
    const Item& it = items_[i];
    if (it.kind == ExampleFeature::Kind::kBytes) {
      list_len[i] = LenField(it.n);
    } else if (it.kind == ExampleFeature::Kind::kInt64) {
      size_t packed = 0;
      for (int64_t v : it.ints) packed += VarintSize(static_cast<uint64_t>(v));
      list_len[i] = it.ints.empty() ? 0 : LenField(packed);
    } else {
      list_len[i] = it.floats.empty() ? 0 : LenField(4 * it.floats.size());
    }
    feat_len[i] = LenField(list_len[i]);
    entry_len[i] = LenField(it.name.size()) + LenField(feat_len[i]);
    features += LenField(entry_len[i]);
  }
  out->reserve(out->size() + LenField(features));
  out->push_back((1 << 3) | 2);
  PutVarint(out, features);
  for (size_t i = 0; i < items_.size(); ++i) {
    const Item& it = items_[i];
    out->push_back((1 << 3) | 2);
    PutVarint(out, entry_len[i]);
    out->push_back((1 << 3) | 2);
    PutVarint(out, it.name.size());
    out->insert(out->end(), it.name.begin(), it.name.end());
    out->push_back((2 << 3) | 2);
    PutVarint(out, feat_len[i]);
    uint32_t kind_field = it.kind == ExampleFeature::Kind::kBytes   ? 1
                          : it.kind == ExampleFeature::Kind::kFloat ? 2
                                                                    : 3;
    out->push_back(static_cast<uint8_t>((kind_field << 3) | 2));
    PutVarint(out, list_len[i]);
    if (it.kind == ExampleFeature::Kind::kBytes) {
      out->push_back((1 << 3) | 2);
      PutVarint(out, it.n);
      out->insert(out->end(), it.p, it.p + it.n);
    } else if (it.kind == ExampleFeature::Kind::kInt64 && !it.ints.empty()) {
      size_t packed = 0;
      for (int64_t v : it.ints) packed += VarintSize(static_cast<uint64_t>(v));
      out->push_back((1 << 3) | 2);
      PutVarint(out, packed);
      for (int64_t v : it.ints) PutVarint(out, static_cast<uint64_t>(v));
    } else if (it.kind == ExampleFeature::Kind::kFloat && !it.floats.empty()) {
      out->push_back((1 << 3) | 2);
      PutVarint(out, 4 * it.floats.size());
      size_t k = out->size();
      out->resize(k + 4 * it.floats.size());
      std::memcpy(out->data() + k, it.floats.data(), 4 * it.floats.size());
    }
  }
}

}  // namespace stoker
