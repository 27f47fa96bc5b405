"""Private binding of shardload's Legate adapter (python/src/legate_module.cc).

What the package's Python code uses; not a public interface."""

from typing import Any, TypedDict

class _Plan(TypedDict):
    target: str  # "GPU", "OMP" or "CPU"
    processors: int
    tile_rows: int
    tiles: int
    launch_s: float
    fill_s: float

class _ArrayOwner:
    """A capsule that owns the loaded legate LogicalArray until dropped."""

def load(encoded_layout: bytes, overdecompose: int = 1) -> tuple[_ArrayOwner, _Plan]: ...
def handle(owner: _ArrayOwner) -> int:
    """The address legate.core.LogicalArray.from_raw_handle adopts (a copy)."""

class _SaveInfo(TypedDict):
    target: str  # "CPU": the save task has a CPU variant only
    processors: int
    tiles: int
    shards: int
    bytes: int
    prepare_s: float
    write_s: float
    commit_s: float

def save(handle: int, dest: bytes, num_shards: int, shard_rows: list[int], format: str,
         overwrite: bool) -> _SaveInfo:
    """Writes the legate::LogicalArray at address ``handle`` (a live LogicalArray's
    raw_handle) to ``dest``; num_shards 0 is one per processor, shard_rows [] an even split."""
