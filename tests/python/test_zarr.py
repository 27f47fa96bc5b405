"""The Zarr reader (v2 and v3) against zarr-python as the oracle.

Every test writes ragged stores with zarr-python, discovers them with
shardload and compares row ranges that cut chunks with the numpy
concatenation of what zarr-python itself reads back.
"""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import re
import shutil
import subprocess
import time
import warnings

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.codecs as zc
from zarr.codecs import numcodecs as znc

import shardload
import shardload.numpy
from conftest import DTYPES, assert_bools_normalised, dirty_bools, random_array

warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=FutureWarning)

ROWS = [23, 0, 7, 40]  # ragged, one empty store; no chunking below divides all of them


def write_stores(directory: pathlib.Path, arrays: list[np.ndarray], *,
                 name: str = "shard_{:04d}.zarr", path: str | None = None,
                 **kwargs) -> list[np.ndarray]:
    """Writes one store per array and returns what zarr-python reads back."""
    out = []
    for i, a in enumerate(arrays):
        store = str(directory / name.format(i))
        if path is None:
            z = zarr.create_array(store, shape=a.shape, dtype=a.dtype, **kwargs)
        else:
            rest = dict(kwargs)
            root = zarr.open_group(store, mode="w", zarr_format=rest.pop("zarr_format", 3))
            z = root.create_array(path, shape=a.shape, dtype=a.dtype, **rest)
        if a.size:
            z[...] = a
        out.append(zarr.open_array(store, path=path or "", mode="r")[...])
    return out


