"""``shardload.save`` to ``s3://``: each shard one object uploaded whole by one point task, the
metadata objects, then the manifest last; against moto's S3 server on 127.0.0.1, compared
with numpy and with boto3 reading every object back."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import threading
import time
from typing import Callable

import numpy as np
import pytest

moto = pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
boto3 = pytest.importorskip("boto3")

import shardload  # noqa: E402

import s3_server  # noqa: E402
from conftest import random_array  # noqa: E402


class Bucket(s3_server.Bucket):
    """A new bucket (s3_server.Bucket) whose objects a test reads back with boto3."""

    def __init__(self, server: str):
        super().__init__(server, prefix="sv-")


@pytest.fixture
def bucket(server) -> Bucket:
    return Bucket(server)


def shards_of(a: np.ndarray, num_shards: int) -> list[np.ndarray]:
    """The oracle: axis 0 in ceil(rows / num_shards) pieces, the last ones shorter or empty."""
    per = max(1, -(-a.shape[0] // num_shards))
    return [a[min(i * per, a.shape[0]):min((i + 1) * per, a.shape[0])]
            for i in range(num_shards)]


CASES = [  # rows, num_shards, trailing shape, dtype
    (10, 4, (3,), "float32"),   # 3, 3, 3, 1
    (10, 6, (), "int16"),       # 2, 2, 2, 2, 2, 0: an empty shard after the last rows
    (3, 5, (2, 2), "uint8"),    # more shards than rows
    (7, 1, (2,), "complex64"),
    (9, 2, (4,), "bool"),
    (0, 3, (5,), "float64"),    # no rows at all: every shard a header only
    (6, 3, (0,), "int32"),      # rows of no bytes
]


@pytest.mark.parametrize("rows,num_shards,trailing,dtype", CASES)
def test_npy_round_trip_matches_numpy_per_object_and_through_load(bucket, rows, num_shards,
                                                                  trailing, dtype):
    rng = np.random.default_rng(rows * 100 + num_shards)
    a = random_array(rng, (rows, *trailing), dtype)
    info = shardload.save(a, bucket.url("d/"), num_shards=num_shards,
                          storage_options=bucket.options)
    assert info.num_shards == num_shards and info.bytes == a.nbytes
    names = [f"d/shard_{i:04d}.npy" for i in range(num_shards)]
    assert bucket.keys("d/") == sorted([*names, "d/shardload.manifest"])
    for key, want in zip(names, shards_of(a, num_shards)):
        got = np.load(io.BytesIO(bucket.get(key)))
        assert got.dtype == a.dtype and got.shape == want.shape, key
        np.testing.assert_array_equal(got, want)
    layout = shardload.discover(bucket.url("d/"), storage_options=bucket.options)
    assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status
    assert layout.shape == a.shape
    assert list(layout.shard_rows) == [len(s) for s in shards_of(a, num_shards)]
    if rows > 0:
        back = np.asarray(shardload.load(bucket.url("d/"), storage_options=bucket.options))
        assert back.dtype == a.dtype
        np.testing.assert_array_equal(back, a)


def test_raw_round_trip_writes_the_sidecar_object(bucket):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((11, 2, 3)).astype("float32")
    shardload.save(a, bucket.url("r/"), num_shards=3, format="raw",
                   storage_options=bucket.options)
    assert bucket.keys("r/") == ["r/shard_0000.bin", "r/shard_0001.bin", "r/shard_0002.bin",
                                 "r/shardload.json", "r/shardload.manifest"]
    side = json.loads(bucket.get("r/shardload.json"))
    assert side["rows"] == [4, 4, 3] and side["shape"] == [2, 3]
    for i, want in enumerate(shards_of(a, 3)):
        assert bucket.get(f"r/shard_{i:04d}.bin") == want.tobytes()
    back = shardload.load(bucket.url("r/"), format="raw", storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(back), a)


def test_a_view_that_is_not_c_order_is_uploaded_through_the_gather_buffer(bucket):
    rng = np.random.default_rng(8)
    import cupynumeric as cn

    base = cn.asarray(rng.standard_normal((6, 9)))
    view = base.T  # (9, 6), not C-order
    shardload.save(view, bucket.url("t"), num_shards=2, storage_options=bucket.options)
    back = shardload.load(bucket.url("t/"), storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(back), np.asarray(base).T)


def pieces_of(a: np.ndarray, shard_rows: list[int]) -> list[np.ndarray]:
    """The oracle for shards of chosen rows: consecutive pieces of axis 0."""
    ends = np.cumsum([0, *shard_rows])
    return [a[ends[i]:ends[i + 1]] for i in range(len(shard_rows))]


RAGGED = [  # shard rows, trailing shape, dtype
    ([0, 4, 0, 5, 1, 0], (3,), "float32"),  # empty shards before, between and after
    ([7, 1, 1, 12, 2], (2, 2), "int64"),    # the 2nd and 3rd shards share one even tile
    ([0, 0, 9], (), "uint16"),
    ([5], (4,), "complex128"),
    ([3, 0, 3], (0,), "int8"),              # rows of no bytes
]


@pytest.mark.parametrize("fmt", ["npy", "raw", "zarr"])
@pytest.mark.parametrize("shard_rows,trailing,dtype", RAGGED)
def test_shards_of_chosen_rows_round_trip_in_every_format(bucket, tmp_path, fmt, shard_rows,
                                                          trailing, dtype):
    rng = np.random.default_rng(sum(shard_rows) * 31 + len(shard_rows))
    a = random_array(rng, (sum(shard_rows), *trailing), dtype)
    info = shardload.save(a, bucket.url("c/"), shard_rows=shard_rows, format=fmt,
                          storage_options=bucket.options)
    assert info.num_shards == len(shard_rows) and info.bytes == a.nbytes
    # One launch per shard with bytes; the others are uploaded header only beforehand.
    assert info.tiles == (sum(1 for r in shard_rows if r) if a.nbytes else 0), info
    pieces = pieces_of(a, shard_rows)
    if fmt == "npy":
        for i, want in enumerate(pieces):
            got = np.load(io.BytesIO(bucket.get(f"c/shard_{i:04d}.npy")))
            assert got.dtype == a.dtype and got.shape == want.shape, i
            np.testing.assert_array_equal(got, want)
    elif fmt == "raw":
        assert json.loads(bucket.get("c/shardload.json"))["rows"] == shard_rows
        for i, want in enumerate(pieces):
            assert bucket.get(f"c/shard_{i:04d}.bin") == want.tobytes(), i
    else:
        zarr = pytest.importorskip("zarr")
        download(bucket, "c/", tmp_path)
        for i, want in enumerate(pieces):
            z = zarr.open_array(str(tmp_path / f"shard_{i:04d}.zarr"), mode="r")
            assert z.dtype == a.dtype and z.shape == want.shape, i
            np.testing.assert_array_equal(z[...], want)
    layout = shardload.discover(bucket.url("c/"), format=fmt, storage_options=bucket.options)
    assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status
    assert list(layout.shard_rows) == shard_rows and layout.shape == a.shape
    back = np.asarray(shardload.load(bucket.url("c/"), format=fmt,
                                     storage_options=bucket.options))
    assert back.dtype == a.dtype
    np.testing.assert_array_equal(back, a)


@pytest.mark.parametrize("kind", ["transposed", "broadcast"])
def test_shards_of_chosen_rows_of_views_are_uploaded_bit_exact(bucket, kind):
    import cupynumeric as cn

    rng = np.random.default_rng(12)
    if kind == "transposed":  # not C-order: each shard through the gather buffer
        base = rng.standard_normal((6, 11))
        view, want = cn.asarray(base).T, base.T
    else:  # axis 0 promoted: every row the same storage
        row = rng.standard_normal(5)
        view, want = cn.broadcast_to(cn.asarray(row), (11, 5)), np.broadcast_to(row, (11, 5))
    rows = [2, 0, 6, 3]
    shardload.save(view, bucket.url("v/"), shard_rows=rows, storage_options=bucket.options)
    for i, piece in enumerate(pieces_of(want, rows)):
        np.testing.assert_array_equal(np.load(io.BytesIO(bucket.get(f"v/shard_{i:04d}.npy"))),
                                      piece, err_msg=str(i))
    back = shardload.load(bucket.url("v/"), storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(back), want)


def test_a_shard_of_chosen_rows_whose_upload_is_refused_fails_the_save_and_leaves_nothing(
        proxied):
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    rule = proxy.add(Rule("PUT", path="/c/shard_0002.npy", action="403", count=None))
    a = np.arange(60, dtype=np.int32).reshape(20, 3)
    with pytest.raises(shardload.ShardWriteError) as e:
        shardload.save(a, bucket.url("c/"), shard_rows=[3, 0, 8, 1, 8],
                       storage_options=bucket.options)
    assert rule.fired >= 1
    assert f"s3://{bucket.name}/c/shard_0002.npy" in str(e.value), str(e.value)
    assert "Access Denied" in str(e.value) and "shard 2" in str(e.value), str(e.value)
    # Every other launch was over before the cleanup: nothing is left.
    assert bucket.keys("c/") == []
    # The runtime goes on: the same save without the fault.
    proxy.clear()
    shardload.save(a, bucket.url("c/"), shard_rows=[3, 0, 8, 1, 8],
                   storage_options=bucket.options)
    np.testing.assert_array_equal(
        np.asarray(shardload.load(bucket.url("c/"), storage_options=bucket.options)), a)


def test_shardload_write_to_s3_makes_the_objects_a_local_write_makes_and_read_verifies(
        bucket, tmp_path, cli):
    args = ["--num-shards", "7", "--shape", "23,3", "--dtype", "int16", "--seed", "9"]
    local = tmp_path / "w"
    subprocess.run([str(cli), "write", "--shard-dir", str(local), *args], check=True,
                   capture_output=True)
    url = bucket.url("w")
    query = "?" + "&".join(f"{k}={v}" for k, v in bucket.options.items())
    got = subprocess.run([str(cli), "write", "--shard-dir", url + query, *args],
                         capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    names = sorted(p.name for p in local.iterdir())
    assert bucket.keys("w/") == [f"w/{n}" for n in names]
    for n in names:  # shard for shard, _meta.json and the manifest, byte for byte
        if n != "shardload.manifest":
            assert bucket.get(f"w/{n}") == (local / n).read_bytes(), n
    rows = json.loads((local / "_meta.json").read_text())["rows"]
    assert len(set(rows)) > 1, rows  # the shards are ragged
    # The prefix is the dataset; a glob of its shards, beside its _meta.json, a part of it
    # (here all of it), verified at its rows in the dataset as a local part is.
    whole = f" at rows [0, 23) of the dataset in {url}{query}"
    for source, place in [(url + "/", ""), (url, ""), (url + "/shard_*.npy", whole)]:
        read = subprocess.run([str(cli), "read", source + query], capture_output=True,
                              text=True)
        assert read.returncode == 0, (source, read.stderr)
        assert f"verify:         OK (69 elements match seed 9{place})\n" in read.stdout, \
            read.stdout
    # No _meta.json: verification is skipped, not failed.
    bucket.client.delete_object(Bucket=bucket.name, Key="w/_meta.json")
    read = subprocess.run([str(cli), "read", url + "/" + query], capture_output=True, text=True,
                          )
    assert read.returncode == 0 and "verify:         skipped (no --seed" in read.stdout, read


@pytest.mark.parametrize("threshold,parts", [
    (None, 0),          # within the default multipart_threshold: one PUT
    ("16777216", 3),    # above a threshold of 16 MiB: parts of 8 MiB, sent as they fill
])
def test_a_large_shard_is_one_put_or_a_multipart_upload_read_back_bit_exact(
        bucket, threshold, parts):
    # 25 MiB in one shard. The object's ETag says how it was made: a PUT's is the MD5 of its
    # bytes, a multipart upload's "...-N" for the N parts that completed it.
    rng = np.random.default_rng(13)
    a = rng.integers(0, 2**63, (25 * 2**17, 2), dtype=np.uint64)
    options = dict(bucket.options)
    if threshold is not None:
        options["multipart_threshold"] = threshold
    shardload.save(a, bucket.url("big/"), num_shards=1, storage_options=options)
    want = io.BytesIO()
    np.save(want, a)
    got = bucket.get("big/shard_0000.npy")
    assert got == want.getvalue()
    etag = bucket.client.head_object(Bucket=bucket.name, Key="big/shard_0000.npy")["ETag"]
    if parts == 0:
        assert etag.strip('"') == hashlib.md5(got).hexdigest(), etag
    else:
        assert int(etag.strip('"').rsplit("-", 1)[1]) >= parts, etag


@pytest.mark.parametrize("threshold", ["0", "400127", "400128", "1000000"])
def test_multipart_threshold_chooses_per_object_and_every_object_reads_back(
        proxied, threshold):
    # Three .npy shards of 400 128 bytes (a 128-byte header and 1000 rows of 400) and their
    # manifest. An object of up to the threshold is one PUT and no POST; a larger one a
    # multipart upload: one POST to start it, a PUT of its one part, a POST to complete it.
    bucket, proxy = proxied
    a = np.arange(300000, dtype=np.float32).reshape(3000, 100)
    options = {**bucket.options, "multipart_threshold": threshold}
    shardload.save(a, bucket.url("m/"), num_shards=3, storage_options=options)
    back = shardload.load(bucket.url("m/"), storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(back), a)
    names = [f"shard_{i:04d}.npy" for i in range(3)] + ["shardload.manifest"]
    for name in names:
        size = bucket.client.head_object(Bucket=bucket.name, Key=f"m/{name}")["ContentLength"]
        assert name == "shardload.manifest" or size == 400128, (name, size)
        target = f"/{bucket.name}/m/{name}"
        got = (proxy.requests("PUT", target), proxy.requests("POST", target))
        assert got == ((1, 0) if size <= int(threshold) else (1, 2)), (name, size, got)


def test_a_bad_multipart_threshold_is_an_error_naming_the_url(bucket):
    with pytest.raises(ValueError, match=r"multipart_threshold must be an integer from 0 to "
                                         r"5368709120, found '-1'"):
        shardload.save(np.zeros((4, 2)), bucket.url("t/"),
                       storage_options={**bucket.options, "multipart_threshold": "-1"})
    assert bucket.keys("t/") == []


def test_a_prefix_holding_objects_is_refused_without_overwrite(bucket):
    a = np.arange(12, dtype=np.int64).reshape(6, 2)
    shardload.save(a, bucket.url("d/"), num_shards=2, storage_options=bucket.options)
    before = {k: bucket.get(k) for k in bucket.keys("d/")}
    with pytest.raises(shardload.DestinationExistsError) as e:
        shardload.save(a + 1, bucket.url("d/"), num_shards=2, storage_options=bucket.options)
    assert bucket.url("d/") in str(e.value) and "'shard_0000.npy'" in str(e.value)
    assert "pass overwrite" in str(e.value)
    assert {k: bucket.get(k) for k in bucket.keys("d/")} == before


def test_overwrite_refuses_a_prefix_holding_objects_a_save_does_not_write(bucket):
    bucket.put("d/notes.txt", b"mine")
    bucket.put("d/sub/x.npy", b"mine too")
    with pytest.raises(shardload.DestinationExistsError, match="'notes.txt', which a save"):
        shardload.save(np.zeros((4, 2)), bucket.url("d/"), overwrite=True,
                       storage_options=bucket.options)
    bucket.client.delete_object(Bucket=bucket.name, Key="d/notes.txt")
    with pytest.raises(shardload.DestinationExistsError, match="'sub/', which a save"):
        shardload.save(np.zeros((4, 2)), bucket.url("d/"), overwrite=True,
                       storage_options=bucket.options)
    assert bucket.keys("d/") == ["d/sub/x.npy"]


def test_a_destination_that_is_an_object_is_refused(bucket):
    bucket.put("x.npy", b"mine")
    with pytest.raises(shardload.DestinationExistsError, match="the destination is an object"):
        shardload.save(np.zeros((4, 2)), bucket.url("x.npy"), storage_options=bucket.options)
    with pytest.raises(shardload.ShardWriteError, match="the destination is an object"):
        shardload.save(np.zeros((4, 2)), bucket.url("x.npy/"), overwrite=True,
                       storage_options=bucket.options)
    assert bucket.keys() == ["x.npy"] and bucket.get("x.npy") == b"mine"


def test_overwrite_replaces_a_larger_dataset_and_deletes_its_extra_objects(bucket):
    old = np.arange(60, dtype=np.float32).reshape(20, 3)
    shardload.save(old, bucket.url("d/"), num_shards=6, format="raw",
                   storage_options=bucket.options)
    new = -np.arange(21, dtype=np.float32).reshape(7, 3)
    shardload.save(new, bucket.url("d/"), num_shards=2, overwrite=True,
                   storage_options=bucket.options)
    # The old raw shards and sidecar are gone: only the new npy shards and the manifest.
    assert bucket.keys("d/") == ["d/shard_0000.npy", "d/shard_0001.npy",
                                 "d/shardload.manifest"]
    layout = shardload.discover(bucket.url("d/"), storage_options=bucket.options)
    assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status
    back = shardload.load(bucket.url("d/"), storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(back), new)
    trusted = shardload.load(bucket.url("d/"), trust_manifest=True,
                             storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(trusted), new)


def test_a_missing_bucket_is_an_error_naming_the_url_and_writes_nothing(server):
    probe = Bucket(server)
    url = f"s3://{probe.name}-missing/d/"
    with pytest.raises(shardload.ShardWriteError) as e:
        shardload.save(np.zeros((4, 2)), url, storage_options=probe.options)
    assert url in str(e.value) and "does not exist" in str(e.value)
    names = [b["Name"] for b in probe.client.list_buckets()["Buckets"]]
    assert f"{probe.name}-missing" not in names


def download(bucket: Bucket, prefix: str, to) -> None:
    """Every object under ``prefix`` as a file under ``to``: what zarr-python reads."""
    for key in bucket.keys(prefix):
        path = to / key[len(prefix):]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bucket.get(key))


@pytest.mark.parametrize("rows,num_shards,trailing,dtype", CASES)
def test_zarr_round_trip_matches_zarr_python_per_store_and_through_load(
        bucket, tmp_path, rows, num_shards, trailing, dtype):
    zarr = pytest.importorskip("zarr")
    rng = np.random.default_rng(rows * 100 + num_shards + 7)
    a = random_array(rng, (rows, *trailing), dtype)
    info = shardload.save(a, bucket.url("z/"), num_shards=num_shards, format="zarr",
                          storage_options=bucket.options)
    assert info.num_shards == num_shards and info.bytes == a.nbytes
    pieces = shards_of(a, num_shards)
    has_bytes = a.nbytes > 0
    got_keys = bucket.keys("z/")
    for i, want in enumerate(pieces):
        chunk = [k for k in got_keys if k.startswith(f"z/shard_{i:04d}.zarr/") and
                 not k.endswith(".zarray")]
        # One chunk object per store with bytes (each well under 64 MiB), none without.
        assert len(chunk) == (1 if len(want) and has_bytes else 0), (i, chunk)
        if chunk:
            assert chunk[0] == f"z/shard_{i:04d}.zarr/0" + ".0" * len(trailing), chunk
    assert "z/shardload.manifest" in got_keys
    assert len(got_keys) == 1 + num_shards + sum(1 for p in pieces if len(p) and has_bytes)
    download(bucket, "z/", tmp_path)
    for i, want in enumerate(pieces):
        z = zarr.open_array(str(tmp_path / f"shard_{i:04d}.zarr"), mode="r")
        assert z.dtype == a.dtype and z.shape == want.shape, i
        np.testing.assert_array_equal(z[...], want)
    layout = shardload.discover(bucket.url("z/"), storage_options=bucket.options)
    assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status
    assert layout.shape == a.shape and layout.format == "zarr"
    if rows > 0:
        back = np.asarray(shardload.load(bucket.url("z/"), storage_options=bucket.options))
        assert back.dtype == a.dtype
        np.testing.assert_array_equal(back, a)


def test_a_zarr_store_over_64_mib_is_chunk_objects_split_evenly_the_last_padded(bucket,
                                                                                tmp_path):
    zarr = pytest.importorskip("zarr")
    # 65 rows of 1 MiB in one store: two chunks of 33 rows (not 64 and 1): the second holds
    # 32 rows and one row of zeros, as Zarr v2 stores an edge chunk at full size.
    rng = np.random.default_rng(21)
    a = rng.integers(0, 2**63, (65, 2**17), dtype=np.int64)
    shardload.save(a, bucket.url("big/"), num_shards=1, format="zarr",
                   storage_options=bucket.options)
    assert bucket.keys("big/") == ["big/shard_0000.zarr/.zarray", "big/shard_0000.zarr/0.0",
                                   "big/shard_0000.zarr/1.0", "big/shardload.manifest"]
    meta = json.loads(bucket.get("big/shard_0000.zarr/.zarray"))
    assert meta["shape"] == [65, 2**17] and meta["chunks"] == [33, 2**17]
    second = bucket.get("big/shard_0000.zarr/1.0")
    assert len(second) == 33 * 2**20
    assert second[:32 * 2**20] == a[33:].tobytes() and second[32 * 2**20:] == bytes(2**20)
    download(bucket, "big/", tmp_path)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "shard_0000.zarr"), mode="r")[...],
                                  a)
    back = shardload.load(bucket.url("big/"), storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(back), a)


@pytest.mark.parametrize("path", ["signed", "arrow"])
def test_overwrite_of_zarr_replaces_stores_chunks_and_leaves_no_empty_store(bucket, path):
    options = bucket.options
    if path == "arrow":  # Arrow's client writes and deletes
        options = {**bucket.options, **s3_server.ARROWS_CLIENT}
    def keys_but_marker(prefix: str) -> list[str]:
        return [k for k in bucket.keys(prefix) if not (path == "arrow" and k == prefix)]

    rng = np.random.default_rng(3)
    old = rng.standard_normal((50, 3)).astype("float32")
    shardload.save(old, bucket.url("d/"), num_shards=5, format="zarr", storage_options=options)
    assert len(bucket.keys("d/")) == 1 + 5 * 2
    new = rng.standard_normal((7, 3)).astype("float32")
    shardload.save(new, bucket.url("d/"), num_shards=2, format="zarr", overwrite=True,
                   storage_options=options)
    # Stores 2-4 are gone whole, with no "directory" marker left that a listing would show
    # as an empty store. (Arrow's deletes leave one for the dataset's own prefix, "d/",
    # which no listing of it shows.)
    assert keys_but_marker("d/") == ["d/shard_0000.zarr/.zarray", "d/shard_0000.zarr/0.0",
                                 "d/shard_0001.zarr/.zarray", "d/shard_0001.zarr/0.0",
                                 "d/shardload.manifest"]
    layout = shardload.discover(bucket.url("d/"), storage_options=options)
    assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status
    assert list(layout.shard_rows) == [4, 3]
    np.testing.assert_array_equal(
        np.asarray(shardload.load(bucket.url("d/"), storage_options=options)), new)
    # Zarr replaced by npy, then npy by Zarr: the other format's objects go.
    shardload.save(new, bucket.url("d/"), num_shards=3, overwrite=True, storage_options=options)
    assert keys_but_marker("d/") == ["d/shard_0000.npy", "d/shard_0001.npy",
                                     "d/shard_0002.npy", "d/shardload.manifest"]
    shardload.save(old, bucket.url("d/"), num_shards=1, format="zarr", overwrite=True,
                   storage_options=options)
    assert keys_but_marker("d/") == ["d/shard_0000.zarr/.zarray", "d/shard_0000.zarr/0.0",
                                     "d/shardload.manifest"]
    np.testing.assert_array_equal(
        np.asarray(shardload.load(bucket.url("d/"), storage_options=options)), old)


@pytest.mark.parametrize("prefix", ["we ird #=,;@!/", "\u00fcn\u00ef c\u00f8d\u00e9+%/"])
def test_a_zarr_save_and_overwrite_under_a_prefix_of_symbols_and_non_ascii(bucket, prefix):
    a = np.arange(60, dtype=np.float64).reshape(20, 3)
    shardload.save(a, bucket.url(prefix), num_shards=3, format="zarr",
                   storage_options=bucket.options)
    stores = [f"{prefix}shard_{i:04d}.zarr/" for i in range(3)]
    assert bucket.keys(prefix) == sorted([s + n for s in stores for n in (".zarray", "0.0")] +
                                         [f"{prefix}shardload.manifest"])
    back = shardload.load(bucket.url(prefix), storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(back), a)
    shardload.save(a[:5], bucket.url(prefix), num_shards=1, format="zarr", overwrite=True,
                   storage_options=bucket.options)
    assert bucket.keys(prefix) == [stores[0] + ".zarray", stores[0] + "0.0",
                                   f"{prefix}shardload.manifest"]
    back = shardload.load(bucket.url(prefix), storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(back), a[:5])


@pytest.mark.parametrize("prefix", ["run[1]/", "x*y/", "v{2}/", "a [b]* c/"])
def test_a_prefix_spelled_with_glob_characters_is_loaded_as_spelled(bucket, prefix, cli):
    # Wildcards and numbering are read in a URL's last part only: the prefix a save wrote to
    # is read back from the same URL, and a glob or pattern of its objects works under it.
    a = np.arange(24, dtype=np.int32).reshape(12, 2)
    shardload.save(a, bucket.url(prefix), num_shards=3, storage_options=bucket.options)
    for name in ("", "shard_*.npy", "shard_{:04d}.npy", "shard_000[0-2].npy"):
        back = shardload.load(bucket.url(prefix + name), storage_options=bucket.options)
        np.testing.assert_array_equal(np.asarray(back), a)
    # The command line too: the prefix, and its objects named one by one (a list of files,
    # not globs, though their prefix holds glob characters).
    opts = [f"--storage-option={k}={v}" for k, v in bucket.options.items()]
    objects = [bucket.url(f"{prefix}shard_{i:04d}.npy") for i in range(3)]
    for sources in ([bucket.url(prefix)], objects):
        r = subprocess.run([str(cli), "inspect", "--json", *sources, *opts],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["total_rows"] == 12, r.stdout
    layout = shardload.discover(bucket.url(prefix), storage_options=bucket.options)
    assert layout.manifest_state is shardload.ManifestState.USED
    # Wildcards meant for the prefix: the error says it was taken as spelled.
    with pytest.raises(shardload.LayoutError) as e:
        shardload.load(bucket.url("*/shard_*.npy"), storage_options=bucket.options)
    assert f"the prefix '{bucket.url('*/')}' is taken as spelled" in str(e.value), str(e.value)


MARKERS = [  # old format, marker, new format: a marker object the new save does not write
    ("npy", "shard_0000.zarr/", "npy"),    # another format's store, of a shard's number
    ("zarr", "shard_0009.zarr/", "zarr"),  # the same format's, beyond both counts
    ("raw", "shard_0003.zarr/", "raw"),
    ("npy", "shard_0005.zarr/", "zarr"),   # the new format's, beyond the new count
]


@pytest.mark.parametrize("path", ["signed", "arrow"])
@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "no-manifest"])
@pytest.mark.parametrize("old_fmt,marker,new_fmt", MARKERS)
def test_overwrite_deletes_an_empty_marker_named_like_a_store_and_publishes(
        bucket, path, manifest, old_fmt, marker, new_fmt):
    # An empty "directory" marker object named like a store (rclone mkdir, s3fs, the S3
    # console's "Create folder" or Arrow's delete of a store's last object leave one) is an
    # empty store the overwrite replaces: it goes with the old dataset, and the new one is
    # published (before, it was left, and the manifest's index refused the prefix after the old
    # dataset was replaced: nothing published, every later overwrite the same).
    options = bucket.options
    if path == "arrow":  # Arrow's client writes and deletes
        options = {**bucket.options, **s3_server.ARROWS_CLIENT}
    old = np.arange(40.0).reshape(10, 4)
    new = -np.arange(36.0).reshape(9, 4)
    shardload.save(old, bucket.url("d/"), num_shards=2, format=old_fmt, storage_options=options)
    bucket.put("d/" + marker, b"")
    shardload.save(new, bucket.url("d/"), num_shards=3, format=new_fmt, overwrite=True,
                   manifest=manifest, storage_options=options)
    # The oracle: what the same save writes to an empty prefix.
    shardload.save(new, bucket.url("ref/"), num_shards=3, format=new_fmt, manifest=manifest,
                   storage_options=options)
    # Arrow's deletes leave a marker for the dataset's own prefix, which no listing shows.
    got = [k[len("d/"):] for k in bucket.keys("d/") if k != "d/"]
    assert got == [k[len("ref/"):] for k in bucket.keys("ref/") if k != "ref/"]
    back = shardload.load(bucket.url("d/"), storage_options=options)
    np.testing.assert_array_equal(np.asarray(back), new)
    if manifest:
        layout = shardload.discover(bucket.url("d/"), storage_options=options)
        assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status


def test_overwrite_refuses_a_store_holding_an_object_a_save_does_not_write(bucket):
    a = np.arange(12, dtype=np.int16).reshape(6, 2)
    shardload.save(a, bucket.url("d/"), num_shards=2, format="zarr",
                   storage_options=bucket.options)
    bucket.put("d/shard_0001.zarr/notes.txt", b"mine")
    before = {k: bucket.get(k) for k in bucket.keys("d/")}
    with pytest.raises(shardload.DestinationExistsError,
                       match="'shard_0001.zarr/notes.txt', which a save does not write"):
        shardload.save(a + 1, bucket.url("d/"), num_shards=1, format="zarr", overwrite=True,
                       storage_options=bucket.options)
    assert {k: bucket.get(k) for k in bucket.keys("d/")} == before


def test_a_refused_chunk_upload_fails_a_zarr_save_and_leaves_nothing(proxied):
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    proxy.add(Rule("PUT", path="/z/shard_0001.zarr/0.0", action="403", count=None))
    with pytest.raises(shardload.ShardWriteError) as e:
        shardload.save(np.ones((9, 2)), bucket.url("z/"), num_shards=3, format="zarr",
                       storage_options=bucket.options)
    assert "shard_0001.zarr/0.0" in str(e.value), str(e.value)
    assert bucket.keys("z/") == []


def test_http_destinations_are_refused_naming_the_url(bucket):
    with pytest.raises(ValueError, match="http://127.0.0.1:1/d/: http"):
        shardload.save(np.zeros((4, 2)), "http://127.0.0.1:1/d/")
    assert bucket.keys() == []


def test_storage_options_apply_to_s3_urls_only(tmp_path):
    with pytest.raises(ValueError, match="apply to s3:// URLs only"):
        shardload.save(np.zeros((4, 2)), str(tmp_path / "d"), storage_options={"scheme": "http"})
    assert not (tmp_path / "d").exists()


# ---- faults, through tests/python/s3_fault_proxy.py ------------------------------------------

@pytest.fixture
def proxied(server):
    from s3_fault_proxy import FaultProxy

    with FaultProxy(server) as proxy:
        b = Bucket(server)
        b.options = {**b.options, "endpoint_override": proxy.endpoint}
        yield b, proxy


# Each upload fault on both ways an object goes up: one PUT (within multipart_threshold, the
# default for these sizes) and a multipart upload (a threshold of 0).
UPLOADS = [pytest.param({}, id="put"), pytest.param({"multipart_threshold": "0"}, id="multipart")]


# Keys whose "." / ".." segments a client or server would resolve to another key.
DOTTED = ["new/../keep/", "./keep/", "keep/./", "keep/..", "new/./../keep/", "a/b/../../keep/"]


@pytest.mark.parametrize("path", ["signed", "arrow"])
def test_a_key_with_dot_segments_is_refused_before_any_request(proxied, server, path):
    """save to "s3://B/new/../keep/" once checked the literal prefix (empty) while libcurl sent
    the PUTs to keep/, and the failed save's clean-up deleted the user's keep/shard_0000.npy;
    "x/../../OTHER/" reached another bucket. Such keys are refused, for saves (with and
    without overwrite), discovery and reads, before a single request: the proxy sees none,
    and both buckets keep every object, byte for byte."""
    bucket, proxy = proxied
    options = bucket.options
    if path == "arrow":  # Arrow's client does the requests
        options = {**bucket.options, **s3_server.ARROWS_CLIENT}
    keep = np.arange(6.0).reshape(3, 2)
    shardload.save(keep, bucket.url("keep/"), num_shards=1, storage_options=options)
    other = Bucket(server)
    other.put("d/mine.npy", b"mine")
    before = {k: bucket.get(k) for k in bucket.keys()}
    assert "keep/shard_0000.npy" in before
    proxy.log.clear()
    dests = [bucket.url(k) for k in DOTTED] + [bucket.url(f"x/../../{other.name}/d/")]
    for dest in dests:
        for overwrite in (False, True):
            with pytest.raises(ValueError, match=r"the key holds a '\.\.?' segment") as e:
                shardload.save(np.ones((4, 2)), dest, overwrite=overwrite,
                               storage_options=options)
            assert dest in str(e.value)
        for source in (dest, dest.rstrip("/") + "/shard_0000.npy"):
            with pytest.raises((ValueError, OSError),
                               match=r"the key holds a '\.\.?' segment") as e:
                shardload.discover(source, storage_options=options)
            assert source in str(e.value)
    assert proxy.log == []
    assert {k: bucket.get(k) for k in bucket.keys()} == before
    assert other.keys() == ["d/mine.npy"] and other.get("d/mine.npy") == b"mine"
    # The same names without the dot segments work.
    np.testing.assert_array_equal(
        np.asarray(shardload.load(bucket.url("keep/"), storage_options=options)), keep)


@pytest.mark.parametrize("path", ["signed", "arrow"])
@pytest.mark.parametrize("spelled", ["..", "."])
def test_a_bucket_spelled_as_a_dot_segment_is_refused(bucket, path, spelled):
    """s3://../B/d/ sends a path-style request for /../B/d/..., which a client or server that
    resolves dot segments takes for bucket B: refused for a load and a save, B untouched."""
    options = bucket.options if path == "signed" else {**bucket.options,
                                                       **s3_server.ARROWS_CLIENT}
    bucket.put_npy("d/shard_0000.npy", np.arange(6.0).reshape(3, 2))
    before = {k: bucket.get(k) for k in bucket.keys()}
    with pytest.raises(ValueError, match=r"holds a '\.\.?' segment"):
        shardload.discover(f"s3://{spelled}/{bucket.name}/d/", storage_options=options)
    with pytest.raises(ValueError, match=r"holds a '\.\.?' segment"):
        shardload.save(np.ones((2, 2)), f"s3://{spelled}/{bucket.name}/new/",
                       storage_options=options)
    assert {k: bucket.get(k) for k in bucket.keys()} == before


@pytest.mark.parametrize("upload", UPLOADS)
@pytest.mark.parametrize("action", ["500", "reset"])
def test_an_upload_answered_500_or_reset_is_retried_and_the_save_completes(
        proxied, upload, action):
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    rule = proxy.add(Rule("PUT", path="/d/shard_0001.npy", action=action, count=2))
    a = np.arange(40, dtype=np.int32).reshape(10, 4)
    shardload.save(a, bucket.url("d/"), num_shards=3,
                   storage_options={**bucket.options, **upload})
    assert rule.fired == 2
    for i, want in enumerate(shards_of(a, 3)):
        np.testing.assert_array_equal(np.load(io.BytesIO(bucket.get(f"d/shard_{i:04d}.npy"))),
                                      want)
    back = shardload.load(bucket.url("d/"), storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(back), a)


@pytest.mark.parametrize("upload", UPLOADS)
@pytest.mark.parametrize("action,options,words", [
    ("403", {}, "Access Denied"),                      # never retried
    ("500", {"max_attempts": "2"}, "internal error"),  # retried, then given up
])
def test_a_refused_upload_fails_the_save_without_a_manifest_and_leaves_nothing(
        proxied, action, options, words, upload):
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    rule = proxy.add(Rule("PUT", path="/d/shard_0001.npy", action=action, count=None))
    a = np.arange(40, dtype=np.int32).reshape(10, 4)
    with pytest.raises(shardload.ShardWriteError) as e:
        shardload.save(a, bucket.url("d/"), num_shards=3,
                       storage_options={**bucket.options, **options, **upload})
    assert rule.fired >= (2 if action == "500" else 1)
    assert f"s3://{bucket.name}/d/shard_0001.npy" in str(e.value), str(e.value)
    assert words in str(e.value), str(e.value)
    # Never completed (a PUT refused makes no object; a multipart upload's only part, sent at
    # its completion, failed: Arrow leaves that upload incomplete, see docs/save.md); what the
    # other tiles uploaded is deleted.
    assert bucket.keys("d/") == []


def test_a_refused_middle_part_aborts_the_multipart_upload(proxied):
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    rule = proxy.add(Rule("PUT", path="partNumber=2", action="403", count=None))
    a = np.ones((20 * 2**17, 1), dtype=np.float64)  # 20 MiB: parts of 8, 8 and 4 MiB
    with pytest.raises(shardload.ShardWriteError, match="shard_0000.npy"):
        shardload.save(a, bucket.url("d/"), num_shards=1,
                       storage_options={**bucket.options, "multipart_threshold": "0"})
    assert rule.fired >= 1
    assert bucket.keys("d/") == []
    uploads = bucket.client.list_multipart_uploads(Bucket=bucket.name).get("Uploads", [])
    assert uploads == []


def test_a_refused_overwrite_keeps_no_manifest_for_a_partly_replaced_dataset(proxied):
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    old = np.arange(24, dtype=np.float64).reshape(12, 2)
    shardload.save(old, bucket.url("d/"), num_shards=3, storage_options=bucket.options)
    proxy.add(Rule("PUT", path="/d/shard_0002.npy", action="403", count=None))
    with pytest.raises(shardload.ShardWriteError, match="shard_0002.npy"):
        shardload.save(old + 1, bucket.url("d/"), num_shards=3, overwrite=True,
                       storage_options=bucket.options)
    # The old manifest went first; no new one: a reader probes the objects, and a
    # trusting one finds no manifest to trust.
    assert "d/shardload.manifest" not in bucket.keys("d/")
    layout = shardload.discover(bucket.url("d/"), storage_options=bucket.options)
    assert layout.manifest_state is shardload.ManifestState.ABSENT


def test_a_refused_delete_of_an_old_object_fails_the_overwrite_without_a_manifest(proxied):
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    old = np.arange(40, dtype=np.float64).reshape(20, 2)
    shardload.save(old, bucket.url("d/"), num_shards=4, storage_options=bucket.options)
    # The new dataset has 2 shards: shards 2 and 3 of the old one are to be deleted.
    proxy.add(Rule("DELETE", path="/d/shard_0003.npy", action="403", count=None))
    with pytest.raises(shardload.ShardWriteError) as e:
        shardload.save(old[:6] + 1, bucket.url("d/"), num_shards=2, overwrite=True,
                       storage_options=bucket.options)
    assert "shard_0003.npy" in str(e.value) and "cannot delete" in str(e.value), e.value
    assert "AccessDenied" in str(e.value), e.value
    keys = bucket.keys("d/")
    assert "d/shardload.manifest" not in keys and "d/shard_0003.npy" in keys, keys
    assert [m for m, _, _, _ in proxy.log].count("DELETE") >= 2, proxy.log


def test_checksums_are_kept_in_the_manifest_and_verify_checks_the_objects(bucket):
    a = np.arange(30, dtype=np.float32).reshape(10, 3)
    shardload.save(a, bucket.url("c/"), num_shards=3, checksum="xxh3",
                   storage_options=bucket.options)
    query = "?" + "&".join(f"{k}={v}" for k, v in bucket.options.items())
    manifest = bucket.url("c/shardload.manifest") + query
    assert shardload.verify(manifest, on_host=True) == []
    # Same size, other bytes: its checksum no longer matches.
    tampered = io.BytesIO()
    np.save(tampered, shards_of(a, 3)[1] + 1)
    bucket.put("c/shard_0001.npy", tampered.getvalue())
    bad = shardload.verify(manifest, on_host=True)
    assert [m.shard for m in bad] == [1], bad


@pytest.mark.parametrize("front_end", ["shardload.save", "shardload.numpy.save"])
def test_ctrl_c_during_an_s3_save_publishes_no_manifest(proxied, server, front_end):
    """SIGINT arrives while the save uploads (shard 1's part held back 5 s by the proxy, the
    signal sent once shard 0's object is there): KeyboardInterrupt before the manifest, and
    what was uploaded is deleted, by either front end (numpy's clean-up requests were refused
    while the interrupt was pending, and its uploaded shards left)."""
    import tempfile

    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    rule = proxy.add(Rule("PUT", path="/d/shard_0001.npy", action="delay", delay_s=5.0,
                          count=None))
    with tempfile.TemporaryDirectory() as tmp:
        fired = f"{tmp}/fired"

        def when_shard_1_is_held() -> None:
            # Made once the upstream has stored shard 0 (its answer sent at once) and shard 1's
            # PUT is held: a front end that sent shard 1 first (Legate's tasks may) had it
            # through its delay, and the save complete, before a signal sent on shard 0 alone.
            def wait() -> None:
                while proxy.requests("PUT", "/d/shard_0001.npy") == 0:
                    time.sleep(0.01)
                open(fired, "w").close()
            threading.Thread(target=wait, daemon=True).start()

        proxy.add(Rule("PUT", path="/d/shard_0000.npy", action="held-answer", delay_s=0.0,
                       count=None, after=when_shard_1_is_held))
        got = _save_then_ctrl_c(bucket, fired, 300, "the interrupted save", front_end=front_end,
                                shape=(30, 4), dtype="float32", num_shards=3)
    if got[0] == "SAVED":  # shard 1's PUT was held more than 5 s before shard 0 was stored
        pytest.skip("the signal came after the save")
    assert got[0] == "INTERRUPTED", got
    assert rule.fired >= 1
    assert bucket.keys("d/") == []


def test_ctrl_c_during_shardload_write_to_s3_ends_with_status_130_and_cleans_up(proxied, cli):
    """SIGINT to `shardload write` (under Legate) while an upload is held by the proxy: Realm's
    own handler used to end the process with a backtrace (death by SIGINT) and leave the
    uploaded shards without a manifest, which a load then read as a smaller dataset. Now the
    command ends as `read` does, `shardload write: interrupted` and status 130, and the save's
    clean-up deletes what it uploaded (the prefix was empty)."""
    import signal
    import subprocess

    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    rule = proxy.add(Rule("PUT", path="/w/shard_0002.npy", action="delay", delay_s=5.0,
                          count=1))
    query = "?" + "&".join(f"{k}={v}" for k, v in bucket.options.items())
    proc = subprocess.Popen([str(cli), "write", "--shard-dir", bucket.url("w/") + query,
                             "--num-shards", "4", "--shape", "4000,16"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while rule.fired == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rule.fired == 1, proc.communicate()
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"Ctrl-C did not end `shardload write`: {proc.communicate()}")
    assert proc.returncode == 130, (proc.returncode, err[-3000:])
    assert err.strip().splitlines()[-1] == "shardload write: interrupted", err[-3000:]
    assert "backtrace" not in err and "error:" not in err, err[-3000:]
    assert "wrote" not in out, out
    time.sleep(6)  # the held PUT goes on to the server after its delay, the client gone
    # No manifest, and no shard the save finished: only the held PUT's object, which the
    # proxy forwarded after the client had gone, can be there.
    assert set(bucket.keys("w/")) <= {"w/shard_0002.npy"}, bucket.keys("w/")


# ---- the commit's own record: a lagging listing, ETag spellings, a manifest PUT unanswered ----

def test_a_listing_that_lacks_a_trailing_shard_fails_the_save_naming_it(proxied):
    """Every LIST during the save leaves out shard_0003.npy (a store whose listings lag its
    writes): the manifest of shards 0-2 was published and the save returned success, and a
    trusting load then gave 60 of 80 rows without an error. The save knows it wrote that key:
    it fails naming it, publishes no manifest and deletes what it uploaded."""
    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    rule = proxy.add(Rule("GET", path="list-type=2", action="hide-listed",
                          hide="shard_0003.npy", count=None))
    x = np.arange(160.0).reshape(80, 2)
    with pytest.raises(shardload.ShardWriteError) as e:
        snp.save(x, bucket.url("d/"), num_shards=4, storage_options=bucket.options)
    msg = str(e.value)
    assert f"s3://{bucket.name}/d/shard_0003.npy: written by this save" in msg, msg
    assert "does not show it" in msg and "3 of the save's 4 shards" in msg, msg
    assert "not published" in msg, msg
    # Asked three times (the lag may pass), then given up.
    assert rule.fired == 3, rule.fired
    assert bucket.keys("d/") == []


def test_a_listing_that_lags_once_is_asked_again_and_the_manifest_lists_every_shard(proxied):
    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    rule = proxy.add(Rule("GET", path="list-type=2", action="hide-listed",
                          hide="shard_0003.npy", count=1))
    x = np.arange(160.0).reshape(80, 2)
    snp.save(x, bucket.url("d/"), num_shards=4, storage_options=bucket.options)
    assert rule.fired == 1
    direct = {**bucket.options, "endpoint_override": bucket.endpoint}
    layout = shardload.discover(bucket.url("d/"), storage_options=direct)
    assert layout.manifest_state is shardload.ManifestState.USED
    assert layout.num_shards == 4
    np.testing.assert_array_equal(
        snp.load(bucket.url("d/"), storage_options=direct, trust_manifest=True), x)


RESPELLED = {"unquoted": lambda v: v.strip('"'), "upper-hex": lambda v: v.upper(),
             "weak": lambda v: "W/" + v}


@pytest.mark.parametrize("spelling", sorted(RESPELLED))
def test_put_answers_spelling_the_etag_otherwise_than_head_save_and_clean_up(proxied,
                                                                             spelling):
    """A store whose PUT answers spell the ETag otherwise than its HEADs (unquoted, upper-case
    hex, "W/"): every save failed as "changed during the save (another writer?)" and its
    clean-up left the uploaded objects. The ETags are compared in one form: the save
    completes; and a save failing later still deletes what it uploaded."""
    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    proxy.add(Rule("PUT", action="respell-etag", respell=RESPELLED[spelling], count=None))
    x = np.arange(40.0).reshape(20, 2)
    for front_end in (shardload.numpy.save, shardload.save):
        prefix = f"{front_end.__module__}/"
        front_end(x, bucket.url(prefix), num_shards=2, storage_options=bucket.options)
        assert bucket.keys(prefix) == [prefix + "shard_0000.npy", prefix + "shard_0001.npy",
                                       prefix + "shardload.manifest"]
        np.testing.assert_array_equal(
            snp.load(bucket.url(prefix), storage_options=bucket.options,
                                 trust_manifest=True), x)
    # The rewritten answers and a refused upload of shard 2: shards 0 and 1 are deleted.
    proxy.rules.insert(0, Rule("PUT", path="/f/shard_0002.npy", action="403", count=None))
    with pytest.raises(shardload.ShardWriteError) as e:
        snp.save(x, bucket.url("f/"), num_shards=3, storage_options=bucket.options)
    assert "shard_0002.npy" in str(e.value) and "is left" not in str(e.value), str(e.value)
    assert bucket.keys("f/") == []


def manifest_puts(proxy) -> int:
    return proxy.requests("PUT", "shardload.manifest")


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_manifest_stored_whose_answer_is_lost_is_the_save_s_success(proxied, overwrite):
    """The manifest's PUT reaches the store and its answer is lost, every attempt (the
    connection reset after the upstream stored it): the save raised "another writer's manifest
    is there" though its own manifest was there and the dataset published (with overwrite, the
    old one gone). It looks, finds the bytes it sent, and returns success."""
    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    direct = {**bucket.options, "endpoint_override": bucket.endpoint}
    x = np.arange(200.0).reshape(100, 2)
    if overwrite:
        snp.save(x * 0, bucket.url("d/"), num_shards=3, storage_options=direct)
    rule = proxy.add(Rule("PUT", path="/d/shardload.manifest", action="lost-answer",
                          count=None))
    snp.save(x, bucket.url("d/"), num_shards=2, overwrite=overwrite,
                         storage_options=bucket.options)
    assert rule.fired >= 1
    assert bucket.keys("d/") == ["d/shard_0000.npy", "d/shard_0001.npy", "d/shardload.manifest"]
    layout = shardload.discover(bucket.url("d/"), storage_options=direct)
    assert layout.manifest_state is shardload.ManifestState.USED
    np.testing.assert_array_equal(
        snp.load(bucket.url("d/"), storage_options=direct, trust_manifest=True), x)


def test_a_manifest_put_unanswered_fails_naming_what_the_look_found(proxied, server):
    """The manifest's PUT refused or unanswered, and what a look finds: nothing after a refusal
    (never stored: the save fails so, and deletes what it uploaded); nothing after no answer
    (which a store that lags its writes also answers for a while: whether it was stored cannot
    be told, and nothing is deleted); or another writer's manifest put there meanwhile (the
    save fails naming it, and deletes nothing: that writer's dataset may use the keys)."""
    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    direct = {**bucket.options, "endpoint_override": bucket.endpoint}
    x = np.arange(40.0).reshape(20, 2)
    proxy.add(Rule("PUT", path="/r/shardload.manifest", action="403", count=None))
    with pytest.raises(shardload.ShardWriteError) as e:
        snp.save(x, bucket.url("r/"), num_shards=2, storage_options=bucket.options)
    assert "found no object there: it was not stored" in str(e.value), str(e.value)
    assert bucket.keys("r/") == []

    proxy.add(Rule("PUT", path="/n/shardload.manifest", action="reset", count=None))
    with pytest.raises(shardload.ShardWriteError) as e:
        snp.save(x, bucket.url("n/"), num_shards=2,
                             storage_options={**bucket.options, "max_attempts": "2"})
    msg = str(e.value)
    assert "whether it was stored cannot be told" in msg and "not stored" not in msg, msg
    assert "nothing deleted: this save's manifest may still appear" in msg, msg
    assert bucket.keys("n/") == ["n/shard_0000.npy", "n/shard_0001.npy"]

    # Another writer's manifest (another dataset's, of other bytes) lands after this PUT.
    snp.save(x[:4] + 1, bucket.url("other/"), num_shards=1, storage_options=direct)
    theirs = bucket.get("other/shardload.manifest")
    proxy.add(Rule("PUT", path="/a/shardload.manifest", action="lost-answer", count=None,
                   after=lambda: bucket.put("a/shardload.manifest", theirs)))
    with pytest.raises(shardload.ShardWriteError) as e:
        snp.save(x, bucket.url("a/"), num_shards=2,
                             storage_options={**bucket.options, "max_attempts": "2"})
    msg = str(e.value)
    assert "found another object there" in msg, msg
    assert "a manifest is there (another writer's, or this save's, stored after all): " \
        "nothing deleted" in msg, msg
    assert bucket.get("a/shardload.manifest") == theirs


