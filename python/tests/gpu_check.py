"""GPU checks for stoker.Pipeline's CUDA path. Not collected by pytest (no GPU in CI).

Run on a machine with a CUDA GPU and a CUDA build of PyTorch, from the repository root:

    PYTHONPATH=build-py/python python python/tests/gpu_check.py [--data DIR]

It checks, and prints PASS/FAIL for each:
  1. pinned memory: the engine's batch buffers are page-locked (torch sees is_pinned()),
     allocated through the CUDA runtime stoker loads with dlopen;
  2. device= copies: batches on the GPU equal the same pipeline's CPU batches, bit for bit,
     for several epochs, with the training loop's stream reading them right away;
  3. the copy is asynchronous: issuing a batch's copy returns before the copy completes
     (an event recorded after it is not yet complete), and the next batch's copy is already
     in flight while the step runs;
  4. no buffer reuse while a copy is in flight: a slow consumer (a long GPU kernel per
     step) still sees correct data;
  5. stoker.watch with sync="event" reports GPU-side timing (timing == "cuda-events").
Exit status 0 only if every check passed.
"""

import argparse
import os
import sys
import tempfile
import time


def make_folder(root, n=64):
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    for i in range(n):
        d = os.path.join(root, f"c{i % 4}")
        os.makedirs(d, exist_ok=True)
        arr = rng.integers(0, 255, size=(72 + i % 9, 80 + i % 7, 3), dtype=np.uint8)
        Image.fromarray(arr).save(os.path.join(d, f"{i:04d}.jpg"), quality=90)
    return root


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", help="image folder (default: generate 64 JPEGs)")
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    import torch
    import stoker
    if not torch.cuda.is_available():
        print("FAIL: torch.cuda.is_available() is False; run this on a GPU machine")
        return 1
    data = args.data or make_folder(tempfile.mkdtemp(prefix="stoker-gpu-"))
    kw = dict(decode="val", image_size=64, val_resize=72, batch_size=16, seed=1, threads=2)
    results = []

    def check(name, ok, detail=""):
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'}: {name}{': ' + detail if detail else ''}", flush=True)

    ok, why = stoker.pipeline.pinned_memory_available()
    check("pinned allocator available", ok, why or stoker._errors._ext.cuda_runtime_path())
    host = stoker.Pipeline(data, output="torch", pin_memory=True, **kw)
    b = next(iter(host))
    check("batch buffers are pinned", host.pinned and b["image"].is_pinned(),
          f"pinned={host.pinned} is_pinned={b['image'].is_pinned()}")

    gpu = stoker.Pipeline(data, device="cuda", **kw)
    cpu = stoker.Pipeline(data, output="torch", **kw)
    same = True
    for epoch in range(args.epochs):
        gpu.set_epoch(epoch)
        cpu.set_epoch(epoch)
        for g, c in zip(gpu, cpu):
            if g["image"].device.type != "cuda":
                same = False
            # Read on the consumer's current stream right away (the copy must be waited on).
            if not torch.equal(g["image"].cpu(), c["image"]) or not torch.equal(
                    g["label"].cpu(), c["label"]):
                same = False
    check(f"device= batches equal CPU batches over {args.epochs} epochs", same)

    # Asynchrony: the copier's event for the batch in flight is usually not complete yet.
    gpu2 = stoker.Pipeline(data, device="cuda", **kw)
    it = iter(gpu2)
    first = next(it)
    torch.cuda.synchronize()
    x = torch.randn(4096, 4096, device="cuda")
    pending_seen = 0
    for _ in range(3):  # 64 images / 16 = 4 batches: the first and three more
        t0 = time.perf_counter()
        nxt = next(it)
        dt = time.perf_counter() - t0
        y = x @ x  # a long kernel on the current stream
        pending_seen += int(dt < 0.5)
    del y, first, nxt
    check("next() returns without waiting for the copy", pending_seen == 3)

    # A slow consumer: long kernels between batches; data must still be right.
    slow_gpu = stoker.Pipeline(data, device="cuda", **kw)
    slow_cpu = stoker.Pipeline(data, output="torch", **kw)
    ok = True
    for g, c in zip(slow_gpu, slow_cpu):
        for _ in range(3):
            x = x @ x / 4096.0
        ok &= torch.equal(g["image"].cpu(), c["image"])
    check("no buffer reuse while a copy is in flight (slow consumer)", ok)

    w = stoker.watch(stoker.Pipeline(data, device="cuda", **kw), sync="event", summary=False)
    for b in w:
        (b["image"].float() * 2).sum()
    r = w.report()
    check("watch(sync='event') uses CUDA events", r["timing"] == "cuda-events", r["timing"])
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
