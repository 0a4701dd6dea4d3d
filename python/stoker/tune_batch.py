"""stoker.tune_batch_size: the batch size at the throughput knee, on your own model.

    r = stoker.tune_batch_size(step_fn, make_batch, time_budget=120)
    print(r)              # table, chart, largest fit, knee, headroom, LR and pipeline advice
    r.html("bs.html")     # the table and an SVG chart (samples/s and memory vs batch size)

`make_batch(n)` returns one batch of n samples (on the device the step uses); `step_fn(batch)`
runs one full training step on it (forward, backward, optimizer step). The sweep doubles
the batch size from `start` until a size does not fit (out of memory, or over the memory
budget), then bisects between the last size that fit and the first that did not, all inside
`time_budget` seconds. Each size runs `warmup` steps (excluded: allocator growth, cuDNN
autotuning, lazy init) and then at least `steps` timed steps (the median is used).

Per size it records step time, samples/s and peak memory: on CUDA
torch.cuda.max_memory_allocated and max_memory_reserved (after reset_peak_memory_stats);
on CPU the larger of the process's peak resident set (VmHWM, reset per try through
/proc/self/clear_refs) above the resident set before the try, and glibc's exact heap bytes
in use (mallinfo2) above their value before the try, sampled after make_batch and after
every step; glibc's mmap threshold is fixed so that freed tensors go back to the system.

Memory budget: on CUDA `memory_fraction` (or `memory_limit` bytes) is applied with
torch.cuda.set_per_process_memory_fraction, so the allocator itself raises OOM there; on
CPU the budget is host memory (`memory_limit` bytes, or `memory_fraction` of MemAvailable):
a size whose measured peak exceeds it does not fit. A real OOM (torch.cuda.OutOfMemoryError,
a RuntimeError whose message says "out of memory", the CPU allocator's "can't allocate
memory", the cuDNN/cuBLAS allocation failures, MemoryError) is caught by type and message;
the exception's frames are dropped, the garbage collector and the CUDA cache run, and the
memory in use must come back to where it was before the try, or the sweep stops there.

The answer: the largest size that fits, the knee (the smallest measured size whose
samples/s is within `tolerance` of the best, DeepSpeed's 5 % rule, refined by bisection
below it while time allows), the memory headroom left at each, gradient accumulation for
a target global batch, the learning-rate change the common rules suggest, and whether the
input pipeline can feed the knee.
"""

import ctypes
import dataclasses
import gc
import json
import math
import os
import re
import statistics
import sys
import time

from ._errors import InvalidArgumentError

M_MMAP_THRESHOLD = -3

OOM_MESSAGES = (
    "out of memory",                       # CUDA caching allocator, HIP, XPU
    "can't allocate memory",               # DefaultCPUAllocator
    "cudnn_status_not_supported",          # cuDNN failing to get workspace (Lightning)
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "mps backend out of memory",
)

SGD_LIKE = ("sgd", "lars", "sgdw", "nesterov", "momentum")
ADAM_LIKE = ("adam", "adamw", "lamb", "adafactor", "rmsprop", "adagrad", "adadelta", "lion",
             "nadam", "radam", "sophia", "shampoo")


class StepError(InvalidArgumentError):
    """The training step failed for a reason other than memory, or nothing fits."""


def is_oom(exc):
    """True when `exc` is an out-of-memory error (by type, then by message)."""
    if isinstance(exc, MemoryError):
        return True
    try:
        import torch
        oom_t = getattr(torch.cuda, "OutOfMemoryError", None)
        if oom_t is not None and isinstance(exc, oom_t):
            return True
    except ImportError:  # pragma: no cover - torch is required for the sweep anyway
        pass
    if isinstance(exc, RuntimeError):
        msg = str(exc).lower()
        return any(m in msg for m in OOM_MESSAGES)
    return False


# -- memory probes ---------------------------------------------------------------------

def _status_kb(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _mem_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]


def _heap_reader():
    """glibc's exact count of heap bytes in use (mallinfo2, glibc >= 2.33), or None."""
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _Mallinfo2
    fn.argtypes = []

    def read():
        m = fn()
        return m.uordblks + m.hblkhd  # allocated arena chunks + mmapped blocks
    return read


