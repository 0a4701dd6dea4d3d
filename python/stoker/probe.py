"""stoker watch's in-process probe (loaded by _boot/sitecustomize.py in the watched job).

When `torch.utils.data.dataloader` is imported, the probe wraps `_BaseDataLoaderIter`'s
`__init__` and `__next__` (every DataLoader iterator, single- and multi-process), and
measures per step what `stoker.watch(loader)` measures: the time blocked in `__next__`
(waiting for data) and the time until the next `__next__` call (the rest of the step),
with CUDA events around `__next__` once CUDA is initialized (the GPU's side of the same
split). It also records the loader's settings (num_workers, pin_memory, prefetch_factor,
persistent_workers, batch size) and its worker PIDs, and, when asked, runs a
torch.profiler window over chosen steps and writes a Chrome trace.

Everything goes to one JSON-lines file per process in $STOKER_PROBE_DIR
(probe-<pid>.jsonl, appended about twice a second and at exit); the job's stdout and stderr
are never written. Record kinds: start, torch, loader, workers, steps, profiler, error,
exit (docs/doctor.md, "the probe"). The probe never raises into the job: a failure is
recorded and the probe (or the failing part) turns itself off.

Standard library only; it does not import the stoker package.
"""

import atexit
import json
import os
import sys
import time

FLUSH_S = 0.5          # seconds between appends to the report file
_EVENT_BACKLOG = 256   # CUDA event pairs kept before resolving them blocking

_probe = None


def _env_int(*names):
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            try:
                return int(v)
            except ValueError:
                pass
    return -1


class _Events:
    """CUDA events around __next__: A when the loop asks, B when it gets the batch; the
    step ends at the next A. elapsed(A, B) is the GPU's idle wait, elapsed(B, A') its step.
    Resolved with query(), so the loop is never blocked (stoker.watch does the same)."""

    def __init__(self, torch):
        self.torch = torch
        self.pending = []
        self.out = []   # (gpu wait s, gpu step s) in step order

    def on_call(self):
        a = self.torch.cuda.Event(enable_timing=True)
        a.record()
        if self.pending and len(self.pending[-1]) == 2:
            self.pending[-1].append(a)
        return a

    def on_return(self, a):
        b = self.torch.cuda.Event(enable_timing=True)
        b.record()
        self.pending.append([a, b])

    def resolve(self, block=False):
        while self.pending and len(self.pending[0]) == 3:
            a, b, a2 = self.pending[0]
            if not block and not a2.query():
                break
            a2.synchronize()
            self.out.append((a.elapsed_time(b) / 1e3, b.elapsed_time(a2) / 1e3))
            self.pending.pop(0)
        if len(self.pending) > _EVENT_BACKLOG:
            self.resolve(block=True)


class _Meter:
    """Per DataLoader: step timings since the last flush, the settings, the worker PIDs."""

    def __init__(self, probe, loader, lid):
        self.probe = probe
        self.id = lid
        self.wait = []       # per closed step: seconds in __next__
        self.compute = []    # ... and seconds until the next __next__ call
        self.open_wait = None
        self.last_ret = None
        self.steps = 0       # batches returned
        self.workers = ()
        self.events = None
        self.gpu_done = 0
        self.gen = probe.gen
        self.settings = self._settings(loader)
        probe.emit({"kind": "loader", "loader": lid, **self.settings})

    @staticmethod
    def _settings(loader):
        out = {}
        for k in ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers",
                  "batch_size", "drop_last"):
            v = getattr(loader, k, None)
            out[k] = v if isinstance(v, (int, float, bool, type(None))) else str(v)
        try:
            out["dataset_len"] = len(loader.dataset)
        except Exception:
            out["dataset_len"] = None
        out["dataset"] = type(getattr(loader, "dataset", None)).__name__
        out["collate_fn"] = getattr(getattr(loader, "collate_fn", None), "__name__", None)
        return out

    def every_64(self, it, t1):
        """The slow path, on the first two steps and every 64th: CUDA events once CUDA is
        initialized, the worker PIDs, the first report as soon as the loop has begun."""
        probe = self.probe
        if probe.t_first is None:
            probe.t_first = t1
        if self.events is None and probe.cuda_ready():
            self.events = _Events(probe.torch)
        ws = getattr(it, "_workers", None)
        if ws:
            pids = tuple(getattr(w, "pid", None) for w in ws)
            if pids != self.workers:
                self.workers = pids
                probe.emit({"kind": "workers", "loader": self.id,
                            "pids": [p for p in pids if p]})
        if self.steps == 2:
            probe.last_flush = t1
            probe.flush()

    def epoch_end(self, t0):
        if self.last_ret is not None:
            self.wait.append(self.open_wait)
            self.compute.append(t0 - self.last_ret)
            self.last_ret = None

    def drain(self, final=False):
        if final and self.events is not None:
            try:
                self.events.resolve(block=True)
            except Exception:
                pass
        if not self.wait and not (self.events and len(self.events.out) > self.gpu_done):
            return None
        rec = {"kind": "steps", "loader": self.id,
               "wait": [round(w, 6) for w in self.wait],
               "compute": [round(c, 6) for c in self.compute]}
        self.wait, self.compute = [], []
        if self.events is not None and len(self.events.out) > self.gpu_done:
            new = self.events.out[self.gpu_done:]
            self.gpu_done = len(self.events.out)
            rec["gpu_wait"] = [round(a, 6) for a, _ in new]
            rec["gpu_step"] = [round(b, 6) for _, b in new]
        return rec


