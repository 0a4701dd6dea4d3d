// TFRecord: records framed as
//   uint64 length | uint32 masked_crc32c(length bytes) | data[length] | uint32 masked_crc32c(data)
// (little-endian, no file header), optionally as one gzip (or zlib) stream. A DALI
// `tfrecord2idx` index ("<offset> <size>" per record, size = 16 + length) gives random
// access to uncompressed files; it is written as "<shard>.idx" and looked for there and
// at "<stem>.idx".
//
// Samples are tf.train.Example messages (see example.h), mapped as:
//  - bytes features → fields, verbatim; "image/encoded" is named "jpg" (the TFRecordDataset
//    registered as "tfrecord-raw" keeps every original name); a bytes list with k > 1
//    values gives fields "name", "name#1" ... "name#k-1";
//  - the label: the first of the int64 features "image/class/label", "label", "cls" that
//    holds exactly one value becomes Sample::label (and no field);
//  - other int64 and float features → fields holding their values as decimal text,
//    space-separated (floats in the shortest form that reads back exactly);
//  - a bytes feature "__key__" (written by stoker) is the sample key; without it the key
//    is "<shard stem>/<record number>".
// Gzip files cannot be read at an offset: opening one decompresses it once to index it,
// and reads go through one cursor per shard that restarts when asked for an earlier record
// (sequential reading costs one pass; random access costs up to a pass per read).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/example.h"
#include "io/file_cache.h"
#include "io/gzip.h"
#include "formats/sharded.h"
#include "formats/writer.h"

namespace stoker {

inline constexpr size_t kTFRecordHeader = 12;  // length + masked crc of length
inline constexpr size_t kTFRecordFooter = 4;   // masked crc of data

struct TFRecordEntry {
  uint64_t offset = 0;  // of the header, in the (uncompressed) stream
  uint64_t size = 0;    // header + data + footer
  uint64_t length() const { return size - kTFRecordHeader - kTFRecordFooter; }
};

// Validates a 12-byte header; returns the data length. Errors name path, record, offset.
Result<uint64_t> ParseTFRecordHeader(const uint8_t* h, const std::string& path, uint64_t record,
                                     uint64_t offset);
// Checks the footer CRC of `data`.
Status CheckTFRecordData(const uint8_t* data, size_t n, const uint8_t* footer,
                         const std::string& path, uint64_t record, uint64_t offset);
// Frames one record into `out` (appends).
void AppendTFRecordFrame(const uint8_t* data, size_t n, std::vector<uint8_t>* out);

struct TFRecordScan {
  std::vector<TFRecordEntry> records;  // complete records before any damage
  Status error;                        // OK or the damage (record number and offset)
};
// Indexes an uncompressed file by reading only the 12-byte headers (length CRC checked).
TFRecordScan ScanTFRecordFile(const RandomAccessFile& file);
// Parses a whole in-memory stream, checking both CRCs (fuzzing, gzip indexing).
TFRecordScan ParseTFRecordBuffer(const uint8_t* data, size_t n, const std::string& path);

std::string FormatTFRecordIndex(const std::vector<TFRecordEntry>& recs);
// Accepts the index only if it tiles the file exactly: first offset 0, each record
// starting where the previous one ended, the last ending at file_size.
Status ParseTFRecordIndex(const std::string& text, const std::string& path, uint64_t file_size,
                          std::vector<TFRecordEntry>* out);

// Writes framed records to a WritableFile, optionally through gzip.
class TFRecordFileWriter {
 public:
  TFRecordFileWriter(WritableFile* out, bool gzip);
  ~TFRecordFileWriter();
  Status Append(const uint8_t* data, size_t n);
  Status Finish();
  uint64_t offset() const { return offset_; }  // uncompressed bytes so far

