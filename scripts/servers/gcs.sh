#!/usr/bin/env bash
# GCS emulator on 127.0.0.1 for the gs:// Env tests: fake-gcs-server (built from the Go module
# proxy), which serves GCS's JSON API (objects, listing with prefixes and delimiters, simple,
# multipart and resumable uploads, ranged media downloads) as google-cloud-cpp inside Arrow's
# GcsFileSystem speaks it. In-memory backend, plain http, no authentication.
#   scripts/servers/gcs.sh install|start|stop
# start prints:
#   STOKER_TEST_GCS_HOST      http://127.0.0.1:PORT  (for STORAGE_EMULATOR_HOST)
#   STOKER_TEST_GCS_BUCKET    a bucket created empty at start
set -euo pipefail
FAKE_GCS_VERSION=v1.56.1
CACHE="${STOKER_SERVERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stoker/servers}"
STATE="${STOKER_SERVERS_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.servers}/gcs"
BIN="$CACHE/bin/fake-gcs-server-$FAKE_GCS_VERSION"
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
      echo "gcs.sh: '$*' did not succeed in time; log tail:" >&2
      tail -n 30 "$log" >&2 || true
      return 1
    fi
    sleep 0.2
  done
}

install() {
  if [[ ! -x "$BIN" ]]; then
    command -v go >/dev/null || { echo "gcs.sh: go not found (needed to build fake-gcs-server)" >&2; exit 1; }
    echo "gcs.sh: building fake-gcs-server $FAKE_GCS_VERSION" >&2
    # Into a scratch folder first: an interrupted build never looks complete. No symbol
    # tables (-s -w): a smaller binary and a quicker link; the compile flags stay the default
    # ones, so the standard library compiled here is reused from Go's build cache by s3.sh's
    # toxiproxy build (and the other way round).
    local tmp="$CACHE/bin/.fake-gcs-server.partial"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    (cd /tmp && GOBIN="$tmp" go install -ldflags="-s -w" \
      "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION" >&2)
    mv "$tmp/fake-gcs-server" "$BIN"
    rm -rf "$tmp"
  fi
}

start() {
  stop >/dev/null 2>&1 || true
  [[ -x "$BIN" ]] || { echo "gcs.sh: $BIN missing, run 'gcs.sh install'" >&2; exit 1; }
  mkdir -p "$STATE"
  local port url
  port=$(free_port)
  url="http://127.0.0.1:$port"
  # -external-url / -public-host: the resumable-upload session URLs and media links the server
  # hands out point back at this address.
  nohup "$BIN" -backend memory -scheme http -host 127.0.0.1 -port "$port" \
    -external-url "$url" -public-host "127.0.0.1:$port" -log-level warn \
    >"$STATE/fake-gcs-server.log" 2>&1 &
  echo $! >"$STATE/fake-gcs-server.pid"
  poll "$(cat "$STATE/fake-gcs-server.pid")" 30 "$STATE/fake-gcs-server.log" \
    curl -sf "$url/storage/v1/b" || { stop >/dev/null 2>&1 || true; return 1; }
  curl -sf -X POST -H 'Content-Type: application/json' -d "{\"name\":\"$BUCKET\"}" \
    "$url/storage/v1/b?project=stoker-test" >/dev/null \
    || { echo "gcs.sh: creating bucket $BUCKET failed" >&2; stop >/dev/null 2>&1 || true; return 1; }
  echo "export STOKER_TEST_GCS_HOST=$url"
  echo "export STOKER_TEST_GCS_BUCKET=$BUCKET"
}

stop() {
  local pidf="$STATE/fake-gcs-server.pid"
  if [[ -f "$pidf" ]]; then
    local pid; pid=$(cat "$pidf")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidf"
  fi
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
