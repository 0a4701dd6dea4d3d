#!/usr/bin/env bash
# The GPU path's device check: one run of at most 8 minutes on a machine with one NVIDIA
# GPU, CUDA's driver + nvJPEG (toolkit or wheels) and PyTorch with CUDA; downloads nothing.
#
#   bench/gpu/check.sh                 # on the GPU machine; everything under $OUT
#   bench/gpu/check.sh --cpu-dry-run   # here: the same steps on the CPU with small sizes,
#                                      # reusing build/ (STOKER_BUILD_DIR), to test the script
#
# Steps (each under its own timeout; the summary says which passed):
#   1. versions.txt: driver, GPU, torch/torchvision, where libcuda/libnvjpeg come from
#   2. build: stoker with the GPU kernel (STOKER_CUDA=ON), tests and the Python module
#   3. GPU tests: the C++ GPU tests (fake table + the real-GPU one), python/tests/test_gpu.py,
#      python/tests/gpu_check.py (pinned memory, device= copies, sync="event")
#   4. data: the bench's 2,000 ImageNet-like JPEGs (stoker gen images) plus odd JPEGs
#      (CMYK, progressive, arithmetic, corrupt) that must route to the CPU
#   5. compare.json: GPU path vs CPU path per image (tolerance in docs/gpu.md)
#   6. bench.json: images/s of stoker's GPU path, torchvision decode_jpeg(device="cuda") +
#      transforms.v2 on the GPU, stoker's CPU path (interleaved rounds); overlap with a
#      50 ms emulated step
#   7. traces/: PyTorch profiler traces (input-bound, healthy, pageable, compute-bound) and
#      `stoker doctor` on each (doctor-*.txt/json): inputs for the doctor's golden tests
#   8. watch-*: `stoker watch` sampling NVML during a real training loop
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
DRY=0
[ "${1:-}" = "--cpu-dry-run" ] && DRY=1
OUT="${OUT:-/tmp/stoker-gpu-check}"
mkdir -p "$OUT"
PY="${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
JOBS="${STOKER_JOBS:-$(nproc)}"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
T0=$(date +%s)
step() {  # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  local s=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  printf '%-14s rc=%-3s %4ss  (log: %s.log)\n' "$name" "$rc" "$(( $(date +%s) - s ))" "$name" | tee -a "$SUMMARY"
  return $rc
}
DRYFLAG=""
[ $DRY = 1 ] && DRYFLAG="--cpu-dry-run"

# 1. versions
{
  date -u; uname -a
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  "$PY" -c "import torch, torchvision; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available()); print('torchvision', torchvision.__version__)"
  ldconfig -p 2>/dev/null | grep -E "libcuda.so|libnvjpeg|libnvidia-ml" || true
  "$PY" -c "import glob, sys; print([p for d in sys.path for p in glob.glob(d + '/nvidia/*/lib/libnvjpeg*')])"
} > "$OUT/versions.txt" 2>&1

# 2. build
if [ $DRY = 1 ]; then
  BUILD="${STOKER_BUILD_DIR:-$ROOT/build}"
  echo "dry run: using the existing build in $BUILD" | tee -a "$SUMMARY"
else
  BUILD="$ROOT/build-gpu"
  step build 300 bash -c "cmake -S . -B '$BUILD' -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DSTOKER_CUDA=ON -DSTOKER_BUILD_PYTHON=ON -DPython3_EXECUTABLE=\$(command -v $PY) \
      && ninja -C '$BUILD' -j$JOBS stoker stoker_tests _stoker" || { echo "BUILD FAILED"; exit 1; }
fi
STOKER="$BUILD/stoker"
export PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" STOKER_PYTHON_BUILD="$BUILD" STOKER_BINARY="$STOKER"

# 3. GPU tests
step gtest-gpu 60 "$BUILD/stoker_tests" --gtest_filter='JpegProbe*:Route*:OffloadModel*:AutoOffload*:ResizeKernel*:DeviceStage*'
step pytest-gpu 120 "$PY" -m pytest -q -rs python/tests/test_gpu.py
if [ $DRY = 0 ]; then
  step gpu-check 120 "$PY" python/tests/gpu_check.py
fi

# 4. data
N=2000; [ $DRY = 1 ] && N=48
DATA="$OUT/data/images"
if [ ! -d "$DATA" ]; then
  step gen 120 "$STOKER" gen images --out "$DATA" --count $N --seed 1 --classes 10
fi
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

# 5-7. compare, bench, traces (+ the doctor on each trace)
LIMIT=""; [ $DRY = 1 ] && LIMIT="--limit 32"
step compare 90 "$PY" bench/gpu/gpu_bench.py compare --data "$DATA" --out "$OUT" $DRYFLAG $LIMIT
BENCH_ARGS=""; [ $DRY = 1 ] && BENCH_ARGS="--images 48 --batch 16 --rounds 1 --overlap-steps 4"
step bench 240 "$PY" bench/gpu/gpu_bench.py bench --data "$DATA" --out "$OUT" $DRYFLAG $BENCH_ARGS
TR_ARGS=""; [ $DRY = 1 ] && TR_ARGS="--trace-steps 2"
step traces 120 "$PY" bench/gpu/gpu_bench.py traces --data "$DATA" --out "$OUT" $DRYFLAG $TR_ARGS
for t in "$OUT"/traces/*/; do
  [ -d "$t" ] || continue
  name=$(basename "$t")
  "$STOKER" doctor --no-color "$t" --json "$OUT/doctor-$name.json" > "$OUT/doctor-$name.txt" 2>&1
  echo "doctor $name rc=$? verdict: $(grep -m1 -iE 'verdict|bound|healthy' "$OUT/doctor-$name.txt" | head -c 160)" | tee -a "$SUMMARY"
done

# 8. stoker watch (NVML) during a real training loop
WATCH_GPU=""; [ $DRY = 1 ] && WATCH_GPU="--no-gpu"
STEPS=300; [ $DRY = 1 ] && STEPS=6
step watch 120 "$STOKER" watch $WATCH_GPU --interval 0.1 --out "$OUT/watch-train.csv" \
  --json "$OUT/watch-train.json" -- "$PY" bench/gpu/gpu_bench.py train --data "$DATA" \
  --steps $STEPS $DRYFLAG

echo "total $(( $(date +%s) - T0 )) s; outputs in $OUT" | tee -a "$SUMMARY"
ls -la "$OUT" >> "$SUMMARY"
grep -q "rc=[1-9]" "$SUMMARY" && exit 1 || exit 0
