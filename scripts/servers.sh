#!/usr/bin/env bash
# The real servers the tests need, on 127.0.0.1 (S3-compatible store, Kafka broker, ...):
#   scripts/servers.sh up     installs what is missing, starts every server in scripts/servers/,
#                             waits until each answers (polled, not slept), and prints the
#                             `export NAME=value` lines the tests read (eval them);
#   scripts/servers.sh down   stops what `up` started.
# Each server is one script scripts/servers/<name>.sh with the verbs install, start, stop;
# `start` runs it in the background under $STOKER_SERVERS_DIR/<name>/ and prints its exports
# on stdout (everything else goes to stderr). Downloads (Maven jars, Go binaries) are cached
# under ${XDG_CACHE_HOME:-~/.cache}/stoker/servers and reused between runs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export STOKER_SERVERS_DIR="${STOKER_SERVERS_DIR:-$ROOT/.servers}"
export STOKER_SERVERS_CACHE="${STOKER_SERVERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stoker/servers}"
mkdir -p "$STOKER_SERVERS_DIR" "$STOKER_SERVERS_CACHE"
verb="${1:-}"
shopt -s nullglob
scripts=("$ROOT"/scripts/servers/*.sh)
case "$verb" in
  up)
    for s in "${scripts[@]}"; do
      name="$(basename "$s" .sh)"
      echo "[servers] $name: install" >&2
      bash "$s" install >&2
      echo "[servers] $name: start" >&2
      bash "$s" start
    done
    echo "export STOKER_SERVERS_UP=1"
    ;;
  down)
    for s in "${scripts[@]}"; do
      bash "$s" stop >&2 || echo "[servers] $(basename "$s" .sh): stop failed" >&2
    done
    ;;
  *) echo "usage: scripts/servers.sh up|down" >&2; exit 2 ;;
esac
