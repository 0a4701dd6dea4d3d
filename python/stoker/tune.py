"""stoker.tune_dataloader: measure DataLoader settings on your own Dataset.

    result = stoker.tune_dataloader(dataset, batch_size=64, time_budget=60)
    print(result)                                   # table, chart, recommendation, hazards
    loader = DataLoader(dataset, batch_size=64, **result.recommended_kwargs)

It sweeps num_workers (0 to the cores and a bit beyond), then prefetch_factor,
persistent_workers and pin_memory (with CUDA) at the best worker count, each trial two
short epochs over a random subset of the Dataset. Per trial it measures steady samples/s,
the first-batch latency of each epoch (worker start-up, paid every epoch unless workers
persist), the growth of each worker's private memory (the copy-on-read leak of Python
objects under fork), the workers' kernel-time share and page faults, and their threads.

The score of a setting is the throughput of a whole epoch of the real Dataset: the
first-batch latency plus len(dataset) samples at the steady rate. The recommendation is the
cheapest setting (fewest workers, then no pinning, smaller prefetch, non-persistent) within
`tolerance` of the best score, or the cheapest that reaches `target` samples/s.

Measured, never assumed: when workers spend much of their CPU time in the kernel (page
faults of fresh allocations), the malloc settings that keep freed memory mapped are re-run
and reported with their measured effect.
"""

import collections
import ctypes
import dataclasses
import io
import json
import math
import os
import pickle
import resource
import sys
import time
import warnings

from . import _proc
from ._errors import bad_argument

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# The malloc settings tried when kernel time is high, as environment variables (what a
# user puts in the launch command) and as mallopt() calls (what the trial applies).
MALLOC_FIXES = [
    ("MALLOC_MMAP_THRESHOLD_=67108864", [(M_MMAP_THRESHOLD, 67108864)]),
    ("MALLOC_MMAP_THRESHOLD_=67108864 MALLOC_TRIM_THRESHOLD_=268435456",
     [(M_MMAP_THRESHOLD, 67108864), (M_TRIM_THRESHOLD, 268435456)]),
]
_SHORT_FIX = {"MALLOC_MMAP_THRESHOLD_=67108864": "mmap 64M",
              "MALLOC_MMAP_THRESHOLD_=67108864 MALLOC_TRIM_THRESHOLD_=268435456":
              "mmap 64M + trim 256M"}
KERNEL_FRAC_HAZARD = 0.25     # system / (user + system) CPU time of the loading processes
MEM_GROWTH_HAZARD_MB = 1.0    # private memory growth per worker during the measured window
MEM_GROWTH_HAZARD_KB_PER_SAMPLE = 1.0
PY_OBJECTS_HAZARD = 10000     # elements of a list/tuple/dict/set held by the Dataset
FIX_MIN_GAIN = 0.05


# -- results ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Setting:
    num_workers: int
    pin_memory: bool = False
    prefetch_factor: int = 2
    persistent_workers: bool = False

    def loader_kwargs(self):
        kw = {"num_workers": self.num_workers, "pin_memory": self.pin_memory}
        if self.num_workers > 0:
            kw["prefetch_factor"] = self.prefetch_factor
            kw["persistent_workers"] = self.persistent_workers
        return kw

    def cost(self):
        """Cheaper first: fewer processes, no pinning, fewer batches in flight, no
        long-lived workers."""
        pf = self.prefetch_factor if self.num_workers > 0 else 0
        return (self.num_workers, self.pin_memory, pf,
                self.persistent_workers and self.num_workers > 0)

    def label(self):
        if self.num_workers == 0:
            return f"workers=0{' pin' if self.pin_memory else ''}"
        return (f"workers={self.num_workers} prefetch={self.prefetch_factor}"
                f"{' persistent' if self.persistent_workers else ''}"
                f"{' pin' if self.pin_memory else ''}")


@dataclasses.dataclass
class Trial:
    setting: Setting
    samples_per_s: float = 0.0        # steady rate, start-up excluded
    first_batch_s: list = dataclasses.field(default_factory=list)  # per epoch
    epoch_s: float = math.inf         # estimated time of one epoch of the whole Dataset
    score: float = 0.0                # samples/s over such an epoch, start-up included
    samples: int = 0
    seconds: float = 0.0
    mem_growth_mb: float = None       # max over workers, in the measured window
    mem_growth_kb_per_sample: float = None
    kernel_frac: float = None         # system share of the loading processes' CPU time
    faults_per_sample: float = None   # minor page faults per sample
    max_threads: int = None           # most threads in one worker
    thread_names: list = None
    truncated: bool = False           # stopped by the time budget
    error: str = None
    fix: str = None                   # the malloc setting applied (fix trials)

    def to_dict(self):
        d = dataclasses.asdict(self)
        d["setting"] = dataclasses.asdict(self.setting)
        d["label"] = self.setting.label()
        if math.isinf(d["epoch_s"]):
            d["epoch_s"] = None
        return d


