"""stoker.tune_dataloader on small generated Datasets.

No assertion here is about how fast anything ran. Where a behaviour depends on the machine
having two cores free (workers help a CPU-bound Dataset), the test first checks that two
processes really run in parallel on this machine right now, and skips otherwise."""

import concurrent.futures
import io
import json
import os
import threading
import time

import numpy as np
import pytest

from stoker_testing import fresh_process  # noqa: E402

import stoker
from stoker import tune

torch = pytest.importorskip("torch")


def _spin(n):
    acc = 0
    for j in range(n):
        acc = (acc + j * 7) % 1000003
    return acc


class CpuHeavy(torch.utils.data.Dataset):
    """Pure-Python work per sample (holds the GIL; only processes parallelize it)."""

    def __len__(self):
        return 4000

    def __getitem__(self, i):
        return torch.tensor([_spin(20000) + i])


class ObjectList(torch.utils.data.Dataset):
    """Metadata as a list of Python tuples, as torchvision's ImageFolder keeps `samples`."""

    def __init__(self, n=300_000):
        self.samples = [(f"class_{i % 10}/img_{i:07d}.jpg", i % 10) for i in range(n)]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        return torch.tensor([len(path), label])


class NumpyMeta(torch.utils.data.Dataset):
    """The same metadata in NumPy arrays: no refcounts to touch."""

    def __init__(self, n=300_000):
        self.labels = np.arange(n, dtype=np.int64) % 10
        self.lengths = np.full(n, 26, dtype=np.int64)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return torch.tensor([self.lengths[i], self.labels[i]])


def _parallel_capacity(n=1_500_000, tries=2):
    """How much faster two processes finish two CPU chunks than one process does (the best
    of `tries` measurements, each chunk about 0.1 s)."""
    best = 0.0
    with concurrent.futures.ProcessPoolExecutor(2) as ex:
        list(ex.map(_spin, [1000, 1000]))  # start the processes first
        for _ in range(tries):
            t0 = time.perf_counter()
            _spin(n)
            _spin(n)
            serial = time.perf_counter() - t0
            t0 = time.perf_counter()
            list(ex.map(_spin, [n, n]))
            parallel = time.perf_counter() - t0
            best = max(best, serial / parallel)
    return best


def test_workers_help_a_cpu_heavy_dataset():
    # A speedup from workers can be shown only while two cores are free: the machine is
    # checked before and after the sweep, and a sweep that a busy machine may have disturbed
    # is run again (at most 3 times) instead of judged.
    caps = []
    for _ in range(3):
        cap = _parallel_capacity()
        caps.append(f"{cap:.2f}x before")
        if cap < 1.5:
            continue
        r = stoker.tune_dataloader(CpuHeavy(), batch_size=8, time_budget=12, num_workers=[0, 2],
                                   prefetch_factor=(2,), persistent_workers=(False,),
                                   measure_fixes=False)
        after = _parallel_capacity()
        caps.append(f"{after:.2f}x after")
        if after >= 1.5:
            break
    else:
        pytest.skip(f"two processes ran only {', '.join(caps)} faster than one on this machine "
                    f"(busy): a parallel speedup cannot be shown")
    by = {t.setting.num_workers: t for t in r.trials}
    assert set(by) == {0, 2} and not any(t.error for t in r.trials)
    assert by[2].samples_per_s > by[0].samples_per_s
    assert r.recommended.setting.num_workers == 2, r.table()
    assert r.recommended_kwargs["num_workers"] == 2
    assert r.speedup() > 1.0


