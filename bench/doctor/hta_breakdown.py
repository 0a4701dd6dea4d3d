#!/usr/bin/env python3
"""Times HTA's temporal breakdown on a trace folder (the peer for bench/doctor/run_bench.sh).

    python3 bench/doctor/hta_breakdown.py TRACE_DIR

Prints one JSON line: parse_s (TraceAnalysis construction: reading and parsing the traces),
breakdown_s (get_temporal_breakdown), total_s, peak_rss_mb, and HTA's idle/compute/non-compute
percentages for rank 0, for a cross-check against stoker doctor's numbers.
"""
import json
import resource
import sys
import time

from hta.trace_analysis import TraceAnalysis


def main():
    d = sys.argv[1]
    t0 = time.perf_counter()
    ta = TraceAnalysis(trace_dir=d)
    t1 = time.perf_counter()
    df = ta.get_temporal_breakdown(visualize=False)
    t2 = time.perf_counter()
    row = df.iloc[0].to_dict()
    print(json.dumps({
        "parse_s": round(t1 - t0, 3), "breakdown_s": round(t2 - t1, 3), "total_s": round(t2 - t0, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "hta_rank0": {k: (float(v) if hasattr(v, "__float__") else str(v)) for k, v in row.items()},
    }))


if __name__ == "__main__":
    main()
