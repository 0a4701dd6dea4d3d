#include "formats/kafka_dataset.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>

#include "core/mutex.h"
#include "formats/builtin.h"
#include "formats/delta_dataset.h"  // ParseDeltaTimestamp: the same timestamp syntax
#include "formats/unavailable.h"

#ifdef STOKER_HAVE_RDKAFKA
#include <librdkafka/rdkafka.h>
#endif

namespace stoker {

// ---- spec ------------------------------------------------------------------------------

namespace {

Result<int64_t> ParseInt(const std::string& what, const std::string& s) {
  if (s.empty()) return InvalidArgument("kafka: {} is empty", what);
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno || *end != '\0') return InvalidArgument("kafka: {}='{}' is not an integer", what, s);
  return static_cast<int64_t>(v);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  for (;;) {
    size_t e = s.find(sep, b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

Result<KafkaBound> ParseBound(const std::string& what, const std::string& v) {
  KafkaBound b;
  if (v == "earliest") {
    b.kind = KafkaBound::kEarliest;
  } else if (v == "latest") {
    b.kind = KafkaBound::kLatest;
  } else if (v.rfind("ts:", 0) == 0) {
    auto t = ParseDeltaTimestamp(v.substr(3));
    if (!t.ok()) return InvalidArgument("kafka: {}={}: {}", what, v, t.status().message());
    b.kind = KafkaBound::kTimestamp;
    b.value = *t;
  } else {
    auto n = ParseInt(what, v);
    if (!n.ok()) {
      return InvalidArgument("kafka: {}='{}' is not earliest, latest, an offset or ts:TIME", what,
                             v);
    }
    if (*n < 0) return InvalidArgument("kafka: {}={} is negative", what, v);
    b.kind = KafkaBound::kOffset;
    b.value = *n;
  }
  return b;
}

std::string BoundText(const KafkaBound& b) {
  switch (b.kind) {
    case KafkaBound::kEarliest: return "earliest";
    case KafkaBound::kLatest: return "latest";
    case KafkaBound::kOffset: return std::to_string(b.value);
    case KafkaBound::kTimestamp: return "ts:" + std::to_string(b.value);
  }
  return "";
}

}  // namespace

Result<KafkaSpec> ParseKafkaSpec(const std::string& spec_in) {
  KafkaSpec s;
  std::string body = spec_in, query;
  if (auto q = body.find('?'); q != std::string::npos) {
    query = body.substr(q + 1);
    body = body.substr(0, q);
  }
  if (body.rfind("//", 0) == 0) {  // kafka://host:port/topic
    std::string rest = body.substr(2);
    auto slash = rest.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == rest.size()) {
      return InvalidArgument("kafka: '{}' is not kafka://HOST:PORT/TOPIC", "kafka:" + spec_in);
    }
    s.bootstrap = rest.substr(0, slash);
    s.topic = rest.substr(slash + 1);
  } else {
    s.topic = body;
  }
  for (const auto& item : query.empty() ? std::vector<std::string>{} : Split(query, '&')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    std::string k = item.substr(0, eq), v = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (k == "bootstrap") {
      s.bootstrap = v;
    } else if (k == "start") {
      STOKER_ASSIGN_OR_RETURN(s.start, ParseBound("start", v));
    } else if (k == "end") {
      STOKER_ASSIGN_OR_RETURN(s.end, ParseBound("end", v));
      if (s.end.kind == KafkaBound::kEarliest)
        return InvalidArgument("kafka: end=earliest selects nothing; use an offset, ts: or latest");
    } else if (k == "count") {
      STOKER_ASSIGN_OR_RETURN(s.count, ParseInt("count", v));
      if (s.count < 0) return InvalidArgument("kafka: count={} is negative", v);
    } else if (k == "partitions") {
      for (const auto& p : Split(v, ',')) {
        STOKER_ASSIGN_OR_RETURN(int64_t n, ParseInt("partitions", p));
        if (n < 0 || n > INT32_MAX) return InvalidArgument("kafka: partition {} is out of range", p);
        s.partitions.push_back(static_cast<int32_t>(n));
      }
    } else if (k == "ranges") {
      for (const auto& r : Split(v, ',')) {
        auto colon = r.find(':'), dash = r.find('-');
        if (colon == std::string::npos || dash == std::string::npos || dash < colon) {
          return InvalidArgument("kafka: ranges item '{}' is not PARTITION:BEGIN-END", r);
        }
        STOKER_ASSIGN_OR_RETURN(int64_t p, ParseInt("ranges partition", r.substr(0, colon)));
        STOKER_ASSIGN_OR_RETURN(int64_t b, ParseInt("ranges begin", r.substr(colon + 1, dash - colon - 1)));
        STOKER_ASSIGN_OR_RETURN(int64_t e, ParseInt("ranges end", r.substr(dash + 1)));
        if (p < 0 || p > INT32_MAX || b < 0 || e < b)
          return InvalidArgument("kafka: ranges item '{}' is not a valid range", r);
        if (!s.ranges.emplace(static_cast<int32_t>(p), std::make_pair(b, e)).second)
          return InvalidArgument("kafka: ranges names partition {} twice", p);
      }
    } else if (k == "value") {
      if (v == "raw") {
        s.value = KafkaSpec::kRaw;
      } else if (v == "json") {
        s.value = KafkaSpec::kJson;
      } else if (v == "stoker") {
        s.value = KafkaSpec::kStoker;
      } else {
        return InvalidArgument("kafka: value='{}' is not raw, json or stoker", v);
      }
    } else if (k == "field") {
      if (v.empty()) return InvalidArgument("kafka: field= is empty");
      s.field = v;
    } else if (k == "base64") {
      for (const auto& f : Split(v, ',')) if (!f.empty()) s.base64.insert(f);
    } else if (k == "meta") {
      for (const auto& f : Split(v, ',')) {
        if (f != "key" && f != "timestamp" && f != "offset" && f != "partition")
          return InvalidArgument("kafka: meta '{}' is not key, timestamp, offset or partition", f);
        s.meta.insert(f);
      }
    } else if (k == "timeout_ms") {
      STOKER_ASSIGN_OR_RETURN(int64_t t, ParseInt("timeout_ms", v));
      if (t < 100 || t > 3'600'000) return InvalidArgument("kafka: timeout_ms={} is not in [100, 3600000]", v);
      s.timeout_ms = static_cast<int>(t);
    } else if (k == "group") {
      if (v.empty()) return InvalidArgument("kafka: group= is empty");
      s.group = v;
    } else if (k == "commit_ms") {
      STOKER_ASSIGN_OR_RETURN(int64_t t, ParseInt("commit_ms", v));
      if (t < 100 || t > 3'600'000) return InvalidArgument("kafka: commit_ms={} is not in [100, 3600000]", v);
      s.commit_ms = static_cast<int>(t);
    } else if (k.rfind("rdkafka.", 0) == 0 && k.size() > 8) {
      s.config[k.substr(8)] = v;
    } else {
      return InvalidArgument(
          "kafka: unknown option '{}' (start, end, count, partitions, ranges, value, field, "
          "base64, meta, timeout_ms, group, commit_ms, bootstrap, rdkafka.*)",
          k);
    }
  }
  if (s.bootstrap.empty())
    return InvalidArgument("kafka: no broker: use kafka://HOST:PORT/{} or ?bootstrap=HOST:PORT", s.topic);
  // Kafka's own rule for topic names: 1-249 of [a-zA-Z0-9._-].
  auto legal = [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
  };
  if (s.topic.empty() || s.topic.size() > 249 || !std::all_of(s.topic.begin(), s.topic.end(), legal))
    return InvalidArgument("kafka: '{}' is not a topic name (1-249 of a-z A-Z 0-9 . _ -)", s.topic);
  for (char ch : s.bootstrap) {
    if (ch == '/' || ch == '?' || ch == '&' || ch == '=' || std::isspace(static_cast<unsigned char>(ch)) ||
        !std::isprint(static_cast<unsigned char>(ch)))
      return InvalidArgument("kafka: bootstrap '{}' is not HOST:PORT[,HOST:PORT...]", s.bootstrap);
  }
  return s;
}

std::string KafkaSpecWithRanges(const KafkaSpec& s,
                                const std::map<int32_t, std::pair<int64_t, int64_t>>& ranges) {
  std::string q = "ranges=";
  bool first = true;
  for (const auto& [p, r] : ranges) {
    q += fmt::format("{}{}:{}-{}", first ? "" : ",", p, r.first, r.second);
    first = false;
  }
  if (ranges.empty()) q = "count=0";
  q += s.value == KafkaSpec::kJson     ? "&value=json"
       : s.value == KafkaSpec::kStoker ? "&value=stoker"
                                       : "&value=raw";
  if (s.field != "bin") q += "&field=" + s.field;
  auto join = [](const std::set<std::string>& v) {
    std::string o;
    for (const auto& x : v) o += fmt::format("{}{}", o.empty() ? "" : ",", x);
    return o;
  };
  if (!s.base64.empty()) q += "&base64=" + join(s.base64);
  if (!s.meta.empty()) q += "&meta=" + join(s.meta);
  if (s.timeout_ms != 30000) q += fmt::format("&timeout_ms={}", s.timeout_ms);
  if (!s.group.empty()) q += "&group=" + s.group;
  if (s.commit_ms != 5000) q += fmt::format("&commit_ms={}", s.commit_ms);
  for (const auto& [k, v] : s.config) q += "&rdkafka." + k + "=" + v;
  if (ranges.empty() && !s.partitions.empty()) {
    std::string ps;
    for (int32_t p : s.partitions) ps += fmt::format("{}{}", ps.empty() ? "" : ",", p);
    q += "&partitions=" + ps;
  }
  (void)BoundText;
  return fmt::format("kafka://{}/{}?{}", s.bootstrap, s.topic, q);
}

bool DecodeBase64(const std::string& in, std::vector<uint8_t>* out) {
  static const auto table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(a[i])] = static_cast<int8_t>(i);
    return t;
  }();
  out->clear();
  out->reserve(in.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (char ch : in) {
    if (ch == '=') {
      pad++;
      continue;
    }
    if (ch == '\n' || ch == '\r') continue;
    if (pad) return false;  // data after padding
    int8_t v = table[static_cast<uint8_t>(ch)];
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<uint8_t>((acc >> bits) & 0xff));
    }
  }
  return pad <= 2 && bits < 6;
}


