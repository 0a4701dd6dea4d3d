"""cache_dir= / cache_limit= on stoker.Pipeline: the same batches, read from the cache."""
import gc  # noqa: F401
import os

import stoker
from stoker_testing import needs_ext

SMALL = dict(decode="val", image_size=16, val_resize=18, threads=2, shuffle=True, seed=3,
             batch_size=6)


def _digest(p):
    return [(list(b["index"]), b["image"].tobytes()) for b in p]


@needs_ext
def test_cache_dir_gives_the_same_batches_and_fills_the_cache(image_folder, tmp_path):
    cache = tmp_path / "cache"
    ref = _digest(stoker.Pipeline(image_folder, **SMALL))
    p = stoker.Pipeline(image_folder, cache_dir=str(cache), cache_limit="64MB", **SMALL)
    assert _digest(p) == ref
    c = p.stats()["cache"]
    assert c["limit_bytes"] == 64_000_000
    assert c["fetched_bytes"] > 0 and c["hit_rate"] == 0  # one file per sample, all fetched now
    del p  # closing the cache lets the fetches in flight commit their entries
    import gc
    gc.collect()
    entries = [f for f in os.listdir(cache / "entries") if "." not in f]
    assert len(entries) == 24
    # A second pipeline (a later run) reads every file from the cache.
    q = stoker.Pipeline(image_folder, cache_dir=str(cache), cache_limit="64MB", **SMALL)
    assert _digest(q) == ref
    c = q.stats()["cache"]
    assert c["fetched_bytes"] == 0 and c["hit_rate"] == 1.0
