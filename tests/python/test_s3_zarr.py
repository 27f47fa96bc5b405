"""Zarr stores (v2 and v3) in an S3 bucket, read by key through Arrow's S3 client against a
real S3-compatible server (moto's server mode on 127.0.0.1), compared with zarr-python reading
the local originals."""

from __future__ import annotations

import pathlib
import subprocess
import threading
import time
import warnings

import numpy as np
import pytest

moto = pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
boto3 = pytest.importorskip("boto3")
zarr = pytest.importorskip("zarr")
numcodecs = pytest.importorskip("numcodecs")

import zarr.codecs as zc  # noqa: E402

import shardload  # noqa: E402
from shardload import _core  # noqa: E402

from s3_server import ARROWS_CLIENT, Bucket  # noqa: E402
from conftest import random_array  # noqa: E402
from s3_fault_proxy import FaultProxy, Rule  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=FutureWarning)


def write_store(path: pathlib.Path, a: np.ndarray, dataset: str | None = None,
                **kwargs) -> np.ndarray:
    """A local store holding `a`; what zarr-python reads back from it."""
    if dataset is None:
        z = zarr.create_array(str(path), shape=a.shape, dtype=a.dtype, **kwargs)
    else:
        rest = dict(kwargs)
        root = zarr.open_group(str(path), mode="w", zarr_format=rest.pop("zarr_format", 3))
        z = root.create_array(dataset, shape=a.shape, dtype=a.dtype, **rest)
    if a.size:
        z[...] = a
    return zarr.open_array(str(path), path=dataset or "", mode="r")[...]


