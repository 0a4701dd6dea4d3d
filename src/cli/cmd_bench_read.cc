// stoker bench read --data SPEC [--random]: dataset reads vs raw reads of the same bytes.
//
// Sequential: Dataset::Read of every sample in order vs the faster of reading every shard
// file front to back in 1 MiB preads and one pread per record in file order, each into
// one reused buffer (raw and stoker passes alternate; best of --repeat, wall and CPU time).
// Random: Read in a shuffled order vs one
// pread per sample of the same byte range (tar header + members, or the TFRecord frame)
// into a reused buffer. Files are read once before timing (page cache), best of --repeat.
#include <cstdint>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>

#include "cli/commands.h"
#include "core/random.h"
#include "formats/dataset.h"
#include "formats/tfrecord.h"
#include "formats/wds.h"

namespace stoker::cli {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// This thread's CPU time (the steadier measure on a shared machine).
double CpuNow() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

struct Range {
  uint32_t shard;
  uint64_t begin, end;
};

}  // namespace

void RegisterBenchReadCommand(CLI::App& bench) {
  struct Args {
    std::string data;
    bool random = false;
    int repeat = 3;
    uint64_t seed = 1;
  };
  auto a = std::make_shared<Args>();
  auto* c = bench.add_subcommand("read", "read a wds/tfrecord dataset vs raw reads of the same bytes");
  c->add_option("--data", a->data, "dataset spec (wds or tfrecord)")->required();
  c->add_flag("--random", a->random, "random order through the index vs raw pread of each record");
  c->add_option("--repeat", a->repeat, "runs of each side; the best is reported");
  c->add_option("--seed", a->seed, "shuffle seed for --random");
  c->callback([a] {
    SetAction([a]() -> int {
      auto opened = OpenDataset(a->data);
      if (!opened.ok()) return Fail(opened.status());
      const Dataset& ds = **opened;
      uint64_t n = ds.size();
      if (n == 0) return Fail(InvalidArgument("{}: no samples", a->data));
      std::vector<Range> ranges(n);
      auto* wds = dynamic_cast<const WdsDataset*>(&ds);
      auto* tfr = dynamic_cast<const TFRecordDataset*>(&ds);
      if (!wds && !tfr) return Fail(InvalidArgument("bench read supports wds and tfrecord"));
      // Raw byte ranges exist only where the format has random access (not gzip shards).
      if (Status ra = ds.CheckRandomAccess(); !ra.ok())
        return Fail(ra.WithContext("bench read"));
      for (uint64_t i = 0; i < n; ++i) {
        if (wds) {
          wds->ByteRange(i, &ranges[i].shard, &ranges[i].begin, &ranges[i].end);
        } else {
          TFRecordEntry e = tfr->Record(i, &ranges[i].shard);
          if (tfr->gzipped(ranges[i].shard))
            return Fail(InvalidArgument("bench read: gzip shards have no raw byte ranges"));
          ranges[i].begin = e.offset;
          ranges[i].end = e.offset + e.size;
        }
      }
      std::vector<std::unique_ptr<RandomAccessFile>> files;
      uint64_t file_bytes = 0;
      for (const auto& s : ds.shards()) {
        auto f = Env::Default()->NewRandomAccessFile(s.path);
        if (!f.ok()) return Fail(f.status());
        file_bytes += (*f)->size();
        files.push_back(std::move(f).value());
      }
      std::vector<uint8_t> buf(1 << 20);
      auto raw_seq = [&]() -> Status {
        for (auto& f : files)
          for (uint64_t off = 0; off < f->size(); off += buf.size()) {
            size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), f->size() - off));
            STOKER_RETURN_IF_ERROR(f->ReadExact(off, want, buf.data()));
          }
        return Status::OK();
      };
      std::vector<uint64_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      if (a->random) {
        Rng rng(a->seed, 0, 0);
        for (uint64_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng.Below(i + 1)]);
      }
      // Sequential raw, second method: one pread per record in file order (often faster
      // than 1 MiB blocks: the record-sized buffer stays in L2). The faster counts.
      std::vector<uint64_t> in_order(n);
      std::iota(in_order.begin(), in_order.end(), 0);
      // One pread per record, in the given order, into the reused buffer.
      auto raw_preads = [&](const std::vector<uint64_t>& which) -> Status {
        for (uint64_t i : which) {
          const Range& r = ranges[i];
          size_t len = static_cast<size_t>(r.end - r.begin);
          if (buf.size() < len) buf.resize(len);
          STOKER_RETURN_IF_ERROR(files[r.shard]->ReadExact(r.begin, len, buf.data()));
        }
        return Status::OK();
      };
      Sample s;
      uint64_t payload = 0;
      auto stoker_read = [&]() -> Status {
        payload = 0;
        for (uint64_t i : order) {
          STOKER_RETURN_IF_ERROR(ds.Read(i, &s));
          payload += s.bytes();
        }
        return Status::OK();
      };
      Status st = raw_seq();  // warm the page cache
      if (!st.ok()) return Fail(st);
      double best_raw = 1e100, best_stoker = 1e100, best_blocks = 1e100, best_records = 1e100;
      double cpu_raw = 1e100, cpu_stoker = 1e100;
      for (int r = 0; r < std::max(1, a->repeat); ++r) {
        double t0 = Now(), c0 = CpuNow();
        st = a->random ? raw_preads(order) : raw_seq();
        double t1 = Now(), c1 = CpuNow();
        if (!st.ok()) return Fail(st);
        double t1b = t1, c1b = c1;
        if (!a->random) {
          st = raw_preads(in_order);
          t1b = Now();
          c1b = CpuNow();
          if (!st.ok()) return Fail(st);
          best_blocks = std::min(best_blocks, t1 - t0);
          best_records = std::min(best_records, t1b - t1);
          cpu_raw = std::min({cpu_raw, c1 - c0, c1b - c1});
        } else {
          cpu_raw = std::min(cpu_raw, c1 - c0);
        }
        st = stoker_read();
        double t2 = Now(), c2 = CpuNow();
        if (!st.ok()) return Fail(st);
        best_raw = std::min({best_raw, t1 - t0, a->random ? 1e100 : t1b - t1});
        best_stoker = std::min(best_stoker, t2 - t1b);
        cpu_stoker = std::min(cpu_stoker, c2 - c1b);
      }
      uint64_t raw_bytes = 0;
      if (a->random) {
        for (const auto& r : ranges) raw_bytes += r.end - r.begin;
      } else {
        raw_bytes = file_bytes;
      }
      std::printf("dataset %s (%s): %llu samples, %llu shards, %.1f MB in files, %.1f MB payload\n",
                  a->data.c_str(), ds.format().c_str(), (unsigned long long)n,
                  (unsigned long long)ds.shards().size(), file_bytes / 1e6, payload / 1e6);
      std::printf("%s raw:    %.3f s  %.0f MB/s  %.0f records/s\n",
                  a->random ? "random pread" : "sequential", best_raw, raw_bytes / 1e6 / best_raw,
                  n / best_raw);
      std::printf("%s stoker: %.3f s  %.0f MB/s  %.0f samples/s\n",
                  a->random ? "random" : "sequential", best_stoker,
                  raw_bytes / 1e6 / best_stoker, n / best_stoker);
      if (!a->random)
        std::printf("raw methods: 1 MiB blocks %.3f s, per-record preads %.3f s (the faster is "
                    "the baseline)\n",
                    best_blocks, best_records);
      if (a->random)
        std::printf("ratio stoker/raw time: %.2fx, by CPU time %.2fx (target <= 2x)\n",
                    best_stoker / best_raw, cpu_stoker / cpu_raw);
      else
        std::printf("stoker throughput / raw: %.1f%%, by CPU time %.1f%% (target >= 90%%)\n",
                    100.0 * best_raw / best_stoker, 100.0 * cpu_raw / cpu_stoker);
      return 0;
    });
  });
}

}  // namespace stoker::cli
