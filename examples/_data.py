"""Generated data for the examples: a small ImageFolder of JPEGs (class_k/img_i.jpg).

Uses `stoker gen images` when the CLI binary is on PATH (or STOKER_BIN), else PIL."""

import os
import shutil
import subprocess

import numpy as np


def image_folder(root, classes=4, per_class=64, size=(96, 80), seed=0):
    """Makes (once) and returns root-<classes>x<per_class>-<w>x<h>/."""
    root = f"{root}-{classes}x{per_class}-{size[0]}x{size[1]}"
    if os.path.isdir(root) and sum(len(f) for _, _, f in os.walk(root)) >= classes * per_class:
        return root
    exe = os.environ.get("STOKER_BIN") or shutil.which("stoker")
    if exe:
        r = subprocess.run([exe, "gen", "images", "--out", root, "--count",
                            str(classes * per_class), "--classes", str(classes)],
                           capture_output=True)
        if r.returncode == 0:
            return root
    from PIL import Image
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size[1], 0:size[0]]
    for c in range(classes):
        d = os.path.join(root, f"class_{c}")
        os.makedirs(d, exist_ok=True)
        for i in range(per_class):
            # Smooth class-dependent patterns plus noise: learnable, and JPEG-friendly.
            phase = rng.uniform(0, 6.28)
            base = 127 + 100 * np.sin(xx / (4 + c) + phase) * np.cos(yy / (5 + 2 * c))
            img = np.stack([base, np.roll(base, 7 * c, axis=1), 255 - base], axis=-1)
            img += rng.normal(0, 12, img.shape)
            Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(
                os.path.join(d, f"img_{i:04d}.jpg"), quality=90)
    return root