def check_ranges(layout: shardload.Layout, expected: np.ndarray) -> None:
    expected = expected.astype(expected.dtype.newbyteorder("="))  # shardload gives native
    n = expected.shape[0]
    assert layout.shape == expected.shape
    assert layout.dtype == expected.dtype
    for lo, hi in [(0, n), (1, n - 1), (3, 4), (n // 3, 2 * n // 3 + 1), (n - 5, n), (5, 5)]:
        np.testing.assert_array_equal(layout.read(lo, hi), expected[lo:hi],
                                      err_msg=f"rows [{lo}, {hi})")


# Chunkings that do not divide the 23 rows or the trailing (5, 3): ragged edges everywhere.
CASES = {
    "v2-zstd": dict(zarr_format=2, chunks=(6, 2, 3), compressors=numcodecs.Zstd(level=3)),
    "v2-blosc": dict(zarr_format=2, chunks=(4, 5, 2),
                     compressors=numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.SHUFFLE)),
    "v2-gzip-slash-fortran-big": dict(zarr_format=2, chunks=(6, 2, 2), dtype=">f8",
                                      chunk_key_encoding={"name": "v2", "separator": "/"},
                                      order="F", compressors=numcodecs.GZip()),
    "v2-uncompressed": dict(zarr_format=2, chunks=(7, 5, 3), compressors=None),
    "v2-lz4": dict(zarr_format=2, chunks=(5, 4, 3), compressors=numcodecs.LZ4()),
    "v2-zlib": dict(zarr_format=2, chunks=(6, 5, 1), compressors=numcodecs.Zlib(level=2)),
    "v3-bytes": dict(zarr_format=3, chunks=(6, 2, 3), compressors=None),
    "v3-gzip+crc32c": dict(zarr_format=3, chunks=(5, 3, 2),
                           compressors=[zc.GzipCodec(level=4), zc.Crc32cCodec()]),
    "v3-blosc-big": dict(zarr_format=3, chunks=(4, 5, 3),
                         serializer=zc.BytesCodec(endian="big"),
                         compressors=zc.BloscCodec(cname="zstd", shuffle="bitshuffle")),
    "v3-sharded-end-zstd": dict(zarr_format=3, chunks=(4, 2, 3), shards=(8, 4, 3),
                                compressors=zc.ZstdCodec()),
    "v3-sharded-start": dict(zarr_format=3, chunks=(3, 5, 3),
                             shards={"shape": (9, 5, 3), "index_location": "start"},
                             compressors=None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_store_matches_zarr_python(tmp_path, bucket, case):
    kwargs = dict(CASES[case])
    dtype = kwargs.pop("dtype", "<f4")
    a = random_array(np.random.default_rng(len(case)), (23, 5, 3), dtype)
    want = write_store(tmp_path / "a.zarr", a, **kwargs)
    bucket.upload_tree("d/a.zarr", tmp_path / "a.zarr")
    # The options reach every metadata and chunk request: the bucket is on no other server.
    layout = shardload.discover(bucket.url("d/a.zarr"), storage_options=bucket.options)
    assert layout.format == "zarr"
    check_ranges(layout, want)


def test_load_store_detected_without_extension_and_row_range(tmp_path, bucket):
    a = random_array(np.random.default_rng(7), (41, 6), "int32")
    want = write_store(tmp_path / "s", a, zarr_format=3, chunks=(6, 4),
                       compressors=zc.ZstdCodec())
    bucket.upload_tree("data", tmp_path / "s")
    for source in ("data", "data/"):
        # Neither the name nor a first byte says Zarr: the zarr.json object does.
        got = shardload.load(bucket.url(source), storage_options=bucket.options,
                             row_range=(5, 38), overdecompose=3)
        np.testing.assert_array_equal(np.asarray(got), want[5:38])
    got = shardload.load(bucket.url("data"), storage_options=bucket.options, format="zarr")
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("fmt", [2, 3])
def test_several_stores_ragged_with_an_empty_one(tmp_path, bucket, fmt):
    rng = np.random.default_rng(11 + fmt)
    rows = [23, 0, 7, 40]
    want = []
    urls = []
    for i, r in enumerate(rows):
        name = f"shard_{i:04d}.zarr"
        want.append(write_store(tmp_path / name, random_array(rng, (r, 5), "float64"),
                                zarr_format=fmt, chunks=(6, 2), compressors=None if i % 2 else
                                (numcodecs.Zstd() if fmt == 2 else zc.ZstdCodec())))
        bucket.upload_tree(f"m/{name}", tmp_path / name)
        urls.append(bucket.url(f"m/{name}"))
    bucket.put("m/notes.txt", b"not a store")
    expected = np.concatenate(want)
    layout = shardload.discover(urls, storage_options=bucket.options)
    assert len(layout.paths) == 4
    check_ranges(layout, expected)
    got = shardload.load(urls, storage_options=bucket.options, row_range=(4, 66))
    np.testing.assert_array_equal(np.asarray(got), expected[4:66])
    # The stores as a directory (its one LIST sees their prefixes), a pattern and a glob.
    for source in ("m/", "m", "m/shard_{:04d}.zarr", "m/*.zarr"):
        layout = shardload.discover(bucket.url(source), storage_options=bucket.options)
        assert layout.format == "zarr" and len(layout.paths) == 4, source
        assert layout.paths[2].startswith(bucket.url("m/shard_0002.zarr")), layout.paths
        np.testing.assert_array_equal(layout.read(0, 70), expected, err_msg=source)
    got = shardload.load(bucket.url("m/"), storage_options=bucket.options, overdecompose=2)
    np.testing.assert_array_equal(np.asarray(got), expected)


def test_array_inside_a_group(tmp_path, bucket):
    a = random_array(np.random.default_rng(5), (19, 4, 2), "uint16")
    want = write_store(tmp_path / "g.zarr", a, dataset="grp/data", zarr_format=3,
                       chunks=(4, 3, 2))
    bucket.upload_tree("g.zarr", tmp_path / "g.zarr")
    # The options in the URL's query instead: they travel to the array's metadata and chunks.
    query = "&".join(f"{k}={v}" for k, v in bucket.options.items())
    layout = shardload.discover(bucket.url("g.zarr") + "?" + query, format="zarr",
                                dataset="grp/data")
    check_ranges(layout, want)


def test_cli_read_s3_store(tmp_path, bucket, cli):
    a = random_array(np.random.default_rng(8), (17, 4), "float32")
    write_store(tmp_path / "c.zarr", a, zarr_format=2, chunks=(5, 3),
                compressors=numcodecs.Zstd())
    bucket.upload_tree("c.zarr", tmp_path / "c.zarr")
    opts = [f"--storage-option=endpoint_override={bucket.endpoint}",
            "--storage-option", "scheme=http", "--storage-option", "region=us-east-1"]
    r = subprocess.run([str(cli), "inspect", bucket.url("c.zarr"), *opts],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "zarr" in r.stdout and "17" in r.stdout, r.stdout
    r = subprocess.run([str(cli), "read", bucket.url("c.zarr"), "--no-verify", *opts],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "17" in r.stdout and "remote retries: 0" in r.stdout, r.stdout


@pytest.mark.parametrize("fmt,shards", [(2, None), (3, None), (3, (8, 4))])
def test_missing_chunks_take_the_fill_value(tmp_path, bucket, fmt, shards):
    a = random_array(np.random.default_rng(3), (25, 6), "float32")
    extra = {"shards": shards} if shards else {}
    write_store(tmp_path / "f.zarr", a, zarr_format=fmt, chunks=(4, 4), fill_value=-2.5,
                **extra)
    # Chunk (or shard) objects removed in the middle and at the ragged edges.
    chunks = sorted(p for p in (tmp_path / "f.zarr").rglob("*")
                    if p.is_file() and not p.name.startswith((".z", "zarr.json")))
    assert len(chunks) >= 3
    for p in chunks[::2]:
        p.unlink()
    want = zarr.open_array(str(tmp_path / "f.zarr"), mode="r")[...]
    assert (want == -2.5).any()
    bucket.upload_tree("f.zarr", tmp_path / "f.zarr")
    layout = shardload.discover(bucket.url("f.zarr"), storage_options=bucket.options)
    check_ranges(layout, want)
    got = shardload.load(bucket.url("f.zarr"), storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_not_a_store_says_so(bucket):
    bucket.put("e/notes.txt", b"nothing")
    with pytest.raises(shardload.Error) as e:
        shardload.discover(bucket.url("e"), format="zarr", storage_options=bucket.options)
    assert bucket.url("e") in str(e.value)


@pytest.fixture
def proxied(server):
    """A bucket written straight to the server and read through a fault proxy. Its stores are
    named with a trailing '/': a prefix without it is first looked up as an object and as a
    prefix, and through the proxy that look-up stalls until the client's request timeout (a
    limit of the proxy, not of what is tested here)."""
    with FaultProxy(server) as proxy:
        yield Bucket(server, proxy.endpoint), proxy


def _chunked_store(tmp_path: pathlib.Path, b: Bucket) -> np.ndarray:
    a = random_array(np.random.default_rng(9), (20, 3), "float64")
    want = write_store(tmp_path / "p.zarr", a, zarr_format=2, chunks=(5, 3),
                       compressors=numcodecs.Zstd())
    b.upload_tree("p.zarr", tmp_path / "p.zarr")
    return want


@pytest.mark.parametrize("status", ["403", "410"])
def test_403_on_a_chunk_is_an_error_naming_it_never_the_fill_value(tmp_path, proxied, status):
    """A chunk refused (403) or gone (410: an object the server had, a link revoked) is an
    error naming it: only a 404 is a missing chunk, the fill value."""
    b, proxy = proxied
    want = _chunked_store(tmp_path, b)
    layout = shardload.discover(b.url("p.zarr/"), storage_options=b.options)
    # The chunk's one GET (its first bytes, size and ETag: the whole of this small chunk).
    rule = proxy.add(Rule("GET", path="p.zarr/2.0", ranged=True, action=status, count=None))
    with pytest.raises(shardload.Error) as e:
        layout.read(0, 20)
    assert b.url("p.zarr/2.0") in str(e.value), str(e.value)
    # A refused GET is not asked again.
    assert rule.fired == 1
    # Rows the refused chunk does not hold are read as they are.
    np.testing.assert_array_equal(layout.read(0, 10), want[:10])
    with pytest.raises(shardload.Error, match=r"p\.zarr/2\.0"):
        shardload.load(b.url("p.zarr/"), storage_options=b.options)


def test_persistent_503_on_a_chunk_is_an_error_never_the_fill_value(tmp_path, proxied):
    b, proxy = proxied
    _chunked_store(tmp_path, b)
    layout = shardload.discover(b.url("p.zarr/"), storage_options={**b.options,
                                                                  "max_attempts": "2",
                                                                  "backoff_ms": "1"})
    proxy.add(Rule("GET", path="p.zarr/1.0", ranged=True, action="503", count=None))
    with pytest.raises(shardload.Error) as e:
        layout.read(0, 20)
    assert b.url("p.zarr/1.0") in str(e.value) and "gave up after 2 attempts" in str(e.value)


def test_chunk_overwritten_while_it_is_read_is_an_error(tmp_path, proxied):
    b, proxy = proxied
    # Chunks of 8,400,000 bytes: more than the most (8 MiB) that a chunk's open asks for, so
    # that the rest is a second GET.
    a = random_array(np.random.default_rng(6), (8, 210_000), "float64")
    write_store(tmp_path / "w.zarr", a, zarr_format=2, chunks=(5, 210_000), compressors=None)
    b.upload_tree("w.zarr", tmp_path / "w.zarr")
    layout = shardload.discover(b.url("w.zarr/"), storage_options=b.options)
    # The chunk's second GET is held at the proxy (the first, at its open, has been answered)
    # until the object has been replaced by one of the same size; then the held request is
    # reset and the retry's answer carries the new ETag, which differs from the open's.
    rule = proxy.add(Rule("GET", path="w.zarr/1.0", range=f"bytes={8 << 20}-", action="delay",
                          delay_s=300))

    def replace() -> None:
        if not _wait_for(lambda: rule.fired > 0):
            return  # the read below fails the test
        b.put("w.zarr/1.0", np.full((5, 210_000), 7.0).tobytes())
        proxy._closing.set()  # ends the held delay now (with a reset), as close() does

    t = threading.Thread(target=replace)
    t.start()
    try:
        with pytest.raises(shardload.Error) as e:
            layout.read(0, 8)
    finally:
        t.join()
    msg = str(e.value)
    assert b.url("w.zarr/1.0") in msg and "changed" in msg, msg


@pytest.mark.parametrize("compressed", [False, True])
def test_each_chunk_object_is_one_get(tmp_path, proxied, compressed):
    """A chunk object's open asks for as many bytes as its chunk decodes to, so the object
    arrives whole, with its size and ETag, in one GET: no HEAD and no second GET, for chunks
    over four times the first bytes (64 KiB) that a shard object's open asks for."""
    b, proxy = proxied
    a = random_array(np.random.default_rng(14), (40, 4000), "float64")
    want = write_store(tmp_path / "g.zarr", a, zarr_format=2, chunks=(10, 4000),
                       compressors=numcodecs.Zstd() if compressed else None)
    keys = [k for k in b.upload_tree("g.zarr", tmp_path / "g.zarr")
            if not k.rsplit("/", 1)[-1].startswith(".z")]
    assert len(keys) == 4
    sizes = [(tmp_path / k).stat().st_size for k in keys]
    assert min(sizes) > 4 * 65536, sizes
    layout = shardload.discover(b.url("g.zarr/"), storage_options=b.options)
    proxy.clear()
    np.testing.assert_array_equal(layout.read(0, 40), want)
    np.testing.assert_array_equal(layout.read(15, 25), want[15:25])
    for k in keys:
        assert proxy.requests("HEAD", k) == 0, k
    # Rows [15, 25) need chunks 1 and 2 again: two GETs of theirs in all.
    assert [proxy.requests("GET", k) for k in keys] == [1, 2, 2, 1]


def test_metadata_overwritten_after_discovery_is_an_error(tmp_path, bucket):
    a = random_array(np.random.default_rng(4), (12, 3), "float32")
    write_store(tmp_path / "o.zarr", a, zarr_format=2, chunks=(5, 3), compressors=None)
    bucket.upload_tree("o.zarr", tmp_path / "o.zarr")
    layout = shardload.discover(bucket.url("o.zarr"), storage_options=bucket.options)
    meta = (tmp_path / "o.zarr" / ".zarray").read_bytes()
    # The same size, other bytes: only the ETag tells.
    bucket.put("o.zarr/.zarray", meta.replace(b'"<f4"', b'"<i4"'))
    with pytest.raises(shardload.Error) as e:
        layout.read(0, 12)
    assert bucket.url("o.zarr/.zarray") in str(e.value) and "changed" in str(e.value)


# Fetching ahead: a read of many chunk objects keeps several of them in flight
# (chunks_in_flight, a key of the store's options; 8 by default).

def _many_chunks_store(tmp_path: pathlib.Path, b: Bucket, name: str, fmt: int = 2,
                       drop: int = 0, **kwargs) -> tuple[np.ndarray, list[str]]:
    """A store of 61 x 7 float64 in chunks of 3 x 4 (21 x 2 chunk objects, or 6 shards of
    4 x 2 inner chunks), `drop` chunk objects removed (the fill value); what zarr-python
    reads, and the chunk keys left."""
    a = random_array(np.random.default_rng(21), (61, 7), kwargs.pop("dtype", "<f8"))
    kwargs.setdefault("compressors", numcodecs.Zstd() if fmt == 2 else zc.ZstdCodec())
    write_store(tmp_path / name, a, zarr_format=fmt, chunks=(3, 4), fill_value=-1.5, **kwargs)
    chunks = sorted(p for p in (tmp_path / name).rglob("*")
                    if p.is_file() and not p.name.startswith((".z", "zarr.json")))
    assert len(chunks) == (6 if "shards" in kwargs else 42)
    for p in chunks[5:5 + 7 * drop:7]:  # spread over the array
        p.unlink()
    want = zarr.open_array(str(tmp_path / name), mode="r")[...]
    if drop:
        assert (want == -1.5).any()
    keys = b.upload_tree(name, tmp_path / name)
    return want, [k for k in keys if not k.rsplit("/", 1)[-1].startswith((".z", "zarr.json"))]


@pytest.mark.parametrize("case,in_flight", [
    ("v2-zstd", None), ("v2-zstd", "1"), ("v3-zstd", "3"), ("v2-uncompressed", "64"),
    ("v2-fortran-big", "5"), ("v3-uncompressed-big", None), ("v3-sharded", None),
    ("v3-sharded-uncompressed-start", "2")])
def test_many_chunks_in_flight_with_missing_ones_match_zarr_python(tmp_path, bucket, case,
                                                                    in_flight):
    kwargs = {"v2-zstd": {}, "v3-zstd": dict(fmt=3),
              "v2-uncompressed": dict(compressors=None),
              "v2-fortran-big": dict(order="F", dtype=">f8"),
              "v3-uncompressed-big": dict(fmt=3, compressors=None,
                                          serializer=zc.BytesCodec(endian="big")),
              "v3-sharded": dict(fmt=3, shards=(12, 8)),
              "v3-sharded-uncompressed-start": dict(
                  fmt=3, compressors=None,
                  shards={"shape": (12, 8), "index_location": "start"})}[case]
    want, _ = _many_chunks_store(tmp_path, bucket, "many.zarr", drop=3, **kwargs)
    options = dict(bucket.options)
    if in_flight:
        options["chunks_in_flight"] = in_flight
    layout = shardload.discover(bucket.url("many.zarr"), storage_options=options)
    # Whole chunks straight into place, chunks cut by the range (decoded aside), and one row.
    check_ranges(layout, want)
    for lo, hi in [(2, 59), (30, 31)]:
        np.testing.assert_array_equal(layout.read(lo, hi), want[lo:hi].astype("=f8"))
    got = shardload.load(bucket.url("many.zarr"), storage_options=options, overdecompose=2)
    np.testing.assert_array_equal(np.asarray(got), want.astype("=f8"))


def test_bad_chunks_in_flight_is_an_error_naming_the_url(bucket):
    with pytest.raises(ValueError) as e:
        shardload.discover(bucket.url("x.zarr"), storage_options={**bucket.options,
                                                                   "chunks_in_flight": "0"})
    assert "chunks_in_flight must be an integer from 1 to 64, found '0'" in str(e.value)
    assert bucket.url("x.zarr") in str(e.value)


def _wait_for(cond, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_chunks_are_fetched_while_the_first_is_held(tmp_path, proxied):
    """The first chunk's GET is held at the proxy: the others' GETs arrive meanwhile (one by
    one, the read would wait on the first). Then the held GET is reset and asked again (by
    the client on its own, uncounted: see docs/object_storage.md); a 503 on another chunk,
    made on a helper thread, is retried and counted; every byte matches zarr-python."""
    b, proxy = proxied
    want, keys = _many_chunks_store(tmp_path, b, "h.zarr")
    first = keys[0]  # "h.zarr/0.0": the first chunk any read of row 0 decodes
    rule = proxy.add(Rule("GET", path=first, ranged=True, action="delay", delay_s=300))
    unavailable = proxy.add(Rule("GET", path=keys[9], ranged=True, action="503", count=1))
    others = [k for k in keys if k != first]
    seen_others = []

    def release() -> None:
        seen_others.append(_wait_for(lambda: rule.fired == 1 and sum(
            proxy.requests("GET", k) > 0 for k in others) >= 3))
        proxy._closing.set()  # resets the held GET now; the client asks again

    # request_timeout: the held GET is not given up on by the client while the test waits.
    layout = shardload.discover(b.url("h.zarr/"), storage_options={
        **b.options, "chunks_in_flight": "4", "request_timeout": "600"})
    retries = _core.remote_retries()
    t = threading.Thread(target=release)
    t.start()
    try:
        got = layout.read(0, 61)  # one read on this thread: no other tile to fetch meanwhile
    finally:
        t.join()
    assert seen_others == [True], "no other chunk was fetched while the first was held"
    np.testing.assert_array_equal(got, want)
    assert unavailable.fired == 1 and _core.remote_retries() > retries


@pytest.mark.parametrize("method", ["HEAD", "GET"])
def test_a_refused_chunk_among_many_in_flight_is_an_error_naming_it(tmp_path, proxied, method):
    b, proxy = proxied
    if method == "HEAD":
        # Chunks have HEADs on Arrow's path only; the signed path reads a chunk by its GETs
        # alone.
        b.options = {**b.options, **ARROWS_CLIENT}
    want, keys = _many_chunks_store(tmp_path, b, "r.zarr", drop=2)
    bad = keys[len(keys) // 2]
    # The first chunk is held until the refusal has happened, so that the refused chunk's
    # requests are made while others are in flight and before the read reaches it.
    hold = proxy.add(Rule("GET", path=keys[0], ranged=True, action="delay", delay_s=300))
    refuse = proxy.add(Rule(method, path=bad, ranged=True if method == "GET" else None,
                            action="403", count=None))
    released = []

    def release() -> None:
        released.append(_wait_for(lambda: hold.fired == 1 and refuse.fired >= 1))
        proxy._closing.set()

    t = threading.Thread(target=release)
    t.start()
    # request_timeout: the held GET is not given up on by the client while the test waits.
    layout = shardload.discover(b.url("r.zarr/"), storage_options={**b.options,
                                                                  "request_timeout": "600"})
    try:
        with pytest.raises(shardload.Error) as e:
            layout.read(0, 61)
    finally:
        t.join()
    assert released == [True]
    msg = str(e.value)
    assert b.url(bad) in msg, msg
    assert not any(b.url(k) in msg for k in keys if k != bad), msg
    # The process goes on: rows the refused chunk does not hold are read as they are, and a
    # load over it fails the same way.
    row = int(bad.rsplit("/", 1)[-1].split(".")[0]) * 3
    np.testing.assert_array_equal(layout.read(0, row), want[:row])
    np.testing.assert_array_equal(layout.read(row + 3, 61), want[row + 3:])
    with pytest.raises(shardload.Error, match=bad.replace(".", r"\.")):
        shardload.load(b.url("r.zarr/"), storage_options=b.options)
