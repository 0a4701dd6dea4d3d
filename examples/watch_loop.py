"""stoker.watch in a training loop: is the GPU (here: the CPU step) waiting for data?

Runs the same small training loop twice on generated JPEGs:
  1. a DataLoader decoding with PIL in the main process (num_workers=0): input-bound;
  2. stoker.Pipeline: the decode runs in C++ threads, ahead of the step.
Each run prints a live one-line status and a summary with the doctor's verdict, and writes
the report as JSON.

    python examples/watch_loop.py
"""

import argparse
import json
import os
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _data import image_folder  # noqa: E402
from resnet_pipeline import MEAN, STD, SmallResNet  # noqa: E402

import stoker  # noqa: E402


def train(loader, model, opt, label, out_json, steps):
    w = stoker.watch(loader, name=f"watch[{label}]", json_path=out_json, live=True,
                     interval=0.5)
    for i, batch in enumerate(w):
        images, labels = (batch["image"], batch["label"]) if isinstance(batch, dict) else batch
        loss = F.cross_entropy(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i + 1 >= steps:
            break
    w.finish()
    return w.report()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    if a.quick:
        a.steps = 8
    root = image_folder(os.path.join(tempfile.gettempdir(), "stoker-example-images"),
                        per_class=12 if a.quick else 48,
                        size=(128, 112) if a.quick else (256, 224))
    torch.manual_seed(0)
    model = SmallResNet(4, width=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    out = tempfile.mkdtemp(prefix="stoker-watch-")

    import torchvision
    import torchvision.transforms as T
    ds = torchvision.datasets.ImageFolder(root, T.Compose([
        T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)]))
    dl = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, num_workers=0)
    r1 = train(dl, model, opt, "DataLoader workers=0", os.path.join(out, "dataloader.json"),
               a.steps)
    sp = stoker.Pipeline(root, batch_size=16, image_size=64, output="torch")
    r2 = train(sp, model, opt, "stoker.Pipeline", os.path.join(out, "stoker.json"), a.steps)
    print(f"\nwaiting for data: DataLoader {100 * r1['wait_frac']:.0f}% "
          f"({r1['verdict']['kind']}), stoker.Pipeline {100 * r2['wait_frac']:.0f}% "
          f"({r2['verdict']['kind']}); JSON reports in {out}")
    json.load(open(os.path.join(out, "stoker.json")))  # written and valid
    return 0


if __name__ == "__main__":
    sys.exit(main())
