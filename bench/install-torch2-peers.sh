#!/usr/bin/env bash
# Installs the benchmark peers that need torch >= 2 into their own venv, .venv-torch2
# (override: STOKER_TORCH2_VENV), built on a Python 3.9+ WITHOUT system site packages, so
# the Debian torch 1.13 / numpy of the main venv (.venv) and the tests are not shadowed:
#   torch >= 2 (the plain wheel from the package index: it pulls the CUDA runtime packages,
#   several GB, and runs on CPU without a GPU or driver), LitData (TokensLoader,
#   StreamingDataset), MosaicML Streaming (MDS), s3torchconnector (Amazon's S3 connector
#   for PyTorch), megatron-core (GPTDataset), webdataset, boto3, numpy < 2.
# Used by bench/tokens/run_bench.py and bench/remote/run_bench.py (--peer-python, default
# .venv-torch2/bin/python when present); CI does not run it. Idempotent: a package that is
# already importable is left alone; one that cannot be installed is reported and the script
# exits non-zero (the benches then report that side as missing, never faked).
#   bash bench/install-torch2-peers.sh
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${STOKER_TORCH2_VENV:-$ROOT/.venv-torch2}"
PY="${STOKER_TORCH2_BASE_PYTHON:-$(command -v python3.11 || command -v python3)}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "[torch2-peers] creating $VENV with $PY"
  "$PY" -m venv "$VENV" || { echo "[torch2-peers] cannot create $VENV"; exit 1; }
  "$VENV/bin/pip" install -q --upgrade pip || true
fi

status=0
install_one() {  # install_one <import-module> <pip spec...>
  local mod="$1"; shift
  if "$VENV/bin/python" -c "import $mod" 2>/dev/null; then
    echo "[torch2-peers] $mod: present"; return 0
  fi
  echo "[torch2-peers] installing $*"
  if "$VENV/bin/pip" install -q "$@"; then
    "$VENV/bin/python" -c "import $mod" && echo "[torch2-peers] $mod: ok" && return 0
  fi
  echo "[torch2-peers] $mod: NOT installable ($*)"; status=1; return 1
}

# numpy < 2 first: megatron-core's and streaming's pins are older than numpy 2's ABI.
install_one numpy "numpy<2"
install_one torch "torch>=2"
install_one litdata litdata
install_one streaming mosaicml-streaming
install_one s3torchconnector s3torchconnector
install_one megatron.core megatron-core
install_one webdataset webdataset
install_one boto3 boto3

"$VENV/bin/python" - <<'PY' || true
import importlib
for m in ("numpy", "torch", "litdata", "streaming", "s3torchconnector", "megatron.core",
          "webdataset", "boto3"):
    try:
        mod = importlib.import_module(m)
        print(f"[torch2-peers] {m} {getattr(mod, '__version__', '?')}")
    except Exception as e:  # report, do not hide
        print(f"[torch2-peers] {m} missing: {e}")
PY
exit $status
