// stoker index SPEC: writes the index files readers use to open shards without scanning them
// (DALI's wds2idx / tfrecord2idx layouts), beside the shards, local or in object storage.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "formats/dataset.h"
#include "formats/tfrecord.h"
#include "formats/wds.h"
#include "io/env.h"

namespace stoker::cli {

namespace {

struct IndexArgs {
  std::string spec;
  bool force = false, dry_run = false;
};

// Whether the reader found the index at `path` wrong and scanned the shard instead (its note).
bool Ignored(const Dataset& ds, const std::string& path) {
  for (const auto& n : ds.notes())
    if (n.find("ignored index " + path + " ") != std::string::npos) return true;
  return false;
}

// The index to write for shard s, "" when it has one already (and not --force) or can have
// none (gzip-compressed: no random access); `path` gets where it goes.
std::string WdsIndexFor(Env* env, const WdsDataset& ds, size_t s, bool force, std::string* path,
                        std::string* why) {
  const std::string& shard = ds.shards()[s].path;
  *path = WdsIndexPath(shard);
  if (shard.size() > 3 && (shard.ends_with(".gz") || shard.ends_with(".tgz"))) {
    *why = "gzip-compressed (no random access)";
    return {};
  }
  if (!force && !Ignored(ds, *path) && !Ignored(ds, shard + ".idx") &&
      (env->FileExists(*path) || env->FileExists(shard + ".idx"))) {
    *why = "has an index";
    return {};
  }
  return FormatWdsIndex(ds.shard_index(s));
}

std::string TFRecordIndexFor(Env* env, const TFRecordDataset& ds, size_t s, bool force,
                             std::string* path, std::string* why) {
  const ShardInfo& info = ds.shards()[s];
  *path = info.path + ".idx";
  if (ds.gzipped(static_cast<uint32_t>(s))) {
    *why = "gzip-compressed (no random access)";
    return {};
  }
  if (!force && !Ignored(ds, *path) && env->FileExists(*path)) {
    *why = "has an index";
    return {};
  }
  std::vector<TFRecordEntry> recs;
  recs.reserve(info.end - info.begin);
  uint32_t shard = 0;
  for (uint64_t i = info.begin; i < info.end; ++i) recs.push_back(ds.Record(i, &shard));
  return FormatTFRecordIndex(recs);
}

int RunIndex(const IndexArgs& a) {
  Env* env = Env::Default();
  auto opened = OpenDataset(a.spec);
  if (!opened.ok()) return Fail(opened.status());
  const Dataset& ds = **opened;
  const auto* wds = dynamic_cast<const WdsDataset*>(&ds);
  const auto* tfr = dynamic_cast<const TFRecordDataset*>(&ds);
  if (!wds && !tfr)
    return Fail(InvalidArgument("{}: {} has no index files (stoker index writes them for "
                                "WebDataset tars and TFRecord files)",
                                a.spec, ds.format()));
  if (!ds.index_errors().empty())
    return Fail(Corrupt("{}: not indexed, a shard is damaged: {}", a.spec,
                        ds.index_errors().front()));
  size_t written = 0, kept = 0;
  for (size_t s = 0; s < ds.shards().size(); ++s) {
    std::string path, why;
    std::string text = wds ? WdsIndexFor(env, *wds, s, a.force, &path, &why)
                           : TFRecordIndexFor(env, *tfr, s, a.force, &path, &why);
    if (text.empty()) {
      std::printf("  %s: %s, left as it is\n", ds.shards()[s].path.c_str(), why.c_str());
      ++kept;
      continue;
    }
    if (!a.dry_run) {
      Status st = env->WriteFileAtomic(path, text.data(), text.size());
      if (!st.ok()) return Fail(st.WithContext("writing the index of " + ds.shards()[s].path));
    }
    std::printf("  %s%s (%llu samples)\n", a.dry_run ? "would write " : "", path.c_str(),
                static_cast<unsigned long long>(ds.shards()[s].end - ds.shards()[s].begin));
    ++written;
  }
  std::printf("stoker index: %zu index file(s) %s, %zu shard(s) left as they were\n", written,
              a.dry_run ? "to write" : "written", kept);
  return 0;
}

}  // namespace

void RegisterIndexCommand(CLI::App& app) {
  auto* c = app.add_subcommand(
      "index",
      "write the index files that let readers open WebDataset tars and TFRecord files without "
      "scanning them (DALI wds2idx / tfrecord2idx layouts), beside the shards: local, s3:// "
      "or gs://");
  auto a = std::make_shared<IndexArgs>();
  c->add_option("SPEC", a->spec,
                "the shards: wds:s3://bucket/train-{000..099}.tar, a directory, tfrecord:...")
      ->required();
  c->add_flag("--force", a->force, "rewrite the indices that exist (a wrong one is rewritten without it)");
  c->add_flag("--dry-run", a->dry_run, "say what would be written, write nothing");
  c->callback([a] { SetAction([a] { return RunIndex(*a); }); });
}

}  // namespace stoker::cli