def test_memory_growth_of_python_object_lists():
    r = stoker.tune_dataloader(ObjectList(), batch_size=32, time_budget=8, num_workers=[0, 1],
                               prefetch_factor=(2,), persistent_workers=(False,),
                               measure_fixes=False)
    kinds = {h.kind for h in r.hazards}
    assert "python-objects" in kinds
    h = next(h for h in r.hazards if h.kind == "python-objects")
    assert "dataset.samples" in h.message and "300000" in h.message
    w1 = next(t for t in r.trials if t.setting.num_workers == 1)
    assert w1.mem_growth_kb_per_sample is not None
    # Each random read copies about one 4 KiB page into the worker.
    assert w1.mem_growth_kb_per_sample > tune.MEM_GROWTH_HAZARD_KB_PER_SAMPLE
    assert "memory-growth" in kinds
    g = next(h for h in r.hazards if h.kind == "memory-growth")
    assert "copy-on-read" in g.fix and "dataset.samples" in g.fix  # the cause, named


def test_numpy_metadata_has_no_growth_hazard():
    r = stoker.tune_dataloader(NumpyMeta(), batch_size=32, time_budget=8, num_workers=[0, 1],
                               prefetch_factor=(2,), persistent_workers=(False,),
                               measure_fixes=False)
    kinds = {h.kind for h in r.hazards}
    assert "python-objects" not in kinds and "memory-growth" not in kinds
    w1 = next(t for t in r.trials if t.setting.num_workers == 1)
    assert w1.mem_growth_kb_per_sample is not None
    assert w1.mem_growth_kb_per_sample < tune.MEM_GROWTH_HAZARD_KB_PER_SAMPLE


class H5Dataset(torch.utils.data.Dataset):
    def __init__(self, path):
        import h5py
        self.f = h5py.File(path, "r")  # the hazard: opened in the parent, before fork
        self.x = self.f["x"]

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.from_numpy(self.x[i])


def test_detects_handles_opened_before_fork(tmp_path):
    h5py = pytest.importorskip("h5py")
    path = str(tmp_path / "d.h5")
    with h5py.File(path, "w") as f:
        f["x"] = np.zeros((16, 4), dtype=np.float32)
    hz = tune.scan_dataset(H5Dataset(path))
    msgs = [h.message for h in hz if h.kind == "open-file-before-fork"]
    assert any("dataset.f" in m and "HDF5 File" in m for m in msgs)
    assert any("dataset.x" in m and "HDF5 Dataset" in m for m in msgs)

    lmdb = pytest.importorskip("lmdb")

    class LmdbDataset(torch.utils.data.Dataset):
        def __init__(self):
            self.env = lmdb.open(str(tmp_path / "db"), map_size=1 << 20)

        def __len__(self):
            return 1

        def __getitem__(self, i):
            return 0

    hz = tune.scan_dataset(LmdbDataset())
    assert any(h.kind == "open-file-before-fork" and "LMDB Environment" in h.message
               for h in hz)

    class Wrapped(torch.utils.data.Dataset):  # a handle one level down (Subset-like)
        def __init__(self):
            self.inner = type("Inner", (), {})()
            self.inner.fh = open(path, "rb")

    hz = tune.scan_dataset(Wrapped())
    assert any("dataset.inner.fh" in h.message for h in hz)
    assert tune.scan_dataset(NumpyMeta(100)) == []


_POOLS = {}  # pid -> (executor, event): threads do not survive fork, so one per process


class ThreadyDataset(torch.utils.data.Dataset):
    """Starts a thread pool inside each worker, as OpenCV or OpenMP do."""

    def __len__(self):
        return 2000

    def __getitem__(self, i):
        if os.getpid() not in _POOLS:
            ev = threading.Event()
            for _ in range(6):  # six idle threads that stay alive (daemons: exit does not wait)
                threading.Thread(target=ev.wait, daemon=True).start()
            _POOLS[os.getpid()] = ev
        return torch.tensor([i])


def test_detects_thread_pools_inside_workers():
    r = stoker.tune_dataloader(ThreadyDataset(), batch_size=16, time_budget=6,
                               num_workers=[0, 1], prefetch_factor=(2,),
                               persistent_workers=(False,), measure_fixes=False)
    w1 = next(t for t in r.trials if t.setting.num_workers == 1)
    assert w1.max_threads >= 7
    assert any(h.kind == "threads" for h in r.hazards)
    ev = _POOLS.pop(os.getpid(), None)  # the parent ran the num_workers=0 trials too
    if ev:
        ev.set()


