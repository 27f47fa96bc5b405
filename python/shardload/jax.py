"""The JAX front end: a sharded dataset into one global ``jax.Array``, sharded along axis 0.

Each process reads only the rows of its own (addressable) shards of the array, straight from
the engine into host buffers of just those rows, and hands them to its devices; nothing is
gathered and no process holds the whole array::

    import shardload.jax

    x = shardload.jax.load("data/")          # every device of every process, one "rows" axis

    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 2), ("rows", "cols"))
    y = shardload.jax.load("data/*.parquet", astype="float32",
                           sharding=NamedSharding(mesh, PartitionSpec("rows", "cols")))

On several processes (``jax.distributed``) every process of the sharding calls ``load`` with
the same arguments, in the same order, as for any global array.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Unpack

import numpy as np

from . import _core, _errors, _frontend
from ._args import DTypeLike, SourceLike, _bool, _found
from ._info import LoadInfo, LoadProgress
from ._layout import Layout
from ._options import DiscoverOptions, StorageOptions

if TYPE_CHECKING:
    import jax

__all__ = ["load", "default_sharding"]

logger = logging.getLogger("shardload")

WHERE = "shardload.jax.load"

# How long a process that has read its rows waits for the other processes of the sharding to
# report theirs. Processes read equal shares, so a peer this late is stuck, not slow.
DEFAULT_TIMEOUT_S = 600.0


def default_sharding() -> "jax.sharding.NamedSharding":
    """Every device of every process on one mesh axis named ``"rows"``, axis 0 split over it
    (in ``jax.devices()`` order, so each process holds one contiguous block of rows)."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    return NamedSharding(Mesh(np.array(jax.devices()), ("rows",)), PartitionSpec("rows"))


