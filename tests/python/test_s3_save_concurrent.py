"""Another writer under one ``s3://`` prefix while a save runs: the save publishes only its own
objects (each key checked against the size and ETag its upload was answered with right before
the manifest, and the manifest's index held to them), and its clean-up deletes only them. Both
front ends: ``shardload.numpy.save`` (one process, threads) and ``shardload.save`` (Legate
point tasks, whose keys travel to the commit in the save task's output). Against moto's S3
server on 127.0.0.1 through tests/python/s3_fault_proxy.py, which holds one PUT's answer while
the other writer acts: the order of the two writers is fixed, not raced."""

from __future__ import annotations

import io
import threading
import time

import numpy as np
import pytest

pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
pytest.importorskip("boto3")

import shardload  # noqa: E402
import shardload.numpy  # noqa: E402

import s3_server  # noqa: E402


@pytest.fixture
def proxied(server):
    from s3_fault_proxy import FaultProxy

    with FaultProxy(server) as proxy:
        b = s3_server.Bucket(server, prefix="cc-")
        b.options = {**b.options, "endpoint_override": proxy.endpoint}
        yield b, proxy


FRONT_ENDS = {"numpy": lambda *a, **k: shardload.numpy.save(*a, **k),
              "legate": lambda *a, **k: shardload.save(*a, **k)}


def _url(b: s3_server.Bucket) -> str:
    return f"s3://{b.name}/ds/?" + "&".join(f"{k}={v}" for k, v in b.options.items())


def _other_writer_once_held(b, proxy, held: str, key: str, data: bytes) -> threading.Thread:
    """Puts `data` at `key` once the save's PUT of `held` has begun (the proxy holds its answer
    for 2 s, so the save goes on only after this put)."""
    def other() -> None:
        while proxy.requests("PUT", held) == 0:
            time.sleep(0.01)
        time.sleep(0.5)
        b.put(key, data)

    t = threading.Thread(target=other)
    t.start()
    return t


def _npy(value: int) -> bytes:
    out = io.BytesIO()
    np.save(out, np.full((4, 4), value, np.int32))
    return out.getvalue()


@pytest.mark.parametrize("front", sorted(FRONT_ENDS))
@pytest.mark.parametrize("checksum", ["none", "xxh3"])
@pytest.mark.parametrize("upload", ["put", "multipart"])
def test_a_shard_replaced_before_the_commit_fails_the_save_naming_it(proxied, front, checksum,
                                                                    upload):
    from s3_fault_proxy import Rule

    b, proxy = proxied
    if upload == "multipart":  # Arrow's multipart stream: its ETag from a HEAD after it
        b.options = {**b.options, "multipart_threshold": "0"}
    proxy.add(Rule("PUT", path="/ds/shard_0003.npy", action="delay", delay_s=2.0, count=1))
    t = _other_writer_once_held(b, proxy, "/ds/shard_0003.npy", "ds/shard_0001.npy", _npy(2))
    try:
        with pytest.raises(shardload.ShardWriteError) as e:
            FRONT_ENDS[front](np.full((16, 4), 1, np.int32), _url(b), num_shards=4,
                              overwrite=True, checksum=checksum)
    finally:
        t.join()
    assert f"s3://{b.name}/ds/shard_0001.npy: changed during the save (another writer?): ETag " \
        "was " in str(e.value), str(e.value)
    assert "ds/shardload.manifest" not in b.keys("ds/")
    assert (np.load(io.BytesIO(b.get("ds/shard_0001.npy"))) == 2).all()


@pytest.mark.parametrize("front", sorted(FRONT_ENDS))
def test_a_zarr_chunk_replaced_before_the_commit_fails_the_save_naming_it(proxied, front):
    from s3_fault_proxy import Rule

    b, proxy = proxied
    proxy.add(Rule("PUT", path="/ds/shard_0001.zarr/0.0", action="delay", delay_s=2.0, count=1))
    other = np.full((8, 4), 2, np.int32).tobytes()  # a chunk of the same size, other rows
    t = _other_writer_once_held(b, proxy, "/ds/shard_0001.zarr/0.0", "ds/shard_0000.zarr/0.0",
                                other)
    try:
        with pytest.raises(shardload.ShardWriteError) as e:
            FRONT_ENDS[front](np.full((16, 4), 1, np.int32), _url(b), num_shards=2,
                              format="zarr", overwrite=True)
    finally:
        t.join()
    assert f"s3://{b.name}/ds/shard_0000.zarr/0.0: changed during the save" in str(e.value), \
        str(e.value)
    assert "ds/shardload.manifest" not in b.keys("ds/")
    assert b.get("ds/shard_0000.zarr/0.0") == other


