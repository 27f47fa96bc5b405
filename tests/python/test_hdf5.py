"""The HDF5 reader against h5py as the oracle, and next to legate.io.hdf5."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import shardload
import shardload.numpy
from conftest import (BUILD, DTYPES, assert_bools_normalised, corrupt_hdf5_chunk, dirty_bools,
                      random_array)

import h5py  # noqa: E402

def write(path: pathlib.Path, a: np.ndarray, name: str = "data", *, big: bool = False,
          chunks: tuple[int, ...] | None = None, gzip: bool = False) -> None:
    if big and a.dtype.itemsize > 1:
        a = a.astype(a.dtype.newbyteorder(">"))
    kw = {}
    if chunks is not None:
        kw["chunks"] = chunks
    if gzip:
        kw["compression"] = "gzip"
        kw.setdefault("chunks", chunks or True)
    with h5py.File(path, "w") as f:
        f.create_dataset(name, data=a, **kw)


def check_all_ranges(layout: shardload.Layout, expected: np.ndarray, step: int = 3) -> None:
    total = expected.shape[0]
    for lo in range(0, total + 1, step):
        for hi in range(lo, total + 1, step + 1):
            np.testing.assert_array_equal(layout.read(lo, hi), expected[lo:hi])


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_layouts_and_byte_orders(tmp_path: pathlib.Path, dtype: str) -> None:
    rng = np.random.default_rng(abs(hash(dtype)) % 2**32)
    rows = [7, 0, 13, 1, 9]
    arrays = [random_array(rng, (r, 3, 2), dtype) for r in rows]
    # contiguous, chunked with chunks that do not divide the rows, gzip, big-endian
    settings = [dict(), dict(chunks=(4, 2, 1)), dict(chunks=(5, 3, 2), gzip=True),
                dict(big=True), dict(big=True, chunks=(2, 1, 2), gzip=True)]
    for i, (a, kw) in enumerate(zip(arrays, settings)):
        if a.shape[0] == 0:
            kw = {k: v for k, v in kw.items() if k not in ("chunks", "gzip")}
        write(tmp_path / f"shard_{i:04d}.h5", a, **kw)
    layout = shardload.discover(tmp_path, format="hdf5")
    expected = np.concatenate(arrays)
    assert layout.format == "hdf5"
    assert layout.dtype == expected.dtype
    assert layout.shape == expected.shape
    assert layout.shard_rows == rows
    check_all_ranges(layout, expected)


def test_one_dimensional_awkward_chunks_and_named_dataset(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(n) for n in (1001, 17, 333)]
    for i, a in enumerate(arrays):
        with h5py.File(tmp_path / f"part-{i}.hdf5", "w") as f:
            f.create_dataset("other", data=np.arange(3))
            f.create_group("g").create_dataset("x", data=a, chunks=(37,), maxshape=(None,),
                                               compression="gzip",
                                               compression_opts=9)
    layout = shardload.discover(str(tmp_path / "part-{}.hdf5"), dataset="/g/x")
    expected = np.concatenate(arrays)
    assert layout.shape == expected.shape
    np.testing.assert_array_equal(layout.read(), expected)
    np.testing.assert_array_equal(layout.read(36, 38), expected[36:38])
    np.testing.assert_array_equal(layout.read(1000, 1019), expected[1000:1019])
    # relative names work too
    layout = shardload.discover(str(tmp_path / "part-{}.hdf5"), dataset="g/x")
    np.testing.assert_array_equal(layout.read(5, 1300), expected[5:1300])


def test_default_dataset_may_differ_in_name_per_file(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "shard_0000.h5", np.arange(5, dtype=np.int16), "a")
    write(tmp_path / "shard_0001.h5", np.arange(5, 9, dtype=np.int16), "b")
    layout = shardload.discover(tmp_path, format="hdf5")
    np.testing.assert_array_equal(layout.read(), np.arange(9, dtype=np.int16))


def test_partial_read_of_large_chunked_gzip(tmp_path: pathlib.Path) -> None:
    a = np.arange(200_000, dtype=np.float32).reshape(50_000, 4)
    write(tmp_path / "shard_0000.h5", a, chunks=(777, 3), gzip=True)
    layout = shardload.discover(tmp_path, format="hdf5")
    np.testing.assert_array_equal(layout.read(12_345, 12_999), a[12_345:12_999])


def test_changed_file_is_refused(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "shard_0000.h5", np.arange(10))
    layout = shardload.discover(tmp_path, format="hdf5")
    write(tmp_path / "shard_0000.h5", np.arange(20))
    with pytest.raises(shardload.ShardReadError, match="shard_0000.h5: changed since discovery"):
        layout.read(0, 5)


@pytest.mark.parametrize("dtype", [">f8", "<i2", ">c16", "bool", "<u8"])
def test_contiguous_rows_after_a_userblock_and_other_data(tmp_path: pathlib.Path,
                                                          dtype: str) -> None:
    """Contiguous rows are read at the dataset's offset from the file's start: after a user
    block (HDF5's addresses start after it) and after another dataset's bytes."""
    rng = np.random.default_rng(21)
    arrays = [random_array(rng, (r, 5), dtype) for r in [9, 4, 17]]
    for i, a in enumerate(arrays):
        with h5py.File(tmp_path / f"shard_{i:04d}.h5", "w", userblock_size=512 << i) as f:
            f.create_dataset("before", data=np.arange(100 * i, dtype=np.int64))
            f.create_dataset("data", data=a)
    with open(tmp_path / "shard_0001.h5", "r+b") as f:
        f.write(b"not HDF5: the user block is the user's")
    layout = shardload.discover(tmp_path, format="hdf5", dataset="data")
    expected = np.concatenate(arrays).astype(np.dtype(dtype).newbyteorder("="))
    check_all_ranges(layout, expected, step=5)
    np.testing.assert_array_equal(np.asarray(shardload.load(layout)), expected)


def test_contiguous_storage_never_written_reads_the_fill_value(tmp_path: pathlib.Path) -> None:
    """A contiguous dataset whose storage was never allocated has no offset: HDF5 gives its
    fill value, as h5py does."""
    with h5py.File(tmp_path / "shard_0000.h5", "w") as f:
        f.create_dataset("data", shape=(6, 3), dtype="<f4", fillvalue=7.5)
    write(tmp_path / "shard_0001.h5", np.arange(12, dtype="<f4").reshape(4, 3))
    layout = shardload.discover(tmp_path, format="hdf5")
    expected = np.concatenate([np.full((6, 3), 7.5, "<f4"),
                               np.arange(12, dtype="<f4").reshape(4, 3)])
    check_all_ranges(layout, expected)


@pytest.mark.parametrize("userblock", [512, 4096])
@pytest.mark.parametrize("dtype", ["<f4", ">i2", ">f8", "<u8"])
def test_contiguous_storage_never_written_behind_a_user_block_reads_the_fill_value(
        tmp_path: pathlib.Path, userblock: int, dtype: str) -> None:
    """Behind a user block, HDF5's H5Dget_offset adds the block's size to an unallocated
    dataset's undefined address too (511 for 512 bytes): such a dataset was refused as "its
    contiguous storage holds 0 bytes, where its elements need 600: the file is damaged"
    (hostile pass 32, A2). It reads as its fill value, as h5py reads it, with and without a
    written shard beside it."""
    with h5py.File(tmp_path / "shard_0000.h5", "w", userblock_size=userblock) as f:
        f.create_dataset("data", shape=(50, 3), dtype=dtype, fillvalue=7)
    with h5py.File(tmp_path / "shard_0000.h5") as f:
        alone = f["data"][:]
    np.testing.assert_array_equal(shardload.numpy.load(tmp_path / "shard_0000.h5"), alone)
    written = np.arange(12, dtype=dtype).reshape(4, 3)
    with h5py.File(tmp_path / "shard_0001.h5", "w", userblock_size=userblock) as f:
        f.create_dataset("data", data=written)
    layout = shardload.discover(tmp_path, format="hdf5")
    expected = np.concatenate([alone, written]).astype(np.dtype(dtype).newbyteorder("="))
    check_all_ranges(layout, expected, step=7)


def test_external_storage_is_snapshotted(tmp_path: pathlib.Path) -> None:
    # The data of a dataset with external storage lives in another file: it is
    # snapshotted at discovery and refused when it changed, like the file.
    a = np.arange(12, dtype="<i4")
    ext = tmp_path / "external.bin"
    ext.write_bytes(a.tobytes())
    with h5py.File(tmp_path / "shard_0000.h5", "w") as f:
        f.create_dataset("data", shape=a.shape, dtype=a.dtype,
                         external=[(str(ext), 0, a.nbytes)])
    layout = shardload.discover(tmp_path, format="hdf5")
    np.testing.assert_array_equal(layout.read(), a)
    before = os.stat(ext)
    with open(ext, "r+b") as f:
        f.write((a + 1).tobytes())
    while True:  # mtime put back; only ctime tells
        os.utime(ext, ns=(before.st_atime_ns, before.st_mtime_ns))
        if os.stat(ext).st_ctime_ns != before.st_ctime_ns:
            break
    with pytest.raises(shardload.ShardReadError,
                       match=f"{ext}: changed since discovery: .*, ctime "):
        layout.read(0, 5)
    ext.unlink()
    with pytest.raises(shardload.ShardReadError, match=f"{ext}: cannot open"):
        layout.read(0, 5)


# ---- errors: each names the offending file ---------------------------------------


def test_error_no_dataset(tmp_path: pathlib.Path) -> None:
    with h5py.File(tmp_path / "shard_0000.h5", "w") as f:
        f.create_group("empty")
    with pytest.raises(shardload.LayoutError,
                       match=r"shard_0000\.h5: dataset: expected exactly one dataset when none "
                             r"is named, found 0 \(none\)"):
        shardload.discover(tmp_path, format="hdf5")


def test_error_several_datasets(tmp_path: pathlib.Path) -> None:
    with h5py.File(tmp_path / "shard_0000.h5", "w") as f:
        f["a"] = np.arange(3)
        f.create_group("g")["b"] = np.arange(3)
    with pytest.raises(shardload.LayoutError,
                       match=r"shard_0000\.h5: dataset: .*found 2 \(/a, /g/b\); name one with dataset="):
        shardload.discover(tmp_path, format="hdf5")


def test_error_dataset_missing_in_one_shard(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "shard_0000.h5", np.arange(3), "x")
    write(tmp_path / "shard_0001.h5", np.arange(3), "y")
    with pytest.raises(shardload.LayoutError,
                       match=r"shard_0001\.h5: dataset '/x' not found \(datasets in the file: /y\)"):
        shardload.discover(tmp_path, format="hdf5", dataset="x")


def test_error_dtype_mismatch_across_shards(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "shard_0000.h5", np.arange(3, dtype=np.float32))
    write(tmp_path / "shard_0001.h5", np.arange(3, dtype=np.float64))
    with pytest.raises(shardload.LayoutError,
                       match=r"shard_0001\.h5: dtype float64 differs from float32 of .*shard_0000\.h5"):
        shardload.discover(tmp_path, format="hdf5")


def test_error_trailing_shape_mismatch(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "shard_0000.h5", np.zeros((3, 2)))
    write(tmp_path / "shard_0001.h5", np.zeros((3, 4)))
    with pytest.raises(shardload.LayoutError, match=r"shard_0001\.h5: trailing shape \(4,\)"):
        shardload.discover(tmp_path, format="hdf5")


@pytest.mark.parametrize("kind", ["string", "compound", "enum", "scalar"])
def test_error_unsupported_type(tmp_path: pathlib.Path, kind: str) -> None:
    with h5py.File(tmp_path / "shard_0000.h5", "w") as f:
        if kind == "string":
            f["d"] = np.array([b"ab", b"cd"])
        elif kind == "compound":
            f["d"] = np.zeros(3, dtype=[("x", "<i4"), ("y", "<f8")])
        elif kind == "enum":
            f.create_dataset("d", data=np.zeros(3, np.uint8),
                             dtype=h5py.enum_dtype({"RED": 0, "GREEN": 1, "BLUE": 2}, basetype="u1"))
        else:
            f["d"] = 3.0
    expected = {"string": "type: string is not supported",
                "compound": "type: compound other than h5py's complex",
                "enum": "type: enum other than h5py's bool",
                "scalar": "shape: expected at least 1 dimension"}[kind]
    with pytest.raises(shardload.LayoutError, match=rf"shard_0000\.h5: dataset '/d': {expected}"):
        shardload.discover(tmp_path, format="hdf5")


def test_error_corrupt_compressed_chunk(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "shard_0000.h5"
    a = np.arange(4000, dtype=np.int64)
    write(path, a, chunks=(1000,), gzip=True)
    corrupt_hdf5_chunk(path, "data", 2)  # the chunk of rows [2000, 3000)
    layout = shardload.discover(tmp_path, format="hdf5")  # fresh snapshot; metadata is intact
    np.testing.assert_array_equal(layout.read(0, 2000), a[:2000])  # other chunks still read
    # The direct path inflates the chunk itself: the error names the chunk's rows.
    with pytest.raises(shardload.ShardReadError,
                       match=r"reading rows \[1500, 2500\): .*shard_0000\.h5: dataset '/data': "
                             r"chunk of rows \[2000, 3000\) at \(2000\): deflate: corrupt chunk"):
        layout.read(1500, 2500)


# ---- gzip through the direct chunk path (inflated outside HDF5's global lock) ------


def write_gzip(path: pathlib.Path, a: np.ndarray, chunks: tuple[int, ...], *, level: int = 1,
               shuffle: bool = False, big: bool = False, **kw) -> None:
    if big and a.dtype.itemsize > 1:
        a = a.astype(a.dtype.newbyteorder(">"))
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=a, chunks=chunks, compression="gzip",
                         compression_opts=level, shuffle=shuffle, **kw)


def read_back(tmp_path: pathlib.Path) -> np.ndarray:
    parts = []
    for p in sorted(tmp_path.glob("shard_*.h5")):
        with h5py.File(p, "r") as f:
            parts.append(f["data"][...])
    return np.concatenate(parts).astype(parts[0].dtype.newbyteorder("="))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gzip_shuffle_levels_byte_orders_every_dtype(tmp_path: pathlib.Path, dtype: str) -> None:
    rng = np.random.default_rng(abs(hash(dtype + "gz")) % 2**32)
    # full-row chunks not dividing the rows, shuffle, level 9, big-endian, and
    # chunks along the trailing axes (partial there too)
    settings = [dict(chunks=(5, 3, 2)), dict(chunks=(4, 3, 2), shuffle=True, level=9),
                dict(chunks=(6, 3, 2), big=True), dict(chunks=(3, 2, 2), shuffle=True, big=True),
                dict(chunks=(7, 1, 2), level=9, big=True), dict(chunks=(2, 2, 1), shuffle=True)]
    arrays = []
    for i, kw in enumerate(settings):
        a = random_array(rng, (11 + 3 * i, 3, 2), dtype)
        write_gzip(tmp_path / f"shard_{i:04d}.h5", a, **kw)
        arrays.append(a)
    layout = shardload.discover(tmp_path, format="hdf5")
    expected = np.concatenate(arrays)
    assert layout.dtype == expected.dtype
    np.testing.assert_array_equal(read_back(tmp_path), expected)  # h5py agrees with the source
    check_all_ranges(layout, expected, step=5)


@pytest.mark.parametrize("shuffle", [False, True])
def test_gzip_trailing_chunks_and_chunks_beyond_the_extent(tmp_path: pathlib.Path,
                                                          shuffle: bool) -> None:
    rng = np.random.default_rng(7)
    a = rng.standard_normal((203, 7, 5))
    write_gzip(tmp_path / "shard_0000.h5", a, (16, 3, 2), shuffle=shuffle)
    # resizable: chunks may be wider than the current trailing extent
    b = rng.integers(-1000, 1000, size=(90, 7, 5)).astype(np.float64)
    write_gzip(tmp_path / "shard_0001.h5", b, (32, 8, 8), shuffle=shuffle,
               maxshape=(None, None, None))
    layout = shardload.discover(tmp_path, format="hdf5")
    expected = np.concatenate([a, b])
    for lo, hi in [(0, 293), (1, 2), (15, 17), (16, 32), (100, 250), (202, 204), (203, 293),
                   (230, 231), (292, 293)]:
        np.testing.assert_array_equal(layout.read(lo, hi), expected[lo:hi])


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("chunks", [(10, 4), (7, 3)])
def test_gzip_missing_chunks_read_the_fill_value(tmp_path: pathlib.Path, shuffle: bool,
                                                 chunks: tuple[int, int]) -> None:
    expected = np.full((100, 4), -7, dtype=np.int32)
    with h5py.File(tmp_path / "shard_0000.h5", "w") as f:
        d = f.create_dataset("data", shape=(100, 4), dtype="<i4", chunks=chunks,
                             compression="gzip", shuffle=shuffle, fillvalue=-7)
        d[20:30] = np.arange(40).reshape(10, 4)
        d[55:75, 1:3] = 5
        expected[20:30] = np.arange(40).reshape(10, 4)
        expected[55:75, 1:3] = 5
    # no fill value set: HDF5's default, zeros (big-endian too)
    with h5py.File(tmp_path / "shard_0001.h5", "w") as f:
        d = f.create_dataset("data", shape=(30, 4), dtype=">i4", chunks=chunks,
                             compression="gzip", shuffle=shuffle)
        d[3:5] = 9
    tail = np.zeros((30, 4), np.int32)
    tail[3:5] = 9
    expected = np.concatenate([expected, tail])
    np.testing.assert_array_equal(read_back(tmp_path), expected)
    layout = shardload.discover(tmp_path, format="hdf5")
    check_all_ranges(layout, expected, step=9)


def test_gzip_chunk_stored_without_its_filter(tmp_path: pathlib.Path) -> None:
    # A chunk whose filter mask says deflate was skipped is read by H5Dread.
    path = tmp_path / "shard_0000.h5"
    a = np.arange(40, dtype=np.int16).reshape(20, 2)
    write_gzip(path, a, (5, 2))
    with h5py.File(path, "r+") as f:
        f["data"].id.write_direct_chunk((10, 0), np.full((5, 2), 77, np.int16).tobytes(),
                                        filter_mask=1)
    a[10:15] = 77
    np.testing.assert_array_equal(read_back(tmp_path), a)
    layout = shardload.discover(tmp_path, format="hdf5")
    check_all_ranges(layout, a, step=2)


@pytest.mark.parametrize("decoded", ["short", "long"])
def test_gzip_chunk_of_the_wrong_decoded_size_is_an_error(tmp_path: pathlib.Path,
                                                          decoded: str) -> None:
    import zlib
    path = tmp_path / "shard_0000.h5"
    a = np.arange(400, dtype=np.float32).reshape(100, 4)
    write_gzip(path, a, (25, 4))
    n = 25 * 4 * 4
    payload = bytes(n - 4) if decoded == "short" else bytes(n + 4)
    with h5py.File(path, "r+") as f:
        f["data"].id.write_direct_chunk((50, 0), zlib.compress(payload))
    layout = shardload.discover(tmp_path, format="hdf5")
    np.testing.assert_array_equal(layout.read(0, 50), a[:50])
    np.testing.assert_array_equal(layout.read(75, 100), a[75:])
    why = "decodes to 396 bytes, expected 400 bytes" if decoded == "short" else \
        "decodes to more than the expected 400 bytes"
    with pytest.raises(shardload.ShardReadError,
                       match=rf"reading rows \[40, 60\): .*shard_0000\.h5: dataset '/data': "
                             rf"chunk of rows \[50, 75\) at \(50, 0\): deflate: corrupt chunk: {why}"):
        layout.read(40, 60)


@pytest.mark.parametrize("extra", ["fletcher32", "scaleoffset"])
def test_gzip_with_other_filters_reads_through_hdf5(tmp_path: pathlib.Path, extra: str) -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(-5000, 5000, size=(333, 3), dtype=np.int32)
    kw = {"fletcher32": True} if extra == "fletcher32" else {"scaleoffset": 0}
    write_gzip(tmp_path / "shard_0000.h5", a, (40, 3), shuffle=True, **kw)
    write_gzip(tmp_path / "shard_0001.h5", a[::-1], (50, 2), big=True, **kw)
    expected = np.concatenate([a, a[::-1]])
    np.testing.assert_array_equal(read_back(tmp_path), expected)
    layout = shardload.discover(tmp_path, format="hdf5")
    check_all_ranges(layout, expected, step=37)


def test_gzip_fletcher32_corrupt_chunk_is_hdf5s_error(tmp_path: pathlib.Path) -> None:
    # Outside the direct path, a damaged chunk is still an error (HDF5's own).
    path = tmp_path / "shard_0000.h5"
    a = np.arange(4000, dtype=np.int64)
    write_gzip(path, a, (1000,), fletcher32=True)
    corrupt_hdf5_chunk(path, "data", 1, keep_tail=8)
    layout = shardload.discover(tmp_path, format="hdf5")
    np.testing.assert_array_equal(layout.read(2000, 4000), a[2000:])
    with pytest.raises(shardload.ShardReadError,
                       match=r"reading rows \[500, 1500\): .*shard_0000\.h5: dataset '/data': HDF5: "):
        layout.read(500, 1500)


def test_error_not_hdf5(tmp_path: pathlib.Path) -> None:
    (tmp_path / "shard_0000.h5").write_bytes(b"\x89HDF nope" * 100)
    with pytest.raises(shardload.LayoutError, match=r"shard_0000\.h5: not a readable HDF5 file"):
        shardload.discover(tmp_path, format="hdf5")


def test_error_options_of_other_formats(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "shard_0000.h5", np.arange(3))
    with pytest.raises(shardload.LayoutError, match=r"hdf5: columns= does not apply"):
        shardload.discover(tmp_path, format="hdf5", columns=["a"])


# ---- coexistence with Legate's own HDF5 in one process ---------------------------

# The stand-in driver scripts/setup.sh builds in the checkout's build where no driver exists.
NOCUDA = BUILD / "nocuda"

COEXIST = textwrap.dedent(
    """
    import sys, pathlib
    import numpy as np
    order = sys.argv[2]
    # h5py must come before cupynumeric in any case: cupynumeric loads its library
    # RTLD_GLOBAL, which puts Legate's HDF5 1.14 into the global scope, and an h5py
    # imported after that binds partly to it and fails ("Not a datatype").
    import h5py
    if order == "legate-first":
        import legate.io.hdf5 as lh
        import cupynumeric  # from here on Legate's HDF5 is in the global scope
        import shardload    # ... and shardload's HDF5 must still be its own
    else:
        import shardload
        import legate.io.hdf5 as lh
        import cupynumeric
    d = pathlib.Path(sys.argv[1])
    # Little-endian: legate.io.hdf5 26.06 returns a big-endian dataset's raw bytes
    # unconverted (checked here), so it cannot be the oracle for one.
    a = np.arange(6000, dtype="<f8").reshape(1500, 4)
    for i in range(3):
        with h5py.File(d / f"shard_{i:04d}.h5", "w") as f:
            f.create_dataset("x", data=a[i * 500:(i + 1) * 500], chunks=(77, 3), compression="gzip")
    # shardload's reader first, Legate's reader, then shardload's again
    layout = shardload.discover(d, format="hdf5")
    assert (layout.read(250, 1250) == a[250:1250]).all()
    got = np.asarray(cupynumeric.asarray(lh.from_file(d / "shard_0001.h5", dataset_name="x")))
    assert (got == a[500:1000]).all(), "legate.io.hdf5 read wrong data"
    assert (layout.read() == a).all()
    maps = open("/proc/self/maps").read()
    assert "libhdf5_serial.so" in maps, "shardload's private HDF5 is not mapped"
    assert "legate.libs/libhdf5-" in maps, "Legate's HDF5 is not mapped"
    print("COEXIST OK", order, h5py.version.hdf5_version)
    """
)


@pytest.mark.parametrize("order", ["legate-first", "shardload-first"])
def test_coexists_with_legate_io_hdf5(tmp_path: pathlib.Path, order: str) -> None:
    # scripts/setup.sh builds the stand-in wherever no driver exists.
    assert (NOCUDA / "libcuda.so.1").exists() or os.path.exists("/dev/nvidiactl"), (
        f"no NVIDIA driver and no stand-in at {NOCUDA} (run scripts/setup.sh)")
    env = dict(os.environ)
    if not os.path.exists("/dev/nvidiactl"):
        env["LD_LIBRARY_PATH"] = f"{NOCUDA}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
        env.setdefault("LEGATE_CONFIG", "--cpus 2 --utility 1 --gpus 0 --sysmem 2000")
    script = tmp_path / "coexist.py"
    script.write_text(COEXIST)
    data = tmp_path / "data"
    data.mkdir()
    r = subprocess.run([sys.executable, str(script), str(data), order], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"COEXIST OK {order}" in r.stdout


@pytest.mark.parametrize("storage", ["contiguous", "chunked", "gzip"])
def test_bool_bytes_other_than_0_and_1_read_as_numpy_does(tmp_path: pathlib.Path,
                                                          storage: str) -> None:
    """h5py's bool is an enum over int8; raw values 2..255 written through the
    enum's own memory type (no conversion) are what h5py reads back."""
    rng = np.random.default_rng(15)
    arrays = [dirty_bools(rng, (r, 3)) for r in [10, 0, 7, 21]]
    for i, a in enumerate(arrays):
        kw = {"chunks": (4, 2), "maxshape": (None, 3)} if storage == "chunked" else {}
        if storage == "gzip":
            kw = {"chunks": (4, 3), "maxshape": (None, 3), "compression": "gzip"}
        with h5py.File(tmp_path / f"shard_{i:04d}.h5", "w") as f:
            d = f.create_dataset("data", shape=a.shape, dtype=bool, **kw)
            if a.size:
                d.id.write(h5py.h5s.ALL, h5py.h5s.ALL, a.view(np.int8), mtype=d.id.get_type())
    stored = []
    for i in range(len(arrays)):
        with h5py.File(tmp_path / f"shard_{i:04d}.h5", "r") as f:
            stored.append(f["data"][...])
    stored = np.concatenate(stored)
    np.testing.assert_array_equal(stored.view(np.uint8), np.concatenate(arrays).view(np.uint8))
    layout = shardload.discover(tmp_path, format="hdf5")
    assert layout.dtype == np.bool_
    assert_bools_normalised(layout.read(), stored)
    assert_bools_normalised(layout.read(3, 30), stored[3:30])


# ---- types whose stored bytes are not the array's: converted by HDF5 or refused ----------


def write_typed(path: pathlib.Path, ftype, data: np.ndarray, storage: str) -> None:
    """`data` stored as the file type `ftype` (h5py's low-level API: HDF5 converts on the way),
    contiguous, in chunks of 3 rows, or in gzip chunks of 3 rows."""
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        if storage != "contiguous":
            dcpl.set_chunk((3,) + data.shape[1:])
            if storage == "gzip":
                dcpl.set_deflate(1)
        ds = h5py.h5d.create(f.id, b"data", ftype, h5py.h5s.create_simple(data.shape), dcpl=dcpl)
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data))


