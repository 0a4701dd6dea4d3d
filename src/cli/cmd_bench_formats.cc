// stoker bench formats --data SRC: converts a sample of SRC to each format and measures
// (src/tools/format_bench.h).
#include <cstdint>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "cli/commands.h"
#include "cli/progress.h"
#include "tools/format_bench.h"

namespace stoker::cli {
namespace {

struct BenchFormatsArgs {
  std::string data;
  uint64_t samples = 1000;
  std::string formats;
  std::string work_dir;
  uint64_t samples_per_shard = 0;
  bool no_cold = false, no_warm = false, keep = false;
  uint64_t seed = 1;
  int repeats = 3;
  std::string json, html = "stoker-bench-formats.html";
  bool no_chart = false;
};

int RunBenchFormats(const BenchFormatsArgs& a) {
  FormatBenchOptions o;
  o.source = a.data;
  o.samples = a.samples;
  std::stringstream ss(a.formats);
  for (std::string f; std::getline(ss, f, ',');)
    if (!f.empty()) o.formats.push_back(f);
  o.work_dir = a.work_dir;
  bool tmp_dir = false;
  if (o.work_dir.empty()) {
    o.work_dir = (std::filesystem::temp_directory_path() /
                  ("stoker-bench-formats-" + std::to_string(::getpid())))
                     .string();
    tmp_dir = true;
  }
  o.samples_per_shard = a.samples_per_shard;
  o.cold = !a.no_cold;
  o.warm = !a.no_warm;
  o.keep = a.keep;
  o.seed = a.seed;
  o.repeats = a.repeats;
  bool tty = ::isatty(2);
  o.progress = [tty](const std::string& line) {
    if (tty) std::fprintf(stderr, "bench formats: %s\n", line.c_str());
  };
  auto r = RunFormatBench(o);
  if (tmp_dir && !a.keep) {
    std::error_code ec;
    std::filesystem::remove_all(o.work_dir, ec);
  }
  if (!r.ok()) return Fail(r.status());
  std::fputs(FormatBenchTable(*r).c_str(), stdout);
  if (!a.json.empty()) {
    std::string j = FormatBenchJson(*r);
    Status st = Env::Default()->WriteFileAtomic(a.json, j.data(), j.size());
    if (!st.ok()) return Fail(st);
  }
  if (!a.html.empty() && !a.no_chart) {
    std::string h = FormatBenchHtml(*r);
    Status st = Env::Default()->WriteFileAtomic(a.html, h.data(), h.size());
    if (!st.ok()) return Fail(st);
    std::fprintf(stderr, "bench formats: charts written to %s\n", a.html.c_str());
  }
  for (const auto& row : r->rows)
    if (!row.ok) return 1;
  return 0;
}

}  // namespace

void RegisterBenchFormatsCommand(CLI::App& bench) {
  auto a = std::make_shared<BenchFormatsArgs>();
  CLI::App* c = bench.add_subcommand(
      "formats", "convert a sample of your data to each format (wds, tfrecord, lmdb, hdf5, "
                 "parquet, ...) and compare size, conversion time and read speed");
  c->add_option("--data", a->data, "source data set, e.g. wds:/d/train-{000..009}.tar or a folder")
      ->required();
  c->add_option("--samples", a->samples, "samples to convert (evenly spaced)")->capture_default_str();
  c->add_option("--formats", a->formats, "comma-separated formats (default: every writer)");
  c->add_option("--work-dir", a->work_dir,
                "where the converted copies go (put it on the storage you want to measure; "
                "default: a temporary directory)");
  c->add_option("--samples-per-shard", a->samples_per_shard,
                "shard size of sharded formats (default samples/8)");
  c->add_flag("--no-cold", a->no_cold, "skip the cold-cache passes");
  c->add_flag("--no-warm", a->no_warm, "skip the warm-cache passes");
  c->add_flag("--keep", a->keep, "keep the converted copies");
  c->add_option("--seed", a->seed, "shuffle seed")->capture_default_str();
  c->add_option("--repeats", a->repeats, "runs per timed pass; the fastest counts")
      ->capture_default_str();
  c->add_option("--json", a->json, "write the results as JSON");
  c->add_option("--html", a->html, "HTML report with charts (written by default)")
      ->capture_default_str();
  c->add_flag("--no-chart", a->no_chart, "do not write the HTML report");
  c->callback([a] { SetAction([a] { return RunBenchFormats(*a); }); });
}

}  // namespace stoker::cli