def check_ranges(layout: shardload.Layout, expected: np.ndarray, ranges=None) -> None:
    n = expected.shape[0]
    assert layout.shape == expected.shape
    assert layout.dtype == expected.dtype
    if ranges is None:
        ranges = [(0, n), (1, n - 1), (3, 4), (n // 3, 2 * n // 3 + 1), (n - 5, n), (5, 5)]
    for lo, hi in ranges:
        got = layout.read(lo, hi)
        np.testing.assert_array_equal(got, expected[lo:hi], err_msg=f"rows [{lo}, {hi})")


def ragged(rng, dtype="float32", trailing=(5, 3), rows=ROWS):
    return [random_array(rng, (r, *trailing), dtype) for r in rows]


# ---- dtypes, versions, chunkings ---------------------------------------------------------


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype(tmp_path, fmt, dtype):
    rng = np.random.default_rng(len(dtype) + fmt)
    arrays = ragged(rng, dtype, trailing=(3,))
    back = write_stores(tmp_path, arrays, chunks=(6, 2), zarr_format=fmt)
    layout = shardload.discover(tmp_path, format="zarr")
    assert layout.shard_rows == ROWS
    check_ranges(layout, np.concatenate(back))


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("trailing,chunks", [((), (5,)), ((4, 3, 2), (3, 2, 3, 1)),
                                             ((7,), (100, 7)), ((2, 9), (1, 1, 4))])
def test_chunkings(tmp_path, fmt, trailing, chunks):
    rng = np.random.default_rng(7)
    arrays = ragged(rng, "float64", trailing=trailing)
    back = write_stores(tmp_path, arrays, chunks=chunks, zarr_format=fmt)
    check_ranges(shardload.discover(tmp_path, format="zarr"), np.concatenate(back))


def test_glob_and_auto_format(tmp_path):
    rng = np.random.default_rng(1)
    arrays = ragged(rng, rows=[5, 12, 3])
    back = write_stores(tmp_path, arrays, name="store_{:02d}", chunks=(4, 5, 3), zarr_format=3)
    # No extension: the format comes from the store's zarr.json.
    layout = shardload.discover(str(tmp_path / "store_*"))
    assert layout.format == "zarr"
    check_ranges(layout, np.concatenate(back))
    layout = shardload.discover(str(tmp_path / "store_{:02d}"), format="zarr")
    check_ranges(layout, np.concatenate(back))


def test_array_inside_a_group(tmp_path):
    rng = np.random.default_rng(2)
    arrays = ragged(rng, rows=[9, 4])
    back = write_stores(tmp_path, arrays, path="grp/data", chunks=(4, 2, 2), zarr_format=3)
    layout = shardload.discover(tmp_path, format="zarr", dataset="grp/data")
    check_ranges(layout, np.concatenate(back))
    with pytest.raises(shardload.LayoutError, match=r"shard_0000\.zarr.*zarr\.json.*node_type"):
        shardload.discover(tmp_path, format="zarr")


def test_v2_group_dataset(tmp_path):
    rng = np.random.default_rng(3)
    arrays = ragged(rng, rows=[9, 4])
    back = write_stores(tmp_path, arrays, path="x", chunks=(4, 2, 2), zarr_format=2)
    check_ranges(shardload.discover(tmp_path, format="zarr", dataset="x"), np.concatenate(back))
    with pytest.raises(shardload.LayoutError, match=r"shard_0000\.zarr.*no Zarr array metadata.*x"):
        shardload.discover(tmp_path, format="zarr")


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("name", ["grp", "grp.zarr"])
def test_a_group_passed_as_one_directory_is_one_store(tmp_path, fmt, name):
    """A v2 group (.zgroup at its root, as zarr-python writes one) passed as its directory with
    dataset= was taken for a directory of numbered shards ("no numbered shards ... 3 other"),
    even named *.zarr or with format='zarr', while a v3 group (zarr.json) was a store. Both
    are one store now, whose array dataset= names."""
    store = tmp_path / name
    g = zarr.open_group(str(store), mode="w", zarr_format=fmt)
    a = g.create_array("a", shape=(5, 2), dtype="u2", chunks=(2, 2))
    a[...] = np.arange(10, dtype="u2").reshape(5, 2)
    g.create_group("sub").create_array("b", shape=(1,), dtype="u1", chunks=(1,))
    want = zarr.open_array(str(store), path="a", mode="r")[...]
    for source in (str(store), [str(store)]):
        for options in ({}, {"format": "zarr"}):
            if isinstance(source, list) and name == "grp" and not options:
                continue  # neither the name nor a file's first bytes says Zarr
            layout = shardload.discover(source, dataset="a", **options)
            assert layout.format == "zarr" and layout.paths == [str(store)]
            check_ranges(layout, want, [(0, 5), (1, 4)])
    # Without dataset=, the store's arrays are named, as a v3 group's are.
    with pytest.raises(shardload.LayoutError, match=r"arrays in the store: a.*|dataset="):
        shardload.discover(str(store))


# ---- codecs ------------------------------------------------------------------------------

V2_COMPRESSORS = {
    "none": None,
    "zlib": numcodecs.Zlib(level=3),
    "gzip": numcodecs.GZip(level=5),
    "zstd": numcodecs.Zstd(level=3),
    "zstd-checksum": numcodecs.Zstd(level=1, checksum=True),
    "lz4": numcodecs.LZ4(),
    "blosc-lz4-shuffle": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
    "blosc-zstd-bitshuffle": numcodecs.Blosc(cname="zstd", shuffle=numcodecs.Blosc.BITSHUFFLE),
    "blosc-zlib-noshuffle": numcodecs.Blosc(cname="zlib", shuffle=numcodecs.Blosc.NOSHUFFLE),
    "blosc-blosclz": numcodecs.Blosc(cname="blosclz", clevel=9),
    "blosc-lz4hc": numcodecs.Blosc(cname="lz4hc"),
}


@pytest.mark.parametrize("dtype", ["int16", "float64", "complex64"])
@pytest.mark.parametrize("codec", list(V2_COMPRESSORS))
def test_v2_codecs(tmp_path, codec, dtype):
    rng = np.random.default_rng(11)
    arrays = ragged(rng, dtype)
    kwargs = {"compressors": V2_COMPRESSORS[codec]} if V2_COMPRESSORS[codec] else {
        "compressors": None}
    back = write_stores(tmp_path, arrays, chunks=(6, 2, 3), zarr_format=2, **kwargs)
    meta = json.loads((tmp_path / "shard_0000.zarr" / ".zarray").read_text())
    if codec == "none":
        assert meta["compressor"] is None
    check_ranges(shardload.discover(tmp_path, format="zarr"), np.concatenate(back))


V3_CODECS = {
    "bytes": dict(compressors=None),
    "bytes-big": dict(serializer=zc.BytesCodec(endian="big"), compressors=None),
    "gzip": dict(compressors=zc.GzipCodec(level=4)),
    "zstd": dict(compressors=zc.ZstdCodec(level=2, checksum=True)),
    "blosc": dict(compressors=zc.BloscCodec(cname="lz4", shuffle="bitshuffle")),
    "blosc-zstd-big": dict(serializer=zc.BytesCodec(endian="big"),
                           compressors=zc.BloscCodec(cname="zstd", shuffle="shuffle")),
    "crc32c": dict(compressors=zc.Crc32cCodec()),
    "zstd+crc32c": dict(compressors=[zc.ZstdCodec(), zc.Crc32cCodec()]),
    "gzip+zstd": dict(compressors=[zc.GzipCodec(), zc.ZstdCodec()]),
    "numcodecs.zlib": dict(compressors=znc.Zlib(level=1)),
    "numcodecs.lz4": dict(compressors=znc.LZ4()),
    "numcodecs.gzip": dict(compressors=znc.GZip(level=2)),
    "numcodecs.zstd": dict(compressors=znc.Zstd(level=1)),
    "numcodecs.blosc": dict(compressors=znc.Blosc(cname="zlib", shuffle=2)),
}


@pytest.mark.parametrize("dtype", ["uint8", "int32", "float16", "complex128"])
@pytest.mark.parametrize("codec", list(V3_CODECS))
def test_v3_codecs(tmp_path, codec, dtype):
    rng = np.random.default_rng(12)
    arrays = ragged(rng, dtype)
    back = write_stores(tmp_path, arrays, chunks=(6, 2, 3), zarr_format=3, **V3_CODECS[codec])
    check_ranges(shardload.discover(tmp_path, format="zarr"), np.concatenate(back))


@pytest.mark.parametrize("location", ["end", "start"])
@pytest.mark.parametrize("inner", [None, zc.ZstdCodec(), zc.BloscCodec(cname="zstd")])
def test_v3_sharding(tmp_path, location, inner):
    rng = np.random.default_rng(13)
    arrays = ragged(rng, "float32", trailing=(6, 3))
    shards = {"shape": (8, 4, 3), "index_location": location}
    back = write_stores(tmp_path, arrays, chunks=(4, 2, 3), shards=shards, zarr_format=3,
                        compressors=inner, serializer=zc.BytesCodec(endian="big"))
    layout = shardload.discover(tmp_path, format="zarr")
    full = np.concatenate(back)
    check_ranges(layout, full, [(lo, hi) for lo in range(0, 70, 9) for hi in (lo + 1, lo + 13)
                                if hi <= full.shape[0]])


def test_v3_sharding_missing_inner_chunks(tmp_path):
    a = np.full((30, 4), np.nan, dtype="float32")
    a[0:3, 0:2] = 1.5  # one inner chunk written in the first shard, the rest fill
    a[20:22, 2:4] = 2.5
    back = write_stores(tmp_path, [a], chunks=(3, 2), shards={"shape": (6, 4), "index_location": "end"}, zarr_format=3,
                        fill_value=np.nan)
    layout = shardload.discover(tmp_path, format="zarr")
    check_ranges(layout, back[0])
    # Shards with no data are not written at all.
    assert not (tmp_path / "shard_0000.zarr" / "c" / "2").exists()


def test_v3_nested_sharding_is_refused(tmp_path):
    a = np.zeros((8, 4), dtype="float32")
    inner = zc.ShardingCodec(chunk_shape=(2, 2))
    outer = zc.ShardingCodec(chunk_shape=(4, 4), codecs=[inner])
    store = tmp_path / "shard_0000.zarr"
    z = zarr.create_array(str(store), shape=a.shape, dtype=a.dtype, chunks=(8, 4),
                          serializer=outer, compressors=None, zarr_format=3)
    z[...] = a
    with pytest.raises(shardload.LayoutError, match=r"zarr\.json.*nested sharding"):
        shardload.discover(tmp_path, format="zarr")


@pytest.mark.parametrize("after", ["gzip", "zstd", "crc32c"])
def test_v3_a_codec_after_sharding_is_refused_naming_what_was_found_and_expected(tmp_path, after):
    """[sharding_indexed, gzip] compresses each shard whole: zarr-python reads it (decoding a
    whole shard for any part of it); shardload reads parts of shards, so it refuses the
    store, naming the metadata file, the field, the codec found and where it is expected."""
    a = np.arange(64, dtype="float32").reshape(16, 4)
    codec = {"gzip": zc.GzipCodec(), "zstd": zc.ZstdCodec(), "crc32c": zc.Crc32cCodec()}[after]
    store = tmp_path / "shard_0000.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python warns that partial reads are lost
        z = zarr.create_array(str(store), shape=a.shape, dtype=a.dtype, chunks=(8, 4),
                              serializer=zc.ShardingCodec(chunk_shape=(2, 2)),
                              compressors=[codec], zarr_format=3)
        z[...] = a
        np.testing.assert_array_equal(zarr.open_array(str(store))[...], a)  # the oracle reads it
    meta = json.loads((store / "zarr.json").read_text())
    assert [c["name"] for c in meta["codecs"]] == ["sharding_indexed", after]
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(tmp_path, format="zarr")
    assert (f"{store / 'zarr.json'}: codecs[1]: found codec '{after}' after sharding_indexed, "
            "which encodes whole shards" in str(e.value)), e.value
    assert (f"expected none after it: put '{after}' in the sharding codec's own codecs "
            "(codecs[0].configuration.codecs)" in str(e.value)), e.value


# ---- keys, order, byte order -------------------------------------------------------------


def test_v2_slash_separator_and_fortran_order_and_big_endian(tmp_path):
    rng = np.random.default_rng(14)
    arrays = ragged(rng, "float64", trailing=(5, 3))
    arrays = [a.astype(">f8") for a in arrays]
    back = write_stores(tmp_path, arrays, chunks=(6, 2, 2), zarr_format=2,
                        chunk_key_encoding={"name": "v2", "separator": "/"},
                        order="F", compressors=numcodecs.Zstd())
    meta = json.loads((tmp_path / "shard_0000.zarr" / ".zarray").read_text())
    assert meta["order"] == "F" and meta["dimension_separator"] == "/" and meta["dtype"] == ">f8"
    layout = shardload.discover(tmp_path, format="zarr")
    assert layout.dtype == np.float64  # native order in memory
    check_ranges(layout, np.concatenate(back).astype("float64"))


@pytest.mark.parametrize("encoding", [{"name": "v2", "separator": "."},
                                      {"name": "default", "separator": "."},
                                      {"name": "v2", "separator": "/"}])
def test_v3_chunk_key_encodings(tmp_path, encoding):
    rng = np.random.default_rng(15)
    arrays = ragged(rng, "int32", trailing=(4,))
    back = write_stores(tmp_path, arrays, chunks=(5, 3), zarr_format=3,
                        chunk_key_encoding=encoding)
    check_ranges(shardload.discover(tmp_path, format="zarr"), np.concatenate(back))


# ---- missing chunks and fill values ------------------------------------------------------


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("dtype,fill", [("float32", np.nan), ("float64", np.inf),
                                        ("float16", -np.inf), ("int16", -7), ("uint64", 2**63 + 5),
                                        ("bool", True), ("complex64", complex(np.nan, 2.0)),
                                        ("float32", 0.1), ("int8", None)])
def test_missing_chunks_take_the_fill_value(tmp_path, fmt, dtype, fill):
    if fill is None and fmt == 3:
        pytest.skip("v3 has no null fill value")
    a = random_array(np.random.default_rng(16), (25, 6), dtype)
    back = write_stores(tmp_path, [a, a[:7]], chunks=(4, 4), zarr_format=fmt, fill_value=fill)
    # Delete chunks in the middle and at the edges, of both stores.
    removed = 0
    for store in ("shard_0000.zarr", "shard_0001.zarr"):
        for p in sorted((tmp_path / store).rglob("*")):
            if p.is_file() and not p.name.startswith((".z", "zarr.json")) and removed % 2 == 0:
                p.unlink()
            removed += 1
    back = [zarr.open_array(str(tmp_path / s), mode="r")[...]
            for s in ("shard_0000.zarr", "shard_0001.zarr")]
    expected = np.concatenate(back)
    layout = shardload.discover(tmp_path, format="zarr")
    check_ranges(layout, expected)


def test_all_chunks_missing(tmp_path):
    z = zarr.create_array(str(tmp_path / "shard_0000.zarr"), shape=(13, 3), chunks=(4, 2),
                          dtype="float64", fill_value=-1.25, zarr_format=3)
    layout = shardload.discover(tmp_path, format="zarr")
    np.testing.assert_array_equal(layout.read(2, 11), z[2:11])


def test_reads_only_overlapping_chunks(tmp_path):
    a = np.arange(40 * 3, dtype="int32").reshape(40, 3)
    write_stores(tmp_path, [a], chunks=(10, 3), zarr_format=2, compressors=numcodecs.Zstd())
    # Corrupt chunk 2 (rows 20-29): rows outside it still read; rows in it fail.
    (tmp_path / "shard_0000.zarr" / "2.0").write_bytes(b"garbage")
    layout = shardload.discover(tmp_path, format="zarr")
    np.testing.assert_array_equal(layout.read(0, 20), a[0:20])
    np.testing.assert_array_equal(layout.read(30, 40), a[30:40])
    with pytest.raises(shardload.ShardReadError, match=r"shard_0000\.zarr/2\.0: zstd: corrupt"):
        layout.read(19, 21)


# ---- chunks changed after discovery -------------------------------------------------------
# A chunk file has no snapshot of its own, but its change time (and a missing one's directory's)
# tells whether it was written (or deleted) after discovery began. The sleep puts the change
# past the file system's timestamp granularity (a clock tick, at most 10 ms).


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("fault", ["rewritten", "deleted", "created"])
def test_a_chunk_changed_after_discovery_is_a_changed_error_naming_it(tmp_path, fmt, fault):
    a = np.arange(30, dtype="float32").reshape(10, 3)
    write_stores(tmp_path, [a], chunks=(4, 3), zarr_format=fmt)
    store = tmp_path / "shard_0000.zarr"
    chunk = store / ("1.0" if fmt == 2 else "c/1/0")
    if fault == "created":
        chunk.unlink()  # missing at discovery: the fill value
    layout = shardload.discover(tmp_path, format="zarr")
    time.sleep(0.05)
    if fault == "deleted":
        chunk.unlink()
    else:
        zarr.open_array(str(store), mode="r+")[4:8] = -1
    want = re.escape(str(chunk)) + r": changed since discovery: " + (
        r"not found, and its directory .* changed after discovery began" if fault == "deleted"
        else r"ctime \d+ ns, after discovery began at \d+ ns")
    with pytest.raises(shardload.ShardReadError, match=want):
        layout.read(0, 10)
    with pytest.raises(shardload.ShardReadError, match=want):
        shardload.numpy.load(layout)
    # The chunks untouched since still read; rediscovered, the store reads as it now is.
    np.testing.assert_array_equal(layout.read(0, 4), a[0:4])
    np.testing.assert_array_equal(shardload.discover(tmp_path, format="zarr").read(0, 10),
                                  zarr.open_array(str(store), mode="r")[...])


@pytest.mark.parametrize("fmt", [2, 3])
def test_a_chunk_rewritten_right_after_discovery_returns_is_a_changed_error(tmp_path, fmt):
    """A write stamps the kernel's clock tick (up to a tick behind the clock discovery reads), so
    a chunk rewritten in place in the tick discovery began in carried an earlier change time and
    was read as it now is, no error (199 of 200 tries). Discovery returns once that tick is over."""
    a = np.arange(24, dtype="int64").reshape(8, 3)
    write_stores(tmp_path, [a], chunks=(4, 3), zarr_format=fmt, compressors=None)
    store = tmp_path / "shard_0000.zarr"
    chunk = store / ("0.0" if fmt == 2 else "c/0/0")
    size = chunk.stat().st_size
    for i in range(40):
        layout = shardload.discover(tmp_path, format="zarr")
        with open(chunk, "r+b") as f:  # the writer's next version of rows 0-3, in place
            f.seek(size - 4 * 3 * 8)
            f.write(np.full((4, 3), i + 1, "<i8").tobytes())
        with pytest.raises(shardload.ShardReadError, match=re.escape(str(chunk)) +
                           r": changed since discovery: ctime \d+ ns, after discovery began"):
            shardload.numpy.load(layout)


@pytest.mark.parametrize("fmt", [2, 3])
def test_a_chunk_directory_renamed_into_place_after_discovery_is_a_changed_error(tmp_path, fmt):
    """Another version's row block published by renaming its directory over the chunk's: the
    chunk files keep their old ctimes, so rows 4-7 were read from the new version beside the
    old version's others, no error. The directory's own ctime tells the rename."""
    a = np.arange(30, dtype="float32").reshape(10, 3)
    kw = {"dimension_separator": "/"} if fmt == 2 else {}
    for name, values in (("cur", a), ("new", a + 1000)):
        z = zarr.open_array(str(tmp_path / name / "shard_0000.zarr"), mode="w", shape=a.shape,
                            chunks=(4, 3), dtype=a.dtype, zarr_format=fmt, **kw)
        z[...] = values
    store = tmp_path / "cur" / "shard_0000.zarr"
    block = "1" if fmt == 2 else "c/1"
    layout = shardload.discover(tmp_path / "cur", format="zarr")
    time.sleep(0.05)
    (store / block).rename(tmp_path / "old_block")
    (tmp_path / "new" / "shard_0000.zarr" / block).rename(store / block)
    mixed = zarr.open_array(str(store), mode="r")[...]
    assert not np.array_equal(mixed, a) and np.array_equal(mixed[:4], a[:4])  # the oracle
    want = (re.escape(str(store / block / "0")) + r": changed since discovery: its directory " +
            re.escape(str(store / block)) + r" changed after discovery began")
    with pytest.raises(shardload.ShardReadError, match=want):
        layout.read(4, 8)
    with pytest.raises(shardload.ShardReadError, match=want):
        shardload.numpy.load(layout)
    # The chunks in directories untouched since still read; v3's `c`, whose entries the rename
    # changed (one removed, one made: its mtime moved with its ctime), is no new version.
    np.testing.assert_array_equal(layout.read(0, 4), a[0:4])
    # Rediscovered, the store reads as it now is.
    np.testing.assert_array_equal(
        shardload.discover(tmp_path / "cur", format="zarr").read(0, 10), mixed)


@pytest.mark.parametrize("keys", ["v3 c/", "v3 c.", "v2 /", "v2 ."])
def test_a_chunk_untouched_since_discovery_reads_while_other_chunk_rows_are_written(tmp_path,
                                                                                    keys):
    """A writer filling a pre-sized array chunk row by chunk row while a kept layout reads the
    finished rows: with zarr-python's default v3 keys each new chunk row makes a directory in
    `c`, whose change time then moved past discovery, and every chunk under it was refused as
    "renamed into place or written since", its own file untouched (docs/formats.md: never
    refused). An entry made in a directory moves its mtime with its ctime; a rename onto it
    moves the ctime alone (test_a_chunk_directory_renamed_into_place...)."""
    fmt = 3 if keys.startswith("v3") else 2
    sep = keys[-1]
    kw = ({"chunk_key_encoding": {"name": "default", "separator": sep}} if fmt == 3 else
          {"chunk_key_encoding": {"name": "v2", "separator": sep}})
    path = tmp_path / "a.zarr"
    z = zarr.create_array(str(path), shape=(6, 2), chunks=(2, 2), dtype="i4", zarr_format=fmt,
                          fill_value=-1, **kw)
    z[0:2] = 1
    layout = shardload.discover(path)
    time.sleep(0.05)
    for lo in (2, 4):
        zarr.open_array(str(path), mode="r+")[lo:lo + 2] = lo
        np.testing.assert_array_equal(layout.read(0, 2), np.ones((2, 2), "i4"))
    # The chunks written since are refused (their own ctime), never read as the fill value.
    with pytest.raises(shardload.ShardReadError, match="changed since discovery"):
        layout.read(2, 4)


@pytest.mark.parametrize("what", ["chunk file", "chunk directory", "v3 c directory"])
def test_a_symlink_on_a_chunks_path_re_pointed_after_discovery_is_a_changed_error(tmp_path, what):
    """A chunk file or directory that is a symbolic link, re-pointed after discovery at another
    version's (`ln -sfn`): the link is new, the files it leads to are old, and the rows of the
    other version were read beside this one's, no error. The link's own ctime tells it."""
    a = np.arange(30, dtype="float32").reshape(10, 3)
    fmt = 3 if what.startswith("v3") else 2
    kw = {"dimension_separator": "/" if what == "chunk directory" else "."} if fmt == 2 else {}
    for name, values in (("v1", a), ("v2", a + 1000), ("cur", a)):
        z = zarr.open_array(str(tmp_path / name), mode="w", shape=a.shape, chunks=(4, 3),
                            dtype=a.dtype, zarr_format=fmt, **kw)
        z[...] = values
    store = tmp_path / "cur"
    link = {"chunk file": "1.0", "chunk directory": "1", "v3 c directory": "c"}[what]
    if (store / link).is_dir():
        shutil.rmtree(store / link)
    else:
        (store / link).unlink()
    (store / link).symlink_to(tmp_path / "v1" / link)
    time.sleep(0.05)
    layout = shardload.discover([store], format="zarr")
    time.sleep(0.05)
    np.testing.assert_array_equal(layout.read(0, 10), a)  # links made before discovery: read
    # ln -sfn: a new link renamed over the old one.
    (tmp_path / "next").symlink_to(tmp_path / "v2" / link)
    (tmp_path / "next").rename(store / link)
    mixed = zarr.open_array(str(store), mode="r")[...]
    assert not np.array_equal(mixed, a)  # the oracle: another version's rows
    if fmt == 2:
        assert np.array_equal(mixed[:4], a[:4])
    want = (r"changed since discovery: the symbolic link " + re.escape(str(store / link)) +
            r" on its path was made after discovery began")
    with pytest.raises(shardload.ShardReadError, match=want):
        layout.read(4, 8)
    with pytest.raises(shardload.ShardReadError, match=want):
        shardload.numpy.load(layout)
    if fmt == 2:  # chunks off the link still read
        np.testing.assert_array_equal(layout.read(0, 4), a[:4])
    np.testing.assert_array_equal(
        shardload.discover([store], format="zarr").read(0, 10), mixed)


@pytest.mark.parametrize("what", ["chunk file", "chunk directory", "v3 c/1", "current",
                                  "store link"])
def test_a_link_anywhere_on_a_chunks_resolved_path_re_pointed_after_discovery_is_refused(
        tmp_path, what):
    """The link on the chunk's path unchanged, but one it leads to re-pointed after discovery:
    a second hop outside the store (`cur/1.0 -> hop -> v1/1.0`), a directory link inside the
    target (`cur/1.0 -> versions/current/1.0`, `current -> v1`), or the store's own name a link
    re-pointed at a hard-linked copy (`cp -al`) whose one chunk was rewritten: each read the
    other version's rows beside this one's, no error. Every link the path resolves through is
    held to the rule."""
    a = np.arange(30, dtype="float32").reshape(10, 3)
    fmt = 3 if what.startswith("v3") else 2
    kw = {"dimension_separator": "/" if what in ("chunk directory",) else "."} if fmt == 2 else {}
    rel = {"chunk file": "1.0", "chunk directory": "1", "v3 c/1": "c/1", "current": "1.0",
           "store link": "1.0"}[what]

    def write(name, values):
        z = zarr.open_array(str(tmp_path / name), mode="w", shape=a.shape, chunks=(4, 3),
                            dtype=a.dtype, zarr_format=fmt, **kw)
        z[...] = values

    for name, values in (("v1", a), ("v2", a + 1000), ("cur", a)):
        write(name, values)
    store = tmp_path / "cur"
    if what == "store link":
        shutil.rmtree(store)
        shutil.rmtree(tmp_path / "v2")
        subprocess.run(["cp", "-al", str(tmp_path / "v1"), str(tmp_path / "v2")], check=True)
        fresh = tmp_path / "fresh"
        write("fresh", a + 1000)
        os.replace(fresh / rel, tmp_path / "v2" / rel)  # the usual writer: a new file renamed
        store.symlink_to(tmp_path / "v1")
        hop = store
    else:
        if (store / rel).is_dir():
            shutil.rmtree(store / rel)
        else:
            (store / rel).unlink()
        if what == "current":
            (tmp_path / "versions").mkdir()
            (tmp_path / "versions" / "current").symlink_to(tmp_path / "v1")
            (store / rel).symlink_to(pathlib.Path("..") / "versions" / "current" / rel)
            hop = tmp_path / "versions" / "current"
        else:
            (tmp_path / "hop").symlink_to(tmp_path / "v1" / rel)
            (store / rel).symlink_to(tmp_path / "hop")
            hop = tmp_path / "hop"
    time.sleep(0.05)
    layout = shardload.discover([store], format="zarr")
    time.sleep(0.05)
    np.testing.assert_array_equal(layout.read(0, 10), a)
    target = tmp_path / "v2" if what in ("current", "store link") else tmp_path / "v2" / rel
    (tmp_path / "next").symlink_to(target)
    (tmp_path / "next").rename(hop)  # ln -sfn
    mixed = zarr.open_array(str(store), mode="r")[...]
    assert not np.array_equal(mixed, a)  # the oracle: another version's rows
    if fmt == 2:
        assert np.array_equal(mixed[:4], a[:4])
    want = (r"changed since discovery: the symbolic link " + re.escape(str(hop)) +
            r" on its path was made after discovery began")
    with pytest.raises(shardload.ShardReadError, match=want):
        layout.read(4, 8)
    with pytest.raises(shardload.ShardReadError, match=want):
        shardload.numpy.load(layout)
    np.testing.assert_array_equal(
        shardload.discover([store], format="zarr").read(0, 10), mixed)


def test_a_chunk_written_just_before_discovery_is_read(tmp_path):
    """The store written, discovered and read at once, each store of a few chunks, several
    times: no chunk written before discovery began is taken for one written after."""
    a = np.arange(60, dtype="int64").reshape(20, 3)
    for i in range(20):
        d = tmp_path / str(i)
        d.mkdir()
        write_stores(d, [a + i], chunks=(3, 3), zarr_format=2 + i % 2)
        np.testing.assert_array_equal(shardload.discover(d, format="zarr").read(0, 20), a + i)


# ---- errors ------------------------------------------------------------------------------


def one_store(tmp_path, fmt=2, **kwargs) -> pathlib.Path:
    a = np.arange(30, dtype="float32").reshape(10, 3)
    kwargs.setdefault("chunks", (4, 3))
    write_stores(tmp_path, [a], zarr_format=fmt, **kwargs)
    return tmp_path / "shard_0000.zarr"


CODECS = {"zlib": (2, numcodecs.Zlib()), "gzip": (2, numcodecs.GZip()),
          "lz4": (2, numcodecs.LZ4()), "blosc": (2, numcodecs.Blosc()),
          "zstd": (2, numcodecs.Zstd()), "zstd-checksum": (2, numcodecs.Zstd(checksum=True)),
          "v3-zstd": (3, zc.ZstdCodec()), "v3-crc32c": (3, zc.Crc32cCodec()),
          "v3-blosc+crc32c": (3, [zc.BloscCodec(), zc.Crc32cCodec()])}
# Codecs that carry a checksum detect any flipped byte; the others (lz4, blosc,
# zstd without its checksum) can only detect damage to their structure, such
# as a chunk cut short.
CHECKSUMMED = {"zlib", "gzip", "zstd-checksum", "v3-crc32c", "v3-blosc+crc32c"}


@pytest.mark.parametrize("damage", ["truncate", "flip"])
@pytest.mark.parametrize("name", list(CODECS))
def test_corrupt_chunk(tmp_path, name, damage):
    if damage == "flip" and name not in CHECKSUMMED:
        pytest.skip("no checksum in this codec")
    fmt, codec = CODECS[name]
    store = one_store(tmp_path, fmt, compressors=codec)
    chunk = store / ("1.0" if fmt == 2 else "c/1/0")
    data = bytearray(chunk.read_bytes())
    if damage == "truncate":
        data = data[: len(data) - 3]
    else:
        data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    layout = shardload.discover(tmp_path, format="zarr")
    np.testing.assert_array_equal(layout.read(0, 4), np.arange(12).reshape(4, 3))
    with pytest.raises(shardload.ShardReadError,
                       match=str(chunk).replace(".", r"\.") + ": .*corrupt chunk"):
        layout.read(0, 10)


def test_truncated_uncompressed_chunk(tmp_path):
    store = one_store(tmp_path, 3, compressors=None)
    chunk = store / "c" / "0" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-4])
    layout = shardload.discover(tmp_path, format="zarr")
    with pytest.raises(shardload.ShardReadError, match=r"c/0/0: size: 44 bytes, expected 48"):
        layout.read(0, 2)


