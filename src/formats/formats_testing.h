// Helpers shared by the format tests (header only; included from *_test.cc).
#pragma once

#include <cstdint>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/random.h"
#include "formats/dataset.h"

namespace stoker::testing {

// A fresh, empty directory under the system temp dir, unique per test and process.
inline std::string FreshDir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() /
           ("stoker-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

inline std::vector<uint8_t> RandomBytes(uint64_t seed, size_t n) {
  Rng r(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(r.Next());
  return v;
}

// Sample i: key "s_<i>", label i % 5, fields jpg (random bytes of varied size) and txt.
inline Sample MakeSample(uint64_t i) {
  Sample s;
  s.key = "s_" + std::to_string(i);
  s.label = static_cast<int64_t>(i % 5);
  s.AddField("jpg")->data = RandomBytes(i, 100 + (i * 397) % 3000);
  std::string t = "text " + std::to_string(i);
  s.AddField("txt")->data.assign(t.begin(), t.end());
  return s;
}

inline void ExpectSameSample(const Sample& a, const Sample& b, bool ignore_cls = true) {
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.label, b.label);
  std::vector<std::pair<std::string, std::vector<uint8_t>>> fa, fb;
  for (size_t i = 0; i < a.num_fields; ++i)
    if (!(ignore_cls && a.fields[i].name == "cls")) fa.push_back({a.fields[i].name, a.fields[i].data});
  for (size_t i = 0; i < b.num_fields; ++i)
    if (!(ignore_cls && b.fields[i].name == "cls")) fb.push_back({b.fields[i].name, b.fields[i].data});
  EXPECT_EQ(fa, fb) << "sample " << a.key;
}

}  // namespace stoker::testing