class FreshPages(torch.utils.data.Dataset):
    """Each sample allocates and fills a fresh 40 MB buffer: above glibc's largest dynamic
    mmap threshold (32 MiB), so every allocation is a new mapping faulted in page by page."""

    def __len__(self):
        return 400

    def __getitem__(self, i):
        a = np.empty(40 << 20, dtype=np.uint8)
        a[::4096] = 1  # touch every page
        return torch.tensor([int(a[0]) + i])


@fresh_process  # measures this process's memory/CPU
def test_kernel_time_hazard_is_measured_not_assumed():
    out = io.StringIO()
    r = stoker.tune_dataloader(FreshPages(), batch_size=2, time_budget=10, num_workers=[0, 1],
                               prefetch_factor=(2,), persistent_workers=(False,),
                               progress=out)
    rec = r.recommended
    assert rec.kernel_frac is not None and rec.faults_per_sample > 0
    assert rec.kernel_frac >= tune.KERNEL_FRAC_HAZARD
    h = next(h for h in r.hazards if h.kind == "kernel-time")
    assert "measured" in h.fix
    labels = [t.fix for t in r.fixes]
    assert "MALLOC_MMAP_THRESHOLD_=67108864" in labels
    assert all(t.error is None for t in r.fixes)
    assert "[tune]" in out.getvalue()


def test_report_table_chart_svg_json(tmp_path):
    r = stoker.tune_dataloader(NumpyMeta(5000), batch_size=64, time_budget=4,
                               num_workers=[0, 1], prefetch_factor=(2, 4),
                               persistent_workers=(False, True), measure_fixes=False)
    text = str(r)
    assert "samples/s" in text and "<- recommended" in text and "recommended: DataLoader(" in text
    assert r.chart().count("|") >= 2 * len([t for t in r.trials if not t.error])
    svg = r.svg(str(tmp_path / "c.svg"))
    assert svg.startswith("<svg") and svg.count("<rect") == len([t for t in r.trials
                                                                 if not t.error])
    d = json.loads(r.to_json(str(tmp_path / "r.json")))
    assert d["recommended_kwargs"] == r.recommended_kwargs
    assert len(d["trials"]) + len(d["skipped"]) >= 2
    # A setting recommended with workers passes its prefetch/persistence to the DataLoader.
    loader = torch.utils.data.DataLoader(NumpyMeta(100), batch_size=8, **r.recommended_kwargs)
    assert sum(len(b) for b in loader) == 100


def test_cheapest_within_tolerance_and_target():
    r = stoker.tune_dataloader(NumpyMeta(2000), batch_size=64, time_budget=3,
                               num_workers=[0, 1], prefetch_factor=(2,),
                               persistent_workers=(False,), tolerance=0.99,
                               measure_fixes=False)
    assert r.recommended.setting.num_workers == 0  # anything is within 99%: the cheapest
    r2 = stoker.tune_dataloader(NumpyMeta(2000), batch_size=64, time_budget=3,
                                num_workers=[0, 1], prefetch_factor=(2,),
                                persistent_workers=(False,), target=1e-3, measure_fixes=False)
    assert r2.recommended.setting.num_workers == 0


