#!/usr/bin/env bash
# Before/after of the concat index build at the same load: index_inproc.cc compiled against
# this tree's token_index.{h,cc} and against REV's (the rest of build/'s library is shared),
# run alternately, ROUNDS x BUILDS builds each.
#   bench/tokens/index_ab/index_ab.sh REV PREFIX [ROUNDS] [BUILDS]
# e.g. index_ab.sh ff08d94 /work/tmp-tokens/owt2b_text_document 4 40 (needs build/ made).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
REV=$1 PREFIX=$2 ROUNDS=${3:-4} BUILDS=${4:-40}
B="$ROOT/build"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
mkdir -p "$OUT/old/tokens"
git -C "$ROOT" show "$REV:src/tokens/token_index.h" > "$OUT/old/tokens/token_index.h"
git -C "$ROOT" show "$REV:src/tokens/token_index.cc" > "$OUT/old/tokens/token_index.cc"
# The library's link line, as the stoker binary is linked.
LIBS=$(cd "$B" && ninja -t commands stoker | tail -1 | sed -e 's/.* -o stoker //' -e 's/ && :$//')
FLAGS="-O3 -DNDEBUG -DFMT_SHARED -std=c++20 -I$ROOT/include"
cd "$B"
c++ $FLAGS -I"$ROOT/src" -o "$OUT/new" "$ROOT/bench/tokens/index_ab/index_inproc.cc" $LIBS
c++ $FLAGS -I"$OUT/old" -I"$ROOT/src" -c "$OUT/old/tokens/token_index.cc" -o "$OUT/old.o"
c++ $FLAGS -I"$OUT/old" -I"$ROOT/src" -o "$OUT/$REV" "$ROOT/bench/tokens/index_ab/index_inproc.cc" \
  "$OUT/old.o" $LIBS
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq "$ROUNDS"); do
  "$OUT/new" "$PREFIX" "$OUT/cache" "$BUILDS"
  "$OUT/$REV" "$PREFIX" "$OUT/cache" "$BUILDS"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