namespace {
constexpr char kStokerMagic[4] = {'S', 'T', 'K', 'S'};
constexpr uint8_t kStokerVersion = 1;

template <typename T>
void PutLE(std::string* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out->push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xFF));
}
}  // namespace

std::string EncodeStokerSample(const Sample& s) {
  std::string out;
  size_t n = 4 + 1 + 8 + 4 + s.key.size() + 4;
  for (size_t i = 0; i < s.num_fields; ++i) n += 2 + s.fields[i].name.size() + 4 + s.fields[i].data.size();
  out.reserve(n);
  out.append(kStokerMagic, 4);
  out.push_back(static_cast<char>(kStokerVersion));
  PutLE<int64_t>(&out, s.label);
  PutLE<uint32_t>(&out, static_cast<uint32_t>(s.key.size()));
  out += s.key;
  PutLE<uint32_t>(&out, static_cast<uint32_t>(s.num_fields));
  for (size_t i = 0; i < s.num_fields; ++i) {
    const Field& f = s.fields[i];
    PutLE<uint16_t>(&out, static_cast<uint16_t>(f.name.size()));
    out += f.name;
    PutLE<uint32_t>(&out, static_cast<uint32_t>(f.data.size()));
    out.append(reinterpret_cast<const char*>(f.data.data()), f.data.size());
  }
  return out;
}

Status DecodeStokerSample(const uint8_t* data, size_t n, const std::string& where, Sample* out) {
  size_t pos = 0;
  auto need = [&](size_t k, const char* what) -> Status {
    if (n - pos < k)
      return Corrupt("{}: stoker sample encoding cut short at byte {} of {} (reading {})", where,
                     pos, n, what);
    return Status::OK();
  };
  auto get = [&](size_t k) {
    uint64_t v = 0;
    for (size_t i = 0; i < k; ++i) v |= static_cast<uint64_t>(data[pos + i]) << (8 * i);
    pos += k;
    return v;
  };
  if (n < 5 || std::memcmp(data, kStokerMagic, 4) != 0)
    return Corrupt("{}: not in stoker's sample encoding (no 'STKS' at byte 0; written by "
                   "another producer? read it with value=raw or value=json)",
                   where);
  pos = 4;
  if (data[pos] != kStokerVersion)
    return Corrupt("{}: stoker sample encoding version {} (this stoker reads {})", where,
                   static_cast<int>(data[pos]), static_cast<int>(kStokerVersion));
  ++pos;
  STOKER_RETURN_IF_ERROR(need(8 + 4, "the label and key length"));
  out->label = static_cast<int64_t>(get(8));
  size_t klen = static_cast<size_t>(get(4));
  STOKER_RETURN_IF_ERROR(need(klen, "the key"));
  Field* kf = out->AddField("__key__");
  kf->data.assign(data + pos, data + pos + klen);
  pos += klen;
  STOKER_RETURN_IF_ERROR(need(4, "the field count"));
  uint64_t nf = get(4);
  for (uint64_t i = 0; i < nf; ++i) {
    STOKER_RETURN_IF_ERROR(need(2, "a field name length"));
    size_t nl = static_cast<size_t>(get(2));
    STOKER_RETURN_IF_ERROR(need(nl, "a field name"));
    std::string name(reinterpret_cast<const char*>(data + pos), nl);
    pos += nl;
    STOKER_RETURN_IF_ERROR(need(4, "a field length"));
    size_t dl = static_cast<size_t>(get(4));
    STOKER_RETURN_IF_ERROR(need(dl, "field data"));
    if (name.empty() || name == "__key__")
      return Corrupt("{}: stoker sample encoding: field {} has an invalid name '{}'", where, i,
                     name);
    if (out->Find(name))
      return Corrupt("{}: stoker sample encoding: field '{}' appears twice", where, name);
    Field* f = out->AddField(name);
    f->data.assign(data + pos, data + pos + dl);
    pos += dl;
  }
  if (pos != n)
    return Corrupt("{}: stoker sample encoding: {} bytes after the last field (at byte {})",
                   where, n - pos, pos);
  return Status::OK();
}

#ifdef STOKER_HAVE_RDKAFKA

namespace {

using Clock = std::chrono::steady_clock;

// librdkafka's log and error callbacks write here (the last error, for messages).
struct ClientErrors {
  Mutex mu;
  std::string last GUARDED_BY(mu);
  std::atomic<uint64_t> commits{0}, commit_failures{0};  // group= commits answered
  void Set(std::string e) {
    MutexLock l(&mu);
    last = std::move(e);
  }
  std::string Get() {
    MutexLock l(&mu);
    return last;
  }
};

void ErrorCb(rd_kafka_t*, int err, const char* reason, void* opaque) {
  static_cast<ClientErrors*>(opaque)->Set(
      fmt::format("{}: {}", rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err)), reason));
}

// Answers to group= commits (served by rd_kafka_poll).
void OffsetCommitCb(rd_kafka_t*, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t*,
                    void* opaque) {
  auto* e = static_cast<ClientErrors*>(opaque);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR || err == RD_KAFKA_RESP_ERR__NO_OFFSET) {
    e->commits++;
  } else {
    e->commit_failures++;
    e->Set(fmt::format("offset commit: {}", rd_kafka_err2str(err)));
  }
}

void LogCb(const rd_kafka_t* rk, int level, const char*, const char* buf) {
  // Connection failures are also reported through ErrorCb; keep librdkafka quiet on stderr.
  (void)rk, (void)level, (void)buf;
}