def lagging_manifest_reads(proxy, prefix: str, count: int | None) -> Callable[[], None]:
    """What a "lost-answer" rule's ``after`` calls: from the first time on (the PUT's retries
    call it again), the first ``count`` (None: every) HEADs and GETs of ``prefix``'s manifest
    are answered 404, as a store whose reads lag its writes answers right after a PUT. The
    rules are in the returned function's ``rules``."""
    from s3_fault_proxy import Rule

    rules = [Rule(m, path=f"/{prefix}shardload.manifest", action="404", count=count)
             for m in ("HEAD", "GET")]

    def start() -> None:
        with proxy._lock:
            if not any(r in proxy.rules for r in rules):
                proxy.rules[0:0] = rules

    start.rules = rules  # type: ignore[attr-defined]
    return start


@pytest.mark.parametrize("front_end", ["shardload.save", "shardload.numpy.save"])
def test_a_manifest_stored_unanswered_whose_reads_lag_deletes_no_shard_under_it(
        proxied, front_end):
    """The manifest's PUT stored, its answer lost, and every look at it answered 404 (a read
    that lags the PUT: a caching proxy, an eventually consistent store). The save took the 404
    for "not stored" and its clean-up deleted the shards: the manifest, there all along,
    published a dataset of deleted shards (every load failed). A 404 after a write the store
    did not refuse is no proof: the save says that whether it was stored cannot be told and
    deletes nothing, and once the store shows the manifest the dataset is whole."""
    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    save = shardload.save if front_end == "shardload.save" else snp.save
    bucket, proxy = proxied
    direct = {**bucket.options, "endpoint_override": bucket.endpoint}
    x = np.arange(40.0).reshape(20, 2)
    rule = proxy.add(Rule("PUT", path="/d/shardload.manifest", action="lost-answer",
                          count=None, after=lagging_manifest_reads(proxy, "d/", None)))
    with pytest.raises(shardload.ShardWriteError) as e:
        save(x, bucket.url("d/"), num_shards=2,
             storage_options={**bucket.options, "max_attempts": "2"})
    msg = str(e.value)
    assert rule.fired >= 1
    assert "whether it was stored cannot be told" in msg and "not stored" not in msg, msg
    assert f"nothing deleted: this save's manifest may still appear at s3://{bucket.name}/d/" \
        f"shardload.manifest" in msg, msg
    assert bucket.keys("d/") == ["d/shard_0000.npy", "d/shard_0001.npy", "d/shardload.manifest"]
    np.testing.assert_array_equal(
        snp.load(bucket.url("d/"), storage_options=direct, trust_manifest=True), x)


