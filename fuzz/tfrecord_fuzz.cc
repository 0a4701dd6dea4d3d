// libFuzzer: TFRecord framing (header-only scan and full parse) and the DALI index parser.
#include <cstddef>
#include <cstdint>

#include "io/memory_file.h"
#include "formats/tfrecord.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::MemoryFile f("fuzz.tfrecord", data, size);
  stoker::TFRecordScan scan = stoker::ScanTFRecordFile(f);
  for (const auto& r : scan.records)
    if (r.offset + r.size > size) __builtin_trap();
  stoker::TFRecordScan full = stoker::ParseTFRecordBuffer(data, size, "fuzz.tfrecord");
  if (full.records.size() > scan.records.size()) __builtin_trap();
  std::vector<stoker::TFRecordEntry> idx;
  stoker::ParseTFRecordIndex(std::string(reinterpret_cast<const char*>(data), size), "fuzz",
                             size, &idx)
      .IgnoreError();
  // gzip path: decompress whatever this is.
  std::vector<uint8_t> out;
  if (stoker::IsGzipFile(f)) stoker::GunzipFile(f, &out).IgnoreError();
  return 0;
}
