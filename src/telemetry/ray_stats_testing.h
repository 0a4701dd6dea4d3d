// Test helpers for the Ray Data stats recordings (tests/traces/ray/): shared by the parser's
// tests (telemetry/ray_stats_test.cc) and the doctor's (doctor/ray_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace stoker::ray_testing {

// The text of a recording.
inline std::string Recorded(const std::string& name) {
  std::ifstream f(std::filesystem::path(STOKER_SOURCE_DIR) / "tests/traces/ray" / name,
                  std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Replaces the first occurrence of `from` (which must be there).
inline std::string Edit(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

}  // namespace stoker::ray_testing
