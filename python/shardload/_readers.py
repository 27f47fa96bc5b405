"""User-defined readers in Python: a format shardload does not know, read by the user's code
inside Legate tasks.

::

    def count_rows(path): ...      # the file's row count (axis 0), an int >= 0
    def read(path, lo, hi): ...    # rows [lo, hi) of the file as a numpy array

    shardload.register_reader("mytext", count_rows=count_rows, read=read, dtype="float32",
                              trailing_shape=(3,), extension=".txt")
    a = shardload.load("data/", reader="mytext")

shardload does the rest as for its own formats: it resolves the source (a directory, a
numbered pattern, a glob or a list of paths), calls ``count_rows`` on every file in the calling
process and checks what it returns, plans the tiles as ``load`` does (the same plan for the
same rows, processors and ``overdecompose``), and fills the output with one manual launch of a
Python task in which each point calls ``read`` for the pieces of the files its tile covers and
writes the rows into its piece of the output. What ``read`` returns is checked (an ndarray of
exactly the dtype and of shape ``(hi - lo, *trailing_shape)``); an exception it raises, or a
result that does not fit, fails the load with a ShardReadError naming the file and the rows.

Register the reader in every process of the program before the load (under control
replication the same script runs on every rank, so registering it at the top of the script
is enough): the tasks find it by its name.
"""

# No "from __future__ import annotations": Legate reads the task's annotations as objects.
import dataclasses
import gc
import itertools
import os
import re
import stat
import sys
from typing import Any, Callable, Optional, Sequence

import numpy as np

from . import _core
from ._api import _LEGATE_DTYPES, _legate_dtypes_text
from ._errors import LayoutError, ShardReadError

__all__ = ["register_reader", "registered_readers"]

ReadFunction = Callable[[str, int, int], np.ndarray]
RowsFunction = Callable[[str], int]

_Snapshot = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode

_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


@dataclasses.dataclass(frozen=True)
class _Reader:
    name: str
    read: ReadFunction
    count_rows: RowsFunction
    dtype: Optional[np.dtype]
    trailing_shape: Optional[tuple[int, ...]]
    extension: Optional[str]


