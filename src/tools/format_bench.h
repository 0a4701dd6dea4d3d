// `stoker bench formats`: converts a sample of a data set to each writable format (through
// the writer registry, so every format with a writer appears) and measures bytes on disk,
// conversion time, and read speed: sequential scan, uniform random access, and the read
// order of a shuffled epoch (shard order shuffled, sequential inside a shard, as
// WebDataset-style loaders read; a full permutation for formats whose
// random_access_is_cheap()). Each read pass runs cold (the files' pages dropped with
// posix_fadvise DONTNEED and the dataset reopened) and warm (after a full read).
// A "raw" row reads the same payload bytes from one flat file as the baseline: sequentially
// both in 1 MiB blocks and by one pread per record in file order (each into a reused
// buffer; the faster of the two is the baseline), and at random by one pread per record.
//
// Timing: the dataset is opened once per cache state (its open time is reported apart),
// every pass runs `repeats` times and the fastest counts, both in wall-clock time and in
// the reading thread's CPU time (CLOCK_THREAD_CPUTIME_ID). Each warm pass is preceded by a
// raw pass of the same kind, and a format's ratios use those paired raw passes, so that a
// change in machine load during the run shifts both sides alike.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "io/env.h"

namespace stoker {

struct FormatBenchOptions {
  std::string source;               // dataset spec, e.g. "wds:/data/train-{000..009}.tar"
  uint64_t samples = 1000;          // evenly spaced over the source
  std::vector<std::string> formats; // empty: every registered writer
  std::string work_dir;             // converted copies go to work_dir/<format>/
  bool cold = true;
  bool warm = true;
  uint64_t samples_per_shard = 0;   // sharded formats; 0: samples/8 (at least 1)
  uint64_t seed = 1;
  int repeats = 3;                  // each timed pass runs this often; the fastest counts
  bool keep = false;                // keep the converted copies
  Env* env = nullptr;
  Clock* clock = nullptr;
  std::function<void(const std::string&)> progress;  // one line per step
};

struct ReadSpeeds {
  double seq_sps = 0, seq_mb_s = 0;
  double rand_sps = 0, rand_mb_s = 0;
  double shuffled_sps = 0, shuffled_mb_s = 0;
  // Fastest pass of each kind: wall seconds and the reading thread's CPU seconds.
  double seq_s = 0, seq_cpu_s = 0;
  double rand_s = 0, rand_cpu_s = 0;
  double shuffled_s = 0, shuffled_cpu_s = 0;
  double open_s = 0;  // opening the dataset (indexing included), fastest
};

struct FormatBenchRow {
  std::string format;
  bool ok = false;
  std::string error;        // when !ok
  uint64_t samples = 0;
  uint64_t files = 0;
  uint64_t bytes_on_disk = 0;
  double convert_s = 0;
  bool has_cold = false, has_warm = false;
  ReadSpeeds cold, warm;
  // The raw baseline's warm passes run alternately with this format's (best of the same
  // number of runs): the reference for this row's ratios. Sequential: the faster raw method.
  double ref_seq_s = 0, ref_seq_cpu_s = 0, ref_rand_s = 0, ref_rand_cpu_s = 0;
};

struct FormatBenchResult {
  std::string source;
  uint64_t samples = 0;
  uint64_t payload_bytes = 0;   // sum of field bytes of the samples
  std::vector<FormatBenchRow> rows;  // "raw" first
  // The two sequential raw baselines (warm when measured, else cold), seconds per pass:
  // 1 MiB block reads, and one pread per record in file order. rows[0] holds the faster.
  double raw_block_s = 0, raw_block_cpu_s = 0;
  double raw_record_s = 0, raw_record_cpu_s = 0;
  std::string raw_seq_method;  // "1 MiB blocks" or "per-record preads"
  // Warm per-record preads in file order plus a CRC32C of every record.
  double raw_crc_s = 0, raw_crc_cpu_s = 0;
  std::string recommendation;
};

Result<FormatBenchResult> RunFormatBench(const FormatBenchOptions& opts);
std::string FormatBenchTable(const FormatBenchResult& r);
std::string FormatBenchJson(const FormatBenchResult& r);
std::string FormatBenchHtml(const FormatBenchResult& r);

}  // namespace stoker
