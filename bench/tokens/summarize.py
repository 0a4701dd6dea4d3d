"""Markdown tables (median and range over the repeats, ratios) from run_bench.py's JSON.

    .venv/bin/python bench/tokens/summarize.py bench/tokens/results.json
"""

import json
import statistics
import sys


def med(xs):
    return statistics.median(xs)


def main(path):
    r = json.load(open(path))
    print(f"load average before {r['load_before'][0]:.1f}, after {r['load_after'][0]:.1f}; "
          f"{r['cpus']} CPUs\n")
    for S, rows in r.get("delivery", {}).items():
        print(f"### Delivery, seq_len {S}, batch 8\n")
        print("| contender | M tokens/s (median, range) | M tokens per CPU-s (median, range) | "
              "stoker-cpp / this, per CPU-s |")
        print("| --- | ---: | ---: | ---: |")
        base = med([x["tokens_per_cpu_s"] for x in rows["stoker-cpp"]])
        for name, xs in rows.items():
            w = [x["tokens_per_s"] / 1e6 for x in xs]
            c = [x["tokens_per_cpu_s"] / 1e6 for x in xs]
            print(f"| {name} | {med(w):.1f} ({min(w):.1f}-{max(w):.1f}) | {med(c):.1f} "
                  f"({min(c):.1f}-{max(c):.1f}) | {base / 1e6 / med(c):.2f} |")
        mc = med([x["tokens_per_s"] for x in rows["memcpy"]])
        sc = med([x["tokens_per_s"] for x in rows["stoker-cpp"]])
        print(f"\nstoker-cpp / memcpy (wall, medians of the runs): {sc / mc:.2f}")
        for name in ("stoker-cpp", "stoker-cpp-baseline"):
            xs = rows.get(name, [])
            if xs and "ratio_to_memcpy" in xs[0]:
                w = [x["ratio_to_memcpy"] for x in xs]
                print(f"{name} / memcpy in the same process (median of its rounds; median "
                      f"of the runs, range): {med(w):.2f} ({min(w):.2f}-{max(w):.2f})")
        peers = [n for n in ("nanogpt", "megatron", "stoker-py") if n in rows and n != "stoker-py"]
        if peers:
            best = max(med([x["tokens_per_cpu_s"] for x in rows[n]]) for n in peers)
            print(f"stoker-cpp / fastest peer, per CPU-s: "
                  f"{med([x['tokens_per_cpu_s'] for x in rows['stoker-cpp']]) / best:.1f}x")
        print()
    ix = r.get("index")
    if ix:
        print("### Index build (one epoch, seq_len 2048)\n")
        print("| builder | build s, median (range) | build CPU-s, median | whole open s, median (range) | peak RSS growth MB (runs) | samples |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for name, xs in ix.items():
            secs = [x["seconds"] for x in xs]
            cpu = [x["cpu_s"] for x in xs if x.get("cpu_s") is not None]
            op = [x.get("open_s", x["seconds"]) for x in xs]
            rss = ", ".join("%.0f" % (x["peak_rss_delta"] / 1e6) for x in xs)
            print(f"| {name} | {med(secs):.4f} ({min(secs):.4f}-{max(secs):.4f}) | "
                  f"{'%.4f' % med(cpu) if cpu else '-'} | "
                  f"{med(op):.4f} ({min(op):.4f}-{max(op):.4f}) | {rss} | {xs[0]['samples']} |")
        mg = med([x["seconds"] for x in ix["megatron"]])
        for name in ("stoker", "stoker-baseline", "stoker-2t"):  # stoker-2t: 10:3x-10:4x runs
            if name not in ix:
                continue
            m = mg / med([x["seconds"] for x in ix[name]])
            mo = med([x.get("open_s", x["seconds"]) for x in ix["megatron"]]) / med([x["open_s"] for x in ix[name]])
            pairs = sorted(a["seconds"] / b["seconds"] for a, b in zip(ix["megatron"], ix[name]))
            print(f"\nMegatron / {name} build time (medians): {m:.1f}x (per pair: "
                  f"{', '.join('%.1f' % x for x in pairs)}); with the opens (Megatron: IndexedDataset + "
                  f"build; stoker: store open + document checks + build + cache write): {mo:.1f}x")
        print()
    tk = r.get("tokenize")
    if tk:
        print(f"### Tokenization ({tk['files']} JSONL files, {tk['bytes'] / 1e6:.1f} MB, "
              f"{tk['cpus']} processes)\n")
        print("| tool | M tokens/s (runs) | tokens |")
        print("| --- | ---: | ---: |")
        for name in ("stoker", "datasets"):
            xs = tk[name]
            rates = ", ".join("%.3f" % (x["tokens_per_s"] / 1e6) for x in xs)
            print(f"| {name} | {rates} | {xs[0]['tokens']} |")
        m = med([x["tokens_per_s"] for x in tk["stoker"]]) / med([x["tokens_per_s"] for x in tk["datasets"]])
        print(f"\nstoker / datasets.map (medians): {m:.2f}x\n")


if __name__ == "__main__":
    main(sys.argv[1])