// One consumer handle (the legacy per-partition consumer: each partition is started at an
// offset and consumed on its own, with no group, so reads of different shards never wait for
// each other and nothing rebalances).
class Client {
 public:
  static Result<std::unique_ptr<Client>> Open(const KafkaSpec& s) {
    auto c = std::unique_ptr<Client>(new Client);
    c->spec_ = s;
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    std::map<std::string, std::string> props = {
        {"bootstrap.servers", s.bootstrap},
        {"enable.partition.eof", "true"},
        {"enable.auto.commit", "false"},
        {"enable.auto.offset.store", "false"},
        {"auto.offset.reset", "error"},  // an offset gone is reported, never jumped over
        {"queued.max.messages.kbytes", "32768"},  // the prefetch per partition: backpressure
        {"fetch.wait.max.ms", "50"},
        // 2 MB of a partition per fetch request (librdkafka's default 1 MB). Read one
        // partition at a time (interleave=0), with 1 MB each the fetch round trips were
        // the limit; read side by side (the default), a fetch carries the cycle's
        // partitions and the first batch waits for the whole first response: 4 MB each
        // (16 MB for 4 partitions) took 16 ms before the first message. 1, 2 and 4 MB
        // measured, interleaved: 2 MB as fast as the best of the others at 1 and 32 KB
        // messages (bench/RESULTS.md).
        {"max.partition.fetch.bytes", "2097152"},
        {"socket.keepalive.enable", "true"},
        {"reconnect.backoff.ms", "100"},
        {"reconnect.backoff.max.ms", "2000"},
        {"client.id", "stoker"},
    };
    if (!s.group.empty()) props["group.id"] = s.group;
    for (const auto& [k, v] : s.config) props[k] = v;
    for (const auto& [k, v] : props) {
      if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        return InvalidArgument("kafka: librdkafka property {}={}: {}", k, v, err);
      }
    }
    rd_kafka_conf_set_opaque(conf, &c->errors_);
    rd_kafka_conf_set_error_cb(conf, ErrorCb);
    rd_kafka_conf_set_offset_commit_cb(conf, OffsetCommitCb);
    rd_kafka_conf_set_log_cb(conf, LogCb);
    c->rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!c->rk_) {
      return InvalidArgument("kafka: cannot create a consumer for {}: {}", s.bootstrap, err);
    }
    c->rkt_ = rd_kafka_topic_new(c->rk_, s.topic.c_str(), nullptr);
    if (!c->rkt_) {
      return InvalidArgument("kafka: topic '{}': {}", s.topic,
                             rd_kafka_err2str(rd_kafka_last_error()));
    }
    return c;
  }
  ~Client() {
    if (rkt_) rd_kafka_topic_destroy(rkt_);
    if (rk_) rd_kafka_destroy(rk_);
  }
  rd_kafka_t* rk() const { return rk_; }
  rd_kafka_topic_t* rkt() const { return rkt_; }
  const KafkaSpec& spec() const { return spec_; }
  std::string LastError() { return errors_.Get(); }
  std::string Where() const { return fmt::format("topic '{}' on {}", spec_.topic, spec_.bootstrap); }

  // The topic's partitions.
  Result<std::vector<int32_t>> Partitions() {
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk_, 0, rkt_, &md, spec_.timeout_ms);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return IOError("kafka: cannot read the metadata of {}: {}{}", Where(), rd_kafka_err2str(e),
                     Detail());
    }
    std::vector<int32_t> out;
    Status st;
    for (int i = 0; i < md->topic_cnt; ++i) {
      const auto& t = md->topics[i];
      if (spec_.topic != t.topic) continue;
      if (t.err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
        st = NotFound("kafka: {} does not exist", Where());
      } else if (t.err) {
        st = IOError("kafka: metadata of {}: {}", Where(), rd_kafka_err2str(t.err));
      }
      for (int k = 0; k < t.partition_cnt; ++k) out.push_back(t.partitions[k].id);
    }
    rd_kafka_metadata_destroy(md);
    if (!st.ok()) return st;
    if (out.empty()) return NotFound("kafka: {} has no partitions", Where());
    std::sort(out.begin(), out.end());
    return out;
  }

  Status Watermarks(int32_t p, int64_t* low, int64_t* high) {
    rd_kafka_resp_err_t e =
        rd_kafka_query_watermark_offsets(rk_, spec_.topic.c_str(), p, low, high, spec_.timeout_ms);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return IOError("kafka: watermarks of {} partition {}: {}{}", Where(), p, rd_kafka_err2str(e),
                     Detail());
    }
    return Status::OK();
  }

  // Every partition's watermarks in two ListOffsets requests (earliest, latest: what
  // rd_kafka_query_watermark_offsets asks for one partition at a time, two round trips
  // each); where that fails, one partition at a time, for its error.
  Status WatermarksOf(const std::vector<int32_t>& parts, std::map<int32_t, std::pair<int64_t, int64_t>>* out) {
    out->clear();
    bool ok = !parts.empty();
    for (int64_t which : {int64_t{RD_KAFKA_OFFSET_BEGINNING}, int64_t{RD_KAFKA_OFFSET_END}}) {
      if (!ok) break;
      rd_kafka_topic_partition_list_t* l =
          rd_kafka_topic_partition_list_new(static_cast<int>(parts.size()));
      for (int32_t p : parts) rd_kafka_topic_partition_list_add(l, spec_.topic.c_str(), p)->offset = which;
      ok = rd_kafka_offsets_for_times(rk_, l, spec_.timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR &&
           l->cnt == static_cast<int>(parts.size());
      for (int i = 0; ok && i < l->cnt; ++i) {
        const auto& e = l->elems[i];
        if (e.err || e.offset < 0) {
          ok = false;
          break;
        }
        auto& w = (*out)[e.partition];
        (which == RD_KAFKA_OFFSET_BEGINNING ? w.first : w.second) = e.offset;
      }
      rd_kafka_topic_partition_list_destroy(l);
    }
    if (ok && out->size() == parts.size()) return Status::OK();
    out->clear();
    for (int32_t p : parts) {
      int64_t low = 0, high = 0;
      STOKER_RETURN_IF_ERROR(Watermarks(p, &low, &high));
      (*out)[p] = {low, high};
    }
    return Status::OK();
  }

  // The first offset of each partition with a timestamp at or after `ts_ms` (the high
  // watermark where none is).
  Result<std::map<int32_t, int64_t>> OffsetsForTime(const std::vector<int32_t>& parts,
                                                    int64_t ts_ms) {
    rd_kafka_topic_partition_list_t* l = rd_kafka_topic_partition_list_new(static_cast<int>(parts.size()));
    for (int32_t p : parts) rd_kafka_topic_partition_list_add(l, spec_.topic.c_str(), p)->offset = ts_ms;
    rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(rk_, l, spec_.timeout_ms);
    std::map<int32_t, int64_t> out;
    Status st;
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
      st = IOError("kafka: offsets for time {} on {}: {}{}", ts_ms, Where(), rd_kafka_err2str(e), Detail());
    } else {
      for (int i = 0; i < l->cnt; ++i) {
        if (l->elems[i].err) {
          st = IOError("kafka: offset for time {} on {} partition {}: {}", ts_ms, Where(),
                       l->elems[i].partition, rd_kafka_err2str(l->elems[i].err));
          break;
        }
        out[l->elems[i].partition] = l->elems[i].offset;  // -1: no such message (end)
      }
    }
    rd_kafka_topic_partition_list_destroy(l);
    if (!st.ok()) return st;
    return out;
  }

  void NoteCommitFailure(const std::string& why) {
    errors_.commit_failures++;
    errors_.Set("offset commit: " + why);
  }
  uint64_t commits() const { return errors_.commits.load(); }
  uint64_t commit_failures() const { return errors_.commit_failures.load(); }

  std::string Detail() {
    std::string e = LastError();
    return e.empty() ? "" : " (last client error: " + e + ")";
  }

 private:
  Client() = default;
  KafkaSpec spec_;
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_topic_t* rkt_ = nullptr;
  ClientErrors errors_;
};

Result<std::vector<KafkaPartitionWindow>> Resolve(Client* c) {
  const KafkaSpec& s = c->spec();
  STOKER_ASSIGN_OR_RETURN(std::vector<int32_t> all, c->Partitions());
  std::vector<int32_t> parts;
  if (!s.ranges.empty()) {
    for (const auto& [p, r] : s.ranges) parts.push_back(p);
  } else if (!s.partitions.empty()) {
    parts = s.partitions;
    std::sort(parts.begin(), parts.end());
    parts.erase(std::unique(parts.begin(), parts.end()), parts.end());
  } else {
    parts = all;
  }
  for (int32_t p : parts) {
    if (!std::binary_search(all.begin(), all.end(), p))
      return NotFound("kafka: {} has no partition {} (it has {})", c->Where(), p, all.size());
  }
  std::map<int32_t, int64_t> start_ts, end_ts;
  if (s.ranges.empty() && s.start.kind == KafkaBound::kTimestamp) {
    STOKER_ASSIGN_OR_RETURN(start_ts, c->OffsetsForTime(parts, s.start.value));
  }
  if (s.ranges.empty() && s.end.kind == KafkaBound::kTimestamp) {
    STOKER_ASSIGN_OR_RETURN(end_ts, c->OffsetsForTime(parts, s.end.value));
  }
  std::map<int32_t, std::pair<int64_t, int64_t>> marks;
  STOKER_RETURN_IF_ERROR(c->WatermarksOf(parts, &marks));
  std::vector<KafkaPartitionWindow> out;
  for (int32_t p : parts) {
    KafkaPartitionWindow w;
    w.partition = p;
    std::tie(w.low, w.high) = marks.at(p);
    if (!s.ranges.empty()) {
      std::tie(w.begin, w.end) = s.ranges.at(p);
      if (w.end > w.high) {
        return InvalidArgument("kafka: {} partition {}: the pinned range {}-{} ends past the high "
                          "watermark {} (was the topic re-created?)",
                          c->Where(), p, w.begin, w.end, w.high);
      }
      out.push_back(w);
      continue;
    }
    auto at = [&](const KafkaBound& b, const std::map<int32_t, int64_t>& ts) -> int64_t {
      switch (b.kind) {
        case KafkaBound::kEarliest: return w.low;
        case KafkaBound::kLatest: return w.high;
        case KafkaBound::kOffset: return b.value;
        case KafkaBound::kTimestamp: {
          int64_t o = ts.at(p);
          return o < 0 ? w.high : o;
        }
      }
      return w.high;
    };
    w.begin = at(s.start, start_ts);
    w.end = at(s.end, end_ts);
    if (s.end.kind == KafkaBound::kOffset && w.end > w.high) {
      return InvalidArgument("kafka: {} partition {}: end={} is past the high watermark {} (those "
                        "messages do not exist yet)",
                        c->Where(), p, w.end, w.high);
    }
    w.begin = std::min(w.begin, w.high);
    if (s.count >= 0) w.end = std::min(w.end, w.begin + s.count);
    w.end = std::max(w.end, w.begin);
    out.push_back(w);
  }
  return out;
}

