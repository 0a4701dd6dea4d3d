"""stoker.TokenPipeline: packed, shuffled, blended batches of token ids for LLM training.

    pipe = stoker.TokenPipeline(["megatron:/data/web_text_document",
                                 "megatron:/data/code_text_document"],
                                weights=[0.7, 0.3], seq_len=2048, batch_size=8,
                                packing="best_fit", seed=1234, output="torch")
    pipe.load_state_dict(ckpt["data"])          # any world size: nothing repeated or lost
    for batch in pipe:                           # steps_per_epoch steps, equal on every rank
        loss = model(batch["input_ids"], labels=batch["labels"],
                     position_ids=batch["position_ids"], cu_seqlens=batch["cu_seqlens"])
    ckpt["data"] = pipe.state_dict()

Batches are assembled in C++ threads from memory-mapped token files; the arrays view the
C++ batch (NumPy, or PyTorch tensors through DLPack), no copy. With ``device="cuda"`` the
next batch is copied to the GPU (from pinned memory when ``pin_memory``) while the current
one is used. Rank and world size come from the arguments or RANK/WORLD_SIZE.
"""

import collections
import os

from ._errors import bad_argument, require_extension

_STATE_VERSION = 1
_PACKINGS = ("concat", "best_fit", "first_fit")


def _rank_world(rank, world_size):
    if rank is None and world_size is None:
        rank = int(os.environ.get("RANK", 0))
        world_size = int(os.environ.get("WORLD_SIZE", 1))
    if rank is None or world_size is None:
        raise bad_argument("give both rank and world_size, or neither (then RANK/WORLD_SIZE)")
    return int(rank), int(world_size)


class TokenStore:
    """A token store opened by spec (see docs/tokens.md): ``len(store)`` documents,
    ``store[i]`` a read-only NumPy view of document i."""

    def __init__(self, spec):
        self._s = require_extension("stoker.TokenStore").TokenStore(spec)

    def __len__(self):
        return len(self._s)

    def __getitem__(self, i):
        return self._s.document(i)

    def lengths(self):
        return self._s.lengths()

    def location(self, i):
        return self._s.location(i)

    num_tokens = property(lambda self: self._s.num_tokens)
    dtype = property(lambda self: self._s.dtype)
    format = property(lambda self: self._s.format)
    files = property(lambda self: list(self._s.files))
    zero_copy = property(lambda self: self._s.zero_copy)


def write_tokens(spec, documents, dtype="uint16", vocab_size=0, shard_tokens=0,
                 column="input_ids", rows_per_batch=1024):
    """Writes an iterable of token-id sequences to ``spec`` (megatron:PREFIX,
    nanogpt:FILE.bin, llmc:DIR/name_%06d.bin, arrow:FILE, parquet:FILE); returns the files."""
    w = require_extension("stoker.write_tokens").TokenWriter(
        spec, dtype=dtype, vocab_size=vocab_size, shard_tokens=shard_tokens, column=column,
        rows_per_batch=rows_per_batch)
    for d in documents:
        w.add(d)
    return list(w.finish())


