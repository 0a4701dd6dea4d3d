"""The cost of stoker watch's in-process probe on a training loop (issue 13: < 1 % of step).

Runs the same CPU training job (python/tests/watch_jobs/train.py: a real DataLoader and a
real model step) with and without the probe, interleaved (A B B A ...), and compares the
training loop's time per step. The probe is loaded exactly as `stoker watch` loads it
(python/stoker/_boot on PYTHONPATH, STOKER_PROBE_DIR set); the watch's sampler runs in
another process and is not part of the cost measured here.

    .venv/bin/python bench/watch_probe/run.py [--repeats 7] [--steps 300]

Two workloads: "fast step" (2 ms of PyTorch work per step, num_workers=0: the probe's
per-step cost is the largest share it can be) and "typical" (2 workers, 20 ms steps).
First, the probe's own cost per DataLoader step (a loader with nothing to load). Then
prints per workload the median of the paired ratios probed/unprobed, their spread
(min..max) and the per-step difference in microseconds.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "python", "tests", "watch_jobs", "train.py")
BOOT = os.path.join(ROOT, "python", "stoker", "_boot")

WORKLOADS = {
    "fast step": ["--workers", "0", "--load-ms", "0.02", "--torch-step-ms", "2", "--step-ms", "0"],
    "typical": ["--workers", "2", "--load-ms", "1", "--torch-step-ms", "5", "--step-ms", "15"],
}


def run(args, steps, probed, tmp):
    env = dict(os.environ)
    env.pop("STOKER_PROBE_DIR", None)
    rep = os.path.join(tmp, "r.json")
    if probed:
        d = tempfile.mkdtemp(dir=tmp)
        env["PYTHONPATH"] = BOOT + os.pathsep + env.get("PYTHONPATH", "")
        env["STOKER_PROBE_DIR"] = d
    subprocess.run([sys.executable, TRAIN, *args, "--steps", str(steps), "--report", rep],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if probed:  # the probe really ran: its report has every step
        lines = [json.loads(x) for f in os.listdir(d) for x in open(os.path.join(d, f))]
        n = sum(len(r["wait"]) for r in lines if r["kind"] == "steps")
        assert n == steps, f"probe recorded {n} of {steps} steps"
    with open(rep) as f:
        r = json.load(f)
    return r["loop_s"] / r["steps"]


MICRO = r"""
import sys, time, json, torch
from torch.utils.data import DataLoader
dl = DataLoader(list(range(20000)), batch_size=None, num_workers=0)
best = 1e9
for _ in range(3):
    t = time.perf_counter()
    for _ in dl:
        pass
    best = min(best, (time.perf_counter() - t) / 20000)
print(json.dumps(best))
"""


def micro(probed, tmp):
    env = dict(os.environ)
    env.pop("STOKER_PROBE_DIR", None)
    if probed:
        env["PYTHONPATH"] = BOOT + os.pathsep + env.get("PYTHONPATH", "")
        env["STOKER_PROBE_DIR"] = tempfile.mkdtemp(dir=tmp)
    out = subprocess.run([sys.executable, "-c", MICRO], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--steps", type=int, default=300)
    a = ap.parse_args()
    print(f"probe overhead: {a.repeats} interleaved pairs of {a.steps} steps, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        # The probe's own cost per __next__: a DataLoader over a list (nothing else to do),
        # best of 3 passes of 20,000 steps per process, interleaved processes.
        m = {False: [], True: []}
        for i in range(a.repeats):
            for p in ((False, True) if i % 2 == 0 else (True, False)):
                m[p].append(micro(p, tmp))
        print(f"  per-step cost: {1e6 * min(m[False]):.2f} us unprobed, {1e6 * min(m[True]):.2f} us "
              f"probed (best of {a.repeats} processes): the probe adds "
              f"{1e6 * (min(m[True]) - min(m[False])):.2f} us per step")
        for name, args in WORKLOADS.items():
            ratios, diffs, base = [], [], []
            for i in range(a.repeats):
                order = (False, True) if i % 2 == 0 else (True, False)
                t = {p: run(args, a.steps, p, tmp) for p in order}
                ratios.append(t[True] / t[False])
                diffs.append((t[True] - t[False]) * 1e6)
                base.append(t[False])
            print(f"  {name:10s} step {1e3 * statistics.median(base):.2f} ms unprobed; "
                  f"probed/unprobed median {statistics.median(ratios):.4f} "
                  f"(min {min(ratios):.4f}, max {max(ratios):.4f}); "
                  f"difference median {statistics.median(diffs):+.1f} us/step")
    print(f"  load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
