"""Range coalescing (storage/detail/read_ranges.hpp) on HDF5 gzip chunks in object storage: a
piece's stored chunks are declared to the storage layer as byte ranges, so chunks that lie
near each other in the object (as HDF5 allocates them, one after another) come in the GETs
that the coalescing rule merges them into (8 KiB holes, 32 MiB requests), not in one GET each.
Chunks that are not stored (their rows read as the fill value) or that skipped their filter,
between stored ones, are read by HDF5 itself; the rows equal h5py's bit for bit, chunks written
in order or in reverse order, over s3:// (moto behind a counting proxy) and over http://."""

from __future__ import annotations

import contextlib
import io
import pathlib
import zlib
from typing import Iterator

import numpy as np
import pytest

moto = pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
h5py = pytest.importorskip("h5py")

import shardload  # noqa: E402
import shardload.numpy as snp  # noqa: E402

import s3_server  # noqa: E402
from s3_fault_proxy import FaultProxy  # noqa: E402
from test_http import serving as http_serving  # noqa: E402

HOLE_BYTES, REQUEST_BYTES = 8 << 10, 32 << 20  # the rule's limits (docs/object_storage.md)
WINDOW_BYTES = 256 << 10  # a read of HDF5's file driver (hdf5_remote.cc, kRemoteWindow)
CHUNK_ROWS, COLS = 64, 6
CHUNKS = 400
ROWS = CHUNKS * CHUNK_ROWS - 17  # the last chunk is partial
NOT_STORED = {5, 6, 40, 77, 250, 251, 252, CHUNKS - 1}  # read as the fill value
FILTER_SKIPPED = {20, 90, 300}  # stored raw with the deflate filter's bit set in the mask
FILL = -1.5
# After these chunks of "x", one of "y" of 16 KiB of random bytes: a hole past HOLE_BYTES, so
# the chunks before and after it come in different requests; after the others, one of zeros
# (a few dozen bytes once compressed).
WIDE_HOLES = {29, 61, 62, 100, 200, 350}
Y_CHUNK = 16 << 10


def write(path: pathlib.Path, reverse: bool) -> None:
    """Dataset "x" (ROWS x COLS float32, gzip chunks of CHUNK_ROWS rows, fill value FILL)
    whose chunks are interleaved in the file with those of "y", every chunk written raw by
    write_direct_chunk, so each lands where it is written: the stored chunks of "x" lie one
    after another (in the order of their rows, or its reverse), separated by "y"'s."""
    rng = np.random.default_rng(7 if reverse else 5)
    with h5py.File(path, "w") as f:
        x = f.create_dataset("x", shape=(ROWS, COLS), dtype="<f4", chunks=(CHUNK_ROWS, COLS),
                             compression="gzip", fillvalue=FILL)
        y = f.create_dataset("y", shape=(CHUNKS * Y_CHUNK,), dtype="u1", chunks=(Y_CHUNK,),
                             compression="gzip")
        order = range(CHUNKS - 1, -1, -1) if reverse else range(CHUNKS)
        for k in order:
            if k not in NOT_STORED:
                raw = rng.standard_normal((CHUNK_ROWS, COLS)).astype("<f4").tobytes()
                if k in FILTER_SKIPPED:
                    x.id.write_direct_chunk((k * CHUNK_ROWS, 0), raw, filter_mask=1)
                else:
                    x.id.write_direct_chunk((k * CHUNK_ROWS, 0), zlib.compress(raw, 1))
            y_raw = rng.bytes(Y_CHUNK) if k in WIDE_HOLES else bytes(Y_CHUNK)
            y.id.write_direct_chunk((k * Y_CHUNK,), zlib.compress(y_raw, 1))


def stored_spans(path: pathlib.Path, lo: int, hi: int) -> list[tuple[int, int]]:
    """(offset, size) of the stored chunks of "x" that meet rows [lo, hi) and go through
    gzip (not the ones whose filter was skipped: HDF5 reads those itself)."""
    with h5py.File(path, "r") as f:
        d = f["x"].id
        spans = []
        for i in range(d.get_num_chunks()):
            info = d.get_chunk_info(i)
            first = info.chunk_offset[0]
            if first < hi and first + CHUNK_ROWS > lo and info.filter_mask == 0:
                spans.append((info.byte_offset, info.size))
    return spans


