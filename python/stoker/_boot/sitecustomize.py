# stoker watch's bootstrap. `stoker watch` puts this folder first on the child's PYTHONPATH,
# so every Python process of the job (the launcher, each rank, spawned workers) imports it
# at start-up. It does two things and nothing else:
#   1. runs the sitecustomize that would have run without it (the next one on sys.path:
#      Debian's /usr/lib/python3.X/sitecustomize.py, a virtualenv's, the user's own);
#   2. loads stoker's probe (../probe.py, by path: the stoker package itself is not
#      imported, so the job's own `import stoker` and its version stay untouched).
# Nothing here may raise into the job or print into its output: errors go to the probe's
# report file (STOKER_PROBE_DIR) when it can be written, else they are dropped.


def _stoker_boot():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    errors = []
    # 1. Chain the next sitecustomize on the path (not this one).
    try:
        path = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
        if spec is not None and spec.origin and os.path.abspath(spec.origin) != __file__:
            mod = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = mod
            spec.loader.exec_module(mod)
            os.environ.setdefault("STOKER_PROBE_CHAINED", spec.origin)
    except Exception as e:  # the other sitecustomize failed: as Python itself, go on
        errors.append(f"the existing sitecustomize failed: {type(e).__name__}: {e}")
    # 2. The probe.
    if not os.environ.get("STOKER_PROBE_DIR"):
        return
    try:
        probe_path = os.path.join(os.path.dirname(here), "probe.py")
        spec = importlib.util.spec_from_file_location("_stoker_probe", probe_path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["_stoker_probe"] = mod
        spec.loader.exec_module(mod)
        mod.install(errors)
    except Exception as e:
        try:
            import json
            d = os.environ["STOKER_PROBE_DIR"]
            with open(os.path.join(d, f"probe-{os.getpid()}.jsonl"), "a") as f:
                f.write(json.dumps({"kind": "error", "pid": os.getpid(),
                                    "error": f"probe failed to load: {type(e).__name__}: {e}"})
                        + "\n")
        except Exception:
            pass


_stoker_boot()
del _stoker_boot
