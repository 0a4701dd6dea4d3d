"""Records Ray Data's per-operator stats (`Dataset.stats()`) from real runs on a local
Ray cluster on 127.0.0.1 (stoker.ray.local_cluster: a head with no CPUs and worker nodes),
for the doctor's golden tests. Each case sets its bottleneck by construction:

  input-bound     read_images + map_batches with a slow torchvision transform (a large
                  GaussianBlur) and a fast consumer (iter_batches to torch tensors, no work;
                  iter_torch_batches imports ray.train, which needs pydantic, not installed)
  consumer-bound  the same read with a cheap transform, and a consumer that sleeps 100 ms
                  per batch of 4 (the "GPU side" is the slow part)
  tiny-blocks     range(N) cut into many tiny blocks, a trivial map_batches: per-task
                  overhead dominates

    .venv/bin/python tests/traces/ray/record.py OUT_DIR [case ...]

Writes OUT_DIR/ray-<case>.txt: the stats text of the dataset after one epoch, with
DataContext.verbose_stats_logs on (per-operator "Extra metrics" and "Runtime Metrics"), as
`ds._get_stats_summary().to_string()` -- in Ray 2.60 the public `ds.stats()` of a dataset
consumed with iter_batches leaves out the "Dataset iterator time breakdown"; the summary
object has it. For the input-bound case also ray-input-bound-plain.txt: the public
`ds.stats()` of the same run without verbose logs (what most users paste). Ray 2.60 has no
public structured export of these stats (DatasetStatsSummary is an internal dataclass),
so the text is the interface.

Spilling: Ray prints "Cluster memory: Spilled to disk" only when it can ask the GCS for the
object store's spill counters, which needs the grpc package; the venv this was recorded in
has none (Ray skips the lines silently), so no spilling case is recorded here."""

import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))


def write_images(d, n=48, size=256):
    from PIL import Image
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        a = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
        Image.fromarray(a).save(os.path.join(d, f"{i:04d}.jpg"), quality=90)
    return d


def slow_transform(batch):
    import torch
    import torchvision.transforms as T
    tf = T.Compose([T.GaussianBlur(kernel_size=31, sigma=8.0), T.CenterCrop(224)])
    out = []
    for img in batch["image"]:
        t = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)
        out.append(tf(t).permute(1, 2, 0).numpy())
    return {"image": np.stack(out)}


def cheap_transform(batch):
    return {"image": np.stack([img[:224, :224] for img in batch["image"]])}


def case_input_bound(ray, imgs):
    ds = ray.data.read_images(imgs, mode="RGB").map_batches(slow_transform, batch_size=8)
    for b in ds.iter_batches(batch_size=8, batch_format="numpy"):
        torch.from_numpy(b["image"])
    return ds


def case_consumer_bound(ray, imgs):
    ds = ray.data.read_images(imgs, mode="RGB").map_batches(cheap_transform, batch_size=8)
    for b in ds.iter_batches(batch_size=4, batch_format="numpy"):
        torch.from_numpy(b["image"])
        time.sleep(0.1)
    return ds


def case_tiny_blocks(ray, imgs):
    ds = ray.data.range(4000, override_num_blocks=400).map_batches(
        lambda b: {"id": b["id"] * 2})
    for _ in ds.iter_batches(batch_size=100):
        pass
    return ds


CASES = {"input-bound": case_input_bound, "consumer-bound": case_consumer_bound,
         "tiny-blocks": case_tiny_blocks}


def main():
    out = sys.argv[1]
    names = sys.argv[2:] or list(CASES)
    os.makedirs(out, exist_ok=True)
    import ray
    import stoker.ray as sray
    c, _ = sray.local_cluster(nodes=2, cpus_per_node=1, head_cpus=0, object_store_mb=100)
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        imgs = write_images(os.path.join(out, "_images"))
        for n in names:
            ctx = ray.data.DataContext.get_current()
            ctx.verbose_stats_logs = True
            ds = CASES[n](ray, imgs)
            texts = {f"ray-{n}.txt": ds._get_stats_summary().to_string()}
            if n == "input-bound":
                ctx.verbose_stats_logs = False
                texts["ray-input-bound-plain.txt"] = ds.stats()
            for name, text in texts.items():
                with open(os.path.join(out, name), "w") as f:
                    f.write(text if text.endswith("\n") else text + "\n")
                print(f"== {name}\n{text}", flush=True)
    finally:
        ray.shutdown()
        c.shutdown()
    print("ray", ray.__version__)


if __name__ == "__main__":
    main()
