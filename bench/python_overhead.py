#!/usr/bin/env python3
"""Does iterating stoker.Pipeline from Python cost throughput?

Compares, on the same dataset and configuration, in one run, interleaved (A B C D, A B C D,
...) so that machine load drifts hit every variant alike:

  cpp     the engine driven by a C++ loop inside the extension (_stoker._cpp_drain):
          no Python per batch at all
  cli     `stoker bench pipeline --json` (the C++ binary), when it is built
  numpy   `for b in stoker.Pipeline(...)` yielding NumPy arrays
  torch   the same, yielding PyTorch tensors through DLPack

and prints samples/s per repetition, the medians and the ratios against cpp. The target
(issue 4) is numpy/cpp and torch/cpp >= 0.95.

    PYTHONPATH=build-py/python .venv/bin/python bench/python_overhead.py \
        [--data DIR] [--count 600] [--batch 64] [--image-size 160] [--reps 3] [--epochs 1]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def find_stoker_binary():
    for b in ("build-py", "build", "build-release"):
        p = os.path.join(ROOT, b, "stoker")
        if os.path.exists(p):
            return p
    return shutil.which("stoker")


def make_data(out, count):
    exe = find_stoker_binary()
    if exe:
        r = subprocess.run([exe, "gen", "images", "--out", out, "--count", str(count)],
                           capture_output=True)
        if r.returncode == 0:
            return out
    gen = os.path.join(HERE, "pipeline", "gen_images.py")
    subprocess.run([sys.executable, gen, "--out", out, "--count", str(count)], check=True)
    return out


def run_python(stoker, data, kw, epochs, output):
    p = stoker.Pipeline(data, output=output, **kw)
    samples = 0
    seconds = 0.0
    for e in range(epochs):
        p.set_epoch(e)
        it = iter(p)
        first = next(it)  # warm-up batch excluded, as in the C++ drain
        del first
        t0 = time.perf_counter()
        for b in it:
            samples += len(b["label"])
        seconds += time.perf_counter() - t0
    p.close()
    return samples / seconds


def run_cpp(stoker, data, kw, epochs):
    p = stoker.Pipeline(data, **kw)  # only to build the same option dict
    opts = dict(p._options)
    p.close()
    r = stoker._errors._ext._cpp_drain(opts, epochs=epochs, warmup_batches=1)
    return r["samples_per_s"]


def run_cli(exe, data, kw, epochs):
    cmd = [exe, "bench", "pipeline", "--data", data, "--batch", str(kw["batch_size"]),
           "--image-size", str(kw["image_size"]), "--mode", kw["decode"], "--seed",
           str(kw["seed"]), "--epochs", str(epochs), "--json"]
    if kw.get("threads", "auto") != "auto":
        cmd += ["--threads", str(kw["threads"])]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, " ".join(cmd) + ": " + (r.stderr.strip().splitlines() or ["failed"])[-1]
    return json.loads(r.stdout)["samples_per_s"], " ".join(cmd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="image folder (default: generate --count JPEGs)")
    ap.add_argument("--count", type=int, default=600)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=160)
    ap.add_argument("--decode", default="train", choices=["train", "val", "raw"])
    ap.add_argument("--threads", default="auto")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-cli", action="store_true")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    import stoker
    if not stoker.extension_available():
        print(f"stoker's extension is not built: {stoker.extension_error()}", file=sys.stderr)
        return 2
    data = a.data or make_data(tempfile.mkdtemp(prefix="stoker-pyov-"), a.count)
    threads = a.threads if a.threads == "auto" else int(a.threads)
    kw = dict(batch_size=a.batch, image_size=a.image_size, decode=a.decode, seed=1,
              threads=threads)
    have_torch = True
    try:
        import torch  # noqa: F401
    except ImportError:
        have_torch = False
    exe = None if a.no_cli else find_stoker_binary()
    results = {"cpp": [], "numpy": [], "torch": [], "cli": []}
    cli_cmd = None
    for rep in range(a.reps):
        results["cpp"].append(run_cpp(stoker, data, kw, a.epochs))
        if exe:
            v, cli_cmd = run_cli(exe, data, kw, a.epochs)
            if v is None:
                print(f"(cli skipped: {cli_cmd})", file=sys.stderr)
                exe = None
            else:
                results["cli"].append(v)
        results["numpy"].append(run_python(stoker, data, kw, a.epochs, "numpy"))
        if have_torch:
            results["torch"].append(run_python(stoker, data, kw, a.epochs, "torch"))
        print(f"rep {rep}: " + "  ".join(f"{k} {v[-1]:.1f}" for k, v in results.items() if v),
              flush=True)
    med = {k: statistics.median(v) for k, v in results.items() if v}
    print(f"\nconfiguration: {kw}, data {data}, epochs {a.epochs}, reps {a.reps}")
    print(f"median samples/s: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))
    for k in ("numpy", "torch", "cli"):
        if k in med:
            print(f"ratio {k}/cpp: {med[k] / med['cpp']:.3f}")
    if cli_cmd:
        print(f"cli command: {cli_cmd}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": kw, "runs": results, "median": med}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
