// stoker bench read --data SPEC [--random]: dataset reads vs raw reads of the same bytes.
//
// Sequential: Dataset::Read of every sample in order vs reading every shard file front to
// back in 1 MiB preads into one reused buffer. Random: Read in a shuffled order vs one
// pread per sample of the same byte range (tar header + members, or the TFRecord frame)
// into a reused buffer. Files are read once before timing (page cache), best of --repeat.
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
      auto raw_random = [&]() -> Status {
        for (uint64_t i : order) {
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
      double best_raw = 1e100, best_stoker = 1e100;
      for (int r = 0; r < std::max(1, a->repeat); ++r) {
        double t0 = Now();
        st = a->random ? raw_random() : raw_seq();
        double t1 = Now();
        if (!st.ok()) return Fail(st);
        st = stoker_read();
        double t2 = Now();
        if (!st.ok()) return Fail(st);
        best_raw = std::min(best_raw, t1 - t0);
        best_stoker = std::min(best_stoker, t2 - t1);
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
      if (a->random)
        std::printf("ratio stoker/raw time: %.2fx (target <= 2x)\n", best_stoker / best_raw);
      else
        std::printf("stoker throughput / raw: %.1f%% (target >= 90%%)\n",
                    100.0 * best_raw / best_stoker);
      return 0;
    });
  });
}

}  // namespace stoker::cli