def load(
    source: SourceLike | Layout,
    *,
    sharding: "jax.sharding.Sharding | None" = None,
    row_range: "tuple[int | None, int | None] | slice | None" = None,
    astype: DTypeLike | None = None,
    threads: int | None = None,
    overdecompose: int = _frontend.DEFAULT_OVERDECOMPOSE,
    info: bool = False,
    progress: "Callable[[LoadProgress], object] | bool | None" = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    reader: str | None = None,
    storage_options: StorageOptions | None = None,
    **options: Unpack[DiscoverOptions],
) -> "jax.Array | tuple[jax.Array, LoadInfo]":
    """Loads a sharded dataset into one global ``jax.Array`` laid out by ``sharding``.

    The source is discovered and validated as by :func:`shardload.discover` (its keyword
    arguments are shared and checked the same way), or passed as a :class:`Layout`; every
    process discovers it itself (pass a Layout, which pickles small, to discover once). Then
    each process takes the index of each of its addressable devices
    (``sharding.addressable_devices_indices_map``), reads the rows of each distinct row range
    once with the engine's threads into a host buffer of just those rows (rows that several
    of its devices hold, as in a replicated sharding, are read once), moves each device's part
    to its device (``jax.device_put``) and builds the global array from them
    (``jax.make_array_from_single_device_arrays``). A sharding that also splits the trailing
    axes is served from the same row buffers.

    Rows that do not divide evenly: JAX's shardings need every piece of an axis to be the
    same size (jax 0.10 raises for 1001 rows over 4 devices), so a row count that the
    sharding's axis-0 pieces do not divide is refused, before anything is read, with a
    ValueError naming the rows and the pieces and giving the ``row_range`` of the largest
    count that divides. Nothing is padded: pad or trim yourself if you need every row.

    dtypes: the array has the dtype JAX makes of the (cast) dtype, as ``jnp.asarray`` does:
    without ``jax_enable_x64``, 64-bit types become their 32-bit kin (cast on the host, once,
    after the read). A dtype JAX has no type for (long double) is a TypeError.

    Devices: the rows always pass through host memory (a GPU device receives them by
    ``device_put``); peak host memory is about one device's rows beyond the replicated ranges.

    Several processes: every process must have found the same dataset (a node-local path
    whose copies differ would make one array of several datasets' rows, or give the processes
    different shapes), so after discovery the processes of the sharding compare the array's
    shape and dtype and each shard's rows and size (through ``jax.distributed``'s key-value
    store, one exchange): a difference is a LayoutError on each, naming the first shard that
    differs. Copies whose bytes differ at the same sizes are not told apart. The array is
    whole only if every process read its rows, so after its own read each process reports to
    the others through ``jax.distributed``'s key-value store
    and waits for theirs. A process whose read failed raises its own error at once and tells
    the others, which raise the same error type with its message (naming the process, the
    file, the tile and the rows). None of them waits in a device collective; a process that
    does not report within ``timeout`` seconds (it crashed, or never called ``load``) gives a
    TimeoutError naming it.

    Args:
        source: a directory, numbered pattern, glob, list of paths (local, ``s3://`` or
            ``http(s)://``), or a Layout.
        sharding: a ``jax.sharding.Sharding`` for the array's shape (None:
            :func:`default_sharding`).
        row_range: rows ``(lo, hi)`` or a slice ``lo:hi``: the array is just those rows.
        astype: the dtype to cast to after the read (numpy casting rules).
        threads: the threads each process reads with (None: one per core it may run on).
        overdecompose: tiles per thread, an int >= 1.
        info: True to return ``(array, LoadInfo)``: this process's reads (``total_rows`` and
            ``bytes`` are the rows it read, ``target`` is ``"host"``).
        progress: a callable taking one :class:`LoadProgress`, called on every process with
            its own reads: ``"discovered"``, ``"filling"`` after each tile with the tiles and
            bytes this process has read so far (``bytes`` is all it reads: its rows, each
            distinct range once), and ``"filled"`` when its rows are read and on its devices.
            Called from the engine thread that finished the tile; an exception it raises
            stops this process's load, is raised here and reaches the other processes as
            any failure does. True: a bar on stderr (tqdm) on process 0 only, one bar per
            job, of process 0's rows (processes read equal shares).
        timeout: seconds to wait for the other processes after this one has read its rows.
        reader: the name of a Python reader (:func:`shardload.register_reader`).
        storage_options: object storage options, as for :func:`shardload.discover`.

    Returns:
        The global ``jax.Array``, or ``(array, LoadInfo)`` with ``info=True``.

    Raises:
        TypeError, ValueError: an argument is wrong, or the rows do not split evenly.
        LayoutError: the files do not form a valid dataset.
        ShardReadError: reading failed here or on another process (a file changed or gone
            since discovery, an I/O error, damaged data); the message names the file.
        OutOfMemoryError: this process's rows do not fit its memory (nothing was read).
        TimeoutError: another process did not report within ``timeout``.
        LayoutError: another process of the sharding found another dataset.
    """
    import jax

    if sharding is None:
        sharding = default_sharding()
    elif not isinstance(sharding, jax.sharding.Sharding):
        raise TypeError(f"sharding: expected a jax.sharding.Sharding or None, found "
                        f"{_found(sharding)}")
    wait_s = _timeout_arg(timeout)
    peers = _Peers(sharding)
    try:
        result = _load_here(source, sharding, peers, wait_s, row_range=row_range, astype=astype,
                            threads=threads, overdecompose=overdecompose, info=info,
                            progress=progress, reader=reader,
                            storage_options=storage_options, options=options)
    except BaseException as e:
        peers.tell_failure(e)
        raise
    peers.tell_done_and_wait(wait_s)
    return result


def _load_here(source: object, sharding: Any, peers: "_Peers", wait_s: float, *,
               progress: object, row_range: object,
               astype: object,
               threads: object, overdecompose: object, info: object, reader: str | None,
               storage_options: StorageOptions | None,
               options: Mapping[str, Any]) -> Any:
    """This process's part: discovery, its rows read once per distinct range, its devices'
    arrays, the global array."""
    import jax

    prepared = _frontend.prepare(WHERE, source, row_range=row_range, astype=astype,
                                 reader=reader, storage_options=storage_options,
                                 options=options)
    n_threads = _frontend.threads_arg(threads)
    k = _frontend.overdecompose_arg(overdecompose)
    want_info = _bool("info", info)
    layout = prepared.layout
    dtype = _jax_dtype(prepared.dtype)
    cast = None if dtype == layout.dtype else dtype
    shape = tuple(int(n) for n in layout.shape)
    index_map = _indices(sharding, shape, row_range is not None)
    ranges = _row_ranges(index_map, shape[0])
    peers.agree_on(layout, shape, dtype, wait_s)
    reporter = _frontend._Reporter(progress, prepared, WHERE,
                                   rows=sum(hi - lo for lo, hi, _ in ranges),
                                   bar=jax.process_index() == 0)
    try:
        reporter.stage("discovered")
        array, plans = _fill_devices(prepared, ranges, sharding, shape, cast, n_threads, k,
                                     reporter)
        reporter.tiles = reporter.tiles_before
        reporter.tiles_before = 0
        reporter.stage("filled", reporter.tiles, reporter.rows)
    finally:
        reporter.close()
    tiles = tile_rows = rows_read = bytes_read = used_threads = 0
    fill_s = 0.0
    for plan, part in plans:
        tiles += int(plan["tiles"])
        tile_rows = max(tile_rows, int(plan["tile_rows"]))
        used_threads = max(used_threads, int(plan["threads"]))
        fill_s += float(plan["fill_s"])
        rows_read += part.total_rows
        bytes_read += part.nbytes
    total_s = time.perf_counter() - prepared.t_call
    logger.log(logging.INFO if total_s > 2.0 else logging.DEBUG,
               "%s: %s %s, %d rows read here into %d devices in %.3f s, %d tiles", WHERE,
               shape, array.dtype, rows_read, len(index_map), total_s, tiles)
    if not want_info:
        return array
    return array, LoadInfo(target="host", processors=used_threads, overdecompose=k,
                           tile_rows=tile_rows, tiles=tiles, total_rows=rows_read,
                           bytes=bytes_read, discovery_s=prepared.discovery_s, startup_s=0.0,
                           launch_s=0.0, fill_s=fill_s, total_s=total_s,
                           remote_retries=_core.remote_retries() - prepared.retries_before)


