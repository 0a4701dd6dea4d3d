// Delta Lake transaction log replay (the `_delta_log` directory of a table): which Parquet
// data files make up the table at a version, with their partition values.
//
// Reads JSON commits (NNNNNNNNNNNNNNNNNNNN.json, newline-delimited actions, parsed with
// simdjson), classic Parquet checkpoints (NNN.checkpoint.parquet and multi-part
// NNN.checkpoint.PPPPPPPPPP.TTTTTTTTTT.parquet, read with Arrow's Parquet library) and
// `_last_checkpoint` (a hint, checked against the listing). The snapshot at version N is the
// newest complete checkpoint at or below N plus the commits after it, replayed in order:
// `add` inserts or replaces a file by path, `remove` drops it; the last `protocol` and
// `metaData` win. Every read goes through Env (local paths or, with a remote Env, URLs).
//
// Reader features implemented: protocol (1, *) and (3, *) with readerFeatures
// timestampNtz and vacuumProtocolCheck; reader version 2 only without column mapping. The
// rest (deletionVectors, columnMapping, v2Checkpoint, typeWidening, variantType, ...) is
// refused with kUnimplemented naming the feature and the table, as is any add action that
// carries a deletion vector.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/env.h"

namespace stoker {

struct DeltaField {
  std::string name;
  std::string type;  // the schema's primitive type name ("long", "binary", ...); "struct",
                     // "array", "map" for nested ones
  bool nullable = true;
};

struct DeltaProtocol {
  int min_reader = 0, min_writer = 0;
  std::vector<std::string> reader_features, writer_features;
};

struct DeltaMetadata {
  std::string id;
  std::string provider = "parquet";
  std::vector<DeltaField> schema;
  std::vector<std::string> partition_columns;
  std::map<std::string, std::string> configuration;
};

struct DeltaFile {
  std::string path;  // as in the log, percent-decoded: relative to the table or absolute URL
  std::map<std::string, std::optional<std::string>> partition;  // nullopt = null value
  int64_t size = 0;
  int64_t version = -1;  // version of the add action (the checkpoint's version when the add
                         // came from a checkpoint)
  bool data_change = true;
  bool deletion_vector = false;
};

// What replaying actions accumulates. Files keyed by path.
struct DeltaLogState {
  std::optional<DeltaProtocol> protocol;
  std::optional<DeltaMetadata> metadata;
  std::map<std::string, DeltaFile> files;
  // Filled only when `track_removes_after` >= 0: data-changing removes of later versions
  // (appends-only checks of incremental reads), as "version: path".
  int64_t track_removes_after = -1;
  std::vector<std::string> data_removes;
  std::optional<int64_t> in_commit_timestamp;  // commitInfo.inCommitTimestamp, if any
};

// Applies one JSON commit (newline-delimited actions) of `version`, read from `file` (for
// messages), to `state`. kCorrupt naming the file, line and what is wrong.
Status ApplyDeltaCommit(std::string_view json, const std::string& file, int64_t version,
                        DeltaLogState* state);

// Parses a Delta schemaString (a struct type) into its top-level fields.
Result<std::vector<DeltaField>> ParseDeltaSchema(std::string_view json);

struct DeltaSnapshotOptions {
  std::optional<int64_t> version;       // time travel by version (default: latest)
  std::optional<int64_t> timestamp_ms;  // time travel: newest version committed at or before
  // Incremental read: only files added (by data-changing adds) after this version and still
  // live at the snapshot's version; a data-changing remove in between is refused.
  std::optional<int64_t> since;
};

struct DeltaSnapshot {
  std::string table;  // the table's root as given
  int64_t version = -1;
  int64_t timestamp_ms = 0;  // commit time of `version` (file modification time, or
                             // inCommitTimestamp when the table records one)
  DeltaProtocol protocol;
  DeltaMetadata metadata;
  std::vector<DeltaFile> files;  // sorted by path
  std::string checkpoint;        // checkpoint file the replay started from ("" = none)
  std::vector<std::string> notes;
};

// Replays the log of `table` to the version `opts` selects and checks the protocol.
Result<DeltaSnapshot> LoadDeltaSnapshot(Env* env, const std::string& table,
                                        const DeltaSnapshotOptions& opts = {});

// The newest version of `table` (the highest commit in its log).
Result<int64_t> LatestDeltaVersion(Env* env, const std::string& table);

// Full path of a data file of the snapshot (`table` joined with a relative path; absolute
// URLs and file:// URLs as they are / stripped).
std::string DeltaDataPath(const std::string& table, const std::string& path);

// Percent-decoding of log paths ("a%20b" → "a b"); malformed escapes stay as they are.
std::string DeltaPercentDecode(std::string_view s);

}  // namespace stoker
