"""stoker.Pipeline against the C++ engine: same outputs, zero-copy views, exact resume,
argument checking and error translation."""

import json
import os
import zlib

import numpy as np
import pytest

import stoker
from stoker_testing import needs_ext, write_image_folder

pytestmark = needs_ext

SMALL = dict(decode="val", image_size=32, val_resize=36, threads=2, prefetch=2)


def cpp_options(p):
    """The option dict the Python layer handed to the engine (for the C++ reference run)."""
    return dict(p._options)


def crc(a):
    return zlib.crc32(np.ascontiguousarray(a).view(np.uint8).reshape(-1).data)


def digest(pipeline):
    rows = []
    for b in pipeline:
        img = b["image"] if "image" in b else b["data"]
        img = img.numpy() if hasattr(img, "numpy") else img
        rows.append({"size": len(b["label"]), "index": list(np.asarray(b["index"])),
                     "label": list(np.asarray(b["label"])), "crc32": crc(img)})
    return rows


def test_outputs_equal_the_cpp_engine(image_folder):
    for kw in (dict(SMALL, shuffle=True, seed=7, batch_size=5),
               dict(decode="train", image_size=24, threads=3, seed=3, batch_size=4),
               dict(SMALL, layout="uint8", shuffle=False, batch_size=8, drop_last=True)):
        p = stoker.Pipeline(image_folder, **kw)
        mine = digest(p)
        ref = stoker._errors._ext._cpp_digest(cpp_options(p), epoch=0)
        assert len(mine) == len(ref) == len(p)
        for m, r in zip(mine, ref):
            assert m["index"] == r["index"]
            assert m["label"] == r["label"]
            assert m["crc32"] == r["crc32"]
            assert m["size"] == r["size"]
        # The delivered order is the engine's plan for the epoch.
        order = [i for m in mine for i in m["index"]]
        assert order == list(p.epoch_order(0))[:len(order)]


def test_torch_output_equals_numpy_output(image_folder):
    torch = pytest.importorskip("torch")
    a = digest(stoker.Pipeline(image_folder, batch_size=6, seed=11, **SMALL))
    t = stoker.Pipeline(image_folder, batch_size=6, seed=11, output="torch", **SMALL)
    b = digest(t)
    assert a == b
    batch = next(iter(t))
    assert isinstance(batch["image"], torch.Tensor) and batch["image"].dtype == torch.float32
    assert batch["image"].shape == (6, 3, 32, 32)
    assert batch["label"].dtype == torch.int64


def test_labels_and_raw_bytes_match_the_files(image_folder):
    classes = sorted(os.listdir(image_folder))
    p = stoker.Pipeline(image_folder, decode="raw", batch_size=5, shuffle=False, keys=True)
    seen = 0
    for b in p:
        data, off = b["data"], b["offsets"]
        assert off[0] == 0 and off[-1] == len(data) and len(off) == len(b["label"]) + 1
        for k, key in enumerate(b["key"]):
            cls = key.split("/")[0]
            assert b["label"][k] == classes.index(cls)
            # The key is the path relative to the root without the extension.
            with open(os.path.join(image_folder, key + ".jpg"), "rb") as f:
                assert bytes(data[off[k]:off[k + 1]]) == f.read()
            seen += 1
    assert seen == p.dataset_size == 24


def test_numpy_and_dlpack_views_do_not_copy(image_folder):
    torch = pytest.importorskip("torch")
    p = stoker.Pipeline(image_folder, batch_size=4, **SMALL)
    p._p.start_epoch(0, 0)
    d = p._p.next("numpy", False)
    img = d["image"]
    assert img.ctypes.data == d["_ptr"] and not img.flags.owndata
    assert img.shape == (4, 3, 32, 32)
    d2 = p._p.next("dlpack", False)
    t = torch.utils.dlpack.from_dlpack(d2["image"])
    assert t.data_ptr() == d2["_ptr"]
    assert t.shape == (4, 3, 32, 32) and t.is_contiguous()
    # Through the public API: the tensor and its NumPy view share the engine's buffer.
    tp = stoker.Pipeline(image_folder, batch_size=4, output="torch", **SMALL)
    b = next(iter(tp))
    arr = b["image"].numpy()
    assert arr.ctypes.data == b["image"].data_ptr()
    # The views keep the batch alive after the pipeline is closed and gone.
    keep_np, keep_t = img.copy(), t.clone()
    p.close()
    tp.close()
    del p, tp
    import gc
    gc.collect()
    assert np.array_equal(img, keep_np) and torch.equal(t, keep_t)


