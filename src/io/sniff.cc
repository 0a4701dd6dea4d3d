#include "io/sniff.h"

#include <cstdint>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace stoker {

std::string DescribeFileStart(const uint8_t* p, size_t n, uint64_t file_size) {
  if (file_size == 0) return "an empty file";
  struct Magic {
    const char* bytes;
    size_t len;
    const char* what;
  };
  static const Magic kMagic[] = {
      {"\x1f\x8b", 2, "a gzip stream"},
      {"PK\x03\x04", 4, "a zip archive"},
      {"PK\x05\x06", 4, "a zip archive (empty)"},
      {"\x28\xb5\x2f\xfd", 4, "a zstd stream"},
      {"BZh", 3, "a bzip2 stream"},
      {"\xfd" "7zXZ\x00", 6, "an xz stream"},
      {"7z\xbc\xaf\x27\x1c", 6, "a 7z archive"},
      {"\x04\x22\x4d\x18", 4, "an lz4 frame"},
      {"PAR1", 4, "a Parquet file"},
      {"\x89HDF\r\n\x1a\n", 8, "an HDF5 file"},
      {"\xff\xd8\xff", 3, "a JPEG image"},
      {"\x89PNG\r\n\x1a\n", 8, "a PNG image"},
  };
  for (const Magic& m : kMagic)
    if (n >= m.len && std::memcmp(p, m.bytes, m.len) == 0) return m.what;
  size_t k = std::min<size_t>(n, 64);
  bool text = k > 0;
  for (size_t i = 0; i < k && text; ++i)
    text = p[i] == '\n' || p[i] == '\r' || p[i] == '\t' || (p[i] >= 0x20 && p[i] < 0x7f) ||
           p[i] >= 0x80;  // UTF-8 continuation bytes pass
  if (text) {
    std::string s;
    for (size_t i = 0; i < std::min<size_t>(k, 24); ++i)
      s += (p[i] >= 0x20 && p[i] < 0x7f) ? static_cast<char>(p[i]) : '.';
    return fmt::format("text starting '{}{}'", s, k > 24 ? "..." : "");
  }
  std::string hex;
  for (size_t i = 0; i < std::min<size_t>(n, 8); ++i) hex += fmt::format("{}{:02x}", i ? " " : "", p[i]);
  return fmt::format("binary data starting '{}'", hex);
}

std::string DescribeFile(const RandomAccessFile& file) {
  uint8_t head[64];
  uint64_t size = file.size();
  size_t want = static_cast<size_t>(std::min<uint64_t>(sizeof head, size));
  auto got = file.ReadAt(0, want, head);
  if (!got.ok()) return fmt::format("unreadable ({})", got.status().message());
  return DescribeFileStart(head, *got, size);
}

}  // namespace stoker
