#!/usr/bin/env python3
"""Peer: PyTorch DataLoader + torchvision ImageFolder, standard training transforms.

RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize(ImageNet mean/std),
batch 64, num_workers = cores, pin_memory=True, persistent_workers=True (so epoch
boundaries do not re-spawn workers: the setting most favourable to the peer).
Run with /work/main/.venv/bin/python (Debian's torch and torchvision).
Note: in a CPU-only torch build pin_memory is a no-op (DataLoader ANDs it with
torch.cuda.is_available()); the result records that.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    peer_common.add_args(ap)
    args = ap.parse_args()

    import torch
    import torchvision
    from torchvision import datasets, transforms

    tf = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    ds = datasets.ImageFolder(args.data, transform=tf)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=args.batch, shuffle=True, num_workers=args.threads,
        pin_memory=True, persistent_workers=args.threads > 0, drop_last=False)

    def endless():
        while True:
            for images, labels in loader:
                yield images

    r = peer_common.measure(endless(), args.warmup, args.batches, lambda b: int(b.shape[0]))
    r.update({
        "name": "pytorch",
        "what": "torch.utils.data.DataLoader + torchvision.datasets.ImageFolder "
                "(RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize)",
        "version": f"torch {torch.__version__}, torchvision {torchvision.__version__}",
        "threads": args.threads,
        "batch": args.batch,
        "dataset_images": len(ds),
        "pin_memory_effective": bool(torch.cuda.is_available()),
        "output": "float32 [64,3,224,224]",
    })
    peer_common.finish(r, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
