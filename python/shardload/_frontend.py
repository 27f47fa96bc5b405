"""What every front end that fills host memory (NumPy, JAX, Dask) does before it reads: the
arguments checked as :func:`shardload.load` checks them, the source discovered in this
process (no runtime), the row range cut and the cast decided; and the host fill itself, the
engine's threads reading straight into a caller's buffer (``_core.host_load``)."""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
import time
from typing import Any, Callable, Mapping, Optional

import numpy as np

from . import _core
from ._args import _found, _int, _overdecompose, _source
from ._discover import _discover, _reader_options, _with_storage_options
from ._info import LoadInfo, LoadProgress, ProgressBar
from ._layout import Layout, _rows
from ._options import _astype, _decoded, _options
from ._errors import OutOfMemoryError

logger = logging.getLogger("shardload")

# Tiles per thread of a host fill: enough that a thread finishing early takes another while
# shards differ in cost, few enough that planning and reporting cost nothing.
DEFAULT_OVERDECOMPOSE = 4


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A front end's checked request: the layout of exactly the rows to read, the dtype to
    cast to after the read (None: none), and when it started."""

    layout: Layout
    cast: Optional[np.dtype]
    discovery_s: float
    t_call: float
    retries_before: int

    @property
    def dtype(self) -> np.dtype:
        """The dtype the caller gets."""
        return self.cast if self.cast is not None else self.layout.dtype


def prepare(where: str, source: object, *, row_range: object, astype: object,
            reader: Optional[str], storage_options: Optional[Mapping[str, object]],
            options: Mapping[str, Any]) -> Prepared:
    """Checks a front end's arguments and discovers its source; ``where`` names the call in
    messages. Raises what :func:`shardload.load` raises for the same arguments."""
    t_call = time.perf_counter()
    retries_before = _core.remote_retries()
    given: dict[str, Any] = dict(options)
    if reader is not None:
        given = _reader_options(where, reader, source, given, storage_options)
    checked = _options(where, given, layout=isinstance(source, Layout))
    cast = _astype(astype, legate=False)
    if isinstance(source, Layout):
        if storage_options is not None:
            raise TypeError(f"{where}: storage_options cannot be passed with a Layout, whose "
                            "paths carry them")
        layout = source
        discovery_s = 0.0
    else:
        source = _with_storage_options(_source(source), storage_options)
        layout = _decoded(lambda o, dt: _discover(source, o, dt), checked, cast, where,
                          cast_after=True)
        discovery_s = time.perf_counter() - t_call
    if row_range is not None:
        layout = layout.slice_rows(*_rows(row_range, layout.total_rows))
    if cast is not None and cast == layout.dtype:
        cast = None
    return Prepared(layout, cast, discovery_s, t_call, retries_before)


# The engine's bound on threads (its 0 is "one per core", which Python spells None).
MAX_THREADS = 4096


def threads_arg(value: object) -> int:
    """``threads=``: None (one per core the process may run on) or an int from 1 to
    MAX_THREADS; the engine's 0 for None."""
    if value is None:
        return 0
    n = _int("threads", value)
    if not 1 <= n <= MAX_THREADS:
        raise ValueError(f"threads: expected an int from 1 to {MAX_THREADS} or None, found {n}")
    return n


def overdecompose_arg(value: object) -> int:
    """``overdecompose=`` checked as :func:`shardload.load` checks it, then at the plan's own
    cap (every larger K gives the same plan)."""
    return min(_overdecompose(value), 256)


def empty(layout: Layout, where: str) -> np.ndarray:
    """The array a host fill writes into: ``layout``'s shape and dtype, C order. A size this
    process cannot allocate is an :class:`OutOfMemoryError` before anything is read."""
    try:
        return np.empty(layout.shape, layout.dtype)
    except (MemoryError, ValueError) as e:
        raise OutOfMemoryError(f"{where}: {layout.shape} {layout.dtype} "
                               f"({_core.size_string(layout.nbytes)}) does not fit this "
                               f"process's memory: {e}") from None


