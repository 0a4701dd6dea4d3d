// The one interface every dataset format implements for the pipeline: an indexed list of
// samples grouped into shards, readable by index from many threads at once.
//
// Sequential iteration is random access in index order; readers keep per-thread state
// (open files, cursors) so that reading consecutive indices of a shard is a sequential scan.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/env.h"

namespace stoker {

// One named field of a sample ("jpg", "cls", "json", ...): raw bytes.
struct Field {
  std::string name;
  std::vector<uint8_t> data;  // capacity reused when the Sample is recycled
};

struct Sample {
  std::string key;        // WebDataset __key__, file path relative to the root, ...
  std::string location;   // for error messages: "shard-000001.tar:member 'n01/x.jpg'"
  int64_t label = -1;     // integer class when the format has one (ImageFolder, .cls)
  std::vector<Field> fields;
  size_t num_fields = 0;  // fields[0..num_fields) are valid; the rest are spare buffers

  // Returns a field buffer to fill, reusing a spare one when available.
  Field* AddField(const std::string& name);
  const Field* Find(const std::string& name) const;
  // First field whose name is one of `names` (e.g. {"jpg","jpeg","png"}).
  const Field* FindAny(std::initializer_list<const char*> names) const;
  void Clear() {
    key.clear();
    location.clear();
    label = -1;
    num_fields = 0;
  }
  uint64_t bytes() const;
};

// Receives the samples of a Dataset::ReadRawRun, each exactly once, in the order asked.
class RawRunSink {
 public:
  virtual ~RawRunSink() = default;
  // Sample i of the run: its key and the bytes of its one field. Both are valid only
  // during the call (the source's buffer): copy them.
  virtual void Deliver(size_t i, std::string_view key, const uint8_t* data, size_t size) = 0;
  // Sample i could not be read; `st` names it (kCorrupt, kIOError, ...), as Read's would.
  virtual void Fail(size_t i, const Status& st) = 0;
};

struct ShardInfo {
  std::string path;
  uint64_t begin = 0, end = 0;  // sample index range [begin, end)
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual uint64_t size() const = 0;
  // Shards in a fixed order; every sample belongs to exactly one. Formats without shards
  // report one shard per file (folder) or one for the whole file.
  virtual const std::vector<ShardInfo>& shards() const = 0;
  // Reads sample `index` into `out` (cleared first, buffers reused). Thread-safe.
  // Errors are kCorrupt / kIOError and name the file and member or record.
  virtual Status Read(uint64_t index, Sample* out) const = 0;
  // Key of sample `index` without reading its payload (may be cheap or not).
  virtual std::string Key(uint64_t index) const = 0;
  // Where sample `index` lives, for error messages.
  virtual std::string Location(uint64_t index) const = 0;
  virtual std::string format() const = 0;
  // True when reading any sample costs the same (one file per sample): the pipeline then
  // shuffles all indices each epoch, as PyTorch's RandomSampler does, instead of shard
  // order plus a shuffle buffer.
  virtual bool random_access_is_cheap() const { return false; }
  // Samples skipped while indexing (skip_bad_shards), with the reason for each.
  virtual std::vector<std::string> index_errors() const { return {}; }
  // Informational notes from opening (an index file ignored, a shard read sequentially).
  virtual std::vector<std::string> notes() const { return {}; }
  // Counters the source keeps while it is read (name -> value; e.g. "stream_restarts"),
  // reported in PipelineStats::source_counters. Safe to call while samples are read.
  virtual std::map<std::string, double> counters() const { return {}; }
  // OK when any sample can be read in any order at the cost the index promises; else why
  // not (kInvalidArgument: e.g. gzip-compressed shards, read sequentially). Callers that
  // need random access (a full-permutation shuffle, random-read benches) ask first.
  virtual Status CheckRandomAccess() const { return Status::OK(); }
  // The most read threads that help (0: no limit). A stream source whose reads of one
  // partition are serialized (Kafka) returns its partition count: more threads only wait
  // on each other, and that wait would look like I/O to the thread tuner.
  virtual int max_read_threads() const { return 0; }
  // Sources that hold the samples a shuffle buffer reads ahead of the order (a stream:
  // Kafka) estimate a sample's bytes here, the same on every rank and every open of the
  // same data (0: unknown, or nothing is held), so that the pipeline can bound the buffer
  // in bytes (PipelineOptions::shuffle_buffer_mb) and the order stay a pure function of
  // the seed. May read from the source.
  virtual double sample_bytes_estimate() const { return 0; }

