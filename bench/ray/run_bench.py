"""Ray scale-out: images/s with 1, 2 (, 4) CPU-only worker nodes, stoker.ray.RayPipeline vs
Ray Data's read_images + map_batches with torchvision, on the same local cluster.

    .venv/bin/python bench/ray/run_bench.py [--images 400] [--nodes 1,2] [--repeats 2]

For each node count a fresh ray.cluster_utils.Cluster on 127.0.0.1 (head with 0 CPUs: the
driver only consumes; K worker nodes of 1 logical CPU each). Both sides do the same work
per image: JPEG decode, RandomResizedCrop to 224, random flip, uint8 HWC batches of 32
delivered to the driver, one CPU thread per worker (stoker threads=1; torch
set_num_threads(1) in the Ray Data UDF). Each side runs an untimed epoch first (actor / worker
start-up, page cache), then timed epochs, the two sides alternating. Writes
bench/ray/results.json and bench/ray/results.html (the scaling chart).
"""

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
import stoker_testing  # noqa: E402,F401 -- finds the built extension

import numpy as np  # noqa: E402
import ray  # noqa: E402
import stoker.ray as sray  # noqa: E402

BATCH = 32


def make_images(root, n):
    if os.path.isdir(root) and sum(len(f) for _, _, f in os.walk(root)) >= n:
        return
    from PIL import Image
    rng = np.random.default_rng(0)
    for i in range(n):
        d = os.path.join(root, f"class_{i % 10}")
        os.makedirs(d, exist_ok=True)
        h, w = 300 + int(rng.integers(0, 100)), 400 + int(rng.integers(0, 100))
        base = rng.integers(0, 255, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
        img = np.kron(base, np.ones((8, 8, 1), dtype=np.uint8))[:h, :w]
        Image.fromarray(img).save(os.path.join(d, f"img_{i:05d}.jpg"), quality=85)


def stoker_side(folder, k):
    p = sray.RayPipeline(folder, workers=k, worker_options={"scheduling_strategy": "SPREAD"},
                         decode="train", image_size=224, layout="uint8", batch_size=BATCH,
                         threads=1, prefetch=2, seed=0)

    def epoch():
        t0 = time.perf_counter()
        n = sum(len(b["label"]) for b in p)
        return n / (time.perf_counter() - t0)
    return p, epoch


def ray_data_side(folder, k):
    import ray.data

    def augment(batch):
        import torch
        import torchvision.transforms as T
        torch.set_num_threads(1)
        tf = T.Compose([T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip()])
        out = [tf(torch.from_numpy(np.ascontiguousarray(im)).permute(2, 0, 1)).permute(1, 2, 0).numpy()
               for im in batch["image"]]
        return {"image": np.stack(out)}

    # Read and map tasks take half a logical CPU each, so that both fit on a 1-CPU node
    # (with 1 CPU each, the read task holds the CPU and the map stage never starts).
    ds = ray.data.read_images(folder, mode="RGB", num_cpus=0.5).map_batches(
        augment, batch_size=BATCH, num_cpus=0.5)

    def epoch():
        t0 = time.perf_counter()
        n = sum(len(b["image"]) for b in ds.iter_batches(batch_size=BATCH, batch_format="numpy"))
        return n / (time.perf_counter() - t0)
    return None, epoch


def datasource_side(folder, k):
    import ray.data
    ds = ray.data.read_datasource(sray.datasource(
        folder, task_bytes=4 << 20, decode="train", image_size=224, layout="uint8",
        batch_size=BATCH, threads=1, prefetch=2, seed=0), num_cpus=1)

    def epoch():
        t0 = time.perf_counter()
        n = sum(len(b["label"]) for b in ds.iter_batches(batch_size=BATCH, batch_format="numpy"))
        return n / (time.perf_counter() - t0)
    return None, epoch


def svg_chart(results, nodes):
    W, H, pad = 480, 300, 50
    ymax = max(max(v) for side in results.values() for v in side.values()) * 1.15
    def x(i):
        return pad + (W - 2 * pad) * (i / max(1, len(nodes) - 1))
    def y(v):
        return H - pad - (H - 2 * pad) * v / ymax
    parts = [f'<svg width="{W}" height="{H}" xmlns="http://www.w3.org/2000/svg" '
             f'font-family="sans-serif" font-size="12">',
             f'<line x1="{pad}" y1="{H - pad}" x2="{W - pad}" y2="{H - pad}" stroke="#333"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{H - pad}" stroke="#333"/>',
             f'<text x="{W / 2}" y="{H - 12}" text-anchor="middle">worker nodes (1 CPU each)</text>',
             f'<text x="14" y="{H / 2}" transform="rotate(-90 14 {H / 2})" text-anchor="middle">'
             f'images/s (median)</text>']
    for i, n in enumerate(nodes):
        parts.append(f'<text x="{x(i)}" y="{H - pad + 16}" text-anchor="middle">{n}</text>')
    for t in range(5):
        v = ymax * t / 4
        parts.append(f'<text x="{pad - 6}" y="{y(v) + 4}" text-anchor="end">{v:.0f}</text>')
    colors = {"stoker.ray": "#d62728", "ray.data+torchvision": "#1f77b4",
              "stoker datasource (ray.data)": "#2ca02c"}
    for j, (side, per) in enumerate(results.items()):
        pts = [(x(i), y(statistics.median(per[str(n)]))) for i, n in enumerate(nodes)]
        c = colors.get(side, "#555")
        parts.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="'
                     + " ".join(f"{a:.1f},{b:.1f}" for a, b in pts) + '"/>')
        for a, b in pts:
            parts.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{c}"/>')
        parts.append(f'<text x="{pad + 10}" y="{pad + 14 * j}" fill="{c}">{side}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--nodes", default="1,2")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--work", default="/tmp/stoker-bench-ray")
    a = ap.parse_args()
    folder = os.path.join(a.work, "images")
    make_images(folder, a.images)
    nodes = [int(x) for x in a.nodes.split(",")]
    import logging
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    results = {"stoker.ray": {}, "ray.data+torchvision": {}, "stoker datasource (ray.data)": {}}
    loads = []
    for k in nodes:
        c, _ = sray.local_cluster(nodes=k, cpus_per_node=1, head_cpus=0, object_store_mb=300)
        ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
        try:
            # Each measurement builds its side, runs an untimed warm-up epoch, a timed epoch,
            # then frees the side's CPUs (stoker's actors hold theirs while they live: Ray
            # Data would wait for them forever on 1-CPU nodes).
            sides = {"stoker.ray": stoker_side, "ray.data+torchvision": ray_data_side,
                     "stoker datasource (ray.data)": datasource_side}
            for rep in range(a.repeats):
                order = list(sides) if rep % 2 == 0 else list(sides)[::-1]
                for name in order:
                    handle, epoch = sides[name](folder, k)
                    warm = epoch()
                    rate = epoch()
                    if handle is not None:
                        handle.close()
                    print(f"  {k} node(s) {name}: warm-up {warm:.0f}, timed {rate:.0f} img/s",
                          flush=True)
                    results[name].setdefault(str(k), []).append(rate)
            loads.append(os.getloadavg()[0])
        finally:
            ray.shutdown()
            c.shutdown()
        print(f"{k} node(s): " + ", ".join(
            f"{n} {statistics.median(v[str(k)]):.0f} img/s ({min(v[str(k)]):.0f}..{max(v[str(k)]):.0f})"
            for n, v in results.items()), flush=True)
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "results.json"), "w") as f:
        json.dump({"images": a.images, "nodes": nodes, "images_per_s": results,
                   "loadavg_after_each": loads}, f, indent=1)
    rows = "".join(
        f"<tr><td>{k}</td>" + "".join(
            f"<td>{statistics.median(results[s][str(k)]):.0f}</td>" for s in results)
        + f"<td>{statistics.median(results['stoker.ray'][str(k)]) / statistics.median(results['ray.data+torchvision'][str(k)]):.2f}</td></tr>"
        for k in nodes)
    html = (f"<!doctype html><meta charset='utf-8'><title>stoker on Ray: scaling</title>"
            f"<h1>stoker.ray vs Ray Data + torchvision</h1>"
            f"<p>{a.images} JPEGs, RandomResizedCrop 224 + flip, uint8 batches of {BATCH}, "
            f"local cluster on 127.0.0.1, 1 logical CPU per worker node, on a shared 2-core "
            f"machine (load average after each cluster: {', '.join(f'{x:.1f}' for x in loads)}).</p>"
            f"{svg_chart(results, nodes)}"
            f"<table border=1 cellpadding=4><tr><th>nodes</th><th>stoker.ray img/s</th>"
            f"<th>ray.data+torchvision img/s</th><th>stoker datasource img/s</th>"
            f"<th>stoker.ray / ray.data</th></tr>{rows}</table>"
            f"<p>Command: <code>.venv/bin/python bench/ray/run_bench.py --images {a.images} "
            f"--nodes {a.nodes} --repeats {a.repeats}</code></p>")
    with open(os.path.join(here, "results.html"), "w") as f:
        f.write(html)


if __name__ == "__main__":
    main()
