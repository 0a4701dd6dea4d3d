"""The node-wide cache (--cache-dir) through the CLI: real processes sharing one cache."""
import json
import re
import subprocess

import pytest

from conftest import _binary


@pytest.fixture(scope="module")
def shards(stoker, tmp_path_factory):
    d = tmp_path_factory.mktemp("wds")
    stoker("gen", "images", "--out", d, "--count", 160, "--format", "wds",
           "--shard-samples", 20, "--seed", 4, "--threads", 1)
    return d


def _tar_bytes(d):
    return sum(p.stat().st_size for p in d.glob("*.tar"))


def _source_mb(stdout):
    # Counted by the slow source itself (the fault Env under the cache), not by the cache.
    m = re.search(r"source \(.*\): ([0-9.]+) MB read", stdout)
    assert m, stdout
    return float(m.group(1))


def _run_ranks(shards, cache, tmp_path, world, tag):
    procs = []
    for r in range(world):
        out = tmp_path / f"{tag}{r}.json"
        cmd = [_binary(), "bench", "pipeline", "--data", shards, "--decode", "raw",
               "--batch", 8, "--rank", r, "--world-size", world, "--cache-dir", cache,
               "--cache-limit", "1G", "--source-latency-ms", 1, "--json", out]
        procs.append((out, subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True)))
    res = []
    for out, p in procs:
        so, se = p.communicate(timeout=120)
        assert p.returncode == 0, se
        res.append((json.loads(out.read_text()), so))
    return res


def test_four_ranks_fetch_each_shard_once(shards, tmp_path):
    cache = tmp_path / "cache"
    res = _run_ranks(shards, cache, tmp_path, 4, "cold")
    total = _tar_bytes(shards)
    fetched = sum(m["cache"]["fetched_bytes"] for m, _ in res)
    fetches = sum(m["cache"]["fetches"] for m, _ in res)
    assert fetches == 8 and fetched == total
    # What crossed from the source, counted below the cache: the shards once, plus the
    # index files and header checks (a few KB per shard and rank).
    source = sum(_source_mb(so) for _, so in res) * 1e6
    assert abs(source - total) <= 0.01 * total, (source, total)
    for m, _ in res:
        assert m["cache"]["max_occupancy_bytes"] <= total
    # Again, warm: nothing is fetched, every shard is found.
    res = _run_ranks(shards, cache, tmp_path, 4, "warm")
    assert sum(m["cache"]["fetched_bytes"] for m, _ in res) == 0
    assert all(m["cache"]["hit_rate"] > 0.99 for m, _ in res)
    assert sum(_source_mb(so) for _, so in res) * 1e6 < 0.01 * total


def test_limit_below_one_shard_streams_through(stoker, shards, tmp_path):
    p = stoker("bench", "pipeline", "--data", shards, "--decode", "raw", "--batch", 8,
               "--cache-dir", tmp_path / "c", "--cache-limit", "100KB",
               "--json", tmp_path / "m.json")
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["samples"] == 160
    c = m["cache"]
    assert c["fetches"] == 0 and c["stream_bytes"] > 0 and c["occupancy_bytes"] == 0
    assert "cache" in p.stdout and "hit rate" in p.stdout