def test_an_overwrite_whose_manifest_reads_lag_does_not_say_it_was_not_stored(proxied):
    """The same with overwrite: the new dataset was published (the old one's third shard
    deleted) while the error said "it was not stored". It says that this cannot be told."""
    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    direct = {**bucket.options, "endpoint_override": bucket.endpoint}
    snp.save(np.full((30, 2), 7.0), bucket.url("d/"), num_shards=3, storage_options=direct)
    x = np.arange(40.0).reshape(20, 2)
    proxy.add(Rule("PUT", path="/d/shardload.manifest", action="lost-answer", count=None,
                   after=lagging_manifest_reads(proxy, "d/", None)))
    with pytest.raises(shardload.ShardWriteError) as e:
        snp.save(x, bucket.url("d/"), num_shards=2, overwrite=True,
                 storage_options={**bucket.options, "max_attempts": "2"})
    msg = str(e.value)
    assert "whether it was stored cannot be told" in msg and "not stored" not in msg, msg
    np.testing.assert_array_equal(
        snp.load(bucket.url("d/"), storage_options=direct, trust_manifest=True), x)


def test_a_manifest_whose_reads_lag_a_moment_is_found_by_the_look_asked_again(proxied):
    """The looks after the unanswered PUT answered 404 twice (a HEAD, then the GET after the
    next HEAD), then the store shows the manifest: the look asked again after a pause finds
    the save's own bytes, and the save succeeds."""
    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    direct = {**bucket.options, "endpoint_override": bucket.endpoint}
    x = np.arange(40.0).reshape(20, 2)
    lag = lagging_manifest_reads(proxy, "d/", 1)
    proxy.add(Rule("PUT", path="/d/shardload.manifest", action="lost-answer", count=None,
                   after=lag))
    snp.save(x, bucket.url("d/"), num_shards=2,
             storage_options={**bucket.options, "max_attempts": "2"})
    assert sum(r.fired for r in lag.rules) == 2, [r.fired for r in lag.rules]
    np.testing.assert_array_equal(
        snp.load(bucket.url("d/"), storage_options=direct, trust_manifest=True), x)