  // How a pass should read the shards (PipelineOptions::interleave, EpochPlanOptions): a
  // stream source whose shards are partitions (Kafka) wants them side by side, `block`
  // samples of each of `cycle` shards in turn, as a consumer assigned them all reads them;
  // files default to one shard after another ({0, 0}).
  struct Interleave {
    size_t block = 0, cycle = 0;
  };
  virtual Interleave interleave() const { return {}; }

  // What the coming pass reads, before its reads begin. Optional; safe to call while
  // samples are read (a later hint replaces an earlier one).
  struct PassHint {
    // The shards in the plan's shard order (shuffled per epoch, or not), read
    // `side_by_side` at a time (the interleave cycle; 1: one after another): a stream
    // source (Kafka) starts fetching the shard that comes next while others are read.
    std::vector<size_t> shard_order;
    size_t side_by_side = 1;
    // This reader's indices in the pass (this rank's share of the epoch), or null when
    // unknown: a stream source need not keep what it fetches on the way and no read of
    // this pass will ask for (the other ranks' samples). A read of an index not in it
    // still succeeds (more slowly).
    const std::vector<uint64_t>* reads = nullptr;
    int rank = 0, world_size = 1;  // whose pass (a stream source commits progress on rank 0)
  };
  virtual void HintPass(const PassHint& hint) const { (void)hint; }

  // Optional fast path for sources whose sample is one field of bytes (a Kafka topic read
  // with value=raw): true when ReadRawRun can hand over field `field` (empty: the sample's
  // first field) of every sample, so that a caller that carries only those bytes (the
  // pipeline with decode="raw") reads a run of samples in one call instead of one Read
  // each: one lock per partition and run, and the bytes go straight from the source's
  // buffer to the caller's (one copy, no Sample). Formats that answer false (the default:
  // files) are read with Read only.
  virtual bool CanReadRawRun(const std::string& field) const {
    (void)field;
    return false;
  }
  // Reads samples indices[0..n) (any indices; consecutive ones of a shard are the cheap
  // case) and calls sink->Deliver or sink->Fail once for each i, in increasing i. The
  // field's bytes are what Read would put in the field; a sample that Read would fail on
  // fails with the same error. Thread-safe. Only after CanReadRawRun returned true.
  virtual void ReadRawRun(const uint64_t* indices, size_t n, RawRunSink* sink) const {
    (void)indices, (void)n, (void)sink;
  }
};

struct DatasetOptions {
  Env* env = nullptr;  // defaults to Env::Default()
  // Skip shards or files that cannot be indexed instead of failing (counted in skipped).
  bool skip_bad_shards = false;
};

// Opens "format:path" or a path whose extension or layout names the format
// (a directory → folder, *.tar → wds, brace patterns like train-{000..009}.tar).
Result<std::unique_ptr<Dataset>> OpenDataset(const std::string& spec,
                                             const DatasetOptions& opts = {});

// Format registry, keyed by prefix name ("folder", "wds", "tfrecord", ...), with the file
// extensions that select it when no prefix is given.
using DatasetFactory = std::function<Result<std::unique_ptr<Dataset>>(
    const std::string& path, const DatasetOptions& opts)>;
struct DatasetFormat {
  std::string name;
  std::vector<std::string> extensions;  // without dot, e.g. {"tar"}
  DatasetFactory open;
  std::string help;
};
void RegisterDatasetFormat(DatasetFormat fmt);
const std::map<std::string, DatasetFormat>& DatasetFormats();

// Expands brace patterns: "a-{000..003}.tar" → a-000.tar ... a-003.tar (zero padding
// kept), "{a,b}" alternatives, several braces multiply. kInvalidArgument if malformed.
Result<std::vector<std::string>> ExpandBraces(const std::string& pattern);

// Splits "fmt:path" into (fmt, path) when fmt is a registered format name.
std::pair<std::string, std::string> SplitFormatPrefix(const std::string& spec);

}  // namespace stoker
