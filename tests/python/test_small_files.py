"""Many tiny shards: tens of thousands of zero- and one-row .npy files discover (on several
threads) and load under Legate exactly as numpy concatenates them; a bad file among them is
named, the same one every time."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

import shardload

import cupynumeric as cn  # noqa: E402  (a pinned dependency: its absence must fail, not skip)

COUNT = 20000


def write_tiny(directory: pathlib.Path, count: int) -> list[np.ndarray]:
    """Shards of 0 or 1 rows (and a few of 2), mixed; each row tells its shard."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(12)
    rows = rng.choice([0, 1, 1, 2], size=count)
    arrays = []
    for i, r in enumerate(rows):
        a = np.full((int(r), 3), i, dtype=np.int32)
        a[:, 1] = np.arange(r)
        np.save(directory / f"shard_{i:05d}.npy", a)
        arrays.append(a)
    return arrays


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, np.ndarray]:
    d = tmp_path_factory.mktemp("tiny")
    arrays = write_tiny(d, COUNT)
    return d, np.concatenate(arrays)


@pytest.mark.parametrize("k", [1, 4])
def test_twenty_thousand_tiny_shards_load(tiny: tuple[pathlib.Path, np.ndarray], k: int) -> None:
    d, expected = tiny
    layout = shardload.discover(d)
    assert len(layout.paths) == COUNT
    assert layout.shape == expected.shape
    out = shardload.load(layout, overdecompose=k)
    assert isinstance(out, cn.ndarray)
    np.testing.assert_array_equal(np.asarray(out), expected)
    np.testing.assert_array_equal(layout.read(), expected)
    # A slice in the middle reads only the shards it covers, views of them included.
    np.testing.assert_array_equal(layout.read(9000, 9100), expected[9000:9100])


def test_all_zero_row_shards_load(tmp_path: pathlib.Path) -> None:
    for i in range(3000):
        np.save(tmp_path / f"shard_{i:04d}.npy", np.zeros((0, 2), dtype=np.float64))
    out = shardload.load(tmp_path)
    assert out.shape == (0, 2)


def test_the_first_bad_tiny_shard_is_named(tmp_path: pathlib.Path) -> None:
    write_tiny(tmp_path, 5000)
    (tmp_path / "shard_04321.npy").write_bytes(b"\x93NUMPY broken")
    np.save(tmp_path / "shard_03000.npy", np.zeros((1, 3), dtype=np.float32))
    os.unlink(tmp_path / "shard_04000.npy")
    os.mkfifo(tmp_path / "shard_04000.npy")
    for _ in range(3):
        with pytest.raises(shardload.LayoutError) as e:
            shardload.discover(tmp_path)
        assert str(e.value).endswith(f"{tmp_path / 'shard_03000.npy'}: dtype float32 differs "
                                     f"from int32 of {tmp_path / 'shard_00000.npy'}")
