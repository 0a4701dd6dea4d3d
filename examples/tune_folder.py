"""stoker.tune_dataloader on a torchvision ImageFolder over generated JPEGs.

Sweeps num_workers, prefetch_factor and persistent_workers (and pin_memory with CUDA) for a
bounded time, prints the table, the chart, the recommendation and the hazards it found
(ImageFolder keeps `samples` as a Python list of tuples: the copy-on-read hazard), and
writes the chart as SVG and the report as JSON.

    python examples/tune_folder.py [--time 30]
    # the same from the command line, on a script that builds the Dataset:
    python -m stoker tune dataloader --script examples/tune_folder.py --batch-size 32
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _data import image_folder  # noqa: E402

import stoker  # noqa: E402


def dataset(per_class=48, size=(256, 224)):
    """The Dataset to tune (also what `python -m stoker tune dataloader --script` calls)."""
    import torchvision
    import torchvision.transforms as T
    root = image_folder(os.path.join(tempfile.gettempdir(), "stoker-example-images"),
                        per_class=per_class, size=size)
    tf = T.Compose([T.RandomResizedCrop(96), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    return torchvision.datasets.ImageFolder(root, tf)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--time", type=float, default=30.0, help="time budget (s)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    if a.quick:
        a.time = 6.0
    out = tempfile.mkdtemp(prefix="stoker-tune-")
    ds = dataset(12, (128, 112)) if a.quick else dataset()
    r = stoker.tune_dataloader(ds, a.batch_size, time_budget=a.time, progress=sys.stderr,
                               chart_path=os.path.join(out, "chart.svg"),
                               json_path=os.path.join(out, "report.json"))
    print(r)
    print(f"\nchart: {out}/chart.svg, report: {out}/report.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
