// Golden-file tests: each tests/golden/doctor/<case>.json names its input traces, the
// expected verdict and key numbers with tolerances, and says why (the numbers come from
// tests/golden/doctor/oracle.py, an independent recomputation, not from the doctor).
// Inputs "shared:<name>" are the real GPU traces others recorded, copied under
// tests/traces/real/ (README.md there names their sources), so every clone runs every case;
// a missing input is a failure, never a skip.
//
// Text goldens: the same cases rendered for the terminal, as Markdown and as JSON, are
// compared byte for byte with tests/golden/doctor/out/<case>.{txt,md,json}, the checkout's
// paths relative to the checkout. After an intended change of the output, regenerate them with
//   STOKER_UPDATE_GOLDENS=1 build/stoker_tests --gtest_filter='DoctorGolden.*'
// and review the change as a diff (git diff tests/golden/doctor/out).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "doctor/doctor.h"
#include "doctor/render.h"

namespace stoker::doctor {
namespace {

namespace fs = std::filesystem;

// Where "shared:<name>" inputs live: copies in the checkout.
fs::path SharedTraces() { return fs::path(STOKER_SOURCE_DIR) / "tests/traces/real"; }

std::vector<fs::path> Cases() {
  fs::path dir = fs::path(STOKER_SOURCE_DIR) / "tests/golden/doctor";
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".json") cases.push_back(e.path());
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

// A case's read options: "steps_from" (as --steps-from) when the case names one.
LoadOptions Options(const nlohmann::json& exp) {
  LoadOptions o;
  if (exp.contains("steps_from")) {
    EXPECT_TRUE(telemetry::ParseStepSource(exp["steps_from"].get<std::string>(),
                                           &o.trace.steps_from))
        << exp["steps_from"];
  }
  return o;
}

// A case's input paths; a missing one is reported as a failure.
std::vector<std::string> Inputs(const nlohmann::json& exp) {
  std::vector<std::string> inputs;
  for (const auto& in : exp["inputs"]) {
    std::string s = in.get<std::string>();
    if (s.rfind("shared:", 0) == 0) {
      s = (SharedTraces() / s.substr(7)).string();
    } else {
      s = (fs::path(STOKER_SOURCE_DIR) / s).string();
    }
    EXPECT_TRUE(fs::exists(s)) << s << ": input of this golden case is missing from the checkout";
    inputs.push_back(s);
  }
  return inputs;
}

std::string ReadAll(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The checkout's path is "<src>" in the goldens, so that they do not depend on the clone.
std::string Portable(std::string s) {
  const std::string src = fs::path(STOKER_SOURCE_DIR).lexically_normal().string();
  for (size_t at = s.find(src); at != std::string::npos; at = s.find(src, at + 5)) {
    s.replace(at, src.size(), "<src>");
  }
  return s;
}

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
  std::vector<fs::path> cases = Cases();
  ASSERT_GE(cases.size(), 9u);
  int ran = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.filename().string());
    nlohmann::json exp = nlohmann::json::parse(std::ifstream(c));
    ASSERT_TRUE(exp.contains("why")) << "every expected file says why";
    std::vector<std::string> inputs = Inputs(exp);
    auto loaded = LoadInputs(Env::Default(), inputs, Options(exp));
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
  EXPECT_EQ(ran, static_cast<int>(cases.size()));
}

// The rendered reports, byte for byte (see the top of the file to regenerate them).
TEST(DoctorGolden, RenderedReportsMatchTheTextGoldens) {
  const bool update = std::getenv("STOKER_UPDATE_GOLDENS") != nullptr &&
                      std::string(std::getenv("STOKER_UPDATE_GOLDENS")) == "1";
  fs::path out_dir = fs::path(STOKER_SOURCE_DIR) / "tests/golden/doctor/out";
  if (update) fs::create_directories(out_dir);
  std::vector<fs::path> cases = Cases();
  ASSERT_GE(cases.size(), 9u);
  const fs::path src_dir = fs::path(STOKER_SOURCE_DIR).lexically_normal();
  struct Cwd {
    fs::path saved = fs::current_path();
    ~Cwd() { fs::current_path(saved); }
  } restore_cwd;
  fs::current_path(src_dir);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.filename().string());
    nlohmann::json exp = nlohmann::json::parse(std::ifstream(c));
    // Inputs relative to the checkout (the test runs from it), so that the reports, whose
    // lines wrap by length, are the same in a clone of any path.
    std::vector<std::string> rel;
    for (const auto& in : Inputs(exp)) rel.push_back(fs::relative(in, src_dir).string());
    auto loaded = LoadInputs(Env::Default(), rel, Options(exp));
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    auto rep = Diagnose(*loaded);
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    const std::string stem = c.stem().string();
    const std::pair<const char*, std::string> outputs[] = {
        {".txt", RenderText(*rep)}, {".md", RenderMarkdown(*rep)}, {".json", RenderJson(*rep)}};
    for (const auto& [ext, text] : outputs) {
      fs::path golden = out_dir / (stem + ext);
      std::string got = Portable(text);
      if (update) {
        std::ofstream(golden, std::ios::binary) << got;
        continue;
      }
      ASSERT_TRUE(fs::exists(golden))
          << golden << " is missing: run with STOKER_UPDATE_GOLDENS=1 and review the diff";
      std::string want = ReadAll(golden);
      if (got != want) {
        // The first differing line, for a readable failure.
        std::istringstream a(want), b(got);
        std::string la, lb;
        int line = 1;
        while (std::getline(a, la) && std::getline(b, lb) && la == lb) ++line;
        ADD_FAILURE() << golden << " differs at line " << line << ":\n  golden: " << la
                      << "\n  now:    " << lb
                      << "\n(if intended: STOKER_UPDATE_GOLDENS=1, then review git diff)";
      }
    }
  }
}

