"""User-defined readers in Python: a format shardload does not know, read by the user's code.

::

    def count_rows(path): ...      # the file's row count (axis 0), an int >= 0
    def read(path, lo, hi): ...    # rows [lo, hi) of the file as a numpy array

    shardload.register_reader("mytext", count_rows=count_rows, read=read, dtype="float32",
                              trailing_shape=(3,), extension=".txt")
    a = shardload.load("data/", reader="mytext")       # or format="mytext"
    for batch in shardload.batches("data/", 1000, format="mytext"): ...

A registration puts a reader in the engine's registry (the one shardload's C++ formats and
readers registered in C++ are in) whose probe calls ``count_rows`` and whose read calls ``read``,
so a Python reader goes through the same pipeline as a built-in format: discovery and its
checks (each file opened without blocking and its snapshot taken before ``count_rows`` sees it),
``discover``, ``Layout.read``, the plan, the memory check, ``load`` with ``info=`` and
``progress=``, ``batches``, ``index`` and its manifest, ``discover_once``, and the CPU, OpenMP
and GPU launches (on GPUs the rows are staged through host memory). What ``read`` returns is
checked (an ndarray of exactly the dtype and of shape ``(hi - lo, *trailing_shape)``); an
exception it raises, or a result that does not fit, fails the read with a ShardReadError naming
the file (as data too) and the rows. Before each read the file is compared with what discovery
saw, and again after it.

The callbacks run on the engine's threads (Legate tasks, discovery), each taking the GIL; the
calls that wait for those threads release it. While any thread runs a callback, Python's
cyclic garbage collector is disabled in the whole process and then restored: a collection on
a task thread that frees a Legate object (of any cycle in the program) would end the process,
so collections happen on the main thread only, between reads. So a callback must not call
``gc.enable()`` or ``gc.collect()`` (nor cuPyNumeric or Legate, which is stopped and reported
as a ShardReadError).

Register the reader in every process of the program before the load (under control
replication the same script runs on every rank, so registering it at the top of the script
is enough): the tasks find it by its name.
"""

import dataclasses
import os
import re
import sys
from typing import Any, Callable, Optional, Sequence

import numpy as np

from . import _core
from ._args import _renamed
from ._errors import LayoutError, ShardReadError
from ._options import _LEGATE_DTYPES, _legate_dtypes_text

__all__ = ["register_reader", "registered_readers"]

ReadFunction = Callable[[str, int, int], np.ndarray]
RowsFunction = Callable[[str], int]

_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


@dataclasses.dataclass(frozen=True)
class _Reader:
    name: str
    read: ReadFunction
    count_rows: RowsFunction
    dtype: Optional[np.dtype]
    trailing_shape: Optional[tuple[int, ...]]
    extension: Optional[str]


# By name, in registration order (the engine's registry holds the callbacks).
_READERS: dict[str, _Reader] = {}


