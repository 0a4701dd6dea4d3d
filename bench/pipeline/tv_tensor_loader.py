#!/usr/bin/env python3
"""Peer: torchvision's tensor path in a PyTorch DataLoader.

torchvision.io.read_file + torchvision.io.decode_jpeg (libjpeg, uint8 CHW tensor) ->
RandomResizedCrop(224, antialias=True) + RandomHorizontalFlip on the tensor ->
ConvertImageDtype(float32) + Normalize(ImageNet), batch 64, num_workers = cores,
persistent workers. Debian's torchvision 0.14 has no transforms.v2 (it came in 0.15):
these are the v1 transforms, which accept tensors since 0.8 -- the newest this
torchvision has. antialias=True so the resize is the same filter as the PIL path.
Run with .venv/bin/python (Debian's torch and torchvision).
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
    from torchvision import transforms
    from torchvision.io import decode_jpeg, read_file

    files = peer_common.list_images(args.data)
    tf = transforms.Compose([
        transforms.RandomResizedCrop(224, antialias=True),
        transforms.RandomHorizontalFlip(),
        transforms.ConvertImageDtype(torch.float32),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])

    class Files(torch.utils.data.Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            path, label = files[i]
            return tf(decode_jpeg(read_file(path))), label

    loader = torch.utils.data.DataLoader(
        Files(), batch_size=args.batch, shuffle=True, num_workers=args.threads,
        pin_memory=True, persistent_workers=args.threads > 0, drop_last=False)

    def endless():
        while True:
            for images, labels in loader:
                yield images

    r = peer_common.measure(endless(), args.warmup, args.batches, lambda b: int(b.shape[0]))
    r.update({
        "name": "tv_tensor",
        "what": "DataLoader + torchvision.io.decode_jpeg + tensor transforms "
                "(RandomResizedCrop(224, antialias=True), RandomHorizontalFlip, "
                "ConvertImageDtype, Normalize; transforms v1: torchvision 0.14 has no v2)",
        "version": f"torch {torch.__version__}, torchvision {torchvision.__version__}",
        "threads": args.threads,
        "batch": args.batch,
        "dataset_images": len(files),
        "pin_memory_effective": bool(torch.cuda.is_available()),
        "output": "float32 [64,3,224,224]",
    })
    peer_common.finish(r, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
