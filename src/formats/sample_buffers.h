// Helpers for readers that fill a Sample's reused field buffers.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "formats/dataset.h"

namespace stoker {

// Like Sample::AddField, but the spare buffer keeps its previous size: resizing it to the
// next value then zero-fills only the growth, and the reader overwrites every byte (pread
// straight into it, or a copy). Saves a memset of each value on recycled samples.
inline Field* AddFieldForOverwrite(Sample* s, const std::string& name) {
  if (s->num_fields == s->fields.size()) s->fields.emplace_back();
  Field* f = &s->fields[s->num_fields++];
  f->name = name;
  return f;
}

// A process-unique id per open reader: thread-local read-ahead slots (the next header a
// scan fetched with the previous pread) are tagged with it, so one reader never takes
// another's bytes.
inline uint64_t NextReaderId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

}  // namespace stoker
