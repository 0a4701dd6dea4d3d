"""stoker.watch: a starvation meter for any DataLoader (or iterable) in a training loop.

    for images, labels in stoker.watch(loader):
        train_step(images, labels)

For each step it measures the time spent waiting in next() (the GPU is starved) and the
time the loop spent elsewhere (the training step). It shows a one-line live status, prints
a summary with the doctor's verdict at the end, and can write JSON.

CUDA runs asynchronously, so host timings can hide GPU time. With sync="event" (the
default when CUDA is initialized) two events are recorded around every next(): A when the
loop asks for data, B when it gets it. The GPU reaches B only after finishing the work
queued before A, so elapsed(A, B) is exactly the time the GPU sat idle waiting for the
batch, and elapsed(B_i, A_i+1) the GPU time of the step. Events are read back a few steps
later with query(); nothing blocks the loop. sync="block" calls torch.cuda.synchronize()
at step boundaries instead (exact host timings, but it serializes the loop); sync="none"
uses host timings only.
"""

import json
import math
import sys
import time

from ._errors import bad_argument
from .verdict import diagnose_steps

_SYNC = ("auto", "event", "block", "none")
_TREND_DELTA = 0.05  # change of the wait share between the halves that counts as a trend


def _batch_len(batch):
    """Samples in a batch: the leading dimension of its first member (a batch is an array,
    or a dict / tuple of per-field arrays or lists)."""
    for _ in range(4):
        shape = getattr(batch, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
        if isinstance(batch, dict) and batch:
            batch = next(iter(batch.values()))
        elif isinstance(batch, (list, tuple)) and batch:
            first = batch[0]
            if isinstance(first, (list, tuple)):
                return len(first)  # a tuple of fields, each a list of samples
            if getattr(first, "shape", None) is None and not isinstance(first, dict):
                return len(batch)  # a list of samples
            batch = first
        else:
            return None
    return None


def _pct(values, q):
    if not values:
        return 0.0
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(math.ceil(q * len(s))) - 1))
    return s[k]


class _CudaEvents:
    """Per-step event pairs, resolved lazily with query()."""

    def __init__(self, torch):
        self.torch = torch
        self.pending = []   # [step index, A, B]; the step is done when the next A completes
        self.results = {}   # step index -> (gpu wait s, gpu step s)

    def on_call(self, step_ended):
        a = self.torch.cuda.Event(enable_timing=True)
        a.record()
        if step_ended is not None and self.pending:
            self.pending[-1].append(a)  # closes the previous step
        return a

    def on_return(self, index, a):
        b = self.torch.cuda.Event(enable_timing=True)
        b.record()
        self.pending.append([index, a, b])

    def resolve(self, block=False):
        keep = []
        for rec in self.pending:
            if len(rec) < 4:
                keep.append(rec)
                continue
            index, a, b, a_next = rec
            if not block and not a_next.query():
                keep.append(rec)
                continue
            a_next.synchronize()
            self.results[index] = (a.elapsed_time(b) / 1e3, b.elapsed_time(a_next) / 1e3)
        self.pending = keep
        if len(self.pending) > 256:  # the GPU is far behind: bound the backlog
            self.resolve(block=True)