def test_corrupt_shard_index(tmp_path):
    store = one_store(tmp_path, 3, chunks=(2, 3), shards={"shape": (4, 3), "index_location": "end"})
    shard = store / "c" / "0" / "0"
    data = bytearray(shard.read_bytes())
    data[-6] ^= 0x01
    shard.write_bytes(bytes(data))
    layout = shardload.discover(tmp_path, format="zarr")
    with pytest.raises(shardload.ShardReadError, match=r"c/0/0: shard index: crc32c checksum"):
        layout.read(0, 1)
    np.testing.assert_array_equal(layout.read(4, 10)[0], [12, 13, 14])


@pytest.mark.parametrize("entry,found", [
    ("past the end", "the index says 64 bytes at offset 320, past the end of the file"),
    ("offset overflows", "the index says 64 bytes at offset 18446744073709551614"),
    ("length overflows", "the index says 18446744073709551608 bytes at offset 8"),
    ("only the offset missing", "offset 18446744073709551615"),
    ("only the length missing", "the index says 18446744073709551615 bytes at offset 0"),
    ("short", "32 bytes, expected 64"),
    ("empty", "0 bytes, expected 64"),
    ("into the index", None),  # zarr-python reads the index's bytes as the chunk: so do we
    ("another chunk's", None),
])
def test_a_shard_index_without_a_checksum_that_lies(tmp_path, entry, found):
    """A guard (tenth hostile pass): a sharded v3 array whose index has no crc32c, its first
    entry made to lie. Each is the read error naming the shard and the entry where
    zarr-python refuses it too, or zarr-python's data where it reads one."""
    import struct

    store = tmp_path / "a.zarr"
    codec = zc.ShardingCodec(chunk_shape=(4, 4), codecs=[zc.BytesCodec()],
                             index_codecs=[zc.BytesCodec()])
    arr = zarr.create_array(store, shape=(16, 4), chunks=(16, 4), dtype="<i4", zarr_format=3,
                            fill_value=-7, serializer=codec, compressors=None)
    arr[:] = np.arange(64, dtype=np.int32).reshape(16, 4)
    shard = store / "c" / "0" / "0"
    raw = shard.read_bytes()
    assert len(raw) == 320
    first = {"past the end": (320, 64), "offset overflows": (2**64 - 2, 64),
             "length overflows": (8, 2**64 - 8), "only the offset missing": (2**64 - 1, 64),
             "only the length missing": (0, 2**64 - 1), "short": (0, 32), "empty": (0, 0),
             "into the index": (256, 64), "another chunk's": (64, 64)}[entry]
    shard.write_bytes(raw[:256] + struct.pack("<QQ", *first) + raw[272:])
    if found is None:
        np.testing.assert_array_equal(shardload.numpy.load(store), zarr.open_array(store)[:])
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # zarr-python's overflow in its check
        with pytest.raises(ValueError):
            zarr.open_array(store)[:]
    with pytest.raises(shardload.ShardReadError, match=r"c/0/0: inner chunk \(0, 0\): .*"
                       + re.escape(found)):
        shardload.numpy.load(store)


