"""load(row_range=...) reads only a row range, in every format, through a sub-layout whose shards
are views of their files; load(astype=...) casts the result, in every format. Oracles: the
arrays numpy wrote, sliced and cast by numpy."""

from __future__ import annotations

import json
import os
import pathlib
import re

import h5py  # before cupynumeric: see "Which HDF5" in docs/formats.md
import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
import zarr

import shardload

import cupynumeric as cn  # noqa: E402

COLS = 3
ROWS = (5, 0, 7, 3, 4)  # an empty shard, unequal shards; edges at 0, 5, 5, 12, 15, 19
TOTAL = sum(ROWS)
FORMATS = ["npy", "raw", "hdf5", "parquet", "arrow", "zarr2", "zarr3"]


def parts(seed: int = 7) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((r, COLS)) * 100).astype(np.float32) for r in ROWS]


def write(fmt: str, d: pathlib.Path, arrays: list[np.ndarray]) -> np.ndarray:
    d.mkdir(parents=True, exist_ok=True)
    for i, a in enumerate(arrays):
        name = d / f"shard_{i:04d}"
        if fmt == "npy":
            # Fortran order too: a view must count rows of the file, not of the layout.
            np.save(f"{name}.npy", np.asfortranarray(a) if i % 2 else a)
        elif fmt == "raw":
            a.astype(">f4").tofile(f"{name}.bin")
        elif fmt == "hdf5":
            with h5py.File(f"{name}.h5", "w") as f:
                f.create_dataset("x", data=a, chunks=(2, COLS), maxshape=(None, COLS))
        elif fmt in ("parquet", "arrow"):
            t = pa.table({f"c{j}": a[:, j] for j in range(COLS)})
            if fmt == "parquet":
                pq.write_table(t, f"{name}.parquet", row_group_size=2)
            else:
                feather.write_feather(t, f"{name}.arrow", compression="uncompressed",
                                      chunksize=2)
        else:
            z = zarr.create_array(store=f"{name}.zarr", shape=a.shape, dtype=a.dtype,
                                  chunks=(2, 2), zarr_format=2 if fmt == "zarr2" else 3)
            z[:] = a
    if fmt == "raw":
        (d / "shardload.json").write_text(json.dumps({"dtype": ">f4", "shape": [COLS]}))
    return np.concatenate(arrays)


