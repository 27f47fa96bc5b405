"""Every format through shardload.load under Legate (two CPUs): the same dataset
stored as .npy, raw, HDF5, Parquet, Arrow IPC and Zarr loads into equal arrays, and
damage found inside a task reaches the caller while the process goes on."""

from __future__ import annotations

import json
import pathlib

import h5py  # before cupynumeric: see "Which HDF5" in docs/formats.md
import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
import zarr

import shardload
from conftest import corrupt_hdf5_chunk

import cupynumeric as cn  # noqa: E402  (a pinned dependency: its absence must fail, not skip)

COLS = 3


def dataset(seed: int = 11) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((r, COLS)).astype(np.float32) for r in (1500, 0, 777, 2049, 13)]


def write(fmt: str, d: pathlib.Path, arrays: list[np.ndarray]) -> dict:
    """Writes the shards in one format; returns the load options it needs."""
    d.mkdir(parents=True, exist_ok=True)
    for i, a in enumerate(arrays):
        name = d / f"shard_{i:04d}"
        if fmt == "npy":
            np.save(f"{name}.npy", a)
        elif fmt == "raw":
            a.astype(">f4").tofile(f"{name}.bin")
        elif fmt == "hdf5":
            with h5py.File(f"{name}.h5", "w") as f:
                f.create_dataset("x", data=a, chunks=(300, COLS), maxshape=(None, COLS),
                                 compression="gzip")
        elif fmt in ("parquet", "arrow"):
            t = pa.table({f"c{j}": a[:, j] for j in range(COLS)})
            if fmt == "parquet":
                pq.write_table(t, f"{name}.parquet", row_group_size=400)
            else:
                feather.write_feather(t, f"{name}.arrow", compression="uncompressed",
                                      chunksize=400)
        elif fmt in ("zarr2", "zarr3"):
            z = zarr.create_array(store=f"{name}.zarr", shape=a.shape, dtype=a.dtype,
                                  chunks=(256, 2), zarr_format=2 if fmt == "zarr2" else 3)
            z[:] = a
    if fmt == "raw":
        (d / "shardload.json").write_text(json.dumps({"dtype": ">f4", "shape": [COLS]}))
    return {"format": "zarr" if fmt.startswith("zarr") else fmt}


FORMATS = ["npy", "raw", "hdf5", "parquet", "arrow", "zarr2", "zarr3"]


@pytest.mark.parametrize("k", [1, 3])
def test_same_dataset_in_every_format_loads_equal(tmp_path: pathlib.Path, k: int) -> None:
    arrays = dataset()
    expected = np.concatenate(arrays)
    loaded = {}
    for fmt in FORMATS:
        opts = write(fmt, tmp_path / fmt, arrays)
        a = shardload.load(tmp_path / fmt, overdecompose=k, **opts)
        assert isinstance(a, cn.ndarray) and a.shape == expected.shape, fmt
        loaded[fmt] = a
    for fmt, a in loaded.items():
        np.testing.assert_array_equal(np.asarray(a), expected, err_msg=fmt)
        assert bool((a == loaded["npy"]).all()), fmt


def damage(fmt: str, d: pathlib.Path) -> pathlib.Path:
    """Damages shard 3 after discovery so that only reading its data can tell."""
    if fmt == "hdf5":
        path = d / "shard_0003.h5"
        corrupt_hdf5_chunk(path, "x", 1)
        return path
    if fmt == "parquet":
        path = d / "shard_0003.parquet"
        md = pq.ParquetFile(path).metadata.row_group(1).column(0)
        raw = bytearray(path.read_bytes())
        raw[md.data_page_offset + 20:md.data_page_offset + 84] = b"\x00" * 64
        path.write_bytes(bytes(raw))
        return path
    if fmt == "zarr3":
        chunk = d / "shard_0003.zarr" / "c" / "1" / "0"
        chunk.write_bytes(chunk.read_bytes()[:-3])
        return chunk
    raise ValueError(fmt)


@pytest.mark.parametrize("fmt", ["hdf5", "parquet", "zarr3"])
def test_damaged_data_found_in_a_task(tmp_path: pathlib.Path, fmt: str) -> None:
    arrays = dataset(12)
    opts = write(fmt, tmp_path / "bad", arrays)
    bad = damage(fmt, tmp_path / "bad")
    # Discovery reads metadata only, which is intact: the damage shows in a task.
    layout = shardload.discover(tmp_path / "bad", **opts)
    with pytest.raises(shardload.ShardReadError) as e:
        shardload.load(layout, overdecompose=2)
    assert isinstance(e.value, OSError)
    assert str(bad) in str(e.value) and "rows [" in str(e.value), str(e.value)
    opts = write(fmt, tmp_path / "good", arrays)
    np.testing.assert_array_equal(np.asarray(shardload.load(tmp_path / "good", **opts)),
                                  np.concatenate(arrays))


def test_invalid_options(tmp_path: pathlib.Path) -> None:
    write("npy", tmp_path, dataset())
    with pytest.raises(ValueError, match="unknown format 'tiff'"):
        shardload.load(tmp_path, format="tiff")
    with pytest.raises(ValueError, match="unsupported dtype 'float8'"):
        shardload.load(tmp_path, format="raw", dtype="float8", trailing_shape=(3,))
    with pytest.raises(ValueError, match="overdecompose"):
        shardload.load(tmp_path, overdecompose=-1)
    with pytest.raises(shardload.LayoutError, match=r"npy: dtype= does not apply"):
        shardload.load(tmp_path, dtype="float32")
