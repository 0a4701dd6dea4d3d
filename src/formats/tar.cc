#include "formats/tar.h"

#include <cstdint>
#include <algorithm>
#include <cstring>

namespace stoker {
namespace {

constexpr uint64_t kMaxLongName = 64 << 10;   // GNU 'L' payload
constexpr uint64_t kMaxPaxHeader = 1 << 20;   // pax 'x' payload

// Offsets of the ustar header fields.
constexpr size_t kName = 0, kNameLen = 100;
constexpr size_t kMode = 100, kUid = 108, kGid = 116;
constexpr size_t kSize = 124, kSizeLen = 12;
constexpr size_t kMtime = 136, kChksum = 148, kChksumLen = 8;
constexpr size_t kType = 156;
constexpr size_t kMagic = 257, kVersion = 263;
constexpr size_t kPrefix = 345, kPrefixLen = 155;

bool AllZero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

std::string CField(const uint8_t* p, size_t n) {
  size_t len = 0;
  while (len < n && p[len]) ++len;
  return std::string(reinterpret_cast<const char*>(p), len);
}

// Octal (space/NUL padded) or GNU base-256. False if malformed.
bool ParseNumber(const uint8_t* p, size_t n, uint64_t* out) {
  if (p[0] & 0x80) {
    if (p[0] == 0xff) return false;  // negative
    uint64_t v = p[0] & 0x7f;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 56) return false;
      v = (v << 8) | p[i];
    }
    *out = v;
    return true;
  }
  size_t i = 0;
  while (i < n && p[i] == ' ') ++i;
  uint64_t v = 0;
  bool any = false;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v >> 60) return false;
    v = v * 8 + (p[i] - '0');
    any = true;
  }
  for (; i < n; ++i)
    if (p[i] != ' ' && p[i] != 0) return false;
  (void)any;  // an all-blank field reads as 0, as GNU tar does
  *out = v;
  return true;
}

bool ChecksumOk(const uint8_t* h) {
  uint64_t stored;
  if (!ParseNumber(h + kChksum, kChksumLen, &stored)) return false;
  uint64_t usum = 0;
  int64_t ssum = 0;
  for (size_t i = 0; i < kTarBlock; ++i) {
    uint8_t b = (i >= kChksum && i < kChksum + kChksumLen) ? ' ' : h[i];
    usum += b;
    ssum += static_cast<int8_t>(b);
  }
  return stored == usum || static_cast<int64_t>(stored) == ssum;
}

uint64_t RoundUp(uint64_t n) { return (n + kTarBlock - 1) / kTarBlock * kTarBlock; }

// Parses pax records "<len> <key>=<value>\n".
Status ParsePax(const std::string& file, uint64_t offset, const std::string& data,
                std::string* path, bool* has_size, uint64_t* size) {
  size_t pos = 0;
  while (pos < data.size()) {
    if (data[pos] == '\0') break;  // some writers pad with NULs
    size_t sp = data.find(' ', pos);
    if (sp == std::string::npos || sp == pos || sp - pos > 12)
      return Corrupt("{}: malformed pax header at offset {}", file, offset);
    uint64_t len = 0;
    for (size_t i = pos; i < sp; ++i) {
      if (data[i] < '0' || data[i] > '9')
        return Corrupt("{}: malformed pax record length at offset {}", file, offset);
      len = len * 10 + (data[i] - '0');
    }
    if (len <= sp - pos + 1 || pos + len > data.size() || data[pos + len - 1] != '\n')
      return Corrupt("{}: malformed pax record at offset {}", file, offset);
    std::string rec = data.substr(sp + 1, pos + len - 1 - (sp + 1));
    size_t eq = rec.find('=');
    if (eq == std::string::npos)
      return Corrupt("{}: pax record without '=' at offset {}", file, offset);
    std::string key = rec.substr(0, eq), value = rec.substr(eq + 1);
    if (key == "path") {
      *path = value;
    } else if (key == "size") {
      uint64_t v = 0;
      if (value.empty() || value.size() > 19 ||
          value.find_first_not_of("0123456789") != std::string::npos)
        return Corrupt("{}: bad pax size '{}' at offset {}", file, value, offset);
      for (char c : value) v = v * 10 + (c - '0');
      *size = v;
      *has_size = true;
    }
    pos += len;
  }
  return Status::OK();
}

}  // namespace

Result<uint64_t> ReadTarHeaderSize(const RandomAccessFile& file, uint64_t offset) {
  uint8_t h[kTarBlock];
  STOKER_RETURN_IF_ERROR(file.ReadExact(offset, kTarBlock, h));
  if (AllZero(h, kTarBlock) || !ChecksumOk(h))
    return Corrupt("{}: no valid tar header at offset {}", file.path(), offset);
  uint64_t size;
  if (!ParseNumber(h + kSize, kSizeLen, &size))
    return Corrupt("{}: bad size field in tar header at offset {}", file.path(), offset);
  return size;
}