RANGES = [(0, TOTAL), (0, 0), (0, 5), (5, 5), (5, 12), (4, 6), (4, 13), (11, 12), (12, 15),
          (13, 19), (18, 19), (TOTAL, TOTAL), (1, 18)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_rows_loads_every_range_as_numpy_slices_it(tmp_path: pathlib.Path, fmt: str) -> None:
    want = write(fmt, tmp_path / fmt, parts())
    layout = shardload.discover(tmp_path / fmt)
    for lo, hi in RANGES:
        for rows in ((lo, hi), slice(lo, hi), slice(lo, hi, 1)):
            a = shardload.load(layout, row_range=rows, overdecompose=2)
            assert isinstance(a, cn.ndarray) and a.shape == (hi - lo, COLS), (fmt, rows)
            np.testing.assert_array_equal(np.asarray(a), want[lo:hi], err_msg=f"{fmt} {rows}")
        # The host read of the sub-layout agrees.
        np.testing.assert_array_equal(layout.slice_rows(lo, hi).read(), want[lo:hi])
    # A source, not a Layout, takes row_range= too; None is a default bound.
    np.testing.assert_array_equal(np.asarray(shardload.load(tmp_path / fmt, row_range=slice(None, 6))),
                                  want[:6])
    np.testing.assert_array_equal(np.asarray(shardload.load(tmp_path / fmt, row_range=(14, None))),
                                  want[14:])


def test_a_sub_layout_holds_only_the_shards_it_covers(tmp_path: pathlib.Path) -> None:
    want = write("npy", tmp_path, parts())
    layout = shardload.discover(tmp_path)
    sub = layout.slice_rows(4, 13)
    assert sub.shard_rows == [1, 7, 1] and sub.total_rows == 9 and sub.shape == (9, COLS)
    assert [os.path.basename(p) for p in sub.paths] == [
        "shard_0000.npy", "shard_0002.npy", "shard_0003.npy"]
    # A slice of a slice counts rows of the slice.
    np.testing.assert_array_equal(sub.slice_rows(2, 9).read(), want[6:13])
    # Files the range does not cover are never opened: damaged after discovery, shard 4
    # fails a whole load and not one of rows [0, 15).
    (tmp_path / "shard_0004.npy").write_bytes(b"gone")
    np.testing.assert_array_equal(np.asarray(shardload.load(layout, row_range=(0, 15))), want[:15])
    with pytest.raises(shardload.ShardReadError, match="shard_0004.npy"):
        shardload.load(layout)


@pytest.mark.parametrize("rows, error, needle", [
    ((-1, 3), ValueError, "lo: negative row indexes are not accepted"),
    (slice(-3, None), ValueError, "negative row indexes"),
    ((0, TOTAL + 1), ValueError, f"hi: {TOTAL + 1} is past the end of the dataset's {TOTAL} rows"),
    (slice(0, 100), ValueError, "past the end"),
    ((5, 4), ValueError, "rows [5, 4): lo is greater than hi"),
    (slice(0, 10, 2), ValueError, "a slice with step 2 is not a row range"),
    (slice(0, 10, -1), ValueError, "step -1"),
    ((1, 2, 3), TypeError, "row_range: expected a (lo, hi) pair or a slice lo:hi"),
    (3, TypeError, "row_range: expected a (lo, hi) pair"),
    ((1.5, 3), TypeError, "lo: expected an int, found float 1.5"),
    ((True, 3), TypeError, "lo: expected an int, found bool True"),
])
def test_rows_bounds_follow_layout_read(tmp_path: pathlib.Path, rows: object,
                                        error: type, needle: str) -> None:
    write("npy", tmp_path, parts())
    with pytest.raises(error) as e:
        shardload.load(tmp_path, row_range=rows)
    assert needle in str(e.value), str(e.value)
    layout = shardload.discover(tmp_path)
    if isinstance(rows, tuple) and len(rows) == 2 and error is ValueError:
        # The same rule, the same words, for read() and slice_rows().
        with pytest.raises(ValueError, match=re.escape(needle.split(":")[0])):
            layout.read(*rows)
        with pytest.raises(ValueError, match=re.escape(needle.split(":")[0])):
            layout.slice_rows(*rows)


CASTS = ["float64", np.int32, np.dtype("float16"), "complex64", np.bool_]


@pytest.mark.parametrize("fmt", FORMATS)
def test_astype_casts_every_format_as_numpy_does(tmp_path: pathlib.Path, fmt: str) -> None:
    want = write(fmt, tmp_path / fmt, parts(8))
    layout = shardload.discover(tmp_path / fmt)
    for dt in CASTS:
        expected = want.astype(dt)
        a = shardload.load(layout, astype=dt)
        assert a.dtype == np.dtype(dt), (fmt, dt)
        np.testing.assert_array_equal(np.asarray(a), expected, err_msg=f"{fmt} {dt}")
    # With row_range= too, and with info=True the plan is of the rows read.
    a, info = shardload.load(layout, row_range=(3, 14), astype="float64", info=True)
    np.testing.assert_array_equal(np.asarray(a), want[3:14].astype(np.float64))
    assert info.total_rows == 11 and info.bytes == 11 * COLS * 4
    # The data's own dtype is no cast.
    assert shardload.load(layout, astype=np.float32).dtype == np.float32


@pytest.mark.parametrize("astype, error, needle", [
    (">f8", ValueError, "not in the machine's byte order"),
    ("float33", ValueError, "is not a numpy dtype"),
    ("U4", ValueError, "not a numeric or bool dtype"),
    (3, TypeError, "astype: expected a str, a numpy dtype"),
    (True, TypeError, "astype: expected"),
    # numpy's long double types have no Legate type: refused before the load, not after it.
    ("float128", ValueError, r"astype: float128 has no Legate type, so cuPyNumeric cannot "
                             r"hold it; astype takes bool, int8, .*, float16, float32, float64, "
                             r"complex64, complex128$"),
    (np.longdouble, ValueError, "has no Legate type"),
    ("complex256", ValueError, "complex256 has no Legate type"),
])
def test_astype_is_checked_before_anything_is_read(tmp_path: pathlib.Path, astype: object,
                                                   error: type, needle: str) -> None:
    write("npy", tmp_path, parts())
    with pytest.raises(error, match=needle):
        shardload.load(tmp_path / "missing", astype=astype)
    with pytest.raises(error, match=needle):
        shardload.batches(tmp_path / "missing", 4, astype=astype)