def check_out(where: str, out: object, shape: tuple, dtype: np.dtype) -> None:
    """``out=``: a writable C-contiguous numpy array of exactly ``shape`` and ``dtype``."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{where}: out= must be a numpy.ndarray, found {_found(out)}")
    problems = []
    if tuple(out.shape) != tuple(shape):
        problems.append(f"has shape {tuple(out.shape)}, expected {tuple(shape)}")
    if out.dtype != dtype:
        problems.append(f"has dtype {out.dtype}, expected {dtype}")
    if not out.flags.c_contiguous:
        problems.append("is not C-contiguous")
    if not out.flags.writeable:
        problems.append("is not writable")
    if problems:
        raise ValueError(f"{where}: out= " + "; ".join(problems))


def check_out_maps_no_source_file(where: str, out: np.ndarray, layout: Layout) -> None:
    """``out=`` must not be a shared mapping of a file of the source (``np.load(shard,
    mmap_mode="r+")``): the engine's tiles would write into the files that other tiles still
    read, and a row read after its bytes were overwritten is another row's. A private
    (copy-on-write) mapping never reaches the file and is taken."""
    base: object = out
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, np.ndarray) and base.flags.owndata:
        return  # numpy's own memory, no file's (the usual case: nothing to look up)
    mapped = _shared_files_mapped(out.ctypes.data, out.nbytes)
    if not mapped:
        return
    files: dict[tuple[int, int], str] = {}
    stores: list[tuple[str, bytes]] = []  # a directory shard (a Zarr store), its real path
    for path in [*layout.paths, *layout._linked_paths]:
        if not _core.path_traits(path).kernel_files:
            continue  # a key of a store, no file of this machine's
        try:
            st = os.stat(path)
        except OSError:
            continue
        files[(st.st_dev, st.st_ino)] = path
        if stat.S_ISDIR(st.st_mode):
            stores.append((path, os.fsencode(os.path.realpath(path)) + b"/"))
    store_files: Optional[dict[tuple[int, int], str]] = None
    for name, identity in mapped:
        # The mapping's own device and inode, else (an overlay file system shows the layer's)
        # the file its path names now.
        shard = files.get(identity)
        if shard is None and stores:
            # A store's chunk files by identity too: a hard link to one has another name,
            # and a name /proc/self/maps escaped (a newline) leads nowhere.
            if store_files is None:
                store_files = _files_under([path for path, _ in stores])
            shard = store_files.get(identity)
        if shard is None:
            try:
                st = os.stat(name)
                shard = files.get((st.st_dev, st.st_ino))
            except OSError:
                pass
        if shard is None:
            real = os.path.realpath(name)
            shard = next((p for p, prefix in stores if real.startswith(prefix)), None)
        if shard is not None:
            shown = _core.redact_secrets(os.fsdecode(name))
            raise ValueError(
                f"{where}: out= is memory mapped from {shown}, a file of the source "
                f"({_core.redact_secrets(shard)}): the load would write into the files it "
                "reads, and read rows it had overwritten; pass an array of its own (or a "
                "copy-on-write mapping, mmap_mode='c')")


def _files_under(stores: list[str]) -> dict[tuple[int, int], str]:
    """The (st_dev, st_ino) of every regular file under each directory of ``stores``, each to
    its store. Links are followed, as the reader follows them to a chunk (a chunk file or a
    chunk directory linked from a pool); each directory is entered once, so a loop ends."""
    found: dict[tuple[int, int], str] = {}
    for store in stores:
        pending = [store]
        entered: set[tuple[int, int]] = set()
        while pending:
            directory = pending.pop()
            try:
                st = os.stat(directory)
                if (st.st_dev, st.st_ino) in entered:
                    continue
                entered.add((st.st_dev, st.st_ino))
                with os.scandir(directory) as entries:
                    for entry in entries:
                        try:
                            if entry.is_dir():
                                pending.append(entry.path)
                            elif entry.is_file():
                                target = entry.stat()
                                found[(target.st_dev, target.st_ino)] = store
                        except OSError:
                            continue  # a dangling link: no file to map
            except OSError:
                continue
    return found


def _shared_files_mapped(address: int, size: int) -> list[tuple[bytes, tuple[int, int]]]:
    """The files mapped MAP_SHARED over any byte of [address, address + size) in this
    process, each with its (st_dev, st_ino) as the mapping records them (Linux's
    /proc/self/maps; none elsewhere)."""
    if size <= 0:
        return []
    try:
        with open("/proc/self/maps", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    end = address + size
    found = []
    for line in lines:
        # "start-end perms offset major:minor inode path": a path may hold spaces.
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[5].startswith(b"/") or fields[1][3:4] != b"s":
            continue
        lo, _, hi = fields[0].partition(b"-")
        if int(lo, 16) < end and address < int(hi, 16):
            major, _, minor = fields[3].partition(b":")
            dev = os.makedev(int(major, 16), int(minor, 16))
            found.append((fields[5], (dev, int(fields[4]))))
    return found


class _Reporter:
    """``progress=`` of a host fill: None, a callable taking a :class:`LoadProgress` (called
    at "discovered", after each tile as "filling", and at "filled"), or True for a bar on
    stderr (tqdm).

    The reports count ``rows`` rows (default: the layout's; a JAX process counts its own),
    filled by one fill or several in turn: ``tiles_before`` and ``rows_before`` are those of
    the fills done before the current one. ``bar=False`` draws no bar for ``progress=True``
    (a JAX process other than the first: one bar per job)."""

    def __init__(self, progress: object, prepared: Prepared, where: str, *,
                 rows: Optional[int] = None, bar: bool = True) -> None:
        if progress is not None and not isinstance(progress, bool) and not callable(progress):
            raise TypeError(f"progress: expected a callable taking a LoadProgress, True for a "
                            f"progress bar, or None, found {_found(progress)}")
        self._prepared = prepared
        layout = prepared.layout
        self.rows = layout.total_rows if rows is None else rows
        self.nbytes = self.rows * layout.nbytes // layout.total_rows if layout.total_rows else 0
        self._callback: Optional[Callable[[LoadProgress], object]] = None
        self._bar: Any = None
        self.tiles: Optional[int] = None
        self.tiles_before = 0
        self.rows_before = 0
        self.more_fills = False
        if progress is True:
            ProgressBar.require(where)  # on every process of a job, though one draws
            if bar:
                self._bar = ProgressBar(self.nbytes, where, self.rows)
        elif callable(progress):
            self._callback = progress

    @property
    def wanted(self) -> bool:
        return self._callback is not None or self._bar is not None

    def stage(self, stage: str, tiles_done: int = 0, rows_done: int = 0) -> None:
        if self._bar is None and self._callback is None:
            return
        tiles_done += self.tiles_before
        rows_done += self.rows_before
        done = rows_done * self.nbytes // self.rows if self.rows else 0
        if stage == "filled":
            done = self.nbytes
        report = LoadProgress(stage, tiles_done, self.tiles, done, self.nbytes,
                              time.perf_counter() - self._prepared.t_call)
        if self._bar is not None:
            self._bar(report)
        if self._callback is not None:
            self._callback(report)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def fill(prepared: Prepared, out: np.ndarray, *, threads: int, overdecompose: int,
         reporter: Optional[_Reporter] = None) -> dict[str, Any]:
    """Fills ``out`` (``prepared.layout``'s shape and dtype, C-contiguous) with the layout's
    rows on the engine's threads, the GIL released; returns the plan and the fill's time."""
    layout = prepared.layout
    if layout.total_rows == 0 or layout.nbytes == 0:
        return {"tiles": 0, "tile_rows": 0, "threads": 0, "fill_s": 0.0}
    callback = None
    if reporter is not None and reporter.wanted:
        def callback(tiles_done: int, tiles: int, rows_done: int) -> None:
            # The plan of the fills still to come is not known yet.
            reporter.tiles = None if reporter.more_fills else reporter.tiles_before + tiles
            reporter.stage("filling", tiles_done, rows_done)
    return _core.host_load(layout, out, threads, overdecompose, callback)


def load_info(prepared: Prepared, plan: Mapping[str, Any], overdecompose: int,
              total_s: float) -> LoadInfo:
    """The :class:`LoadInfo` of a host fill: target "host", the threads as processors."""
    layout = prepared.layout
    return LoadInfo(target="host", processors=int(plan["threads"]), overdecompose=overdecompose,
                    tile_rows=int(plan["tile_rows"]), tiles=int(plan["tiles"]),
                    total_rows=layout.total_rows, bytes=layout.nbytes,
                    discovery_s=prepared.discovery_s, startup_s=0.0, launch_s=0.0,
                    fill_s=float(plan["fill_s"]), total_s=total_s,
                    remote_retries=_core.remote_retries() - prepared.retries_before)
