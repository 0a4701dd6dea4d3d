#!/usr/bin/env bash
# Builds every libFuzzer target (fuzz/*_fuzz.cc, src/**/*_fuzz.cc) with clang, ASan and UBSan
# into build-fuzz/, and runs each for SECONDS (default 30) from its seed corpus
# (tests/data/fuzz/<target>/ when there is one), keeping what it finds under
# build-fuzz/corpus/<target>/. A crash stops the script with the reproducer's path.
#   scripts/fuzz.sh [SECONDS] [TARGET ...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_EACH="${1:-30}"; shift || true
JOBS="${STOKER_JOBS:-$(nproc)}"
B="$ROOT/build-fuzz"
if [ ! -f "$B/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSTOKER_BUILD_FUZZ=ON -DSTOKER_BUILD_TESTS=OFF >/dev/null
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$ROOT"/fuzz/*_fuzz.cc $(find "$ROOT/src" -name '*_fuzz.cc'); do
    targets+=("$(basename "$f" .cc)")
  done
fi
cmake --build "$B" -j "$JOBS" --target "${targets[@]}"
for t in "${targets[@]}"; do
  corpus="$B/corpus/$t"; mkdir -p "$corpus"
  seeds=(); [ -d "$ROOT/tests/data/fuzz/$t" ] && seeds=("$ROOT/tests/data/fuzz/$t")
  echo "== $t (${SECONDS_EACH} s)"
  (cd "$B" && ASAN_OPTIONS=detect_leaks=1 "./$t" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 \
     -print_final_stats=1 "$corpus" "${seeds[@]}" 2>&1 | grep -E "^#[0-9]+.*DONE|stat::number_of_executed_units|ERROR|SUMMARY" || true)
  if ls "$B"/crash-* "$B"/leak-* "$B"/timeout-* >/dev/null 2>&1; then
    echo "fuzz: $t found a failing input: $(ls "$B"/crash-* "$B"/leak-* "$B"/timeout-* 2>/dev/null | head -1)" >&2
    exit 1
  fi
done
echo "fuzz: all targets ran clean"
