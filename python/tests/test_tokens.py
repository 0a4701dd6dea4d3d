"""Token stores and stoker.TokenPipeline against the ecosystem's own readers and writers:
Megatron-Core's indexed_dataset and blending helpers, Hugging Face `datasets` Arrow files,
nanoGPT-style numpy memmaps, llm.c shard headers, and PyTorch through DLPack."""

import importlib.util
import os
import sys
import types

import numpy as np
import pytest

import stoker_testing  # noqa: F401

stoker = pytest.importorskip("stoker")
from stoker import tokens as T  # noqa: E402

pytestmark = pytest.mark.skipif(not stoker.extension_available(), reason="no compiled engine")


_MEGATRON = []


def megatron_datasets():
    """megatron.core.datasets from the installed megatron-core, without its package
    __init__ (which imports the training stack and needs a newer torch than Debian's):
    the two package modules are stand-ins with the real directories as their path, and
    megatron.core.utils (only log_single_rank is used by the dataset modules) is a stub.
    indexed_dataset, helpers_cpp (the compiled index builders) and the GPT/blended dataset
    modules are Megatron's own code."""
    if _MEGATRON:
        return _MEGATRON
    spec = importlib.util.find_spec("megatron")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("megatron-core is not installed (scripts/install-deps.sh installs it)")
    root = list(spec.submodule_search_locations)[0]
    saved = {k: sys.modules.get(k) for k in ("megatron", "megatron.core", "megatron.core.utils")}
    if "megatron.core.datasets.indexed_dataset" not in sys.modules:
        for name, path in (("megatron", root), ("megatron.core", os.path.join(root, "core"))):
            m = types.ModuleType(name)
            m.__path__ = [path]
            sys.modules[name] = m
        u = types.ModuleType("megatron.core.utils")
        u.log_single_rank = lambda logger, *a, **k: logger.log(*a, **k)
        sys.modules["megatron.core.utils"] = u
    try:
        from megatron.core.datasets import helpers_cpp, indexed_dataset
    except Exception as e:  # pragma: no cover - depends on the installed version
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
        pytest.skip(f"megatron-core's dataset modules do not import here: {e}")
    _MEGATRON.extend([indexed_dataset, helpers_cpp])
    return _MEGATRON


def random_docs(seed, n, vocab, max_len=300):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=int(rng.integers(1, max_len))) for _ in range(n)]


# ---------------------------------------------------------------- Megatron


def test_megatron_reads_what_stoker_writes_byte_for_byte(tmp_path):
    idx_mod, _ = megatron_datasets()
    import torch

    docs = random_docs(1, 40, 50257)
    ours = str(tmp_path / "ours_text_document")
    T.write_tokens("megatron:" + ours, docs, dtype="uint16")
    ds = idx_mod.IndexedDataset(ours)
    assert len(ds) == 40
    assert ds.index.dtype == np.uint16
    for i, d in enumerate(docs):
        np.testing.assert_array_equal(ds[i], d)
    # Megatron's own builder on the same documents writes the same bytes.
    theirs = str(tmp_path / "theirs_text_document")
    b = idx_mod.IndexedDatasetBuilder(theirs + ".bin", dtype=np.uint16)
    for d in docs:
        b.add_item(torch.from_numpy(d.astype(np.int64)))
        b.end_document()
    b.finalize(theirs + ".idx")
    for ext in (".bin", ".idx"):
        assert open(ours + ext, "rb").read() == open(theirs + ext, "rb").read(), ext


