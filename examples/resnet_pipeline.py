"""A ResNet-style training loop, with the input pipeline as a PyTorch DataLoader or as
stoker.Pipeline. The switch is a few lines (see make_loader and the loop body):

    - train_set = torchvision.datasets.ImageFolder(root, transform)
    - loader = DataLoader(train_set, batch_size=B, shuffle=True, num_workers=W,
    -                     pin_memory=True, drop_last=True)
    + loader = stoker.Pipeline(root, batch_size=B, image_size=S, drop_last=True,
    +                          output="torch", device=device)
      for epoch in range(epochs):
    +     loader.set_epoch(epoch)
    -     for images, labels in loader:
    +     for batch in loader:
    +         images, labels = batch["image"], batch["label"]

Runs on the CPU in well under a minute on generated data:

    python examples/resnet_pipeline.py --loader stoker
    python examples/resnet_pipeline.py --loader torch
"""

import argparse
import os
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _data import image_folder  # noqa: E402

import stoker  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.skip(x))


class SmallResNet(nn.Module):
    """ResNet-18's shape at a CPU-friendly width."""

    def __init__(self, classes, width=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU())
        self.layers = nn.Sequential(Block(width, width, 1), Block(width, 2 * width, 2),
                                    Block(2 * width, 4 * width, 2), Block(4 * width, 8 * width, 2))
        self.fc = nn.Linear(8 * width, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_loader(kind, root, batch_size, image_size, device, workers):
    if kind == "torch":
        import torchvision
        import torchvision.transforms as T
        transform = T.Compose([T.RandomResizedCrop(image_size), T.RandomHorizontalFlip(),
                               T.ToTensor(), T.Normalize(MEAN, STD)])
        train_set = torchvision.datasets.ImageFolder(root, transform)
        return torch.utils.data.DataLoader(train_set, batch_size=batch_size, shuffle=True,
                                           num_workers=workers, drop_last=True,
                                           pin_memory=device.type == "cuda")
    return stoker.Pipeline(root, batch_size=batch_size, image_size=image_size, drop_last=True,
                           output="torch", device=device if device.type == "cuda" else None)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--loader", choices=["stoker", "torch"], default="stoker")
    ap.add_argument("--data", help="image folder (default: generated)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader num_workers")
    ap.add_argument("--quick", action="store_true", help="tiny run (for tests)")
    a = ap.parse_args(argv)
    root = a.data or image_folder(os.path.join(tempfile.gettempdir(), "stoker-example-images"),
                                  per_class=16 if a.quick else 64)
    if a.quick:
        a.epochs, a.batch_size, a.image_size = 1, 16, 32
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    classes = len([d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))])
    model = SmallResNet(classes).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = make_loader(a.loader, root, a.batch_size, a.image_size, device, a.workers)
    is_stoker = isinstance(loader, stoker.Pipeline)
    t0 = time.perf_counter()
    seen = 0
    for epoch in range(a.epochs):
        if is_stoker:
            loader.set_epoch(epoch)
        correct = total = 0
        for batch in loader:
            if is_stoker:
                images, labels = batch["image"], batch["label"]
            else:
                images, labels = batch
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            out = model(images)
            loss = F.cross_entropy(out, labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            correct += (out.argmax(1) == labels).sum().item()
            total += len(labels)
        seen += total
        print(f"epoch {epoch}: loss {loss.item():.3f}, train accuracy {correct / total:.2f} "
              f"({total} samples, loader={a.loader})")
    dt = time.perf_counter() - t0
    print(f"{seen} samples in {dt:.1f} s: {seen / dt:.1f} samples/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
