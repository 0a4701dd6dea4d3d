#!/usr/bin/env python3
"""Makes a large Kineto trace by repeating the steps of a real one.

    python3 bench/doctor/make_large_trace.py SRC.json[.gz] OUT.json --size-mb 1024

Every copy of the source's events is shifted in time by the source's span (so the steps
follow one another), and its ProfilerStep numbers, correlation ids and External ids are
offset so they stay unique. The top-level keys (schemaVersion, deviceProperties,
distributedInfo, ...) are kept. The output is plain JSON (not gzipped), written event by
event, so this script's memory is the source trace, not the output.
"""
import argparse
import gzip
import json
import os
import re
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--size-mb", type=float, default=1024)
    a = ap.parse_args()
    op = gzip.open if open(a.src, "rb").read(2) == b"\x1f\x8b" else open
    with op(a.src, "rt") as f:
        d = json.load(f)
    events = d.pop("traceEvents")
    timed = [e for e in events if "ts" in e]
    t0 = min(float(e["ts"]) for e in timed)
    t1 = max(float(e["ts"]) + float(e.get("dur", 0)) for e in timed)
    span = (t1 - t0) * 1.001
    steps = [int(m.group(1)) for e in events for m in [re.match(r"ProfilerStep#(\d+)", e.get("name", ""))] if m]
    nsteps = (max(steps) - min(steps) + 1) if steps else 1
    max_corr = max([int(e.get("args", {}).get("correlation", 0) or 0) for e in events] + [int(e.get("id", 0)) if isinstance(e.get("id"), int) else 0 for e in events] + [1])
    max_ext = max([int(e.get("args", {}).get("External id", 0) or 0) for e in events] + [1])
    meta = [e for e in events if "ts" not in e]
    body = [json.dumps(e, separators=(", ", ": ")) for e in timed]
    copy_bytes = sum(len(s) + 2 for s in body)
    copies = max(1, int(a.size_mb * 1e6 / copy_bytes + 0.999))
    with open(a.out, "w") as out:
        head = json.dumps(d)[:-1]  # without the closing brace
        out.write(head + (", " if d else "") + '"traceEvents": [\n')
        first = True
        for e in meta:
            out.write(("" if first else ",\n") + json.dumps(e))
            first = False
        for k in range(copies):
            shift = k * span
            for e in timed:
                x = dict(e)
                x["ts"] = e["ts"] + shift if isinstance(e["ts"], float) else int(e["ts"] + round(shift))
                m = re.match(r"ProfilerStep#(\d+)$", x.get("name", ""))
                if m:
                    x["name"] = "ProfilerStep#%d" % (int(m.group(1)) + k * nsteps)
                if k and "args" in x:
                    args = dict(x["args"])
                    if "correlation" in args:
                        args["correlation"] = args["correlation"] + k * max_corr
                    if "External id" in args:
                        args["External id"] = args["External id"] + k * max_ext
                    x["args"] = args
                if k and isinstance(x.get("id"), int):
                    x["id"] = x["id"] + k * max_corr
                out.write(("" if first else ",\n") + json.dumps(x))
                first = False
        out.write("\n]}\n")
    print(f"{a.out}: {copies} copies of {len(timed)} events ({nsteps} steps each), "
          f"{os.path.getsize(a.out) / 1e6:.0f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