@pytest.mark.parametrize("front_end", ["shardload.save", "shardload.numpy.save"])
@pytest.mark.parametrize("fmt,fault", [("zarr", "manifest-refused"), ("raw", "manifest-refused"),
                                       ("raw", "listing-lags")])
def test_a_failed_commit_to_an_empty_prefix_deletes_its_metadata_objects(proxied, front_end,
                                                                        fmt, fault):
    """A Zarr or raw save to an empty prefix failing at its commit, after its metadata objects
    went up (the manifest's PUT refused; a listing that never shows a shard): the clean-up
    deleted the chunks and shards but left each store's .zarray (raw: shardload.json). A load
    of the prefix then gave the whole shape as zeros (Zarr's fill value) without an error,
    and a new save there was refused as "not empty". The prefix is empty again."""
    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    save = shardload.save if front_end == "shardload.save" else snp.save
    bucket, proxy = proxied
    if fault == "manifest-refused":
        proxy.add(Rule("PUT", path="/d/shardload.manifest", action="403", count=None))
    else:
        proxy.add(Rule("GET", path="list-type=2", action="hide-listed",
                       hide="shard_0002", count=None))
    x = np.arange(1, 241, dtype="f8").reshape(60, 4)
    with pytest.raises(shardload.ShardWriteError) as e:
        save(x, bucket.url("d/"), num_shards=3, format=fmt, storage_options=bucket.options)
    assert "is left" not in str(e.value), str(e.value)
    assert bucket.keys("d/") == []
    proxy.clear()
    save(x, bucket.url("d/"), num_shards=3, format=fmt, storage_options=bucket.options)
    np.testing.assert_array_equal(snp.load(bucket.url("d/"), storage_options=bucket.options), x)


