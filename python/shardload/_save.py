"""shardload.save: write a distributed array as shard files, in parallel, under Legate.

Every point task writes the rows of its own piece of the array straight into the shard files
(no gather to one process); the dataset is built in a hidden directory beside the destination
and renamed into place with its metadata last, so a reader never sees half of it. The C++
side (src/legate/save.cc, shardload/save.hpp) does the work; this module checks arguments
and turns the array into the legate::LogicalArray it takes.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from . import _core, _discover, _legate_start
from ._options import StorageOptions

# The formats with a writer in the format table (src/readers/formats.cc).
_FORMATS = tuple(row["name"] for row in _core.format_rows() if row["writable"])
_CHECKSUMS = ("none", "xxh3")
# The most shards one save writes (the C++ side's bound too).
_MAX_SHARDS = 1_000_000

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


@dataclasses.dataclass(frozen=True)
class SaveInfo:
    """What a save did, returned by :func:`save`: the processors (``target``,
    ``processors``), the launch (``tiles``), ``num_shards`` and ``bytes`` written, and seconds
    of the wall clock for ``prepare_s`` (checks, the hidden directory, creating the files),
    ``write_s`` (the launch, until every point wrote its rows), ``commit_s`` (metadata and
    the rename) and ``total_s`` (the whole call). ``gb_per_s`` is ``bytes / 1e9 / total_s``,
    as for :class:`LoadInfo`."""

    target: str
    processors: int
    tiles: int
    num_shards: int
    bytes: int
    prepare_s: float
    write_s: float
    commit_s: float
    total_s: float

    @property
    def gb_per_s(self) -> float:
        """Bytes written per second of the whole call, in GB (1e9 bytes)."""
        return self.bytes / 1e9 / self.total_s if self.total_s > 0 else 0.0

    @property
    def shards(self) -> int:
        """Deprecated spelling of :attr:`num_shards`."""
        warnings.warn("SaveInfo.shards is deprecated; use SaveInfo.num_shards",
                      DeprecationWarning, stacklevel=2)
        return self.num_shards


def _logical_array(array: Any) -> Any:
    """The legate.core.LogicalArray behind ``array`` (kept alive by the caller)."""
    from legate.core import LogicalArray

    if isinstance(array, LogicalArray):
        return array
    if isinstance(array, np.ndarray):
        import cupynumeric

        if array.dtype.byteorder not in ("=", "|"):
            # The bytes are converted to this machine's order, which is what Legate holds
            # and the shards are written in; the values are the same.
            array = array.astype(array.dtype.newbyteorder("="))
        array = cupynumeric.asarray(array)
    interface = getattr(array, "__legate_data_interface__", None)
    if interface is None:
        raise TypeError(
            f"save: expected a cupynumeric.ndarray, a legate.core.LogicalArray or a "
            f"numpy.ndarray, found {type(array).__name__}")
    fields = list(interface["data"].values())
    if len(fields) != 1:
        raise ValueError(f"save: expected an array of one field, found {len(fields)}")
    return fields[0]


# The dtypes the formats write without Legate (shardload.numpy.save, shardload.dask.save): what
# shardload.save writes (bool, integers, float16/32/64, complex64/128), by kind and item size.
_SAVABLE = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16)}


def _refuse_masked(array: object, where: str = "") -> None:
    """A masked array's mask would be dropped without a word (the formats hold none) and its
    masked-out values saved as data: refused (TypeError) before anything is written."""
    if isinstance(array, np.ma.MaskedArray):
        raise TypeError(f"save: {where}masked arrays cannot be saved (the formats hold no "
                        "mask); save array.filled(...) or the mask beside it")


def _check_host_array(dt: np.dtype, ndim: int) -> None:
    """Refuses an array the formats cannot hold, before anything is written: a dtype outside
    _SAVABLE (TypeError) or 0 dimensions (ValueError)."""
    if dt.fields is not None or dt.subdtype is not None or dt.itemsize not in _SAVABLE.get(
            dt.kind, ()):
        raise TypeError(f"save: arrays of dtype {dt} cannot be saved (expected bool, integers, "
                        "float16/32/64 or complex64/128)")
    if ndim < 1:
        raise ValueError("save: expected an array of 1 or more dimensions, found 0")


def _arguments(
    dest: PathLike,
    *,
    num_shards: Any,
    shard_rows: Any,
    format: Any,
    overwrite: Any,
    manifest: Any,
    checksum: Any,
    info: Any,
    storage_options: Any,
) -> tuple[bytes, list[int]]:
    """The checks of a save's arguments that need no array, shared by every front end that
    saves (:func:`save`, ``shardload.numpy.save``): returns the destination as the file
    system's bytes (``storage_options`` added to its query) and ``shard_rows`` as a list of
    ints (empty when not given). Raises what :func:`save` documents."""
    if not isinstance(format, str):
        raise TypeError(f"save: format= must be a str, found {type(format).__name__} "
                        f"{format!r}")
    if format not in _FORMATS:
        raise ValueError(f"save: format= must be one of {', '.join(_FORMATS)}, found {format!r}")
    if num_shards is not None:
        if isinstance(num_shards, (bool, np.bool_)) or not isinstance(num_shards,
                                                                      (int, np.integer)):
            raise TypeError(f"save: num_shards= must be an integer or None, found "
                            f"{type(num_shards).__name__} {num_shards!r}")
        if not 1 <= int(num_shards) <= _MAX_SHARDS:
            raise ValueError(f"save: num_shards= must be from 1 to {_MAX_SHARDS}, found "
                             f"{int(num_shards)}")
    rows_list: list[int] = []
    if shard_rows is not None:
        if num_shards is not None:
            raise ValueError("save: give num_shards= or shard_rows=, not both")
        if isinstance(shard_rows, np.ndarray) and shard_rows.ndim == 1:
            shard_rows = shard_rows.tolist()
        if isinstance(shard_rows, (str, bytes)) or not isinstance(shard_rows, Sequence):
            raise TypeError(f"save: shard_rows= must be a sequence of integers, found "
                            f"{type(shard_rows).__name__} {shard_rows!r}")
        if not 1 <= len(shard_rows) <= _MAX_SHARDS:
            raise ValueError(f"save: shard_rows= must hold from 1 to {_MAX_SHARDS} shards, "
                             f"found {len(shard_rows)}")
        for i, r in enumerate(shard_rows):
            if isinstance(r, (bool, np.bool_)) or not isinstance(r, (int, np.integer)):
                raise TypeError(f"save: shard_rows[{i}] must be an integer, found "
                                f"{type(r).__name__} {r!r}")
            if int(r) < 0:
                raise ValueError(f"save: shard_rows[{i}] must be >= 0, found {int(r)}")
            if int(r) >= 2**63:
                raise ValueError(f"save: shard_rows[{i}] must be below 2**63, found {int(r)}")
            rows_list.append(int(r))
    if info is not None:
        # stacklevel 3: the caller of save(), past this function.
        warnings.warn("save: info= is deprecated; save() always returns its SaveInfo",
                      DeprecationWarning, stacklevel=3)
    for name, value in (("overwrite", overwrite), ("manifest", manifest), ("info", info)):
        if value is not None and not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"save: {name}= must be True or False, found "
                            f"{type(value).__name__} {value!r}")
    if not isinstance(checksum, str):
        raise TypeError(f"save: checksum= must be a str, found {type(checksum).__name__} "
                        f"{checksum!r}")
    if checksum not in _CHECKSUMS:
        raise ValueError(f"save: checksum= must be one of {', '.join(_CHECKSUMS)}, found "
                         f"{checksum!r} (crc32c is not offered: no maintained CRC32C library "
                         "is packaged for this build)")
    if checksum != "none" and not manifest:
        raise ValueError(f"save: checksum={checksum!r} is kept in the manifest, and "
                         "manifest=False")
    if checksum != "none" and format == "zarr":
        raise ValueError(f"save: checksum={checksum!r} covers regular files, and a Zarr shard "
                         "is a directory; save Zarr with checksum='none'")
    if storage_options is not None:
        dest = _discover._with_storage_options(dest, storage_options)  # type: ignore[assignment]
    try:
        path = os.fsencode(dest)
    except TypeError:
        raise TypeError(f"save: dest= must be a path (str, bytes or os.PathLike), found "
                        f"{type(dest).__name__}") from None
    if not path:
        raise ValueError("save: dest= is empty")
    if b"\0" in path:
        raise ValueError(f"save: dest= holds a NUL byte: {_core.redact_secrets(repr(dest))}")
    return path, rows_list


def save(
    array: Any,
    dest: PathLike,
    *,
    num_shards: int | None = None,
    shard_rows: Sequence[int] | None = None,
    format: str = "npy",
    overwrite: bool = False,
    manifest: bool = True,
    checksum: str = "none",
    info: bool | None = None,
    storage_options: StorageOptions | None = None,
) -> SaveInfo:
    """Writes ``array`` to the directory ``dest`` as shards that :func:`load` reads back.

    ``array``: a ``cupynumeric.ndarray``, a ``legate.core.LogicalArray`` or a
    ``numpy.ndarray`` (copied into Legate first, in native byte order), of 1 to 6
    dimensions, of bool, integers, float16/32/64 or complex64/128. Axis 0 is split into
    ``num_shards`` shards (1 to 1,000,000; default: one per CPU processor of the launch) of
    ``ceil(rows / num_shards)`` rows, the last ones shorter or empty; or give each
    shard's rows in ``shard_rows`` (non-negative integers adding up to the array's rows, a
    shard may have 0; not with ``num_shards``), to keep a dataset's own sharding when saving
    it again. ``format``: ``"npy"``
    (``shard_0000.npy`` ...), ``"raw"``
    (``shard_0000.bin`` ... and a ``shardload.json`` sidecar) or ``"zarr"`` (one uncompressed
    Zarr v2 store per shard, ``shard_0000.zarr`` ...).

    ``dest`` must be absent or an empty directory, unless ``overwrite=True``: then a
    directory that holds only what a save writes is replaced in one atomic swap (see
    ``docs/save.md`` for what a concurrent reader can see); a directory holding anything a
    save did not write (down to a file inside a Zarr store) is refused. ``dest`` keeps its
    mode, owner, group and extended attributes. Raises ``DestinationExistsError`` (a
    ``FileExistsError``) when refused, ``ShardWriteError`` (an ``OSError`` with ``filename``)
    when writing fails, ``ValueError`` for bad values, ``TypeError`` for arguments of the
    wrong type. On any error nothing of the new dataset is visible; Ctrl-C during the save
    raises ``KeyboardInterrupt`` with nothing published, except during its last milliseconds,
    the publish step, which it does not stop: the ``KeyboardInterrupt`` raised after it has a
    note saying the save completed (``docs/save.md``).

    ``manifest=True`` (the default) writes ``dest/shardload.manifest`` after every other
    file, before the rename: :func:`discover` and :func:`load` of ``dest`` then read it
    instead of probing every shard (see ``docs/manifest.md``). ``checksum="xxh3"`` keeps an
    XXH3-64 checksum of each shard in it for :func:`verify` (not for ``"zarr"``, whose
    shards are directories).

    ``dest`` may be an ``s3://bucket/prefix/`` URL (any ``format``): each shard is one
    object (a Zarr store: its chunk objects), uploaded whole by one task (one PUT, or a multipart
    upload above the ``multipart_threshold`` store option), the manifest last, as the commit
    point; ``storage_options`` are added to the URL's query as for :func:`load`. A prefix that holds objects is refused unless
    ``overwrite=True``, which replaces only what a save writes. A store has no atomic
    multi-object commit: see ``docs/save.md`` ("To s3://") for what a reader sees during a
    save and after a failed one.

    Returns a :class:`SaveInfo` (the ``info=`` keyword is deprecated: the info is always
    returned).
    """
    t_call = time.perf_counter()
    path, rows_list = _arguments(dest, num_shards=num_shards, shard_rows=shard_rows,
                                 format=format, overwrite=overwrite, manifest=manifest,
                                 checksum=checksum, info=info,
                                 storage_options=storage_options)
    import threading

    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            f"shardload.save was called from thread {threading.current_thread().name!r}; it "
            "works only in the main thread, as load does (Legate takes launches only from the "
            "thread that started its runtime)")
    _legate_start._require_legate("shardload.save")
    _refuse_masked(array)
    if isinstance(array, np.ndarray):  # the one kind that can have more than Legate holds
        _legate_start._check_shape_dims(array.shape, "save: the array", write=True)
    _legate_start._start_runtime()
    from . import _legate

    logical = _logical_array(array)
    try:
        d = _legate.save(logical.raw_handle, path, int(num_shards or 0), rows_list, format,
                         bool(overwrite), bool(manifest), checksum)
    finally:
        # Dropped here on the error path too: the raised exception's traceback keeps this
        # frame, and a caller that keeps the exception (pytest.raises, `except ... as e` in a
        # frame it references) makes a cycle that a garbage collection frees, maybe on
        # another thread, where freeing a Legate object ends the process.
        del logical
    return SaveInfo(target=d["target"], processors=d["processors"], tiles=d["tiles"],
                    num_shards=d["shards"], bytes=d["bytes"], prepare_s=d["prepare_s"],
                    write_s=d["write_s"], commit_s=d["commit_s"],
                    total_s=time.perf_counter() - t_call)
