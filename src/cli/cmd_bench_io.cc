// stoker bench io PATH: the storage probe (src/tools/probe.h).
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/progress.h"
#include "tools/probe.h"

namespace stoker::cli {
namespace {

struct BenchIoArgs {
  std::string path;
  std::string size = "1g";
  std::string blocks = "4k,64k,1m,16m";
  std::string threads = "1,4,16,64";
  double seconds = 2.0;
  bool keep = false, no_direct = false, seq_only = false, rand_only = false;
  double need_sps = 0, sample_kb = 0;
  std::string json, html;
};

Result<std::vector<std::string>> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  if (out.empty()) return InvalidArgument("empty list '{}'", s);
  return out;
}

Status WriteText(const std::string& path, const std::string& text) {
  return Env::Default()->WriteFileAtomic(path, text.data(), text.size());
}

int RunBenchIo(const BenchIoArgs& a) {
  ProbeOptions o;
  o.path = a.path;
  auto size = ParseByteSize(a.size);
  if (!size.ok()) return Fail(size.status());
  o.file_bytes = *size;
  auto bl = SplitList(a.blocks);
  if (!bl.ok()) return Fail(bl.status());
  o.block_sizes.clear();
  for (const auto& b : *bl) {
    auto v = ParseByteSize(b);
    if (!v.ok()) return Fail(v.status());
    o.block_sizes.push_back(static_cast<size_t>(*v));
  }
  auto th = SplitList(a.threads);
  if (!th.ok()) return Fail(th.status());
  o.concurrency.clear();
  for (const auto& t : *th) {
    char* end = nullptr;
    long v = std::strtol(t.c_str(), &end, 10);
    if (!end || *end || v < 1) return Fail(InvalidArgument("bad --threads entry '{}'", t));
    o.concurrency.push_back(static_cast<int>(v));
  }
  if (a.seconds <= 0) return Fail(InvalidArgument("--seconds must be > 0"));
  if ((a.need_sps > 0) != (a.sample_kb > 0))
    return Fail(InvalidArgument("--need-samples-per-s and --sample-kb go together"));
  o.seconds_per_point = a.seconds;
  o.keep_file = a.keep;
  o.allow_direct = !a.no_direct;
  o.sequential = !a.rand_only;
  o.random = !a.seq_only;
  Progress prog("bench io", o.block_sizes.size() * o.concurrency.size() *
                                ((o.sequential ? 1 : 0) + (o.random ? 1 : 0)));
  o.progress = [&](size_t done, size_t total, const std::string& what) { prog.Update(done, what); };
  auto r = RunStorageProbe(o);
  prog.Done();
  if (!r.ok()) return Fail(r.status());
  FeedAdvice adv;
  const FeedAdvice* ap = nullptr;
  if (a.need_sps > 0) {
    adv = AdviseFeed(*r, a.need_sps, a.sample_kb);
    ap = &adv;
  }
  std::fputs(ProbeTable(*r).c_str(), stdout);
  if (ap) std::printf("\n%s\n", ap->text.c_str());
  if (!a.json.empty()) {
    Status st = WriteText(a.json, ProbeJson(*r, ap));
    if (!st.ok()) return Fail(st);
  }
  if (!a.html.empty()) {
    Status st = WriteText(a.html, ProbeHtml(*r, ap));
    if (!st.ok()) return Fail(st);
  }
  return 0;
}

}  // namespace

void RegisterBenchIoCommand(CLI::App& bench) {
  auto a = std::make_shared<BenchIoArgs>();
  CLI::App* c = bench.add_subcommand(
      "io", "storage probe: sequential/random read MB/s and IOPS over block sizes and "
            "concurrency, page cache bypassed (O_DIRECT or fadvise DONTNEED)");
  c->add_option("path", a->path,
                "directory to create the test file in, or an existing file; or an object URL "
                "(s3://bucket/prefix/, gs://...): a test object is uploaded there")
      ->required();
  c->add_option("--size", a->size, "size of the test file (e.g. 256m, 1g)")->capture_default_str();
  c->add_option("--blocks", a->blocks, "block sizes, comma-separated (4k..16m)")->capture_default_str();
  c->add_option("--threads", a->threads, "concurrency levels, comma-separated")->capture_default_str();
  c->add_option("--seconds", a->seconds, "time limit per point")->capture_default_str();
  c->add_flag("--keep", a->keep, "keep the created test file for the next run");
  c->add_flag("--no-direct", a->no_direct, "never use O_DIRECT (fadvise DONTNEED only)");
  c->add_flag("--seq-only", a->seq_only, "sequential reads only");
  c->add_flag("--rand-only", a->rand_only, "random reads only");
  c->add_option("--need-samples-per-s", a->need_sps, "training job's input rate to check");
  c->add_option("--sample-kb", a->sample_kb, "average sample size in KiB");
  c->add_option("--json", a->json, "write the results as JSON");
  c->add_option("--html", a->html, "write an HTML report with charts");
  c->callback([a] { SetAction([a] { return RunBenchIo(*a); }); });
}

}  // namespace stoker::cli
