"""The kafka:// source (issue 10, item 1) against a real Apache Kafka broker on 127.0.0.1
(scripts/servers/kafka.sh: Kafka 4.1 in KRaft mode), messages produced by confluent-kafka.

Each test makes its own topic. What is checked: every message of the window exactly once
per epoch with its bytes, ranks with disjoint samples and equal batch counts, exact resume
from state_dict() after the topic grew, follow=new epochs, timestamp windows, JSON values
with base64 images decoded by the pipeline, and deleted offsets named in the error (or
counted with on_error=skip), unknown topics and partitions named.
"""
import json
import os
import base64
import uuid

import numpy as np
import pytest

import stoker
from stoker_testing import needs_ext, stoker_binary

pytestmark = needs_ext
ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


@pytest.fixture(scope="module")
def bootstrap():
    b = os.environ.get("STOKER_TEST_KAFKA_BOOTSTRAP")
    if not b:
        if os.environ.get("STOKER_SERVERS_UP") == "1":
            pytest.fail("Kafka test broker (scripts/servers/kafka.sh) variable missing: "
                        "STOKER_TEST_KAFKA_BOOTSTRAP")
        pytest.skip("Kafka test broker not running (scripts/servers/kafka.sh; needs "
                    "STOKER_TEST_KAFKA_BOOTSTRAP)")
    return b


def _topic(bootstrap, partitions):
    name = "t-" + uuid.uuid4().hex[:10]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
    return name