// A message, as fetched (`m`) or, when held for a later read, copied out (`copied`).
// librdkafka's messages are slices of the fetch response they came in (about 1 MB): one
// message kept alive keeps its whole response. A shuffle buffer holds messages scattered
// over a span of offsets several times its size (an entry stays in the buffer for a
// geometric number of draws), so holding librdkafka's messages pinned about 3.5x the
// buffer's bytes (peak RSS 450 MB for a 64 MB buffer of 32 KB messages). So when reads
// jump (not in offset order) held messages are copied out; the copy is the one the sample
// needs anyway (its field takes the buffer without another copy).
struct Held {
  rd_kafka_message_t* m = nullptr;
  bool copied = false;
  std::vector<uint8_t> value;  // copied: the value
  std::string key;             // copied: the message key (has_key)
  bool has_key = false;
  int64_t timestamp = -1;      // copied: the message timestamp (ms)
  Held() = default;
  explicit Held(rd_kafka_message_t* x) : m(x) {}
  Held(Held&& o) noexcept { *this = std::move(o); }
  Held& operator=(Held&& o) noexcept {
    std::swap(m, o.m);
    std::swap(copied, o.copied);
    value.swap(o.value);
    key.swap(o.key);
    std::swap(has_key, o.has_key);
    std::swap(timestamp, o.timestamp);
    return *this;
  }
  ~Held() {
    if (m) rd_kafka_message_destroy(m);
  }
  explicit operator bool() const { return m || copied; }
  const uint8_t* payload() const {
    return m ? static_cast<const uint8_t*>(m->payload) : value.data();
  }
  size_t len() const { return m ? m->len : value.size(); }
  // Copies the value (into `buf`, whose capacity is reused) and metadata out and releases
  // the message.
  void Detach(std::vector<uint8_t>&& buf) {
    if (!m) return;
    value = std::move(buf);
    value.assign(static_cast<const uint8_t*>(m->payload),
                 static_cast<const uint8_t*>(m->payload) + m->len);
    has_key = m->key != nullptr;
    if (has_key) key.assign(static_cast<const char*>(m->key), m->key_len);
    rd_kafka_timestamp_type_t tt;
    timestamp = rd_kafka_message_timestamp(m, &tt);
    rd_kafka_message_destroy(m);
    m = nullptr;
    copied = true;
  }
};

// Messages fetched ahead of the reads that want them, by offset. A partition's stream
// delivers rising offsets, so they are kept in a deque indexed by offset - base (no node
// allocation or tree rebalancing per message: a std::map here cost a tenth of a 1 KB
// message's time); an offset below base (a restarted stream) or far past the end (a gap)
// goes to a map.
class HeldByOffset {
 public:
  // Moves the message at `off` into *out; false when it is not held.
  bool Take(int64_t off, Held* out) {
    if (off >= base_ && off < base_ + static_cast<int64_t>(q_.size()) &&
        q_[static_cast<size_t>(off - base_)]) {
      Held& h = q_[static_cast<size_t>(off - base_)];
      *out = std::move(h);
      Add(-1);
      // Drop the taken front; a message held more than kMaxPad offsets behind this read
      // (fetched, never wanted in this pass: a resume skipped it) moves to the map, so
      // the deque spans at most that many offsets behind the reads.
      while (!q_.empty() && (!q_.front() || off - base_ > kMaxPad)) {
        if (q_.front()) other_.emplace(base_, std::move(q_.front()));
        q_.pop_front();
        ++base_;
      }
      return true;
    }
    if (other_.empty()) return false;
    auto it = other_.find(off);  // below the deque, or put there past a gap
    if (it == other_.end()) return false;
    *out = std::move(it->second);
    other_.erase(it);
    Add(-1);
    return true;
  }
  // Holds `m` at `off` unless a message is held there already (the first is kept).
  void Put(int64_t off, Held&& m) {
    if (q_.empty()) base_ = off;
    const int64_t end = base_ + static_cast<int64_t>(q_.size());
    if (off >= base_ && off < end) {
      Held& h = q_[static_cast<size_t>(off - base_)];
      if (!h) {
        h = std::move(m);
        Add(1);
      }
      return;
    }
    if (off >= end && off - end <= kMaxPad) {
      while (base_ + static_cast<int64_t>(q_.size()) < off) q_.emplace_back();
      q_.push_back(std::move(m));
      Add(1);
      return;
    }
    if (other_.emplace(off, std::move(m)).second) Add(1);
  }
  bool empty() const { return held_ == 0; }
  // Releases the messages at offsets for which drop(offset) is true.
  template <typename Pred>
  void DropIf(Pred drop) {
    for (size_t i = 0; i < q_.size(); ++i) {
      if (q_[i] && drop(base_ + static_cast<int64_t>(i))) {
        q_[i] = Held();
        Add(-1);
      }
    }
    for (auto it = other_.begin(); it != other_.end();) {
      if (drop(it->first)) {
        it = other_.erase(it);
        Add(-1);
      } else {
        ++it;
      }
    }
  }
  void Clear() {
    q_.clear();
    other_.clear();
    Add(-static_cast<int64_t>(held_));
  }
  // Counts the messages held here into `now` (all partitions) and its peak into `peak`.
  void Track(std::atomic<int64_t>* now, std::atomic<int64_t>* peak) {
    now_ = now;
    peak_ = peak;
  }

 private:
  static constexpr int64_t kMaxPad = 65536;
  std::deque<Held> q_;
  int64_t base_ = 0;
  std::map<int64_t, Held> other_;
  size_t held_ = 0;  // messages held, in q_ and other_
  std::atomic<int64_t>*now_ = nullptr, *peak_ = nullptr;
  void Add(int64_t d) {
    held_ = static_cast<size_t>(static_cast<int64_t>(held_) + d);
    if (!now_) return;
    const int64_t v = now_->fetch_add(d, std::memory_order_relaxed) + d;
    for (int64_t p = peak_->load(std::memory_order_relaxed);
         v > p && !peak_->compare_exchange_weak(p, v, std::memory_order_relaxed);) {
    }
  }
};

class KafkaDataset final : public Dataset {
 public:
  KafkaDataset(std::unique_ptr<Client> c, std::vector<KafkaPartitionWindow> w)
      : client_(std::move(c)), windows_(std::move(w)) {
    uint64_t n = 0;
    for (const auto& win : windows_) {
      if (win.end <= win.begin) continue;
      ShardInfo s;
      s.path = fmt::format("kafka://{}/{}/{}", client_->spec().bootstrap, client_->spec().topic,
                           win.partition);
      s.begin = n;
      n += static_cast<uint64_t>(win.end - win.begin);
      s.end = n;
      shards_.push_back(s);
      cursors_.push_back(std::make_unique<Cursor>());
      cursors_.back()->win = win;
      cursors_.back()->shard = cursors_.size() - 1;
      {
        MutexLock l(&cursors_.back()->mu);
        cursors_.back()->ahead.Track(&held_now_, &held_peak_);
      }
      cursors_.back()->key_prefix = fmt::format("{}/{}/", client_->spec().topic, win.partition);
      cursors_.back()->location_prefix =
          fmt::format("kafka {} partition {} offset ", client_->Where(), win.partition);
    }
    size_ = n;
    next_shard_ = std::make_unique<std::atomic<size_t>[]>(cursors_.size());
    for (size_t k = 0; k < cursors_.size(); ++k) next_shard_[k] = k + 1;
  }
  ~KafkaDataset() override {
    for (auto& c : cursors_) {
      MutexLock l(&c->mu);
      StopLocked(c.get());
      c->ahead.Clear();
    }
  }

  uint64_t size() const override { return size_; }
  const std::vector<ShardInfo>& shards() const override { return shards_; }
  std::string format() const override { return "kafka"; }
  const std::vector<KafkaPartitionWindow>& windows() const { return windows_; }

  std::string Key(uint64_t index) const override {
    auto [c, off] = Locate(index);
    return fmt::format("{}/{}/{}", client_->spec().topic, c->win.partition, off);
  }
  std::string Location(uint64_t index) const override {
    auto [c, off] = Locate(index);
    return fmt::format("kafka {} partition {} offset {}", client_->Where(), c->win.partition, off);
  }
  Status CheckRandomAccess() const override {
    return InvalidArgument("kafka: partitions are read in offset order (a shuffle buffer "
                           "shuffles them; a full permutation would seek per message)");
  }
  int max_read_threads() const override { return std::max<int>(1, static_cast<int>(shards_.size())); }
  std::vector<std::string> notes() const override {
    std::vector<std::string> n;
    for (const auto& w : windows_) {
      n.push_back(fmt::format("kafka {} partition {}: offsets {}-{} (watermarks {}-{})",
                              client_->Where(), w.partition, w.begin, w.end, w.low, w.high));
    }
    return n;
  }

