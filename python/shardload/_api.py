"""The public functions, over the private binding ``shardload._core``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence, Union

if TYPE_CHECKING:
    import cupynumeric

from . import _core

LayoutError = _core.LayoutError
LayoutError.__doc__ = (
    "The shards do not form a valid dataset (missing, mismatched, malformed); a ValueError."
)
ShardReadError = _core.ShardReadError
ShardReadError.__doc__ = (
    "Reading a shard failed: an I/O error, a file changed since discovery, or data found"
    " damaged (or null) while reading; an OSError."
)
OutOfMemoryError = _core.OutOfMemoryError
OutOfMemoryError.__doc__ = (
    "The dataset does not fit the memory Legate has for the processors of the load (checked"
    " before anything is allocated); a MemoryError."
)
Layout = _core.Layout

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
SourceLike = Union[PathLike, Sequence[PathLike]]


def _layout_repr(self: Layout) -> str:
    return self.describe()


Layout.__repr__ = _layout_repr  # type: ignore[method-assign]


def discover(
    source: SourceLike,
    *,
    pattern: str | bytes | None = None,
    format: str = "auto",
    dtype: str | None = None,
    shape: Sequence[int] | None = None,
    header_bytes: int | None = None,
    dataset: str | None = None,
    columns: Sequence[str] | None = None,
    fill_value: float | None = None,
) -> Layout:
    """Finds and validates the shards of a dataset without reading their data.

    Args:
        source: a directory of numbered shards (default ``shard_0000.npy`` ...),
            a numbered pattern such as ``"dir/part-{:05d}.npy"``, a glob such as
            ``"dir/*.npy"`` (ordered naturally), or an ordered list of paths.
            Paths are str, bytes or os.PathLike, converted with os.fsencode,
            so names that are not UTF-8 work (``layout.paths`` gives them
            back as os.fsdecode does). An existing directory or file is taken
            as such even when its name holds ``{`` ``*`` ``?`` or ``[``; a
            path holding a NUL character is refused (ValueError).
        pattern: the numbering of the files in a directory source (default
            ``shard_{:04d}`` with the format's extension).
        format: ``"auto"`` (from the extension or the store's metadata),
            ``"npy"``, ``"raw"``, ``"hdf5"``, ``"parquet"``, ``"arrow"``, ``"zarr"``.
        dtype: raw: the element type; parquet/arrow: cast the columns to it.
        shape: raw: the trailing shape of a row (``()`` for 1-D data).
        header_bytes: raw: bytes to skip at the start of each file.
        dataset: hdf5: the dataset in each file; zarr: the array in each store.
        columns: parquet/arrow: the columns to read (default: every numeric one).
        fill_value: parquet/arrow: the value for nulls (default: nulls are an error).

    Returns:
        The layout: shard paths, rows per shard, dtype, shape, byte count.
        ``layout.read(lo, hi)`` reads rows [lo, hi) into a numpy array on the
        host (no Legate) and raises ShardReadError when reading fails.

    Raises:
        LayoutError: the source or one of its files is not a valid dataset;
            the message names the file and what was expected and found.
    """
    return _core.discover(
        source,
        pattern if pattern else None,
        format,
        dtype,
        None if shape is None else [int(d) for d in shape],
        header_bytes,
        dataset or "",
        list(columns or []),
        fill_value,
    )


def load(
    source: SourceLike | Layout,
    *,
    pattern: str | None = None,
    overdecompose: int = 1,
    format: str = "auto",
    dtype: str | None = None,
    shape: Sequence[int] | None = None,
    header_bytes: int | None = None,
    dataset: str | None = None,
    columns: Sequence[str] | None = None,
    fill_value: float | None = None,
) -> "cupynumeric.ndarray":
    """Loads a sharded dataset into one distributed ``cupynumeric.ndarray``.

    The source is discovered and validated first (see :func:`discover`, whose
    keyword arguments this function shares), or passed as a :class:`Layout`.
    The output is allocated once with its final shape and dtype, split along
    axis 0 into about ``overdecompose`` tiles per processor (GPUs if any, else
    OpenMP, else CPUs), and filled by one parallel launch in which each tile
    reads only the slices of the shards it covers.

    Args:
        source: a directory, numbered pattern, glob, list of paths, or Layout.
        overdecompose: K >= 1; tiles = ceil(rows / ceil(rows / (K * P))).

    Returns:
        The array; it lives in Legate's memory and joins cuPyNumeric math.

    Raises:
        LayoutError: the files do not form a valid dataset, or K < 1.
        ShardReadError: reading failed in some tile (I/O error, a file changed
            since discovery, damaged or null data); the message names the file
            and the rows.
    """
    if int(overdecompose) < 1:
        raise LayoutError(f"overdecompose (K) must be at least 1, found {overdecompose}")
    if isinstance(source, Layout):
        layout = source
    else:
        layout = discover(source, pattern=pattern, format=format, dtype=dtype, shape=shape,
                          header_bytes=header_bytes, dataset=dataset, columns=columns,
                          fill_value=fill_value)
    import cupynumeric  # starts the Legate runtime on first use
    from legate.core import LogicalArray

    from . import _legate

    handle, _info = _legate.load(layout.encode(), int(overdecompose))
    try:
        array = LogicalArray.from_raw_handle(handle)
    finally:
        _legate.free_handle(handle)
    return cupynumeric.asarray(array)