def _produce(bootstrap, topic, values, partitions, start=0, timestamps=None):
    """Message i (value values[i]) goes to partition (start + i) % partitions."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, v in enumerate(values):
        kw = {"timestamp": timestamps[i]} if timestamps else {}
        p.produce(topic, value=v, key=str(start + i).encode(),
                  partition=(start + i) % partitions, **kw)
    assert p.flush(30) == 0


def _values(n, start=0):
    return [f"message {start + i} ".encode() * (1 + (start + i) % 7) for i in range(n)]


def _epoch(p):
    """{key: bytes} of one pass, checking that no key comes twice."""
    got = {}
    for b in p:
        data, offs = b["data"], b["offsets"]
        for k, key in enumerate(b["key"]):
            assert key not in got, f"{key} delivered twice"
            got[key] = bytes(data[offs[k]:offs[k + 1]])
    return got


def _expected(topic, values, partitions, start=0):
    """{topic/partition/offset: value} for messages produced by _produce in one go into an
    empty topic (offsets count per partition)."""
    out, per = {}, [0] * partitions
    for i, v in enumerate(values):
        part = (start + i) % partitions
        out[f"{topic}/{part}/{per[part]}"] = v
        per[part] += 1
    return out


def _pipe(bootstrap, topic, query="", **kw):
    kw.setdefault("batch_size", 8)
    kw.setdefault("decode", "raw")
    return stoker.Pipeline(f"kafka://{bootstrap}/{topic}" + (f"?{query}" if query else ""),
                           keys=True, **kw)


def test_every_message_once_per_epoch_with_its_bytes(bootstrap):
    topic = _topic(bootstrap, 3)
    vals = _values(300)
    _produce(bootstrap, topic, vals, 3)
    want = _expected(topic, vals, 3)
    p = _pipe(bootstrap, topic, shuffle_buffer=64)
    assert p.dataset_size == 300
    first = _epoch(p)
    assert first == want
    second = _epoch(p)  # the same window again, in another order
    assert second == want
    assert list(first) != list(second), "the shuffle did not change the order between epochs"
    c = p.stats()["source"]["counters"]
    assert c["kafka_messages"] == 600 and c["kafka_missing_offsets"] == 0


def test_shuffle_buffer_is_bounded_in_bytes_and_resumes_exactly(bootstrap):
    # 96 messages of 64 KB on 2 partitions; shuffle_buffer_mb=1 holds 16 of them, not the
    # 8192 samples the buffer counts by default.
    topic = _topic(bootstrap, 2)
    vals = [bytes([i]) * (64 << 10) for i in range(96)]
    _produce(bootstrap, topic, vals, 2)
    want = _expected(topic, vals, 2)
    p = _pipe(bootstrap, topic, shuffle_buffer_mb=1, seed=3)
    assert p.state_dict()["shuffle_buffer"] == 16
    assert any("shuffle buffer 8192 -> 16" in t["what"] for t in p.stats()["tuning"])
    order = []
    head = {}
    it = iter(p)
    for _ in range(4):
        b = next(it)
        order += b["key"]
        for k, key in enumerate(b["key"]):
            head[key] = bytes(b["data"][b["offsets"][k]:b["offsets"][k + 1]])
    state = p.state_dict()
    assert state["shuffle_buffer"] == 16
    for b in it:
        order += b["key"]
    assert sorted(order) == sorted(want)
    # The same seed gives the same order in a fresh pipeline (the estimate is the same).
    q = _pipe(bootstrap, topic, shuffle_buffer_mb=1, seed=3)
    assert [k for b in q for k in b["key"]] == order
    # Resume from the state: exactly the rest, in the same order.
    r = _pipe(bootstrap, topic, shuffle_buffer_mb=1, seed=3)
    r.load_state_dict(state)
    rest = _epoch(r)
    assert list(rest) == order[32:]
    assert {**head, **rest} == want
    # Another byte bound changes the order, so the state says it does not fit.
    s = _pipe(bootstrap, topic, shuffle_buffer_mb=2, seed=3)
    assert s.state_dict()["shuffle_buffer"] == 32
    with pytest.raises(Exception, match="shuffle_buffer"):
        s.load_state_dict(state)
    # Without shuffling nothing is estimated or held.
    u = _pipe(bootstrap, topic, shuffle=False, shuffle_buffer_mb=1)
    assert u.state_dict()["shuffle_buffer"] == 8192


def test_offset_order_runs_resume_exactly_and_repeat_every_epoch(bootstrap):
    # decode="raw" of value=raw reads whole batches as runs (Dataset::ReadRawRun). Without
    # shuffling, the partitions are read side by side, 64 offsets of each in turn (the
    # interleave a topic asks for, as a consumer assigned every partition reads them), each
    # in offset order; interleave=0 reads one partition after another. Epochs after the
    # first read the window again from the start; a resume with runs in flight (prefetch 4)
    # delivers exactly what the loop had not received.
    topic = _topic(bootstrap, 3)
    vals = _values(300)
    _produce(bootstrap, topic, vals, 3)
    want = _expected(topic, vals, 3)
    order = [f"{topic}/{p}/{o}" for lo, hi in ((0, 64), (64, 100)) for p in range(3)
             for o in range(lo, hi)]
    p = _pipe(bootstrap, topic, shuffle=False, prefetch=4)
    assert p.state_dict()["interleave"] == [64, 3]
    for _ in range(3):
        got = _epoch(p)
        assert got == want and list(got) == order
    c = p.stats()["source"]["counters"]
    assert c["kafka_messages"] == 900 and c["kafka_seeks"] == 0
    q = _pipe(bootstrap, topic, shuffle=False, prefetch=4)
    it = iter(q)
    head = [k for _ in range(13) for k in next(it)["key"]]  # 104: into partition 1
    state = q.state_dict()
    del it, q
    r = _pipe(bootstrap, topic, shuffle=False, prefetch=4)
    r.load_state_dict(state)
    tail = _epoch(r)
    assert head + list(tail) == order
    assert {k: want[k] for k in tail} == tail
    # One partition after another, and a state saved before the interleave existed (no
    # "interleave" key: that order) is refused by the default and resumes with interleave=0.
    u = _pipe(bootstrap, topic, shuffle=False, interleave=0)
    assert u.state_dict()["interleave"] == [0, 1]
    assert list(_epoch(u)) == [f"{topic}/{p}/{o}" for p in range(3) for o in range(100)]
    old = dict(state)
    del old["interleave"]
    with pytest.raises(Exception, match="interleave=0"):
        _pipe(bootstrap, topic, shuffle=False).load_state_dict(old)
    v = _pipe(bootstrap, topic, shuffle=False, interleave=0)
    v.load_state_dict({**old, "consumed": 0})
    assert list(_epoch(v)) == [f"{topic}/{p}/{o}" for p in range(3) for o in range(100)]


def test_ranks_split_the_window_with_equal_batches(bootstrap):
    # 192 = 2 ranks x 12 batches x 8: no tail to pad (with a tail, the default balance pads
    # as DistributedSampler does; test_distributed.py covers that).
    topic = _topic(bootstrap, 4)
    vals = _values(192)
    _produce(bootstrap, topic, vals, 4)
    want = _expected(topic, vals, 4)
    seen, lens = {}, []
    for rank in (0, 1):
        p = _pipe(bootstrap, topic, rank=rank, world_size=2)
        got = _epoch(p)
        lens.append(len(p))
        assert not set(got) & set(seen), "a message went to both ranks"
        seen.update(got)
    assert lens == [12, 12]
    assert seen == want


def test_a_rank_does_not_hold_the_other_ranks_messages(bootstrap):
    # Each rank's stream delivers every offset of a partition (the rank split is strided);
    # what no read of this rank's pass wants is dropped as it comes, not held until the
    # window ends (rank 0 of 2 once held half the topic: 619 MB RSS on a 655 MB topic).
    topic = _topic(bootstrap, 2)
    vals = _values(4000)
    _produce(bootstrap, topic, vals, 2)
    want = _expected(topic, vals, 2)
    seen = {}
    for rank in (0, 1):
        for shuffle in (False, True):
            p = _pipe(bootstrap, topic, rank=rank, world_size=2, batch_size=50,
                      shuffle=shuffle, shuffle_buffer=256)
            got = _epoch(p)
            assert len(got) == 2000
            if not shuffle:
                assert not set(got) & set(seen)
                seen.update(got)
            c = p.stats()["source"]["counters"]
            # In offset order a read fetches at most a few hundred ahead; shuffled, the
            # buffer's span (256 of this rank's samples, 512 offsets) and the fetches.
            limit = 600 if not shuffle else 1500
            assert 0 < c["kafka_held_peak"] < limit, (rank, shuffle, c["kafka_held_peak"])
            assert c["kafka_seeks"] == 0
    assert seen == want


KAFKA_RANK_WORKER = r"""
import json, sys
import torch.distributed as dist
import stoker

