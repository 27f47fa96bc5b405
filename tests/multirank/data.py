"""Datasets for the multi-rank tests, written here with numpy, h5py, pyarrow and zarr (the
oracles), and what each holds."""

from __future__ import annotations

import pathlib

import h5py
import numpy as np

# Ragged, with empty shards at the start, in the middle and at the end.
RAGGED = [0, 5, 13, 0, 7, 1, 9, 0]


def write_shards(directory: pathlib.Path, fmt: str, parts: list[np.ndarray]) -> dict:
    """Writes ``parts`` as one shard each; returns shardload's keyword arguments for them."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(parts):
        stem = directory / f"shard_{i:04d}"
        if fmt == "npy":
            np.save(f"{stem}.npy", part)
        elif fmt == "raw":
            pathlib.Path(f"{stem}.bin").write_bytes(np.ascontiguousarray(part).tobytes())
        elif fmt == "hdf5":
            with h5py.File(f"{stem}.h5", "w") as f:
                f.create_dataset("x", data=part, chunks=(max(1, min(4, len(part))),) + part.shape[1:]
                                 if len(part) else None)
        elif fmt in ("parquet", "arrow"):
            import pyarrow as pa
            import pyarrow.feather
            import pyarrow.parquet

            table = pa.table({f"c{j}": part[:, j] for j in range(part.shape[1])})
            if fmt == "parquet":
                pa.parquet.write_table(table, f"{stem}.parquet", row_group_size=4)
            else:
                # Batches of 4 rows, as Parquet's row groups: tiles span batches and objects.
                pa.feather.write_feather(table, f"{stem}.arrow", compression="uncompressed",
                                         chunksize=4)
        elif fmt == "zarr":
            import zarr

            z = zarr.create_array(f"{stem}.zarr", shape=part.shape, dtype=part.dtype,
                                  chunks=(4,) + part.shape[1:], zarr_format=2,
                                  compressors=None)
            z[...] = part
        else:
            raise ValueError(fmt)
    if fmt == "raw":
        return {"format": "raw", "dtype": str(parts[0].dtype), "trailing_shape": list(parts[0].shape[1:])}
    return {"format": fmt}


def dataset(rng: np.random.Generator, fmt: str, rows: list[int]) -> list[np.ndarray]:
    """Shards of int32 (parquet/arrow: float64 columns) with a trailing dimension of 3."""
    if fmt in ("parquet", "arrow"):
        return [rng.standard_normal((n, 3)) for n in rows]
    return [rng.integers(-2**31, 2**31 - 1, size=(n, 3), dtype=np.int32) for n in rows]
