"""HDF5 shards in an S3 bucket (moto's server mode on 127.0.0.1) and on an HTTP server, read
through shardload's HDF5 file driver over ranged GETs, compared with h5py reading the local
originals."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

moto = pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
boto3 = pytest.importorskip("boto3")
h5py = pytest.importorskip("h5py")

import shardload  # noqa: E402

from s3_server import Bucket  # noqa: E402
from s3_fault_proxy import FaultProxy, Rule  # noqa: E402

# (h5py dataset keywords, dtype): contiguous, chunked, deflate, shuffle + deflate, big-endian.
LAYOUTS = {
    "contiguous": ({}, "<f4"),
    "chunked": ({"chunks": (5, 3)}, "<i8"),
    "gzip": ({"chunks": (4, 3), "compression": "gzip"}, "<f8"),
    "shuffle": ({"chunks": (7, 3), "compression": "gzip", "shuffle": True}, "<u2"),
    "bigendian": ({"chunks": (6, 3)}, ">f4"),
}


def write_shards(tmp: pathlib.Path, rows: list[int], kw: dict, dtype: str,
                 rng: np.random.Generator, name: str = "x") -> list[pathlib.Path]:
    paths = []
    for i, n in enumerate(rows):
        a = (rng.standard_normal((n, 3)) * 1000).astype(dtype)
        p = tmp / f"shard_{i:04d}.h5"
        with h5py.File(p, "w") as f:
            # maxshape lets a chunk be longer than a short shard, as an appended file's is.
            extra = {"maxshape": (None, 3)} if "chunks" in kw else {}
            f.create_dataset(name, data=a, **(kw if n else {}), **(extra if n else {}))
        paths.append(p)
    return paths


def oracle(paths: list[pathlib.Path], name: str = "x") -> np.ndarray:
    parts = []
    for p in paths:
        with h5py.File(p, "r") as f:
            parts.append(f[name][...])
    return np.concatenate(parts).astype(parts[0].dtype.newbyteorder("="))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_ragged_shards_match_h5py(bucket, tmp_path, layout):
    kw, dtype = LAYOUTS[layout]
    rng = np.random.default_rng(len(layout))
    paths = write_shards(tmp_path, [23, 0, 1, 40, 9], kw, dtype, rng)
    for p in paths:
        bucket.upload(f"d/{p.name}", p)
    want = oracle(paths)
    src = bucket.url("d/")
    layout_ = shardload.discover(src, storage_options=bucket.options)
    assert layout_.format == "hdf5" and layout_.total_rows == want.shape[0]
    np.testing.assert_array_equal(np.asarray(shardload.load(src, storage_options=bucket.options)),
                                  want)
    # Rows that start and end inside chunks, across objects.
    np.testing.assert_array_equal(layout_.read(3, 66), want[3:66])
    got = shardload.load(src, storage_options=bucket.options, row_range=(22, 70))
    np.testing.assert_array_equal(np.asarray(got), want[22:70])


def test_named_dataset_in_a_file_of_several(bucket, tmp_path):
    rng = np.random.default_rng(3)
    for i, n in enumerate([12, 5]):
        with h5py.File(tmp_path / f"s{i}.h5", "w") as f:
            f.create_dataset("grp/a", data=rng.integers(0, 9, (n, 2)), chunks=(4, 2))
            f.create_dataset("b", data=np.arange(n * 4.0).reshape(n, 4))
        bucket.upload(f"m/s{i}.h5", tmp_path / f"s{i}.h5")
    urls = [bucket.url(f"m/s{i}.h5") for i in range(2)]
    want = oracle([tmp_path / "s0.h5", tmp_path / "s1.h5"], "grp/a")
    got = shardload.load(urls, storage_options=bucket.options, dataset="grp/a")
    np.testing.assert_array_equal(np.asarray(got), want)
    with pytest.raises(shardload.LayoutError, match="expected exactly one dataset") as e:
        shardload.discover(urls, storage_options=bucket.options)
    assert urls[0] in str(e.value)


def test_a_truncated_object_is_a_clear_error(bucket, tmp_path):
    paths = write_shards(tmp_path, [50], {"chunks": (10, 3)}, "<f8", np.random.default_rng(4))
    data = paths[0].read_bytes()
    bucket.put("t/shard_0000.h5", data[: len(data) // 2])
    url = bucket.url("t/shard_0000.h5")
    with pytest.raises(shardload.Error) as e:
        shardload.load(url, storage_options=bucket.options)
    assert url in str(e.value), str(e.value)


def test_object_overwritten_after_discover_is_an_error(bucket, tmp_path):
    rng = np.random.default_rng(5)
    paths = write_shards(tmp_path, [16, 16], {"chunks": (4, 3)}, "<f4", rng)
    for p in paths:
        bucket.upload(f"d/{p.name}", p)
    layout = shardload.discover(bucket.url("d/"), storage_options=bucket.options)
    (tmp_path / "other").mkdir()
    other = write_shards(tmp_path / "other", [16], {"chunks": (4, 3)}, "<f4", rng)[0]
    bucket.upload("d/shard_0001.h5", other)  # other values, same rows
    with pytest.raises(shardload.ShardReadError) as e:
        layout.read(0, 32)
    assert bucket.url("d/shard_0001.h5") in str(e.value) and "changed" in str(e.value)


def test_reads_are_ranged_and_retried(server, tmp_path):
    """No object is fetched whole: a tile reads the file's metadata and the chunks of its
    rows by ranged GETs; a 500 on one of them is retried and counted."""
    with FaultProxy(server) as proxy:
        b = Bucket(server, proxy.endpoint)
        b.options.update({"max_attempts": "4", "backoff_ms": "5", "max_backoff_ms": "50"})
        # Chunks of about 100 KB (4,000 rows x 3 float64 per chunk), 2.4 MB in all.
        paths = write_shards(tmp_path, [100_000], {"chunks": (4000, 3), "compression": "gzip"},
                             "<f8", np.random.default_rng(6))
        b.upload("r/shard_0000.h5", paths[0])
        want = oracle(paths)
        layout = shardload.discover(b.url("r/"), storage_options=b.options)
        proxy.clear()
        got = layout.read(50_000, 54_000)  # one chunk's rows, in two chunks
        np.testing.assert_array_equal(got, want[50_000:54_000])
        gets = [r for r in proxy.log if r[0] == "GET" and "shard_0000.h5" in r[1]]
        assert gets and all(r[2] is not None for r in gets), proxy.log  # every GET ranged
        size = paths[0].stat().st_size
        fetched = sum(int(r[2].split("-")[1]) - int(r[2].split("=")[1].split("-")[0]) + 1
                      for r in gets)
        assert fetched < size / 2, (fetched, size, [r[2] for r in gets])
        rule = proxy.add(Rule("GET", path="shard_0000.h5", ranged=True, action="500", count=2))
        got, info = shardload.load(b.url("r/"), storage_options=b.options, info=True)
        np.testing.assert_array_equal(np.asarray(got), want)
        assert rule.fired == 2 and info.remote_retries >= 2


@pytest.mark.parametrize("userblock", [0, 1024])
def test_contiguous_rows_are_ranged_reads_of_their_bytes_only(server, tmp_path, userblock):
    """A contiguous dataset loads as a .npy does: its rows' bytes, where discovery found
    them, and nothing of the file's HDF5 metadata."""
    with FaultProxy(server) as proxy:
        b = Bucket(server, proxy.endpoint)
        rng = np.random.default_rng(8)
        a = rng.standard_normal((20_000, 6)).astype(">f8")
        path = tmp_path / "shard_0000.h5"
        with h5py.File(path, "w", userblock_size=userblock) as f:
            f.create_dataset("x", data=a)
            offset = f["x"].id.get_offset()
        b.upload("c/shard_0000.h5", path)
        layout = shardload.discover(b.url("c/"), storage_options=b.options)
        row = 6 * 8
        for lo, hi in [(0, 20_000), (1234, 5678), (19_999, 20_000)]:
            proxy.clear()
            np.testing.assert_array_equal(layout.read(lo, hi), a[lo:hi].astype("=f8"))
            spans = [tuple(int(x) for x in r[2].split("=")[1].split("-"))
                     for r in proxy.log if r[0] == "GET" and "shard_0000.h5" in r[1]]
            assert spans, proxy.log
            assert all(offset + lo * row <= s and e < offset + hi * row for s, e in spans), (
                offset, spans)
            assert sum(e - s + 1 for s, e in spans) == (hi - lo) * row, spans
        got = shardload.load(b.url("c/"), storage_options=b.options, overdecompose=3)
        np.testing.assert_array_equal(np.asarray(got), a.astype("=f8"))


