"""The NumPy front end: a sharded dataset, or a row range of it, into one ``numpy.ndarray``.

``shardload.numpy.load`` is ``numpy.load`` for a dataset of many files: the same
discovery, validation and formats as :func:`shardload.load`, without Legate. The engine's
threads (one per core by default) fill the array's tiles in parallel with positional reads
straight into it, the GIL released::

    import shardload.numpy

    a = shardload.numpy.load("data/")                          # every row
    b = shardload.numpy.load("data/*.parquet", columns=["x", "y"], astype="float64",
                             row_range=(1000, 2000))
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Mapping, Unpack

import numpy as np

from . import _core, _frontend
from ._api import DiscoverOptions, DTypeLike, Layout, LoadInfo, LoadProgress, SourceLike

__all__ = ["load"]

logger = logging.getLogger("shardload")


def load(
    source: SourceLike | Layout,
    *,
    row_range: "tuple[int | None, int | None] | slice | None" = None,
    astype: DTypeLike | None = None,
    threads: int | None = None,
    overdecompose: int = _frontend.DEFAULT_OVERDECOMPOSE,
    info: bool = False,
    progress: "Callable[[LoadProgress], object] | bool | None" = None,
    reader: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    **options: Unpack[DiscoverOptions],
) -> "np.ndarray | tuple[np.ndarray, LoadInfo]":
    """Loads a sharded dataset into one ``numpy.ndarray`` on the host.

    The source is discovered and validated as by :func:`shardload.discover` (whose keyword
    arguments this function shares and checks the same way: ``format``, ``pattern``,
    ``columns``, ``dtype``, ``trailing_shape``, ...), or passed as a :class:`Layout`. The
    array is allocated once with its final shape and dtype; its rows are cut into about
    ``overdecompose`` tiles per thread by the same plan as :func:`shardload.load` (tiles meet
    Zarr and HDF5 chunks and Parquet row groups, so each decodes once), and the engine's
    threads fill the tiles in parallel, each reading only the slices of the shards it covers.
    No runtime starts; any thread may call it.

    Args:
        source: a directory, numbered pattern, glob, list of paths (local, ``s3://`` or
            ``http(s)://``), or a Layout.
        row_range: rows ``(lo, hi)`` or a slice ``lo:hi`` (see :func:`shardload.load`): only
            the shards it covers are opened and only those rows read.
        astype: the dtype of the result, as ``ndarray.astype`` casts (numpy casting rules);
            Parquet/Arrow columns that convert without loss are decoded straight into it.
            Any numeric or bool numpy dtype, long double included.
        threads: the threads that read (None: one per core this process may run on).
        overdecompose: tiles per thread, an int >= 1 (more balance shards of unequal cost).
        info: True to return ``(array, LoadInfo)``; its ``target`` is ``"host"`` and its
            ``processors`` the threads that read.
        progress: a callable taking one :class:`LoadProgress` (stages ``"discovered"``,
            ``"filling"`` after each tile with the tiles and bytes done so far, and
            ``"filled"``), or True for a progress bar on stderr (needs ``tqdm``). Called from
            the thread that finished a tile; an exception it raises stops the load and is
            raised here.
        reader: the name of a Python reader (:func:`shardload.register_reader`).
        storage_options: object storage options, as for :func:`shardload.discover`.

    Returns:
        The C-contiguous array, or ``(array, LoadInfo)`` with ``info=True``.

    Raises:
        TypeError, ValueError: an argument is wrong; the message names it.
        LayoutError: the files do not form a valid dataset.
        ShardReadError: reading failed (I/O error, a file changed since discovery, damaged
            or null data); the message names the file, the tile and the rows.
        OutOfMemoryError: the array does not fit this process's memory (nothing was read).
        KeyboardInterrupt: Ctrl-C; no tile starts after it and object-storage requests end.
    """
    prepared = _frontend.prepare("shardload.numpy.load", source, row_range=row_range,
                                 astype=astype, reader=reader, storage_options=storage_options,
                                 options=options)
    n_threads = _frontend.threads_arg(threads)
    k = _frontend.overdecompose_arg(overdecompose)
    _frontend.check_bool("info", info)
    reporter = _frontend._Reporter(progress, prepared, "shardload.numpy.load")
    try:
        reporter.stage("discovered")
        out = _frontend.empty(prepared.layout, "shardload.numpy.load")
        plan = _frontend.fill(prepared, out, threads=n_threads, overdecompose=k,
                              reporter=reporter)
        result = out if prepared.cast is None else out.astype(prepared.cast)
        del out
        total_s = time.perf_counter() - prepared.t_call
        reporter.tiles = int(plan["tiles"])
        reporter.stage("filled", reporter.tiles, prepared.layout.total_rows)
    finally:
        reporter.close()
    load_info = _frontend.load_info(prepared, plan, k, total_s)
    logger.log(logging.INFO if total_s > 2.0 else logging.DEBUG,
               "shardload.numpy.load: %s %s (%s) in %.3f s on %d threads, %d tiles, %.3f GB/s",
               prepared.layout.shape, result.dtype, _core.size_string(prepared.layout.nbytes),
               total_s, load_info.processors, load_info.tiles, load_info.gb_per_s)
    if info:
        return result, load_info
    return result
