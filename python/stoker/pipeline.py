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

import difflib
import inspect

from ._errors import _ext, bad_argument, require_extension

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# The engine's options come from one table (src/pipeline/options_schema.cc, bound as
# _stoker.option_schema()): their names, defaults, checks and docs are the CLI's. These are
# the binding's own arguments, beside them.
_BINDING_ARGS = {
    "format": (None, 'adds the "fmt:" prefix to source (tfrecord, lmdb, hdf5, parquet, wds, folder)'),
    "output": ("numpy", '"numpy" or "torch" (zero-copy tensors through DLPack)'),
    "device": (None, "None, or a CUDA device: batches arrive there as CUDA tensors (implies "
                     "output=\"torch\"): decoded on the GPU when gpu_decode says so (docs/gpu.md), "
                     "else copied asynchronously on a side stream from pinned memory"),
    "pin_memory": ("auto", '"auto" (when device is CUDA), True or False'),
    "keys": (False, 'also yield "key": the sample keys (a list of str)'),
}


def option_schema():
    """The pipeline options table: one dict per option (name, type, default, doc, range,
    auto, choices, cli flag and aliases), the same table the CLI and docs/options.md use."""
    return require_extension("option_schema").option_schema()


# Engine rows the binding spells itself: `device` is the binding's torch device argument
# (its type goes to the engine's `device` row).
_BOUND_ROWS = ("data", "device")


def _engine_options():
    return [row for row in option_schema() if row["name"] not in _BOUND_ROWS]

_STATE_VERSION = 2
# What must match for a saved state to resume exactly: the epoch's global order depends on
# these and on nothing else (not on the world size, rank, batch size or thread count).
_STATE_KEYS = ("seed", "shuffle", "shuffle_buffer", "dataset_size", "dataset_fingerprint")


def _choice(name, value, choices):
    if value not in choices:
        raise bad_argument(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}")
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


def _library_candidates(prefix, wheel_dirs, fallbacks):
    """Files named prefix*.so* in torch's lib folder, then in each of `wheel_dirs` (a tuple
    of path parts, or several) under each entry of sys.path (the nvidia-* wheels:
    nvidia/<lib>/lib for CUDA 12, nvidia/cu13/lib for CUDA 13), then the bare or absolute
    `fallbacks` for the dynamic loader."""
    if wheel_dirs and isinstance(wheel_dirs[0], str):
        wheel_dirs = (wheel_dirs,)
    dirs = []
    torch = sys.modules.get("torch")
    if torch is not None:
        dirs.append(os.path.join(os.path.dirname(torch.__file__), "lib"))
    dirs += [os.path.join(p, *w) for w in wheel_dirs for p in sys.path]
    cands = []
    for d in dirs:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        cands += [os.path.join(d, n) for n in names if n.startswith(prefix) and ".so" in n]
    return cands + list(fallbacks)


def _toolkit_libs(*names):
    """Absolute paths in the CUDA toolkit's lib folders ($CUDA_HOME, /usr/local/cuda), which
    the dynamic loader's cache often lacks."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    return tuple(os.path.join(r, "lib64", n) for r in roots if r for n in names)


def _cuda_runtime_candidates():
    """libcudart files to try for pinned memory: torch's own first (one runtime for both)."""
    return _library_candidates("libcudart", (("nvidia", "cuda_runtime", "lib"), ("nvidia", "cu13", "lib")),
                               ("libcudart.so.13", "libcudart.so.12", "libcudart.so", "libcudart.so.11.0")
                               + _toolkit_libs("libcudart.so.13", "libcudart.so.12"))


def _nvjpeg_candidates():
    """libnvjpeg files to try for GPU decode: torch's, the nvidia-nvjpeg wheel's (CUDA 12 or
    13 layout), torchvision's bundled copy (torchvision.libs), then the system's (the CUDA
    toolkit)."""
    return _library_candidates("libnvjpeg", (("nvidia", "nvjpeg", "lib"), ("nvidia", "cu13", "lib"),
                                             ("torchvision.libs",)),
                               ("libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so.11", "libnvjpeg.so")
                               + _toolkit_libs("libnvjpeg.so.13", "libnvjpeg.so.12"))


