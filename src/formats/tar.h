// POSIX tar: an index of regular members built from the 512-byte headers alone (payloads
// are seeked over), and a writer with fixed metadata for reproducible bytes.
//
// Reader: ustar and old V7 headers, GNU long names ('L'), pax extended headers ('x', keys
// `path` and `size`; global 'g' headers are ignored), base-256 sizes. Non-regular members
// (directories, links, devices, GNU sparse) are skipped. Header checksums are validated
// (unsigned or signed sum, as tar does). The archive ends at a zero block or at EOF on a
// block boundary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/env.h"

namespace stoker {

inline constexpr size_t kTarBlock = 512;
// RandomAccessFile::size() of a stream whose length is not known yet (GzipStreamFile):
// ScanTar then reads until the stream ends instead of checking sizes against the length.
inline constexpr uint64_t kTarUnknownSize = ~uint64_t{0};

struct TarMember {
  std::string name;            // full path, long-name and pax records applied
  uint64_t header_offset = 0;  // first header block of the member (pax/L headers included)
  uint64_t data_offset = 0;    // first payload byte (a multiple of 512)
  uint64_t size = 0;
};

struct TarScan {
  std::vector<TarMember> members;  // regular files in archive order, all complete
  // OK, or why the scan stopped (kCorrupt naming the file and offset): members before
  // the damage are kept.
  Status error;
  uint64_t error_offset = 0;
  // When a member's payload is cut short: its name (the header was readable).
  std::string damaged_name;
};

// Scans `file` from offset 0. Never fails as a whole: damage is reported in `error`.
// Offsets only grow, so a forward-only stream (GzipStreamFile) is read once.
TarScan ScanTar(const RandomAccessFile& file);

// Reads and validates the header block at `offset`: returns the payload size of the
// member if it is a checksum-valid header, else kCorrupt.
Result<uint64_t> ReadTarHeaderSize(const RandomAccessFile& file, uint64_t offset);

// Writes a tar stream: regular members with mode 0644, uid/gid 0, mtime 0, empty owner
// names, so the same members always give the same bytes. Names over 100 bytes use the
// ustar prefix field when they split at a '/', else a pax `path` record.
class TarWriter {
 public:
  explicit TarWriter(WritableFile* out) : out_(out) {}
  // Appends one member; returns the offset of its payload in the stream.
  Result<uint64_t> Add(const std::string& name, const void* data, size_t n);
  // Writes the end-of-archive marker (two zero blocks).
  Status Finish();
  uint64_t offset() const { return offset_; }

 private:
  Status WriteHeader(const std::string& name, uint64_t size, char type);
  Status Pad(uint64_t n);
  WritableFile* out_;
  uint64_t offset_ = 0;
};

}  // namespace stoker