class _HostMemory:
    """Peak host memory of this process above a baseline, per try.

    Two measures, the larger wins: the peak resident set (VmHWM, reset per try through
    /proc/self/clear_refs) above the resident set at the start, which sees temporaries a
    step frees again but is approximate (recent kernels count it per CPU, tens of pages
    off, and concurrent frees elsewhere mask growth); and glibc's exact heap bytes in use
    (mallinfo2: arena chunks in use + mmapped blocks), sampled after make_batch and after
    every step, which sees the batch and what a step keeps, to the byte.
    """

    name = "host"

    def __init__(self):
        self.can_reset = False
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.can_reset = True
        except OSError:
            pass
        self.total = _mem_available()
        self.heap = _heap_reader()
        try:  # freed tensors go back to the system, so the resident set tracks the tensors
            ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 1 << 16)
        except (OSError, AttributeError):
            pass

    def in_use(self):
        return _status_kb("VmRSS") or 0

    def start(self):
        if self.can_reset:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        self.base = self.in_use()
        self.heap_base = self.heap() if self.heap else 0
        self.heap_peak = self.heap_base

    def sample(self):
        if self.heap:
            self.heap_peak = max(self.heap_peak, self.heap())

    def peak(self):
        self.sample()
        hwm = _status_kb("VmHWM") or 0
        p = max(0, hwm - self.base, self.heap_peak - self.heap_base)
        return p, p

    def clear(self, collect=False):
        if collect:  # a full collection costs ~0.1-0.3 s with torch loaded: after OOMs only
            gc.collect()


class _CudaMemory:
    name = "cuda"

    def __init__(self, torch, device):
        self.torch = torch
        self.device = device
        self.total = torch.cuda.get_device_properties(device).total_memory

    def in_use(self):
        return self.torch.cuda.memory_allocated(self.device)

    def start(self):
        self.torch.cuda.synchronize(self.device)
        self.torch.cuda.reset_peak_memory_stats(self.device)
        self.base = 0

    def sample(self):  # the allocator keeps its own peak
        pass

    def peak(self):
        t = self.torch.cuda
        return t.max_memory_allocated(self.device), t.max_memory_reserved(self.device)

    def clear(self, collect=False):
        if collect:
            gc.collect()
        self.torch.cuda.empty_cache()  # each try's reserved peak starts from what is in use


# -- results ---------------------------------------------------------------------------

@dataclasses.dataclass
class Trial:
    batch_size: int
    fits: bool
    reason: str = ""                 # "", "out of memory", "over the memory budget"
    step_s: float = 0.0              # median of the timed steps
    samples_per_s: float = 0.0
    steps: int = 0
    peak_bytes: int = 0              # allocated (CUDA) / resident above baseline (CPU)
    reserved_bytes: int = 0          # CUDA caching allocator reserved; CPU = peak
    leaked_bytes: int = 0            # memory in use after the try minus before it
    seconds: float = 0.0             # wall time the try took
    phase: str = "double"            # double, bisect, knee

    def to_dict(self):
        return dataclasses.asdict(self)


def _mb(b):
    return f"{b / 2**20:.0f} MiB" if b < 2**30 * 10 else f"{b / 2**30:.1f} GiB"


