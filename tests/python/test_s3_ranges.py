"""Range coalescing (storage/detail/read_ranges.hpp) on the reader that asked a store for the
most small ranges of one object: a Zarr v3 shard's inner chunks over s3://. The inner chunks a
tile needs of one shard come in one ranged GET (they lie next to each other, as zarr-python
writes them), not one GET each; the rows equal zarr-python's, compressed or raw, whole or a
row range that starts and ends inside a shard. A counting proxy (s3_fault_proxy.py, injecting
nothing) in front of the tests' moto server counts the GETs."""

from __future__ import annotations

import numpy as np
import pytest

moto = pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
zarr = pytest.importorskip("zarr")

import shardload.numpy as snp  # noqa: E402

import s3_server  # noqa: E402
from s3_fault_proxy import FaultProxy  # noqa: E402

# Shards of 256 KiB (beyond the 64 KiB that a shard's open fetches), of 16 inner chunks of
# 16 KiB.
ROWS, COLS, SHARD_ROWS, CHUNK_ROWS = 8192, 32, 2048, 128
SHARDS = ROWS // SHARD_ROWS
INNER = SHARD_ROWS // CHUNK_ROWS  # inner chunks per shard: 16


@pytest.fixture
def proxy(server):
    with FaultProxy(server) as p:
        yield p


def _store(tmp_path, compressed: bool) -> np.ndarray:
    rng = np.random.default_rng(11)
    a = rng.standard_normal((ROWS, COLS)).astype("float32")  # incompressible
    z = zarr.create_array(store=str(tmp_path / "a.zarr"), shape=a.shape, dtype="float32",
                          shards=(SHARD_ROWS, COLS), chunks=(CHUNK_ROWS, COLS),
                          compressors=zarr.codecs.ZstdCodec(level=1) if compressed else None,
                          zarr_format=3)
    z[:] = a
    return zarr.open_array(str(tmp_path / "a.zarr"), mode="r")[:]


def _shard_gets(proxy: FaultProxy, store) -> tuple[int, int]:
    """(opens, GETs of inner chunks) of the shard objects: an open is the GET of an object's
    first 64 KiB, its index the GET of its last bytes; every other GET is of inner chunks."""
    opens = chunks = 0
    for method, target, range_, _ in proxy.log:
        if method != "GET" or "/a.zarr/c/" not in target:
            continue
        key = target[target.index("/a.zarr/") + len("/a.zarr/"):]
        size = (store / key).stat().st_size
        first, last = (int(x) for x in range_.removeprefix("bytes=").split("-"))
        if first == 0 and last == 65535:
            opens += 1
        elif last != size - 1:
            chunks += 1
    return opens, chunks


@pytest.mark.parametrize("compressed", [True, False], ids=["zstd", "raw"])
def test_a_shards_inner_chunks_come_in_one_get(tmp_path, server, proxy, compressed):
    want = _store(tmp_path, compressed)
    bucket = s3_server.Bucket(server, endpoint=proxy.endpoint)
    bucket.upload_tree("d/a.zarr", tmp_path / "a.zarr")
    got = snp.load(bucket.url("d/a.zarr"), threads=1, storage_options=bucket.options)
    np.testing.assert_array_equal(got, want)
    # Each open of a shard (its first 64 KiB: its first inner chunks), its index, then the
    # other inner chunks it reads in one GET (one each before: 12 per shard).
    opens, chunks = _shard_gets(proxy, tmp_path / "a.zarr")
    assert opens >= SHARDS
    assert chunks <= opens, proxy.log


def test_a_row_range_inside_shards_reads_its_chunks_in_one_get_per_open(tmp_path, server,
                                                                        proxy):
    want = _store(tmp_path, True)
    bucket = s3_server.Bucket(server, endpoint=proxy.endpoint)
    bucket.upload_tree("d/a.zarr", tmp_path / "a.zarr")
    lo, hi = SHARD_ROWS + 100, 3 * SHARD_ROWS - 7  # the end of shard 1, nearly all of shard 2
    got = snp.load(bucket.url("d/a.zarr"), threads=1, row_range=(lo, hi),
                   storage_options=bucket.options)
    np.testing.assert_array_equal(got, want[lo:hi])
    opens, chunks = _shard_gets(proxy, tmp_path / "a.zarr")
    assert opens >= 2
    assert chunks <= opens, proxy.log
