#!/usr/bin/env bash
# Doctor benchmark: stoker doctor vs HTA's temporal breakdown on the same large trace.
#   bench/doctor/run_bench.sh [STOKER_BINARY] [SIZE_MB ...]
# Builds traces of SIZE_MB (default 250 and 1024) by repeating the steps of the real 16-rank
# HTA trace in tests/traces/real (bench/doctor/make_large_trace.py), then times
#   stoker doctor <dir> --json ...   (wall, user CPU, peak RSS via /usr/bin/time)
#   python3 bench/doctor/hta_breakdown.py <dir>   (TraceAnalysis + get_temporal_breakdown)
# Set SKIP_HTA_ABOVE_MB to skip HTA on the largest traces (it needs ~5 GB RSS per GB).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
STOKER="${1:-$ROOT/build/stoker}"; shift || true
SIZES=("${@:-250 1024}")
PY="${PY:-$ROOT/.venv/bin/python}"
SRC="${SRC:-$ROOT/tests/traces/real/hta-pageable-memcpy-rank0.json.gz}"
WORK="${WORK:-/tmp/stoker-doctor-bench}"
SKIP_HTA_ABOVE_MB="${SKIP_HTA_ABOVE_MB:-100000}"
mkdir -p "$WORK"
for mb in ${SIZES[@]}; do
  dir="$WORK/t$mb"
  mkdir -p "$dir"
  [ -f "$dir/rank0.json" ] || "$PY" "$ROOT/bench/doctor/make_large_trace.py" "$SRC" "$dir/rank0.json" --size-mb "$mb"
  size=$(stat -c %s "$dir/rank0.json")
  cat "$dir/rank0.json" > /dev/null  # warm the page cache for both tools
  /usr/bin/time -f "%e %U %M" -o "$WORK/stoker.time" "$STOKER" doctor -q "$dir" --json "$WORK/stoker-$mb.json"
  read s_wall s_user s_rss < "$WORK/stoker.time"
  verdict=$("$PY" -c "import json,sys; d=json.load(open('$WORK/stoker-$mb.json')); b=d['breakdown']; print(d['verdict']['primary'], round(100*b['idle_frac'],1), round(100*b['compute_frac'],1))")
  echo "trace ${mb} MB ($((size/1000000)) MB on disk): stoker doctor wall ${s_wall} s, user ${s_user} s, peak RSS $((s_rss/1024)) MB; verdict/idle%/compute%: $verdict"
  if [ "$mb" -le "$SKIP_HTA_ABOVE_MB" ]; then
    /usr/bin/time -f "%e %U %M" -o "$WORK/hta.time" "$PY" "$ROOT/bench/doctor/hta_breakdown.py" "$dir" > "$WORK/hta-$mb.json"
    read h_wall h_user h_rss < "$WORK/hta.time"
    echo "  HTA temporal breakdown: wall ${h_wall} s, user ${h_user} s, peak RSS $((h_rss/1024)) MB; $(cat "$WORK/hta-$mb.json")"
    "$PY" -c "print('  ratio (HTA wall / stoker wall): %.1fx; user CPU ratio %.1fx' % ($h_wall / max($s_wall, 1e-3), $h_user / max($s_user, 1e-3)))"
  fi
done
