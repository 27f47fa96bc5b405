"""Streaming and manifests over object storage: ``batches`` of s3:// sources, and the manifest
of a dataset in a bucket (``index`` writes it there; ``discover``, ``load`` and
``discover_once`` read it), against moto's S3 server on 127.0.0.1, compared with numpy and
pyarrow reading the local originals."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

moto = pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
boto3 = pytest.importorskip("boto3")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import shardload  # noqa: E402

import s3_server  # noqa: E402
from s3_fault_proxy import FaultProxy, Rule  # noqa: E402


class Bucket(s3_server.Bucket):
    """A new bucket (s3_server.Bucket) read through ``endpoint`` (a proxy), written to
    directly."""

    def __init__(self, server: str, endpoint: str | None = None):
        super().__init__(server, endpoint, prefix="m-")
        # Uploads bypass the proxy, which forwards Content-Length bodies only (not the
        # chunked ones the AWS SDK sends).
        self.direct = {**self.options, "endpoint_override": server}


@pytest.fixture
def bucket(server) -> Bucket:
    return Bucket(server)


def ragged(rng: np.random.Generator, rows: list[int], trailing: tuple[int, ...],
           dtype: str) -> list[np.ndarray]:
    return [rng.standard_normal((r, *trailing)).astype(dtype) for r in rows]


def put_npy_shards(bucket: Bucket, prefix: str, parts: list[np.ndarray]) -> None:
    for i, p in enumerate(parts):
        bucket.put_npy(f"{prefix}/shard_{i:04d}.npy", p)


def epoch(it) -> list[np.ndarray]:
    """Every batch of an iterator as a numpy array, each dropped before the next is taken."""
    out = []
    for batch in it:
        out.append(np.asarray(batch).copy())
        del batch
    return out


# ---- batches over s3:// -----------------------------------------------------------------

@pytest.mark.parametrize("rows_per_batch,prefetch", [(7, 1), (16, 0), (1000, 2)])
def test_batches_npy_ragged_epoch_matches_numpy(bucket, rows_per_batch, prefetch):
    rng = np.random.default_rng(21)
    parts = ragged(rng, [9, 0, 1, 17, 5, 0, 12, 3], (3, 2), "float32")
    put_npy_shards(bucket, "d", parts)
    want = np.concatenate(parts)
    it = shardload.batches(bucket.url("d/"), rows_per_batch, prefetch=prefetch,
                           storage_options=bucket.options)
    assert len(it) == -(-want.shape[0] // rows_per_batch)
    got = epoch(it)
    assert [b.shape[0] for b in got[:-1]] == [rows_per_batch] * (len(got) - 1)
    np.testing.assert_array_equal(np.concatenate(got), want)


def test_batches_raw_glob_and_row_range(bucket):
    rng = np.random.default_rng(22)
    rows = [4, 1, 17, 0, 6, 11]
    parts = [rng.integers(-1000, 1000, size=(r, 5)).astype(">i4") for r in rows]
    for i, p in enumerate(parts):
        bucket.put(f"raw/part-{i}.bin", b"HDR!" * 4 + p.tobytes())
    want = np.concatenate(parts)
    got = epoch(shardload.batches(bucket.url("raw/part-*.bin"), 5, format="raw", dtype=">i4",
                                  trailing_shape=(5,), header_bytes=16,
                                  storage_options=bucket.options, overdecompose=2))
    np.testing.assert_array_equal(np.concatenate(got), want)
    # A row range: batches of a Layout's slice read those rows only.
    layout = shardload.discover(bucket.url("raw/part-{}.bin"), format="raw", dtype=">i4",
                                trailing_shape=(5,), header_bytes=16,
                                storage_options=bucket.options)
    got = epoch(shardload.batches(layout.slice_rows(3, 33), 8))
    assert [b.shape[0] for b in got] == [8, 8, 8, 6]
    np.testing.assert_array_equal(np.concatenate(got), want[3:33])


def test_batches_parquet_matches_pyarrow(bucket, tmp_path):
    rng = np.random.default_rng(23)
    paths = []
    for i, n in enumerate([23, 0, 5, 40, 1]):
        t = pa.table({"a": rng.standard_normal(n).astype(np.float32),
                      "name": [f"r{j}" for j in range(n)],
                      "b": rng.integers(-1000, 1000, n).astype(np.float32)})
        p = tmp_path / f"shard_{i:04d}.parquet"
        pq.write_table(t, p, row_group_size=6)
        bucket.put(f"pq/{p.name}", p.read_bytes())
        paths.append(p)
    want = np.concatenate([np.stack([pq.read_table(p).column(c).to_numpy() for c in "ab"], 1)
                           for p in paths])
    got = epoch(shardload.batches(bucket.url("pq/"), 11, prefetch=2,
                                  storage_options=bucket.options))
    np.testing.assert_array_equal(np.concatenate(got), want)
    got = epoch(shardload.batches(bucket.url("pq/"), 9, columns=["b"],
                                  storage_options=bucket.options))
    np.testing.assert_array_equal(np.concatenate(got), want[:, 1])


def test_batches_object_overwritten_mid_epoch_is_an_error_naming_it(bucket):
    a = np.arange(40, dtype=np.float32).reshape(10, 4)
    for i in range(4):
        bucket.put_npy(f"o/shard_{i:04d}.npy", a + 100 * i)
    # One shard per batch and nothing read ahead: batch i is read when it is asked for.
    it = shardload.batches(bucket.url("o/"), 10, prefetch=0, storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(next(it)), a)
    # The same size, other bytes: only the ETag tells.
    bucket.put_npy("o/shard_0002.npy", a - 1)
    np.testing.assert_array_equal(np.asarray(next(it)), a + 100)
    with pytest.raises(shardload.ShardReadError) as e:
        next(it)
    msg = str(e.value)
    assert "batch 2 (rows [20, 30))" in msg, msg
    assert bucket.url("o/shard_0002.npy") in msg and "changed" in msg, msg
    with pytest.raises(StopIteration):
        next(it)


def test_batches_storage_options_need_an_s3_source(tmp_path):
    np.save(tmp_path / "shard_0000.npy", np.zeros((3, 2)))
    with pytest.raises(ValueError, match="s3:// URLs only"):
        shardload.batches(str(tmp_path), 2, storage_options={"scheme": "http"})
    layout = shardload.discover(str(tmp_path))
    with pytest.raises(TypeError, match="storage_options cannot be passed with a Layout"):
        shardload.batches(layout, 2, storage_options={"scheme": "http"})


# ---- the manifest of a dataset in a bucket ------------------------------------------------

@pytest.fixture
def proxy(server):
    """A proxy in front of the server that logs every request shardload makes."""
    with FaultProxy(server) as p:
        yield p


def shard_requests(proxy: FaultProxy, prefix: str, method: str) -> int:
    """Requests of ``method`` for objects named shard_* under ``prefix``."""
    return sum(1 for m, t, _, _ in proxy.log if m == method and f"/{prefix}/shard_" in t)


def test_index_writes_the_manifest_object_and_discovery_uses_it(server, proxy):
    b = Bucket(server, proxy.endpoint)
    rng = np.random.default_rng(31)
    parts = ragged(rng, [9, 0, 4, 13, 1, 7, 2, 11], (3,), "float64")
    put_npy_shards(b, "d", parts)
    want = np.concatenate(parts)

    proxy.clear()
    probed = shardload.discover(b.url("d/"), storage_options=b.options)
    assert probed.manifest_state is shardload.ManifestState.ABSENT
    probing = len(proxy.log)
    # One GET per object (its first bytes: the header, and the size and ETag with them), no
    # HEAD; besides them one LIST (the format's scan and the pattern's resolve share it) and
    # the look-ups of the manifest and of Zarr metadata (.zarray, zarr.json and .zgroup).
    assert shard_requests(proxy, "d", "GET") == 8, proxy.log
    assert shard_requests(proxy, "d", "HEAD") == 0, proxy.log
    assert sum("list-type=" in t for _, t, _, _ in proxy.log) == 1, proxy.log
    assert probing - 8 == 5, proxy.log

    written = shardload.index(b.url("d/"), storage_options=b.direct)
    assert written.startswith(b.url("d/shardload.manifest"))
    assert "d/shardload.manifest" in b.keys("d/")
    body = b.get("d/shardload.manifest")
    assert body.startswith(b"SLMANIF\n")
    # Keys relative to the prefix; the store's options are the reader's, never recorded.
    assert b"shard_" in body and b"s3:" not in body and b.name.encode() not in body
    assert b"endpoint_override" not in body and proxy.endpoint.encode() not in body

    proxy.clear()
    layout = shardload.discover(b.url("d/"), storage_options=b.options)
    assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status
    assert layout == probed and layout.paths == probed.paths
    # The check is each object's snapshot (a HEAD: size and ETag), no header read: one
    # request per object, as probing now costs too.
    assert shard_requests(proxy, "d", "GET") == 0
    assert shard_requests(proxy, "d", "HEAD") == 8
    # The check's LIST (objects added or removed) is the one the scan made.
    assert sum("list-type=" in t for _, t, _, _ in proxy.log) == 1, proxy.log
    assert len(proxy.log) <= probing, proxy.log

    proxy.clear()
    trusted = shardload.discover(b.url("d/"), storage_options=b.options, trust_manifest=True)
    assert trusted.manifest_state is shardload.ManifestState.TRUSTED
    assert trusted == probed
    # One object read (one GET, its size and ETag with its bytes; the client may ask again
    # after a reset connection), nothing else.
    assert all("/d/shardload.manifest" in t for _, t, _, _ in proxy.log), proxy.log
    assert {m for m, _, _, _ in proxy.log} == {"GET"}, proxy.log

    np.testing.assert_array_equal(
        np.asarray(shardload.load(b.url("d/"), storage_options=b.options, overdecompose=2)),
        want)
    np.testing.assert_array_equal(np.asarray(shardload.load(trusted)), want)
    got = epoch(shardload.batches(b.url("d/"), 10, storage_options=b.options,
                                  trust_manifest=True))
    np.testing.assert_array_equal(np.concatenate(got), want)


def test_the_store_look_ups_and_the_list_do_not_wait_for_the_manifests_answer(server, proxy):
    b = Bucket(server, proxy.endpoint)
    rng = np.random.default_rng(37)
    parts = ragged(rng, [5, 3, 8], (2,), "float32")
    put_npy_shards(b, "d", parts)
    hold = 2.0
    # The manifest's look-up answered late: asked one after the other, the Zarr look-ups and
    # the LIST would come after its answer.
    proxy.add(Rule("GET", path="/d/shardload.manifest", action="delay", delay_s=hold, count=None))
    for kwargs in ({}, {"pattern": "shard_{:04d}.npy"}):
        proxy.clear()
        proxy.add(Rule("GET", path="/d/shardload.manifest", action="delay", delay_s=hold,
                       count=None))
        layout = shardload.discover(b.url("d/"), storage_options=b.options, **kwargs)
        assert layout.shard_rows == [5, 3, 8]
        asked = {t.split("?")[0].rsplit("/", 1)[-1] if "list-type=" not in t else "LIST": at
                 for (_, t, _, _), at in zip(proxy.log, proxy.arrived)}
        manifest = asked["shardload.manifest"]
        looked = ["LIST"] + ([".zarray", "zarr.json", ".zgroup"] if not kwargs else [])
        assert all(asked[k] - manifest < hold / 2 for k in looked), (kwargs, asked)
        assert kwargs or all(k in asked for k in looked), asked
        # The shards are probed once the manifest's answer (none) is in.
        assert all(asked[f"shard_{i:04d}.npy"] - manifest >= hold * 0.9 for i in range(3)), asked
        assert sum("list-type=" in t for _, t, _, _ in proxy.log) == 1, proxy.log
    np.testing.assert_array_equal(np.asarray(shardload.load(b.url("d/"), storage_options=b.options)),
                                  np.concatenate(parts))


def test_a_zarr_store_named_as_a_directory_is_never_listed(server, proxy, tmp_path):
    zarr = pytest.importorskip("zarr")
    b = Bucket(server, proxy.endpoint)
    want = np.random.default_rng(38).standard_normal((50, 3)).astype(np.float32)
    z = zarr.create_array(tmp_path / "s.zarr", shape=want.shape, dtype="float32", chunks=(5, 3),
                          zarr_format=2)
    z[...] = want
    b.upload_tree("s", tmp_path / "s.zarr")
    proxy.clear()
    # Its listing would be a page of ten chunk keys; a store of millions is thousands of pages.
    layout = shardload.discover(b.url("s/"), storage_options=b.options)
    assert layout.total_rows == 50
    assert not any("list-type=" in t for _, t, _, _ in proxy.log), proxy.log
    np.testing.assert_array_equal(np.asarray(shardload.load(b.url("s/"),
                                                            storage_options=b.options)), want)


def test_objects_are_probed_and_checked_with_requests_in_flight(server, proxy):
    """Each object's probe (and a manifest's check) is a request's round trip: several are
    in flight at once, not one after another. Each shard request is held 0.3 s by the proxy,
    so requests sent in turn would never overlap."""
    b = Bucket(server, proxy.endpoint)
    parts = ragged(np.random.default_rng(37), [3, 5, 2, 8, 1, 4], (2,), "float32")
    put_npy_shards(b, "p", parts)
    proxy.clear()
    proxy.add(Rule(None, path="/p/shard_", action="delay", delay_s=0.3, count=None))
    layout = shardload.discover(b.url("p/"), storage_options=b.options)
    assert layout.total_rows == sum(len(p) for p in parts)
    assert proxy.max_in_flight >= 2, proxy.log
    shardload.index(b.url("p/"), storage_options=b.direct)
    proxy.clear()
    proxy.add(Rule("HEAD", path="/p/shard_", action="delay", delay_s=0.3, count=None))
    checked = shardload.discover(b.url("p/"), storage_options=b.options)
    assert checked.manifest_state is shardload.ManifestState.USED, checked.manifest_status
    assert proxy.max_in_flight >= 2, proxy.log


def assert_a_tile_reads_its_objects_at_once(proxy, layout, prefix: str, want) -> None:
    """Loads `layout` with every GET of a PREFIX/shard_* object held 0.3 s by the proxy and
    compares it with `want`: one tile after another, each object in turn, would have at most as
    many requests in flight as there are tiles (two at most here), so three or more means a
    tile's objects were read at once."""
    proxy.clear()
    proxy.add(Rule("GET", path=f"/{prefix}/shard_", action="delay", delay_s=0.3, count=None))
    got, info = shardload.load(layout, info=True)
    np.testing.assert_array_equal(np.asarray(got), want)
    assert info.tiles <= 2, info
    assert proxy.max_in_flight >= 3, (proxy.max_in_flight, proxy.log)