def test_a_failed_commit_leaves_a_metadata_object_another_writer_replaced(proxied):
    """The clean-up deletes a metadata object only while it is the one this save wrote: a
    sidecar another writer put in its place after the save's check of its keys stays, named."""
    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    theirs: list[bytes] = []

    def replace() -> None:  # the same sidecar, of other bytes (another writer's ETag)
        theirs.append(bucket.get("d/shardload.json") + b"\n")
        bucket.put("d/shardload.json", theirs[0])

    proxy.add(Rule("HEAD", path="/d/shardload.json", action="held-answer", count=1,
                   after=replace))
    proxy.add(Rule("PUT", path="/d/shardload.manifest", action="403", count=None))
    x = np.arange(1, 241, dtype="f8").reshape(60, 4)
    with pytest.raises(shardload.ShardWriteError) as e:
        snp.save(x, bucket.url("d/"), num_shards=3, format="raw", storage_options=bucket.options)
    msg = str(e.value)
    assert f"s3://{bucket.name}/d/shardload.json changed since this save wrote it" in msg, msg
    assert bucket.keys("d/") == ["d/shardload.json"]
    assert bucket.get("d/shardload.json") == theirs[0]


METADATA_OF = {"zarr": "shard_0000.zarr/.zarray", "raw": "shardload.json"}