class Watch:
    """Wraps an iterable and measures a training loop around it. See `stoker.watch`."""

    def __init__(self, iterable, *, batch_size=None, sync="auto", live=None, interval=1.0,
                 file=None, summary=True, json_path=None, warmup=1, clock=None,
                 name="stoker.watch"):
        if iterable is None or not hasattr(iterable, "__iter__"):
            raise bad_argument(f"watch() needs an iterable (a DataLoader), got {iterable!r}")
        if sync not in _SYNC:
            raise bad_argument(f"sync={sync!r} is not one of {', '.join(map(repr, _SYNC))}")
        if batch_size is not None and (isinstance(batch_size, bool) or
                                       not isinstance(batch_size, int) or batch_size < 1):
            raise bad_argument(f"batch_size must be a positive integer, got {batch_size!r}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise bad_argument(f"warmup must be an integer >= 0, got {warmup!r}")
        if not isinstance(interval, (int, float)) or interval <= 0:
            raise bad_argument(f"interval must be a positive number of seconds, got {interval!r}")
        self.iterable = iterable
        self.batch_size = batch_size
        self.file = file if file is not None else sys.stderr
        self.live = live if live is not None else bool(getattr(self.file, "isatty", lambda: False)())
        self.interval = float(interval)
        self.print_summary = summary
        self.json_path = json_path
        self.warmup = warmup
        self.clock = clock or time.perf_counter
        self.name = name
        self._torch = None
        self.sync = self._resolve_sync(sync)
        self._events = _CudaEvents(self._torch) if self.sync == "event" else None
        self._reset()

    def _resolve_sync(self, sync):
        torch = sys.modules.get("torch")
        cuda_on = False
        if torch is not None:
            try:
                cuda_on = torch.cuda.is_available() and torch.cuda.is_initialized()
            except (AttributeError, RuntimeError):
                cuda_on = False
        if sync == "auto":
            sync = "event" if cuda_on else "none"
        if sync in ("event", "block"):
            if torch is None or not torch.cuda.is_available():
                raise bad_argument(f"sync={sync!r} needs PyTorch with CUDA")
            self._torch = torch
        return sync

    def _reset(self):
        self.wait_s = []      # per step: host time in next()
        self.step_s = []      # per step: host time until the next next() call
        self.samples = []     # per step: samples in the batch (None if unknown)
        self.first_batch_s = None
        self._t_start = None
        self._t_end = None
        self._open_ret = None  # host time the last batch was returned (its step is open)
        self._last_print = None
        self._finished = False

    # -- iteration -------------------------------------------------------------------

    def __len__(self):
        return len(self.iterable)

    def __iter__(self):
        self._reset()
        clock = self.clock
        it = iter(self.iterable)
        self._t_start = clock()
        index = 0
        try:
            while True:
                if self.sync == "block":
                    self._torch.cuda.synchronize()
                t_call = clock()
                a = self._events.on_call(self._open_ret) if self._events else None
                if self._open_ret is not None:
                    self.step_s.append(t_call - self._open_ret)
                    self._open_ret = None
                try:
                    batch = next(it)
                except StopIteration:
                    self._t_end = t_call
                    break
                t_ret = clock()
                if self._events:
                    self._events.on_return(index, a)
                    self._events.resolve()
                self.wait_s.append(t_ret - t_call)
                if self.first_batch_s is None:
                    self.first_batch_s = t_ret - self._t_start
                n = self.batch_size or _batch_len(batch)
                self.samples.append(n)
                self._open_ret = t_ret
                index += 1
                if self.live:
                    self._maybe_print(t_ret)
                yield batch
        finally:
            self.finish()

    def finish(self):
        """Closes the measurement (also at the end of the loop or on break) and prints the
        summary once."""
        if self._finished:
            return
        self._finished = True
        now = self.clock()
        if self._open_ret is not None:  # the loop stopped inside a step (break)
            self.step_s.append(now - self._open_ret)
            self._open_ret = None
            if self._events:
                self._events.on_call(True)
        if self._t_end is None:
            self._t_end = now
        if self._events:
            self._events.resolve(block=True)
        if self.live:
            self.file.write("\r" + " " * 100 + "\r")
        if self.print_summary and self.wait_s:
            self.file.write(self.summary() + "\n")
            self.file.flush()
        if self.json_path:
            with open(self.json_path, "w") as f:
                f.write(self.to_json())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.finish()

    # -- measurements ----------------------------------------------------------------

    def _measured(self):
        """(wait, step, samples) of the complete steps after warm-up, on the GPU timeline
        when CUDA events were resolved for them."""
        n = min(len(self.wait_s), len(self.step_s))
        lo = min(self.warmup, max(0, n - 1)) if n > 1 else 0
        wait, step = list(self.wait_s[lo:n]), list(self.step_s[lo:n])
        basis = "host"
        if self._events and self._events.results:
            basis = "cuda-events"
            for k in range(lo, n):
                r = self._events.results.get(k)
                if r is not None:
                    wait[k - lo], step[k - lo] = r
        return wait, step, self.samples[lo:n], basis, lo

    def _trend(self, wait, step):
        if len(wait) < 4:
            return "n/a", []
        nwin = min(10, len(wait) // 2)
        size = len(wait) / nwin
        fracs = []
        for w in range(nwin):
            a, b = int(w * size), int((w + 1) * size)
            tw, ts = sum(wait[a:b]), sum(step[a:b])
            fracs.append(tw / (tw + ts) if tw + ts > 0 else 0.0)
        half = nwin // 2
        first = sum(fracs[:half]) / half
        last = sum(fracs[nwin - half:]) / half
        if last - first > _TREND_DELTA:
            return "rising", fracs
        if first - last > _TREND_DELTA:
            return "falling", fracs
        return "steady", fracs

    def report(self):
        """Everything measured, as a JSON-serializable dict."""
        wait, step, samples, basis, lo = self._measured()
        total = sum(wait) + sum(step)
        known = [s for s in samples if s is not None]
        n_samples = sum(known) if len(known) == len(samples) and samples else None
        trend, fracs = self._trend(wait, step)
        bs = self.batch_size or (known[0] if known else None)
        verdict = diagnose_steps(wait, step, batch_size=bs)
        frac = sum(wait) / total if total > 0 else 0.0
        return {
            "steps": len(self.wait_s),
            "measured_steps": len(wait),
            "warmup_steps": lo,
            "timing": basis,
            "sync": self.sync,
            "wall_s": (self._t_end or self.clock()) - (self._t_start or 0.0),
            "first_batch_s": self.first_batch_s,
            "wait_frac": frac,
            "wait_s": sum(wait),
            "step_s": sum(step),
            "wait_ms_mean": 1e3 * sum(wait) / len(wait) if wait else 0.0,
            "step_ms_mean": 1e3 * sum(step) / len(step) if step else 0.0,
            "wait_ms_p50": 1e3 * _pct(wait, 0.5),
            "wait_ms_p90": 1e3 * _pct(wait, 0.9),
            "samples": n_samples,
            "samples_per_s": n_samples / total if n_samples is not None and total > 0 else None,
            "steps_per_s": len(wait) / total if total > 0 else None,
            "trend": trend,
            "trend_wait_frac": fracs,
            "verdict": verdict.to_dict(),
        }

    def status_line(self):
        """The one-line live status."""
        r = self.report()
        sps = f"{r['samples_per_s']:.1f} samples/s" if r["samples_per_s"] else (
            f"{r['steps_per_s']:.2f} steps/s" if r["steps_per_s"] else "-")
        return (f"[{self.name}] step {r['steps']}  waiting for data {100 * r['wait_frac']:.1f}%  "
                f"{sps}  trend {r['trend']}  {r['verdict']['kind']}")

    def _maybe_print(self, now):
        if self._last_print is not None and now - self._last_print < self.interval:
            return
        self._last_print = now
        self.file.write("\r" + self.status_line()[:120].ljust(100))
        self.file.flush()

    def summary(self):
        """The end-of-run summary, with the verdict."""
        r = self.report()
        v = r["verdict"]
        head = f"{self.name}: {r['steps']} steps ({r['warmup_steps']} warm-up not counted), " \
               f"{r['wall_s']:.2f} s"
        if r["samples_per_s"]:
            head += f", {r['samples_per_s']:.1f} samples/s"
        lines = [head]
        lines.append(f"  waiting for data: {100 * r['wait_frac']:.1f}% of the time "
                     f"({r['wait_ms_mean']:.1f} ms/step waiting, {r['step_ms_mean']:.1f} ms/step "
                     f"computing; wait p50 {r['wait_ms_p50']:.1f} ms, p90 {r['wait_ms_p90']:.1f} ms;"
                     f" timing: {r['timing']})")
        if r["first_batch_s"] is not None:
            lines.append(f"  first batch after {r['first_batch_s']:.3f} s")
        if r["trend"] != "n/a":
            f = r["trend_wait_frac"]
            lines.append(f"  trend: {r['trend']} (wait share {100 * f[0]:.0f}% at the start, "
                         f"{100 * f[-1]:.0f}% at the end)")
        lines.append(f"  verdict: {v['headline']}")
        lines += [f"    {e}" for e in v["evidence"]]
        lines += [f"    fix: {x}" for x in v["fixes"]]
        if v["source"] == "fallback":
            lines.append("    (verdict from stoker's Python rules: the C++ doctor is not built in)")
        return "\n".join(lines)

    def to_json(self, path=None):
        """The report as JSON; also written to `path` when given."""
        s = json.dumps(self.report(), indent=2)
        if path:
            with open(path, "w") as f:
                f.write(s)
        return s


def watch(iterable, **kwargs):
    """Measures a training loop around `iterable` (a DataLoader, stoker.Pipeline, ...).

    Keyword arguments: batch_size (else inferred from each batch), sync ("auto", "event",
    "block", "none"), live (one-line status, default: when the output is a terminal),
    interval (s between status updates), file (default stderr), summary (print it at the
    end), json_path (write the report there at the end), warmup (steps not counted),
    clock (a function returning seconds; for tests).

    Returns a `Watch`: iterate it in place of the loader; `report()`, `summary()` and
    `to_json()` give the results, during or after the loop.
    """
    return Watch(iterable, **kwargs)
