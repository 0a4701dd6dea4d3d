"""stoker.ray on a real local multi-node Ray cluster (ray.cluster_utils.Cluster on
127.0.0.1, one per module: Ray start-up is slow on 2 cores): every sample once per epoch,
the same order as the plan says, exact mid-epoch resume, and a worker node killed
mid-epoch (its share redone, nothing lost or duplicated)."""

import os

import numpy as np
import pytest

import stoker
from stoker_testing import needs_ext, write_image_folder

pytestmark = needs_ext
ray = pytest.importorskip("ray")
import stoker.ray as sray  # noqa: E402

OPTS = dict(decode="val", image_size=16, val_resize=18, threads=1, prefetch=2, layout="uint8",
            batch_size=5, seed=3)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c, nodes = sray.local_cluster(nodes=2, cpus_per_node=2, head_cpus=0)
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    yield c, nodes
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return write_image_folder(str(tmp_path_factory.mktemp("rayimg")), classes=3, per_class=20)


def indices(batches):
    return [int(i) for b in batches for i in b["index"]]


def expected_order(images, epoch, W):
    """The delivery order the plan gives: round-robin over W ranks' batches."""
    per_rank = []
    for r in range(W):
        p = stoker.Pipeline(images, rank=r, world_size=W, **OPTS)
        order = list(p.epoch_order(epoch))
        n = p.dataset_size
        real = max(0, -(-(n - r) // W))
        order = order[:real]
        per_rank.append([order[i:i + OPTS["batch_size"]] for i in range(0, len(order), OPTS["batch_size"])])
        p.close()
    out = []
    for k in range(max(len(x) for x in per_rank)):
        for r in range(W):
            if k < len(per_rank[r]):
                out += per_rank[r][k]
    return out


def test_epoch_is_the_plan_and_resumes_exactly(cluster, images):
    p = sray.RayPipeline(images, workers=2, worker_options={"scheduling_strategy": "SPREAD"}, **OPTS)
    assert len(set(p.nodes())) == 2  # one engine per worker node
    full = list(p)
    got = indices(full)
    assert sorted(got) == list(range(60))  # each sample once
    assert got == expected_order(images, 0, 2)
    assert all(b["image"].shape[1:] == (16, 16, 3) for b in full)
    # Mid-epoch state (inside a round) → a new RayPipeline continues exactly.
    p.set_epoch(1)
    it = iter(p)
    head = [next(it) for _ in range(3)]
    state = p.state_dict()
    assert state["extra"] == 1
    q = sray.RayPipeline(images, workers=2, **OPTS)
    q.load_state_dict(state)
    tail = list(q)
    assert indices(head) + indices(tail) == expected_order(images, 1, 2)
    p.close()
    q.close()


def test_datasource_reads_every_sample_once(cluster, images):
    ds = ray.data.read_datasource(sray.datasource(images, task_bytes=8 << 10, **OPTS))
    got = [int(i) for b in ds.iter_batches(batch_size=7, batch_format="numpy") for i in b["index"]]
    assert sorted(got) == list(range(60))
    assert ds.count() == 60


def test_killed_worker_node_redoes_its_share(cluster, images):
    c, nodes = cluster
    p = sray.RayPipeline(images, workers=2, worker_options={"scheduling_strategy": "SPREAD"}, **OPTS)
    where = p.nodes()
    it = iter(p)
    first = [next(it) for _ in range(3)]
    victim = [n for n in nodes if n.node_id == where[1]]
    assert victim, "worker 1 runs on one of the added nodes"
    c.remove_node(victim[0], allow_graceful=False)
    dead = lambda: not any(n["NodeID"] == where[1] and n["Alive"] for n in ray.nodes())  # noqa: E731
    assert sray.wait_for(dead, timeout=60)
    rest = list(it)
    got = indices(first) + indices(rest)
    assert p.restarts >= 1
    assert sorted(got) == list(range(60))  # nothing lost, nothing twice
    assert got == expected_order(images, 0, 2)  # and still in the plan's order
    p.close()


# --- the doctor on Ray Data's stats (stoker.ray.diagnose) ---------------------------------

def _udfs():
    """The two UDFs, made here so that Ray's workers get them by value (this test module
    is not importable on the workers)."""
    def _cheap(batch):
        return {"id": batch["id"] + 1}

    def _sleepy(batch):
        import time
        time.sleep(0.08)  # the operator made slow on purpose: 80 ms per batch of 8 rows
        return {"id": batch["id"] * 2}
    return _cheap, _sleepy


def _ray_pipeline(slow_first):
    # Different num_cpus keep the two map_batches from being fused into one operator.
    cheap, sleepy = _udfs()
    f1, f2 = (sleepy, cheap) if slow_first else (cheap, sleepy)
    return (ray.data.range(96, override_num_blocks=12)
            .map_batches(f1, batch_size=8, num_cpus=1)
            .map_batches(f2, batch_size=8, num_cpus=0.5))


@pytest.mark.parametrize("slow_first", [True, False])
def test_diagnose_names_the_operator_made_slow(cluster, slow_first):
    ray.data.DataContext.get_current().enable_progress_bars = False
    ds = _ray_pipeline(slow_first)
    rows = sum(len(b["id"]) for b in ds.iter_batches(batch_size=8))  # a loop with no work
    assert rows == 96
    v = sray.diagnose(ds)
    names = [o["name"] for o in v.report["ray"]["operators"]]
    assert any("_sleepy" in n for n in names) and any("_cheap" in n for n in names), names
    assert "_sleepy" in v.report["ray"]["bottleneck"], v.text
    op = [f for f in v.findings if f["id"] == "ray.operator"]
    assert op and "_sleepy" in op[0]["title"], v.text
    # The loop did nothing but wait: input-bound on Ray Data.
    assert v.kind == "input_bound", v.text
    assert v.input_frac > 0.5
    assert "ray.consumer_wait" in [f["id"] for f in v.findings]


def test_diagnose_consumer_bound_when_the_loop_is_the_slow_side(cluster):
    import time
    ray.data.DataContext.get_current().enable_progress_bars = False
    ds = ray.data.range(64, override_num_blocks=4).map_batches(_udfs()[0], batch_size=16)
    for _ in ds.iter_batches(batch_size=8, prefetch_batches=2):
        time.sleep(0.15)  # the "GPU step": Ray Data has the next batch ready long before
    v = sray.diagnose(ds)
    assert v.kind == "compute_bound", v.text
    assert v.input_frac < 0.05
    assert "ray.consumer_bound" in [f["id"] for f in v.findings]


def test_diagnose_takes_pasted_text_and_rejects_bad_text():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "tests", "traces", "ray", "ray-tiny-blocks.txt")
    v = sray.diagnose(open(path).read(), name="tiny.txt")
    assert v.kind == "input_bound"
    assert "ray.task_overhead" in [f["id"] for f in v.findings]
    with pytest.raises(stoker.StokerError, match=r"tiny\.txt:2: cannot read"):
        sray.diagnose("Operator 1 ReadRange: 4 blocks produced\n* Remote wall time: soon\n",
                      name="tiny.txt")
    with pytest.raises(stoker.StokerError):
        sray.diagnose("   ")
