"""stoker.watch: the starvation meter. Time is injected (a fake clock that the fake loader
and the fake training step advance), so the verdicts are deterministic and nothing sleeps."""

import io
import json

import pytest

import stoker


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t

    def advance(self, s):
        self.t += s


class SlowLoader:
    """Yields `n` batches of `batch` samples; producing each costs `cost_s` of fake time
    (or cost_s(i) when a function)."""

    def __init__(self, clock, n, cost_s, batch=32):
        self.clock, self.n, self.cost, self.batch = clock, n, cost_s, batch

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            self.clock.advance(self.cost(i) if callable(self.cost) else self.cost)
            yield [[0.0] * 4] * self.batch, list(range(self.batch))


def run_loop(clock, loader, step_s, **kw):
    out = io.StringIO()
    w = stoker.watch(loader, clock=clock, file=out, **kw)
    steps = 0
    for _ in w:
        clock.advance(step_s)
        steps += 1
    return w, out.getvalue(), steps


def test_slow_loader_is_input_bound():
    clock = FakeClock()
    w, text, steps = run_loop(clock, SlowLoader(clock, 40, 0.050), step_s=0.010)
    r = w.report()
    assert steps == 40 and r["steps"] == 40
    assert r["measured_steps"] == 39  # one warm-up step not counted
    assert r["wait_frac"] == pytest.approx(50 / 60)
    assert r["verdict"]["kind"] == "input_bound"
    assert r["samples_per_s"] == pytest.approx(32 / 0.060)
    assert r["wait_ms_mean"] == pytest.approx(50.0)
    assert r["step_ms_mean"] == pytest.approx(10.0)
    assert r["first_batch_s"] == pytest.approx(0.050)
    assert "Input-bound: 83% of each 60 ms step" in text and "waiting for data: 83.3%" in text


def test_fast_loader_slow_step_is_compute_bound():
    clock = FakeClock()
    w, text, _ = run_loop(clock, SlowLoader(clock, 40, 0.001), step_s=0.100)
    r = w.report()
    assert r["wait_frac"] == pytest.approx(1 / 101)
    assert r["verdict"]["kind"] == "compute_bound"
    assert "Not input-bound" in text


def test_moderate_wait_is_healthy():
    clock = FakeClock()
    w, _, _ = run_loop(clock, SlowLoader(clock, 20, 0.010), step_s=0.090)
    v = w.report()["verdict"]
    assert v["kind"] == "healthy" and v["headline"].startswith("Mostly fed: ")


def test_trend_rising_when_the_loader_slows_down():
    clock = FakeClock()
    loader = SlowLoader(clock, 60, lambda i: 0.001 if i < 30 else 0.080)
    w, text, _ = run_loop(clock, loader, step_s=0.020)
    r = w.report()
    assert r["trend"] == "rising"
    assert r["trend_wait_frac"][0] < 0.1 < 0.7 < r["trend_wait_frac"][-1]
    assert "trend: rising" in text


def test_trend_steady_and_falling():
    clock = FakeClock()
    w, _, _ = run_loop(clock, SlowLoader(clock, 40, 0.02), step_s=0.02)
    assert w.report()["trend"] == "steady"
    clock = FakeClock()
    w, _, _ = run_loop(clock, SlowLoader(clock, 40, lambda i: 0.08 if i < 20 else 0.001), 0.02)
    assert w.report()["trend"] == "falling"


def test_break_closes_the_last_step_and_json(tmp_path):
    clock = FakeClock()
    path = tmp_path / "watch.json"
    out = io.StringIO()
    w = stoker.watch(SlowLoader(clock, 100, 0.03), clock=clock, file=out, json_path=str(path))
    for i, _ in enumerate(w):
        clock.advance(0.01)
        if i == 9:
            break
    w.finish()  # also run by the generator's close; idempotent
    r = json.loads(path.read_text())
    assert r["steps"] == 10
    assert r["measured_steps"] == 9
    assert r["step_s"] == pytest.approx(0.09)
    assert r["verdict"]["kind"] == "input_bound"
    assert out.getvalue().count("stoker.watch: 10 steps") == 1


