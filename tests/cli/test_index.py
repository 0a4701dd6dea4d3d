"""stoker index: the index files that let readers open WebDataset tars and TFRecord files
without scanning them, written beside shards that have none (webdataset's writer leaves
none). The same bytes as convert's own .idx; shards that have a good one are left alone, a
wrong one is rewritten; formats without index files and damaged shards are refused by name.
(Object storage: tests/cli/test_object_store.py.)"""
import pytest


@pytest.fixture
def unindexed(stoker, images, tmp_path):
    out = {}
    for fmt, ext in [("wds", "tar"), ("tfrecord", "tfrecord")]:
        stoker("convert", images, f"{fmt}:{tmp_path}/{fmt}/train-%03d.{ext}",
               "--samples-per-shard", 40, "--no-index")
        stoker("convert", images, f"{fmt}:{tmp_path}/{fmt}-ref/train-%03d.{ext}",
               "--samples-per-shard", 40)
        out[fmt] = tmp_path / fmt
    return out


def _idx(d):
    return sorted(p for p in d.iterdir() if p.name.endswith(".idx"))


@pytest.mark.parametrize("fmt", ["wds", "tfrecord"])
def test_index_writes_what_convert_writes(stoker, unindexed, fmt):
    d = unindexed[fmt]
    assert _idx(d) == []
    r = stoker("index", f"{fmt}:{d}/")
    written = _idx(d)
    ref = _idx(d.parent / f"{fmt}-ref")
    assert [p.name for p in written] == [p.name for p in ref] and len(written) == 3, r.stdout
    for a, b in zip(written, ref):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert "3 index file(s) written" in r.stdout
    # Readers now take the index: the samples are those of the indexed reference.
    assert stoker("verify", d).returncode == 0


def test_index_leaves_good_ones_and_rewrites_a_wrong_one(stoker, unindexed):
    d = unindexed["wds"]
    stoker("index", f"wds:{d}/")
    good = {p.name: p.read_bytes() for p in _idx(d)}
    (d / "train-001.idx").write_text("v1.2 2\njpg 512 5 a.jpg\n")  # does not fit the shard
    r = stoker("index", f"wds:{d}/")
    assert "1 index file(s) written, 2 shard(s) left" in r.stdout, r.stdout
    assert {p.name: p.read_bytes() for p in _idx(d)} == good
    r = stoker("index", f"wds:{d}/", "--dry-run", "--force")
    assert "3 index file(s) to write" in r.stdout


def test_index_refuses_what_has_no_index_and_damaged_shards(stoker, unindexed, images,
                                                            tmp_path):
    r = stoker("index", images, check=False)
    assert r.returncode == 2 and "folder has no index files" in r.stderr, r.stderr
    d = unindexed["wds"]
    shard = d / "train-001.tar"
    shard.write_bytes(shard.read_bytes()[:5000])  # cut inside a member
    r = stoker("index", f"wds:{d}/", check=False)
    assert r.returncode != 0 and "train-001.tar" in r.stderr, r.stderr
    assert _idx(d) == []  # nothing written for a dataset with a damaged shard