def unnormalised(base):
    """An IEEE float type whose mantissa is stored with its leading bit (H5T_NORM_NONE): IEEE's
    field positions and bias, other bytes."""
    t = base.copy()
    t.set_norm(h5py.h5t.NORM_NONE)
    return t


def half(norm=None):
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_fields(15, 10, 5, 0, 10)
    t.set_size(2)
    t.set_ebias(15)
    if norm is not None:
        t.set_norm(norm)
    return t


def complex_of(part, size: int, imag_at: int):
    t = h5py.h5t.create(h5py.h5t.COMPOUND, size)
    t.insert(b"r", 0, part)
    t.insert(b"i", imag_at, part)
    return t


UNNORMALISED = {
    "f2": lambda: half(h5py.h5t.NORM_NONE),
    "<f4": lambda: unnormalised(h5py.h5t.IEEE_F32LE),
    ">f4": lambda: unnormalised(h5py.h5t.IEEE_F32BE),
    "<f8": lambda: unnormalised(h5py.h5t.IEEE_F64LE),
    ">f8": lambda: unnormalised(h5py.h5t.IEEE_F64BE),
    "c8": lambda: complex_of(unnormalised(h5py.h5t.IEEE_F32LE), 8, 4),
    "c16": lambda: complex_of(unnormalised(h5py.h5t.IEEE_F64BE), 16, 8),
}


