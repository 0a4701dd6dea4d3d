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
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "formats/dataset.h"
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
};

// Resolves a shard spec: a brace pattern, a directory (its *.tar files, sorted), or files.
Result<std::vector<std::string>> ResolveShardList(Env* env, const std::string& spec,
                                                  std::initializer_list<const char*> exts);

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
  // Why an index file was not used, per shard (informational).
  const std::vector<std::string>& notes() const { return notes_; }
  // Byte range [begin, end) of sample `index` inside its shard, headers included
  // (benches compare against raw reads of the same bytes).
  void ByteRange(uint64_t index, uint32_t* shard, uint64_t* begin, uint64_t* end) const;
  const WdsShardIndex& shard_index(size_t s) const { return index_[s]; }
  size_t open_files() const { return files_.open_files(); }

 private:
  WdsDataset(Env* env, size_t max_open) : env_(env), files_(env, max_open) {}
  void Locate(uint64_t index, uint32_t* shard, uint32_t* local) const;
  Env* env_;
  ShardFileCache files_;
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
class WdsWriter final : public DatasetWriter {
 public:
  static Result<std::unique_ptr<WdsWriter>> Open(const std::string& pattern,
                                                 const WriterOptions& opts);
  ~WdsWriter() override;
  Status Write(const Sample& s) override;
  Status Close() override;
  const std::vector<WrittenShard>& shards() const override { return done_; }

 private:
  WdsWriter(std::string pattern, WriterOptions opts)
      : pattern_(std::move(pattern)), opts_(std::move(opts)) {}
  Status StartShard();
  Status FinishShard();
  std::string pattern_;
  WriterOptions opts_;
  std::unique_ptr<WritableFile> file_;
  std::unique_ptr<TarWriter> tar_;
  std::string shard_path_;
  WdsShardIndex cur_;
  uint64_t cur_bytes_ = 0;
  int next_shard_ = 0;
  std::string last_key_;
  bool closed_ = false;
  std::vector<WrittenShard> done_;
};

// Formats a shard pattern containing exactly one %d / %0Nd (or none when `single`).
Result<std::string> FormatShardPattern(const std::string& pattern, int shard);

void RegisterWdsFormat();

}  // namespace stoker