def test_exact_mid_epoch_resume(image_folder, tmp_path):
    kw = dict(SMALL, batch_size=3, seed=5)
    p = stoker.Pipeline(image_folder, **kw)
    full = digest(stoker.Pipeline(image_folder, **kw))
    it = iter(p)
    head = [next(it) for _ in range(3)]
    state = p.state_dict()
    assert state["epoch"] == 0 and state["batch"] == 3
    rest_a = digest_iter(it)
    # A new process would load the state from disk.
    (tmp_path / "state.json").write_text(json.dumps(state))
    q = stoker.Pipeline(image_folder, **kw)
    q.load_state_dict(json.loads((tmp_path / "state.json").read_text()))
    rest_b = digest(q)
    assert rest_a == rest_b == full[3:]
    got = [i for b in head for i in b["index"]] + [i for r in rest_b for i in r["index"]]
    assert sorted(got) == list(range(24)) and len(set(got)) == 24  # none lost, none repeated
    # After the epoch, the state points at the next epoch's start.
    assert q.state_dict()["epoch"] == 1 and q.state_dict()["batch"] == 0


def digest_iter(it):
    class Wrap:
        def __iter__(self):
            return it
    return digest(Wrap())


def test_resume_in_a_later_epoch_and_set_epoch(image_folder):
    kw = dict(SMALL, batch_size=4, seed=9)
    p = stoker.Pipeline(image_folder, **kw)
    e0 = digest(p)
    e1 = digest(p)  # epochs advance by themselves after a full pass
    assert [r["index"] for r in e0] != [r["index"] for r in e1]
    p.set_epoch(1)
    assert digest(p) == e1
    p.set_epoch(1)
    it = iter(p)
    next(it), next(it)
    s = p.state_dict()
    assert (s["epoch"], s["batch"]) == (1, 2)
    q = stoker.Pipeline(image_folder, **kw)
    q.load_state_dict(s)
    assert digest(q) == e1[2:]


def test_load_state_dict_rejects_other_configurations(image_folder):
    p = stoker.Pipeline(image_folder, batch_size=4, seed=1, **SMALL)
    s = p.state_dict()
    with pytest.raises(ValueError, match="seed: saved 1, now 2"):
        stoker.Pipeline(image_folder, batch_size=4, seed=2, **SMALL).load_state_dict(s)
    with pytest.raises(ValueError, match="shuffle: saved True, now False"):
        stoker.Pipeline(image_folder, batch_size=4, seed=1, shuffle=False,
                        **SMALL).load_state_dict(s)
    with pytest.raises(ValueError, match="missing"):
        p.load_state_dict({"epoch": 0})
    with pytest.raises(ValueError, match="past the epoch"):
        p.load_state_dict(dict(s, consumed=p.dataset_size + 1))


def test_resume_with_another_batch_size_continues_the_global_position(image_folder):
    """The state is a position in the epoch's global order, so a resumed run may change the
    batch size: it delivers exactly the samples not yet consumed."""
    kw = dict(SMALL, seed=1)
    p = stoker.Pipeline(image_folder, batch_size=4, **kw)
    it = iter(p)
    head = [int(i) for _ in range(2) for i in next(it)["index"]]
    s = p.state_dict()
    assert s["consumed"] == 8
    q = stoker.Pipeline(image_folder, batch_size=5, **kw)
    q.load_state_dict(s)
    rest = [int(i) for b in q for i in b["index"]]
    assert sorted(head + rest) == list(range(24))
    assert head + rest == [int(i) for b in stoker.Pipeline(image_folder, batch_size=4, **kw)
                           for i in b["index"]]


def test_len_and_drop_last(image_folder):
    assert len(stoker.Pipeline(image_folder, batch_size=5, **SMALL)) == 5
    p = stoker.Pipeline(image_folder, batch_size=5, drop_last=True, **SMALL)
    assert len(p) == 4 and sum(len(b["label"]) for b in p) == 20


