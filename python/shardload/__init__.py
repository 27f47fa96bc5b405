"""shardload: load a dataset stored as many shard files into one array.

Discovery and host reads work anywhere; :func:`load` (in a later release of
this package) builds a distributed ``cupynumeric.ndarray`` under Legate.
"""

from __future__ import annotations

from ._api import LayoutError, ShardReadError, Layout, discover

__all__ = ["Layout", "LayoutError", "ShardReadError", "discover"]
