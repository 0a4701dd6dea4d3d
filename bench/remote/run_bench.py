"""Reading WebDataset shards from an S3-compatible store over a slow link: stoker against a
raw parallel GET client (the link's limit), webdataset (curl per shard, its documented way
for object stores) and stoker without read-ahead, with stoker from local disk as the
reference; sides interleaved in every round.

    eval "$(scripts/servers.sh up)"     # S3Proxy + toxiproxy on 127.0.0.1 (and the others)
    .venv/bin/python bench/remote/run_bench.py [--images 2000] [--shard-mb 10] \
        [--latency-ms 20] [--conn-mb-s 25] [--threads 8] [--repeats 3]

The link: toxiproxy in front of S3Proxy adds --latency-ms to every response and caps each
connection at --conn-mb-s (a per-connection limit, as object stores have: AWS quotes ~85-90
MB/s per connection; the cap here is scaled to what S3Proxy and 2 cores can serve). The
shards are written by `stoker convert` (--no-index: no .idx, as webdataset's own writer
leaves them, so the reader must scan each tar) and uploaded with boto3.

Sides (I/O only: bytes of every sample, no decode):
  * raw GET        boto3 get_object of whole shards, --threads in parallel (the link's limit
                   for that many connections: what any reader can reach at best)
  * stoker         `stoker bench pipeline --data wds:s3://... --decode raw --threads N
                   --no-shuffle` (read-ahead on: 8 MiB blocks)
  * stoker no-RA   the same with STOKER_S3_BLOCK_MB=0 (one GET per sample and per header)
  * webdataset     webdataset.WebDataset over "pipe:curl -s <presigned URL>" per shard,
                   --threads DataLoader-style worker processes (each takes shards i::N)
  * local disk     stoker from the same shards on local disk (not through the link)
Writes bench/remote/results.json and prints MB/s per side (median, range) and ratios.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import get_context

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STOKER = os.environ.get("STOKER_BINARY") or os.path.join(ROOT, "build", "stoker")


def env_or_die(name):
    v = os.environ.get(name)
    if not v:
        sys.exit(f"{name} is not set: start the test servers (eval \"$(scripts/servers.sh up)\")")
    return v


def toxi(api, method, path, body=None):
    req = urllib.request.Request(api + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.read()
    except urllib.error.HTTPError:
        return b""


def client(endpoint):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=env_or_die("STOKER_TEST_S3_KEY"),
                        aws_secret_access_key=env_or_die("STOKER_TEST_S3_SECRET"),
                        region_name="us-east-1",
                        config=Config(signature_version="s3v4",
                                      request_checksum_calculation="when_required",
                                      response_checksum_validation="when_required",
                                      max_pool_connections=64))


def raw_get(endpoint, bucket, keys, threads):
    c = client(endpoint)

    def one(k):
        return len(c.get_object(Bucket=bucket, Key=k)["Body"].read())

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        total = sum(ex.map(one, keys))
    return total, time.perf_counter() - t0


def stoker_run(data, threads, env):
    """Wall seconds of one `stoker bench pipeline` epoch over `data` (process start included)."""
    cmd = [STOKER, "bench", "pipeline", "--data", data, "--decode", "raw", "--no-shuffle",
           "--epochs", "1", "--batch", "32", "--threads", str(threads), "--quiet"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return wall


def _wds_worker(args):
    urls, = args
    import webdataset as wds
    n = 0
    for s in wds.WebDataset(urls, shardshuffle=False, empty_check=False):
        n += sum(len(v) for k, v in s.items() if isinstance(v, (bytes, bytearray)))
    return n


def webdataset_run(urls, threads):
    t0 = time.perf_counter()
    with get_context("fork").Pool(threads) as pool:
        total = sum(pool.map(_wds_worker, [(urls[i::threads],) for i in range(threads)
                                           if urls[i::threads]]))
    return total, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--shard-mb", type=float, default=10)
    ap.add_argument("--latency-ms", type=float, default=20)
    ap.add_argument("--conn-mb-s", type=float, default=25)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "stoker-bench-remote"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "remote", "results.json"))
    a = ap.parse_args()

    endpoint = env_or_die("STOKER_TEST_S3_ENDPOINT")
    proxy = env_or_die("STOKER_TEST_S3_PROXY_ENDPOINT")
    api = env_or_die("STOKER_TEST_TOXIPROXY_API")
    bucket = env_or_die("STOKER_TEST_S3_BUCKET")
    imgs = os.path.join(a.work, f"images-{a.images}")
    shards = os.path.join(a.work, f"wds-{a.images}-{a.shard_mb:g}mb")
    if not os.path.exists(os.path.join(imgs, "stoker-gen.json")):
        subprocess.run([STOKER, "gen", "images", "--out", imgs, "--count", str(a.images),
                        "--seed", "1"], check=True)
    if not os.path.isdir(shards):
        per = max(1, int(a.shard_mb * 1e6 / 95e3))
        subprocess.run([STOKER, "convert", imgs, f"wds:{shards}/train-%05d.tar",
                        "--samples-per-shard", str(per), "--no-index"], check=True)
    tars = sorted(f for f in os.listdir(shards) if f.endswith(".tar"))
    total_bytes = sum(os.path.getsize(os.path.join(shards, f)) for f in tars)
    prefix = f"bench-remote/{a.images}-{a.shard_mb:g}mb"
    c = client(endpoint)
    have = {o["Key"] for o in c.list_objects_v2(Bucket=bucket, Prefix=prefix + "/").get("Contents", [])}
    for f in tars:
        if f"{prefix}/{f}" not in have:
            c.upload_file(os.path.join(shards, f), bucket, f"{prefix}/{f}")
    keys = [f"{prefix}/{f}" for f in tars]
    pc = client(proxy)
    urls = ["pipe:curl -s -f '" + pc.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": k}, ExpiresIn=7200) + "'" for k in keys]

    for t in json.loads(toxi(api, "GET", "/proxies/s3/toxics") or b"[]"):
        toxi(api, "DELETE", f"/proxies/s3/toxics/{t['name']}")
    toxi(api, "POST", "/proxies/s3/toxics", {"name": "bench-latency", "type": "latency",
                                             "stream": "downstream",
                                             "attributes": {"latency": int(a.latency_ms)}})
    toxi(api, "POST", "/proxies/s3/toxics", {"name": "bench-bw", "type": "bandwidth",
                                             "stream": "downstream",
                                             "attributes": {"rate": int(a.conn_mb_s * 1000)}})
    base = dict(os.environ, AWS_ACCESS_KEY_ID=env_or_die("STOKER_TEST_S3_KEY"),
                AWS_SECRET_ACCESS_KEY=env_or_die("STOKER_TEST_S3_SECRET"), AWS_REGION="us-east-1",
                AWS_EC2_METADATA_DISABLED="true", AWS_ENDPOINT_URL=proxy)
    s3spec = f"wds:s3://{bucket}/{prefix}/train-{{00000..{len(tars) - 1:05d}}}.tar"
    local = f"wds:{shards}/train-{{00000..{len(tars) - 1:05d}}}.tar"
    sides = {
        "raw GET (link limit)": lambda: raw_get(proxy, bucket, keys, a.threads),
        "stoker": lambda: (total_bytes, stoker_run(s3spec, a.threads, base)),
        "stoker no read-ahead": lambda: (total_bytes, stoker_run(
            s3spec, a.threads, dict(base, STOKER_S3_BLOCK_MB="0"))),
        "webdataset (curl per shard)": lambda: webdataset_run(urls, a.threads),
        "stoker, local disk": lambda: (total_bytes, stoker_run(local, a.threads, base)),
    }
    res = {k: [] for k in sides}
    load0 = os.getloadavg()
    try:
        for rnd in range(a.repeats):
            order = list(sides)[rnd % len(sides):] + list(sides)[:rnd % len(sides)]
            for name in order:
                nbytes, secs = sides[name]()
                res[name].append(nbytes / secs / 1e6)
                print(f"[{rnd}] {name}: {nbytes / 1e6:.1f} MB in {secs:.2f} s = "
                      f"{nbytes / secs / 1e6:.1f} MB/s", flush=True)
    finally:
        for t in json.loads(toxi(api, "GET", "/proxies/s3/toxics") or b"[]"):
            toxi(api, "DELETE", f"/proxies/s3/toxics/{t['name']}")
    load1 = os.getloadavg()
    med = {k: statistics.median(v) for k, v in res.items()}
    link = med["raw GET (link limit)"]
    summary = {
        "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": load0, "load_after": load1, "images": a.images, "shards": len(tars),
        "dataset_mb": total_bytes / 1e6, "latency_ms": a.latency_ms, "conn_mb_s": a.conn_mb_s,
        "threads": a.threads, "mb_s": res, "median_mb_s": med,
        "stoker_vs_link": med["stoker"] / link,
        "stoker_vs_webdataset": med["stoker"] / med["webdataset (curl per shard)"],
        "stoker_vs_no_readahead": med["stoker"] / med["stoker no read-ahead"],
        "stoker_vs_local": med["stoker"] / med["stoker, local disk"],
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(summary, f, indent=1)
    print()
    print(f"{len(tars)} shards, {total_bytes / 1e6:.0f} MB; link: {a.latency_ms:g} ms, "
          f"{a.conn_mb_s:g} MB/s per connection, {a.threads} connections/threads; "
          f"load {load0[0]:.1f} -> {load1[0]:.1f}")
    print("| side | MB/s median (range) | vs raw GET |")
    print("| --- | ---: | ---: |")
    for k, v in res.items():
        print(f"| {k} | {med[k]:.1f} ({min(v):.1f}-{max(v):.1f}) | {med[k] / link:.2f} |")


if __name__ == "__main__":
    main()