def _fill_devices(prepared: Any, ranges: list, sharding: Any, shape: tuple[int, ...],
                  cast: Any, n_threads: int, k: int, reporter: Any) -> tuple[Any, list]:
    """Reads each row range once into a host buffer and puts each device's part on it;
    returns the global array and each range's plan and layout."""
    import jax

    layout = prepared.layout
    arrays = []
    plans = []
    for i, (lo, hi, members) in enumerate(ranges):
        part = layout.slice_rows(lo, hi)
        buf = _aligned_empty(part.shape, part.dtype)
        reporter.more_fills = i + 1 < len(ranges)
        try:
            plan = _frontend.fill(dataclasses.replace(prepared, layout=part), buf,
                                  threads=n_threads, overdecompose=k, reporter=reporter)
        except _errors.ShardReadError as e:
            # The engine counts the tiles' rows from the start of the range it was given.
            raise _with_prefix(e, f"process {jax.process_index()}, reading the array's rows "
                                  f"[{lo}, {hi}) (tile rows count from {lo}): ") from None
        plans.append((plan, part))
        reporter.tiles_before += int(plan["tiles"])
        reporter.rows_before += hi - lo
        if cast is not None:
            read, buf = buf, _aligned_empty(buf.shape, cast)
            np.copyto(buf, read, casting="unsafe")
            del read
        for device, a, b, rest in members:
            piece = buf[(slice(a - lo, b - lo),) + rest]
            # A CPU device takes an aligned buffer as it is (no copy) when it may alias it;
            # only a buffer that no other device gets, as a whole, so that a donated array
            # can never write into another device's rows.
            alone = len(members) == 1 and piece.shape == buf.shape
            arrays.append(jax.device_put(piece, device, may_alias=alone))
        del buf
    reporter.rows_before = 0
    return jax.make_array_from_single_device_arrays(shape, sharding, arrays), plans


# XLA's CPU client uses a host buffer in place (no copy) only if it is this aligned.
_ALIGN = 64


def _aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-order array whose data starts on an ``_ALIGN``-byte boundary; a
    size this process cannot allocate is an :class:`OutOfMemoryError`."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    try:
        raw = np.empty(nbytes + _ALIGN, np.uint8)
    except (MemoryError, ValueError) as e:
        raise _errors.OutOfMemoryError(
            f"{WHERE}: {tuple(shape)} {dtype} ({_core.size_string(nbytes)}) does not fit this "
            f"process's memory: {e}") from None
    start = -raw.ctypes.data % _ALIGN
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def _with_prefix(error: OSError, prefix: str) -> OSError:
    new = type(error)(prefix + str(error))
    new.filename, new.errno = error.filename, error.errno
    return new


def _timeout_arg(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"timeout: expected seconds > 0, found {_found(value)}")
    return float(value)


def _jax_dtype(dtype: np.dtype) -> np.dtype:
    import jax

    canonical = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    try:
        jax.numpy.zeros((0,), canonical)
    except TypeError:
        raise TypeError(f"{WHERE}: JAX has no array type for {dtype}; pass astype= a dtype it "
                        "has (float32, float64, ...)") from None
    return canonical


