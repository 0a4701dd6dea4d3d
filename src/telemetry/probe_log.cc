#include "telemetry/probe_log.h"

#include <cstdint>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace stoker::telemetry {

namespace {

using Json = nlohmann::json;

constexpr size_t kMaxLine = 64u << 20;          // one steps record: far below this
constexpr size_t kMaxStepsPerLoader = 10000000;  // bounds memory on a hostile file
constexpr int kMaxLoaders = 1024;
constexpr size_t kMaxStrings = 256;

const Json* Field(const Json& j, const char* k) {
  auto it = j.find(k);
  return it == j.end() ? nullptr : &*it;
}

int Int(const Json& j, const char* k, int def) {
  const Json* v = Field(j, k);
  if (v == nullptr || !v->is_number()) return def;
  double d = v->get<double>();
  if (!std::isfinite(d) || d < -2e9 || d > 2e9) return def;
  return static_cast<int>(d);
}

bool Bool(const Json& j, const char* k, bool def) {
  const Json* v = Field(j, k);
  return v != nullptr && v->is_boolean() ? v->get<bool>() : def;
}

std::string Str(const Json& j, const char* k) {
  const Json* v = Field(j, k);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

// Appends the finite, non-negative numbers of array `k` (up to the bound).
void Seconds(const Json& j, const char* k, std::vector<double>* out) {
  const Json* v = Field(j, k);
  if (v == nullptr || !v->is_array()) return;
  for (const Json& x : *v) {
    if (out->size() >= kMaxStepsPerLoader) return;
    double d = x.is_number() ? x.get<double>() : -1;
    out->push_back(std::isfinite(d) && d >= 0 && d < 1e7 ? d : 0.0);
  }
}

ProbeLoader* LoaderFor(ProbeProcess* p, int id) {
  if (id < 0 || id >= kMaxLoaders) return nullptr;
  for (auto& l : p->loaders)
    if (l.id == id) return &l;
  p->loaders.emplace_back();
  p->loaders.back().id = id;
  return &p->loaders.back();
}

void PushBounded(std::vector<std::string>* v, std::string s) {
  if (v->size() < kMaxStrings) v->push_back(std::move(s.substr(0, 4096)));
}

}  // namespace

const ProbeLoader* ProbeProcess::main_loader() const {
  const ProbeLoader* best = nullptr;
  for (const auto& l : loaders)
    if (!l.wait_s.empty() && (best == nullptr || l.wait_s.size() > best->wait_s.size())) best = &l;
  return best;
}

size_t ProbeProcess::steps() const {
  const ProbeLoader* l = main_loader();
  return l ? l->wait_s.size() : 0;
}

Status ApplyProbeLine(std::string_view line, ProbeProcess* p) {
  Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt("probe: a line is not a JSON object");
  std::string kind = Str(j, "kind");
  if (kind.empty()) return Corrupt("probe: a record without \"kind\"");
  if (kind == "start") {
    p->started = true;
    p->pid = Int(j, "pid", p->pid);
    p->ppid = Int(j, "ppid", 0);
    p->rank = Int(j, "rank", -1);
    p->local_rank = Int(j, "local_rank", -1);
    p->world_size = Int(j, "world_size", -1);
    p->python = Str(j, "python");
    p->executable = Str(j, "executable");
    p->chained_sitecustomize = Str(j, "chained_sitecustomize");
    if (const Json* a = Field(j, "argv"); a && a->is_array()) {
      p->argv.clear();
      for (const Json& x : *a)
        if (x.is_string()) PushBounded(&p->argv, x.get<std::string>());
    }
  } else if (kind == "torch") {
    p->torch = true;
    p->torch_version = Str(j, "version");
  } else if (kind == "loader") {
    ProbeLoader* l = LoaderFor(p, Int(j, "loader", -1));
    if (l == nullptr) return Corrupt("probe: loader id out of range");
    l->settings = true;
    l->num_workers = Int(j, "num_workers", -1);
    l->prefetch_factor = Int(j, "prefetch_factor", -1);
    l->batch_size = Int(j, "batch_size", -1);
    l->pin_memory = Bool(j, "pin_memory", false);
    l->persistent_workers = Bool(j, "persistent_workers", false);
    l->dataset_len = Int(j, "dataset_len", -1);
    l->dataset = Str(j, "dataset");
  } else if (kind == "workers") {
    ProbeLoader* l = LoaderFor(p, Int(j, "loader", -1));
    if (l == nullptr) return Corrupt("probe: loader id out of range");
    if (const Json* a = Field(j, "pids"); a && a->is_array()) {
      for (const Json& x : *a) {
        if (!x.is_number_integer()) continue;
        int pid = static_cast<int>(std::clamp<int64_t>(x.get<int64_t>(), 0, 1 << 30));
        if (pid > 0 && l->worker_pids.size() < 4096 &&
            std::find(l->worker_pids.begin(), l->worker_pids.end(), pid) == l->worker_pids.end())
          l->worker_pids.push_back(pid);
      }
    }
  } else if (kind == "steps") {
    ProbeLoader* l = LoaderFor(p, Int(j, "loader", -1));
    if (l == nullptr) return Corrupt("probe: loader id out of range");
    std::vector<double> w, c;
    Seconds(j, "wait", &w);
    Seconds(j, "compute", &c);
    size_t n = std::min(w.size(), c.size());
    if (l->wait_s.size() + n > kMaxStepsPerLoader) n = kMaxStepsPerLoader - l->wait_s.size();
    l->wait_s.insert(l->wait_s.end(), w.begin(), w.begin() + static_cast<ptrdiff_t>(n));
    l->compute_s.insert(l->compute_s.end(), c.begin(), c.begin() + static_cast<ptrdiff_t>(n));
    std::vector<double> gw, gs;
    Seconds(j, "gpu_wait", &gw);
    Seconds(j, "gpu_step", &gs);
    size_t g = std::min(gw.size(), gs.size());
    if (l->gpu_wait_s.size() + g > kMaxStepsPerLoader) g = kMaxStepsPerLoader - l->gpu_wait_s.size();
    l->gpu_wait_s.insert(l->gpu_wait_s.end(), gw.begin(), gw.begin() + static_cast<ptrdiff_t>(g));
    l->gpu_step_s.insert(l->gpu_step_s.end(), gs.begin(), gs.begin() + static_cast<ptrdiff_t>(g));
  } else if (kind == "profiler") {
    if (Bool(j, "ok", false)) {
      std::string t = Str(j, "trace");
      if (!t.empty()) PushBounded(&p->traces, t);
    } else {
      PushBounded(&p->profiler_errors, Str(j, "error"));
    }
  } else if (kind == "error") {
    PushBounded(&p->errors, Str(j, "error"));
  } else if (kind == "exit") {
    p->exited = true;
  }
  return Status::OK();
}

void ProbeReader::Poll() {
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind("probe-", 0) == 0 && n.size() > 12 && n.compare(n.size() - 6, 6, ".jsonl") == 0)
      names.push_back(n);
  }
  ::closedir(d);
  for (const auto& n : names) {
    FileState& fs = files_[n];
    if (fs.proc.pid == 0) fs.proc.pid = std::atoi(n.c_str() + 6);
    int fd = ::open((dir_ + "/" + n).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[65536];
    while (true) {
      ssize_t got = ::pread(fd, buf, sizeof(buf), static_cast<off_t>(fs.offset));
      if (got <= 0) break;
      fs.offset += static_cast<uint64_t>(got);
      fs.partial.append(buf, static_cast<size_t>(got));
      size_t start = 0;
      for (size_t nl; (nl = fs.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
        std::string_view line(fs.partial.data() + start, nl - start);
        if (!line.empty() && !ApplyProbeLine(line, &fs.proc).ok()) ++fs.proc.bad_lines;
      }
      fs.partial.erase(0, start);
      if (fs.partial.size() > kMaxLine) {  // no newline in 64 MiB: not a probe file
        ++fs.proc.bad_lines;
        fs.partial.clear();
      }
    }
    ::close(fd);
  }
}

std::vector<const ProbeProcess*> ProbeReader::processes() const {
  std::vector<const ProbeProcess*> out;
  for (const auto& [name, fs] : files_) out.push_back(&fs.proc);
  std::sort(out.begin(), out.end(),
            [](const ProbeProcess* a, const ProbeProcess* b) { return a->pid < b->pid; });
  return out;
}

}  // namespace stoker::telemetry
