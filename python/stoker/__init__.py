"""stoker: keeps GPUs fed.

Three entry points for PyTorch users:

* ``stoker.Pipeline(...)`` -- the C++ input pipeline as an iterable that replaces a
  DataLoader: batches arrive as NumPy arrays or zero-copy PyTorch tensors (DLPack), in
  pinned memory with an optional asynchronous copy to the GPU.
* ``stoker.watch(loader)`` -- wraps any DataLoader or iterable in a training loop and
  measures how long the loop waits for data versus how long it computes, with the
  doctor's verdict.
* ``stoker.tune_dataloader(dataset, batch_size)`` -- sweeps DataLoader settings on your
  own Dataset, recommends the cheapest one within a few percent of the best, and warns
  about the hazards it can detect.

The engine lives in the compiled extension ``stoker._stoker``; ``watch`` and
``tune_dataloader`` are pure Python and work without it.
"""

from ._errors import (  # noqa: F401
    CancelledError,
    CorruptDataError,
    EndOfStreamError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    StokerError,
    StokerIOError,
    UnimplementedError,
    extension_available,
    extension_error,
)
from .pipeline import Pipeline, resolve_rank  # noqa: F401
from .tokens import TokenPipeline, TokenStore, blend_indices, write_tokens  # noqa: F401
from .tune import TuneResult, tune_dataloader  # noqa: F401
from .verdict import Verdict, diagnose_steps  # noqa: F401
from .watch import Watch, watch  # noqa: F401

__version__ = "0.1.0"

__all__ = [
    "Pipeline",
    "TokenPipeline",
    "TokenStore",
    "write_tokens",
    "blend_indices",
    "watch",
    "Watch",
    "tune_dataloader",
    "TuneResult",
    "diagnose_steps",
    "Verdict",
    "resolve_rank",
    "StokerError",
    "InvalidArgumentError",
    "NotFoundError",
    "StokerIOError",
    "CorruptDataError",
    "UnimplementedError",
    "CancelledError",
    "EndOfStreamError",
    "InternalError",
]
