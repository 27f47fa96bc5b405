"""On Arrow's s3:// client, what an error is ("missing", refused, failed) is told from Arrow's
own words, never from the key or bucket its messages quote. A key may hold any words: a Zarr
store under a prefix named ``NoSuchKey/`` or ``does not exist/`` whose chunk is refused (403)
or fails (500) is an error naming the chunk, as under any other prefix, not a missing chunk
read as the fill value; a refused delete under it is an error, not "already gone"; a refused
listing is no missing directory. The faults come from the fault proxy (s3_fault_proxy.py) in
front of the tests' moto server."""

from __future__ import annotations

import errno
import pathlib
import sys
from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
zarr = pytest.importorskip("zarr")

import shardload  # noqa: E402
import shardload.numpy as snp  # noqa: E402

from s3_fault_proxy import FaultProxy, Rule  # noqa: E402
from s3_server import ARROWS_CLIENT, Bucket  # noqa: E402

# Prefixes whose words Arrow's messages quote: the words of a missing object or bucket, the
# AWS error type of a missing key as Arrow writes it, and none of them.
PREFIXES = ["plain", "NoSuchKey", "does not exist", "NO_SUCH_BUCKET",
            "AWS Error NO_SUCH_KEY during HeadObject operation"]

# A refusal and a failure, and the errno each is.
FAULTS = [("403", errno.EACCES), ("500", errno.EIO)]


@pytest.fixture
def proxied(server: str) -> Iterator[tuple[Bucket, FaultProxy, dict[str, str]]]:
    """A bucket written straight to the server and read through a fault proxy by Arrow's
    client, with few retries (the faults here last)."""
    with FaultProxy(server) as proxy:
        b = Bucket(server)
        options = {**b.options, "endpoint_override": proxy.endpoint, **ARROWS_CLIENT,
                   "max_attempts": "2", "backoff_ms": "5", "max_backoff_ms": "20"}
        yield b, proxy, options


def _array() -> np.ndarray:
    return np.arange(400, dtype=np.float32).reshape(40, 10) + 1  # no element is the fill value


def _zarr_store(tmp_path: pathlib.Path) -> pathlib.Path:
    """A Zarr v2 array of 4 chunks of 10 rows, fill value 0."""
    a = _array()
    z = zarr.open_array(str(tmp_path / "arr.zarr"), mode="w", shape=a.shape, chunks=(10, 10),
                        dtype=a.dtype, fill_value=0, zarr_format=2)
    z[:] = a
    return tmp_path / "arr.zarr"


@pytest.mark.parametrize("action,err", FAULTS, ids=[a for a, _ in FAULTS])
@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_refused_or_failing_zarr_chunk_is_an_error_whatever_its_key_says(
        proxied, tmp_path: pathlib.Path, prefix: str, action: str, err: int) -> None:
    b, proxy, options = proxied
    b.upload_tree(f"{prefix}/arr.zarr", _zarr_store(tmp_path))
    proxy.add(Rule(None, path="arr.zarr/1.0", action=action, count=None))
    with pytest.raises(shardload.ShardReadError) as e:
        snp.load(b.url(f"{prefix}/arr.zarr"), storage_options=options)
    msg = str(e.value)
    assert b.url(f"{prefix}/arr.zarr/1.0") in msg, msg
    assert e.value.errno == err, msg
    assert proxy.rules[0].fired >= 1


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_missing_zarr_chunk_is_still_the_fill_value_whatever_its_key_says(
        proxied, tmp_path: pathlib.Path, prefix: str) -> None:
    b, _, options = proxied
    b.upload_tree(f"{prefix}/arr.zarr", _zarr_store(tmp_path))
    b.client.delete_object(Bucket=b.name, Key=f"{prefix}/arr.zarr/1.0")
    expected = _array()
    expected[10:20] = 0
    got = snp.load(b.url(f"{prefix}/arr.zarr"), storage_options=options)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("action,err", FAULTS, ids=[a for a, _ in FAULTS])
@pytest.mark.parametrize("prefix", ["plain", "NoSuchKey", "does not exist"])
def test_a_refused_or_failing_delete_is_an_error_not_already_gone_whatever_its_key_says(
        proxied, prefix: str, action: str, err: int) -> None:
    """An overwrite with fewer shards deletes the old ones past its own: a DELETE answered
    403 or 500 fails the save, and the old shard is still there."""
    b, proxy, options = proxied
    old = np.arange(40, dtype=np.float64).reshape(20, 2)
    shardload.save(old, b.url(f"{prefix}/d/"), num_shards=4, storage_options=options)
    proxy.add(Rule("DELETE", path="shard_0003.npy", action=action, count=None))
    with pytest.raises(shardload.ShardWriteError) as e:
        shardload.save(old[:6] + 1, b.url(f"{prefix}/d/"), num_shards=2, overwrite=True,
                       storage_options=options)
    msg = str(e.value)
    assert b.url(f"{prefix}/d/shard_0003.npy") in msg and "cannot delete" in msg, msg
    assert proxy.rules[0].fired >= 1
    keys = b.keys(f"{prefix}/d/")
    assert f"{prefix}/d/shard_0003.npy" in keys, keys
    assert f"{prefix}/d/shardload.manifest" not in keys, keys


@pytest.mark.parametrize("prefix", ["NoSuchKey", "does not exist"])
def test_an_overwrite_with_fewer_shards_deletes_the_old_ones_whatever_its_key_says(
        proxied, prefix: str) -> None:
    """The oracle of the test above: with no fault the same overwrite succeeds, its old shards
    gone and the new dataset read back."""
    b, _, options = proxied
    old = np.arange(40, dtype=np.float64).reshape(20, 2)
    shardload.save(old, b.url(f"{prefix}/d/"), num_shards=4, storage_options=options)
    shardload.save(old[:6] + 1, b.url(f"{prefix}/d/"), num_shards=2, overwrite=True,
                   storage_options=options)
    keys = [k for k in b.keys(f"{prefix}/d/") if k != f"{prefix}/d/"]  # Arrow's marker
    assert keys == [f"{prefix}/d/shard_0000.npy", f"{prefix}/d/shard_0001.npy",
                    f"{prefix}/d/shardload.manifest"], keys
    np.testing.assert_array_equal(
        np.asarray(shardload.load(b.url(f"{prefix}/d/"), storage_options=options)), old[:6] + 1)


@pytest.mark.parametrize("prefix", ["plain", "NoSuchKey", "does not exist"])
def test_a_refused_listing_is_no_missing_directory_whatever_its_key_says(
        proxied, prefix: str) -> None:
    """A LIST answered 403 is a directory that cannot be listed, not one that is not there
    (SourceNotFoundError, a FileNotFoundError); an empty prefix is still not found."""
    b, proxy, options = proxied
    b.put_npy(f"{prefix}/d/shard_0000.npy", np.arange(6.0).reshape(3, 2))
    proxy.add(Rule("GET", path="list-type", action="403", count=None))
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(b.url(f"{prefix}/d/"), storage_options=options)
    msg = str(e.value)
    assert not isinstance(e.value, FileNotFoundError), msg
    assert b.url(f"{prefix}/d/") in msg and "cannot list the directory" in msg, msg
    assert "ACCESS_DENIED" in msg, msg
    proxy.clear()
    with pytest.raises(shardload.SourceNotFoundError, match="shard directory not found"):
        shardload.discover(b.url(f"{prefix}/empty/"), storage_options=options)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
