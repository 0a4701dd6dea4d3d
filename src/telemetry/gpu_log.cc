#include "telemetry/gpu_log.h"

#include <cstdint>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>

#include "telemetry/byte_source.h"

namespace stoker::telemetry {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r' ||
                        s.front() == '\n'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' ||
                        s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string o(s);
  for (auto& c : o) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return o;
}

std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find('\n', i);
    if (j == text.npos) j = text.size();
    out.push_back(text.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

std::vector<std::string_view> SplitComma(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (true) {
    size_t j = line.find(',', i);
    if (j == line.npos) {
      out.push_back(Trim(line.substr(i)));
      break;
    }
    out.push_back(Trim(line.substr(i, j - i)));
    i = j + 1;
  }
  return out;
}

std::vector<std::string_view> SplitWs(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    if (i >= line.size()) break;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

bool IsMissing(std::string_view v) {
  return v.empty() || v == "-" || v == "N/A" || v == "[N/A]" || v == "[Not Supported]" ||
         v == "Not Supported" || v == "[Unknown Error]" || v == "[Insufficient Permissions]" ||
         v == "[Requested functionality has been deprecated]";
}

// Parses a leading number ("592.74 W" -> 592.74). NaN when missing or not a number.
double Num(std::string_view v) {
  v = Trim(v);
  if (IsMissing(v)) return NAN;
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
    return static_cast<double>(std::strtoull(std::string(v).c_str(), nullptr, 16));  // no UB
  }
  double d = NAN;
  const char* b = v.data();
  const char* e = v.data() + v.size();
  if (b < e && *b == '+') ++b;
  auto r = std::from_chars(b, e, d);
  if (r.ec != std::errc() || r.ptr == b) return NAN;
  return d;
}

int64_t Hex(std::string_view v) {
  v = Trim(v);
  if (IsMissing(v)) return -1;
  std::string s(v);
  char* endp = nullptr;
  unsigned long long x = std::strtoull(s.c_str(), &endp, 0);
  if (endp == s.c_str()) return -1;
  return static_cast<int64_t>(x);
}

// Field of a sample a column feeds.
enum class Field {
  kIgnore, kTimestamp, kIndex, kUtil, kMemUtil, kMemUsed, kMemTotal, kPower, kPowerLimit,
  kTemp, kSmClock, kMaxSmClock, kThrottle, kGrActive, kSmActive, kSmOcc, kTensor, kDram,
  kPcieTx, kPcieRx, kProcCpu, kSysCpu, kCpus, kRead, kWrite, kThrottlePowerBit,
  kThrottleThermalBit, kUnknown,
};

// nvidia-smi --query-gpu names (canonical and alias spellings).
Field SmiField(const std::string& base) {
  static const std::map<std::string, Field> kMap = {
      {"timestamp", Field::kTimestamp},
      {"index", Field::kIndex},
      {"utilization.gpu", Field::kUtil},
      {"utilization.memory", Field::kMemUtil},
      {"memory.used", Field::kMemUsed},
      {"memory.total", Field::kMemTotal},
      {"power.draw", Field::kPower},
      {"power.draw.instant", Field::kPower},
      {"power.draw.average", Field::kPower},
      {"power.limit", Field::kPowerLimit},
      {"enforced.power.limit", Field::kPowerLimit},
      {"power.max_limit", Field::kIgnore},
      {"temperature.gpu", Field::kTemp},
      {"clocks.sm", Field::kSmClock},
      {"clocks.current.sm", Field::kSmClock},
      {"clocks.max.sm", Field::kMaxSmClock},
      {"clocks.max.sm_clock", Field::kMaxSmClock},
      {"clocks_throttle_reasons.active", Field::kThrottle},
      {"clocks_event_reasons.active", Field::kThrottle},
      {"clocks_throttle_reasons.sw_power_cap", Field::kThrottlePowerBit},
      {"clocks_event_reasons.sw_power_cap", Field::kThrottlePowerBit},
      {"clocks_throttle_reasons.hw_slowdown", Field::kThrottleThermalBit},
      {"clocks_event_reasons.hw_slowdown", Field::kThrottleThermalBit},
      {"clocks_throttle_reasons.sw_thermal_slowdown", Field::kThrottleThermalBit},
      {"clocks_event_reasons.sw_thermal_slowdown", Field::kThrottleThermalBit},
      {"clocks_throttle_reasons.hw_thermal_slowdown", Field::kThrottleThermalBit},
      {"clocks_event_reasons.hw_thermal_slowdown", Field::kThrottleThermalBit},
      // stoker watch columns.
      {"stoker.proc_cpu_cores", Field::kProcCpu},
      {"stoker.sys_cpu", Field::kSysCpu},
      {"stoker.cpus", Field::kCpus},
      {"stoker.read", Field::kRead},
      {"stoker.write", Field::kWrite},
  };
  auto it = kMap.find(base);
  if (it != kMap.end()) return it->second;
  // Other nvidia-smi query fields: valid, not used.
  static const char* kKnownPrefixes[] = {
      "name", "gpu_name", "pci.", "gpu_bus_id", "driver_version", "vbios_version", "uuid",
      "gpu_uuid", "serial", "gpu_serial", "count", "pstate", "fan.", "persistence_mode",
      "display_mode", "display_active", "accounting.", "compute_mode", "mig.", "ecc.",
      "retired_pages.", "remapped_rows.", "encoder.", "clocks.", "clocks_throttle_reasons.",
      "clocks_event_reasons.", "power.", "temperature.", "utilization.", "memory.",
      "inforom.", "gom.", "protected_memory.", "reset_status.", "module.", "platform.",
      "addressing_mode", "compute_cap", "fabric.", "gpu_recovery_action", "vgpu_", "c2c.",
      "drain_and_reset_recommended", "gpu_operation_mode.", "enforced.", "board_id",
      "multigpu_board", "clocks_default_applications.", "clocks_applications."};
  for (const char* p : kKnownPrefixes) {
    size_t n = std::strlen(p);
    if (base.compare(0, n, p) == 0 &&
        (p[n - 1] == '.' || p[n - 1] == '_' || base.size() == n)) {
      return Field::kIgnore;
    }
  }
  return Field::kUnknown;
}

// "utilization.gpu [%]" -> ("utilization.gpu", "%").
std::pair<std::string, std::string> SplitUnit(std::string_view h) {
  h = Trim(h);
  size_t b = h.find('[');
  if (b != h.npos && h.back() == ']') {
    return {Lower(Trim(h.substr(0, b))), std::string(Trim(h.substr(b + 1, h.size() - b - 2)))};
  }
  return {Lower(h), ""};
}

double ToMiB(double v, std::string_view unit_or_value) {
  // Values may carry their own unit ("50234 MiB"); nvidia-smi always reports MiB.
  if (std::isnan(v)) return v;
  if (unit_or_value.find("GiB") != std::string_view::npos) return v * 1024;
  if (unit_or_value.find("KiB") != std::string_view::npos) return v / 1024;
  return v;
}

void Set(GpuSample* s, Field f, std::string_view v) {
  switch (f) {
    case Field::kIndex: {
      double d = Num(v);
      s->gpu = (std::isfinite(d) && d >= 0 && d < 1e6) ? static_cast<int>(d) : -1;
      break;
    }
    case Field::kUtil: s->util = Num(v); break;
    case Field::kMemUtil: s->mem_util = Num(v); break;
    case Field::kMemUsed: s->mem_used_mib = ToMiB(Num(v), v); break;
    case Field::kMemTotal: s->mem_total_mib = ToMiB(Num(v), v); break;
    case Field::kPower: s->power_w = Num(v); break;
    case Field::kPowerLimit: s->power_limit_w = Num(v); break;
    case Field::kTemp: s->temp_c = Num(v); break;
    case Field::kSmClock: s->sm_clock_mhz = Num(v); break;
    case Field::kMaxSmClock: s->max_sm_clock_mhz = Num(v); break;
    case Field::kThrottle: s->throttle = Hex(v); break;
    case Field::kThrottlePowerBit:
    case Field::kThrottleThermalBit: {
      std::string_view t = Trim(v);
      if (IsMissing(t)) break;
      if (s->throttle < 0) s->throttle = 0;
      if (t == "Active") {
        s->throttle |= (f == Field::kThrottlePowerBit) ? kThrottleSwPowerCap : kThrottleHwSlowdown;
      }
      break;
    }
    case Field::kGrActive: s->gr_active = Num(v); break;
    case Field::kSmActive: s->sm_active = Num(v); break;
    case Field::kSmOcc: s->sm_occupancy = Num(v); break;
    case Field::kTensor: s->tensor_active = Num(v); break;
    case Field::kDram: s->dram_active = Num(v); break;
    case Field::kPcieTx: s->pcie_tx_mib_s = Num(v); break;
    case Field::kPcieRx: s->pcie_rx_mib_s = Num(v); break;
    case Field::kProcCpu: s->proc_cpu_cores = Num(v); break;
    case Field::kSysCpu: s->sys_cpu_pct = Num(v); break;
    case Field::kCpus: s->cpus = Num(v); break;
    case Field::kRead: s->read_mib_s = Num(v); break;
    case Field::kWrite: s->write_mib_s = Num(v); break;
    default: break;
  }
}

Result<GpuLog> ParseSmiCsv(const std::vector<std::string_view>& lines, const std::string& name) {
  GpuLog log;
  log.path = name;
  log.format = "nvidia-smi csv";
  size_t h = 0;
  while (h < lines.size() && Trim(lines[h]).empty()) ++h;
  auto header = SplitComma(lines[h]);
  std::vector<Field> fields;
  int ts_col = -1;
  bool useful = false;
  for (size_t i = 0; i < header.size(); ++i) {
    auto [base, unit] = SplitUnit(header[i]);
    Field f = SmiField(base);
    if (f == Field::kUnknown && (!std::isnan(ParseSmiTimestamp(header[i])) ||
                                 !std::isnan(Num(header[i])))) {
      return InvalidArgument(
          "{}: line {}: starts with values, not column names: the doctor needs the header "
          "line (record with --format=csv, not csv,noheader)",
          name, h + 1);
    }
    if (f == Field::kUnknown) {
      return InvalidArgument(
          "{}: line {}: unknown column '{}': not an nvidia-smi --query-gpu field (expected "
          "e.g. timestamp, index, utilization.gpu, memory.used, power.draw)",
          name, h + 1, std::string(Trim(header[i])));
    }
    if (base.rfind("stoker.", 0) == 0) log.format = "stoker watch";
    if (f == Field::kTimestamp) ts_col = static_cast<int>(i);
    if (f != Field::kIgnore && f != Field::kTimestamp && f != Field::kIndex) useful = true;
    fields.push_back(f);
    log.columns.emplace_back(Trim(header[i]));
  }
  if (!useful) {
    return InvalidArgument(
        "{}: line {}: none of the columns is a GPU metric the doctor uses (utilization.gpu, "
        "memory.used, power.draw, temperature.gpu, clocks.sm, clocks_throttle_reasons.active)",
        name, h + 1);
  }
  log.has_timestamps = ts_col >= 0;
  double t0 = NAN;
  std::map<int, int> per_gpu_rows;
  for (size_t li = h + 1; li < lines.size(); ++li) {
    std::string_view line = Trim(lines[li]);
    if (line.empty()) continue;
    auto vals = SplitComma(line);
    // A repeated header (several nvidia-smi invocations appended to one file).
    if (!vals.empty() && SplitUnit(vals[0]).first == SplitUnit(header[0]).first) continue;
    if (vals.size() != header.size()) {
      return Corrupt("{}: line {}: {} values for {} columns", name, li + 1, vals.size(),
                     header.size());
    }
    GpuSample s;
    for (size_t i = 0; i < vals.size(); ++i) Set(&s, fields[i], vals[i]);
    if (ts_col >= 0) {
      double t = ParseSmiTimestamp(vals[ts_col]);
      if (std::isnan(t)) {
        return Corrupt("{}: line {}: bad timestamp '{}'", name, li + 1,
                       std::string(vals[ts_col]));
      }
      if (std::isnan(t0)) t0 = t;
      s.t_s = t - t0;
    } else {
      s.t_s = per_gpu_rows[s.gpu]++;  // scaled by the interval below
    }
    log.samples.push_back(s);
  }
  return log;
}

Field DmonField(const std::string& col) {
  static const std::map<std::string, Field> kMap = {
      {"gpu", Field::kIndex},    {"idx", Field::kIndex},      {"pwr", Field::kPower},
      {"gtemp", Field::kTemp},   {"sm", Field::kUtil},        {"mem", Field::kMemUtil},
      {"pclk", Field::kSmClock}, {"fb", Field::kMemUsed},     {"smutil", Field::kSmActive},
      {"gract", Field::kGrActive}, {"smocc", Field::kSmOcc},  {"mmaact", Field::kTensor},
      {"dram", Field::kDram},    {"rxpci", Field::kPcieRx},   {"txpci", Field::kPcieTx},
      {"pcitx", Field::kPcieTx}, {"pcirx", Field::kPcieRx},
  };
  auto it = kMap.find(col);
  return it == kMap.end() ? Field::kIgnore : it->second;
}

Result<GpuLog> ParseDmon(const std::vector<std::string_view>& lines, const std::string& name,
                         const GpuLogOptions& opts) {
  GpuLog log;
  log.path = name;
  log.format = "nvidia-smi dmon";
  std::vector<std::string> cols;
  bool gpm_pct = false;
  double t0 = NAN;
  std::map<int, int> rows;
  for (size_t li = 0; li < lines.size(); ++li) {
    std::string_view line = Trim(lines[li]);
    if (line.empty()) continue;
    if (line[0] == '#') {
      auto toks = SplitWs(line.substr(1));
      if (toks.empty()) continue;
      std::string first = Lower(toks[0]);
      if (first == "gpu" || first == "date" || first == "time" || first == "idx" ||
          (toks.size() > 1 && Lower(toks[1]) == "gpu")) {
        if (first == "idx") continue;  // the units line of old drivers ("# Idx W C ...")
        cols.clear();
        for (auto t : toks) cols.push_back(Lower(t));
        log.columns.assign(cols.begin(), cols.end());
      } else {
        // Units line: GPM percentages mark gract/smutil as % (0..100).
        for (auto t : toks) {
          if (t.find("GPM:%") != std::string_view::npos) gpm_pct = true;
        }
      }
      continue;
    }
    if (cols.empty()) {
      return InvalidArgument("{}: line {}: data before the dmon header line ('# gpu ...')",
                             name, li + 1);
    }
    auto vals = SplitWs(line);
    if (vals.size() != cols.size()) {
      return Corrupt("{}: line {}: {} values for {} dmon columns", name, li + 1, vals.size(),
                     cols.size());
    }
    GpuSample s;
    std::string date, time;
    for (size_t i = 0; i < cols.size(); ++i) {
      if (cols[i] == "date") {
        date = std::string(vals[i]);
        continue;
      }
      if (cols[i] == "time") {
        time = std::string(vals[i]);
        continue;
      }
      Field f = DmonField(cols[i]);
      Set(&s, f, vals[i]);
    }
    // GPM metrics are percentages; DCGM-style fields are 0..1.
    for (double* v : {&s.sm_active, &s.gr_active, &s.sm_occupancy, &s.tensor_active,
                      &s.dram_active}) {
      if (!std::isnan(*v)) *v /= 100.0;
    }
    (void)gpm_pct;
    if (!time.empty()) {
      log.has_timestamps = true;
      double t;
      if (!date.empty()) {
        t = ParseSmiTimestamp(date + " " + time);
      } else {
        // Time only: seconds in the day.
        int hh = 0, mm = 0, ss = 0;
        if (std::sscanf(time.c_str(), "%d:%d:%d", &hh, &mm, &ss) != 3) {
          return Corrupt("{}: line {}: bad time '{}'", name, li + 1, time);
        }
        t = hh * 3600.0 + mm * 60.0 + ss;
      }
      if (std::isnan(t)) return Corrupt("{}: line {}: bad date/time", name, li + 1);
      if (std::isnan(t0)) t0 = t;
      s.t_s = t - t0;
    } else {
      s.t_s = rows[s.gpu]++ * opts.interval_s;
    }
    log.samples.push_back(s);
  }
  return log;
}

Field DcgmField(const std::string& col) {
  static const std::map<std::string, Field> kMap = {
      {"gract", Field::kGrActive}, {"smact", Field::kSmActive}, {"smocc", Field::kSmOcc},
      {"tenso", Field::kTensor},   {"drama", Field::kDram},     {"gputl", Field::kUtil},
      {"fbusd", Field::kMemUsed},  {"power", Field::kPower},    {"tmptr", Field::kTemp},
      {"gtemp", Field::kTemp},     {"smclk", Field::kSmClock},  {"pcitx", Field::kPcieTx},
      {"pcirx", Field::kPcieRx},   {"mcutl", Field::kMemUtil},  {"fbtot", Field::kMemTotal},
      {"pwusg", Field::kPower},
  };
  auto it = kMap.find(col);
  return it == kMap.end() ? Field::kIgnore : it->second;
}

Result<GpuLog> ParseDcgmi(const std::vector<std::string_view>& lines, const std::string& name,
                          const GpuLogOptions& opts) {
  GpuLog log;
  log.path = name;
  log.format = "dcgmi dmon";
  std::vector<std::string> cols;
  std::map<int, int> rows;
  for (size_t li = 0; li < lines.size(); ++li) {
    std::string_view line = Trim(lines[li]);
    if (line.empty() || line == "ID") continue;
    if (line[0] == '#') {
      auto toks = SplitWs(line.substr(1));
      if (toks.empty()) continue;
      if (Lower(toks[0]) == "entity") {
        cols.clear();
        for (size_t i = 1; i < toks.size(); ++i) cols.push_back(Lower(toks[i]));
        log.columns.assign(cols.begin(), cols.end());
      }
      continue;
    }
    if (cols.empty()) {
      return InvalidArgument("{}: line {}: data before the dcgmi header line ('#Entity ...')",
                             name, li + 1);
    }
    auto toks = SplitWs(line);
    // "GPU 0  v1 v2 ..." (also "GPU-I 0", "CPU 0"; only GPUs are kept).
    if (toks.size() < 2) continue;
    if (Lower(toks[0]) != "gpu") continue;
    if (toks.size() != cols.size() + 2) {
      return Corrupt("{}: line {}: {} values for {} dcgmi columns", name, li + 1,
                     toks.size() - 2, cols.size());
    }
    GpuSample s;
    double idx = Num(toks[1]);
    s.gpu = (std::isfinite(idx) && idx >= 0 && idx < 1e6) ? static_cast<int>(idx) : -1;
    for (size_t i = 0; i < cols.size(); ++i) Set(&s, DcgmField(cols[i]), toks[i + 2]);
    // PCIe bytes/s to MiB/s.
    for (double* v : {&s.pcie_tx_mib_s, &s.pcie_rx_mib_s}) {
      if (!std::isnan(*v)) *v /= 1048576.0;
    }
    s.t_s = rows[s.gpu]++ * opts.interval_s;
    log.samples.push_back(s);
  }
  return log;
}

}  // namespace

