"""Token pipeline benchmarks, side by side in one run (results in bench/RESULTS.md).

  .venv/bin/python bench/tokens/run_bench.py --out bench/tokens/results.json

1. Delivery of batches (seq_len 2048 and 8192, batch 8, one process, no GPU) from one
   page-cached Megatron corpus, in tokens/s and tokens per CPU-second (process CPU time,
   all threads), each contender in a fresh subprocess, the order rotated every repeat:
     memcpy       as many bytes as stoker's batches hold, copied out of the mapping at random
                  places (the limit), measured inside the stoker-cpp process in 10 rounds
                  interleaved with its delivery loop (ratio_to_memcpy: median of the rounds)
     stoker-cpp   `stoker bench tokens` (C++ loop, 1 assembly thread; Next() assembles a
                  queued batch itself rather than wait, so up to 2 threads work)
     stoker-py    stoker.TokenPipeline(output="torch"): DLPack int32 tensors
     nanogpt      nanoGPT's get_batch (train.py): a fresh np.memmap per batch, random
                  windows, int64 tensors
     megatron     Megatron-Core GPTDataset + torch DataLoader (num_workers=0, batch 8), under
                  the main venv's torch 1.13 (megatron.core's package __init__ stubbed out)
   and, in subprocesses of --peer-python (torch >= 2; default .venv-torch2/bin/python when
   present, made by bench/install-torch2-peers.sh), when it is there:
     litdata      LitData's pretraining token path: the corpus's token stream written once with
                  litdata.optimize(item_loader=TokensLoader(), int32 token tensors as LitGPT
                  writes them, chunks of 2049*8192 tokens) into <tmp>/litdata-tokens, read with
                  StreamingDataset(item_loader=TokensLoader(block_size=S+1), shuffle=True) +
                  StreamingDataLoader(batch_size=8, num_workers=0); x, y = batch[:, :-1],
                  batch[:, 1:]
     megatron-torch2  the megatron side with megatron-core imported whole under torch >= 2
2. Index build for a >= 2-billion-token corpus (document lengths: bench/tokens/make_corpus.py),
   stoker vs Megatron-Core's GPTDataset index build (its C++ helpers), with peak RSS and the
   process CPU time of the build (all threads) beside the wall time.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = sys.executable
STOKER = os.environ.get("STOKER_BINARY", os.path.join(ROOT, "build", "stoker"))
# Another stoker build to compare in the same run (--baseline, e.g. main's build).
BASELINE = None
# The interpreter with torch >= 2 for the litdata and megatron-torch2 sides (--peer-python).
PEER_PY = None
PEER_SIDES = ("litdata", "megatron-torch2")
# The build's Python package (STOKER_PYTHON_BUILD=<build dir>, as the tests).
PYDIR = os.path.join(os.environ.get("STOKER_PYTHON_BUILD", os.path.join(ROOT, "build")), "python")
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
sys.path.insert(0, PYDIR)


def maxrss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def megatron():
    from test_tokens import megatron_datasets

    megatron_datasets()
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import Split

    class Tok:  # what GPTDataset reads from a tokenizer
        vocab_size, eod, pad, bos = 50257, 50256, 50257, None
        unique_identifiers = {"class": "BenchTokenizer"}

    return GPTDataset, GPTDatasetConfig, IndexedDataset, Split, Tok


# ------------------------------------------------------------------ contenders (subprocess)


def one_stoker_py(prefix, S, B, steps):
    import stoker

    p = stoker.TokenPipeline("megatron:" + prefix, seq_len=S, batch_size=B, output="torch",
                             cache_dir="none", threads=1)
    for _ in range(5):
        p.next_batch()
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        b = p.next_batch()
        x, y = b["input_ids"], b["labels"]
    return time.perf_counter() - t0, time.process_time() - c0


def one_nanogpt(prefix, S, B, steps):
    import numpy as np
    import torch

    path = prefix + ".bin"

    def get_batch():  # nanoGPT train.py get_batch, device "cpu"
        data = np.memmap(path, dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - S, (B,))
        x = torch.stack([torch.from_numpy((data[i:i + S]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + S]).astype(np.int64)) for i in ix])
        return x, y

    for _ in range(5):
        get_batch()
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        x, y = get_batch()
    return time.perf_counter() - t0, time.process_time() - c0


def _megatron_loop(classes, prefix, S, B, steps, cache):
    """GPTDataset + DataLoader over `prefix`: (wall s, CPU s) of `steps` batches."""
    import numpy as np
    import torch

    GPTDataset, GPTDatasetConfig, IndexedDataset, Split, Tok = classes
    ind = IndexedDataset(prefix)
    cfg = GPTDatasetConfig(random_seed=1, sequence_length=S, split="1,0,0", tokenizer=Tok(),
                           reset_position_ids=True, reset_attention_mask=False,
                           eod_mask_loss=False, create_attention_mask=False,
                           path_to_cache=os.path.join(os.path.dirname(prefix), cache))
    ds = GPTDataset(ind, prefix, np.arange(len(ind), dtype=np.int32), (steps + 10) * B,
                    Split.train, cfg)
    dl = torch.utils.data.DataLoader(ds, batch_size=B, num_workers=0, shuffle=False)
    it = iter(dl)
    for _ in range(5):
        next(it)
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        b = next(it)
        x, y = b["tokens"], b["labels"]
    return time.perf_counter() - t0, time.process_time() - c0


def one_megatron(prefix, S, B, steps):
    return _megatron_loop(megatron(), prefix, S, B, steps, "mcache")


def one_megatron_torch2(prefix, S, B, steps):
    """The megatron side under torch >= 2, megatron.core imported as a user would."""
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import Split

    class Tok:  # what GPTDataset reads from a tokenizer
        vocab_size, eod, pad, bos = 50257, 50256, 50257, None
        unique_identifiers = {"class": "BenchTokenizer"}

    return _megatron_loop((GPTDataset, GPTDatasetConfig, IndexedDataset, Split, Tok), prefix,
                          S, B, steps, "mcache2")


def litdata_dir(prefix):
    return os.path.join(os.path.dirname(prefix), "litdata-tokens")


def _litdata_block(rng):
    """litdata.optimize's fn: one block of the corpus's token stream (whole documents, as
    Megatron's .bin holds them) as an int32 tensor (LitGPT's token dtype)."""
    import numpy as np
    import torch

    path, lo, hi = rng
    return torch.from_numpy(np.memmap(path, dtype=np.uint16, mode="r")[lo:hi].astype(np.int32))


def prepare_litdata(prefix, block_tokens=4 << 20):
    """The corpus's tokens through litdata.optimize, TokensLoader layout (done once)."""
    import numpy as np
    from litdata import TokensLoader, optimize

    out = litdata_dir(prefix)
    if os.path.exists(os.path.join(out, "index.json")):
        return out
    n = os.path.getsize(prefix + ".bin") // 2
    assert np.dtype(np.uint16).itemsize == 2
    inputs = [(prefix + ".bin", lo, min(n, lo + block_tokens)) for lo in range(0, n, block_tokens)]
    optimize(fn=_litdata_block, inputs=inputs, output_dir=out, chunk_size=2049 * 8192,
             item_loader=TokensLoader(), num_workers=1, mode="overwrite")
    return out


