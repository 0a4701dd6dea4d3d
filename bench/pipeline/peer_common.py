"""Shared measurement loop for the peer loaders (stdlib only: imported from two venvs).

Every contender is measured the same way: an endless stream of batches (epochs back to
back), the first `warmup` batches discarded (worker start-up, autotuning, first-touch),
then `batches` batches timed from the moment the last warm-up batch arrived to the
moment the last measured batch arrived. images/s = images in the measured batches / time;
CPU-ms/image = CPU time of the whole process tree in that window / images.
"""
import argparse
import json
import os
import platform
import sys
import time


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--data", required=True, help="ImageFolder root (root/<class>/<file>.jpg)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="workers / threads (default: cores)")
    ap.add_argument("--warmup", type=int, default=8, help="batches discarded before timing")
    ap.add_argument("--batches", type=int, default=64, help="batches timed")
    ap.add_argument("--json", default="", help="write the result here")


def list_images(root: str):
    """(path, label) pairs in torchvision ImageFolder order: sorted classes, sorted files."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    out = []
    for label, c in enumerate(classes):
        cdir = os.path.join(root, c)
        for f in sorted(os.listdir(cdir)):
            if f.lower().endswith((".jpg", ".jpeg")):
                out.append((os.path.join(cdir, f), label))
    if not out:
        raise SystemExit(f"no JPEG files under {root}/<class>/")
    return out


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu_seconds(root_pid: int = 0) -> float:
    """user+system CPU seconds of a process and all its live descendants (threads
    included), from /proc. Used to report CPU cost per image, which a busy machine
    distorts far less than images/s."""
    root_pid = root_pid or os.getpid()
    stats = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # rest[0] = state, rest[1] = ppid, rest[11] = utime, rest[12] = stime
        stats[int(d)] = (int(rest[1]), int(rest[11]) + int(rest[12]))
    children = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
        todo.extend(children.get(pid, []))
    return total / _TICK


def measure(batches_iter, warmup: int, batches: int, batch_size_of) -> dict:
    """Consumes warmup+batches batches from the endless iterator; returns the timing."""
    it = iter(batches_iter)
    t_start = time.perf_counter()
    for _ in range(warmup):
        next(it)
    t0 = time.perf_counter()
    c0 = tree_cpu_seconds()
    images = 0
    sizes = set()
    for _ in range(batches):
        b = next(it)
        n = batch_size_of(b)
        images += n
        sizes.add(n)
    t1 = time.perf_counter()
    c1 = tree_cpu_seconds()
    return {
        "images": images,
        "seconds": t1 - t0,
        "images_per_s": images / (t1 - t0) if t1 > t0 else 0.0,
        "cpu_s": c1 - c0,
        "cpu_ms_per_image": 1000.0 * (c1 - c0) / images if images else 0.0,
        "warmup_s": t0 - t_start,
        "warmup_batches": warmup,
        "batches": batches,
        "batch_sizes_seen": sorted(sizes),
    }


def finish(result: dict, path: str) -> None:
    result.setdefault("python", platform.python_version())
    result.setdefault("cpus", os.cpu_count())
    print(f"{result['name']}: {result['images_per_s']:.1f} images/s "
          f"({result['images']} images in {result['seconds']:.2f} s, "
          f"{result['cpu_ms_per_image']:.2f} CPU-ms/image, "
          f"warm-up {result['warmup_batches']} batches {result['warmup_s']:.2f} s)")
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=2)
    sys.stdout.flush()
