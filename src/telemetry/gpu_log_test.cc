#include "telemetry/gpu_log.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "telemetry/pipeline_metrics.h"
#include "telemetry/sampler.h"

namespace stoker::telemetry {
namespace {

TEST(GpuLog, NvidiaSmiCsvWithUnits) {
  std::string csv =
      "timestamp, index, utilization.gpu [%], utilization.memory [%], memory.used [MiB], "
      "memory.total [MiB], power.draw [W], temperature.gpu, clocks.current.sm [MHz], "
      "clocks_throttle_reasons.active, name\n"
      "2024/09/08 13:03:31.000, 0, 100 %, 26 %, 50234 MiB, 81559 MiB, 592.74 W, 52, 1980 MHz, "
      "0x0000000000000000, NVIDIA H100\n"
      "2024/09/08 13:03:31.500, 0, 3 %, 1 %, 50234 MiB, 81559 MiB, [N/A], 51, 1980 MHz, "
      "0x0000000000000004, NVIDIA H100\n";
  auto r = ParseGpuLog(csv, "smi.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "nvidia-smi csv");
  ASSERT_EQ(r->samples.size(), 2u);
  const auto& a = r->samples[0];
  EXPECT_EQ(a.gpu, 0);
  EXPECT_DOUBLE_EQ(a.util, 100);
  EXPECT_DOUBLE_EQ(a.mem_util, 26);
  EXPECT_DOUBLE_EQ(a.mem_used_mib, 50234);
  EXPECT_DOUBLE_EQ(a.mem_total_mib, 81559);
  EXPECT_DOUBLE_EQ(a.power_w, 592.74);
  EXPECT_DOUBLE_EQ(a.temp_c, 52);
  EXPECT_DOUBLE_EQ(a.sm_clock_mhz, 1980);
  EXPECT_EQ(a.throttle, 0);
  EXPECT_DOUBLE_EQ(r->samples[1].t_s, 0.5);
  EXPECT_TRUE(std::isnan(r->samples[1].power_w));
  EXPECT_EQ(r->samples[1].throttle, kThrottleSwPowerCap);
}

TEST(GpuLog, SubsetNoUnitsAndNewEventReasonName) {
  std::string csv =
      "utilization.gpu [%], clocks_event_reasons.active, index\n"
      "87, 0x20, 1\n90, 0x0, 1\n";
  GpuLogOptions o;
  o.interval_s = 0.25;
  auto r = ParseGpuLog(csv, "n.csv", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->samples.size(), 2u);
  EXPECT_FALSE(r->has_timestamps);
  EXPECT_DOUBLE_EQ(r->samples[1].t_s, 0.25);
  EXPECT_EQ(r->samples[0].gpu, 1);
  EXPECT_EQ(r->samples[0].throttle, kThrottleSwThermal);
}

TEST(GpuLog, UnknownColumnsAndBadRowsAreErrors) {
  auto a = ParseGpuLog("timestamp, foo.bar\n2024/09/08 13:03:31, 3\n", "x.csv");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("x.csv"), std::string::npos);
  EXPECT_NE(a.status().message().find("unknown column 'foo.bar'"), std::string::npos);
  auto b = ParseGpuLog("utilization.gpu [%], index\n50 %\n", "y.csv");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("line 2"), std::string::npos);
  auto c = ParseGpuLog("name, pci.bus_id\nH100, 0000:01:00.0\n", "z.csv");
  ASSERT_FALSE(c.ok());  // valid fields, but nothing the doctor uses
  auto d = ParseGpuLog("timestamp, utilization.gpu [%]\nyesterday, 4 %\n", "t.csv");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("bad timestamp"), std::string::npos);
  auto e = ParseGpuLog("utilization.gpu [%]\n", "h.csv");
  ASSERT_FALSE(e.ok());
  // --format=csv,noheader: values where the column names should be.
  auto f = ParseGpuLog("2024/09/08 13:03:31.000, 0, 100 %\n", "nh.csv");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("nh.csv"), std::string::npos);
  EXPECT_NE(f.status().message().find("noheader"), std::string::npos) << f.status().ToString();
  EXPECT_TRUE(LooksLikeGpuLog("2024/09/08 13:03:31.000, 0, 100 %\n"));
}