def test_live_status_line_is_one_line():
    clock = FakeClock()
    out = io.StringIO()
    w = stoker.watch(SlowLoader(clock, 30, 0.05), clock=clock, file=out, live=True,
                     interval=0.5, summary=False)
    for _ in w:
        clock.advance(0.01)
    text = out.getvalue()
    updates = [u for u in text.split("\r") if u.strip()]
    # 30 steps of 60 ms with an update every >= 0.5 s: a handful of updates, not 30.
    assert 2 <= len(updates) <= 5
    assert all("\n" not in u for u in updates)
    assert "waiting for data" in updates[-1] and "samples/s" in updates[-1]


def test_batch_size_inferred_from_dicts_and_given():
    import numpy as np
    clock = FakeClock()

    def gen():
        for _ in range(5):
            clock.advance(0.01)
            yield {"image": np.zeros((8, 3, 2, 2)), "label": np.zeros(8)}

    class L:
        def __iter__(self):
            return gen()

    w, _, _ = run_loop(clock, L(), 0.01)
    assert w.report()["samples"] == 8 * 4
    clock = FakeClock()
    w, _, _ = run_loop(clock, SlowLoader(clock, 5, 0.01), 0.01, batch_size=7)
    assert w.report()["samples"] == 7 * 4


def test_bad_arguments_raise_value_errors():
    with pytest.raises(ValueError, match="iterable"):
        stoker.watch(None)
    with pytest.raises(ValueError, match="sync"):
        stoker.watch([1, 2], sync="sometimes")
    with pytest.raises(ValueError, match="batch_size"):
        stoker.watch([1, 2], batch_size=0)
    with pytest.raises(ValueError, match="warmup"):
        stoker.watch([1, 2], warmup=-1)
    with pytest.raises(ValueError, match="needs PyTorch with CUDA"):
        import torch
        if torch.cuda.is_available():
            pytest.skip("CUDA present")
        stoker.watch([1, 2], sync="event")


def test_wraps_a_real_dataloader():
    torch = pytest.importorskip("torch")
    ds = torch.utils.data.TensorDataset(torch.arange(40.0).reshape(20, 2), torch.arange(20))
    loader = torch.utils.data.DataLoader(ds, batch_size=4)
    out = io.StringIO()
    w = stoker.watch(loader, file=out)
    seen = [y for _, y in w]
    assert torch.cat(seen).tolist() == list(range(20))
    r = w.report()
    assert r["steps"] == 5 and r["samples"] == 16  # warm-up step not counted
    assert r["timing"] == "host" and r["sync"] == "none"
    assert len(w) == 5


def test_diagnose_steps_validates():
    with pytest.raises(ValueError, match="differ in length"):
        stoker.diagnose_steps([0.1], [0.1, 0.2])
    v = stoker.diagnose_steps([0.5, 0.5], [0.1, 0.1])
    assert v.kind == "input_bound" and v.input_frac == pytest.approx(0.5 / 0.6)
    assert v.source in ("doctor", "fallback")
    assert stoker.diagnose_steps([], []).kind == "unknown"


@pytest.mark.skipif(not stoker.verdict.doctor_available(),
                    reason="the C++ doctor is not built into the extension")
def test_fallback_agrees_with_the_cpp_doctor():
    from stoker import verdict
    for wait, comp in [([0.05] * 10, [0.01] * 10), ([0.001] * 5, [0.1] * 5),
                       ([0.01, 0.02, 0.0], [0.09, 0.08, 0.1]), ([0.0] * 3, [0.2] * 3),
                       ([0.02] * 4, [0.08] * 4)]:
        d = verdict.diagnose_steps(wait, comp, batch_size=32, cpus=2)
        f = verdict._fallback(wait, comp, 2)
        assert d.source == "doctor"
        assert (d.kind, d.headline, d.evidence, d.fixes) == (f.kind, f.headline, f.evidence, f.fixes)
        assert d.input_frac == pytest.approx(f.input_frac)
        assert d.confidence == pytest.approx(f.confidence)