def test_explicit_rank_world_size_shards(image_folder):
    shards = []
    for r in range(3):
        p = stoker.Pipeline(image_folder, batch_size=4, rank=r, world_size=3, seed=2, **SMALL)
        assert (p.rank, p.world_size) == (r, 3)
        shards.append([i for b in p for i in b["index"]])
    assert all(len(s) == 8 for s in shards)
    assert sorted(i for s in shards for i in s) == list(range(24))


def test_bad_arguments_raise_clear_value_errors(image_folder, tmp_path):
    cases = [
        (dict(decode="fancy"), "decode='fancy' is not one of"),
        (dict(batch_size=0), "batch_size must be >= 1"),
        (dict(batch_size=2.5), "batch_size must be an integer"),
        (dict(threads=-1), "threads must be 'auto' or an integer >= 1"),
        (dict(prefetch="lots"), "prefetch must be 'auto'"),
        (dict(rank=1), "give both rank and world_size"),
        (dict(rank=2, world_size=2), "rank 2 is not below world_size 2"),
        (dict(mean=(123.7, 116.3, 103.5)), r"mean values must be in \[0.0, 1.0\]"),
        (dict(std=(0.2, 0.2)), "std must be 3 numbers"),
        (dict(layout="chw"), "layout='chw'"),
        (dict(on_error="ignore"), "on_error='ignore'"),
        (dict(output="jax"), "output='jax'"),
        (dict(seed=-1), "seed must be a non-negative integer"),
        (dict(scale=(0.9, 0.1)), r"\(min, max\)"),
    ]
    for kw, msg in cases:
        with pytest.raises(ValueError, match=msg):
            stoker.Pipeline(image_folder, **kw)
    with pytest.raises(ValueError, match="source must be"):
        stoker.Pipeline("")
    # Errors from the C++ core arrive with the core's message, as the matching exception.
    missing = str(tmp_path / "nope")
    with pytest.raises(stoker.StokerError) as ei:
        stoker.Pipeline(missing)
    assert "nope" in str(ei.value)
    assert isinstance(ei.value, (FileNotFoundError, ValueError, OSError))
    with pytest.raises(ValueError, match="unknown pipeline option 'bogus'"):
        stoker._errors._ext.Pipeline({"data": image_folder, "bogus": 1})
    with pytest.raises(ValueError, match="batch_size must be an integer, got 'x'"):
        stoker._errors._ext.Pipeline({"data": image_folder, "batch_size": "x"})


def test_status_codes_map_to_exception_classes():
    ext = stoker._errors._ext
    table = [(1, stoker.InvalidArgumentError, ValueError),
             (2, stoker.NotFoundError, FileNotFoundError),
             (3, stoker.StokerIOError, OSError),
             (4, stoker.CorruptDataError, stoker.StokerError),
             (5, stoker.UnimplementedError, NotImplementedError),
             (6, stoker.CancelledError, stoker.StokerError),
             (7, stoker.InternalError, stoker.StokerError),
             (8, stoker.EndOfStreamError, IndexError)]
    for code, cls, base in table:
        with pytest.raises(cls) as ei:
            ext._raise_status(code, f"shard-{code}.tar: member 'x.jpg': boom")
        assert isinstance(ei.value, base) and isinstance(ei.value, stoker.StokerError)
        assert str(ei.value) == f"shard-{code}.tar: member 'x.jpg': boom"
        assert ei.value.code  # the StatusCode name


def test_corrupt_sample_fail_and_skip(tmp_path):
    root = write_image_folder(str(tmp_path / "imgs"), classes=2, per_class=5)
    bad = os.path.join(root, "class_1", "img_002.jpg")
    with open(bad, "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 this is not a jpeg")
    with pytest.raises(stoker.StokerError) as ei:
        for _ in stoker.Pipeline(root, batch_size=3, shuffle=False, **SMALL):
            pass
    assert "img_002.jpg" in str(ei.value)
    p = stoker.Pipeline(root, batch_size=3, shuffle=False, on_error="skip", **SMALL)
    n = sum(len(b["label"]) for b in p)
    assert n == 9
    st = p.stats()
    assert st["skipped"] == 1 and any("img_002.jpg" in s for s in st["skipped_items"])