def test_chunk_that_is_a_directory(tmp_path):
    store = one_store(tmp_path, 2)
    (store / "1.0").unlink()
    (store / "1.0").mkdir()
    layout = shardload.discover(tmp_path, format="zarr")
    with pytest.raises(shardload.ShardReadError, match=r"1\.0: not a regular file"):
        layout.read(0, 10)


def test_missing_metadata(tmp_path):
    (tmp_path / "shard_0000.zarr").mkdir()
    with pytest.raises(shardload.LayoutError,
                       match=r"shard_0000\.zarr: no Zarr array metadata \(neither .*\.zarray nor "):
        shardload.discover(tmp_path, format="zarr")


def edit_metadata(store: pathlib.Path, fmt: int, change) -> pathlib.Path:
    path = store / (".zarray" if fmt == 2 else "zarr.json")
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))
    return path


@pytest.mark.parametrize("fmt,change,message", [
    (2, lambda m: m.update(compressor={"id": "bz2", "level": 1}),
     r"compressor\.id: unsupported codec 'bz2'"),
    (2, lambda m: m.update(filters=[{"id": "delta", "dtype": "<f4"}]),
     r"filters: filters are not supported \(found 'delta'"),
    (2, lambda m: m.update(dtype="|S4"), r"dtype: unsupported dtype '\|S4'"),
    (2, lambda m: m.update(chunks=[4]), r"chunks: 1 dimensions, but shape has 2"),
    (2, lambda m: m.update(fill_value="zero"), r"fill_value: expected a number"),
    (2, lambda m: m.pop("shape"), r"shape: missing"),
    (2, lambda m: m.update(order="K"), r"order: expected \"C\" or \"F\""),
    (3, lambda m: m["codecs"].insert(0, {"name": "transpose", "configuration": {"order": [1, 0]}}),
     r"codecs\[0\]: the transpose codec is not supported"),
    (3, lambda m: m["codecs"].append({"name": "bz2"}), r"codecs\[2\]: unsupported codec 'bz2'"),
    (3, lambda m: m.update(data_type="string"), r"data_type: unsupported data type 'string'"),
    (3, lambda m: m.update(chunk_grid={"name": "rectilinear"}), r"chunk_grid\.name"),
    (3, lambda m: m["codecs"][0]["configuration"].pop("endian"),
     r"codecs\[0\]\.configuration\.endian: missing"),
    (3, lambda m: m.update(fill_value=None), r"fill_value: expected a value"),
    (3, lambda m: m.update(storage_transformers=[{"name": "x"}]), r"storage_transformers"),
    # Extension fields: one that says nothing of must_understand, or says true, must be
    # understood (the v3 spec; zarr-python refuses them); they were ignored and the rows read.
    (3, lambda m: m.update(an_extension={"must_understand": True}),
     r"an_extension: an extension field this reader does not know"),
    (3, lambda m: m.update(an_extension={"name": "x"}),
     r"an_extension: an extension field this reader does not know"),
    (3, lambda m: m.update(an_extension=[1, 2]),
     r"an_extension: an extension field this reader does not know"),
])
def test_bad_metadata(tmp_path, fmt, change, message):
    store = one_store(tmp_path, fmt, compressors=zc.ZstdCodec() if fmt == 3 else numcodecs.Zstd())
    path = edit_metadata(store, fmt, change)
    with pytest.raises(shardload.LayoutError, match=str(path).replace(".", r"\.") + ": " + message):
        shardload.discover(tmp_path, format="zarr")


