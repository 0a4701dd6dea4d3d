#!/usr/bin/env python3
"""Records the doctor's own golden traces with the PyTorch profiler (CPU only).

    /work/main/.venv/bin/python tests/traces/record.py [--out tests/traces] [--only NAME]

Each scenario is a small CPU training loop whose bottleneck is known by construction:

  input-bound     a Dataset that takes ~4 ms per sample (sleep, like slow storage or decode),
                  batch 8, num_workers=0: ~32 ms of loading per step in the main process
                  against ~3 ms of compute.
  compute-bound   an in-memory TensorDataset (loading is ~free) and an MLP whose
                  forward/backward takes tens of ms per step.
  balanced        loading (~6 ms of sleeps plus collation per batch) in two worker
                  processes that compete with the training process for the same cores: the
                  loader mostly keeps up, and the main process still waits for some batches
                  (moderate data wait, no dominant bottleneck).
  ddp-slow-rank   a 2-process DistributedDataParallel job over gloo; rank 1's Dataset is
                  ~3 ms per sample slower, so rank 0 waits for it in the gradient all-reduce.

Two scenarios record the way many users profile first, with no ProfilerStep#N events:

  stepless-input-bound       the input-bound loop under torch.profiler.profile() with no
                             schedule and no prof.step() (12 iterations).
  autograd-compute-bound     the compute-bound loop under the older
                             torch.autograd.profiler.profile(), each iteration (next() and
                             the step) inside record_function("train_step") (8 iterations).

The traces are written in the format the profiler of this PyTorch build produces (Debian
torch 1.13 CPU: the bare Chrome event array) and gzipped. Every scenario uses one intra-op
thread so that the result does not depend on the machine's other load.
"""
import argparse
import gzip
import os
import shutil
import socket
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.profiler as tp
from torch.utils.data import DataLoader, Dataset, TensorDataset

WAIT, WARMUP, ACTIVE = 1, 2, 12


class SlowDataset(Dataset):
    """Each item sleeps `delay_s` (I/O-like) and returns a small tensor pair."""

    def __init__(self, n, dim, delay_s):
        self.n, self.dim, self.delay_s = n, dim, delay_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.dim, generator=g), torch.randn(1, generator=g)


def mlp(dim, hidden, layers):
    mods = []
    d = dim
    for _ in range(layers):
        mods += [torch.nn.Linear(d, hidden), torch.nn.ReLU()]
        d = hidden
    mods.append(torch.nn.Linear(d, 1))
    return torch.nn.Sequential(*mods)


def export_gz(prof, path):
    tmp = path[:-3]
    prof.export_chrome_trace(tmp)
    with open(tmp, "rb") as f, gzip.open(path, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(tmp)


def train(loader, model, out_path, steps=WAIT + WARMUP + ACTIVE, ddp=False):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    done = {"n": 0}

    def ready(p):
        export_gz(p, out_path)

    sched = tp.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1)
    with tp.profile(activities=[tp.ProfilerActivity.CPU], schedule=sched,
                    on_trace_ready=ready) as prof:
        it = iter(loader)
        for step in range(steps + 1):
            x, y = next(it)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
            done["n"] += 1


def scenario_input_bound(out):
    ds = SlowDataset(4096, 64, 0.004)
    loader = DataLoader(ds, batch_size=8, num_workers=0)
    train(loader, mlp(64, 128, 2), os.path.join(out, "cpu-input-bound.json.gz"))


def scenario_compute_bound(out):
    n = 4096
    ds = TensorDataset(torch.randn(n, 256), torch.randn(n, 1))
    loader = DataLoader(ds, batch_size=64, num_workers=0)
    train(loader, mlp(256, 512, 4), os.path.join(out, "cpu-compute-bound.json.gz"))


def scenario_balanced(out):
    ds = SlowDataset(4096, 256, 0.0008)
    loader = DataLoader(ds, batch_size=8, num_workers=2, prefetch_factor=2)
    train(loader, mlp(256, 512, 3), os.path.join(out, "cpu-balanced.json.gz"))


def _ddp_worker(rank, world, port, out_dir):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    delay = 0.004 if rank == 1 else 0.0005
    ds = SlowDataset(4096, 128, delay)
    loader = DataLoader(ds, batch_size=8, num_workers=0)
    model = torch.nn.parallel.DistributedDataParallel(mlp(128, 256, 3))
    train(loader, model, os.path.join(out_dir, f"rank-{rank}.json.gz"), ddp=True)
    dist.barrier()
    dist.destroy_process_group()


def scenario_ddp(out):
    d = os.path.join(out, "ddp-slow-rank")
    os.makedirs(d, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_ddp_worker, args=(2, port, d), nprocs=2, join=True)


def loop(loader, model, steps, annotate=False):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    it = iter(loader)
    for _ in range(steps):
        if annotate:
            with torch.autograd.profiler.record_function("train_step"):
                x, y = next(it)
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        else:
            x, y = next(it)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()


def scenario_stepless_input_bound(out):
    ds = SlowDataset(4096, 64, 0.004)
    loader = DataLoader(ds, batch_size=8, num_workers=0)
    model = mlp(64, 128, 2)
    with tp.profile(activities=[tp.ProfilerActivity.CPU]) as prof:
        loop(loader, model, 12)
    export_gz(prof, os.path.join(out, "cpu-stepless-input-bound.json.gz"))


def scenario_autograd_compute_bound(out):
    n = 4096
    ds = TensorDataset(torch.randn(n, 256), torch.randn(n, 1))
    loader = DataLoader(ds, batch_size=64, num_workers=0)
    model = mlp(256, 512, 4)
    with torch.autograd.profiler.profile() as prof:
        loop(loader, model, 8, annotate=True)
    export_gz(prof, os.path.join(out, "cpu-autograd-compute-bound.json.gz"))


SCENARIOS = {
    "input-bound": scenario_input_bound,
    "compute-bound": scenario_compute_bound,
    "balanced": scenario_balanced,
    "ddp-slow-rank": scenario_ddp,
    "stepless-input-bound": scenario_stepless_input_bound,
    "autograd-compute-bound": scenario_autograd_compute_bound,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--only", choices=sorted(SCENARIOS), action="append")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for name in a.only or SCENARIOS:
        t = time.time()
        SCENARIOS[name](a.out)
        print(f"{name}: {time.time() - t:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