// docs/doctor.md shows the rule table as the registry generates it (the blocks between
// "<!-- causes: ..." / "<!-- rules: ..." and their end markers). STOKER_UPDATE_GOLDENS=1
// rewrites them.
TEST(DoctorGolden, DocsShowTheGeneratedRuleTable) {
  const bool update = std::getenv("STOKER_UPDATE_GOLDENS") != nullptr &&
                      std::string(std::getenv("STOKER_UPDATE_GOLDENS")) == "1";
  fs::path doc = fs::path(STOKER_SOURCE_DIR) / "docs/doctor.md";
  std::string text = ReadAll(doc);
  const std::pair<std::string, std::string> blocks[] = {{"causes", RenderCausesMarkdown()},
                                                        {"rules", RenderFindingRulesMarkdown()}};
  for (const auto& [name, table] : blocks) {
    size_t open = text.find("<!-- " + name + ": generated");
    ASSERT_NE(open, std::string::npos) << "docs/doctor.md lacks the " << name << " block";
    size_t body = text.find("-->\n", open) + 4;
    std::string end_marker = "<!-- end " + name + " -->";
    size_t end = text.find(end_marker, body);
    ASSERT_NE(end, std::string::npos) << end_marker;
    if (update) {
      text.replace(body, end - body, table);
    } else {
      EXPECT_EQ(text.substr(body, end - body), table)
          << "docs/doctor.md's " << name << " table is not the registry's: regenerate with "
          << "STOKER_UPDATE_GOLDENS=1 (or paste `stoker doctor --list-rules`)";
    }
  }
  if (update) std::ofstream(doc, std::ios::binary) << text;
}

TEST(DoctorRules, IdsAreUniqueAndEveryRowIsComplete) {
  std::set<std::string> ids;
  for (const auto& r : ListRules()) {
    // One id may be made from two kinds of evidence (imbalance.straggler from traces and
    // from the watch probe's per-rank waits): unique per kind.
    EXPECT_TRUE(ids.insert(r.id + " | " + r.applies_to).second) << "duplicate rule " << r.id;
    EXPECT_FALSE(r.when.empty()) << r.id;
    EXPECT_FALSE(r.source.empty()) << r.id;
    EXPECT_EQ(r.when.find('{'), std::string::npos) << r.id << ": unknown threshold in " << r.when;
  }
  EXPECT_GE(ids.size(), 21u);
  for (const auto& c : ListCauses()) {
    EXPECT_EQ(c.threshold.find('{'), std::string::npos) << c.verdict << ": " << c.threshold;
  }
  // A changed threshold shows in the listing.
  Thresholds th;
  th.input_warn = 0.07;
  bool seen = false;
  for (const auto& r : ListRules(th)) {
    if (r.id == "input.dataloader") seen = r.when.find("7%") != std::string::npos;
  }
  EXPECT_TRUE(seen);
}

// Every finding the golden cases produce is a row of the registry.
TEST(DoctorRules, EveryFindingOfTheGoldenCasesIsInTheTable) {
  std::set<std::string> ids;
  for (const auto& r : ListRules()) ids.insert(r.id);
  for (const auto& c : Cases()) {
    SCOPED_TRACE(c.filename().string());
    nlohmann::json exp = nlohmann::json::parse(std::ifstream(c));
    auto loaded = LoadInputs(Env::Default(), Inputs(exp), Options(exp));
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    auto rep = Diagnose(*loaded);
    ASSERT_TRUE(rep.ok());
    for (const auto& f : rep->findings) EXPECT_TRUE(ids.count(f.id)) << f.id;
  }
}

}  // namespace
}  // namespace stoker::doctor