def test_an_extension_field_that_need_not_be_understood_is_read_as_zarr_reads_it(tmp_path):
    store = one_store(tmp_path, 3)
    edit_metadata(store, 3, lambda m: m.update(an_extension={"must_understand": False, "x": 1},
                                               dimension_names=["a", None]))
    want = zarr.open_array(store)[:]
    np.testing.assert_array_equal(np.asarray(shardload.load(tmp_path, format="zarr")), want)


@pytest.mark.parametrize("fmt", [2, 3])
def test_malformed_metadata_json(tmp_path, fmt):
    store = one_store(tmp_path, fmt)
    path = store / (".zarray" if fmt == 2 else "zarr.json")
    path.write_text(path.read_text()[:-3])
    with pytest.raises(shardload.LayoutError, match=str(path).replace(".", r"\.") +
                       ": not valid JSON"):
        shardload.discover(tmp_path, format="zarr")


@pytest.mark.parametrize("fmt, dtype, number", [(2, "<f8", "1e400"), (2, "<f8", "-1e400"),
                                                (3, "float64", "1e400")])
def test_a_fill_value_past_float64s_range_is_refused_naming_it(tmp_path, fmt, dtype, number):
    """`1e400` is a JSON number (zarr-python reads it as inf) that no double holds: refused
    naming fill_value and the range, where it was called "not valid JSON"."""
    store = tmp_path / "shard_0000.zarr"
    zarr.create_array(store, shape=(4, 2), chunks=(2, 2), dtype=dtype, zarr_format=fmt,
                      fill_value=0)
    path = edit_metadata(store, fmt, lambda m: m.update(fill_value="@FILL@"))
    path.write_text(path.read_text().replace('"@FILL@"', number))
    with pytest.raises(shardload.LayoutError,
                       match=re.escape(f"{path}: fill_value: the number {number} is out of "
                                       "float64's range")):
        shardload.discover(tmp_path, format="zarr")