@pytest.mark.parametrize("fmt", ["zarr", "raw"])
def test_a_metadata_put_stored_whose_answer_is_lost_is_deleted_by_the_clean_up(proxied, fmt):
    """A metadata object's PUT that the store took, its answer lost on every attempt (the
    connection reset after the body): the clean-up deleted only the keys whose uploads were
    answered and left it, and a load of the prefix gave a Zarr store's shape as zeros (its fill
    value) without an error. A key whose upload was begun is looked at: holding the bytes sent,
    it is deleted, and the prefix is empty again."""
    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    rule = proxy.add(Rule("PUT", path=f"/d/{METADATA_OF[fmt]}", action="lost-answer",
                          count=None))
    x = np.arange(1, 241, dtype="f8").reshape(60, 4)
    with pytest.raises(shardload.ShardWriteError) as e:
        snp.save(x, bucket.url("d/"), num_shards=3, format=fmt,
                 storage_options={**bucket.options, "max_attempts": "2"})
    assert METADATA_OF[fmt] in str(e.value), str(e.value)
    assert "is left" not in str(e.value), str(e.value)
    assert rule.fired >= 1
    assert bucket.keys("d/") == []


@pytest.mark.parametrize("key, fmt", [("shardload.json", "raw"), ("shard_0001.npy", "npy")])
def test_an_unanswered_put_whose_key_holds_another_object_leaves_it_named(proxied, key, fmt):
    """The look at a key whose upload got no answer (a metadata object, a shard) deletes it
    only where it is provably the bytes sent: an object another writer put there after the
    store took the save's is left, and the save's error names it."""
    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    theirs = b'{"another": "writer"}' if key.endswith(".json") else b"another writer's object"
    proxy.add(Rule("PUT", path=f"/d/{key}", action="lost-answer", count=None,
                   after=lambda: bucket.put(f"d/{key}", theirs)))
    x = np.arange(1, 241, dtype="f8").reshape(60, 4)
    with pytest.raises(shardload.ShardWriteError) as e:
        snp.save(x, bucket.url("d/"), num_shards=3, format=fmt,
                 storage_options={**bucket.options, "max_attempts": "2"})
    msg = str(e.value)
    assert (f"the clean-up left what is not this save's: s3://{bucket.name}/d/{key} "
            "was being uploaded when the save failed, and holds another object (") in msg, msg
    if fmt == "npy":
        assert f"another object ({len(theirs)} bytes, not the " in msg, msg
    assert "another writer?); it is left" in msg, msg
    assert bucket.keys("d/") == [f"d/{key}"]
    assert bucket.get(f"d/{key}") == theirs


# The first object of shard 0 in each format, whose upload a test holds back.
SHARD0_OF = {"npy": "shard_0000.npy", "raw": "shard_0000.bin", "zarr": "shard_0000.zarr/0.0"}


@pytest.mark.parametrize("front_end", ["shardload.save", "shardload.numpy.save"])
@pytest.mark.parametrize("upload", UPLOADS)
def test_a_shard_put_stored_whose_answer_is_lost_is_deleted_by_the_clean_up(proxied, front_end,
                                                                           upload):
    """A shard's upload to an empty prefix that the store took, its answer lost on every
    attempt (the connection reset after the body; for a multipart upload, after its
    completion): the clean-up deleted only the keys whose uploads were answered and left it,
    so the prefix was no longer empty (a first shard left alone loads as a dataset of its own
    rows). The key whose upload sent every byte is looked at: a plain PUT's object whose ETag
    is the MD5 of the bytes sent, or a multipart upload's whose bytes read back have it, is
    deleted, by either front end (Legate carries the key from its task)."""
    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    save = shardload.save if front_end == "shardload.save" else snp.save
    bucket, proxy = proxied
    multipart = bool(upload)
    rule = proxy.add(Rule("POST" if multipart else "PUT",
                          path="/d/shard_0001.npy" + ("?uploadId=" if multipart else ""),
                          action="lost-answer", count=None))
    x = np.arange(1, 241, dtype="f8").reshape(60, 4)
    with pytest.raises(shardload.ShardWriteError) as e:
        save(x, bucket.url("d/"), num_shards=3,
             storage_options={**bucket.options, **upload, "max_attempts": "2"})
    assert "shard_0001.npy" in str(e.value), str(e.value)
    assert "is left" not in str(e.value), str(e.value)
    assert rule.fired >= 1
    assert bucket.keys("d/") == []


@pytest.mark.parametrize("front_end", ["shardload.save", "shardload.numpy.save"])
def test_an_empty_shard_put_stored_whose_answer_is_lost_is_deleted(proxied, front_end):
    """The shards without rows are uploaded (header only) before any other, while the save
    gets its destination ready: one of them stored by the store, its answer lost on every
    attempt, failed the save and was left, the save's clean-up not set up yet, so the prefix
    was no longer empty. It is deleted as a failed save's keys are."""
    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    save = shardload.save if front_end == "shardload.save" else snp.save
    bucket, proxy = proxied
    rule = proxy.add(Rule("PUT", path="/d/shard_0005.npy", action="lost-answer", count=None))
    x = np.arange(30, dtype="f4").reshape(10, 3)  # 6 shards: 2, 2, 2, 2, 2, 0 rows
    with pytest.raises(shardload.ShardWriteError) as e:
        save(x, bucket.url("d/"), num_shards=6,
             storage_options={**bucket.options, "max_attempts": "2"})
    assert "shard_0005.npy" in str(e.value), str(e.value)
    assert "is left" not in str(e.value), str(e.value)
    assert rule.fired >= 1
    assert bucket.keys("d/") == []


@pytest.mark.parametrize("front_end,fmt", [("shardload.numpy.save", "npy"),
                                           ("shardload.numpy.save", "raw"),
                                           ("shardload.numpy.save", "zarr"),
                                           ("shardload.save", "npy")])
def test_ctrl_c_during_a_shard_put_the_store_took_leaves_nothing_of_the_save(proxied, front_end,
                                                                           fmt):
    """SIGINT while the upload of shard 0's first object (shard_0000.npy; raw's .bin; a Zarr
    store's first chunk) to an empty prefix waits for its answer, which the proxy holds after
    the upstream stored it: the clean-up deleted the keys whose uploads were answered and left
    that one, so a load of the prefix gave shard 0's 20 rows as the whole dataset without an
    error. The key whose upload sent every byte is looked at, and holding those bytes it is
    deleted: the prefix holds nothing of the save. (Legate's requests run through a Ctrl-C:
    its upload is answered, and the clean-up deletes it as one the save wrote.)"""
    import shardload.numpy as snp

    bucket, proxy = proxied
    got = _ctrl_c_while_a_put_is_held(bucket, proxy, f"/d/{SHARD0_OF[fmt]}", front_end, fmt)
    assert got[0] == "INTERRUPTED" and got[2] == [], got
    assert bucket.keys("d/") == []
    direct = {**bucket.options, "endpoint_override": bucket.endpoint}
    with pytest.raises(shardload.Error):
        snp.load(bucket.url("d/"), storage_options=direct)


@pytest.mark.parametrize("front_end", ["shardload.save", "shardload.numpy.save"])
def test_ctrl_c_while_a_manifest_put_fails_untold_says_the_save_may_have_completed(
        proxied, front_end):
    """SIGINT while the manifest's PUT is answered 500 on every attempt (nothing stored),
    whose look then cannot tell whether the store took it: shardload.numpy.save's
    KeyboardInterrupt said the dataset may be published, but the Legate save, whose requests
    run through a Ctrl-C, raised the save's error and then a bare KeyboardInterrupt, which
    docs/save.md says published nothing. Both front ends now carry the note."""
    import tempfile
    import threading

    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    rule = proxy.add(Rule("PUT", path="/d/shardload.manifest", action="500", delay_s=0.5,
                          count=None))
    with tempfile.TemporaryDirectory() as tmp:
        fired = f"{tmp}/fired"

        def tell() -> None:  # the manifest's first PUT has come
            deadline = time.monotonic() + 290
            while rule.fired == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            open(fired, "w").close()

        threading.Thread(target=tell, daemon=True).start()
        got = _save_then_ctrl_c(bucket, fired, 300, "the interrupted save", front_end=front_end,
                                options={**bucket.options, "max_attempts": "3"})
    assert rule.fired >= 1
    assert got[0] == "INTERRUPTED", got
    assert len(got[2]) == 1, got
    note = got[2][0]
    assert "the save may have completed before this interrupt was raised" in note, note
    assert f"s3://{bucket.name}/d/" in note and "whether it was stored cannot be told" in note, \
        note
    # Nothing was stored: no manifest, and nothing deleted, since it might have appeared.
    assert "d/shardload.manifest" not in bucket.keys("d/")