@dataclasses.dataclass
class Hazard:
    kind: str      # "open-file-before-fork", "python-objects", "memory-growth", "threads",
    #                "cuda-in-workers", "kernel-time"
    message: str
    evidence: str
    fix: str

    def __str__(self):
        return f"{self.kind}: {self.message}\n    evidence: {self.evidence}\n    fix: {self.fix}"


class TuneResult:
    """The sweep: trials, the best and the recommended setting, hazards, measured fixes."""

    def __init__(self, trials, recommended, best, hazards, fixes, dataset_len, batch_size,
                 epoch_samples, seconds, tolerance, target, skipped):
        self.trials = trials
        self.recommended = recommended
        self.best = best
        self.hazards = hazards
        self.fixes = fixes
        self.dataset_len = dataset_len
        self.batch_size = batch_size
        self.epoch_samples = epoch_samples
        self.seconds = seconds
        self.tolerance = tolerance
        self.target = target
        self.skipped = skipped  # settings not run for lack of time

    @property
    def recommended_kwargs(self):
        """DataLoader keyword arguments of the recommended setting."""
        return self.recommended.setting.loader_kwargs() if self.recommended else {}

    def speedup(self):
        """Score of the recommended setting over num_workers=0 (same pin_memory)."""
        base = [t for t in self.trials if t.setting.num_workers == 0 and not t.error]
        if not base or not self.recommended or base[0].score <= 0:
            return None
        return self.recommended.score / base[0].score

    def table(self):
        rows = [("setting", "samples/s", "1st batch s", "epoch s", "score/s", "mem/worker",
                 "kernel", "threads", "")]
        for t in self.trials + self.fixes:
            note = []
            if t is self.recommended:
                note.append("<- recommended")
            if t is self.best and t is not self.recommended:
                note.append("best")
            if t.fix:
                note.append(f"with {t.fix}")
            if t.truncated:
                note.append("(cut by time budget)")
            if t.error:
                note.append("error: " + t.error[:60])
            mem = "-" if t.mem_growth_mb is None else f"{t.mem_growth_mb:+.1f} MB"
            kern = "-" if t.kernel_frac is None else f"{100 * t.kernel_frac:.0f}%"
            first = "/".join(f"{x:.2f}" for x in t.first_batch_s) or "-"
            rows.append((t.setting.label(), f"{t.samples_per_s:.1f}", first,
                         "-" if math.isinf(t.epoch_s) else f"{t.epoch_s:.1f}",
                         f"{t.score:.1f}", mem, kern,
                         "-" if t.max_threads is None else str(t.max_threads), " ".join(note)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = []
        for k, r in enumerate(rows):
            cells = [r[0].ljust(widths[0])] + [r[i].rjust(widths[i]) for i in range(1, 8)] + [r[8]]
            lines.append("  ".join(cells).rstrip())
            if k == 0:
                lines.append("-" * len(lines[0]))
        return "\n".join(lines)

    def chart(self, width=40):
        """Horizontal bars of each setting's score (epoch samples/s)."""
        trials = [t for t in self.trials + self.fixes if not t.error]
        if not trials:
            return "(no successful trial)"
        top = max(t.score for t in trials) or 1.0
        lw = max(len(self._chart_label(t)) for t in trials)
        lines = [f"epoch throughput (samples/s, start-up included; {self.epoch_samples} samples)"]
        for t in trials:
            n = int(round(width * t.score / top))
            mark = " *" if t is self.recommended else ""
            lines.append(f"{self._chart_label(t).ljust(lw)} |{'#' * n}{' ' * (width - n)}| "
                         f"{t.score:.1f}{mark}")
        lines.append("(* recommended)")
        return "\n".join(lines)

    @staticmethod
    def _chart_label(t):
        if not t.fix:
            return t.setting.label()
        return f"{t.setting.label()} [{_SHORT_FIX.get(t.fix, t.fix)}]"

    def svg(self, path=None):
        """The chart as a standalone SVG (returned, and written to `path` if given)."""
        trials = [t for t in self.trials + self.fixes if not t.error]
        top = max([t.score for t in trials] + [1.0])
        bar_h, gap, left, w = 18, 6, 330, 360
        h = 40 + len(trials) * (bar_h + gap)
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + w + 90}" height="{h}" '
               f'font-family="monospace" font-size="12">',
               f'<text x="8" y="20" font-weight="bold">stoker tune dataloader: epoch samples/s '
               f'({self.epoch_samples} samples, batch {self.batch_size})</text>']
        for i, t in enumerate(trials):
            y = 32 + i * (bar_h + gap)
            bw = max(1, int(w * t.score / top))
            color = "#d9822b" if t is self.recommended else "#4a78b5"
            label = self._chart_label(t).replace("&", "&amp;").replace("<", "&lt;")
            out.append(f'<text x="8" y="{y + 13}">{label}</text>')
            out.append(f'<rect x="{left}" y="{y}" width="{bw}" height="{bar_h}" fill="{color}"/>')
            out.append(f'<text x="{left + bw + 6}" y="{y + 13}">{t.score:.1f}</text>')
        out.append("</svg>")
        s = "\n".join(out) + "\n"
        if path:
            with open(path, "w") as f:
                f.write(s)
        return s

    def to_dict(self):
        return {
            "dataset_len": self.dataset_len, "batch_size": self.batch_size,
            "epoch_samples": self.epoch_samples, "seconds": self.seconds,
            "tolerance": self.tolerance, "target": self.target,
            "recommended": self.recommended.to_dict() if self.recommended else None,
            "recommended_kwargs": self.recommended_kwargs,
            "best": self.best.to_dict() if self.best else None,
            "speedup_vs_0_workers": self.speedup(),
            "trials": [t.to_dict() for t in self.trials],
            "fixes": [t.to_dict() for t in self.fixes],
            "hazards": [dataclasses.asdict(h) for h in self.hazards],
            "skipped": [dataclasses.asdict(s) for s in self.skipped],
        }

    def to_json(self, path=None):
        s = json.dumps(self.to_dict(), indent=2)
        if path:
            with open(path, "w") as f:
                f.write(s)
        return s

    def summary(self):
        lines = []
        if self.recommended:
            r = self.recommended
            kw = ", ".join(f"{k}={v!r}" for k, v in self.recommended_kwargs.items())
            lines.append(f"recommended: DataLoader(..., {kw})")
            sp = self.speedup()
            how = (f"within {100 * self.tolerance:.0f}% of the best ({self.best.setting.label()}, "
                   f"{self.best.score:.1f}/s)" if self.target is None
                   else f"the cheapest reaching the target {self.target:.1f}/s")
            lines.append(f"  {r.score:.1f} samples/s over an epoch ({r.samples_per_s:.1f}/s steady, "
                         f"first batch {r.first_batch_s[-1]:.2f} s), {how}"
                         + (f"; {sp:.2f}x num_workers=0" if sp else ""))
        else:
            lines.append("no setting could be measured (see errors in the table)")
        if self.skipped:
            lines.append(f"  not run for lack of time: {', '.join(s.label() for s in self.skipped)}")
        for h in self.hazards:
            lines.append("hazard " + str(h))
        return "\n".join(lines)

    def __str__(self):
        return f"{self.table()}\n\n{self.chart()}\n\n{self.summary()}"


