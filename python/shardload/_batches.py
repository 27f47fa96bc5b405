"""``shardload.batches``: a dataset in batches of consecutive rows, for data larger than
Legate's memory, over the binding's ``Batches`` (src/legate/batches.cc)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Unpack

import numpy as np

from ._args import _INT64_MAX, DTypeLike, SourceLike, _int, _overdecompose, _source
from ._discover import _with_storage_options
from ._layout import Layout
from ._legate_start import _check_legate_dims, _check_thread, _start_runtime
from ._manifest import _discover_for_job
from ._options import DiscoverOptions, StorageOptions, _astype, _decoded, _options

if TYPE_CHECKING:
    import cupynumeric


class BatchIterator:
    """The iterator :func:`batches` returns: ``len()`` is the number of batches, ``rows_per_batch``
    and ``layout`` what it was made with. Iterate it once."""

    def __init__(self, layout: Layout, rows_per_batch: int, prefetch: int, overdecompose: int,
                 cast: np.dtype | None) -> None:
        from . import _legate

        self.layout = layout
        self.rows_per_batch = rows_per_batch
        self.prefetch = prefetch
        self._cast = cast
        self._count = -(-layout.total_rows // rows_per_batch)
        self._batches: _legate.Batches | None = _legate.Batches(layout, rows_per_batch,
                                                                 prefetch, overdecompose)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> "BatchIterator":
        return self

    def __next__(self) -> "cupynumeric.ndarray":
        if self._batches is None:
            raise StopIteration
        _check_thread("next() of a shardload.batches iterator")
        import cupynumeric
        from legate.core import LogicalArray

        from . import _legate

        try:
            got = self._batches.next()
        except BaseException:
            # The iteration ends with its error: the batches launched after it are dropped.
            self._batches = None
            raise
        if got is None:
            self._batches = None
            raise StopIteration
        owner = got[0]
        array = LogicalArray.from_raw_handle(_legate.handle(owner))
        del owner, got
        result = cupynumeric.asarray(array)
        if self._cast is not None and self._cast != result.dtype:
            result = result.astype(self._cast)
        return result

    def close(self) -> None:
        """Drops the batches launched and not yet handed out; iteration ends."""
        self._batches = None


def batches(
    source: SourceLike | Layout,
    rows_per_batch: int,
    *,
    prefetch: int = 1,
    overdecompose: int = 1,
    astype: DTypeLike | None = None,
    storage_options: StorageOptions | None = None,
    **options: Unpack[DiscoverOptions],
) -> Iterator["cupynumeric.ndarray"]:
    """Iterates over a dataset in batches of ``rows_per_batch`` consecutive rows (the last may
    be shorter), each a ``cupynumeric.ndarray`` loaded in parallel as :func:`load` loads, while
    the next ``prefetch`` batches are read in the background: for data larger than the memory
    Legate has.

    The source is discovered once (or passed as a :class:`Layout`), with :func:`discover`'s
    options checked the same way. Each batch is one launch over the processors :func:`load`
    would use, tiled by ``overdecompose`` as there. Taking batch ``i`` from the iterator
    launches batches up to ``i + prefetch`` that are not launched yet, without waiting for
    them, then waits for batch ``i`` alone; so while the caller computes on batch ``i``,
    batches ``i + 1 .. i + prefetch`` are read (``prefetch=0``: each batch is read only when
    asked for).

    Memory: the iterator holds only the batches launched and not yet handed out, at most
    ``prefetch``; the caller holds the one it was given. So at most ``prefetch + 1`` batches
    are alive **if the caller drops each batch before asking for the next**: in a ``for``
    loop the loop variable still holds batch ``i`` while batch ``i + 1`` is taken, so end the
    loop body with ``del batch`` and keep results as reductions, not the batches themselves
    (``for batch in it: total += batch.sum(); del batch``). ``prefetch + 1`` batches must fit
    the memory Legate has for the processors of the load (checked when this function is
    called, as :func:`load` checks a whole dataset); temporaries of the caller's computation
    and an ``astype`` copy come on top.

    Args:
        source: a directory, numbered pattern, glob, list of paths, or Layout (see
            :func:`load`; with a Layout, no discover option may be passed).
        rows_per_batch: an int >= 1; a value past the dataset's rows gives one batch.
        prefetch: an int >= 0: the batches read ahead of the one handed out.
        options: discover()'s keywords (:class:`DiscoverOptions`: pattern, format, the format
            and discovery options): as for :func:`discover`.
        overdecompose: K of each batch's launch, an int >= 1, as in :func:`load`.
        astype: the dtype of each batch, as in :func:`load` (numpy's casting for every
            format; parquet/arrow columns that convert without loss decoded straight into it).
        storage_options: object storage: options added to the query of each ``s3://`` URL,
            as for :func:`discover` (not with a Layout, whose paths carry them).

    Returns:
        An iterator of ``cupynumeric.ndarray`` of shape ``(rows, *trailing_shape)``; ``len()``
        of it is the number of batches. An empty dataset gives no batch.

    Raises:
        TypeError, ValueError: an argument has the wrong type or value (the message names it);
            when called.
        LayoutError, SourceNotFoundError: the files do not form a dataset; when called.
        OutOfMemoryError: ``prefetch + 1`` batches (no more than there are) do not fit
            Legate's memory; when called, before anything is allocated.
        ShardReadError: reading batch ``i`` failed in some tile; raised by the ``next()``
            that would hand out batch ``i`` (not earlier, not later), with the message
            :func:`load` gives (the file and rows) after ``batch i (rows [lo, hi))``, and
            ``.filename`` set as there. Batches before it were handed out complete and
            correct; the iteration ends with the error.
        RuntimeError: called, or iterated, from a thread other than the main thread.
    """
    _check_thread("shardload.batches")
    checked = _options("batches", options, layout=isinstance(source, Layout))
    rpb = _int("rows_per_batch", rows_per_batch)
    if rpb < 1:
        raise ValueError(f"rows_per_batch: expected an int >= 1, found {rpb}")
    ahead = _int("prefetch", prefetch)
    if ahead < 0:
        raise ValueError(f"prefetch: expected an int >= 0, found {ahead}")
    k = _overdecompose(overdecompose)
    cast = _astype(astype)
    if isinstance(source, Layout):
        if storage_options is not None:
            raise TypeError("batches: storage_options cannot be passed with a Layout, whose "
                            "paths carry them")
        layout = source
    else:
        source = _with_storage_options(_source(source), storage_options)
        layout = _decoded(lambda o, dt: _discover_for_job(source, o, dt), checked, cast,
                          "batches", cast_after=True)
    # Past the int64 range no batch is shorter than the dataset anyway.
    rpb = min(rpb, max(layout.total_rows, 1))
    ahead = min(ahead, _INT64_MAX)
    _check_legate_dims(layout)
    _start_runtime()
    return BatchIterator(layout, rpb, ahead, k, cast)
