#!/usr/bin/env python3
"""Does iterating stoker.Pipeline from Python cost throughput?

Compares, on the same dataset and the same engine configuration, in one run:

  cpp     the engine driven by a C++ loop inside the extension (_stoker._cpp_drain):
          no Python per batch at all. The reference.
  numpy   `for b in stoker.Pipeline(...)` yielding NumPy arrays
  torch   the same, yielding PyTorch tensors through DLPack (when torch imports)
  cpp-hold  the same C++ loop keeping each batch alive until the next arrives, as a Python
          `for b in loader` loop does (tells a binding cost from the cost of holding a batch)
  cli     `stoker bench pipeline` (the C++ binary), when it is built. Its samples/s is the
          binary's own figure, which includes start-up: shown for reference, not in the
          ratios.

Robustness on a shared machine:
  * one untimed warm-up run first (page cache, lazy library loads);
  * repetitions interleaved, and the order of the variants rotated every repetition, so
    that load drifts and position effects hit every variant alike;
  * per variant: median, min, max and spread ((max - min) / median) of samples/s;
  * ratios two ways: median(variant) / median(cpp), and the median of the per-repetition
    paired ratios (each variant against the cpp run of the same repetition);
  * CPU time per sample (user + system of the whole process, engine threads included,
    over the whole run: creation, warm-up batch and all epochs), which load on other
    cores disturbs much less than wall time;
  * the CPU the rest of the machine used during each repetition ("others": busy cores from
    /proc/stat minus this process and its children), so that disturbed repetitions can be
    seen; the ratios are also given over the quiet repetitions only (others < 0.25 cores);
  * load average before and after, date, commit, command line: in the output and --json.

The target (issue 4) is numpy/cpp and torch/cpp >= 0.95. A ratio is called conclusive only
when its distance from 0.95 exceeds the spread of the cpp runs.

    PYTHONPATH=build-python/python .venv/bin/python bench/python_overhead.py \
        [--data DIR] [--count 600] [--batch 64] [--image-size 160] [--reps 5] [--epochs 2]
"""

import argparse
import datetime
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGET = 0.95
QUIET_CORES = 0.25  # a repetition is quiet when the rest of the machine used less


def find_stoker_binary(stoker):
    """The CLI next to the extension's build tree, else build-python/, build/, PATH."""
    ext = getattr(stoker._errors._ext, "__file__", None)
    cands = []
    if ext:  # <build>/python/stoker/_stoker*.so -> <build>/stoker
        cands.append(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(ext))),
                                  "stoker"))
    cands += [os.path.join(ROOT, b, "stoker") for b in ("build-python", "build-py", "build")]
    for p in cands:
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return shutil.which("stoker")


def make_data(exe, out, count):
    if exe:
        r = subprocess.run([exe, "gen", "images", "--out", out, "--count", str(count)],
                           capture_output=True)
        if r.returncode == 0:
            return out
    gen = os.path.join(HERE, "pipeline", "gen_images.py")
    subprocess.run([sys.executable, gen, "--out", out, "--count", str(count)], check=True)
    return out


