#!/usr/bin/env bash
# Installs everything stoker needs to build and test, from Debian packages and PyPI.
# Idempotent: a second run only checks. Used by the README commands and .ci/run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

DEB_PKGS=(
  build-essential cmake ninja-build pkg-config git
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev zlib1g-dev
  libtomlplusplus-dev libcli11-dev libfmt-dev nlohmann-json3-dev libsimdjson-dev
  libgtest-dev libgmock-dev
  liblmdb-dev libhdf5-dev
  pybind11-dev python3-dev python3-venv python3-numpy python3-pytest
  python3-torch python3-torchvision python3-h5py python3-lmdb python3-pil
  clang libclang-rt-14-dev ccache
  librdkafka-dev
)

missing=()
for p in "${DEB_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[deps] installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python environment: Debian's python3 (torch, torchvision, h5py, lmdb come from Debian),
# plus PyPI packages the interop tests and benches need, in a venv that sees system packages.
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[deps] creating $VENV"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
# pyarrow >= 21 needs NumPy 2, but Debian's torch 1.13 needs NumPy 1.x: pin it.
# scikit-build-core: the build backend of `pip install .` (pyproject.toml; python/).
# confluent-kafka (imported as confluent_kafka): the Kafka tests' producer and checker, and
# scripts/servers/kafka.sh's readiness probe.
PY_PKGS=("pyarrow<21" webdataset tfrecord scikit-build-core confluent-kafka)
need_py=()
for p in "${PY_PKGS[@]}"; do
  mod="${p%%[<>=]*}"
  mod="${mod//-/_}"
  "$VENV/bin/python" -c "import $mod" 2>/dev/null || need_py+=("$p")
done
if [ ${#need_py[@]} -gt 0 ]; then
  echo "[deps] installing PyPI packages: ${need_py[*]}"
  "$VENV/bin/pip" install -q "${need_py[@]}"
fi
# Bench-only peer of the doctor (bench/doctor/run_bench.sh): HTA, imported as `hta`.
"$VENV/bin/python" -c "import hta" 2>/dev/null || {
  echo "[deps] installing PyPI package: holistictraceanalysis"
  "$VENV/bin/pip" install -q holistictraceanalysis "numpy<2" "pandas<3"
}
# Real photographs for the torchvision parity test (python/tests/test_torchvision_parity.py):
# scikit-image ships them in skimage/data. 0.22 and SciPy < 1.14 are the last that take
# NumPy 1.24 (Debian's) as it is, so pip leaves Debian's NumPy and Pillow alone.
"$VENV/bin/python" -c "import skimage" 2>/dev/null || {
  echo "[deps] installing PyPI package: scikit-image"
  "$VENV/bin/pip" install -q "scikit-image<0.23" "scipy<1.14" "numpy<2"
}
# Token pipelines (docs/tokens.md): Hugging Face tokenizers and datasets for the interop
# tests and the tokenizer (pyarrow pinned so datasets does not upgrade it past the C++
# headers the Parquet format was built with); megatron-core WITHOUT its dependencies (they
# pull a new torch): the tests load only its dataset modules (indexed_dataset, helpers_cpp).
"$VENV/bin/python" -c "import tokenizers, datasets" 2>/dev/null || {
  echo "[deps] installing PyPI packages: tokenizers datasets"
  "$VENV/bin/pip" install -q tokenizers datasets "pyarrow<21" "numpy<2"
}
"$VENV/bin/python" -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('megatron') is None)" || {
  echo "[deps] installing PyPI package: megatron-core (--no-deps)"
  "$VENV/bin/pip" install -q --no-deps megatron-core
}
# Delta Lake tables for the delta tests and bench/delta (deltalake writes them; delta-rs is
# Rust, it needs no pyarrow upgrade) and Ray for stoker.ray, its tests and bench/ray. Both
# pinned with pyarrow<21 and numpy<2 so pip keeps the versions the C++ headers and Debian's
# torch were built with.
"$VENV/bin/python" -c "import deltalake" 2>/dev/null || {
  echo "[deps] installing PyPI package: deltalake"
  "$VENV/bin/pip" install -q deltalake "pyarrow<21" "numpy<2"
}
"$VENV/bin/python" -c "import ray.data" 2>/dev/null || {
  echo "[deps] installing PyPI package: ray[data]"
  "$VENV/bin/pip" install -q "ray[data]" "pyarrow<21" "numpy<2" "pandas<3"
}
# Accelerate for the `stoker watch -- accelerate launch` test (python/tests/test_watch_probe.py):
# 0.27 is the last that takes torch 1.13; --no-deps so pip leaves Debian's torch alone (its
# other needs, numpy/psutil/pyyaml/huggingface_hub, are already here; safetensors is not).
"$VENV/bin/python" -c "import accelerate, safetensors" 2>/dev/null || {
  echo "[deps] installing PyPI packages: accelerate safetensors"
  "$VENV/bin/pip" install -q --no-deps "accelerate<0.28" safetensors
}
# Debian's torch 1.13 is built against NumPy 1.x: NumPy 2 in the venv breaks tensor.numpy()
# and every extension built with Debian's pybind11 2.10. Keep (or put back) NumPy < 2.
"$VENV/bin/python" -c "import numpy, sys; sys.exit(int(numpy.__version__.split('.')[0]) >= 2)" || {
  echo "[deps] NumPy 2 found in $VENV: installing numpy<2 (Debian's torch needs 1.x)"
  "$VENV/bin/pip" install -q "numpy<2"
}
# Optional (STOKER_INSTALL_CUDA=1): ptxas from the nvidia-cuda-nvcc-cu12 wheel, into a cache
# outside the venv, so the build also assembles the GPU kernel's PTX for sm_90 as a check
# (CMakeLists.txt, STOKER_CUDA). The kernel itself builds without it (clang's NVPTX target).
if [ "${STOKER_INSTALL_CUDA:-0}" = 1 ] && [ ! -x "$HOME/.cache/stoker-cuda/nvidia/cuda_nvcc/bin/ptxas" ]; then
  echo "[deps] installing ptxas (nvidia-cuda-nvcc-cu12) into $HOME/.cache/stoker-cuda"
  "$VENV/bin/pip" install -q --target "$HOME/.cache/stoker-cuda" nvidia-cuda-nvcc-cu12