double ParseSmiTimestamp(std::string_view s) {
  s = Trim(s);
  int Y = 0, M = 0, D = 0, h = 0, m = 0;
  double sec = 0;
  std::string str(s);
  int n = std::sscanf(str.c_str(), "%d/%d/%d %d:%d:%lf", &Y, &M, &D, &h, &m, &sec);
  if (n != 6) n = std::sscanf(str.c_str(), "%d-%d-%d %d:%d:%lf", &Y, &M, &D, &h, &m, &sec);
  if (n != 6) {
    int ymd = 0;
    if (std::sscanf(str.c_str(), "%8d %d:%d:%lf", &ymd, &h, &m, &sec) == 4 && ymd > 19000000) {
      Y = ymd / 10000, M = (ymd / 100) % 100, D = ymd % 100;
      n = 6;
    }
  }
  if (n != 6 || M < 1 || M > 12 || D < 1 || D > 31 || h < 0 || h > 24 || m < 0 || m > 59 ||
      sec < 0 || sec > 61) {
    return NAN;
  }
  std::tm tm{};
  tm.tm_year = Y - 1900;
  tm.tm_mon = M - 1;
  tm.tm_mday = D;
  tm.tm_hour = h;
  tm.tm_min = m;
  tm.tm_sec = 0;
  time_t t = timegm(&tm);
  return static_cast<double>(t) + sec;
}