 private:
  Status Put(const uint8_t* p, size_t n);
  WritableFile* out_;
  struct Z;
  std::unique_ptr<Z> z_;
  uint64_t offset_ = 0;
  std::vector<uint8_t> frame_;
};

// Maps a decoded Example onto a Sample (rules above).
Status ExampleToSample(const uint8_t* record, const std::vector<ExampleFeature>& feats,
                       bool raw_names, Sample* out);

struct TFRecordOptions {
  bool raw_names = false;   // keep "image/encoded" instead of "jpg"
  bool verify_crc = true;   // check the data CRC on every read
  size_t max_open_files = 64;
};

class TFRecordDataset final : public Dataset {
 public:
  static Result<std::unique_ptr<TFRecordDataset>> Open(const std::string& spec,
                                                       const DatasetOptions& opts,
                                                       const TFRecordOptions& topts = {});
  ~TFRecordDataset() override;
  uint64_t size() const override { return total_; }
  const std::vector<ShardInfo>& shards() const override { return shards_; }
  Status Read(uint64_t index, Sample* out) const override;
  std::string Key(uint64_t index) const override;
  std::string Location(uint64_t index) const override;
  std::string format() const override { return "tfrecord"; }
  std::vector<std::string> index_errors() const override { return errors_; }
  std::vector<std::string> notes() const override { return notes_; }
  // Gzip-compressed files are read sequentially (a read behind the stream restarts it).
  Status CheckRandomAccess() const override {
    for (const auto& s : shard_info_)
      if (s.gzip)
        return InvalidArgument("{} is gzip-compressed and read sequentially: it has no random "
                               "access (use uncompressed TFRecord files with a .idx for it)",
                               s.path);
    return Status::OK();
  }
  // The record of sample `index`: shard and [offset, offset + size) in its (uncompressed)
  // stream.
  TFRecordEntry Record(uint64_t index, uint32_t* shard) const;
  bool gzipped(uint32_t shard) const { return shard_info_[shard].gzip; }
  // Reads the raw record payload (the serialized Example) of sample `index`.
  Status ReadRecord(uint64_t index, std::vector<uint8_t>* payload) const;

 private:
  struct ShardState {
    std::string path, stem;
    bool gzip = false;
    std::vector<TFRecordEntry> records;
    struct Cursor;
    std::shared_ptr<Cursor> cursor;  // gzip only
  };
  TFRecordDataset(Env* env, TFRecordOptions o) : env_(env), opts_(o), files_(env, o.max_open_files) {}
  void Locate(uint64_t index, uint32_t* shard, uint64_t* local) const;
  Status ReadGzipRecord(uint32_t shard, uint64_t local, std::vector<uint8_t>* frame) const;
  Env* env_;
  TFRecordOptions opts_;
  ShardFileCache files_;
  std::vector<ShardState> shard_info_;
  std::vector<ShardInfo> shards_;
  uint64_t total_ = 0;
  std::vector<std::string> errors_, notes_;
};

// Writes one tf.train.Example per sample: "__key__" (bytes), each field as a bytes
// feature ("jpg" stored as "image/encoded"), and "label" (int64) when label >= 0 and no
// field has that name. Shards from a printf pattern ("%05d"), ".partial" then rename,
// a DALI index "<shard>.idx" unless gzip.
class TFRecordWriter final : public ShardedWriter {
 public:
  static Result<std::unique_ptr<TFRecordWriter>> Open(const std::string& pattern,
                                                      const WriterOptions& opts);

 private:
  TFRecordWriter(std::string pattern, WriterOptions opts)
      : ShardedWriter(std::move(pattern), std::move(opts)) {}
  Status BeginShard(WritableFile* file) override;
  Status AppendSample(const Sample& s) override;
  uint64_t shard_bytes() const override { return rec_->offset(); }
  uint64_t shard_samples() const override { return cur_.size(); }
  Status EndShard() override { return rec_->Finish(); }
  Status WriteIndex(const std::string& path) override;
  std::unique_ptr<TFRecordFileWriter> rec_;
  std::vector<TFRecordEntry> cur_;
  std::vector<uint8_t> buf_;
};

// Encodes a Sample as a serialized Example (the writer's mapping).
void SampleToExample(const Sample& s, std::vector<uint8_t>* out);

void RegisterTFRecordFormat();

}  // namespace stoker