def test_metadata_changed_after_discovery(tmp_path):
    store = one_store(tmp_path, 2)
    layout = shardload.discover(tmp_path, format="zarr")
    path = edit_metadata(store, 2, lambda m: m.update(fill_value=5.0))
    os.utime(path, ns=(1, 1))
    with pytest.raises(shardload.ShardReadError,
                       match=r"\.zarray: changed since discovery"):
        layout.read(0, 3)


def test_store_is_not_a_directory_and_options_do_not_apply(tmp_path):
    (tmp_path / "shard_0000.zarr").write_bytes(b"x")
    with pytest.raises(shardload.LayoutError, match=r"shard_0000\.zarr: not a directory"):
        shardload.discover(tmp_path, format="zarr")
    with pytest.raises(shardload.LayoutError, match=r"zarr: dtype= does not apply"):
        shardload.discover(tmp_path, format="zarr", dtype="float32")
    with pytest.raises(shardload.LayoutError, match=r"dataset '\.\./x'"):
        shardload.discover(tmp_path, format="zarr", dataset="../x")


def test_dtype_mismatch_across_stores(tmp_path):
    write_stores(tmp_path, [np.zeros((3, 2), "f4"), np.zeros((3, 2), "f8")], chunks=(2, 2),
                 zarr_format=3)
    with pytest.raises(shardload.LayoutError,
                       match=r"shard_0001\.zarr: dtype float64 differs from float32"):
        shardload.discover(tmp_path, format="zarr")


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("compressed", [False, True])
def test_bool_bytes_other_than_0_and_1_read_as_numpy_does(tmp_path: pathlib.Path,
                                                          zarr_format: int,
                                                          compressed: bool) -> None:
    """zarr-python stores the bytes of a bool array as given; what it reads back
    (bytes and all) is the oracle, read by numpy's rule."""
    rng = np.random.default_rng(14 + zarr_format)
    arrays = [dirty_bools(rng, (r, 3)) for r in ROWS]
    kw = {} if compressed else {"compressors": None}
    stored = np.concatenate(write_stores(tmp_path, arrays, chunks=(5, 2),
                                         zarr_format=zarr_format, **kw))
    np.testing.assert_array_equal(stored.view(np.uint8), np.concatenate(arrays).view(np.uint8))
    layout = shardload.discover(tmp_path, format="zarr")
    assert_bools_normalised(layout.read(), stored)
    assert_bools_normalised(layout.read(4, 31), stored[4:31])


@pytest.mark.parametrize("meta", [".zarray", "zarr.json"])
def test_deeply_nested_metadata_is_a_layout_error(tmp_path: pathlib.Path, meta: str) -> None:
    store = tmp_path / "shard_0000.zarr"
    store.mkdir()
    (store / meta).write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    with pytest.raises(shardload.LayoutError,
                       match=f"{meta}: JSON nesting deeper than 64 levels"):
        shardload.discover(tmp_path, format="zarr")


@pytest.mark.parametrize("cname", ["lz4", "zstd", "blosclz", "zlib"])
def test_blosc_chunks_with_bytes_after_the_frame_read_as_numcodecs_reads_them(tmp_path, cname):
    # z5py (a C++ Zarr writer) leaves 16 bytes after each blosc frame: a chunk file of
    # 10,032 bytes whose header says 10,016. numcodecs decodes the frame and ignores them.
    a = random_array(np.random.default_rng(16), (37, 5), "float64")
    write_stores(tmp_path, [a], zarr_format=2, chunks=(8, 5),
                 compressors=numcodecs.Blosc(cname=cname, shuffle=numcodecs.Blosc.SHUFFLE))
    store = tmp_path / "shard_0000.zarr"
    chunks = sorted(p for p in store.iterdir() if not p.name.startswith("."))
    assert len(chunks) == 5
    for c in chunks:
        raw = c.read_bytes()
        cbytes = int.from_bytes(raw[12:16], "little")
        assert cbytes == len(raw)
        c.write_bytes(raw + bytes(range(0xF0, 0x100)))  # 16 bytes after the frame
    oracle = zarr.open_array(str(store), mode="r")[...]  # numcodecs reads them
    np.testing.assert_array_equal(oracle, a)
    check_ranges(shardload.discover(tmp_path, format="zarr"), oracle)
    # A frame cut short stays refused: its header promises bytes the chunk does not hold.
    # (numcodecs does not check this and decodes past the end of its buffer.)
    last = chunks[-1]
    raw = last.read_bytes()
    cut = raw[: int.from_bytes(raw[12:16], "little") - 1]
    last.write_bytes(cut)
    layout = shardload.discover(tmp_path, format="zarr")
    np.testing.assert_array_equal(layout.read(0, 32), a[:32])
    with pytest.raises(shardload.ShardReadError,
                       match=r"shard_0000\.zarr/4\.0: blosc: corrupt chunk \(its header says "
                             rf"{len(cut) + 1} compressed bytes, found {len(cut)}\)"):
        layout.read(30, 37)


# ---- a fourth hostile pass: fill values and chunks that decode to other sizes ------------------

