#!/usr/bin/env bash
# Installs the benchmark peers (DALI CPU pipeline, tf.data, SPDL; FFCV in .venv-ffcv) into a separate venv,
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
# Meta's SPDL (thread-based loading). Its CPU decode, crop and resize go through FFmpeg
# (libavcodec, libavfilter, libswscale), which spdl-io loads at run time and does not
# ship: Debian 12's FFmpeg 5 runtime libraries (spdl's _spdl_ffmpeg5 build).
SPDL_DEBS=(libavutil57 libavcodec59 libavformat59 libavfilter8 libavdevice59 libswscale6 libswresample4)
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
deb_missing=()
for p in "${SPDL_DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || deb_missing+=("$p")
done
if [ ${#deb_missing[@]} -gt 0 ]; then
  echo "[peers] installing FFmpeg runtime libraries for SPDL: ${deb_missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${deb_missing[@]}" \
    || { echo "[peers] FFmpeg libraries not installable: SPDL will be reported missing"; status=1; }
fi
install_one spdl.io spdl

# FFCV: its own venv, .venv-ffcv, on Debian's torch (FFCV's dependencies would otherwise
# pull a second, CUDA-sized torch): --system-site-packages, NumPy < 2 (Debian's torch),
# numba < 0.61 and OpenCV < 4.11 (the last with NumPy 1.x wheels); its C extension
# builds against libturbojpeg and OpenCV found through pkg-config (libopencv-dev).
FFCV_VENV="${STOKER_FFCV_VENV:-$ROOT/.venv-ffcv}"
if ! "$FFCV_VENV/bin/python" -c "import ffcv" 2>/dev/null; then
  dpkg-query -W -f='${Status}' libopencv-dev 2>/dev/null | grep -q "install ok installed" || \
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends libopencv-dev libturbojpeg0-dev || true
  [ -x "$FFCV_VENV/bin/python" ] || "$PY" -m venv --system-site-packages "$FFCV_VENV"
  echo "[peers] installing ffcv into $FFCV_VENV (log: $FFCV_VENV/ffcv-install.log)"
  if "$FFCV_VENV/bin/pip" install "numpy<2" "numba<0.61" "opencv-python-headless<4.11" ffcv \
       > "$FFCV_VENV/ffcv-install.log" 2>&1 && "$FFCV_VENV/bin/python" -c "import ffcv"; then
    echo "[peers] ffcv: ok"
  else
    echo "[peers] ffcv: NOT installable (see $FFCV_VENV/ffcv-install.log)"; status=1
  fi
else
  echo "[peers] ffcv: present ($FFCV_VENV)"
fi
"$VENV/bin/python" - <<'PY' || true
import importlib
for m in ("numpy", "PIL", "tensorflow", "nvidia.dali", "spdl.io"):
    try:
        mod = importlib.import_module(m)
        print(f"[peers] {m} {getattr(mod, '__version__', '?')}")
    except Exception as e:  # report, do not hide
        print(f"[peers] {m} missing: {e}")
PY
exit $status
