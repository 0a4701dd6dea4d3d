"""The PyTorch half of `stoker demo`: the setup most users have, unchanged.

    python -m stoker.demo_torch DATA --batch 64 --step-ms 40 --workers 2 [--max-steps N]

A torchvision ImageFolder with the standard training transforms (RandomResizedCrop 224,
RandomHorizontalFlip, ToTensor, Normalize) in a DataLoader, feeding an emulated training
step (the batch is held for --step-ms, the CPU free, as while a GPU computes). It knows
nothing of stoker: `stoker demo` runs it under `stoker watch`'s probe and profiler window,
and the doctor diagnoses it. Prints one line: samples, seconds, samples/s.

Exit 3 when torch or torchvision cannot be imported (the demo then says so).
"""

import argparse
import sys
import time


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m stoker.demo_torch")
    ap.add_argument("data")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--step-ms", type=float, default=40)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        import torch
        from torch.utils.data import DataLoader
        from torchvision import datasets, transforms
    except ImportError as e:
        print(f"demo_torch: {e}", file=sys.stderr)
        return 3
    torch.manual_seed(0)
    tf = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    ds = datasets.ImageFolder(a.data, transform=tf)
    loader = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                        drop_last=True)
    n = 0
    steps = 0
    t0 = time.perf_counter()
    for images, labels in loader:
        time.sleep(a.step_ms / 1e3)  # the emulated GPU step
        n += images.shape[0]
        steps += 1
        if a.max_steps and steps >= a.max_steps:
            break
    dt = time.perf_counter() - t0
    print(f"demo_torch: {n} samples in {dt:.2f} s, {n / dt:.1f} samples/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