def gpu_decode_available():
    """(available, reason): whether GPU decode (CUDA driver + nvJPEG) can be loaded here."""
    ext = require_extension("gpu decode")
    return tuple(ext.gpu_path_status(_nvjpeg_candidates()))


# The profiler range around each wait for a batch (see Pipeline._profiled); the doctor
# (src/telemetry/trace.cc) counts it as data wait.
PROFILER_RANGE = "stoker.Pipeline.__next__"

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

    ``Pipeline(source, **options)``: ``source`` is a folder (ImageFolder layout), shards
    (train-{000..099}.tar) or "fmt:path"; the options are those of ``stoker bench
    pipeline`` (same names, defaults and checks; see docs/options.md or
    ``stoker.pipeline.option_schema()``), listed below.

    Each batch is a dict: "image", "label" (int64), "index" (int64 dataset indices), or for
    decode="raw" "data" (uint8, all samples back to back) and "offsets" (N+1 int64).
    """

    def __init__(self, source, *, format=None, output="numpy", device=None, pin_memory="auto",
                 keys=False, **options):
        ext = require_extension("stoker.Pipeline")
        names = [row["name"] for row in _engine_options()]
        for k in options:
            if k not in names:
                close = difflib.get_close_matches(k, names + list(_BINDING_ARGS), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise TypeError(f"Pipeline() got an unexpected keyword argument {k!r}{hint}")
        if isinstance(source, os.PathLike):
            source = os.fspath(source)
        if not isinstance(source, str) or not source:
            raise bad_argument(f"source must be a non-empty path or dataset spec, got {source!r}")
        if format is not None:
            if not isinstance(format, str) or not format:
                raise bad_argument(f"format must be a format name, got {format!r}")
            source = f"{format}:{source}"
        _choice("output", output, ("numpy", "torch"))
        _choice("pin_memory", pin_memory, ("auto", True, False))

        rank = options.pop("rank", None)
        world_size = options.pop("world_size", None)
        rank = None if rank == "auto" else rank
        world_size = None if world_size == "auto" else world_size
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
                # torch reports a page-locked pointer as pinned (is_pinned(), and the
                # non_blocking copy path that checks it) only once it has initialised CUDA
                # itself: measured on an H200 (torch 2.11), is_pinned() was False before
                # torch.cuda.init() and True after, for the same kind of buffer.
                if self._torch is not None and self._torch.cuda.is_available():
                    self._torch.cuda.init()
            elif pin_memory is True:
                raise bad_argument(f"pin_memory=True: {why}")
            else:
                warnings.warn(f"stoker.Pipeline: pinned memory unavailable ({why}); copies to "
                              f"{self._device} will be synchronous", RuntimeWarning, stacklevel=2)

        # A Delta table is read at one version per epoch (stoker/delta.py), a Kafka topic as
        # one pinned window of offsets per epoch (stoker/kafka.py); the source's choice is
        # recorded in state_dict() (under its name), and with follow= the engine is re-opened
        # when the table or topic grows.
        self._source, self._source_key = None, None
        if source.startswith("delta:"):
            from .delta import DeltaSource
            self._source, self._source_key = DeltaSource(source), "delta"
        elif source.startswith("kafka:"):
            from .kafka import KafkaSource
            self._source, self._source_key = KafkaSource(source), "kafka"
        if self._source is not None:
            source = self._source.spec()
        # Names, types and ranges are checked by the engine's options table (the messages
        # name the option, as the CLI's do).
        opts = {"data": source, **options, "rank": rank, "world_size": world_size,
                "pinned": pinned, "device": "cuda" if self._device is not None else "cpu"}
        self._engine_opts = opts
        self._p = ext.Pipeline(opts)
        if self._source_key == "kafka":
            self._source.adopt(self._p.kafka)
        self._source_epoch = 0  # the epoch the open snapshot or window was chosen for
        # device=cuda with gpu_decode on/auto: the GPU path (src/gpu/device_pipeline.h).
        self._dev = None
        gpu_decode = options.get("gpu_decode", "auto")
        if self._device is not None and gpu_decode != "off" and self._p.options["decode"] != "raw":
            try:
                # The engine above stays for metadata (sizes, resume, epoch order) and is
                # never iterated; the device pipeline gets its resolved budgets, so the
                # node's core share does not count the idle engine.
                st = self._p.stats()
                dev_opts = {**opts, "device": "cuda"}
                for k, sk in (("cpu_budget", "cpu_budget"), ("memory_budget", "memory_budget_bytes")):
                    if options.get(k) in (None, "auto", 0) and st.get(sk):
                        dev_opts[k] = int(st[sk])
                self._dev = ext.DevicePipeline(dev_opts, self._device.index or 0,
                                               _nvjpeg_candidates())
            except Exception as e:  # noqa: BLE001 -- the engine's errors name the cause
                if gpu_decode == "on":
                    raise
                warnings.warn(f"stoker.Pipeline: GPU decode unavailable ({e}); decoding on the "
                              f"CPU and copying to {self._device}", RuntimeWarning, stacklevel=2)
        # Every option's value (what it resolved to), with what was passed as passed: a dict
        # the extension takes back for an identical pipeline (tests, bench/python_overhead.py).
        self._options = {**self._p.options, **opts}
        self._kind = "dlpack" if output == "torch" else "numpy"
        self._output = output
        self._keys = _bool("keys", keys)
        self._epoch = 0          # the epoch the next iteration runs
        self._resume_consumed = 0  # global samples of the epoch already consumed (load_state_dict)
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
        self._resume_consumed = 0

    def __iter__(self):
        if self._closed:
            raise bad_argument("this Pipeline was closed")
        self._generation += 1
        return self._run(self._generation, self._epoch, self._resume_consumed)

    def _reopen(self, spec):
        self._p.stop()
        self._engine_opts = {**self._engine_opts, "data": spec}
        self._p = _ext.Pipeline(self._engine_opts)
        self._options["data"] = spec

    def _run(self, generation, epoch, consumed):
        self._resume_consumed = 0
        if self._source is not None and consumed == 0 and epoch != self._source_epoch:
            # A new epoch (not a resume inside one): pick up new versions of the table.
            change = self._source.advance()
            self._source_epoch = epoch
            if change == "empty":
                self._end_pass(epoch)
                return
            if change == "changed":
                self._reopen(self._source.spec())
        self._p.resume_epoch(epoch, consumed)
        self._active = [epoch, 0]  # (epoch, batches of this pass handed to the loop)
        n = int(self._p.pass_batches)
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

        if self._dev is not None:
            yield from self._run_device(generation, epoch, consumed, handed_over)
            if not passed and self._generation == generation:
                self._end_pass(epoch)
            return
        copier = _CudaCopier(self._torch, self._device) if self._device is not None else None
        try:
            if copier is None:
                while True:
                    b = self._profiled(self._next, generation)
                    if b is None:
                        break
                    handed_over()
                    yield b
            else:
                host = self._profiled(self._next, generation)
                pending = copier.issue(host) if host is not None else None
                while pending is not None:
                    host = self._profiled(self._next, generation)
                    ready = pending
                    pending = copier.issue(host) if host is not None else None
                    out = copier.hand_over(ready)
                    handed_over()
                    yield out
            if not passed and self._generation == generation:  # fewer batches than planned
                self._end_pass(epoch)
        finally:
            if copier is not None:
                copier.drain()

    def _profiled(self, fn, *args):
        """fn(*args), inside a profiler range named PROFILER_RANGE while a PyTorch profiler
        records: the time the training loop waits for a batch, which `stoker doctor` reads
        as data wait, as it reads PyTorch's "enumerate(DataLoader)#..." range. Costs one
        flag check per batch when no profiler runs."""
        t = self._torch
        if t is not None and t.autograd._profiler_enabled():
            with t.autograd.profiler.record_function(PROFILER_RANGE):
                return fn(*args)
        return fn(*args)

    def _run_device(self, generation, epoch, consumed, handed_over):
        """Batches from the GPU path: the current stream waits on each batch's event (no
        host sync); a batch's memory is reused after the work queued on that stream when
        its tensor is freed."""
        torch = self._torch
        self._dev.resume_epoch(epoch, consumed)
        from_dlpack = torch.utils.dlpack.from_dlpack
        while True:
            if generation != self._generation:
                raise RuntimeError("stoker.Pipeline: a newer iteration of this pipeline started; "
                                   "iterate one at a time")
            stream = torch.cuda.current_stream(self._device)
            d = self._profiled(self._dev.next, stream.cuda_stream)
            if d is None:
                return
            out = {"image": from_dlpack(d["image"])}
            for k in ("label", "index"):
                out[k] = torch.from_numpy(d[k]).to(self._device, non_blocking=True)
            handed_over()
            yield out

    def gpu_stats(self):
        """The GPU path's counters (None without it): images per route, CPU fallbacks by
        reason, auto's decision and its reason, host and GPU time per image."""
        return self._dev.stats() if self._dev is not None else None

    def _end_pass(self, epoch):
        if self._epoch == epoch:  # unless set_epoch() chose another one meanwhile
            self._epoch = epoch + 1
        self._resume_consumed = 0
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
        return {"seed": self._options["seed"], "shuffle": self._options["shuffle"],
                # The buffer in effect (shuffle_buffer_mb may bound it for a stream source).
                "shuffle_buffer": self._p.options["shuffle_buffer"],
                # The interleave in effect ([block, cycle]; [0, 1]: one shard after
                # another, what a state saved before this key read).
                "interleave": [self._p.options["interleave"], self._p.options["interleave_cycle"]],
                "dataset_size": self.dataset_size, "dataset_fingerprint": self._p.fingerprint}

    def state_dict(self):
        """Where the data stream stands, as the epoch and the number of samples of its
        global order consumed by all ranks together (every rank returns the same state
        when the ranks step together, as DDP training does). Resuming from it, at this or
        any other world size, batch size or thread count, delivers exactly the samples not
        yet consumed (none repeated, none lost; the tail is split as `balance` says), then
        the following epochs."""
        if self._active is not None:
            epoch, done = self._active
            consumed = int(self._p.consumed_after(done))
        else:
            epoch, consumed = self._epoch, self._resume_consumed
        step = self.world_size * self._options["batch_size"]
        state = {"version": _STATE_VERSION, "epoch": epoch, "consumed": consumed,
                 "batch": consumed // step, "world_size": self.world_size, "rank": self.rank,
                 "batch_size": self._options["batch_size"], **self._identity()}
        if self._source_key == "delta":
            # The snapshot this epoch reads (its files follow from version and since).
            state["delta"] = {**self._source.state(), "epoch": self._source_epoch,
                              "files": (self._p.delta or {}).get("num_files")}
        elif self._source_key == "kafka":
            # The window of offsets this epoch reads, per partition.
            state["kafka"] = {**self._source.state(), "epoch": self._source_epoch}
        return state

    def load_state_dict(self, state):
        """Makes the next iteration continue from `state` (from state_dict(), possibly of a
        run with another world size, batch size or thread count)."""
        if not isinstance(state, dict):
            raise bad_argument(f"state must be a dict from state_dict(), got {type(state).__name__}")
        if "version" in state and state["version"] == 1:
            raise bad_argument("state version 1 was saved by an older stoker, whose ranks took "
                               "contiguous blocks of the epoch; it cannot resume exactly here")
        missing = [k for k in ("version", "epoch", "consumed", *_STATE_KEYS) if k not in state]
        if missing:
            raise bad_argument(f"state is missing {', '.join(missing)}")
        if state["version"] != _STATE_VERSION:
            raise bad_argument(f"state version {state['version']} is not {_STATE_VERSION}")
        if self._source is not None and self._source_key in state:
            # Re-open the snapshot or window the saved epoch read, whatever the table or
            # topic holds now.
            saved = self._source.spec()
            self._source.load(state[self._source_key])
            if self._source.spec() != saved:
                self._reopen(self._source.spec())
            self._source_epoch = int(state[self._source_key].get("epoch", state["epoch"]))
        mine = self._identity()
        diff = [f"{k}: saved {state[k]!r}, now {mine[k]!r}" for k in _STATE_KEYS
                if state[k] != mine[k]]
        saved_il = list(state.get("interleave", [0, 1]))
        if saved_il != mine["interleave"]:
            diff.append(f"interleave: saved {saved_il!r}, now {mine['interleave']!r} (give "
                        f"interleave={saved_il[0]}, interleave_cycle={saved_il[1]} to resume it)")
        if diff:
            raise bad_argument("state is from a different dataset or configuration, so resuming "
                               "would not be exact: " + "; ".join(diff))
        epoch = _int("state['epoch']", state["epoch"], 0)
        consumed = _int("state['consumed']", state["consumed"], 0)
        if consumed > self.dataset_size:
            raise bad_argument(f"state['consumed'] = {consumed} is past the epoch's "
                               f"{self.dataset_size} samples")
        self._generation += 1  # an iteration in progress ends
        self._active = None
        self._epoch, self._resume_consumed = epoch, consumed

    # -- introspection ---------------------------------------------------------------

    def stats(self):
        """The engine's metrics (per stage busy/wait, bottleneck, consumer wait, budgets,
        skips): the same keys and values as ``stoker bench pipeline --json``."""
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


