"""The public functions, over the private binding ``shardload._core``."""

from __future__ import annotations

import os
from typing import Sequence, Union

from . import _core

LayoutError = _core.LayoutError
LayoutError.__doc__ = (
    "The shards do not form a valid dataset (missing, mismatched, malformed); a ValueError."
)
ShardReadError = _core.ShardReadError
ShardReadError.__doc__ = (
    "Reading a shard failed or it changed since discovery; an OSError."
)
Layout = _core.Layout

SourceLike = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]


def _layout_repr(self: Layout) -> str:
    return self.describe()


Layout.__repr__ = _layout_repr  # type: ignore[method-assign]


def discover(source: SourceLike, *, pattern: str | None = None) -> Layout:
    """Finds and validates the shards of a dataset without reading their data.

    Args:
        source: a directory of numbered shards (default ``shard_0000.npy`` ...),
            a numbered pattern such as ``"dir/part-{:05d}.npy"``, a glob such as
            ``"dir/*.npy"`` (ordered naturally), or an ordered list of paths.
        pattern: the numbering of the files in a directory source.

    Returns:
        The layout: shard paths, rows per shard, dtype, shape, byte count.
        ``layout.read(lo, hi)`` reads rows [lo, hi) into a numpy array.

    Raises:
        LayoutError: the source or one of its files is not a valid dataset;
            the message names the file and what was expected and found.
    """
    return _core.discover(source, pattern or "")