def test_pinned_memory_and_device_without_cuda(image_folder):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA present: python/tests/gpu_check.py covers this")
    ok, why = stoker.pipeline.pinned_memory_available()
    assert not ok and "CUDA" in why
    with pytest.raises(ValueError, match="pin_memory=True"):
        stoker.Pipeline(image_folder, pin_memory=True, **SMALL)
    with pytest.raises(ValueError, match="no CUDA device"):
        stoker.Pipeline(image_folder, device="cuda", **SMALL)
    p = stoker.Pipeline(image_folder, device="cpu", batch_size=8, **SMALL)
    assert not p.pinned and isinstance(next(iter(p))["image"], torch.Tensor)


def test_watch_over_a_pipeline(image_folder):
    import io
    out = io.StringIO()
    p = stoker.Pipeline(image_folder, batch_size=4, **SMALL)
    w = stoker.watch(p, file=out)
    n = sum(len(b["label"]) for b in w)
    assert n == 24
    assert w.report()["steps"] == 6 and "stoker.watch: 6 steps" in out.getvalue()


def write_wds_shards(root, shards=2, per_shard=7, seed=3):
    """WebDataset shards written with Python's tarfile: key.jpg + key.cls per sample."""
    import io
    import tarfile
    from PIL import Image
    rng = np.random.default_rng(seed)
    os.makedirs(root, exist_ok=True)
    labels = {}
    for s in range(shards):
        with tarfile.open(os.path.join(root, f"train-{s:03d}.tar"), "w") as tar:
            for i in range(per_shard):
                key = f"s{s}_{i:04d}"
                arr = rng.integers(0, 255, size=(40 + i, 44, 3), dtype=np.uint8)
                buf = io.BytesIO()
                Image.fromarray(arr).save(buf, format="JPEG", quality=90)
                label = (s * per_shard + i) % 5
                labels[key] = label
                for name, data in ((f"{key}.jpg", buf.getvalue()),
                                   (f"{key}.cls", str(label).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return os.path.join(root, "train-{000..%03d}.tar" % (shards - 1)), labels


def test_webdataset_shards_with_format_and_brace_pattern(tmp_path):
    spec, labels = write_wds_shards(str(tmp_path / "wds"))
    p = stoker.Pipeline(spec, format="wds", batch_size=4, seed=2, keys=True, **SMALL)
    assert p.dataset_size == 14 and len(p) == 4
    mine = digest(stoker.Pipeline(spec, format="wds", batch_size=4, seed=2, **SMALL))
    ref = stoker._errors._ext._cpp_digest(cpp_options(p), epoch=0)
    assert [(m["index"], m["label"], m["crc32"]) for m in mine] == \
        [(r["index"], r["label"], r["crc32"]) for r in ref]
    seen = {}
    for b in p:
        for k, lab in zip(b["key"], b["label"]):
            seen[k] = int(lab)
    assert seen == labels  # every sample once, with the label from its .cls member
    with pytest.raises(ValueError, match="format must be a format name"):
        stoker.Pipeline(spec, format="", **SMALL)


def test_rank_and_world_size_from_the_environment(image_folder, monkeypatch):
    for k in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    assert stoker.resolve_rank()["world_size"] == 1
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    info = stoker.resolve_rank()
    assert (info["rank"], info["world_size"], info["source"]) == (1, 2, "RANK/WORLD_SIZE")
    p = stoker.Pipeline(image_folder, batch_size=4, seed=6, **SMALL)
    assert (p.rank, p.world_size) == (1, 2)
    mine = [int(i) for b in p for i in b["index"]]
    q = stoker.Pipeline(image_folder, batch_size=4, seed=6, rank=0, world_size=2, **SMALL)
    theirs = [int(i) for b in q for i in b["index"]]
    assert len(mine) == len(theirs) == 12 and not set(mine) & set(theirs)
    # Explicit arguments win over the environment.
    assert stoker.Pipeline(image_folder, rank=0, world_size=1, **SMALL).world_size == 1


def test_exact_resume_on_one_rank_of_two(image_folder):
    kw = dict(SMALL, batch_size=2, seed=8, rank=1, world_size=2, output="numpy")
    full = digest(stoker.Pipeline(image_folder, **kw))
    p = stoker.Pipeline(image_folder, **kw)
    it = iter(p)
    head = [next(it) for _ in range(4)]
    s = p.state_dict()
    assert (s["rank"], s["world_size"], s["batch"]) == (1, 2, 4)
    q = stoker.Pipeline(image_folder, **kw)
    q.load_state_dict(s)
    rest = digest(q)
    assert rest == full[4:]
    got = [int(i) for b in head for i in b["index"]] + [i for r in rest for i in r["index"]]
    assert got == [i for r in full for i in r["index"]]
    # The state is global: rank 0 resumes its own share of the same position.
    r0 = stoker.Pipeline(image_folder, **dict(kw, rank=0))
    r0.load_state_dict(s)
    full0 = digest(stoker.Pipeline(image_folder, **dict(kw, rank=0)))
    assert digest(r0) == full0[4:]


def test_numeric_threads_prefetch_and_epoch_arguments(image_folder):
    p = stoker.Pipeline(image_folder, batch_size=4, **dict(SMALL, threads=1, prefetch=1))
    assert p._p.options["threads"] == 1 and p._p.options["prefetch"] == 1
    assert sum(len(b["label"]) for b in p) == 24
    auto = stoker.Pipeline(image_folder, batch_size=4, **dict(SMALL, threads="auto",
                                                                prefetch="auto"))
    assert auto._p.options["threads"] == "auto" and auto._p.options["prefetch"] == "auto"
    for bad in (-1, 1.5, "1"):
        with pytest.raises(ValueError, match="epoch must be"):
            p.set_epoch(bad)
    with pytest.raises(ValueError, match="state must be a dict"):
        p.load_state_dict([("epoch", 0)])
    p.close()
    with pytest.raises(ValueError, match="closed"):
        iter(p)


def test_cpp_drain_counts_like_the_python_timing(image_folder):
    """bench/python_overhead.py compares _cpp_drain with Python iteration: both leave out
    the first `warmup` batches of each epoch and time the rest from the last warm-up batch."""
    p = stoker.Pipeline(image_folder, batch_size=4, **SMALL)
    opts = cpp_options(p)
    r = stoker._errors._ext._cpp_drain(opts, epochs=2, warmup_batches=1)
    assert (r["batches"], r["samples"]) == (10, 40) and r["seconds"] > 0
    r = stoker._errors._ext._cpp_drain(opts, epochs=1, warmup_batches=0)
    assert (r["batches"], r["samples"]) == (6, 24)
    r = stoker._errors._ext._cpp_drain(opts, epochs=2, warmup_batches=1, hold_previous=True)
    assert (r["batches"], r["samples"]) == (10, 40)


def test_device_copy_path_runs_one_batch_ahead_and_resumes_exactly(image_folder, monkeypatch):
    """The device= path without a GPU: _CudaCopier replaced by a recorder. The copy of batch
    i+1 is issued before batch i is handed over, the host batch is kept until its copy is
    done (drain), and state_dict() counts only batches handed to the loop."""
    pytest.importorskip("torch")
    log = []

    class FakeCopier:
        def __init__(self, torch, device):
            self.inflight = []

        def issue(self, host):
            log.append(("issue", int(host["index"][0])))
            self.inflight.append(host)
            return dict(host), len(self.inflight)

        def hand_over(self, item):
            out, _ = item
            log.append(("hand_over", int(out["index"][0])))
            return out

        def drain(self):
            log.append(("drain", len(self.inflight)))
            self.inflight.clear()

    monkeypatch.setattr(stoker.pipeline, "_CudaCopier", FakeCopier)
    kw = dict(SMALL, batch_size=4, seed=12, output="torch")
    full = digest(stoker.Pipeline(image_folder, **kw))
    p = stoker.Pipeline(image_folder, **kw)
    p._device = "fake-cuda"
    it = iter(p)
    head = [next(it) for _ in range(2)]
    firsts = [r["index"][0] for r in full]
    # Batch 0 and 1 handed over, batch 2's copy already issued.
    assert log == [("issue", firsts[0]), ("issue", firsts[1]), ("hand_over", firsts[0]),
                   ("issue", firsts[2]), ("hand_over", firsts[1])]
    s = p.state_dict()
    assert (s["epoch"], s["batch"]) == (0, 2)  # the batch in flight is not counted
    it.close()
    assert log[-1] == ("drain", 3)
    q = stoker.Pipeline(image_folder, **kw)
    q._device = "fake-cuda"
    q.load_state_dict(s)
    rest = digest(q)
    assert rest == full[2:]  # same samples, same decoded pixels
    assert [list(map(int, b["index"])) for b in head] + [r["index"] for r in rest] == \
        [r["index"] for r in full]
    assert q.state_dict()["epoch"] == 1


def test_a_pass_ends_with_its_last_batch(image_folder):
    """zip() stops at the shorter loader without asking the other for more: the epoch still
    advances, and the state after the last batch already points at the next epoch."""
    kw = dict(SMALL, batch_size=5, seed=13)
    a, b = stoker.Pipeline(image_folder, **kw), stoker.Pipeline(image_folder, **kw)
    for epoch in range(3):
        pairs = list(zip(a, b))
        assert len(pairs) == len(a) == 5
        for x, y in pairs:
            assert np.array_equal(x["index"], y["index"]) and np.array_equal(x["image"], y["image"])
        assert a.epoch == b.epoch == epoch + 1
    it = iter(a)
    for _ in range(len(a)):
        next(it)
    assert (a.state_dict()["epoch"], a.state_dict()["batch"]) == (4, 0)
    assert next(it, None) is None  # and the generator ends normally, without a second advance
    assert a.epoch == 4


def test_stall_watchdog_options_and_error_class(image_folder):
    """The watchdog's options come through the table; a healthy pipeline never trips it.
    (The stuck-read case runs in C++ with the fault-injecting Env: RawFolder.StallWatchdog*.)"""
    assert issubclass(stoker.StallError, TimeoutError)
    assert issubclass(stoker.StallError, stoker.StokerError)
    p = stoker.Pipeline(image_folder, batch_size=4, stall_timeout=30, on_stall="warn", **SMALL)
    assert sum(len(b["label"]) for b in p) == 24
    assert p.stats()["warnings"] == []
    with pytest.raises(ValueError, match="on_stall"):
        stoker.Pipeline(image_folder, on_stall="ignore", **SMALL)
    with pytest.raises(ValueError, match="stall_timeout"):
        stoker.Pipeline(image_folder, stall_timeout=-1, **SMALL)


def test_ctrl_c_interrupts_a_batch_wait_on_a_hung_read(tmp_path):
    """A read that never returns (here: a FIFO nobody writes, as a hung FUSE or NFS mount
    behaves) must not make the training loop deaf to Ctrl-C: the batch wait raises
    KeyboardInterrupt, and the process exits promptly (the blocked worker is detached)."""
    import signal
    import subprocess
    import sys
    import time

    folder = tmp_path / "images"
    write_image_folder(str(folder))
    first = sorted((folder / "class_0").iterdir())[0]
    first.unlink()
    os.mkfifo(first)  # the first sample of an unshuffled epoch: batch 0 cannot complete
    # The child takes Ctrl-C as a terminal's program does, whatever it inherits: a signal
    # ignored in the parent (some library in this pytest process leaves SIGINT at SIG_IGN)
    # stays ignored across exec, and Python then never raises KeyboardInterrupt.
    script = f"""
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path[:0] = {sys.path!r}
import stoker_testing, stoker
p = stoker.Pipeline({str(folder)!r}, batch_size=4, shuffle=False, decode="val", image_size=32,
                    val_resize=36, threads=1, prefetch=1)
print("waiting", flush=True)
try:
    for b in p:
        print("got a batch", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    t0 = time.monotonic()
    p.close()
    print(f"closed in {{time.monotonic() - t0:.1f}} s", flush=True)
    sys.exit(3)
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env,
                             cwd=os.path.dirname(__file__))
    try:
        assert child.stdout.readline().strip() == "waiting"
        time.sleep(1.0)  # the worker is now blocked opening the FIFO
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 3, (out, err)
    assert "interrupted" in out and "got a batch" not in out, (out, err)
