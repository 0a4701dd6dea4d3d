# Sourced by bench/gpu/check.sh: when .gpu-carry/debs (bench/gpu/carry.sh) is there, unpack
# the carried build dependencies into $STOKER_DEPS (default /tmp/stoker-deps) and point CMake
# (CMAKE_PREFIX_PATH) and pkg-config (PKG_CONFIG_PATH, and the carried pkgconf when the
# machine has none) at them. The built programs find the carried shared libraries through
# the build tree's RPATH. Prints what it did; returns non-zero only if unpacking failed.
stoker_use_carried_deps() {
  local carry="$1" d="${STOKER_DEPS:-/tmp/stoker-deps}" arch=x86_64-linux-gnu f
  [ -d "$carry/debs" ] || { echo "deps: no $carry/debs, using the machine's own"; return 0; }
  mkdir -p "$d"
  for f in "$carry"/debs/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$f" "$d" || return 1
    else  # ar + tar: a .deb is an ar archive holding data.tar.*
      (t=$(mktemp -d) && cd "$t" && ar x "$OLDPWD/$f" && tar -xf data.tar.* -C "$d" && rm -rf "$t") || return 1
    fi
  done
  # The .pc files and one symlink name /usr and /lib: make them name the unpacked tree.
  sed -i -E "s#=(/usr|/lib)#=$d\\1#" "$d"/usr/lib/$arch/pkgconfig/*.pc "$d"/usr/share/pkgconfig/*.pc
  [ -e "$d/lib/$arch/libz.so.1" ] && ln -sf "$d/lib/$arch/libz.so.1" "$d/usr/lib/$arch/libz.so"
  export STOKER_DEPS_DIR="$d"
  # jconfig.h (JPEG_LIB_VERSION) lives in the multiarch folder, which no .pc file names: without
  # this the machine's own (Ubuntu's libjpeg-turbo8, the v8 API) pairs with the carried v6.2
  # jpeglib.h and library.
  export CFLAGS="-isystem $d/usr/include/$arch${CFLAGS:+ $CFLAGS}"
  export CXXFLAGS="-isystem $d/usr/include/$arch${CXXFLAGS:+ $CXXFLAGS}"
  export CMAKE_PREFIX_PATH="$d/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PKG_CONFIG_PATH="$d/usr/lib/$arch/pkgconfig:$d/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  # CMake would pick the carried usr/bin/pkg-config first (CMAKE_PREFIX_PATH), which needs
  # the carried libpkgconf: name the machine's own, else a wrapper around the carried one.
  if command -v pkg-config >/dev/null && [ "$(command -v pkg-config)" != "$d/usr/bin/pkg-config" ]; then
    export PKG_CONFIG="$(command -v pkg-config)"
  else
    mkdir -p "$d/wrap"
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$d/usr/lib/$arch" "$d/usr/bin/pkgconf" > "$d/wrap/pkg-config"
    chmod +x "$d/wrap/pkg-config"
    export PKG_CONFIG="$d/wrap/pkg-config"
  fi
  echo "deps: carried build dependencies unpacked in $d (pkg-config: $PKG_CONFIG)"
}