@pytest.mark.parametrize("front_end", ["shardload.save", "shardload.numpy.save"])
@pytest.mark.parametrize("fmt", ["zarr", "raw"])
def test_ctrl_c_during_a_metadata_put_the_store_took_leaves_nothing_of_the_save(
        proxied, front_end, fmt):
    """SIGINT while the PUT of the first metadata object (shard_0000.zarr/.zarray; raw's
    shardload.json) of a save to an empty prefix waits for its answer, which the proxy holds
    after the upstream stored it: the clean-up deleted the chunks (shards) and left that object,
    whose upload it did not know had been stored, and a load of the prefix gave (20, 4) zeros
    without an error. The prefix now holds nothing of the save. (The Legate front end commits
    in a task after its last look at Python, which a Ctrl-C does not stop: the save completes
    and says so, the dataset whole.)"""
    import shardload.numpy as snp

    bucket, proxy = proxied
    got = _ctrl_c_while_a_put_is_held(bucket, proxy, f"/d/{METADATA_OF[fmt]}", front_end, fmt)
    direct = {**bucket.options, "endpoint_override": bucket.endpoint}
    if front_end == "shardload.save":
        assert got[0] == "INTERRUPTED" and len(got[2]) == 1, got
        assert "the save completed before this interrupt" in got[2][0], got
        np.testing.assert_array_equal(
            snp.load(bucket.url("d/"), storage_options=direct, trust_manifest=True),
            np.arange(1, 241, dtype="f8").reshape(60, 4))
        return
    assert got[0] == "INTERRUPTED" and got[2] == [], got
    assert bucket.keys("d/") == []
    with pytest.raises(shardload.Error):
        snp.load(bucket.url("d/"), storage_options=direct)


@pytest.mark.parametrize("front_end", ["shardload.save", "shardload.numpy.save"])
def test_ctrl_c_during_the_manifest_put_that_the_store_took_says_the_save_completed(
        proxied, server, front_end):
    """SIGINT while the manifest's PUT waits for its answer, which the proxy holds back after
    the upstream stored it: a bare KeyboardInterrupt (documented as "nothing published") came
    while the dataset was published. The save looks, finds its own manifest, and the
    KeyboardInterrupt carries the note that the save completed."""
    import tempfile

    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    rule = proxy.add(Rule("PUT", path="/d/shardload.manifest", action="held-answer",
                          delay_s=4.0, count=None))
    with tempfile.TemporaryDirectory() as tmp:
        fired = f"{tmp}/fired"
        # Made once the upstream has stored the manifest, its answer then held back.
        rule.after = lambda: open(fired, "w").close()
        got = _save_then_ctrl_c(bucket, fired, 300, "the interrupted save", front_end=front_end)
    assert got[0] == "INTERRUPTED", got
    assert len(got[2]) == 1 and "the save completed before this interrupt" in got[2][0], got
    assert f"s3://{bucket.name}/d/" in got[2][0], got
    assert rule.fired >= 1
    direct = {**bucket.options, "endpoint_override": bucket.endpoint}
    assert "d/shardload.manifest" in bucket.keys("d/")
    np.testing.assert_array_equal(
        snp.load(bucket.url("d/"), storage_options=direct, trust_manifest=True),
        np.arange(200.0).reshape(100, 2))


@pytest.mark.parametrize("key", ["new/%2e%2e/keep/", "new/.%2E/keep/", "keep/%2e/",
                                 "new/%2e%2e%2fkeep/", "new/\u2025/keep/",
                                 "new/\uff0e\uff0e/keep/", "new/..\\keep/", "new/..;/keep/"])
def test_dots_spelled_otherwise_are_literal_keys(proxied, key):
    """Percent-encoded dots, a '..' followed by an encoded slash, a backslash or a ';', and
    Unicode's dot-like characters are no dot segments: the key is sent as written (its '%'
    as %25), the objects land under exactly that key, and the user's keep/ is untouched."""
    bucket, proxy = proxied
    keep = np.arange(6.0).reshape(3, 2)
    shardload.save(keep, bucket.url("keep/"), num_shards=1, storage_options=bucket.options)
    before = {k: bucket.get(k) for k in bucket.keys()}
    proxy.log.clear()
    x = np.ones((4, 2))
    for overwrite in (False, True):
        shardload.save(x, bucket.url(key), num_shards=1, overwrite=overwrite,
                       storage_options=bucket.options)
    assert {k: bucket.get(k) for k in before} == before
    assert set(bucket.keys()) - set(before) == {key + "shard_0000.npy",
                                                key + "shardload.manifest"}
    np.testing.assert_array_equal(
        np.asarray(shardload.load(bucket.url(key), storage_options=bucket.options)), x)
    writes = {p for m, p, *_ in proxy.log if m in ("PUT", "POST", "DELETE")}
    kept = {f"/{bucket.name}/{k}" for k in before}
    assert writes and not {p.split("?")[0] for p in writes} & kept, writes


def test_empty_segments_are_refused_trailing_ones_too(bucket):
    """"new//keep/" is refused before any request, as every s3:// key with an empty segment is
    (it was refused by the listing that checks the prefix). A
    trailing "keep//" was taken for keep/: with overwrite=True it replaced the dataset there,
    and a load of its own URL read none of it (it asked for keep//shard_0000.npy). It names
    another prefix than keep/, and is refused before any request, whatever overwrite says."""
    import shardload.numpy as snp

    keep = np.arange(6.0).reshape(3, 2)
    shardload.save(keep, bucket.url("keep/"), num_shards=1, storage_options=bucket.options)
    before = {k: bucket.get(k) for k in bucket.keys()}
    with pytest.raises(ValueError, match=r"the key holds an empty segment \('//'\)"):
        shardload.save(np.ones((4, 2)), bucket.url("new//keep/"), storage_options=bucket.options)
    for dest in ("keep//", "keep///", "/"):
        for overwrite in (False, True):
            for save in (shardload.save, snp.save):
                with pytest.raises(ValueError, match=r"ends in an empty segment \('//'\)"):
                    save(np.ones((4, 2)), bucket.url(dest), overwrite=overwrite,
                         storage_options=bucket.options)
    assert {k: bucket.get(k) for k in bucket.keys()} == before
    np.testing.assert_array_equal(
        np.asarray(shardload.load(bucket.url("keep/"), storage_options=bucket.options)), keep)


@pytest.mark.parametrize("path", ["signed", "arrow"])
def test_destinations_beside_objects_of_similar_names_touch_only_their_own(bucket, path):
    """shardload.numpy.save with and without overwrite to "d" (an object of that name beside
    d/ and dfoo.npy), the bucket's root, "dd" (a dataset without the trailing '/') and a shard
    object's own key: each is refused, or writes only under its own prefix; no other object
    changes."""
    import shardload.numpy as snp

    options = bucket.options
    if path == "arrow":
        options = {**bucket.options, **s3_server.ARROWS_CLIENT}
    for key, data in (("dfoo.npy", b"mine1"), ("d2/x", b"mine2"), ("d", b"mine3"),
                      ("other/y", b"mine4")):
        bucket.put(key, data)
    bucket.put_npy("dd/shard_0000.npy", np.zeros((2, 2)))
    mine = {k: bucket.get(k) for k in ("dfoo.npy", "d2/x", "d", "other/y")}
    x = np.ones((4, 2))
    for dest in ("d", "d/", "", "dd/shard_0000.npy"):
        for overwrite in (False, True):
            with pytest.raises(shardload.ShardWriteError) as e:
                snp.save(x, bucket.url(dest), num_shards=1, overwrite=overwrite,
                         storage_options=options)
            assert bucket.url(dest) in str(e.value)
    for dest in ("dd", "dd/"):
        snp.save(x, bucket.url(dest), num_shards=1, overwrite=True, storage_options=options)
        np.testing.assert_array_equal(
            snp.load(bucket.url("dd/"), storage_options=options), x)
    assert {k: bucket.get(k) for k in mine} == mine
    assert [k for k in bucket.keys() if k not in mine and not k.startswith("dd/")] == []


@pytest.mark.parametrize("prefix", ["d#x/", "e/#/", "g/a#b", "h/%2e%2e/", "i/ /", "j/a\\b/",
                                    "k/\u202e/", "l/a;b/", "m/.../"])
def test_a_destination_of_odd_characters_writes_exactly_those_keys(bucket, prefix):
    """A fifth hostile pass: '#', percent-encoded dots, a space, a backslash, a right-to-left
    mark, ';' and '...' in a destination are key characters, taken literally: the shards and
    the manifest land under exactly that prefix, nothing elsewhere, and read back."""
    import shardload.numpy as snp

    a = np.arange(12, dtype=np.int32).reshape(6, 2)
    snp.save(a, bucket.url(prefix), num_shards=2, storage_options=bucket.options)
    want = prefix if prefix.endswith("/") else prefix + "/"
    assert bucket.keys() == [want + "shard_0000.npy", want + "shard_0001.npy",
                             want + "shardload.manifest"]
    np.testing.assert_array_equal(
        snp.load(bucket.url(prefix), storage_options=bucket.options), a)


_SAVE_THEN_CTRL_C = """
import json, os, signal, sys, threading, time
import numpy as np
import shardload, shardload.numpy
url, options, fired, args = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
save = shardload.save if args["front_end"] == "shardload.save" else shardload.numpy.save
if args["front_end"] == "shardload.save":
    save(np.ones((2, 2)), url + "warm/", storage_options=options)  # Legate up
sent = []
def interrupt():
    while not os.path.exists(fired):
        time.sleep(0.01)
    time.sleep(0.3)
    sent.append(time.monotonic())
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=interrupt, daemon=True).start()
shape = args["shape"]
x = np.arange(args["start"], args["start"] + int(np.prod(shape)), dtype=args["dtype"]).reshape(shape)
try:
    save(x, url + "d/", num_shards=args["num_shards"], format=args["fmt"], storage_options=options)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a signal the save ended before is none of it
    print(json.dumps(["SAVED"]))
except KeyboardInterrupt as e:
    print(json.dumps(["INTERRUPTED", time.monotonic() - sent[0], getattr(e, "__notes__", [])]))
except Exception as e:
    print(json.dumps([type(e).__name__, str(e)]))
"""


def _ctrl_c_while_a_put_is_held(bucket, proxy, path: str, front_end: str, fmt: str) -> list:
    """A (60, 4) save in 3 shards by `front_end` in `fmt`, sent SIGINT once the upstream has
    stored the PUT of `path`, whose answer the proxy then holds 4 s: the child's report."""
    import tempfile

    from s3_fault_proxy import Rule

    rule = proxy.add(Rule("PUT", path=path, action="held-answer", delay_s=4.0, count=None))
    with tempfile.TemporaryDirectory() as tmp:
        fired = f"{tmp}/fired"
        rule.after = lambda: open(fired, "w").close()
        got = _save_then_ctrl_c(bucket, fired, 300, "the interrupted save", front_end=front_end,
                                fmt=fmt, shape=(60, 4), start=1, num_shards=3)
    assert rule.fired >= 1
    return got