class BatchSizeResult:
    def __init__(self, trials, *, device, budget_bytes, budget_source, total_bytes, tolerance,
                 time_budget, elapsed, stopped, notes, largest_fit, knee, advice, feed):
        self.trials = trials
        self.device = device
        self.budget_bytes = budget_bytes
        self.budget_source = budget_source
        self.total_bytes = total_bytes
        self.tolerance = tolerance
        self.time_budget = time_budget
        self.elapsed = elapsed
        self.stopped = stopped            # why the sweep ended
        self.notes = notes
        self.largest_fit = largest_fit    # Trial or None
        self.knee = knee                  # Trial or None
        self.advice = advice              # list of strings (accumulation, LR)
        self.feed = feed                  # dict or None: pipeline rate vs the knee's need

    @property
    def tried(self):
        return len(self.trials)

    @property
    def best(self):
        fit = [t for t in self.trials if t.fits]
        return max(fit, key=lambda t: t.samples_per_s) if fit else None

    def headroom(self, trial):
        """Fraction of the budget left at `trial`'s peak (reserved on CUDA)."""
        if trial is None or not self.budget_bytes:
            return None
        return 1.0 - trial.reserved_bytes / self.budget_bytes

    def table(self):
        rows = [f"{'batch':>7} {'fits':>5} {'step ms':>9} {'samples/s':>11} {'peak':>10} "
                f"{'reserved':>10} {'phase':>7}"]
        for t in sorted(self.trials, key=lambda t: t.batch_size):
            mark = ""
            if t is self.knee:
                mark += "  <- knee"
            if t is self.largest_fit:
                mark += "  <- largest fit"
            if t.fits:
                rows.append(f"{t.batch_size:>7} {'yes':>5} {1e3 * t.step_s:>9.2f} "
                            f"{t.samples_per_s:>11.1f} {_mb(t.peak_bytes):>10} "
                            f"{_mb(t.reserved_bytes):>10} {t.phase:>7}{mark}")
            else:
                rows.append(f"{t.batch_size:>7} {'no':>5} {t.reason:>43} {t.phase:>7}")
        return "\n".join(rows)

    def chart(self, width=40):
        fit = sorted((t for t in self.trials if t.fits), key=lambda t: t.batch_size)
        if not fit:
            return ""
        top = max(t.samples_per_s for t in fit) or 1
        return "\n".join(f"{t.batch_size:>7} {'#' * max(1, round(width * t.samples_per_s / top)):<{width}}"
                         f" {t.samples_per_s:.0f}/s" for t in fit)

    def summary(self):
        lines = []
        budget = (f"{_mb(self.budget_bytes)} ({self.budget_source})" if self.budget_bytes
                  else "none")
        lines.append(f"stoker tune batch-size on {self.device}: {self.tried} sizes tried in "
                     f"{self.elapsed:.1f} s of a {self.time_budget:.0f} s budget; memory "
                     f"budget {budget}; stopped: {self.stopped}")
        if self.largest_fit:
            h = self.headroom(self.largest_fit)
            lines.append(f"largest size that fits: {self.largest_fit.batch_size} "
                         f"({self.largest_fit.samples_per_s:.1f} samples/s, peak "
                         f"{_mb(self.largest_fit.reserved_bytes)}"
                         + (f", headroom {100 * h:.0f}%" if h is not None else "") + ")")
        if self.knee:
            h = self.headroom(self.knee)
            best = self.best
            lines.append(f"knee: {self.knee.batch_size} ({self.knee.samples_per_s:.1f} "
                         f"samples/s, {100 * self.knee.samples_per_s / best.samples_per_s:.0f}% "
                         f"of the best, {best.samples_per_s:.1f} at {best.batch_size}; "
                         f"within {100 * self.tolerance:.0f}%"
                         + (f"; headroom {100 * h:.0f}%" if h is not None else "") + ")")
        for a in self.advice:
            lines.append(a)
        if self.feed:
            lines.append(self.feed["text"])
        for n in self.notes:
            lines.append(f"note: {n}")
        return "\n".join(lines)

    def __str__(self):
        return "\n".join([self.table(), "", self.chart(), "", self.summary()])

    def to_dict(self):
        return {
            "device": self.device,
            "tried": self.tried,
            "elapsed_s": self.elapsed,
            "time_budget_s": self.time_budget,
            "stopped": self.stopped,
            "budget_bytes": self.budget_bytes,
            "budget_source": self.budget_source,
            "total_bytes": self.total_bytes,
            "tolerance": self.tolerance,
            "largest_fit": self.largest_fit.batch_size if self.largest_fit else None,
            "knee": self.knee.batch_size if self.knee else None,
            "headroom_largest": self.headroom(self.largest_fit),
            "headroom_knee": self.headroom(self.knee),
            "best_samples_per_s": self.best.samples_per_s if self.best else None,
            "advice": self.advice,
            "feed": self.feed,
            "notes": self.notes,
            "trials": [t.to_dict() for t in sorted(self.trials, key=lambda t: t.batch_size)],
        }

    def to_json(self, path=None):
        s = json.dumps(self.to_dict(), indent=2)
        if path:
            with open(path, "w") as f:
                f.write(s + "\n")
        return s

    def svg(self):
        """Samples/s (line, left axis) and peak memory (bars, right axis) against batch
        size (log2 axis); sizes that did not fit are red marks at the bottom."""
        W, H, L, R, T, B = 640, 300, 70, 70, 30, 46
        ts = sorted(self.trials, key=lambda t: t.batch_size)
        if not ts:
            return ""
        xs = [math.log2(t.batch_size) for t in ts]
        x0, x1 = min(xs), max(xs)
        x1 = x1 if x1 > x0 else x0 + 1
        ymax = max([t.samples_per_s for t in ts] + [1])
        mmax = max([t.reserved_bytes for t in ts] + [self.budget_bytes or 0, 1])

        def px(bs):
            return L + (math.log2(bs) - x0) / (x1 - x0) * (W - L - R)

        def py(v, top):
            return T + (1 - v / top) * (H - T - B)

        o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
             f'font-family="sans-serif" font-size="11">',
             f'<text x="{L}" y="16" font-size="13" font-weight="bold">samples/s and peak '
             f'memory vs batch size</text>',
             f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="#888"/>',
             f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="#888"/>']
        for i in range(5):
            v, m = ymax * i / 4, mmax * i / 4
            o.append(f'<text x="{L - 4}" y="{py(v, ymax) + 4:.0f}" text-anchor="end" '
                     f'fill="#1f77b4">{v:.0f}</text>')
            o.append(f'<text x="{W - R + 4}" y="{py(m, mmax) + 4:.0f}" fill="#888">'
                     f'{m / 2**20:.0f}M</text>')
        bw = max(3, (W - L - R) / max(1, len(ts)) / 3)
        for t in ts:
            x = px(t.batch_size)
            if t.fits:
                y = py(t.reserved_bytes, mmax)
                o.append(f'<rect x="{x - bw / 2:.1f}" y="{y:.1f}" width="{bw:.1f}" '
                         f'height="{H - B - y:.1f}" fill="#bbb"/>')
            else:
                o.append(f'<text x="{x:.1f}" y="{H - B - 4}" text-anchor="middle" '
                         f'fill="#d62728">x</text>')
            o.append(f'<text x="{x:.1f}" y="{H - B + 14}" text-anchor="middle">{t.batch_size}</text>')
        if self.budget_bytes:
            y = py(self.budget_bytes, mmax)
            o.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#d62728" '
                     f'stroke-dasharray="4,3"/><text x="{L + 4}" y="{y - 3:.1f}" fill="#d62728">'
                     f'memory budget</text>')
        pts = " ".join(f"{px(t.batch_size):.1f},{py(t.samples_per_s, ymax):.1f}"
                       for t in ts if t.fits)
        o.append(f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{pts}"/>')
        if self.knee:
            o.append(f'<circle cx="{px(self.knee.batch_size):.1f}" '
                     f'cy="{py(self.knee.samples_per_s, ymax):.1f}" r="5" fill="none" '
                     f'stroke="#2ca02c" stroke-width="2"/>')
        o.append(f'<text x="{(L + W - R) / 2}" y="{H - 8}" text-anchor="middle">batch size '
                 f'(green circle: knee; grey bars: peak memory; red x: did not fit)</text>')
        o.append("</svg>")
        return "".join(o)

    def html(self, path=None):
        esc = (lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))
        doc = ("<!doctype html><html><head><meta charset='utf-8'><title>stoker tune batch-size"
               "</title><style>body{font-family:sans-serif;max-width:960px;margin:2em auto}"
               "pre{background:#f6f6f6;padding:1em;white-space:pre-wrap}</style></head><body>"
               "<h1>stoker tune batch-size</h1>" + self.svg() +
               "<h2>Summary</h2><pre>" + esc(self.summary()) + "</pre><h2>Every size tried"
               "</h2><pre>" + esc(self.table()) + "</pre></body></html>\n")
        if path:
            with open(path, "w") as f:
                f.write(doc)
        return doc


