"""stoker.Pipeline under PyTorch's profiler: each wait for a batch is a profiler range
("stoker.Pipeline.__next__"), which `stoker doctor` reads as data wait. Found on the first GPU
run (H200): a trace of a loop starved by a one-thread stoker.Pipeline was diagnosed host-bound
with 0 % DataLoader wait, because only PyTorch's own DataLoader range was recognised."""
import json

import pytest

import stoker
from stoker_testing import doctor_report, write_image_folder

torch = pytest.importorskip("torch")


def record(path, folder, steps=6):
    p = stoker.Pipeline(folder, output="torch", batch_size=4, image_size=32, threads=1, seed=0)
    model = torch.nn.Linear(3 * 32 * 32, 3)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=steps - 2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=lambda pr: pr.export_chrome_trace(path)) as prof:
        n = 0
        while n < steps:
            for b in p:
                model(b["image"].reshape(len(b["image"]), -1)).sum().backward()
                prof.step()
                n += 1
                if n == steps:
                    break


def test_pipeline_wait_is_a_profiler_range_the_doctor_counts(tmp_path):
    folder = write_image_folder(str(tmp_path / "img"), classes=3, per_class=8, size=(640, 480))
    trace = str(tmp_path / "trace.json")
    record(trace, folder)
    events = json.load(open(trace))
    events = events["traceEvents"] if isinstance(events, dict) else events
    waits = [e for e in events if e.get("name") == stoker.pipeline.PROFILER_RANGE]
    assert len(waits) >= 3, sorted({e.get("name") for e in events})[:40]
    rep = doctor_report(trace, tmp_path)
    text = json.dumps(rep)
    assert "stoker.Pipeline" in text  # the loader is named
    # 640x480 decodes on one thread against a tiny linear step: the wait dominates.
    assert rep["verdict"]["primary"] == "input_bound", (rep["verdict"], rep.get("breakdown"))
