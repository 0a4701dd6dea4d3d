"""Makes an ImageFolder of real JPEGs (noise + gradients, so sizes resemble ImageNet's
~110 KB average) as the source for `stoker bench formats`.

usage: python bench/formats/make_source.py OUT_DIR [--n 2000] [--classes 10] [--size 320]
"""
import argparse
import os

import numpy as np
from PIL import Image


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--size", type=int, default=320)
    ap.add_argument("--quality", type=int, default=90)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    for c in range(a.classes):
        os.makedirs(os.path.join(a.out, "c%03d" % c), exist_ok=True)
    for i in range(a.n):
        h = a.size + int(rng.integers(-64, 64))
        w = a.size + int(rng.integers(-64, 64))
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([(xx * (i % 7 + 1)) % 256, (yy * 3) % 256, (xx + yy) % 256], -1)
        img = (base + rng.normal(0, 30, base.shape)).clip(0, 255).astype(np.uint8)
        Image.fromarray(img).save(
            os.path.join(a.out, "c%03d" % (i % a.classes), "img%06d.jpg" % i), quality=a.quality)


if __name__ == "__main__":
    main()
