"""load(): a sharded dataset into one distributed ``cupynumeric.ndarray``, through Legate."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Unpack

if TYPE_CHECKING:
    import cupynumeric

from . import _core, _legate_start
from ._args import DTypeLike, SourceLike, _bool, _found, _overdecompose, _renamed, _source
from ._discover import _reader_options, _with_storage_options
from ._info import LoadInfo, LoadProgress, ProgressBar, ProgressCallback
from ._layout import Layout, ManifestState, _rows
from ._layout import _decode_layout  # noqa: F401  (pickles of older versions name it here)
from ._legate_start import _check_legate_dims, _check_thread, _first_rank, _start_runtime
from ._manifest import _discover_for_job
from ._options import DiscoverOptions, StorageOptions, _astype, _decoded, _options

logger = logging.getLogger("shardload")
logger.addHandler(logging.NullHandler())
# A load that takes longer than this logs its summary at INFO (DEBUG otherwise).
_SUMMARY_AFTER_S = 2.0


def load(
    source: SourceLike | Layout,
    *,
    overdecompose: int = 1,
    row_range: "tuple[int | None, int | None] | slice | None" = None,
    astype: DTypeLike | None = None,
    info: bool = False,
    progress: ProgressCallback | None = None,
    reader: str | None = None,
    storage_options: StorageOptions | None = None,
    **options: Unpack[DiscoverOptions],
) -> "cupynumeric.ndarray | tuple[cupynumeric.ndarray, LoadInfo]":
    """Loads a sharded dataset into one distributed ``cupynumeric.ndarray``.

    The source is discovered and validated first (see :func:`discover`, whose
    keyword arguments this function shares and checks the same way), or
    passed as a :class:`Layout`, which carries the options it was discovered
    with: passing any of them with a Layout is a TypeError. The output is
    allocated once with its final shape and dtype, split along axis 0 into
    about ``overdecompose`` tiles per processor (GPUs if any, else OpenMP,
    else CPUs), and filled by one parallel launch in which each tile reads
    only the slices of the shards it covers.

    Call it from the main thread (Legate launches only from the thread that
    started its runtime). The first call starts the runtime and gives SIGINT
    back to Python's handler: a Ctrl-C during a load raises
    KeyboardInterrupt when the load has finished (a launch cannot be
    cancelled), and one while idle raises it at once, as without Legate.

    Args:
        source: a directory, numbered pattern, glob, list of paths, or Layout.
        overdecompose: K, an int >= 1 (not a bool or a float); tiles =
            ceil(rows / ceil(rows / parts)) with parts = min(K, 256) * P, at
            most max(P, 65536) (see "The read plan" in docs/design.md), so any K
            gives a bounded launch.
        options: discover()'s keywords (:class:`DiscoverOptions`: pattern, format, the format
            and discovery options) and storage_options: as for :func:`discover`.
        row_range: load only rows [lo, hi): a pair ``(lo, hi)`` or a slice ``lo:hi`` (step
            None or 1; None for a default bound), under :meth:`Layout.read`'s rule: bounds
            in ``[0, total_rows]``, ``lo <= hi``, never negative or clamped (ValueError).
            Only the shards the range covers are opened and only those rows read.
            ``rows=`` is its deprecated spelling.
        astype: the dtype of the result, as ``ndarray.astype`` / h5py's ``astype`` cast
            (numpy casting rules, e.g. float to int truncates), for every format.
            Parquet/arrow columns that convert to it without loss are decoded straight into
            it (when the source is not a Layout); columns of different types, which have no
            stored dtype of their own, are decoded into it, and a value that does not
            convert exactly is then an error; everything else is cast after the read. A numeric dtype
            Legate has, native byte order: bool, int8-64, uint8-64, float16/32/64,
            complex64/128 (``float128`` is refused before anything is read). ``dtype``
            is the type stored in raw files.
        info: True to return ``(array, LoadInfo)``: the plan, the time of
            each stage, the bytes and GB/s (see :class:`LoadInfo`).
        reader: the name of a Python reader (:func:`register_reader`), the same as
            ``format=name`` but that a directory source without a pattern means the
            reader's numbered files: the files are read by its functions, in Legate tasks.
            Of the discovery options only ``pattern`` applies with it, and the source is
            not a Layout (TypeError otherwise).
        progress: a callable taking one :class:`LoadProgress`, called in
            this thread at each stage boundary (discovered, started,
            launching, filled); or True for a progress bar on stderr (tqdm).
            Legate reports no tile as it completes, so
            there is no report between "launching" and "filled": the filled
            fraction jumps from 0 to 1. An exception it raises propagates;
            raised before "filled", it stops the load before the launch (at
            "launching" the launch is not yet submitted).

    The ``shardload`` logger (:mod:`logging`) gets a DEBUG record per stage
    and a summary (shape, size, seconds, GB/s), at INFO when the load took
    more than 2 seconds, else at DEBUG.

    Returns:
        The array; it lives in Legate's memory and joins cuPyNumeric math.
        With ``info=True``, the tuple ``(array, LoadInfo)``.

    Raises:
        TypeError: an argument has the wrong type, or options were passed
            with a Layout; the message names them.
        ValueError: an argument has a bad value (see :func:`discover`), or K < 1.
        RuntimeError: called from a thread other than the main thread.
        LayoutError: the files do not form a valid dataset.
        ShardReadError: reading failed in some tile (I/O error, a file changed
            since discovery, damaged or null data); the message names the file
            and the rows.
        OutOfMemoryError: the dataset is larger than the memory Legate has for
            the processors of the load (a MemoryError; nothing was allocated).
    """
    t_call = time.perf_counter()
    retries_before = _core.remote_retries()
    _check_thread("shardload.load")
    given: dict[str, Any] = dict(options)
    if "rows" in given:
        row_range = _renamed("load", {"rows": given.pop("rows")}, {"rows": "row_range"},
                             {"row_range": row_range})["row_range"]
    if reader is not None:
        given = _reader_options("load", reader, source, given, storage_options)
    checked = _options("load", given, layout=isinstance(source, Layout))
    k = _overdecompose(overdecompose)
    _bool("info", info)
    cast = _astype(astype)
    if progress is not None and progress is not True and not callable(progress):
        raise TypeError(f"progress: expected a callable taking a LoadProgress, True for a "
                        f"progress bar, or None, found {_found(progress)}")
    if isinstance(source, Layout):
        if storage_options is not None:
            raise TypeError("load: storage_options cannot be passed with a Layout, whose paths "
                            "carry them")
        layout = source
    else:
        source = _with_storage_options(_source(source), storage_options)
        layout = _decoded(lambda o, dt: _discover_for_job(source, o, dt), checked, cast, "load",
                          cast_after=True)
        if layout.manifest_state is not ManifestState.NONE:
            # A manifest that could not be used is worth a look; one used or absent is not.
            quiet = layout.manifest_state in (ManifestState.USED, ManifestState.TRUSTED,
                                              ManifestState.ABSENT)
            logger.log(logging.DEBUG if quiet else logging.INFO, "load: %s",
                       layout.manifest_status)
    if row_range is not None:
        layout = layout.slice_rows(*_rows(row_range, layout.total_rows))
    _check_legate_dims(layout)
    nbytes = layout.nbytes
    t_discovered = time.perf_counter()
    discovery_s = t_discovered - t_call if not isinstance(source, Layout) else 0.0

    bar = None
    if progress is True:
        # One bar per job: every rank runs this, and only the first draws it; without tqdm
        # every rank raises.
        ProgressBar.require("shardload.load")
        progress = None
        if _first_rank():
            progress = bar = ProgressBar(nbytes, "shardload.load", layout.total_rows)
    try:
        return _load_reporting(layout, k, cast, info, progress, nbytes, t_call, t_discovered,
                               discovery_s, retries_before)
    finally:
        if bar is not None:
            bar.close()


def _load_reporting(layout: Layout, k: int, cast: "np.dtype | None", info: bool,
                    progress: "ProgressCallback | None", nbytes: int, t_call: float,
                    t_discovered: float, discovery_s: float, retries_before: int) -> Any:
    """load() from the launch on, reporting each stage to ``progress``."""

    def report(stage: str, tiles: int | None = None, elapsed: float | None = None) -> None:
        if elapsed is None:
            elapsed = time.perf_counter() - t_call
        logger.debug("load: %s after %.3f s", stage, elapsed)
        if progress is not None:
            done = stage == "filled"
            progress(LoadProgress(stage, tiles if done and tiles else 0, tiles,
                                  nbytes if done else 0, nbytes, elapsed))

    logger.debug("load: discovered %d shards, %d rows, %d bytes in %.3f s", layout.num_shards,
                 layout.total_rows, nbytes, discovery_s)
    report("discovered")
    started_before = _legate_start._runtime_ready
    _start_runtime()
    startup_s = 0.0 if started_before else time.perf_counter() - t_discovered
    import cupynumeric
    from legate.core import LogicalArray

    from . import _legate

    report("started")
    report("launching")
    # A task's error names its file and errno as data: the exception carries them already.
    owner, plan = _legate.load(layout, k)
    # LogicalArray adopts a copy; the capsule frees the original when dropped.
    array = LogicalArray.from_raw_handle(_legate.handle(owner))
    del owner
    result = cupynumeric.asarray(array)
    if cast is not None and cast != result.dtype:
        # After the fill, as numpy's astype: one pass over the array in Legate.
        result = result.astype(cast)
    total_s = time.perf_counter() - t_call
    load_info = LoadInfo(target=plan["target"], processors=plan["processors"], overdecompose=k,
                         tile_rows=plan["tile_rows"], tiles=plan["tiles"],
                         total_rows=layout.total_rows, bytes=nbytes, discovery_s=discovery_s,
                         startup_s=startup_s, launch_s=plan["launch_s"], fill_s=plan["fill_s"],
                         total_s=total_s,
                         remote_retries=_core.remote_retries() - retries_before)
    logger.log(logging.INFO if total_s > _SUMMARY_AFTER_S else logging.DEBUG,
               "loaded %s %s (%s) in %.3f s: %d tiles on %d %s processors, %.3f GB/s (discovery "
               "%.3f s, start-up %.3f s, launch %.3f s, fill %.3f s)", layout.shape,
               layout.dtype, _core.size_string(nbytes), total_s, load_info.tiles,
               load_info.processors, load_info.target, load_info.gb_per_s, discovery_s,
               startup_s, load_info.launch_s, load_info.fill_s)
    report("filled", load_info.tiles, total_s)
    if info:
        return result, load_info
    return result
