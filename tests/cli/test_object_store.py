"""s3:// paths (issue 14, item 1) against a real S3-compatible server on 127.0.0.1
(scripts/servers/s3.sh: S3Proxy, which checks SigV4 strictly, with toxiproxy in front).

Objects uploaded by boto3 read in stoker with the same samples, bytes for bytes, as the
local files; shards stoker's convert uploads read back in boto3 identical to a local
convert; prefixes and brace patterns expand by listing; missing bucket or key and bad
credentials fail with an error naming the URL; resets are retried and a server that stops
answering ends in a deadline error, never a hang; a response cut inside its headers (which
curl and the AWS SDK take for a complete, empty one) is asked again, never delivered.
"""
import json
import os
import re
import socket
import subprocess
import threading
import urllib.request
import uuid

import pytest

from conftest import _binary  # noqa: E402
from object_store_testing import (dump as _dump, formats_and_uploads,  # noqa: E402
                                  key_fields as _key_fields, need_server)

VARS = ["STOKER_TEST_S3_ENDPOINT", "STOKER_TEST_S3_KEY", "STOKER_TEST_S3_SECRET",
        "STOKER_TEST_S3_BUCKET"]


def _need_server():
    need_server(VARS, "S3 test server (scripts/servers/s3.sh)")


boto3 = pytest.importorskip("boto3")
from botocore.config import Config  # noqa: E402