# -- advice ----------------------------------------------------------------------------

def optimizer_kind(optimizer):
    """'sgd', 'adam' or None from an optimizer object, class or name."""
    if optimizer is None:
        return None
    name = optimizer if isinstance(optimizer, str) else (
        optimizer.__name__ if isinstance(optimizer, type) else type(optimizer).__name__)
    n = name.lower()
    if any(k in n for k in ADAM_LIKE):
        return "adam"
    if any(k in n for k in SGD_LIKE):
        return "sgd"
    return None


def lr_advice(old_global, new_global, lr=None, optimizer=None):
    """The learning-rate change the common rules suggest when the global batch changes."""
    kind = optimizer_kind(optimizer)
    k = new_global / old_global
    caveat = ("both rules hold only below the critical batch size (McCandlish et al. 2018: the "
              "gradient noise scale); past it a larger batch no longer cuts the steps needed, so "
              "check the loss curve against the old run for the first epochs")
    if abs(k - 1) < 1e-9:
        return f"learning rate: global batch unchanged ({old_global}): keep it"
    lr_s = (lambda f: f" ({lr:g} -> {lr * f:.4g})") if lr else (lambda f: "")
    if kind == "sgd":
        return (f"learning rate (SGD-like, linear scaling rule, Goyal et al. 2017): global batch "
                f"{old_global} -> {new_global} (x{k:.3g}): multiply the LR by {k:.3g}{lr_s(k)} "
                f"with a gradual warm-up (about 5 epochs in the paper); {caveat}")
    if kind == "adam":
        f = math.sqrt(k)
        return (f"learning rate (Adam-like, square-root rule, Malladi et al. 2022): global batch "
                f"{old_global} -> {new_global} (x{k:.3g}): multiply the LR by {f:.3g}{lr_s(f)}, "
                f"keep a warm-up; {caveat}")
    return (f"learning rate: global batch {old_global} -> {new_global} (x{k:.3g}): linear "
            f"scaling (x{k:.3g}, with warm-up) for SGD-like optimizers, square root "
            f"(x{math.sqrt(k):.3g}) for Adam-like ones (name the optimizer to choose); {caveat}")