def _save_then_ctrl_c(bucket, fired: str, timeout: float, stuck: str, *,
                      front_end: str = "shardload.numpy.save", fmt: str = "npy",
                      shape: tuple[int, ...] = (100, 2), start: int = 0, dtype: str = "f8",
                      num_shards: int = 2, options: dict | None = None) -> list:
    """What ``front_end`` (shardload.numpy.save, or shardload.save: Legate, warmed up first) of
    ``numpy.arange(start, ...)`` of ``shape`` and ``dtype`` to bucket's d/ in ``num_shards``
    shards of ``fmt`` gives in a child process that gets SIGINT 0.3 s after the file ``fired``
    appears: ["SAVED"], ["INTERRUPTED", seconds from the SIGINT, the KeyboardInterrupt's
    notes], or [the exception's type name, its message]. ``options``: the storage options,
    the bucket's by default. The test fails saying ``stuck`` where the child still runs after
    ``timeout`` s."""
    import signal
    import subprocess
    import sys

    args = {"front_end": front_end, "fmt": fmt, "shape": list(shape), "start": start,
            "dtype": dtype, "num_shards": num_shards}
    try:
        r = subprocess.run([sys.executable, "-c", _SAVE_THEN_CTRL_C, bucket.url(),
                            json.dumps(options if options is not None else bucket.options),
                            fired, json.dumps(args)],
                           capture_output=True, text=True, timeout=timeout,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the save was still running {timeout:.0f} s after it began ({stuck})")
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_ctrl_c_with_the_clean_up_held_by_a_quiet_store_ends_soon(proxied):
    """SIGINT while a shard's PUT waits for its answer, and from then on the store holds every
    request under the prefix (a store gone quiet). The clean-up runs through the pending Ctrl-C
    (it deletes what the save wrote), and each of its HEADs and DELETEs held the interrupt for
    every attempt (150 s each with the defaults). It runs 10 s at most under a Ctrl-C: then the
    interrupt ends its requests, and what it has not done is left."""
    import tempfile

    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    quiet = [Rule(m, path="/d/", action="delay", delay_s=100, count=None)
             for m in ("HEAD", "GET", "DELETE")]
    quiet.append(Rule("GET", path="prefix=d", action="delay", delay_s=100, count=None))

    def go_quiet() -> None:  # the upstream has stored the shard, its answer held back
        with proxy._lock:
            if not any(r in proxy.rules for r in quiet):
                proxy.rules[0:0] = quiet
        open(fired, "w").close()

    proxy.add(Rule("PUT", path="/d/shard_0001.npy", action="held-answer", delay_s=4.0,
                   count=None, after=go_quiet))
    with tempfile.TemporaryDirectory() as tmp:
        fired = f"{tmp}/fired"
        got = _save_then_ctrl_c(bucket, fired, 90, "its clean-up under a pending Ctrl-C waited "
                                "out every request's attempts")
    assert got[0] == "INTERRUPTED" and got[1] < 30, got
    assert sum(q.fired for q in quiet) >= 1


def test_ctrl_c_with_the_manifest_look_held_by_a_quiet_store_ends_soon_and_says_so(proxied):
    """SIGINT while the manifest's PUT waits for its answer (the upstream stored it), and from
    then on the store holds every HEAD and GET of the manifest (a store gone quiet). The look
    after the unanswered PUT ran through the pending Ctrl-C with every attempt (150 s with the
    defaults: 5 attempts of request_timeout 30 s), then raised a bare KeyboardInterrupt, which
    docs/save.md says published nothing, while the dataset was published. Under a pending
    Ctrl-C the look is one attempt of a few seconds, and the KeyboardInterrupt that cannot tell
    carries a note saying that the dataset may be published."""
    import tempfile

    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    quiet = [Rule(m, path="/d/shardload.manifest", action="delay", delay_s=100, count=None)
             for m in ("HEAD", "GET")]

    def go_quiet() -> None:  # the upstream has stored the manifest, its answer held back
        with proxy._lock:
            if not any(r in proxy.rules for r in quiet):
                proxy.rules[0:0] = quiet
        open(fired, "w").close()

    rule = proxy.add(Rule("PUT", path="/d/shardload.manifest", action="held-answer",
                          delay_s=4.0, count=None, after=go_quiet))
    with tempfile.TemporaryDirectory() as tmp:
        fired = f"{tmp}/fired"
        got = _save_then_ctrl_c(bucket, fired, 60, "the look under a pending Ctrl-C waited out "
                                "its attempts")
    assert got[0] == "INTERRUPTED", got
    assert got[1] < 15, got
    assert rule.fired >= 1 and sum(q.fired for q in quiet) >= 1
    assert len(got[2]) == 1, got
    note = got[2][0]
    assert "the save may have completed before this interrupt was raised" in note, note
    assert f"s3://{bucket.name}/d/" in note and "whether it was stored cannot be told" in note, \
        note
    # The store took the manifest: the dataset is published, none of its objects deleted.
    proxy.clear()
    direct = {**bucket.options, "endpoint_override": bucket.endpoint}
    assert bucket.keys("d/") == ["d/shard_0000.npy", "d/shard_0001.npy", "d/shardload.manifest"]
    np.testing.assert_array_equal(
        snp.load(bucket.url("d/"), storage_options=direct, trust_manifest=True),
        np.arange(200.0).reshape(100, 2))


@pytest.mark.parametrize("front_end", ["shardload.save", "shardload.numpy.save"])
@pytest.mark.parametrize("fmt,stuck", [("zarr", "shard_0000.zarr/.zarray"),
                                       ("npy", "shard_0000.npy"),
                                       ("raw", "shardload.json")])
def test_a_failed_commit_whose_clean_up_cannot_delete_the_first_object_loads_no_part_as_whole(
        proxied, front_end, fmt, stuck):
    """A save to an empty prefix failing at its commit (the manifest's PUT refused) whose
    clean-up cannot delete one object (its DELETE answered 500 on every attempt): the clean-up
    went on deleting the rest, and said nothing of it. A Zarr prefix was left holding the first
    store's .zarray alone, which loaded as the whole store's shape of zeros (the fill value)
    without an error; npy's first shard left alone loaded as the whole dataset. Where the first
    object stays, the save's others stay with it (a store keeps its chunks with its .zarray):
    the prefix loads as the whole array, or fails; never as a part of it, nor as zeros. The
    save's error names what was left."""
    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    save = shardload.save if front_end == "shardload.save" else snp.save
    bucket, proxy = proxied
    proxy.add(Rule("PUT", path="/d/shardload.manifest", action="403", count=None))
    refused = proxy.add(Rule("DELETE", path=f"/d/{stuck}", action="500", count=None))
    x = np.arange(1, 801, dtype="f4").reshape(200, 4)
    with pytest.raises(shardload.ShardWriteError) as e:
        save(x, bucket.url("d/"), num_shards=4, format=fmt,
             storage_options={**bucket.options, "max_attempts": "2", "backoff_ms": "1"})
    msg = str(e.value)
    assert refused.fired >= 1
    assert "the clean-up could not delete all that this save wrote, and left: " in msg, msg
    assert f"s3://{bucket.name}/d/{stuck} (its DELETE failed: " in msg, msg
    left = bucket.keys("d/")
    assert f"d/{stuck}" in left, left
    proxy.clear()
    direct = {**bucket.options, "endpoint_override": bucket.endpoint}
    try:
        y = snp.load(bucket.url("d/"), storage_options=direct)
    except shardload.Error:
        return  # a prefix that fails to load is no wrong data
    np.testing.assert_array_equal(y, x)


def test_ctrl_c_while_a_multipart_shard_completes_leaves_nothing_of_the_save(proxied):
    """SIGINT while shard 0's multipart upload waits for its last part's answer (held 5 s by
    the proxy after the store took it): Arrow's stream sent the CompleteMultipartUpload once
    that answer came, after the interrupt, and the look at its ETag, ended by the Ctrl-C, found
    none; the clean-up then left that object as one whose owner it could not tell, and a load
    of the prefix gave shard 0's rows as the whole dataset without an error. A completion
    without an ETag is told by the MD5 of the bytes sent, read back: the object is deleted,
    and the prefix holds nothing of the save."""
    import tempfile

    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    rule = proxy.add(Rule("PUT", path="/d/shard_0000.npy?partNumber=2", action="held-answer",
                          delay_s=5.0, count=1))
    with tempfile.TemporaryDirectory() as tmp:
        fired = f"{tmp}/fired"
        rule.after = lambda: open(fired, "w").close()
        # 2 shards of 10 MiB: parts of 8 MiB and 2 MiB each.
        got = _save_then_ctrl_c(bucket, fired, 120, "the interrupted multipart save",
                                shape=(2 * 10 * 2**20 // 4 // 256, 256), dtype="f4",
                                options={**bucket.options, "multipart_threshold": "0"})
    assert rule.fired == 1
    assert got[0] == "INTERRUPTED", got
    completions = [t for t in proxy.log if t[0] == "POST" and "shard_0000.npy?uploadId=" in t[1]]
    assert bucket.keys("d/") == [], (bucket.keys("d/"), completions)
    direct = {**bucket.options, "endpoint_override": bucket.endpoint}
    with pytest.raises(shardload.Error):
        snp.load(bucket.url("d/"), storage_options=direct)


def test_ctrl_c_with_slow_deletes_bounds_the_whole_clean_up_and_names_what_it_left(proxied):
    """SIGINT while the last store's .zarray PUT waits for its answer (held after the store
    took it), the store answering each DELETE after 2 s: the clean-up of the metadata ran 10 s
    under the pending Ctrl-C, then that of the chunks 10 s more (the KeyboardInterrupt 20 s
    after the SIGINT, where 10 s at most is documented), deleting the chunks of stores whose
    .zarray it never reached, and the KeyboardInterrupt said nothing of what was left. One
    bound for the whole clean-up; a store whose .zarray is left keeps its chunks; the
    KeyboardInterrupt's note names what is left; the prefix never loads as zeros."""
    import tempfile

    import shardload.numpy as snp
    from s3_fault_proxy import Rule

    bucket, proxy = proxied
    proxy.add(Rule("DELETE", path="/d/", action="delay", delay_s=2.0, count=None))
    rule = proxy.add(Rule("PUT", path="/d/shard_0007.zarr/.zarray", action="held-answer",
                          delay_s=4.0, count=None))
    with tempfile.TemporaryDirectory() as tmp:
        fired = f"{tmp}/fired"
        rule.after = lambda: open(fired, "w").close()
        got = _save_then_ctrl_c(bucket, fired, 120, "the clean-up under a pending Ctrl-C",
                                fmt="zarr", shape=(160, 4), start=1, dtype="f4",
                                num_shards=8)
    assert rule.fired >= 1
    assert got[0] == "INTERRUPTED", got
    assert got[1] < 15, got
    assert len(got[2]) == 1, got
    note = got[2][0]
    assert "the save published nothing, and its clean-up left objects" in note, note
    proxy.clear()
    left = bucket.keys("d/")
    assert left, note
    for s in range(8):
        store = f"d/shard_{s:04d}.zarr/"
        if f"{store}.zarray" in left:
            assert f"{store}0.0" in left, left  # never a .zarray without its chunk
    direct = {**bucket.options, "endpoint_override": bucket.endpoint}
    x = np.arange(1, 641, dtype="f4").reshape(160, 4)
    try:
        y = snp.load(bucket.url("d/"), storage_options=direct)
    except shardload.Error:
        return
    np.testing.assert_array_equal(y, x)