fi
# CUDA headers for the compile-only check of the GPU path's dlopen table against the real
# cuda.h and nvjpeg.h (src/gpu/cuda_api_header_check.cc, CMake STOKER_CUDA_HEADER_CHECK), for
# CUDA 12 and CUDA 13 (the GPU machines run 13): the runtime and nvJPEG wheels (+ crt for 13),
# about 15 MB downloaded together (headers, and libnvjpeg, whose exports the tests check),
# into a cache outside the venv, without dependencies. Nothing links them.
# STOKER_INSTALL_CUDA_HEADERS=0 skips it (the check is then skipped too).
CUDA_HDRS="$HOME/.cache/stoker-cuda-headers"
if [ "${STOKER_INSTALL_CUDA_HEADERS:-1}" = 1 ]; then
  if [ ! -f "$CUDA_HDRS/cu12/nvidia/cuda_runtime/include/cuda.h" ] || [ ! -f "$CUDA_HDRS/cu12/nvidia/nvjpeg/include/nvjpeg.h" ]; then
    echo "[deps] installing CUDA 12 headers (nvidia-cuda-runtime-cu12, nvidia-nvjpeg-cu12) into $CUDA_HDRS/cu12"
    "$VENV/bin/pip" install -q --no-deps --upgrade --target "$CUDA_HDRS/cu12" \
      "nvidia-cuda-runtime-cu12==12.9.79" "nvidia-nvjpeg-cu12==12.4.0.76"
  fi
  if [ ! -f "$CUDA_HDRS/cu13/nvidia/cu13/include/nvjpeg.h" ] || [ ! -f "$CUDA_HDRS/cu13/nvidia/cu13/include/crt/host_defines.h" ]; then
    echo "[deps] installing CUDA 13 headers (nvidia-cuda-runtime, nvidia-nvjpeg, nvidia-cuda-crt) into $CUDA_HDRS/cu13"
    "$VENV/bin/pip" install -q --no-deps --upgrade --target "$CUDA_HDRS/cu13" \
      "nvidia-cuda-runtime==13.0.96" "nvidia-nvjpeg==13.0.4.44" "nvidia-cuda-crt==13.0.88"
  fi
fi
echo "[deps] ok"
# Object storage (#14): boto3 writes and reads the objects the s3:// tests compare against;
# the S3 test server needs a JRE (S3Proxy) and Go (toxiproxy, built by scripts/servers/s3.sh).
"$VENV/bin/python" -c "import boto3" 2>/dev/null || {
  echo "[deps] installing PyPI package: boto3"
  "$VENV/bin/pip" install -q boto3 "numpy<2"
}
for p in default-jre-headless maven golang-go curl; do
  case "$p" in golang-go) command -v go >/dev/null && continue ;; esac
  case "$p" in maven) command -v mvn >/dev/null && continue ;; esac
  case "$p" in default-jre-headless) command -v java >/dev/null && continue ;; esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
  echo "[deps] installing Debian package: $p"
  $SUDO apt-get install -y -qq --no-install-recommends "$p"
done
