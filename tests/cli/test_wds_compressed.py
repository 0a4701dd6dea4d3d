"""Every shard webdataset reads also reads in stoker (issue 15, item 2): gzip-compressed
tar shards written by Python's tarfile ("w:gz") and by webdataset.ShardWriter (.tar.gz,
with .gz members), keys with dots and folders, directory and metadata members. Both
readers see the same samples in the same order; stoker's field "x" of a member "k.x.gz" is
what webdataset's own gzfilter decodes. Bad input gets an error naming the shard (and
member), never a crash, hang or silent drop.

stoker reads through the test-only tool stoker_interop_dump (built next to `stoker`).
"""
import glob
import gzip
import io
import json
import os
import random
import subprocess
import tarfile

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _find_tool():
    p = os.environ.get("STOKER_INTEROP_DUMP")
    if p:
        return p
    cands = glob.glob(os.path.join(ROOT, "build*", "stoker_interop_dump"))
    return max(cands, key=os.path.getmtime) if cands else None


TOOL = _find_tool()
pytestmark = pytest.mark.skipif(TOOL is None or not os.path.exists(TOOL),
                                reason="stoker_interop_dump not built")
wds = pytest.importorskip("webdataset")


def stoker_read(spec, tmp_path, shuffle=None, check=True):
    out = tmp_path / ("dump-%d.json" % random.randrange(1 << 30))
    cmd = [TOOL, "read", str(spec), str(out)]
    if shuffle is not None:
        cmd += ["--shuffle", str(shuffle)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if not check:
        return r
    assert r.returncode == 0, r.stderr
    with open(out) as f:
        return json.load(f)


def stoker_samples(dump):
    return [(s["key"], {k: bytes.fromhex(v) for k, v in s["fields"].items()})
            for s in dump["samples"]]


def webdataset_samples(urls):
    """Samples as webdataset yields them, with its gzfilter applied to .gz fields."""
    out = []
    for s in wds.WebDataset(urls, shardshuffle=False):
        fields = {}
        for k, v in s.items():
            if k.startswith("__"):
                continue
            c = wds.autodecode.gzfilter(k, v)
            if c is not None:
                k, v = c.key, c.data
            fields[k] = v
        out.append((s["__key__"], fields))
    return out


def add(tf, name, data, kind=tarfile.REGTYPE):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    if kind == tarfile.REGTYPE:
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    else:
        tf.addfile(ti)


def tarfile_gz_shard(path, n=40, seed=1):
    rng = random.Random(seed)
    with tarfile.open(path, "w:gz") as tf:
        add(tf, "__meta__", b"metadata webdataset skips")
        add(tf, "train.v2", b"", tarfile.DIRTYPE)
        for i in range(n):
            folder = "train.v2/class.%d/" % (i % 3)
            if i % 5 == 0:
                add(tf, folder, b"", tarfile.DIRTYPE)
            key = folder + "img%03d" % i
            add(tf, key + ".jpg", b"\xff\xd8\xff" + rng.randbytes(rng.randrange(3000)))
            add(tf, key + ".seg.PNG", rng.randbytes(50))  # field "seg.png"
            add(tf, key + ".json.gz", gzip.compress(json.dumps({"i": i}).encode()))
            add(tf, key + ".cls", str(i % 7).encode())
            if i % 9 == 0:
                add(tf, key + ".lnk", b"", tarfile.SYMTYPE)
            add(tf, "noext%d" % i, b"no dot in the base name: skipped by both")


def test_tarfile_w_gz_shard_reads_like_webdataset(tmp_path):
    shard = tmp_path / "train-000000.tar.gz"
    tarfile_gz_shard(shard)
    ref = webdataset_samples(str(shard))
    assert len(ref) == 40
    assert ref[1][0] == "train.v2/class.1/img001"
    assert set(ref[1][1]) == {"jpg", "seg.png", "json", "cls"}
    dump = stoker_read(shard, tmp_path)
    assert dump["format"] == "wds"
    assert dump["size"] == len(ref)
    got = stoker_samples(dump)
    assert got == ref
    assert [s["label"] for s in dump["samples"]] == [i % 7 for i in range(40)]
    # Out of order (the sequential stream restarts or serves read-ahead): same samples.
    shuffled = stoker_samples(stoker_read(shard, tmp_path, shuffle=5))
    assert shuffled == ref


def test_tgz_and_plain_shards_mix(tmp_path):
    tarfile_gz_shard(tmp_path / "a-0.tgz", n=7, seed=2)
    with tarfile.open(tmp_path / "a-1.tar", "w") as tf:
        for i in range(5):
            add(tf, "p%02d.txt" % i, b"plain %d" % i)
    urls = [str(tmp_path / "a-0.tgz"), str(tmp_path / "a-1.tar")]
    ref = webdataset_samples(urls)
    got = (stoker_samples(stoker_read(tmp_path / "a-0.tgz", tmp_path)) +
           stoker_samples(stoker_read(tmp_path / "a-1.tar", tmp_path)))
    assert got == ref and len(got) == 12
    # The directory holds both: stoker lists .tgz and .tar shards, in name order.
    assert stoker_samples(stoker_read("wds:" + str(tmp_path), tmp_path)) == ref


def test_shardwriter_gz_shards_and_gz_members(tmp_path):
    pattern = str(tmp_path / "sw-%06d.tar.gz")
    rng = random.Random(3)
    with wds.ShardWriter(pattern, maxcount=9, verbose=0) as sink:
        for i in range(30):
            sink.write({"__key__": "s%04d" % i,
                        "jpg": b"\xff\xd8" + rng.randbytes(rng.randrange(1, 2000)),
                        "txt.gz": "caption %d" % i,      # ShardWriter gzips it
                        "cls": i % 4})
    shards = sorted(glob.glob(str(tmp_path / "sw-*.tar.gz")))
    assert len(shards) == 4
    with open(shards[0], "rb") as f:
        assert f.read(2) == b"\x1f\x8b"
    ref = webdataset_samples(shards)
    assert len(ref) == 30 and ref[0][1]["txt"] == b"caption 0"
    got = stoker_samples(stoker_read(str(tmp_path / "sw-{000000..000003}.tar.gz"), tmp_path))
    assert got == ref
    assert stoker_samples(stoker_read(str(tmp_path / "sw-{000000..000003}.tar.gz"), tmp_path,
                                      shuffle=11)) == ref


def test_damaged_gzip_stream_names_the_shard(tmp_path):
    shard = tmp_path / "bad-0.tar.gz"
    tarfile_gz_shard(shard, n=30)
    data = bytearray(shard.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 64] = bytes(64)
    shard.write_bytes(bytes(data))
    r = stoker_read(shard, tmp_path, check=False)
    assert r.returncode == 1, r.stderr
    assert "bad-0.tar.gz" in r.stderr and "gzip" in r.stderr, r.stderr
    # Truncated stream.
    shard.write_bytes(bytes(data[:mid]))
    r = stoker_read(shard, tmp_path, check=False)
    assert r.returncode == 1 and "bad-0.tar.gz" in r.stderr, r.stderr


def test_member_that_fails_to_decompress_names_shard_and_member(tmp_path):
    shard = tmp_path / "m-0.tar"
    with tarfile.open(shard, "w") as tf:
        add(tf, "a.txt", b"fine")
        add(tf, "b.txt.gz", b"\x1f\x8b\x08\x00not really gzip")
    r = stoker_read(shard, tmp_path, check=False)
    assert r.returncode == 1
    assert "m-0.tar" in r.stderr and "b.txt.gz" in r.stderr, r.stderr


@pytest.mark.parametrize("content,what", [
    (b"PK\x03\x04" + bytes(600), "zip archive"),
    (b"\x28\xb5\x2f\xfd" + bytes(600), "zstd stream"),
    (b"BZh91AY&SY" + bytes(600), "bzip2 stream"),
    (b"\xfd7zXZ\x00" + bytes(600), "xz stream"),
    (b"", "empty file"),
    (b"hello, this is a text file\n" * 30, "text starting 'hello, this is a text fi"),
])
def test_not_a_tar_says_what_the_file_is(tmp_path, content, what):
    shard = tmp_path / "x-0.tar"
    shard.write_bytes(content)
    r = stoker_read(shard, tmp_path, check=False)
    assert r.returncode == 1
    assert "x-0.tar" in r.stderr and what in r.stderr, r.stderr
    assert "checksum" not in r.stderr
