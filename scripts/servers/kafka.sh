#!/usr/bin/env bash
# Kafka broker on 127.0.0.1 for the kafka:// source tests: Apache Kafka 4.1 (Maven Central
# org.apache.kafka:kafka_2.13 and its runtime jars, scripts/servers/kafka/pom.xml), one node in
# KRaft combined mode (broker + controller in one JVM, static quorum), plus the Python client
# the tests produce and check with (confluent-kafka, PyPI, into the venv).
#   scripts/servers/kafka.sh install|start|stop
# start prints:
#   STOKER_TEST_KAFKA_BOOTSTRAP    127.0.0.1:PORT  (PLAINTEXT listener; topics are not
#                                  auto-created: a test creates what it reads)
set -euo pipefail
KAFKA_VERSION=4.1.1            # Java 17+ (broker); pom.xml pins the same version
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${STOKER_SERVERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stoker/servers}"
STATE="${STOKER_SERVERS_DIR:-$ROOT/.servers}/kafka"
LIB="$CACHE/kafka-$KAFKA_VERSION/lib"
PY="$ROOT/.venv/bin/python"
LOG4J="$HERE/kafka/log4j2.properties"

free_port() {
  python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'
}

# poll PID DEADLINE LOG CMD...: until CMD succeeds; fails early when PID died, or once
# $SECONDS passes DEADLINE, showing the log's tail
poll() {
  local pid=$1 deadline=$2 log=$3; shift 3
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null || ((SECONDS > deadline)); then
      echo "kafka.sh: '$*' did not succeed in time; log tail:" >&2
      tail -n 30 "$log" >&2 || true
      return 1
    fi
    sleep 0.2
  done
}

tcp_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The broker answers a metadata request and lists itself (registered and unfenced).
metadata_ok() {
  "$PY" -c '
import sys
from confluent_kafka.admin import AdminClient
md = AdminClient({"bootstrap.servers": sys.argv[1], "log_level": 0}).list_topics(timeout=5)
sys.exit(0 if md.brokers else 1)' "$1"
}

install() {
  command -v java >/dev/null || { echo "kafka.sh: java not found (install default-jre-headless)" >&2; exit 1; }
  local jv; jv=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
  if ((${jv%%.*} < 17)); then echo "kafka.sh: Kafka $KAFKA_VERSION needs Java 17+, found $jv" >&2; exit 1; fi
  if [[ ! -f "$LIB/kafka_2.13-$KAFKA_VERSION.jar" ]]; then
    command -v mvn >/dev/null || { echo "kafka.sh: mvn not found (install maven)" >&2; exit 1; }
    echo "kafka.sh: fetching Kafka $KAFKA_VERSION jars" >&2
    # Into a scratch folder first: an interrupted fetch never looks complete.
    rm -rf "$LIB.partial"
    mkdir -p "$LIB.partial"
    mvn -B -q -f "$HERE/kafka/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$LIB.partial" >&2
    rm -rf "$LIB"
    mv "$LIB.partial" "$LIB"
  fi
  [[ -x "$PY" ]] || { echo "kafka.sh: $PY not found (run scripts/install-deps.sh)" >&2; exit 1; }
  if ! "$PY" -c 'import confluent_kafka' 2>/dev/null; then
    echo "kafka.sh: installing PyPI package: confluent-kafka" >&2
    "$ROOT/.venv/bin/pip" install -q confluent-kafka >&2
  fi
}

start() {
  stop >/dev/null 2>&1 || true
  [[ -f "$LIB/kafka_2.13-$KAFKA_VERSION.jar" ]] && "$PY" -c 'import confluent_kafka' 2>/dev/null \
    || { echo "kafka.sh: jars or confluent-kafka missing, run 'kafka.sh install'" >&2; exit 1; }
  mkdir -p "$STATE/data"
  local p_broker p_ctl
  p_broker=$(free_port); p_ctl=$(free_port)
  # One node, static quorum (controller.quorum.voters, so `format` without --standalone),
  # every internal topic with replication 1 and one partition (__consumer_offsets with 1, not
  # 50: fewer files, the same behaviour on one node); a topic a test did not create is an
  # error, not an empty auto-created one.
  cat >"$STATE/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$p_ctl
listeners=PLAINTEXT://127.0.0.1:$p_broker,CONTROLLER://127.0.0.1:$p_ctl
advertised.listeners=PLAINTEXT://127.0.0.1:$p_broker
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$STATE/data
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
EOF
  # Small heap, C1 only, serial GC: the CI machine has 2 cores (the same flags for the
  # storage tool, a JVM of its own).
  local jvm=(-Xms256m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1
             -Djava.awt.headless=true "-Dlog4j2.configurationFile=$LOG4J")
  # The cluster id as `kafka.tools.StorageTool random-uuid` makes it (16 random bytes, URL-safe
  # base64 without padding, not starting with '-'), without a JVM start of its own (~1 s here).
  local id
  id=$(python3 -c 'import base64,os
while True:
    s = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
    if not s.startswith("-"): print(s); break')
  java "${jvm[@]}" -cp "$LIB/*" kafka.tools.StorageTool format -t "$id" \
    -c "$STATE/server.properties" >"$STATE/format.log" 2>&1 \
    || { echo "kafka.sh: storage format failed:" >&2; cat "$STATE/format.log" >&2; return 1; }
  nohup java "${jvm[@]}" -cp "$LIB/*" kafka.Kafka "$STATE/server.properties" \
    >"$STATE/kafka.log" 2>&1 &
  echo $! >"$STATE/kafka.pid"
  # The listener first (cheap), then a metadata request that lists the broker.
  local pid deadline=$((SECONDS + 90))
  pid=$(cat "$STATE/kafka.pid")
  if ! poll "$pid" "$deadline" "$STATE/kafka.log" tcp_open "$p_broker" ||
     ! poll "$pid" "$deadline" "$STATE/kafka.log" metadata_ok "127.0.0.1:$p_broker"; then
    stop >/dev/null 2>&1 || true
    return 1
  fi
  echo "export STOKER_TEST_KAFKA_BOOTSTRAP=127.0.0.1:$p_broker"
}

stop() {
  local pidf="$STATE/kafka.pid"
  if [[ -f "$pidf" ]]; then
    local pid; pid=$(cat "$pidf")
    kill "$pid" 2>/dev/null || true
    # A clean shutdown of a single node takes a few seconds; its data is thrown away anyway.
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidf"
  fi
  rm -rf "$STATE/data"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
