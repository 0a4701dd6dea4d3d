#!/usr/bin/env python3
"""An independent, naive recomputation (regular expressions over the text) of the numbers
the doctor's golden cases expect from Ray Data stats files -- not the doctor's own output.

    python3 tests/traces/ray/oracle.py tests/traces/ray/ray-*.txt

Per operator: tasks, remote wall total (the sum over its tasks), its share of all the
operators' remote wall time, mean wall per task, and wall total / the operator's elapsed
time (tasks running at a time). The bottleneck is the largest share. The training loop's
wait: time blocked in iter_batches minus the first batch's wait, against that plus the
loop's own code ("Total execution time for user thread")."""
import re
import sys

UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def dur(s):
    m = re.fullmatch(r"([0-9.]+)(us|ms|s)", s.strip())
    return float(m.group(1)) * UNITS[m.group(2)]


def main():
    for path in sys.argv[1:]:
        text = open(path).read()
        ops = []
        for m in re.finditer(r"^Operator \d+ (.+?): (?:(\d+) tasks executed, )?\d+ blocks produced in ([0-9.]+)s\n"
                             r"\* Remote wall time: \S+ min, \S+ max, (\S+) mean, (\S+) total", text, re.M):
            ops.append(dict(name=m.group(1), tasks=int(m.group(2) or -1), elapsed=float(m.group(3)),
                            mean=dur(m.group(4)), wall=dur(m.group(5))))
        tot = sum(o["wall"] for o in ops)
        print(path)
        for o in ops:
            print(f"  {o['name']}: tasks {o['tasks']} wall {o['wall']:.4f} s share {o['wall'] / tot:.4f} "
                  f"mean {o['mean'] * 1e3:.2f} ms running {o['wall'] / o['elapsed']:.3f}")
        print("  bottleneck:", max(ops, key=lambda o: o["wall"])["name"])

        def line(label):
            m = re.search(re.escape(label) + r": (\S+)\n", text)
            return dur(m.group(1)) if m else 0.0
        if "Dataset iterator time breakdown:" in text:
            blocked = line("Total time user thread is blocked by Ray Data iter_batches")
            first = line("Total time spent waiting for the first batch after starting iteration")
            user = line("Total execution time for user thread")
            wait = max(0.0, blocked - first)
            print(f"  wait {wait:.4f} s user {user:.6f} s consumer_wait_frac {wait / (wait + user):.5f}")
        else:
            print("  no iterator breakdown")


if __name__ == "__main__":
    main()