  // The mean size of the first kSizeSample messages of each partition's window: fixed data
  // (offsets do not change), so every rank and every re-open finds the same. The messages
  // read stay held for the reads that want them.
  double sample_bytes_estimate() const override {
    constexpr int64_t kSizeSample = 8;
    double bytes = 0, n = 0;
    // Every partition's stream first, so that librdkafka fetches them together (one round
    // trip to the broker, not one per partition).
    for (const auto& c : cursors_) {
      MutexLock l(&c->mu);
      if (!c->started && c->win.end > c->win.begin && !StartLocked(c.get(), c->win.begin).ok())
        return 0;  // unknown; the read will say why
    }
    for (const auto& c : cursors_) {
      MutexLock l(&c->mu);
      for (int64_t o = c->win.begin; o < std::min(c->win.end, c->win.begin + kSizeSample); ++o) {
        Held h;
        if (!FetchLocked(c.get(), o, &h).ok()) return 0;  // unknown; the read will say why
        bytes += static_cast<double>(h.len());
        n += 1;
        h.Detach(TakeBuffer());
        c->ahead.Put(o, std::move(h));
      }
      // Until the reads come here, do not let the client prefetch every partition
      // (queued.max.messages.kbytes each); the stream restarts after what is held. A
      // topic whose partitions all fit in an interleave cycle has them all read at once
      // from the start: they stay started (stopped and restarted, the first batch came
      // 15-30 ms later).
      if (cursors_.size() > kInterleaveCycle) StopLocked(c.get());
    }
    return n > 0 ? bytes / n : 0;
  }

  std::map<std::string, double> counters() const override {
    std::map<std::string, double> out{
        {"kafka_messages", static_cast<double>(messages_.load())},
        {"kafka_bytes", static_cast<double>(bytes_.load())},
        {"kafka_fetch_wait_s", static_cast<double>(wait_ns_.load()) / 1e9},
        {"kafka_seeks", static_cast<double>(seeks_.load())},
        {"kafka_missing_offsets", static_cast<double>(missing_.load())},
        // messages fetched ahead of their reads, held: the most at once
        {"kafka_held_peak", static_cast<double>(held_peak_.load())},
    };
    if (!client_->spec().group.empty()) {
      rd_kafka_poll(client_->rk(), 0);  // commit answers
      out["kafka_commits"] = static_cast<double>(client_->commits());
      out["kafka_commit_failures"] = static_cast<double>(client_->commit_failures());
    }
    double lag = 0;
    for (const auto& c : cursors_) {
      int64_t low = 0, high = 0, next = 0;
      {
        MutexLock l(&c->mu);
        next = c->delivered_max + 1;
        if (next <= 0) next = c->win.begin;
      }
      if (rd_kafka_get_watermark_offsets(client_->rk(), client_->spec().topic.c_str(),
                                         c->win.partition, &low, &high) == RD_KAFKA_RESP_ERR_NO_ERROR &&
          high >= 0) {
        double l = static_cast<double>(std::max<int64_t>(0, high - next));
        out[fmt::format("kafka_lag_p{}", c->win.partition)] = l;
        lag += l;
      }
    }
    out["kafka_lag"] = lag;
    return out;
  }

  // Partitions side by side, 64 messages of each in turn: a pass streams up to 8 of them
  // at once, as a consumer assigned them reads them (one partition at a time, the fetches
  // of one partition were the limit: bench/RESULTS.md).
  Interleave interleave() const override {
    return {kInterleaveBlock, std::min<size_t>(cursors_.size(), kInterleaveCycle)};
  }

