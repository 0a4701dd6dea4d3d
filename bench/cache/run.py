#!/usr/bin/env python3
"""The node-wide cache (--cache-dir) on a slow source, side by side in one run.

Peers, interleaved round by round (every round runs each once, in a rotated order):
  local      the shards read straight from local disk (no slowdown, no cache): the target
  slow       the slow source, no cache (every epoch pays the link)
  cold       the slow source behind an empty cache (epoch 1: the cache fills)
  warm       the slow source behind the cache `cold` left (a second epoch, new process)
  small      cold, with a limit of 40 % of the dataset (evictions; occupancy bound)
Then 4 rank processes started together on one empty cache: bytes from the source (counted
by the slow source itself, below the cache) against the dataset's size.

The slow source is `bench pipeline --source-latency-ms L --source-mbps B` (a FaultInjectionEnv
under the cache: every read waits L ms; all reads of a process share one B MB/s link).
Occupancy is sampled from outside every 20 ms (apparent sizes of the cache's files).

  python3 bench/cache/run.py [--images 1200] [--shard 100] [--rounds 3] [--latency-ms 20]
                             [--mbps 100] [--decode train] [--work /tmp/stoker-cache-bench]
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
STOKER = os.environ.get("STOKER_BINARY", str(ROOT / "build" / "stoker"))


def dir_bytes(d):
    total = 0
    for p in pathlib.Path(d).rglob("*"):
        try:
            if p.is_file() and not p.name.endswith((".meta", ".lock", ".plan", ".pos")):
                total += p.stat().st_size
        except FileNotFoundError:
            pass
    return total


class Sampler:
    """Largest occupancy of a cache directory seen while a run goes."""

    def __init__(self, d):
        self.d, self.peak, self.stop = d, 0, False
        self.t = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while not self.stop:
            self.peak = max(self.peak, dir_bytes(self.d))
            time.sleep(0.02)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self.stop = True
        self.t.join()
        self.peak = max(self.peak, dir_bytes(self.d))


def bench(a, data, tag, cache=None, limit=None, slow=True, rank=None, world=None):
    out = a.work / f"{tag}.json"
    cmd = [STOKER, "bench", "pipeline", "--data", data, "--decode", a.decode, "--batch", "32",
           "--json", out]
    if slow:
        cmd += ["--source-latency-ms", a.latency_ms, "--source-mbps", a.mbps]
    if cache:
        cmd += ["--cache-dir", cache, "--cache-limit", str(limit)]
    if rank is not None:
        cmd += ["--rank", rank, "--world-size", world]
    return [str(c) for c in cmd], out


def run(cmd, out):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}\n{p.stderr}")
    m = json.loads(pathlib.Path(out).read_text())
    src = re.search(r"source \(.*\): ([0-9.]+) MB read", p.stdout)
    m["source_mb"] = float(src.group(1)) if src else 0.0
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=1200)
    ap.add_argument("--shard", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-ms", type=float, default=20)
    ap.add_argument("--mbps", type=float, default=100)
    ap.add_argument("--decode", default="train")
    ap.add_argument("--work", default="/tmp/stoker-cache-bench")
    a = ap.parse_args()
    a.work = pathlib.Path(a.work)
    data = a.work / "wds"
    if not (data / "stoker-gen.json").exists():
        shutil.rmtree(a.work, ignore_errors=True)
        a.work.mkdir(parents=True)
        subprocess.run([STOKER, "gen", "images", "--out", data, "--count", str(a.images),
                        "--format", "wds", "--shard-samples", str(a.shard), "--threads", "1"],
                       check=True, capture_output=True)
    shards = sorted(data.glob("*.tar"))
    size = sum(p.stat().st_size for p in shards)
    biggest = max(p.stat().st_size for p in shards)
    big_limit = 4 * size
    small_limit = int(0.4 * size)
    print(f"dataset: {len(shards)} shards, {size / 1e6:.1f} MB (largest {biggest / 1e6:.1f} MB); "
          f"slow source {a.latency_ms:g} ms per read, {a.mbps:g} MB/s link; decode {a.decode}")

    peers = ["local", "slow", "cold", "warm", "small"]
    res = {p: [] for p in peers}
    for r in range(a.rounds):
        order = peers[r % len(peers):] + peers[:r % len(peers)]
        cache = a.work / f"cache-{r}"
        small = a.work / f"small-{r}"
        for d in (cache, small):
            shutil.rmtree(d, ignore_errors=True)
        # warm needs cold's cache: when warm comes first in the rotation, fill it (untimed).
        if order.index("warm") < order.index("cold"):
            run(*bench(a, data, f"fill{r}", cache, big_limit))
            order.remove("cold")
            order.insert(order.index("warm") + 1, "cold")
            cold_dir = a.work / f"cache-cold-{r}"
        else:
            cold_dir = cache
        for p in order:
            if p == "local":
                m = run(*bench(a, data, f"{p}{r}", slow=False))
            elif p == "slow":
                m = run(*bench(a, data, f"{p}{r}"))
            elif p in ("cold", "warm"):
                d = cold_dir if p == "cold" else cache
                if p == "cold":
                    shutil.rmtree(d, ignore_errors=True)
                with Sampler(d) as s:
                    m = run(*bench(a, data, f"{p}{r}", d, big_limit))
                m["peak"] = s.peak
            else:
                with Sampler(small) as s:
                    m = run(*bench(a, data, f"{p}{r}", small, small_limit))
                m["peak"] = s.peak
            res[p].append(m)
            print(f"  round {r} {p:6s} {m['samples_per_s']:8.1f} samples/s, source "
                  f"{m['source_mb']:7.1f} MB" +
                  (f", hit rate {m['cache']['hit_rate']:.2f}, peak occupancy "
                   f"{m['peak'] / 1e6:.1f} MB" if "cache" in m else ""), flush=True)

    def med(p):
        return statistics.median(m["samples_per_s"] for m in res[p])

    def spread(p):
        v = [m["samples_per_s"] for m in res[p]]
        return (max(v) - min(v)) / statistics.median(v) * 100

    print("\npeer     samples/s (median, spread)   vs local")
    for p in peers:
        print(f"  {p:6s} {med(p):9.1f}  ±{spread(p):4.0f} %        {med(p) / med('local'):.2f}x")
    for p in ("cold", "warm", "small"):
        lim = big_limit if p != "small" else small_limit
        peak = max(m["peak"] for m in res[p])
        print(f"  {p}: peak occupancy {peak / 1e6:.1f} MB, limit {lim / 1e6:.1f} MB, "
              f"limit + largest shard {(lim + biggest) / 1e6:.1f} MB -> "
              f"{'within' if peak <= lim + biggest else 'ABOVE'}")

    # 4 ranks on one empty cache, started together.
    shared = a.work / "shared"
    shutil.rmtree(shared, ignore_errors=True)
    procs = []
    with Sampler(shared) as s:
        for rk in range(4):
            cmd, out = bench(a, data, f"rank{rk}", shared, big_limit, rank=rk, world=4)
            procs.append((subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True), out))
        ms = []
        for p, out in procs:
            so, se = p.communicate(timeout=600)
            if p.returncode != 0:
                raise SystemExit(se)
            m = json.loads(pathlib.Path(out).read_text())
            m["source_mb"] = float(re.search(r"source \(.*\): ([0-9.]+) MB read", so).group(1))
            ms.append(m)
    src = sum(m["source_mb"] for m in ms) * 1e6
    fetched = sum(m["cache"]["fetched_bytes"] for m in ms)
    print(f"\n4 ranks, one cache: bytes from the source {src / 1e6:.1f} MB for a {size / 1e6:.1f} MB "
          f"dataset ({(src - size) / size * 100:+.2f} %); fetched {fetched / 1e6:.1f} MB in "
          f"{sum(m['cache']['fetches'] for m in ms)} fetches for {len(shards)} shards; "
          f"peak occupancy {s.peak / 1e6:.1f} MB (one copy)")


if __name__ == "__main__":
    main()
