"""Private binding of shardload's Legate adapter (python/src/legate_module.cc).

What the package's Python code uses; not a public interface."""

from typing import Any, TypedDict

from ._core import Layout

class _Plan(TypedDict):
    target: str  # "GPU", "OMP" or "CPU"
    processors: int
    tile_rows: int
    tiles: int
    launch_s: float
    fill_s: float
    remote_retries: int  # object-storage requests retried during the fill, in this process

class _ArrayOwner:
    """A capsule that owns the loaded legate LogicalArray until dropped."""

def load(layout: Layout, overdecompose: int = 1) -> tuple[_ArrayOwner, _Plan]: ...
class Batches:
    """shardload::Batches: a layout's row batches, launched ahead and handed out in order."""

    def __init__(self, layout: Layout, rows_per_batch: int, prefetch: int,
                 overdecompose: int) -> None: ...
    @property
    def size(self) -> int: ...
    def next(self) -> tuple[_ArrayOwner, int, int, int] | None:
        """(owner, index, lo, hi) of the next batch, or None after the last."""

def _process_state() -> dict[str, Any]:
    """_core._process_state as this module sees it."""
def handle(owner: _ArrayOwner) -> int:
    """The address legate.core.LogicalArray.from_raw_handle adopts (a copy)."""

MAX_DIMS: int
"""The most dimensions a Legate array has in the Legate shardload was built with."""

def check_layout_dims(layout: Layout) -> None:
    """Raises LayoutError as load() does when the layout has more than MAX_DIMS dimensions."""
def check_dims(shape: list[int], what: str, write: bool = False) -> None:
    """The same for a shape; ``what`` names the array: a ValueError with ``write``, else a
    LayoutError."""
def check_load_memory(rows: int, row_bytes: int, target: str, processors: int,
                      overdecompose: int) -> None:
    """Raises OutOfMemoryError as load() does when the array would not fit (target "GPU" or
    "CPU")."""
def verify(manifest_path: bytes, groups: int = 0) -> tuple[int, int, list[tuple[int, bytes, str]]]:
    """(shards, groups, [(shard, path, what), ...] for every mismatch)"""
def discover_once(
    source: bytes,
    pattern: bytes,
    discovery: dict[str, object] = ...,
    options: dict[str, object] = ...,
    use_manifest: bool = ...,
) -> Layout: ...
def write_manifest_once(
    layout: Layout,
    directory: bytes,
    checksum: str = ...,
    pattern: bytes = ...,
) -> str: ...
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
         overwrite: bool, manifest: bool = ..., checksum: str = ...) -> _SaveInfo:
    """Writes the legate::LogicalArray at address ``handle`` (a live LogicalArray's
    raw_handle) to ``dest``; num_shards 0 is one per processor, shard_rows [] an even split."""
