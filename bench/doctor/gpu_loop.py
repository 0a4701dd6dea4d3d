#!/usr/bin/env python3
"""A small GPU training loop for the doctor's device check (bench/doctor/gpu_check.sh).

    python3 bench/doctor/gpu_loop.py --trace-dir OUT/trace-slow --workers 0 --delay 0.004
    python3 bench/doctor/gpu_loop.py --trace-dir OUT/trace-fed --workers 4 --pin

Trains a small CNN on random 3x96x96 images. --delay sleeps per sample in the Dataset
(slow storage/decode), so with --workers 0 the GPU waits for data; with workers and
pin_memory the loader keeps up. Records a PyTorch profiler trace (CPU+CUDA) of 6 steps
after 4 warm-up steps, then runs --extra-steps unprofiled steps (for stoker watch).
"""
import argparse
import time

import torch
import torch.profiler as tp
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __init__(self, n, delay):
        self.n, self.delay = n, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        return torch.randn(3, 96, 96), i % 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace-dir", required=True)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--pin", action="store_true")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--extra-steps", type=int, default=40)
    a = ap.parse_args()
    assert torch.cuda.is_available(), "no CUDA device"
    dev = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(128, 256, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(256, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kw = dict(num_workers=a.workers, pin_memory=a.pin)
    if a.workers > 0:
        kw.update(persistent_workers=True, prefetch_factor=4)
    loader = DataLoader(Images(100000, a.delay), batch_size=a.batch, **kw)
    it = iter(loader)

    def step():
        x, y = next(it)
        x, y = x.to(dev, non_blocking=a.pin), y.to(dev, non_blocking=a.pin)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    sched = tp.schedule(wait=2, warmup=2, active=6, repeat=1)
    with tp.profile(activities=[tp.ProfilerActivity.CPU, tp.ProfilerActivity.CUDA],
                    schedule=sched,
                    on_trace_ready=tp.tensorboard_trace_handler(a.trace_dir, use_gzip=True)) as prof:
        for _ in range(11):
            step()
            prof.step()
    t = time.time()
    for _ in range(a.extra_steps):
        step()
    torch.cuda.synchronize()
    print(f"{a.extra_steps} unprofiled steps in {time.time() - t:.2f} s "
          f"(workers={a.workers}, delay={a.delay}, pin={a.pin}); torch {torch.__version__}, "
          f"{torch.cuda.get_device_name(0)}")


if __name__ == "__main__":
    main()
