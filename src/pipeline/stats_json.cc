#include "pipeline/stats_json.h"

#include <cstdint>
#include <nlohmann/json.hpp>

#include <cmath>

namespace stoker {

std::string StatsToJson(const PipelineStats& st, const StatsRunInfo* run, int indent) {
  using nlohmann::json;
  json j;
  j["samples_per_s"] = st.samples_per_s;
  j["mb_per_s"] = st.mb_per_s;
  j["samples"] = st.samples;
  j["batches"] = st.batches;
  j["bytes_read"] = st.bytes_read;
  j["wall_s"] = st.wall_s;
  j["bottleneck"] = st.bottleneck;
  j["threads"] = st.threads;
  j["prefetch"] = st.prefetch;
  j["autotune"] = st.autotune;
  j["memory_budget_bytes"] = st.memory_budget;
  j["buffer_bytes"] = st.buffer_bytes;
  j["cpu_budget"] = st.cpu_budget;
  j["budget_source"] = st.budget_source;
  j["consumer_wait_s"] = st.consumer_wait_s;
  j["consumer_wait_frac"] = st.consumer_wait_frac;
  j["rank"] = st.rank.rank;
  j["world_size"] = st.rank.world_size;
  j["rank_source"] = st.rank.source;
  j["skipped"] = st.skipped;
  j["skipped_items"] = st.skipped_items;
  j["warnings"] = st.warnings;
  auto& stages = j["stages"] = json::array();
  for (const auto& s : st.stages) {
    stages.push_back({{"name", s.name},
                      {"threads", s.threads},
                      {"items", s.items},
                      {"bytes", s.bytes},
                      {"busy_s", s.busy_s},
                      {"cpu_s", s.cpu_s},
                      {"wait_input_s", s.wait_input_s},
                      {"wait_output_s", s.wait_output_s},
                      {"busy_frac", s.busy_frac},
                      {"wait_input_frac", s.wait_input_frac},
                      {"wait_output_frac", s.wait_output_frac},
                      {"queue_fill", s.queue_fill}});
  }
  auto& tuning = j["tuning"] = json::array();
  for (const auto& t : st.tuning) tuning.push_back({{"t_s", t.t_s}, {"what", t.what}});
  if (st.cache.enabled) {
    const auto& c = st.cache;
    j["cache"] = {{"dir", c.dir},
                  {"limit_bytes", c.limit_bytes},
                  {"hit_rate", c.hit_rate},
                  {"hit_bytes", c.hit_bytes},
                  {"stream_bytes", c.stream_bytes},
                  {"fetched_bytes", c.fetched_bytes},
                  {"source_bytes", c.source_bytes},
                  {"fetches", c.fetches},
                  {"shared_entries", c.shared_entries},
                  {"evictions", c.evictions},
                  {"corrupt_entries", c.corrupt_entries},
                  {"stall_s", c.stall_s},
                  {"occupancy_bytes", c.occupancy_bytes},
                  {"max_occupancy_bytes", c.max_occupancy_bytes}};
  }
  if (!st.source_notes.empty() || !st.source_counters.empty()) {
    auto& src = j["source"] = json::object();
    src["notes"] = st.source_notes;
    src["counters"] = json::object();
    for (const auto& [k, v] : st.source_counters) src["counters"][k] = v;
  }
  if (run) {
    j["data"] = run->data;
    if (run->epochs > 0) j["epochs"] = run->epochs;
    if (run->batch_size > 0) j["batch_size"] = run->batch_size;
    if (run->peak_rss_bytes >= 0) j["peak_rss_bytes"] = run->peak_rss_bytes;
  }
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

namespace {

// Reads typed keys of one JSON object; the first error is kept and names file and key.
class Fields {
 public:
  Fields(const nlohmann::json& o, const std::string& name, std::string prefix, Status* err)
      : o_(o), name_(name), prefix_(std::move(prefix)), err_(err) {}

  void Num(const char* k, double* out) {
    if (const auto* v = Find(k, "a number", [](const nlohmann::json& v) { return v.is_number(); }))
      *out = v->get<double>();
  }
  // A count: a number >= 0 (truncated to an integer).
  void Count(const char* k, uint64_t* out) {
    double d = 0;
    if (!NumIn(k, 0, 1.8e19, "a non-negative number", &d)) return;
    *out = static_cast<uint64_t>(d);
  }
  void Int(const char* k, int* out) {
    double d = 0;
    if (NumIn(k, -2147483648.0, 2147483647.0, "an integer", &d)) *out = static_cast<int>(d);
  }
  void Int64(const char* k, int64_t* out) {
    double d = 0;
    if (NumIn(k, -9.2e18, 9.2e18, "an integer", &d)) *out = static_cast<int64_t>(d);
  }
  void Str(const char* k, std::string* out) {
    if (const auto* v = Find(k, "a string", [](const nlohmann::json& v) { return v.is_string(); }))
      *out = v->get<std::string>();
  }
  void Bool(const char* k, bool* out) {
    if (const auto* v = Find(k, "true or false", [](const nlohmann::json& v) { return v.is_boolean(); }))
      *out = v->get<bool>();
  }
  void Strings(const char* k, std::vector<std::string>* out) {
    const auto* v = Find(k, "an array of strings", [](const nlohmann::json& v) {
      if (!v.is_array()) return false;
      for (const auto& e : v)
        if (!e.is_string()) return false;
      return true;
    });
    if (!v) return;
    out->clear();
    for (const auto& e : *v) out->push_back(e.get<std::string>());
  }
  const nlohmann::json* Array(const char* k) {
    return Find(k, "an array", [](const nlohmann::json& v) { return v.is_array(); });
  }
  bool Has(const char* k) const {
    auto it = o_.find(k);
    return it != o_.end() && !it->is_null();
  }

 private:
  template <typename Pred>
  const nlohmann::json* Find(const char* k, const char* want, Pred ok) {
    if (!err_->ok()) return nullptr;
    auto it = o_.find(k);
    if (it == o_.end() || it->is_null()) return nullptr;
    if (!ok(*it)) {
      *err_ = InvalidArgument("{}: {}\"{}\" must be {}, got {}", name_, prefix_, k, want,
                              Describe(*it));
      return nullptr;
    }
    return &*it;
  }
  bool NumIn(const char* k, double lo, double hi, const char* want, double* out) {
    const auto* v = Find(k, want, [](const nlohmann::json& v) { return v.is_number(); });
    if (!v) return false;
    double d = v->get<double>();
    if (!(d >= lo && d <= hi)) {
      *err_ = InvalidArgument("{}: {}\"{}\" must be {}, got {}", name_, prefix_, k, want, v->dump());
      return false;
    }
    *out = d;
    return true;
  }
  static std::string Describe(const nlohmann::json& v) {
    std::string text = v.dump();
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    return fmt::format("{} {}", v.type_name(), text);
  }

  const nlohmann::json& o_;
  const std::string& name_;
  std::string prefix_;
  Status* err_;
};

}  // namespace

Result<PipelineStats> StatsFromJson(std::string_view text, const std::string& name,
                                    StatsRunInfo* run) {
  auto j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) return Corrupt("{}: invalid JSON (pipeline stats)", name);
  if (!j.is_object()) return InvalidArgument("{}: pipeline stats must be a JSON object", name);
  const nlohmann::json* o = &j;
  for (const char* k : {"pipeline", "stats"}) {
    if (!o->contains("stages") && o->contains(k) && (*o)[k].is_object()) o = &(*o)[k];
  }
  if (!o->contains("stages") || !(*o)["stages"].is_array())
    return InvalidArgument("{}: pipeline stats without a \"stages\" array", name);

  Status err;
  PipelineStats st;
  Fields f(*o, name, "", &err);
  f.Num("samples_per_s", &st.samples_per_s);
  f.Num("mb_per_s", &st.mb_per_s);
  f.Count("samples", &st.samples);
  f.Count("batches", &st.batches);
  f.Count("bytes_read", &st.bytes_read);
  f.Num("wall_s", &st.wall_s);
  f.Str("bottleneck", &st.bottleneck);
  f.Int("threads", &st.threads);
  f.Int("prefetch", &st.prefetch);
  f.Bool("autotune", &st.autotune);
  // Older Python stats() dicts said "memory_budget" and nested the rank.
  f.Int64(f.Has("memory_budget_bytes") ? "memory_budget_bytes" : "memory_budget",
          &st.memory_budget);
  f.Int64("buffer_bytes", &st.buffer_bytes);
  // "cpus" is what other tools (bench/pipeline/*.py) call the cores a run had.
  f.Int(f.Has("cpu_budget") ? "cpu_budget" : "cpus", &st.cpu_budget);
  f.Str("budget_source", &st.budget_source);
  f.Num("consumer_wait_s", &st.consumer_wait_s);
  f.Num("consumer_wait_frac", &st.consumer_wait_frac);
  if (auto it = o->find("rank"); it != o->end() && it->is_object()) {
    Fields r(*it, name, "rank.", &err);
    r.Int("rank", &st.rank.rank);
    r.Int("world_size", &st.rank.world_size);
    r.Str("source", &st.rank.source);
  } else {
    f.Int("rank", &st.rank.rank);
    f.Int("world_size", &st.rank.world_size);
    f.Str("rank_source", &st.rank.source);
  }
  f.Count("skipped", &st.skipped);
  f.Strings("skipped_items", &st.skipped_items);
  f.Strings("warnings", &st.warnings);
  const auto& stages = (*o)["stages"];
  for (size_t i = 0; i < stages.size() && err.ok(); ++i) {
    const auto& s = stages[i];
    if (!s.is_object())
      return InvalidArgument("{}: stages[{}] must be an object, got {}", name, i, s.type_name());
    StageStats ss;
    ss.cpu_s = -1;  // not recorded
    Fields g(s, name, fmt::format("stages[{}].", i), &err);
    g.Str("name", &ss.name);
    g.Int("threads", &ss.threads);
    g.Count("items", &ss.items);
    g.Count("bytes", &ss.bytes);
    g.Num("busy_s", &ss.busy_s);
    g.Num("cpu_s", &ss.cpu_s);
    g.Num("wait_input_s", &ss.wait_input_s);
    g.Num("wait_output_s", &ss.wait_output_s);
    g.Num("busy_frac", &ss.busy_frac);
    g.Num("wait_input_frac", &ss.wait_input_frac);
    g.Num("wait_output_frac", &ss.wait_output_frac);
    g.Num("queue_fill", &ss.queue_fill);
    st.stages.push_back(std::move(ss));
  }
  if (const auto* tuning = f.Array("tuning")) {
    for (size_t i = 0; i < tuning->size() && err.ok(); ++i) {
      const auto& t = (*tuning)[i];
      if (!t.is_object())
        return InvalidArgument("{}: tuning[{}] must be an object, got {}", name, i, t.type_name());
      TuningEvent ev;
      Fields g(t, name, fmt::format("tuning[{}].", i), &err);
      g.Num("t_s", &ev.t_s);
      g.Str("what", &ev.what);
      st.tuning.push_back(std::move(ev));
    }
  }
  if (auto it = o->find("cache"); it != o->end() && it->is_object() && err.ok()) {
    auto& c = st.cache;
    c.enabled = true;
    Fields g(*it, name, "cache.", &err);
    g.Str("dir", &c.dir);
    g.Int64("limit_bytes", &c.limit_bytes);
    g.Num("hit_rate", &c.hit_rate);
    g.Count("hit_bytes", &c.hit_bytes);
    g.Count("stream_bytes", &c.stream_bytes);
    g.Count("fetched_bytes", &c.fetched_bytes);
    g.Count("source_bytes", &c.source_bytes);
    g.Count("fetches", &c.fetches);
    g.Count("shared_entries", &c.shared_entries);
    g.Count("evictions", &c.evictions);
    g.Count("corrupt_entries", &c.corrupt_entries);
    g.Num("stall_s", &c.stall_s);
    g.Int64("occupancy_bytes", &c.occupancy_bytes);
    g.Int64("max_occupancy_bytes", &c.max_occupancy_bytes);
  }
  if (auto it = o->find("source"); it != o->end() && !it->is_null()) {
    if (!it->is_object())
      return InvalidArgument("{}: \"source\" must be an object, got {}", name, it->type_name());
    Fields g(*it, name, "source.", &err);
    g.Strings("notes", &st.source_notes);
    if (auto c = it->find("counters"); c != it->end() && !c->is_null()) {
      if (!c->is_object())
        return InvalidArgument("{}: source.\"counters\" must be an object, got {}", name,
                               c->type_name());
      for (const auto& [k, v] : c->items()) {
        if (!v.is_number())
          return InvalidArgument("{}: source.counters.\"{}\" must be a number, got {}", name, k,
                                 v.type_name());
        st.source_counters[k] = v.get<double>();
      }
    }
  }
  if (run) {
    f.Str("data", &run->data);
    f.Int("epochs", &run->epochs);
    f.Int("batch_size", &run->batch_size);
    f.Int64("peak_rss_bytes", &run->peak_rss_bytes);
  }
  if (!err.ok()) return err;
  return st;
}

}  // namespace stoker
