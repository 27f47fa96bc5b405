"""A Zarr store's chunk objects written after discovery, in an s3:// bucket (moto's server on
127.0.0.1) and on an http:// server: each chunk or shard object's GET (or HEAD) says its
Last-Modified, compared with the server's Date when discovery read the store's metadata. A
chunk PUT again after discover() returned is a ShardReadError naming it, also within the server
second discovery ended in; one written just before discovery reads as zarr-python reads it."""

from __future__ import annotations

import email.utils
import pathlib
import re
import time
import warnings

import numpy as np
import pytest

moto = pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
zarr = pytest.importorskip("zarr")
numcodecs = pytest.importorskip("numcodecs")

import zarr.codecs as zc  # noqa: E402

import shardload  # noqa: E402
import shardload.numpy  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=FutureWarning)

# The chunk's URL is followed by its store's options (the bucket's endpoint), as in every message.
CHANGED = (r"(\?\S*)?: changed since discovery: its Last-Modified \(\w{3}, .* GMT\) is later than the "
           r"server's Date when discovery read the store's metadata \(\w{3}, .* GMT\): the "
           r"object was written since")

# The chunk each case rewrites (rows 4-7), and the store's other arguments.
CASES = {
    "v2": ("1.0", dict(zarr_format=2, chunks=(4, 3), compressors=numcodecs.Zstd())),
    "v3": ("c/1/0", dict(zarr_format=3, chunks=(4, 3), compressors=None)),
    # A shard object of inner chunks: rows 0-7 are one object.
    "v3-sharded": ("c/0/0", dict(zarr_format=3, chunks=(2, 3), shards=(8, 3),
                                 compressors=zc.ZstdCodec())),
}


def write_store(path: pathlib.Path, a: np.ndarray, **kwargs) -> None:
    z = zarr.create_array(str(path), shape=a.shape, dtype=a.dtype, **kwargs)
    z[...] = a


def read_local(path: pathlib.Path) -> np.ndarray:
    return zarr.open_array(str(path), mode="r")[...]


def rewrite_rows(path: pathlib.Path, value: int) -> None:
    """zarr-python's next version of rows 4-7 (a chunk, or the shard holding them)."""
    zarr.open_array(str(path), mode="r+")[4:8] = value


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_chunk_put_again_after_discovery_is_a_changed_error_naming_it(tmp_path, bucket, case):
    key, kwargs = CASES[case]
    a = np.arange(36, dtype="float64").reshape(12, 3)
    local = tmp_path / "a.zarr"
    write_store(local, a, **kwargs)
    bucket.upload_tree("a.zarr", local)
    layout = shardload.discover(bucket.url("a.zarr/"), storage_options=bucket.options)
    np.testing.assert_array_equal(layout.read(0, 12), read_local(local))
    time.sleep(1.1)  # a later second on the server's clock, whatever the wait in discovery
    rewrite_rows(local, -1)
    bucket.upload(f"a.zarr/{key}", local / key)
    want = re.escape(bucket.url(f"a.zarr/{key}")) + CHANGED
    with pytest.raises(shardload.ShardReadError, match=want):
        layout.read(0, 12)
    with pytest.raises(shardload.ShardReadError, match=want):
        shardload.numpy.load(layout)
    # The chunks untouched since still read as discovered; rediscovered, the store reads as
    # zarr-python reads it now.
    np.testing.assert_array_equal(layout.read(8, 12), a[8:12])
    now = shardload.discover(bucket.url("a.zarr/"), storage_options=bucket.options)
    np.testing.assert_array_equal(now.read(0, 12), read_local(local))


def test_through_a_checked_manifest_chunks_are_judged_by_this_discovery(tmp_path, bucket):
    """A manifest keeps no server time: a discovery that checks it probes the stores' metadata
    again and judges their chunks by that answer, so a chunk PUT since the indexing but before
    this discovery reads, and one PUT after it is refused. A trusted manifest asks the server
    nothing, so it has no time to judge by (the documented limit): the chunk reads as it is."""
    key, kwargs = CASES["v3"]
    a = np.arange(36, dtype="float64").reshape(12, 3)
    for name in ("shard_0000.zarr", "shard_0001.zarr"):
        write_store(tmp_path / name, a, **kwargs)
        bucket.upload_tree(f"m/{name}", tmp_path / name)
    shardload.index(bucket.url("m/"), storage_options=bucket.options)
    time.sleep(1.1)
    rewrite_rows(tmp_path / "shard_0001.zarr", 7)
    bucket.upload(f"m/shard_0001.zarr/{key}", tmp_path / "shard_0001.zarr" / key)
    layout = shardload.discover(bucket.url("m/"), storage_options=bucket.options)
    assert layout.manifest_state.value == "used", layout.manifest_status
    want = np.concatenate([a, read_local(tmp_path / "shard_0001.zarr")])
    np.testing.assert_array_equal(shardload.numpy.load(layout), want)
    trusted = shardload.discover(bucket.url("m/"), storage_options=bucket.options,
                                 trust_manifest=True)
    rewrite_rows(tmp_path / "shard_0001.zarr", 8)
    bucket.upload(f"m/shard_0001.zarr/{key}", tmp_path / "shard_0001.zarr" / key)
    with pytest.raises(shardload.ShardReadError,
                       match=re.escape(bucket.url(f"m/shard_0001.zarr/{key}")) + CHANGED):
        shardload.numpy.load(layout)
    want = np.concatenate([a, read_local(tmp_path / "shard_0001.zarr")])
    np.testing.assert_array_equal(shardload.numpy.load(trusted), want)


