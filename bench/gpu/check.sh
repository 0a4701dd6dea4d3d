#!/usr/bin/env bash
# The GPU path's device check: one run of at most 8 minutes on a machine with one NVIDIA
# GPU, CUDA's driver, compiler and nvJPEG (toolkit, wheels or torchvision's copy), PyTorch and
# torchvision; downloads nothing, installs nothing from a registry.
#
#   bench/gpu/carry.sh                 # HERE, first: .gpu-carry/ (C++ build deps as Debian
#                                      # packages, the kernel's PTX), ~4 MB, to carry along
#   bench/gpu/check.sh                 # on the GPU machine; results under $OUT
#   bench/gpu/check.sh --cpu-dry-run   # here: the same steps on the CPU with small sizes,
#                                      # reusing build/ (STOKER_BUILD_DIR), to test the script
#
# With the device tool: run(command="bench/gpu/check.sh", carry=[".gpu-carry"], timeout_s=560).
# Python there: the machine's python3 (torch, torchvision, numpy, PIL, pytest, pybind11 are
# in its image); nothing from our venv is needed. The extension is built for that python.
#
# Steps (each under its own timeout, all under one budget, STOKER_CHECK_BUDGET_S, default
# 470 s: a step that would start with too little left is skipped and says so):
#   versions      driver, GPU, nvcc, torch/torchvision, where libcuda/libnvjpeg come from
#   deps          unpack .gpu-carry/debs (bench/gpu/deps.sh) when carried
#   build         stoker with the GPU kernel (nvcc; on failure again with the carried PTX),
#                 the tests and the Python module, Release, all cores
#   headers       the table's compile-time check against THIS machine's toolkit headers
#   symbols       libcuda and the libnvjpeg the pipeline would load export every symbol
#                 the table loads (symbols.json)
#   gtest-gpu     the C++ GPU tests (fake table + the real-GPU one)
#   pytest-gpu    python/tests/test_gpu.py
#   gpu-check     python/tests/gpu_check.py (pinned memory, device= copies, sync="event")
#   tune-batch-gpu python/tests/test_tune_batch.py -k cuda (issue 11 on device memory)
#   gen/odd-jpegs the bench's 2,000 ImageNet-like JPEGs plus CMYK/progressive/corrupt ones
#   compare       compare.json: GPU path vs CPU path per image (tolerance in docs/gpu.md)
#   bench         bench.json: images/s of stoker's GPU path, torchvision
#                 decode_jpeg(device="cuda") + transforms.v2 on the GPU, stoker's CPU path
#                 (interleaved rounds); overlap with a 50 ms emulated step
#   traces        PyTorch profiler traces (input-bound, healthy, pageable, compute-bound) and
#                 `stoker doctor` on each: inputs for the doctor's golden tests
#   watch         `stoker watch` sampling NVML during a real training loop
# What comes back (the device tool returns at most 8 files): $OUT/summary.txt (also printed),
# $OUT/results.tgz (every log and JSON), $OUT/traces.tgz (the profiler traces). The summary
# is written however the steps end (a trap), and the script exits 0 only if every step passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
DRY=0
[ "${1:-}" = "--cpu-dry-run" ] && DRY=1
OUT="${OUT:-/tmp/stoker-gpu-check}"
mkdir -p "$OUT"
RES="${STOKER_CHECK_WORK:-/tmp/stoker-gpu-check-work}"   # logs, JSON, traces; packed at the end
rm -rf "$RES"; mkdir -p "$RES"
PY="${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
JOBS="${STOKER_JOBS:-$(nproc)}"
BUDGET="${STOKER_CHECK_BUDGET_S:-470}"
SUMMARY="$RES/summary.txt"
: > "$SUMMARY"
T0=$(date +%s)
FAILED=0

