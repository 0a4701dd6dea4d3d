"""cache_dir= in front of gs:// data (issue 14 item 2 over item 1), against the GCS emulator of
scripts/servers/gcs.sh (fake-gcs-server; stoker reaches it through Arrow's GcsFileSystem with
STORAGE_EMULATOR_HOST): the first epoch fills the cache, the second fetches nothing, and both
give the batches of the same shards read from local disk, byte for byte. The shards are
uploaded over the emulator's JSON API (plain HTTP), not through stoker."""
import gc
import os
import urllib.parse
import urllib.request
import uuid

import stoker
from stoker_testing import batch_digest, need_server, needs_ext, write_wds_shards

VARS = ["STOKER_TEST_GCS_HOST", "STOKER_TEST_GCS_BUCKET"]
OPTS = dict(decode="val", image_size=16, val_resize=18, threads=2, shuffle=True, seed=5,
            batch_size=4, shuffle_buffer=8)


def _need_server():
    need_server(VARS, "GCS emulator (scripts/servers/gcs.sh)")


def _put(host, bucket, key, data):
    q = urllib.parse.urlencode({"uploadType": "media", "name": key})
    req = urllib.request.Request(f"{host}/upload/storage/v1/b/{bucket}/o?{q}", data=data,
                                 method="POST",
                                 headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()


@needs_ext
def test_cache_in_front_of_gcs_second_epoch_fetches_nothing(image_folder, tmp_path,
                                                           monkeypatch):
    _need_server()
    host = os.environ["STOKER_TEST_GCS_HOST"].rstrip("/")
    bucket, prefix = os.environ["STOKER_TEST_GCS_BUCKET"], "cache-" + uuid.uuid4().hex[:8]
    local = tmp_path / "local"
    local.mkdir()
    shards = write_wds_shards(image_folder, str(local))
    total = sum(os.path.getsize(s) for s in shards)
    for s in shards:
        with open(s, "rb") as f:
            _put(host, bucket, f"{prefix}/{os.path.basename(s)}", f.read())
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", host)
    pattern = "train-{000..%03d}.tar" % (len(shards) - 1)
    ref = batch_digest(stoker.Pipeline(str(local / pattern), **OPTS))
    assert len(ref) == 24 // OPTS["batch_size"]

    url = f"gs://{bucket}/{prefix}/{pattern}"
    cache = tmp_path / "cache"
    p = stoker.Pipeline(url, cache_dir=str(cache), cache_limit="64MB", **OPTS)
    assert batch_digest(p) == ref
    c1 = p.stats()["cache"]
    del p
    gc.collect()
    assert c1["fetched_bytes"] == total and c1["fetches"] == len(shards), c1
    entries = [f for f in os.listdir(cache / "entries") if "." not in f]
    assert len(entries) == len(shards)

    # The second epoch (a new pipeline, as a later run) is served from the cache.
    q = stoker.Pipeline(url, cache_dir=str(cache), cache_limit="64MB", **OPTS)
    assert batch_digest(q) == ref
    c2 = q.stats()["cache"]
    assert c2["fetched_bytes"] == 0 and c2["stream_bytes"] == 0, c2
    assert c2["hit_rate"] == 1.0, c2
