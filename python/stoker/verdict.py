"""The doctor's verdict on per-step timings (time waiting for data vs. time computing).

When the compiled extension carries the doctor (src/doctor, `DiagnoseSteps`), its rules
and wording are used, so `stoker.watch` and `stoker doctor` agree. Without it, a pure-Python
copy of the input-bound rule is used and the verdict says so (`source="fallback"`): the
thresholds are the doctor's anchors (TensorBoard profiler plugin: DataLoader share of the
step > 5% warns; TensorFlow's input-pipeline analyzer: >= 20% is "highly input-bound").
"""

import dataclasses

from ._errors import _ext, bad_argument

MODERATE_INPUT = 0.05  # share of step time waiting for input
HIGH_INPUT = 0.20


@dataclasses.dataclass
class Verdict:
    kind: str          # "input-bound", "partly input-bound", "compute-bound", "no data"
    headline: str      # one line, as `stoker doctor` prints it
    evidence: list     # lines with the numbers behind it
    fixes: list        # what to change, most effective first
    input_frac: float  # share of the measured time spent waiting for data
    source: str        # "doctor" (the C++ rules) or "fallback" (pure Python)

    def to_dict(self):
        return dataclasses.asdict(self)

    def __str__(self):
        lines = [self.headline] + [f"  evidence: {e}" for e in self.evidence]
        lines += [f"  fix: {f}" for f in self.fixes]
        return "\n".join(lines)


def _fallback(wait_s, step_s):
    total_wait, total_step = sum(wait_s), sum(step_s)
    total = total_wait + total_step
    n = len(wait_s)
    if n == 0 or total <= 0:
        return Verdict("no data", "no steps measured", [], [], 0.0, "fallback")
    frac = total_wait / total
    pct = 100.0 * frac
    evidence = [
        f"{pct:.1f}% of the time in {n} steps was spent waiting for the next batch "
        f"({1e3 * total_wait / n:.1f} ms/step waiting, {1e3 * total_step / n:.1f} ms/step "
        f"computing)"
    ]
    loader_fixes = [
        "raise DataLoader num_workers (about the CPU cores per GPU); stoker.tune_dataloader "
        "measures it on your Dataset",
        "pin_memory=True with .to(device, non_blocking=True)",
        "persistent_workers=True and a larger prefetch_factor",
        "a faster input pipeline: stoker.Pipeline (C++ decode and augmentation)",
    ]
    if frac >= HIGH_INPUT:
        return Verdict("input-bound",
                       f"input-bound: the GPU waited for data {pct:.0f}% of the time, so the "
                       f"input pipeline is the first thing to fix",
                       evidence, loader_fixes, frac, "fallback")
    if frac >= MODERATE_INPUT:
        return Verdict("partly input-bound",
                       f"partly input-bound: {pct:.0f}% of the time was spent waiting for data",
                       evidence, loader_fixes[:3], frac, "fallback")
    return Verdict("compute-bound",
                   f"compute-bound: waiting for data is only {pct:.1f}% of the time; the "
                   f"training step itself sets the pace",
                   evidence, ["look at the step itself: stoker doctor on a profiler trace"],
                   frac, "fallback")


def doctor_available():
    """True when the compiled doctor's step rules are bound (stoker._stoker.diagnose_steps)."""
    return _ext is not None and getattr(_ext, "HAVE_DOCTOR", False) and hasattr(
        _ext, "diagnose_steps")


def diagnose_steps(wait_s, step_s, *, batch_size=None):
    """The verdict for per-step times: `wait_s[i]` spent in next(), `step_s[i]` elsewhere
    (the training step). Uses the C++ doctor when it is built in, else the fallback."""
    wait_s = [float(w) for w in wait_s]
    step_s = [float(s) for s in step_s]
    if len(wait_s) != len(step_s):
        raise bad_argument(f"wait_s and step_s differ in length ({len(wait_s)} vs {len(step_s)})")
    if any(w < 0 for w in wait_s) or any(s < 0 for s in step_s):
        raise bad_argument("step times must be >= 0")
    if doctor_available():
        d = _ext.diagnose_steps(wait_s, step_s, batch_size or 0)
        return Verdict(d["kind"], d["headline"], list(d["evidence"]), list(d["fixes"]),
                       float(d["input_frac"]), "doctor")
    return _fallback(wait_s, step_s)
