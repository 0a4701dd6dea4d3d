"""Elastic, exact resume through stoker.Pipeline: two processes (ranks 0 and 1 of 2) take a
few batches each and save state_dict(); the job "restarts" at another world size (1 or 3
ranks, other batch size and thread count), each rank in its own process, from rank 0's
saved state. Across all ranks together, every sample of the epoch is delivered exactly once
(checked as a multiset of indices), and each resumed rank gets the same number of batches."""

import collections
import json
import subprocess
import sys

import pytest

from stoker_testing import needs_ext

pytestmark = needs_ext

stoker = pytest.importorskip("stoker")

WORKER = r"""
import json, sys
import stoker

data, out, rank, world, batch, threads, take, state_in = sys.argv[1:9]
p = stoker.Pipeline(data, decode="val", image_size=16, val_resize=18, batch_size=int(batch),
                    threads=int(threads), seed=21, rank=int(rank), world_size=int(world),
                    output="numpy")
if state_in != "-":
    with open(state_in) as f:
        p.load_state_dict(json.load(f))
indices, batches = [], 0
it = iter(p)
for b in it:
    indices += [int(i) for i in b["index"]]
    batches += 1
    if int(take) >= 0 and batches == int(take):
        break
with open(out, "w") as f:
    json.dump({"indices": indices, "batches": batches, "state": p.state_dict(),
               "len": len(p), "dataset_size": p.dataset_size}, f)
"""


def run_ranks(tmp_path, tag, data, world, batch, threads, take, state_in="-"):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    procs, outs = [], []
    for rank in range(world):
        out = tmp_path / f"{tag}-{rank}.json"
        outs.append(out)
        procs.append(subprocess.Popen([sys.executable, str(script), data, str(out), str(rank),
                                       str(world), str(batch), str(threads), str(take),
                                       str(state_in)]))
    for p in procs:
        assert p.wait(timeout=120) == 0
    return [json.loads(o.read_text()) for o in outs]


@pytest.mark.parametrize("world2,batch2,threads2", [(1, 4, 1), (3, 2, 2)])
def test_two_ranks_resume_at_another_world_size(tmp_path, image_folder, world2, batch2,
                                                threads2):
    head = run_ranks(tmp_path, "head", image_folder, world=2, batch=3, threads=2, take=2)
    n = head[0]["dataset_size"]
    states = [h["state"] for h in head]
    # Both ranks agree on the global position: 2 ranks x 2 batches x 3 samples.
    assert states[0]["consumed"] == states[1]["consumed"] == 12
    assert {k: v for k, v in states[0].items() if k != "rank"} == \
        {k: v for k, v in states[1].items() if k != "rank"}
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(states[0]))
    tail = run_ranks(tmp_path, f"tail{world2}", image_folder, world=world2, batch=batch2,
                     threads=threads2, take=-1, state_in=state_file)
    got = collections.Counter(i for r in head + tail for i in r["indices"])
    left = n - 12
    pad = (world2 - left % world2) % world2  # balance="pad": the tail's repeats
    assert set(got) == set(range(n))  # none lost
    assert sum(got.values()) == n + pad
    assert sum(c - 1 for c in got.values()) == pad  # none repeated beyond the pad rule
    assert len({r["batches"] for r in tail}) == 1  # equal batch counts per rank
    # After the pass every rank's state points at the next epoch's start.
    assert all((r["state"]["epoch"], r["state"]["consumed"]) == (1, 0) for r in tail)


def test_state_from_another_dataset_or_seed_names_the_field(tmp_path, image_folder):
    import stoker_testing
    kw = dict(decode="val", image_size=16, val_resize=18, batch_size=4, threads=1)
    p = stoker.Pipeline(image_folder, seed=3, **kw)
    next(iter(p))
    s = p.state_dict()
    with pytest.raises(ValueError, match="seed: saved 3, now 4"):
        stoker.Pipeline(image_folder, seed=4, **kw).load_state_dict(s)
    # The same number of samples under other names: only the fingerprint tells them apart.
    other = stoker_testing.write_image_folder(str(tmp_path / "other"), classes=4, per_class=6)
    q = stoker.Pipeline(other, seed=3, **kw)
    assert q.dataset_size == p.dataset_size
    with pytest.raises(ValueError, match="dataset_fingerprint: saved"):
        q.load_state_dict(s)
    with pytest.raises(ValueError, match="version 1"):
        p.load_state_dict(dict(s, version=1))
    with pytest.raises(ValueError, match="past the epoch"):
        p.load_state_dict(dict(s, consumed=p.dataset_size + 1))
