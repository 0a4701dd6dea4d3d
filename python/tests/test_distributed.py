"""Two processes with torch.distributed (gloo on 127.0.0.1): stoker.Pipeline picks up the
rank and world size from the initialized process group, and the ranks get disjoint,
equal-length shards."""

import json
import os
import socket
import subprocess
import sys

import pytest

from stoker_testing import needs_ext, write_image_folder

pytestmark = needs_ext
torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

WORKER = r"""
import json, os, sys
import torch
import torch.distributed as dist
import stoker

data, out, balance, port, rank = sys.argv[1:6]
# No RANK/WORLD_SIZE in the environment: only torch.distributed knows the rank.
assert "RANK" not in os.environ and "WORLD_SIZE" not in os.environ
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=int(rank),
                        world_size=2)
p = stoker.Pipeline(data, decode="val", image_size=16, val_resize=18, batch_size=4,
                    threads=1, balance=balance, seed=4, output="torch")
indices = [int(i) for b in p for i in b["index"]]
# The shards must be equal length, or collectives after the epoch would hang: check with one.
n = torch.tensor([len(indices)])
dist.all_reduce(n, op=dist.ReduceOp.MAX)
gathered = [None, None]
dist.all_gather_object(gathered, indices)
with open(out, "w") as f:
    json.dump({"rank": p.rank, "world_size": p.world_size, "len": len(p),
               "max_len": int(n), "indices": indices, "all": gathered,
               "dataset_size": p.dataset_size}, f)
dist.destroy_process_group()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two(tmp_path, data, balance):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = free_port()
    procs = []
    for rank in range(2):
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK") and not k.startswith(
                   ("OMPI_COMM_WORLD", "SLURM_"))}
        env["GLOO_SOCKET_IFNAME"] = "lo"
        procs.append(subprocess.Popen(
            [sys.executable, str(script), data, str(tmp_path / f"r{rank}.json"), balance,
             str(port), str(rank)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        try:
            _, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert p.returncode == 0, err
    return [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(2)]


def test_two_ranks_get_disjoint_equal_shards(tmp_path):
    data = write_image_folder(str(tmp_path / "imgs"), classes=3, per_class=9)  # 27 samples
    r0, r1 = run_two(tmp_path, data, "drop")
    assert (r0["rank"], r1["rank"]) == (0, 1) and r0["world_size"] == r1["world_size"] == 2
    assert len(r0["indices"]) == len(r1["indices"]) == 13  # 27 // 2, one sample dropped
    assert r0["len"] == r1["len"] == 4
    assert not set(r0["indices"]) & set(r1["indices"])
    assert len(set(r0["indices"])) == 13
    assert r0["all"] == [r0["indices"], r1["indices"]]  # gloo collectives went through


def test_two_ranks_pad_to_equal_length(tmp_path):
    data = write_image_folder(str(tmp_path / "imgs"), classes=3, per_class=9)
    r0, r1 = run_two(tmp_path, data, "pad")
    assert len(r0["indices"]) == len(r1["indices"]) == 14  # ceil(27 / 2)
    union = set(r0["indices"]) | set(r1["indices"])
    assert union == set(range(27))  # every sample delivered; one repeated as padding