class _Profiler:
    """The on-demand torch.profiler window, driven by the first loader's steps.
    spec: "steps:A:B" (profile steps A..B-1, counted from 0) or "after:S:N" (N steps
    starting at the first step S seconds after the first batch)."""

    def __init__(self, probe, spec):
        self.probe = probe
        self.state = "off"
        self.start = self.end = None
        self.after_s = None
        self.count = 10
        self.prof = None
        self.error = None
        try:
            kind, a, b = spec.split(":")
            if kind == "steps":
                self.start, self.end = int(a), int(b)
                if self.start < 1 or self.end <= self.start:
                    raise ValueError("need 1 <= A < B")
            elif kind == "after":
                self.after_s, self.count = float(a), int(b)
                if self.after_s < 0 or self.count < 1:
                    raise ValueError("need S >= 0 and N >= 1")
            else:
                raise ValueError(f"unknown kind {kind!r}")
            self.state = "waiting"
        except ValueError as e:
            self._fail(f"bad profiler window {spec!r}: {e}")

    def _fail(self, msg):
        self.state = "failed"
        self.error = msg
        self.probe.emit({"kind": "profiler", "ok": False, "error": msg})

    def on_step(self, step, t, t_first):
        """Called before the `step`-th __next__ (0-based) of the driving loader."""
        try:
            if self.state == "waiting":
                if self.after_s is not None and t_first is not None and \
                        t - t_first >= self.after_s:
                    self.start, self.end = step + 1, step + 1 + self.count
                    self.after_s = None
                if self.start is not None and step == self.start - 1:
                    self._begin(step)
            elif self.state == "running":
                self.prof.step()
                if step >= self.end:
                    self._finish()
        except Exception as e:  # noqa: BLE001 - a failing profiler must not stop the job
            self.prof = None
            self._fail(f"torch.profiler failed at step {step}: {type(e).__name__}: {e}")

    def _begin(self, step):
        import torch.profiler as tp
        acts = [tp.ProfilerActivity.CPU]
        if self.probe.cuda_ready():
            acts.append(tp.ProfilerActivity.CUDA)
        n = self.end - self.start
        self.path = os.path.join(self.probe.dir,
                                 f"trace-rank{max(self.probe.rank, 0)}-{os.getpid()}.json")
        self.prof = tp.profile(activities=acts,
                               schedule=tp.schedule(wait=0, warmup=1, active=n, repeat=1),
                               on_trace_ready=self._save)
        self.saved = False
        self.prof.start()
        self.first = step + 1
        self.state = "running"

    def _save(self, prof):
        prof.export_chrome_trace(self.path)
        self.saved = True

    def _finish(self):
        p, self.prof = self.prof, None
        p.stop()
        self.state = "done"
        if not self.saved:
            self._fail("torch.profiler produced no trace")
            return
        self.probe.emit({"kind": "profiler", "ok": True, "trace": self.path,
                         "first_step": self.first, "end_step": self.end})

    def close(self):
        if self.state == "running":
            try:
                if self.prof is not None:
                    self.prof.stop()
            except Exception:
                pass
            self._fail("the job ended inside the profiler window (steps "
                       f"{self.start}:{self.end}); no trace")


