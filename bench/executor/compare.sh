#!/usr/bin/env bash
# `bench pipeline` across several stoker builds in one run: every repeat runs every binary,
# the order rotated each repeat; reports samples/s and CPU-ms per sample (user+sys of the
# whole process, from getrusage of the child) per binary, medians and spread, and ratios to
# the first binary.
#   bench/executor/compare.sh DATA REPEATS LABEL=BIN [LABEL=BIN ...] [-- extra bench flags]
set -euo pipefail
DATA="$1"; REPEATS="$2"; shift 2
bins=(); while [ $# -gt 0 ] && [ "$1" != -- ]; do bins+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
python3 - "$DATA" "$REPEATS" "$@" -- "${bins[@]}" <<'PY'
import json, os, resource, statistics, subprocess, sys, tempfile
args = sys.argv[1:]
data, reps = args[0], int(args[1])
sep = args.index("--")
extra, bins = args[2:sep], [b.split("=", 1) for b in args[sep + 1:]]
for root, _, files in os.walk(data):
    for f in files:
        with open(os.path.join(root, f), "rb") as fh: fh.read()
res = {label: {"rate": [], "cpu": []} for label, _ in bins}
tmp = tempfile.mkdtemp()
print(f"load before: {open('/proc/loadavg').read().split()[:3]}", flush=True)
for r in range(reps):
    order = bins[r % len(bins):] + bins[:r % len(bins)]
    for label, b in order:
        out = os.path.join(tmp, "o.json")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([b, "bench", "pipeline", "--data", data, "--threads", "auto", "--quiet",
                        "--json", out] + extra, check=True, stdout=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        j = json.load(open(out))
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        n = j.get("samples") or j.get("samples_total") or 0
        res[label]["rate"].append(j["samples_per_s"])
        res[label]["cpu"].append(1000 * cpu / n if n else float("nan"))
    print(f"repeat {r + 1}: " + "  ".join(f"{l} {res[l]['rate'][-1]:.0f}/s {res[l]['cpu'][-1]:.3f}ms"
                                          for l, _ in bins), flush=True)
print(f"load after: {open('/proc/loadavg').read().split()[:3]}")
base = bins[0][0]
for label, _ in bins:
    rt, cp = res[label]["rate"], res[label]["cpu"]
    mr, mc = statistics.median(rt), statistics.median(cp)
    print(f"{label:>10}: rate median {mr:7.1f} (min {min(rt):.0f} max {max(rt):.0f}, spread "
          f"{100 * (max(rt) - min(rt)) / mr:4.1f}%)  cpu-ms/sample median {mc:.3f} "
          f"(min {min(cp):.3f} max {max(cp):.3f})  rate/{base} {mr / statistics.median(res[base]['rate']):.3f}"
          f"  cpu/{base} {mc / statistics.median(res[base]['cpu']):.3f}")
PY
