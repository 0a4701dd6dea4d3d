// `stoker convert` and `stoker verify`: stream any dataset into any registered writer
// with a manifest that makes the result checkable and the run restartable.
//
// Content hash: XXH64 per sample over (key, label, fields in order: name, size, bytes),
// leaving out a `cls` field when the label is set (WebDataset stores the label there, so
// the same sample hashes alike in every format). Shard checksum = XXH64 over its sample
// hashes (8 bytes LE each); dataset checksum = XXH64 over (shard checksum, sample count)
// pairs in shard order.
//
// Manifest `DST_DIR/stoker-manifest.json` (written atomically after every finished shard):
//   {"stoker_manifest": 1, "complete": bool, "source", "dst", "format", "total_samples",
//    "next_sample", "missing": [begin, end], "options": {...}, "open_spec",
//    "shards": [{"path", "first_sample", "samples", "bytes", "checksum"}],
//    "samples", "bytes", "checksum", "error"?}
// Shard paths are relative to DST_DIR. An interrupted run leaves "complete": false with
// the missing sample range; `--resume` continues after the last complete shard.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/writer.h"

namespace stoker {

uint64_t SampleContentHash(const Sample& s);
std::string HashHex(uint64_t h);

inline constexpr const char* kManifestName = "stoker-manifest.json";

struct ManifestShard {
  std::string path;  // relative to the manifest's directory
  uint64_t first_sample = 0, samples = 0, bytes = 0, checksum = 0;
};

struct ConvertOptions {
  WriterOptions writer;          // shard size, samples per shard, gzip, env
  DatasetOptions read;           // env, skip_bad_shards
  int threads = 0;               // reader threads; 0 = available CPUs
  bool resume = false;
  // Called from the writing thread after each sample (done, total).
  std::function<void(uint64_t, uint64_t)> progress;
};

struct ConvertResult {
  std::string manifest_path;
  uint64_t samples = 0;        // in the destination
  uint64_t bytes = 0;          // of the shards
  uint64_t payload_bytes = 0;  // sample field bytes written by this run
  uint64_t checksum = 0;
  uint64_t resumed_from = 0;   // first sample written by this run
  bool already_complete = false;
  std::vector<ManifestShard> shards;
};

// SRC: any OpenDataset spec; DST: a writer spec "fmt:path" (e.g. wds:out/train-%06d.tar).
Result<ConvertResult> Convert(const std::string& src, const std::string& dst,
                              const ConvertOptions& opts);

struct VerifyResult {
  bool ok = false;
  std::vector<std::string> problems;  // each names the shard (or says what is missing)
  uint64_t samples = 0;
  uint64_t checksum = 0;
};

// DST: a directory holding the manifest, the manifest file, or the writer spec.
// A failure to even read the manifest is an error; mismatches are `problems`.
Result<VerifyResult> Verify(const std::string& dst, Env* env = nullptr, int threads = 0,
                            std::function<void(uint64_t, uint64_t)> progress = {});

// Where the manifest of a destination lives.
std::string ManifestPathFor(Env* env, const std::string& dst);

// A brace pattern that expands to exactly `names` (all in one directory), or a {a,b,...}
// list when no numeric range fits.
std::string BracePatternFor(const std::vector<std::string>& names);

}  // namespace stoker
