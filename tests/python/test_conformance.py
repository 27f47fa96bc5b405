"""The same cases for every format: one writer per format (npy, raw, HDF5, Parquet, Arrow IPC,
Zarr v3 and a register_reader reader) stores given numpy shards, and each case loads them
through shardload.load under Legate and layout.read on the host, against numpy.

Where a format cannot express a case (raw keeps one dtype and row shape for all its shards in
one sidecar), its writer says so and the case is skipped with that reason."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Callable, Optional

import h5py  # before cupynumeric: see "Which HDF5" in docs/formats.md
import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
import zarr

import shardload

import cupynumeric as cn  # noqa: E402  (a pinned dependency: its absence must fail, not skip)

COLS = 3


# ---- one writer per format -------------------------------------------------------------------

def _npy(path: pathlib.Path, a: np.ndarray) -> None:
    np.save(path, a)


def _raw(path: pathlib.Path, a: np.ndarray) -> None:
    a.astype(a.dtype.newbyteorder(">")).tofile(path)  # big-endian: the sidecar says so


def _hdf5(path: pathlib.Path, a: np.ndarray) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=a, chunks=(max(1, min(len(a), 4)), *a.shape[1:]),
                         maxshape=(None, *a.shape[1:]), compression="gzip")


def _table(a: np.ndarray) -> pa.Table:
    return pa.table({f"c{j}": a[:, j] for j in range(a.shape[1])})


def _parquet(path: pathlib.Path, a: np.ndarray) -> None:
    pq.write_table(_table(a), path, row_group_size=4)


def _arrow(path: pathlib.Path, a: np.ndarray) -> None:
    feather.write_feather(_table(a), path, compression="uncompressed", chunksize=4)


def _zarr(path: pathlib.Path, a: np.ndarray) -> None:
    z = zarr.create_array(store=str(path), shape=a.shape, dtype=a.dtype,
                          chunks=(4, *a.shape[1:]), zarr_format=3, overwrite=True)
    z[:] = a


# The made-up format of the Python reader (as in test_readers.py): a line
# "ROWS <dtype> <dims...>\n", then the rows, raw, in this machine's byte order.
def _rows_file(path: pathlib.Path, a: np.ndarray) -> None:
    with open(path, "wb") as f:
        f.write(f"ROWS {a.dtype.str} {' '.join(map(str, a.shape))}\n".encode())
        f.write(np.ascontiguousarray(a).tobytes())


def _rows_header(path: str) -> tuple[np.dtype, tuple[int, ...], int]:
    with open(path, "rb") as f:
        line = f.readline(257)
    words = line.split()
    return np.dtype(words[1].decode()), tuple(int(w) for w in words[2:]), len(line)


def _rows_count(path: str) -> int:
    return _rows_header(path)[1][0]


def _rows_read(path: str, lo: int, hi: int) -> np.ndarray:
    dtype, shape, offset = _rows_header(path)
    return np.array(np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)[lo:hi])


READER = "conformance_rows"
shardload.register_reader(READER, read=_rows_read, count_rows=_rows_count)


@dataclasses.dataclass(frozen=True)
class Format:
    name: str
    extension: str
    write_one: Callable[[pathlib.Path, np.ndarray], None]
    options: dict
    # The cases this format cannot express, with the reason.
    cannot: dict = dataclasses.field(default_factory=dict)
    # What a shard whose dtype or row shape differs from the first's raises: discovery's
    # LayoutError, for every format.
    mismatch: type = shardload.LayoutError
    host_reads: bool = True

    def write(self, directory: pathlib.Path, arrays: list[np.ndarray]) -> list[pathlib.Path]:
        """Stores arrays[i] as directory/shard_000i; returns the shards' paths."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, a in enumerate(arrays):
            paths.append(directory / f"shard_{i:04d}{self.extension}")
            self.write_one(paths[-1], a)
        if self.name == "raw":
            (directory / "shardload.json").write_text(json.dumps(
                {"dtype": arrays[0].dtype.newbyteorder(">").str, "shape": list(arrays[0].shape[1:])}))
        return paths

    def skip_unless(self, case: str) -> None:
        if case in self.cannot:
            pytest.skip(f"{self.name}: {self.cannot[case]}")

    def load(self, source, **kw):
        return shardload.load(source, **({} if isinstance(source, shardload.Layout)
                                         else self.options), **kw)


_ONE_SIDECAR = "one sidecar (shardload.json) gives the dtype and row shape of every shard"

FORMATS = [
    Format("npy", ".npy", _npy, {}),
    Format("raw", ".bin", _raw, {"format": "raw"},
           cannot={"dtype mismatch": _ONE_SIDECAR, "trailing-shape mismatch": _ONE_SIDECAR}),
    Format("hdf5", ".h5", _hdf5, {"format": "hdf5", "dataset": "x"}),
    Format("parquet", ".parquet", _parquet, {"format": "parquet"}),
    Format("arrow", ".arrow", _arrow, {"format": "arrow"}),
    Format("zarr", ".zarr", _zarr, {"format": "zarr"}),
    # A Python reader is a registered format like the others: its files are probed at discovery.
    Format("reader", ".rows", _rows_file, {"format": READER, "pattern": "shard_{:04d}.rows"}),
]


