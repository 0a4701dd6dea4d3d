#!/usr/bin/env python3
"""An independent, deliberately naive recomputation of the key numbers of a trace, used to
justify the expected values in tests/golden/doctor/*.json (not the doctor's own output).

    python3 tests/golden/doctor/oracle.py [--steps-from optimizer|dataloader|annotation:NAME]
                                          TRACE_OR_FOLDER [...]

It loads the whole JSON (fine for test-sized traces), uses the host ProfilerStep windows
as they are (no device-side extension), and merges intervals with plain sorting:

  steps, step_ms      number of ProfilerStep#N and their mean host duration
  dl_frac             time in enumerate(DataLoader)#... inside the steps / step time
  gpu_busy_frac       union of kernels, memcpys and memsets inside the steps / step time
                      (the TensorBoard plugin's "GPU utilization")
  compute_frac        union of non-communication kernels (GPU), or, for CPU-only traces,
                      the step thread's operators outside DataLoader/optimizer spans
  comm_frac           CPU-only: collectives (gloo:/nccl:/c10d::) while the step thread is
                      in no operator; GPU: nccl kernels not overlapped by compute kernels
  pageable_h2d        number of Memcpy HtoD (Pageable -> Device)
  idle_in_h2d_call_frac, idle_in_d2h_call_frac
                      GPU idle (outside DataLoader waits) while the host is inside a
                      cudaMemcpy* call whose GPU copy (same correlation id) is HtoD / DtoH
  idle_in_optimizer_frac
                      GPU idle (outside DataLoader waits) inside Optimizer.* host spans

For a trace without ProfilerStep#N, --steps-from makes the windows by hand: between the ends
of consecutive Optimizer.step spans, or between the starts of consecutive DataLoader
__next__ calls or of the annotation NAME (whose own spans then count as no operator).
"""
import glob
import gzip
import json
import os
import sys


def load(path):
    op = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with op(path, "rt") as f:
        d = json.load(f)
    return d["traceEvents"] if isinstance(d, dict) else d


def merge(iv):
    out = []
    for b, e in sorted(iv):
        if e <= b:
            continue
        if out and b <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return out


def clip(iv, windows):
    tot = 0.0
    for b, e in iv:
        for wb, we in windows:
            lo, hi = max(b, wb), min(e, we)
            if hi > lo:
                tot += hi - lo
    return tot


def subtract(a, b):
    out = []
    for x0, x1 in a:
        cur = x0
        for y0, y1 in b:
            if y1 <= cur or y0 >= x1:
                continue
            if y0 > cur:
                out.append([cur, y0])
            cur = max(cur, y1)
        if cur < x1:
            out.append([cur, x1])
    return out


def marker_windows(ev, how):
    """Windows [(b, e)] and pseudo-step events from what repeats once per iteration."""
    if how == "optimizer":
        m = sorted((e for e in ev if e["name"].startswith("Optimizer.step#")), key=lambda e: e["ts"])
        edges = [e["ts"] + e["dur"] for e in m]
    elif how == "dataloader":
        m = sorted((e for e in ev if e["name"].startswith("enumerate(DataLoader)#")), key=lambda e: e["ts"])
        edges = [e["ts"] for e in m]
    else:
        name = how.split(":", 1)[1]
        m = sorted((e for e in ev if e["name"] == name), key=lambda e: e["ts"])
        edges = [e["ts"] for e in m]
    win = [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]
    steps = [{"tid": m[0]["tid"], "ts": b, "dur": e - b} for b, e in win]
    return win, steps


