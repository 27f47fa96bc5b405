"""The Dask front end: a sharded dataset, or a row range of it, as a lazy ``dask.array.Array``.

``shardload.dask.load`` is ``da.from_zarr`` / ``da.from_npy_stack`` for any dataset shardload
reads: the same discovery, validation and formats as :func:`shardload.load`, discovered once in
the calling process. Each chunk along axis 0 is one engine tile, read by one engine call
(positional reads straight into the chunk's array) on whichever worker computes it::

    import shardload.dask

    x = shardload.dask.load("data/")                  # chunks: the engine's tiles
    y = shardload.dask.load("s3://bucket/ds/", chunks="256 MiB", astype="float32")
    y.mean(axis=0).compute()                          # threaded scheduler or dask.distributed

Chunks. Axis 0 is cut on the read plan of :func:`shardload.load` and
:func:`shardload.numpy.load` (``_core.plan``): by default about ``overdecompose`` (4) tiles per
worker thread, the threads being those of the ``dask.distributed`` client in use, else this
machine's cores (the threaded scheduler's pool). ``chunks=`` an int asks for that many rows per
chunk, a str (``"128 MiB"``, ``"1GB"``) for that many bytes of the result per chunk. Either way
the size is moved onto the dataset's decode units (Zarr/HDF5 chunks, Parquet row groups, Arrow
record batches), so that each unit is decoded by one chunk: where every unit starts on a
multiple of ``u`` rows (one chunked store, or shards whose rows are multiples of ``u``), chunks
are equal multiples of ``u`` rows, the plan's tiles; otherwise (ragged shards, a row range that
starts inside a unit) each chunk is at least that size and ends at the next unit boundary of
the shard it ends in, or at that shard's end, so chunks differ a little in size. Formats
without units (npy, raw, uncompressed .npz) are cut anywhere: equal chunks. Trailing
axes are never cut.

The graph holds the :class:`~shardload.Layout` once, under its own key, and one small task per
chunk, ``(read, layout key, lo, hi)``, that depends on it: it grows with the chunks, not with
the shards or the options, and ``dask.distributed`` ships the layout to a worker once. A worker
reads only the shards its chunks cover, and of those only the chunks' rows.

Progress. ``progress=`` (a callable taking a :class:`~shardload.LoadProgress`, or True for a
bar on stderr, tqdm) reports the chunks as they are read, when the array is computed: each
chunk task reports its rows after its read, once per chunk (``"filling"``, then
``"filled"`` with the last chunk; a chunk read again by a later computation is not counted
again, so after ``"filled"`` nothing more is reported). ``bytes`` is the dataset's bytes as
read (before ``astype``). On the threaded and synchronous schedulers the task calls the
callback itself, in the worker thread, one report at a time; an exception it raises fails
that task, so ``compute()`` raises it. On ``dask.distributed`` a task runs in a worker
process: it sends its report to the client as a worker event (``log_event``), and the
client calls the callback as the events arrive (``Client.subscribe_topic``), one bar for
the whole cluster; an exception there sets a flag on the scheduler that the chunk tasks not
yet started check, so they fail and ``compute()`` raises the same exception type (its
message and type, re-created from the client's; chunks already read stay read). On the
processes scheduler (no cluster) nothing is reported.

Errors. Arguments and the dataset are checked here, as :func:`shardload.load` checks them,
before any graph exists. A shard that changed or vanished after discovery fails the chunk that
reads it with :class:`~shardload.ShardReadError` naming the file and rows, which ``compute()``
raises in the caller (on ``dask.distributed`` too, ``filename`` included).

Writing. ``shardload.dask.save(x, "out/")`` writes a Dask array as the dataset
:func:`shardload.save` writes, one shard per chunk along axis 0, each chunk written by the
worker that computes it straight into its shard file; the dataset is published once, by the
caller, after every chunk is written (see :func:`save`)::

    shardload.dask.save(y * 2, "doubled/", format="zarr")
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import logging
import os
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Optional, Unpack

import numpy as np

from . import _core, _frontend, _save
from ._args import DTypeLike, SourceLike, _found, _int
from ._info import LoadProgress, ProgressBar, ProgressCallback
from ._layout import Layout
from ._options import DiscoverOptions, StorageOptions

if TYPE_CHECKING:
    import dask.array

__all__ = ["load", "save"]

logger = logging.getLogger("shardload")


def load(
    source: SourceLike | Layout,
    *,
    chunks: int | str | None = None,
    row_range: "tuple[int | None, int | None] | slice | None" = None,
    astype: DTypeLike | None = None,
    threads: int = 1,
    overdecompose: int = _frontend.DEFAULT_OVERDECOMPOSE,
    progress: "ProgressCallback | bool | None" = None,
    reader: str | None = None,
    storage_options: StorageOptions | None = None,
    **options: Unpack[DiscoverOptions],
) -> "dask.array.Array":
    """A lazy ``dask.array.Array`` of a sharded dataset, chunked along axis 0 by the read plan.

    The source is discovered and validated now, in this process, as by
    :func:`shardload.discover` (whose keyword arguments this function shares: ``format``,
    ``pattern``, ``columns``, ``dtype``, ...), or passed as a :class:`Layout`. Nothing else is
    read until the array is computed.

    Args:
        source: a directory, numbered pattern, glob, list of paths (local, ``s3://`` or
            ``http(s)://``), or a Layout.
        chunks: rows per chunk along axis 0: None (or ``"auto"``) for the engine's tiles, about
            ``overdecompose`` per worker thread; an int >= 1 for that many rows; a str such as
            ``"64 MiB"`` for that many bytes of the result. Moved onto the decode-unit grid
            (see the module's documentation), and never more than all the rows.
        row_range: rows ``(lo, hi)`` or a slice ``lo:hi``: the array holds only those rows, and
            only the shards they cover are read.
        astype: the dtype of the result, cast after each chunk's read as ``ndarray.astype``
            does (Parquet/Arrow columns that convert without loss decode straight into it).
        threads: engine threads per chunk, 1 to 4096 (1: Dask runs the chunks in parallel).
        overdecompose: tiles per worker thread when ``chunks`` is None, an int >= 1.
        reader: the name of a Python reader (:func:`shardload.register_reader`); it must be
            registered under that name in every worker process too.
        storage_options: object storage options, as for :func:`shardload.discover`; they travel
            inside the layout to the workers.
        progress: a callable taking one :class:`~shardload.LoadProgress`, called as each
            chunk is read when the array is computed (``"filling"``, ``"filled"`` with the
            last chunk; chunks for tiles, ``bytes`` the dataset's), or True for a progress bar
            on stderr (needs ``tqdm``); see "Progress" in the module's documentation for the
            threaded scheduler and ``dask.distributed``.

    Returns:
        A ``dask.array.Array`` of the dataset's shape and dtype (``astype`` if given).

    Raises:
        TypeError, ValueError: an argument is wrong; the message names it.
        LayoutError: the files do not form a valid dataset.
        ImportError: Dask is not installed.
        ShardReadError (from ``compute()``): a chunk's read failed; the message names the file
            and the rows.
    """
    where = "shardload.dask.load"
    try:
        import dask.array as da
        from dask.base import tokenize
    except ImportError:
        raise ImportError(f"{where} needs dask (pip install 'dask[array]')") from None
    n_threads = _int("threads", threads)
    if not 1 <= n_threads <= _frontend.MAX_THREADS:  # checked here rather than per chunk
        raise ValueError(
            f"threads: expected an int from 1 to {_frontend.MAX_THREADS}, found {n_threads}")
    k = _frontend.overdecompose_arg(overdecompose)
    rows_arg = _chunks_arg(chunks)
    prepared = _frontend.prepare(where, source, row_range=row_range, astype=astype,
                                 reader=reader, storage_options=storage_options,
                                 options=options)
    layout = prepared.layout
    dtype = prepared.dtype
    bounds = chunk_bounds(layout, rows_arg, dtype=dtype, overdecompose=k)
    cast = prepared.cast

    reporter = _ChunkProgress.make(progress, layout, len(bounds) - 1, prepared.t_call, where)
    # The array's name is shown (graph keys, the dashboard, logs): it is made from the layout's
    # bytes without the secrets its paths name by handle, so that it tests no guess of them.
    token = tokenize(hashlib.sha256(layout.encode(credentials=False)).hexdigest(), bounds,
                     str(cast), n_threads, None if reporter is None else reporter.topic)
    name = f"shardload-{token}"
    layout_key = f"shardload-layout-{token}"
    trailing_zeros = (0,) * (layout.ndim - 1)
    graph: dict[Any, Any] = {layout_key: layout}
    if reporter is not None:
        progress_key = f"shardload-progress-{token}"
        graph[progress_key] = reporter
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        if reporter is None:
            task: tuple = (_read_chunk, layout_key, lo, hi, cast, n_threads)
        else:
            task = (_read_chunk_reporting, layout_key, lo, hi, cast, n_threads, progress_key, i)
        graph[(name, i, *trailing_zeros)] = task
    chunks_out = (tuple(hi - lo for lo, hi in zip(bounds[:-1], bounds[1:])),) + tuple(
        (d,) for d in layout.trailing_shape)
    meta = np.empty((0,) * layout.ndim, dtype)
    from dask.highlevelgraph import HighLevelGraph

    hlg = HighLevelGraph.from_collections(name, graph, dependencies=())
    return da.Array(hlg, name, chunks_out, meta=meta)


def _read_chunk(layout: Layout, lo: int, hi: int, cast: Optional[np.dtype],
                threads: int) -> np.ndarray:
    """One chunk: rows [lo, hi) of ``layout`` read by one engine call into a new array."""
    if threads == 1:
        # The serial fill of the whole layout's rows: an error then names the array's rows,
        # not those of a one-chunk layout.
        out = layout.read(lo, hi)
    else:
        part = layout.slice_rows(lo, hi)
        out = np.empty(part.shape, part.dtype)
        if part.nbytes:
            _core.host_load(part, out, threads, threads, None)
    return out if cast is None else out.astype(cast)


def _read_chunk_reporting(layout: Layout, lo: int, hi: int, cast: Optional[np.dtype],
                          threads: int, reporter: Any, index: int) -> np.ndarray:
    """_read_chunk, reporting chunk ``index`` to ``reporter`` after its read."""
    reporter.check()
    out = _read_chunk(layout, lo, hi, cast, threads)
    reporter.chunk_done(index, hi - lo)
    return out


class _ChunkProgress:
    """``progress=`` of a Dask array, living in the process that called :func:`load`: the
    chunks read so far, each counted once, and the callback or bar they are reported to.
    Pickled into a graph for another process (``dask.distributed``), it travels as a
    :class:`_RemoteProgress`, whose reports come back as worker events."""

    def __init__(self, progress: Any, layout: Layout, chunks: int, t_call: float,
                 where: str) -> None:
        self._callback = None if progress is True else progress
        self._bar: Any = None
        if progress is True:
            self._bar = ProgressBar(layout.nbytes, where, layout.total_rows)
        self._lock = threading.Lock()
        self._done: set[int] = set()
        self._rows_done = 0
        self._rows = layout.total_rows
        self._nbytes = layout.nbytes
        self._chunks = chunks
        self._t_call = t_call
        self._ended = False
        self._failed = False
        self._queued: list[LoadProgress] = []
        self._delivering = False
        self._client: Any = None
        self._telling: Any = None
        self.topic = f"shardload-progress-{os.urandom(16).hex()}"

    @staticmethod
    def make(progress: object, layout: Layout, chunks: int, t_call: float,
             where: str) -> "Optional[_ChunkProgress]":
        if progress is None or progress is False:
            return None
        if progress is not True and not callable(progress):
            raise TypeError(f"progress: expected a callable taking a LoadProgress, True for a "
                            f"progress bar, or None, found {_found(progress)}")
        return _ChunkProgress(progress, layout, chunks, t_call, where)

    def __dask_tokenize__(self) -> str:
        return self.topic

    def check(self) -> None:
        """Nothing to check in this process: a callback's exception is raised by the task
        that called it."""

    def chunk_done(self, index: int, rows: int) -> None:
        """Reports chunk ``index`` of ``rows`` rows read (once per chunk); after "filled", or
        after the callback raised, nothing more.

        One report at a time, in order: the thread that finds no report under way delivers
        the queued ones, outside the lock; the others queue theirs and go on. A callback that
        computes the same array again (its chunks report from other threads, or from this
        one) thus never waits on itself."""
        with self._lock:
            if self._ended or index in self._done:
                return
            self._done.add(index)
            self._rows_done += rows
            last = len(self._done) == self._chunks
            self._ended = last
            done = self._nbytes if last else (
                self._rows_done * self._nbytes // self._rows if self._rows else 0)
            self._queued.append(LoadProgress("filled" if last else "filling", len(self._done),
                                             self._chunks, done, self._nbytes,
                                             time.perf_counter() - self._t_call))
            if self._delivering:
                return
            self._delivering = True
        while True:
            with self._lock:
                if not self._queued or self._failed:
                    self._delivering = False
                    return
                report = self._queued.pop(0)
            try:
                if self._bar is not None:
                    self._bar(report)
                if self._callback is not None:
                    self._callback(report)
            except BaseException as e:
                with self._lock:
                    self._ended = self._failed = True
                    self._delivering = False
                    self._queued.clear()
                if self._bar is not None:
                    self._bar.close()
                self._stop_remote(e)
                raise

    def _stop_remote(self, error: BaseException) -> None:
        if self._client is None:
            return
        from distributed import Event, Variable

        record = {"type": type(error).__name__, "module": type(error).__module__,
                  "message": str(error)}
        client = self._client

        async def tell() -> None:
            await Variable(self.topic, client=client).set(record)
            await Event(self.topic, client=client).set()

        try:
            # Reports arrive on the client's event loop, where these calls must be awaited.
            self._telling = asyncio.get_running_loop().create_task(tell())
        except RuntimeError:  # no loop running here: the calls block until done
            try:
                Variable(self.topic, client=client).set(record)
                Event(self.topic, client=client).set()
            except Exception as e:  # the callback's own error is the one that matters
                logger.warning("shardload.dask.load: could not stop the chunks after the "
                               "progress callback raised: %s", e)

    def _event(self, event: Any) -> None:
        """A worker's report, on the client's thread."""
        try:
            index, rows = event[1] if isinstance(event, tuple) else event
            self.chunk_done(int(index), int(rows))
        except Exception as e:
            logger.warning("shardload.dask.load: the progress callback raised %s: %s; the "
                           "chunks not yet started will fail with it", type(e).__name__, e)

    def __reduce__(self) -> tuple:
        # Leaving this process: for a dask.distributed worker. The client in use hears its
        # reports (subscribed once, here, when the graph is sent).
        if self._client is None and "distributed" in sys.modules:
            try:
                from distributed import default_client

                self._client = default_client()
                self._client.subscribe_topic(self.topic, self._event)
            except ValueError:
                pass  # no client: the processes scheduler, which reports nothing
        return (_RemoteProgress, (self.topic,))


# When each load's chunks in this worker process last asked whether the client's progress
# callback raised (see _RemoteProgress.check).
_STOP_CHECK_S = 0.05
_stop_checks: dict[str, float] = {}
_stopped: dict[str, Any] = {}
_stop_checks_lock = threading.Lock()


class _RemoteProgress:
    """A :class:`_ChunkProgress` in a worker process: reports go to the client as worker
    events; a flag on the scheduler says the client's callback raised."""

    def __init__(self, topic: str) -> None:
        self.topic = topic

    def _worker(self) -> Any:
        try:
            from distributed import get_worker

            return get_worker()
        except (ImportError, ValueError):
            return None  # not a dask.distributed worker: nobody to tell

    def check(self) -> None:
        if self._worker() is None:
            return
        # Asking the scheduler costs a round trip; a worker asks at most every
        # _STOP_CHECK_S per load, so small chunks do not each pay it, and the chunks stop
        # that much later at most.
        now = time.monotonic()
        with _stop_checks_lock:
            record = _stopped.get(self.topic)
            if record is None:
                if now - _stop_checks.get(self.topic, -_STOP_CHECK_S) < _STOP_CHECK_S:
                    return
                _stop_checks[self.topic] = now
        if record is None:
            from distributed import Event, Variable

            if not Event(self.topic).is_set():
                return
            record = Variable(self.topic).get(timeout=10)
            with _stop_checks_lock:
                _stopped[self.topic] = record  # the later chunks raise without asking
        raise _callback_error(record)

    def chunk_done(self, index: int, rows: int) -> None:
        worker = self._worker()
        if worker is not None:
            worker.log_event(self.topic, (index, rows))


def _callback_error(record: dict[str, str]) -> BaseException:
    """The exception the client's progress callback raised, as its type where that is a
    builtin or one of shardload's (else RuntimeError), its message kept."""
    import builtins

    from . import _errors

    name = record.get("type", "")
    cls = getattr(builtins, name, None) if record.get("module") == "builtins" else None
    if cls is None and record.get("module", "").startswith("shardload"):
        cls = getattr(_errors, name, None)
    message = record.get("message", "")
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return RuntimeError(f"shardload.dask.load: the progress callback raised {name}: "
                            f"{message}")
    try:
        return cls(message)
    except Exception:
        return RuntimeError(f"shardload.dask.load: the progress callback raised {name}: "
                            f"{message}")


def _chunks_arg(value: object) -> int | str | None:
    """``chunks=``: None or "auto", an int >= 1 (rows) or a byte size str (bytes)."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    if isinstance(value, str):
        from dask.utils import parse_bytes

        try:
            n = parse_bytes(value)
        except (ValueError, TypeError, OverflowError):  # "1e400 B": an infinite size
            raise ValueError(f"chunks: expected rows (an int), a byte size such as '64 MiB', "
                             f"'auto' or None, found {value!r}") from None
        if n < 1:
            raise ValueError(f"chunks: a byte size must be at least 1 byte, found {value!r}")
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"chunks: expected rows (an int), a byte size such as '64 MiB', "
                        f"'auto' or None, found {_found(value)}")
    if int(value) < 1:
        raise ValueError(f"chunks: expected at least 1 row per chunk, found {int(value)}")
    return int(value)


def _worker_threads() -> int:
    """The threads that will compute the chunks: the dask.distributed client's in use (only
    looked for when distributed is already imported), else this machine's cores."""
    if "distributed" in sys.modules:
        try:
            from distributed import default_client

            n = sum(default_client().nthreads().values())
            if n > 0:
                return int(n)
        except (ValueError, OSError):
            pass  # no client: the local schedulers' pool
    return max(1, int(_core.default_host_threads()))


def chunk_bounds(layout: Layout, chunks: int | str | None = None, *,
                 dtype: Optional[np.dtype] = None, processors: Optional[int] = None,
                 overdecompose: int = _frontend.DEFAULT_OVERDECOMPOSE) -> list[int]:
    """The chunk boundaries along axis 0 ``[0, b1, ..., total_rows]`` that :func:`load` uses:
    the read plan's tiles for ``chunks=None`` (``processors`` worker threads, by default
    those of the client in use or this machine's cores), else ``chunks`` rows or bytes (of
    ``dtype``, default the layout's) moved onto the decode-unit grid."""
    total = layout.total_rows
    if total == 0:
        return [0, 0]
    unit_rows, aligned = _core.unit_grid(layout)
    if chunks is None:
        p = processors if processors is not None else _worker_threads()
        plan = _core.plan(layout.shard_rows, p, overdecompose, unit_rows, aligned)
        rows = int(plan["tile_rows"])
    else:
        if isinstance(chunks, str):
            from dask.utils import parse_bytes

            dt = np.dtype(dtype) if dtype is not None else layout.dtype
            row_bytes = dt.itemsize * int(np.prod(layout.trailing_shape, dtype=np.int64))
            rows = max(1, parse_bytes(chunks) // row_bytes) if row_bytes else total
        else:
            rows = chunks
        rows = min(rows, total)
        if unit_rows > 0 and aligned:  # the plan's rule (plan.hpp "Decode units")
            rows = min(total, -(-rows // unit_rows) * unit_rows)
    if unit_rows > 0 and not aligned:
        return _on_units(layout, rows)
    return list(range(0, total, rows)) + [total]


def _on_units(layout: Layout, rows: int) -> list[int]:
    """Chunks of at least ``rows`` rows, each ending where the shard it ends in has a unit
    boundary (or at the shard's end): no unit is cut, though the shards' grids do not line up
    (ragged shards, a row range that starts inside a unit). Dask's chunks need not be equal,
    unlike the tiles of a launch, so each unit is decoded by one chunk here, where the plan's
    equal tiles may decode a unit twice."""
    offsets = layout.offsets
    units = _core.shard_units(layout)
    total = layout.total_rows
    bounds = [0]
    while bounds[-1] < total:
        want = bounds[-1] + rows
        if want >= total:
            bounds.append(total)
            break
        s = bisect.bisect_right(offsets, want) - 1  # the shard holding row `want`
        u, first_row = units[s]
        cut = want
        if u > 0:
            file_row = want - offsets[s] + first_row
            cut = min(offsets[s] + -(-file_row // u) * u - first_row, offsets[s + 1])
        bounds.append(cut)
    return bounds


def save(
    x: "dask.array.Array",
    dest: "_save.PathLike",
    *,
    format: str = "npy",
    overwrite: bool = False,
    manifest: bool = True,
    checksum: str = "none",
) -> "_save.SaveInfo":
    """Writes a ``dask.array.Array`` to the directory ``dest`` as shards, one per chunk along
    axis 0, that :func:`load` (and :func:`shardload.load`) read back.

    The dataset is the one :func:`shardload.save` writes (same names, formats, metadata and
    manifest) and is published the same way, once: this process checks ``dest`` and creates
    the hidden staging directory beside it with every shard file; the chunks are computed and
    written as one Dask computation (the threaded scheduler, or the ``dask.distributed``
    client in use: each worker writes the chunks it computed with positional writes into the
    shard files, so ``dest`` must be on a file system every worker sees); then this process
    writes the metadata and the manifest and renames the directory into place. If a chunk's
    computation or write fails (or the computation is interrupted), the staging directory is
    removed, nothing is published and the error is raised here. A Ctrl-C during the commit
    does not stop it: the ``KeyboardInterrupt`` raised after it has a note saying the save
    completed.

    Shard ``i`` holds chunk ``i``'s rows (``x.chunks[0]``, empty chunks included); chunks split
    along trailing axes are first joined (``x.rechunk``), since a shard holds whole rows.

    Args:
        x: a ``dask.array.Array`` of 1 or more dimensions and known chunk sizes, of bool,
            integers, float16/32/64 or complex64/128; each computed chunk must be a
            ``numpy.ndarray`` of that dtype (any memory order and byte order).
        dest: a local directory (absent, empty, or with ``overwrite=True`` a dataset of an
            earlier save). Object storage (``s3://``) is not written this way: save the
            computed array with :func:`shardload.numpy.save`.
        format: ``"npy"``, ``"raw"`` or ``"zarr"``.
        overwrite, manifest, checksum: as for :func:`shardload.save`.

    Returns:
        A :class:`shardload.SaveInfo`: ``target`` ``"dask"``, ``processors`` the processes
        whose workers wrote chunks, ``tiles`` the chunks written, ``write_s`` the computation.

    Raises:
        TypeError, ValueError: an argument is wrong; the message names it.
        NotImplementedError: ``dest`` is an object-storage URL.
        DestinationExistsError: ``dest`` is taken (see :func:`shardload.save`).
        ShardWriteError: writing failed; the message names the file. Nothing is published.
        Whatever a chunk's computation raises; nothing is published.
    """
    t_call = time.perf_counter()
    try:
        import dask.array as da
        from dask.base import tokenize
        from dask.delayed import Delayed
        from dask.highlevelgraph import HighLevelGraph
    except ImportError:
        raise ImportError("shardload.dask.save needs dask (pip install 'dask[array]')") from None
    path, _ = _save._arguments(dest, num_shards=None, shard_rows=None, format=format,
                               overwrite=overwrite, manifest=manifest, checksum=checksum,
                               info=None, storage_options=None)
    if not _core.path_traits(path).kernel_files:
        # A store's keys (object storage), which a save that several processes fill does not
        # write; a scheme no store serves is refused by the save's own check of `dest`.
        raise NotImplementedError(
            "save: shardload.dask.save writes to a directory only, found "
            f"{_core.redact_secrets(repr(os.fsdecode(path)))}; "
            "for object storage save the computed array: "
            "shardload.numpy.save(x.compute(), dest)")
    if not isinstance(x, da.Array):
        raise TypeError(f"save: expected a dask.array.Array, found {type(x).__name__}")
    dt = np.dtype(x.dtype)
    _save._refuse_masked(x._meta)
    _save._check_host_array(dt, x.ndim)
    if any(np.isnan(c) for dim in x.chunks for c in dim):
        raise ValueError("save: the array's chunk sizes are unknown (NaN); call "
                         "x.compute_chunk_sizes() first")
    if len(x.chunks[0]) > _save._MAX_SHARDS:
        raise ValueError(f"save: the array has {len(x.chunks[0])} chunks along axis 0, more "
                         f"than the {_save._MAX_SHARDS} shards a save writes; rechunk it")
    if any(len(c) > 1 for c in x.chunks[1:]):
        x = x.rechunk({i: -1 for i in range(1, x.ndim)})
    native = dt.newbyteorder("=")
    rows = [int(r) for r in x.chunks[0]]

    handle = _core.staged_save_begin(path, [int(d) for d in x.shape], str(native), rows,
                                     format, bool(overwrite), bool(manifest), checksum)
    t_begun = time.perf_counter()
    try:
        token = tokenize(x.name, handle)
        name = f"shardload-save-{token}"
        handle_key = f"shardload-save-handle-{token}"
        done_key = f"shardload-save-done-{token}"
        graph: dict[Any, Any] = {handle_key: handle}
        trailing_zeros = (0,) * (x.ndim - 1)
        keys = []
        lo = 0
        for i, r in enumerate(rows):
            key = (name, i)
            graph[key] = (_write_chunk, handle_key, (x.name, i, *trailing_zeros), lo, lo + r)
            keys.append(key)
            lo += r
        graph[done_key] = (list, keys)
        hlg = HighLevelGraph.from_collections(done_key, graph, dependencies=[x])
        writers = Delayed(done_key, hlg).compute()
        t_written = time.perf_counter()
        _core.staged_save_commit(handle)
    except BaseException:
        _core.staged_save_abort(handle)
        raise
    t_end = time.perf_counter()
    return _save.SaveInfo(target="dask", processors=len(set(writers)), tiles=len(rows),
                          num_shards=len(rows), bytes=int(x.nbytes),
                          prepare_s=t_begun - t_call, write_s=t_written - t_begun,
                          commit_s=t_end - t_written, total_s=t_end - t_call)


def _write_chunk(handle: tuple, block: Any, lo: int, hi: int) -> tuple[str, int]:
    """One chunk written as global rows [lo, hi) of the staged save; returns the writing
    process (host, pid)."""
    # A chunk may compute to a masked array whatever the meta says.
    _save._refuse_masked(block, f"rows [{lo}, {hi}): ")
    a = np.asarray(block)
    if a.dtype.byteorder not in ("=", "|"):
        a = a.astype(a.dtype.newbyteorder("="))
    _core.staged_save_write(handle, lo, hi, np.ascontiguousarray(a))
    return socket.gethostname(), os.getpid()
