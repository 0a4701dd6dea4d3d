"""A small CPU training job for the `stoker watch` tests and the probe's overhead bench:
a real DataLoader (a Dataset whose samples cost --load-ms of CPU each) feeding a real
training step (a Linear model, SGD, then --cpu-step-ms of CPU work and --step-ms of an
emulated GPU step: a sleep, the CPU free as while a GPU computes), unchanged by the watch.

    python train.py --workers 0 --load-ms 4 --step-ms 2 --steps 40
    python -m torch.distributed.run --standalone --nproc_per_node 2 train.py --ddp ...

Prints one line per epoch and "done" to stdout, "job stderr" to stderr, and exits with
--exit-code. --slow-rank R multiplies the load of rank R by --slow-factor.
"""

import argparse
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


def spin(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


class Samples(Dataset):
    def __init__(self, n, load_s):
        self.n, self.load_s = n, load_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        spin(self.load_s)
        return torch.full((16,), float(i % 7)), i % 3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--load-ms", type=float, default=1.0, help="CPU per sample")
    ap.add_argument("--step-ms", type=float, default=1.0,
                    help="emulated GPU time per step (a sleep: the CPU is free, as while a "
                         "GPU computes)")
    ap.add_argument("--cpu-step-ms", type=float, default=0.0, help="CPU work per step (Python)")
    ap.add_argument("--torch-step-ms", type=float, default=0.0,
                    help="CPU work per step in PyTorch operators (matrix products)")
    ap.add_argument("--steps", type=int, default=40, help="steps per epoch")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--ddp", action="store_true", help="torch.distributed (gloo) + DDP")
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-factor", type=float, default=1.0)
    ap.add_argument("--own-profiler", action="store_true",
                    help="run the job's own torch.profiler around the loop")
    ap.add_argument("--hard-exit-after", type=float, default=0,
                    help="os._exit(5) after this many seconds of training (no clean-up)")
    ap.add_argument("--forever", action="store_true", help="loop until killed")
    ap.add_argument("--exit-code", type=int, default=0)
    ap.add_argument("--report", help="write {steps, loop_s} of the training loop here (bench)")
    a = ap.parse_args()

    rank = 0
    if a.ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    load_s = a.load_ms / 1e3 * (a.slow_factor if rank == a.slow_rank else 1.0)
    ds = Samples(a.steps * a.batch, load_s)
    loader = DataLoader(ds, batch_size=a.batch, num_workers=a.workers,
                        persistent_workers=a.workers > 0)
    model = torch.nn.Linear(16, 3)
    if a.ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    w = torch.randn(128, 128)
    prof = None
    if a.own_profiler:
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        prof.start()
    t0 = time.perf_counter()
    epoch = 0
    while epoch < a.epochs or a.forever:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            spin(a.cpu_step_ms / 1e3)
            end = time.perf_counter() + a.torch_step_ms / 1e3
            while time.perf_counter() < end:
                torch.mm(w, w)
            time.sleep(a.step_ms / 1e3)
            if a.hard_exit_after and time.perf_counter() - t0 > a.hard_exit_after:
                os._exit(5)
        print(f"epoch {epoch} loss {loss.item():.3f}", flush=True)
        epoch += 1
    loop_s = time.perf_counter() - t0
    if a.report:
        import json
        with open(a.report, "w") as f:
            json.dump({"steps": a.steps * a.epochs, "loop_s": loop_s}, f)
    if prof is not None:
        prof.stop()
    if a.ddp:
        torch.distributed.destroy_process_group()
    print("done", flush=True)
    print("job stderr", file=sys.stderr, flush=True)
    sys.exit(a.exit_code)


if __name__ == "__main__":
    main()