@pytest.mark.parametrize("userblock", [0, 2048])
def test_gzip_chunks_after_a_userblock_match_h5py(bucket, tmp_path, userblock):
    """gzip chunks fetched by their addresses outside HDF5's lock (checked against HDF5's own
    read of the first one, which a user block could make differ): the same rows as h5py's,
    every chunk whole, at tiles that cut chunks."""
    rng = np.random.default_rng(11 + userblock)
    arrays = [np.round(rng.standard_normal((n, 5)) * 100).astype("<f4") for n in (3001, 1, 2500)]
    for i, a in enumerate(arrays):
        path = tmp_path / f"shard_{i:04d}.h5"
        with h5py.File(path, "w", userblock_size=userblock) as f:
            f.create_dataset("x", data=a, chunks=(128, 5), compression="gzip", shuffle=i == 2,
                             maxshape=(None, 5))
        bucket.upload(f"g/{path.name}", path)
    want = np.concatenate(arrays)
    src = bucket.url("g/")
    layout = shardload.discover(src, storage_options=bucket.options)
    for lo, hi in [(0, len(want)), (100, 3100), (3000, 3002), (5000, len(want))]:
        np.testing.assert_array_equal(layout.read(lo, hi), want[lo:hi])
    got = shardload.load(src, storage_options=bucket.options, overdecompose=4)
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("index", [0, 2])
def test_a_corrupt_gzip_chunk_is_an_error_naming_it(bucket, tmp_path, index):
    """A damaged chunk fetched outside HDF5 (the first, also read by HDF5 for the address
    check, or a later one): an error naming the object and the chunk's rows, never data."""
    from conftest import corrupt_hdf5_chunk

    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(4000, dtype=np.int64), chunks=(1000,),
                         compression="gzip")
    corrupt_hdf5_chunk(path, "x", index)
    bucket.upload("bad/shard_0000.h5", path)
    url = bucket.url("bad/shard_0000.h5")
    layout = shardload.discover(url, storage_options=bucket.options)
    with pytest.raises(shardload.ShardReadError) as e:
        layout.read(500, 3500)
    rows = f"chunk of rows [{index * 1000}, {index * 1000 + 1000})"
    assert url in str(e.value) and rows in str(e.value) and "deflate" in str(e.value), e.value


