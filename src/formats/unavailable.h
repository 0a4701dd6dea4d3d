// Formats built without their library (liblmdb, libhdf5, Arrow/Parquet): the format stays
// registered so that `lmdb:x` says why it cannot be read instead of "unknown format", and
// every such message has one shape:
//   "<path>: stoker was built without <library> (<how to enable>): format '<name>' is
//    unavailable" (kUnimplemented).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"

namespace stoker {

struct MissingLibrary {
  const char* format;   // "lmdb"
  const char* library;  // "liblmdb"
  const char* how;      // "install liblmdb-dev and reconfigure"
};

Status FormatUnavailable(const MissingLibrary& m, const std::string& path);

}  // namespace stoker