  void HintPass(const PassHint& hint) const override {
    // The partition that takes each one's place when it ends (the next of the order
    // `side_by_side` on): its stream starts as the one before it nears its end.
    const size_t step = std::max<size_t>(1, hint.side_by_side);
    for (size_t k = 0; k < cursors_.size(); ++k) next_shard_[k] = cursors_.size();
    for (size_t i = 0; i + step < hint.shard_order.size(); ++i)
      if (hint.shard_order[i] < cursors_.size())
        next_shard_[hint.shard_order[i]] = hint.shard_order[i + step];
    side_by_side_.store(step, std::memory_order_relaxed);
    commit_progress_.store(!client_->spec().group.empty() && hint.rank == 0,
                           std::memory_order_relaxed);
    // The offsets this reader will read, per partition: what the stream delivers on the way
    // to them and no read of the pass wants (the other ranks' messages) is not kept.
    std::vector<std::vector<uint64_t>> want(cursors_.size());
    if (hint.reads) {
      for (size_t k = 0; k < cursors_.size(); ++k)
        want[k].assign((shards_[k].end - shards_[k].begin + 63) / 64, 0);
      for (uint64_t idx : *hint.reads) {
        if (idx >= size_) continue;
        auto [c, off] = Locate(idx);
        const uint64_t bit = static_cast<uint64_t>(off - c->win.begin);
        want[c->shard][bit / 64] |= uint64_t{1} << (bit % 64);
      }
    }
    for (size_t k = 0; k < cursors_.size(); ++k) {
      Cursor* c = cursors_[k].get();
      MutexLock l(&c->mu);
      if (hint.reads) {
        const std::vector<uint64_t>& w = want[k];
        const int64_t b = c->win.begin, e = c->win.end;
        c->ahead.DropIf([&w, b, e](int64_t off) { return !InSet(w, b, e, off); });
      }
      c->want.swap(want[k]);
      c->has_want = hint.reads != nullptr;
      c->covered.clear();  // a new pass
    }
    // The streams of the cycle's first partitions start now, together (one after another,
    // as the first reads of each came, the first batch waited 50-80 ms instead of ~25), at
    // the first offset this reader reads.
    for (size_t i = 0; i < std::min(step, hint.shard_order.size()); ++i) {
      if (hint.shard_order[i] >= cursors_.size()) continue;
      Cursor* c = cursors_[hint.shard_order[i]].get();
      MutexLock l(&c->mu);
      if (c->started) continue;
      int64_t from = c->win.begin;
      if (c->has_want) {
        size_t w = 0;
        while (w < c->want.size() && c->want[w] == 0) ++w;
        if (w == c->want.size()) continue;  // nothing to read here
        from += static_cast<int64_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(c->want[w])));
      }
      if (from < c->win.end) (void)StartLocked(c, from);  // a failure: the read will say
    }
  }

  // value=raw without meta fields: a sample is the message's value and nothing else.
  bool CanReadRawRun(const std::string& field) const override {
    const KafkaSpec& s = client_->spec();
    return s.value == KafkaSpec::kRaw && s.meta.empty() && (field.empty() || field == s.field);
  }

  // Chunks of up to kRunChunk samples: each partition the chunk touches is locked once and
  // its messages taken (librdkafka's, no copy, unless held copied for a shuffle buffer), then
  // the chunk is handed to the sink in order without a lock, each value copied once, by the
  // sink, from librdkafka's buffer to wherever it goes (the pipeline: the batch). The chunk
  // bounds how many fetch responses a run pins.
  void ReadRawRun(const uint64_t* indices, size_t n, RawRunSink* sink) const override {
    constexpr size_t kRunChunk = 64;
    std::array<Held, kRunChunk> held;
    std::array<Status, kRunChunk> errs;
    std::array<Cursor*, kRunChunk> cur;
    std::array<int64_t, kRunChunk> offs;
    std::array<bool, kRunChunk> taken;
    std::array<Cursor*, kRunChunk> ahead_of;  // partitions whose successor to prefetch
    std::string key;
    for (size_t b = 0; b < n; b += kRunChunk) {
      const size_t m = std::min(kRunChunk, n - b);
      for (size_t j = 0; j < m; ++j) {
        std::tie(cur[j], offs[j]) = Locate(indices[b + j]);
        taken[j] = false;
      }
      size_t n_ahead = 0;
      for (size_t j = 0; j < m; ++j) {
        if (taken[j]) continue;
        Cursor* c = cur[j];
        MutexLock l(&c->mu);
        // In offset order: this partition's offsets in the chunk follow each other, or the
        // first is near the last read (Read's test).
        bool consecutive = true;
        int64_t prev = -1, last = offs[j];
        int count = 0;
        for (size_t k = j; k < m; ++k) {
          if (cur[k] != c) continue;
          if (count++ > 0 && offs[k] != prev + 1) consecutive = false;
          prev = last = offs[k];
        }
        c->reads_in_order = (count > 1 && consecutive) ||
                            (c->last_read >= 0 && offs[j] >= c->last_read - 64 &&
                             offs[j] <= c->last_read + 64);
        c->last_read = last;
        // After a read of this partition failed for want of the broker, its other samples of
        // the chunk fail at once (a chunk of them must not wait timeout_ms, or 200 ms, each).
        Status broken;
        for (size_t k = j; k < m; ++k) {
          if (cur[k] != c) continue;
          taken[k] = true;
          if (!broken.ok()) {
            errs[k] = Status(broken.code(),
                             fmt::format("kafka: {} partition {} offset {} not read: {}",
                                         client_->Where(), c->win.partition, offs[k],
                                         broken.message()));
            continue;
          }
          Status st = FetchLocked(c, offs[k], &held[k]);
          if (!st.ok()) {
            errs[k] = st;
            if (st.code() != StatusCode::kCorrupt) broken = st;  // not a missing offset
            continue;
          }
          NoteDelivered(c, offs[k]);
        }
        // Read in offset order one partition at a time, a partition has the next one
        // fetched with it all along; read out of order (a shuffle buffer) or side by side
        // with others (interleaved), only once its stream nears the window's end (prefetched
        // all along, the next one's 32 MB sat in fresh pages and did not make shuffled
        // reads faster; interleaved, it would stream twice the partitions of the cycle).
        if ((c->reads_in_order && side_by_side_.load(std::memory_order_relaxed) <= 1) ||
            (c->started && c->win.end - c->next <= PrefetchLead()))
          ahead_of[n_ahead++] = c;
      }
      // Start the stream of the partition read after those, so that librdkafka fetches it
      // with them (one fetch request carries every started partition, up to
      // max.partition.fetch.bytes each).
      for (size_t j = 0; j < n_ahead; ++j) PrefetchAfter(ahead_of[j]);
      uint64_t delivered = 0, bytes = 0;
      for (size_t j = 0; j < m; ++j) {
        if (!errs[j].ok()) {
          sink->Fail(b + j, errs[j]);
          errs[j] = Status::OK();
          continue;
        }
        Held& h = held[j];
        char digits[24];
        auto [end, ec] = std::to_chars(digits, digits + sizeof digits, offs[j]);
        (void)ec;
        key.assign(cur[j]->key_prefix).append(digits, end);
        sink->Deliver(b + j, key, h.payload(), h.len());
        delivered++;
        bytes += h.len();
        if (h.copied) GiveBuffer(std::move(h.value));
        h = Held();  // releases librdkafka's message
      }
      messages_ += delivered;
      bytes_ += bytes;
      if (commit_progress_.load(std::memory_order_relaxed)) MaybeCommit();
    }
  }

  Status Read(uint64_t index, Sample* out) const override {
    out->Clear();
    auto [c, off] = Locate(index);
    Held h;
    {
      MutexLock l(&c->mu);
      // Near the last read (threads interleave a little): reading in offset order.
      c->reads_in_order = c->last_read >= 0 && off >= c->last_read - 64 && off <= c->last_read + 64;
      c->last_read = off;
      STOKER_RETURN_IF_ERROR(FetchLocked(c, off, &h));
      NoteDelivered(c, off);
    }
    messages_++;
    bytes_ += h.len();
    if (commit_progress_.load(std::memory_order_relaxed)) MaybeCommit();
    Status st = Fill(c, off, &h, out);
    if (h.copied) GiveBuffer(std::move(h.value));
    return st;
  }

 private:
  struct Cursor {
    KafkaPartitionWindow win;
    std::string key_prefix, location_prefix;  // "TOPIC/P/", "kafka ... partition P offset "
    Mutex mu;
    bool started GUARDED_BY(mu) = false;
    int64_t next GUARDED_BY(mu) = -1;          // offset the consumer's stream delivers next
    HeldByOffset ahead GUARDED_BY(mu);  // fetched, not read yet
    std::map<int64_t, int64_t> gaps GUARDED_BY(mu);  // missing [begin, end)
    int64_t delivered_max GUARDED_BY(mu) = -1;
    int64_t last_read GUARDED_BY(mu) = -1;  // the offset the last Read asked for
    bool reads_in_order GUARDED_BY(mu) = false;
    size_t shard = 0;                              // its place in cursors_
    // The offsets (bits from win.begin) this reader reads in the pass (HintPass), when
    // has_want: others delivered by the stream on the way are not held.
    std::vector<uint64_t> want GUARDED_BY(mu);
    bool has_want GUARDED_BY(mu) = false;
    // PrefetchAfter started its stream for this pass, or found it started (cleared when the
    // window's last offset is read)
    std::atomic<bool> prefetched{false};
    // Offsets the stream delivered in this pass, as disjoint [begin, end) intervals (mostly
    // one: the stream reads forward, restarts are rare).
    std::map<int64_t, int64_t> covered GUARDED_BY(mu);
  };

  std::pair<Cursor*, int64_t> Locate(uint64_t index) const {
    auto it = std::upper_bound(shards_.begin(), shards_.end(), index,
                               [](uint64_t i, const ShardInfo& s) { return i < s.end; });
    size_t k = static_cast<size_t>(it - shards_.begin());
    if (k >= shards_.size()) k = shards_.size() - 1;
    Cursor* c = cursors_[k].get();
    return {c, c->win.begin + static_cast<int64_t>(index - shards_[k].begin)};
  }

  // Offset `off` of `c` was taken by a read: the highest so far is what the lag and the
  // group commits count from; the window's last frees the stream's prefetch and makes a
  // commit due.
  void NoteDelivered(Cursor* c, int64_t off) const REQUIRES(c->mu) {
    c->delivered_max = std::max(c->delivered_max, off);
    if (off + 1 == c->win.end) {
      StopLocked(c);
      c->prefetched.store(false, std::memory_order_relaxed);
      commit_due_.store(true, std::memory_order_relaxed);
    }
  }

  static constexpr int64_t kBackfill = 16384;
  // Starts the stream of the partition this pass reads after `c` (HintPass: the plan's
  // shard order, shuffled per epoch or not, the cycle's width on; without a hint the next
  // in shard order), unless it is being read already: so librdkafka's fetch requests carry both
  // partitions, as a consumer assigned several fetches them. Only the next one: with three
  // ahead (a 4-partition topic fetched whole from the start) the prefetched data all landed
  // in fresh pages (librdkafka allocates each fetch response: ~32k page faults per 100 MB
  // read) and 1 KB messages in offset order were read at ~0.85x the rate of one ahead with
  // 4 MB fetches (bench/RESULTS.md). The stream holds at most queued.max.messages.kbytes
  // until its reads come.
  // Offsets before a partition's window end at which a shuffled read starts the next
  // partition's stream: about 8 MB of messages.
  int64_t PrefetchLead() const {
    const uint64_t n = messages_.load(std::memory_order_relaxed);
    const double mean = n ? static_cast<double>(bytes_.load(std::memory_order_relaxed)) / n : 1024;
    return std::max<int64_t>(256, static_cast<int64_t>((8 << 20) / std::max(1.0, mean)));
  }

  void PrefetchAfter(const Cursor* c) const {
    const size_t k = next_shard_[c->shard].load(std::memory_order_relaxed);
    if (k >= cursors_.size()) return;
    Cursor* n = cursors_[k].get();
    if (n->prefetched.load(std::memory_order_relaxed)) return;
    MutexLock l(&n->mu);
    if (n->started) {  // being read: nothing to do until its pass ends
      n->prefetched.store(true, std::memory_order_relaxed);
      return;
    }
    int64_t from = n->win.begin;
    if (n->last_read < 0) {
      from = HoleStart(n, n->win.begin);  // after what the size estimate read
    } else {
      // Read before: only once its pass is complete (every offset delivered by the stream
      // and read), and a new pass of it begins.
      const bool whole = n->covered.size() == 1 && n->covered.begin()->first <= n->win.begin &&
                         n->covered.begin()->second >= n->win.end;
      if (!whole || !n->ahead.empty()) return;
      n->covered.clear();
    }
    if (from >= n->win.end) return;
    if (StartLocked(n, from).ok()) n->prefetched.store(true, std::memory_order_relaxed);
  }

  // group=: commits, per partition read in this pass, the offset after the last message
  // read, asynchronously (answers counted by OffsetCommitCb), every commit_ms or when a
  // partition's window was read. One thread commits at a time; the others go on.
  void MaybeCommit() const {
    const int64_t t = Clock::now().time_since_epoch().count();
    if (!commit_due_.load(std::memory_order_relaxed) &&
        t < next_commit_.load(std::memory_order_relaxed))
      return;
    if (commit_busy_.exchange(true)) return;
    commit_due_.store(false, std::memory_order_relaxed);
    next_commit_.store(t + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::milliseconds(client_->spec().commit_ms)).count(),
                       std::memory_order_relaxed);
    rd_kafka_topic_partition_list_t* l =
        rd_kafka_topic_partition_list_new(static_cast<int>(cursors_.size()));
    for (const auto& c : cursors_) {
      int64_t next = -1;
      {
        MutexLock lock(&c->mu);
        next = c->delivered_max + 1;
      }
      if (next <= 0) continue;
      rd_kafka_topic_partition_list_add(l, client_->spec().topic.c_str(), c->win.partition)->offset =
          next;
    }
    if (l->cnt > 0) {
      rd_kafka_resp_err_t err = rd_kafka_commit(client_->rk(), l, /*async=*/1);
      if (err) client_->NoteCommitFailure(rd_kafka_err2str(err));
    }
    rd_kafka_topic_partition_list_destroy(l);
    commit_busy_.store(false);
  }

  // Whether this reader's pass reads offset `o` (every offset when no hint said).
  static bool Wanted(const Cursor* c, int64_t o) REQUIRES(c->mu) {
    return !c->has_want || InSet(c->want, c->win.begin, c->win.end, o);
  }
  // Offset `o`'s bit in a set of offsets [b, e) (bit i: offset b + i).
  static bool InSet(const std::vector<uint64_t>& set, int64_t b, int64_t e, int64_t o) {
    if (o < b || o >= e) return false;
    const uint64_t bit = static_cast<uint64_t>(o - b);
    return (set[bit / 64] >> (bit % 64)) & 1;
  }

  static bool IsCovered(const Cursor* c, int64_t o) REQUIRES(c->mu) {
    auto it = c->covered.upper_bound(o);
    return it != c->covered.begin() && o < std::prev(it)->second;
  }
  // The first offset of the uncovered run that holds `o` (not covered itself).
  static int64_t HoleStart(const Cursor* c, int64_t o) REQUIRES(c->mu) {
    auto it = c->covered.upper_bound(o);
    return it == c->covered.begin() ? c->win.begin : std::prev(it)->second;
  }

  // Adds `o` to the offsets covered; true when it was covered already.
  static bool Cover(Cursor* c, int64_t o) REQUIRES(c->mu) {
    auto& iv = c->covered;
    auto it = iv.upper_bound(o);  // the first interval starting after o
    if (it != iv.begin()) {
      auto prev = std::prev(it);
      if (o < prev->second) return true;
      if (o == prev->second) {  // extends prev; maybe joins the next
        prev->second = o + 1;
        if (it != iv.end() && it->first == o + 1) {
          prev->second = it->second;
          iv.erase(it);
        }
        return false;
      }
    }
    if (it != iv.end() && it->first == o + 1) {
      int64_t e = it->second;
      iv.erase(it);
      iv.emplace(o, e);
      return false;
    }
    iv.emplace(o, o + 1);
    return false;
  }

  void StopLocked(Cursor* c) const REQUIRES(c->mu) {
    if (c->started) {
      rd_kafka_consume_stop(client_->rkt(), c->win.partition);
      c->started = false;
      c->next = -1;
    }
  }

  Status StartLocked(Cursor* c, int64_t off) const REQUIRES(c->mu) {
    // Messages already held stay: they are still wanted, and the ones the restarted stream
    // delivers again are dropped (emplace keeps the first).
    StopLocked(c);
    if (rd_kafka_consume_start(client_->rkt(), c->win.partition, off) == -1) {
      return IOError("kafka: cannot start reading {} partition {} at offset {}: {}",
                     client_->Where(), c->win.partition, off,
                     rd_kafka_err2str(rd_kafka_last_error()));
    }
    c->started = true;
    c->next = off;
    return Status::OK();
  }

  Status Missing(Cursor* c, int64_t off, int64_t b, int64_t e) const REQUIRES(c->mu) {
    return Corrupt("kafka: {} partition {}: offsets {}-{} are missing (compacted away, deleted "
                   "or transaction markers); offset {} cannot be read",
                   client_->Where(), c->win.partition, b, e - 1, off);
  }

  void NoteGap(Cursor* c, int64_t b, int64_t e) const REQUIRES(c->mu) {
    b = std::max(b, c->win.begin);
    e = std::min(e, c->win.end);
    if (e <= b) return;
    auto [it, fresh] = c->gaps.emplace(b, e);
    if (fresh) missing_ += static_cast<uint64_t>(e - b);
  }

  // Moves the message at `off` into *h, consuming forward (or restarting the partition's
  // stream there) as needed.
  Status FetchLocked(Cursor* c, int64_t off, Held* h) const REQUIRES(c->mu) {
    if (c->ahead.Take(off, h)) return Status::OK();
    for (const auto& [b, e] : c->gaps) {
      if (off >= b && off < e) return Missing(c, off, b, e);
    }
    // `off` is neither held nor missing. Covered (delivered in this pass) means it was read
    // already: a new pass (a later epoch) begins, and what this one covered is forgotten.
    if (IsCovered(c, off)) c->covered.clear();
    // The stream should run over the hole of uncovered offsets that `off` is in, from its
    // start (those messages are wanted soon: a shuffle buffer reads a window of offsets out
    // of order), at most kBackfill before `off` (a resume mid-window skips the rest).
    int64_t from = std::max(HoleStart(c, off), off - kBackfill);
    for (const auto& [b, e] : c->gaps)  // not from inside a known gap
      if (from >= b && from < e) from = e;
    if (!c->started || c->next < from || c->next > off) {
      if (c->next >= 0) seeks_++;
      STOKER_RETURN_IF_ERROR(StartLocked(c, from));
    }
    auto t0 = Clock::now();
    auto last_progress = t0;
    rd_kafka_message_t* batch[256];
    for (;;) {
      // What the client has queued, without waiting (consume_batch with a timeout waits
      // for a full batch); when nothing is, wait for one message only.
      ssize_t n = rd_kafka_consume_batch(client_->rkt(), c->win.partition, 0, batch, 256);
      if (n == 0) {
        batch[0] = rd_kafka_consume(client_->rkt(), c->win.partition, 100);
        n = batch[0] ? 1 : (rd_kafka_last_error() == RD_KAFKA_RESP_ERR__TIMED_OUT ? 0 : -1);
      }
      rd_kafka_poll(client_->rk(), 0);  // error callbacks
      if (n < 0) {
        wait_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
        return IOError("kafka: reading {} partition {}: {}", client_->Where(), c->win.partition,
                       rd_kafka_err2str(rd_kafka_last_error()));
      }
      Status st;
      bool got = false, restarted = false, progressed = false;
      for (ssize_t i = 0; i < n; ++i) {
        Held m(batch[i]);
        if (!st.ok() || restarted) continue;  // an error or a restart drops the rest
        if (m.m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) continue;  // wait for more
        if (m.m->err) {
          int64_t restart_at = -1;
          st = ErrorOf(c, off, m.m, &restart_at);
          if (st.ok() && restart_at >= 0) st = StartLocked(c, restart_at);
          restarted = st.ok();  // the rest of this batch is from the old stream
          continue;
        }
        int64_t mo = m.m->offset;
        if (mo < c->next) continue;  // already seen (a restart re-delivers)
        if (mo > c->next) NoteGap(c, c->next, mo);
        c->next = mo + 1;
        progressed = true;
        progress_++;
        bool again = Cover(c, mo);  // held or read already in this pass
        if (mo == off) {
          *h = std::move(m);
          got = true;
        } else if (!again && mo < c->win.end && Wanted(c, mo)) {
          // Before or after `off`: wanted soon by this or another thread (a shuffle buffer
          // reads a window of offsets out of order).
          // Reads in offset order take it soon: keep librdkafka's message (the copy into
          // the sample is then made outside this lock). Reads that jump (a shuffle
          // buffer) may hold it long: copy it out, not to pin its fetch response.
          if (!c->reads_in_order) m.Detach(TakeBuffer());
          c->ahead.Put(mo, std::move(m));
        }
      }
      if (progressed) last_progress = Clock::now();
      if (st.ok() && !got && c->started && c->next > off) {
        // The stream went past `off` without it: a gap.
        for (const auto& [b, e] : c->gaps)
          if (off >= b && off < e) st = Missing(c, off, b, e);
        if (st.ok()) st = Internal("kafka: offset {} passed but not recorded", off);
      }
      if (got || !st.ok()) {
        wait_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
        return st;
      }
      // After a read timed out and no message arrived since (on any partition), the broker
      // is still gone: fail the next reads after a short wait, not timeout_ms each (a batch
      // of them would take batch_size times as long to report).
      int wait_ms = stalled_at_.load() == progress_.load() ? 200 : client_->spec().timeout_ms;
      if (Clock::now() - last_progress > std::chrono::milliseconds(wait_ms)) {
        stalled_at_ = progress_.load();
        wait_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
        return IOError("kafka: no message from {} partition {} at offset {} in {} ms{}",
                       client_->Where(), c->win.partition, off,
                       std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count(),
                       client_->Detail());
      }
    }
  }

  // The error a message carries, as a Status; or OK with *restart_at set when the stream
  // should start again there (it began in offsets deleted since).
  Status ErrorOf(Cursor* c, int64_t off, rd_kafka_message_t* m, int64_t* restart_at) const
      REQUIRES(c->mu) {
    rd_kafka_resp_err_t e = m->err;
    if (e == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET || e == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE) {
      // The offset is below the log start (deleted, retention) or above its end.
      int64_t low = -1, high = -1;
      Status w = client_->Watermarks(c->win.partition, &low, &high);
      StopLocked(c);
      if (w.ok() && low > c->win.begin) NoteGap(c, c->win.begin, low);
      if (w.ok() && off < low) return Missing(c, off, c->win.begin, std::min(low, c->win.end));
      if (w.ok() && off < high) {
        // The stream started below the log start; `off` itself is there: start at it.
        *restart_at = std::max(low, off);
        return Status::OK();
      }
      return IOError("kafka: {} partition {}: offset {} is out of range (watermarks {}-{})",
                        client_->Where(), c->win.partition, off, low, high);
    }
    if (e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || e == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION ||
        e == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC) {
      StopLocked(c);
      return NotFound("kafka: {} partition {} no longer exists (deleted?) at offset {}",
                      client_->Where(), c->win.partition, off);
    }
    std::string what = m->payload ? std::string(static_cast<const char*>(m->payload), m->len) : "";
    return IOError("kafka: reading {} partition {} at offset {}: {}{}", client_->Where(),
                   c->win.partition, off, rd_kafka_err2str(e), what.empty() ? "" : ": " + what);
  }

  // Value buffers for held messages, recycled through the samples they are read into.
  std::vector<uint8_t> TakeBuffer() const {
    MutexLock l(&pool_mu_);
    if (pool_.empty()) return {};
    std::vector<uint8_t> b = std::move(pool_.back());
    pool_.pop_back();
    return b;
  }
  void GiveBuffer(std::vector<uint8_t>&& b) const {
    if (b.capacity() == 0) return;
    MutexLock l(&pool_mu_);
    if (pool_.size() < 4096) pool_.push_back(std::move(b));
  }

  Status Fill(const Cursor* c, int64_t off, Held* h, Sample* out) const {
    const KafkaSpec& s = client_->spec();
    const int32_t partition = c->win.partition;
    // Key and location as the cursor's prefixes and the offset: no formatting per message
    // (fmt was a tenth of a 1 KB message's cost), the strings' capacity reused.
    char digits[24];
    auto [end, ec] = std::to_chars(digits, digits + sizeof digits, off);
    (void)ec;
    out->key.assign(c->key_prefix).append(digits, end);
    out->location.assign(c->location_prefix).append(digits, end);
    const uint8_t* v = h->payload();
    size_t len = h->len();
    auto put = [&](const std::string& name, const void* data, size_t n) {
      Field* f = out->AddField(name);
      f->data.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + n);
    };
    if (s.value == KafkaSpec::kRaw && h->copied) {
      out->AddField(s.field)->data.swap(h->value);  // h->value: the field's old buffer
    } else if (s.value == KafkaSpec::kRaw) {
      put(s.field, v, len);
    } else if (s.value == KafkaSpec::kStoker) {
      STOKER_RETURN_IF_ERROR(DecodeStokerSample(
          v, len, fmt::format("kafka: {} partition {} offset {}", client_->Where(), partition, off),
          out));
    } else {
      nlohmann::json j = nlohmann::json::parse(v, v + len, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) {
        return Corrupt("kafka: {} partition {} offset {}: the value is not a JSON object",
                       client_->Where(), partition, off);
      }
      for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& name = it.key();
        const auto& x = it.value();
        if (x.is_null()) continue;
        if (x.is_string()) {
          const std::string& str = x.get_ref<const std::string&>();
          if (s.base64.count(name)) {
            Field* f = out->AddField(name);
            if (!DecodeBase64(str, &f->data)) {
              return Corrupt("kafka: {} partition {} offset {}: member '{}' is not base64",
                             client_->Where(), partition, off, name);
            }
          } else {
            put(name, str.data(), str.size());
          }
        } else {
          std::string text = x.dump();
          put(name, text.data(), text.size());
        }
        if (name == "label" && x.is_number_integer()) out->label = x.get<int64_t>();
      }
    }
    if (s.meta.count("key")) {
      if (h->m && h->m->key) put("kafka.key", h->m->key, h->m->key_len);
      if (!h->m && h->has_key) put("kafka.key", h->key.data(), h->key.size());
    }
    if (s.meta.count("timestamp")) {
      rd_kafka_timestamp_type_t tt;
      std::string t = std::to_string(h->m ? rd_kafka_message_timestamp(h->m, &tt) : h->timestamp);
      put("kafka.timestamp", t.data(), t.size());
    }
    if (s.meta.count("offset")) {
      std::string t = std::to_string(off);
      put("kafka.offset", t.data(), t.size());
    }
    if (s.meta.count("partition")) {
      std::string t = std::to_string(partition);
      put("kafka.partition", t.data(), t.size());
    }
    return Status::OK();
  }

  std::unique_ptr<Client> client_;
  // The shard each shard's reads are followed by in this pass (HintPass; size(): none).
  std::unique_ptr<std::atomic<size_t>[]> next_shard_;
  mutable std::atomic<size_t> side_by_side_{1};  // partitions read at once (HintPass)
  // group=: this reader commits (rank 0), a commit is due (a window's end), when the next
  // is due (Clock ticks), one in progress
  mutable std::atomic<bool> commit_progress_{false}, commit_due_{false}, commit_busy_{false};
  mutable std::atomic<int64_t> next_commit_{0};
  static constexpr size_t kInterleaveBlock = 64, kInterleaveCycle = 8;
  std::vector<KafkaPartitionWindow> windows_;
  std::vector<ShardInfo> shards_;
  std::vector<std::unique_ptr<Cursor>> cursors_;
  uint64_t size_ = 0;
  mutable Mutex pool_mu_;
  mutable std::vector<std::vector<uint8_t>> pool_ GUARDED_BY(pool_mu_);
  mutable std::atomic<uint64_t> messages_{0}, bytes_{0}, seeks_{0}, missing_{0};
  mutable std::atomic<int64_t> wait_ns_{0};
  mutable std::atomic<int64_t> held_now_{0}, held_peak_{0};  // held messages, all partitions
  // Messages consumed (any partition), and its value when a read last timed out (-1: never).
  mutable std::atomic<int64_t> progress_{0}, stalled_at_{-1};
};

}  // namespace