class _Probe:
    def __init__(self, errors):
        self.dir = os.environ["STOKER_PROBE_DIR"]
        self.torch = None
        self.meters = {}
        self.lines = []
        self.last_flush = time.perf_counter()
        self.driver = None     # the meter that drives the profiler window
        self.t_first = None
        self.profiler = None
        self._cuda = False
        self.gen = 0           # bumped in a forked child: the parent's meters stop counting
        self._reset_process()
        self.emit({"kind": "start", "pid": self.pid, "ppid": os.getppid(), "rank": self.rank,
                   "local_rank": _env_int("LOCAL_RANK"), "world_size": _env_int("WORLD_SIZE"),
                   "python": sys.version.split()[0], "executable": sys.executable,
                   "argv": sys.argv[:4] if hasattr(sys, "argv") else [],
                   "chained_sitecustomize": os.environ.get("STOKER_PROBE_CHAINED")})
        for e in errors:
            self.emit({"kind": "error", "error": e})
        self.flush()

    def _reset_process(self):
        self.pid = os.getpid()
        self.path = os.path.join(self.dir, f"probe-{self.pid}.jsonl")
        self.rank = _env_int("RANK")

    def after_fork(self):
        # A forked child (a DataLoader worker) starts empty: the parent's pending lines and
        # meters are the parent's to report.
        self._reset_process()
        self.gen += 1
        self.lines = []
        self.meters = {}
        self.driver = None
        self.profiler = None

    def emit(self, rec):
        rec.setdefault("t", round(time.time(), 4))
        self.lines.append(json.dumps(rec, separators=(",", ":")))

    def flush(self, final=False):
        for m in list(self.meters.values()):
            rec = m.drain(final)
            if rec is not None:
                self.emit(rec)
        if not self.lines:
            return
        data = "\n".join(self.lines) + "\n"
        self.lines = []
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data.encode())
            finally:
                os.close(fd)
        except OSError:
            pass  # the watch is gone or its folder removed: measuring is not worth failing for

    def cuda_ready(self):
        if not self._cuda and self.torch is not None:
            try:
                self._cuda = bool(self.torch.cuda.is_initialized())
            except Exception:
                self._cuda = False
        return self._cuda

    def on_torch(self, torch):
        self.torch = torch
        self.emit({"kind": "torch", "version": getattr(torch, "__version__", "?"),
                   "cuda": bool(getattr(torch.version, "cuda", None))})
        spec = os.environ.get("STOKER_PROBE_PROFILE")
        if spec:
            self.profiler = _Profiler(self, spec)

    def meter(self, loader):
        lid = len(self.meters)
        key = id(loader)
        m = self.meters.get(key)
        if m is None:
            m = self.meters[key] = _Meter(self, loader, lid)
        return m

    def exit(self):
        try:
            if self.pid != os.getpid():
                return
            if self.profiler is not None:
                self.profiler.close()
            self.flush(final=True)
            self.emit({"kind": "exit", "steps": sum(m.steps for m in self.meters.values())})
            self.flush()
        except Exception:
            pass


def _patch_dataloader(mod):
    probe = _probe
    base = getattr(mod, "_BaseDataLoaderIter", None)
    if base is None or getattr(base, "_stoker_probe", False):
        return
    import torch
    probe.on_torch(torch)
    orig_init, orig_next = base.__init__, base.__next__
    clock = time.perf_counter

    def __init__(self, loader, *a, **k):
        orig_init(self, loader, *a, **k)
        try:
            self._stoker_meter = probe.meter(loader)
        except Exception as e:  # noqa: BLE001
            probe.emit({"kind": "error", "error": f"probe: {type(e).__name__}: {e}"})

    def __next__(self):
        # The hot path: two clock reads and a few attribute updates per step; everything
        # else (CUDA check, worker PIDs, the report file) every 64 steps or on a timer.
        m = self.__dict__.get("_stoker_meter")
        if m is None or m.gen != probe.gen:  # none, or the parent's (in a forked worker)
            return orig_next(self)
        t0 = clock()
        if m.last_ret is not None:
            m.wait.append(m.open_wait)
            m.compute.append(t0 - m.last_ret)
            m.last_ret = None
        ev = m.events.on_call() if m.events is not None else None
        if probe.profiler is not None and (probe.driver is None or probe.driver is m):
            probe.driver = m
            probe.profiler.on_step(m.steps, t0, probe.t_first)
        try:
            data = orig_next(self)
        except StopIteration:
            m.epoch_end(t0)
            raise
        t1 = clock()
        m.open_wait = t1 - t0
        m.last_ret = t1
        m.steps += 1
        if ev is not None:
            m.events.on_return(ev)
            m.events.resolve()
        if m.steps <= 2 or not m.steps & 63:
            m.every_64(self, t1)
        if t1 - probe.last_flush >= FLUSH_S:
            probe.last_flush = t1
            probe.flush()
        return data

    base.__init__ = __init__
    base.__next__ = __next__
    base._stoker_probe = True


class _Finder:
    """Meta-path hook: patches torch.utils.data.dataloader right after it is executed."""

    target = "torch.utils.data.dataloader"

    def find_spec(self, name, path=None, target=None):
        if name != self.target:
            return None
        for f in sys.meta_path:
            if f is self or not hasattr(f, "find_spec"):
                continue
            spec = f.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return None


class _Loader:
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        try:
            _patch_dataloader(module)
        except Exception as e:  # noqa: BLE001
            _probe.emit({"kind": "error", "error": f"probe could not wrap the DataLoader: "
                                                  f"{type(e).__name__}: {e}"})


def install(errors=()):
    global _probe
    if _probe is not None:
        return
    _probe = _Probe(list(errors))
    mod = sys.modules.get(_Finder.target)
    if mod is not None:
        _patch_dataloader(mod)
    else:
        sys.meta_path.insert(0, _Finder())
    atexit.register(_probe.exit)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_probe.after_fork)
