// `stoker convert SRC kafka://HOST:PORT/TOPIC[?value=stoker|raw&field=F&partition=N]`: one
// message per sample through librdkafka's idempotent producer (see kafka_dataset.h).
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/kafka_dataset.h"
#include "formats/unavailable.h"
#include "formats/writer.h"

#ifdef STOKER_HAVE_RDKAFKA
#include <librdkafka/rdkafka.h>
#endif

namespace stoker {

namespace {

struct KafkaWriterSpec {
  std::string bootstrap, topic;
  KafkaSpec::Value value = KafkaSpec::kStoker;
  std::string field;           // value=raw: the field sent ("" = the sample's first field)
  int32_t partition = -1;      // -1: the key's partition
  int timeout_ms = 60000;      // Close() waits this long for the last delivery reports
  std::map<std::string, std::string> config;
};

Result<KafkaWriterSpec> ParseWriterSpec(const std::string& path) {
  // The reader's parser knows the URL forms, topic rule and bootstrap rule; writer options
  // are taken off first so that it does not refuse them.
  std::string body = path, query;
  if (auto q = body.find('?'); q != std::string::npos) {
    query = body.substr(q + 1);
    body = body.substr(0, q);
  }
  KafkaWriterSpec w;
  std::string rest;
  bool value_given = false, field_given = false;
  for (size_t b = 0; b <= query.size();) {
    size_t e = query.find('&', b);
    if (e == std::string::npos) e = query.size();
    std::string item = query.substr(b, e - b);
    b = e + 1;
    if (item.empty()) continue;
    auto eq = item.find('=');
    std::string k = item.substr(0, eq), v = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (k == "partition") {
      char* end = nullptr;
      long p = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || p < 0 || p > INT32_MAX)
        return InvalidArgument("kafka: partition='{}' is not a partition number", v);
      w.partition = static_cast<int32_t>(p);
    } else if (k == "value" || k == "field" || k == "bootstrap" || k.rfind("rdkafka.", 0) == 0) {
      value_given |= k == "value";
      field_given |= k == "field";
      rest += (rest.empty() ? "" : "&") + item;
    } else if (k == "timeout_ms") {
      char* end = nullptr;
      long t = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || t < 100 || t > 3'600'000)
        return InvalidArgument("kafka: timeout_ms={} is not in [100, 3600000]", v);
      w.timeout_ms = static_cast<int>(t);
    } else {
      return InvalidArgument(
          "kafka: '{}' is not an option of a Kafka destination (value=stoker|raw, field=, "
          "partition=, timeout_ms=, bootstrap=, rdkafka.*)",
          k);
    }
  }
  STOKER_ASSIGN_OR_RETURN(KafkaSpec s, ParseKafkaSpec(body + (rest.empty() ? "" : "?" + rest)));
  if (s.value == KafkaSpec::kJson)
    return InvalidArgument("kafka: a destination writes value=stoker (default) or value=raw, "
                           "not json");
  w.bootstrap = s.bootstrap;
  w.topic = s.topic;
  w.value = value_given ? s.value : KafkaSpec::kStoker;
  w.field = field_given ? s.field : "";
  w.config = s.config;
  return w;
}

#ifdef STOKER_HAVE_RDKAFKA

