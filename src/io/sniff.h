// What a file is, from its first bytes: for errors that say "x.tar is a zip archive"
// instead of "bad tar header checksum at offset 0".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "io/env.h"

namespace stoker {

// "a gzip stream", "a zip archive", "a zstd stream", "a bzip2 stream", "an xz stream",
// "a 7z archive", "an lz4 frame", "a Parquet file", "an HDF5 file", "a JPEG image",
// "a PNG image", "an empty file", "text starting 'abc...'", or "binary data starting
// 'de ad be ef ...'". `p` holds the first `n` bytes of a file of `file_size` bytes.
std::string DescribeFileStart(const uint8_t* p, size_t n, uint64_t file_size);
// Reads the first bytes of `file` and describes them (an I/O error is described too).
std::string DescribeFile(const RandomAccessFile& file);

}  // namespace stoker