def _indices(sharding: Any, shape: tuple[int, ...],
             ranged: bool) -> Mapping[Any, tuple[slice, ...]]:
    """Each addressable device's index into the array; rows that the sharding's axis-0 pieces
    do not divide are refused here, naming both."""
    from jax.sharding import PartitionSpec

    spec = getattr(sharding, "spec", None)
    if isinstance(spec, PartitionSpec) and len(spec) > len(shape):
        # JAX raises a bare IndexError for it ("list index out of range").
        raise ValueError(f"{WHERE}: the sharding's PartitionSpec{tuple(spec)} has {len(spec)} "
                         f"entries, and the array has {len(shape)} axes (shape {shape})")
    try:
        return sharding.addressable_devices_indices_map(shape)
    except ValueError as e:
        pieces = _axis0_pieces(sharding, shape)
        rows = shape[0]
        if pieces is None or rows % pieces == 0:
            raise ValueError(f"{WHERE}: the sharding does not fit the array's shape {shape}: "
                             f"{e}") from None
        even = rows - rows % pieces
        if not even:
            fix = "pass a sharding with fewer pieces"
        elif ranged:
            fix = f"pass a row_range of {even} rows, or pad the data"
        else:
            fix = f"pass row_range=(0, {even}) to load the first {even}, or pad the data"
        raise ValueError(f"{WHERE}: {rows} rows do not split evenly into the {pieces} pieces "
                         f"the sharding cuts axis 0 into ({sharding.num_devices} devices); JAX "
                         f"needs pieces of one size: {fix}") from None


def _axis0_pieces(sharding: Any, shape: tuple[int, ...]) -> int | None:
    """How many pieces the sharding cuts axis 0 into (a divisor of its device count)."""
    n = int(sharding.num_devices)
    try:
        return n // int(sharding.shard_shape((n,) + shape[1:])[0])
    except (ValueError, ZeroDivisionError):
        return None


def _row_ranges(index_map: Mapping[Any, tuple[slice, ...]], rows: int
                ) -> list[tuple[int, int, list[tuple[Any, int, int, tuple[slice, ...]]]]]:
    """The row ranges to read, each once: the devices' axis-0 ranges, overlapping ones merged
    (a replicated sharding reads its rows once per process); each with its devices, their rows
    and their index into the trailing axes."""
    wanted = []
    for device, index in index_map.items():
        lo, hi, _ = index[0].indices(rows) if index else (0, rows, 1)
        wanted.append((lo, max(lo, hi), device, tuple(index[1:])))
    wanted.sort(key=lambda w: (w[0], w[1]))
    ranges: list[tuple[int, int, list[tuple[Any, int, int, tuple[slice, ...]]]]] = []
    for lo, hi, device, rest in wanted:
        if ranges and lo < ranges[-1][1]:
            start, stop, members = ranges[-1]
            ranges[-1] = (start, max(stop, hi), members + [(device, lo, hi, rest)])
        else:
            ranges.append((lo, hi, [(device, lo, hi, rest)]))
    return ranges


# Loads per set of processes so far: every process of a set numbers its loads alike, so the
# n-th load of a set uses the same keys on each.
_loads: dict[str, int] = {}


