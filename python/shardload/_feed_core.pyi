"""Private binding of the training feed's gather (python/src/feed_module.cc).

What shardload.feed uses; not a public interface."""

from typing import Any, Sequence

import numpy as np

from ._core import Layout

class Maps:
    """A layout's local npy / raw files mapped (each at its first use, kept until this goes),
    for gathers that copy each row from the map: ``usable`` is False where any shard is not
    a local file stored as served (C order, this host's byte order, not bool) or the files
    exceed 8 GiB; the copies run under a SIGBUS guard (a truncated file is the read error
    naming it)."""
    def __init__(self, layout: Layout) -> None: ...
    @property
    def usable(self) -> bool: ...
def gather(layout: Layout, rows: np.ndarray[Any, Any], out: np.ndarray[Any, Any],
           threads: int = 1, cast: bool = False, maps: Maps | None = None) -> None:
    """``out[i]`` = row ``rows[i]`` of ``layout`` for every i (int64 rows in any order;
    ``out`` C-contiguous, writable, ``len(rows)`` rows of the layout's dtype, or with
    ``cast`` of a dtype the layout's casts to as numpy's same_kind among bool, the ints,
    float32 and float64); ``threads`` readers, the GIL released. Rows close together in the
    source are read in runs and copied to their places; with usable ``maps`` (of this
    layout) each row is copied from the map. ValueError for a row outside the layout or a
    cast not done here; ShardReadError as a load's."""
class FillOrder:
    """A fill's rows named by their order and positions (``Order.fill``): ``count`` batches of
    ``batch`` positions, the k-th from ``first + k * stride``, each modulo ``n``, in the order
    ``mode`` ("none", "row", "block") keyed by (seed, epoch) as round_keys. ValueError for sizes
    out of range."""
    def __init__(self, mode: str, n: int, block_rows: int, window_blocks: int, seed: int,
                 epoch: int, rounds: int, first: int, batch: int, stride: int,
                 count: int) -> None: ...
    @property
    def size(self) -> int:
        """The fill's rows, ``batch * count``."""
    def rows(self) -> np.ndarray[Any, Any]:
        """The fill's rows (int64), as Gather computes them on its threads."""
class Gather:
    """:func:`gather` started on threads of its own at construction (the feed's read-ahead);
    the layout and ``out`` are held until it ends, the rows copied, or, given as a
    :class:`FillOrder`, computed on those threads (each the rows of the part it copies).
    Dropping an unfinished one waits for its reads."""
    def __init__(self, layout: Layout, rows: np.ndarray[Any, Any] | FillOrder,
                 out: np.ndarray[Any, Any], threads: int = 1, cast: bool = False,
                 maps: Maps | None = None) -> None: ...
    def result(self) -> np.ndarray[Any, Any]:
        """``out`` once the rows are in it (the GIL released while waiting); the gather's
        error otherwise (ShardReadError naming the file, ValueError for a row outside the
        layout), at each call."""
    def done(self) -> bool:
        """Whether the reads have ended."""
    def cancel(self) -> bool:
        """False: a started gather is not called off (as a running future)."""
def shard_states(layout: Layout) -> list[tuple[bytes, int, int, int, int, int]]:
    """Each shard's (path, first file row, rows, size, mtime in ns, version): what the ranks
    of a job compare before they share one stream. The version is an object's snapshot
    identity (the hash of its ETag, else of its Last-Modified), 0 for a local file."""
def permute(xs: np.ndarray[Any, Any], n: int, keys: Sequence[int],
            inverse: bool = False) -> np.ndarray[Any, Any]:
    """The keyed bijection of ``[0, n)`` (a Feistel network over the smallest ``4**h >= n``,
    cycle-walked; shardload._feed_order) applied to each int64 position of ``xs``, or its
    inverse. ValueError for a position outside ``[0, n)``."""
def block_order_rows(positions: np.ndarray[Any, Any], n: int, block_rows: int,
                     window_blocks: int, seed: int, epoch: int,
                     rounds: int) -> np.ndarray[Any, Any]:
    """The rows of the block order (shardload._feed_order.Order, mode "block") at each int64
    stream position of ``positions``: blocks of ``block_rows`` permuted, rows permuted in
    windows of ``window_blocks`` blocks, keyed by (seed, epoch) as round_keys. ValueError for
    a position outside ``[0, n)`` or a spec outside ``1 <= block_rows <= n``,
    ``1 <= window_blocks <= blocks``."""