@pytest.mark.parametrize("fmt,dtype,fill", [
    (2, "<i4", 1.5), (2, "<i4", 1e20), (2, "<i4", "NaN"), (2, "<i4", True), (2, "<i4", "1"),
    (2, "<u8", 18446744073709551615), (2, "<i8", -9223372036854775808), (2, "<i4", 2.0),
    (2, "<f4", 1e300), (2, "<f2", 70000.0), (2, "<f8", "1e400"), (2, "|b1", 2), (2, "|u1", 256),
    (2, "<c8", [1, 2]), (2, "<f8", -0.0), (2, "<f8", None),
    (3, "float32", "0x7fc00001"), (3, "float64", "0x3ff0000000000000"), (3, "float16", "0x3c00"),
    (3, "complex64", [1.0, "NaN"]), (3, "complex64", ["0x3f800000", 2.0]), (3, "int32", 1.5),
    (3, "uint8", 300), (3, "int8", -129), (3, "bool", 1), (3, "float64", "-0x1p3"),
    (3, "float32", "Infinity"), (3, "int64", 2.0),
], ids=repr)
def test_fill_values_read_as_zarr_python_reads_them_or_are_refused(tmp_path, fmt, dtype, fill):
    """Every chunk missing, so every element is the fill value: bit for bit zarr-python's
    (hex NaN payloads, -0.0, values that round to inf), or a LayoutError naming the metadata
    file and fill_value where shardload does not take the spelling."""
    store = tmp_path / "shard_0000.zarr"
    zarr.create_array(store, shape=(4, 2), chunks=(2, 2), dtype=dtype, zarr_format=fmt,
                      fill_value=0)
    path = edit_metadata(store, fmt, lambda m: m.update(fill_value=fill))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ref = zarr.open_array(store, mode="r")[...]
        except Exception:
            ref = None
    try:
        got = shardload.discover(tmp_path, format="zarr").read()
    except shardload.LayoutError as e:
        assert str(path) in str(e) and "fill_value" in str(e), str(e)
        return
    if ref is None:
        return  # a spelling zarr-python refuses and shardload takes: no oracle to compare
    assert got.dtype == ref.dtype.newbyteorder("=")
    np.testing.assert_array_equal(got.view(np.uint8), ref.astype(got.dtype).view(np.uint8))


@pytest.mark.parametrize("codec", ["zlib", "gzip", "zstd", "blosc", None])
@pytest.mark.parametrize("size", ["8 bytes short", "8 bytes long", "half"])
def test_a_chunk_that_decodes_to_another_size_is_an_error_naming_it(tmp_path, codec, size):
    """A valid compressed stream (or an uncompressed chunk) of other than the chunk's bytes:
    zarr-python fails to reshape it; shardload names the chunk file and both sizes, and never
    pads or cuts."""
    compressors = {"zlib": numcodecs.Zlib(), "gzip": numcodecs.GZip(), "zstd": numcodecs.Zstd(),
                   "blosc": numcodecs.Blosc(cname="lz4"), None: None}
    a = np.arange(100, dtype="<f8").reshape(20, 5)
    store = tmp_path / "shard_0000.zarr"
    z = zarr.create_array(store, shape=(20, 5), chunks=(10, 5), dtype="<f8", zarr_format=2,
                          compressors=compressors[codec], fill_value=0)
    z[...] = a
    raw = {"8 bytes short": a[:10].tobytes()[:-8], "8 bytes long": a[:10].tobytes() + bytes(8),
           "half": a[:5].tobytes()}[size]
    (store / "0.0").write_bytes(raw if codec is None else compressors[codec].encode(raw))
    with pytest.raises(ValueError):
        zarr.open_array(store, mode="r")[...]
    layout = shardload.discover(tmp_path, format="zarr")
    with pytest.raises(shardload.ShardReadError, match=str(store / "0.0").replace(".", r"\.")):
        layout.read(0, 20)
    np.testing.assert_array_equal(layout.read(10, 20), a[10:])


# ---- a fifth hostile pass: chunk key separators, two metadata documents -------------------
@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("sep", ["/../", "..", "x", "", "\\", "\x00", ". "])
def test_a_chunk_key_separator_other_than_dot_or_slash_is_refused(tmp_path, fmt, sep):
    """A separator that would make chunk keys climb out of the store ("/../"), or name keys
    zarr-python never writes, is refused naming the field, as zarr-python refuses it."""
    store = tmp_path / "shard_0000.zarr"
    kw = {"chunk_key_encoding": {"name": "v2", "separator": "."}} if fmt == 3 else {}
    z = zarr.create_array(store, shape=(4, 4), chunks=(2, 2), dtype="<i4", zarr_format=fmt,
                          compressors=None, fill_value=0, **kw)
    z[:] = np.arange(16, dtype="<i4").reshape(4, 4)
    field = "dimension_separator" if fmt == 2 else "chunk_key_encoding.configuration.separator"

    def change(m):
        if fmt == 2:
            m["dimension_separator"] = sep
        else:
            m["chunk_key_encoding"]["configuration"]["separator"] = sep
    edit_metadata(store, fmt, change)
    with pytest.raises(ValueError, match="separator"):
        zarr.open_array(store, mode="r")[:]
    with pytest.raises(shardload.LayoutError, match=f"{field}: expected \"\\.\" or \"/\""):
        shardload.discover(tmp_path, format="zarr")


def test_a_store_with_both_v2_and_v3_metadata_is_refused(tmp_path):
    """zarr-python reads zarr.json where both are (with a warning); the two documents may
    describe different arrays, so discovery refuses to choose."""
    store = tmp_path / "shard_0000.zarr"
    z3 = zarr.create_array(store, shape=(8,), chunks=(4,), dtype="<i4", zarr_format=3,
                           compressors=None, fill_value=0)
    z3[:] = np.arange(8) * 100
    z2 = zarr.create_array(tmp_path / "v2.zarr", shape=(8,), chunks=(4,), dtype="<i4",
                           zarr_format=2, compressors=None, fill_value=0)
    z2[:] = np.arange(8)
    for f in (tmp_path / "v2.zarr").iterdir():
        shutil.copy(f, store / f.name)
    shutil.rmtree(tmp_path / "v2.zarr")
    with pytest.raises(shardload.LayoutError, match="both .zarray .v2. and zarr.json .v3. exist"):
        shardload.discover(tmp_path, format="zarr")


# ---- a seventh hostile pass: chains and codecs zarr-python writes ------------------------------

@pytest.mark.parametrize("codecs", [
    [zc.Crc32cCodec(), zc.GzipCodec()],  # the checksum inside the compression
    [zc.ZstdCodec(), zc.Crc32cCodec(), zc.GzipCodec()],
    [zc.BloscCodec(cname="zstd", shuffle="shuffle", typesize=8)],  # typesize not the dtype's
    [zc.BloscCodec(cname="blosclz", shuffle="noshuffle"), zc.Crc32cCodec()],
], ids=["crc32c+gzip", "zstd+crc32c+gzip", "blosc-typesize-8", "blosc+crc32c"])
def test_codec_chains_in_any_order_read_as_zarr_python_reads_them(tmp_path, codecs):
    arrays = ragged(np.random.default_rng(21), "float32")
    back = write_stores(tmp_path, arrays, chunks=(7, 2, 3), zarr_format=3, compressors=codecs)
    check_ranges(shardload.discover(tmp_path, format="zarr"), np.concatenate(back))


@pytest.mark.parametrize("kwargs, name", [
    (dict(filters=[znc.Delta(dtype="<f4")]), "numcodecs.delta"),
    (dict(filters=[znc.BitRound(keepbits=3)]), "numcodecs.bitround"),
    (dict(filters=[znc.FixedScaleOffset(offset=0, scale=10, dtype="<f4", astype="<i4")]),
     "numcodecs.fixedscaleoffset"),
    (dict(filters=[znc.Quantize(digits=1, dtype="<f4")]), "numcodecs.quantize"),
    (dict(compressors=[znc.CRC32()]), "numcodecs.crc32"),
    (dict(compressors=[znc.Adler32()]), "numcodecs.adler32"),
    (dict(compressors=[znc.Fletcher32()]), "numcodecs.fletcher32"),
    (dict(compressors=[znc.Shuffle(elementsize=4)]), "numcodecs.shuffle"),
    (dict(compressors=[znc.BZ2()]), "numcodecs.bz2"),
])
def test_numcodecs_filters_and_checksums_are_refused_by_name(tmp_path, kwargs, name):
    write_stores(tmp_path, [np.arange(40, dtype="float32").reshape(20, 2)], chunks=(7, 2),
                 zarr_format=3, **kwargs)
    with pytest.raises(shardload.LayoutError, match=rf"unsupported codec '{name}'"):
        shardload.discover(tmp_path, format="zarr")