bool LooksLikeGpuLog(std::string_view head) {
  auto lines = SplitLines(head);
  for (auto l : lines) {
    l = Trim(l);
    if (l.empty()) continue;
    if (l[0] == '#') {
      auto t = SplitWs(l.substr(1));
      if (t.empty()) continue;
      std::string f = Lower(t[0]);
      return f == "gpu" || f == "entity" || f == "date" || f == "time" ||
             (t.size() > 1 && Lower(t[1]) == "gpu");
    }
    // CSV header: a known first column, or a comma-separated list of dotted names.
    auto cols = SplitComma(l);
    if (cols.empty()) return false;
    auto [base, unit] = SplitUnit(cols[0]);
    if (SmiField(base) != Field::kUnknown) return true;
    return l.find(',') != l.npos && l.find('{') == l.npos && l.find('.') != l.npos;
  }
  return false;
}

Result<GpuLog> ParseGpuLog(std::string_view text, const std::string& name,
                           const GpuLogOptions& opts) {
  auto lines = SplitLines(text);
  size_t first = 0;
  while (first < lines.size() && Trim(lines[first]).empty()) ++first;
  if (first == lines.size()) return InvalidArgument("{}: empty file: not a GPU log", name);
  std::string_view l = Trim(lines[first]);
  Result<GpuLog> r = Status(StatusCode::kInternal, "unset");
  if (l[0] == '#') {
    auto t = SplitWs(l.substr(1));
    if (!t.empty() && Lower(t[0]) == "entity") {
      r = ParseDcgmi(lines, name, opts);
    } else {
      r = ParseDmon(lines, name, opts);
    }
  } else {
    r = ParseSmiCsv(lines, name);
    if (r.ok() && !r->has_timestamps) {
      for (auto& s : r->samples) s.t_s *= opts.interval_s;
    }
  }
  if (!r.ok()) return r;
  if (r->samples.empty()) {
    return InvalidArgument("{}: the GPU log has a header but no samples", name);
  }
  return r;
}

