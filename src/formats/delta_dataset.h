// Delta Lake tables as a dataset: `delta:<table>[?option&option...]`, where <table> is the
// table's root directory (or a URL the Env reads, e.g. s3://bucket/table with a remote Env).
//
// The log is replayed by formats/delta_log.h; each live data file is one shard, read by the
// Parquet dataset (formats/parquet_dataset.h), files sorted by path. A sample is one row:
// the data file's columns as fields (column "key" → Sample::key, "label" → Sample::label, as
// for Parquet), plus each partition column as a field holding its value as text (a
// partition column named "label" of an integer type sets Sample::label). Without a "key"
// column, the key is "<data file path in the log>:<row>".
//
// Options (query parameters, '&'-separated):
//   version=N            time travel to version N
//   timestamp=T          time travel to the newest version committed at or before T:
//                        ISO 8601 (2026-12-03T10:00:00Z, offsets allowed) or epoch ms
//   since=M              only the files data-changing commits after version M added (an
//                        incremental read of an append-only table; deletes are refused)
//   columns=a,b          read only these columns (data or partition columns)
//   where=COL OP VALUE   partition filter; OP: = != < <= > >= or ' in ' with '|'-separated
//                        values (where=split in train|val); repeat for AND. Integer partition
//                        columns compare as numbers, others as text; a null value matches
//                        only != .
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/delta_log.h"

namespace stoker {

struct DeltaPartitionFilter {
  std::string column;
  std::string op;                   // "=", "!=", "<", "<=", ">", ">=", "in"
  std::vector<std::string> values;  // one, or several for "in"
};

struct DeltaSpec {
  std::string table;
  DeltaSnapshotOptions snapshot;
  std::optional<std::vector<std::string>> columns;
  std::vector<DeltaPartitionFilter> where;
};

// Parses "<table>?version=3&columns=jpg,label" (the part after "delta:").
Result<DeltaSpec> ParseDeltaSpec(const std::string& spec);

// Parses a time travel timestamp (ISO 8601 or epoch milliseconds) into epoch milliseconds.
Result<int64_t> ParseDeltaTimestamp(const std::string& s);

Result<std::unique_ptr<Dataset>> OpenDeltaDataset(const std::string& spec,
                                                  const DatasetOptions& opts);

// The snapshot a Delta dataset was opened at (after partition filters); nullptr when `ds`
// is not a Delta dataset.
const DeltaSnapshot* DeltaSnapshotOf(const Dataset& ds);

bool DeltaAvailable();

}  // namespace stoker
