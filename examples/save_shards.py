"""Compute on a loaded dataset and save the result as shards, in every format save writes.

    python examples/save_shards.py [DIR]

Each point task writes its own rows straight into the shard files; the dataset appears at
its destination all at once (hidden staging directory, metadata last, one rename).
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import numpy as np

import shardload


def main(directory: pathlib.Path) -> None:
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((rows, 4)).astype(np.float32) for rows in (500, 1200, 0, 301)]
    source = directory / "in"
    source.mkdir()
    for i, part in enumerate(parts):
        np.save(source / f"shard_{i:04d}.npy", part)

    import cupynumeric as cn

    x = shardload.load(source)
    y = (x - x.mean(axis=0)) / cn.sqrt(x.var(axis=0))  # standardised columns, still distributed
    expected = np.concatenate(parts)
    expected = (expected - expected.mean(axis=0)) / expected.std(axis=0)

    for fmt in ("npy", "raw", "zarr"):
        dest = directory / f"out-{fmt}"
        info = shardload.save(y, dest, num_shards=3, format=fmt)
        print(f"saved {y.shape} {y.dtype} as {info.num_shards} {fmt} shards with {info.tiles} tasks "
              f"in {info.total_s:.3f} s: {sorted(p.name for p in dest.iterdir())}")
        back = shardload.load(dest, format=fmt)
        assert np.allclose(np.asarray(back), expected, atol=1e-5)

    # A second save to the same place is refused unless asked to replace it.
    try:
        shardload.save(y, directory / "out-npy")
    except shardload.DestinationExistsError as e:
        print("refused:", e)
    shardload.save(y[:10], directory / "out-npy", overwrite=True)
    assert shardload.load(directory / "out-npy").shape == (10, 4)
    print("replaced out-npy with 10 rows")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(pathlib.Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(pathlib.Path(tmp))