def accumulation_advice(micro, target_global, world_size=1):
    """Gradient-accumulation steps to reach `target_global` with `micro` per device."""
    per_step = micro * world_size
    accum = max(1, math.ceil(target_global / per_step))
    exact = target_global % (world_size * accum) == 0
    m2 = target_global // (world_size * accum) if exact else None
    if accum * per_step == target_global:
        txt = (f"gradient accumulation: {accum} step(s) of {micro} x {world_size} device(s) = "
               f"global batch {target_global}")
    elif m2:
        txt = (f"gradient accumulation: {accum} step(s) of {m2} (not {micro}: {micro} does not "
               f"divide it) x {world_size} device(s) = global batch {target_global}")
    else:
        txt = (f"gradient accumulation: {accum} step(s) of {micro} x {world_size} device(s) = "
               f"global batch {accum * per_step} (the target {target_global} is not a multiple)")
    txt += "; accumulation reaches the batch, not the throughput (the tuning playbook)"
    return {"accumulation_steps": accum, "micro_batch": m2 or micro, "text": txt}


def feed_check(need, rate, source):
    ok = rate >= need
    if ok:
        text = (f"input pipeline: {source} delivers {rate:.0f} samples/s, the knee needs "
                f"{need:.0f}: it keeps up ({rate / need:.2f}x)")
    else:
        text = (f"input pipeline: {source} delivers {rate:.0f} samples/s, the knee needs "
                f"{need:.0f} ({rate / need:.2f}x): the GPU would wait for data, and a bigger "
                f"batch buys nothing until the loader is faster: more DataLoader workers "
                f"(stoker tune dataloader), stoker.Pipeline, or more CPU per GPU (stoker plan)")
    return {"need_samples_per_s": need, "rate_samples_per_s": rate, "source": source,
            "keeps_up": ok, "text": text}


def measure_loader_rate(loader, seconds=3.0, warmup=2, clock=time.perf_counter):
    """Samples/s of an iterable of batches, after `warmup` batches, for about `seconds`."""
    it = iter(loader)
    n = 0
    t0 = None
    for i, b in enumerate(it):
        if i == warmup:
            t0 = clock()
            n = 0
        elif t0 is not None:
            n += _batch_len(b)
            if clock() - t0 >= seconds:
                break
    if t0 is None or n == 0:
        raise InvalidArgumentError("the loader gave too few batches to measure its rate")
    return n / (clock() - t0)


def _batch_len(b):
    if isinstance(b, (list, tuple)) and b:
        return _batch_len(b[0])
    if isinstance(b, dict) and b:
        return _batch_len(next(iter(b.values())))
    shape = getattr(b, "shape", None)
    if shape is not None and len(shape):
        return int(shape[0])
    try:
        return len(b)
    except TypeError:
        return 1


def _find_device(batch, torch):
    stack = [batch]
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor):
            return x.device
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return torch.device("cpu")


# -- the sweep -------------------------------------------------------------------------