def _hard_linked_copy_with_one_chunk_rewritten(tmp_path, src, dst, kind, chunk, values,
                                               store="."):
    """`cp -al src dst`, then one chunk (or shard file) of dst replaced by a new file, as a
    writer publishes one (a new file renamed over it): every other file of dst is a hard link of
    src's, the metadata file's too, so each keeps its inode and its times."""
    subprocess.run(["cp", "-al", str(src), str(dst)], check=True)
    fresh = tmp_path / "fresh"
    _swap_store(fresh, values, kind)
    os.replace(fresh / chunk, dst / store / chunk)  # `store`: the store's place in dst
    shutil.rmtree(fresh)


def _swap_store(path, values, kind):
    if kind == "v3 sharded":
        z = zarr.create_array(str(path), shape=values.shape, chunks=(3, 4), shards=(6, 4),
                              dtype=values.dtype, compressors=None, zarr_format=3,
                              overwrite=True)
    else:
        z = zarr.open_array(str(path), mode="w", shape=values.shape, chunks=(3, 4),
                            dtype=values.dtype, zarr_format=2 if kind == "v2" else 3)
    z[...] = values


@pytest.mark.parametrize("kind", ["v2", "v3", "v3 sharded"])
@pytest.mark.parametrize("renamed", ["store", "array in a group", "directory of stores"])
def test_a_store_replaced_by_rename_with_a_hard_linked_copy_is_a_changed_error(
        tmp_path, kind, renamed):
    """A copy made with `cp -al` (or `rsync --link-dest`) before discovery, one chunk rewritten
    in it, renamed over the discovered store after discovery: its metadata file and its other
    chunks are the discovered files (hard links: same inodes, old times), the rewritten chunk
    a file older than discovery, so the copy's rows were read as the discovered store's, no
    error. The store's and the array's directories are other directories: the read refuses."""
    a = np.arange(40, dtype="float32").reshape(10, 4)
    chunk = {"v2": "1.0", "v3": "c/1/0", "v3 sharded": "c/0/0"}[kind]
    if renamed == "array in a group":
        group = tmp_path / "g.zarr"
        zarr.open_group(str(group), mode="w", zarr_format=2 if kind == "v2" else 3)
        _swap_store(group / "a", a, kind)
        _hard_linked_copy_with_one_chunk_rewritten(tmp_path, group / "a", group / "a_next", kind,
                                                   chunk, a + 1000)
        source, options, swapped = [group], {"dataset": "a"}, group / "a"
        store, new = group, group / "a_next"
    elif renamed == "store":
        _swap_store(tmp_path / "v1", a, kind)
        _hard_linked_copy_with_one_chunk_rewritten(tmp_path, tmp_path / "v1", tmp_path / "v2",
                                                   kind, chunk, a + 1000)
        (tmp_path / "v1").rename(tmp_path / "cur")
        source, options, swapped = tmp_path / "cur", {}, tmp_path / "cur"
        store, new = tmp_path / "cur", tmp_path / "v2"
    else:
        (tmp_path / "data").mkdir()
        _swap_store(tmp_path / "data" / "shard_0000.zarr", a, kind)
        _hard_linked_copy_with_one_chunk_rewritten(tmp_path, tmp_path / "data",
                                                   tmp_path / "data_next", kind, chunk, a + 1000,
                                                   store="shard_0000.zarr")
        source, options, swapped = tmp_path / "data", {}, tmp_path / "data"
        store, new = tmp_path / "data" / "shard_0000.zarr", tmp_path / "data_next"
    time.sleep(0.05)
    layout = shardload.discover(source, format="zarr", **options)
    time.sleep(0.05)
    np.testing.assert_array_equal(shardload.numpy.load(layout), a)
    swapped.rename(tmp_path / "old")
    new.rename(swapped)  # mv
    array = store / options.get("dataset", "")
    now = zarr.open_array(str(store), mode="r", path=options.get("dataset"))[...]
    assert not np.array_equal(now, a) and np.array_equal(now[6:], a[6:])  # the oracle
    changed = (array if renamed == "array in a group" else store).as_posix().rstrip("/")
    want = (r"changed since discovery: another directory than discovery found \(inode \d+ -> "
            r"\d+(, device \d+ -> \d+)?\): it was replaced")
    for read in (lambda: shardload.numpy.load(layout), lambda: layout.read(6, 10),
                 lambda: pickle.loads(pickle.dumps(layout)).read(0, 10)):
        with pytest.raises(shardload.ShardReadError, match=want) as e:
            read()
        assert changed in str(e.value)
    # Rediscovered, the store reads as it now is.
    np.testing.assert_array_equal(shardload.numpy.load(shardload.discover(
        source, format="zarr", **options)), now)


def test_a_store_read_after_a_chunk_is_written_beside_others_keeps_its_directories(tmp_path):
    """The directory rule holds the store's and the array's directories by identity, not by
    their times: a chunk written in place after discovery is refused by its own ctime, and the
    chunks beside it, in the same directory, still read."""
    a = np.arange(40, dtype="float32").reshape(10, 4)
    _swap_store(tmp_path / "s", a, "v2")
    time.sleep(0.05)
    layout = shardload.discover(tmp_path / "s", format="zarr")
    time.sleep(0.05)
    z = zarr.open_array(str(tmp_path / "s"), mode="r+")
    z[3:6] = a[3:6] + 1000
    with pytest.raises(shardload.ShardReadError, match=r"1\.0: changed since discovery: ctime"):
        layout.read(3, 6)
    np.testing.assert_array_equal(layout.read(0, 3), a[0:3])
    np.testing.assert_array_equal(layout.read(6, 10), a[6:10])


def test_a_manifest_keeps_the_directories_and_a_swap_after_discovery_is_refused(tmp_path):
    """A discovery from the manifest holds the directories the probe found (indexed, renamed,
    copied alike); the store swapped after it is refused as after probing."""
    a = np.arange(40, dtype="float32").reshape(10, 4)
    (tmp_path / "data").mkdir()
    _swap_store(tmp_path / "data" / "shard_0000.zarr", a, "v2")
    # Linked before indexing: a new hard link changes the linked file's ctime.
    _hard_linked_copy_with_one_chunk_rewritten(tmp_path, tmp_path / "data" / "shard_0000.zarr",
                                               tmp_path / "next", "v2", "1.0", a + 1000)
    shardload.index(tmp_path / "data", format="zarr")
    (tmp_path / "data").rename(tmp_path / "moved")  # a directory renamed keeps its identity
    time.sleep(0.05)
    for trust in (False, True):
        layout = shardload.discover(tmp_path / "moved", format="zarr", trust_manifest=trust)
        assert layout.manifest_state.value == ("trusted" if trust else "used")
        np.testing.assert_array_equal(shardload.numpy.load(layout), a)
    used = shardload.discover(tmp_path / "moved", format="zarr")
    trusted = shardload.discover(tmp_path / "moved", format="zarr", trust_manifest=True)
    (tmp_path / "moved" / "shard_0000.zarr").rename(tmp_path / "old")
    (tmp_path / "next").rename(tmp_path / "moved" / "shard_0000.zarr")
    for layout in (used, trusted):
        with pytest.raises(shardload.ShardReadError, match=r"shard_0000\.zarr: changed since "
                           r"discovery: another directory than discovery found"):
            shardload.numpy.load(layout)
    # A copy (cp -r): its manifest is still used, the layout holding the copy's directories.
    shutil.copytree(tmp_path / "moved", tmp_path / "copy")
    copied = shardload.discover(tmp_path / "copy", format="zarr")
    assert copied.manifest_state.value == "used"
    np.testing.assert_array_equal(shardload.numpy.load(copied),
                                  zarr.open_array(str(tmp_path / "copy" / "shard_0000.zarr"))[...])