def test_raw_objects_are_probed_and_read_with_requests_in_flight(server, proxy):
    """Raw objects whose sidecar lists their rows by position are probed several at once (each
    probe told its object's position), every object with its own rows, the sidecar fetched
    once for them all; a tile's objects are read several at once."""
    b = Bucket(server, proxy.endpoint)
    rows = [6, 2, 9, 0, 4, 3, 7, 1]
    parts = ragged(np.random.default_rng(39), rows, (3,), "<f8")
    for i, part in enumerate(parts):
        b.put(f"r/shard_{i:04d}.bin", part.tobytes())
    b.put("r/shardload.json", json.dumps({"dtype": "<f8", "shape": [3], "rows": rows}).encode())
    proxy.clear()
    proxy.add(Rule(None, path="/r/shard_", action="delay", delay_s=0.3, count=None))
    layout = shardload.discover(b.url("r/"), format="raw", storage_options=b.options)
    assert list(layout.shard_rows) == rows
    assert proxy.max_in_flight >= 2, proxy.log
    assert proxy.requests("GET", "/r/shardload.json") == 1, proxy.log
    assert_a_tile_reads_its_objects_at_once(proxy, layout, "r", np.concatenate(parts))


def test_a_refused_raw_sidecar_is_an_error_naming_it_and_a_missing_one_is_none(server, proxy):
    b = Bucket(server, proxy.endpoint)
    parts = ragged(np.random.default_rng(40), [3, 5], (2,), "<f4")
    for i, part in enumerate(parts):
        b.put(f"s/shard_{i:04d}.bin", part.tobytes())
    # No sidecar: the options say what it would (two 404s, no error).
    got = shardload.load(b.url("s/"), format="raw", dtype="<f4", trailing_shape=(2,),
                         storage_options=b.options)
    np.testing.assert_array_equal(np.asarray(got), np.concatenate(parts))
    b.put("s/shardload.json", json.dumps({"dtype": "<f4", "shape": [2]}).encode())
    proxy.clear()
    proxy.add(Rule("GET", path="/s/shardload.json", action="403", count=None))
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(b.url("s/"), format="raw",
                           storage_options={**b.options, "max_attempts": "1"})
    assert b.url("s/shardload.json") in str(e.value), e.value
    assert "cannot look up the sidecar" in str(e.value) and "AccessDenied" in str(e.value), e.value
    # Its GET alone: no HEAD of it.
    assert not [m for m, t, _, _ in proxy.log if m == "HEAD" and "shardload.json" in t], proxy.log


