"""The doctor on a trace recorded on a real GPU with a current PyTorch (H200, torch 2.11, CUDA
13): tests/traces/real/h200-small-convnet. The expected numbers come from the trace itself,
computed here independently of the doctor: the CPU-side ProfilerStep#N windows and the union
of GPU kernel intervals inside them."""
import gzip
import json
import os

import pytest

TRACE = os.path.join(os.path.dirname(__file__), "..", "traces", "real", "h200-small-convnet",
                     "rank0.pt.trace.json.gz")


def union_within(intervals, lo, hi):
    total, cur_b, cur_e = 0.0, None, None
    for b, e in sorted((max(b, lo), min(e, hi)) for b, e in intervals if e > lo and b < hi):
        if cur_e is None or b > cur_e:
            if cur_e is not None:
                total += cur_e - cur_b
            cur_b, cur_e = b, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_b
    return total


def oracle():
    with gzip.open(TRACE, "rt") as fh:
        ev = json.load(fh)["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev
             if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")]
    kernels = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "kernel"]
    step_us = sum(e - b for b, e in steps)
    busy = sum(union_within(kernels, b, e) for b, e in steps)
    return len(steps), step_us / len(steps) / 1e6, busy / step_us


def test_doctor_reads_a_current_kineto_gpu_trace(stoker, tmp_path):
    n, step_s, compute = oracle()
    assert n == 5 and 0.05 < compute < 0.3  # the recording itself: 5 steps, GPU mostly idle
    out = tmp_path / "r.json"
    stoker("doctor", TRACE, "--json", str(out))
    rep = json.loads(out.read_text())
    b = rep["breakdown"]
    assert b["gpu"] and b["steps"] == n
    assert b["step_s"] == pytest.approx(step_s, rel=0.02)
    assert b["compute_frac"] == pytest.approx(compute, abs=0.02)
    # The GPU idles most of each step with no data wait and few syncs: launch overhead.
    assert rep["verdict"]["primary"] == "host_bound", rep["verdict"]