def test_stoker_reads_what_megatron_writes(tmp_path):
    idx_mod, _ = megatron_datasets()
    import torch

    prefix = str(tmp_path / "m")
    docs = random_docs(2, 30, 128000)
    b = idx_mod.IndexedDatasetBuilder(prefix + ".bin", dtype=np.int32)
    # Documents of several sequences (Megatron's --split-sentences layout).
    seqs = []
    for d in docs:
        cut = max(1, len(d) // 2)
        parts = [d[:cut], d[cut:]] if len(d) > 1 else [d]
        b.add_document(torch.from_numpy(np.concatenate(parts)), [len(p) for p in parts])
        seqs += parts
    b.finalize(prefix + ".idx")
    s = T.TokenStore(prefix)
    assert s.format == "megatron" and s.dtype == "int32" and s.zero_copy
    assert len(s) == len(seqs)  # a stoker document is a Megatron sequence
    for i, q in enumerate(seqs):
        np.testing.assert_array_equal(s[i], q)
    assert s.num_tokens == sum(len(q) for q in seqs)
    # A zero-copy view of the mapping: read-only.
    with pytest.raises(ValueError):
        s[0][0] = 1


def test_idx_not_matching_bin_names_the_file(tmp_path):
    idx_mod, _ = megatron_datasets()
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    T.write_tokens("megatron:" + a, random_docs(3, 10, 1000))
    T.write_tokens("megatron:" + b, random_docs(4, 12, 1000))
    os.replace(b + ".idx", a + ".idx")
    with pytest.raises(stoker.CorruptDataError, match=r"a\.idx.*does not"):
        T.TokenStore("megatron:" + a)


def test_blend_rule_matches_megatron_helpers():
    _, helpers = megatron_datasets()
    for weights in ([0.5, 0.3, 0.2], [0.9, 0.1], [0.25, 0.25, 0.25, 0.25], [0.123, 0.456, 0.421]):
        n = 5000
        di = np.zeros(n, dtype=np.int16)
        dsi = np.zeros(n, dtype=np.int64)
        w = np.array(weights, dtype=np.float64)
        w = w / w.sum()
        helpers.build_blending_indices(di, dsi, w, len(weights), n, False)
        ours_d, ours_j = T.blend_indices(weights, n)
        np.testing.assert_array_equal(ours_d, di)
        np.testing.assert_array_equal(ours_j, dsi)


def test_concat_samples_match_megatron_sample_index(tmp_path):
    """Unshuffled, stoker's concatenation samples are Megatron's build_sample_idx samples."""
    _, helpers = megatron_datasets()
    docs = random_docs(5, 60, 50000, max_len=200)
    prefix = str(tmp_path / "c")
    T.write_tokens("megatron:" + prefix, docs)
    S = 48
    sizes = np.array([len(d) for d in docs], dtype=np.int32)
    doc_index = np.arange(len(docs), dtype=np.int32)
    tokens = int(sizes.sum())
    sample_idx = helpers.build_sample_idx_int32(sizes, doc_index, S, 1, tokens, True, True)
    flat = np.concatenate(docs)
    pipe = T.TokenPipeline("megatron:" + prefix, seq_len=S, batch_size=1, shuffle=False,
                           cache_dir="none")
    assert pipe.samples_per_epoch == len(sample_idx) - 1 == (tokens - 1) // S
    starts = np.concatenate([[0], np.cumsum(sizes)])
    for k in range(len(sample_idx) - 1):
        b = pipe.next_batch()
        (d0, o0), (d1, o1) = sample_idx[k], sample_idx[k + 1]
        begin, end = starts[d0] + o0, starts[d1] + o1 + 1  # Megatron: [start, next start]
        window = flat[begin:end]
        assert len(window) == S + 1
        np.testing.assert_array_equal(b["input_ids"][0], window[:-1])
        np.testing.assert_array_equal(b["labels"][0], window[1:])


# ---------------------------------------------------------------- Hugging Face datasets


def test_reads_a_datasets_arrow_cache_and_datasets_reads_ours(tmp_path):
    datasets = pytest.importorskip("datasets")
    docs = random_docs(6, 50, 32000)
    ds = datasets.Dataset.from_dict({"text": [f"doc {i}" for i in range(50)],
                                     "input_ids": [d.tolist() for d in docs]})
    ds = ds.cast_column("input_ids", datasets.Sequence(datasets.Value("int32")))
    out = tmp_path / "saved"
    ds.save_to_disk(str(out))
    arrows = sorted(p for p in os.listdir(out) if p.endswith(".arrow"))
    assert arrows, os.listdir(out)
    s = T.TokenStore(str(out / arrows[0]))
    assert s.format == "arrow" and s.zero_copy and s.dtype == "int32"
    assert len(s) == 50
    for i, d in enumerate(docs):
        np.testing.assert_array_equal(s[i], d)
    # And the other way: a stoker-written Arrow stream opens with datasets.
    path = str(tmp_path / "ours.arrow")
    T.write_tokens("arrow:" + path, docs, dtype="int32", rows_per_batch=7)
    back = datasets.Dataset.from_file(path)
    assert back.num_rows == 50
    for i in (0, 17, 49):
        assert back[i]["input_ids"] == docs[i].tolist()


def test_parquet_token_column_written_by_pyarrow(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    docs = random_docs(7, 40, 60000)
    table = pa.table({"id": list(range(40)),
                      "tokens": pa.array([d.tolist() for d in docs], type=pa.list_(pa.uint16()))})
    path = str(tmp_path / "t.parquet")
    pq.write_table(table, path, row_group_size=9)
    s = T.TokenStore(path + "?column=tokens")
    assert s.dtype == "uint16" and not s.zero_copy
    for i, d in enumerate(docs):
        np.testing.assert_array_equal(s[i], d)


# ---------------------------------------------------------------- nanoGPT and llm.c


def test_nanogpt_memmap_both_ways(tmp_path):
    eot = 50256
    docs = random_docs(8, 30, 50256)
    # As nanoGPT's prepare.py: ids + [eot] per document into a uint16 np.memmap.
    ids = [np.append(d, eot) for d in docs]
    total = sum(len(x) for x in ids)
    path = str(tmp_path / "train.bin")
    arr = np.memmap(path, dtype=np.uint16, mode="w+", shape=(total,))
    idx = 0
    for x in ids:
        arr[idx: idx + len(x)] = x
        idx += len(x)
    arr.flush()
    del arr
    s = T.TokenStore(f"nanogpt:{path}?eos={eot}")
    assert len(s) == 30
    for i, x in enumerate(ids):
        np.testing.assert_array_equal(s[i], x)
    ours = str(tmp_path / "ours.bin")
    T.write_tokens("nanogpt:" + ours, ids)
    np.testing.assert_array_equal(np.memmap(ours, dtype=np.uint16, mode="r"),
                                  np.memmap(path, dtype=np.uint16, mode="r"))


def _llmc_write_datafile(filename, toks, model="gpt-2"):
    """llm.c dev/data/data_common.py write_datafile, restated."""
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1] = (20240520, 1) if model == "gpt-2" else (20240801, 7)
    header[2] = len(toks)
    dt = np.uint16 if model == "gpt-2" else np.uint32
    with open(filename, "wb") as f:
        f.write(header.tobytes())
        f.write(np.array(toks, dtype=dt).tobytes())


def test_llmc_shards(tmp_path):
    eot = 50256
    docs = random_docs(9, 20, 50000)
    toks = np.concatenate([np.concatenate([[eot], d]) for d in docs])
    _llmc_write_datafile(str(tmp_path / "fw_val_000000.bin"), toks[:2000])
    _llmc_write_datafile(str(tmp_path / "fw_val_000001.bin"), toks[2000:])
    s = T.TokenStore(str(tmp_path / "fw_val_*.bin") + f"?eos={eot}")
    assert s.format == "llmc" and s.num_tokens == len(toks)
    np.testing.assert_array_equal(np.concatenate([s[i] for i in range(len(s))]), toks)
    _llmc_write_datafile(str(tmp_path / "l3.bin"), [1, 2, 128000], model="llama-3")
    assert T.TokenStore(str(tmp_path / "l3.bin")).dtype == "uint32"
    with open(tmp_path / "fw_val_000001.bin", "r+b") as f:
        f.truncate(1024 + 10)
    with pytest.raises(stoker.CorruptDataError, match="fw_val_000001.bin.*truncated"):
        T.TokenStore(str(tmp_path / "fw_val_000001.bin"))


# ---------------------------------------------------------------- the pipeline from Python


def _corpus(tmp_path, name, n=80, seed=10):
    prefix = str(tmp_path / name)
    T.write_tokens("megatron:" + prefix, random_docs(seed, n, 50000, max_len=200))
    return "megatron:" + prefix


def test_torch_batches_through_dlpack_are_views(tmp_path):
    torch = pytest.importorskip("torch")
    data = _corpus(tmp_path, "t")
    pipe = T.TokenPipeline(data, seq_len=64, batch_size=4, packing="best_fit", output="torch",
                           cache_dir="none")
    n = T.TokenPipeline(data, seq_len=64, batch_size=4, packing="best_fit", output="numpy",
                        cache_dir="none")
    for _ in range(3):
        b, a = pipe.next_batch(), n.next_batch()
        for k in ("input_ids", "labels", "position_ids"):
            assert b[k].dtype == torch.int32 and b[k].shape == (4, 64) and b[k].is_contiguous()
            np.testing.assert_array_equal(b[k].numpy(), a[k])
        assert b["cu_seqlens"].dtype == torch.int32
        assert int(b["cu_seqlens"][-1]) == 4 * 64
    p64 = T.TokenPipeline(data, seq_len=64, batch_size=2, dtype="int64", output="torch",
                          cache_dir="none")
    assert p64.next_batch()["input_ids"].dtype == torch.int64
    # Views: a tensor from the same capsule data pointer as NumPy's view of the batch.
    raw = pipe._p.next("numpy")
    t = torch.from_numpy(raw["input_ids"])
    assert t.data_ptr() == raw["input_ids"].__array_interface__["data"][0]


def test_state_dict_resumes_on_another_world_size(tmp_path):
    data = [_corpus(tmp_path, "a", seed=11), _corpus(tmp_path, "b", seed=12)]
    kw = dict(weights=[3, 1], seq_len=32, batch_size=2, packing="first_fit", seed=5,
              cache_dir=str(tmp_path / "cache"))
    ref = T.TokenPipeline(data, rank=0, world_size=1, **dict(kw, batch_size=1))
    want = [tuple(map(tuple, ref.next_batch()["pieces"][:, 1:].tolist())) for _ in range(60)]
    got = {}

    def run(world, steps, state):
        last = None
        for r in range(world):
            p = T.TokenPipeline(data, rank=r, world_size=world, **kw)
            assert p.steps_per_epoch == p.samples_per_epoch // (2 * world)
            if state is not None:
                p.load_state_dict(state)
            for _ in range(steps):
                b = p.next_batch()
                for row, g in enumerate(b["sample_ids"].tolist()):
                    assert g not in got
                    sel = b["pieces"][b["pieces"][:, 0] == row][:, 1:]
                    got[g] = tuple(map(tuple, sel.tolist()))
            last = p.state_dict()
        return last

    s = run(8, 1, None)
    assert s["samples_consumed"] == 16 and len(s["blend_counts"]) == 2
    s = run(4, 2, s)
    s = run(6, 2, s)
    assert s["samples_consumed"] == 16 + 16 + 24
    assert [got[g] for g in range(56)] == want[:56]


def test_megatron_consumed_samples_and_iteration(tmp_path):
    data = _corpus(tmp_path, "c")
    a = T.TokenPipeline(data, seq_len=16, batch_size=3, cache_dir="none", world_size=2, rank=1)
    batches = list(a)
    assert len(batches) == a.steps_per_epoch == a.samples_per_epoch // 6
    b = T.TokenPipeline(data, seq_len=16, batch_size=3, cache_dir="none", world_size=2, rank=1)
    b.set_consumed_samples(6 * 5)
    np.testing.assert_array_equal(b.next_batch()["input_ids"], batches[5]["input_ids"])


def test_bad_arguments_and_empty_documents(tmp_path):
    prefix = str(tmp_path / "e")
    T.write_tokens("megatron:" + prefix, [np.array([1, 2, 3]), np.array([], dtype=np.int64),
                                          np.array([4, 5])])
    with pytest.raises(stoker.CorruptDataError, match=r"e\.bin: document 1 is empty"):
        T.TokenPipeline("megatron:" + prefix, seq_len=2, batch_size=1, cache_dir="none")
    p = T.TokenPipeline("megatron:" + prefix, seq_len=2, batch_size=1, cache_dir="none",
                        skip_empty=True)
    assert p.stats()["skipped_empty"] == 1
    with pytest.raises(stoker.InvalidArgumentError):
        T.TokenPipeline("megatron:" + prefix, packing="nope")
    with pytest.raises(stoker.InvalidArgumentError, match="vocabulary"):
        T.write_tokens("megatron:" + str(tmp_path / "v"), [np.array([1, 99])], vocab_size=50)


def test_device_iteration_path_on_cpu(tmp_path):
    torch = pytest.importorskip("torch")
    data = _corpus(tmp_path, "d")
    p = T.TokenPipeline(data, seq_len=32, batch_size=4, output="torch", device="cpu",
                        pin_memory=False, cache_dir="none")
    ref = T.TokenPipeline(data, seq_len=32, batch_size=4, cache_dir="none")
    got = list(p)
    assert len(got) == p.steps_per_epoch > 0
    for b in got:
        np.testing.assert_array_equal(b["input_ids"].numpy(), ref.next_batch()["input_ids"])
    with pytest.raises(stoker.InvalidArgumentError):
        T.TokenPipeline(data, device="cpu")  # device needs output="torch"


def test_window_layout_numpy_views_and_next_token_labels(tmp_path):
    data = _corpus(tmp_path, "w")
    store = T.TokenStore(data)
    S, B = 48, 4
    pipe = T.TokenPipeline(data, seq_len=S, batch_size=B, cache_dir="none")
    sep = T.TokenPipeline(data, seq_len=S, batch_size=B, cache_dir="none", layout="separate",
                          position_ids=True)
    for _ in range(6):
        b, s = pipe.next_batch(), sep.next_batch()
        assert b["layout"] == "window" and s["layout"] == "separate"
        assert "position_ids" not in b  # off in concat mode unless asked
        w, x, y = b["window"], b["input_ids"], b["labels"]
        assert w.shape == (B, S + 1) and x.shape == y.shape == (B, S)
        # Views of the window, not copies: pointer arithmetic on the one buffer.
        base = w.__array_interface__["data"][0]
        assert x.__array_interface__["data"][0] == base
        assert y.__array_interface__["data"][0] == base + w.itemsize
        assert x.strides == y.strides == ((S + 1) * w.itemsize, w.itemsize)
        assert np.shares_memory(x, w) and np.shares_memory(y, w)
        np.testing.assert_array_equal(x, w[:, :-1])
        np.testing.assert_array_equal(y, w[:, 1:])
        # Same tokens and labels as the separate layout.
        np.testing.assert_array_equal(x, s["input_ids"])
        np.testing.assert_array_equal(y, s["labels"])
        np.testing.assert_array_equal(b["pieces"], s["pieces"])
        # labels[i] == input_ids[i + 1]; inside a document, input i is that document's token.
        np.testing.assert_array_equal(y[:, :-1], x[:, 1:])
        at = {}
        for row, _c, doc, off, ln in b["pieces"]:
            a = at.get(row, 0)
            np.testing.assert_array_equal(x[row, a:a + ln], store[doc][off:off + ln])
            if a + ln < S:  # the label of the piece's last-but-one tokens: same document
                np.testing.assert_array_equal(y[row, a:a + ln - 1],
                                              store[doc][off + 1:off + ln])
            at[row] = a + ln


def test_window_layout_torch_views_share_one_buffer(tmp_path):
    torch = pytest.importorskip("torch")
    data = _corpus(tmp_path, "wt")
    S, B = 32, 3
    for dtype, size in (("int32", 4), ("int64", 8)):
        pipe = T.TokenPipeline(data, seq_len=S, batch_size=B, output="torch", dtype=dtype,
                               cache_dir="none")
        ref = T.TokenPipeline(data, seq_len=S, batch_size=B, dtype=dtype, cache_dir="none",
                              layout="separate")
        for _ in range(3):
            b, r = pipe.next_batch(), ref.next_batch()
            w, x, y = b["window"], b["input_ids"], b["labels"]
            assert w.shape == (B, S + 1) and x.shape == y.shape == (B, S)
            assert x.data_ptr() == w.data_ptr()
            assert y.data_ptr() == w.data_ptr() + size
            assert x.stride() == y.stride() == (S + 1, 1)
            np.testing.assert_array_equal(x.numpy(), r["input_ids"])
            np.testing.assert_array_equal(y.numpy(), r["labels"])
    with pytest.raises(stoker.InvalidArgumentError):
        T.TokenPipeline(data, layout="rows")
    # position_ids when asked, in the window layout too.
    p = T.TokenPipeline(data, seq_len=S, batch_size=B, cache_dir="none", position_ids=True)
    q = T.TokenPipeline(data, seq_len=S, batch_size=B, cache_dir="none", layout="separate",
                        position_ids=True)
    np.testing.assert_array_equal(p.next_batch()["position_ids"], q.next_batch()["position_ids"])
    assert "position_ids" not in T.TokenPipeline(data, packing="best_fit", seq_len=S,
                                                 cache_dir="none",
                                                 position_ids=False).next_batch()
