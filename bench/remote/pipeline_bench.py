"""The full pipeline (JPEG decode, RandomResizedCrop, flip, batches) reading WebDataset shards
from an S3-compatible store over a slow link, against the same pipeline reading the same
shards from local disk, in one run with the sides interleaved (issue 14's "cold epoch within
10 % of local disk whenever the link can carry the pipeline's bytes" and "second epoch from
the cache >= 95 % of local-disk throughput; occupancy never above the limit plus a shard").

    eval "$(scripts/servers.sh up)"
    .venv/bin/python bench/remote/run_bench.py --images 2000 --repeats 1   # writes + uploads
    .venv/bin/python bench/remote/pipeline_bench.py [--images 2000] [--repeats 3]

Uses the shards bench/remote/run_bench.py wrote and uploaded (same --images / --shard-mb /
--work), with its link: toxiproxy adds --latency-ms to every response and caps each
connection at --conn-mb-s. Sides, each a fresh `stoker bench pipeline` process, one epoch:
  * local disk            the shards from local disk (page cache warm: the best local case)
  * s3, cold              object URLs, no node cache (read-ahead + look-ahead across shards;
                          indices from the local index cache, filled by an untimed run first)
  * s3 + cache, cold      --cache-dir in a fresh directory (every shard fetched into it)
  * s3 + cache, warm      the same directory again (the epoch reads the node cache)
Prints samples/s per side (median, range), the ratios to local disk, the CPU seconds of the
stoker process and of the S3 server plus the link's proxy (they run on the same cores as the
pipeline here, which a remote store does not), and the cache's occupancy against its limit;
writes bench/remote/pipeline-results.json.
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_bench as rb  # noqa: E402  (toxiproxy helpers, paths)


def server_pids():
    """The S3 server (S3Proxy) and the link (toxiproxy): they run on the bench's cores."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"s3proxy" in cmd or b"toxiproxy-server" in cmd:
            pids.append(int(d))
    return pids


def cpu_s(pids):
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            total += (int(parts[11]) + int(parts[12])) / tick
        except OSError:
            pass
    return total


