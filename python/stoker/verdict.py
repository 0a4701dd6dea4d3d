"""The doctor's verdict on per-step timings (time waiting for data vs. time computing).

When the compiled extension carries the doctor (src/doctor, `DiagnoseSteps`), its rules
and wording are used, so `stoker.watch` and `stoker doctor` agree (`source="doctor"`).
Without it, a pure-Python copy of the same per-step rules is used and the verdict says so
(`source="fallback"`). The rules (docs/doctor.md has the sources): waiting >= 20% of the
step is input_bound (TensorFlow's input-pipeline analyzer, "highly input-bound"), >= 5% is
a finding (TensorBoard profiler plugin), below 5% the loop is compute_bound; in between it
is healthy ("mostly fed").
"""

import dataclasses
import os

from ._errors import _ext, bad_argument

INPUT_WARN = 0.05
INPUT_VERDICT = 0.20


@dataclasses.dataclass
class Verdict:
    kind: str          # the doctor's verdict name: "input_bound", "healthy", "compute_bound",
                       # "unknown" (no steps measured)
    headline: str      # one sentence, as `stoker doctor` prints it
    evidence: list     # the numbers behind it
    fixes: list        # what to change
    input_frac: float  # share of the step spent waiting for data
    source: str        # "doctor" (the C++ rules) or "fallback" (the Python copy)
    confidence: float = 0.0
    text: str = ""     # the doctor's full text rendering (doctor only)
    findings: list = dataclasses.field(default_factory=list)  # [{id, severity, title,
                       # evidence, fix, expected_speedup}] (stoker.ray.diagnose)
    report: dict = None  # the doctor's JSON report, parsed (stoker.ray.diagnose)

    def to_dict(self):
        return dataclasses.asdict(self)

    def __str__(self):
        lines = [self.headline] + [f"  evidence: {e}" for e in self.evidence]
        lines += [f"  fix: {f}" for f in self.fixes]
        return "\n".join(lines)


# -- the fallback: the doctor's DiagnoseSteps, in Python ---------------------------------

def _pct(f):
    return f"{f * 100:.0f}%"


def _pct1(f):
    return f"{f * 100:.1f}%"


def _ms(s):
    if s >= 10:
        return f"{s:.1f} s"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 0.01:
        return f"{s * 1e3:.0f} ms"
    return f"{s * 1e3:.1f} ms"


def _speedup(step_s, removed_s):
    if step_s <= 0 or removed_s <= 0:
        return 1.0
    removed_s = min(removed_s, 0.95 * step_s)
    return step_s / (step_s - removed_s)


def _loader_fix(cpus):
    workers = (f"up to about {cpus} (the cores per GPU)" if cpus > 0
               else "up to the number of cores per GPU (start with 4-8)")
    return ("The DataLoader workers do not keep up. If cores are idle, raise num_workers "
            f"({workers}); raise prefetch_factor (batches in flight = prefetch_factor x "
            "num_workers) to absorb jitter; keep persistent_workers=True. If the cores are "
            "busy, make each sample cheaper: a faster format or storage (stoker convert, a local "
            "NVMe cache), decode at reduced size, or move augmentation to the GPU (DALI, "
            "torchvision.transforms.v2 on CUDA tensors); the stoker pipeline does this with a "
            "self-tuning thread budget.")


def _fallback(wait_s, compute_s, cpus):
    n = len(wait_s)
    data = sum(wait_s)
    total = data + sum(compute_s)
    step = total / n
    d = data / total
    evidence, fixes = [], []
    if d >= INPUT_WARN:
        evidence.append(f"{_pct(d)} of the {_ms(step)} step ({_ms(d * step)} per step, over {n} "
                        f"steps) is spent waiting in DataLoader.__next__.")
        fixes.append(_loader_fix(cpus))
    up = _speedup(step, d * step)
    if d >= INPUT_VERDICT:
        return Verdict("input_bound", f"Input-bound: {_pct(d)} of each {_ms(step)} step waits "
                       f"for the DataLoader (up to {up:.2f}x).", evidence, fixes, d, "fallback",
                       min(0.9, max(0.2, 0.55 + 0.35 * min(1.0, d / INPUT_VERDICT - 1.0))))
    if d < INPUT_WARN:
        return Verdict("compute_bound", f"Not input-bound: the DataLoader wait is {_pct1(d)} of "
                       f"the {_ms(step)} step; the rest is the training step itself.", evidence,
                       fixes, d, "fallback",
                       min(0.85, max(0.3, 0.6 + 0.3 * (1.0 - d / INPUT_WARN))))
    return Verdict("healthy", f"Mostly fed: the DataLoader wait is {_pct(d)} of the {_ms(step)} "
                   f"step (up to {up:.2f}x if removed).", evidence, fixes, d, "fallback", 0.5)


def doctor_available():
    """True when the compiled doctor's step rules are bound (stoker._stoker.diagnose_steps)."""
    return _ext is not None and getattr(_ext, "HAVE_DOCTOR", False) and hasattr(
        _ext, "diagnose_steps")


def diagnose_steps(wait_s, compute_s, *, batch_size=None, cpus=None):
    """The verdict for per-step times: `wait_s[i]` spent in next(), `compute_s[i]` in the
    rest of the step (the training step). Uses the C++ doctor when it is built in, else the
    Python copy of its rules. Steps with no time at all are ignored."""
    wait_s = [float(w) for w in wait_s]
    compute_s = [float(s) for s in compute_s]
    if len(wait_s) != len(compute_s):
        raise bad_argument(f"wait_s and compute_s differ in length ({len(wait_s)} vs "
                           f"{len(compute_s)})")
    if any(w < 0 for w in wait_s) or any(s < 0 for s in compute_s):
        raise bad_argument("step times must be >= 0")
    pairs = [(w, c) for w, c in zip(wait_s, compute_s) if w + c > 0]
    if not pairs:
        # The doctor's `unknown` verdict: no evidence, and what to record next.
        return Verdict("unknown", "Unknown: no steps measured yet.", [],
                       ["Record next: time a few training steps (iterate the loader)."], 0.0,
                       "doctor" if doctor_available() else "fallback")
    wait_s, compute_s = [p[0] for p in pairs], [p[1] for p in pairs]
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    if doctor_available():
        d = _ext.diagnose_steps(wait_s, compute_s, batch_size or 0, cpus)
        return Verdict(d["kind"], d["headline"], list(d["evidence"]), list(d["fixes"]),
                       float(d["input_frac"]), "doctor", float(d["confidence"]), d["text"])
    return _fallback(wait_s, compute_s, cpus)
