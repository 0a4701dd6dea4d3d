#!/usr/bin/env bash
# Installs the benchmark peers (DALI CPU pipeline, tf.data) into a separate venv,
# /work/main/.venv-peers, built on Debian's /usr/bin/python3 WITHOUT system site packages:
# tensorflow-cpu and DALI want a numpy of their own, which must not shadow the Debian
# torch/numpy that the main venv (.venv) and the tests rely on. CI does not need this;
# only bench/pipeline/run.sh does. Idempotent; a peer that cannot be installed is reported
# and left out (run.sh then reports it as missing, never faked).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${STOKER_PEERS_VENV:-$ROOT/.venv-peers}"
PY=/usr/bin/python3

if [ ! -x "$VENV/bin/python" ]; then
  echo "[peers] creating $VENV"
  "$PY" -m venv "$VENV" || { echo "[peers] cannot create $VENV"; exit 1; }
  "$VENV/bin/pip" install -q --upgrade pip || true
fi

status=0
install_one() {  # install_one <import-module> <pip spec...>
  local mod="$1"; shift
  if "$VENV/bin/python" -c "import $mod" 2>/dev/null; then
    echo "[peers] $mod: present"; return 0
  fi
  echo "[peers] installing $*"
  if "$VENV/bin/pip" install -q "$@"; then
    "$VENV/bin/python" -c "import $mod" && echo "[peers] $mod: ok" && return 0
  fi
  echo "[peers] $mod: NOT installable ($*)"; status=1; return 1
}

install_one PIL pillow
install_one tensorflow tensorflow-cpu
# DALI: CUDA 12 build first, CUDA 13 build as fallback; both run CPU-only pipelines
# (device_id=None) without a GPU or driver.
install_one nvidia.dali nvidia-dali-cuda120 || install_one nvidia.dali nvidia-dali-cuda130
"$VENV/bin/python" - <<'PY' || true
import importlib
for m in ("numpy", "PIL", "tensorflow", "nvidia.dali"):
    try:
        mod = importlib.import_module(m)
        print(f"[peers] {m} {getattr(mod, '__version__', '?')}")
    except Exception as e:  # report, do not hide
        print(f"[peers] {m} missing: {e}")
PY
exit $status