def one(data, env, extra=()):
    out = tempfile.mktemp(suffix=".json")
    cmd = [rb.STOKER, "bench", "pipeline", "--data", data, "--no-shuffle", "--epochs", "1",
           "--batch", "32", "--quiet", "--json", out, *extra]
    servers = server_pids()
    s0 = cpu_s(servers)
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_cpu = cpu_s(servers) - s0
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    with open(out) as f:
        st = json.load(f)
    os.unlink(out)
    st["process_wall_s"] = wall
    st["stoker_cpu_s"] = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    st["server_cpu_s"] = server_cpu
    return st


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--shard-mb", type=float, default=10)
    ap.add_argument("--latency-ms", type=float, default=20)
    ap.add_argument("--conn-mb-s", type=float, default=25)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache-limit", default="1G")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "stoker-bench-remote"))
    ap.add_argument("--out", default=os.path.join(rb.ROOT, "bench", "remote",
                                                  "pipeline-results.json"))
    a = ap.parse_args()
    proxy = rb.env_or_die("STOKER_TEST_S3_PROXY_ENDPOINT")
    api = rb.env_or_die("STOKER_TEST_TOXIPROXY_API")
    bucket = rb.env_or_die("STOKER_TEST_S3_BUCKET")
    shards = os.path.join(a.work, f"wds-{a.images}-{a.shard_mb:g}mb")
    if not os.path.isdir(shards):
        sys.exit(f"{shards} missing: run bench/remote/run_bench.py --images {a.images} first")
    tars = sorted(f for f in os.listdir(shards) if f.endswith(".tar"))
    prefix = f"bench-remote/{a.images}-{a.shard_mb:g}mb"
    pattern = f"train-{{00000..{len(tars) - 1:05d}}}.tar"
    s3spec, local = f"wds:s3://{bucket}/{prefix}/{pattern}", f"wds:{shards}/{pattern}"
    index_cache = os.path.join(a.work, "index-cache")
    env = dict(os.environ, AWS_ACCESS_KEY_ID=rb.env_or_die("STOKER_TEST_S3_KEY"),
               AWS_SECRET_ACCESS_KEY=rb.env_or_die("STOKER_TEST_S3_SECRET"),
               AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
               AWS_ENDPOINT_URL=proxy, STOKER_INDEX_CACHE=index_cache)
    for t in json.loads(rb.toxi(api, "GET", "/proxies/s3/toxics") or b"[]"):
        rb.toxi(api, "DELETE", f"/proxies/s3/toxics/{t['name']}")
    rb.toxi(api, "POST", "/proxies/s3/toxics", {"name": "bench-latency", "type": "latency",
                                                "stream": "downstream",
                                                "attributes": {"latency": int(a.latency_ms)}})
    rb.toxi(api, "POST", "/proxies/s3/toxics", {"name": "bench-bw", "type": "bandwidth",
                                                "stream": "downstream",
                                                "attributes": {"rate": int(a.conn_mb_s * 1000)}})
    cache_dir = os.path.join(a.work, "node-cache")
    res = {k: [] for k in ("local disk", "s3, cold", "s3 + cache, cold", "s3 + cache, warm")}
    cpu = {k: [] for k in res}  # (stoker CPU-s, server + link CPU-s) per run
    occupancy = []
    load0 = os.getloadavg()
    try:
        one(s3spec, env)  # untimed: fills the index cache (the shards have no .idx)
        for rnd in range(a.repeats):
            order = ["local disk", "s3, cold", "s3 + cache"]
            order = order[rnd % 3:] + order[:rnd % 3]
            for name in order:
                if name == "s3 + cache":
                    shutil.rmtree(cache_dir, ignore_errors=True)
                    extra = ("--cache-dir", cache_dir, "--cache-limit", a.cache_limit)
                    cold = one(s3spec, env, extra)
                    warm = one(s3spec, env, extra)
                    res["s3 + cache, cold"].append(cold["samples_per_s"])
                    res["s3 + cache, warm"].append(warm["samples_per_s"])
                    cpu["s3 + cache, cold"].append((cold["stoker_cpu_s"], cold["server_cpu_s"]))
                    cpu["s3 + cache, warm"].append((warm["stoker_cpu_s"], warm["server_cpu_s"]))
                    for st in (cold, warm):
                        c = st.get("cache") or {}
                        occupancy.append((c.get("max_occupancy_bytes"), c.get("limit_bytes")))
                    print(f"[{rnd}] s3 + cache: cold {cold['samples_per_s']:.0f}, warm "
                          f"{warm['samples_per_s']:.0f} samples/s (hit rate "
                          f"{(warm.get('cache') or {}).get('hit_rate', 0):.2f})", flush=True)
                    continue
                st = one(local if name == "local disk" else s3spec, env)
                res[name].append(st["samples_per_s"])
                cpu[name].append((st["stoker_cpu_s"], st["server_cpu_s"]))
                print(f"[{rnd}] {name}: {st['samples_per_s']:.0f} samples/s "
                      f"({st['bottleneck']} bound)", flush=True)
    finally:
        for t in json.loads(rb.toxi(api, "GET", "/proxies/s3/toxics") or b"[]"):
            rb.toxi(api, "DELETE", f"/proxies/s3/toxics/{t['name']}")
    load1 = os.getloadavg()
    med = {k: statistics.median(v) for k, v in res.items() if v}
    ref = med["local disk"]
    print(f"\n{len(tars)} shards, link {a.latency_ms:g} ms, {a.conn_mb_s:g} MB/s per connection; "
          f"load {load0[0]:.1f} -> {load1[0]:.1f}")
    print("| side | samples/s median (range) | vs local disk | stoker CPU-s | server + link CPU-s |\n"
          "| --- | ---: | ---: | ---: | ---: |")
    cpu_med = {k: (statistics.median(a for a, _ in v), statistics.median(b for _, b in v))
               for k, v in cpu.items() if v}
    for k, v in res.items():
        print(f"| {k} | {med[k]:.0f} ({min(v):.0f}-{max(v):.0f}) | {med[k] / ref:.2f} | "
              f"{cpu_med[k][0]:.2f} | {cpu_med[k][1]:.2f} |")
    worst = max((o for o, lim in occupancy if o is not None), default=None)
    if worst is not None:
        print(f"cache occupancy: max {worst / 1e6:.1f} MB, limit {occupancy[0][1] / 1e6:.1f} MB")
    summary = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                     time.gmtime()),
               "load_before": load0, "load_after": load1, "shards": len(tars),
               "latency_ms": a.latency_ms, "conn_mb_s": a.conn_mb_s, "samples_per_s": res,
               "median": med, "vs_local": {k: med[k] / ref for k in med},
               "cpu_s_stoker_server": cpu, "cpu_s_median": cpu_med,
               "cache_occupancy": occupancy}
    with open(a.out, "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
