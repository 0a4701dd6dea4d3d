#!/usr/bin/env bash
# `bench pipeline` before and after a change, in one run: two stoker binaries alternated
# (ABAB..., the order flipped each repeat), REPEATS runs each, medians and spread.
#   bench/executor/before_after.sh BEFORE_BIN AFTER_BIN DATA [REPEATS] [extra bench flags]
set -euo pipefail
A="$1"; B="$2"; DATA="$3"; REPEATS="${4:-5}"; shift 4 || shift $#
OUT="$(mktemp -d)"
cat "$DATA"/*/* > /dev/null 2>&1 || true  # warm the page cache
for r in $(seq 1 "$REPEATS"); do
  if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for who in $order; do
    bin="$A"; [ "$who" = B ] && bin="$B"
    "$bin" bench pipeline --data "$DATA" --threads auto --epochs 2 --quiet \
      --json "$OUT/$who-$r.json" "$@"
  done
done
python3 - "$OUT" "$REPEATS" <<'PY'
import json, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
res = {}
for who in "AB":
    xs = [json.load(open(f"{out}/{who}-{r}.json"))["samples_per_s"] for r in range(1, n + 1)]
    res[who] = xs
    med = statistics.median(xs)
    print(f"{'before' if who == 'A' else 'after '}: median {med:8.1f} samples/s  "
          f"min {min(xs):8.1f}  max {max(xs):8.1f}  spread {100 * (max(xs) - min(xs)) / med:5.1f}%  "
          f"runs {' '.join(f'{x:.0f}' for x in xs)}")
ratio = statistics.median(res["B"]) / statistics.median(res["A"])
pairs = [b / a for a, b in zip(res["A"], res["B"])]
print(f"after/before: {ratio:.3f} (medians); paired ratios {' '.join(f'{p:.3f}' for p in pairs)}")
PY