finish() {
  trap - EXIT INT TERM
  echo "total $(( $(date +%s) - T0 )) s of a ${BUDGET} s budget; failed steps: $FAILED" >> "$SUMMARY"
  (cd "$RES" && ls -la) >> "$SUMMARY" 2>&1
  cp "$SUMMARY" "$OUT/summary.txt"
  tar -czf "$OUT/results.tgz" -C "$RES" --exclude=./data --exclude=./traces . 2>/dev/null
  [ -d "$RES/traces" ] && tar -czf "$OUT/traces.tgz" -C "$RES" traces 2>/dev/null
  # The device tool returns files up to 16 MiB: drop the traces rather than lose everything.
  if [ -f "$OUT/traces.tgz" ] && [ "$(stat -c %s "$OUT/traces.tgz")" -gt 15000000 ]; then
    echo "traces.tgz over 15 MB: not kept (the doctor's outputs are in results.tgz)" >> "$OUT/summary.txt"
    rm -f "$OUT/traces.tgz"
  fi
  cat "$OUT/summary.txt"
  [ "$FAILED" = 0 ]
  exit $?
}
trap finish EXIT
trap 'echo "interrupted" >> "$SUMMARY"; FAILED=$((FAILED+1)); finish' INT TERM

left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
step() {  # name, timeout seconds, command...: logs to $RES/name.log, one summary line
  local name=$1 limit=$2; shift 2
  local l; l=$(left)
  if [ "$l" -lt 15 ]; then
    printf '%-14s SKIPPED (budget: %ss left)\n' "$name" "$l" >> "$SUMMARY"
    FAILED=$((FAILED+1))
    return 99
  fi
  [ "$limit" -gt $((l - 5)) ] && limit=$((l - 5))
  local s; s=$(date +%s)
  timeout -k 5 "$limit" "$@" > "$RES/$name.log" 2>&1
  local rc=$?
  [ $rc = 124 ] || [ $rc = 137 ] && echo "(timed out after ${limit}s)" >> "$RES/$name.log"
  printf '%-14s rc=%-3s %4ss  (log: %s.log)\n' "$name" "$rc" "$(( $(date +%s) - s ))" "$name" | tee -a "$SUMMARY"
  [ $rc = 0 ] || FAILED=$((FAILED+1))
  return $rc
}
DRYFLAG=""
[ $DRY = 1 ] && DRYFLAG="--cpu-dry-run"

# versions
step versions 30 bash -c "
  date -u; uname -a; nproc; free -g | head -2
  timeout 10 nvidia-smi 2>&1 || echo 'nvidia-smi: not available'
  command -v nvcc && nvcc --version | tail -2; command -v g++ && g++ --version | head -1
  command -v cmake && cmake --version | head -1; command -v ninja; command -v pkg-config
  '$PY' -c \"import sys, torch, torchvision; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available()); print('torchvision', torchvision.__version__)\"
  ldconfig -p 2>/dev/null | grep -E 'libcuda.so|libnvjpeg|libnvidia-ml|libcudart' || true
  ls /usr/local/cuda/lib64/libnvjpeg* /usr/local/cuda/include/nvjpeg.h 2>&1
  '$PY' -c \"import glob, sys; print([p for d in sys.path for p in glob.glob(d + '/nvidia/*/lib/libnvjpeg*') + glob.glob(d + '/torchvision.libs/*')])\"
"
cp "$RES/versions.log" "$RES/versions.txt" 2>/dev/null

# deps + build
if [ $DRY = 1 ]; then
  BUILD="${STOKER_BUILD_DIR:-$ROOT/build}"
  echo "dry run: using the existing build in $BUILD (no deps, no build)" | tee -a "$SUMMARY"