# -- hazards found by looking at the Dataset ---------------------------------------------

def _attrs(obj):
    d = getattr(obj, "__dict__", None)
    items = list(d.items()) if isinstance(d, dict) else []
    for cls in type(obj).__mro__:
        for s in getattr(cls, "__slots__", ()) or ():
            if hasattr(obj, s):
                items.append((s, getattr(obj, s)))
    return items


def _handle_kind(v):
    mod = type(v).__module__ or ""
    name = type(v).__name__
    if mod.startswith("h5py") and name in ("File", "Dataset", "Group"):
        return f"HDF5 {name} (h5py)"
    lmdb = sys.modules.get("lmdb")
    if lmdb is not None and isinstance(v, tuple(getattr(lmdb, n) for n in
                                                ("Environment", "Transaction", "Cursor")
                                                if hasattr(lmdb, n))):
        return f"LMDB {name}"
    if isinstance(v, io.IOBase) and not v.closed:
        return f"open file {getattr(v, 'name', '')!r}"
    if mod == "sqlite3" and name == "Connection":
        return "sqlite3 connection"
    if mod == "zipfile" and name == "ZipFile" and getattr(v, "fp", None) is not None:
        return "open zip file"
    if mod == "tarfile" and name == "TarFile" and not getattr(v, "closed", True):
        return "open tar file"
    return None