@pytest.mark.parametrize("storage", ["contiguous", "chunked", "gzip"])
@pytest.mark.parametrize("kind", sorted(UNNORMALISED))
def test_unnormalised_floats_read_as_h5py_does(tmp_path: pathlib.Path, kind: str,
                                               storage: str) -> None:
    """A float stored with H5T_NORM_NONE has IEEE's fields but not its bits: rows read at their
    file offset or inflated outside HDF5 came back as raw IEEE bits (1.5, 3.0, 3.75 for 1.0,
    2.0, 3.5). Only a type equal to the array's in every property skips HDF5's conversion."""
    dtype = np.dtype(kind[1:] if kind[0] in "<>" else kind)
    rng = np.random.default_rng(31)
    # Values of few mantissa bits: an unnormalised mantissa spends one bit on the leading 1.
    first = np.array([1.0, 2.0, 3.5, -0.25, 0.0, 1024.0 if dtype.itemsize == 2 else 2.0**60])
    values = np.concatenate([first, rng.integers(-250, 250, 10 * 4 - 6) / 2])
    if dtype.kind == "c":
        values = values + 1j * values[::-1]
    a = values.astype(dtype).reshape(10, 4)
    for i, rows in enumerate([(0, 7), (7, 10)]):
        write_typed(tmp_path / f"shard_{i:04d}.h5", UNNORMALISED[kind](), a[slice(*rows)], storage)
    parts = []
    for i in range(2):
        with h5py.File(tmp_path / f"shard_{i:04d}.h5", "r") as f:
            parts.append(f["data"][...])
    want = np.concatenate(parts)
    np.testing.assert_array_equal(want, a)  # h5py converts both ways
    layout = shardload.discover(tmp_path, format="hdf5")
    assert layout.dtype == want.dtype.newbyteorder("=")
    got = layout.read()
    np.testing.assert_array_equal(got.ravel()[:3].real, [1.0, 2.0, 3.5])
    np.testing.assert_array_equal(got, want)
    check_all_ranges(layout, want, step=4)
    np.testing.assert_array_equal(np.asarray(shardload.load(layout)), want)


# Each kind of type that is not the array's own: (file type, data written, and None where
# shardload reads what h5py reads, else the words of its refusal at discovery).
NON_NATIVE = {
    "float with pad bits of ones": (
        lambda: _with_pads(h5py.h5t.IEEE_F32LE.copy(), inpad=True), "<f4", None),
    "float with the mantissa's msb stored set": (
        lambda: _norm(h5py.h5t.IEEE_F32LE, h5py.h5t.NORM_MSBSET), "<f4",
        "normalisation msb set"),
    "float of 32 bits in 8 bytes": (lambda: _sized(h5py.h5t.IEEE_F32LE, 8), "<f8",
                                    "float of 8 bytes (precision 32 bits"),
    "float of another bias": (lambda: _bias(h5py.h5t.IEEE_F32LE, 100), "<f4", "bias 100"),
    "half float with pad bits of ones": (lambda: _with_pads(half(), inpad=True), "f2", None),
    "integer with pad bits of ones": (lambda: _with_pads(h5py.h5t.STD_I16LE.copy()), "<i2", None),
    "integer of 12 bits at bit 2": (lambda: _precision(h5py.h5t.STD_I16LE, 12, 2), "<i2",
                                    "integer of 2 bytes with precision 12 bits"),
    "big-endian byte": (lambda: h5py.h5t.STD_I8BE.copy(), "i1", None),
    "unsigned big-endian byte": (lambda: h5py.h5t.STD_U8BE.copy(), "u1", None),
    "complex with a gap between its parts": (
        lambda: complex_of(h5py.h5t.IEEE_F32LE, 12, 8), "c8", None),
    "complex with its parts in another order": (
        lambda: _complex_swapped(), "c8", "compound other than h5py's complex"),
    "bool over an unsigned byte": (lambda: _bool_over(h5py.h5t.STD_U8LE), "?", None),
}


def _with_pads(t, inpad: bool = False):
    t.set_pad(h5py.h5t.PAD_ONE, h5py.h5t.PAD_ONE)
    if inpad:
        t.set_inpad(h5py.h5t.PAD_ONE)
    return t


def _norm(base, norm):
    t = base.copy()
    t.set_norm(norm)
    return t


def _sized(base, size: int):
    t = base.copy()
    t.set_size(size)
    return t


def _bias(base, bias: int):
    t = base.copy()
    t.set_ebias(bias)
    return t


def _precision(base, precision: int, offset: int):
    t = base.copy()
    t.set_precision(precision)
    t.set_offset(offset)
    return t


def _complex_swapped():
    t = h5py.h5t.create(h5py.h5t.COMPOUND, 8)
    t.insert(b"i", 0, h5py.h5t.IEEE_F32LE)
    t.insert(b"r", 4, h5py.h5t.IEEE_F32LE)
    return t


def _bool_over(base):
    t = h5py.h5t.enum_create(base)
    t.enum_insert(b"FALSE", 0)
    t.enum_insert(b"TRUE", 1)
    return t


@pytest.mark.parametrize("storage", ["contiguous", "chunked", "gzip"])
@pytest.mark.parametrize("name", sorted(NON_NATIVE))
def test_non_native_types_read_as_h5py_does_or_are_refused(tmp_path: pathlib.Path, name: str,
                                                          storage: str) -> None:
    """No type is read as raw bytes unless its bytes are the array's: each either loads as h5py
    reads it or is refused at discovery naming the file, the dataset and what the type is."""
    make, dtype, refusal = NON_NATIVE[name]
    rng = np.random.default_rng(32)
    if dtype == "?":
        a = rng.integers(0, 2, (8, 2)).astype(np.uint8)
    elif np.dtype(dtype).kind == "c":
        a = (rng.integers(-50, 50, (8, 2)) + 1j * rng.integers(-50, 50, (8, 2))).astype(dtype)
    elif np.dtype(dtype).kind == "f":
        a = (rng.integers(-500, 500, (8, 2)) / 4).astype(dtype)
    else:
        a = rng.integers(0, 100, (8, 2)).astype(dtype)
    path = tmp_path / "shard_0000.h5"
    write_typed(path, make(), a, storage)
    if refusal is not None:
        with pytest.raises(shardload.LayoutError) as e:
            shardload.discover(tmp_path, format="hdf5")
        assert f"{path}: dataset '/data': type: " in str(e.value), str(e.value)
        assert refusal in str(e.value), str(e.value)
        return
    with h5py.File(path, "r") as f:
        want = f["data"][...]
    np.testing.assert_array_equal(want, a.astype(want.dtype))
    layout = shardload.discover(tmp_path, format="hdf5")
    assert layout.dtype == want.dtype.newbyteorder("=")
    np.testing.assert_array_equal(layout.read(), want)
    np.testing.assert_array_equal(layout.read(2, 7), want[2:7])
    np.testing.assert_array_equal(np.asarray(shardload.load(layout)), want)


# ---- storage that runs past the end of the file ------------------------------------------


def truncate_past_a_dataset(path: pathlib.Path, cut: int) -> None:
    """Cuts `cut` bytes off an h5py file (no user block) and writes the new length into the
    superblock's end-of-file address (version 0, h5py's default), so that HDF5 opens it and
    only the dataset's own storage runs past the end: plain truncation is refused on open."""
    raw = bytearray(path.read_bytes())
    assert raw[:8] == b"\x89HDF\r\n\x1a\n" and raw[8] == 0
    assert int.from_bytes(raw[40:48], "little") == len(raw)
    raw = raw[:-cut]
    raw[40:48] = len(raw).to_bytes(8, "little")
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("storage", ["contiguous", "chunked", "gzip"])
def test_storage_past_the_end_of_the_file_is_an_error(tmp_path: pathlib.Path,
                                                      storage: str) -> None:
    """HDF5 1.10 reads the part of a dataset past the file's end as zeros; h5py's HDF5 refuses
    the dataset, and so does shardload, naming the file, the dataset and the bytes."""
    a = np.arange(1, 1001, dtype="<f4").reshape(250, 4)
    path = tmp_path / "shard_0000.h5"
    kw = {} if storage == "contiguous" else {"chunks": (50, 4), "maxshape": (None, 4)}
    write(path, a, chunks=kw.get("chunks"), gzip=storage == "gzip")
    truncate_past_a_dataset(path, 200)
    with pytest.raises((OSError, KeyError)):  # h5py: KeyError when the dataset will not open
        with h5py.File(path, "r") as f:
            f["data"][...]
    if storage == "contiguous":
        with pytest.raises(shardload.LayoutError) as e:
            shardload.discover(tmp_path, format="hdf5")
        assert (f"{path}: dataset '/data': its contiguous storage (4000 bytes at offset "
                in str(e.value)), str(e.value)
        assert (f") runs past the end of the file ({path.stat().st_size} bytes): the file is "
                "truncated or damaged") in str(e.value), str(e.value)
        return
    layout = shardload.discover(tmp_path, format="hdf5")
    np.testing.assert_array_equal(layout.read(0, 200), a[:200])  # its other chunks are whole
    for lo, hi in [(0, 250), (240, 250), (199, 201)]:
        with pytest.raises(shardload.ShardReadError) as e:
            layout.read(lo, hi)
        assert f"{path}: dataset '/data': its chunk at (200, 0) (" in str(e.value), str(e.value)
        assert "runs past the end of the file" in str(e.value), str(e.value)
    with pytest.raises(shardload.ShardReadError, match="runs past the end of the file"):
        shardload.load(layout)