def test_the_changed_chunks_url_shows_no_secret(tmp_path, bucket):
    """The error names the chunk's URL as every message does: its secret key hidden."""
    key, kwargs = CASES["v2"]
    secret = "g6-s3cr3t-0f-the-bucket"
    options = {**bucket.options, "access_key": "testing", "secret_key": secret}
    a = np.arange(36, dtype="float64").reshape(12, 3)
    local = tmp_path / "a.zarr"
    write_store(local, a, **kwargs)
    bucket.upload_tree("a.zarr", local)
    layout = shardload.discover(bucket.url("a.zarr/"), storage_options=options)
    rewrite_rows(local, -1)
    bucket.upload(f"a.zarr/{key}", local / key)
    with pytest.raises(shardload.ShardReadError,
                       match=re.escape(bucket.url(f"a.zarr/{key}")) + CHANGED) as e:
        shardload.numpy.load(layout)
    assert secret not in str(e.value) and secret not in repr(e.value.args)
    assert secret not in str(getattr(e.value, "filename", ""))


@pytest.mark.parametrize("case", ["v2", "v3-sharded"])
def test_a_chunk_put_right_after_discovery_returns_is_a_changed_error(tmp_path, bucket, case):
    """Last-Modified and Date have whole seconds: a chunk PUT within the server second in which
    discovery read the metadata kept a Last-Modified no later than that Date, and was read as it
    now is, no error. Discovery returns only once that second is over."""
    key, kwargs = CASES[case]
    a = np.arange(36, dtype="float64").reshape(12, 3)
    local = tmp_path / "a.zarr"
    write_store(local, a, **kwargs)
    bucket.upload_tree("a.zarr", local)
    for i in range(4):
        rewrite_rows(local, i + 1)
        body = (local / key).read_bytes()
        layout = shardload.discover(bucket.url("a.zarr/"), storage_options=bucket.options)
        bucket.put(f"a.zarr/{key}", body)
        with pytest.raises(shardload.ShardReadError,
                           match=re.escape(bucket.url(f"a.zarr/{key}")) + CHANGED):
            shardload.numpy.load(layout)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_chunk_written_just_before_discovery_is_read(tmp_path, bucket, case):
    """A chunk PUT right before discovery has a Last-Modified no later than the Date of the
    metadata's answer: read, bit for bit as zarr-python reads the store."""
    key, kwargs = CASES[case]
    a = np.arange(36, dtype="float64").reshape(12, 3)
    local = tmp_path / "a.zarr"
    write_store(local, a, **kwargs)
    bucket.upload_tree("a.zarr", local)
    for i in range(3):
        rewrite_rows(local, 100 + i)
        bucket.upload(f"a.zarr/{key}", local / key)
        layout = shardload.discover(bucket.url("a.zarr/"), storage_options=bucket.options)
        got = shardload.numpy.load(layout)
        np.testing.assert_array_equal(got, read_local(local))
        assert got.tobytes() == read_local(local).tobytes()


def test_a_layout_sent_to_a_task_keeps_the_discovery_time(tmp_path, bucket):
    """A layout re-encoded (a pickle, as Dask's and Legate's tasks get it) judges the chunks
    against the discovery it came from."""
    import pickle

    key, kwargs = CASES["v3"]
    a = np.arange(36, dtype="float64").reshape(12, 3)
    local = tmp_path / "a.zarr"
    write_store(local, a, **kwargs)
    bucket.upload_tree("a.zarr", local)
    layout = shardload.discover(bucket.url("a.zarr/"), storage_options=bucket.options)
    rewrite_rows(local, -1)
    bucket.upload(f"a.zarr/{key}", local / key)
    again = pickle.loads(pickle.dumps(layout))
    with pytest.raises(shardload.ShardReadError,
                       match=re.escape(bucket.url(f"a.zarr/{key}")) + CHANGED):
        again.read(0, 12)