# By name; looked up by the task bodies, in whatever process runs them.
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
            ``(hi - lo, *trailing_shape)``; any strides. It runs inside Legate tasks, in the
            processes of the program, possibly from several threads at once, and should read
            only the rows asked for. It must not call cuPyNumeric or Legate: such a call is
            stopped before it runs and fails the load with a ShardReadError naming the
            reader. Before each call the file is opened without blocking and compared with
            what discovery saw (a FIFO or another file in its place fails the load, read()
            is not called).
        count_rows: ``count_rows(path)`` returns the file's row count, an int >= 0; called
            once per file, in the calling process, before anything is launched (required;
            ``rows=`` is its deprecated spelling).
        dtype: the element type of every file: a numeric numpy dtype in this machine's
            byte order that Legate has (bool, int8-64, uint8-64, float16/32/64,
            complex64/128; ``">f4"`` or ``float128`` are refused). None: what
            ``read(first_file, 0, 0)`` returns tells.
        trailing_shape: the shape of one row (``()`` for 1-D data). None: as dtype.
        extension: files named ``*EXTENSION`` (``".txt"``): a directory source without a
            pattern then means ``shard_0000EXTENSION``, ``shard_0001EXTENSION``, ...

    Raises:
        TypeError: an argument has the wrong type; the message names it.
        ValueError: a bad name or extension, a name already registered, a dtype that is not
            numeric, not native or has no Legate type, a negative dimension.
    """
    from ._api import _renamed

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
    _READERS[name] = _Reader(name, read, count_rows, dt, trailing, extension)


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


# ---- discovery -------------------------------------------------------------------------------
@dataclasses.dataclass
class _Dataset:
    paths: list[str]
    rows: list[int]  # per file
    snapshots: list[_Snapshot]  # per file, as discovery saw it
    dtype: np.dtype
    trailing: tuple[int, ...]


def _paths(source: object, pattern: object, reader: _Reader) -> list[str]:
    if pattern is None and isinstance(source, (str, bytes, os.PathLike)) and \
            os.path.isdir(source):
        if reader.extension is None:
            raise ValueError(f"pattern: the reader {reader.name!r} was registered without an "
                             "extension, so a directory source needs a pattern such as "
                             "'shard_{:04d}.txt'")
        pattern = "shard_{:04d}" + reader.extension
    return _core.resolve(source, pattern)


def _snapshot(st: os.stat_result) -> _Snapshot:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _regular(path: str) -> _Snapshot:
    # Before the user's code opens it: a FIFO would block count_rows() or read() for ever.
    try:
        st = os.stat(path)
    except OSError as e:
        raise LayoutError(f"{path}: {e.strerror} (errno {e.errno})") from e
    if not stat.S_ISREG(st.st_mode):
        raise LayoutError(f"{path}: not a regular file")
    return _snapshot(st)


def _difference(then: _Snapshot, now: _Snapshot) -> str:
    d = f"size {then[0]} -> {now[0]} bytes, mtime {then[1]} -> {now[1]} ns"
    if then[2] != now[2]:
        d += f", ctime {then[2]} -> {now[2]} ns"
    if then[3] != now[3]:
        d += f", replaced by another file (inode {then[3]} -> {now[3]})"
    return d


def _file_rows(reader: _Reader, path: str) -> int:
    try:
        n = reader.count_rows(path)
    except Exception as e:
        raise LayoutError(f"{path}: count_rows(): the reader {reader.name!r} raised "
                          f"{type(e).__name__}: {e}") from e
    if not _is_int(n) or int(n) < 0:
        raise LayoutError(f"{path}: count_rows(): the reader {reader.name!r} returned "
                          f"{_found(n)}; expected an int >= 0")
    return int(n)


def _discover(source: object, pattern: object, reader: _Reader) -> _Dataset:
    paths = _paths(source, pattern, reader)
    if not paths:
        raise LayoutError("no shards to load")
    rows, snapshots = [], []
    total = 0
    for p in paths:
        snapshots.append(_regular(p))
        rows.append(_file_rows(reader, p))
        total += rows[-1]
        if total >= 2**63:
            raise LayoutError(f"{p}: rows: the dataset's row count overflows 64 bits at this "
                              "file")
    dtype, trailing = reader.dtype, reader.trailing_shape
    if dtype is None or trailing is None:
        # What a read of no rows returns tells what the reader makes.
        first = paths[0]
        try:
            probe = reader.read(first, 0, 0)
        except Exception as e:
            raise LayoutError(f"{first}: read(path, 0, 0), asked for the dtype and the trailing "
                              f"shape: the reader {reader.name!r} raised {type(e).__name__}: "
                              f"{e}") from e
        if not isinstance(probe, np.ndarray) or probe.ndim < 1:
            raise LayoutError(f"{first}: read(path, 0, 0), asked for the dtype and the trailing "
                              f"shape: expected a numpy array of at least one dimension, found "
                              f"{type(probe).__name__} {getattr(probe, 'shape', '')}")
        if dtype is None:
            try:
                dtype = _numeric_dtype("dtype", probe.dtype)
            except ValueError as e:
                raise LayoutError(f"{first}: read(path, 0, 0): {e}") from None
        if trailing is None:
            trailing = tuple(int(d) for d in probe.shape[1:])
    row_bytes = dtype.itemsize * int(np.prod(trailing, dtype=object))
    if total * row_bytes >= 2**63:
        raise LayoutError(f"{paths[-1]}: rows: the dataset's size ({total} rows of {row_bytes} "
                          "bytes) overflows 64 bits")
    return _Dataset(paths, rows, snapshots, dtype, trailing)


# ---- the task --------------------------------------------------------------------------------
@dataclasses.dataclass
class _Job:
    reader: _Reader
    paths: list[str]
    first: list[int]  # per shard: the file row its first row is
    snapshots: list[_Snapshot]  # per shard
    pieces: list[list[tuple[int, int, int, int]]]  # per tile: (shard, lo, hi, dst_row)
    dtype: np.dtype
    trailing: tuple[int, ...]


# Loads in flight, by a number every rank counts alike (the same program runs on every rank).
_JOBS: dict[int, _Job] = {}
_job_numbers = itertools.count()
_task = None


def _shard_error(path: str, message: str, errno: Optional[int] = None) -> ShardReadError:
    """A ShardReadError about ``path``, with the file (and the errno) as data."""
    e = ShardReadError(message)
    e.filename = path
    if errno is not None:
        e.errno = errno
    return e


# A task's exception reaches the launch as its type and message only, so the file and the
# errno travel in front of the message in a frame, as the C++ load task's do, and the launch
# takes them back out as data.
_FRAME_MARK = "\x1eshardload-status;"


def _framed(e: ShardReadError) -> ShardReadError:
    path = e.filename if isinstance(e.filename, str) else ""
    errno = e.errno if isinstance(e.errno, int) and e.errno > 0 else 0
    return ShardReadError(f"{_FRAME_MARK}{errno};{len(path)};{path}{e}")


def _unframed(e: ShardReadError) -> ShardReadError:
    """The error a task raised, its file and errno back as data; unchanged without a frame."""
    frame = re.match(re.escape(_FRAME_MARK) + r"([0-9]{1,10});([0-9]{1,20});", str(e), re.ASCII)
    if frame is None:
        return e
    errno, size = int(frame.group(1)), int(frame.group(2))
    rest = str(e)[frame.end():]
    if size > len(rest):
        return e
    out = ShardReadError(rest[size:])
    if size:
        out.filename = rest[:size]
    if errno:
        out.errno = errno
    return out


def _checked(job: _Job, path: str, lo: int, hi: int, arr: object) -> np.ndarray:
    where = f"{path}: rows [{lo}, {hi}): read() of the reader {job.reader.name!r}"
    want = (hi - lo, *job.trailing)
    if not isinstance(arr, np.ndarray):
        raise _shard_error(path, f"{where} returned {type(arr).__name__}; expected a numpy "
                                 f"array of shape {want} and dtype {job.dtype}")
    if arr.dtype != job.dtype:
        raise _shard_error(path, f"{where} returned dtype {arr.dtype}; expected {job.dtype}")
    if arr.shape != want:
        raise _shard_error(path, f"{where} returned shape {arr.shape}; expected {want}")
    return arr


def _check_before_read(job: _Job, shard: int, where: str) -> None:
    """The file as discovery saw it, before the user's read() opens it: a FIFO swapped in
    since would block read() for ever. Opened without blocking (a FIFO's open returns at once
    then) and compared by fstat of that open file."""
    path = job.paths[shard]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        raise _shard_error(path, f"{where}: cannot open: {e.strerror} (errno {e.errno})",
                           e.errno) from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(st.st_mode):
        raise _shard_error(path, f"{where}: not a regular file any more (discovery found one); "
                                 "read() was not called")
    now = _snapshot(st)
    if now != job.snapshots[shard]:
        raise _shard_error(path, f"{where}: changed since discovery: "
                                 f"{_difference(job.snapshots[shard], now)}")


# Inside a user's read(), which runs in a Legate task: calling cuPyNumeric or Legate there
# would launch work from inside a task, which ends the process. While read() runs, a profile
# hook of the task's thread stops any call into those packages before its body runs.
_FORBIDDEN = ("cupynumeric", "legate")


def _forbidden(name: object) -> bool:
    return isinstance(name, str) and any(
        name == p or name.startswith(p + ".") for p in _FORBIDDEN)


class _ForbiddenCall(RuntimeError):
    pass


def _call_read(job: _Job, path: str, a: int, b: int) -> Any:
    where = f"{path}: rows [{a}, {b}): read() of the reader {job.reader.name!r}"
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
        arr = job.reader.read(path, a, b)
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


def _fill_tile(job: _Job, tile: int, view: Any, gpu: bool) -> None:
    for shard, lo, hi, dst_row in job.pieces[tile]:
        path = job.paths[shard]
        a, b = job.first[shard] + lo, job.first[shard] + hi
        _check_before_read(job, shard, f"{path}: rows [{a}, {b})")
        arr = _call_read(job, path, a, b)
        arr = _checked(job, path, a, b, arr)
        # After the read: a write during it or since discovery moved ctime at least, so equal
        # snapshots mean the rows are the file's as discovery saw it.
        try:
            now = _snapshot(os.stat(path))
        except OSError as e:
            raise _shard_error(path, f"{path}: rows [{a}, {b}): gone since discovery: "
                                     f"{e.strerror}", e.errno) from None
        if now != job.snapshots[shard]:
            raise _shard_error(path, f"{path}: rows [{a}, {b}): changed since discovery: "
                                     f"{_difference(job.snapshots[shard], now)}")
        if gpu:
            view[dst_row:dst_row + (hi - lo)].set(np.ascontiguousarray(arr))
        else:
            view[dst_row:dst_row + (hi - lo)] = arr


def _read_task():
    # Made on first use: the decorator registers the task with a running Legate.
    global _task
    if _task is not None:
        return _task
    from legate.core import TaskContext, VariantCode
    from legate.core.task import OutputStore, task

    @task(variants=(VariantCode.CPU, VariantCode.GPU))
    def shardload_python_reader(ctx: TaskContext, dst: OutputStore, job: int) -> None:
        _run_read_task(ctx, dst, job, ctx.get_variant_kind() == VariantCode.GPU)

    _task = shardload_python_reader
    return _task


_CUPY_MISSING = ("the Python reader's GPU variant needs CuPy, which is not installed: "
                 "pip install 'shardload[gpu]' (cupy-cuda13x), or run Legate on CPUs (--gpus 0)")


def _cupy() -> Any:
    """CuPy, an optional dependency (the ``gpu`` extra): only the GPU variant needs it."""
    try:
        import cupy
    except ImportError as e:
        raise ImportError(_CUPY_MISSING) from e
    return cupy


def _run_read_task(ctx: Any, dst: Any, job: int, gpu: bool) -> None:
    # Only ShardReadError may leave the task (the one type the launch declares); anything
    # else would end the process.
    try:
        j = _JOBS[job]
        if gpu:
            cupy = _cupy()
            # The rows are written on the task's stream, which Legate orders before the tasks
            # that use the output; on CuPy's own stream a later task could read them before the
            # copies land.
            stream = ctx.task_stream
            with cupy.cuda.ExternalStream(stream if stream is not None else 0):
                view = cupy.from_dlpack(dst)
                _fill_tile(j, ctx.task_index[0], view, gpu)
                if stream is None:
                    cupy.cuda.get_current_stream().synchronize()
        else:
            _fill_tile(j, ctx.task_index[0], np.asarray(dst), gpu)
    except ShardReadError as e:
        raise _framed(e) from None
    except BaseException as e:
        raise ShardReadError(f"the Python reader task failed: {type(e).__name__}: {e}") \
            from None


def _views(data: _Dataset, lo: int, hi: int) -> tuple[list[int], list[int], list[int]]:
    """The files rows [lo, hi) cover: index, first file row and rows of each."""
    index, first, rows = [], [], []
    start = 0
    for i, n in enumerate(data.rows):
        a, b = max(lo, start), min(hi, start + n)
        if a < b:
            index.append(i)
            first.append(a - start)
            rows.append(b - a)
        start += n
    return index, first, rows


def load(source: object, reader_name: object, *, pattern: object, overdecompose: int,
         row_range: object, astype: Optional[np.dtype]) -> Any:
    """``shardload.load(source, reader=NAME, ...)``; the arguments are checked by the caller
    but for the reader and the source."""
    from ._api import _check_shape_dims, _rows, _source, _start_runtime

    reader = _reader(reader_name)
    data = _discover(_source(source), pattern, reader)
    total = sum(data.rows)
    lo, hi = (0, total) if row_range is None else _rows(row_range, total)
    index, first, counts = _views(data, lo, hi)
    paths = [data.paths[i] for i in index]
    _check_shape_dims((hi - lo, *data.trailing), f"the dataset of reader {reader.name!r}")

    _start_runtime()
    import cupynumeric
    from legate.core import TaskTarget, get_legate_runtime
    from legate.core import types as ty

    from . import _legate

    n = hi - lo
    rt = get_legate_runtime()
    machine = rt.get_machine()
    # The task has CPU and GPU variants: it runs on the GPUs if any, else on the CPUs.
    target = "GPU" if machine.count(TaskTarget.GPU) > 0 else "CPU"
    if target == "GPU":
        _cupy()  # before anything is allocated or launched
    procs = max(machine.count(getattr(TaskTarget, target)), 1)
    row_bytes = data.dtype.itemsize * int(np.prod(data.trailing, dtype=object))
    if row_bytes > 0:
        # Before the array exists: a store larger than the memory ends the process.
        _legate.check_load_memory(n, row_bytes, target, procs, overdecompose)
    result = cupynumeric.empty((n, *data.trailing), dtype=data.dtype)
    if n > 0 and row_bytes > 0:
        plan = _core.plan(counts, procs, overdecompose)
        number = next(_job_numbers)
        _JOBS[number] = _Job(reader, paths, first, [data.snapshots[i] for i in index],
                            plan["pieces"], data.dtype, data.trailing)
        try:
            task = _read_task()
            store = next(iter(result.__legate_data_interface__["data"].values())).data
            part = store.partition_by_tiling((plan["tile_rows"], *data.trailing))
            launch = rt.create_manual_task(task.library, task.task_id,
                                           (plan["tiles"],) + (1,) * len(data.trailing))
            launch.add_output(part)
            launch.add_scalar_arg(number, ty.int64)
            launch.throws_exception(ShardReadError)
            # Declared as throwing, the launch returns once every point has run, and raises
            # the first ShardReadError. Meanwhile only the tasks run Python, and a garbage
            # collection there that freed a Legate object (of a cycle anywhere in the
            # program) would end the process: collections wait for the main thread.
            collecting = gc.isenabled()
            gc.disable()
            try:
                rt.submit(launch)
            finally:
                if collecting:
                    gc.enable()
        except ShardReadError as e:
            error = _unframed(e)
            # The traceback keeps this frame: it must not keep the Legate objects alive into
            # a later collection on another thread.
            result = store = part = launch = e = None  # noqa: F841
            raise error from None
        finally:
            del _JOBS[number]
    if astype is not None and astype != result.dtype:
        result = result.astype(astype)
    return result
