"""Chunk-aware tiles: the plan puts tile boundaries on the decode units, through Legate.

zarr-python, h5py and pyarrow write the data and read it back as the oracle; LoadInfo gives the
tiles of the launch. A unit met by two tiles would be decoded by both tasks.
"""

from __future__ import annotations

import pathlib
import warnings

import h5py  # before cupynumeric: it loads Legate's HDF5 into the global scope
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr

import shardload
from shardload import _core

warnings.filterwarnings("ignore", category=UserWarning)


def test_one_chunk_is_one_tile_whatever_k(tmp_path: pathlib.Path) -> None:
    a = np.arange(3000 * 5, dtype=np.float32).reshape(3000, 5)
    z = zarr.create_array(str(tmp_path / "one.zarr"), shape=a.shape, chunks=a.shape,
                          dtype=a.dtype)
    z[:] = a
    for k in (1, 64):
        out, info = shardload.load(tmp_path / "one.zarr", overdecompose=k, info=True)
        np.testing.assert_array_equal(np.asarray(out), a)
        assert (info.tiles, info.tile_rows) == (1, 3000), k


def test_tiles_end_on_chunk_boundaries(tmp_path: pathlib.Path) -> None:
    # Three HDF5 shards of 640 rows in chunks of 64: the grid is aligned, so every tile is
    # a whole number of chunks.
    arrays = [np.arange(640 * 3, dtype=np.int32).reshape(640, 3) + 10_000 * i for i in range(3)]
    for i, a in enumerate(arrays):
        with h5py.File(tmp_path / f"shard_{i:04d}.h5", "w") as f:
            f.create_dataset("data", data=a, chunks=(64, 3), compression="gzip")
    out, info = shardload.load(tmp_path, overdecompose=7, info=True)
    np.testing.assert_array_equal(np.asarray(out), np.concatenate(arrays))
    assert info.tile_rows % 64 == 0
    # 1920 rows over 14 parts: 138-row tiles without units, 192 with.
    assert (info.tile_rows, info.tiles) == (192, 10)
    assert _core.plan([640] * 3, 2, 7)["tile_rows"] == 138


def test_unaligned_parquet_groups_give_tiles_of_at_least_a_group(tmp_path: pathlib.Path) -> None:
    # Shards of 1000 and 900 rows in groups of 256: the second shard starts off the grid.
    tables = []
    for i, n in enumerate((1000, 900)):
        t = pa.table({"x": np.arange(n, dtype=np.float64) + 5000 * i})
        pq.write_table(t, tmp_path / f"shard_{i:04d}.parquet", row_group_size=256)
        tables.append(t)
    out, info = shardload.load(tmp_path, overdecompose=16, info=True)
    want = np.concatenate([t["x"].to_numpy() for t in tables])
    np.testing.assert_array_equal(np.asarray(out), want)
    assert info.tile_rows == 256
    assert info.tiles == -(-1900 // 256)


@pytest.mark.parametrize("rows,p,k,unit,aligned,want", [
    ([4096], 2, 64, 4096, True, (4096, 1)),
    ([4096], 3, 1, 512, True, (1536, 3)),
    ([1000, 900], 2, 16, 256, False, (256, 8)),
    ([100], 4, 1, 0, False, (25, 4)),
])
def test_core_plan_with_units(rows, p, k, unit, aligned, want) -> None:
    plan = _core.plan(rows, p, k, unit_rows=unit, units_aligned=aligned)
    assert (plan["tile_rows"], plan["tiles"]) == want