@pytest.fixture(scope="module")
def s3():
    _need_server()
    e = os.environ
    client = boto3.client(
        "s3", endpoint_url=e["STOKER_TEST_S3_ENDPOINT"],
        aws_access_key_id=e["STOKER_TEST_S3_KEY"],
        aws_secret_access_key=e["STOKER_TEST_S3_SECRET"], region_name="us-east-1",
        # S3Proxy 2.6 answers NotImplemented to the newer flexible-checksum headers.
        config=Config(request_checksum_calculation="when_required",
                      response_checksum_validation="when_required"))
    env = {
        "AWS_ENDPOINT_URL": e["STOKER_TEST_S3_ENDPOINT"],
        "AWS_ACCESS_KEY_ID": e["STOKER_TEST_S3_KEY"],
        "AWS_SECRET_ACCESS_KEY": e["STOKER_TEST_S3_SECRET"],
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    return {"client": client, "bucket": e["STOKER_TEST_S3_BUCKET"], "env": env,
            "prefix": "t-" + uuid.uuid4().hex[:8]}


@pytest.fixture(scope="module")
def datasets(stoker, images, tmp_path_factory, s3):
    """The same images as a folder and as wds, tfrecord and parquet shards, locally and as
    boto3 uploads under s3://bucket/<prefix>/<format>/."""
    return formats_and_uploads(
        stoker, images, tmp_path_factory.mktemp("ds"),
        lambda k, p: s3["client"].upload_file(str(p), s3["bucket"], k), s3["prefix"],
        f"s3://{s3['bucket']}")


@pytest.mark.parametrize("fmt", ["folder", "wds", "tfrecord", "parquet"])
def test_every_format_reads_from_s3_as_from_disk(datasets, s3, tmp_path, fmt):
    local, uploaded = datasets
    if fmt not in local:
        pytest.skip(f"{fmt} writer unavailable in this build")
    # parquet takes a file, not a directory (its writer wrote one file)
    tail = "/train-%03d.parquet" if fmt == "parquet" else ""  # one file, named as given
    want = _dump(f"{fmt}:{local[fmt]}{tail}", tmp_path, s3["env"])
    got = _dump(f"{fmt}:{uploaded[fmt]}{tail}", tmp_path, s3["env"])
    assert len(want) == 96
    assert _key_fields(got) == _key_fields(want)


def test_brace_pattern_and_prefix_expand_by_listing(datasets, s3, tmp_path):
    local, uploaded = datasets
    names = sorted(os.listdir(local["wds"]))
    tars = [n for n in names if n.endswith(".tar")]
    assert len(tars) == 3
    want = _dump(f"wds:{local['wds']}/train-{{000..002}}.tar", tmp_path, s3["env"])
    by_brace = _dump(f"wds:{uploaded['wds']}/train-{{000..002}}.tar", tmp_path, s3["env"])
    by_prefix = _dump(f"{uploaded['wds']}/", tmp_path, s3["env"])  # format sniffed
    assert _key_fields(by_brace) == _key_fields(want)
    assert _key_fields(by_prefix) == _key_fields(want)


def test_convert_uploads_shards_boto3_reads_identical(stoker, images, s3, tmp_path):
    local = tmp_path / "local"
    stoker("convert", images, f"wds:{local}/out-%03d.tar", "--samples-per-shard", 30,
           "--threads", 1)
    dst = f"s3://{s3['bucket']}/{s3['prefix']}/conv"
    r = stoker("convert", images, f"wds:{dst}/out-%03d.tar", "--samples-per-shard", 30,
               "--threads", 1, env=s3["env"])
    listed = s3["client"].list_objects_v2(Bucket=s3["bucket"], Prefix=f"{s3['prefix']}/conv/")
    keys = sorted(o["Key"].rsplit("/", 1)[1] for o in listed.get("Contents", []))
    tars = sorted(p.name for p in local.iterdir() if p.name.endswith(".tar"))
    assert [k for k in keys if k.endswith(".tar")] == tars
    assert not [k for k in keys if k.endswith(".partial")], keys  # nothing half-written left
    for name in tars:
        body = s3["client"].get_object(Bucket=s3["bucket"],
                                       Key=f"{s3['prefix']}/conv/{name}")["Body"].read()
        assert body == (local / name).read_bytes(), name
    # and `verify` re-reads the upload through its manifest
    v = stoker("verify", f"{dst}/", env=s3["env"], check=False)
    assert v.returncode == 0, v.stdout + v.stderr + r.stdout


def test_missing_key_bucket_and_bad_credentials_name_the_url(s3, tmp_path):
    b, p = s3["bucket"], s3["prefix"]
    r = _dump(f"wds:s3://{b}/{p}/nothing-here.tar", tmp_path, s3["env"], check=False)
    assert r.returncode != 0
    assert f"s3://{b}/{p}/nothing-here.tar" in r.stderr and "no such" in r.stderr, r.stderr
    r = _dump("wds:s3://no-such-bucket-stoker/x.tar", tmp_path, s3["env"], check=False)
    assert r.returncode != 0
    assert "s3://no-such-bucket-stoker/x.tar" in r.stderr and "no such bucket" in r.stderr, r.stderr
    s3["client"].put_object(Bucket=b, Key=f"{p}/denied.tar", Body=b"x" * 1024)
    bad = dict(s3["env"], AWS_SECRET_ACCESS_KEY="wrong-secret")
    r = _dump(f"wds:s3://{b}/{p}/denied.tar", tmp_path, bad, check=False)
    assert r.returncode != 0
    assert f"s3://{b}/{p}/denied.tar" in r.stderr and "access denied" in r.stderr, r.stderr


# --- faults through toxiproxy -------------------------------------------------------------

def _toxi(method, path, body=None):
    api = os.environ["STOKER_TEST_TOXIPROXY_API"]
    req = urllib.request.Request(api + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read()


@pytest.fixture
def proxied(s3):
    if not os.environ.get("STOKER_TEST_TOXIPROXY_API"):
        _need_server()
        pytest.skip("toxiproxy not running")
    env = dict(s3["env"], AWS_ENDPOINT_URL=os.environ["STOKER_TEST_S3_PROXY_ENDPOINT"])
    yield env
    for t in json.loads(_toxi("GET", "/proxies/s3/toxics")):
        _toxi("DELETE", f"/proxies/s3/toxics/{t['name']}")


def test_resets_are_retried(datasets, s3, proxied, tmp_path):
    local, uploaded = datasets
    want = _dump(f"wds:{local['wds']}", tmp_path, s3["env"])
    # Half the connections are reset by the proxy after a few KB; retries (exponential
    # backoff with jitter) must still deliver every sample, bytes intact.
    _toxi("POST", "/proxies/s3/toxics", {"name": "reset", "type": "limit_data",
                                          "stream": "downstream", "toxicity": 0.5,
                                          "attributes": {"bytes": 20000}})
    env = dict(proxied, STOKER_S3_RETRY_BASE_MS="5")
    got = _dump(f"wds:{uploaded['wds']}", tmp_path, env)
    assert _key_fields(got) == _key_fields(want)


def test_server_that_stops_answering_ends_in_a_deadline_error(datasets, proxied, tmp_path):
    local, uploaded = datasets
    _toxi("POST", "/proxies/s3/toxics", {"name": "stall", "type": "timeout",
                                          "stream": "downstream", "toxicity": 1.0,
                                          "attributes": {"timeout": 0}})
    env = dict(proxied, STOKER_S3_DEADLINE_S="3", STOKER_S3_REQUEST_TIMEOUT_S="1",
               STOKER_S3_CONNECT_TIMEOUT_S="1", STOKER_S3_RETRY_BASE_MS="5")
    # The subprocess timeout only catches a hang; the deadline error is what is asserted.
    r = _dump(f"wds:{uploaded['wds']}/train-000.tar", tmp_path, env, check=False)
    assert r.returncode != 0
    assert f"{uploaded['wds']}/train-000.tar" in r.stderr, r.stderr


# --- responses cut inside their headers ---------------------------------------------------

class CuttingRelay:
    """127.0.0.1:port -> the S3 server. Cuts the responses to chosen requests after `cut_at`
    bytes (inside the response's headers) and closes that connection, as a reset on the way
    does; every other byte passes. `cuts` maps a method to the occurrences to cut (1-based),
    counted over all connections: {"HEAD": {1}, "GET": {1, 3}}."""

    def __init__(self, endpoint, cuts, cut_at=60):
        m = re.match(r"https?://([^:/]+):(\d+)", endpoint)
        self.target = (m.group(1), int(m.group(2)))
        self.cuts, self.cut_at = cuts, cut_at
        self.seen = {}
        self.cut_done = []
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            s = socket.create_connection(self.target)
            state = {"budget": None}
            threading.Thread(target=self._up, args=(c, s, state), daemon=True).start()
            threading.Thread(target=self._down, args=(s, c, state), daemon=True).start()

    def _up(self, c, s, state):
        try:
            while True:
                b = c.recv(65536)
                if not b:
                    break
                # Request heads only (reads: no bodies); curl sends one request at a time.
                for m in re.finditer(rb"(?:^|\r\n)(GET|HEAD) /", b):
                    meth = m.group(1).decode()
                    with self.lock:
                        n = self.seen[meth] = self.seen.get(meth, 0) + 1
                        if n in self.cuts.get(meth, ()):
                            state["budget"] = self.cut_at
                            self.cut_done.append(f"{meth} #{n}")
                s.sendall(b)
        except OSError:
            pass
        finally:
            self._close(c, s)

    def _down(self, s, c, state):
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                budget = state["budget"]
                if budget is not None:
                    c.sendall(b[:budget])
                    break  # the connection dies inside this response's headers
                c.sendall(b)
        except OSError:
            pass
        finally:
            self._close(c, s)

    @staticmethod
    def _close(*socks):
        for x in socks:
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()

    def close(self):
        self.sock.close()


@pytest.mark.parametrize("cuts", [{"HEAD": {1, 2, 3}}, {"GET": {1, 2, 5}}, {"HEAD": {1, 2, 3}, "GET": {1}}],
                         ids=["head", "gets", "both"])
def test_a_response_cut_inside_its_headers_is_asked_again(datasets, s3, tmp_path, cuts):
    # Measured before the fix: a HEAD cut here gave the shard size 0 ("not a tar archive: it
    # is an empty file"), and a ranged GET cut here came back "complete" with the caller's
    # buffer unwritten: samples silently different from the object's bytes.
    local, uploaded = datasets
    shard = "train-001.tar"
    want = _dump(f"wds:{local['wds']}/{shard}", tmp_path, s3["env"])
    relay = CuttingRelay(os.environ["STOKER_TEST_S3_ENDPOINT"], cuts)
    try:
        env = dict(s3["env"], AWS_ENDPOINT_URL=f"http://127.0.0.1:{relay.port}",
                   STOKER_S3_RETRY_BASE_MS="5")
        got = _dump(f"wds:{uploaded['wds']}/{shard}", tmp_path, env)
    finally:
        relay.close()
    wanted_cuts = sum(len(v) for v in cuts.values())
    assert len(relay.cut_done) == wanted_cuts, relay.cut_done  # the faults did happen
    assert _key_fields(got) == _key_fields(want)


def test_every_response_cut_inside_its_headers_ends_in_an_error_naming_the_url(datasets, s3,
                                                                              tmp_path):
    local, uploaded = datasets
    relay = CuttingRelay(os.environ["STOKER_TEST_S3_ENDPOINT"],
                         {"GET": set(range(1, 1000))})
    try:
        env = dict(s3["env"], AWS_ENDPOINT_URL=f"http://127.0.0.1:{relay.port}",
                   STOKER_S3_RETRY_BASE_MS="5", AWS_MAX_ATTEMPTS="3")
        r = _dump(f"wds:{uploaded['wds']}/train-000.tar", tmp_path, env, check=False)
    finally:
        relay.close()
    assert r.returncode != 0
    assert f"{uploaded['wds']}/train-000.tar" in r.stderr and "cut short" in r.stderr, r.stderr


# --- stoker bench io s3:// -------------------------------------------------------------------

def test_bench_io_measures_an_object_store_and_cleans_up(stoker, s3, tmp_path):
    prefix = f"{s3['prefix']}/probe"
    url = f"s3://{s3['bucket']}/{prefix}/"
    js, page = tmp_path / "io.json", tmp_path / "io.html"
    r = stoker("bench", "io", url, "--size", "8m", "--blocks", "64k,1m", "--threads", "1,4",
               "--seconds", "0.3", "--need-samples-per-s", "200", "--sample-kb", "100",
               "--json", js, "--html", page, env=s3["env"])
    rep = json.loads(js.read_text())
    assert rep["object_store"] and rep["fs_type"] == "s3" and rep["created"]
    assert rep["file"] == url + "stoker-probe.bin" and rep["file_bytes"] == 8 << 20
    assert "none (object store" in rep["cache_mode"]
    pts = {(p["pattern"], p["block"], p["threads"]): p for p in rep["points"]}
    assert set(pts) == {(pat, b, t) for pat in ("seq", "rand") for b in (64 << 10, 1 << 20)
                        for t in (1, 4)}
    for p in pts.values():
        assert p["ops"] > 0 and p["mb_s"] > 0 and p["p99_us"] >= p["p50_us"] > 0, p
    # Time to first byte: the 64 KiB random read with one request in flight.
    assert rep["ttfb"]["block"] == 64 << 10
    assert rep["ttfb"]["p50_us"] == pts[("rand", 64 << 10, 1)]["p50_us"]
    feed = rep["feed"]
    assert feed["need_mb_s"] == pytest.approx(200 * 100 * 1024 / 1e6)
    assert feed["min_shard_bytes"] >= 16 << 20 and "requests in flight" in feed["text"]
    assert "requests in flight" in page.read_text() and "<svg" in page.read_text()
    assert "time to first byte" in r.stdout
    # The test object was deleted (no --keep), and nothing half-written is left.
    listed = s3["client"].list_objects_v2(Bucket=s3["bucket"], Prefix=prefix + "/")
    assert listed.get("KeyCount", 0) == 0, listed.get("Contents")


# ---- shards without an index (as webdataset's writer leaves them) -------------------------

def _bench_json(stoker, spec, tmp_path, env):
    out = tmp_path / f"bench-{uuid.uuid4().hex[:8]}.json"
    stoker("bench", "pipeline", "--data", spec, "--decode", "raw", "--no-shuffle", "--epochs", 1,
           "--batch", 8, "--threads", 2, "--quiet", "--json", out, env=env)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def unindexed(stoker, images, tmp_path_factory, s3):
    """Six WebDataset shards written without .idx, locally and uploaded by boto3."""
    d = tmp_path_factory.mktemp("noidx")
    stoker("convert", images, f"wds:{d}/train-%03d.tar", "--samples-per-shard", 16,
           "--no-index")
    tars = sorted(p for p in d.iterdir() if p.name.endswith(".tar"))
    assert len(tars) == 6 and not [p for p in d.iterdir() if p.name.endswith(".idx")]
    prefix = f"{s3['prefix']}/noidx"
    for p in tars:
        s3["client"].upload_file(str(p), s3["bucket"], f"{prefix}/{p.name}")
    return {"local": d, "url": f"s3://{s3['bucket']}/{prefix}", "prefix": prefix,
            "bytes": sum(p.stat().st_size for p in tars), "tars": tars}


def test_unindexed_shards_cross_the_link_once_with_the_index_cache(stoker, unindexed, s3,
                                                                   tmp_path):
    cache = tmp_path / "index-cache"
    env = dict(s3["env"], STOKER_INDEX_CACHE=str(cache))
    spec = f"wds:{unindexed['url']}/train-{{000..005}}.tar"
    total = unindexed["bytes"]
    first = _bench_json(stoker, spec, tmp_path, env)["source"]["counters"]
    # The first run scans each shard (reading it) and then reads it: the bytes twice.
    assert first["object_store.bytes_read"] >= 1.8 * total, first
    entries = sorted(cache.iterdir())
    assert len(entries) == 6 and all(e.name.endswith("-wds.idx") for e in entries), entries
    assert not [e for e in entries if ".tmp" in e.name]
    second = _bench_json(stoker, spec, tmp_path, env)["source"]["counters"]
    # The second takes the indices from the cache: every byte crosses once (the small
    # probes at open aside), the next shards warmed ahead included.
    assert second["object_store.bytes_read"] <= 1.1 * total, (second, total)
    assert second["object_store.next_shard_warmups"] >= 5, second
    want = _dump(f"wds:{unindexed['local']}/train-{{000..005}}.tar", tmp_path, env)
    assert len(want) == 96
    assert _key_fields(_dump(spec, tmp_path, env)) == _key_fields(want)
    # Without the cache (off), every run scans.
    off = _bench_json(stoker, spec, tmp_path, dict(env, STOKER_INDEX_CACHE="off"))
    assert off["source"]["counters"]["object_store.bytes_read"] >= 1.8 * total


def test_the_index_cache_never_serves_a_replaced_object_or_a_bad_entry(stoker, unindexed, s3,
                                                                       tmp_path):
    cache = tmp_path / "index-cache"
    env = dict(s3["env"], STOKER_INDEX_CACHE=str(cache))
    prefix = unindexed["prefix"] + "-replaced"
    tars = unindexed["tars"]
    for p in tars[:2]:
        s3["client"].upload_file(str(p), s3["bucket"], f"{prefix}/{p.name}")
    spec = f"wds:s3://{s3['bucket']}/{prefix}/train-{{000..001}}.tar"
    want = _key_fields(_dump(f"wds:{unindexed['local']}/train-{{000..001}}.tar", tmp_path, env))
    assert _key_fields(_dump(spec, tmp_path, env)) == want  # fills the cache
    assert len(list(cache.iterdir())) == 2
    # train-000 replaced by train-001's bytes (same key, new ETag): read as it is now.
    s3["client"].upload_file(str(tars[1]), s3["bucket"], f"{prefix}/{tars[0].name}")
    got = _key_fields(_dump(spec, tmp_path, env))
    assert got == want[16:] + want[16:]
    # A damaged entry is not used: the shard is scanned again and read right.
    for e in cache.iterdir():
        e.write_text("v1.2 3\njpg 512 999999999 x.jpg\n")
    assert _key_fields(_dump(spec, tmp_path, env)) == want[16:] + want[16:]


def test_stoker_index_writes_the_idx_beside_object_shards(stoker, unindexed, s3, tmp_path):
    prefix = unindexed["prefix"] + "-indexed"
    for p in unindexed["tars"]:
        s3["client"].upload_file(str(p), s3["bucket"], f"{prefix}/{p.name}")
    url = f"s3://{s3['bucket']}/{prefix}"
    env = dict(s3["env"], STOKER_INDEX_CACHE="off")
    r = stoker("index", f"wds:{url}/", env=env)
    assert "6 index file(s) written" in r.stdout, r.stdout
    listed = s3["client"].list_objects_v2(Bucket=s3["bucket"], Prefix=prefix + "/")
    names = sorted(o["Key"].rsplit("/", 1)[1] for o in listed["Contents"])
    assert [n for n in names if n.endswith(".idx")] == [f"train-{i:03d}.idx" for i in range(6)]
    assert not [n for n in names if "partial" in n], names
    # Readers take the uploaded .idx: no scan, every byte crosses once, same samples.
    spec = f"wds:{url}/train-{{000..005}}.tar"
    got = _bench_json(stoker, spec, tmp_path, env)["source"]["counters"]
    assert got["object_store.bytes_read"] <= 1.1 * unindexed["bytes"], got
    want = _dump(f"wds:{unindexed['local']}/train-{{000..005}}.tar", tmp_path, env)
    assert _key_fields(_dump(spec, tmp_path, env)) == _key_fields(want)


def test_ranks_without_a_node_cache_are_told_they_each_fetch_everything(stoker, unindexed, s3,
                                                                         tmp_path):
    spec = f"wds:{unindexed['url']}/train-{{000..005}}.tar"
    args = ["bench", "pipeline", "--data", spec, "--decode", "raw", "--epochs", 1, "--batch", 8,
            "--threads", 2, "--rank", 1, "--world-size", 2]
    r = stoker(*args, env=s3["env"])
    assert "without a node cache" in r.stderr and "cache_dir" in r.stderr, r.stderr
    r = stoker(*args, "--cache-dir", tmp_path / "cache", env=s3["env"])
    assert "without a node cache" not in r.stderr, r.stderr
    r = stoker(*args[:-4], env=s3["env"])  # one rank: nothing to say
    assert "without a node cache" not in r.stderr, r.stderr


def test_four_ranks_sharing_a_node_cache_fetch_each_byte_once(stoker, unindexed, s3, tmp_path):
    """Issue 14: ranks of one node sharing a cache fetch each shard once from the store. The
    format's checks at open (first 4 KiB and last header of each shard, per rank) read the
    store directly and start no fetch; before they did, each rank's checks fetched whole
    shards through read-ahead."""
    env = dict(s3["env"], STOKER_INDEX_CACHE=str(tmp_path / "index-cache"))
    spec = f"wds:{unindexed['url']}/train-{{000..005}}.tar"
    _bench_json(stoker, spec, tmp_path, env)  # the indices into the index cache (not counted)
    cache = tmp_path / "node-cache"
    procs, outs = [], []
    for r in range(4):
        out = tmp_path / f"rank{r}.json"
        outs.append(out)
        procs.append(subprocess.Popen(
            [str(_binary()), "bench", "pipeline", "--data", spec, "--decode", "raw", "--epochs",
             "1", "--batch", "4", "--threads", "2", "--rank", str(r), "--world-size", "4",
             "--cache-dir", str(cache), "--cache-limit", "64MB", "--quiet", "--json", str(out)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    res = [json.loads(o.read_text()) for o in outs]
    total = unindexed["bytes"]
    assert sum(m["samples"] for m in res) >= 96
    assert sum(m["cache"]["fetches"] for m in res) == 6, [m["cache"] for m in res]
    assert sum(m["cache"]["fetched_bytes"] for m in res) == total
    from_store = sum(m["source"]["counters"]["object_store.bytes_read"] for m in res)
    # Each byte once, plus the checks at open: 4 ranks x 6 shards x (4 KiB + a 512 B header).
    assert total <= from_store <= total + 4 * 6 * (4096 + 512), (from_store, total)
