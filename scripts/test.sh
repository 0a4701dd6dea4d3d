#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every test:
#   1. the GoogleTest suite under ASan+UBSan (build-asan/),
#   2. the executor and core tests under TSan (build-tsan/),
#   3. the CLI and Python tests (pytest) against the normal build (build/),
#   4. clang's thread-safety analysis over the engine (build-tsa/, compile only),
#   5. the stream sources' Python tests (Kafka against the real broker, Delta tables
#      written by deltalake) again, with the extension built under ASan+UBSan (build-asan/):
#      their C++ (the Kafka consumer, the Delta log) runs only behind a server or a
#      writer, so the GoogleTest suite alone never sanitizes it;
# with the servers of scripts/servers/ running on 127.0.0.1 for the tests that need them.
# STOKER_TEST_QUICK=1 skips the sanitizer builds (for local iteration).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Indices of object shards scanned by the tests stay in the build tree, not in ~/.cache.
export STOKER_INDEX_CACHE="$ROOT/build/test-index-cache"
rm -rf "$STOKER_INDEX_CACHE"
JOBS="${STOKER_JOBS:-$(nproc)}"
"$ROOT/scripts/install-deps.sh"

step() { printf '\n== %s ==\n' "$*"; }

# Real servers on 127.0.0.1 for the remote-storage and streaming tests (scripts/servers.sh),
# stopped whatever way this script ends. With STOKER_SERVERS_UP=1 exported, a test whose
# server is missing fails instead of skipping. STOKER_SERVERS=0 runs without them (the
# tests that need one then skip, and say which server).
if [ "${STOKER_SERVERS:-1}" != 0 ]; then
  step "servers on 127.0.0.1"
  trap '"$ROOT/scripts/servers.sh" down' EXIT
  eval "$("$ROOT/scripts/servers.sh" up)"
fi

step "build (RelWithDebInfo)"
"$ROOT/scripts/build.sh"

if [ "${STOKER_TEST_QUICK:-0}" != 1 ]; then
  step "GoogleTest under ASan+UBSan"
  # With the Python extension (step 5 loads it); a build-asan/ configured before without
  # it is configured again.
  if [ ! -f "$ROOT/build-asan/build.ninja" ] ||
     ! grep -q '^STOKER_BUILD_PYTHON:BOOL=ON' "$ROOT/build-asan/CMakeCache.txt"; then
    cmake -S "$ROOT" -B "$ROOT/build-asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
      -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" \
      -DSTOKER_SANITIZE=address,undefined \
      -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" -DSTOKER_BUILD_PYTHON=ON >/dev/null
  fi
  cmake --build "$ROOT/build-asan" -j "$JOBS" --target stoker_tests stoker _stoker
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    LSAN_OPTIONS="suppressions=$ROOT/tests/lsan.supp" \
    ctest --test-dir "$ROOT/build-asan" -j "$JOBS" --output-on-failure

  step "executor tests under TSan"
  if [ ! -f "$ROOT/build-tsan/build.ninja" ]; then
    cmake -S "$ROOT" -B "$ROOT/build-tsan" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
      -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" \
      -DSTOKER_SANITIZE=thread -DSTOKER_TSAN_SUBSET=ON >/dev/null
  fi
  cmake --build "$ROOT/build-tsan" -j "$JOBS" --target stoker_tests
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    "$ROOT/build-tsan/stoker_tests" --gtest_brief=1
else
  step "GoogleTest (quick, no sanitizers)"
  ctest --test-dir "$ROOT/build" -j "$JOBS" --output-on-failure
fi

step "clang thread-safety analysis (engine, compile only)"
# GUARDED_BY / REQUIRES (src/core/thread_annotations.h) are checked by clang only; the
# TSan subset's sources (the engine) compiled with -Werror=thread-safety, nothing linked.
if command -v clang++ >/dev/null; then
  if [ ! -f "$ROOT/build-tsa/build.ninja" ]; then
    CC=clang CXX=clang++ cmake -S "$ROOT" -B "$ROOT/build-tsa" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
      -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g0" -DCMAKE_C_FLAGS_DEBUG="-O0 -g0" \
      -DCMAKE_CXX_FLAGS="-Wthread-safety -Werror=thread-safety" \
      -DSTOKER_TSAN_SUBSET=ON -DSTOKER_BUILD_TESTS=OFF >/dev/null
  fi
  cmake --build "$ROOT/build-tsa" -j "$JOBS" --target stoker_lib
else
  echo "clang++ not found (scripts/install-deps.sh installs it): skipped" >&2
  exit 1
fi

step "Python and CLI tests (pytest)"
# Every Python-side test uses the normal (non-sanitizer) build.
export STOKER_BINARY="$ROOT/build/stoker" STOKER_BIN="$ROOT/build/stoker"
export STOKER_INTEROP_DUMP="$ROOT/build/stoker_interop_dump"
export STOKER_PYTHON_BUILD="$ROOT/build"
"$ROOT/.venv/bin/python" -m pytest -q "$ROOT/python/tests" "$ROOT/tests/cli"

if [ "${STOKER_TEST_QUICK:-0}" != 1 ]; then
  step "stream sources under ASan+UBSan (pytest, the sanitized extension)"
  # The unsanitized interpreter loads the ASan runtime first (and libstdc++, whose
  # __cxa_throw ASan intercepts); leaks are not checked (CPython's own). Left out: the
  # tests that start a JVM broker of their own or a torch.distributed job (the preload
  # would reach them), and those that run the CLI (the normal binary, step 3).
  LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so.6)" \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    STOKER_PYTHON_BUILD="$ROOT/build-asan" \
    "$ROOT/.venv/bin/python" -m pytest -q -p no:cacheprovider \
    "$ROOT/python/tests/test_kafka.py" "$ROOT/python/tests/test_delta.py" \
    -k "not paused_broker and not torch_distributed and not convert and not bench_pipeline"
fi
echo
echo "all tests passed"
