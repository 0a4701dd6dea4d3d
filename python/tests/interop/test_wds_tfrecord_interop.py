"""Interop of stoker's WebDataset and TFRecord readers/writers with the ecosystem's own
packages: shards written by `webdataset.ShardWriter` / `tarfile` and TFRecords written by the
`tfrecord` package are read by stoker with identical bytes (through `stoker dump --hex`), and
what stoker writes (`stoker convert`) is read back by webdataset / tarfile / tfrecord with
identical bytes. Index files are compared with what DALI's wds2idx and tfrecord2idx produce.

The stoker binary: $STOKER_BIN, else the newest build*/stoker of the repository.
Run: /work/main/.venv/bin/python -m pytest python/tests/interop/test_wds_tfrecord_interop.py
"""
import glob
import io
import json
import os
import random
import subprocess
import tarfile

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def _find_stoker():
    p = os.environ.get("STOKER_BIN")
    if p:
        return p
    cands = [c for c in glob.glob(os.path.join(ROOT, "build*", "stoker")) if os.access(c, os.X_OK)]
    return max(cands, key=os.path.getmtime) if cands else None


STOKER = _find_stoker()
pytestmark = pytest.mark.skipif(STOKER is None, reason="no stoker binary (build it first)")

wds = pytest.importorskip("webdataset")
tfr_writer = pytest.importorskip("tfrecord.writer")
tfr_reader = pytest.importorskip("tfrecord.reader")
tfr2idx = pytest.importorskip("tfrecord.tools.tfrecord2idx")


