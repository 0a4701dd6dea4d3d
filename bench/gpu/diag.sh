#!/usr/bin/env bash
# Crash diagnosis on the GPU machine, after check.sh found segfaults: a Release+debug-info
# build, the crashing test under gdb when the machine has it, else with a native backtrace
# (segv_backtrace.so via LD_PRELOAD, then addr2line), then the same pipelines outside pytest
# (diag_steps.py). Results in $OUT/diag.txt.
#   run(command="bench/gpu/diag.sh", carry=[".gpu-carry"], timeout_s=400)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/stoker-gpu-diag}"; mkdir -p "$OUT"
LOG="$OUT/diag.txt"; : > "$LOG"
exec > >(tee -a "$LOG") 2>&1
PY=python3; BUILD=$PWD/build-gpu
source bench/gpu/deps.sh
stoker_use_carried_deps "$PWD/.gpu-carry"
export CXXFLAGS="-g1 ${CXXFLAGS:-}"
PYEXE=$(command -v $PY); PYBIND=$($PY -m pybind11 --cmakedir)
[ -x "$BUILD/stoker" ] || {
  timeout 200 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTOKER_CUDA=ON \
    -DSTOKER_CUDA_HEADER_CHECK=OFF -DSTOKER_PARQUET=OFF -DSTOKER_BUILD_PYTHON=ON \
    -DPython3_EXECUTABLE="$PYEXE" -DPython_EXECUTABLE="$PYEXE" -DSTOKER_PYTHON="$PYEXE" \
    -Dpybind11_DIR="$PYBIND" ${PKG_CONFIG:+-DPKG_CONFIG_EXECUTABLE="$PKG_CONFIG"} > "$OUT/cmake.log" 2>&1
  timeout 200 ninja -C "$BUILD" -j"$(nproc)" stoker _stoker > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
}
gcc -shared -fPIC -O1 -o /tmp/segv_backtrace.so bench/gpu/segv_backtrace.c
export PYTHONPATH="$BUILD/python" STOKER_BINARY="$BUILD/stoker" STOKER_BIN="$BUILD/stoker" PYTHONUNBUFFERED=1
resolve() {  # native frames "lib(+0xoff)" -> function and line
  grep -oE '^[^ ]+\(\+0x[0-9a-f]+\)' | while IFS= read -r l; do
    lib=${l%%(*}; off=${l##*(+}; off=${off%)}
    printf '  %s+%s  ' "$(basename "$lib")" "$off"; addr2line -f -C -i -e "$lib" "$off" 2>/dev/null | paste -sd' ' | cut -c1-220
  done
}
T=test_gpu_decode_matches_cpu_path
if command -v gdb >/dev/null; then
  echo "=== gdb: $T ==="
  timeout 120 gdb -q -batch -ex "set pagination off" -ex run -ex "thread apply all bt 25" --args \
    $PY -m pytest -x -q -p no:cacheprovider -p no:faulthandler python/tests/test_gpu.py -k $T 2>&1 \
    | grep -vE "^\[(New|Thread .* exited)|^warning: " | tail -120
else
  echo "=== no gdb: LD_PRELOAD backtrace: $T ==="
  LD_PRELOAD=/tmp/segv_backtrace.so timeout 90 $PY -m pytest -x -q -p no:cacheprovider \
    -p no:faulthandler python/tests/test_gpu.py -k $T > /tmp/t.log 2>&1; echo "rc=$?"
  tail -40 /tmp/t.log; resolve < /tmp/t.log
fi
echo "=== step by step (diag_steps.py) ==="
timeout 60 $PY bench/gpu/diag_steps.py 2>&1 | tail -60; echo "rc=${PIPESTATUS[0]}"
