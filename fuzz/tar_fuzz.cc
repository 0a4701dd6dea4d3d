// libFuzzer: the tar header scanner and WebDataset grouping on arbitrary bytes, plain and
// through the gzip stream (a compressed shard is scanned as a stream of unknown length),
// and member decompression (".gz" members).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "formats/tar.h"
#include "formats/wds.h"
#include "io/gzip.h"
#include "io/memory_file.h"
#include "io/sniff.h"

namespace {

void CheckScan(const stoker::TarScan& scan, uint64_t size) {
  for (const auto& m : scan.members)
    if (m.data_offset + m.size > size || m.data_offset % 512 != 0) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::MemoryFile f("fuzz.tar", data, size);
  stoker::TarScan scan = stoker::ScanTar(f);
  CheckScan(scan, size);
  stoker::WdsShardIndex idx;
  stoker::GroupWdsMembers("fuzz.tar", scan.members, &idx).IgnoreError();
  // The index text must parse back to the same grouping.
  std::string text = stoker::FormatWdsIndex(idx);
  stoker::WdsShardIndex back;
  stoker::ParseWdsIndex(text, "fuzz.tar", size, &back).IgnoreError();
  // Arbitrary index text must not crash either.
  std::string raw(reinterpret_cast<const char*>(data), size);
  stoker::ParseWdsIndex(raw, "fuzz.tar", 1 << 20, &back).IgnoreError();
  stoker::DescribeFileStart(data, size, size);

  // The gzip path: as a compressed shard (scanned as a stream), and as a ".gz" member.
  if (stoker::IsGzipFile(f)) {
    auto file = std::make_shared<stoker::MemoryFile>("fuzz.tar.gz", data, size);
    stoker::GzipStreamFile stream(file);
    stoker::TarScan zscan = stoker::ScanTar(stream);
    uint64_t end = stream.size();  // known once the scan reached the end of the stream
    if (end != stoker::GzipStreamFile::kUnknownSize) CheckScan(zscan, end);
    std::vector<uint8_t> out;
    stoker::GunzipBuffer(data, size, &out, 64u << 20).IgnoreError();
  }
  return 0;
}
