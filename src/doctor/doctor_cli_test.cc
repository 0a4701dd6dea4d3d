// The stoker doctor / stoker watch command lines: exit codes, messages naming the file,
// output files. Runs the built binary (STOKER_BINARY).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct CmdResult {
  int rc = -1;
  std::string out;
};

CmdResult Exec(const std::string& args) {
  std::string cmd = std::string(STOKER_BINARY) + " " + args + " 2>&1";
  CmdResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

class DoctorCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("stoker_doctor_cli_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }
  fs::path dir_;
};

TEST_F(DoctorCli, BadInputsExitTwoAndNameTheFile) {
  std::string good = std::string(STOKER_SOURCE_DIR) + "/tests/traces/cpu-input-bound.json.gz";
  std::ifstream in(good, std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(gz.size(), 1000u);
  struct Case {
    std::string name, text, expect;
  } cases[] = {
      {"truncated.json.gz", gz.substr(0, gz.size() / 2), "truncated"},
      {"invalid.json", "{\"traceEvents\": [{\"ph\": \"X\",, }]}", "invalid JSON"},
      {"empty.json", "", "empty"},
      {"nosteps.json", "[{\"ph\": \"X\", \"name\": \"aten::mm\", \"ts\": 1}]", "ProfilerStep"},
      {"unknown.csv", "timestamp, gpu.happiness\n2024/01/01 00:00:00, 7\n", "unknown column"},
      {"random.txt", "nothing to see here\n", "not a PyTorch profiler trace"},
      {"binary.bin", std::string("\x7f" "ELF\0\0\0", 7), "binary"},
      {"ray-bad.txt",
       "Operator 1 ReadRange: 4 tasks executed, 4 blocks produced in 0.5s\n"
       "* Remote wall time: 1ms min, 2ms max, 1.5ms mean, lots total\n",
       "ray-bad.txt:2: cannot read"},
      {"ray-empty.txt", "Operator 1 ReadRange: [execution cached]\nDataset throughput:\n"
       "\t* Ray Data throughput: 12 rows\n", "ray-empty.txt:3: cannot read '12 rows'"},
  };
  for (const auto& c : cases) {
    std::string p = Write(c.name, c.text);
    CmdResult r = Exec("doctor --no-color " + p);
    EXPECT_EQ(r.rc, 2) << c.name << ": " << r.out;
    EXPECT_NE(r.out.find(c.name), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.name << ": " << r.out;
  }
  CmdResult missing = Exec("doctor " + (dir_ / "nope.json").string());
  EXPECT_EQ(missing.rc, 2);
  EXPECT_NE(missing.out.find("nope.json"), std::string::npos);
}

TEST_F(DoctorCli, ReadsRayDataStats) {
  std::string stats = std::string(STOKER_SOURCE_DIR) + "/tests/traces/ray/ray-input-bound.txt";
  std::string html = (dir_ / "r.html").string();
  CmdResult r = Exec("doctor --no-color " + stats + " --html " + html);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("input_bound"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MapBatches(slow_transform)"), std::string::npos) << r.out;
  EXPECT_NE(std::ifstream(html).peek(), EOF);
  CmdResult j = Exec("doctor " + stats + " --json -");
  ASSERT_EQ(j.rc, 0);
  EXPECT_EQ(nlohmann::json::parse(j.out)["ray"]["bottleneck"], "MapBatches(slow_transform)");
}

TEST_F(DoctorCli, WritesJsonMarkdownAndHtml) {
  std::string trace = std::string(STOKER_SOURCE_DIR) + "/tests/traces/ddp-slow-rank";
  std::string js = (dir_ / "r.json").string(), md = (dir_ / "r.md").string(),
              html = (dir_ / "r.html").string();
  CmdResult r = Exec("doctor --no-color --batch-size 8 " + trace + " --json " + js + " --md " + md +
               " --html " + html);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("imbalance"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("straggler"), std::string::npos);
  auto j = nlohmann::json::parse(std::ifstream(js));
  EXPECT_EQ(j["verdict"]["primary"], "imbalance");
  EXPECT_EQ(j["throughput"]["batch_size"], 8);
  EXPECT_GT(j["throughput"]["samples_per_s"].get<double>(), 0);
  EXPECT_TRUE(fs::file_size(md) > 100);
  EXPECT_TRUE(fs::file_size(html) > 1000);
  CmdResult stdout_json = Exec("doctor " + trace + " --json -");
  ASSERT_EQ(stdout_json.rc, 0);
  EXPECT_EQ(nlohmann::json::parse(stdout_json.out)["verdict"]["primary"], "imbalance");
}

TEST_F(DoctorCli, WatchRunsTheCommandAndKeepsItsExitCode) {
  std::string out = (dir_ / "w.csv").string();
  CmdResult r = Exec("watch --no-gpu --out " + out + " -- sh -c 'exit 3'");
  EXPECT_EQ(r.rc, 3) << r.out;
  EXPECT_NE(r.out.find("sampling CPU and I/O only"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(out));
  std::ifstream in(out);
  std::string header;
  std::getline(in, header);
  EXPECT_NE(header.find("utilization.gpu"), std::string::npos);
  EXPECT_NE(header.find("stoker.proc_cpu_cores"), std::string::npos);
  // The saved samples are a valid input for a later stoker doctor.
  CmdResult d = Exec("doctor --no-color " + out);
  EXPECT_EQ(d.rc, 0) << d.out;
  CmdResult bad = Exec("watch --no-gpu --out " + out + " -- /nonexistent/command");
  EXPECT_EQ(bad.rc, 127) << bad.out;
}

TEST_F(DoctorCli, WatchForwardsCtrlCToTheCommand) {
  // The command interrupts stoker watch (its parent) at once; watch forwards SIGINT to
  // the command's process group, which ends the shell and its `sleep` (no waiting on the
  // sleep: the forwarded signal ends it).
  std::string out = (dir_ / "i.csv").string();
  CmdResult r = Exec("watch --no-gpu --out " + out + " -- sh -c 'kill -INT $PPID; exec sleep 30'");
  EXPECT_EQ(r.rc, 130) << r.out;
  EXPECT_NE(r.out.find("forwarded SIGINT"), std::string::npos) << r.out;
}

TEST_F(DoctorCli, WatchKillsACommandThatIgnoresCtrlC) {
  // The command ignores SIGINT; the third Ctrl-C becomes SIGKILL for its process group.
  std::string out = (dir_ / "k.csv").string();
  CmdResult r = Exec("watch --no-gpu --out " + out +
                     " -- sh -c 'trap \"\" INT; kill -INT $PPID; sleep 0.4; kill -INT $PPID; "
                     "sleep 0.4; kill -INT $PPID; sleep 30'");
  EXPECT_EQ(r.rc, 137) << r.out;
  EXPECT_NE(r.out.find("forwarded SIGKILL"), std::string::npos) << r.out;
}

}  // namespace