# -- CUDA timing, without a GPU: a fake torch.cuda whose events follow a simulated GPU ----

class FakeGpu:
    """A GPU queue on the fake clock: kernels launched by the host run one after the other;
    an event completes when the GPU reaches it (after everything queued before it)."""

    def __init__(self, clock):
        self.clock = clock
        self.busy_until = clock()
        self.syncs = 0

    def launch(self, seconds):
        self.busy_until = max(self.busy_until, self.clock()) + seconds

    def synchronize(self):
        self.syncs += 1
        if self.busy_until > self.clock():
            self.clock.advance(self.busy_until - self.clock())


def fake_torch(gpu):
    import types

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.t = None

        def record(self, stream=None):
            self.t = max(gpu.busy_until, gpu.clock())

        def query(self):
            return self.t is not None and gpu.clock() >= self.t

        def synchronize(self):
            if self.t > gpu.clock():
                gpu.clock.advance(self.t - gpu.clock())

        def elapsed_time(self, end):
            assert self.query() and end.query(), "elapsed_time on an incomplete event"
            return 1e3 * (end.t - self.t)

    cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                 Event=Event, synchronize=gpu.synchronize)
    return types.SimpleNamespace(cuda=cuda, __name__="torch")


def run_gpu_loop(monkeypatch, loader_s, launch_s, gpu_s, steps=30, **kw):
    """A loop whose step launches `gpu_s` of GPU work in `launch_s` of host time."""
    import sys
    clock = FakeClock()
    gpu = FakeGpu(clock)
    monkeypatch.setitem(sys.modules, "torch", fake_torch(gpu))
    w = stoker.watch(SlowLoader(clock, steps, loader_s), clock=clock, file=io.StringIO(), **kw)
    for _ in w:
        gpu.launch(gpu_s)
        clock.advance(launch_s)
    return w.report(), gpu


def test_cuda_events_see_the_gpu_timeline(monkeypatch):
    # The host launches 50 ms of GPU work in 1 ms and then waits 20 ms for data: host timings
    # call that input-bound, but the GPU never idles (it has queued work while the host
    # waits). The events measure the GPU's side: compute-bound, and nothing blocked the loop.
    r, gpu = run_gpu_loop(monkeypatch, loader_s=0.020, launch_s=0.001, gpu_s=0.050)
    assert r["sync"] == "event" and r["timing"] == "cuda-events"  # "auto" with CUDA initialized
    assert r["verdict"]["kind"] == "compute_bound"
    assert r["wait_frac"] < 0.05
    assert r["step_ms_mean"] == pytest.approx(50.0)
    assert gpu.syncs == 0
    r_host, _ = run_gpu_loop(monkeypatch, loader_s=0.020, launch_s=0.001, gpu_s=0.050,
                             sync="none")
    assert r_host["timing"] == "host" and r_host["verdict"]["kind"] == "input_bound"


def test_cuda_events_input_bound_when_the_gpu_idles(monkeypatch):
    # 5 ms of GPU work per step, launched in 1 ms, then 50 ms to get the next batch: the GPU
    # is busy for 4 ms of the host's wait and idles the other 46 ms of each 51 ms step.
    r, _ = run_gpu_loop(monkeypatch, loader_s=0.050, launch_s=0.001, gpu_s=0.005)
    assert r["timing"] == "cuda-events"
    assert r["wait_ms_mean"] == pytest.approx(46.0)
    assert r["step_ms_mean"] == pytest.approx(5.0)
    assert r["verdict"]["kind"] == "input_bound"


def test_sync_block_synchronizes_at_step_boundaries(monkeypatch):
    r, gpu = run_gpu_loop(monkeypatch, loader_s=0.020, launch_s=0.001, gpu_s=0.050,
                          sync="block")
    assert r["timing"] == "host" and r["sync"] == "block"
    assert gpu.syncs >= 30
    assert r["step_ms_mean"] == pytest.approx(50.0)  # the step now includes the GPU work
    assert r["verdict"]["kind"] == "input_bound"  # 20 of 70 ms waiting for data
    assert r["wait_frac"] == pytest.approx(20 / 70)