Result<std::vector<KafkaPartitionWindow>> ResolveKafkaWindow(const KafkaSpec& spec) {
  STOKER_ASSIGN_OR_RETURN(auto client, Client::Open(spec));
  return Resolve(client.get());
}

Result<std::unique_ptr<Dataset>> OpenKafkaDataset(const std::string& spec,
                                                  const DatasetOptions&) {
  STOKER_ASSIGN_OR_RETURN(KafkaSpec s, ParseKafkaSpec(spec));
  STOKER_ASSIGN_OR_RETURN(auto client, Client::Open(s));
  STOKER_ASSIGN_OR_RETURN(auto windows, Resolve(client.get()));
  return std::unique_ptr<Dataset>(new KafkaDataset(std::move(client), std::move(windows)));
}

const std::vector<KafkaPartitionWindow>* KafkaWindowsOf(const Dataset& ds) {
  auto* k = dynamic_cast<const KafkaDataset*>(&ds);
  return k ? &k->windows() : nullptr;
}

bool KafkaAvailable() { return true; }

#else  // !STOKER_HAVE_RDKAFKA

namespace {
const MissingLibrary kNoRdkafka{"kafka", "librdkafka", "install librdkafka-dev and reconfigure"};
}

Result<std::vector<KafkaPartitionWindow>> ResolveKafkaWindow(const KafkaSpec& spec) {
  return FormatUnavailable(kNoRdkafka, spec.topic);
}
Result<std::unique_ptr<Dataset>> OpenKafkaDataset(const std::string& spec, const DatasetOptions&) {
  return FormatUnavailable(kNoRdkafka, spec);
}
const std::vector<KafkaPartitionWindow>* KafkaWindowsOf(const Dataset&) { return nullptr; }
bool KafkaAvailable() { return false; }

#endif

void RegisterKafkaFormat() {
  RegisterDatasetFormat({"kafka", {}, OpenKafkaDataset,
                         "Kafka topic window: kafka://HOST:PORT/TOPIC[?start=earliest|latest|N|"
                         "ts:T][&end=...][&count=N][&partitions=..][&value=raw|json|stoker][&field=F]"});
  RegisterKafkaWriter();
}

}  // namespace stoker