def test_bad_arguments_raise_value_errors():
    ds = NumpyMeta(10)
    with pytest.raises(ValueError, match="batch_size"):
        stoker.tune_dataloader(ds, 0)
    with pytest.raises(ValueError, match="batch_size"):
        stoker.tune_dataloader(ds, "8")
    with pytest.raises(ValueError, match="time_budget"):
        stoker.tune_dataloader(ds, 8, time_budget=0)
    with pytest.raises(ValueError, match="num_workers"):
        stoker.tune_dataloader(ds, 8, num_workers=[-1])
    with pytest.raises(ValueError, match="tolerance"):
        stoker.tune_dataloader(ds, 8, tolerance=1.5)
    with pytest.raises(ValueError, match="prefetch_factor"):
        stoker.tune_dataloader(ds, 8, prefetch_factor=(0,))
    with pytest.raises(ValueError, match="torch Dataset"):
        stoker.tune_dataloader(42, 8)
    with pytest.raises(ValueError, match="empty"):
        stoker.tune_dataloader(NumpyMeta(0), 8)

    class Broken(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            raise KeyError("no such sample")

    with pytest.raises(ValueError, match="no such sample"):
        stoker.tune_dataloader(Broken(), 2, time_budget=2)


def test_worker_counts_cover_cores_and_beyond():
    assert tune._worker_counts(2, None) == [0, 1, 2, 3]
    c = tune._worker_counts(16, None)
    assert c[0] == 0 and 16 in c and max(c) == 20
    assert tune._worker_counts(8, 4) == [0, 1, 2, 4]


def test_cli_front(tmp_path):
    script = tmp_path / "data.py"
    script.write_text(
        "import torch\n"
        "class D(torch.utils.data.Dataset):\n"
        "    def __len__(self): return 500\n"
        "    def __getitem__(self, i): return torch.tensor([i])\n"
        "def dataset():\n"
        "    return D()\n")
    import subprocess
    import sys
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "stoker", "tune", "dataloader", "--script",
                        str(script), "--batch-size", "16", "--time", "3", "--workers", "0,1",
                        "--json", str(out)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ))
    assert p.returncode == 0, p.stderr
    assert "recommended: DataLoader(" in p.stdout
    assert json.loads(out.read_text())["batch_size"] == 16

    from stoker.__main__ import main
    err = io.StringIO()
    real = sys.stderr
    sys.stderr = err
    try:
        assert main(["tune", "dataloader", "--script", str(script), "--batch-size", "0"]) == 2
        assert main(["tune", "dataloader", "--script", str(script), "--batch-size", "4",
                     "--dataset", "nope"]) == 2
    finally:
        sys.stderr = real
    assert "batch_size" in err.getvalue() and "nope" in err.getvalue()