else
  BUILD="$ROOT/build-gpu"
  # shellcheck source=bench/gpu/deps.sh
  source bench/gpu/deps.sh
  stoker_use_carried_deps "$ROOT/.gpu-carry" > "$RES/deps.log" 2>&1 || echo "deps: unpacking failed (see deps.log)" >> "$SUMMARY"
  tail -1 "$RES/deps.log" >> "$SUMMARY"
  PYEXE=$(command -v "$PY")
  PYBIND=$("$PY" -m pybind11 --cmakedir 2>/dev/null)
  configure() {  # extra cmake args
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DSTOKER_CUDA=ON -DSTOKER_CUDA_HEADER_CHECK=OFF -DSTOKER_PARQUET=OFF \
      -DSTOKER_BUILD_PYTHON=ON -DPython3_EXECUTABLE="$PYEXE" -DPython_EXECUTABLE="$PYEXE" \
      -DSTOKER_PYTHON="$PYEXE" ${PYBIND:+-Dpybind11_DIR="$PYBIND"} \
      ${PKG_CONFIG:+-DPKG_CONFIG_EXECUTABLE="$PKG_CONFIG"} "$@" &&
    ninja -C "$BUILD" -k 0 -j"$JOBS" stoker stoker_tests _stoker  # -k 0: every error in one log
  }
  export -f configure; export BUILD PYEXE PYBIND JOBS
  if ! step build 240 bash -c 'configure'; then
    if [ -f .gpu-carry/resize_kernel.ptx ] && grep -qE "FAILED:.*(resize_kernel|\.ptx)" "$RES/build.log"; then
      echo "build with nvcc failed: again with the carried PTX (clang NVPTX)" | tee -a "$SUMMARY"
      rm -rf "$BUILD"
      step build-ptx 200 bash -c "configure -DSTOKER_KERNEL_PTX=$ROOT/.gpu-carry/resize_kernel.ptx"
    fi
  fi
  if [ ! -x "$BUILD/stoker" ]; then
    echo "BUILD FAILED: nothing else can run (see build.log)" | tee -a "$SUMMARY"
    exit 1
  fi
  grep -m1 "GPU kernel built with" "$RES/build.log" "$RES/build-ptx.log" 2>/dev/null >> "$SUMMARY"
fi
STOKER="$BUILD/stoker"
export PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" STOKER_PYTHON_BUILD="$BUILD" STOKER_BINARY="$STOKER" STOKER_BIN="$STOKER"
export PYTHONUNBUFFERED=1

# headers: the table against this machine's own cuda.h / nvjpeg.h (CI checks CUDA 12.9 and
# 13.0 from the wheels); compile only.
CUINC=""
for r in "${CUDA_HOME:-}" /usr/local/cuda; do
  [ -n "$r" ] && [ -f "$r/include/cuda.h" ] && [ -f "$r/include/nvjpeg.h" ] && { CUINC="$r/include"; break; }
done
if [ -n "$CUINC" ]; then
  step headers 60 "${CXX:-c++}" -std=c++20 -fsyntax-only -Isrc -Iinclude \
    ${STOKER_DEPS_DIR:+-isystem "$STOKER_DEPS_DIR/usr/include"} -isystem "$CUINC" \
    src/gpu/cuda_api_header_check.cc
else
  echo "headers        not run: no cuda.h + nvjpeg.h in \$CUDA_HOME or /usr/local/cuda" | tee -a "$SUMMARY"
fi

# symbols: what dlopen would find, and whether it exports the table's symbols (in a dry run
# there is no driver: reported, not counted as a failure)
symbols_step() {
  if ! step symbols 30 "$PY" - "$RES/symbols.json" && [ $DRY = 1 ]; then
    FAILED=$((FAILED-1))
    echo "  (dry run: no CUDA driver here, so 'symbols' fails; not counted)" >> "$SUMMARY"
  fi
}
symbols_step <<'PYEOF'
import ctypes, json, re, sys
src = open("src/gpu/cuda_api.h").read()
def listed(macro):
    body = src[src.index("#define " + macro):]
    body = body[:body.index("\n\n")]
    return re.findall(r'X\((\w+), "(\w+)", (?:"(\w+)"|nullptr)\)', body)
res, ok = {}, True
def check(name, cands, syms):
    global ok
    for c in cands:
        try:
            lib = ctypes.CDLL(c)
        except OSError as e:
            res.setdefault(name + "_tried", []).append(f"{c}: {e}")
            continue
        missing = [s for _, s, old in syms if not hasattr(lib, s) and not (old and hasattr(lib, old))]
        fallback = [s for _, s, old in syms if not hasattr(lib, s) and old and hasattr(lib, old)]
        res[name] = {"path": c, "missing": missing, "older_symbol_used": fallback, "listed": len(syms)}
        ok &= not missing
        return
    res[name] = None
    ok = False
