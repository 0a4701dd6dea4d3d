"""Delta Lake read speed: stoker's delta: source vs stoker's plain Parquet reader on the same
data files, and vs deltalake + pyarrow (the Python ecosystem's reader), interleaved.

    .venv/bin/python bench/delta/run_bench.py [--rows 1600] [--files 8] [--repeats 5]

The table: `--files` appends written by deltalake (one Parquet file each) of JPEG bytes
(real JPEGs PIL encodes, ~20-60 KB) with key and label columns, partitioned by split, with
a checkpoint every 4 commits. Each side reads every row's image bytes once per run, in file
order, on one reading thread, with the page cache warm:
  * stoker delta    the pipeline over `delta:<table>` (decode="raw": bytes only, no JPEG
                    decode) — the log replay plus the Parquet dataset per file;
  * stoker parquet  the same pipeline over `parquet:<file>` for each data file in turn,
                    times summed (the plain reader; what delta must reach 90 % of);
  * deltalake+pyarrow  DeltaTable(table).to_pyarrow_dataset().to_batches(columns=["jpg"]),
                    touching every value (binary_length sum).
Prints a table and writes bench/delta/results.json.
"""

import argparse
import io
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
import stoker_testing  # noqa: E402,F401 -- finds the built extension

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import deltalake  # noqa: E402
import stoker  # noqa: E402

ext = stoker._errors._ext


def make_table(path, rows, files):
    if os.path.isdir(os.path.join(path, "_delta_log")):
        return
    from PIL import Image
    rng = np.random.default_rng(0)
    per = rows // files
    for f in range(files):
        jpgs = []
        for i in range(per):
            h, w = 256 + int(rng.integers(0, 120)), 320 + int(rng.integers(0, 160))
            base = rng.integers(0, 255, (h // 8, w // 8, 3), dtype=np.uint8)
            img = np.kron(base, np.ones((8, 8, 1), dtype=np.uint8))
            img = (img + rng.integers(0, 24, img.shape, dtype=np.uint8)).astype(np.uint8)
            b = io.BytesIO()
            Image.fromarray(img).save(b, format="JPEG", quality=85)
            jpgs.append(b.getvalue())
        t = pa.table({"key": [f"f{f}_{i}" for i in range(per)],
                      "label": pa.array([(f * per + i) % 1000 for i in range(per)], pa.int64()),
                      "jpg": pa.array(jpgs, pa.binary()),
                      "split": ["train"] * per})
        deltalake.write_deltalake(path, t, mode="append", partition_by=["split"],
                                  configuration={"delta.checkpointInterval": "4"})


def drain(spec):
    opts = {"data": spec, "decode": "raw", "raw_field": "jpg", "shuffle": False, "threads": 1,
            "batch_size": 64, "prefetch": 2}
    r = ext._cpp_drain(opts, epochs=1, warmup_batches=1)
    # warm-up batch excluded from both samples and seconds
    return r["samples"], r["seconds"]


def stoker_delta(table):
    n, s = drain(f"delta:{table}")
    return n, s


def stoker_parquet(files):
    n = s = 0
    for f in files:
        a, b = drain(f"parquet:{f}")
        n, s = n + a, s + b
    return n, s


def deltalake_pyarrow(table):
    t0 = time.perf_counter()
    ds = deltalake.DeltaTable(table).to_pyarrow_dataset()
    n = total = 0
    for b in ds.to_batches(columns=["jpg"], use_threads=False):
        n += b.num_rows
        total += pc.sum(pc.binary_length(b.column(0))).as_py() or 0
    return n, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1600)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--work", default="/tmp/stoker-bench-delta")
    a = ap.parse_args()
    table = os.path.join(a.work, "table")
    make_table(table, a.rows, a.files)
    snap = ext.delta_snapshot(table)
    files = [os.path.join(table, f["path"]) for f in snap["files"]]
    nbytes = sum(os.path.getsize(f) for f in files)
    sides = {"stoker delta": lambda: stoker_delta(table),
             "stoker parquet": lambda: stoker_parquet(files),
             "deltalake+pyarrow": lambda: deltalake_pyarrow(table)}
    for f in sides.values():  # warm the page cache and the code
        f()
    rates = {k: [] for k in sides}
    names = list(sides)
    for rep in range(a.repeats):
        order = names if rep % 2 == 0 else names[::-1]  # interleaved, alternating order
        for k in order:
            n, s = sides[k]()
            rates[k].append(n / s)
    load = os.getloadavg()
    res = {"rows": a.rows,
           "files": len(files), "table_bytes": nbytes, "version": snap["version"],
           "checkpoint": os.path.basename(snap["checkpoint"]), "loadavg": load,
           "rows_per_s": rates}
    mb_per_row = nbytes / a.rows / 1e6
    print(f"table: {len(files)} files, {nbytes / 1e6:.1f} MB, version {snap['version']}, "
          f"checkpoint {res['checkpoint'] or '-'}; load average {load[0]:.1f}")
    print(f"{'side':22} {'rows/s median':>14} {'min..max':>20} {'MB/s':>8} {'vs parquet':>11}")
    ref = statistics.median(rates["stoker parquet"])
    for k in names:
        m = statistics.median(rates[k])
        ratios = [x / y for x, y in zip(rates[k], rates["stoker parquet"])]
        print(f"{k:22} {m:14.0f} {min(rates[k]):9.0f}..{max(rates[k]):<9.0f} "
              f"{m * mb_per_row:8.0f} {m / ref:6.3f} (pairs {min(ratios):.3f}..{max(ratios):.3f})")
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
