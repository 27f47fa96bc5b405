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
from typing import Callable, Sequence, Unpack

import numpy as np

from . import _core, _frontend, _save
from ._args import DTypeLike, SourceLike, _bool
from ._info import LoadInfo, LoadProgress
from ._layout import Layout
from ._options import DiscoverOptions, StorageOptions

__all__ = ["load", "save"]

logger = logging.getLogger("shardload")


def load(
    source: SourceLike | Layout,
    *,
    row_range: "tuple[int | None, int | None] | slice | None" = None,
    astype: DTypeLike | None = None,
    threads: int | None = None,
    overdecompose: int = _frontend.DEFAULT_OVERDECOMPOSE,
    out: np.ndarray | None = None,
    info: bool = False,
    progress: "Callable[[LoadProgress], object] | bool | None" = None,
    reader: str | None = None,
    storage_options: StorageOptions | None = None,
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
        out: an array to fill instead of a new one (as numpy's ``out=``): C-contiguous,
            writable, of the result's shape and dtype (``astype``'s where given). Reusing one
            saves the first touch of new memory (the kernel zeroing its pages), which on a
            hot page cache is a third of a load's time. Not a shared memory mapping of a
            file of the source (``np.load(shard, mmap_mode="r+")``: the load would read rows
            it had overwritten; ValueError). Returned filled; after an error its rows are
            unspecified.
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
    _bool("info", info)
    if out is not None:
        _frontend.check_out("shardload.numpy.load", out, prepared.layout.shape, prepared.dtype)
        _frontend.check_out_maps_no_source_file("shardload.numpy.load", out, prepared.layout)
    reporter = _frontend._Reporter(progress, prepared, "shardload.numpy.load")
    try:
        reporter.stage("discovered")
        direct = out is not None and prepared.cast is None
        buf = out if direct else _frontend.empty(prepared.layout, "shardload.numpy.load")
        plan = _frontend.fill(prepared, buf, threads=n_threads, overdecompose=k,
                              reporter=reporter)
        if out is None:
            result = buf if prepared.cast is None else buf.astype(prepared.cast)
        else:
            if not direct:
                np.copyto(out, buf, casting="unsafe")  # astype's cast, into the caller's array
            result = out
        del buf
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


def save(
    array: np.ndarray,
    dest: "_save.PathLike",
    *,
    num_shards: int | None = None,
    shard_rows: "Sequence[int] | None" = None,
    format: str = "npy",
    overwrite: bool = False,
    manifest: bool = True,
    checksum: str = "none",
    info: bool | None = None,
    storage_options: StorageOptions | None = None,
) -> "_save.SaveInfo":
    """Writes a ``numpy.ndarray`` to ``dest`` as shards that :func:`load` reads back, without
    Legate.

    The dataset is the one :func:`shardload.save` writes (same names, formats, metadata and
    manifest), published the same way: built in a hidden directory beside ``dest`` and
    renamed into place once, the manifest last, so a reader sees nothing or all of it; to
    ``s3://`` each shard is one object and the manifest, uploaded last, is the commit point.
    The engine's threads (one per core) write the shards in parallel straight from the
    array's memory, the GIL released. The arguments and their checks are
    :func:`shardload.save`'s; ``num_shards`` defaults to one shard per core of this host.

    Args:
        array: a ``numpy.ndarray`` of 1 or more dimensions, of bool, integers,
            float16/32/64 or complex64/128, in any memory order and byte order (an array
            that is not C-contiguous in native byte order is copied once into one that is).
        dest: a directory (absent, empty, or with ``overwrite=True`` a dataset of an earlier
            save) or an ``s3://bucket/prefix/`` URL.
        num_shards, shard_rows: how axis 0 is split (``ceil(rows / num_shards)`` rows each,
            the last shards shorter or empty; or each shard's rows).
        format: ``"npy"``, ``"raw"`` or ``"zarr"``.
        overwrite, manifest, checksum, info, storage_options: as for :func:`shardload.save`.

    Returns:
        A :class:`shardload.SaveInfo`; its ``target`` is ``"host"``, its ``processors`` the
        threads that wrote and its ``tiles`` the pieces they wrote (to ``s3://``: the shards
        uploaded).

    Raises:
        TypeError, ValueError: an argument is wrong (an array of a dtype no format holds:
            object, structured, strings, datetimes, long double); the message names it.
        DestinationExistsError: ``dest`` is taken (see :func:`shardload.save`).
        ShardWriteError: writing failed; the message names the file. Nothing is published.
        KeyboardInterrupt: Ctrl-C; nothing is published, unless the signal came during the
            publish step: then the save completed and the exception's note says so.
    """
    t_call = time.perf_counter()
    path, rows_list = _save._arguments(dest, num_shards=num_shards, shard_rows=shard_rows,
                                       format=format, overwrite=overwrite, manifest=manifest,
                                       checksum=checksum, info=info,
                                       storage_options=storage_options)
    if not isinstance(array, np.ndarray):
        raise TypeError(f"save: expected a numpy.ndarray, found {type(array).__name__}")
    _save._refuse_masked(array)
    dt = array.dtype
    _save._check_host_array(dt, array.ndim)
    if dt.byteorder not in ("=", "|"):
        # The shards hold this machine's byte order (npy says so in its header); the values
        # are the same.
        array = array.astype(dt.newbyteorder("="))
    array = np.ascontiguousarray(array)
    d = _core.host_save(array, path, int(num_shards or 0), rows_list, format, bool(overwrite),
                        bool(manifest), checksum)
    saved = _save.SaveInfo(target="host", processors=d["threads"], tiles=d["tiles"],
                           num_shards=d["shards"], bytes=d["bytes"], prepare_s=d["prepare_s"],
                           write_s=d["write_s"], commit_s=d["commit_s"],
                           total_s=time.perf_counter() - t_call)
    logger.log(logging.INFO if saved.total_s > 2.0 else logging.DEBUG,
               "shardload.numpy.save: %s %s (%s) in %.3f s on %d threads, %d shards, %.3f GB/s",
               array.shape, array.dtype, _core.size_string(saved.bytes), saved.total_s,
               saved.processors, saved.num_shards, saved.gb_per_s)
    return saved
