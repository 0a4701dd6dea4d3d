// ByteSource: a sequential byte stream over a file read through Env, transparently
// gunzipped (zlib; gzip members may be concatenated), or over memory (tests, fuzzing).
// Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "io/env.h"

namespace stoker::telemetry {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to n bytes into dst; returns 0 only at the end of the stream.
  virtual Result<size_t> Read(char* dst, size_t n) = 0;
  virtual const std::string& name() const = 0;
  // Compressed bytes consumed from the underlying file (progress), and its size.
  virtual uint64_t raw_offset() const = 0;
  virtual uint64_t raw_size() const = 0;
};

// Opens `path`; gzip is detected by its magic bytes, not the file name.
Result<std::unique_ptr<ByteSource>> OpenByteSource(Env* env, const std::string& path);
// A stream over `data` (which must outlive the source); gzip is detected too.
std::unique_ptr<ByteSource> MemoryByteSource(std::string_view data, std::string name);

// Reads the first up-to-n decompressed bytes of a file (for sniffing its type).
Result<std::string> ReadHead(Env* env, const std::string& path, size_t n);

}  // namespace stoker::telemetry
