#!/usr/bin/env bash
# S3-compatible object store on 127.0.0.1 for the s3:// Env tests: S3Proxy (Maven Central
# org.gaul:s3proxy, filesystem backend, checks SigV4 strictly: header and payload signatures,
# clock skew) with toxiproxy (Go module proxy) in front of it as the fault layer (latency,
# bandwidth caps, resets, stalls through its HTTP API).
#   scripts/servers/s3.sh install|start|stop
# start prints:
#   STOKER_TEST_S3_ENDPOINT        http://127.0.0.1:PORT  (S3Proxy, direct)
#   STOKER_TEST_S3_PROXY_ENDPOINT  http://127.0.0.1:PORT  (the same server through toxiproxy)
#   STOKER_TEST_TOXIPROXY_API      http://127.0.0.1:PORT  (toxiproxy's API; proxy name "s3")
#   STOKER_TEST_S3_KEY / STOKER_TEST_S3_SECRET / STOKER_TEST_S3_BUCKET / STOKER_TEST_S3_REGION
set -euo pipefail
S3PROXY_VERSION=2.6.0          # Java 11+; the filesystem-nio2 backend
TOXIPROXY_VERSION=v2.5.0
CACHE="${STOKER_SERVERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stoker/servers}"
STATE="${STOKER_SERVERS_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.servers}/s3"
JAR="$CACHE/s3proxy/s3proxy-$S3PROXY_VERSION-jar-with-dependencies.jar"
TOXI="$CACHE/bin/toxiproxy-server"
KEY=stoker-test-key
SECRET=stoker-test-secret
BUCKET=stoker-test

free_port() {
  python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'
}

# poll PID SECONDS_MAX LOG CMD...: until CMD succeeds; fails early when PID died, or after
# SECONDS_MAX, showing the log's tail
poll() {
  local pid=$1 deadline=$((SECONDS + $2)) log=$3; shift 3
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null || ((SECONDS > deadline)); then
      echo "s3.sh: '$*' did not succeed in time; log tail:" >&2
      tail -n 30 "$log" >&2 || true
      return 1
    fi
    sleep 0.2
  done
}

install() {
  command -v java >/dev/null || { echo "s3.sh: java not found (install default-jre-headless)" >&2; exit 1; }
  if [[ ! -f "$JAR" ]]; then
    mkdir -p "$CACHE/s3proxy"
    echo "s3.sh: fetching S3Proxy $S3PROXY_VERSION" >&2
    mvn -q dependency:copy -Dartifact="org.gaul:s3proxy:$S3PROXY_VERSION:jar:jar-with-dependencies" \
      -DoutputDirectory="$CACHE/s3proxy" >&2
  fi
  if [[ ! -x "$TOXI" ]]; then
    command -v go >/dev/null || { echo "s3.sh: go not found (needed to build toxiproxy)" >&2; exit 1; }
    echo "s3.sh: building toxiproxy $TOXIPROXY_VERSION" >&2
    mkdir -p "$CACHE/bin"
    (cd /tmp && GOBIN="$CACHE/bin" go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" >&2)
    mv "$CACHE/bin/server" "$TOXI"
  fi
}

start() {
  stop >/dev/null 2>&1 || true
  mkdir -p "$STATE/data/$BUCKET"
  local p_s3 p_proxy p_api
  p_s3=$(free_port); p_api=$(free_port); p_proxy=$(free_port)
  cat >"$STATE/s3proxy.conf" <<EOF
s3proxy.endpoint=http://127.0.0.1:$p_s3
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity=$KEY
s3proxy.credential=$SECRET
jclouds.provider=filesystem-nio2
jclouds.identity=$KEY
jclouds.credential=$SECRET
jclouds.filesystem.basedir=$STATE/data
EOF
  # Small heap, quick start: the CI machine has 2 cores.
  nohup java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -jar "$JAR" \
    --properties "$STATE/s3proxy.conf" >"$STATE/s3proxy.log" 2>&1 &
  echo $! >"$STATE/s3proxy.pid"
  # Any HTTP answer (403 for an unsigned request) means it is up.
  poll "$(cat "$STATE/s3proxy.pid")" 60 "$STATE/s3proxy.log" curl -s -o /dev/null "http://127.0.0.1:$p_s3/"
  nohup "$TOXI" -host 127.0.0.1 -port "$p_api" >"$STATE/toxiproxy.log" 2>&1 &
  echo $! >"$STATE/toxiproxy.pid"
  poll "$(cat "$STATE/toxiproxy.pid")" 30 "$STATE/toxiproxy.log" curl -sf "http://127.0.0.1:$p_api/version"
  curl -sf -X POST "http://127.0.0.1:$p_api/proxies" \
    -d "{\"name\":\"s3\",\"listen\":\"127.0.0.1:$p_proxy\",\"upstream\":\"127.0.0.1:$p_s3\"}" >/dev/null
  echo "export STOKER_TEST_S3_ENDPOINT=http://127.0.0.1:$p_s3"
  echo "export STOKER_TEST_S3_PROXY_ENDPOINT=http://127.0.0.1:$p_proxy"
  echo "export STOKER_TEST_TOXIPROXY_API=http://127.0.0.1:$p_api"
  echo "export STOKER_TEST_S3_KEY=$KEY"
  echo "export STOKER_TEST_S3_SECRET=$SECRET"
  echo "export STOKER_TEST_S3_BUCKET=$BUCKET"
  echo "export STOKER_TEST_S3_REGION=us-east-1"
}

stop() {
  for name in toxiproxy s3proxy; do
    local pidf="$STATE/$name.pid"
    if [[ -f "$pidf" ]]; then
      local pid; pid=$(cat "$pidf")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$pidf"
    fi
  done
  rm -rf "$STATE/data"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