@pytest.fixture(params=FORMATS, ids=[f.name for f in FORMATS])
def fmt(request) -> Format:
    return request.param


def shards(rows: list[int], seed: int, dtype=np.float32) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((r, COLS)).astype(dtype) for r in rows]


def check(fmt: Format, source: pathlib.Path, expected: np.ndarray, **kw) -> None:
    """The load under Legate and, where the format has a Layout, the host read, against numpy."""
    got = fmt.load(source, **kw)
    assert isinstance(got, cn.ndarray)
    assert got.shape == expected.shape and got.dtype == expected.dtype, (got.shape, got.dtype)
    np.testing.assert_array_equal(np.asarray(got), expected)
    if fmt.host_reads:
        layout = shardload.discover(source, **fmt.options)
        lo, hi = kw.get("row_range", (0, layout.total_rows))
        np.testing.assert_array_equal(layout.read(lo, hi), expected)


# ---- the cases -------------------------------------------------------------------------------

@pytest.mark.parametrize("overdecompose", [1, 3])
def test_round_trip(fmt: Format, tmp_path: pathlib.Path, overdecompose: int) -> None:
    arrays = shards([13, 6, 21, 1], seed=1)
    fmt.write(tmp_path, arrays)
    check(fmt, tmp_path, np.concatenate(arrays), overdecompose=overdecompose)


def test_ragged_and_empty_shards(fmt: Format, tmp_path: pathlib.Path) -> None:
    arrays = shards([0, 5, 0, 0, 9, 1, 0], seed=2)
    fmt.write(tmp_path, arrays)
    check(fmt, tmp_path, np.concatenate(arrays), overdecompose=2)


def test_only_empty_shards(fmt: Format, tmp_path: pathlib.Path) -> None:
    arrays = shards([0, 0, 0], seed=3)
    fmt.write(tmp_path, arrays)
    check(fmt, tmp_path, np.zeros((0, COLS), np.float32))


def test_a_row_range_across_shards(fmt: Format, tmp_path: pathlib.Path) -> None:
    arrays = shards([7, 0, 11, 5], seed=4)
    fmt.write(tmp_path, arrays)
    expected = np.concatenate(arrays)
    for lo, hi in [(3, 20), (0, 0), (7, 18), (22, 23)]:
        check(fmt, tmp_path, expected[lo:hi], row_range=(lo, hi))


def _mismatch(fmt: Format, tmp_path: pathlib.Path, arrays: list[np.ndarray]) -> None:
    paths = fmt.write(tmp_path, arrays)
    with pytest.raises(fmt.mismatch) as e:
        fmt.load(tmp_path)
    assert str(paths[1]) in str(e.value), str(e.value)
    if fmt.host_reads:
        with pytest.raises(shardload.LayoutError, match=str(paths[1]).replace(".", r"\.")):
            shardload.discover(tmp_path, **fmt.options)


def test_dtype_mismatch_between_shards(fmt: Format, tmp_path: pathlib.Path) -> None:
    fmt.skip_unless("dtype mismatch")
    arrays = shards([4, 4, 4], seed=5)
    arrays[1] = arrays[1].astype(np.float64)
    _mismatch(fmt, tmp_path, arrays)


def test_trailing_shape_mismatch_between_shards(fmt: Format, tmp_path: pathlib.Path) -> None:
    fmt.skip_unless("trailing-shape mismatch")
    arrays = shards([4, 4, 4], seed=6)
    arrays[1] = np.concatenate([arrays[1], arrays[1][:, :1]], axis=1)  # 4 values a row, not 3
    _mismatch(fmt, tmp_path, arrays)


def test_a_file_changed_after_discovery_is_named(fmt: Format, tmp_path: pathlib.Path) -> None:
    fmt.skip_unless("changed after discovery")
    arrays = shards([6, 8, 5], seed=7)
    paths = fmt.write(tmp_path, arrays)
    layout = shardload.discover(tmp_path, **fmt.options)
    fmt.write_one(paths[1], shards([3], seed=8)[0])  # fewer rows since discovery
    with pytest.raises(shardload.ShardReadError) as e:
        shardload.load(layout)
    assert str(paths[1]) in str(e.value) and "changed since discovery" in str(e.value), \
        str(e.value)
    with pytest.raises(shardload.ShardReadError) as e:
        layout.read()
    assert str(paths[1]) in str(e.value) and "changed since discovery" in str(e.value), \
        str(e.value)
    # The shards that did not change still read, and a new discovery sees the new file.
    np.testing.assert_array_equal(layout.read(0, 6), arrays[0])
    expected = np.concatenate([arrays[0], shards([3], seed=8)[0], arrays[2]])
    check(fmt, tmp_path, expected)
