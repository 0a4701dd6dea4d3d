#!/usr/bin/env python3
"""Stand-in for `stoker gen images` (used only when the stoker binary lacks it).

Writes an ImageFolder tree  OUT/class_XX/img_NNNNN.jpg  of ImageNet-like JPEGs: about
500x375 (sizes vary a little, some portrait), quality 90, about 100 KB each. Content is a
smooth random colour field plus random shapes plus fine texture (noise), so the files are
hard to compress, like photographs, and decode at photo-like cost. Deterministic for a seed.

    gen_images.py --out DIR --count 2000 --seed 1 [--classes 10]
"""
import argparse
import io
import os
import sys

import numpy as np
from PIL import Image, ImageDraw


def make_image(rng: np.random.Generator) -> Image.Image:
    portrait = rng.random() < 0.2
    w = int(rng.integers(460, 541))
    h = int(w * 0.75 + rng.integers(-20, 21))
    if portrait:
        w, h = h, w
    # Low-frequency colour field: small random grid upsampled bicubically.
    gw, gh = int(rng.integers(3, 9)), int(rng.integers(3, 9))
    grid = rng.integers(0, 256, size=(gh, gw, 3), dtype=np.uint8)
    img = Image.fromarray(grid, "RGB").resize((w, h), Image.BICUBIC)
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(8, 25))):
        x0, y0 = int(rng.integers(-w // 4, w)), int(rng.integers(-h // 4, h))
        x1, y1 = x0 + int(rng.integers(20, w // 2)), y0 + int(rng.integers(20, h // 2))
        fill = tuple(int(c) for c in rng.integers(0, 256, size=3))
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x1, y1], fill=fill)
        else:
            draw.rectangle([x0, y0, x1, y1], fill=fill)
    a = np.asarray(img, dtype=np.float32)
    # Texture: luminance-correlated fine noise plus a little chroma noise.
    sigma = float(rng.uniform(12.0, 17.0))
    lum = rng.normal(0.0, sigma, size=(h, w, 1)).astype(np.float32)
    chroma = rng.normal(0.0, sigma * 0.35, size=(h, w, 3)).astype(np.float32)
    a = np.clip(a + lum + chroma, 0, 255).astype(np.uint8)
    return Image.fromarray(a, "RGB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--quality", type=int, default=90)
    args = ap.parse_args()
    if args.count <= 0 or args.classes <= 0:
        print("gen_images: --count and --classes must be positive", file=sys.stderr)
        return 2
    total = 0
    for i in range(args.count):
        rng = np.random.default_rng([args.seed, i])
        cls = i % args.classes
        d = os.path.join(args.out, f"class_{cls:02d}")
        os.makedirs(d, exist_ok=True)
        buf = io.BytesIO()
        make_image(rng).save(buf, "JPEG", quality=args.quality)
        data = buf.getvalue()
        total += len(data)
        tmp = os.path.join(d, f".img_{i:05d}.jpg.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(d, f"img_{i:05d}.jpg"))
    print(f"gen_images: wrote {args.count} images in {args.classes} classes to {args.out}, "
          f"{total / args.count / 1024:.1f} KiB mean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