def test_a_tiles_objects_are_read_with_requests_in_flight(server, proxy):
    """A tile spanning several .npy objects reads them several at once: each rows GET is held
    0.3 s by the proxy, so one tile after another with each object in turn would have at most
    as many in flight as there are tiles (two here)."""
    b = Bucket(server, proxy.endpoint)
    parts = ragged(np.random.default_rng(41), [3, 5, 2, 8, 1, 4, 6, 2], (2,), "float32")
    put_npy_shards(b, "t", parts)
    layout = shardload.discover(b.url("t/"), storage_options=b.options)
    assert_a_tile_reads_its_objects_at_once(proxy, layout, "t", np.concatenate(parts))


def test_a_failure_among_objects_read_at_once_is_the_first_in_row_order(server, proxy):
    b = Bucket(server, proxy.endpoint)
    parts = ragged(np.random.default_rng(43), [4] * 8, (2,), "float32")
    put_npy_shards(b, "e", parts)
    layout = shardload.discover(b.url("e/"), storage_options={**b.options, "max_attempts": "1"})
    proxy.clear()
    # Two objects of one tile refused; the later one answers first.
    proxy.add(Rule("GET", path="/e/shard_0001.npy", action="403", delay_s=0.5, count=None))
    proxy.add(Rule("GET", path="/e/shard_0002.npy", action="403", count=None))
    with pytest.raises(shardload.ShardReadError) as e:
        shardload.load(layout, overdecompose=1)
    assert b.url("e/shard_0001.npy") in str(e.value), e.value
    assert "shard_0002" not in str(e.value), e.value