def run(*args, check=True):
    p = subprocess.run([STOKER, *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"stoker {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


def dump(spec):
    out = run("dump", "--hex", spec).stdout
    samples = []
    for line in out.splitlines():
        d = json.loads(line)
        d["fields"] = {f["name"]: bytes.fromhex(f["hex"]) for f in d["fields"]}
        samples.append(d)
    return samples


def rand_bytes(rng, n):
    return bytes(rng.getrandbits(8) for _ in range(n))


def make_folder(root, classes=3, per_class=4, seed=0):
    """ImageFolder of random bytes named .jpg (stoker's folder reader does not decode)."""
    rng = random.Random(seed)
    expected = []
    for c in range(classes):
        os.makedirs(os.path.join(root, f"class_{c}"), exist_ok=True)
        for i in range(per_class):
            data = rand_bytes(rng, rng.randint(100, 5000))
            name = f"class_{c}/img_{c * per_class + i:04d}"
            with open(os.path.join(root, name + ".jpg"), "wb") as f:
                f.write(data)
            expected.append((name, c, data))
    return expected


# ------------------------------------------------------------------------------------------
# ecosystem writes, stoker reads


def test_webdataset_shardwriter_shards_read_by_stoker(tmp_path):
    rng = random.Random(1)
    samples = []
    pattern = str(tmp_path / "shard-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=5) as sink:
        for i in range(12):
            s = {"__key__": f"sample{i:05d}", "jpg": rand_bytes(rng, rng.randint(10, 3000)),
                 "cls": i % 4, "json": json.dumps({"i": i}).encode()}
            sink.write(s)
            samples.append(s)
    shards = sorted(glob.glob(str(tmp_path / "shard-*.tar")))
    assert len(shards) == 3
    got = dump(str(tmp_path / "shard-{000000..000002}.tar"))
    assert [g["key"] for g in got] == [s["__key__"] for s in samples]
    for g, s in zip(got, samples):
        assert g["fields"]["jpg"] == s["jpg"]
        assert g["fields"]["json"] == s["json"]
        assert g["fields"]["cls"] == str(s["cls"]).encode()
        assert g["label"] == s["cls"]
    # The same samples as webdataset itself yields.
    ref = list(wds.WebDataset(str(tmp_path / "shard-{000000..000002}.tar"), shardshuffle=False))
    assert [r["__key__"] for r in ref] == [g["key"] for g in got]
    assert all(r["jpg"] == g["fields"]["jpg"] for r, g in zip(ref, got))


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_tarfile_long_names_and_formats(tmp_path, fmt):
    rng = random.Random(2)
    path = tmp_path / "t.tar"
    keys = ["short", "d" * 90 + "/k" + "e" * 40, "n" * 80]
    if fmt != tarfile.USTAR_FORMAT:
        keys.append("x" * 150)  # needs pax or a GNU long name
    members = []
    with tarfile.open(path, "w", format=fmt) as tf:
        info = tarfile.TarInfo("somedir")
        info.type = tarfile.DIRTYPE
        tf.addfile(info)
        for k in keys:
            for ext in ("jpg", "txt"):
                data = rand_bytes(rng, rng.randint(0, 2000))
                ti = tarfile.TarInfo(f"{k}.{ext}")
                ti.size = len(data)
                ti.mtime = 1700000000
                tf.addfile(ti, io.BytesIO(data))
                members.append((k, ext, data))
    got = dump(str(path))
    assert [g["key"] for g in got] == keys
    by_key = {g["key"]: g for g in got}
    for k, ext, data in members:
        assert by_key[k]["fields"][ext] == data


def test_tfrecord_package_files_read_by_stoker(tmp_path):
    rng = random.Random(3)
    path = str(tmp_path / "data.tfrecord")
    w = tfr_writer.TFRecordWriter(path)
    recs = []
    for i in range(9):
        img = rand_bytes(rng, rng.randint(1, 4000))
        d = {"image/encoded": (img, "byte"), "image/class/label": (i % 3, "int"),
             "bbox": ([0.25, 0.5 + i], "float"), "ids": ([i, -i, 1 << 40], "int"),
             "name": (f"n{i}".encode(), "byte")}
        w.write(d)
        recs.append(d)
    w.close()
    for with_index in (False, True):
        if with_index:
            tfr2idx.create_index(path, path + ".idx")  # DALI-style index, used by stoker
        got = dump(path)
        assert len(got) == 9
        for i, (g, d) in enumerate(zip(got, recs)):
            assert g["key"] == f"data/{i}"
            assert g["label"] == i % 3
            assert g["fields"]["jpg"] == d["image/encoded"][0]
            assert g["fields"]["name"] == d["name"][0]
            assert g["fields"]["ids"] == f"{i} {-i} {1 << 40}".encode()
            assert [float(x) for x in g["fields"]["bbox"].split()] == [0.25, 0.5 + i]
            assert "image/class/label" not in g["fields"]
    raw = dump("tfrecord-raw:" + path)
    assert raw[0]["fields"]["image/encoded"] == recs[0]["image/encoded"][0]


# ------------------------------------------------------------------------------------------
# stoker writes, ecosystem reads


def test_stoker_wds_read_by_webdataset_and_tarfile(tmp_path):
    src = tmp_path / "src"
    expected = make_folder(str(src))
    out = tmp_path / "wds"
    run("convert", str(src), f"wds:{out}/train-%06d.tar", "--samples-per-shard", "5")
    run("verify", str(out))
    shards = sorted(glob.glob(str(out / "train-*.tar")))
    assert len(shards) == 3
    ref = list(wds.WebDataset(str(out / "train-{000000..000002}.tar"), shardshuffle=False))
    assert [(r["__key__"], int(r["cls"]), r["jpg"]) for r in ref] == expected
    # tarfile sees plain regular members with the fixed metadata, and the .idx lines match
    # DALI's wds2idx (data offset of each member, grouped by key).
    for shard in shards:
        with tarfile.open(shard) as tf:
            members = [m for m in tf.getmembers() if m.isfile()]
            assert all(m.mtime == 0 and m.mode == 0o644 for m in members)
            lines, last = [], None
            for m in members:
                key, ext = m.name.split(".", 1)
                comp = f"{ext} {m.offset_data} {m.size} {m.name}"
                if key == last:
                    lines[-1] += " " + comp
                else:
                    lines.append(comp)
                    last = key
        idx = open(shard[:-4] + ".idx").read().splitlines()
        assert idx[0] == f"v1.2 {len(lines)}"
        assert idx[1:] == lines


@pytest.mark.parametrize("gzip", [False, True])
def test_stoker_tfrecord_read_by_tfrecord_package(tmp_path, gzip):
    src = tmp_path / "src"
    expected = make_folder(str(src), seed=4)
    out = tmp_path / "tfr"
    args = ["convert", str(src), f"tfrecord:{out}/train-%05d.tfrecord", "--samples-per-shard", "7"]
    if gzip:
        args.append("--gzip")
    run(*args)
    run("verify", str(out))
    ext = ".tfrecord.gz" if gzip else ".tfrecord"
    files = sorted(glob.glob(str(out / f"train-*{ext}")))
    assert len(files) == 2
    got = []
    for f in files:
        for ex in tfr_reader.tfrecord_loader(f, None, compression_type="gzip" if gzip else None):
            got.append((bytes(ex["__key__"]).decode(), int(ex["label"][0]),
                        bytes(ex["image/encoded"])))
        if not gzip:
            tfr2idx.create_index(f, f + ".ref.idx")
            assert open(f + ".idx").read() == open(f + ".ref.idx").read()
    assert got == expected


def test_verify_detects_a_flipped_byte(tmp_path):
    src = tmp_path / "src"
    make_folder(str(src), seed=5)
    out = tmp_path / "wds"
    run("convert", str(src), f"wds:{out}/train-%06d.tar", "--samples-per-shard", "6")
    victim = sorted(glob.glob(str(out / "train-*.tar")))[1]
    with open(victim, "r+b") as f:
        f.seek(600)
        b = f.read(1)
        f.seek(600)
        f.write(bytes([b[0] ^ 1]))
    p = run("verify", str(out), check=False)
    assert p.returncode == 1
    assert os.path.basename(victim) in p.stderr