check("driver", ["libcuda.so.1", "libcuda.so"], listed("STOKER_CUDA_DRIVER_FUNCTIONS"))
try:
    from stoker.pipeline import _nvjpeg_candidates
    cands = _nvjpeg_candidates()
except Exception as e:  # the module did not build: the bare names
    res["nvjpeg_candidates_error"] = repr(e)
    cands = ["libnvjpeg.so.13", "libnvjpeg.so.12"]
res["nvjpeg_candidates"] = cands
check("nvjpeg", cands, listed("STOKER_NVJPEG_FUNCTIONS"))
json.dump(res, open(sys.argv[1], "w"), indent=1)
print(json.dumps(res, indent=1))
sys.exit(0 if ok else 1)
PYEOF

# GPU tests
step gtest-gpu 90 "$BUILD/stoker_tests" --gtest_filter='JpegProbe*:Route*:OffloadModel*:AutoOffload*:ResizeKernel*:DeviceStage*:CudaApi*'
step pytest-gpu 120 "$PY" -m pytest -q -rs -p no:cacheprovider python/tests/test_gpu.py
if [ $DRY = 0 ]; then
  step gpu-check 90 "$PY" python/tests/gpu_check.py
fi
# issue 11: the batch-size sweep on device memory (set_per_process_memory_fraction, CUDA OOM)
step tune-batch-gpu 120 "$PY" -m pytest -q -rs -p no:cacheprovider python/tests/test_tune_batch.py -k cuda

# data
N=2000; [ $DRY = 1 ] && N=48
DATA="$RES/data/images"
step gen 60 "$STOKER" gen images --out "$DATA" --count $N --seed 1 --classes 10
step odd-jpegs 30 "$PY" - "$DATA/class_odd" <<'PYEOF'
import io, os, sys
import numpy as np
from PIL import Image
d = sys.argv[1]; os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(0)
rgb = Image.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8))
rgb.convert("CMYK").save(os.path.join(d, "cmyk.jpg"), quality=90)
rgb.save(os.path.join(d, "progressive.jpg"), quality=90, progressive=True)
b = io.BytesIO(); rgb.save(b, "JPEG", quality=90)
open(os.path.join(d, "corrupt.jpg"), "wb").write(b.getvalue()[:200])
print("odd JPEGs in", d)
PYEOF

# compare, bench, traces (+ the doctor on each trace)
LIMIT=""; [ $DRY = 1 ] && LIMIT="--limit 32"
step compare 90 "$PY" bench/gpu/gpu_bench.py compare --data "$DATA" --out "$RES" $DRYFLAG $LIMIT
BENCH_ARGS=""; [ $DRY = 1 ] && BENCH_ARGS="--images 48 --batch 16 --rounds 1 --overlap-steps 4"
step bench 150 "$PY" bench/gpu/gpu_bench.py bench --data "$DATA" --out "$RES" $DRYFLAG $BENCH_ARGS
TR_ARGS=""; [ $DRY = 1 ] && TR_ARGS="--trace-steps 2"
step traces 90 "$PY" bench/gpu/gpu_bench.py traces --data "$DATA" --out "$RES" $DRYFLAG $TR_ARGS
for t in "$RES"/traces/*/; do
  [ -d "$t" ] || continue
  name=$(basename "$t")
  step "doctor-$name" 30 "$STOKER" doctor --no-color "$t" --json "$RES/doctor-$name.json"
  echo "  verdict: $(grep -m1 -iE 'verdict|bound|healthy' "$RES/doctor-$name.log" | head -c 160)" >> "$SUMMARY"
done

# stoker watch (NVML) during a real training loop
WATCH_GPU=""; [ $DRY = 1 ] && WATCH_GPU="--no-gpu"
STEPS=300; [ $DRY = 1 ] && STEPS=6
step watch 75 "$STOKER" watch $WATCH_GPU --interval 0.1 --out "$RES/watch-train.csv" \
  --json "$RES/watch-train.json" -- "$PY" bench/gpu/gpu_bench.py train --data "$DATA" \
  --steps $STEPS $DRYFLAG