TarScan ScanTar(const RandomAccessFile& file) {
  TarScan scan;
  const std::string& path = file.path();
  const uint64_t fsize = file.size();
  // A stream of unknown length (a gzip-compressed shard): the end is where reads stop.
  const bool stream = fsize == kTarUnknownSize;
  uint64_t off = 0;
  uint64_t member_start = 0;  // first header of the current member (pax/L included)
  bool pending = false;       // a pax or L header is waiting for its member
  std::string long_name, pax_path;
  bool pax_has_size = false;
  uint64_t pax_size = 0;
  uint8_t h[kTarBlock];
  auto fail = [&](Status st, uint64_t at) {
    scan.error = std::move(st);
    scan.error_offset = at;
    return scan;
  };
  while (off < fsize) {
    uint64_t avail = fsize - off;
    size_t want = static_cast<size_t>(std::min<uint64_t>(avail, kTarBlock));
    auto r = file.ReadAt(off, want, h);
    if (!r.ok()) return fail(r.status(), off);
    if (*r < want) {
      if (!stream) return fail(Corrupt("{}: short read at offset {}", path, off), off);
      if (*r == 0) {
        if (pending)
          return fail(Corrupt("{}: extended header at end of archive without a member", path),
                      off);
        break;  // end of the stream on a block boundary
      }
      want = *r;
    }
    if (want < kTarBlock) {
      if (AllZero(h, want) && !pending) break;  // zero padding cut short: still the end
      return fail(Corrupt("{}: truncated tar header at offset {} ({} of 512 bytes)", path, off,
                          want),
                  off);
    }
    if (AllZero(h, kTarBlock)) {
      if (pending)
        return fail(Corrupt("{}: extended header without a member at offset {}", path, off),
                    off);
      break;  // end-of-archive marker
    }
    if (!ChecksumOk(h))
      return fail(Corrupt("{}: bad tar header checksum at offset {}", path, off), off);
    uint64_t size;
    if (!ParseNumber(h + kSize, kSizeLen, &size))
      return fail(Corrupt("{}: bad size field in tar header at offset {}", path, off), off);
    char type = static_cast<char>(h[kType]);
    if (!pending) member_start = off;
    uint64_t data_off = off + kTarBlock;
    if (type == 'L' || type == 'x' || type == 'g' || type == 'K') {
      uint64_t limit = type == 'L' || type == 'K' ? kMaxLongName : kMaxPaxHeader;
      if (size > limit)
        return fail(Corrupt("{}: extended header of {} bytes at offset {} is too large", path,
                            size, off),
                    off);
      if (!stream && data_off + size > fsize)
        return fail(Corrupt("{}: truncated extended header at offset {}", path, off), off);
      std::string data(size, '\0');
      auto rd = file.ReadAt(data_off, size, reinterpret_cast<uint8_t*>(data.data()));
      if (!rd.ok()) return fail(rd.status(), data_off);
      if (*rd < size)
        return fail(stream ? Corrupt("{}: truncated extended header at offset {}", path, off)
                           : Corrupt("{}: short read at offset {}", path, data_off),
                    off);
      if (type == 'L') {
        long_name = CField(reinterpret_cast<const uint8_t*>(data.data()), data.size());
        pending = true;
      } else if (type == 'x') {
        Status st = ParsePax(path, off, data, &pax_path, &pax_has_size, &pax_size);
        if (!st.ok()) return fail(st, off);
        pending = true;
      } else if (type == 'K') {
        pending = true;  // long link name: irrelevant for regular members
      }
      off = data_off + RoundUp(size);
      continue;
    }
    // A real member header.
    if (pax_has_size) size = pax_size;
    std::string name;
    if (!pax_path.empty()) {
      name = pax_path;
    } else if (!long_name.empty()) {
      name = long_name;
    } else {
      name = CField(h + kName, kNameLen);
      if (std::memcmp(h + kMagic, "ustar\0", 6) == 0) {  // POSIX ustar: prefix field
        std::string prefix = CField(h + kPrefix, kPrefixLen);
        if (!prefix.empty()) name = prefix + "/" + name;
      }
    }
    pending = false;
    long_name.clear();
    pax_path.clear();
    pax_has_size = false;
    // GNU tar sets a size for some non-regular types (hard links have 0); payloads of
    // directories etc. are skipped by size like any other.
    bool regular = type == '0' || type == '\0' || type == '7';
    if (regular && type == '\0' && !name.empty() && name.back() == '/') regular = false;
    if (stream && size > 0 && data_off + size > data_off) {
      // Nothing says how long the stream is: read the payload's last byte (decompressing
      // up to it) to know the member is complete.
      uint8_t last;
      auto got = file.ReadAt(data_off + size - 1, 1, &last);
      if (!got.ok()) {
        scan.damaged_name = name;
        return fail(got.status().WithContext(fmt::format("{}: member '{}'", path, name)),
                    member_start);
      }
      if (*got == 0) {
        uint64_t end = file.size();
        scan.damaged_name = name;
        return fail(Corrupt("{}: member '{}' at offset {} is truncated: needs {} bytes, {} left",
                            path, name, member_start, size,
                            end != kTarUnknownSize && end > data_off ? end - data_off : 0),
                    member_start);
      }
    } else if (data_off + size > fsize || data_off + size < data_off) {
      scan.damaged_name = name;
      return fail(Corrupt("{}: member '{}' at offset {} is truncated: needs {} bytes, {} left",
                          path, name, member_start, size,
                          fsize > data_off ? fsize - data_off : 0),
                  member_start);
    }
    if (regular) scan.members.push_back({std::move(name), member_start, data_off, size});
    off = data_off + RoundUp(size);
  }
  if (pending)
    scan.error = Corrupt("{}: extended header at end of archive without a member", path);
  return scan;
}