def scan_dataset(dataset, *, max_depth=3, objects_threshold=PY_OBJECTS_HAZARD):
    """Hazards visible on the Dataset object itself, before any worker starts."""
    hazards = []
    seen = set()
    torch = sys.modules.get("torch")

    def visit(obj, path, depth):
        if id(obj) in seen or depth > max_depth:
            return
        seen.add(id(obj))
        for name, v in _attrs(obj):
            p = f"{path}.{name}"
            kind = _handle_kind(v)
            if kind:
                hazards.append(Hazard(
                    "open-file-before-fork",
                    f"{p} is an {kind} opened before the workers fork",
                    f"type {type(v).__module__}.{type(v).__name__} on the Dataset",
                    "open it lazily in each worker (in __getitem__ on first use, or in "
                    "worker_init_fn); forked workers sharing one handle read garbage or "
                    "deadlock (HDF5, LMDB are not fork-safe)"))
                continue
            if torch is not None and torch.is_tensor(v) and v.is_cuda:
                hazards.append(Hazard(
                    "cuda-in-workers", f"{p} is a CUDA tensor held by the Dataset",
                    f"device {v.device}",
                    "keep Dataset data on the CPU; move batches to the GPU in the training "
                    "loop (pin_memory=True, .to(device, non_blocking=True))"))
                continue
            if isinstance(v, (list, tuple, dict, set, frozenset, collections.deque)):
                n = len(v)
                if n >= objects_threshold:
                    if id(v) in seen:  # the same list under another name (ImageFolder.imgs)
                        continue
                    seen.add(id(v))
                    hazards.append(Hazard(
                        "python-objects",
                        f"{p} is a Python {type(v).__name__} of {n} objects",
                        "every read updates refcounts, so forked workers copy the pages they "
                        "touch (copy-on-read): memory grows per worker with the samples read",
                        "store it as NumPy arrays (np.array of ints, of fixed-width strings, or "
                        "one bytes blob plus offsets), pandas/pyarrow columns, or torch tensors"))
                    continue
                if 0 < n <= 64 and not isinstance(v, dict):
                    for i, x in enumerate(v):
                        if hasattr(x, "__dict__"):
                            visit(x, f"{p}[{i}]", depth + 1)
                continue
            if type(v).__name__ == "DataFrame" and hasattr(v, "dtypes"):
                obj_cols = [str(c) for c, t in zip(v.columns, v.dtypes) if str(t) == "object"]
                if obj_cols and len(v) >= objects_threshold // 10:
                    hazards.append(Hazard(
                        "python-objects",
                        f"{p} is a DataFrame with object columns {obj_cols[:4]}",
                        f"{len(v)} rows of Python objects", "convert the columns to NumPy or "
                        "pyarrow types (e.g. category codes or fixed-width bytes)"))
                continue
            if hasattr(v, "__dict__") and not isinstance(v, type) and not callable(v):
                visit(v, p, depth + 1)
            elif hasattr(v, "__len__") and hasattr(v, "__getitem__") and hasattr(v, "__dict__"):
                visit(v, p, depth + 1)

    visit(dataset, "dataset", 0)
    cv2 = sys.modules.get("cv2")
    if cv2 is not None:
        try:
            n = cv2.getNumThreads()
        except Exception:  # noqa: BLE001 -- a broken cv2 build should not stop the sweep
            n = 0
        if n > 1:
            hazards.append(Hazard(
                "threads", f"OpenCV uses {n} threads, in every worker",
                "cv2.getNumThreads() in the parent; forked workers inherit it",
                "cv2.setNumThreads(0) in worker_init_fn (and OMP_NUM_THREADS=1)"))
    if torch is not None:
        try:
            cuda_init = torch.cuda.is_initialized()
        except (AttributeError, RuntimeError):
            cuda_init = False
        if cuda_init:
            import multiprocessing
            method = multiprocessing.get_start_method(allow_none=True) or "fork"
            if method == "fork":
                hazards.append(Hazard(
                    "cuda-in-workers", "CUDA is initialized in the parent and workers fork",
                    "torch.cuda.is_initialized() before the DataLoader starts workers",
                    "do not touch CUDA inside the Dataset; if you must, "
                    "multiprocessing_context='spawn'"))
    return hazards


# -- the trials ------------------------------------------------------------------------

