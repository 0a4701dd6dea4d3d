#!/usr/bin/env bash
# Configures and builds stoker into build/ (or $STOKER_BUILD_DIR). Extra args go to cmake.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${STOKER_BUILD_DIR:-$ROOT/build}"
JOBS="${STOKER_JOBS:-$(nproc)}"
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" -DSTOKER_BUILD_PYTHON=ON "$@" >/dev/null
fi
cmake --build "$BUILD" -j "$JOBS"