TEST(GpuLog, NvidiaSmiDmon) {
  std::string dmon =
      "# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk\n"
      "# Idx      W      C      C      %      %      %      %      %      %    MHz    MHz\n"
      "    0     56     30     28      0      0      0      0      0      0   1593    210\n"
      "    1    300     61      -     97     40      0      0      0      0   1593   1980\n"
      "# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk\n"
      "# Idx      W      C      C      %      %      %      %      %      %    MHz    MHz\n"
      "    0     57     30     28     12      3      0      0      0      0   1593    990\n";
  auto r = ParseGpuLog(dmon, "d.log");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "nvidia-smi dmon");
  ASSERT_EQ(r->samples.size(), 3u);
  EXPECT_EQ(r->samples[1].gpu, 1);
  EXPECT_DOUBLE_EQ(r->samples[1].util, 97);
  EXPECT_DOUBLE_EQ(r->samples[1].power_w, 300);
  EXPECT_DOUBLE_EQ(r->samples[1].sm_clock_mhz, 1980);
  EXPECT_DOUBLE_EQ(r->samples[2].t_s, 1.0);  // second sample of GPU 0, 1 s apart
  std::string dt =
      "#Date       Time        gpu    pwr     sm    mem\n"
      "#YYYYMMDD   HH:MM:SS    Idx      W      %      %\n"
      " 20240908   13:03:31      0     56     10      1\n"
      " 20240908   13:03:33      0     56     90      1\n";
  auto t = ParseGpuLog(dt, "dt.log");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->has_timestamps);
  EXPECT_DOUBLE_EQ(t->samples[1].t_s, 2.0);
  auto bad = ParseGpuLog("# gpu sm\n 0 1 2\n", "b.log");
  EXPECT_FALSE(bad.ok());
}

TEST(GpuLog, DcgmiDmon) {
  std::string d =
      "#Entity   GRACT   SMACT   SMOCC   TENSO   DRAMA\n"
      "ID\n"
      "GPU 0     0.812   0.650   0.301   0.000   0.420\n"
      "GPU 1     N/A     0.100   0.050   0.000   0.010\n";
  auto r = ParseGpuLog(d, "dcgm.log");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "dcgmi dmon");
  ASSERT_EQ(r->samples.size(), 2u);
  EXPECT_DOUBLE_EQ(r->samples[0].gr_active, 0.812);
  EXPECT_DOUBLE_EQ(r->samples[0].sm_active, 0.65);
  EXPECT_TRUE(std::isnan(r->samples[1].gr_active));
  EXPECT_EQ(r->samples[1].gpu, 1);
}

