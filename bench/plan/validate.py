#!/usr/bin/env python3
"""stoker plan's predictions against measured pipeline runs on this machine.

    python3 bench/plan/validate.py [--stoker build/stoker] [--rounds 3] [--out bench/plan]

Per round and cpuset: a calibration run (four threads, the cores saturated; no latency, no
step) gives the CPU-ms per sample per core, cores x 1000 / its samples/s; then every configuration runs under `taskset` (cores restricted) through
`stoker plan measure` (the stoker pipeline, fused threads, a fault-injecting Env that
sleeps per read, and an emulated training step: the consumer sleeps per batch), and
`stoker plan` predicts the same configuration from the calibration alone. Rounds rotate
the order of the configurations (the machine is shared: interleave, repeat, report the
spread). Writes results.json and results.md (the table for bench/RESULTS.md).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# name, cpus for taskset, threads, read latency ms, step ms per batch
CONFIGS = [
    ("1 core, 1 thread, 10 ms reads", "0", 1, 10, 0),
    ("1 core, 2 threads, 10 ms reads", "0", 2, 10, 0),
    ("1 core, 4 threads, 10 ms reads", "0", 4, 10, 0),
    ("1 core, 2 threads, step = 2.0 x CPU (GPU-bound)", "0", 2, 0, 2.0),
    ("1 core, 2 threads, step = 1.0 x CPU (balanced)", "0", 2, 0, 1.0),
    ("1 core, 8 threads, 20 ms reads, step = 0.8 x CPU", "0", 8, 20, 0.8),
    ("2 cores, 2 threads, 20 ms reads, step = 0.5 x CPU", "0,1", 2, 20, 0.5),
    ("2 cores, 8 threads, 5 ms reads, step = 1.0 x CPU", "0,1", 8, 5, 1.0),
]


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    return p.stdout


def measure(stoker, data, cpus, threads, latency, step_ms, batch, out):
    cmd = ["taskset", "-c", cpus, stoker, "plan", "measure", "--data", data, "--threads",
           str(threads), "--fused", "--prefetch", "2", "--batch", str(batch),
           "--read-latency-ms", str(latency), "--step-ms", f"{step_ms:.3f}", "--json", out,
           "--quiet"]
    run(cmd)
    with open(out) as f:
        return json.load(f), " ".join(cmd)


def predict(stoker, n, sample_kb, cpu_ms, cores, threads, latency, step_ms, batch):
    rate = batch / (step_ms / 1000) if step_ms > 0 else 1e9
    cmd = [stoker, "plan", "--gpus", "1", "--gpus-per-node", "1", "--gpu-samples-per-s",
           f"{rate:.3f}", "--batch", str(batch), "--dataset-samples", str(n), "--sample-kb",
           f"{sample_kb:.3f}", "--cpu-ms", f"{cpu_ms:.4f}", "--cores-per-node", str(cores),
           "--workers-per-node", str(threads), "--prefetch", "2", "--storage", "nvme",
           "--latency-ms", f"{latency:.3f}", "--node-mb-s", "0", "--json", "-", "--quiet"]
    j = json.loads(run(cmd))
    return j, " ".join(cmd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stoker", default=os.path.join(ROOT, "build", "stoker"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--images", type=int, default=480)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--work", default="/tmp/stoker-plan-validate")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "plan"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    data = os.path.join(a.work, "imgs")
    if not os.path.isdir(data):
        run([a.stoker, "gen", "images", "--out", data, "--count", str(a.images), "--seed", "1",
             "--threads", "1"])
    nbytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
    sample_kb = nbytes / a.images / 1e3
    rows = {c[0]: [] for c in CONFIGS}
    calib = []
    commands = {}
    t0 = time.time()
    for rnd in range(a.rounds):
        # Per cpuset: the CPU-ms per sample on the cores we actually get (the machine is
        # shared: a nominal core is a fraction of one), at saturation (4 threads).
        cal_ms = {}
        for cpus in ("0", "0,1"):
            cal, cal_cmd = measure(a.stoker, data, cpus, 4, 0, 0, a.batch,
                                   os.path.join(a.work, "calib.json"))
            cal_ms[cpus] = len(cpus.split(",")) * 1000 / cal["samples_per_s"]
            commands[f"calibration {cpus}"] = cal_cmd
        calib.append(cal_ms)
        order = CONFIGS[rnd % len(CONFIGS):] + CONFIGS[:rnd % len(CONFIGS)]
        for name, cpus, threads, lat, step_x in order:
            cores = len(cpus.split(","))
            cpu_ms = cal_ms[cpus]
            step_ms = step_x * a.batch * cpu_ms
            m, mcmd = measure(a.stoker, data, cpus, threads, lat, step_ms, a.batch,
                              os.path.join(a.work, "m.json"))
            lat_eff = lat * m["reads_per_sample"]
            p, pcmd = predict(a.stoker, a.images, sample_kb, cpu_ms, cores, threads, lat_eff,
                              step_ms, a.batch)
            pred = p["warm"]["cluster_samples_per_s"]
            rows[name].append({"round": rnd, "cpu_ms": cpu_ms, "step_ms": step_ms,
                               "measured": m["samples_per_s"], "predicted": pred,
                               "ratio": pred / m["samples_per_s"],
                               "bottleneck": p["bottleneck"],
                               "reads_per_sample": m["reads_per_sample"]})
            commands[name] = (mcmd, pcmd)
            print(f"[{rnd}] {name}: measured {m['samples_per_s']:.1f}, predicted {pred:.1f} "
                  f"({pred / m['samples_per_s']:.3f}) [{p['bottleneck']}]", flush=True)
    load = os.getloadavg()
    res = {"images": a.images, "sample_kb": sample_kb, "batch": a.batch, "rounds": a.rounds,
           "calibration_cpu_ms": calib, "loadavg_end": load, "wall_s": time.time() - t0,
           "configs": rows, "commands": commands}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=2)
    lines = ["| configuration | predicted samples/s | measured samples/s (median, min-max) | "
             "predicted / measured (median, min-max) | planner's bottleneck |",
             "| --- | ---: | ---: | ---: | --- |"]
    worst = 0
    for name, *_ in CONFIGS:
        r = rows[name]
        ms = [x["measured"] for x in r]
        ps = [x["predicted"] for x in r]
        rs = [x["ratio"] for x in r]
        med = statistics.median(rs)
        worst = max(worst, abs(med - 1))
        lines.append(f"| {name} | {statistics.median(ps):.1f} | {statistics.median(ms):.1f} "
                     f"({min(ms):.1f}-{max(ms):.1f}) | {med:.3f} ({min(rs):.3f}-{max(rs):.3f}) "
                     f"| {r[0]['bottleneck']} |")
    lines.append("")
    cal_txt = "; ".join(f"core 0: {c['0']:.2f}, cores 0,1: {c['0,1']:.2f}" for c in calib)
    lines.append(f"Calibration (4 threads, saturated; CPU-ms per sample per core) by round: "
                 f"{cal_txt}; {a.images} JPEGs of {sample_kb:.1f} KB, batch {a.batch}; "
                 f"{a.rounds} rounds, rotated; load average at the end "
                 f"{load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}; worst median error "
                 f"{100 * worst:.1f}%.")
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
