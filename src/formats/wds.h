// WebDataset: samples stored as consecutive tar members sharing a key.
//
// Naming (as webdataset's `base_plus_ext`): key = directory part + base name up to the
// FIRST dot, ext = the rest, lower-cased ("a/b.seg.PNG" → key "a/b", field "seg.png").
// Members without a dot in the base name and top-level `__*__` metadata are skipped;
// consecutive members with the same key form one sample; a repeated ext inside a sample
// is kCorrupt naming the shard and member. A `.cls` field (ASCII integer) also sets
// Sample::label.
//
// Index: a DALI `wds2idx` v1.2 file next to the shard (`train-000000.idx` or
// `train-000000.tar.idx`) is used when it is consistent with the shard (ranges inside
// the file, 512-aligned, first and last payload preceded by a valid header of the same
// size); otherwise the shard's headers are scanned (only 512-byte headers are read) and
// a note explains why.
//
// Compressed shards (webdataset reads them natively): a shard that starts with the gzip
// magic (.tar.gz, .tgz) is streamed through zlib, never decompressed to disk. Opening it
// decompresses it once to list its members; reads then follow one stream per shard, so a
// compressed shard is read sequentially: samples the stream passes before they are asked
// for (a shuffle buffer reorders within a window) are kept in memory up to
// WdsOptions::stream_cache_bytes, and a read behind the stream restarts it from the start
// (counted in stream_restarts()). CheckRandomAccess() fails for such a dataset; notes()
// names each compressed shard. Plain .tar shards keep random access through the index.
//
// Members: a member "x.jpg.gz" is decompressed and becomes the field "jpg" (webdataset's
// default decoder does the same); directories, links and other non-regular members are
// skipped, as webdataset does. A file that is neither a tar nor gzip is kCorrupt saying
// what it is (zip, zstd, bzip2, xz, empty, text, ...).
#pragma once

#include <cstdint>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/sharded.h"
#include "io/file_cache.h"
#include "formats/tar.h"
#include "formats/writer.h"

namespace stoker {

// Splits a member name into key and lower-case ext; false if it has no ext.
bool SplitWdsName(const std::string& name, std::string* key, std::string* ext);
// True for top-level metadata members "__name__" or "__name__/..." (skipped).
bool IsWdsMetaName(const std::string& name);

struct WdsComponent {
  std::string ext;   // field name (lower-case)
  std::string name;  // member name as stored
  uint64_t offset = 0, size = 0;
};

struct WdsShardIndex {
  std::string path;
  std::vector<std::string> keys;   // per sample
  std::vector<uint32_t> first;     // sample i = comps[first[i], first[i+1])
  std::vector<WdsComponent> comps;
  size_t samples() const { return keys.size(); }
};

// Groups scanned members into samples. On a duplicate ext, returns kCorrupt; `out`
// then holds the complete samples before the offending one.
Status GroupWdsMembers(const std::string& shard, const std::vector<TarMember>& members,
                       WdsShardIndex* out);

// DALI wds2idx v1.2 text: "v1.2 <samples>\n" then per sample "<ext> <offset> <size> <name>"
// for each component, space-separated.
std::string FormatWdsIndex(const WdsShardIndex& idx);
Status ParseWdsIndex(const std::string& text, const std::string& shard, uint64_t file_size,
                     WdsShardIndex* out);
// Where the index of `shard` is looked for / written: "<dir>/<stem>.idx", stem = base
// name up to its first dot (wds2idx's default).
std::string WdsIndexPath(const std::string& shard);

struct WdsOptions {
  size_t max_open_files = 64;  // open shard handles kept (LRU)
  bool use_index_files = true;
  // Compressed shards: bytes of samples decompressed ahead of their read, all shards.
  uint64_t stream_cache_bytes = 512ull << 20;
};

class GzipReader;

class WdsDataset final : public Dataset {
 public:
  static Result<std::unique_ptr<WdsDataset>> Open(const std::string& spec,
                                                  const DatasetOptions& opts,
                                                  const WdsOptions& wopts = {});
  uint64_t size() const override { return total_; }
  const std::vector<ShardInfo>& shards() const override { return shards_; }
  Status Read(uint64_t index, Sample* out) const override;
  std::string Key(uint64_t index) const override;
  std::string Location(uint64_t index) const override;
  std::string format() const override { return "wds"; }
  std::vector<std::string> index_errors() const override { return errors_; }
  // Why an index file was not used, and which shards are compressed (informational).
  std::vector<std::string> notes() const override { return notes_; }
  Status CheckRandomAccess() const override;
  size_t compressed_shards() const;
  // Reads behind a compressed shard's stream that restarted it (see above).
  uint64_t stream_restarts() const { return stream_restarts_.load(); }
  // {"stream_restarts": n} when any shard is compressed.
  std::map<std::string, double> counters() const override {
    if (compressed_shards() == 0) return {};
    return {{"stream_restarts", static_cast<double>(stream_restarts())}};
  }
  // Byte range [begin, end) of sample `index` inside its shard, headers included
  // (benches compare against raw reads of the same bytes). Plain shards only: a
  // compressed one has no byte range in its file (CheckRandomAccess says so).
  void ByteRange(uint64_t index, uint32_t* shard, uint64_t* begin, uint64_t* end) const;
  const WdsShardIndex& shard_index(size_t s) const { return index_[s]; }
  size_t open_files() const { return files_.open_files(); }