def tune_batch_size(step_fn, make_batch, *, start=1, max_size=8192, time_budget=120.0,
                    warmup=2, steps=5, min_time=0.05, tolerance=0.05, memory_fraction=None,
                    memory_limit=None, device=None, target_global_batch=None, world_size=1,
                    base_batch_size=None, base_lr=None, optimizer=None, loader_rate=None,
                    loader_source="the input pipeline", make_loader=None, refine_knee=True,
                    leak_tolerance=None, progress=None, clock=time.perf_counter):
    """Sweeps batch sizes on `step_fn(make_batch(n))`; returns a BatchSizeResult.

    memory_fraction / memory_limit: the memory budget (see the module docstring).
    target_global_batch, world_size: gradient accumulation to reach that global batch.
    base_batch_size, base_lr, optimizer: the learning-rate advice for moving from the
    current global batch (base_batch_size x world_size) to the knee's.
    loader_rate (samples/s, from `stoker tune dataloader` or `stoker bench pipeline`) or
    make_loader(batch_size) (an iterable, measured for ~3 s at the knee): the feed check.
    """
    import torch

    if start < 1 or max_size < start:
        raise InvalidArgumentError(f"need 1 <= start <= max_size (got {start}, {max_size})")
    if not 0 < tolerance < 1:
        raise InvalidArgumentError(f"tolerance must be in (0, 1), got {tolerance}")
    if memory_fraction is not None and not 0 < memory_fraction <= 1:
        raise InvalidArgumentError(f"memory_fraction must be in (0, 1], got {memory_fraction}")
    if warmup < 0 or steps < 1:
        raise InvalidArgumentError("warmup must be >= 0 and steps >= 1")
    t_begin = clock()
    deadline = t_begin + time_budget
    notes = []
    say = (lambda s: print(s, file=progress, flush=True)) if progress else (lambda s: None)

    # The device, from a batch of one (also checks make_batch works at all).
    try:
        probe = make_batch(start)
    except Exception as e:
        if is_oom(e):
            raise StepError(f"batch size {start} does not fit: make_batch({start}) ran out of "
                            f"memory ({_short(e)})") from None
        raise StepError(f"make_batch({start}) failed: {type(e).__name__}: {e}") from e
    dev = torch.device(device) if device else _find_device(probe, torch)
    del probe
    if dev.type == "cuda":
        mem = _CudaMemory(torch, dev)
        total = mem.total
        budget, source = None, "device"
        if memory_limit:
            memory_fraction = min(1.0, memory_limit / total)
        if memory_fraction:
            torch.cuda.set_per_process_memory_fraction(memory_fraction, dev)
            budget, source = int(total * memory_fraction), f"{memory_fraction:.2f} of the device"
        else:
            budget = total
        enforce = False  # the allocator raises OOM itself
        sync = lambda: torch.cuda.synchronize(dev)  # noqa: E731
    else:
        mem = _HostMemory()
        total = mem.total
        if memory_limit:
            budget, source = int(memory_limit), "host memory limit"
        elif memory_fraction:
            budget, source = int((total or 0) * memory_fraction), \
                f"{memory_fraction:.2f} of available host memory"
        else:
            budget, source = total, "available host memory"
        enforce = bool(memory_limit or memory_fraction)
        if not mem.can_reset:
            notes.append("/proc/self/clear_refs is not writable: host peaks include earlier tries")
        sync = lambda: None  # noqa: E731
    if leak_tolerance is None:
        leak_tolerance = max(8 << 20, int(0.02 * (budget or 0)))

    trials = {}
    stopped = ["the sweep finished"]
    last = [None]   # (batch size, seconds per step) of the latest fitting try
    steady = [None]  # memory in use after the first fitting try

    def run(bs, phase):
        if bs in trials:
            return trials[bs]
        # Time check: the try's expected cost from the last one, scaled by size.
        if last[0] is not None:
            est = (warmup + steps) * last[0][1] * bs / last[0][0]
            if clock() + est > deadline:
                stopped[0] = f"time budget ({time_budget:.0f} s) reached before batch {bs}"
                return None
        elif clock() > deadline:
            stopped[0] = f"time budget ({time_budget:.0f} s) reached"
            return None
        t = Trial(batch_size=bs, fits=False, phase=phase)
        mem.clear()
        t0 = clock()
        err = None
        times = []
        try:
            mem.start()
            batch = make_batch(bs)
            mem.sample()
            for _ in range(warmup):
                step_fn(batch)
                mem.sample()
            sync()
            while True:
                s0 = clock()
                step_fn(batch)
                sync()
                times.append(clock() - s0)
                mem.sample()
                if len(times) >= steps and sum(times) >= min_time:
                    break
                if len(times) >= 10 * steps or clock() > deadline:
                    break
            t.peak_bytes, t.reserved_bytes = mem.peak()
            del batch
        except Exception as e:  # noqa: BLE001 - classified right below
            if not is_oom(e):
                raise StepError(f"the training step failed at batch size {bs} for a reason "
                                f"other than memory: {type(e).__name__}: {e}") from e
            err = _short(e)
            e.__traceback__ = None  # drop the frames that hold the batch and activations
            del e
        batch = None  # noqa: F841
        mem.clear(collect=err is not None)
        t.seconds = clock() - t0
        after = mem.in_use()
        # The first fitting try creates the lasting state (gradients, optimizer moments,
        # autotuner caches); after it, every try must give its memory back.
        if steady[0] is None:
            if err is None:
                steady[0] = after
        else:
            t.leaked_bytes = max(0, after - steady[0])
        if err is not None:
            t.reason = "out of memory"
            say(f"  batch {bs}: out of memory ({err}); freed, {_mb(after)} in use")
        elif enforce and budget and t.reserved_bytes > budget:
            t.reason = "over the memory budget"
            say(f"  batch {bs}: peak {_mb(t.reserved_bytes)} over the budget {_mb(budget)}")
        else:
            t.fits = True
            t.steps = len(times)
            t.step_s = statistics.median(times)
            t.samples_per_s = bs / t.step_s if t.step_s > 0 else float("inf")
            last[0] = (bs, t.step_s)
            say(f"  batch {bs}: {1e3 * t.step_s:.2f} ms/step, {t.samples_per_s:.1f} samples/s, "
                f"peak {_mb(t.reserved_bytes)}")
        trials[bs] = t
        if t.leaked_bytes > leak_tolerance:
            notes.append(f"after batch {bs}, {_mb(t.leaked_bytes)} more memory is in use than "
                         f"before it (the step keeps references?); the sweep stopped there")
            stopped[0] = f"memory did not come back after batch {bs}"
            return None
        return t

    # 1. Doubling.
    bs, lo, hi = start, None, None
    while bs <= max_size:
        t = run(bs, "double")
        if t is None:
            break
        if not t.fits:
            hi = bs
            break
        lo = bs
        bs *= 2
    if lo is None and hi is not None:
        raise StepError(f"batch size {start} does not fit ({trials[start].reason}"
                        + (f", budget {_mb(budget)}" if budget else "") + "): nothing to tune; "
                        f"shrink the model or its activations (mixed precision, checkpointing)")
    if lo is not None and hi is None and bs > max_size:
        stopped[0] = f"reached max_size {max_size} without running out of memory"
    # 2. Bisection at the edge, to 1/16 of the size.
    while lo is not None and hi is not None and hi - lo > max(1, lo // 16):
        mid = (lo + hi) // 2
        t = run(mid, "bisect")
        if t is None:
            break
        if t.fits:
            lo = mid
        else:
            hi = mid
    fit = [t for t in trials.values() if t.fits]
    largest = max(fit, key=lambda t: t.batch_size) if fit else None

    def knee_of():
        best = max(fit, key=lambda t: t.samples_per_s)
        near = [t for t in fit if t.samples_per_s >= (1 - tolerance) * best.samples_per_s]
        return min(near, key=lambda t: t.batch_size)

    knee = knee_of() if fit else None
    # 3. Refine the knee: bisect between the largest measured size below it that is not
    # within tolerance and the knee.
    interrupted = stopped[0].startswith(("time budget", "memory did not"))
    if refine_knee and knee is not None and not interrupted:
        for _ in range(4):
            below = [t for t in fit if t.batch_size < knee.batch_size]
            if not below:
                break
            b = max(below, key=lambda t: t.batch_size)
            if knee.batch_size - b.batch_size <= max(1, b.batch_size // 8):
                break
            t = run((b.batch_size + knee.batch_size) // 2, "knee")
            if t is None:
                break
            fit = [t for t in trials.values() if t.fits]
            knee = knee_of()
    best = max(fit, key=lambda t: t.samples_per_s) if fit else None
    if best is not None and largest is not None and best is largest and len(fit) > 1:
        notes.append("samples/s still rises at the largest size that fits: the knee is at "
                     "the memory edge (a bigger budget, mixed precision or activation "
                     "checkpointing would go further)")

    advice = []
    if knee is not None:
        if target_global_batch:
            advice.append(accumulation_advice(knee.batch_size, target_global_batch,
                                              world_size)["text"])
        if base_batch_size:
            new_global = (target_global_batch or knee.batch_size * world_size)
            advice.append(lr_advice(base_batch_size * world_size, new_global, base_lr, optimizer))
    feed = None
    if knee is not None:
        if loader_rate is None and make_loader is not None and clock() < deadline:
            try:
                loader_rate = measure_loader_rate(make_loader(knee.batch_size),
                                                  seconds=min(3.0, max(0.5, deadline - clock())))
                loader_source = f"make_loader({knee.batch_size})"
            except InvalidArgumentError as e:
                notes.append(f"could not measure the loader: {e}")
        if loader_rate:
            feed = feed_check(knee.samples_per_s, loader_rate, loader_source)

    return BatchSizeResult(sorted(trials.values(), key=lambda t: t.batch_size), device=str(dev),
                           budget_bytes=budget, budget_source=source, total_bytes=total,
                           tolerance=tolerance, time_budget=time_budget,
                           elapsed=clock() - t_begin, stopped=stopped[0], notes=notes,
                           largest_fit=largest, knee=knee, advice=advice, feed=feed)


def _short(e):
    s = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    s = re.sub(r"\s+", " ", s)
    return s if len(s) <= 160 else s[:157] + "..."


# -- the script entry point (python -m stoker tune batch-size) -------------------------

ENTRY_HELP = """The script (run once with runpy, __name__ == "__stoker_tune__") defines:
  make_batch(batch_size) -> batch      one batch of that many samples, on the training device
  train_step(batch)                    one full training step on it (forward, backward, step)
optionally:
  optimizer                            the torch optimizer (its class picks the LR rule)
  make_loader(batch_size) -> iterable  your input pipeline, measured at the knee
or instead a single hook:
  stoker_tune() -> dict(step=..., make_batch=..., optimizer=..., make_loader=...)"""


def load_script(path, step_name=None, batch_name=None):
    import runpy
    if not os.path.isfile(path):
        raise InvalidArgumentError(f"{path}: no such file")
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        ns = runpy.run_path(path, run_name="__stoker_tune__")
    finally:
        sys.path.pop(0)
    if "stoker_tune" in ns and not (step_name or batch_name):
        d = ns["stoker_tune"]()
        if not isinstance(d, dict) or "step" not in d or "make_batch" not in d:
            raise InvalidArgumentError(f"{path}: stoker_tune() must return a dict with 'step' "
                                       f"and 'make_batch'")
        return d
    sn, bn = step_name or "train_step", batch_name or "make_batch"
    missing = [n for n in (sn, bn) if not callable(ns.get(n))]
    if missing:
        raise InvalidArgumentError(f"{path} defines no {' and no '.join(missing)} function "
                                   f"(nor a stoker_tune() hook).\n{ENTRY_HELP}")
    return {"step": ns[sn], "make_batch": ns[bn], "optimizer": ns.get("optimizer"),
            "make_loader": ns.get("make_loader") if callable(ns.get("make_loader")) else None}


def add_parser(sub):
    import argparse
    p = sub.add_parser("batch-size", help="find the batch size at the throughput knee",
                       description="Sweep batch sizes on your own training step: largest size "
                                   "that fits, the knee, headroom, LR and pipeline advice.",
                       epilog=ENTRY_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--script", required=True, help="Python file with the entry points below")
    p.add_argument("--step", help="name of the step function (default train_step)")
    p.add_argument("--batch-fn", help="name of the batch function (default make_batch)")
    p.add_argument("--time", type=float, default=120.0, help="time budget, s (default 120)")
    p.add_argument("--start", type=int, default=1)
    p.add_argument("--max", type=int, default=8192, dest="max_size")
    p.add_argument("--warmup", type=int, default=2, help="steps per size excluded from timing")
    p.add_argument("--steps", type=int, default=5, help="timed steps per size (median)")
    p.add_argument("--tolerance", type=float, default=0.05, help="knee: within this of the best")
    p.add_argument("--memory-fraction", type=float,
                   help="budget: fraction of the device (CUDA) or of available host memory (CPU)")
    p.add_argument("--memory-limit-mb", type=float, help="budget in MiB")
    p.add_argument("--global-batch", type=int, help="target global batch (for accumulation)")
    p.add_argument("--world-size", type=int, default=1, help="data-parallel devices")
    p.add_argument("--base-batch", type=int, help="the per-device batch you train with now")
    p.add_argument("--base-lr", type=float, help="the learning rate you train with now")
    p.add_argument("--optimizer", help="sgd or adam (default: from the script's optimizer)")
    p.add_argument("--loader-rate", type=float, help="samples/s your input pipeline delivers")
    p.add_argument("--pipeline-json", help="`stoker bench pipeline --json` output: its rate")
    p.add_argument("--json", help="write the result as JSON")
    p.add_argument("--html", help="write the HTML report (table + chart)")
    p.add_argument("--quiet", action="store_true", help="no per-size progress lines")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def main(a):
    """Runs `tune batch-size` from parsed arguments; returns the exit code."""
    try:
        entry = load_script(a.script, a.step, a.batch_fn)
        rate, source = a.loader_rate, "the input pipeline (--loader-rate)"
        if a.pipeline_json:
            try:
                with open(a.pipeline_json) as f:
                    rate = float(json.load(f)["samples_per_s"])
                source = f"stoker bench pipeline ({a.pipeline_json})"
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise InvalidArgumentError(f"{a.pipeline_json}: not `stoker bench pipeline "
                                           f"--json` output ({e})") from None
        r = tune_batch_size(
            entry["step"], entry["make_batch"], start=a.start, max_size=a.max_size,
            time_budget=a.time, warmup=a.warmup, steps=a.steps, tolerance=a.tolerance,
            memory_fraction=a.memory_fraction,
            memory_limit=int(a.memory_limit_mb * 2**20) if a.memory_limit_mb else None,
            target_global_batch=a.global_batch, world_size=a.world_size,
            base_batch_size=a.base_batch, base_lr=a.base_lr,
            optimizer=a.optimizer or entry.get("optimizer"), loader_rate=rate,
            loader_source=source, make_loader=entry.get("make_loader"),
            progress=None if a.quiet else sys.stderr)
    except (InvalidArgumentError, ValueError, OSError) as e:
        if a.debug:
            raise
        print(f"stoker: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # the user's script failed while loading
        if a.debug:
            raise
        print(f"stoker: {a.script} failed: {type(e).__name__}: {e} (--debug shows the "
              f"traceback)", file=sys.stderr)
        return 2
    print(r)
    if a.json:
        r.to_json(a.json)
    if a.html:
        r.html(a.html)
    return 0
