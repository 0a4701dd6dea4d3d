#!/usr/bin/env python3
"""Writes N deterministic, hard-to-compress JPEGs (~500x375, quality 90, ~100 KB) for
`stoker bench decode`: smooth gradients + random shapes + per-pixel noise + a little
texture, so entropy decoding costs what it costs on photos.

usage: gen_jpegs.py OUT_DIR [--count 2000] [--seed 0]
"""
import argparse
import os

import numpy as np
from PIL import Image, ImageDraw


def make(rng, w, h):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    for c in range(3):
        a, b, p = rng.uniform(-1, 1, 3)
        img[..., c] = 128 + 70 * np.sin(a * x / 40 + b * y / 30 + p * 6)
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    d = ImageDraw.Draw(pil)
    for _ in range(rng.integers(6, 14)):
        x0, y0 = rng.integers(0, w), rng.integers(0, h)
        x1, y1 = x0 + rng.integers(20, 200), y0 + rng.integers(20, 150)
        col = tuple(int(v) for v in rng.integers(0, 256, 3))
        (d.ellipse if rng.random() < 0.5 else d.rectangle)([x0, y0, x1, y1], fill=col)
    arr = np.asarray(pil).astype(np.float32)
    arr += rng.normal(0, 9, arr.shape)  # sensor-like noise
    arr += 12 * np.sin(x / 3.0)[..., None] * rng.uniform(0, 1)  # fine texture
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    total = 0
    for i in range(args.count):
        rng = np.random.default_rng([args.seed, i])
        w, h = (500, 375) if rng.random() < 0.75 else (375, 500)
        path = os.path.join(args.out, "img_%06d.jpg" % i)
        make(rng, w, h).save(path, quality=90)
        total += os.path.getsize(path)
    print("%d images, %.1f MB, %.0f KB average" % (args.count, total / 1e6, total / 1e3 / args.count))


if __name__ == "__main__":
    main()
