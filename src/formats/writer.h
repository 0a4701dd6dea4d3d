// Writers for dataset formats, used by `stoker convert`, `stoker gen` and the format
// benches. A writer takes samples in order and produces shards (plus index files).
//
// Crash safety: a shard is written to "<name>.partial" and renamed into place only after
// it is complete and flushed, so an interrupted run leaves only complete shards plus
// .partial leftovers that never verify.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/dataset.h"

namespace stoker {

struct WriterOptions {
  Env* env = nullptr;               // default Env::Default()
  uint64_t shard_bytes = 256ull << 20;  // start a new shard after this many bytes
  uint64_t samples_per_shard = 0;   // if > 0, also cap samples per shard
  bool gzip = false;                // formats that support stream compression
  bool write_index = true;          // index files alongside (wds .idx, tfrecord .idx)
  uint64_t first_shard = 0;         // number of the first shard (convert --resume); sharded
                                    // formats only
};

struct WrittenShard {
  std::string path;
  uint64_t samples = 0;
  uint64_t bytes = 0;
};

class DatasetWriter {
 public:
  virtual ~DatasetWriter() = default;
  // Appends one sample (key, label, fields). Not thread-safe.
  virtual Status Write(const Sample& s) = 0;
  // Finishes the last shard and any index/manifest. Must be called; without it the last
  // shard stays .partial.
  virtual Status Close() = 0;
  virtual const std::vector<WrittenShard>& shards() const = 0;
};

// Opens "fmt:path" for writing. Sharded formats take a printf-style pattern in path
// ("out/train-%06d.tar"); single-file formats (lmdb, hdf5) take one path.
using DatasetWriterFactory = std::function<Result<std::unique_ptr<DatasetWriter>>(
    const std::string& path, const WriterOptions& opts)>;
void RegisterDatasetWriter(const std::string& format, DatasetWriterFactory f);
Result<std::unique_ptr<DatasetWriter>> OpenDatasetWriter(const std::string& spec,
                                                         const WriterOptions& opts = {});
std::vector<std::string> DatasetWriterFormats();

}  // namespace stoker