def _found(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _numeric_dtype(where: str, value: object) -> np.dtype:
    try:
        dt = np.dtype(value)  # type: ignore[arg-type]
    except TypeError as e:
        raise TypeError(f"{where}: expected a numpy dtype, found {_found(value)}") from e
    if dt.kind not in "biufc" or dt.hasobject or dt.fields is not None or dt.subdtype is not None:
        raise ValueError(f"{where}: expected a numeric dtype (bool, int, uint, float, complex), "
                         f"found {dt}")
    # Refused rather than converted: read() must return arrays of exactly this dtype, and
    # cuPyNumeric holds native ones only; a reader of big-endian files swaps in read().
    if not dt.isnative:
        raise ValueError(f"{where}: {dt.str} is not in the machine's byte order; a reader's "
                         f"arrays are native: pass {dt.newbyteorder('=').str} and return "
                         f"arr.astype({dt.newbyteorder('=').str!r}) from read()")
    if dt not in _LEGATE_DTYPES:
        raise ValueError(f"{where}: {dt} has no Legate type, so cuPyNumeric cannot hold it; "
                         f"expected one of {_legate_dtypes_text()}")
    return dt


def _trailing(where: str, value: object) -> tuple[int, ...]:
    if _is_int(value):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not all(_is_int(d) for d in value):
        raise TypeError(f"{where}: expected a tuple of ints, found {_found(value)}")
    dims = tuple(int(d) for d in value)
    if any(d < 0 for d in dims):
        raise ValueError(f"{where}: expected dimensions >= 0, found {dims}")
    return dims


def register_reader(
    name: str,
    *,
    read: ReadFunction,
    count_rows: Optional[RowsFunction] = None,
    dtype: Any = None,
    trailing_shape: Optional[Sequence[int] | int] = None,
    extension: Optional[str] = None,
    **deprecated: Any,
) -> None:
    """Registers a reader for ``shardload.load(source, reader=name)``.

    Args:
        name: 1 to 64 letters, digits, ``_``, ``-`` or ``.``; a name registered before is
            refused (ValueError): tasks of a load may be running with it.
        read: ``read(path, lo, hi)`` returns rows [lo, hi) of the file (rows of the file,
            0 <= lo <= hi <= count_rows(path)) as a numpy array of the dtype and of shape
            ``(hi - lo, *trailing_shape)``; any strides. It runs inside Legate tasks (and in
            ``Layout.read``), in the processes of the program, possibly from several threads
            at once, and should read only the rows asked for. It must not call
            ``gc.enable()`` or ``gc.collect()`` (see the module's documentation). It must not call cuPyNumeric or Legate: such a call is
            stopped before it runs and fails the load with a ShardReadError naming the
            reader. Before each call the file is opened without blocking and compared with
            what discovery saw (a FIFO or another file in its place fails the load, read()
            is not called).
        count_rows: ``count_rows(path)`` returns the file's row count, an int >= 0; called
            once per file by discovery (``discover``, ``load``, ``batches``, ``index``; not
            for a file a usable manifest describes), before anything is launched (required;
            ``rows=`` is its deprecated spelling).
        dtype: the element type of every file: a numeric numpy dtype in this machine's
            byte order that Legate has (bool, int8-64, uint8-64, float16/32/64,
            complex64/128; ``">f4"`` or ``float128`` are refused). None: what
            ``read(file, 0, 0)`` returns tells, for each file.
        trailing_shape: the shape of one row (``()`` for 1-D data). None: as dtype.
        extension: files named ``*EXTENSION`` (``".txt"``): a directory source without a
            pattern then means ``shard_0000EXTENSION``, ``shard_0001EXTENSION``, ... for
            ``load(reader=name)``; and discovery with no format named gives such files this
            reader, unless the extension is a built-in format's or an earlier reader's.

    Raises:
        TypeError: an argument has the wrong type; the message names it.
        ValueError: a bad name or extension, a name already registered, a dtype that is not
            numeric, not native or has no Legate type, a negative dimension.
    """
    if deprecated:
        count_rows = _renamed("register_reader", deprecated, {"rows": "count_rows"},
                              {"count_rows": count_rows})["count_rows"]
    if count_rows is None:
        raise TypeError("register_reader() missing required keyword argument: 'count_rows'")
    if not isinstance(name, str):
        raise TypeError(f"name: expected a str, found {_found(name)}")
    if not _NAME.fullmatch(name):
        raise ValueError(f"name: expected 1 to 64 letters, digits, '_', '-' or '.', found "
                         f"{name!r}")
    for arg, fn in (("read", read), ("count_rows", count_rows)):
        if not callable(fn):
            raise TypeError(f"{arg}: expected a callable, found {_found(fn)}")
    dt = None if dtype is None else _numeric_dtype("dtype", dtype)
    trailing = None if trailing_shape is None else _trailing("trailing_shape", trailing_shape)
    if extension is not None:
        if not isinstance(extension, str):
            raise TypeError(f"extension: expected a str such as '.txt', found {_found(extension)}")
        if not (extension.startswith(".") and _NAME.fullmatch(extension[1:] or "!")):
            raise ValueError(f"extension: expected a dot and 1 to 64 letters, digits, '_', '-' "
                             f"or '.', found {extension!r}")
    if name in _READERS:
        raise ValueError(f"name: a reader named {name!r} is already registered")
    reader = _Reader(name, read, count_rows, dt, trailing, extension)
    probe = lambda path: _probe(reader, path)  # noqa: E731
    read_into = lambda path, lo, hi, dst: _read_into(reader, path, lo, hi, dst)  # noqa: E731
    try:
        try:
            _core.register_python_reader(name, probe, read_into,
                                         [] if extension is None else [extension])
        except ValueError:
            if extension is None:
                raise
            # The extension is a built-in format's or another reader's: it still names this
            # reader's files for load(reader=), as it always did, but does not select it.
            _core.register_python_reader(name, probe, read_into, [])
    except ValueError as e:  # a name a reader registered in C++ holds
        raise ValueError(f"name: {e}") from None
    _READERS[name] = reader


def registered_readers() -> list[str]:
    """The names of the Python readers registered in this process, in registration order."""
    return list(_READERS)


def _reader(name: object) -> _Reader:
    if not isinstance(name, str):
        raise TypeError(f"reader: expected the name of a registered reader (a str), found "
                        f"{_found(name)}")
    found = _READERS.get(name)
    if found is None:
        known = ", ".join(repr(n) for n in _READERS) or "none"
        raise ValueError(f"reader: no reader is registered as {name!r} (registered: {known}); "
                         "call shardload.register_reader first")
    return found




def _pattern(source: object, pattern: object, reader: _Reader) -> object:
    """The pattern of a load with ``reader=``: a directory source without one means the
    reader's numbered files."""
    if pattern is None and isinstance(source, (str, bytes, os.PathLike)) and \
            os.path.isdir(source):
        if reader.extension is None:
            raise ValueError(f"pattern: the reader {reader.name!r} was registered without an "
                             "extension, so a directory source needs a pattern such as "
                             "'shard_{:04d}.txt'")
        return "shard_{:04d}" + reader.extension
    return pattern


# ---- the callbacks, called by the engine from its threads with the GIL taken ----------------
def _stop_from_exit() -> KeyboardInterrupt:
    """What a callback's ``sys.exit()`` becomes: the engine cannot carry SystemExit back to the
    caller, and a read error would hide it, so it ends the call as a Ctrl-C does."""
    return KeyboardInterrupt("sys.exit() in the reader's callback")


def _file_rows(reader: _Reader, path: str) -> int:
    try:
        n = reader.count_rows(path)
    except SystemExit:
        raise _stop_from_exit() from None
    except Exception as e:
        raise LayoutError(f"{path}: count_rows(): the reader {reader.name!r} raised "
                          f"{type(e).__name__}: {e}") from None
    if not _is_int(n) or int(n) < 0:
        raise LayoutError(f"{path}: count_rows(): the reader {reader.name!r} returned "
                          f"{_found(n)}; expected an int >= 0")
    if int(n) >= 2**63:
        raise LayoutError(f"{path}: rows: the dataset's row count overflows 64 bits at this "
                          "file")
    return int(n)


def _probe(reader: _Reader, path: str) -> tuple[int, str, tuple[int, ...]]:
    """The engine's probe of one file: its rows, the dtype (as numpy's type string) and the
    trailing shape. Bad answers are LayoutErrors naming the file."""
    rows = _file_rows(reader, path)
    dtype, trailing = reader.dtype, reader.trailing_shape
    if dtype is None or trailing is None:
        # What a read of no rows returns tells what the reader makes.
        try:
            probe = reader.read(path, 0, 0)
        except SystemExit:
            raise _stop_from_exit() from None
        except Exception as e:
            raise LayoutError(f"{path}: read(path, 0, 0), asked for the dtype and the trailing "
                              f"shape: the reader {reader.name!r} raised {type(e).__name__}: "
                              f"{e}") from None
        if not isinstance(probe, np.ndarray) or probe.ndim < 1:
            raise LayoutError(f"{path}: read(path, 0, 0), asked for the dtype and the trailing "
                              f"shape: expected a numpy array of at least one dimension, found "
                              f"{type(probe).__name__} {getattr(probe, 'shape', '')}")
        if dtype is None:
            try:
                dtype = _numeric_dtype("dtype", probe.dtype)
            except ValueError as e:
                raise LayoutError(f"{path}: read(path, 0, 0): {e}") from None
        if trailing is None:
            trailing = tuple(int(d) for d in probe.shape[1:])
    return rows, dtype.str, trailing


def _shard_error(path: str, message: str, errno: Optional[int] = None) -> ShardReadError:
    """A ShardReadError about ``path``, with the file (and the errno) as data."""
    e = ShardReadError(message)
    e.filename = path
    if errno is not None:
        e.errno = errno
    return e


# Inside a user's read(), which runs in a Legate task: calling cuPyNumeric or Legate there
# would launch work from inside a task, which ends the process. While read() runs, a profile
# hook of the task's thread stops any call into those packages before its body runs.
_FORBIDDEN = ("cupynumeric", "legate")


def _forbidden(name: object) -> bool:
    return isinstance(name, str) and any(
        name == p or name.startswith(p + ".") for p in _FORBIDDEN)


class _ForbiddenCall(RuntimeError):
    pass


def _call_read(reader: _Reader, path: str, a: int, b: int) -> Any:
    where = f"{path}: rows [{a}, {b}): read() of the reader {reader.name!r}"
    seen: list[str] = []

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            module = frame.f_globals.get("__name__")
        elif event == "c_call":
            module = getattr(arg, "__module__", None)
        else:
            return
        if _forbidden(module):
            name = f"{module}.{frame.f_code.co_name if event == 'call' else arg.__name__}"
            seen.append(name)
            raise _ForbiddenCall(f"{name}: cuPyNumeric and Legate cannot be called inside "
                                 "a reader's read(), which runs in a Legate task")

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        arr = reader.read(path, a, b)
    except (KeyboardInterrupt, SystemExit) as e:
        # A Ctrl-C stays one: the engine fails the read and makes it pending again, so the
        # caller gets KeyboardInterrupt (a read error would be skipped by a loop that skips
        # unreadable data, and the Ctrl-C lost).
        sys.setprofile(previous)
        if isinstance(e, SystemExit):
            raise _stop_from_exit() from None
        raise
    except BaseException as e:
        sys.setprofile(previous)
        if seen:
            raise _shard_error(path, f"{where} called {seen[0]}: cuPyNumeric and Legate cannot "
                                     "be called inside read(), which runs in a Legate task; "
                                     "return a numpy array") from None
        raise _shard_error(path, f"{where} raised {type(e).__name__}: {e}") from None
    sys.setprofile(previous)
    if seen:  # the error was caught inside read(); the call was still made
        raise _shard_error(path, f"{where} called {seen[0]}: cuPyNumeric and Legate cannot be "
                                 "called inside read(), which runs in a Legate task; return a "
                                 "numpy array")
    return arr


def _read_into(reader: _Reader, path: str, lo: int, hi: int, dst: np.ndarray) -> None:
    """The engine's read of file rows [lo, hi) into ``dst`` (a view of the destination, of the
    dataset's dtype and shape ``(hi - lo, *trailing)``); what read() returns is checked first."""
    arr = _call_read(reader, path, lo, hi)
    where = f"{path}: rows [{lo}, {hi}): read() of the reader {reader.name!r}"
    if not isinstance(arr, np.ndarray):
        raise _shard_error(path, f"{where} returned {type(arr).__name__}; expected a numpy "
                                 f"array of shape {dst.shape} and dtype {dst.dtype}")
    if arr.dtype != dst.dtype:
        raise _shard_error(path, f"{where} returned dtype {arr.dtype}; expected {dst.dtype}")
    if arr.shape != dst.shape:
        raise _shard_error(path, f"{where} returned shape {arr.shape}; expected {dst.shape}")
    dst[...] = arr
