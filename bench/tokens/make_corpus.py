"""Writes a synthetic Megatron indexed dataset (PREFIX.bin + PREFIX.idx) for the token
benches. Document lengths are drawn from a log-normal with the mean document length of
OpenWebText (9,035,582,198 tokens / 8,009,762 documents = 1,128 tokens; nanoGPT's
prepare.py numbers) and sigma 1.0 (an assumption: web documents are heavy-tailed; the
sigma is not from a measurement), clipped to [16, 65536]. Tokens are uniform in
[0, 50257) as uint16. --sparse leaves the .bin a sparse file of the right size (the index
benches never read tokens), so a 2-billion-token corpus costs only its .idx on disk.

    python bench/tokens/make_corpus.py --tokens 2e9 --sparse /tmp/tok/owt2b_text_document
"""

import argparse
import os
import struct
import sys
import time

import numpy as np


def lengths_for(total_tokens, seed):
    rng = np.random.default_rng(seed)
    mu, sigma = np.log(1128.0) - 0.5, 1.0
    out, have = [], 0
    while have < total_tokens:
        n = int(max(1024, (total_tokens - have) / 1000))
        l = np.clip(np.rint(rng.lognormal(mu, sigma, n)), 16, 65536).astype(np.int64)
        c = np.cumsum(l)
        k = int(np.searchsorted(c, total_tokens - have, side="left"))
        if k < n:
            l = l[: k + 1]
            l[-1] -= int(c[k] - (total_tokens - have))
            l = l[l > 0]
        out.append(l)
        have += int(l.sum())
    return np.concatenate(out).astype(np.int32)


def write(prefix, total_tokens, sparse, seed=0):
    t0 = time.time()
    lens = lengths_for(int(total_tokens), seed)
    s = len(lens)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", 8))  # uint16
        f.write(struct.pack("<Q", s))
        f.write(struct.pack("<Q", s + 1))
        f.write(lens.tobytes())
        ptr = np.zeros(s, dtype=np.int64)
        np.cumsum(lens[:-1].astype(np.int64) * 2, out=ptr[1:])
        f.write(ptr.tobytes())
        f.write(np.arange(s + 1, dtype=np.int64).tobytes())
    nbytes = int(lens.astype(np.int64).sum()) * 2
    with open(prefix + ".bin", "wb") as f:
        if sparse:
            f.truncate(nbytes)
        else:
            rng = np.random.default_rng(seed + 1)
            left = nbytes // 2
            while left:
                n = min(left, 1 << 24)
                f.write(rng.integers(0, 50257, n, dtype=np.uint16).tobytes())
                left -= n
    print(f"{prefix}: {s} documents, {nbytes // 2} tokens, mean {nbytes / 2 / s:.0f}, "
          f"median {int(np.median(lens))} ({time.time() - t0:.1f} s)", file=sys.stderr)
    return s, nbytes // 2


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("prefix")
    ap.add_argument("--tokens", type=float, required=True)
    ap.add_argument("--sparse", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(a.prefix)), exist_ok=True)
    write(a.prefix, a.tokens, a.sparse, a.seed)
