"""Test helpers, and where the tests find the stoker package (imported by conftest.py, so
this runs before any test module).

Order: the build tree named by STOKER_PYTHON_BUILD (a CMake build directory configured with
-DSTOKER_BUILD_PYTHON=ON, or its python/ subdirectory); else the default build directories
build-py/ and build/ at the repository root; else an installed stoker (pip install .) whose
extension imports; else the pure-Python sources (python/stoker), where the tests that need
the compiled engine are skipped with a message that says how to build it.
"""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_BUILDS = ("build-py", "build")


def _candidates():
    env = os.environ.get("STOKER_PYTHON_BUILD")
    if env:
        yield os.path.join(env, "python") if os.path.isdir(os.path.join(env, "python")) else env
        return
    for b in DEFAULT_BUILDS:
        yield os.path.join(ROOT, b, "python")


def _has_extension(d):
    pkg = os.path.join(d, "stoker")
    return os.path.isdir(pkg) and any(n.startswith("_stoker") and n.endswith(".so")
                                      for n in os.listdir(pkg))


BUILD_DIR = None
for _d in _candidates():
    if _has_extension(_d):
        BUILD_DIR = _d
        break
if BUILD_DIR is None and os.environ.get("STOKER_PYTHON_BUILD"):
    raise RuntimeError(f"STOKER_PYTHON_BUILD={os.environ['STOKER_PYTHON_BUILD']} holds no "
                       f"stoker/_stoker*.so (build the _stoker target there)")


def _installed_has_extension():
    import importlib.util
    try:
        found = importlib.util.find_spec("stoker._stoker") is not None
    except ImportError:
        found = False
    if not found:  # forget a half-found package so the sources below are imported instead
        for k in [k for k in sys.modules if k == "stoker" or k.startswith("stoker.")]:
            del sys.modules[k]
    return found


if BUILD_DIR is None and _installed_has_extension():
    BUILD_DIR = ""  # use the installed package as it is
elif BUILD_DIR is None:
    sys.path.insert(0, os.path.join(ROOT, "python"))
else:
    sys.path.insert(0, BUILD_DIR)
# Subprocesses (distributed tests, examples) see the same package.
if BUILD_DIR != "":
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [sys.path[0]] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

import stoker  # noqa: E402

NO_EXT_REASON = (
    f"stoker's compiled engine is not built ({stoker.extension_error()}); build it with "
    f"`cmake -S . -B build-py -G Ninja -DSTOKER_BUILD_PYTHON=ON && ninja -C build-py _stoker` "
    f"or set STOKER_PYTHON_BUILD=<build dir>")

needs_ext = pytest.mark.skipif(not stoker.extension_available(), reason=NO_EXT_REASON)


def stoker_binary():
    """The CLI binary next to the extension's build tree (or on PATH)."""
    if BUILD_DIR:
        cand = os.path.join(os.path.dirname(BUILD_DIR), "stoker")
        if os.path.exists(cand):
            return cand
    for b in DEFAULT_BUILDS:
        cand = os.path.join(ROOT, b, "stoker")
        if os.path.exists(cand):
            return cand
    return None


def doctor_report(trace, tmp_path):
    """`stoker doctor TRACE --json` as a dict; skips the test when the CLI is not built."""
    import json
    import subprocess
    binary = stoker_binary()
    if binary is None:
        pytest.skip("the stoker CLI is not built")
    out = os.path.join(str(tmp_path), "doctor-report.json")
    subprocess.run([binary, "doctor", str(trace), "--json", out], check=True,
                   stdout=subprocess.DEVNULL)
    with open(out) as fh:
        return json.load(fh)


def write_image_folder(root, classes=3, per_class=8, size=(48, 40), seed=0):
    """A tiny ImageFolder of JPEGs with distinct content: root/class_k/img_i.jpg."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(seed)
    for c in range(classes):
        d = os.path.join(root, f"class_{c}")
        os.makedirs(d, exist_ok=True)
        for i in range(per_class):
            w = size[0] + int(rng.integers(0, 16))
            h = size[1] + int(rng.integers(0, 16))
            arr = rng.integers(0, 255, size=(h, w, 3), dtype=np.uint8)
            arr[: h // 2, :, c % 3] = 40 * c + 3 * i  # some structure so JPEG is not all noise
            Image.fromarray(arr).save(os.path.join(d, f"img_{i:03d}.jpg"), quality=90)
    return root


def fresh_process(test):
    """Runs the test in a new pytest process. For tests that measure this process's own
    memory or CPU (VmHWM, the heap, page faults, kernel time): earlier tests in a long
    suite leave the process with a high peak resident set, a grown heap and malloc
    thresholds moved (measured: after the token and Ray tests the peak was 557 MB and the
    tuners' host measures read other tests' state), so these run where only they ran."""
    import functools
    import inspect
    import subprocess

    @functools.wraps(test)
    def run(*args, **kwargs):
        if os.environ.get("STOKER_TEST_FRESH_PROCESS") == "1":
            return test(*args, **kwargs)
        node = f"{inspect.getfile(test)}::{test.__name__}"
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "-x", node], capture_output=True, text=True, timeout=900,
                           env=dict(os.environ, STOKER_TEST_FRESH_PROCESS="1"))
        last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
        if r.returncode == 0 and "skipped" in last and "passed" not in last:
            pytest.skip(f"{test.__name__} skipped in its own process: {last}")
        assert r.returncode == 0, f"{node} in a fresh process:\n{r.stdout[-6000:]}\n{r.stderr[-2000:]}"

    return run


def need_server(names, what):
    """Skips when a test server's variables are missing; fails instead when scripts/test.sh
    started the servers (STOKER_SERVERS_UP=1): a missing server is then an error."""
    missing = [v for v in names if not os.environ.get(v)]
    if missing:
        if os.environ.get("STOKER_SERVERS_UP") == "1":
            pytest.fail(f"{what} variables missing: {missing}")
        pytest.skip(f"{what} not running (needs " + ", ".join(missing) + ")")


def write_wds_shards(image_folder, out_dir, per_shard=8):
    """WebDataset shards (key.jpg + key.cls) of an image folder's files, in sorted order,
    written with Python's tarfile; returns their paths."""
    import io
    import tarfile

    files = []
    for cls, d in enumerate(sorted(os.listdir(image_folder))):
        for f in sorted(os.listdir(os.path.join(image_folder, d))):
            files.append((os.path.join(image_folder, d, f), cls))
    shards = []
    for s in range(0, len(files), per_shard):
        path = os.path.join(out_dir, "train-%03d.tar" % (s // per_shard))
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
            for i, (f, cls) in enumerate(files[s:s + per_shard]):
                key = "s%05d" % (s + i)
                with open(f, "rb") as fh:
                    jpg = fh.read()
                for name, data in ((key + ".jpg", jpg), (key + ".cls", str(cls).encode())):
                    ti = tarfile.TarInfo(name)
                    ti.size = len(data)
                    ti.mtime = 1700000000
                    t.addfile(ti, io.BytesIO(data))
        shards.append(path)
    return shards


def batch_digest(pipeline):
    """(index, image bytes, labels) of every batch of one pass: equal digests, equal data."""
    return [(list(b["index"]), b["image"].tobytes(), list(b["label"])) for b in pipeline]