def _fill_never(path: pathlib.Path, rows: int, chunks: tuple[int, ...] | None,
                written: slice | None) -> None:
    """A dataset of float32 (rows, 4) whose fill time is 'never', writing only `written`."""
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        if chunks is not None:
            dcpl.set_chunk(chunks)
        dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        dcpl.set_fill_value(np.array(3.0, dtype="f4"))
        space = h5py.h5s.create_simple((rows, 4), (h5py.h5s.UNLIMITED, 4) if chunks else None)
        h5py.h5d.create(f.id, b"data", h5py.h5t.NATIVE_FLOAT, space, dcpl=dcpl)
        if written is not None:
            f["data"][written] = np.arange(rows * 4, dtype="f4").reshape(rows, 4)[written]


@pytest.mark.parametrize("chunks,written,shown", [
    (None, None, "its storage was never written"),
    ((50, 4), None, "its storage was never written"),
    ((50, 4), slice(0, 60), "some of its chunks were never written"),
])
def test_elements_hdf5_gives_no_value_are_refused(tmp_path: pathlib.Path, chunks, written,
                                                  shown) -> None:
    """With fill time 'never', HDF5 leaves the elements of storage never written as the read
    buffer held them: before, those rows read as whatever memory the load had (4.3e+30, ...).
    The dataset is refused at discovery, naming the file and the dataset."""
    path = tmp_path / "shard_0000.h5"
    _fill_never(path, 300, chunks, written)
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(tmp_path, format="hdf5")
    assert f"{path}: dataset '/data': {shown} and its fill time is 'never'" in str(e.value), \
        str(e.value)
    # Written whole, the same dataset reads as h5py reads it.
    _fill_never(path, 300, chunks, slice(0, 300))
    with h5py.File(path, "r") as f:
        want = f["data"][...]
    np.testing.assert_array_equal(shardload.discover(tmp_path, format="hdf5").read(), want)


def _rewrite_chunk_size(path: pathlib.Path, index: int, size: int) -> None:
    """Rewrites the stored size of chunk `index` in the dataset's version-1 B-tree (a key is
    the chunk's size, its filter mask, its offsets and the rank's extra one, then its address)."""
    with h5py.File(path, "r") as f:
        info = f["data"].id.get_chunk_info(index)
        rank = len(f["data"].shape)
    raw = bytearray(path.read_bytes())
    address = info.byte_offset.to_bytes(8, "little")
    places = [at - 8 * (rank + 1) - 8 for at in range(32, len(raw) - 8)
              if raw[at:at + 8] == address]
    places = [p for p in places if int.from_bytes(raw[p:p + 4], "little") == info.size]
    assert len(places) == 1, places
    raw[places[0]:places[0] + 4] = size.to_bytes(4, "little")
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("filters", ["none", "skipped"])
def test_an_unfiltered_chunk_stored_shorter_than_its_bytes_is_an_error(tmp_path: pathlib.Path,
                                                                      filters: str) -> None:
    """A chunk without filters (none in the pipeline, or all of them skipped by the chunk's
    mask) whose index gives fewer bytes than the chunk holds: HDF5 reads the bytes given and
    leaves the rest of its chunk buffer as it was, so the last row read as whatever memory
    held (h5py too). The read is refused naming the chunk; the other chunks still read."""
    a = np.random.default_rng(0).random((300, 4)).astype("f4")
    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w") as f:
        if filters == "none":
            f.create_dataset("data", data=a, chunks=(50, 4))
        else:
            ds = f.create_dataset("data", shape=a.shape, dtype="f4", chunks=(50, 4),
                                  compression="gzip")
            for c in range(6):  # filter mask 1: deflate skipped, the chunk stored raw
                ds.id.write_direct_chunk((c * 50, 0), a[c * 50:(c + 1) * 50].tobytes(), 1)
    np.testing.assert_array_equal(shardload.discover(tmp_path, format="hdf5").read(), a)
    _rewrite_chunk_size(path, 1, 800 - 20)
    layout = shardload.discover(tmp_path, format="hdf5")
    np.testing.assert_array_equal(layout.read(0, 50), a[:50])
    np.testing.assert_array_equal(layout.read(100, 300), a[100:])
    for lo, hi in [(0, 300), (95, 100), (50, 51)]:
        with pytest.raises(shardload.ShardReadError) as e:
            layout.read(lo, hi)
        assert (f"{path}: dataset '/data': its chunk at (50, 0) holds 780 bytes, but 800 "
                "unfiltered") in str(e.value), str(e.value)


@pytest.mark.parametrize("segments", ["one", "two"])
def test_an_external_storage_file_shorter_than_its_segment_is_an_error(tmp_path: pathlib.Path,
                                                                       segments: str) -> None:
    """HDF5 reads the part of an external storage segment past its file's end as zeros (h5py
    too): a truncated external file loaded as zeros without a word. Discovery refuses it,
    naming both files and the bytes; the whole file (or one longer) reads as h5py reads it."""
    a = np.arange(1, 401, dtype="<f4").reshape(100, 4)
    shard = tmp_path / "shard_0000.h5"
    if segments == "one":
        files = [(tmp_path / "ext.bin", 16, a.nbytes)]  # 16 bytes of something else first
    else:
        files = [(tmp_path / "ext0.bin", 0, 800), (tmp_path / "ext1.bin", 8, h5py.h5f.UNLIMITED)]
    raw = a.tobytes()
    at = 0
    for path, offset, size in files:
        take = raw[at:at + min(size, len(raw) - at)]
        path.write_bytes(b"\xff" * offset + take + b"\xee" * 8)
        at += len(take)
    with h5py.File(shard, "w") as f:
        f.create_dataset("data", shape=a.shape, dtype=a.dtype,
                         external=[(str(p), o, s) for p, o, s in files])
    np.testing.assert_array_equal(shardload.discover(tmp_path, format="hdf5").read(), a)
    last, offset, _ = files[-1]
    needed = offset + (a.nbytes - (800 if segments == "two" else 0))
    with open(last, "r+b") as f:
        f.truncate(needed - 64)
    with h5py.File(shard, "r") as f:
        assert (f["data"][-4:] == 0).all()  # HDF5's zeros
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(tmp_path, format="hdf5")
    assert (f"{shard}: dataset '/data': external storage file {last} holds {needed - 64} bytes, "
            f"but the dataset's data runs to byte {needed} of it") in str(e.value), str(e.value)


def _filtered(tmp: pathlib.Path, raw: bytes, shuffle: bool, fletcher32: bool) -> bytes:
    """The stored bytes of one float32 chunk holding `raw`, as HDF5's filters write them."""
    with h5py.File(tmp / "filtered.h5", "w") as f:
        n = len(raw) // 4
        ds = f.create_dataset("c", data=np.frombuffer(raw, "f4"), chunks=(n,),
                              shuffle=shuffle, fletcher32=fletcher32)
        return ds.id.read_direct_chunk((0,))[1]


@pytest.mark.parametrize("pipeline", ["shuffle", "shuffle+fletcher32", "fletcher32"])
def test_a_chunk_whose_size_preserving_filters_give_fewer_bytes_is_an_error(
        tmp_path: pathlib.Path, pipeline: str) -> None:
    """Shuffle keeps a chunk's size and Fletcher-32 adds 4 bytes: a chunk of such a pipeline
    stored with fewer bytes (here 600 of 800) comes out of HDF5's filters short, and HDF5
    left the rest of its chunk buffer as it was, so those rows read as whatever memory held
    (h5py too). Such a chunk is refused naming it; the other chunks still read."""
    a = np.random.default_rng(0).random((300, 4)).astype("f4")
    path = tmp_path / "d" / "shard_0000.h5"
    path.parent.mkdir()
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("data", shape=a.shape, dtype="f4", chunks=(50, 4),
                              shuffle="shuffle" in pipeline, fletcher32="fletcher" in pipeline)
        for c in range(6):
            raw = a[c * 50:(c + 1) * 50].tobytes()
            if c == 1:
                raw = raw[:600]
            ds.id.write_direct_chunk((c * 50, 0), _filtered(tmp_path, raw, "shuffle" in pipeline,
                                                            "fletcher" in pipeline), 0)
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["data"][:50], a[:50])  # the filters as HDF5 runs them
    layout = shardload.discover(path.parent, format="hdf5")
    np.testing.assert_array_equal(layout.read(0, 50), a[:50])
    np.testing.assert_array_equal(layout.read(100, 300), a[100:])
    extra = 4 if "fletcher" in pipeline else 0
    for lo, hi in [(0, 300), (95, 100)]:
        with pytest.raises(shardload.ShardReadError) as e:
            layout.read(lo, hi)
        assert (f"{path}: dataset '/data': its chunk at (50, 0) holds {600 + extra} bytes, but "
                f"its filters ({pipeline.replace('+', ', ')}) need {800 + extra}") in str(e.value), \
            str(e.value)


def _undefined_fill_value(dcpl) -> None:
    """H5Pset_fill_value(dcpl, type, NULL): the fill value undefined, which h5py offers no
    call for; made through h5py's own HDF5 library."""
    import ctypes
    import glob

    libs = [p for p in glob.glob(os.path.join(os.path.dirname(h5py.__file__), "..",
                                              "h5py.libs", "libhdf5-*")) if "_hl" not in p]
    try:
        lib = ctypes.CDLL(libs[0]) if libs else ctypes.CDLL(h5py.h5.__file__)
        setter = lib.H5Pset_fill_value
    except (OSError, AttributeError):
        pytest.skip("h5py's HDF5 library is not reachable to undefine a fill value")
    assert setter(ctypes.c_int64(dcpl.id), ctypes.c_int64(h5py.h5t.NATIVE_FLOAT.id), None) >= 0


def test_chunks_never_written_without_a_fill_value_are_refused(tmp_path: pathlib.Path) -> None:
    """A fill value left undefined: HDF5 fills nothing, so the rows of chunks never written read
    as whatever memory the load held (h5py's buffer happened to be zeros). Refused at discovery
    as the fill time 'never' is."""
    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((50, 4))
        _undefined_fill_value(dcpl)
        space = h5py.h5s.create_simple((300, 4))
        h5py.h5d.create(f.id, b"data", h5py.h5t.NATIVE_FLOAT, space, dcpl=dcpl)
        f["data"][0:60] = 1.0
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(tmp_path, format="hdf5")
    assert (f"{path}: dataset '/data': some of its chunks were never written and it has no "
            "fill value") in str(e.value), str(e.value)


# --- a third pass: links, virtual and compact datasets, filters on the HDF5 path -------------

@pytest.mark.parametrize("link", ["dataset", "group", "gzip"])
def test_a_dataset_in_another_file_through_an_external_link_is_refused(tmp_path: pathlib.Path,
                                                                       link: str) -> None:
    """h5py follows an external link into another file; the offsets and chunk addresses HDF5
    gives are then that file's, while the direct paths read them from the shard (before: the
    shard's own bytes at that offset, 42s where h5py reads 0..9). Refused naming both files."""
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        if link == "gzip":
            f.create_dataset("g/y", data=np.arange(1000.0), chunks=(100,), compression="gzip")
        else:
            f["g/y"] = np.arange(10.0)
    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w") as f:
        f["pad"] = np.full(50_000, 42.0)
        if link == "group":
            f["x"] = h5py.ExternalLink("other.h5", "/g")
        else:
            f["x/y"] = h5py.ExternalLink("other.h5", "/g/y")
    with h5py.File(path, "r") as f:
        assert f["x/y"][0] == 0.0  # h5py follows it
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(path, dataset="x/y")
    msg = str(e.value)
    assert (f"{path}: dataset '/x/y' is stored in another file ({other})" in msg
            and "external link" in msg), msg


@pytest.mark.parametrize("case", ["dataset", "group", "soft link", "virtual source", "cli",
                                  "http"])