class _Peers:
    """The other processes of the sharding, told through the distributed key-value store that
    this one read its rows (or how it failed), and waited for."""

    def __init__(self, sharding: Any) -> None:
        import jax

        self.me = jax.process_index()
        processes = sorted({d.process_index for d in sharding.device_set} | {self.me})
        self.others = [p for p in processes if p != self.me]
        self.client: Any = None
        self.prefix = ""
        if self.others:
            from jax._src import distributed

            self.client = distributed.global_state.client
            if self.client is None:
                raise RuntimeError(f"{WHERE}: the sharding spans processes {processes} but "
                                   "jax.distributed is not initialized in this one")
            group = ",".join(map(str, processes))
            n = _loads.get(group, 0)
            _loads[group] = n + 1
            self.prefix = f"shardload/jax.load/{group}/{n}"
            self.layouts = f"shardload/jax.load.layout/{group}/{n}"

    def _tell(self, record: dict[str, Any]) -> None:
        if self.client is not None:
            self.client.key_value_set(f"{self.prefix}/{self.me}", json.dumps(record))

    def tell_failure(self, error: BaseException) -> None:
        try:
            self._tell({"type": type(error).__name__, "message": str(error),
                        "filename": getattr(error, "filename", None),
                        "errno": getattr(error, "errno", None)})
        except Exception as e:  # the process's own error is the one to raise
            logger.warning("%s: could not tell the other processes that this one failed: %s",
                           WHERE, e)

    def tell_done_and_wait(self, timeout: float) -> None:
        """Tells the others this process read its rows, then waits until each has said the
        same (polling, so Ctrl-C works); the first failure reported is raised here."""
        if self.client is None:
            return
        self._tell({"type": None})
        self._wait(self.prefix, timeout, "their rows read", "reading its own")

    def agree_on(self, layout: Layout, shape: tuple[int, ...], dtype: np.dtype,
                 timeout: float) -> None:
        """Compares what this process found with the others': the array's shape and dtype and
        each shard's rows and size; raises a LayoutError naming the first difference (every
        process finds one, so every process raises)."""
        if self.client is None:
            return
        mine = _summary(layout, shape, dtype)
        self.client.key_value_set(f"{self.layouts}/{self.me}", json.dumps(mine))
        theirs = self._wait(self.layouts, timeout, "the dataset they found", "finding its own")
        for process in sorted(theirs):
            other = json.loads(theirs[process])
            if other != mine:
                difference = _core.redact_secrets(
                    _summary_difference(layout, mine, other, self.me, process))
                raise _errors.LayoutError(
                    f"{WHERE}: processes {self.me} and {process} found different datasets "
                    f"({difference}): one array of them would mix their rows. Give every "
                    "process the same files (a node-local path must hold the same copy on "
                    "every node), or discover once and pass the Layout to every process")

    def _wait(self, prefix: str, timeout: float, what: str, after: str) -> dict[int, str]:
        """Each other process's value under `prefix`, polled for (so Ctrl-C works) until all
        are there; a failure another process reported before its value is raised here."""
        deadline = time.monotonic() + timeout
        got: dict[int, str] = {}
        pause = 0.002
        while True:
            failed = None
            for where in dict.fromkeys((self.prefix, prefix)):
                for key, value in self.client.key_value_dir_get(where):
                    name = key.rsplit("/", 1)[-1]
                    if not name.isdigit() or int(name) not in self.others:
                        continue
                    process = int(name)
                    if where == self.prefix:
                        record = json.loads(value)
                        if record["type"] is not None:
                            failed = failed or _peer_error(process, record)
                            continue
                    if where == prefix:
                        got[process] = value
            pending = sorted(set(self.others) - set(got))
            if not pending:
                return got
            if failed is not None:
                raise failed
            if time.monotonic() > deadline:
                raise TimeoutError(f"{WHERE}: process(es) {pending} did not report {what} "
                                   f"within {timeout:g} s of this process (process "
                                   f"{self.me}) {after}; the array is not whole (did every "
                                   "process call load?)")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)


def _summary(layout: Layout, shape: tuple[int, ...], dtype: np.dtype) -> dict[str, Any]:
    """What the processes of one array must agree on: its shape and dtype, and each shard's
    first file row, rows and size (not its path: node-local copies may lie elsewhere)."""
    from . import _feed_core

    return {"shape": list(shape), "dtype": str(dtype),
            "shards": [[int(first), int(rows), int(size)]
                       for _, first, rows, size, *_ in _feed_core.shard_states(layout)]}


def _summary_difference(layout: Layout, mine: Mapping[str, Any], theirs: Mapping[str, Any],
                        me: int, other: int) -> str:
    """The first difference between this process's summary and another's, in words."""
    a, b = mine["shards"], theirs["shards"]
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            return (f"shard {i} ({layout.paths[i]} here) has {a[i][1]} rows, {a[i][2]} bytes "
                    f"on process {me} but {b[i][1]} rows, {b[i][2]} bytes on process {other}")
    if len(a) != len(b):
        return (f"process {me} found {len(a)} shards, an array of {tuple(mine['shape'])}, "
                f"process {other} {len(b)} shards, {tuple(theirs['shape'])}")
    return (f"the array is {tuple(mine['shape'])} {mine['dtype']} on process {me} but "
            f"{tuple(theirs['shape'])} {theirs['dtype']} on process {other}")


def _peer_error(process: int, record: Mapping[str, Any]) -> BaseException:
    """The error another process raised, as the same type where it is one of shardload's or
    a builtin exception, its message prefixed with the process."""
    name = record["type"]
    cls = getattr(_errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, _errors.Error)):
        cls = getattr(builtins, name, None)
        if not (isinstance(cls, type) and issubclass(cls, Exception)
                and cls.__module__ == "builtins"):
            cls = RuntimeError
    message = f"{WHERE}: process {process} failed ({name}): {record['message']}"
    try:
        error = cls(message)
    except Exception:
        error = RuntimeError(message)
    if isinstance(error, OSError):
        error.filename = record.get("filename")
        error.errno = record.get("errno")
    return error