def one_litdata(prefix, S, B, steps):
    from litdata import StreamingDataLoader, StreamingDataset, TokensLoader

    ds = StreamingDataset(input_dir=litdata_dir(prefix), item_loader=TokensLoader(block_size=S + 1),
                          shuffle=True, drop_last=True, seed=1)
    dl = StreamingDataLoader(ds, batch_size=B, num_workers=0)
    it = iter(dl)
    for _ in range(5):
        next(it)
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        b = next(it)
        x, y = b[:, :-1], b[:, 1:]
    assert x.shape == (B, S)
    return time.perf_counter() - t0, time.process_time() - c0


def stoker_json(args):
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        out = subprocess.run(args + ["--json", f.name], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(out.stderr)
        with open(f.name) as g:
            return json.load(g)


def run_one(name, prefix, S, B, steps):
    """One contender in a fresh process. The stoker-cpp run returns two rows: its own and
    the memcpy limit measured in the same process, interleaved with it (10 rounds)."""
    if name.startswith("stoker-cpp"):
        binary = BASELINE if name == "stoker-cpp-baseline" else STOKER
        j = stoker_json([binary, "bench", "tokens", "--data", "megatron:" + prefix,
                         "--seq-len", str(S), "--batch", str(B), "--steps", str(steps),
                         "--cache-dir", "none"])
        me = {"tokens_per_s": j["tokens_per_s"], "tokens_per_cpu_s": j["tokens_per_cpu_s"],
              "ratio_to_memcpy": j["ratio_to_memcpy"]}
        mem = {"tokens_per_s": j["memcpy_tokens_per_s"], "tokens_per_cpu_s": j["memcpy_tokens_per_s"]}
        return me, mem
    code = (f"import sys, json; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
            f"import run_bench as r; w, c = r.one_{name.replace('-', '_').replace('stoker_py', 'stoker_py')}"
            f"({prefix!r}, {S}, {B}, {steps}); print(json.dumps([w, c]))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PYDIR, os.path.join(ROOT, "python", "tests")]))
    out = subprocess.run([PEER_PY if name in PEER_SIDES else PY, "-c", code], capture_output=True,
                         text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{name}: {out.stderr[-2000:]}")
    w, c = json.loads(out.stdout.strip().splitlines()[-1])
    tok = steps * B * S
    return {"tokens_per_s": tok / w, "tokens_per_cpu_s": tok / c if c > 0 else 0}


# ------------------------------------------------------------------ index build


def index_megatron(prefix, S, cache):
    """GPTDataset's index build (document, sample, shuffle indices; its C++ helpers)
    for one epoch, as a training job's rank 0 runs it; saved to `cache` like Megatron."""
    import numpy as np

    GPTDataset, GPTDatasetConfig, IndexedDataset, Split, Tok = megatron()
    o0 = time.perf_counter()
    ind = IndexedDataset(prefix)
    open_s = time.perf_counter() - o0
    n_tokens = int(ind.sequence_lengths.sum(dtype=np.int64))
    base = maxrss()
    cfg = GPTDatasetConfig(random_seed=1, sequence_length=S, split="1,0,0", tokenizer=Tok(),
                           reset_position_ids=True, reset_attention_mask=False,
                           eod_mask_loss=False, create_attention_mask=False, path_to_cache=cache)
    t0, c0 = time.perf_counter(), time.process_time()
    ds = GPTDataset(ind, prefix, np.arange(len(ind), dtype=np.int32), (n_tokens - 1) // S,
                    Split.train, cfg)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    # open_s: IndexedDataset's open plus the build (stoker's open_s: store open, document
    # checks, build and cache write).
    return {"seconds": dt, "cpu_s": cpu, "open_s": open_s + dt, "samples": len(ds),
            "peak_rss_delta": maxrss() - base, "peak_rss": maxrss()}


def run_index(prefix, S, tmp, repeats=2):
    import shutil

    res = {}
    names = ["stoker", "megatron"] + (["stoker-baseline"] if BASELINE else [])
    for rep in range(repeats):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            cache = os.path.join(tmp, f"cache-{name}-{rep}")
            shutil.rmtree(cache, ignore_errors=True)
            if name.startswith("stoker"):
                binary = BASELINE if name == "stoker-baseline" else STOKER
                j = stoker_json([binary, "bench", "tokens", "--data", "megatron:" + prefix,
                                 "--seq-len", str(S), "--index-only", "--cache-dir", cache])
                r = {"seconds": j["index_build_s"], "open_s": j["open_s"],
                     "cpu_s": j.get("index_build_cpu_s"),
                     "samples": j["samples_per_epoch"],
                     "peak_rss_delta": j["peak_rss_after_index"] - j["peak_rss_before"],
                     "peak_rss": j["peak_rss_after_index"]}
            else:
                code = (f"import sys, json; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
                        f"import run_bench as r; print(json.dumps(r.index_megatron({prefix!r}, {S}, {cache!r})))")
                env = dict(os.environ, PYTHONPATH=os.pathsep.join([PYDIR, os.path.join(ROOT, "python", "tests")]))
                out = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env)
                if out.returncode != 0:
                    raise RuntimeError(out.stderr[-2000:])
                r = json.loads(out.stdout.strip().splitlines()[-1])
            res.setdefault(name, []).append(r)
            print(f"index {name} rep {rep}: {r}", file=sys.stderr)
    return res


# ------------------------------------------------------------------ tokenization

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from "
         "at which but have an they you were her she there been one all we their has would "
         "when if so no will more about out up them some could what into than other time "
         "river mountain library engine quietly between afterwards tokenizer shard").split()


def make_text(d, files, docs_per_file, seed=0):
    import numpy as np

    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for f in range(files):
        p = os.path.join(d, f"part-{f:03d}.jsonl")
        paths.append(p)
        if os.path.exists(p):
            continue
        with open(p, "w") as out:
            for _ in range(docs_per_file):
                n = int(rng.lognormal(5.5, 0.8))
                out.write(json.dumps({"text": " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), n))}) + "\n")
    return paths


def train_tokenizer(path, sample_file):
    if os.path.exists(path):
        return path
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=4096, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    with open(sample_file) as f:
        tok.train_from_iterator((json.loads(l)["text"] for l in f), trainer=tr)
    tok.save(path)
    return path


def hf_datasets_tokenize(files, tokenizer, cache, nproc):
    import datasets
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer)
    eos = tok.token_to_id("<|endoftext|>")

    def fn(batch):
        return {"input_ids": [e.ids + [eos] for e in tok.encode_batch(batch["text"])]}

    t0 = time.perf_counter()
    ds = datasets.load_dataset("json", data_files=files, split="train", cache_dir=cache)
    out = ds.map(fn, batched=True, num_proc=nproc, remove_columns=["text"])
    n = sum(len(x) for x in out["input_ids"])
    return time.perf_counter() - t0, n


def run_tokenize(tmp, repeats):
    import shutil

    d = os.path.join(tmp, "text")
    files = make_text(d, 8, 1500)
    tok = train_tokenizer(os.path.join(tmp, "bench-tokenizer.json"), files[0])
    ncpu = os.cpu_count() or 1
    res = {"files": len(files), "bytes": sum(os.path.getsize(f) for f in files), "cpus": ncpu}
    for rep in range(repeats):
        for name in (["stoker", "datasets"] if rep % 2 == 0 else ["datasets", "stoker"]):
            out = os.path.join(tmp, f"tok-{name}")
            shutil.rmtree(out, ignore_errors=True)
            if name == "stoker":
                t0 = time.perf_counter()
                r = subprocess.run([STOKER, "convert", f"text:{d}/*.jsonl",
                                    f"tokens:{out}/c?tokenizer={tok}"], capture_output=True,
                                   text=True, env=dict(os.environ, STOKER_PYTHON=PY))
                dt = time.perf_counter() - t0
                if r.returncode != 0:
                    raise RuntimeError(r.stderr)
                n = json.load(open(os.path.join(out, "stoker-token-manifest.json")))["tokens"]
            else:
                code = (f"import sys, json; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
                        f"import run_bench as r, glob; print(json.dumps(r.hf_datasets_tokenize("
                        f"sorted(glob.glob({d!r} + '/*.jsonl')), {tok!r}, {out!r}, {ncpu})))")
                p = subprocess.run([PY, "-c", code], capture_output=True, text=True)
                if p.returncode != 0:
                    raise RuntimeError(p.stderr[-2000:])
                dt, n = json.loads(p.stdout.strip().splitlines()[-1])
            res.setdefault(name, []).append({"seconds": dt, "tokens": n, "tokens_per_s": n / dt})
            print(f"tokenize {name} rep {rep}: {n / dt / 1e6:.2f} M tokens/s ({n} tokens, {dt:.1f} s)",
                  file=sys.stderr)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tmp", default="/tmp/stoker-token-bench")
    ap.add_argument("--tokens", type=float, default=256e6, help="delivery corpus size")
    ap.add_argument("--index-tokens", type=float, default=2.2e9)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--skip-index", action="store_true")
    ap.add_argument("--index-repeats", type=int, default=2)
    ap.add_argument("--skip-tokenize", action="store_true")
    ap.add_argument("--tokenize-repeats", type=int, default=2)
    ap.add_argument("--skip-delivery", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "tokens", "results.json"))
    ap.add_argument("--baseline", help="another stoker binary, run as stoker-cpp-baseline and "
                    "stoker-baseline (index) in the same rotation")
    ap.add_argument("--only", help="delivery contenders to run, comma-separated")
    default_peer = os.path.join(ROOT, ".venv-torch2", "bin", "python")
    ap.add_argument("--peer-python", default=default_peer if os.path.exists(default_peer) else None,
                    help="interpreter with torch >= 2, litdata and megatron-core for the litdata "
                    "and megatron-torch2 sides (bench/install-torch2-peers.sh)")
    a = ap.parse_args()
    global BASELINE, PEER_PY
    BASELINE = a.baseline
    PEER_PY = a.peer_python
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_corpus

    os.makedirs(a.tmp, exist_ok=True)
    prefix = os.path.join(a.tmp, "deliv_text_document")
    if not os.path.exists(prefix + ".idx"):
        make_corpus.write(prefix, a.tokens, sparse=False)
    subprocess.run(["cat", prefix + ".bin"], stdout=subprocess.DEVNULL, check=True)  # page cache
    results = {"machine": os.uname().nodename, "cpus": os.cpu_count(),
               "load_before": os.getloadavg(), "delivery": {}, "index": {}}
    names = ["stoker-cpp", "stoker-py", "nanogpt", "megatron"]
    if BASELINE:
        names.insert(1, "stoker-cpp-baseline")
    if PEER_PY and os.path.exists(PEER_PY):
        names += list(PEER_SIDES)
    else:
        results["errors"] = {n: f"not run: no interpreter with torch >= 2 ({PEER_PY})" for n in PEER_SIDES}
    if a.only:
        names = [n for n in names if n in a.only.split(",")]
    if "litdata" in names and not a.skip_delivery:
        t0 = time.perf_counter()
        code = (f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
                f"import run_bench as r; r.prepare_litdata({prefix!r})")
        p = subprocess.run([PEER_PY, "-c", code], capture_output=True, text=True)
        if p.returncode != 0:  # reported, never dropped silently
            results.setdefault("errors", {})["litdata"] = p.stderr[-3000:]
            names.remove("litdata")
            print(f"litdata: optimize failed:\n{p.stderr[-3000:]}", file=sys.stderr)
        else:
            print(f"litdata.optimize: {time.perf_counter() - t0:.1f} s (done once)", file=sys.stderr)
    for S in (() if a.skip_delivery else (2048, 8192)):
        steps = a.steps if S == 2048 else a.steps // 4
        rows = results["delivery"].setdefault(str(S), {})
        for rep in range(a.repeats):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for n in order:
                try:
                    r = run_one(n, prefix, S, 8, steps)
                except RuntimeError as e:
                    if n not in PEER_SIDES:
                        raise
                    results.setdefault("errors", {})[n] = str(e)[-3000:]  # reported, not faked
                    print(f"S={S} rep {rep} {n} FAILED: {str(e)[-1500:]}", file=sys.stderr)
                    continue
                if isinstance(r, tuple):  # stoker-cpp and its in-process memcpy limit
                    r, mem = r
                    rows.setdefault("memcpy" if n == "stoker-cpp" else "memcpy-baseline-run", []).append(mem)
                rows.setdefault(n, []).append(r)
                extra = f", {r['ratio_to_memcpy']:.2f} of memcpy" if "ratio_to_memcpy" in r else ""
                print(f"S={S} rep {rep} {n}: {r['tokens_per_s'] / 1e6:.1f} M tok/s, "
                      f"{r['tokens_per_cpu_s'] / 1e6:.1f} M tok/CPU-s{extra}", file=sys.stderr)
    if not a.skip_index:
        iprefix = os.path.join(a.tmp, "owt2b_text_document")
        if not os.path.exists(iprefix + ".idx"):
            make_corpus.write(iprefix, a.index_tokens, sparse=True)
        results["index"] = run_index(iprefix, 2048, a.tmp, a.index_repeats)
    if not a.skip_tokenize:
        results["tokenize"] = run_tokenize(a.tmp, a.tokenize_repeats)
    results["load_after"] = os.getloadavg()
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