url, out, port, rank = sys.argv[1:5]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=int(rank),
                        world_size=2)
p = stoker.Pipeline(url, batch_size=8, decode="raw", keys=True, shuffle=False, balance="drop")
keys = [k for b in p for k in b["key"]]
with open(out, "w") as f:
    json.dump({"rank": p.rank, "ranges": p.state_dict()["kafka"]["ranges"], "keys": keys}, f)
dist.destroy_process_group()
"""


def test_torch_distributed_ranks_read_the_window_rank_0_resolved(bootstrap, tmp_path):
    # With torch.distributed, rank 0 resolves the window and broadcasts it (a single process
    # lets the engine resolve it): while a producer keeps writing, both ranks read the same
    # window, disjoint halves of it.
    import socket
    import subprocess
    import sys
    import threading
    pytest.importorskip("torch")
    topic = _topic(bootstrap, 2)
    _produce(bootstrap, topic, _values(200), 2)
    stop = threading.Event()

    def produce_more():
        prod = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        i = 0
        while not stop.is_set():
            prod.produce(topic, value=b"late %d" % i, partition=i % 2)
            prod.poll(0)
            i += 1
            stop.wait(0.002)
        prod.flush(30)

    t = threading.Thread(target=produce_more)
    t.start()
    try:
        script = tmp_path / "rank.py"
        script.write_text(KAFKA_RANK_WORKER)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
        env["GLOO_SOCKET_IFNAME"] = "lo"
        procs = [subprocess.Popen([sys.executable, str(script), f"kafka://{bootstrap}/{topic}",
                                   str(tmp_path / f"r{r}.json"), str(port), str(r)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for r in range(2)]
        for pr in procs:
            _, err = pr.communicate(timeout=240)
            assert pr.returncode == 0, err
    finally:
        stop.set()
        t.join()
    r0, r1 = (json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(2))
    assert r0["ranges"] == r1["ranges"]
    window = {f"{topic}/{p}/{o}" for p, (b, e) in r0["ranges"].items() for o in range(b, e)}
    assert len(window) >= 200
    # balance="drop": the odd sample of an odd window is left out, nothing is repeated
    assert not set(r0["keys"]) & set(r1["keys"])
    assert len(r0["keys"]) == len(r1["keys"]) == len(window) // 2
    assert set(r0["keys"]) | set(r1["keys"]) <= window


def test_group_commits_the_progress_for_monitoring(bootstrap):
    # group=NAME commits, per partition, the offset after the last message read, so that
    # the group's lag shows in the broker's tools; rank 0 commits, the others do not; the
    # resume never reads it (a fresh pipeline with the same group reads the window again).
    import time
    topic = _topic(bootstrap, 3)
    vals = _values(300)
    _produce(bootstrap, topic, vals, 3)
    group = "g-" + uuid.uuid4().hex[:8]

    def committed():
        c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            got = c.committed([ck.TopicPartition(topic, p) for p in range(3)], timeout=10)
            return {tp.partition: tp.offset for tp in got}
        finally:
            c.close()

    # Rank 1 of 2 reads its half and commits nothing.
    q = _pipe(bootstrap, topic, f"group={group}", rank=1, world_size=2)
    assert len(_epoch(q)) == 150
    assert q.stats()["source"]["counters"]["kafka_commits"] == 0
    assert all(o < 0 for o in committed().values())  # no committed offset
    for shuffle in (False, True):
        p = _pipe(bootstrap, topic, f"group={group}", shuffle=shuffle)
        assert len(_epoch(p)) == 300
        deadline = time.monotonic() + 20
        while committed() != {0: 100, 1: 100, 2: 100}:
            assert time.monotonic() < deadline, committed()
            time.sleep(0.2)
        c = p.stats()["source"]["counters"]
        assert c["kafka_commits"] >= 1 and c["kafka_commit_failures"] == 0, c


def test_resume_is_exact_after_the_topic_grew(bootstrap):
    topic = _topic(bootstrap, 2)
    vals = _values(120)
    _produce(bootstrap, topic, vals, 2)
    want = _expected(topic, vals, 2)
    p = _pipe(bootstrap, topic, "start=earliest", shuffle_buffer=32, seed=7)
    head = {}
    it = iter(p)
    for _ in range(6):
        b = next(it)
        for k, key in enumerate(b["key"]):
            head[key] = bytes(b["data"][b["offsets"][k]:b["offsets"][k + 1]])
    state = p.state_dict()
    assert state["kafka"]["ranges"] == {"0": [0, 60], "1": [0, 60]}
    del it, p
    # The stream moves on while the job is down: the resumed epoch still reads its window.
    _produce(bootstrap, topic, _values(50, start=120), 2, start=120)
    q = _pipe(bootstrap, topic, "start=earliest", shuffle_buffer=32, seed=7)
    assert q.dataset_size == 170  # a fresh open sees the new messages...
    q.load_state_dict(state)
    assert q.dataset_size == 120  # ...the resumed one reads the saved window
    tail = _epoch(q)
    assert not set(head) & set(tail), "resume repeated messages"
    assert {**head, **tail} == want, "resume lost messages or read new ones"


def test_follow_new_reads_what_arrived_since_the_last_epoch(bootstrap):
    topic = _topic(bootstrap, 2)
    _produce(bootstrap, topic, _values(40), 2)
    p = _pipe(bootstrap, topic, "follow=new")
    e0 = _epoch(p)
    assert len(e0) == 40
    _produce(bootstrap, topic, _values(24, start=40), 2, start=40)
    e1 = _epoch(p)
    assert len(e1) == 24 and not set(e0) & set(e1)
    assert sorted(int(k.rsplit("/", 1)[1]) for k in e1 if k.split("/")[1] == "0") == list(range(20, 32))
    assert _epoch(p) == {}  # nothing new: an empty epoch, not a replay
    st = p.state_dict()["kafka"]
    assert st["follow"] == "new" and st["ranges"] == {"0": [32, 32], "1": [32, 32]}
    # A partition added to the topic is read from its log start by the next epoch.
    from confluent_kafka.admin import NewPartitions
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=30)
    _produce(bootstrap, topic, _values(6, start=2), 3, start=2)  # partitions 2, 0, 1, 2, 0, 1
    e3 = _epoch(p)
    assert sorted(e3) == sorted([f"{topic}/2/0", f"{topic}/2/1", f"{topic}/0/32",
                                 f"{topic}/0/33", f"{topic}/1/32", f"{topic}/1/33"])


def test_timestamp_window(bootstrap):
    topic = _topic(bootstrap, 1)
    base = 1_790_000_000_000
    vals = _values(30)
    _produce(bootstrap, topic, vals, 1, timestamps=[base + 1000 * i for i in range(30)])
    p = _pipe(bootstrap, topic, f"start=ts:{base + 10_000}&end=ts:{base + 20_000}&meta=timestamp",
              shuffle=False)
    got = _epoch(p)
    assert sorted(int(k.rsplit("/", 1)[1]) for k in got) == list(range(10, 20))
    assert got[f"{topic}/0/10"] == vals[10]


def test_json_values_with_base64_images_decode_as_from_files(bootstrap, image_folder):
    # The folder's JPEGs as JSON messages ({"jpg": base64, "label": class}) on one partition,
    # in the folder's order: the same pipeline gives the same pixels and labels as the folder.
    topic = _topic(bootstrap, 1)
    files = sorted(os.path.relpath(os.path.join(d, f), image_folder)
                   for d, _, fs in os.walk(image_folder) for f in fs)
    msgs = []
    for rel in files:
        with open(os.path.join(image_folder, rel), "rb") as fh:
            msgs.append(json.dumps({"jpg": base64.b64encode(fh.read()).decode(),
                                    "label": int(rel.split("/")[0].split("_")[-1]),
                                    "caption": rel}).encode())
    _produce(bootstrap, topic, msgs, 1)
    opts = dict(batch_size=4, decode="val", image_size=32, val_resize=36, shuffle=False,
                keys=True, layout="uint8")

    def images(p):
        out = []
        for b in p:
            out += [(key, int(lab), np.asarray(img)) for key, lab, img in
                    zip(b["key"], b["label"], b["image"])]
        return out

    ref = {k: (lab, img) for k, lab, img in images(stoker.Pipeline(image_folder, **opts))}
    got = images(stoker.Pipeline(f"kafka://{bootstrap}/{topic}?value=json&base64=jpg", **opts))
    assert len(got) == len(files) == len(ref)
    for key, lab, img in got:
        rel = os.path.splitext(files[int(key.rsplit("/", 1)[1])])[0]
        assert (lab, img.tobytes()) == (ref[rel][0], ref[rel][1].tobytes()), rel


def test_deleted_offsets_are_named_or_counted(bootstrap):
    topic = _topic(bootstrap, 1)
    _produce(bootstrap, topic, _values(50), 1)
    p = _pipe(bootstrap, topic, "timeout_ms=5000", shuffle=False)  # window 0-50, resolved now
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = ck.TopicPartition(topic, 0, 10)  # delete offsets 0..9
    for f in admin.delete_records([tp]).values():
        f.result(timeout=30)
    with pytest.raises(Exception) as e:
        _epoch(p)
    msg = str(e.value)
    assert "offsets 0-9 are missing" in msg and topic in msg and "partition 0" in msg, msg
    q = _pipe(bootstrap, topic, "ranges=0:0-50", shuffle=False, on_error="skip")
    got = _epoch(q)
    assert sorted(int(k.rsplit("/", 1)[1]) for k in got) == list(range(10, 50))
    st = q.stats()
    assert st["skipped"] == 10 and st["source"]["counters"]["kafka_missing_offsets"] == 10


def test_unknown_topic_partition_and_future_end_are_named(bootstrap):
    with pytest.raises(Exception, match="does not exist"):
        _pipe(bootstrap, "no-such-topic-" + uuid.uuid4().hex[:6], "timeout_ms=5000")
    topic = _topic(bootstrap, 2)
    _produce(bootstrap, topic, _values(10), 2)
    with pytest.raises(Exception, match="has no partition 5"):
        _pipe(bootstrap, topic, "partitions=5")
    with pytest.raises(Exception, match="past the high watermark 5"):
        _pipe(bootstrap, topic, "end=100")
    with pytest.raises(Exception, match="not a JSON object"):
        _epoch(_pipe(bootstrap, topic, "value=json"))


@pytest.fixture
def own_broker(tmp_path, bootstrap):
    """A second broker of this test's own (scripts/servers/kafka.sh under tmp_path), to
    pause and kill without touching the shared one."""
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = os.path.join(root, "scripts", "servers", "kafka.sh")
    env = dict(os.environ, STOKER_SERVERS_DIR=str(tmp_path / "servers"))
    r = subprocess.run(["bash", script, "start"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    addr = r.stdout.strip().split("=", 1)[1]
    pid = int((tmp_path / "servers" / "kafka" / "kafka.pid").read_text())
    yield addr, pid
    subprocess.run(["bash", script, "stop"], env=env, capture_output=True, timeout=60)


def test_a_paused_broker_is_waited_for_and_a_dead_one_named(own_broker):
    import signal
    import time
    addr, pid = own_broker
    topic = _topic(addr, 2)
    vals = _values(400)
    _produce(addr, topic, vals, 2)
    want = _expected(topic, vals, 2)
    # Paused for 3 s mid-epoch (a GC pause, a network blip): the epoch completes, exact.
    p = _pipe(addr, topic, "timeout_ms=8000&rdkafka.queued.max.messages.kbytes=1",
              shuffle=False, prefetch=1, threads=1)
    got, it = {}, iter(p)
    for _ in range(5):
        b = next(it)
        for k, key in enumerate(b["key"]):
            got[key] = bytes(b["data"][b["offsets"][k]:b["offsets"][k + 1]])
    os.kill(pid, signal.SIGSTOP)
    time.sleep(3)
    os.kill(pid, signal.SIGCONT)
    for b in it:
        for k, key in enumerate(b["key"]):
            assert key not in got
            got[key] = bytes(b["data"][b["offsets"][k]:b["offsets"][k + 1]])
    assert got == want
    # Killed mid-epoch: after timeout_ms without progress, an error naming broker, topic
    # and partition, not a hang. One message per record batch and per fetch, so that the
    # client has not fetched the topic whole when the broker dies.
    topic = _topic(addr, 2)
    prod = ck.Producer({"bootstrap.servers": addr, "linger.ms": 0, "batch.num.messages": 1})
    for i, v in enumerate(vals):
        prod.produce(topic, value=v, partition=i % 2)
        prod.poll(0)
    assert prod.flush(30) == 0
    q = _pipe(addr, topic, "timeout_ms=3000&rdkafka.queued.max.messages.kbytes=1"
              "&rdkafka.max.partition.fetch.bytes=1", shuffle=False, prefetch=1, threads=1)
    it = iter(q)
    next(it)
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(Exception) as e:
        for _ in it:
            pass
    msg = str(e.value)
    assert addr in msg and topic in msg and "partition" in msg, msg
    # timeout_ms for the first read, then the reads of the same batch fail fast
    assert time.monotonic() - t0 < 20


def _convert(*args, check=True):
    import subprocess
    binary = os.environ.get("STOKER_BINARY") or os.path.join(
        os.path.dirname(__file__), "..", "..", "build", "stoker")
    r = subprocess.run([binary, "convert", *map(str, args)], capture_output=True, text=True,
                       timeout=300)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def test_convert_writes_a_topic_that_reads_back_as_the_folder(bootstrap, image_folder):
    # `stoker convert DIR kafka://B/T`: one message per sample in stoker's encoding (key,
    # label, every field), spread over the partitions by key; read back with value=stoker the
    # pipeline decodes the same pixels with the same labels, each sample once.
    topic = _topic(bootstrap, 3)
    r = _convert(image_folder, f"kafka://{bootstrap}/{topic}")
    n = sum(len(fs) for _, _, fs in os.walk(image_folder))
    assert f"{n} samples as messages in 3 partitions" in r.stdout, r.stdout
    opts = dict(batch_size=4, decode="val", image_size=32, val_resize=36, shuffle=False,
                layout="uint8", drop_last=False)

    def images(p):
        out = []
        for b in p:
            out += [(int(lab), np.asarray(img).tobytes()) for lab, img in zip(b["label"], b["image"])]
        return sorted(out)

    want = images(stoker.Pipeline(image_folder, **opts))
    got = images(stoker.Pipeline(f"kafka://{bootstrap}/{topic}?value=stoker", **opts))
    assert len(got) == n and got == want
    # One field's bytes as the value, all on partition 0: the folder's order is kept.
    t2 = _topic(bootstrap, 2)
    _convert(image_folder, f"kafka://{bootstrap}/{t2}?value=raw&field=jpg&partition=0")
    raw = _pipe(bootstrap, t2, "field=jpg", shuffle=False, batch_size=4)
    keys = [k for b in raw for k in b["key"]]
    assert keys == [f"{t2}/0/{i}" for i in range(n)]
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(image_folder) for f in fs)
    first = next(iter(_pipe(bootstrap, t2, "field=jpg&partitions=0&count=1", shuffle=False,
                            batch_size=1)))
    with open(files[0], "rb") as fh:
        assert bytes(first["data"][first["offsets"][0]:first["offsets"][1]]) == fh.read()


def test_convert_to_a_topic_refuses_what_it_cannot_do(bootstrap, image_folder):
    missing = "no-such-" + uuid.uuid4().hex[:8]
    r = _convert(image_folder, f"kafka://{bootstrap}/{missing}", check=False)
    assert r.returncode != 0 and missing in r.stderr and "does not exist" in r.stderr, r.stderr
    topic = _topic(bootstrap, 2)
    r = _convert(image_folder, f"kafka://{bootstrap}/{topic}?partition=5", check=False)
    assert r.returncode != 0 and "has 2 partitions" in r.stderr, r.stderr
    r = _convert(image_folder, f"kafka://{bootstrap}/{topic}?start=earliest", check=False)
    assert r.returncode != 0 and "'start' is not an option of a Kafka destination" in r.stderr
    r = _convert(image_folder, f"kafka://{bootstrap}/{topic}", "--resume", check=False)
    assert r.returncode != 0 and "a topic has none" in r.stderr, r.stderr


def test_a_value_not_in_stokers_encoding_is_named(bootstrap):
    topic = _topic(bootstrap, 1)
    _produce(bootstrap, topic, [b"plain bytes, not STKS"], 1)
    p = _pipe(bootstrap, topic, "value=stoker", shuffle=False)
    with pytest.raises(Exception) as e:
        _epoch(p)
    msg = str(e.value)
    assert topic in msg and "offset 0" in msg and "not in stoker's sample encoding" in msg, msg


def test_bench_pipeline_html_report_shows_kafka_lag_and_fetch_wait(bootstrap, tmp_path):
    import re
    import subprocess
    binary = stoker_binary()
    if binary is None:
        pytest.skip("the stoker CLI is not built")
    topic = _topic(bootstrap, 3)
    _produce(bootstrap, topic, _values(3000), 3)
    # A window that ends before the high watermark, so the lag at the end is known:
    # 3000 messages, 1000 per partition; the window reads offsets 0-599 of each.
    out = tmp_path / "report.html"
    subprocess.run([binary, "bench", "pipeline", "--quiet", "--decode", "raw", "--batch-size",
                    "16", "--epochs", "2", "--data", f"kafka://{bootstrap}/{topic}?end=600",
                    "--html", str(out)], check=True)
    page = out.read_text()
    assert "<h2>Kafka</h2>" in page
    kafka = page[page.index("<h2>Kafka</h2>"):]
    assert re.search(r"messages read</th><td>3600<", kafka)  # two epochs of 3 x 600
    assert re.search(r"fetch wait</th><td>\d+\.\d+ s", kafka)
    for part in range(3):  # each partition's lag: 1000 - 600 delivered
        assert f"<tr><td>{part}</td><td>400</td></tr>" in kafka
    assert "Kafka lag per partition" in kafka and "<svg" in kafka
    assert all(f"partition {q}" in kafka for q in range(3))
    assert "Kafka fetch wait" in kafka
    # A source that is not Kafka has no Kafka section.
    from stoker_testing import write_image_folder
    folder = tmp_path / "images"
    write_image_folder(str(folder), classes=2, per_class=4)
    other = tmp_path / "other.html"
    subprocess.run([binary, "bench", "pipeline", "--quiet", "--decode", "raw", "--batch-size",
                    "4", "--data", str(folder), "--html", str(other)], check=True)
    assert "<h1>stoker bench pipeline</h1>" in other.read_text()
    assert "Kafka" not in other.read_text()
