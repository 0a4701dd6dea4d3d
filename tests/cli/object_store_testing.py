"""Helpers shared by the object-store tests (test_object_store.py: S3 through S3Proxy;
test_gcs.py: GCS through fake-gcs-server): the server check, the stoker_interop_dump tool,
and the same images written locally in every format and uploaded by the store's own client."""
import glob
import json
import os
import pathlib
import random
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def need_server(names, what):
    """Skips when the server's variables are missing; fails instead when scripts/test.sh
    started the servers (STOKER_SERVERS_UP=1): a missing server is then an error."""
    missing = [v for v in names if not os.environ.get(v)]
    if missing:
        if os.environ.get("STOKER_SERVERS_UP") == "1":
            pytest.fail(f"{what} variables missing: {missing}")
        pytest.skip(f"{what} not running (needs " + ", ".join(missing) + ")")


def dump_tool():
    p = os.environ.get("STOKER_INTEROP_DUMP")
    if p:
        return p
    c = glob.glob(str(ROOT / "build*" / "stoker_interop_dump"))
    return max(c, key=os.path.getmtime) if c else None


def run(cmd, env, timeout=120):
    full = dict(os.environ)
    full.update(env)
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          timeout=timeout, env=full)


def dump(spec, tmp_path, env, check=True):
    """The samples stoker reads from `spec` (stoker_interop_dump), or with check=False the
    finished process."""
    tool = dump_tool()
    if not tool or not os.path.exists(tool):
        pytest.skip("stoker_interop_dump not built")
    out = tmp_path / ("dump-%d.json" % random.randrange(1 << 30))
    r = run([tool, "read", spec, out], env)
    if not check:
        return r
    assert r.returncode == 0, f"{spec}: {r.stderr}"
    return json.loads(out.read_text())["samples"]


def key_fields(samples):
    return [(s["key"], s["fields"]) for s in samples]


def upload_tree(put, local_dir, key_prefix):
    """put(key, path) for every file under local_dir, keyed key_prefix/<relative path>."""
    keys = []
    for p in sorted(pathlib.Path(local_dir).rglob("*")):
        if p.is_file():
            k = f"{key_prefix}/{p.relative_to(local_dir)}"
            put(k, p)
            keys.append(k)
    return keys


def formats_and_uploads(stoker, images, root, put, prefix, url_prefix):
    """The same images as a folder and as wds, tfrecord and parquet shards under `root`,
    each uploaded with put(key, path) under <prefix>/<format>/: ({format: local path},
    {format: url_prefix/<prefix>/<format>}). A format this build cannot write is left out."""
    local = {"folder": str(images)}
    for fmt, ext in [("wds", "tar"), ("tfrecord", "tfrecord"), ("parquet", "parquet")]:
        d = root / fmt
        r = stoker("convert", images, f"{fmt}:{d}/train-%03d.{ext}", "--samples-per-shard", 40,
                   check=False)
        if r.returncode != 0 and "built without" in r.stderr:
            continue
        assert r.returncode == 0, r.stderr
        local[fmt] = str(d)
    uploaded = {}
    for fmt, d in local.items():
        upload_tree(put, d, f"{prefix}/{fmt}")
        uploaded[fmt] = f"{url_prefix}/{prefix}/{fmt}"
    return local, uploaded
