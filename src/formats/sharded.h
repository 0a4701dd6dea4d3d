// What the sharded formats (WebDataset, TFRecord) share: shard lists (brace patterns,
// directories, single files), output patterns with one printf integer, parallel indexing of
// the shards, and the writer skeleton (a shard is "<name>.partial" until it is complete,
// synced and renamed; a new shard starts after WriterOptions::shard_bytes bytes or
// samples_per_shard samples).
#pragma once

#include "io/object_env.h"

#include <cstdint>
#include <algorithm>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "formats/dataset.h"
#include "formats/writer.h"
#include "io/env.h"

namespace stoker {

// Resolves a shard spec: a brace pattern, a directory (its *.tar files, sorted), or files.
Result<std::vector<std::string>> ResolveShardList(Env* env, const std::string& spec,
                                                  std::initializer_list<const char*> exts);

// Formats a shard pattern containing exactly one %d / %0Nd (or none when `single`).
Result<std::string> FormatShardPattern(const std::string& pattern, int shard);


// A shard opened for indexing. An object shard is opened without read-ahead for the checks
// (gzip magic, an index's first and last headers: a few bytes each, where read-ahead would
// fetch whole blocks, the whole shard); its first 4 KiB come in one request, so the gzip
// sniff and the first header check share a round trip. ForScan() opens it again with
// read-ahead for a scan, which reads it front to back. A local shard is one handle for both.
class IndexingHandle {
 public:
  static Result<IndexingHandle> Open(Env* env, const std::string& path);
  const RandomAccessFile& probe() const { return *probe_; }
  const std::shared_ptr<RandomAccessFile>& shared_probe() const { return probe_; }
  std::shared_ptr<RandomAccessFile> ForScan() const;

 private:
  Env* env_ = nullptr;
  std::string path_;
  bool object_ = false;
  std::shared_ptr<RandomAccessFile> probe_;
};

// Which files exist beside a list of shards (their index files), asked once per shard set.
// For object shards one listing of each shard directory answers every probe: a Stat of a
// missing key costs a HEAD and a LIST (two round trips, and the readers ask for two index
// names per shard). Where listing is refused (a policy that grants GetObject but not
// ListBucket) each probe asks the store. Local paths ask the file system. The listing is
// taken when the dataset opens, as the per-file probes were.
class SiblingFiles {
 public:
  SiblingFiles(Env* env, const std::vector<std::string>& shards);
  bool Exists(const std::string& path) const;

 private:
  Env* env_;
  std::map<std::string, std::set<std::string>> listed_;  // directory -> names in it
};

// Runs index_one(path) for every shard, on up to 8 threads (at most one per core: scans are
// CPU and disk work), or up to 32 for object URLs (there the checks and a scan wait on the
// network: a set of 20-32 shards is checked in one wave of round trips);
// results in shard order.
template <typename R, typename F>
std::vector<R> IndexShards(const std::vector<std::string>& paths, const char* thread_name,
                           F index_one) {
  std::vector<R> results(paths.size());
  const bool remote = !paths.empty() && IsObjectStoreUri(paths[0]);
  int threads = std::min<int>(static_cast<int>(paths.size()),
                              remote ? 32 : std::min(8, AvailableCpus()));
  if (threads <= 1) {
    for (size_t i = 0; i < paths.size(); ++i) results[i] = index_one(paths[i]);
  } else {
    ThreadPool pool(threads, thread_name);
    for (size_t i = 0; i < paths.size(); ++i)
      pool.Schedule([&, i] { results[i] = index_one(paths[i]); });
    pool.Wait();
  }
  return results;
}

// The skeleton of a sharded writer. Subclasses write one shard's stream; the base opens
// "<shard>.partial", decides when a shard is full, syncs, writes the index, renames, and
// keeps the list of finished shards. An empty dataset still gets one (empty) shard, unless
// the run resumes after others (WriterOptions::first_shard > 0). Not thread-safe.
class ShardedWriter : public DatasetWriter {
 public:
  ~ShardedWriter() override;  // not closed: the open shard stays "<name>.partial"
  Status Write(const Sample& s) final;
  Status Close() final;
  const std::vector<WrittenShard>& shards() const final { return done_; }

 protected:
  ShardedWriter(std::string pattern, WriterOptions opts);
  // Defaults the Env and creates the directory of the first shard.
  static Status Prepare(const std::string& pattern, WriterOptions* opts);
  // Checked before the sample can open a shard (a bad first sample leaves no file).
  virtual Status CheckSample(const Sample& s) { return Status::OK(); }
  virtual Status BeginShard(WritableFile* file) = 0;
  virtual Status AppendSample(const Sample& s) = 0;
  // Bytes and samples in the open shard (for the size limits).
  virtual uint64_t shard_bytes() const = 0;
  virtual uint64_t shard_samples() const = 0;
  // Ends the open shard's stream (end-of-archive blocks, gzip trailer) before the sync.
  virtual Status EndShard() = 0;
  // Writes the index of the finished shard `path` (called before the rename; optional).
  virtual Status WriteIndex(const std::string& path) { return Status::OK(); }
  const WriterOptions& opts() const { return opts_; }
  const std::string& shard_path() const { return shard_path_; }

 private:
  Status StartShard();
  Status FinishShard();
  std::string pattern_;
  WriterOptions opts_;
  std::unique_ptr<WritableFile> file_;
  std::string shard_path_;
  int next_shard_ = 0;
  bool closed_ = false;
  std::vector<WrittenShard> done_;
};

}  // namespace stoker