def _cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _busy_seconds():
    """CPU seconds the whole machine spent busy (all processes), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_seconds():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def run_python(stoker, data, kw, epochs, output):
    c0 = _cpu()
    p = stoker.Pipeline(data, output=output, **kw)
    total = p.samples_per_epoch * epochs
    samples = 0
    seconds = 0.0
    for e in range(epochs):
        p.set_epoch(e)
        it = iter(p)
        first = next(it)  # the first batch of each epoch is excluded, as in the C++ drain
        del first
        t0 = time.perf_counter()
        for b in it:
            samples += len(b["label"])
        seconds += time.perf_counter() - t0
    p.close()
    cpu = _cpu() - c0
    return {"samples_per_s": samples / seconds, "cpu_us_per_sample": 1e6 * cpu / total}


def run_cpp(stoker, data, kw, epochs, hold=False):
    c0 = _cpu()
    p = stoker.Pipeline(data, **kw)  # builds the very option dict the Python variants use
    opts = dict(p._options)
    total = p.samples_per_epoch * epochs
    p.close()
    r = stoker._errors._ext._cpp_drain(opts, epochs=epochs, warmup_batches=1,
                                       hold_previous=hold)
    cpu = _cpu() - c0
    return {"samples_per_s": r["samples_per_s"], "cpu_us_per_sample": 1e6 * cpu / total}


def cli_command(exe, data, kw, epochs, json_path):
    cmd = [exe, "bench", "pipeline", "--data", data, "--batch", str(kw["batch_size"]),
           "--image-size", str(kw["image_size"]), "--mode", kw["decode"], "--seed",
           str(kw["seed"]), "--epochs", str(epochs), "--json", json_path, "--quiet"]
    if kw.get("threads", "auto") != "auto":
        cmd += ["--threads", str(kw["threads"])]
    return cmd


def run_cli(cmd, json_path):
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(" ".join(cmd) + ": " + (r.stderr.strip().splitlines() or
                                                   ["failed"])[-1])
    with open(json_path) as f:
        j = json.load(f)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return {"samples_per_s": j["samples_per_s"],
            "cpu_us_per_sample": 1e6 * cpu / max(1, j["samples"])}


def describe(values):
    med = statistics.median(values)
    return {"median": med, "min": min(values), "max": max(values),
            "spread": (max(values) - min(values)) / med if med > 0 else None}


def git_commit():
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--",
                                "src", "python", "bench/python_overhead.py"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("+local changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="image folder (default: generate --count JPEGs)")
    ap.add_argument("--count", type=int, default=600)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=160)
    ap.add_argument("--decode", default="train", choices=["train", "val"])
    ap.add_argument("--threads", default="auto", help="engine threads: auto or N")
    ap.add_argument("--epochs", type=int, default=2, help="epochs per timed run")
    ap.add_argument("--reps", type=int, default=5, help="interleaved repetitions")
    ap.add_argument("--no-cli", action="store_true", help="leave out `stoker bench pipeline`")
    ap.add_argument("--no-torch", action="store_true", help="leave out the torch variant")
    ap.add_argument("--no-hold", action="store_true", help="leave out the cpp-hold variant")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    if a.reps < 1 or a.epochs < 1 or a.batch < 1:
        ap.error("--reps, --epochs and --batch must be >= 1")
    import stoker
    if not stoker.extension_available():
        print(f"stoker's extension is not built: {stoker.extension_error()}", file=sys.stderr)
        return 2
    exe = find_stoker_binary(stoker)
    tmp = tempfile.mkdtemp(prefix="stoker-pyov-")
    data = a.data or make_data(exe, os.path.join(tmp, "images"), a.count)
    threads = a.threads if a.threads == "auto" else int(a.threads)
    kw = dict(batch_size=a.batch, image_size=a.image_size, decode=a.decode, seed=1,
              threads=threads)
    variants = ["cpp", "numpy"] + ([] if a.no_hold else ["cpp-hold"])
    if not a.no_torch:
        try:
            import torch  # noqa: F401
            variants.append("torch")
        except ImportError:
            print("(torch variant skipped: torch does not import)", file=sys.stderr)
    cli_json = os.path.join(tmp, "cli.json")
    cmd = None
    if exe and not a.no_cli:
        cmd = cli_command(exe, data, kw, a.epochs, cli_json)
        variants.append("cli")

    def measure(v):
        if v == "cpp":
            return run_cpp(stoker, data, kw, a.epochs)
        if v == "cpp-hold":
            return run_cpp(stoker, data, kw, a.epochs, hold=True)
        if v == "cli":
            return run_cli(cmd, cli_json)
        return run_python(stoker, data, kw, a.epochs, v)

    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    print(f"{started:%Y-%m-%d %H:%M} UTC, commit {git_commit()}, load average "
          f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"{os.cpu_count()} CPUs", flush=True)
    print(f"configuration: {kw}, epochs per run {a.epochs}, data {data}", flush=True)
    for v in list(variants):  # warm-up, untimed: page cache, lazy loads
        try:
            measure(v)
        except RuntimeError as e:
            print(f"({v} left out: {e})", file=sys.stderr)
            variants.remove(v)
    runs = {v: [] for v in variants}
    others = []  # per repetition: cores the rest of the machine kept busy
    for rep in range(a.reps):
        k = rep % len(variants)
        order = variants[k:] + variants[:k]
        b0, o0, t0 = _busy_seconds(), _own_seconds(), time.perf_counter()
        for v in order:
            runs[v].append(measure(v))
        b1, o1, t1 = _busy_seconds(), _own_seconds(), time.perf_counter()
        others.append(max(0.0, ((b1 - b0) - (o1 - o0)) / (t1 - t0)) if b0 is not None else None)
        print(f"rep {rep} ({' '.join(order)}): " + "  ".join(
            f"{v} {runs[v][-1]['samples_per_s']:.1f}/s {runs[v][-1]['cpu_us_per_sample']:.0f}us"
            for v in variants) + (f"  [others {others[-1]:.2f} cores]"
                                  if others[-1] is not None else ""), flush=True)
    load_after = os.getloadavg()

    summary = {}
    for v in variants:
        summary[v] = {"samples_per_s": describe([r["samples_per_s"] for r in runs[v]]),
                      "cpu_us_per_sample": describe([r["cpu_us_per_sample"] for r in runs[v]])}
    print(f"\n{'variant':<8} {'median/s':>9} {'min':>8} {'max':>8} {'spread':>7} "
          f"{'cpu us/sample':>14}")
    for v in variants:
        s, c = summary[v]["samples_per_s"], summary[v]["cpu_us_per_sample"]
        print(f"{v:<8} {s['median']:>9.1f} {s['min']:>8.1f} {s['max']:>8.1f} "
              f"{100 * s['spread']:>6.1f}% {c['median']:>14.0f}")
    noise = summary["cpp"]["samples_per_s"]["spread"]
    ratios = {}
    for v in ("numpy", "torch"):
        if v not in runs:
            continue
        of_medians = summary[v]["samples_per_s"]["median"] / summary["cpp"]["samples_per_s"][
            "median"]
        paired = statistics.median(r["samples_per_s"] / c["samples_per_s"]
                                   for r, c in zip(runs[v], runs["cpp"]))
        cpu = summary[v]["cpu_us_per_sample"]["median"] / summary["cpp"]["cpu_us_per_sample"][
            "median"]
        conclusive = abs(paired - TARGET) > noise
        verdict = ("met" if paired >= TARGET else "missed") if conclusive else "inconclusive"
        quiet = [i for i, o in enumerate(others) if o is not None and o < QUIET_CORES]
        quiet_paired = (statistics.median(runs[v][i]["samples_per_s"] /
                                          runs["cpp"][i]["samples_per_s"] for i in quiet)
                        if quiet else None)
        ratios[v] = {"of_medians": of_medians, "paired_median": paired, "cpu_per_sample": cpu,
                     "quiet_reps": quiet, "quiet_paired_median": quiet_paired,
                     "target": TARGET, "verdict": verdict}
        print(f"ratio {v}/cpp: {of_medians:.3f} (medians), {paired:.3f} (paired median); "
              f"CPU per sample {cpu:.3f}x cpp; target >= {TARGET}: {verdict} "
              f"(cpp spread {100 * noise:.1f}%)")
        if quiet_paired is not None:
            print(f"  over the {len(quiet)} quiet repetitions (others < {QUIET_CORES} cores): "
                  f"paired median {quiet_paired:.3f}")
    if "cpp-hold" in runs:
        for v in ("numpy", "torch"):
            if v in runs:
                pr = statistics.median(r["samples_per_s"] / c["samples_per_s"]
                                       for r, c in zip(runs[v], runs["cpp-hold"]))
                ratios[v]["paired_median_vs_cpp_hold"] = pr
                print(f"ratio {v}/cpp-hold: {pr:.3f} (paired median; both hold the previous "
                      f"batch while waiting)")
    print(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    if cmd:
        print(f"cli command: {' '.join(cmd)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"date_utc": started.isoformat(timespec="seconds"),
                       "commit": git_commit(), "command": [sys.executable] + sys.argv,
                       "load_before": load_before, "load_after": load_after,
                       "cpus": os.cpu_count(), "config": kw, "epochs": a.epochs,
                       "reps": a.reps, "data": data, "cli_command": cmd, "runs": runs,
                       "others_cores": others, "summary": summary, "ratios": ratios}, f, indent=2)
    shutil.rmtree(tmp, ignore_errors=True)  # generated images and the CLI's JSON
    return 0


if __name__ == "__main__":
    sys.exit(main())
