"""stoker.Pipeline: the C++ input pipeline as a drop-in for a PyTorch DataLoader.

    loader = stoker.Pipeline("/data/imagenet/train", batch_size=256, output="torch",
                             device="cuda")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            images, labels = batch["image"], batch["label"]

Everything per sample happens in C++ threads; Python sees one dict per batch. The arrays
view the engine's batch buffer directly (no copy); the buffer returns to the engine's pool
when the last array or tensor viewing it is released.
"""

import collections
import os
import sys
import warnings

from ._errors import bad_argument, require_extension

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_STATE_VERSION = 1
# Options that must match for a saved state to resume exactly.
_STATE_KEYS = ("seed", "batch_size", "world_size", "rank", "shuffle", "drop_last", "dataset_size",
               "samples_per_epoch")


def _choice(name, value, choices):
    if value not in choices:
        raise bad_argument(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}")
    return value


def _auto_int(name, value, minimum):
    """'auto' (or None) -> 0, else an int >= minimum."""
    if value is None or value == "auto":
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_argument(f"{name} must be 'auto' or an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise bad_argument(f"{name} must be 'auto' or an integer >= {minimum}, got {value}")
    return value


def _int(name, value, minimum=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_argument(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise bad_argument(f"{name} must be >= {minimum}, got {value}")
    return value


def _bool(name, value):
    if not isinstance(value, bool):
        raise bad_argument(f"{name} must be True or False, got {value!r}")
    return value


def _floats(name, value, n, lo=None, hi=None, positive=False):
    try:
        vals = [float(v) for v in value]
    except (TypeError, ValueError):
        raise bad_argument(f"{name} must be {n} numbers, got {value!r}") from None
    if len(vals) != n:
        raise bad_argument(f"{name} must be {n} numbers, got {len(vals)}")
    for v in vals:
        if positive and not v > 0:
            raise bad_argument(f"{name} values must be > 0, got {value!r}")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise bad_argument(f"{name} values must be in [{lo}, {hi}], got {value!r}")
    return vals


def _dist_rank():
    """(rank, world_size) from torch.distributed when it is initialized, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except (AttributeError, RuntimeError):
        return None
    return None


def _cuda_runtime_candidates():
    """libcudart files to try for pinned memory: torch's own first (one runtime for both)."""
    cands = []
    torch = sys.modules.get("torch")
    dirs = []
    if torch is not None:
        dirs.append(os.path.join(os.path.dirname(torch.__file__), "lib"))
    for p in sys.path:
        dirs.append(os.path.join(p, "nvidia", "cuda_runtime", "lib"))
    for d in dirs:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        cands += [os.path.join(d, n) for n in names if n.startswith("libcudart") and ".so" in n]
    return cands + ["libcudart.so", "libcudart.so.12", "libcudart.so.11.0"]


def pinned_memory_available():
    """(available, reason): whether the engine can allocate pinned batch buffers here."""
    ext = require_extension("pinned memory")
    ext.set_cuda_runtime_candidates(_cuda_runtime_candidates())
    ok, why = ext.pinned_memory_status()
    return ok, why


def resolve_rank(rank=None, world_size=None):
    """The rank and world size a Pipeline would use: explicit arguments, then
    torch.distributed (when initialized), then RANK/WORLD_SIZE, OMPI_*, SLURM_*, else 0/1."""
    ext = require_extension("resolve_rank")
    if rank is None and world_size is None:
        d = _dist_rank()
        if d is not None:
            return {"rank": d[0], "world_size": d[1], "source": "torch.distributed"}
    return ext.resolve_rank(-1 if rank is None else rank, -1 if world_size is None else world_size)


class _CudaCopier:
    """Copies host batches to a CUDA device on a side stream, one batch ahead.

    The copy of batch i+1 is issued before batch i is handed to the training step, so it
    overlaps the step. The consumer's stream waits on an event (no host blocking); host
    buffers are kept until their copy's event has completed, then released to the engine.
    """

    def __init__(self, torch, device):
        self.torch = torch
        self.device = device
        self.stream = torch.cuda.Stream(device=device)
        self.inflight = collections.deque()  # (event, host batch) not yet known complete

    def issue(self, host):
        torch = self.torch
        with torch.cuda.stream(self.stream):
            out = {}
            for k, v in host.items():
                out[k] = v.to(self.device, non_blocking=True) if torch.is_tensor(v) else v
            ev = torch.cuda.Event()
            ev.record(self.stream)
        self.inflight.append((ev, host))
        return out, ev

    def hand_over(self, item):
        out, ev = item
        cur = self.torch.cuda.current_stream(self.device)
        cur.wait_event(ev)
        for v in out.values():
            if self.torch.is_tensor(v):
                v.record_stream(cur)  # the caching allocator must not reuse it early
        while self.inflight and self.inflight[0][0].query():
            self.inflight.popleft()
        return out

    def drain(self):
        while self.inflight:
            ev, _ = self.inflight.popleft()
            ev.synchronize()


class Pipeline:
    """The stoker engine as an iterable of batches (a DataLoader replacement).

    Arguments mirror ``stoker bench pipeline``'s flags:

    source            dataset: a folder (ImageFolder layout), shards (train-{000..099}.tar),
                      or "fmt:path"; ``format=`` adds the "fmt:" prefix.
    decode            "train" (RandomResizedCrop + flip + normalize), "val" (Resize +
                      CenterCrop + normalize) or "raw" (the bytes of one field, no decode).
    image_size, val_resize, layout ("float": normalized float32 [N,3,H,W]; "uint8":
                      [N,H,W,3]), mean/std (0..1 units, as torchvision), scale/ratio
                      (RandomResizedCrop), flip_prob, dct_scale, region_decode, raw_field,
                      exif_orientation (JPEGs in their EXIF orientation; False, as
                      torchvision's PIL loader).
    batch_size, drop_last, shuffle, seed, shuffle_buffer.
    threads, prefetch "auto" (the autotuner) or a number; fused, memory_budget (bytes),
                      cpu_budget (cores).
    rank, world_size  default: torch.distributed when initialized, else RANK/WORLD_SIZE,
                      OMPI_*, SLURM_*, else 0/1. Each rank gets a disjoint shard of equal
                      length; balance="pad" repeats samples to equalize, "drop" drops.
    on_error          "fail" (raise, naming the file and sample) or "skip" (count them;
                      see stats()["skipped_items"]).
    output            "numpy" or "torch" (zero-copy tensors through DLPack).
    device            None, or a CUDA device: batches are copied there asynchronously on a
                      side stream from pinned memory (implies output="torch").
    pin_memory        "auto" (when device is CUDA), True or False.
    keys              also yield "key": the sample keys (a list of str).

    Each batch is a dict: "image", "label" (int64), "index" (int64 dataset indices), or for
    decode="raw" "data" (uint8, all samples back to back) and "offsets" (N+1 int64).
    """

    def __init__(self, source, *, format=None, decode="train", image_size=224, val_resize=256,
                 layout="float", mean=IMAGENET_MEAN, std=IMAGENET_STD, scale=(0.08, 1.0),
                 ratio=(3.0 / 4.0, 4.0 / 3.0), flip_prob=0.5, dct_scale=True,
                 region_decode=True, exif_orientation=False, raw_field="", batch_size=256, drop_last=False,
                 shuffle=True, seed=0, shuffle_buffer=8192, threads="auto", prefetch="auto",
                 fused=False, memory_budget="auto", cpu_budget="auto", rank=None,
                 world_size=None, balance="pad", on_error="fail", skip_bad_shards=None,
                 output="numpy", device=None, pin_memory="auto", keys=False):
        ext = require_extension("stoker.Pipeline")
        if isinstance(source, os.PathLike):
            source = os.fspath(source)
        if not isinstance(source, str) or not source:
            raise bad_argument(f"source must be a non-empty path or dataset spec, got {source!r}")
        if format is not None:
            if not isinstance(format, str) or not format:
                raise bad_argument(f"format must be a format name, got {format!r}")
            source = f"{format}:{source}"
        _choice("decode", decode, ("train", "val", "raw"))
        _choice("layout", layout, ("float", "uint8"))
        _choice("balance", balance, ("pad", "drop"))
        _choice("on_error", on_error, ("fail", "skip"))
        _choice("output", output, ("numpy", "torch"))
        _choice("pin_memory", pin_memory, ("auto", True, False))
        mean = _floats("mean", mean, 3, 0.0, 1.0)
        std = _floats("std", std, 3, positive=True)
        if any(v > 1.0 for v in std):
            raise bad_argument(f"std is in 0..1 units (as torchvision's Normalize), got {std}")
        scale = _floats("scale", scale, 2, 0.0, 1.0)
        ratio = _floats("ratio", ratio, 2, positive=True)
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise bad_argument(f"scale and ratio must be (min, max), got {scale}, {ratio}")
        flip_prob = float(flip_prob)
        if not 0.0 <= flip_prob <= 1.0:
            raise bad_argument(f"flip_prob must be in [0, 1], got {flip_prob}")
        if not isinstance(raw_field, str):
            raise bad_argument(f"raw_field must be a field name, got {raw_field!r}")
        if skip_bad_shards is None:
            skip_bad_shards = on_error == "skip"
        if seed is None or isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise bad_argument(f"seed must be a non-negative integer, got {seed!r}")

        if rank is None and world_size is None:
            d = _dist_rank()
            if d is not None:
                rank, world_size = d
        if (rank is None) != (world_size is None):
            raise bad_argument("give both rank and world_size, or neither")
        if rank is not None:
            _int("world_size", world_size, 1)
            _int("rank", rank, 0)
            if rank >= world_size:
                raise bad_argument(f"rank {rank} is not below world_size {world_size}")

        self._torch = None
        self._device = None
        if device is not None:
            torch = self._import_torch("device=")
            self._device = torch.device(device)
            if self._device.type == "cpu":
                self._device = None
            elif self._device.type != "cuda":
                raise bad_argument(f"device must be a CUDA device or 'cpu', got {device!r}")
            elif not torch.cuda.is_available():
                raise bad_argument(f"device={device!r} but torch sees no CUDA device")
            output = "torch"
        if output == "torch":
            self._torch = self._import_torch("output='torch'")

        pinned = False
        if pin_memory is True or (pin_memory == "auto" and self._device is not None):
            ok, why = pinned_memory_available()
            if ok:
                pinned = True
            elif pin_memory is True:
                raise bad_argument(f"pin_memory=True: {why}")
            else:
                warnings.warn(f"stoker.Pipeline: pinned memory unavailable ({why}); copies to "
                              f"{self._device} will be synchronous", RuntimeWarning, stacklevel=2)

        opts = {
            "data": source, "skip_bad_shards": _bool("skip_bad_shards", skip_bad_shards),
            "decode": decode, "image_size": _int("image_size", image_size, 1),
            "val_resize": _int("val_resize", val_resize, 1), "layout": layout,
            "mean": [m * 255.0 for m in mean], "std": [s * 255.0 for s in std],
            "scale": scale, "ratio": ratio, "flip_prob": flip_prob,
            "dct_scale": _bool("dct_scale", dct_scale),
            "region_decode": _bool("region_decode", region_decode),
            "exif_orientation": _bool("exif_orientation", exif_orientation),
            "raw_field": raw_field,
            "batch_size": _int("batch_size", batch_size, 1),
            "drop_last": _bool("drop_last", drop_last), "shuffle": _bool("shuffle", shuffle),
            "seed": seed, "shuffle_buffer": _int("shuffle_buffer", shuffle_buffer, 1),
            "threads": _auto_int("threads", threads, 1),
            "prefetch": _auto_int("prefetch", prefetch, 1), "fused": _bool("fused", fused),
            "memory_budget": _auto_int("memory_budget", memory_budget, 1),
            "cpu_budget": _auto_int("cpu_budget", cpu_budget, 1),
            "rank": -1 if rank is None else rank,
            "world_size": -1 if world_size is None else world_size,
            "balance": balance, "on_error": on_error, "pinned": pinned,
        }
        self._options = opts
        self._p = ext.Pipeline(opts)
        self._kind = "dlpack" if output == "torch" else "numpy"
        self._output = output
        self._keys = _bool("keys", keys)
        self._epoch = 0          # the epoch the next iteration runs
        self._resume_batch = 0   # first batch of the next iteration (load_state_dict)
        self._active = None      # (epoch, batches yielded) of the iteration in progress
        self._generation = 0
        self._closed = False
        info = self._p.rank_info
        self.rank, self.world_size = info["rank"], info["world_size"]

    @staticmethod
    def _import_torch(why):
        try:
            import torch
            import torch.utils.dlpack  # noqa: F401
        except ImportError as e:
            raise bad_argument(f"{why} needs PyTorch, which could not be imported: {e}") from None
        return torch

    # -- the DataLoader surface ------------------------------------------------------

    def __len__(self):
        """Batches per epoch for this rank."""
        return int(self._p.batches_per_epoch)

    @property
    def batch_size(self):
        return self._options["batch_size"]

    @property
    def samples_per_epoch(self):
        return int(self._p.samples_per_epoch)

    @property
    def dataset_size(self):
        return int(self._p.dataset_size)

    @property
    def epoch(self):
        """The epoch the next iteration will run."""
        return self._epoch

    @property
    def pinned(self):
        """True when batch buffers are pinned (page-locked) host memory."""
        return bool(self._p.pinned)

    def set_epoch(self, epoch):
        """Selects the epoch the next iteration runs (its shuffle and augmentation).

        As with DistributedSampler.set_epoch; without calls, epochs advance by themselves
        after each complete pass."""
        self._epoch = _int("epoch", epoch, 0)
        self._resume_batch = 0

    def __iter__(self):
        if self._closed:
            raise bad_argument("this Pipeline was closed")
        self._generation += 1
        return self._run(self._generation, self._epoch, self._resume_batch)

    def _run(self, generation, epoch, start):
        self._resume_batch = 0
        self._p.start_epoch(epoch, start)
        self._active = [epoch, start]
        n = len(self)
        passed = False

        def handed_over():
            # The pass is complete once the epoch's last batch is handed to the loop: the
            # state then points at the next epoch even if the loop never asks for more
            # (zip with another loader, itertools.islice, a break after the last batch).
            nonlocal passed
            if self._active is not None and self._generation == generation:
                self._active[1] += 1
                if self._active[1] >= n:
                    passed = True
                    self._end_pass(epoch)

        copier = _CudaCopier(self._torch, self._device) if self._device is not None else None
        try:
            if copier is None:
                while True:
                    b = self._next(generation)
                    if b is None:
                        break
                    handed_over()
                    yield b
            else:
                host = self._next(generation)
                pending = copier.issue(host) if host is not None else None
                while pending is not None:
                    host = self._next(generation)
                    ready = pending
                    pending = copier.issue(host) if host is not None else None
                    out = copier.hand_over(ready)
                    handed_over()
                    yield out
            if not passed and self._generation == generation:  # fewer batches than len()
                self._end_pass(epoch)
        finally:
            if copier is not None:
                copier.drain()

    def _end_pass(self, epoch):
        if self._epoch == epoch:  # unless set_epoch() chose another one meanwhile
            self._epoch = epoch + 1
        self._resume_batch = 0
        self._active = None

    def _next(self, generation):
        if generation != self._generation:
            raise RuntimeError("stoker.Pipeline: a newer iteration of this pipeline started; "
                               "iterate one at a time")
        d = self._p.next(self._kind, self._keys)
        if d is None:
            return None
        del d["_epoch"], d["_batch"], d["_ptr"]
        if self._torch is not None:
            from_dlpack = self._torch.utils.dlpack.from_dlpack
            for k, v in d.items():
                if k != "key":
                    d[k] = from_dlpack(v)
        return d

    # -- resume ----------------------------------------------------------------------

    def _identity(self):
        return {"seed": self._options["seed"], "batch_size": self._options["batch_size"],
                "world_size": self.world_size, "rank": self.rank,
                "shuffle": self._options["shuffle"], "drop_last": self._options["drop_last"],
                "dataset_size": self.dataset_size, "samples_per_epoch": self.samples_per_epoch}

    def state_dict(self):
        """Where the data stream stands: resuming from it delivers exactly the batches not
        yet yielded (none repeated, none lost), then the following epochs."""
        if self._active is not None:
            epoch, batch = self._active
        else:
            epoch, batch = self._epoch, self._resume_batch
        return {"version": _STATE_VERSION, "epoch": epoch, "batch": batch, **self._identity()}

    def load_state_dict(self, state):
        """Makes the next iteration continue from `state` (from state_dict())."""
        if not isinstance(state, dict):
            raise bad_argument(f"state must be a dict from state_dict(), got {type(state).__name__}")
        missing = [k for k in ("version", "epoch", "batch", *_STATE_KEYS) if k not in state]
        if missing:
            raise bad_argument(f"state is missing {', '.join(missing)}")
        if state["version"] != _STATE_VERSION:
            raise bad_argument(f"state version {state['version']} is not {_STATE_VERSION}")
        mine = self._identity()
        diff = [f"{k}: saved {state[k]!r}, now {mine[k]!r}" for k in _STATE_KEYS
                if state[k] != mine[k]]
        if diff:
            raise bad_argument("state is from a different configuration, so resuming would not "
                               "be exact: " + "; ".join(diff))
        epoch = _int("state['epoch']", state["epoch"], 0)
        batch = _int("state['batch']", state["batch"], 0)
        if batch > len(self):
            raise bad_argument(f"state['batch'] = {batch} is past the epoch's {len(self)} batches")
        self._generation += 1  # an iteration in progress ends
        self._active = None
        self._epoch, self._resume_batch = epoch, batch

    # -- introspection ---------------------------------------------------------------

    def stats(self):
        """The engine's metrics (per stage busy/wait, bottleneck, consumer wait, skips)."""
        return self._p.stats()

    def epoch_order(self, epoch):
        """Dataset indices of this rank's epoch `epoch`, in delivery order (int64 array)."""
        return self._p.epoch_order(_int("epoch", epoch, 0))

    def close(self):
        """Stops the engine's threads. Batches already yielded stay valid."""
        if not self._closed:
            self._closed = True
            self._generation += 1
            self._p.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        o = self._options
        return (f"stoker.Pipeline({o['data']!r}, decode={o['decode']!r}, batch_size="
                f"{o['batch_size']}, rank={self.rank}/{self.world_size}, output={self._output!r}"
                f"{', device=' + repr(str(self._device)) if self._device else ''})")