def test_stale_manifest_is_seen_as_locally(bucket):
    a = np.arange(40, dtype=np.float32).reshape(10, 4)
    for i in range(3):
        bucket.put_npy(f"s/shard_{i:04d}.npy", a + 100 * i)
    shardload.index(bucket.url("s/"), storage_options=bucket.options)
    trusted = shardload.discover(bucket.url("s/"), storage_options=bucket.options,
                                 trust_manifest=True)
    # The same size, other bytes: only the ETag tells.
    bucket.put_npy("s/shard_0001.npy", a - 1)
    layout = shardload.discover(bucket.url("s/"), storage_options=bucket.options)
    assert layout.manifest_state is shardload.ManifestState.STALE
    assert bucket.url("s/shard_0001.npy") in layout.manifest_status
    assert "overwritten (its ETag differs)" in layout.manifest_status
    assert "probed the files instead" in layout.manifest_status
    want = np.concatenate([a, a - 1, a + 200])
    np.testing.assert_array_equal(
        np.asarray(shardload.load(bucket.url("s/"), storage_options=bucket.options)), want)
    # Trusted: the manifest's layout, and the load's own check names the object.
    again = shardload.discover(bucket.url("s/"), storage_options=bucket.options,
                               trust_manifest=True)
    assert again.manifest_state is shardload.ManifestState.TRUSTED and again == trusted
    with pytest.raises(shardload.ShardReadError) as e:
        shardload.load(again)
    assert bucket.url("s/shard_0001.npy") in str(e.value) and "changed" in str(e.value)
    # An object added under the pattern.
    shardload.index(bucket.url("s/"), storage_options=bucket.options)
    bucket.put_npy("s/shard_0003.npy", a)
    layout = shardload.discover(bucket.url("s/"), storage_options=bucket.options)
    assert layout.manifest_state is shardload.ManifestState.STALE
    assert bucket.url("s/shard_0003.npy") in layout.manifest_status
    assert "is new" in layout.manifest_status and layout.total_rows == 40