def test_discovery_reads_each_object_once(server, tmp_path):
    """A probe's one request (made before HDF5's lock is taken) brings the object's first
    bytes, the superblock and object headers among them: one GET per object, none whole."""
    with FaultProxy(server) as proxy:
        b = Bucket(server, proxy.endpoint)
        rng = np.random.default_rng(9)
        paths = []
        for layout in ("contiguous", "gzip", "chunked"):
            kw, _ = LAYOUTS[layout]
            (tmp_path / layout).mkdir()
            paths += write_shards(tmp_path / layout, [40_000], kw, "<f8", rng)
        for i, p in enumerate(paths):
            b.upload(f"o/shard_{i:04d}.h5", p)
        proxy.clear()
        layout_ = shardload.discover([b.url(f"o/shard_{i:04d}.h5") for i in range(3)],
                                     storage_options=b.options)
        assert layout_.shard_rows == [40_000] * 3
        gets = sorted((r[1].split("?")[0].rsplit("/", 1)[1], r[2]) for r in proxy.log
                      if r[0] == "GET")
        assert gets == [(f"shard_{i:04d}.h5", "bytes=0-262143") for i in range(3)], proxy.log
        assert all(p.stat().st_size > 262144 for p in paths)


def test_refused_read_names_the_url(server, tmp_path):
    with FaultProxy(server) as proxy:
        b = Bucket(server, proxy.endpoint)
        paths = write_shards(tmp_path, [30], {"chunks": (10, 3)}, "<f4",
                             np.random.default_rng(8))
        b.upload("f/shard_0000.h5", paths[0])
        layout = shardload.discover(b.url("f/"), storage_options=b.options)
        proxy.add(Rule("GET", path="shard_0000.h5", ranged=True, action="403", count=None))
        with pytest.raises(shardload.ShardReadError) as e:
            layout.read(0, 30)
        assert b.url("f/shard_0000.h5") in str(e.value), str(e.value)


