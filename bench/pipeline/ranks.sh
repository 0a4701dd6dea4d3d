#!/usr/bin/env bash
# Ranks that share a node share its cores (issue 15 item 9).
#
# N = 1, 2, 4 ranks of `stoker bench pipeline --rank r --world-size N` started together on
# this node (as torchrun --nproc-per-node N would), against one process using all cores,
# on the same data. Throughput of a group = all ranks' samples / wall time from the first
# start to the last exit (the single process is timed the same way). Also CPU time (user +
# system of all ranks) per sample: on a machine that others load too, a group with more
# threads takes more of the machine from them, so throughput alone flatters oversubscription;
# CPU per sample is the efficiency, the same for a perfect split as for one process.
# Configurations:
#   single     one process, world size 1 (the reference)
#   N=k split  k ranks, default budgets: each finds the others in the pipeline registry
#   N=k env    k ranks with LOCAL_WORLD_SIZE=k and LOCAL_RANK (what torchrun sets)
#   N=k whole  k ranks that each tune for all cores (the behaviour before the split:
#              --cpu-budget <all cores>, registry off)
# Interleaved: every repeat runs every configuration, in a rotated order.
#
#   bench/pipeline/ranks.sh [--count 2000] [--repeats 5] [--epochs 2] [--out DIR]
# Prints a table and writes DIR/ranks.json (default $TMPDIR/stoker-ranks).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STOKER="${STOKER_BIN:-$ROOT/build/stoker}"
COUNT=2000 REPEATS=5 EPOCHS=2 OUT="${TMPDIR:-/tmp}/stoker-ranks" BATCH=32
while [ $# -gt 0 ]; do
  case "$1" in
    --count) COUNT="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --epochs) EPOCHS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
DATA="$OUT/images-$COUNT"
if [ ! -d "$DATA" ]; then
  echo "generating $COUNT images in $DATA" >&2
  "$STOKER" gen images --out "$DATA" --count "$COUNT" >/dev/null
fi
CORES=$(nproc)
REG="$OUT/registry"  # a registry of our own, so other jobs on the machine do not count
RUN="$OUT/run"
mkdir -p "$RUN"

# run_group NAME N MODE -> prints "NAME samples wall_s threads_total"
run_group() {
  local name="$1" n="$2" mode="$3"
  rm -f "$RUN"/*.json "$RUN"/*.cpu
  local t0 t1 pids=()
  t0=$(date +%s.%N)
  for ((r = 0; r < n; r++)); do
    local args=(bench pipeline --data "$DATA" --batch "$BATCH" --epochs "$EPOCHS" --quiet
                --json "$RUN/r$r.json")
    local timed=(/usr/bin/time -f "%U %S" -o "$RUN/r$r.cpu" "$STOKER")
    case "$mode" in
      single) STOKER_PIPELINE_REGISTRY="$REG" "${timed[@]}" "${args[@]}" & ;;
      split) STOKER_PIPELINE_REGISTRY="$REG" "${timed[@]}" "${args[@]}" --rank "$r" --world-size "$n" & ;;
      env) LOCAL_WORLD_SIZE="$n" LOCAL_RANK="$r" STOKER_PIPELINE_REGISTRY="$REG" \
             "${timed[@]}" "${args[@]}" --rank "$r" --world-size "$n" & ;;
      whole) STOKER_PIPELINE_REGISTRY=off "${timed[@]}" "${args[@]}" --rank "$r" --world-size "$n" \
               --cpu-budget "$CORES" & ;;
    esac
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  t1=$(date +%s.%N)
  python3 - "$name" "$t0" "$t1" "$RUN" <<'EOF'
import glob, json, sys
name, t0, t1, run = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
files = [json.load(open(f)) for f in sorted(glob.glob(run + "/r*.json"))]
samples = sum(f["samples"] for f in files)
threads = sum(f["threads"] for f in files)
budgets = ",".join(str(f.get("cpu_budget", "?")) for f in files)
cpu = sum(sum(map(float, open(c).read().split()[-2:])) for c in sorted(glob.glob(run + "/r*.cpu")))
print(name, samples, t1 - t0, threads, budgets, cpu)
EOF
}

CONFIGS=("single 1 single" "N=1 1 split" "N=2-split 2 split" "N=2-env 2 env" "N=2-whole 2 whole"
         "N=4-split 4 split" "N=4-env 4 env" "N=4-whole 4 whole")
echo "warm-up (page cache)" >&2
run_group warmup 1 single >/dev/null
RESULTS="$OUT/ranks.txt"
: > "$RESULTS"
K=${#CONFIGS[@]}
for ((rep = 0; rep < REPEATS; rep++)); do
  for ((i = 0; i < K; i++)); do
    c=(${CONFIGS[$(((i + rep) % K))]})
    line=$(run_group "${c[0]}" "${c[1]}" "${c[2]}")
    echo "rep $rep $line" | tee -a "$RESULTS" >&2
  done
done

python3 - "$RESULTS" "$OUT/ranks.json" "$CORES" "$COUNT" "$EPOCHS" <<'EOF'
import json, statistics, sys
path, out, cores, count, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
rows = {}
for line in open(path):
    _, rep, name, samples, wall, threads, budgets, cpu = line.split()
    rows.setdefault(name, []).append(dict(rep=int(rep), rate=int(samples) / float(wall),
                                          threads=int(threads), budgets=budgets,
                                          cpu_ms=1e3 * float(cpu) / int(samples)))
single = {v["rep"]: v for v in rows["single"]}
summary = {}
print(f"{cores} cores, {count} images, {epochs} epochs; ratios against the single process of "
      f"the same repeat: rate = group samples/s / single's, cpu = single's CPU per sample / "
      f"group's (1.0 = as efficient)")
print(f"{'config':<11} {'samples/s':>10} {'rate':>6} {'min':>6} {'max':>6} {'cpu ms':>7} "
      f"{'cpu':>6} {'min':>6} {'max':>6} {'threads':>8}  cpu budgets")
med = statistics.median
for name, vals in rows.items():
    rate = [v["rate"] / single[v["rep"]]["rate"] for v in vals]
    eff = [single[v["rep"]]["cpu_ms"] / v["cpu_ms"] for v in vals]
    summary[name] = {"samples_per_s_median": med(v["rate"] for v in vals),
                     "rate_ratio_median": med(rate), "rate_ratio_min": min(rate),
                     "rate_ratio_max": max(rate), "rate_ratios": rate,
                     "cpu_ms_per_sample_median": med(v["cpu_ms"] for v in vals),
                     "cpu_ratio_median": med(eff), "cpu_ratio_min": min(eff),
                     "cpu_ratio_max": max(eff), "cpu_ratios": eff,
                     "threads": [v["threads"] for v in vals], "cpu_budgets": vals[-1]["budgets"]}
    print(f"{name:<11} {summary[name]['samples_per_s_median']:>10.1f} {med(rate):>6.3f} "
          f"{min(rate):>6.3f} {max(rate):>6.3f} {summary[name]['cpu_ms_per_sample_median']:>7.3f} "
          f"{med(eff):>6.3f} {min(eff):>6.3f} {max(eff):>6.3f} "
          f"{med(v['threads'] for v in vals):>8.0f}  {vals[-1]['budgets']}")
json.dump({"cores": cores, "count": int(count), "epochs": int(epochs), "configs": summary},
          open(out, "w"), indent=2)
EOF