def test_damaged_manifest_object_is_an_error_naming_it(bucket):
    bucket.put_npy("x/shard_0000.npy", np.zeros((3, 2)))
    bucket.put("x/shardload.manifest", b"SLMANIF\n" + b"\0" * 40)
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(bucket.url("x/"), storage_options=bucket.options)
    assert bucket.url("x/shardload.manifest") in str(e.value) and "manifest" in str(e.value)


def test_failed_manifest_upload_leaves_the_old_one(server, proxy):
    b = Bucket(server, proxy.endpoint)
    put_npy_shards(b, "w", [np.ones((4, 2)), np.zeros((3, 2))])
    shardload.index(b.url("w/"), storage_options=b.direct)
    old = b.get("w/shardload.manifest")
    b.put_npy("w/shard_0002.npy", np.ones((5, 2)))
    for method in ("PUT", "POST"):
        proxy.add(Rule(method, path="shardload.manifest", action="403", count=None))
    with pytest.raises(shardload.ShardReadError) as e:
        shardload.index(b.url("w/"), storage_options=b.options)
    msg = str(e.value)
    assert b.url("w/shardload.manifest") in msg and "cannot write" in msg, msg
    assert b.get("w/shardload.manifest") == old
    assert b.keys("w/") == ["w/shard_0000.npy", "w/shard_0001.npy", "w/shard_0002.npy",
                            "w/shardload.manifest"]