def test_external_storage_is_refused_by_name(bucket, tmp_path):
    a = np.arange(24, dtype="<f4").reshape(8, 3)
    a.tofile(tmp_path / "raw.bin")
    with h5py.File(tmp_path / "e.h5", "w") as f:
        f.create_dataset("x", shape=a.shape, dtype=a.dtype,
                         external=[(str(tmp_path / "raw.bin"), 0, a.nbytes)])
    bucket.upload("e/e.h5", tmp_path / "e.h5")
    bucket.upload("e/raw.bin", tmp_path / "raw.bin")
    url = bucket.url("e/e.h5")
    with pytest.raises(shardload.LayoutError, match="external storage files") as e:
        shardload.discover(url, storage_options=bucket.options)
    assert url in str(e.value)


@pytest.mark.parametrize("source", ["absolute", "relative", "beside it"])
def test_a_virtual_dataset_is_refused_naming_its_source_files(bucket, tmp_path, source):
    """A virtual dataset's data is in its source files, which HDF5 opens itself by a local
    name: from object storage none opens, and HDF5 gave the fill value for every element
    (-1s where h5py reads the sources' 0, 7, 14, ...), the sources' objects beside it or not.
    Refused as external storage is."""
    a = np.arange(100.0) * 7
    with h5py.File(tmp_path / "src.h5", "w") as f:
        f["x"] = a
    name = str(tmp_path / "src.h5") if source == "absolute" else "src.h5"
    layout = h5py.VirtualLayout(shape=(100,), dtype="f8")
    layout[:] = h5py.VirtualSource(name, "x", shape=(100,))
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_virtual_dataset("x", layout, fillvalue=-1)
    with h5py.File(tmp_path / "v.h5", "r") as f:
        np.testing.assert_array_equal(f["x"][()], a)  # locally, h5py reads the sources
    bucket.upload("v/v.h5", tmp_path / "v.h5")
    if source == "beside it":
        bucket.upload("v/src.h5", tmp_path / "src.h5")
    url = bucket.url("v/v.h5")
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(url, storage_options=bucket.options).read()
    msg = str(e.value)
    assert (url in msg and "virtual dataset" in msg and "src.h5" in msg
            and "not read from object storage" in msg), msg


def _write_unnormalised(path: pathlib.Path, a: np.ndarray, storage: str) -> None:
    """`a` stored as IEEE float32 with an unnormalised mantissa (H5T_NORM_NONE): IEEE's fields,
    other bits; h5py's low-level API, HDF5 converting on the way."""
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_norm(h5py.h5t.NORM_NONE)
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        if storage == "gzip":
            dcpl.set_chunk((4,) + a.shape[1:])
            dcpl.set_deflate(1)
        ds = h5py.h5d.create(f.id, b"x", t, h5py.h5s.create_simple(a.shape), dcpl=dcpl)
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(a))


@pytest.mark.parametrize("storage", ["contiguous", "gzip"])
def test_unnormalised_floats_match_h5py(bucket, tmp_path, storage):
    """Neither remote direct path (contiguous rows by ranged GETs, gzip chunks fetched and
    inflated outside HDF5) takes a float type whose bits are not IEEE's: 1.0, 2.0, 3.5, not
    1.5, 3.0, 3.75."""
    rng = np.random.default_rng(40)
    # Values of few mantissa bits: an unnormalised mantissa spends one bit on the leading 1.
    a = np.concatenate([[1.0, 2.0, 3.5], rng.integers(-4000, 4000, 3 * 9 - 3) / 8])
    a = a.astype("<f4").reshape(9, 3)
    path = tmp_path / "shard_0000.h5"
    _write_unnormalised(path, a, storage)
    want = oracle([path])
    np.testing.assert_array_equal(want, a)
    bucket.upload(f"n/{storage}/shard_0000.h5", path)
    src = bucket.url(f"n/{storage}/")
    layout = shardload.discover(src, storage_options=bucket.options)
    np.testing.assert_array_equal(layout.read(0, 1)[0], [1.0, 2.0, 3.5])
    np.testing.assert_array_equal(layout.read(), want)
    np.testing.assert_array_equal(layout.read(2, 7), want[2:7])
    np.testing.assert_array_equal(np.asarray(shardload.load(src, storage_options=bucket.options)),
                                  want)