// ---------------------------------------------------------------------------------------

namespace {
void PutOctal(uint8_t* p, size_t n, uint64_t v) {
  // n-1 octal digits and a NUL, or base-256 when it does not fit.
  uint64_t max = 1;
  for (size_t i = 0; i + 1 < n; ++i) max *= 8;
  if (v < max) {
    p[n - 1] = 0;
    for (size_t i = n - 1; i-- > 0;) {
      p[i] = static_cast<uint8_t>('0' + (v & 7));
      v >>= 3;
    }
  } else {
    for (size_t i = n; i-- > 1;) {
      p[i] = static_cast<uint8_t>(v & 0xff);
      v >>= 8;
    }
    p[0] = 0x80;
  }
}
// name = prefix "/" rest with prefix <= 155 and 0 < rest <= 100 bytes.
bool SplitUstar(const std::string& name, std::string* prefix, std::string* rest) {
  for (size_t cut = std::min(name.size(), kPrefixLen + 1); cut-- > 0;) {
    if (name[cut] != '/') continue;
    size_t tail = name.size() - cut - 1;
    if (cut == 0 || tail == 0 || tail > kNameLen) return false;
    *prefix = name.substr(0, cut);
    *rest = name.substr(cut + 1);
    return true;
  }
  return false;
}
}  // namespace

Status TarWriter::Pad(uint64_t n) {
  static const uint8_t zeros[kTarBlock] = {};
  uint64_t rem = n % kTarBlock;
  if (rem == 0) return Status::OK();
  STOKER_RETURN_IF_ERROR(out_->Append(zeros, kTarBlock - rem));
  offset_ += kTarBlock - rem;
  return Status::OK();
}

Status TarWriter::WriteHeader(const std::string& name, uint64_t size, char type) {
  uint8_t h[kTarBlock] = {};
  std::string n = name, prefix;
  if (n.size() > kNameLen && !SplitUstar(name, &prefix, &n))
    n = n.substr(0, kNameLen);  // the caller wrote a pax path record before this header
  std::memcpy(h + kName, n.data(), n.size());
  PutOctal(h + kMode, 8, 0644);
  PutOctal(h + kUid, 8, 0);
  PutOctal(h + kGid, 8, 0);
  PutOctal(h + kSize, kSizeLen, size);
  PutOctal(h + kMtime, 12, 0);
  h[kType] = static_cast<uint8_t>(type);
  std::memcpy(h + kMagic, "ustar\0", 6);
  std::memcpy(h + kVersion, "00", 2);
  std::memcpy(h + kPrefix, prefix.data(), prefix.size());
  std::memset(h + kChksum, ' ', kChksumLen);
  uint64_t sum = 0;
  for (uint8_t b : h) sum += b;
  PutOctal(h + kChksum, 7, sum);  // six digits, NUL, then the space already there
  h[kChksum + 7] = ' ';
  STOKER_RETURN_IF_ERROR(out_->Append(h, kTarBlock));
  offset_ += kTarBlock;
  return Status::OK();
}

Result<uint64_t> TarWriter::Add(const std::string& name, const void* data, size_t n) {
  if (name.empty()) return InvalidArgument("tar member with an empty name");
  std::string prefix, rest;
  bool fits = name.size() <= kNameLen || SplitUstar(name, &prefix, &rest);
  if (!fits) {
    // pax record "<len> path=<name>\n", where len counts its own digits.
    std::string body = " path=" + name + "\n";
    size_t len = body.size() + 1;
    while (std::to_string(len).size() + body.size() != len) ++len;
    std::string rec = std::to_string(len) + body;
    std::string pax_name = "PaxHeader/" + name.substr(name.size() > 80 ? name.size() - 80 : 0);
    STOKER_RETURN_IF_ERROR(WriteHeader(pax_name, rec.size(), 'x'));
    STOKER_RETURN_IF_ERROR(out_->Append(rec.data(), rec.size()));
    offset_ += rec.size();
    STOKER_RETURN_IF_ERROR(Pad(rec.size()));
  }
  STOKER_RETURN_IF_ERROR(WriteHeader(name, n, '0'));
  uint64_t data_off = offset_;
  if (n) STOKER_RETURN_IF_ERROR(out_->Append(data, n));
  offset_ += n;
  STOKER_RETURN_IF_ERROR(Pad(n));
  return data_off;
}

Status TarWriter::Finish() {
  static const uint8_t zeros[2 * kTarBlock] = {};
  STOKER_RETURN_IF_ERROR(out_->Append(zeros, sizeof zeros));
  offset_ += sizeof zeros;
  return Status::OK();
}

}  // namespace stoker
