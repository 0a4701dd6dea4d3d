#!/usr/bin/env python3
"""Peer: NVIDIA DALI's CPU-only pipeline (device_id=None), the same work as the others.

fn.readers.file (shuffled) -> fn.decoders.image_random_crop (libjpeg-turbo, ROI decode,
RandomResizedCrop area 0.08..1, aspect 3/4..4/3) -> fn.resize(224x224) ->
fn.crop_mirror_normalize (random mirror, ImageNet mean/std, float32 CHW),
batch 64, num_threads = cores, prefetch queue depth 2 (DALI's default).
Run with /work/main/.venv-peers/bin/python (bench/pipeline/install-peers.sh).
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

    import nvidia.dali as dali
    from nvidia.dali import fn, pipeline_def, types

    n_files = len(peer_common.list_images(args.data))
    mean = [0.485 * 255, 0.456 * 255, 0.406 * 255]
    std = [0.229 * 255, 0.224 * 255, 0.225 * 255]

    @pipeline_def(batch_size=args.batch, num_threads=args.threads, device_id=None, seed=1)
    def train_pipe():
        jpegs, labels = fn.readers.file(file_root=args.data, random_shuffle=True,
                                        name="Reader")
        images = fn.decoders.image_random_crop(
            jpegs, device="cpu", output_type=types.RGB,
            random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3], num_attempts=10)
        images = fn.resize(images, resize_x=224, resize_y=224)
        images = fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="CHW", crop=(224, 224),
            mean=mean, std=std, mirror=fn.random.coin_flip(probability=0.5))
        return images, labels

    pipe = train_pipe()
    pipe.build()

    def endless():
        while True:
            images, labels = pipe.run()
            yield images.as_tensor()  # one contiguous [64,3,224,224] batch

    r = peer_common.measure(endless(), args.warmup, args.batches, lambda t: int(t.shape()[0]))
    r.update({
        "name": "dali",
        "what": "DALI CPU pipeline: readers.file + decoders.image_random_crop + resize + "
                "crop_mirror_normalize (device_id=None)",
        "version": f"nvidia-dali {dali.__version__}",
        "threads": args.threads,
        "batch": args.batch,
        "dataset_images": n_files,
        "output": "float32 [64,3,224,224]",
        "note": "DALI's file reader wraps epochs: batches are always full (64)",
    })
    peer_common.finish(r, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
