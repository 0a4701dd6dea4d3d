#!/usr/bin/env python3
"""Oracle for stoker's image ops: applies torchvision's transforms to PIL-decoded images.

Usage: torchvision_ops.py MANIFEST.json OUT_DIR

MANIFEST is a JSON list of cases:
  {"path": "a.jpg", "op": "rrc", "i": top, "j": left, "h": h, "w": w, "flip": bool,
   "size": [H, W]}
      -> F.resized_crop(img, i, j, h, w, size, BILINEAR, antialias=True) [+ F.hflip]
  {"path": "a.jpg", "op": "center", "resize": 256, "crop": 224, "flip": bool}
      -> F.center_crop(F.resize(img, resize, BILINEAR, antialias=True), crop) [+ F.hflip]
followed by F.to_tensor and F.normalize(mean=ImageNet, std=ImageNet).

Writes OUT_DIR/<k>.pil.f32 (the PIL path, what torchvision does for PIL images) and
OUT_DIR/<k>.tensor.f32 (the same ops on a uint8 tensor with antialias=True), float32 CHW.
"""
import json
import os
import sys
import warnings

import numpy as np
import torch
import torchvision.transforms.functional as F
from PIL import Image
from torchvision.transforms import InterpolationMode

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def apply(img, case):
    if case["op"] == "rrc":
        out = F.resized_crop(img, case["i"], case["j"], case["h"], case["w"], case["size"],
                             InterpolationMode.BILINEAR, antialias=True)
    elif case["op"] == "center":
        out = F.resize(img, case["resize"], InterpolationMode.BILINEAR, antialias=True)
        out = F.center_crop(out, case["crop"])
    else:
        raise ValueError("unknown op %r" % case["op"])
    if case.get("flip"):
        out = F.hflip(out)
    return out


def main():
    manifest, out_dir = sys.argv[1], sys.argv[2]
    with open(manifest) as f:
        cases = json.load(f)
    warnings.simplefilter("ignore")
    for k, case in enumerate(cases):
        pil = Image.open(case["path"]).convert("RGB")
        t = F.to_tensor(apply(pil, case))
        t = F.normalize(t, MEAN, STD)
        t.numpy().astype(np.float32).tofile(os.path.join(out_dir, "%d.pil.f32" % k))
        u8 = torch.from_numpy(np.asarray(pil).copy()).permute(2, 0, 1).contiguous()
        tt = apply(u8, case).float() / 255.0
        tt = F.normalize(tt, MEAN, STD)
        tt.numpy().astype(np.float32).tofile(os.path.join(out_dir, "%d.tensor.f32" % k))
    print("ok %d" % len(cases))


if __name__ == "__main__":
    main()