def analyze(path, steps_from=None):
    ev = [e for e in load(path) if e.get("ph") == "X" and "ts" in e]
    cat = lambda e: (e.get("cat") or "").lower()
    if steps_from:
        win, steps = marker_windows(ev, steps_from)
        marker = steps_from.split(":", 1)[1] if steps_from.startswith("annotation:") else None
        ev = [e for e in ev if e["name"] != marker]
    else:
        steps = [e for e in ev if e["name"].startswith("ProfilerStep#") and cat(e) != "gpu_user_annotation"]
    win = merge([(e["ts"], e["ts"] + e.get("dur", 0)) for e in steps])
    total = sum(e - b for b, e in win)
    step_tid = steps[0]["tid"] if steps else None
    dl = merge([(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("enumerate(DataLoader)#")])
    gpu = [e for e in ev if cat(e) in ("kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset")]
    r = {"path": path, "steps": len(steps), "step_ms": total / max(1, len(steps)) / 1000,
         "dl_frac": clip(dl, win) / total}
    if gpu:
        kern = [e for e in ev if cat(e) == "kernel"]
        comm = merge([(e["ts"], e["ts"] + e["dur"]) for e in kern if e["name"].startswith("nccl") or "ncclKernel" in e["name"] or "ncclDevKernel" in e["name"]])
        comp = merge([(e["ts"], e["ts"] + e["dur"]) for e in kern if not (e["name"].startswith("nccl") or "ncclKernel" in e["name"] or "ncclDevKernel" in e["name"])])
        r["gpu_busy_frac"] = clip(merge([(e["ts"], e["ts"] + e["dur"]) for e in gpu]), win) / total
        r["compute_frac"] = clip(comp, win) / total
        r["comm_frac"] = clip(subtract(comm, comp), win) / total
        r["pageable_h2d"] = sum(1 for e in gpu if "HtoD (Pageable" in e["name"])
        # GPU idle while the host sits in a cudaMemcpy* call, by the direction of the copy
        # that call launched (the GPU copy with the same args.correlation), outside
        # DataLoader waits.
        idle = subtract(merge(win), merge([(e["ts"], e["ts"] + e["dur"]) for e in gpu]))
        idle = subtract(idle, dl)
        kind = {e["args"]["correlation"]: e["name"] for e in gpu
                if cat(e) in ("gpu_memcpy", "memcpy") and "correlation" in e.get("args", {})}
        calls = [e for e in ev if cat(e) in ("cuda_runtime", "runtime")
                 and e["name"].startswith("cudaMemcpy") and "correlation" in e.get("args", {})]
        h2d = merge([(e["ts"], e["ts"] + e["dur"]) for e in calls
                     if "HtoD" in kind.get(e["args"]["correlation"], "")])
        d2h = merge([(e["ts"], e["ts"] + e["dur"]) for e in calls
                     if "DtoH" in kind.get(e["args"]["correlation"], "")])
        r["idle_in_h2d_call_frac"] = clip(subtract(idle, subtract(idle, h2d)), win) / total
        r["idle_in_d2h_call_frac"] = clip(subtract(idle, subtract(idle, subtract(d2h, h2d))), win) / total
        opt = merge([(e["ts"], e["ts"] + e["dur"]) for e in ev
                     if e["name"].startswith("Optimizer.") and cat(e) != "gpu_user_annotation"])
        r["idle_in_optimizer_frac"] = clip(subtract(idle, subtract(idle, opt)), win) / total
    else:
        special = ("ProfilerStep#", "enumerate(DataLoader)#", "Optimizer.", "gloo:", "nccl:", "c10d::", "record_param_comms")
        ops = merge([(e["ts"], e["ts"] + e["dur"]) for e in ev
                     if e.get("tid") == step_tid and cat(e) not in ("python_function", "trace")
                     and not e["name"].startswith(special)])
        opt = merge([(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("Optimizer.")])
        coll = merge([(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith(("gloo:", "nccl:", "c10d::", "record_param_comms"))])
        r["compute_frac"] = clip(subtract(subtract(ops, dl), opt), win) / total
        r["comm_frac"] = clip(subtract(subtract(coll, dl), merge(ops + opt)), win) / total
    return r


def main():
    args = sys.argv[1:]
    steps_from = None
    if args[:1] == ["--steps-from"]:
        steps_from, args = args[1], args[2:]
    for a in args:
        files = sorted(glob.glob(os.path.join(a, "*.json*"))) if os.path.isdir(a) else [a]
        for f in files:
            r = analyze(f, steps_from)
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}))


if __name__ == "__main__":
    main()