def test_a_chunk_put_mid_epoch_fails_the_feeds_batch_naming_it(tmp_path, bucket):
    """A chunk PUT between two batches of a feed (discovered at its construction): the batch
    that needs it raises the ShardReadError naming it, instead of its rows as they now are."""
    import shardload.feed as sf

    a = np.arange(120, dtype="float64").reshape(40, 3)
    local = tmp_path / "a.zarr"
    write_store(local, a, zarr_format=2, chunks=(4, 3), compressors=numcodecs.Zstd())
    bucket.upload_tree("a.zarr", local)
    feed = sf.Feed(bucket.url("a.zarr/"), 4, shuffle="none", block_rows=4, prefetch=1,
                   storage_options=bucket.options)
    it = iter(feed)
    np.testing.assert_array_equal(np.asarray(next(it)), a[0:4])
    zarr.open_array(str(local), mode="r+")[32:36] = -1  # chunk 8.0, far past the read-ahead
    bucket.upload("a.zarr/8.0", local / "8.0")
    with pytest.raises(shardload.ShardReadError,
                       match=re.escape(bucket.url("a.zarr/8.0")) + CHANGED):
        for _ in it:
            pass


# --- http:// -------------------------------------------------------------------------------

def _http_server():
    from test_http import Handler, Store, closing_server

    class TimedStore(Store):
        """Objects with the time each was put as its Last-Modified, as a file server says."""

        def __init__(self) -> None:
            super().__init__()
            self.modified: dict[str, float] = {}
            self.send_last_modified = True

        def put(self, path: str, data: bytes) -> None:
            with self.lock:
                self.objects[path] = data
                self.modified[path] = time.time()

    class TimedHandler(Handler):
        def send_header(self, keyword: str, value: str) -> None:
            if keyword == "Last-Modified":
                path = self.path.split("?")[0]
                with self.store.lock:
                    when = self.store.modified.get(path)
                if not self.store.send_last_modified:
                    return
                if when is not None:
                    value = email.utils.formatdate(when, usegmt=True)
            super().send_header(keyword, value)

    store = TimedStore()
    handler = type("BoundHandler", (TimedHandler,), {"store": store})
    return store, closing_server.serving(handler, poll_interval=0.05)


@pytest.fixture
def timed_web():
    import closing_server

    store, serving = _http_server()
    with serving as server:
        yield store, f"http://{closing_server.address(server)}"


def _put_tree(store, prefix: str, local: pathlib.Path) -> None:
    for f in sorted(local.rglob("*")):
        if f.is_file():
            store.put(f"{prefix}/{f.relative_to(local).as_posix()}", f.read_bytes())


@pytest.mark.parametrize("case", ["v2", "v3-sharded"])
def test_http_a_chunk_replaced_after_discovery_is_a_changed_error(tmp_path, timed_web, case):
    store, base = timed_web
    key, kwargs = CASES[case]
    a = np.arange(36, dtype="float64").reshape(12, 3)
    local = tmp_path / "a.zarr"
    write_store(local, a, **kwargs)
    _put_tree(store, "/h/a.zarr", local)
    layout = shardload.discover(f"{base}/h/a.zarr")
    np.testing.assert_array_equal(shardload.numpy.load(layout), read_local(local))
    rewrite_rows(local, -1)
    store.put(f"/h/a.zarr/{key}", (local / key).read_bytes())
    with pytest.raises(shardload.ShardReadError,
                       match=re.escape(f"{base}/h/a.zarr/{key}") + CHANGED):
        shardload.numpy.load(layout)
    now = shardload.discover(f"{base}/h/a.zarr")
    np.testing.assert_array_equal(shardload.numpy.load(now), read_local(local))


def test_http_without_last_modified_a_replaced_chunk_cannot_be_told(tmp_path, timed_web):
    """The documented limit: a server that sends no Last-Modified gives nothing to compare, so
    the chunk is read as it now is (its reads are still held to its HEAD's ETag)."""
    store, base = timed_web
    store.send_last_modified = False
    key, kwargs = CASES["v2"]
    a = np.arange(36, dtype="float64").reshape(12, 3)
    local = tmp_path / "a.zarr"
    write_store(local, a, **kwargs)
    _put_tree(store, "/h/a.zarr", local)
    layout = shardload.discover(f"{base}/h/a.zarr")
    rewrite_rows(local, -1)
    store.put(f"/h/a.zarr/{key}", (local / key).read_bytes())
    np.testing.assert_array_equal(shardload.numpy.load(layout), read_local(local))
