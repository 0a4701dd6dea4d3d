#!/usr/bin/env bash
# Device check for the doctor (run by the lead on the GPU machine; writes to $OUT):
#   1. builds stoker (CMake; falls back to a doctor-only g++ build if the full build's
#      dependencies are missing),
#   2. runs `stoker watch -- python3 bench/doctor/gpu_loop.py ...` twice (an input-bound
#      loop and a fed one), sampling the GPU through NVML at 10 Hz, with nvidia-smi
#      logging next to it for comparison,
#   3. records a short CUDA profiler trace in each loop and runs `stoker doctor` on it.
# Everything it makes is under $OUT: build.log, watch-*.csv, smi-*.csv, trace-*/,
# report-*.{txt,json,html}, versions.txt. Budget: about 3-4 minutes.
set -uo pipefail
OUT="${OUT:-/tmp/stoker-gpu-check}"
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
ROOT=$PWD
PY="${PY:-python3}"
{
  date -u; uname -a; nvidia-smi || echo "nvidia-smi missing"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
  ls -l /usr/lib/x86_64-linux-gnu/libnvidia-ml.so* 2>/dev/null
} > "$OUT/versions.txt" 2>&1

STOKER=""
if command -v cmake >/dev/null && command -v ninja >/dev/null; then
  cmake -S . -B build-gpucheck -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTOKER_BUILD_TESTS=OFF \
    > "$OUT/build.log" 2>&1 && timeout 240 ninja -C build-gpucheck stoker >> "$OUT/build.log" 2>&1 \
    && STOKER=$ROOT/build-gpucheck/stoker
fi
if [ -z "$STOKER" ]; then
  echo "full build failed or unavailable; doctor-only g++ build" >> "$OUT/build.log"
  mkdir -p build-gpucheck-min
  cat > build-gpucheck-min/main.cc <<'CC'
#include "cli/commands.h"
namespace stoker::cli {
static Action g_action;
void SetAction(Action a) { g_action = std::move(a); }
int Fail(const Status& st) { std::fprintf(stderr, "stoker: %s\n", st.message().c_str()); return 2; }
}
int main(int argc, char** argv) {
  CLI::App app{"stoker (doctor-only build)"};
  app.require_subcommand(1);
  stoker::cli::RegisterDoctorCommands(app);
  try { app.parse(argc, argv); } catch (const CLI::ParseError& e) { return app.exit(e) == 0 ? 0 : 2; }
  return stoker::cli::g_action ? stoker::cli::g_action() : 2;
}
CC
  g++ -std=c++20 -O2 -Isrc -o build-gpucheck-min/stoker build-gpucheck-min/main.cc \
    src/cli/cmd_doctor.cc src/cli/cmd_watch.cc src/core/status.cc src/io/posix_env.cc \
    $(ls src/telemetry/*.cc | grep -v _test.cc) src/doctor/doctor.cc src/doctor/render.cc \
    -lfmt -lz -ldl -lpthread >> "$OUT/build.log" 2>&1 && STOKER=$ROOT/build-gpucheck-min/stoker
fi
if [ -z "$STOKER" ]; then echo "BUILD FAILED (see build.log)"; exit 1; fi
echo "stoker: $STOKER"

run_case() {  # name, gpu_loop args...
  local name=$1; shift
  nvidia-smi --query-gpu=timestamp,index,utilization.gpu,utilization.memory,memory.used,memory.total,power.draw,temperature.gpu,clocks.sm,clocks_throttle_reasons.active \
    --format=csv -lms 200 > "$OUT/smi-$name.csv" 2> "$OUT/smi-$name.err" &
  local smi=$!
  timeout 120 "$STOKER" watch --interval 0.1 --out "$OUT/watch-$name.csv" --trace "$OUT/trace-$name" \
    --json "$OUT/report-watch-$name.json" -- "$PY" bench/doctor/gpu_loop.py --trace-dir "$OUT/trace-$name" "$@" \
    > "$OUT/report-watch-$name.txt" 2>&1
  echo "watch $name rc=$?" | tee -a "$OUT/summary.txt"
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  "$STOKER" doctor --no-color "$OUT/trace-$name" --json "$OUT/report-$name.json" --html "$OUT/report-$name.html" \
    > "$OUT/report-$name.txt" 2>&1
  echo "doctor $name rc=$?" | tee -a "$OUT/summary.txt"
  "$STOKER" doctor --no-color "$OUT/smi-$name.csv" > "$OUT/report-smi-$name.txt" 2>&1
  echo "doctor smi $name rc=$?" | tee -a "$OUT/summary.txt"
  head -5 "$OUT/report-$name.txt" | tee -a "$OUT/summary.txt"
}
run_case slow --workers 0 --delay 0.004 --extra-steps 30
run_case fed --workers 4 --pin --extra-steps 60
ls -la "$OUT" >> "$OUT/summary.txt"