def test_stoker_cli_tune_dataloader_runs_the_python_tuner(tmp_path):
    """`stoker tune dataloader ...` (the C++ CLI, src/cli/cmd_tune.cc) hands every argument
    to `python -m stoker tune dataloader`: same flags, report and exit codes."""
    import subprocess
    import sys
    from stoker_testing import stoker_binary
    exe = stoker_binary()
    if exe is None:
        pytest.skip("the stoker CLI binary is not built")
    if subprocess.run([exe, "tune", "--help"], capture_output=True).returncode != 0:
        pytest.skip(f"{exe} predates `stoker tune` (rebuild it)")
    script = tmp_path / "data.py"
    script.write_text(
        "import torch\n"
        "class D(torch.utils.data.Dataset):\n"
        "    def __len__(self): return 300\n"
        "    def __getitem__(self, i): return torch.tensor([i])\n"
        "dataset = D()\n")
    env = dict(os.environ, STOKER_PYTHON=sys.executable)
    out = tmp_path / "r.json"
    p = subprocess.run([exe, "tune", "dataloader", "--script", str(script), "--batch-size", "8",
                        "--time", "3", "--workers", "0,1", "--json", str(out), "--quiet"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert "recommended: DataLoader(" in p.stdout
    assert json.loads(out.read_text())["batch_size"] == 8
    h = subprocess.run([exe, "tune", "dataloader", "--help"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert h.returncode == 0 and "--script" in h.stdout and "usage: stoker tune" in h.stdout
    bad = subprocess.run([exe, "tune", "dataloader", "--script", str(script), "--batch-size",
                          "0"], capture_output=True, text=True, timeout=60, env=env)
    assert bad.returncode == 2 and "batch_size" in bad.stderr
    missing = subprocess.run([exe, "tune", "dataloader", "--batch-size", "8"],
                             capture_output=True, text=True, timeout=60, env=env)
    assert missing.returncode == 2 and "--script" in missing.stderr
    nopy = subprocess.run([exe, "tune", "dataloader", "--help"], capture_output=True, text=True,
                          timeout=60, env=dict(env, STOKER_PYTHON="/nonexistent/python3"))
    assert nopy.returncode == 2 and "STOKER_PYTHON" in nopy.stderr


def test_imagefolder_samples_list_is_flagged(tmp_path):
    torchvision = pytest.importorskip("torchvision")
    from stoker_testing import write_image_folder
    root = write_image_folder(str(tmp_path / "imgs"), classes=2, per_class=6)
    ds = torchvision.datasets.ImageFolder(root)
    hz = tune.scan_dataset(ds, objects_threshold=10)  # real ImageFolders hold millions
    msgs = [h.message for h in hz if h.kind == "python-objects"]
    assert any(m.startswith("dataset.samples is a Python list of 12") for m in msgs)
    assert tune.scan_dataset(ds) == []  # 12 samples are below the default threshold


@fresh_process  # measures this process's memory/CPU
def test_proc_readers_on_this_process():
    from stoker import _proc
    u, s, minflt, _ = _proc.cpu_times(os.getpid())
    assert u >= 0 and s >= 0 and minflt > 0
    n, names = _proc.threads(os.getpid())
    assert n >= 1 and len(names) == n
    before = _proc.private_anon_bytes(os.getpid())
    block = np.ones(32 << 20, dtype=np.uint8)  # 32 MiB of fresh anonymous pages
    after = _proc.private_anon_bytes(os.getpid())
    assert after - before >= 30 << 20
    del block
    assert _proc.cpu_times(2 ** 30) is None


def test_detects_opencv_threads_and_cuda_initialized_before_fork(monkeypatch):
    import sys
    import types
    cv2 = types.SimpleNamespace(getNumThreads=lambda: 8, __name__="cv2")
    monkeypatch.setitem(sys.modules, "cv2", cv2)
    hz = tune.scan_dataset(NumpyMeta(10))
    h = [h for h in hz if h.kind == "threads"]
    assert len(h) == 1 and "OpenCV uses 8 threads" in h[0].message
    assert "cv2.setNumThreads(0)" in h[0].fix
    cv2.getNumThreads = lambda: 0  # cv2.setNumThreads(0) done: no hazard
    assert tune.scan_dataset(NumpyMeta(10)) == []

    import multiprocessing
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: "fork")
    hz = tune.scan_dataset(NumpyMeta(10))
    assert [h.kind for h in hz] == ["cuda-in-workers"]
    assert "multiprocessing_context='spawn'" in hz[0].fix
    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: "spawn")
    assert tune.scan_dataset(NumpyMeta(10)) == []


class CudaInWorkers(torch.utils.data.Dataset):
    """Touches "CUDA" in __getitem__: fine in the parent, an error in a forked worker (the
    message is PyTorch's own)."""

    def __init__(self):
        self.parent = os.getpid()

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if os.getpid() != self.parent:
            raise RuntimeError("Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
                               "multiprocessing, you must use the 'spawn' start method")
        return torch.tensor([i])


def test_cuda_error_in_workers_is_a_hazard_and_workers_are_not_recommended():
    r = stoker.tune_dataloader(CudaInWorkers(), batch_size=4, time_budget=4, num_workers=[0, 1],
                               prefetch_factor=(2,), persistent_workers=(False,),
                               measure_fixes=False)
    w1 = next(t for t in r.trials if t.setting.num_workers == 1)
    # The DataLoader re-raises "Caught RuntimeError in DataLoader worker process 0." with
    # the worker's traceback below: the error keeps the line that says what happened.
    assert w1.error and "Cannot re-initialize CUDA in forked subprocess" in w1.error
    assert r.recommended.setting.num_workers == 0
    h = [h for h in r.hazards if h.kind == "cuda-in-workers"]
    assert len(h) == 1 and "workers=1" in h[0].evidence
    assert "error: " in r.table()