class KafkaWriter final : public DatasetWriter {
 public:
  static Result<std::unique_ptr<DatasetWriter>> Open(const std::string& path) {
    STOKER_ASSIGN_OR_RETURN(KafkaWriterSpec s, ParseWriterSpec(path));
    auto w = std::unique_ptr<KafkaWriter>(new KafkaWriter);
    w->spec_ = s;
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    std::map<std::string, std::string> props = {
        {"bootstrap.servers", s.bootstrap},
        {"enable.idempotence", "true"},  // acks=all, no duplicates or reordering on retries
        {"linger.ms", "5"},
        {"message.timeout.ms", std::to_string(s.timeout_ms)},
        {"client.id", "stoker-convert"},
    };
    for (const auto& [k, v] : s.config) props[k] = v;
    for (const auto& [k, v] : props) {
      if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        return InvalidArgument("kafka: librdkafka property {}={}: {}", k, v, err);
      }
    }
    rd_kafka_conf_set_opaque(conf, w.get());
    rd_kafka_conf_set_dr_msg_cb(conf, &KafkaWriter::Delivered);
    // The library never prints (DESIGN.md): librdkafka's log lines are dropped; what fails
    // reaches the caller through delivery reports, metadata errors and Close's timeout.
    rd_kafka_conf_set_log_cb(conf, [](const rd_kafka_t*, int, const char*, const char*) {});
    w->rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!w->rk_) return InvalidArgument("kafka: cannot create a producer for {}: {}", s.bootstrap, err);
    // The topic must exist (no auto-creation by a converter): its partition count is read now,
    // so that partition=N out of range and a missing topic fail before any sample is read.
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_topic_t* rkt = rd_kafka_topic_new(w->rk_, s.topic.c_str(), nullptr);
    rd_kafka_resp_err_t e = rd_kafka_metadata(w->rk_, 0, rkt, &md, 10000);
    rd_kafka_topic_destroy(rkt);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
      return IOError("kafka: topic '{}' on {}: metadata: {}", s.topic, s.bootstrap, rd_kafka_err2str(e));
    int parts = md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR
                    ? md->topics[0].partition_cnt
                    : -1;
    rd_kafka_metadata_destroy(md);
    if (parts <= 0)
      return NotFound("kafka: topic '{}' does not exist on {} (create it first, with the partitions "
                      "the readers should get)",
                      s.topic, s.bootstrap);
    if (s.partition >= parts)
      return InvalidArgument("kafka: partition={} but topic '{}' has {} partitions", s.partition,
                             s.topic, parts);
    return std::unique_ptr<DatasetWriter>(std::move(w));
  }

  ~KafkaWriter() override {
    if (rk_) {
      rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE);  // an unclosed writer sends nothing more
      rd_kafka_flush(rk_, 1000);
      rd_kafka_destroy(rk_);
    }
  }

  Status Write(const Sample& s) override {
    if (closed_) return Internal("kafka: write after close");
    STOKER_RETURN_IF_ERROR(FirstError());
    std::string encoded;
    const void* value;
    size_t len;
    if (spec_.value == KafkaSpec::kStoker) {
      encoded = EncodeStokerSample(s);
      value = encoded.data();
      len = encoded.size();
    } else {
      const Field* f = spec_.field.empty() ? (s.num_fields ? &s.fields[0] : nullptr)
                                           : s.Find(spec_.field);
      if (!f)
        return InvalidArgument("kafka: sample '{}' has no field '{}' to send (value=raw)", s.key,
                               spec_.field.empty() ? "(any)" : spec_.field);
      value = f->data.data();
      len = f->data.size();
    }
    // The sample's key travels as the message key; its index is the opaque, so a failed
    // delivery names the sample.
    auto* opaque = reinterpret_cast<void*>(static_cast<uintptr_t>(written_));
    inflight_[written_] = s.key;
    for (;;) {
      rd_kafka_resp_err_t e = rd_kafka_producev(
          rk_, RD_KAFKA_V_TOPIC(spec_.topic.c_str()),
          RD_KAFKA_V_PARTITION(spec_.partition >= 0 ? spec_.partition : RD_KAFKA_PARTITION_UA),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
          RD_KAFKA_V_VALUE(const_cast<void*>(value), len),
          RD_KAFKA_V_KEY(s.key.data(), s.key.size()), RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
      if (e == RD_KAFKA_RESP_ERR_NO_ERROR) break;
      if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {  // backpressure: wait for deliveries
        rd_kafka_poll(rk_, 100);
        STOKER_RETURN_IF_ERROR(FirstError());
        continue;
      }
      inflight_.erase(written_);
      if (e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE)
        return InvalidArgument(
            "kafka: sample '{}' is {} bytes, more than the producer's message.max.bytes (raise it "
            "with rdkafka.message.max.bytes=N, and the topic's max.message.bytes)",
            s.key, len);
      return IOError("kafka: producing sample '{}' to topic '{}': {}", s.key, spec_.topic,
                     rd_kafka_err2str(e));
    }
    ++written_;
    rd_kafka_poll(rk_, 0);  // serve delivery reports
    return Status::OK();
  }

  Status Close() override {
    if (closed_) return FirstError();
    closed_ = true;
    rd_kafka_resp_err_t e = rd_kafka_flush(rk_, spec_.timeout_ms + 5000);
    STOKER_RETURN_IF_ERROR(FirstError());
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR || rd_kafka_outq_len(rk_) > 0)
      return DeadlineExceeded("kafka: {} of {} messages to topic '{}' on {} were not delivered "
                              "within {} ms",
                              rd_kafka_outq_len(rk_), written_, spec_.topic, spec_.bootstrap,
                              spec_.timeout_ms);
    if (delivered_ != written_)
      return Internal("kafka: {} messages produced, {} delivery reports", written_, delivered_);
    for (const auto& [p, n] : per_partition_) {
      WrittenShard w;
      w.path = fmt::format("kafka://{}/{}#{}", spec_.bootstrap, spec_.topic, p);
      w.samples = n.first;
      w.bytes = n.second;
      shards_.push_back(w);
    }
    return Status::OK();
  }

  const std::vector<WrittenShard>& shards() const override { return shards_; }

 private:
  static void Delivered(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    auto* self = static_cast<KafkaWriter*>(opaque);
    ++self->delivered_;
    auto it = self->inflight_.find(reinterpret_cast<uintptr_t>(m->_private));
    std::string key = it == self->inflight_.end() ? std::string("?") : std::move(it->second);
    if (it != self->inflight_.end()) self->inflight_.erase(it);
    if (m->err) {
      if (self->first_error_.ok())
        self->first_error_ = IOError(
            "kafka: sample '{}' was not delivered to topic '{}' partition {} on {}: {}", key,
            self->spec_.topic, m->partition, self->spec_.bootstrap, rd_kafka_err2str(m->err));
      return;
    }
    auto& pp = self->per_partition_[m->partition];
    pp.first += 1;
    pp.second += m->len;
  }
  Status FirstError() const { return first_error_; }

  KafkaWriterSpec spec_;
  rd_kafka_t* rk_ = nullptr;
  bool closed_ = false;
  uint64_t written_ = 0, delivered_ = 0;
  std::unordered_map<uint64_t, std::string> inflight_;  // undelivered: index -> sample key
  std::map<int32_t, std::pair<uint64_t, uint64_t>> per_partition_;  // samples, bytes
  Status first_error_;
  std::vector<WrittenShard> shards_;
};

Result<std::unique_ptr<DatasetWriter>> OpenKafkaWriter(const std::string& path,
                                                       const WriterOptions&) {
  return KafkaWriter::Open(path);
}

#else  // !STOKER_HAVE_RDKAFKA

Result<std::unique_ptr<DatasetWriter>> OpenKafkaWriter(const std::string& path,
                                                       const WriterOptions&) {
  STOKER_RETURN_IF_ERROR(ParseWriterSpec(path).status());
  return FormatUnavailable({"kafka", "librdkafka", "install librdkafka-dev and reconfigure"}, path);
}

#endif

}  // namespace

void RegisterKafkaWriter() { RegisterDatasetWriter("kafka", OpenKafkaWriter); }

}  // namespace stoker