Result<GpuLog> ReadGpuLog(Env* env, const std::string& path, const GpuLogOptions& opts) {
  STOKER_ASSIGN_OR_RETURN(auto src, OpenByteSource(env, path));
  std::string text;
  char buf[1 << 16];
  while (true) {
    STOKER_ASSIGN_OR_RETURN(size_t n, src->Read(buf, sizeof(buf)));
    if (n == 0) break;
    text.append(buf, n);
    if (text.size() > (size_t{2} << 30)) {
      return InvalidArgument("{}: GPU log larger than 2 GiB", path);
    }
  }
  return ParseGpuLog(text, path, opts);
}

std::string ThrottleReasonNames(int64_t bits) {
  if (bits < 0) return "unknown";
  static const std::pair<int64_t, const char*> kNames[] = {
      {0x1, "GpuIdle"}, {0x2, "ApplicationsClocksSetting"}, {0x4, "SwPowerCap"},
      {0x8, "HwSlowdown"}, {0x10, "SyncBoost"}, {0x20, "SwThermalSlowdown"},
      {0x40, "HwThermalSlowdown"}, {0x80, "HwPowerBrakeSlowdown"},
      {0x100, "DisplayClockSetting"}, {0x200, "BoardLimit"}, {0x400, "Reliability"}};
  std::string out;
  for (auto [b, n] : kNames) {
    if (bits & b) {
      if (!out.empty()) out += "|";
      out += n;
    }
  }
  return out.empty() ? "none" : out;
}

}  // namespace stoker::telemetry
