"""gs:// paths (issue 14, item 1) against a real GCS emulator on 127.0.0.1
(scripts/servers/gcs.sh: fake-gcs-server, GCS's JSON API over http, no authentication).

stoker reaches it through Arrow's GcsFileSystem (google-cloud-cpp) with
STORAGE_EMULATOR_HOST set. The independent client is the emulator's own JSON API over plain
HTTP (urllib: media uploads, alt=media downloads, listing), so neither side of a comparison
goes through stoker's or Arrow's code; pyarrow's GcsFileSystem reads one upload as well.

Objects uploaded over HTTP read in stoker with the same samples as the local files; shards
stoker's convert uploads (resumable uploads, then a server-side rename) read back over HTTP
byte-identical to a local convert; prefixes and brace patterns expand by listing; a missing
bucket or object fails with an error naming the URL.
"""
import json
import os
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

from object_store_testing import (dump as _dump, formats_and_uploads,  # noqa: E402
                                  key_fields as _key_fields, need_server)

VARS = ["STOKER_TEST_GCS_HOST", "STOKER_TEST_GCS_BUCKET"]


def _need_server():
    need_server(VARS, "GCS emulator (scripts/servers/gcs.sh)")


class Gcs:
    """The emulator's JSON API over plain HTTP."""

    def __init__(self, host, bucket):
        self.host, self.bucket = host.rstrip("/"), bucket

    def _req(self, method, url, data=None, ctype=None):
        req = urllib.request.Request(url, method=method, data=data)
        if ctype:
            req.add_header("Content-Type", ctype)
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()

    def put(self, key, data):
        q = urllib.parse.urlencode({"uploadType": "media", "name": key})
        self._req("POST", f"{self.host}/upload/storage/v1/b/{self.bucket}/o?{q}", data,
                  "application/octet-stream")

    def get(self, key):
        k = urllib.parse.quote(key, safe="")
        return self._req("GET", f"{self.host}/storage/v1/b/{self.bucket}/o/{k}?alt=media")

    def list(self, prefix):
        names, token = [], None
        while True:
            q = {"prefix": prefix}
            if token:
                q["pageToken"] = token
            page = json.loads(self._req(
                "GET", f"{self.host}/storage/v1/b/{self.bucket}/o?"
                + urllib.parse.urlencode(q)))
            names += [o["name"] for o in page.get("items", [])]
            token = page.get("nextPageToken")
            if not token:
                return names


@pytest.fixture(scope="module")
def gcs():
    _need_server()
    e = os.environ
    host = e["STOKER_TEST_GCS_HOST"]
    env = {
        "STORAGE_EMULATOR_HOST": host,
        # No metadata server or key file may be consulted: the emulator needs no credentials.
        "GOOGLE_APPLICATION_CREDENTIALS": "",
        "STOKER_S3_DEADLINE_S": "20",
    }
    return {"api": Gcs(host, e["STOKER_TEST_GCS_BUCKET"]), "host": host,
            "bucket": e["STOKER_TEST_GCS_BUCKET"], "env": env,
            "prefix": "t-" + uuid.uuid4().hex[:8]}


@pytest.fixture(scope="module")
def datasets(stoker, images, tmp_path_factory, gcs):
    """The same images as a folder and as wds, tfrecord and parquet shards, locally and as
    HTTP uploads under gs://bucket/<prefix>/<format>/."""
    return formats_and_uploads(
        stoker, images, tmp_path_factory.mktemp("ds"),
        lambda k, p: gcs["api"].put(k, p.read_bytes()), gcs["prefix"], f"gs://{gcs['bucket']}")


@pytest.mark.parametrize("fmt", ["folder", "wds", "tfrecord", "parquet"])
def test_every_format_reads_from_gcs_as_from_disk(datasets, gcs, tmp_path, fmt):
    local, uploaded = datasets
    if fmt not in local:
        pytest.skip(f"{fmt} writer unavailable in this build")
    # parquet takes a file: its writer wrote one, named as given
    tail = "/train-%03d.parquet" if fmt == "parquet" else ""
    want = _dump(f"{fmt}:{local[fmt]}{tail}", tmp_path, gcs["env"])
    got = _dump(f"{fmt}:{uploaded[fmt]}{tail}", tmp_path, gcs["env"])
    assert len(want) == 96
    assert _key_fields(got) == _key_fields(want)