def test_an_external_link_to_a_fifo_is_refused_not_waited_on(tmp_path, case):
    """An external link whose file is a FIFO (on the dataset, on a group above it, behind a
    soft link, or on a virtual dataset's source): HDF5 opens the link's file by name with a
    plain open, which waits for a writer forever, and discovery hung there (CLI inspect too).
    Refused before the open, as a dataset through an external link is, naming the link; an
    object served over http whose link names a local FIFO likewise."""
    os.mkfifo(tmp_path / "fifo.h5")
    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w") as f:
        f["pad"] = np.arange(4.0)
        if case == "http":
            f["x"] = h5py.ExternalLink(str(tmp_path / "fifo.h5"), "/y")
        elif case in ("dataset", "cli"):
            f["x"] = h5py.ExternalLink("fifo.h5", "/y")
        elif case == "group":
            f["x"] = h5py.ExternalLink("fifo.h5", "/g")
        elif case == "soft link":
            f["e"] = h5py.ExternalLink("fifo.h5", "/y")
            f["x"] = h5py.SoftLink("/e")
    if case == "virtual source":
        with h5py.File(tmp_path / "src.h5", "w") as f:
            f["y"] = h5py.ExternalLink("fifo.h5", "/y")
        with h5py.File(path, "a") as f:
            _virtual(f, "x", "src.h5", "y")
    name = "x/y" if case == "group" else "x"
    if case == "http":
        from test_http import serving

        with serving() as (store, base):
            store.put("/h/shard_0000.h5", path.read_bytes())
            url = f"{base}/h/shard_0000.h5"
            with pytest.raises(shardload.LayoutError) as e:
                shardload.discover(url, dataset="x")
        assert (f"{url}: dataset '/x' is stored in another file ({tmp_path}/fifo.h5) that an "
                "external link leads to") in str(e.value), str(e.value)
        return
    if case == "cli":
        cmd = [str(BUILD / "shardload"), "inspect", str(path), "--dataset", name]
    else:
        cmd = [sys.executable, "-c", textwrap.dedent(f"""
            import shardload
            try:
                shardload.discover({str(path)!r}, dataset={name!r}).read()
            except shardload.LayoutError as e:
                print(e)
        """)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    except subprocess.TimeoutExpired:
        pytest.fail("discovery waited on the FIFO an external link names")
    out = r.stdout + r.stderr
    assert r.returncode == (1 if case == "cli" else 0), (r.returncode, out[-2000:])
    if case == "virtual source":
        assert (f"{path}: dataset '/x' is a virtual dataset whose source {tmp_path}/src.h5:/y "
                "is reached through an external link to '/y' in fifo.h5") in out, out
    else:
        assert (f"{path}: dataset '/{name}' is stored in another file ({tmp_path}/fifo.h5) "
                "that an external link leads to") in out, out


def _compact(f: h5py.File, name: bytes, a: np.ndarray) -> None:
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    space = h5py.h5s.create_simple(a.shape)
    h5py.h5d.create(f.id, name, h5py.h5t.NATIVE_DOUBLE, space, dcpl=dcpl).write(
        h5py.h5s.ALL, h5py.h5s.ALL, a)


@pytest.mark.parametrize("case", ["vds", "vds source missing", "vds source short", "soft link",
                                  "dangling soft link", "compact", "scaleoffset int",
                                  "scaleoffset float", "scaleoffset+gzip", "nbit"])
def test_links_virtual_compact_and_hdf5_filters_read_as_h5py_does_or_are_refused(
        tmp_path: pathlib.Path, case: str) -> None:
    path = tmp_path / "shard_0000.h5"
    if case.startswith("vds"):
        for i in range(2):
            with h5py.File(tmp_path / f"src{i}.h5", "w") as f:
                f["x"] = np.arange(100.0) + 100 * i
        lay = h5py.VirtualLayout(shape=(200,), dtype="f8")
        for i in range(2):
            lay[i * 100:(i + 1) * 100] = h5py.VirtualSource(str(tmp_path / f"src{i}.h5"), "x",
                                                            shape=(100,))
        with h5py.File(path, "w") as f:
            f.create_virtual_dataset("x", lay, fillvalue=-1)
        if case != "vds":
            (tmp_path / "src1.h5").unlink()
        if case == "vds source short":
            with h5py.File(tmp_path / "src1.h5", "w") as f:
                f["x"] = np.arange(50.0)
    with h5py.File(path, "a") as f:
        if case == "soft link":
            f["y"] = np.arange(10.0)
            f["x"] = h5py.SoftLink("/y")
        elif case == "dangling soft link":
            f["x"] = h5py.SoftLink("/nowhere")
        elif case == "compact":
            _compact(f, b"x", np.arange(100.0))
        elif case == "scaleoffset int":
            f.create_dataset("x", data=np.arange(1000, dtype="i4"), chunks=(100,), scaleoffset=0)
        elif case == "scaleoffset float":
            f.create_dataset("x", data=np.arange(1000) * 0.001, chunks=(100,), scaleoffset=2)
        elif case == "scaleoffset+gzip":
            f.create_dataset("x", data=np.arange(1000, dtype="i4"), chunks=(100,), scaleoffset=0,
                             compression="gzip")
        elif case == "nbit":
            f.create_dataset("x", data=np.arange(1000, dtype="i4"), chunks=(100,),
                             compression=h5py.h5z.FILTER_NBIT)
    try:
        with h5py.File(path, "r") as f:
            want = f["x"][()]
    except (OSError, KeyError):
        want = None
    if want is None:
        with pytest.raises(shardload.Error, match=rf"{path}: .*'/x'"):
            shardload.discover(path, dataset="x").read()
        return
    np.testing.assert_array_equal(shardload.discover(path, dataset="x").read(), want)


def shrink_contiguous_record(path: pathlib.Path, claim: int) -> None:
    """Rewrites the storage size a contiguous layout message records (the 8 bytes after its
    data address) of the file's one contiguous dataset, h5py `libver="earliest"`; the bytes
    of every element stay in the file."""
    with h5py.File(path, "r") as f:
        d = f["x"]
        offset, nbytes = d.id.get_offset(), d.dtype.itemsize * d.size
    raw = bytearray(path.read_bytes())
    record = offset.to_bytes(8, "little") + nbytes.to_bytes(8, "little")
    assert raw.count(record) == 1
    at = raw.find(record) + 8
    raw[at:at + 8] = claim.to_bytes(8, "little")
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("shape, dtype, claim", [((6, 4), "<f4", 64), ((6, 4), "<f4", 95),
                                                 ((6, 4), "<f4", 8), ((1000,), "<i8", 4000)])
def test_a_contiguous_dataset_recording_less_storage_than_its_elements_is_refused(
        tmp_path: pathlib.Path, shape: tuple[int, ...], dtype: str, claim: int) -> None:
    """A contiguous layout message recording fewer bytes than the dataset's elements need:
    HDF5 1.10 bounded its read by the record and left the rest of the destination as it was
    (zeros, or rows of another tile: 24.0 read as 1.76e-38, 125 of 1000 values 0), no error.
    Refused at discovery, naming the file, the dataset and both sizes."""
    a = (np.arange(np.prod(shape)).reshape(shape) + 1).astype(dtype)
    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("x", data=a)
    shrink_contiguous_record(path, claim)
    with h5py.File(path, "r") as f:  # the oracle: h5py's HDF5 reads the extent's bytes
        np.testing.assert_array_equal(f["x"][...], a)
    msg = (f"{path}: dataset '/x': its contiguous storage holds {claim} bytes, where its "
           f"elements need {a.nbytes}: the file is damaged")
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(path, dataset="x")
    assert msg in str(e.value), str(e.value)


@pytest.mark.parametrize("claim", [0, 400, 808])
def test_a_compact_dataset_whose_stored_size_lies_is_refused(tmp_path: pathlib.Path,
                                                            claim: int) -> None:
    """A compact layout message whose size (its data's bytes) is not the dataset's 800: HDF5
    1.10 copied 800 bytes out of a buffer of that size, reading past it (rows of whatever
    memory followed where it said 400; a segmentation fault where it said 0). h5py's HDF5
    refuses the dataset; so does discovery, naming the file and both sizes (a size past the
    message's end, HDF5 1.10 refuses itself)."""
    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w") as f:
        _compact(f, b"x", np.arange(100.0))
    raw = bytearray(path.read_bytes())
    message = bytes([3, 0]) + (800).to_bytes(2, "little")  # layout v3, compact, 800 bytes
    assert raw.count(message) == 1
    at = raw.find(message)
    raw[at + 2:at + 4] = claim.to_bytes(2, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(path, dataset="x")
    msg = str(e.value)
    if claim > 800:  # the message then runs past its object header: HDF5 cannot open it
        assert f"{path}: '/x' is not a readable dataset" in msg, msg
        return
    assert (f"{path}: dataset '/x': its compact storage holds {claim} bytes, where its "
            "elements need 800" in msg), msg


def _lookup3(data: bytes) -> int:
    """Bob Jenkins' lookup3 (hashlittle, initial value 0): the checksum HDF5 keeps at the end
    of each version 2 metadata block, recomputed after a test edits one."""
    m = 0xFFFFFFFF

    def rot(x: int, k: int) -> int:
        return ((x << k) | (x >> (32 - k))) & m

    def word(at: int) -> int:
        return int.from_bytes(data[at:at + 4], "little")

    v = [(0xDEADBEEF + len(data)) & m] * 3  # a, b, c
    i = 0
    while len(data) - i > 12:
        v = [(v[k] + word(i + 4 * k)) & m for k in range(3)]
        for x, y, z, r in ((0, 2, 1, 4), (1, 0, 2, 6), (2, 1, 0, 8), (0, 2, 1, 16), (1, 0, 2, 19),
                           (2, 1, 0, 4)):  # mix()
            v[x] = ((v[x] - v[y]) & m) ^ rot(v[y], r)
            v[y] = (v[y] + v[z]) & m
        i += 12
    if i == len(data):
        return v[2]
    data = data[i:] + bytes(12 - (len(data) - i))
    v = [(v[k] + word(4 * k)) & m for k in range(3)]
    for x, y, r in ((2, 1, 14), (0, 2, 11), (1, 0, 25), (2, 1, 16), (0, 2, 4), (1, 0, 14),
                    (2, 1, 24)):  # final()
        v[x] = ((v[x] ^ v[y]) - rot(v[y], r)) & m
    return v[2]


def lie_about_chunk_element_size(path: pathlib.Path, claim: int) -> None:
    """Writes `claim` as the element size that the chunk layout message of the file's one
    dataset (float64 in chunks of 100 rows) records beside the chunk's dimensions (8),
    whichever layout version holds it, and keeps a version 2 header's checksum valid."""
    raw = bytearray(path.read_bytes())
    v3 = raw.find(bytes([3, 2, 2]))  # version 3, chunked, rank 1 + the element size
    v4 = raw.find(bytes([4, 2, 0, 2, 1, 100, 8]))  # version 4: 2 dimensions of 1 byte each
    if v4 >= 0:
        raw[v4 + 6] = claim
        header = raw.rfind(b"OHDR", 0, v4)
        flags = raw[header + 5]
        at = header + 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 3)
        end = at + width + int.from_bytes(raw[at:at + width], "little")
        assert end > v4
        raw[end:end + 4] = _lookup3(bytes(raw[header:end])).to_bytes(4, "little")
    else:
        assert v3 > 0 and raw[v3 + 15:v3 + 19] == (8).to_bytes(4, "little")
        raw[v3 + 15:v3 + 19] = claim.to_bytes(4, "little")
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("userblock", [0, 512])
@pytest.mark.parametrize("claim", [16, 4])
@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_a_chunk_layout_whose_element_size_lies_is_refused(tmp_path: pathlib.Path, libver: str,
                                                           claim: int, userblock: int) -> None:
    """The chunk layout message stores the element size beside the chunk's dimensions (8 for
    float64); written as 16, HDF5 1.10 read each unfiltered chunk as 1600 bytes: the chunk
    next to the end of the file read past it, as zeros (rows 900-999 of 1000), while h5py's
    HDF5 refuses the dataset. Discovery reads the layout message from the object header
    itself (version 1 headers with layout version 3, version 2 headers with version 4, after
    a user block) and refuses the dataset, naming the file and both sizes."""
    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w", libver=libver, userblock_size=userblock) as f:
        f.create_dataset("x", data=np.arange(1000.0), chunks=(100,))
    lie_about_chunk_element_size(path, claim)
    with pytest.raises(KeyError, match="stored datatype size in chunk layout does not match"):
        with h5py.File(path, "r") as f:  # the oracle: h5py's HDF5 will not open it
            f["x"][()]
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(path)
    assert (f"{path}: dataset '/x': its chunk layout records elements of {claim} bytes, where "
            "its type's are 8" in str(e.value)), str(e.value)


@pytest.mark.parametrize("libver", ["earliest", "v110", "latest"])
def test_chunk_layouts_of_many_shapes_are_not_refused(tmp_path: pathlib.Path,
                                                      libver: str) -> None:
    """The layout check parses object headers itself: headers with many attributes (moved to
    continuation blocks), attribute creation order tracked (a longer message header in version
    2), 3-d chunks, filters and a user block all read as h5py reads them. A file whose objects
    this build's HDF5 cannot open (h5py's libver="latest" is a newer format than HDF5 1.10's)
    is refused naming the object and HDF5's reason, not said to hold no dataset."""
    path = tmp_path / "shard_0000.h5"
    want = np.arange(2 * 300 * 5, dtype="<i2").reshape(300, 2, 5)
    with h5py.File(path, "w", libver=libver, userblock_size=1024, track_order=True) as f:
        d = f.create_dataset("x", data=want, chunks=(7, 1, 3), compression="gzip",
                             shuffle=True, track_order=True)
        for i in range(60):
            d.attrs[f"attribute_{i}"] = np.arange(i + 1)
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["x"][()], want)
    try:
        layout = shardload.discover(path)
    except shardload.LayoutError as e:
        assert libver == "latest", str(e)  # 1.10's own format and older always open
        assert "found 0 (none)" in str(e) and "cannot open" in str(e), str(e)
        assert "'/x' (HDF5: " in str(e), str(e)
        with pytest.raises(shardload.LayoutError, match=r"not a readable dataset: HDF5: "):
            shardload.discover(path, dataset="x")
        return
    np.testing.assert_array_equal(layout.read(), want)



