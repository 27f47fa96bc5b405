"""The same dataset as HDF5, Zarr and Parquet shards, each loaded with shardload and checked
against the format's own library.

    python examples/load_other_formats.py [DIR]
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import h5py  # before cupynumeric: see docs/formats.md, "Which HDF5"
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zarr

import shardload


def main(root: pathlib.Path) -> None:
    rng = np.random.default_rng(1)
    parts = [rng.integers(0, 1000, size=(rows, 3), dtype=np.int64) for rows in (400, 17, 1200)]
    expected = np.concatenate(parts)
    for name in ("h5", "zarr", "parquet"):
        (root / name).mkdir()
    for i, part in enumerate(parts):
        with h5py.File(root / "h5" / f"shard_{i:04d}.h5", "w") as f:
            f.create_dataset("x", data=part, chunks=(64, 3), maxshape=(None, 3), compression="gzip")
        z = zarr.create_array(root / "zarr" / f"shard_{i:04d}.zarr", shape=part.shape,
                              dtype=part.dtype, chunks=(100, 3))
        z[:] = part
        pq.write_table(pa.table({f"c{j}": part[:, j] for j in range(3)}),
                       root / "parquet" / f"shard_{i:04d}.parquet", row_group_size=128)

    for name in ("h5", "zarr", "parquet"):
        # A directory of numbered shards of one format is recognised as it is.
        array = shardload.load(root / name)
        assert np.array_equal(np.asarray(array), expected), name
        print(f"{name:8s} {shardload.discover(root / name).format:8s} {array.shape} "
              f"sum {int(array.sum())} (numpy: {int(expected.sum())})")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(pathlib.Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as d:
            main(pathlib.Path(d))