def test_brace_pattern_and_prefix_expand_by_listing(datasets, gcs, tmp_path):
    local, uploaded = datasets
    tars = sorted(n for n in os.listdir(local["wds"]) if n.endswith(".tar"))
    assert len(tars) == 3
    want = _dump(f"wds:{local['wds']}/train-{{000..002}}.tar", tmp_path, gcs["env"])
    by_brace = _dump(f"wds:{uploaded['wds']}/train-{{000..002}}.tar", tmp_path, gcs["env"])
    by_prefix = _dump(f"{uploaded['wds']}/", tmp_path, gcs["env"])  # format sniffed
    assert _key_fields(by_brace) == _key_fields(want)
    assert _key_fields(by_prefix) == _key_fields(want)
    # A sub-prefix of two of the three shards (brace over part of the listing).
    part = _dump(f"wds:{uploaded['wds']}/train-{{001..002}}.tar", tmp_path, gcs["env"])
    want_part = _dump(f"wds:{local['wds']}/train-{{001..002}}.tar", tmp_path, gcs["env"])
    assert _key_fields(part) == _key_fields(want_part) and len(part) == 56


def test_convert_uploads_shards_read_back_identical(stoker, images, gcs, tmp_path):
    local = tmp_path / "local"
    stoker("convert", images, f"wds:{local}/out-%03d.tar", "--samples-per-shard", 30,
           "--threads", 1)
    p = f"{gcs['prefix']}/conv"
    dst = f"gs://{gcs['bucket']}/{p}"
    r = stoker("convert", images, f"wds:{dst}/out-%03d.tar", "--samples-per-shard", 30,
               "--threads", 1, env=gcs["env"])
    keys = sorted(k.rsplit("/", 1)[1] for k in gcs["api"].list(p + "/"))
    tars = sorted(x.name for x in local.iterdir() if x.name.endswith(".tar"))
    assert len(tars) == 4
    assert [k for k in keys if k.endswith(".tar")] == tars
    assert not [k for k in keys if k.endswith(".partial")], keys  # nothing half-written left
    for name in tars:
        assert gcs["api"].get(f"{p}/{name}") == (local / name).read_bytes(), name
    # pyarrow's own GcsFileSystem sees the same bytes
    from pyarrow import fs as pafs
    host = urllib.parse.urlsplit(gcs["host"])
    pfs = pafs.GcsFileSystem(anonymous=True, scheme=host.scheme, endpoint_override=host.netloc)
    with pfs.open_input_file(f"{gcs['bucket']}/{p}/{tars[0]}") as f:
        assert f.read() == (local / tars[0]).read_bytes()
    # and `verify` re-reads the upload through its manifest
    v = stoker("verify", f"{dst}/", env=gcs["env"], check=False)
    assert v.returncode == 0, v.stdout + v.stderr + r.stdout


def test_missing_object_and_bucket_name_the_url(gcs, tmp_path):
    b, p = gcs["bucket"], gcs["prefix"]
    r = _dump(f"wds:gs://{b}/{p}/nothing-here.tar", tmp_path, gcs["env"], check=False)
    assert r.returncode != 0
    assert f"gs://{b}/{p}/nothing-here.tar" in r.stderr and "no such object" in r.stderr, r.stderr
    r = _dump("wds:gs://no-such-bucket-stoker/x.tar", tmp_path, gcs["env"], check=False)
    assert r.returncode != 0
    assert ("gs://no-such-bucket-stoker/x.tar" in r.stderr
            and "no such bucket" in r.stderr), r.stderr
    # a prefix that lists nothing
    r = _dump(f"wds:gs://{b}/{p}/empty-prefix/", tmp_path, gcs["env"], check=False)
    assert r.returncode != 0
    assert f"gs://{b}/{p}/empty-prefix" in r.stderr, r.stderr


def test_bench_io_measures_gcs_and_cleans_up(stoker, gcs, tmp_path):
    # A 24 MiB test object uploaded by stoker (resumable upload), read back in 64 KiB requests
    # and in 16 MiB ones (split into parallel 8 MiB ranged GETs), then deleted.
    prefix = f"{gcs['prefix']}/probe"
    url = f"gs://{gcs['bucket']}/{prefix}/"
    js = tmp_path / "io.json"
    r = stoker("bench", "io", url, "--size", "24m", "--blocks", "64k,16m", "--threads", "1,2",
               "--seconds", "0.2", "--json", js, env=gcs["env"])
    rep = json.loads(js.read_text())
    assert rep["object_store"] and rep["fs_type"] == "gs" and rep["created"], rep
    assert rep["file"] == url + "stoker-probe.bin" and rep["file_bytes"] == 24 << 20
    assert rep["points"], rep
    for p in rep["points"]:
        assert p["ops"] > 0 and p["mb_s"] > 0 and p["p99_us"] >= p["p50_us"] > 0, p
    assert {p["block"] for p in rep["points"]} == {64 << 10, 16 << 20}
    assert "time to first byte" in r.stdout
    assert gcs["api"].list(prefix + "/") == []  # the test object was deleted