def test_a_contiguous_dataset_recording_less_storage_than_its_elements_is_refused(
        bucket, tmp_path):
    """The remote driver read a contiguous dataset whose layout records 64 of its 96 bytes
    with zeros in its last rows; it is refused at discovery, naming the URL and the dataset."""
    from test_hdf5 import shrink_contiguous_record

    a = np.arange(1, 25, dtype="<f4").reshape(6, 4)
    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("x", data=a)
    shrink_contiguous_record(path, 64)
    bucket.upload("short/shard_0000.h5", path)
    url = bucket.url("short/shard_0000.h5")
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(url, storage_options=bucket.options)
    assert url.split("?")[0] in str(e.value), str(e.value)
    assert ("dataset '/x': its contiguous storage holds 64 bytes, where its elements need 96"
            in str(e.value)), str(e.value)


@pytest.mark.parametrize("storage", ["contiguous", "chunked", "gzip"])
def test_storage_past_the_end_of_the_object_is_an_error(bucket, tmp_path, storage):
    """An object cut short whose superblock says it ends there: the dataset's storage runs past
    the end. h5py refuses it; shardload did not (contiguous rows read past the end as zeros
    through the remote driver): discovery (contiguous) or the read (the chunk) is refused,
    naming the URL and the dataset."""
    a = np.arange(1, 1001, dtype="<f4").reshape(250, 4)
    path = tmp_path / "shard_0000.h5"
    kw = {} if storage == "contiguous" else {"chunks": (50, 4)}
    if storage == "gzip":
        kw["compression"] = "gzip"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=a, **kw)
    raw = bytearray(path.read_bytes())
    assert raw[8] == 0 and int.from_bytes(raw[40:48], "little") == len(raw)  # superblock v0
    raw = raw[:-200]
    raw[40:48] = len(raw).to_bytes(8, "little")  # its end-of-file address
    path.write_bytes(bytes(raw))
    with pytest.raises((OSError, KeyError)):  # h5py: KeyError when the dataset will not open
        with h5py.File(path, "r") as f:
            f["x"][...]
    bucket.put(f"p/{storage}/shard_0000.h5", bytes(raw))
    url = bucket.url(f"p/{storage}/shard_0000.h5")
    if storage == "contiguous":
        with pytest.raises(shardload.LayoutError) as e:
            shardload.discover(url, storage_options=bucket.options)
        assert url.split("?")[0] in str(e.value), str(e.value)
        assert "dataset '/x': its contiguous storage (4000 bytes at offset" in str(e.value)
        assert f"runs past the end of the file ({len(raw)} bytes)" in str(e.value), str(e.value)
        return
    layout = shardload.discover(url, storage_options=bucket.options)
    np.testing.assert_array_equal(layout.read(0, 200), a[:200])
    with pytest.raises(shardload.ShardReadError) as e:
        layout.read(150, 250)
    assert url.split("?")[0] in str(e.value), str(e.value)
    assert "dataset '/x': its chunk at (200, 0) (" in str(e.value), str(e.value)
    assert "runs past the end of the file" in str(e.value), str(e.value)


@pytest.mark.parametrize("where", ["in the first window", "past the first window"])
def test_a_chunk_layout_whose_element_size_lies_is_refused(bucket, tmp_path, where):
    """The chunk layout's element size read from the object header of an object in object
    storage: from the first bytes fetched before HDF5 opens it, or by a ranged read where the
    header lies after 256 KiB of another dataset. Refused naming the URL, as locally (before:
    the last chunk read past the end of the object as zeros)."""
    from test_hdf5 import lie_about_chunk_element_size

    path = tmp_path / "shard_0000.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("big", data=np.zeros(40_000))  # 320,000 bytes
    # Created after a reopen, /x's header is allocated after the big dataset's data.
    with h5py.File(path, "w" if where == "in the first window" else "a") as f:
        f.create_dataset("x", data=np.arange(1000.0), chunks=(100,))
    header = path.read_bytes().find(bytes([3, 2, 2]))  # /x's layout message
    assert (header > 256 * 1024) == (where == "past the first window"), header
    lie_about_chunk_element_size(path, 16)
    bucket.put(f"p/{where[:4]}/shard_0000.h5", path.read_bytes())
    url = bucket.url(f"p/{where[:4]}/shard_0000.h5")
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(url, dataset="x", storage_options=bucket.options)
    assert url.split("?")[0] in str(e.value), str(e.value)
    assert ("dataset '/x': its chunk layout records elements of 16 bytes, where its type's are 8"
            in str(e.value)), str(e.value)
