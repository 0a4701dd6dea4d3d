// Kafka topics as a dataset (librdkafka): a bounded window of a topic's partitions, read as
// one shard per partition, sample i of a shard being the message at offset begin + i.
//
//   kafka://HOST:PORT[,HOST:PORT...]/TOPIC[?option&option...]
//   kafka:TOPIC?bootstrap=HOST:PORT[,...][&option...]
//
// The window is resolved when the dataset opens (watermarks and timestamp lookups on the
// broker) and is then fixed: every epoch of the pipeline reads the same messages, ranks take
// disjoint samples (strided, as for files; each rank's streams drop the others' messages)
// with equal batch counts, the partitions are read side by side (interleave(): 64 offsets of
// each of up to 8 in turn), and the pipeline's resume state (epoch, samples consumed) is
// exact. `ranges=` pins a resolved window, which is how the
// Python layer (stoker/kafka.py) re-opens exactly what a checkpoint's epoch read, and how
// follow=new moves to the next window between epochs.
//
// Options:
//   start=earliest|latest|N|ts:T   first offset per partition (default earliest); N an
//                                  offset, T a timestamp (ISO 8601 or epoch ms): the first
//                                  message at or after it
//   end=latest|N|ts:T              one past the last offset (default latest: the high
//                                  watermark when the dataset opens); an N beyond the high
//                                  watermark is an error (the data is not there yet)
//   count=N                        at most N messages per partition
//   partitions=0,2,5               only these partitions (default all)
//   ranges=P:B-E,P:B-E             exactly these offset ranges (overrides start/end/count)
//   value=raw|json|stoker          stoker: stoker's own sample encoding (below; what
//                                  `stoker convert SRC kafka://...` writes by default);
//                                  raw: the value is one field named by field= (default
//                                  "bin"; field=jpg for encoded images); json: a JSON object
//                                  whose members are fields (strings as UTF-8 bytes, numbers
//                                  and booleans as text, objects and arrays as JSON text;
//                                  an integer "label" also sets the sample's label)
//   base64=a,b                     json members holding base64 (decoded to bytes)
//   meta=key,timestamp,offset,partition
//                                  message metadata as fields kafka.key, kafka.timestamp
//                                  (ms, text), kafka.offset, kafka.partition
//   timeout_ms=N                   how long a read waits for the broker without progress
//                                  before failing (default 30000)
//   group=NAME                     for monitoring only: commit, per partition, the offset
//                                  after the last message read, to consumer group NAME
//                                  every commit_ms (default 5000) and when a partition's
//                                  window is read (rank 0 only; resume never uses it)
//   rdkafka.NAME=VALUE             any librdkafka consumer property
//
// Sample keys are "TOPIC/PARTITION/OFFSET" (unique; message keys are not, so they are
// fields). An offset missing inside the window (compacted away, deleted, a transaction
// marker) is an error naming the offsets; with the pipeline's on_error=skip each missing
// offset is a skipped sample, counted.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "formats/dataset.h"

namespace stoker {

struct KafkaBound {
  enum Kind { kEarliest, kLatest, kOffset, kTimestamp };
  Kind kind = kEarliest;
  int64_t value = 0;  // the offset, or the timestamp in epoch ms
};

struct KafkaSpec {
  std::string bootstrap;  // "host:port[,host:port]"
  std::string topic;
  std::vector<int32_t> partitions;  // empty: all
  KafkaBound start{KafkaBound::kEarliest, 0};
  KafkaBound end{KafkaBound::kLatest, 0};
  int64_t count = -1;
  std::map<int32_t, std::pair<int64_t, int64_t>> ranges;  // pinned [begin, end) per partition
  enum Value { kRaw, kJson, kStoker } value = kRaw;
  std::string field = "bin";
  std::set<std::string> base64;
  std::set<std::string> meta;  // key, timestamp, offset, partition
  int timeout_ms = 30000;
  std::string group;      // group=: commit the progress to this consumer group (monitoring)
  int commit_ms = 5000;   // commit_ms=: how often
  std::map<std::string, std::string> config;  // rdkafka.* properties
};

// Parses what follows "kafka:" ("//host:port/topic?..." or "topic?bootstrap=...").
Result<KafkaSpec> ParseKafkaSpec(const std::string& spec);

// The spec with its window pinned: "kafka://B/T?ranges=...&<the other options>".
std::string KafkaSpecWithRanges(const KafkaSpec& spec,
                                const std::map<int32_t, std::pair<int64_t, int64_t>>& ranges);

// One partition's window as resolved at open, with the watermarks seen then.
struct KafkaPartitionWindow {
  int32_t partition = 0;
  int64_t begin = 0, end = 0;  // offsets [begin, end)
  int64_t low = 0, high = 0;   // the partition's watermarks when resolved
};

// Resolves the spec's window on the broker (metadata, watermarks, timestamp lookups).
Result<std::vector<KafkaPartitionWindow>> ResolveKafkaWindow(const KafkaSpec& spec);

Result<std::unique_ptr<Dataset>> OpenKafkaDataset(const std::string& spec,
                                                  const DatasetOptions& opts);

// The windows a Kafka dataset reads; nullptr when `ds` is not one.
const std::vector<KafkaPartitionWindow>* KafkaWindowsOf(const Dataset& ds);

// Decodes standard base64 (with or without padding); false on a bad character.
bool DecodeBase64(const std::string& in, std::vector<uint8_t>* out);

// stoker's sample encoding, one message value per sample (value=stoker), little-endian:
//   "STKS" | u8 version (1) | i64 label | u32 key length, key | u32 field count |
//   per field: u16 name length, name | u32 data length, data
// A reader puts the fields back by name, the label as the sample's label and the key in the
// field "__key__" (the sample's own key stays TOPIC/PARTITION/OFFSET: message keys need not
// be unique).
std::string EncodeStokerSample(const Sample& s);
// Decodes into `out` (fields added; label set). A value that is not this encoding, or is
// cut short or has bytes after its last field, is kCorrupt naming `where` and the byte.
Status DecodeStokerSample(const uint8_t* data, size_t n, const std::string& where, Sample* out);

bool KafkaAvailable();
void RegisterKafkaFormat();

// Writer for `stoker convert SRC kafka://HOST:PORT/TOPIC[?options]` (librdkafka producer,
// idempotent, acks=all): one message per sample, keyed by the sample's key, the value in
// stoker's encoding (value=stoker, default) or one field's bytes (value=raw&field=jpg).
// partition=N sends every message to partition N (order kept, as for a file); by default
// the key picks the partition (librdkafka's consistent murmur2 partitioner). Close() waits
// for every delivery report; a message the broker did not take is an error naming the
// topic, partition and sample key. rdkafka.NAME=VALUE sets producer properties.
void RegisterKafkaWriter();

}  // namespace stoker
