// Golden-file tests: each tests/golden/doctor/<case>.json names its input traces, the
// expected verdict and key numbers with tolerances, and says why (the numbers come from
// tests/golden/doctor/oracle.py, an independent recomputation, not from the doctor).
// Inputs "shared:<name>" live in /work/shared/data/traces (the team's real GPU traces); a
// case whose inputs are absent on this machine is skipped, with a message.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "doctor/doctor.h"
#include "doctor/render.h"

namespace stoker::doctor {
namespace {

namespace fs = std::filesystem;

const char* kShared = "/work/shared/data/traces";

// "a.b.0.c" into a JSON value; null when absent.
nlohmann::json At(const nlohmann::json& j, const std::string& path) {
  const nlohmann::json* cur = &j;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '.')) {
    if (cur->is_array()) {
      size_t i = std::stoul(part);
      if (i >= cur->size()) return nullptr;
      cur = &(*cur)[i];
    } else if (cur->is_object() && cur->contains(part)) {
      cur = &(*cur)[part];
    } else {
      return nullptr;
    }
  }
  return *cur;
}

TEST(DoctorGolden, EveryCaseMatchesItsExpectedFile) {
  fs::path dir = fs::path(STOKER_SOURCE_DIR) / "tests/golden/doctor";
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".json") cases.push_back(e.path());
  }
  std::sort(cases.begin(), cases.end());
  ASSERT_GE(cases.size(), 9u);
  int ran = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.filename().string());
    nlohmann::json exp = nlohmann::json::parse(std::ifstream(c));
    ASSERT_TRUE(exp.contains("why")) << "every expected file says why";
    std::vector<std::string> inputs;
    bool missing = false;
    for (const auto& in : exp["inputs"]) {
      std::string s = in.get<std::string>();
      if (s.rfind("shared:", 0) == 0) {
        s = std::string(kShared) + "/" + s.substr(7);
      } else {
        s = (fs::path(STOKER_SOURCE_DIR) / s).string();
      }
      if (!fs::exists(s)) missing = true;
      inputs.push_back(s);
    }
    if (missing) {
      std::fprintf(stderr, "[ SKIPPED  ] %s: inputs not on this machine\n",
                   c.filename().string().c_str());
      continue;
    }
    auto loaded = LoadInputs(Env::Default(), inputs);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    auto rep = Diagnose(*loaded);
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    nlohmann::json j = ReportToJson(*rep);
    EXPECT_EQ(j["verdict"]["primary"], exp["verdict"]) << rep->summary;
    EXPECT_GE(rep->confidence, exp.value("min_confidence", 0.0));
    for (const auto& [path, want] : exp["numbers"].items()) {
      nlohmann::json got = At(j, path);
      if (want.is_array()) {
        ASSERT_TRUE(got.is_number()) << path << " = " << got.dump();
        EXPECT_NEAR(got.get<double>(), want[0].get<double>(), want[1].get<double>()) << path;
      } else {
        EXPECT_EQ(got, want) << path;
      }
    }
    std::set<std::string> ids;
    for (const auto& f : j["findings"]) ids.insert(f["id"].get<std::string>());
    const nlohmann::json include = exp.value("findings_include", nlohmann::json::array());
    const nlohmann::json exclude = exp.value("findings_exclude", nlohmann::json::array());
    const nlohmann::json mentions = exp.value("fix_mentions", nlohmann::json::object());
    const nlohmann::json severity = exp.value("severity", nlohmann::json::object());
    for (const auto& id : include) {
      EXPECT_TRUE(ids.count(id.get<std::string>())) << "missing finding " << id;
    }
    for (const auto& id : exclude) {
      EXPECT_FALSE(ids.count(id.get<std::string>())) << "unexpected finding " << id;
    }
    for (const auto& [id, text] : mentions.items()) {
      bool found = false;
      for (const auto& f : j["findings"]) {
        if (f["id"] == id) found = f["fix"].get<std::string>().find(text.get<std::string>()) != std::string::npos;
      }
      EXPECT_TRUE(found) << id << " fix should mention " << text;
    }
    for (const auto& [id, sev] : severity.items()) {
      for (const auto& f : j["findings"]) {
        if (f["id"] == id) EXPECT_EQ(f["severity"], sev) << id;
      }
    }
    // Every finding with a gain is consistent with its evidence: > 1.
    for (const auto& f : j["findings"]) {
      if (!f["expected_speedup"].is_null()) EXPECT_GE(f["expected_speedup"].get<double>(), 1.0);
    }
    ++ran;
  }
  EXPECT_GE(ran, 4) << "the recorded traces in tests/traces are always present";
}

}  // namespace
}  // namespace stoker::doctor