def hide_the_layout_message(path: pathlib.Path, how: str) -> None:
    """Moves the layout message of the file's one dataset (a version 1 object header, as
    h5py's libver="earliest" writes it) out of the header's first block, in ways HDF5 1.10
    still reads: "count" writes 1 as the prefix's message count (1.10 reads every block to
    its end, the count unenforced); "blocks" leaves a continuation in its place that leads
    through 70 blocks of one continuation each to the message ("many": 1100); "big" puts it
    at the start of one block of 1.1 MiB filled with null messages. The blocks go at the end
    of the file, whose end address in the superblock (version 0) follows."""
    import struct

    raw = bytearray(path.read_bytes())
    data = raw.find(bytes([3, 2, 2]))  # layout version 3, chunked, rank 1 + the element size
    message = data - 8
    assert struct.unpack_from("<HH", raw, message) == (8, 24)
    # The header: its version 1 prefix, whose first block holds the message.
    header = next(s for s in range(message - 16, 0, -8)
                  if raw[s:s + 2] == b"\x01\x00" and raw[s + 12:s + 16] == bytes(4)
                  and s + 16 <= message < s + 16 + struct.unpack_from("<I", raw, s + 8)[0]
                  < s + 16 + 65536)
    count = struct.unpack_from("<H", raw, header + 2)[0]
    if how == "count":
        struct.pack_into("<H", raw, header + 2, 1)
        path.write_bytes(bytes(raw))
        return
    layout = bytes(raw[message:message + 32])
    end = len(raw)
    chain = bytearray()
    if how in ("blocks", "many"):
        n = 70 if how == "blocks" else 1100
        for i in range(n):
            chain += struct.pack("<HHB3xQQ", 0x10, 16, 0, end + 24 * (i + 1),
                                 32 if i == n - 1 else 24)
        chain += layout
        added = n + 1
        first = (end, 24)
    else:
        chain += layout
        added = 1
        while len(chain) < (1 << 20) + (1 << 16):
            chain += struct.pack("<HHB3x", 0, 65528, 0) + bytes(65528)
            added += 1
        first = (end, len(chain))
    struct.pack_into("<HHB3xQQQ", raw, message, 0x10, 24, 0, *first, 0)
    struct.pack_into("<H", raw, header + 2, count + added)
    raw += chain
    struct.pack_into("<Q", raw, 40, len(raw))
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("claim", [16, 8])
@pytest.mark.parametrize("how", ["count", "blocks", "big", "many"])
def test_a_layout_message_hidden_past_the_parsers_bounds_is_still_checked(
        tmp_path: pathlib.Path, how: str, claim: int) -> None:
    """The element size check parses the object header itself, within bounds against crafted
    loops. A lying layout message (16 where float64 needs 8) hidden where the parser stopped
    looking (past a message count of 1, which HDF5 1.10 does not enforce; 70 continuation
    blocks on; in a block of more than 1 MiB) left the check out, and HDF5 1.10 read rows
    900-999 as zeros. Now the count is not trusted, the bounds are 1024 blocks and 64 MiB, and
    a header past them is refused rather than left unchecked; the same files with the true
    size (8) read as h5py reads them."""
    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("x", data=np.arange(1000.0), chunks=(100,))
    if claim != 8:
        lie_about_chunk_element_size(path, claim)
    hide_the_layout_message(path, how)
    if claim != 8 or how == "count":
        # h5py's HDF5 refuses the lie, and a message count that is not the header's.
        with pytest.raises(KeyError, match="stored datatype size|bad object header message"):
            with h5py.File(path, "r") as f:
                f["x"][()]
    else:
        with h5py.File(path, "r") as f:
            np.testing.assert_array_equal(f["x"][()], np.arange(1000.0))
    if how == "many":
        with pytest.raises(shardload.LayoutError) as e:
            shardload.discover(path)
        assert (f"{path}: dataset '/x': its object header continues in more than 1024 blocks: "
                "its chunk layout cannot be checked" in str(e.value)), str(e.value)
    elif claim == 8:
        np.testing.assert_array_equal(shardload.discover(path).read(), np.arange(1000.0))
    else:
        with pytest.raises(shardload.LayoutError) as e:
            shardload.discover(path)
        assert (f"{path}: dataset '/x': its chunk layout records elements of {claim} bytes, "
                "where its type's are 8" in str(e.value)), str(e.value)

# ---- a fourth hostile pass: filter masks, filter orders, integer and float layouts -------------

def _h5_with(path, tid, arr, filters=(), chunks=None):
    from h5py import h5d, h5p, h5s

    with h5py.File(path, "w") as f:
        dcpl = h5p.create(h5p.DATASET_CREATE)
        if chunks is not None:
            dcpl.set_chunk(chunks)
        for name in filters:
            {"shuffle": dcpl.set_shuffle, "deflate": lambda: dcpl.set_deflate(4),
             "fletcher32": dcpl.set_fletcher32}[name]()
        h5py.Dataset(h5d.create(f.id, b"x", tid, h5s.create_simple(arr.shape), dcpl=dcpl))[...] = arr


def _int16_with(precision, offset, sign=None):
    from h5py import h5t

    t = h5t.STD_I16LE.copy()
    if sign is not None:
        t.set_sign(sign)
    t.set_precision(precision)
    t.set_offset(offset)
    return t


@pytest.mark.parametrize("case", ["mask skips shuffle", "mask skips both", "mask skips deflate",
                                  "deflate then shuffle", "shuffle twice", "deflate twice",
                                  "shuffle deflate shuffle", "fletcher32 first",
                                  "12-bit int16 at bit 2", "int16 without its sign flag",
                                  "float64 padded with ones", "float32 inner padding of ones"])
@pytest.mark.parametrize("where", ["local", "s3"])
def test_filter_masks_orders_and_type_layouts_read_as_h5py_does_or_are_refused(
        tmp_path, server, case, where):
    """h5py as the oracle, locally and from s3:// (where shardload fetches gzip chunks
    itself): chunks whose filter mask skips shuffle, deflate or both (written with
    write_direct_chunk), pipelines in other orders or with a filter twice, and integer and
    float types whose precision, offset, sign or padding differ from the native ones read
    as h5py reads them, or are refused at discovery naming the type."""
    import zlib

    from h5py import h5t

    path = tmp_path / "shard_0000.h5"
    data = np.arange(4000, dtype="<f8").reshape(1000, 4) * 1.5
    masks = {"mask skips shuffle": 1, "mask skips both": 3, "mask skips deflate": 2}
    orders = {"deflate then shuffle": ["deflate", "shuffle"],
              "shuffle twice": ["shuffle", "shuffle", "deflate"],
              "deflate twice": ["shuffle", "deflate", "deflate"],
              "shuffle deflate shuffle": ["shuffle", "deflate", "shuffle"],
              "fletcher32 first": ["fletcher32", "shuffle", "deflate"]}
    if case in masks:
        with h5py.File(path, "w") as f:
            ds = f.create_dataset("x", data=data, chunks=(100, 4), shuffle=True,
                                  compression="gzip")
            raw = data[300:400].tobytes()
            if masks[case] == 1:
                stored = zlib.compress(raw)
            elif masks[case] == 3:
                stored = raw
            else:
                stored = np.frombuffer(raw, np.uint8).reshape(-1, 8).T.copy().tobytes()
            ds.id.write_direct_chunk((300, 0), stored, filter_mask=masks[case])
    elif case in orders:
        _h5_with(path, h5t.IEEE_F64LE, data, orders[case], chunks=(100, 4))
    else:
        values = np.array([0, 1, 100, 2047, -5, 7, -300, 9], dtype="<i2")
        t, arr = {
            "12-bit int16 at bit 2": (_int16_with(12, 2), values),
            "int16 without its sign flag": (_int16_with(16, 0, h5t.SGN_NONE),
                                            values.astype("<u2")),
            "float64 padded with ones": (h5t.IEEE_F64LE.copy(), values.astype("<f8")),
            "float32 inner padding of ones": (h5t.IEEE_F32LE.copy(), values.astype("<f4")),
        }[case]
        if case == "float64 padded with ones":
            t.set_pad(h5t.PAD_ONE, h5t.PAD_ONE)
        if case == "float32 inner padding of ones":
            t.set_inpad(h5t.PAD_ONE)
        _h5_with(path, t, arr, ["shuffle", "deflate"], chunks=(4,))
    with h5py.File(path, "r") as f:
        ref = f["x"][...]
    source, options = path, {}
    if where == "s3":
        import s3_server

        bucket = s3_server.Bucket(server)
        bucket.upload("h/shard_0000.h5", path)
        source, options = bucket.url("h/shard_0000.h5"), {"storage_options": bucket.options}
    try:
        layout = shardload.discover(source, format="hdf5", **options)
    except shardload.LayoutError as e:
        assert str(source) in str(e) and "type" in str(e), str(e)
        return
    got = layout.read()
    assert got.dtype == ref.dtype.newbyteorder("=")
    np.testing.assert_array_equal(got, ref)


# ---- an eighth pass: more file types and fill values, each read as h5py reads it or refused ----


def _fields(base, spos: int, epos: int, esize: int, mpos: int, msize: int, bias: int):
    t = base.copy()
    t.set_fields(spos, epos, esize, mpos, msize)
    t.set_ebias(bias)
    return t


def _vax_float():
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_order(h5py.h5t.ORDER_VAX)
    return t


def _enum_over_int16():
    t = h5py.h5t.enum_create(h5py.h5t.STD_I16LE)
    for i in range(100):
        t.enum_insert(b"v%d" % i, i)
    return t


def _with_sign(base, sign):
    t = base.copy()
    t.set_sign(sign)
    return t


# name -> (file type, the data's dtype, None where it reads as h5py reads it, else the start
# of what the type is said to be in the refusal)
MORE_TYPES = {
    "VAX-ordered float": (_vax_float, "<f4", None),
    "float32 with an 11-bit exponent and a 20-bit mantissa": (
        lambda: _fields(h5py.h5t.IEEE_F32LE, 31, 20, 11, 0, 20, 1023), "<f4", "is not supported"),
    "enum of 100 members over int16": (_enum_over_int16, "<i2", "is not supported"),
    "16-bit bitfield": (lambda: h5py.h5t.STD_B16LE.copy(), "<u2", "is not supported"),
    "int16 stored unsigned": (lambda: _with_sign(h5py.h5t.STD_I16LE, h5py.h5t.SGN_NONE), "<i2",
                              None),
    "uint16 stored signed": (lambda: _with_sign(h5py.h5t.STD_U16LE, h5py.h5t.SGN_2), "<u2",
                             None),
}


