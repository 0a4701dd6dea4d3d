#!/usr/bin/env python3
"""Peer: FFCV (ffcv.loader.Loader), the same work as the others.

FFCV reads its own format: the ImageFolder is written once to a .beton file next to the
dataset (DatasetWriter, RGBImageField(write_mode="jpg"): FFCV re-encodes every image as
a JPEG of the same size, quality 90; not timed), then timed: Loader(order=RANDOM,
num_workers = cores, os_cache=True) with RandomResizedCropRGBImageDecoder((224, 224))
(libturbojpeg, area 0.08..1, aspect 3/4..4/3) + RandomHorizontalFlip + NormalizeImage
(ImageNet, float32) + ToTensor + ToTorchImage -> float32 [64,3,224,224] (channels-last
memory, as FFCV gives it). Run with .venv-ffcv/bin/python (install-peers.sh: Debian's
torch, NumPy < 2, numba, OpenCV).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common  # noqa: E402


def write_beton(files, path):
    import numpy as np
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter
    from PIL import Image

    class DS:
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            p, label = files[i]
            return np.asarray(Image.open(p).convert("RGB")), label

    tmp = path + ".tmp"
    DatasetWriter(tmp, {"image": RGBImageField(write_mode="jpg", jpeg_quality=90),
                        "label": IntField()}, num_workers=1).from_indexed_dataset(DS())
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    peer_common.add_args(ap)
    ap.add_argument("--beton", default="", help="the .beton file (default: DATA.beton)")
    args = ap.parse_args()

    import numpy as np
    import ffcv
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, ToTensor, ToTorchImage

    files = peer_common.list_images(args.data)
    beton = args.beton or args.data.rstrip("/") + ".beton"
    if not os.path.exists(beton):
        write_beton(files, beton)
    mean = np.array([0.485, 0.456, 0.406]) * 255
    std = np.array([0.229, 0.224, 0.225]) * 255
    loader = Loader(beton, batch_size=args.batch, num_workers=args.threads,
                    order=OrderOption.RANDOM, os_cache=True, drop_last=False,
                    pipelines={"image": [RandomResizedCropRGBImageDecoder((224, 224)),
                                         RandomHorizontalFlip(),
                                         NormalizeImage(mean, std, np.float32),
                                         ToTensor(), ToTorchImage()],
                               "label": [IntDecoder(), ToTensor()]})

    def endless():
        while True:
            for images, labels in loader:
                yield images

    r = peer_common.measure(endless(), args.warmup, args.batches, lambda b: int(b.shape[0]))
    r.update({
        "name": "ffcv",
        "what": "FFCV Loader (.beton, images re-encoded as JPEG q90 by FFCV's writer): "
                "RandomResizedCropRGBImageDecoder + RandomHorizontalFlip + NormalizeImage",
        "version": f"ffcv {ffcv.__version__}",
        "threads": args.threads,
        "batch": args.batch,
        "dataset_images": len(files),
        "output": "float32 [64,3,224,224] (channels-last memory)",
    })
    peer_common.finish(r, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