def test_parquet_manifest_spares_the_footers(server, proxy, tmp_path):
    b = Bucket(server, proxy.endpoint)
    rng = np.random.default_rng(33)
    paths = []
    for i, n in enumerate([17, 0, 6, 25]):
        t = pa.table({"a": rng.standard_normal(n), "b": rng.standard_normal(n)})
        p = tmp_path / f"shard_{i:04d}.parquet"
        pq.write_table(t, p, row_group_size=5)
        b.put(f"p/{p.name}", p.read_bytes())
        paths.append(p)
    want = np.concatenate([np.stack([pq.read_table(p).column(c).to_numpy() for c in "ab"], 1)
                           for p in paths])
    shardload.index(b.url("p/"), columns=["a", "b"], storage_options=b.direct)
    proxy.clear()
    layout = shardload.discover(b.url("p/"), columns=["a", "b"], storage_options=b.options)
    assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status
    assert shard_requests(proxy, "p", "GET") == 0
    np.testing.assert_array_equal(np.asarray(shardload.load(layout)), want)


def test_discover_once_of_a_bucket(bucket):
    rng = np.random.default_rng(34)
    parts = ragged(rng, [5, 0, 8, 3], (2,), "int32")
    put_npy_shards(bucket, "o", parts)
    direct = shardload.discover(bucket.url("o/"), storage_options=bucket.options)
    once = shardload.discover_once(bucket.url("o/"), storage_options=bucket.options)
    assert once == direct and once.manifest_state is shardload.ManifestState.ABSENT
    shardload.index(bucket.url("o/"), storage_options=bucket.options)
    once = shardload.discover_once(bucket.url("o/"), storage_options=bucket.options)
    assert once == direct and once.manifest_state is shardload.ManifestState.USED
    np.testing.assert_array_equal(np.asarray(shardload.load(once)), np.concatenate(parts))


def test_cli_index_writes_into_the_bucket(bucket, cli):
    parts = [np.arange(6.0).reshape(3, 2), np.arange(8.0).reshape(4, 2)]
    put_npy_shards(bucket, "c", parts)
    opts = [f"--storage-option=endpoint_override={bucket.options['endpoint_override']}",
            "--storage-option", "scheme=http", "--storage-option", "region=us-east-1"]
    r = subprocess.run([str(cli), "index", bucket.url("c/"), "--checksum", "xxh3", *opts],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert bucket.url("c/shardload.manifest") in r.stdout and "2 shards" in r.stdout
    r = subprocess.run([str(cli), "inspect", bucket.url("c/"), *opts],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "manifest: used" in r.stdout, r.stdout
    layout = shardload.discover(bucket.url("c/"), storage_options=bucket.options)
    assert layout.manifest_state is shardload.ManifestState.USED
    np.testing.assert_array_equal(np.asarray(shardload.load(layout)), np.concatenate(parts))


def test_index_and_discover_once_take_storage_options_for_s3_only(tmp_path):
    np.save(tmp_path / "shard_0000.npy", np.zeros((3, 2)))
    for call in (shardload.index, shardload.discover_once):
        with pytest.raises(ValueError, match="s3:// URLs only"):
            call(str(tmp_path), storage_options={"scheme": "http"})
        with pytest.raises(TypeError, match="storage_options"):
            call("s3://b/d/", storage_options=["scheme=http"])
    assert not (tmp_path / "shardload.manifest").exists()