@pytest.mark.parametrize("storage", ["contiguous", "chunked", "gzip"])
@pytest.mark.parametrize("name", sorted(MORE_TYPES))
def test_more_file_types_read_as_h5py_does_or_are_refused(tmp_path, name, storage):
    make, dtype, refusal = MORE_TYPES[name]
    rng = np.random.default_rng(8)
    if np.dtype(dtype).kind == "f":
        a = (rng.integers(-50, 50, (8, 2)) / 4).astype(dtype)
    else:
        a = rng.integers(0, 100, (8, 2)).astype(dtype)
    path = tmp_path / "shard_0000.h5"
    write_typed(path, make(), a, storage)
    if refusal is not None:
        with pytest.raises(shardload.LayoutError) as e:
            shardload.discover(tmp_path, format="hdf5")
        assert f"{path}: dataset '/data': type: " in str(e.value), str(e.value)
        assert refusal in str(e.value), str(e.value)
        return
    with h5py.File(path, "r") as f:
        want = f["data"][...]
    layout = shardload.discover(tmp_path, format="hdf5")
    assert layout.dtype == want.dtype.newbyteorder("=")
    np.testing.assert_array_equal(layout.read(), want)
    np.testing.assert_array_equal(layout.read(3, 7), want[3:7])


@pytest.mark.parametrize("storage", ["contiguous", "chunked", "gzip+shuffle", "compact"])
@pytest.mark.parametrize("dtype", ["<f4", ">f4", ">i2", "<u8", ">f8", "<f2", ">c8"])
def test_fill_values_of_unwritten_storage_read_as_h5py_reads_them(tmp_path, dtype, storage):
    """A dataset of either byte order with a fill value and only rows 10-29 written (compact:
    none written): the other rows read as the fill value, as h5py reads them."""
    kw: dict = {"fillvalue": np.array(5, dtype=dtype)[()]}
    rows = 100 if storage != "compact" else 20
    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w") as f:
        if storage == "compact":
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.COMPACT)
            dcpl.set_fill_value(np.array(5, dtype=dtype))
            ftype = h5py.h5t.py_create(np.dtype(dtype))
            h5py.h5d.create(f.id, b"x", ftype, h5py.h5s.create_simple((rows, 3)), dcpl)
        else:
            if storage != "contiguous":
                kw["chunks"] = (7, 3)
            if storage == "gzip+shuffle":
                kw |= {"compression": "gzip", "shuffle": True}
            ds = f.create_dataset("x", shape=(rows, 3), dtype=dtype, **kw)
            ds[10:30] = np.arange(60).reshape(20, 3).astype(dtype)
    with h5py.File(path, "r") as f:
        want = f["x"][...]
    got = shardload.discover(tmp_path, format="hdf5").read()
    assert got.dtype == want.dtype.newbyteorder("=")
    np.testing.assert_array_equal(got, want)


def _virtual(f, name: str, source_file: str, source: str, shape=(10, 4)) -> None:
    layout = h5py.VirtualLayout(shape=shape, dtype="f8")
    layout[:] = h5py.VirtualSource(source_file, source, shape=shape)
    f.create_virtual_dataset(name, layout, fillvalue=-1)


@pytest.mark.parametrize("case", ["itself", "through another dataset", "by the file's name"])
def test_a_virtual_dataset_that_reads_itself_is_refused(tmp_path, case):
    """A virtual dataset whose mapping names itself (source file ".", or the file's own name)
    or leads back through another dataset of its file: HDF5 reads a source by reading the
    dataset again, without end, and the process died of SIGSEGV at the first read (h5py's
    too). Refused at discovery naming the file and the route."""
    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w") as f:
        if case == "itself":
            _virtual(f, "v", ".", "v")
        elif case == "through another dataset":
            _virtual(f, "v", ".", "w")
            _virtual(f, "w", ".", "v")
        else:
            _virtual(f, "v", "shard_0000.h5", "v")
    script = textwrap.dedent(f"""
        import shardload
        try:
            shardload.discover({str(tmp_path)!r}, dataset="v").read()
        except shardload.LayoutError as e:
            print(e)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, cwd=str(tmp_path))
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert f"{path}: dataset '/v' is a virtual dataset whose mappings lead back to itself (" \
        in r.stdout, r.stdout
    route = "/v -> /w -> /v" if case == "through another dataset" else "/v -> /v"
    assert route in r.stdout, r.stdout


@pytest.mark.parametrize("case", ["two files", "three files"])
def test_a_virtual_dataset_that_reads_itself_through_other_files_is_refused(tmp_path, case):
    """The same loop through other files: the shard's /v maps b/other.h5's /w, which maps /v
    back (or through a third file). HDF5 1.10 notices the loop there and gives the fill value
    for every row: the load returned -1 everywhere, silently (h5py with HDF5 2.0 dies of
    SIGSEGV). Refused at discovery naming the shard and the route through the files."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    shard = tmp_path / "a" / "shard_0000.h5"
    with h5py.File(shard, "w") as f:
        _virtual(f, "v", "../b/other.h5", "w")
    with h5py.File(tmp_path / "b" / "other.h5", "w") as f:
        if case == "two files":
            _virtual(f, "w", "../a/shard_0000.h5", "v")
        else:
            _virtual(f, "w", "third.h5", "u")
    if case == "three files":
        with h5py.File(tmp_path / "b" / "third.h5", "w") as f:
            _virtual(f, "u", "../a/shard_0000.h5", "v")
    script = textwrap.dedent(f"""
        import shardload
        try:
            print(shardload.discover({str(tmp_path / "a")!r}, dataset="v").read()[:1])
        except shardload.LayoutError as e:
            print(e)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, cwd=str(tmp_path))
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert f"{shard}: dataset '/v' is a virtual dataset whose mappings lead back to itself (" \
        in r.stdout, r.stdout
    assert "other.h5:/w -> " in r.stdout and r.stdout.rstrip().endswith(
        "-> /v): HDF5 would read it without end; the file is damaged"), r.stdout
    if case == "three files":
        assert "third.h5:/u -> /v" in r.stdout, r.stdout


def test_virtual_datasets_of_other_files_read_as_h5py_does(tmp_path):
    """A virtual dataset whose source is a virtual dataset of another file, whose source is a
    plain dataset there: followed without a false alarm, and read as h5py reads it."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    shard = tmp_path / "a" / "shard_0000.h5"
    with h5py.File(tmp_path / "b" / "other.h5", "w") as f:
        f.create_dataset("x", data=np.arange(40, dtype="f8").reshape(10, 4))
        _virtual(f, "w", "other.h5", "x")
    with h5py.File(shard, "w") as f:
        _virtual(f, "v", "../b/other.h5", "w")
    with h5py.File(shard, "r") as f:
        want = f["v"][...]
    assert want[3, 1] == 13  # the rows themselves, not the fill value
    np.testing.assert_array_equal(shardload.discover(tmp_path / "a", dataset="v").read(), want)


def _printf_virtual(path, pattern: str = "src_%b.h5") -> None:
    """/v: blocks of 5 rows, block b from /y of the file `pattern` names with b for "%b"."""
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        vspace = h5py.h5s.create_simple((10, 4), (h5py.h5s.UNLIMITED, 4))
        vspace.select_hyperslab((0, 0), (h5py.h5s.UNLIMITED, 1), (5, 4), (5, 4))
        dcpl.set_virtual(vspace, pattern.encode(), b"/y", h5py.h5s.create_simple((5, 4)))
        dcpl.set_fill_value(np.array(-1.0))
        h5py.h5d.create(f.id, b"v", h5py.h5t.IEEE_F64LE, vspace, dcpl=dcpl)


@pytest.mark.parametrize("where", ["beside the shard", "under HDF5_VDS_PREFIX",
                                   "a printf-style name's second file"])
def test_a_virtual_datasets_source_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path, where):
    """A virtual dataset whose source file is a FIFO where HDF5 looks for it: discovery took
    it for a missing source (the fill value) and the read then waited forever in HDF5's plain
    open of it; behind a printf-style name ("src_%b.h5", an unlimited mapping) discovery
    itself waited, as HDF5 opens those files to know the extent. Refused at discovery,
    naming the FIFO."""
    (tmp_path / "d").mkdir()
    (tmp_path / "p").mkdir()
    fifo = tmp_path / ("p" if where == "under HDF5_VDS_PREFIX" else "d") / "src.h5"
    if where == "under HDF5_VDS_PREFIX":
        # HDF5 looks under the prefix first: the regular file beside the shard is not read.
        with h5py.File(tmp_path / "d" / "src.h5", "w") as f:
            f["y"] = np.ones((10, 4))
    if where.startswith("a printf"):
        fifo = tmp_path / "d" / "src_1.h5"
        with h5py.File(tmp_path / "d" / "src_0.h5", "w") as f:
            f["y"] = np.ones((5, 4))
        _printf_virtual(tmp_path / "d" / "shard_0000.h5")
    else:
        with h5py.File(tmp_path / "d" / "shard_0000.h5", "w") as f:
            _virtual(f, "v", "src.h5", "y")
    os.mkfifo(fifo)
    script = textwrap.dedent(f"""
        import shardload
        try:
            print(shardload.discover({str(tmp_path / "d")!r}, dataset="v").read())
        except shardload.LayoutError as e:
            print(e)
    """)
    env = dict(os.environ)
    if where == "under HDF5_VDS_PREFIX":
        env["HDF5_VDS_PREFIX"] = str(tmp_path / "p")
    try:
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=60, cwd=str(tmp_path), env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("the read waited on the FIFO a virtual dataset's mapping names")
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert (f"dataset '/v' is a virtual dataset whose source file {fifo} is not a regular "
            "file") in r.stdout, r.stdout


def test_a_printf_style_virtual_dataset_reads_as_h5py_does_and_snapshots_its_files(tmp_path):
    """A virtual dataset whose source file name is printf-style ("src_%b.h5"): its files are
    found as HDF5 finds them (blocks 0, 1, ... up to the first missing), read as h5py reads
    them, and snapshotted with the shard."""
    for b in range(2):
        with h5py.File(tmp_path / f"src_{b}.h5", "w") as f:
            f["y"] = np.full((5, 4), b + 1.0)
    _printf_virtual(tmp_path / "shard_0000.h5")
    with h5py.File(tmp_path / "shard_0000.h5", "r") as f:
        want = f["v"][...]
    layout = shardload.discover(tmp_path / "shard_0000.h5", dataset="v")
    np.testing.assert_array_equal(layout.read(), want)
    assert layout._linked_paths == [str(tmp_path / f"src_{b}.h5") for b in range(2)]


@pytest.mark.parametrize("prefix", ["p", "${ORIGIN}/../p", "nowhere:p"])
def test_the_source_file_under_hdf5_vds_prefix_is_the_one_checked_and_snapshotted(tmp_path,
                                                                                   prefix):
    """HDF5 looks for a virtual dataset's relative source file under HDF5_VDS_PREFIX (a list
    split at ':', "${ORIGIN}" the file's directory) before the file's own directory. The file
    snapshotted (and compared with out=, followed for cycles) was found under H5_VDS_PREFIX,
    a name HDF5 does not read: here the one beside the shard, while HDF5 read the prefix's."""
    (tmp_path / "d").mkdir()
    (tmp_path / "p").mkdir()
    for where, value in (("d", 1.0), ("p", 2.0)):
        with h5py.File(tmp_path / where / "src.h5", "w") as f:
            f["y"] = np.full((10, 4), value)
    with h5py.File(tmp_path / "d" / "shard_0000.h5", "w") as f:
        _virtual(f, "v", "src.h5", "y")
    value = prefix.replace("p", str(tmp_path / "p")) if prefix != "${ORIGIN}/../p" else prefix
    script = textwrap.dedent(f"""
        import shardload
        layout = shardload.discover({str(tmp_path / "d")!r}, dataset="v")
        print(layout.read()[0, 0], layout._linked_paths)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "HDF5_VDS_PREFIX": value})
    assert r.returncode == 0, r.stderr[-2000:]
    read, linked = r.stdout.split(" ", 1)
    assert float(read) == 2.0  # HDF5's choice, as h5py makes it
    snapshotted = os.path.realpath(ast.literal_eval(linked)[0])
    assert snapshotted == str(tmp_path / "p" / "src.h5"), linked


@pytest.mark.parametrize("change", ["rewritten in place", "replaced", "rewritten, times kept"])
def test_a_virtual_datasets_source_file_changed_during_a_load_is_a_read_error(tmp_path, change):
    """The source file of a virtual dataset is a file the rows come from, as an external
    storage file is: rewritten after discovery (here after the load's first tile, from its
    progress callback), the load gave 12,500 rows of the old data and 87,500 of the new, with
    no error. Its snapshot is now the shard's too: a ShardReadError naming it."""
    n = 100_000
    old = np.arange(n * 4, dtype="f8").reshape(n, 4)
    source = tmp_path / "source.h5"
    with h5py.File(source, "w") as f:
        offset = f.create_dataset("y", data=old).id.get_offset()
    (tmp_path / "d").mkdir()
    with h5py.File(tmp_path / "d" / "shard_0000.h5", "w") as f:
        _virtual(f, "v", "../source.h5", "y", shape=(n, 4))
    layout = shardload.discover(tmp_path / "d", dataset="v")
    assert layout._linked_paths == [str(tmp_path / "d" / ".." / "source.h5")]

    def rewrite(p):
        if p.stage != "filling" or p.tiles_done != 1:
            return
        if change == "replaced":
            with h5py.File(tmp_path / "new.h5", "w") as f:
                f.create_dataset("y", data=-old)
            os.replace(tmp_path / "new.h5", source)
            return
        st = os.stat(source)
        with open(source, "r+b") as f:
            f.seek(offset)
            f.write((-old).tobytes())
        if change == "rewritten, times kept":
            os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))

    with pytest.raises(shardload.ShardReadError, match=r"source\.h5: changed since discovery"):
        shardload.numpy.load(layout, progress=rewrite, threads=1, overdecompose=8)


