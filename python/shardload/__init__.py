"""shardload: load a dataset stored as many shard files into one array.

:func:`discover` finds and validates the shards; :func:`load` reads them in
parallel into one distributed ``cupynumeric.ndarray`` under Legate. Host
reads of a row range (``layout.read(lo, hi)``) work without Legate.
"""

from __future__ import annotations

from ._api import (
    Error,
    Layout,
    LayoutError,
    LoadInfo,
    LoadProgress,
    OutOfMemoryError,
    ShardReadError,
    SourceNotFoundError,
    discover,
    load,
)

__all__ = [
    "Error",
    "Layout",
    "LayoutError",
    "LoadInfo",
    "LoadProgress",
    "OutOfMemoryError",
    "ShardReadError",
    "SourceNotFoundError",
    "discover",
    "load",
]
