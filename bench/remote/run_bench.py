"""Reading WebDataset shards from an S3-compatible store over a slow link: stoker against a
raw parallel GET client (the link's limit), webdataset (curl per shard, its documented way
for object stores) and stoker without read-ahead, with stoker from local disk as the
reference; sides interleaved in every round.

    eval "$(scripts/servers.sh up)"     # S3Proxy + toxiproxy on 127.0.0.1 (and the others)
    .venv/bin/python bench/remote/run_bench.py [--images 2000] [--shard-mb 10] \
        [--latencies 0,5,20,50 | --latency-ms 20] [--conn-mb-s 25] [--threads 8] [--repeats 3] \
        [--peer-python .venv-torch2/bin/python] [--skip "stoker no read-ahead,..."]

The link: toxiproxy in front of S3Proxy adds --latency-ms to every response and caps each
connection at --conn-mb-s (a per-connection limit, as object stores have: AWS quotes ~85-90
MB/s per connection; the cap here is scaled to what S3Proxy and 2 cores can serve). The
shards are written by `stoker convert` (--no-index: no .idx, as webdataset's own writer
leaves them, so the reader must scan each tar) and uploaded with boto3.

Sides (I/O only: bytes of every sample, no decode):
  * raw GET        boto3 get_object of whole shards, --connections (default --threads) in
                   parallel (the link's limit
                   for that many connections: what any reader can reach at best)
  * stoker         `stoker bench pipeline --data wds:s3://... --decode raw --threads N
                   --no-shuffle`, with STOKER_S3_THREADS=N (the same number of connections
                   as the raw GET side), read-ahead and look-ahead across shards on, the
                   shards' indices from the local index cache (filled by one untimed run
                   before the rounds: what every run after the first on a machine sees)
  * stoker, first run  the same with the index cache off: each shard is scanned before the
                   epoch reads it (the data crosses the link twice)
  * stoker no-RA   the same with STOKER_S3_BLOCK_MB=0 (one GET per sample and per header)
  * webdataset     webdataset.WebDataset over "pipe:curl -s <presigned URL>" per shard,
                   --threads DataLoader-style worker processes (each takes shards i::N)
  * local disk     stoker from the same shards on local disk (not through the link)
The peers that need torch >= 2 run in subprocesses of --peer-python (default
.venv-torch2/bin/python when present; bench/install-torch2-peers.sh makes it), with
bench/remote/peers_torch2.py (details there), each from a fresh local cache (cold epoch):
  * s3torchconnector  S3IterableDataset over the same tar shards, webdataset's tar iterator
  * MosaicML Streaming the same samples as MDS shards (~--shard-mb each), uploaded
  * LitData           the same samples through litdata.optimize (~--shard-mb chunks), uploaded
A peer that cannot be prepared is reported with its error (results.json "errors"); a run that
fails is left out of the medians and reported with its error ("failed_runs"), never dropped
silently.
--latencies sweeps the link's latency: each latency its own interleaved rounds.
MB/s of every side = the tar shards' size / the side's wall time (the peers' delivered
sample count and sample bytes are checked against the dataset's; their time starts at the
dataset's construction, after the interpreter's start and the imports of torch and the peer).
Writes bench/remote/results.json and results.html (throughput against latency, one line per
side) and prints MB/s per side (median, range) and ratios.
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


COLORS = {"raw GET (link limit)": "#7f7f7f", "stoker": "#d62728", "stoker no read-ahead": "#ff9896",
          "stoker, first run (scans)": "#e377c2",
          "webdataset (curl per shard)": "#1f77b4", "s3torchconnector": "#ff7f0e",
          "MosaicML Streaming": "#2ca02c", "LitData": "#9467bd", "stoker, local disk": "#8c564b"}


def svg_chart(per_lat, lats):
    """Throughput (median MB/s) against latency, one line per side (as bench/ray's chart)."""
    W, H, pad, right = 640, 360, 56, 190
    sides = [s for s in COLORS if any(s in per_lat[str(l)]["median_mb_s"] for l in lats)
             and s != "stoker, local disk"]
    vals = [per_lat[str(l)]["median_mb_s"][s] for l in lats for s in sides
            if s in per_lat[str(l)]["median_mb_s"]]
    ymax = max(vals) * 1.15 if vals else 1
    xmax = max(lats) or 1

    def x(v):
        return pad + (W - pad - right) * v / xmax

    def y(v):
        return H - pad - (H - 2 * pad) * v / ymax
    parts = [f'<svg width="{W}" height="{H}" xmlns="http://www.w3.org/2000/svg" '
             f'font-family="sans-serif" font-size="12">',
             f'<line x1="{pad}" y1="{H - pad}" x2="{W - right}" y2="{H - pad}" stroke="#333"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{H - pad}" stroke="#333"/>',
             f'<text x="{(W - right + pad) / 2}" y="{H - 14}" text-anchor="middle">added latency per '
             f'response (ms)</text>',
             f'<text x="14" y="{H / 2}" transform="rotate(-90 14 {H / 2})" text-anchor="middle">'
             f'MB/s (median)</text>']
    for l in lats:
        parts.append(f'<text x="{x(l):.1f}" y="{H - pad + 16}" text-anchor="middle">{l:g}</text>')
    for t in range(5):
        v = ymax * t / 4
        parts.append(f'<text x="{pad - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
    for j, side in enumerate(sides):
        pts = [(x(l), y(per_lat[str(l)]["median_mb_s"][side])) for l in lats
               if side in per_lat[str(l)]["median_mb_s"]]
        c = COLORS[side]
        parts.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="'
                     + " ".join(f"{a:.1f},{b:.1f}" for a, b in pts) + '"/>')
        for a, b in pts:
            parts.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{c}"/>')
        parts.append(f'<text x="{W - right + 12}" y="{pad + 16 * j}" fill="{c}">{side}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def write_html(path, summary):
    lats = summary["latencies_ms"]
    per = summary["per_latency"]
    rows = []
    sides = [s for s in COLORS if any(s in per[str(l)]["median_mb_s"] for l in lats)]
    head = "".join(f"<th>{l:g} ms</th>" for l in lats)
    for s in sides:
        cells = []
        for l in lats:
            v = per[str(l)]["mb_s"].get(s)
            cells.append(f"<td>{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})</td>" if v
                         else "<td>-</td>")
        rows.append(f"<tr><td>{s}</td>{''.join(cells)}</tr>")
    from html import escape
    errs = "".join(f"<li><b>{k}</b>: <pre>{escape(v)}</pre></li>" for k, v in summary["errors"].items())
    errs += "".join(f"<li><b>{k}</b>: {len(v)} run(s) failed (left out of the medians); the first:"
                    f"<pre>{escape(v[0])}</pre></li>" for k, v in summary["failed_runs"].items())
    html = (f"<!doctype html><meta charset='utf-8'><title>stoker: remote storage</title>"
            f"<h1>WebDataset-sized shards over a slow S3 link: throughput against latency</h1>"
            f"<p>{summary['shards']} shards, {summary['dataset_mb']:.0f} MB ({summary['images']} JPEGs); "
            f"S3Proxy behind toxiproxy: added latency per response as on the x axis, "
            f"{summary['conn_mb_s']:g} MB/s per connection; {summary['threads']} threads/"
            f"connections/workers per side; I/O only (sample bytes, no decode); cold epoch; sides "
            f"interleaved, order rotated, {summary['repeats']} round(s) per latency; load average "
            f"{summary['load_before'][0]:.1f} before, {summary['load_after'][0]:.1f} after (2 cores "
            f"shared with the servers). {summary['date']}. Command: <code>{escape(summary['command'])}</code></p>"
            f"{svg_chart(per, lats)}"
            f"<h2>MB/s, median (range)</h2><table border='1' cellpadding='4'><tr><th>side</th>{head}</tr>"
            f"{''.join(rows)}</table>"
            + (f"<h2>Sides that failed</h2><ul>{errs}</ul>" if errs else ""))
    with open(path, "w") as f:
        f.write(html)


def peer_run(py, side, uri, endpoint, threads, env, expect_samples, expect_bytes):
    """One torch >= 2 peer in a fresh process of the peer interpreter: its seconds from the
    dataset's construction to the epoch's end (the interpreter's start and the imports of
    torch and the library not counted)."""
    r = subprocess.run([py, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers_torch2.py"),
                        "run", side, uri, endpoint, str(threads)], env=env, capture_output=True,
                       text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-3000:])
    j = json.loads(r.stdout.strip().splitlines()[-1])
    if j["samples"] != expect_samples or j["bytes"] != expect_bytes:
        raise RuntimeError(f"{side} delivered {j['samples']} samples, {j['bytes']} bytes; "
                           f"expected {expect_samples}, {expect_bytes}")
    return j["seconds"]


def sample_bytes(shards, tars):
    import tarfile
    n = samples = 0
    for f in tars:
        keys = set()
        with tarfile.open(os.path.join(shards, f)) as t:
            for m in t:
                if m.isfile():
                    n += m.size
                    keys.add(m.name.rsplit(".", 1)[0])
        samples += len(keys)
    return samples, n


def upload_dir(c, bucket, d, prefix):
    have = {o["Key"] for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
            for o in page.get("Contents", [])}
    for f in sorted(os.listdir(d)):
        if os.path.isfile(os.path.join(d, f)) and f"{prefix}/{f}" not in have:
            c.upload_file(os.path.join(d, f), bucket, f"{prefix}/{f}")


def set_link(api, latency_ms, conn_mb_s):
    for t in json.loads(toxi(api, "GET", "/proxies/s3/toxics") or b"[]"):
        toxi(api, "DELETE", f"/proxies/s3/toxics/{t['name']}")
    toxi(api, "POST", "/proxies/s3/toxics", {"name": "bench-latency", "type": "latency",
                                             "stream": "downstream",
                                             "attributes": {"latency": int(latency_ms)}})
    toxi(api, "POST", "/proxies/s3/toxics", {"name": "bench-bw", "type": "bandwidth",
                                             "stream": "downstream",
                                             "attributes": {"rate": int(conn_mb_s * 1000)}})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--shard-mb", type=float, default=10)
    ap.add_argument("--latency-ms", type=float, default=20)
    ap.add_argument("--latencies", help="comma-separated latencies (ms) to sweep, e.g. 0,5,20,50 "
                    "(default: --latency-ms alone)")
    ap.add_argument("--conn-mb-s", type=float, default=25)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--connections", type=int, default=None,
                    help="connections of the raw GET side and of stoker (STOKER_S3_THREADS); "
                         "default: --threads")
    default_peer = os.path.join(ROOT, ".venv-torch2", "bin", "python")
    ap.add_argument("--peer-python", default=default_peer if os.path.exists(default_peer) else None,
                    help="interpreter with torch >= 2 and the peers (bench/install-torch2-peers.sh)")
    ap.add_argument("--skip", default="", help="sides to leave out, comma-separated")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "stoker-bench-remote"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "remote", "results.json"))
    ap.add_argument("--html", default=os.path.join(ROOT, "bench", "remote", "results.html"))
    a = ap.parse_args()
    lats = [float(x) for x in a.latencies.split(",")] if a.latencies else [a.latency_ms]

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
    n_samples, n_sample_bytes = sample_bytes(shards, tars)
    prefix = f"bench-remote/{a.images}-{a.shard_mb:g}mb"
    c = client(endpoint)
    upload_dir(c, bucket, shards, prefix)
    keys = [f"{prefix}/{f}" for f in tars]
    pc = client(proxy)
    urls = ["pipe:curl -s -f '" + pc.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": k}, ExpiresIn=7200) + "'" for k in keys]
    base = dict(os.environ, AWS_ACCESS_KEY_ID=env_or_die("STOKER_TEST_S3_KEY"),
                AWS_SECRET_ACCESS_KEY=env_or_die("STOKER_TEST_S3_SECRET"), AWS_REGION="us-east-1",
                AWS_EC2_METADATA_DISABLED="true", AWS_ENDPOINT_URL=proxy)
    # The peers' boto3 (MosaicML Streaming, LitData's index download) sends the newer
    # default checksum headers, which S3Proxy answers with NotImplemented: only when required.
    peer_env = dict(base, S3_ENDPOINT_URL=proxy, AWS_REQUEST_CHECKSUM_CALCULATION="when_required",
                    AWS_RESPONSE_CHECKSUM_VALIDATION="when_required")
    s3spec = f"wds:s3://{bucket}/{prefix}/train-{{00000..{len(tars) - 1:05d}}}.tar"
    local = f"wds:{shards}/train-{{00000..{len(tars) - 1:05d}}}.tar"
    icache = os.path.join(a.work, "index-cache")
    conns = a.connections or a.threads
    senv = dict(base, STOKER_S3_THREADS=str(conns), STOKER_INDEX_CACHE=icache)
    stoker_run(s3spec, a.threads, senv)  # untimed: fills the index cache (no .idx beside them)
    sides = {
        "raw GET (link limit)": lambda: raw_get(proxy, bucket, keys, conns)[1],
        "stoker": lambda: stoker_run(s3spec, a.threads, senv),
        "stoker, first run (scans)": lambda: stoker_run(
            s3spec, a.threads, dict(senv, STOKER_INDEX_CACHE="off")),
        "stoker no read-ahead": lambda: stoker_run(
            s3spec, a.threads, dict(senv, STOKER_S3_BLOCK_MB="0", STOKER_INDEX_CACHE="off")),
        "webdataset (curl per shard)": lambda: webdataset_run(urls, a.threads)[1],
        "stoker, local disk": lambda: stoker_run(local, a.threads, base),
    }
    errors = {}
    py = a.peer_python
    if py and os.path.exists(py):
        helper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers_torch2.py")
        peers = {"s3torchconnector": ("s3torchconnector", prefix, None),
                 "MosaicML Streaming": ("mds", f"bench-remote/mds-{a.images}-{a.shard_mb:g}mb", "prepare-mds"),
                 "LitData": ("litdata", f"bench-remote/litdata-{a.images}-{a.shard_mb:g}mb", "prepare-litdata")}
        for name, (side, pfx, prep) in peers.items():
            if name in a.skip.split(","):
                continue
            try:
                if prep:
                    d = os.path.join(a.work, os.path.basename(pfx))
                    if not os.path.isdir(d):
                        r = subprocess.run([py, helper, prep, shards, d, str(a.shard_mb)],
                                           capture_output=True, text=True, env=peer_env)
                        if r.returncode != 0:
                            raise RuntimeError(r.stderr[-3000:])
                    upload_dir(c, bucket, d, pfx)
                sides[name] = (lambda side=side, pfx=pfx: peer_run(
                    py, side, f"s3://{bucket}/{pfx}", proxy, a.threads, peer_env, n_samples,
                    n_sample_bytes))
            except Exception as e:  # reported, never dropped silently
                errors[name] = f"preparation failed: {e}"
                print(f"{name}: {errors[name]}", file=sys.stderr)
    else:
        for name in ("s3torchconnector", "MosaicML Streaming", "LitData"):
            errors[name] = f"not run: no peer interpreter with torch >= 2 ({py}); bench/install-torch2-peers.sh"
    for k in a.skip.split(","):
        sides.pop(k, None)

    per_lat = {}
    failures = {}  # side -> the errors of its failed runs (the run is left out of the medians)
    load0 = os.getloadavg()
    try:
        for lat in lats:
            set_link(api, lat, a.conn_mb_s)
            res = {k: [] for k in sides}
            l0 = os.getloadavg()
            for rnd in range(a.repeats):
                order = list(sides)[rnd % len(sides):] + list(sides)[:rnd % len(sides)]
                for name in order:
                    try:
                        secs = sides[name]()
                    except Exception as e:  # a failed run is reported with its error and counted
                        failures.setdefault(name, []).append(f"at {lat:g} ms, round {rnd}: {str(e)[-1500:]}")
                        print(f"[{lat:g} ms, {rnd}] {name} FAILED: {str(e)[-1500:]}", file=sys.stderr)
                        continue
                    res[name].append(total_bytes / secs / 1e6)
                    print(f"[{lat:g} ms, {rnd}] {name}: {total_bytes / 1e6:.1f} MB in {secs:.2f} s = "
                          f"{total_bytes / secs / 1e6:.1f} MB/s", flush=True)
            res = {k: v for k, v in res.items() if v}
            med = {k: statistics.median(v) for k, v in res.items()}
            link = med.get("raw GET (link limit)")
            ratios = {}
            if "stoker" in med:
                for k, v in med.items():
                    if k != "stoker":
                        ratios[f"stoker / {k}"] = med["stoker"] / v
            per_lat[str(lat)] = {"mb_s": res, "median_mb_s": med, "ratios": ratios,
                                 "load_before": l0, "load_after": os.getloadavg()}
            print(f"\n{lat:g} ms: {len(tars)} shards, {total_bytes / 1e6:.0f} MB; {a.conn_mb_s:g} MB/s per "
                  f"connection, {conns} connections (raw GET, stoker), {a.threads} threads/workers; load {l0[0]:.1f} -> {os.getloadavg()[0]:.1f}")
            print("| side | MB/s median (range) | vs raw GET | stoker / side |")
            print("| --- | ---: | ---: | ---: |")
            for k, v in res.items():
                print(f"| {k} | {med[k]:.1f} ({min(v):.1f}-{max(v):.1f}) | "
                      f"{med[k] / link if link else float('nan'):.2f} | "
                      f"{med['stoker'] / med[k] if 'stoker' in med else float('nan'):.2f} |", flush=True)
    finally:
        for t in json.loads(toxi(api, "GET", "/proxies/s3/toxics") or b"[]"):
            toxi(api, "DELETE", f"/proxies/s3/toxics/{t['name']}")
    load1 = os.getloadavg()
    summary = {
        "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": load0, "load_after": load1, "images": a.images, "shards": len(tars),
        "dataset_mb": total_bytes / 1e6, "sample_mb": n_sample_bytes / 1e6, "samples": n_samples,
        "latencies_ms": lats, "conn_mb_s": a.conn_mb_s, "threads": a.threads, "repeats": a.repeats,
        "connections": conns,
        "peer_python": py, "per_latency": per_lat, "errors": errors, "failed_runs": failures,
    }
    for k, v in errors.items():
        print(f"FAILED {k}: {v[-500:]}")
    for k, v in failures.items():
        print(f"{k}: {len(v)} run(s) failed; the first: {v[0][-500:]}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(summary, f, indent=1)
    write_html(a.html, summary)
    print(f"wrote {a.out} and {a.html}")


if __name__ == "__main__":
    main()
