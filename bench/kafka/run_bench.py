"""Kafka read speed: stoker's kafka:// source vs confluent-kafka's own consumer loop (the
client's limit: librdkafka underneath both), on the same topic of a local broker, interleaved.

    scripts/servers/kafka.sh install
    eval "$(STOKER_SERVERS_DIR=/tmp/kb bash scripts/servers/kafka.sh start)"
    .venv/bin/python bench/kafka/run_bench.py [--messages 100000] [--size 1024] [--partitions 4]
    STOKER_SERVERS_DIR=/tmp/kb bash scripts/servers/kafka.sh stop

The topic (made once per --size/--messages/--partitions, reused) holds random bytes of
--size per message. Each side reads every message of the topic once per run:
  * confluent-kafka   Consumer assigned every partition at offset 0, consume(1000) in a
                      loop, touching len(value) of each message, until all were received;
  * stoker (order)    stoker.Pipeline(kafka://..., decode="raw", shuffle=False): batches of
                      --batch messages' bytes as one array with offsets (the partitions side
                      by side, 64 offsets of each in turn, each in offset order);
  * confluent+shuffle the client loop with a Python shuffle buffer of stoker's default size
                      (8192 samples, at most 64 MB), as WebDataset / torchdata users write
                      it: the peer of a shuffled read;
  * stoker (shuffled) the same with the default shuffle (8192-sample buffer, at most 64 MB).
Prints samples/s and MB/s per side (median and range over --repeats rounds, sides in turn
in each round) and writes bench/kafka/results.json.
"""

import argparse
import json
import os
import statistics
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
import stoker_testing  # noqa: E402,F401 -- finds the built extension

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
import stoker  # noqa: E402


def make_topic(bootstrap, messages, size, partitions):
    name = f"bench-{messages}-{size}-{partitions}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=10)
    if name in md.topics:
        return name
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                     "queue.buffering.max.kbytes": 1 << 20, "compression.type": "none"})
    payload = os.urandom(size * 16)
    t0 = time.time()
    for i in range(messages):
        off = (i * 7919) % (len(payload) - size)
        while True:
            try:
                p.produce(name, value=payload[off:off + size], partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
            print(f"\r  producing {i}/{messages}", end="", file=sys.stderr)
    assert p.flush(120) == 0
    print(f"\r  produced {messages} messages in {time.time() - t0:.1f} s", file=sys.stderr)
    return name


def run_confluent(bootstrap, topic, partitions, messages):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + uuid.uuid4().hex,
                     "enable.auto.commit": False, "enable.partition.eof": False})
    c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    n = nbytes = 0
    t0 = time.perf_counter()
    while n < messages:
        for m in c.consume(1000, timeout=1.0):
            if m.error():
                raise RuntimeError(m.error())
            nbytes += len(m.value())
            n += 1
    dt = time.perf_counter() - t0
    c.close()
    return n, nbytes, dt


def run_confluent_shuffled(bootstrap, topic, partitions, messages, buffer, seed=0):
    """The client loop with the shuffle buffer a PyTorch user would write around it
    (WebDataset's and torchdata's: a list of `buffer` values, each new one replacing a
    random pick, which is delivered; then the rest, shuffled), over the partitions as the
    consumer delivers them."""
    import random
    rng = random.Random(seed)
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + uuid.uuid4().hex,
                     "enable.auto.commit": False, "enable.partition.eof": False})
    c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    n = nbytes = got = 0
    buf = []
    t0 = time.perf_counter()
    while got < messages:
        for m in c.consume(1000, timeout=1.0):
            if m.error():
                raise RuntimeError(m.error())
            got += 1
            v = m.value()
            if len(buf) < buffer:
                buf.append(v)
                continue
            j = rng.randrange(buffer)
            out, buf[j] = buf[j], v
            nbytes += len(out)
            n += 1
    rng.shuffle(buf)
    for out in buf:
        nbytes += len(out)
        n += 1
    dt = time.perf_counter() - t0
    c.close()
    return n, nbytes, dt


def run_stoker(bootstrap, topic, batch, shuffle):
    t0 = time.perf_counter()
    p = stoker.Pipeline(f"kafka://{bootstrap}/{topic}", batch_size=batch, decode="raw",
                        shuffle=shuffle)
    n = nbytes = 0
    for b in p:
        n += len(b["offsets"]) - 1
        nbytes += int(b["offsets"][-1])
    dt = time.perf_counter() - t0
    return n, nbytes, dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default=os.environ.get("STOKER_TEST_KAFKA_BOOTSTRAP"))
    ap.add_argument("--messages", type=int, default=100000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if not args.bootstrap:
        sys.exit("no broker: set STOKER_TEST_KAFKA_BOOTSTRAP or --bootstrap")
    topic = make_topic(args.bootstrap, args.messages, args.size, args.partitions)
    # The shuffle buffer stoker uses by default: 8192 samples, at most 64 MB of them.
    buffer = min(8192, max(1, (64 << 20) // args.size))
    sides = {
        "confluent-kafka": lambda: run_confluent(args.bootstrap, topic, args.partitions, args.messages),
        "confluent+shuffle": lambda: run_confluent_shuffled(args.bootstrap, topic, args.partitions,
                                                            args.messages, buffer),
        "stoker (order)": lambda: run_stoker(args.bootstrap, topic, args.batch, False),
        "stoker (shuffled)": lambda: run_stoker(args.bootstrap, topic, args.batch, True),
    }
    rates = {k: [] for k in sides}
    for r in range(args.repeats):
        for name, fn in sides.items():
            n, nbytes, dt = fn()
            assert n == args.messages, (name, n)
            rates[name].append((n / dt, nbytes / dt / 1e6))
            print(f"  round {r + 1}/{args.repeats} {name}: {n / dt:,.0f} msg/s", file=sys.stderr)
    peer = statistics.median(x[0] for x in rates["confluent-kafka"])
    peer_shuffled = statistics.median(x[0] for x in rates["confluent+shuffle"])
    out = {"command": " ".join(sys.argv), "messages": args.messages, "size": args.size,
           "partitions": args.partitions, "batch": args.batch, "cores": os.cpu_count(),
           "sides": {}}
    print(f"\n{args.messages} messages of {args.size} B, {args.partitions} partitions, "
          f"{args.repeats} interleaved rounds, {os.cpu_count()} cores")
    print(f"{'side':20s} {'msg/s median (range)':>28s} {'MB/s':>8s} {'vs confluent':>13s} "
          f"{'vs conf+shuffle':>16s}")
    for name, rs in rates.items():
        m = statistics.median(x[0] for x in rs)
        mb = statistics.median(x[1] for x in rs)
        lo, hi = min(x[0] for x in rs), max(x[0] for x in rs)
        print(f"{name:20s} {m:>12,.0f} ({lo:,.0f}..{hi:,.0f}) {mb:>8.1f} {m / peer:>12.2f}x "
              f"{m / peer_shuffled:>15.2f}x")
        out["sides"][name] = {"msg_per_s": rs, "median_msg_per_s": m, "median_mb_per_s": mb,
                              "ratio_to_confluent": m / peer,
                              "ratio_to_confluent_shuffled": m / peer_shuffled}
    out["shuffle_buffer"] = buffer
    out["load_1min"] = os.getloadavg()[0]
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