def _option_doc_lines(rows):
    lines = []
    width = 18
    for row in rows:
        default = row["default"]
        head = f"{row['name']}={default!r}"
        text = row["doc"]
        if row["range"] and row["type"] != "enum":
            text += f"; {row['range']}"
        if row["choices"]:
            text += "; one of " + ", ".join(repr(c) for c in row["choices"])
        if row["auto"]:
            text += f"; auto: {row['auto']}"
        cli = row["cli"]
        if row["type"] == "bool":
            cli = f"--no-{cli[2:]}" if default is True else cli
        if row["aliases"]:
            cli += ", also " + ", ".join(row["aliases"])
        text += f" (CLI {cli})"
        lines.append(f"    {head}")
        for chunk in _wrap(text, 88 - width):
            lines.append(" " * width + chunk)
    return lines


def _wrap(text, width):
    import textwrap
    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]


def _install_signature_and_doc():
    """Pipeline's signature and docstring from the options table (when the engine is built)."""
    if _ext is None:
        return
    rows = [row for row in _ext.option_schema() if row["name"] not in _BOUND_ROWS]
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
              inspect.Parameter("source", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for name, (default, _) in _BINDING_ARGS.items():
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default))
    for row in rows:
        params.append(inspect.Parameter(row["name"], inspect.Parameter.KEYWORD_ONLY,
                                        default=row["default"]))
    Pipeline.__init__.__signature__ = inspect.Signature(params)
    groups = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row)
    doc = [Pipeline.__doc__.rstrip(), "", "    Options (from the engine's options table):"]
    for group, grows in groups.items():
        doc += ["", f"    -- {group}"] + _option_doc_lines(grows)
    doc += ["", "    Arguments of the Python binding:", ""]
    for name, (default, text) in _BINDING_ARGS.items():
        doc.append(f"    {name}={default!r}")
        doc += [" " * 18 + chunk for chunk in _wrap(text, 70)]
    Pipeline.__doc__ = "\n".join(doc) + "\n"


_install_signature_and_doc()