@pytest.mark.parametrize("case", ["a plain dataset", "a virtual one of a plain one",
                                  "one plain dataset twice"])
def test_virtual_datasets_of_their_own_files_datasets_read_as_h5py_does(tmp_path, case):
    """Virtual datasets whose sources are datasets of their own file, a plain one, one more
    virtual level, or the same one through two mappings: read as h5py reads them."""
    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(40, dtype="f8").reshape(10, 4))
        if case == "a plain dataset":
            _virtual(f, "v", ".", "x")
        elif case == "a virtual one of a plain one":
            _virtual(f, "w", ".", "x")
            _virtual(f, "v", ".", "w")
        else:
            layout = h5py.VirtualLayout(shape=(20, 4), dtype="f8")
            layout[:10] = h5py.VirtualSource(".", "x", shape=(10, 4))
            layout[10:] = h5py.VirtualSource(".", "x", shape=(10, 4))
            f.create_virtual_dataset("v", layout, fillvalue=-1)
    with h5py.File(path, "r") as f:
        want = f["v"][...]
    np.testing.assert_array_equal(shardload.discover(tmp_path, dataset="v").read(), want)


def test_a_filter_the_hdf5_library_lacks_is_one_error_naming_it(tmp_path: pathlib.Path,
                                                               cli) -> None:
    """h5py's compression="lzf" is a filter compiled into h5py, which the HDF5 library shardload
    loads lacks: discovery took the file, and each tile's read then failed in HDF5's own
    words ("can't read data: can't open directory: <its plugin directory>"). Discovery now
    refuses it, naming the file, the dataset, the filter and what provides it."""
    want = np.arange(600, dtype="f4").reshape(60, 10)
    for i in range(2):
        with h5py.File(tmp_path / f"shard_{i:04d}.h5", "w") as f:
            f.create_dataset("x", data=want[i * 30:(i + 1) * 30], chunks=(7, 10),
                             compression="lzf")
    with h5py.File(tmp_path / "shard_0001.h5", "r") as f:  # the oracle reads it
        np.testing.assert_array_equal(f["x"][()], want[30:])
    first = tmp_path / "shard_0000.h5"
    expected = (f"{first}: dataset '/x': compressed with the filter 'lzf' (id 32000), which the "
                "HDF5 library shardload loads does not have; h5py reads it with the LZF filter "
                "built into h5py itself")
    for call in (lambda: shardload.discover(tmp_path), lambda: shardload.load(tmp_path),
                 lambda: shardload.numpy.load([str(first)])):
        with pytest.raises(shardload.LayoutError) as e:
            call()
        assert expected in str(e.value), e.value
        assert "can't" not in str(e.value) and "plugins" not in str(e.value), e.value
    r = subprocess.run([str(cli), "inspect", str(tmp_path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and expected in r.stderr, r.stderr


@pytest.mark.parametrize("kind", ["contiguous", "chunked-gzip", "chunked", "maxshape8"])
@pytest.mark.parametrize("dims", [(7, 4), (1000, 4), (6, 5), (0, 4), (5, 4)])
def test_a_dataspace_beyond_its_maximum_or_storage_is_refused_as_h5py_does(
        tmp_path: pathlib.Path, kind: str, dims: tuple[int, int]) -> None:
    """A dataspace message whose dims were patched past its maxdims (6 x 4 -> 7 x 4, 1000 x 4,
    6 x 5): HDF5 1.10 does not hold dims to maxdims, and the rows (columns) past the stored
    ones loaded as the fill value, silently; a contiguous dataset cut to 0 rows, whose 96
    bytes of storage then hold no element, loaded as (0, 4). h5py (a newer HDF5) refuses each;
    so does discovery, naming the file and the dataset. What h5py reads (fewer rows; 7 rows of
    a dataset whose maximum is 8) reads the same."""
    import struct

    a = np.arange(24, dtype="<f4").reshape(6, 4) + 1
    options = {"contiguous": {}, "chunked-gzip": {"chunks": (2, 4), "compression": "gzip"},
               "chunked": {"chunks": (4, 2)},
               "maxshape8": {"chunks": (2, 4), "maxshape": (8, 4)}}[kind]
    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("x", data=a, **options)
    data = bytearray(path.read_bytes())
    most = 8 if kind == "maxshape8" else 6
    at = data.find(struct.pack("<4Q", 6, 4, most, 4))
    assert at > 0
    data[at:at + 16] = struct.pack("<2Q", *dims)
    path.write_bytes(bytes(data))
    try:
        with h5py.File(path, "r") as f:
            want = f["x"][()]
    except (OSError, KeyError):  # h5py's refusal: the open fails
        want = None
    if want is None:
        with pytest.raises(shardload.LayoutError, match=rf"{path}: dataset '/x': "):
            shardload.numpy.load([str(path)], format="hdf5", dataset="x")
        return
    got = shardload.numpy.load([str(path)], format="hdf5", dataset="x")
    np.testing.assert_array_equal(got, want)


# ---- what the file holds, as an error lists it ----------------------------------------------


def test_the_datasets_an_error_lists_are_ten_in_natural_order_and_a_count(
        tmp_path: pathlib.Path) -> None:
    """2,000 datasets made a message of 15,000 characters; the list is the first ten in natural
    order (h5py's is by name: d0, d1, d10, d100, ...) and how many more."""
    with h5py.File(tmp_path / "shard_0000.h5", "w") as f:
        for i in range(2000):
            f.create_dataset(f"d{i}", data=np.arange(2))
        names = sorted(f.keys(), key=lambda n: int(n[1:]))
    assert names[:3] == ["d0", "d1", "d2"]
    shown = ", ".join(f"/{n}" for n in names[:10]) + ", ... and 1990 more"
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(tmp_path, format="hdf5")
    assert f"found 2000 ({shown}); name one with dataset=" in str(e.value), str(e.value)
    assert len(str(e.value)) < 500
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(tmp_path, format="hdf5", dataset="nope")
    assert f"dataset '/nope' not found (datasets in the file: {shown})" in str(e.value)
    assert len(str(e.value)) < 500


# ---- edge chunks stored unfiltered (H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS) -------------------


def _h5_library():
    """h5py's own HDF5 library, for a property h5py offers no call for."""
    import ctypes
    import glob

    libs = [p for p in glob.glob(os.path.join(os.path.dirname(h5py.__file__), "..",
                                              "h5py.libs", "libhdf5-*")) if "_hl" not in p]
    try:
        lib = ctypes.CDLL(libs[0]) if libs else ctypes.CDLL(h5py.h5.__file__)
        lib.H5Pset_chunk_opts.argtypes = [ctypes.c_int64, ctypes.c_uint]
        lib.H5Pget_chunk_opts.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_uint)]
    except (OSError, AttributeError):
        pytest.skip("h5py's HDF5 library is not reachable to set H5Pset_chunk_opts")
    return lib



def _discover_at(path: pathlib.Path, where: str, server: str):
    """The HDF5 file discovered where it is ("local"), or uploaded to a bucket of the s3 server
    and discovered there ("s3")."""
    if where == "local":
        return shardload.discover(path, format="hdf5")
    import s3_server

    bucket = s3_server.Bucket(server)
    bucket.upload("h/shard_0000.h5", path)
    return shardload.discover(bucket.url("h/shard_0000.h5"), format="hdf5",
                              storage_options=bucket.options)

@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.parametrize("filters", [["deflate"], ["shuffle", "deflate"], ["fletcher32"],
                                     ["shuffle", "fletcher32"], ["shuffle"]])
@pytest.mark.parametrize("dtype, shape, chunks", [
    ("<i4", (10, 3), (4, 3)),    # an edge chunk in rows
    (">f8", (10, 5), (4, 2)),    # in rows and in columns
    ("<u2", (9, 4), (2, 3)),     # both, a chunk of one row at the end
    ("<i4", (8, 2), (4, 1)),     # no edge chunk: the flag changes nothing
])
def test_edge_chunks_stored_unfiltered_read_as_h5py_reads_them(tmp_path, server, where, filters,
                                                              dtype, shape, chunks) -> None:
    """H5Pset_chunk_opts(H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS) stores the chunks reaching past
    the extent unfiltered, and their filter mask does not say so: such files were refused as
    damaged ("deflate: corrupt chunk: incorrect header check", "its chunk at (8, 0) holds 48
    bytes, but its filters (fletcher32) need 52"). h5py as the oracle, whole and from a row."""
    import ctypes

    from h5py import h5d, h5p, h5s, h5t

    lib = _h5_library()
    a = (np.random.default_rng(9).standard_normal(shape) * 1000).astype(dtype)
    path = tmp_path / "shard_0000.h5"
    # v110: the layout message that carries the flag, in a file HDF5 1.10 opens.
    with h5py.File(path, "w", libver=("v110", "v110")) as f:
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_chunk(chunks)
        for name in filters:
            {"shuffle": dcpl.set_shuffle, "deflate": lambda: dcpl.set_deflate(4),
             "fletcher32": dcpl.set_fletcher32}[name]()
        assert lib.H5Pset_chunk_opts(dcpl.id, 0x0002) >= 0  # H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS
        ds = h5d.create(f.id, b"x", h5t.py_create(np.dtype(dtype)), h5s.create_simple(shape),
                        dcpl=dcpl)
        h5py.Dataset(ds)[...] = a
    with h5py.File(path, "r") as f:
        ref = f["x"][...]
        opts = ctypes.c_uint(0)  # the flag as the file records it
        assert lib.H5Pget_chunk_opts(f["x"].id.get_create_plist().id, ctypes.byref(opts)) >= 0
        assert opts.value == 0x0002
    np.testing.assert_array_equal(ref, a)
    layout = _discover_at(path, where, server)
    np.testing.assert_array_equal(layout.read(), ref)
    np.testing.assert_array_equal(layout.read(5, shape[0]), ref[5:])


@pytest.mark.parametrize("where", ["local", "s3"])
def test_edge_chunks_stored_unfiltered_leave_the_others_to_the_direct_path(tmp_path, server,
                                                                          where) -> None:
    """A dataset whose edge chunks are stored unfiltered was read by H5Dread as a whole, its
    every deflated chunk inflated under HDF5's global lock one task at a time; only the edge
    chunks need H5Dread. Seen through a damaged inner chunk: the direct path names the chunk
    it inflates (HDF5's own error does not), and the edge chunk and the others still read
    as h5py reads them."""
    from h5py import h5d, h5p, h5s, h5t

    lib = _h5_library()
    a = np.arange(30, dtype="<i4").reshape(10, 3)
    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w", libver=("v110", "v110")) as f:
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_chunk((4, 3))
        dcpl.set_deflate(4)
        assert lib.H5Pset_chunk_opts(dcpl.id, 0x0002) >= 0  # H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS
        ds = h5d.create(f.id, b"data", h5t.py_create(a.dtype), h5s.create_simple(a.shape),
                        dcpl=dcpl)
        h5py.Dataset(ds)[...] = a
    corrupt_hdf5_chunk(path, "data", 1)  # the chunk of rows [4, 8); rows [8, 10) are the edge's
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["data"][:4], a[:4])
        np.testing.assert_array_equal(f["data"][8:], a[8:])
    layout = _discover_at(path, where, server)
    np.testing.assert_array_equal(layout.read(0, 4), a[:4])
    np.testing.assert_array_equal(layout.read(8, 10), a[8:])
    with pytest.raises(shardload.ShardReadError,
                       match=r"reading rows \[2, 9\): .*shard_0000\.h5\S*: dataset '/data': "
                             r"chunk of rows \[4, 8\) at \(4, 0\): deflate: corrupt chunk"):
        layout.read(2, 9)
