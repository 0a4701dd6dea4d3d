"""Exception classes.

The classes are created by the C++ extension (python/src/errors.cc), which is the one
place where the core's Status errors are translated; the message is the core's message,
unchanged, and ``.code`` names the status code. When the extension is not built, the same
hierarchy is defined here so that pure-Python parts (watch, tune_dataloader) raise the same
types.
"""


def _preload_pyarrow_libs(error):
    """Loads the installed pyarrow's C++ libraries (libarrow, libparquet) into the process.

    The extension finds them through its run-time path relative to itself
    (``$ORIGIN/../pyarrow``: pyarrow installed next to stoker in the same site-packages).
    When pyarrow lives in another directory of sys.path (a --system-site-packages venv, the
    user site, PYTHONPATH), that path misses; loading pyarrow's own copies first, by their
    soname, lets the extension's import bind to them. Only the soname the loader asked for
    (``libarrow.so.2000`` in ``error``): another pyarrow release is not loaded. False when
    pyarrow is not importable or has other sonames."""
    import re

    m = re.search(r"lib(?:arrow|parquet)\.so\.(\d+)", str(error))
    if not m:
        return False
    try:
        import ctypes
        import os

        import pyarrow
    except ImportError:
        return False
    for d in pyarrow.get_library_dirs():
        libs = [os.path.join(d, f"lib{n}.so.{m.group(1)}") for n in ("arrow", "parquet")]
        if all(os.path.exists(p) for p in libs):
            for p in libs:  # libarrow first: libparquet needs it
                ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL)
            return True
    return False


def _pyarrow_requirement():
    """The pyarrow requirement of the installed distribution (its libraries' soname is the
    one the extension was linked with), e.g. 'pyarrow<21,>=20'."""
    try:
        from importlib.metadata import requires

        for r in requires("stoker") or []:
            if r.startswith("pyarrow"):
                return r.split(";")[0].strip()
    except Exception:  # not installed (a build tree), or no metadata
        pass
    return "pyarrow<21,>=20"


def _missing_pyarrow_error(e):
    """ImportError for an extension whose pyarrow libraries were not found."""
    try:
        import pyarrow

        found = f"pyarrow {pyarrow.__version__} is installed in {pyarrow.__path__[0]}, "
    except ImportError:
        found = "pyarrow is not installed, "
    return ImportError(
        f"{e}: stoker was built with the Parquet format and object storage, which use the C++ "
        f"libraries of one pyarrow release; {found}install that release "
        f"(pip install '{_pyarrow_requirement()}') into the environment of stoker")


try:
    from . import _stoker as _ext
    _IMPORT_ERROR = None
except ImportError as e:  # pure-Python use: no compiled engine
    _ext = None
    _IMPORT_ERROR = e
    if "libarrow" in str(e) or "libparquet" in str(e):
        # Built with pyarrow's Parquet: the libraries were not found beside the package.
        _IMPORT_ERROR = _missing_pyarrow_error(e)
        if _preload_pyarrow_libs(e):
            try:
                from . import _stoker as _ext
                _IMPORT_ERROR = None
            except ImportError as e2:
                _IMPORT_ERROR = _missing_pyarrow_error(e2)


def _numpy_abi_error():
    """ImportError when the extension cannot handle the installed NumPy, else None."""
    try:
        from ._build_info import PYBIND11_VERSION
    except ImportError:  # the pure-Python sources
        return None
    try:
        import numpy
    except ImportError:
        return None
    pb = tuple(int(x) for x in PYBIND11_VERSION.split(".")[:2] if x.isdigit())
    if int(numpy.__version__.split(".")[0]) >= 2 and len(pb) == 2 and pb < (2, 12):
        return ImportError(
            f"stoker's extension was built with pybind11 {PYBIND11_VERSION}, which predates "
            f"NumPy 2 (pybind11 2.12 added it): with NumPy {numpy.__version__} its batches "
            "would hold wrong values. Install NumPy 1.x (pip install 'numpy<2'), as the "
            "package requires, or rebuild stoker with pybind11 >= 2.12")
    return None


if _ext is not None:
    _e = _numpy_abi_error()
    if _e is not None:
        _ext, _IMPORT_ERROR = None, _e

if _ext is not None:
    StokerError = _ext.StokerError
    InvalidArgumentError = _ext.InvalidArgumentError
    NotFoundError = _ext.NotFoundError
    StokerIOError = _ext.StokerIOError
    CorruptDataError = _ext.CorruptDataError
    UnimplementedError = _ext.UnimplementedError
    CancelledError = _ext.CancelledError
    EndOfStreamError = _ext.EndOfStreamError
    InternalError = _ext.InternalError
    StallError = _ext.StallError
else:

    class StokerError(Exception):
        """Base class of every error raised by the stoker core."""

        code = "unknown"

    class InvalidArgumentError(StokerError, ValueError):
        """A bad argument or option."""

        code = "invalid argument"

    class NotFoundError(StokerError, FileNotFoundError):
        """A file or dataset was not found."""

        code = "not found"

    class StokerIOError(StokerError, OSError):
        """Reading or writing failed."""

        code = "I/O error"

    class CorruptDataError(StokerError):
        """Malformed data."""

        code = "corrupt data"

    class UnimplementedError(StokerError, NotImplementedError):
        """Not supported."""

        code = "unimplemented"

    class CancelledError(StokerError):
        """The pipeline was stopped."""

        code = "cancelled"

    class EndOfStreamError(StokerError, IndexError):
        """End of stream."""

        code = "out of range"

    class StallError(StokerError, TimeoutError):
        """Nothing was produced for longer than stall_timeout (a stuck read)."""

        code = "deadline exceeded"

    class InternalError(StokerError):
        """A bug in stoker."""

        code = "internal error"


def extension_available():
    """True when the compiled engine (stoker._stoker) could be imported."""
    return _ext is not None


def extension_error():
    """Why the compiled engine could not be imported (None when it could)."""
    return _IMPORT_ERROR


def require_extension(what):
    """Returns the extension module or raises ImportError saying what needs it."""
    if _ext is None:
        raise ImportError(
            f"{what} needs stoker's compiled engine (stoker._stoker), which could not be "
            f"imported: {_IMPORT_ERROR}. Build it with `pip install .` or with CMake "
            f"(-DSTOKER_BUILD_PYTHON=ON) and put <build>/python on PYTHONPATH."
        )
    return _ext


def bad_argument(msg):
    """The error raised for a bad argument: an InvalidArgumentError (a ValueError)."""
    return InvalidArgumentError(msg)
