"""The read plan's tiling as docs/design.md states it ("The read plan"), for the tests that
check which files each rank's tiles open."""

from __future__ import annotations

import itertools


def tiles(rows: list[int], processors: int, k: int) -> list[tuple[int, int]]:
    total = sum(rows)
    parts = min(k, 256) * processors
    tile_rows = -(-total // parts)
    return [(lo, min(lo + tile_rows, total)) for lo in range(0, total, tile_rows)]


def files_of(rows: list[int], tile: tuple[int, int]) -> set[int]:
    """The shards a tile reads: those with at least one row in it (an empty shard: none)."""
    found, start = set(), 0
    for i, n in enumerate(rows):
        if n and start < tile[1] and tile[0] < start + n:
            found.add(i)
        start += n
    return found


def split_between_ranks(rows: list[int], processors: int, k: int,
                        opened: list[set[int]]) -> bool:
    """Whether the tiles can be dealt to the ranks so that each rank opened exactly the files of
    its own tiles (a rank with no tile opens nothing)."""
    plan = [files_of(rows, t) for t in tiles(rows, processors, k)]
    for owners in itertools.product(range(len(opened)), repeat=len(plan)):
        need = [set() for _ in opened]
        for tile_files, owner in zip(plan, owners):
            need[owner] |= tile_files
        if need == opened:
            return True
    return False
