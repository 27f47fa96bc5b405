"""Streaming and manifests over object storage: ``batches`` of s3:// sources, and the manifest
of a dataset in a bucket (``index`` writes it there; ``discover``, ``load`` and
``discover_once`` read it), against moto's S3 server on 127.0.0.1, compared with numpy and
pyarrow reading the local originals."""

from __future__ import annotations

import io
import pathlib
import uuid

import numpy as np
import pytest

moto = pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
boto3 = pytest.importorskip("boto3")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import shardload  # noqa: E402

import s3_server  # noqa: E402


@pytest.fixture(scope="module")
def server():
    """An S3 server on 127.0.0.1 for this module."""
    with s3_server.serving() as endpoint:
        yield endpoint


class Bucket:
    """A new bucket; writes go straight to the server, shardload reads through ``endpoint``
    (the server itself, or a proxy in front of it that counts requests)."""

    def __init__(self, server: str, endpoint: str | None = None):
        self.name = "m-" + uuid.uuid4().hex[:12]
        self.client = boto3.client("s3", endpoint_url=f"http://{server}",
                                   region_name="us-east-1")
        self.client.create_bucket(Bucket=self.name)
        self.options = {"endpoint_override": endpoint or server, "scheme": "http",
                        "region": "us-east-1"}

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.name, Key=key, Body=data)

    def put_npy(self, key: str, array: np.ndarray) -> None:
        buf = io.BytesIO()
        np.save(buf, array)
        self.put(key, buf.getvalue())

    def keys(self, prefix: str = "") -> list[str]:
        got = self.client.list_objects_v2(Bucket=self.name, Prefix=prefix)
        return sorted(o["Key"] for o in got.get("Contents", []))

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()

    def url(self, key: str = "") -> str:
        return f"s3://{self.name}/{key}"


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