TEST(GpuLog, WatchCsvRoundTrips) {
  GpuSample s;
  s.t_s = 1.5;
  s.gpu = 0;
  s.util = 42;
  s.mem_used_mib = 1000;
  s.mem_total_mib = 80000;
  s.power_w = 123.45;
  s.throttle = 0x24;
  s.proc_cpu_cores = 3.5;
  s.cpus = 16;
  s.read_mib_s = 12.5;
  GpuSample host;  // no GPU
  host.t_s = 1.6;
  host.proc_cpu_cores = 1;
  std::string csv = SamplesCsvHeader() + SampleCsvRow(s, 1.7e9) + SampleCsvRow(host, 1.7e9);
  auto r = ParseGpuLog(csv, "w.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "stoker watch");
  ASSERT_EQ(r->samples.size(), 2u);
  EXPECT_DOUBLE_EQ(r->samples[0].util, 42);
  EXPECT_DOUBLE_EQ(r->samples[0].power_w, 123.45);
  EXPECT_EQ(r->samples[0].throttle, 0x24);
  EXPECT_DOUBLE_EQ(r->samples[0].proc_cpu_cores, 3.5);
  EXPECT_DOUBLE_EQ(r->samples[0].read_mib_s, 12.5);
  EXPECT_NEAR(r->samples[1].t_s, 0.1, 1e-3);
  EXPECT_EQ(r->samples[1].gpu, -1);
  EXPECT_TRUE(std::isnan(r->samples[1].util));
}

TEST(GpuLog, Sniffing) {
  EXPECT_TRUE(LooksLikeGpuLog("timestamp, utilization.gpu [%]\n"));
  EXPECT_TRUE(LooksLikeGpuLog("# gpu pwr sm\n"));
  EXPECT_TRUE(LooksLikeGpuLog("#Entity GRACT\n"));
  EXPECT_FALSE(LooksLikeGpuLog("hello world\n"));
  EXPECT_FALSE(LooksLikeGpuLog("{\"a\": 1}"));
  EXPECT_NEAR(ParseSmiTimestamp("2024/09/08 13:03:31.250") - ParseSmiTimestamp("2024/09/08 13:03:30"),
              1.25, 1e-9);
  EXPECT_TRUE(std::isnan(ParseSmiTimestamp("2024/13/08 13:03:31")));
  EXPECT_EQ(ThrottleReasonNames(0x44), "SwPowerCap|HwThermalSlowdown");
}

TEST(ProcParsing, StatIoAndCpuLines) {
  auto s = ParseProcStat("1234 (python3 (x) y) S 99 1234 1234 0 -1 4194560 5 0 0 0 250 75 0 0 20 0 1");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->pid, 1234);
  EXPECT_EQ(s->ppid, 99);
  EXPECT_EQ(s->utime, 250u);
  EXPECT_EQ(s->stime, 75u);
  EXPECT_FALSE(ParseProcStat("garbage").ok());
  auto io = ParseProcIo("rchar: 5\nwchar: 6\nread_bytes: 4096\nwrite_bytes: 8192\n");
  ASSERT_TRUE(io.ok());
  EXPECT_EQ(io->first, 4096u);
  EXPECT_EQ(io->second, 8192u);
  EXPECT_FALSE(ParseProcIo("rchar: 5\n").ok());
  auto c = ParseCpuLine("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->first, 150u);
  EXPECT_EQ(c->second, 1000u);
}

// A fake /proc under a temporary folder: files written by relative path, and a
// /proc/<pid>/stat line with the state, parent and CPU ticks the tests need.
struct FakeProc {
  std::filesystem::path root;
  explicit FakeProc(const std::string& name)
      : root(std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()))) {
    std::filesystem::remove_all(root);
  }
  ~FakeProc() { std::filesystem::remove_all(root); }
  void write(const std::string& rel, const std::string& text) const {
    std::filesystem::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text;
  }
  static std::string stat(int pid, int ppid, long ticks, char state = 'S') {
    return fmt::format("{} (p) {} {} 0 0 0 0 0 0 0 0 0 {} 0 0 0", pid, state, ppid, ticks);
  }
};

TEST(ProcSampler, RatesOverAFakeProcTree) {
  namespace fs = std::filesystem;
  FakeProc fp("stoker_proc_");
  const fs::path& root = fp.root;
  auto write = [&](const std::string& rel, const std::string& text) { fp.write(rel, text); };
  long hz = ::sysconf(_SC_CLK_TCK);
  auto stat = [](int pid, int ppid, long ticks) { return FakeProc::stat(pid, ppid, ticks); };
  write("100/stat", stat(100, 1, 0));
  write("100/io", "read_bytes: 0\nwrite_bytes: 0\n");
  write("101/stat", stat(101, 100, 0));
  write("101/io", "read_bytes: 0\nwrite_bytes: 0\n");
  write("200/stat", stat(200, 1, 0));  // not in the tree
  write("stat", "cpu 0 0 0 0 0 0 0 0\n");
  ProcSampler p(100, root.string());
  GpuSample a;
  p.Sample(0.0, &a);
  EXPECT_TRUE(std::isnan(a.proc_cpu_cores));  // no rate on the first sample
  // One second later: the parent used 1 s of CPU, the child 2 s, 10 MiB read; an
  // unrelated process burned CPU too.
  write("100/stat", stat(100, 1, hz));
  write("101/stat", stat(101, 100, 2 * hz));
  write("101/io", "read_bytes: 10485760\nwrite_bytes: 0\n");
  write("200/stat", stat(200, 1, 50 * hz));
  write("stat", "cpu 300 0 0 100 0 0 0 0\n");
  GpuSample b;
  p.Sample(1.0, &b);
  EXPECT_EQ(p.tree_size(), 2);
  EXPECT_NEAR(b.proc_cpu_cores, 3.0, 1e-9);
  EXPECT_NEAR(b.read_mib_s, 10.0, 1e-9);
  EXPECT_NEAR(b.sys_cpu_pct, 75.0, 1e-9);
  // The child exits: its time stays counted, so the rate does not go negative.
  fs::remove_all(root / "101");
  write("100/stat", stat(100, 1, 2 * hz));
  GpuSample c;
  p.Sample(2.0, &c);
  EXPECT_NEAR(c.proc_cpu_cores, 1.0, 1e-9);
}

