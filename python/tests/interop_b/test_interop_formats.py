"""Interop of stoker's LMDB, HDF5 and Parquet readers/writers with the ecosystem's own
libraries: files written by the `lmdb` binding, h5py and pyarrow are read by stoker with
identical sample bytes, and those libraries read what stoker writes with identical bytes.

stoker is driven through the test-only tool `stoker_interop_dump` (built next to the
`stoker` binary; set STOKER_INTEROP_DUMP to point at it explicitly).
Run: /work/main/.venv/bin/python -m pytest python/tests/interop_b
"""
import glob
import json
import os
import random
import struct
import subprocess

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def _find_tool():
    p = os.environ.get("STOKER_INTEROP_DUMP")
    if p:
        return p
    cands = glob.glob(os.path.join(ROOT, "build*", "stoker_interop_dump"))
    return max(cands, key=os.path.getmtime) if cands else None


TOOL = _find_tool()
pytestmark = pytest.mark.skipif(TOOL is None, reason="stoker_interop_dump not built")


def stoker_read(spec, tmp_path, shuffle=None):
    out = tmp_path / ("dump-%d.json" % random.randrange(1 << 30))
    cmd = [TOOL, "read", spec, str(out)]
    if shuffle is not None:
        cmd += ["--shuffle", str(shuffle)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with open(out) as f:
        return json.load(f)


def stoker_write(spec, samples, tmp_path):
    inp = tmp_path / "in.json"
    rows = [{"key": s["key"], "label": s["label"],
             "fields": {k: v.hex() for k, v in s["fields"].items()}} for s in samples]
    inp.write_text(json.dumps({"samples": rows}))
    r = subprocess.run([TOOL, "write", spec, str(inp)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr


def make_samples(n, seed=1, big_every=9):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        size = 0 if i % 11 == 0 else (70000 + rng.randrange(40000) if i % big_every == 0
                                      else rng.randrange(5000))
        jpg = b"\xff\xd8\xff" + rng.randbytes(size) if size else b""
        out.append({"key": "sample-%05d" % i, "label": i % 5,
                    "fields": {"jpg": jpg, "cls": str(i % 5).encode()}})
    return out


def _h5py():
    try:
        import h5py
    except (ImportError, ValueError) as e:  # e.g. a NumPy 2 in the venv over Debian's h5py
        pytest.skip("h5py unusable in this interpreter: %s" % e)
    return h5py


def fields_of(dumped_sample):
    return {k: bytes.fromhex(v) for k, v in dumped_sample["fields"].items()}


# ---------------------------------------------------------------- LMDB

def test_lmdb_written_by_python_binding_raw_values(tmp_path):
    import lmdb
    path = str(tmp_path / "raw.lmdb")
    samples = make_samples(40)
    env = lmdb.open(path, subdir=False, map_size=1 << 28)
    with env.begin(write=True) as txn:
        for s in samples:
            txn.put(s["key"].encode(), s["fields"]["jpg"])
        txn.put(b"__len__", str(len(samples)).encode())  # metadata keys are skipped
    env.close()
    for shuffle in (None, 7):
        d = stoker_read("lmdb:" + path, tmp_path, shuffle)
        assert d["format"] == "lmdb" and d["size"] == len(samples)
        for s, got in zip(samples, d["samples"]):  # LMDB key order == our key order here
            assert got["key"] == s["key"]
            f = fields_of(got)
            name = "jpg" if s["fields"]["jpg"] else "data"
            assert f == {name: s["fields"]["jpg"]}
            assert got["label"] == -1


def test_lmdb_python_directory_env(tmp_path):
    import lmdb
    path = str(tmp_path / "dirdb")
    env = lmdb.open(path, map_size=1 << 26)  # subdir=True: path/data.mdb + lock.mdb
    vals = {b"b": b"\x00\x01two", b"a": b"one", b"c": bytes(range(256)) * 30}
    with env.begin(write=True) as txn:
        for k, v in vals.items():
            txn.put(k, v)
    env.close()
    d = stoker_read("lmdb:" + path, tmp_path, shuffle=3)
    assert [s["key"] for s in d["samples"]] == ["a", "b", "c"]
    for got in d["samples"]:
        assert fields_of(got) == {"data": vals[got["key"].encode()]}


def encode_stoker_lmdb(s):
    """stoker's LMDB value layout (docs/storage.md)."""
    key = s["key"].encode()
    out = b"STK1" + struct.pack("<I", len(key)) + key + struct.pack("<qI", s["label"],
                                                                      len(s["fields"]))
    for name, data in s["fields"].items():
        out += struct.pack("<H", len(name)) + name.encode() + struct.pack("<I", len(data)) + data
    return out


def decode_stoker_lmdb(v):
    assert v[:4] == b"STK1"
    p = 4
    (klen,) = struct.unpack_from("<I", v, p); p += 4
    key = v[p:p + klen].decode(); p += klen
    label, nf = struct.unpack_from("<qI", v, p); p += 12
    fields = {}
    for _ in range(nf):
        (nl,) = struct.unpack_from("<H", v, p); p += 2
        name = v[p:p + nl].decode(); p += nl
        (dl,) = struct.unpack_from("<I", v, p); p += 4
        fields[name] = bytes(v[p:p + dl]); p += dl
    assert p == len(v)
    return {"key": key, "label": label, "fields": fields}


def test_lmdb_stoker_layout_written_by_python(tmp_path):
    import lmdb
    path = str(tmp_path / "native.lmdb")
    samples = make_samples(30, seed=2)
    env = lmdb.open(path, subdir=False, map_size=1 << 28)
    with env.begin(write=True) as txn:
        for i, s in enumerate(samples):
            txn.put(b"%010d" % i, encode_stoker_lmdb(s))
        txn.put(b"__stoker__", json.dumps({"format": "stoker-lmdb", "version": 1,
                                           "samples": len(samples)}).encode())
    env.close()
    d = stoker_read(path, tmp_path, shuffle=5)  # by extension
    assert d["size"] == len(samples)
    for s, got in zip(samples, d["samples"]):
        assert got["key"] == s["key"] and got["label"] == s["label"]
        assert fields_of(got) == s["fields"]


def test_python_binding_reads_stoker_lmdb(tmp_path):
    import lmdb
    path = str(tmp_path / "out.lmdb")
    samples = make_samples(50, seed=3)
    stoker_write("lmdb:" + path, samples, tmp_path)
    assert not os.path.exists(path + ".partial")
    env = lmdb.open(path, subdir=False, readonly=True, lock=False)
    with env.begin() as txn:
        meta = json.loads(txn.get(b"__stoker__"))
        assert meta["samples"] == len(samples)
        for i, s in enumerate(samples):
            assert decode_stoker_lmdb(txn.get(b"%010d" % i)) == s
        assert txn.stat()["entries"] == len(samples) + 1
    env.close()


# ---------------------------------------------------------------- HDF5

def test_h5py_layout_read_by_stoker(tmp_path):
    h5py = _h5py()
    path = str(tmp_path / "h5py.h5")
    samples = make_samples(37, seed=4)
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, size=(len(samples), 4, 5, 3), dtype=np.uint8)
    score = rng.random(len(samples)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("key", data=[s["key"] for s in samples], dtype=h5py.string_dtype())
        f.create_dataset("label", data=np.array([s["label"] for s in samples], dtype=np.int64))
        jpg = f.create_dataset("jpg", (len(samples),), dtype=h5py.vlen_dtype(np.uint8),
                               chunks=(8,))
        for i, s in enumerate(samples):
            jpg[i] = np.frombuffer(s["fields"]["jpg"], dtype=np.uint8)
        f.create_dataset("image", data=image, chunks=(4, 4, 5, 3))
        f.create_dataset("score", data=score)
        f.create_group("meta")  # groups are ignored
    for shuffle in (None, 11):
        d = stoker_read("hdf5:" + path, tmp_path, shuffle)
        assert d["format"] == "hdf5" and d["size"] == len(samples)
        for i, (s, got) in enumerate(zip(samples, d["samples"])):
            assert got["key"] == s["key"] and got["label"] == s["label"]
            f = fields_of(got)
            assert f["jpg"] == s["fields"]["jpg"]
            assert f["image"] == image[i].tobytes()
            assert f["score"] == score[i].tobytes()
            assert set(f) == {"jpg", "image", "score"}


def test_h5py_reads_stoker_hdf5(tmp_path):
    h5py = _h5py()
    path = str(tmp_path / "out.h5")
    samples = make_samples(45, seed=5)
    stoker_write("hdf5:" + path, samples, tmp_path)
    with h5py.File(path, "r") as f:
        assert f["key"].shape == (len(samples),)
        keys = f["key"].asstr()[:]
        for i, s in enumerate(samples):
            assert keys[i] == s["key"]
            assert int(f["label"][i]) == s["label"]
            assert f["jpg"][i].tobytes() == s["fields"]["jpg"]
            assert f["cls"][i].tobytes() == s["fields"]["cls"]
        assert f["jpg"].chunks is not None


def test_not_an_hdf5_file_is_a_clean_error(tmp_path):
    path = tmp_path / "bad.h5"
    path.write_bytes(b"definitely not hdf5" * 100)
    r = subprocess.run([TOOL, "read", str(path), str(tmp_path / "o.json")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert str(path) in r.stderr and "HDF5" in r.stderr


# ---------------------------------------------------------------- Parquet

def _pyarrow():
    return pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")


@pytest.mark.parametrize("page_index,plain", [(False, False), (True, False), (True, True)])
def test_pyarrow_parquet_read_by_stoker(tmp_path, page_index, plain):
    # plain: the layout docs/storage.md recommends (no dictionary, uncompressed, page
    # index), which stoker reads by direct page reads; the nullable "note" column with nulls
    # goes through Arrow's readers in the same file.
    pa, pq = _pyarrow()
    samples = make_samples(60, seed=6)
    score = [float(i) / 7 for i in range(len(samples))]
    note = [None if i % 4 == 0 else ("n%d" % i).encode() for i in range(len(samples))]
    table = pa.table({
        "key": pa.array([s["key"] for s in samples], pa.string()),
        "label": pa.array([s["label"] for s in samples], pa.int64()),
        "jpg": pa.array([s["fields"]["jpg"] for s in samples], pa.binary()),
        "cls": pa.array([s["fields"]["cls"] for s in samples], pa.binary()),
        "score": pa.array(score, pa.float64()),
        "note": pa.array(note, pa.binary()),
    })
    path = str(tmp_path / "pa.parquet")
    extra = {"use_dictionary": False, "compression": "none"} if plain else {}
    pq.write_table(table, path, row_group_size=16, write_page_index=page_index,
                   data_page_size=8192, **extra)
    for shuffle in (None, 13):
        d = stoker_read(path, tmp_path, shuffle)
        assert d["format"] == "parquet" and d["size"] == len(samples)
        for i, (s, got) in enumerate(zip(samples, d["samples"])):
            assert got["key"] == s["key"] and got["label"] == s["label"]
            f = fields_of(got)
            assert f["jpg"] == s["fields"]["jpg"] and f["cls"] == s["fields"]["cls"]
            assert f["score"] == struct.pack("<d", score[i])
            if note[i] is None:
                assert "note" not in f  # null → field absent
            else:
                assert f["note"] == note[i]


def test_pyarrow_reads_stoker_parquet(tmp_path):
    pa, pq = _pyarrow()
    path = str(tmp_path / "out.parquet")
    samples = make_samples(70, seed=8)
    stoker_write("parquet:" + path, samples, tmp_path)
    t = pq.read_table(path)
    assert t.num_rows == len(samples)
    assert t.column_names[:2] == ["key", "label"]
    keys = t.column("key").to_pylist()
    labels = t.column("label").to_pylist()
    jpg = t.column("jpg").to_pylist()
    cls = t.column("cls").to_pylist()
    for i, s in enumerate(samples):
        assert keys[i] == s["key"] and labels[i] == s["label"]
        assert jpg[i] == s["fields"]["jpg"] and cls[i] == s["fields"]["cls"]
    md = pq.ParquetFile(path).metadata
    assert md.row_group(0).column(2).has_offset_index


def test_not_a_parquet_file_is_a_clean_error(tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"PAR1" + b"\x00" * 100 + b"PAR1")
    r = subprocess.run([TOOL, "read", str(path), str(tmp_path / "o.json")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert str(path) in r.stderr and "Parquet" in r.stderr