@pytest.mark.parametrize("front", sorted(FRONT_ENDS))
def test_a_shard_another_writer_adds_before_the_commit_fails_the_save_naming_it(proxied, front):
    from s3_fault_proxy import Rule

    b, proxy = proxied
    proxy.add(Rule("PUT", path="/ds/shard_0003.npy", action="delay", delay_s=2.0, count=1))
    t = _other_writer_once_held(b, proxy, "/ds/shard_0003.npy", "ds/shard_0004.npy", _npy(2))
    try:
        with pytest.raises(shardload.ShardWriteError) as e:
            FRONT_ENDS[front](np.full((16, 4), 1, np.int32), _url(b), num_shards=4,
                              overwrite=True)
    finally:
        t.join()
    assert f"s3://{b.name}/ds/shard_0004.npy: is in the dataset's prefix, but this save did " \
        "not write it" in str(e.value), str(e.value)
    assert "ds/shardload.manifest" not in b.keys("ds/")


@pytest.mark.parametrize("front", sorted(FRONT_ENDS))
def test_a_failed_saves_clean_up_leaves_another_writers_object(proxied, front):
    from s3_fault_proxy import Rule

    b, proxy = proxied
    proxy.add(Rule("PUT", path="/ds/shard_0003.npy", action="403", delay_s=2.0, count=None))
    t = _other_writer_once_held(b, proxy, "/ds/shard_0003.npy", "ds/shard_0001.npy", _npy(2))
    try:
        with pytest.raises(shardload.ShardWriteError) as e:
            FRONT_ENDS[front](np.full((16, 4), 1, np.int32), _url(b), num_shards=4)
    finally:
        t.join()
    # The other writer's object stays, and the error says so; the save's own are gone.
    assert f"s3://{b.name}/ds/shard_0001.npy changed since this save wrote it (another " \
        "writer?)" in str(e.value), str(e.value)
    assert b.keys("ds/") == ["ds/shard_0001.npy"]
    assert (np.load(io.BytesIO(b.get("ds/shard_0001.npy"))) == 2).all()


@pytest.mark.parametrize("front", sorted(FRONT_ENDS))
def test_a_failed_saves_clean_up_deletes_nothing_once_another_writer_published(proxied, server,
                                                                               front):
    """The save is held at its check of shard_0001 (a HEAD) while another writer saves the
    prefix over (overwrite=True) and publishes: its shard_0000 has the bytes of the save's, so
    the same MD5 ETag; its shard_0001 other bytes. The save then fails on shard_0001, and its
    clean-up used to delete shard_0000 ("its own" by size and ETag) under the other writer's
    manifest, a published dataset that then no longer loaded. Now it sees the manifest and
    deletes nothing, and its error says so."""
    from s3_fault_proxy import Rule

    b, proxy = proxied
    rule = proxy.add(Rule("HEAD", path="/ds/shard_0001.npy", action="delay", delay_s=6.0,
                          count=1))
    x = np.arange(64, dtype=np.int32).reshape(16, 4)
    y = x.copy()
    y[8:] += 1000
    direct = f"s3://{b.name}/ds/?" + "&".join(
        f"{k}={v}" for k, v in {**b.options, "endpoint_override": server}.items())
    published: list[bool] = []

    def other() -> None:
        while rule.fired == 0:
            time.sleep(0.01)
        shardload.numpy.save(y, direct, num_shards=2, overwrite=True)
        published.append(np.array_equal(shardload.numpy.load(direct), y))

    t = threading.Thread(target=other)
    t.start()
    try:
        with pytest.raises(shardload.ShardWriteError) as e:
            FRONT_ENDS[front](x, _url(b), num_shards=2)
    finally:
        t.join()
    assert published == [True]
    assert f"s3://{b.name}/ds/shard_0001.npy: changed during the save (another writer?)" in \
        str(e.value), str(e.value)
    assert f"the clean-up found s3://{b.name}/ds/shardload.manifest: another writer's " \
        "manifest is there: nothing deleted" in str(e.value), str(e.value)
    assert b.keys("ds/") == ["ds/shard_0000.npy", "ds/shard_0001.npy", "ds/shardload.manifest"]
    np.testing.assert_array_equal(shardload.numpy.load(direct), y)


@pytest.mark.parametrize("front", sorted(FRONT_ENDS))
def test_a_save_left_alone_looks_at_each_of_its_keys_once_before_the_manifest(proxied, front):
    b, proxy = proxied
    FRONT_ENDS[front](np.arange(64, dtype=np.int32).reshape(16, 4), _url(b), num_shards=4,
                      format="raw")
    assert sorted(b.keys("ds/")) == ["ds/shard_0000.bin", "ds/shard_0001.bin",
                                     "ds/shard_0002.bin", "ds/shard_0003.bin",
                                     "ds/shardload.json", "ds/shardload.manifest"]
    # One HEAD of each key the save wrote (the shards and the format's metadata), and one of
    # each shard object when the prefix is listed again right before the manifest's upload
    # (an overwrite that keeps the names shows only in the objects' ETags); none of the
    # manifest: the checks cost a request a key, and one more a shard.
    for key in ["shard_0000.bin", "shard_0001.bin", "shard_0002.bin", "shard_0003.bin"]:
        assert proxy.requests("HEAD", f"/ds/{key}") == 2, key
    assert proxy.requests("HEAD", "/ds/shardload.json") == 1
    assert proxy.requests("HEAD", "/ds/shardload.manifest") == 0
    np.testing.assert_array_equal(
        shardload.numpy.load(_url(b)),
        np.arange(64, dtype=np.int32).reshape(16, 4))