class TokenPipeline:
    """Iterable of token batches. Each batch is a dict:

    ``input_ids``, ``labels``: [batch_size, seq_len] int32 (or int64). With
    ``layout="window"`` (the default for ``packing="concat"``) both are views of one
    ``window`` array [batch_size, seq_len + 1] (``input_ids = window[:, :-1]``,
    ``labels = window[:, 1:]``: no copy, NumPy or torch); ``layout="separate"`` gives two
    arrays (packing modes always do: a label there is ``ignore_index`` at a document end).
    ``position_ids`` [batch_size, seq_len]: in packing modes, or when ``position_ids=True``;
    ``position_ids=False`` never.
    ``cu_seqlens``: int32 document offsets in the flattened batch (padding is its own run);
    ``max_seqlen``; ``pieces``: int64 [P, 5] (row, corpus, document, offset, length);
    ``sample_ids``: global sample index of each row; ``epochs``: corpus epoch of each row.
    """

    def __init__(self, data, weights=None, seq_len=2048, batch_size=8, packing="concat",
                 seed=0, shuffle=True, drop_last_partial=True, split=(0.0, 1.0),
                 skip_empty=False, cache_dir=None, rank=None, world_size=None, dtype="int32",
                 pad_id=0, ignore_index=-100, vocab_size=0, reset_position_ids=True,
                 threads=1, prefetch=2, output="numpy", device=None, pin_memory=None,
                 layout="window", position_ids=None):
        ext = require_extension("stoker.TokenPipeline")
        if isinstance(data, str):
            data = [data]
        if packing not in _PACKINGS:
            raise bad_argument(f"packing={packing!r} is not one of {', '.join(_PACKINGS)}")
        if output not in ("numpy", "torch"):
            raise bad_argument(f"output={output!r} is not one of 'numpy', 'torch'")
        if dtype not in ("int32", "int64"):
            raise bad_argument(f"dtype={dtype!r} is not one of 'int32', 'int64'")
        if layout not in ("window", "separate"):
            raise bad_argument(f"layout={layout!r} is not one of 'window', 'separate'")
        if position_ids not in (None, True, False):
            raise bad_argument(f"position_ids={position_ids!r} is not None, True or False")
        if device is not None and output != "torch":
            raise bad_argument("device= needs output='torch'")
        rank, world_size = _rank_world(rank, world_size)
        pin = pin_memory if pin_memory is not None else device is not None
        # Pinned batch buffers come from the CUDA runtime's allocator and are recycled with
        # the batches; without a CUDA device (CPU-only torch, no driver) they are plain memory.
        pinned = bool(pin) and _cuda_available()
        self._opts = dict(
            data=list(data), weights=list(weights) if weights is not None else [],
            seq_len=int(seq_len), batch_size=int(batch_size), packing=packing, seed=int(seed),
            shuffle=bool(shuffle), drop_last_partial=bool(drop_last_partial),
            split=[float(split[0]), float(split[1])], skip_empty=bool(skip_empty),
            cache_dir="" if cache_dir is None else str(cache_dir), rank=rank,
            world_size=world_size, dtype=dtype, pad_id=int(pad_id),
            ignore_index=int(ignore_index), vocab_size=int(vocab_size),
            reset_position_ids=bool(reset_position_ids), threads=int(threads),
            prefetch=int(prefetch), layout=layout, position_ids=position_ids, pinned=pinned)
        self._p = ext.TokenPipeline(self._opts)
        self._output = output
        self._device = device
        self._pinned = pinned  # the buffers are pinned already: no pin_memory() copy
        self._inflight = collections.deque()
        self.rank, self.world_size = rank, world_size
        self.batch_size, self.seq_len = int(batch_size), int(seq_len)

    # -- sizes
    @property
    def samples_per_epoch(self):
        return self._p.samples_per_epoch

    @property
    def steps_per_epoch(self):
        """Steps every rank takes per pass: samples_per_epoch // (world_size * batch_size)."""
        return self._p.steps_per_epoch

    def __len__(self):
        return self.steps_per_epoch

    # -- batches
    def next_batch(self):
        """The next batch of this rank (the stream does not end)."""
        if self._output == "numpy":
            return self._p.next("numpy")
        return self._to_torch(self._p.next("dlpack"))

    def _to_torch(self, b):
        import torch
        from torch.utils.dlpack import from_dlpack

        out, host = {}, []
        for k, v in b.items():
            if type(v).__name__ == "PyCapsule":
                t = from_dlpack(v)
                if self._device is not None:
                    # One copy per array (the window once, not input_ids and labels).
                    host.append(t)
                    t = t.to(self._device, non_blocking=self._pinned)
                out[k] = t
            else:
                out[k] = v
        if host and self._pinned:
            # The pinned buffers return to the pipeline's pool when their tensors die: keep
            # them until their asynchronous copies are done.
            ev = torch.cuda.Event()
            ev.record()
            self._inflight.append((ev, host))
            while self._inflight and (len(self._inflight) > 8 or self._inflight[0][0].query()):
                self._inflight.popleft()[0].synchronize()
        if "window" in out:
            w = out["window"]
            out["input_ids"] = w[:, :-1]
            out["labels"] = w[:, 1:]
        return out

    def __iter__(self):
        """One pass: steps_per_epoch batches, continuing from the current position. With a
        device, batch k+1's copy is started before batch k is handed out."""
        n = self.steps_per_epoch
        if self._device is None:
            for _ in range(n):
                yield self.next_batch()
            return
        ahead = self.next_batch() if n > 0 else None
        for i in range(n):
            cur = ahead
            ahead = self.next_batch() if i + 1 < n else None
            yield cur

    # -- resumption
    def state_dict(self):
        """(epoch, samples consumed, seed, blend state): load it on any world size. Taken
        between steps, it counts the batches handed out (not those prefetched)."""
        s = dict(self._p.state())
        s["version"] = _STATE_VERSION
        s["world_size"] = self.world_size
        s["batch_size"] = self.batch_size
        return s

    def load_state_dict(self, state):
        if state.get("version", _STATE_VERSION) != _STATE_VERSION:
            raise bad_argument(f"token pipeline state version {state.get('version')} is not "
                               f"{_STATE_VERSION}")
        self._p.restore(state)

    def set_consumed_samples(self, consumed_samples):
        """Megatron-style resume: continue after `consumed_samples` global samples."""
        self._p.seek_samples(int(consumed_samples))

    def stats(self):
        return self._p.stats()


def _cuda_available():
    try:
        import torch
    except ImportError:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver install: treat as CPU-only
        return False


def blend_indices(weights, size):
    """Megatron BlendedDataset's (dataset_index, dataset_sample_index) for `size` samples."""
    return require_extension("stoker.blend_indices").blend_indices(list(weights), int(size))