def _error_text(e):
    """One line for an exception. A DataLoader re-raises a worker's exception as "Caught X
    in DataLoader worker process N." followed by the worker's traceback: keep that first line
    and the traceback's last line, which says what went wrong (e.g. the CUDA error)."""
    lines = [ln.strip() for ln in f"{type(e).__name__}: {e}".splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    if len(lines) > 1 and "Caught " in lines[0] and "worker" in lines[0]:
        return f"{lines[0]} {lines[-1]}"
    return lines[0]


def _mallopt(settings):
    libc = ctypes.CDLL(None)
    for param, value in settings:
        libc.mallopt(ctypes.c_int(param), ctypes.c_int(value))


class _WorkerInit:
    """worker_init_fn: the malloc fix (if any), then the user's own init."""

    def __init__(self, malloc, user):
        self.malloc, self.user = malloc, user

    def __call__(self, worker_id):
        if self.malloc:
            _mallopt(self.malloc)
        if self.user is not None:
            self.user(worker_id)


class _Tuner:
    def __init__(self, dataset, batch_size, torch, *, collate_fn, loader_kwargs, seed, clock,
                 memory, progress):
        self.dataset = dataset
        self.batch_size = batch_size
        self.torch = torch
        self.collate_fn = collate_fn
        self.loader_kwargs = dict(loader_kwargs or {})
        self.user_init = self.loader_kwargs.pop("worker_init_fn", None)
        self.seed = seed
        self.clock = clock
        self.memory = memory
        self.progress = progress
        self.iterable = isinstance(dataset, torch.utils.data.IterableDataset)
        self.trial_no = 0

    def _loader(self, setting, n_samples, malloc):
        t = self.torch
        kw = dict(self.loader_kwargs)
        kw.update(setting.loader_kwargs())
        if self.collate_fn is not None:
            kw["collate_fn"] = self.collate_fn
        init = _WorkerInit(malloc, self.user_init)
        if setting.num_workers > 0 and (malloc or self.user_init):
            kw["worker_init_fn"] = init
        if not self.iterable:
            g = t.Generator()
            g.manual_seed(self.seed + self.trial_no)
            kw["sampler"] = t.utils.data.RandomSampler(self.dataset, replacement=False,
                                                       num_samples=n_samples, generator=g)
        return t.utils.data.DataLoader(self.dataset, batch_size=self.batch_size, **kw)

    def run(self, setting, n_batches, epochs, deadline, malloc=None, fix=None):
        """One trial: `epochs` short epochs of `n_batches` batches."""
        self.trial_no += 1
        trial = Trial(setting, fix=fix)
        if malloc is not None and setting.num_workers == 0:
            return self._run_forked(setting, n_batches, epochs, deadline, malloc, fix)
        try:
            with warnings.catch_warnings():
                # torch warns when workers exceed its suggested maximum: the sweep does so
                # on purpose.
                warnings.filterwarnings("ignore", message=".*worker processes in total.*")
                self._measure(trial, setting, n_batches, epochs, deadline, malloc)
        except Exception as e:  # noqa: BLE001 -- the user's Dataset may raise anything
            trial.error = _error_text(e)
        return trial

    def _run_forked(self, setting, n_batches, epochs, deadline, malloc, fix):
        """A num_workers=0 trial in a forked child, so malloc settings do not stick to
        this process."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            code = 0
            try:
                os.close(r)
                _mallopt(malloc)
                trial = Trial(setting, fix=fix)
                try:
                    self._measure(trial, setting, n_batches, epochs, deadline, None)
                except Exception as e:  # noqa: BLE001
                    trial.error = _error_text(e)
                with os.fdopen(w, "wb") as f:
                    pickle.dump(trial, f)
            except BaseException:  # noqa: BLE001 -- never return into the caller's code
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            data = f.read()
        os.waitpid(pid, 0)
        if not data:
            return Trial(setting, fix=fix, error="the trial process failed")
        return pickle.loads(data)

    def _measure(self, trial, setting, n_batches, epochs, deadline, malloc):
        clock = self.clock
        loader = self._loader(setting, n_batches * self.batch_size, malloc)
        w = setting.num_workers
        k0 = min(max(1, w), max(1, n_batches // 3))  # steady window starts at batch k0
        steady_t = 0.0
        steady_n = 0
        total_n = 0
        total_t = 0.0
        cpu_user = cpu_sys = 0.0
        faults = 0
        cpu_samples = 0
        mem = []
        threads = []
        names = set()
        for epoch in range(epochs):
            t0 = clock()
            it = iter(loader)
            n = 0
            t_k0 = None
            n_at_k0 = 0
            mem_mid = {}
            cpu0 = None
            samples = 0
            while n < n_batches:
                try:
                    b = next(it)
                except StopIteration:
                    break
                n += 1
                bs = _len(b, self.batch_size)
                samples += bs
                now = clock()
                if n == 1:
                    trial.first_batch_s.append(now - t0)
                    pids = [p.pid for p in getattr(it, "_workers", [])] if w > 0 else []
                    cpu0 = self._cpu(pids)
                    samples_at_cpu0 = samples
                if n == k0:
                    t_k0, n_at_k0 = now, samples
                if w > 0 and self.memory and n == max(k0, n_batches // 3):
                    mem_mid = {p: _proc.private_anon_bytes(p) for p in pids}
                    mem_mid_samples = samples
                if now > deadline:
                    trial.truncated = True
                    break
            t_end = clock()
            if n == 0:
                raise RuntimeError("the DataLoader yielded no batch")
            if n > 1:
                cpu1 = self._cpu(pids)
                if cpu0 is not None and cpu1 is not None:
                    cpu_user += cpu1[0] - cpu0[0]
                    cpu_sys += cpu1[1] - cpu0[1]
                    faults += cpu1[2] - cpu0[2]
                    cpu_samples += samples - samples_at_cpu0
                for p in pids:
                    th = _proc.threads(p)
                    if th:
                        threads.append(th[0])
                        names.update(th[1])
                if mem_mid and samples > mem_mid_samples:
                    grow = []
                    for p in pids:
                        m1 = _proc.private_anon_bytes(p)
                        if m1 is not None and mem_mid.get(p) is not None:
                            grow.append(m1 - mem_mid[p])
                    if grow:
                        mem.append((max(grow) / 1e6, (samples - mem_mid_samples) / max(1, w)))
            del it
            if t_k0 is not None and n_batches > k0 and samples > n_at_k0:
                steady_t += t_end - t_k0
                steady_n += samples - n_at_k0
            total_n += samples
            total_t += t_end - t0
            if trial.truncated:
                break
        trial.samples = total_n
        trial.seconds = total_t
        if steady_t > 0:
            trial.samples_per_s = steady_n / steady_t
        elif total_t > 0:
            trial.samples_per_s = total_n / total_t
        if cpu_user + cpu_sys > 0:
            trial.kernel_frac = cpu_sys / (cpu_user + cpu_sys)
            trial.faults_per_sample = faults / max(1, cpu_samples)
        if threads:
            trial.max_threads = max(threads)
            trial.thread_names = sorted(names)
        if mem:
            trial.mem_growth_mb = max(m for m, _ in mem)
            per_worker_samples = max(s for _, s in mem)
            trial.mem_growth_kb_per_sample = 1e3 * trial.mem_growth_mb / max(1.0, per_worker_samples)

    def _cpu(self, pids):
        if not pids:
            ru = resource.getrusage(resource.RUSAGE_SELF)
            return ru.ru_utime, ru.ru_stime, ru.ru_minflt
        u = s = f = 0
        for p in pids:
            c = _proc.cpu_times(p)
            if c is None:
                return None
            u, s, f = u + c[0], s + c[1], f + c[2]
        return u, s, f


def _len(batch, default):
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    if isinstance(batch, dict) and batch:
        return _len(next(iter(batch.values())), default)
    if isinstance(batch, (list, tuple)) and batch:
        return _len(batch[0], default)
    return default


def _worker_counts(cores, max_workers):
    if max_workers is None:
        max_workers = cores + max(1, cores // 4)
    counts = [0, 1, 2]
    c = 4
    while c < max_workers:
        counts.append(c)
        c = c + 2 if c < 8 else c + 4 if c < 16 else c * 2
    counts += [cores, max_workers]
    return sorted({x for x in counts if x <= max_workers})


def _baseline_threads(torch):
    """Threads of a worker running a trivial Dataset (the floor for the thread check)."""
    class _Tiny(torch.utils.data.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return i

    it = iter(torch.utils.data.DataLoader(_Tiny(), batch_size=1, num_workers=1))
    try:
        next(it)
        pids = [p.pid for p in getattr(it, "_workers", [])]
        counts = [(_proc.threads(p) or (0, []))[0] for p in pids]
        return max(counts) if counts else 3
    finally:
        del it


def tune_dataloader(dataset, batch_size, *, time_budget=60.0, num_workers=None,
                    max_workers=None, pin_memory=None, prefetch_factor=(2, 4),
                    persistent_workers=(False, True), collate_fn=None, loader_kwargs=None,
                    epoch_samples=None, tolerance=0.03, target=None, measure_fixes=True,
                    memory=True, seed=0, progress=None, chart_path=None, json_path=None,
                    clock=None):
    """Sweeps DataLoader settings on `dataset` and recommends one. See the module docstring.

    dataset         a map-style torch Dataset (or an IterableDataset)
    batch_size      the batch size you train with
    time_budget     seconds for the whole sweep (trials are sized to fit)
    num_workers     worker counts to try (default: 0, 1, 2, 4, ... up to the cores and a bit
                    beyond); max_workers caps the default list
    pin_memory      values to try (default: [False, True] with CUDA, else [False])
    prefetch_factor, persistent_workers: values tried at the best worker count
    collate_fn, loader_kwargs: passed to every DataLoader (loader_kwargs may hold
                    worker_init_fn, multiprocessing_context, ...)
    epoch_samples   samples per epoch for the score (default len(dataset))
    tolerance       recommend the cheapest setting within this fraction of the best score
    target          or: the cheapest setting reaching this many samples/s
    measure_fixes   re-run with malloc settings when kernel time is high
    progress        a file to print one line per trial to (default: none)
    chart_path, json_path: write the SVG chart / JSON report there
    """
    try:
        import torch
        import torch.utils.data  # noqa: F401
    except ImportError as e:
        raise bad_argument(f"tune_dataloader needs PyTorch: {e}") from None
    if dataset is None or not (hasattr(dataset, "__getitem__") or hasattr(dataset, "__iter__")):
        raise bad_argument(f"dataset must be a torch Dataset, got {type(dataset).__name__}")
    iterable = isinstance(dataset, torch.utils.data.IterableDataset)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise bad_argument(f"batch_size must be a positive integer, got {batch_size!r}")
    if not isinstance(time_budget, (int, float)) or time_budget <= 0:
        raise bad_argument(f"time_budget must be a positive number of seconds, got {time_budget!r}")
    if not 0 <= tolerance < 1:
        raise bad_argument(f"tolerance must be in [0, 1), got {tolerance!r}")
    if target is not None and not target > 0:
        raise bad_argument(f"target must be a positive samples/s, got {target!r}")
    n_data = None
    if not iterable:
        try:
            n_data = len(dataset)
        except TypeError:
            raise bad_argument("a map-style dataset needs __len__") from None
        if n_data == 0:
            raise bad_argument("the dataset is empty")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if num_workers is None:
        counts = _worker_counts(cores, max_workers)
    else:
        counts = sorted(set(num_workers))
        if not counts or any(isinstance(c, bool) or not isinstance(c, int) or c < 0
                             for c in counts):
            raise bad_argument(f"num_workers must be integers >= 0, got {num_workers!r}")
    cuda = torch.cuda.is_available()
    pins = list(pin_memory) if pin_memory is not None else ([False, True] if cuda else [False])
    prefetches = sorted(set(prefetch_factor))
    if any(isinstance(p, bool) or not isinstance(p, int) or p < 1 for p in prefetches):
        raise bad_argument(f"prefetch_factor values must be integers >= 1, got {prefetch_factor!r}")
    persists = list(dict.fromkeys(bool(p) for p in persistent_workers))
    epoch_samples = epoch_samples or n_data or batch_size * 100
    clock = clock or time.perf_counter
    out = progress

    t_start = clock()
    deadline_all = t_start + time_budget
    hazards = scan_dataset(dataset)
    tuner = _Tuner(dataset, batch_size, torch, collate_fn=collate_fn, loader_kwargs=loader_kwargs,
                   seed=seed, clock=clock, memory=memory, progress=progress)

    # Calibrate: seconds per batch in this process, to size the trials.
    probe = tuner.run(Setting(0, pins[0]), 3, 1, t_start + 0.05 * time_budget)
    if probe.error:
        raise bad_argument(f"the dataset failed in a num_workers=0 probe: {probe.error}")
    per_batch = probe.seconds / max(1, probe.samples / batch_size)
    n_extra = (len(prefetches) - 1) + (len(persists) - 1) + (len(pins) - 1)
    n_trials = len(counts) + max(0, n_extra) + (2 if measure_fixes else 0)
    slice_s = (deadline_all - clock()) / max(1, n_trials)
    n_batches = int(slice_s / 2 / max(per_batch, 1e-6))
    n_batches = min(400, max(n_batches, 6, 2 * max(counts) + 4))
    if n_data is not None:
        n_batches = min(n_batches, max(2, math.ceil(n_data / batch_size)))

    def note(t):
        if out is not None:
            msg = t.error or (f"{t.samples_per_s:.1f} samples/s steady, first batch "
                              f"{'/'.join(f'{x:.2f}' for x in t.first_batch_s)} s")
            print(f"[tune] {t.setting.label()}{' with ' + t.fix if t.fix else ''}: {msg}",
                  file=out, flush=True)

    def score(t):
        if t.error or t.samples_per_s <= 0:
            t.score, t.epoch_s = 0.0, math.inf
            return
        startup = t.first_batch_s[-1] if t.first_batch_s else 0.0
        t.epoch_s = startup + max(0, epoch_samples - batch_size) / t.samples_per_s
        t.score = epoch_samples / t.epoch_s

    trials = []
    skipped = []
    done = {}

    def run(setting, malloc=None, fix=None):
        remaining = deadline_all - clock()
        if fix is not None:
            # A fix is measured once a hazard is found, even when the sweep used the budget:
            # a recommendation to change malloc settings must rest on a measurement.
            remaining = max(remaining, 2 * max(slice_s, 1e-3))
        if remaining <= 0.5:
            skipped.append(setting)
            return None
        # A trial may run over its slice, never past twice the slice or the budget.
        dl = clock() + min(remaining, 2 * max(slice_s, 1e-3))
        t = tuner.run(setting, n_batches, 2, dl, malloc, fix)
        score(t)
        note(t)
        if fix is None:
            trials.append(t)
            done[setting] = t
        return t

    # 1. Worker counts at the default prefetch, non-persistent.
    for c in counts:
        run(Setting(c, pins[0], 2 if c > 0 else 2, False))
    ok = [t for t in trials if not t.error]
    best_w = max(ok, key=lambda t: t.score).setting.num_workers if ok else 0
    # 2. prefetch_factor, persistent_workers and pin_memory at the best worker count.
    if best_w > 0:
        cur = max((t for t in ok if t.setting.num_workers == best_w), key=lambda t: t.score).setting
        for pf in prefetches:
            s = dataclasses.replace(cur, prefetch_factor=pf)
            if s not in done:
                run(s)
        cur = max((done[s] for s in done if s.num_workers == best_w and not done[s].error),
                  key=lambda t: t.score).setting
        for pw in persists:
            s = dataclasses.replace(cur, persistent_workers=pw)
            if s not in done:
                run(s)
        cur = max((done[s] for s in done if s.num_workers == best_w and not done[s].error),
                  key=lambda t: t.score).setting
        for pin in pins:
            s = dataclasses.replace(cur, pin_memory=pin)
            if s not in done:
                run(s)
    elif len(pins) > 1:
        for pin in pins[1:]:
            s = Setting(0, pin)
            if s not in done:
                run(s)

    ok = [t for t in trials if not t.error]
    best = max(ok, key=lambda t: t.score) if ok else None
    recommended = None
    if best is not None:
        if target is not None:
            good = [t for t in ok if t.score >= target]
            pool = good or [best]
        else:
            pool = [t for t in ok if t.score >= (1 - tolerance) * best.score]
        recommended = min(pool, key=lambda t: (t.setting.cost(), -t.score))

    # 3. Hazards the trials measured.
    fixes = []
    if recommended is not None:
        objects = [h for h in hazards if h.kind == "python-objects"]
        hazards += _measured_hazards(trials, recommended, torch, tuner, objects)
        kf = recommended.kernel_frac
        if kf is not None and kf >= KERNEL_FRAC_HAZARD:
            evidence = (f"{100 * kf:.0f}% of the loading processes' CPU time is in the kernel"
                        + (f", {recommended.faults_per_sample:.0f} page faults per sample"
                           if recommended.faults_per_sample else ""))
            fix_text = ("fresh allocations fault in 4 KiB pages (~12 us each on our VMs); keep "
                        "freed memory mapped with malloc settings")
            if measure_fixes:
                base = recommended
                if recommended.setting.num_workers == 0:
                    # The fixes run in forked children: compare with a forked baseline.
                    base = run(recommended.setting, [], "no malloc settings (forked)")
                    if base is not None:
                        fixes.append(base)
                results = []
                for label, settings in MALLOC_FIXES:
                    t = run(recommended.setting, settings, label) if base is not None else None
                    if t is not None:
                        fixes.append(t)
                        results.append(t)
                good = [t for t in results if not t.error and base.score > 0 and
                        t.score >= (1 + FIX_MIN_GAIN) * base.score]
                if good:
                    g = max(good, key=lambda t: t.score)
                    fix_text += (f": measured {g.fix} -> {g.score:.1f} samples/s vs "
                                 f"{base.score:.1f} ({g.score / base.score:.2f}x); set it in the "
                                 f"environment before Python starts")
                elif results:
                    fix_text += (": measured, no gain here (" + ", ".join(
                        f"{t.fix}: {t.score:.1f}/s" for t in results) + f" vs {base.score:.1f}/s)")
            hazards.append(Hazard("kernel-time", "the loading processes spend much of their CPU "
                                  "time in the kernel", evidence, fix_text))
    result = TuneResult(trials, recommended, best, hazards, fixes, n_data, batch_size,
                        epoch_samples, clock() - t_start, tolerance, target, skipped)
    if chart_path:
        result.svg(chart_path)
    if json_path:
        result.to_json(json_path)
    return result


def _measured_hazards(trials, recommended, torch, tuner, objects=()):
    hazards = []
    grown = [t for t in trials if t.mem_growth_mb is not None and
             t.mem_growth_mb >= MEM_GROWTH_HAZARD_MB and
             (t.mem_growth_kb_per_sample or 0) >= MEM_GROWTH_HAZARD_KB_PER_SAMPLE]
    if grown:
        t = max(grown, key=lambda x: x.mem_growth_kb_per_sample)
        n = _safe_len(tuner.dataset)
        if objects:
            # The scan found the cause: Python objects whose refcounts each read touches.
            fix = (f"the copy-on-read of Python objects under fork ({objects[0].message}): "
                   "keep the Dataset's metadata in NumPy arrays / pyarrow / tensors instead of "
                   "lists of Python objects")
        else:
            fix = ("no large Python container was found on the Dataset, so this is the "
                   "worker's own memory (a cache in the Dataset, allocator heap growth while "
                   "warming up, or Python objects the scan did not reach): check that it levels "
                   "off over a longer run and bound any per-worker cache; if the Dataset keeps "
                   "lists of Python objects, store them as NumPy arrays / pyarrow / tensors")
        hazards.append(Hazard(
            "memory-growth", "worker memory grows with every sample read",
            f"{t.setting.label()}: private memory of a worker grew {t.mem_growth_mb:.1f} MB "
            f"({t.mem_growth_kb_per_sample:.1f} KB per sample read); over an epoch of "
            f"{n or '?'} samples that is up to {t.mem_growth_kb_per_sample * n / 1e3:.0f} MB "
            f"per worker", fix))
    errors = [t for t in trials if t.error and ("CUDA" in t.error or "forked" in t.error)]
    if errors:
        hazards.append(Hazard(
            "cuda-in-workers", "CUDA was used inside DataLoader workers",
            f"{errors[0].setting.label()}: {errors[0].error}",
            "create CUDA tensors in the training loop, not in the Dataset; or "
            "multiprocessing_context='spawn'"))
    floor = None
    threaded = [t for t in trials if t.max_threads is not None]
    if threaded:
        floor = _baseline_threads(torch)
        many = [t for t in threaded if t.max_threads > floor + 2]
        if many:
            t = max(many, key=lambda x: x.max_threads)
            hazards.append(Hazard(
                "threads", f"workers run {t.max_threads} threads each (a plain worker runs "
                f"{floor})", f"{t.setting.label()}: thread names {', '.join(t.thread_names[:6])}",
                "thread pools inside workers (OpenCV, OpenMP/MKL, numexpr) oversubscribe the "
                "cores: cv2.setNumThreads(0) and torch.set_num_threads(1) in worker_init_fn, "
                "OMP_NUM_THREADS=1"))
    return hazards


def _safe_len(ds):
    try:
        return len(ds)
    except TypeError:
        return 0