 private:
  WdsDataset(Env* env, const WdsOptions& o) : env_(env), opts_(o), files_(env, o.max_open_files) {}
  void Locate(uint64_t index, uint32_t* shard, uint32_t* local) const;
  // The read state of one compressed shard.
  struct StreamCursor {
    std::mutex mu;
    std::unique_ptr<GzipReader> rd;                  // the stream, at rd->position()
    uint32_t next = 0;                               // first sample the stream has not passed
    std::map<uint32_t, std::vector<Field>> ahead;    // passed, not yet asked for
    std::vector<bool> delivered;                     // read in this pass
  };
  Status ReadStreamed(uint32_t shard, uint32_t local, Sample* out) const;
  Status ReadMembers(GzipReader* rd, const WdsShardIndex& idx, uint32_t local,
                     std::vector<Field>* fields, size_t* n) const;
  // Decompresses ".gz" members, sets the label from "cls".
  Status FinishSample(const WdsShardIndex& idx, uint32_t local, Sample* out) const;
  Env* env_;
  WdsOptions opts_;
  ShardFileCache files_;
  std::vector<std::unique_ptr<StreamCursor>> streams_;  // null for plain shards
  mutable std::atomic<uint64_t> cache_bytes_{0};
  mutable std::atomic<uint64_t> stream_restarts_{0};
  std::vector<WdsShardIndex> index_;
  std::vector<ShardInfo> shards_;
  uint64_t total_ = 0;
  std::vector<std::string> errors_, notes_;
};

// Writes "<key>.<field>" members; shard pattern with one printf integer ("%06d"); a
// `.idx` beside each shard; label written as a `cls` member when the sample has none.
// Keys must not contain a dot in their base name, field names must be lower-case
// without '/', and consecutive keys must differ (all are needed to read the same
// samples back).
class WdsWriter final : public ShardedWriter {
 public:
  static Result<std::unique_ptr<WdsWriter>> Open(const std::string& pattern,
                                                 const WriterOptions& opts);

 private:
  WdsWriter(std::string pattern, WriterOptions opts)
      : ShardedWriter(std::move(pattern), std::move(opts)) {}
  Status CheckSample(const Sample& s) override;
  Status BeginShard(WritableFile* file) override;
  Status AppendSample(const Sample& s) override;
  uint64_t shard_bytes() const override { return tar_->offset(); }
  uint64_t shard_samples() const override { return cur_.samples(); }
  Status EndShard() override;
  Status WriteIndex(const std::string& path) override;
  std::unique_ptr<TarWriter> tar_;
  WdsShardIndex cur_;
  std::string last_key_;
};

void RegisterWdsFormat();

}  // namespace stoker
