#!/usr/bin/env python3
"""Peer: Meta's SPDL (thread-based loading), the same work as the others.

spdl.pipeline.PipelineBuilder: source (shuffled file list, endless) -> pipe(load,
concurrency = cores, in SPDL's thread pool) -> aggregate(64) -> pipe(collate) -> sink.
load: read the file, spdl.io.demux_image + decode_packets with an FFmpeg filter graph
doing RandomResizedCrop (torchvision's get_params, area 0.08..1, aspect 3/4..4/3: crop,
scale=224:224 bilinear, hflip with p=0.5, format=rgb24), then spdl.io.to_numpy.
collate: stack to [64,224,224,3] uint8 -> float32 [64,3,224,224] with ImageNet mean/std
(NumPy; SPDL's examples normalise on the GPU, which this CPU-only bench has not).
Run with .venv-peers/bin/python (bench/pipeline/install-peers.sh).
"""
import argparse
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_common  # noqa: E402


def rrc_params(width, height, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision RandomResizedCrop.get_params (without torch): (x, y, w, h)."""
    area = width * height
    lr = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        t = area * rng.uniform(*scale)
        a = math.exp(rng.uniform(*lr))
        w = int(round(math.sqrt(t * a)))
        h = int(round(math.sqrt(t / a)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    return 0, 0, width, height


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    peer_common.add_args(ap)
    args = ap.parse_args()

    import numpy as np
    import spdl.io
    from spdl.pipeline import PipelineBuilder

    files = [p for p, _ in peer_common.list_images(args.data)]
    mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1) * 255
    inv_std = 1.0 / (np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1) * 255)

    def source():
        rng = random.Random(1)
        while True:
            order = list(files)
            rng.shuffle(order)
            yield from order

    def load(path):
        rng = random.Random(hash(path) ^ random.getrandbits(32))
        with open(path, "rb") as f:
            data = f.read()
        packets = spdl.io.demux_image(data)
        x, y, w, h = rrc_params(packets.codec.width, packets.codec.height, rng)
        flip = ",hflip" if rng.random() < 0.5 else ""
        desc = f"crop={w}:{h}:{x}:{y},scale=224:224:flags=bilinear{flip},format=rgb24"
        frames = spdl.io.decode_packets(packets, filter_desc=desc)
        return spdl.io.to_numpy(spdl.io.convert_frames(frames))

    def collate(images):
        b = np.stack(images).astype(np.float32).transpose(0, 3, 1, 2)
        return (b - mean) * inv_std

    pipe = (PipelineBuilder()
            .add_source(source())
            .pipe(load, concurrency=args.threads, output_order="completion")
            .aggregate(args.batch)
            .pipe(collate)
            .add_sink(4)
            .build(num_threads=args.threads))

    with pipe.auto_stop():
        r = peer_common.measure(pipe.get_iterator(timeout=300), args.warmup, args.batches,
                                lambda b: int(b.shape[0]))
    import importlib.metadata as md
    r.update({
        "name": "spdl",
        "what": "SPDL PipelineBuilder (threads): demux_image + decode_packets with an FFmpeg "
                "filter (crop, scale bilinear, hflip) + to_numpy; NumPy normalise",
        "version": f"spdl {md.version('spdl')}",
        "threads": args.threads,
        "batch": args.batch,
        "dataset_images": len(files),
        "output": "float32 [64,3,224,224]",
    })
    peer_common.finish(r, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
