#!/usr/bin/env bash
# Pipeline vs peers, one command:
#
#   bench/pipeline/run.sh [bench.py options, e.g. --repeats 5 | --only stoker,pytorch]
#
# 1. builds stoker (Release) in build-bench/ if needed, and decode_limit.c;
# 2. makes the peers' venvs (.venv-peers: DALI, tensorflow-cpu, SPDL; .venv-ffcv: FFCV)
#    if they are not there;
# 3. generates the dataset once: `stoker gen images --out DIR --count 2000 --seed 1`, or
#    bench/pipeline/gen_images.py with the same flags when the binary lacks `gen images`;
# 4. warms the page cache and runs bench.py: stoker (--threads auto, and the sweep
#    1,2,3,4 under /usr/bin/time -v), PyTorch DataLoader, torchvision's tensor path,
#    DALI CPU, tf.data, SPDL, FFCV and the TurboJPEG decode limit, interleaved (rotated
#    each repeat), median of 3 repeats (--stoker-baseline BIN adds a second stoker
#    binary, e.g. one built from main, for a before/after); prints the table and the
#    ratios, writes bench/pipeline/results.json and results.html.
# Environment: STOKER_BENCH_BIN (prebuilt stoker: skip the build), STOKER_BENCH_BUILD (build dir), STOKER_BENCH_DATA (dataset dir),
# STOKER_BENCH_COUNT (images, default 2000), STOKER_BENCH_NO_INSTALL=1 (never pip install).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="${STOKER_BENCH_BUILD:-$ROOT/build-bench}"
COUNT="${STOKER_BENCH_COUNT:-2000}"
DATA="${STOKER_BENCH_DATA:-$ROOT/.cache/bench/images-$COUNT-seed1}"
NPROC="$(nproc)"
say() { echo "[run.sh] $*"; }

# 1. Build (STOKER_BENCH_BIN=path uses a prebuilt binary instead).
STOKER="${STOKER_BENCH_BIN:-$BUILD/stoker}"
if [ -n "${STOKER_BENCH_BIN:-}" ]; then
  say "using prebuilt $STOKER"
elif [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTOKER_BUILD_TESTS=OFF \
    > "$BUILD.cmake.log" 2>&1 || { say "cmake failed, see $BUILD.cmake.log"; }
fi
if [ -n "${STOKER_BENCH_BIN:-}" ]; then :
elif [ -f "$BUILD/build.ninja" ] && ninja -C "$BUILD" -j"$NPROC" stoker > "$BUILD.ninja.log" 2>&1; then
  say "stoker built: $STOKER"
else
  say "WARNING: stoker did not build (see $BUILD.ninja.log); stoker is reported as missing"
  STOKER=""
fi
mkdir -p "$BUILD"
DECODE_LIMIT="$BUILD/decode_limit"
if [ ! -x "$DECODE_LIMIT" ] || [ "$HERE/decode_limit.c" -nt "$DECODE_LIMIT" ]; then
  cc -O2 -Wall -pthread "$HERE/decode_limit.c" -o "$DECODE_LIMIT" -lturbojpeg \
    || { say "WARNING: decode_limit.c did not build"; DECODE_LIMIT=""; }
fi

# 2. Peers.
if { [ ! -x "$ROOT/.venv-peers/bin/python" ] || [ ! -x "$ROOT/.venv-ffcv/bin/python" ]; } \
   && [ "${STOKER_BENCH_NO_INSTALL:-0}" != 1 ]; then
  bash "$HERE/install-peers.sh" || say "WARNING: some peers did not install (reported as missing)"
fi
TORCH_PY="$ROOT/.venv/bin/python"
[ -x "$TORCH_PY" ] || TORCH_PY=/usr/bin/python3

# 3. Dataset (regenerated when `stoker gen images` becomes available).
GEN="gen_images.py"
if [ -n "$STOKER" ] && "$STOKER" gen images --help 2>/dev/null | grep -q "^Usage:.* gen images"; then GEN="stoker gen images"; fi
MARK="$DATA.complete"
if [ "$GEN" = "stoker gen images" ]; then
  # Idempotent (a manifest in DATA); a dataset from another generator version is remade.
  if ! "$STOKER" gen images --out "$DATA" --count "$COUNT" --seed 1 2>/dev/null; then
    say "regenerating $DATA ($COUNT images, stoker gen images)"
    rm -rf "$DATA"
    "$STOKER" gen images --out "$DATA" --count "$COUNT" --seed 1
  fi
  echo "$GEN" > "$MARK"
elif [ ! -f "$MARK" ] || [ "$(cat "$MARK")" != "$GEN" ]; then
  rm -rf "$DATA" "$MARK"
  mkdir -p "$(dirname "$DATA")"
  say "generating $COUNT images with $GEN into $DATA"
  "$TORCH_PY" "$HERE/gen_images.py" --out "$DATA" --count "$COUNT" --seed 1
  echo "$GEN" > "$MARK"
fi

# 4. Warm the page cache and run.
find "$DATA" -type f -print0 | xargs -0 cat > /dev/null
exec /usr/bin/python3 "$HERE/bench.py" --data "$DATA" --stoker "$STOKER" \
  --decode-limit "$DECODE_LIMIT" --torch-python "$TORCH_PY" \
  --peers-python "$ROOT/.venv-peers/bin/python" --ffcv-python "$ROOT/.venv-ffcv/bin/python" \
  --threads "$NPROC" \
  --dataset-note "made by $GEN --count $COUNT --seed 1" \
  --command "bench/pipeline/run.sh${*:+ $*}" "$@"
