// A local cache of the indices stoker builds by scanning object-store shards that have no
// index beside them (WebDataset tars written without `.idx`, as webdataset's own writer leaves
// them). Scanning such a shard reads it over the network once before the epoch reads it
// again; with the cache, only the first run on a machine pays that.
//
// An entry is keyed by the shard's URL, size and version (the object's ETag), so a replaced
// object never meets an old index; one without an ETag is not cached. Entries are written to
// a temporary file and renamed (a crash leaves no half entry), and the reader still checks an
// entry as it checks an `.idx` file beside the shard.
//
// Where: $STOKER_INDEX_CACHE (a directory; "off" or "0" turns the cache off), else
// ${XDG_CACHE_HOME:-~/.cache}/stoker/index. Nothing is ever written next to the data.
#pragma once

#include <cstdint>
#include <string>

namespace stoker {

// The entry's local path for this shard, or "" when there is no cache (off, no ETag, no
// HOME) or the shard is not an object URL.
std::string IndexCacheEntry(const std::string& url, uint64_t size, const std::string& version,
                            const char* kind);
// Reads an entry; false when absent or unreadable.
bool ReadIndexCache(const std::string& entry, std::string* text);
// Writes an entry (temporary file + rename); failures are ignored (the cache is an aid).
void WriteIndexCache(const std::string& entry, const std::string& text);

}  // namespace stoker