def coalesced(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The requests the rule makes of `spans`: [first, end) each, by offset."""
    out: list[list[int]] = []
    for offset, size in sorted(spans):
        if out and offset <= out[-1][1] + HOLE_BYTES and \
                max(out[-1][1], offset + size) - out[-1][0] <= REQUEST_BYTES:
            out[-1][1] = max(out[-1][1], offset + size)
        else:
            out.append([offset, offset + size])
    return [(a, b) for a, b in out]


@contextlib.contextmanager
def remote(kind: str, server_of) -> Iterator[tuple]:
    """(put(name, path), url(name), options, gets()) of an object store whose every ranged
    GET of an object is logged: gets(name) is [(first, end)] of those since clear()."""
    if kind == "s3":
        with FaultProxy(server_of()) as proxy:
            b = s3_server.Bucket(server_of(), proxy.endpoint)

            def gets(name: str) -> list[tuple[int, int]]:
                return [_span(r[2]) for r in proxy.log if r[0] == "GET" and name in r[1]]

            yield (lambda name, p: b.upload(f"h/{name}", p), lambda name: b.url(f"h/{name}"),
                   b.options, gets, proxy.clear)
    else:
        with http_serving() as (store, base):
            def gets(name: str) -> list[tuple[int, int]]:
                with store.lock:
                    return [_span(r[2]) for r in store.requests if r[0] == "GET" and name in r[1]]

            def clear() -> None:
                with store.lock:
                    store.requests.clear()

            yield (lambda name, p: store.put(f"/h/{name}", p.read_bytes()),
                   lambda name: f"{base}/h/{name}", None, gets, clear)


def _span(range_: str | None) -> tuple[int, int]:
    assert range_ is not None, "a GET of a whole object"
    first, last = (int(x) for x in range_.removeprefix("bytes=").split("-"))
    return first, last + 1


@pytest.fixture(scope="module")
def s3_endpoint():
    with s3_server.serving() as endpoint:
        yield endpoint


@pytest.mark.parametrize("kind", ["s3", "http"])
@pytest.mark.parametrize("reverse", [False, True], ids=["in-order", "reversed"])
def test_stored_chunks_come_in_the_gets_they_coalesce_into(tmp_path, s3_endpoint, kind,
                                                           reverse):
    path = tmp_path / "shard_0000.h5"
    write(path, reverse)
    size = path.stat().st_size
    with h5py.File(path, "r") as f:
        want = f["x"][...]
    with remote(kind, lambda: s3_endpoint) as (put, url, options, gets, clear):
        put(path.name, path)
        layout = shardload.discover(url(path.name), storage_options=options, dataset="x")
        assert layout.total_rows == ROWS
        # Whole chunks: a read whose rows start or end inside a chunk reads that chunk apart
        # (a decode unit of its own), which would be a request of its own.
        for lo, hi in [(0, ROWS), (CHUNK_ROWS * 30, CHUNK_ROWS * 95)]:
            spans = stored_spans(path, lo, hi)
            requests = coalesced(spans)
            # Holes of the fill value, filter-skipped chunks and wide holes inside the rows.
            assert len(spans) > 40 and len(requests) >= 2, requests
            clear()
            got = layout.read(lo, hi)
            assert got.dtype == want.dtype and got.tobytes() == want[lo:hi].tobytes()
            fetched = gets(path.name)
            # Each request of the rule is one GET of exactly its bytes (one GET per chunk
            # before); every other GET is one of HDF5's own reads through the file driver
            # (hdf5_remote.cc), a window of 256 KiB or up to the object's end: the file's
            # metadata, and the chunk whose bytes are checked against HDF5's read of it.
            missing = [r for r in requests if r not in fetched]
            others = [g for g in fetched if g not in requests and
                      g[1] - g[0] != WINDOW_BYTES and g[1] != size]
            assert not missing and not others, (missing, others, requests, fetched)


@pytest.mark.parametrize("reverse", [False, True], ids=["in-order", "reversed"])
def test_unstored_and_filter_skipped_chunks_between_stored_ones_match_h5py(bucket, tmp_path,
                                                                          reverse):
    """Row ranges that start and end in chunks of every kind, across two objects (the second
    a plain h5py file): bit for bit h5py's, the fill value included."""
    path = tmp_path / "shard_0000.h5"
    write(path, reverse)
    rng = np.random.default_rng(3)
    second = rng.standard_normal((300, COLS)).astype("<f4")
    with h5py.File(tmp_path / "shard_0001.h5", "w") as f:
        f.create_dataset("x", data=second, chunks=(CHUNK_ROWS, COLS), compression="gzip")
    with h5py.File(path, "r") as f:
        want = np.concatenate([f["x"][...], second])
    for name in ("shard_0000.h5", "shard_0001.h5"):
        bucket.upload(f"u/{name}", tmp_path / name)
    src = bucket.url("u/")
    layout = shardload.discover(src, storage_options=bucket.options, dataset="x")
    edges = [0, 5 * CHUNK_ROWS + 3, 7 * CHUNK_ROWS - 1, 20 * CHUNK_ROWS + 10,
             CHUNKS * CHUNK_ROWS - CHUNK_ROWS - 1, ROWS - 1]
    for lo in edges:
        for hi in (lo + 1, lo + CHUNK_ROWS + 7, len(want)):
            hi = min(hi, len(want))
            got = layout.read(lo, hi)
            assert got.tobytes() == want[lo:hi].tobytes(), (lo, hi)
    got = snp.load(src, storage_options=bucket.options, dataset="x", threads=2,
                   overdecompose=3)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("kind", ["s3", "http"])
def test_the_chunk_index_is_fetched_once_for_all_the_reads_of_an_object(tmp_path, s3_endpoint,
                                                                       kind):
    """HDF5 reads a chunked dataset's index (B-tree nodes that lie among the chunks, one 256 KiB
    window GET each) in every read that opens the object, and HDF5 1.10 walks it from its first
    node to find a chunk: 8 reads of an object of N chunks made about 4 GETs of its metadata
    each. The driver's metadata reads are kept per snapshot (hdf5_remote.cc), so the index costs
    at most one GET per node for all the reads together: a node holds at least 32 of the 64
    chunks of h5py's default index, so at most N / 32 + 1, with one window at the file's start
    and one GET of chunks per read. Values equal h5py's; an object overwritten after its reads
    is refused with the old layout and read anew with a new one."""
    n_chunks, chunk_rows, cols, reads = 400, 128, 16, 8
    rows = n_chunks * chunk_rows
    path = tmp_path / "shard_0000.h5"

    def write(seed: int) -> np.ndarray:
        a = np.round(np.random.default_rng(seed).standard_normal((rows, cols), dtype=np.float32), 2)
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=a, chunks=(chunk_rows, cols), compression="gzip",
                             compression_opts=1)
        return a

    want = write(1)
    with remote(kind, lambda: s3_endpoint) as (put, url, options, gets, clear):
        put(path.name, path)
        layout = shardload.discover(url(path.name), storage_options=options, dataset="x")
        clear()
        step = rows // reads  # whole chunks: each read's chunks come in one GET
        for lo in range(0, rows, step):
            got = layout.read(lo, lo + step)
            assert got.dtype == want.dtype and got.tobytes() == want[lo:lo + step].tobytes(), lo
        fetched = gets(path.name)
        index_nodes = -(-n_chunks // 32) + 1
        bound = index_nodes + 1 + reads
        assert len(fetched) <= bound, (len(fetched), bound, sorted(fetched))
        # Again, the metadata held: one GET of chunks per read and nothing else.
        clear()
        for lo in range(0, rows, step):
            assert layout.read(lo, lo + step).tobytes() == want[lo:lo + step].tobytes(), lo
        assert len(gets(path.name)) == reads, sorted(gets(path.name))
        # Overwritten (other values, the same shape and chunks): the old layout is refused, a
        # new discovery reads the new values, not the old snapshot's metadata.
        want = write(2)
        put(path.name, path)
        with pytest.raises(shardload.ShardReadError) as e:
            layout.read(0, step)
        assert "changed" in str(e.value), e.value
        layout = shardload.discover(url(path.name), storage_options=options, dataset="x")
        assert layout.read(0, rows).tobytes() == want.tobytes()


def _same_size_versions() -> tuple[np.ndarray, bytes, np.ndarray, bytes]:
    """Two HDF5 files of one size whose unfiltered chunks lie in opposite orders: the first's
    chunk index read over the second's bytes puts every chunk's rows at another chunk's place."""
    def h5bytes(data: np.ndarray, order: range) -> bytes:
        buf = io.BytesIO()
        with h5py.File(buf, "w", libver="earliest") as f:
            x = f.create_dataset("x", shape=data.shape, dtype=data.dtype, chunks=(4, 3))
            for k in order:
                x[k * 4:(k + 1) * 4] = data[k * 4:(k + 1) * 4]
        return buf.getvalue()

    old = np.arange(48, dtype=np.float32).reshape(16, 3)
    new = old + 1000
    a, b = h5bytes(old, range(4)), h5bytes(new, range(3, -1, -1))
    assert len(a) == len(b) and a != b
    return old, a, new, b


@pytest.mark.parametrize("validator", ["last-modified", "none"])
def test_an_object_replaced_at_the_same_size_is_read_anew_by_a_new_discovery(validator):
    """A server without ETags: the snapshot is the Last-Modified (which a copy made with its
    time kept, `cp -p`/`rsync -t`, keeps) or, without one, the size alone. An object replaced by
    one of the same size between two discoveries in one process was read through the metadata
    the process kept of the first version: the old chunk index over the new bytes, rows at
    other chunks' places, neither version, no error. A discovery reads the object's metadata
    anew, and metadata is kept past one read only by an ETag's snapshot, so a layout read after
    such a replacement reads the new version, as every other format does, never a mix."""
    old, a, new, b = _same_size_versions()
    with http_serving() as (store, base):
        store.etag = False
        store.last_modified = validator == "last-modified"
        store.put("/d/shard_0000.h5", a)
        url = f"{base}/d/shard_0000.h5"
        np.testing.assert_array_equal(snp.load(url, dataset="x"), old)
        layout = shardload.discover(url, dataset="x")
        np.testing.assert_array_equal(layout.read(0, 16), old)
        store.put("/d/shard_0000.h5", b)
        np.testing.assert_array_equal(snp.load(url, dataset="x"), new)
        # The first layout, read again after each replacement (a long-lived layout: a Dask
        # graph, a feed across epochs): the version there now.
        store.put("/d/shard_0000.h5", a)
        np.testing.assert_array_equal(layout.read(0, 16), old)
        store.put("/d/shard_0000.h5", b)
        np.testing.assert_array_equal(layout.read(0, 16), new)
