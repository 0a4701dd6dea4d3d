// Test-only tool for the interop tests in this directory (not installed):
//   stoker_interop_dump read SPEC OUT.json [--shuffle SEED]
//       reads every sample of SPEC (e.g. "lmdb:/x/db") through OpenDataset and writes
//       {"format", "size", "samples": [{"key", "label", "fields": {name: hex}}]} in index
//       order; with --shuffle the reads happen in a random order (random access path).
//   stoker_interop_dump write FMT:PATH IN.json
//       writes the samples of IN.json (same shape) with the registered DatasetWriter.
// Exit codes: 0 ok, 1 a read/write failed (message on stderr), 2 usage.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "formats/dataset.h"
#include "formats/writer.h"

namespace {

std::string Hex(const std::vector<uint8_t>& d) {
  static const char* k = "0123456789abcdef";
  std::string s(d.size() * 2, '0');
  for (size_t i = 0; i < d.size(); ++i) s[2 * i] = k[d[i] >> 4], s[2 * i + 1] = k[d[i] & 15];
  return s;
}

bool Unhex(const std::string& s, std::vector<uint8_t>* out) {
  if (s.size() % 2) return false;
  out->resize(s.size() / 2);
  for (size_t i = 0; i < out->size(); ++i) {
    auto v = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int a = v(s[2 * i]), b = v(s[2 * i + 1]);
    if (a < 0 || b < 0) return false;
    (*out)[i] = static_cast<uint8_t>(a * 16 + b);
  }
  return true;
}

int Read(const std::string& spec, const std::string& out, int64_t seed) {
  auto ds = stoker::OpenDataset(spec);
  if (!ds.ok()) {
    std::fprintf(stderr, "%s\n", ds.status().ToString().c_str());
    return 1;
  }
  uint64_t n = (*ds)->size();
  std::vector<uint64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (seed >= 0) std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  std::vector<nlohmann::json> rows(n);
  stoker::Sample s;
  for (uint64_t i : order) {
    stoker::Status st = (*ds)->Read(i, &s);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return 1;
    }
    nlohmann::json f = nlohmann::json::object();
    for (size_t k = 0; k < s.num_fields; ++k) f[s.fields[k].name] = Hex(s.fields[k].data);
    rows[i] = {{"key", s.key}, {"label", s.label}, {"fields", f}};
  }
  nlohmann::json j{{"format", (*ds)->format()}, {"size", n}, {"samples", rows}};
  nlohmann::json errs = nlohmann::json::array();
  for (const auto& e : (*ds)->index_errors()) errs.push_back(e);
  j["index_errors"] = errs;
  std::ofstream(out) << j.dump();
  return 0;
}

int Write(const std::string& spec, const std::string& in) {
  std::ifstream f(in);
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "%s: not JSON\n", in.c_str());
    return 2;
  }
  auto w = stoker::OpenDatasetWriter(spec);
  if (!w.ok()) {
    std::fprintf(stderr, "%s\n", w.status().ToString().c_str());
    return 1;
  }
  stoker::Sample s;
  for (const auto& row : j["samples"]) {
    s.Clear();
    s.key = row["key"].get<std::string>();
    s.label = row.value("label", int64_t{-1});
    for (const auto& [name, hex] : row["fields"].items()) {
      if (!Unhex(hex.get<std::string>(), &s.AddField(name)->data)) {
        std::fprintf(stderr, "bad hex in field %s\n", name.c_str());
        return 2;
      }
    }
    stoker::Status st = (*w)->Write(s);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return 1;
    }
  }
  stoker::Status st = (*w)->Close();
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::string(argv[1]) == "read") {
    int64_t seed = -1;
    if (argc == 6 && std::string(argv[4]) == "--shuffle") seed = std::stoll(argv[5]);
    return Read(argv[2], argv[3], seed);
  }
  if (argc == 4 && std::string(argv[1]) == "write") return Write(argv[2], argv[3]);
  std::fprintf(stderr, "usage: %s read SPEC OUT.json [--shuffle SEED] | write FMT:PATH IN.json\n",
               argv[0]);
  return 2;
}
