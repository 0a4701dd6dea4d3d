// libFuzzer target: open arbitrary bytes as a Parquet file and read every row (sequential
// and page-index paths). Arrow throws on malformed input; stoker must turn every throw into
// a Status and never crash.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "formats/parquet_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/stoker_parquet_fuzz_" + std::to_string(::getpid()) +
                                  ".parquet";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto ds = stoker::OpenParquetDataset(path, {});
  if (ds.ok()) {
    stoker::Sample s;
    uint64_t n = (*ds)->size();
    for (uint64_t i = 0; i < n && i < 4096; ++i) (*ds)->Read(i, &s).IgnoreError();
    for (uint64_t i = n; i > 0 && n - i < 64; --i) (*ds)->Read(i - 1, &s).IgnoreError();
  }
  return 0;
}
