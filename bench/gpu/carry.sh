#!/usr/bin/env bash
# Prepares .gpu-carry/ (git-ignored) for bench/gpu/check.sh on a GPU machine that has CUDA,
# PyTorch, CMake and a C++ compiler but none of stoker's C++ build dependencies and no
# package registry. Run it HERE (a Debian 12 machine with apt), then name `.gpu-carry` in the
# device tool's `carry`. About 4 MB:
#   debs/     the Debian packages of the build dependencies (fmt, CLI11, nlohmann-json, zlib,
#             libjpeg-turbo, libpng, GoogleTest, pkgconf); check.sh unpacks them with dpkg-deb
#             into /tmp/stoker-deps and points CMake and pkg-config there (bench/gpu/deps.sh)
#   resize_kernel.ptx   the kernel's PTX from this build (clang NVPTX), for when that
#             machine's nvcc cannot build it (check.sh then passes STOKER_KERNEL_PTX)
# Nothing Python: check.sh uses that machine's python3 (torch, torchvision, numpy, PIL,
# pytest, pybind11 are there) and builds the extension for it.
set -euo pipefail
cd "$(dirname "$0")/../.."
C=.gpu-carry
mkdir -p "$C/debs"
PKGS=(libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev zlib1g-dev zlib1g
      libturbojpeg0-dev libturbojpeg0 libjpeg62-turbo-dev libjpeg62-turbo libpng-dev libpng16-16
      libgtest-dev libgmock-dev pkgconf pkgconf-bin libpkgconf3)
(cd "$C/debs" && rm -f ./*.deb && apt-get download "${PKGS[@]}" >/dev/null)
BUILD="${STOKER_BUILD_DIR:-build}"
if [ -f "$BUILD/gpu/resize_kernel.ptx" ]; then
  cp "$BUILD/gpu/resize_kernel.ptx" "$C/resize_kernel.ptx"
else
  echo "carry: no $BUILD/gpu/resize_kernel.ptx (build first) -- no PTX fallback carried" >&2
fi
du -sh "$C"; ls "$C" "$C/debs"
