#include "telemetry/pipeline_metrics.h"

#include <nlohmann/json.hpp>

#include <cmath>

namespace stoker::telemetry {

namespace {
double Num(const nlohmann::json& o, const char* k, double def = 0) {
  auto it = o.find(k);
  if (it == o.end() || !it->is_number()) return def;
  return it->get<double>();
}
// Counts from JSON doubles, clamped (a cast of an out-of-range double is undefined).
int Int(double d) { return d > 0 && d < 1e9 ? static_cast<int>(d) : 0; }
uint64_t U64(double d) { return d > 0 && d < 1.8e19 ? static_cast<uint64_t>(d) : 0; }
}  // namespace

bool LooksLikePipelineMetrics(std::string_view head) {
  if (head.find("\"stages\"") != head.npos) return true;
  // bench pipeline --json writes its keys sorted: a long skipped_items list can push
  // "stages" past the sniffed head.
  return head.find("\"samples_per_s\"") != head.npos &&
         head.find("\"consumer_wait_frac\"") != head.npos;
}

Result<PipelineMetrics> ParsePipelineMetrics(std::string_view text, const std::string& name) {
  auto j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) {
    return Corrupt("{}: invalid JSON (pipeline metrics)", name);
  }
  if (!j.is_object()) return InvalidArgument("{}: pipeline metrics must be a JSON object", name);
  const nlohmann::json* o = &j;
  for (const char* k : {"pipeline", "stats"}) {
    if (!o->contains("stages") && o->contains(k) && (*o)[k].is_object()) o = &(*o)[k];
  }
  if (!o->contains("stages") || !(*o)["stages"].is_array()) {
    return InvalidArgument("{}: pipeline metrics without a \"stages\" array", name);
  }
  PipelineMetrics m;
  m.path = name;
  m.samples_per_s = Num(*o, "samples_per_s");
  m.samples = U64(Num(*o, "samples"));
  m.wall_s = Num(*o, "wall_s");
  m.threads = Int(Num(*o, "threads"));
  m.cpus = Int(Num(*o, "cpus", Num(*o, "cpu_budget")));
  m.consumer_wait_frac = Num(*o, "consumer_wait_frac");
  if (auto it = o->find("bottleneck"); it != o->end() && it->is_string()) {
    m.bottleneck = it->get<std::string>();
  }
  for (const auto& s : (*o)["stages"]) {
    if (!s.is_object()) return InvalidArgument("{}: a stage is not an object", name);
    StageMetrics st;
    if (auto it = s.find("name"); it != s.end() && it->is_string()) st.name = it->get<std::string>();
    st.items = U64(Num(s, "items"));
    st.threads = Int(Num(s, "threads"));
    st.busy_frac = Num(s, "busy_frac");
    st.wait_input_frac = Num(s, "wait_input_frac");
    st.wait_output_frac = Num(s, "wait_output_frac");
    double cpu = Num(s, "cpu_s", -1);
    st.cpu_s = std::isfinite(cpu) && cpu >= 0 ? cpu : -1;
    if (st.busy_frac < 0 || st.busy_frac > 1.5 || st.wait_input_frac < 0 ||
        st.wait_output_frac < 0) {
      return InvalidArgument("{}: stage '{}' has fractions outside 0..1", name, st.name);
    }
    m.stages.push_back(std::move(st));
  }
  if (m.stages.empty()) return InvalidArgument("{}: pipeline metrics with no stages", name);
  return m;
}

Result<PipelineMetrics> ReadPipelineMetrics(Env* env, const std::string& path) {
  std::vector<uint8_t> data;
  STOKER_RETURN_IF_ERROR(env->ReadFile(path, &data));
  return ParsePipelineMetrics(
      std::string_view(reinterpret_cast<const char*>(data.data()), data.size()), path);
}

}  // namespace stoker::telemetry