// A DataLoader worker that starts late: its cores are over its own span, not the whole
// period (which would dilute a busy worker into an idle-looking one).
TEST(ProcSampler, AttributionRatesAreOverEachRolesActiveSpan) {
  FakeProc fp("stoker_proc_span_");
  auto write = [&](const std::string& rel, const std::string& text) { fp.write(rel, text); };
  long hz = ::sysconf(_SC_CLK_TCK);
  auto stat = [](int pid, int ppid, long ticks) { return FakeProc::stat(pid, ppid, ticks, 'R'); };
  write("stat", "cpu 0 0 0 0 0 0 0 0\n");
  write("100/stat", stat(100, 1, 0));
  ProcSampler p(100, fp.root.string());
  p.SetRoles({100}, {101});
  GpuSample g;
  for (int t = 0; t <= 2; ++t) {  // the main process alone, half a core
    write("100/stat", stat(100, 1, t * hz / 2));
    p.Sample(t, &g);
  }
  // The worker is born between t=2 and t=3 and runs flat out until t=4.
  write("101/stat", stat(101, 100, hz));
  write("100/stat", stat(100, 1, 3 * hz / 2));
  p.Sample(3, &g);
  write("101/stat", stat(101, 100, 2 * hz));
  write("100/stat", stat(100, 1, 2 * hz));
  p.Sample(4, &g);
  CpuAttribution a = p.Attribution();
  EXPECT_NEAR(a.duration_s, 4.0, 1e-9);
  EXPECT_EQ(a.workers.procs, 1);
  EXPECT_NEAR(a.workers.active_s, 2.0, 1e-9);  // from the sample before its birth
  EXPECT_NEAR(a.workers.cores, 1.0, 1e-9);     // 2 s of CPU over 2 s, not over 4
  EXPECT_NEAR(a.main.active_s, 4.0, 1e-9);
  EXPECT_NEAR(a.main.cores, 0.5, 1e-9);
  EXPECT_NEAR(a.tree_cores, 1.0, 1e-9);  // (2 + 2) s over the whole 4 s
}

TEST(NvmlSampler, MissingLibraryIsACleanError) {
  auto n = NvmlSampler::Open("libstoker-does-not-exist.so.1");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kNotFound);
  EXPECT_NE(n.status().message().find("NVML not available"), std::string::npos);
}

TEST(PipelineMetrics, ParsesBenchJson) {
  std::string j = R"({"samples_per_s": 1234.5, "samples": 10000, "bottleneck": "decode", "threads": 8,
    "consumer_wait_frac": 0.31, "stages": [
      {"name": "read", "items": 10000, "busy_frac": 0.1, "wait_input_frac": 0.0, "wait_output_frac": 0.8, "threads": 1},
      {"name": "decode", "items": 10000, "busy_frac": 0.97, "wait_input_frac": 0.01, "wait_output_frac": 0.0, "threads": 6}]})";
  auto m = ParsePipelineMetrics(j, "m.json");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_DOUBLE_EQ(m->samples_per_s, 1234.5);
  EXPECT_EQ(m->bottleneck, "decode");
  ASSERT_EQ(m->stages.size(), 2u);
  EXPECT_EQ(m->stages[1].threads, 6);
  EXPECT_EQ(m->stages[1].cpu_s, -1);  // not in this file
  EXPECT_TRUE(LooksLikePipelineMetrics(j));
  auto with_cpu = ParsePipelineMetrics(
      R"({"samples_per_s": 1, "wall_s": 2, "stages": [{"name": "read", "cpu_s": 1.5}]})", "c.json");
  ASSERT_TRUE(with_cpu.ok());
  EXPECT_DOUBLE_EQ(with_cpu->stages[0].cpu_s, 1.5);
  EXPECT_DOUBLE_EQ(with_cpu->wall_s, 2);
  auto nested = ParsePipelineMetrics(R"({"stats": )" + j + "}", "n.json");
  ASSERT_TRUE(nested.ok());
  EXPECT_FALSE(ParsePipelineMetrics("{\"samples_per_s\": 1}", "e.json").ok());
  EXPECT_FALSE(ParsePipelineMetrics("{\"stages\": [", "t.json").ok());
  EXPECT_FALSE(ParsePipelineMetrics(R"({"stages": [{"name": "x", "busy_frac": 7}]})", "f.json").ok());
}

}  // namespace
}  // namespace stoker::telemetry
