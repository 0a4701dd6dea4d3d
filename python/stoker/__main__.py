"""python -m stoker: the Python-side commands.

    python -m stoker tune dataloader --script data.py [--dataset NAME] --batch-size 64
    stoker tune dataloader ...      (the CLI's front for the same command)
        Loads data.py, takes its Dataset (a function or variable named by --dataset;
        default: `dataset`, then `get_dataset`, `make_dataset`, `build_dataset`), and runs
        stoker.tune_dataloader on it: table, chart, recommendation, hazards.
    python -m stoker tune batch-size --script train.py [--memory-fraction 0.9] [--time 120]
        Sweeps batch sizes on the script's train_step/make_batch (tune_batch.ENTRY_HELP):
        largest size that fits, the knee, headroom, accumulation, LR and pipeline advice.

Exit codes as the stoker CLI: 0 ok, 1 failure, 2 bad input or usage.
"""

import argparse
import os
import runpy
import sys

from ._errors import InvalidArgumentError
from . import tune_batch
from .tune import tune_dataloader

_DATASET_NAMES = ("dataset", "get_dataset", "make_dataset", "build_dataset")


def _load_dataset(script, name):
    ns = runpy.run_path(script, run_name="__stoker_tune__")
    names = [name] if name else list(_DATASET_NAMES)
    for n in names:
        if n in ns:
            obj = ns[n]
            if callable(obj) and not hasattr(obj, "__getitem__"):
                obj = obj()
            return obj
    raise InvalidArgumentError(f"{script} defines none of {', '.join(names)} (the Dataset, or a "
                               f"function returning it; choose with --dataset)")


def _ints(s):
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from None


def main(argv=None):
    # `stoker tune dataloader` (src/cli/cmd_tune.cc) runs this module with STOKER_PROG=stoker.
    ap = argparse.ArgumentParser(prog=os.environ.get("STOKER_PROG") or "python -m stoker")
    sub = ap.add_subparsers(dest="cmd", required=True)
    tune = sub.add_parser("tune", help="measure and tune a data loader")
    tsub = tune.add_subparsers(dest="what", required=True)
    dl = tsub.add_parser("dataloader", help="sweep DataLoader settings on your Dataset")
    dl.add_argument("--script", required=True, help="Python file that builds the Dataset")
    dl.add_argument("--dataset", help="name of the Dataset (or function) in the script")
    dl.add_argument("--batch-size", type=int, required=True)
    dl.add_argument("--time", type=float, default=60.0, help="time budget in seconds")
    dl.add_argument("--workers", type=_ints, help="worker counts to try, e.g. 0,2,4,8")
    dl.add_argument("--tolerance", type=float, default=0.03)
    dl.add_argument("--target", type=float, help="samples/s the training loop needs")
    dl.add_argument("--epoch-samples", type=int, help="samples per epoch (default len(dataset))")
    dl.add_argument("--no-fixes", action="store_true", help="do not measure malloc fixes")
    dl.add_argument("--json", help="write the report as JSON here")
    dl.add_argument("--svg", help="write the chart as SVG here")
    dl.add_argument("--quiet", action="store_true", help="no per-trial progress lines")
    tune_batch.add_parser(tsub)  # tune batch-size (python/stoker/tune_batch.py)
    tk = sub.add_parser("tokenize", help="text:SRC tokens:DST (stoker convert runs this)")
    tk.add_argument("src")
    tk.add_argument("dst")
    tk.add_argument("--resume", action="store_true")
    tk.add_argument("--threads", type=int, default=0, help="worker processes (default: cores)")
    vt = sub.add_parser("verify-tokens", help="recompute a tokenized corpus's manifest")
    vt.add_argument("dst")
    try:
        a = ap.parse_args(argv)
    except SystemExit as e:
        return 0 if e.code == 0 else 2
    if a.cmd in ("tokenize", "verify-tokens"):
        return _tokens_command(a)
    if getattr(a, "what", None) == "batch-size":
        return tune_batch.main(a)
    try:
        ds = _load_dataset(a.script, a.dataset)
        r = tune_dataloader(ds, a.batch_size, time_budget=a.time, num_workers=a.workers,
                            tolerance=a.tolerance, target=a.target,
                            epoch_samples=a.epoch_samples, measure_fixes=not a.no_fixes,
                            progress=None if a.quiet else sys.stderr,
                            chart_path=a.svg, json_path=a.json)
    except (ValueError, OSError) as e:
        print(f"stoker: {e}", file=sys.stderr)
        return 2
    print(r)
    if a.json:
        r.to_json(a.json)
    if a.svg:
        r.svg(a.svg)
    return 0 if r.recommended is not None else 1


def _tokens_command(a):
    from . import tokenize_corpus as tz
    from ._errors import StokerError

    try:
        if a.cmd == "tokenize":
            m = tz.tokenize(a.src, a.dst, resume=a.resume, workers=a.threads)
            if m.get("already_complete"):
                print(f"{a.dst}: already complete")
            print(f"{m['documents']} documents, {m['tokens']} tokens in {len(m['shards'])} "
                  f"shards, {m['skipped']} skipped, checksum {m['checksum']}")
            return 0
        ok, problems, m = tz.verify(a.dst)
    except StokerError as e:
        print(f"stoker: {e}", file=sys.stderr)
        return 1 if type(e).__name__ == "CorruptDataError" else 2
    except (ValueError, OSError) as e:
        print(f"stoker: {e}", file=sys.stderr)
        return 2
    if not ok:
        for p in problems:
            print(f"stoker: verify: {p}", file=sys.stderr)
        return 1
    print(f"ok: {m['documents']} documents, {m['tokens']} tokens, checksum {m['checksum']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
