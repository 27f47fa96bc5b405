"""Write a sharded .npy dataset with numpy, load it in parallel, and compute on it.

    python examples/load_npy_shards.py [DIR]

Shards of different row counts, one dtype and one trailing shape: the layout shardload finds,
validates and loads into one distributed cupynumeric array.
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import numpy as np

import shardload


def main(directory: pathlib.Path) -> None:
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((rows, 8)).astype(np.float32) for rows in (1000, 0, 2500, 731)]
    for i, part in enumerate(parts):
        np.save(directory / f"shard_{i:04d}.npy", part)

    layout = shardload.discover(directory)
    print(layout)

    array, info = shardload.load(directory, info=True)
    print(f"loaded {array.shape} {array.dtype} with {info.tiles} tasks on {info.processors} "
          f"{info.target} processors in {info.total_s:.3f} s")

    expected = np.concatenate(parts)
    column_means = np.asarray(array.mean(axis=0))
    assert np.allclose(column_means, expected.mean(axis=0), atol=1e-5), column_means
    print("column means:", np.round(column_means, 4))

    # A row range reads only the files it touches.
    window = shardload.load(directory, row_range=(900, 1100))
    assert np.array_equal(np.asarray(window), expected[900:1100])
    print("rows [900, 1100) match numpy")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(pathlib.Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as d:
            main(pathlib.Path(d))
