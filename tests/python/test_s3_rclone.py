"""A second S3 server: rclone's ``serve s3`` (Go, objects in files), started on 127.0.0.1.

moto takes any signature; rclone checks every request's SigV4 signature against its one key
pair, so these tests show that the requests shardload signs itself (GETs, PUTs) and those of
Arrow's client pass a server that verifies them, and that a wrong secret is refused there
without the secret ever showing in the error. rclone also answers a ranged GET with HTTP 200
and the Content-Range of the bytes it sends (not 206): shardload takes such an answer as the
range it describes. Every result is compared with numpy, pyarrow, h5py or zarr-python."""

from __future__ import annotations

import io

import numpy as np
import pytest

boto3 = pytest.importorskip("boto3")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")

import shardload  # noqa: E402

import s3_server  # noqa: E402
from s3_server import Bucket  # noqa: E402


@pytest.fixture(scope="module")
def rclone() -> object:
    try:
        with s3_server.serving(kind="rclone") as endpoint:
            yield endpoint
    except RuntimeError as e:  # not installed, or it did not start
        pytest.fail(str(e))


@pytest.fixture
def bucket(rclone: str) -> Bucket:
    return Bucket(rclone, prefix="rc-")


def _ragged(seed: int, rows: list[int], trailing: tuple[int, ...], dtype: str) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((r, *trailing)).astype(dtype) for r in rows]


def test_the_server_answers_a_range_with_200_and_its_content_range(bucket):
    """What the tests below rely on: the server's answer to a ranged GET is a 200 that holds
    only the range (were it a 206, the tests would not show that such answers are taken)."""
    from botocore.config import Config

    bucket.put("probe.bin", bytes(range(256)) * 1000)
    # botocore would check the whole object's checksum, which the server sends along, against
    # the range's bytes of a 200: asked not to, it shows the body as it came.
    client = boto3.client("s3", endpoint_url=f"http://{bucket.endpoint}", region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing",
                          config=Config(response_checksum_validation="when_required"))
    got = client.get_object(Bucket=bucket.name, Key="probe.bin", Range="bytes=1000-1099")
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert got["ContentRange"] == "bytes 1000-1099/256000"
    assert got["Body"].read() == (bytes(range(256)) * 1000)[1000:1100]


def test_npy_ragged_rows_and_row_ranges_match_numpy(bucket):
    parts = _ragged(1, [700, 0, 1, 1300, 50, 2049, 3], (3, 5), "float32")
    for i, p in enumerate(parts):
        bucket.put_npy(f"d/shard_{i:04d}.npy", p)
    want = np.concatenate(parts)
    got = shardload.load(bucket.url("d/"), storage_options=bucket.options, overdecompose=3)
    np.testing.assert_array_equal(np.asarray(got), want)
    # Pieces that start inside objects: every GET at an offset other than 0.
    got = shardload.load(bucket.url("d/"), storage_options=bucket.options,
                         row_range=(333, 3999))
    np.testing.assert_array_equal(np.asarray(got), want[333:3999])
    layout = shardload.discover(bucket.url("d/"), storage_options=bucket.options)
    np.testing.assert_array_equal(layout.read(17, 2100), want[17:2100])


def test_parquet_matches_pyarrow(bucket, tmp_path):
    # Objects far larger than the probe's last 64 KiB (a suffix range, answered with a 200).
    rng = np.random.default_rng(2)
    tables = []
    for i, rows in enumerate([9000, 1, 12345]):
        t = pa.table({f"c{j}": rng.standard_normal(rows).astype("float64") for j in range(6)})
        p = tmp_path / f"part-{i}.parquet"
        pq.write_table(t, p, row_group_size=2000)
        bucket.upload(f"pq/{p.name}", p)
        tables.append(pq.read_table(p))
    want = np.concatenate([np.stack([c.to_numpy() for c in t.columns], axis=1) for t in tables])
    got = shardload.load(bucket.url("pq/part-*.parquet"), storage_options=bucket.options,
                         overdecompose=2)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_zarr_sharded_with_its_index_at_the_end_matches_zarr_python(bucket, tmp_path):
    a = np.random.default_rng(3).standard_normal((203, 7, 3)).astype("float32")
    path = tmp_path / "a.zarr"
    z = zarr.create_array(str(path), shape=a.shape, dtype=a.dtype, chunks=(10, 7, 3),
                          shards=(40, 7, 3))
    z[...] = a
    want = zarr.open_array(str(path), mode="r")[...]
    bucket.upload_tree("a.zarr", path)
    got = shardload.load(bucket.url("a.zarr"), storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_hdf5_ragged_shards_match_h5py(bucket, tmp_path):
    parts = _ragged(4, [120, 3, 77], (4,), "float64")
    for i, p in enumerate(parts):
        f = tmp_path / f"s_{i}.h5"
        with h5py.File(f, "w") as h:
            h.create_dataset("x", data=p, chunks=(min(16, len(p)), 4))
        bucket.upload(f"h/s_{i}.h5", f)
    want = []
    for i in range(len(parts)):
        with h5py.File(tmp_path / f"s_{i}.h5", "r") as h:
            want.append(h["x"][...])
    got = shardload.load(bucket.url("h/s_{}.h5"), storage_options=bucket.options,
                         dataset="x")
    np.testing.assert_array_equal(np.asarray(got), np.concatenate(want))


@pytest.mark.parametrize("threshold", [None, "0"], ids=["one-signed-put", "arrow-multipart"])
def test_save_round_trip_reads_back_as_numpy_wrote_it(bucket, monkeypatch, threshold):
    """Each shard goes up in one PUT signed by shardload, or (multipart_threshold 0) as a
    multipart upload by Arrow's client; both are accepted, and every object is what np.save
    makes of its rows."""
    # Arrow's AWS SDK sends parts in aws-chunked encoding with a trailing checksum unless told
    # to compute checksums only where required; this server takes plain bodies only
    # (docs/object_storage.md, "S3-compatible servers").
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
    want = np.arange(3 * 1001 * 4, dtype=np.int32).reshape(3 * 1001, 4)
    options = dict(bucket.options)
    if threshold is not None:
        options["multipart_threshold"] = threshold
    info = shardload.save(want, bucket.url("out/"), storage_options=options, num_shards=3)
    assert info.num_shards == 3
    keys = sorted(o["Key"] for o in
                  bucket.client.list_objects_v2(Bucket=bucket.name, Prefix="out/")["Contents"])
    assert keys == [f"out/shard_000{i}.npy" for i in range(3)] + ["out/shardload.manifest"]
    back = [np.load(io.BytesIO(bucket.client.get_object(Bucket=bucket.name, Key=k)["Body"].read()))
            for k in keys[:3]]
    np.testing.assert_array_equal(np.concatenate(back), want)
    got = shardload.load(bucket.url("out/"), storage_options=bucket.options,
                         trust_manifest=True)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_odd_key_names_are_signed_as_the_server_checks_them(bucket):
    """Every character SigV4 escapes in a key's path (space, '+', '%', brackets, '~' kept,
    non-ASCII): shardload's signed GETs, PUTs and its manifest's keys pass a server that checks
    each signature, and the objects are named as spelled."""
    prefix = "odd/a b+c%25[x]~\u00e9/"
    parts = _ragged(8, [5, 0, 9], (3,), "float32")
    for i, p in enumerate(parts):
        bucket.put_npy(f"{prefix}shard_{i:04d}.npy", p)
    want = np.concatenate(parts)
    got = shardload.load(bucket.url(prefix), storage_options=bucket.options, row_range=(2, 13))
    np.testing.assert_array_equal(np.asarray(got), want[2:13])
    out = "odd/out put+%41[1]\u00fc/"
    shardload.save(want, bucket.url(out), storage_options=bucket.options, num_shards=2)
    keys = sorted(o["Key"] for o in
                  bucket.client.list_objects_v2(Bucket=bucket.name, Prefix=out)["Contents"])
    assert keys == [f"{out}shard_000{i}.npy" for i in range(2)] + [f"{out}shardload.manifest"]
    back = [np.load(io.BytesIO(bucket.client.get_object(Bucket=bucket.name, Key=k)["Body"].read()))
            for k in keys[:2]]
    np.testing.assert_array_equal(np.concatenate(back), want)
    got = shardload.load(bucket.url(out), storage_options=bucket.options, trust_manifest=True)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_index_then_a_trusted_manifest_reads_the_same(bucket):
    parts = _ragged(5, [31, 0, 64, 5], (2,), "float64")
    for i, p in enumerate(parts):
        bucket.put_npy(f"m/shard_{i:04d}.npy", p)
    written = shardload.index(bucket.url("m/"), storage_options=bucket.options)
    assert written.startswith(bucket.url("m/shardload.manifest"))
    got = shardload.load(bucket.url("m/"), storage_options=bucket.options, trust_manifest=True)
    np.testing.assert_array_equal(np.asarray(got), np.concatenate(parts))


@pytest.mark.parametrize("secret", ["wrong", "s3cr%2Bet/with+symbols"])
def test_a_wrong_secret_is_refused_by_the_server_and_never_shown(bucket, secret):
    bucket.put_npy("w/shard_0000.npy", np.zeros((4, 2), np.float32))
    options = {**bucket.options, "access_key": "testing", "secret_key": secret,
               "session_token": "tok3n"}
    with pytest.raises(shardload.LayoutError) as e:
        shardload.load(bucket.url("w/"), storage_options=options)
    text = str(e.value)
    # The server refused the signature; the error names the object and keeps the other
    # options, and neither the secret nor the token appears in it or in its filename.
    assert "403" in text and "SignatureDoesNotMatch" in text, text
    assert bucket.url("w/") in text and "access_key=testing" in text, text
    # The secrets are taken out of the URL: their handle stands there, itself hidden.
    assert "credentials=***" in text, text
    for shown in (text, str(getattr(e.value, "filename", "") or "")):
        assert secret not in shown and "tok3n" not in shown, shown
    # The same with the right secret reads.
    got = shardload.load(bucket.url("w/"),
                         storage_options={**options, "secret_key": "testing",
                                          "session_token": ""})
    np.testing.assert_array_equal(np.asarray(got), np.zeros((4, 2), np.float32))


def test_a_missing_object_in_a_list_is_an_error_naming_it(bucket):
    bucket.put_npy("x/shard_0000.npy", np.ones((3, 1), np.int16))
    urls = [bucket.url("x/shard_0000.npy"), bucket.url("x/shard_0001.npy")]
    with pytest.raises(shardload.LayoutError, match="shard_0001.npy"):
        shardload.load(urls, storage_options=bucket.options)



def test_a_multipart_upload_the_server_refuses_leaves_no_object(bucket, tmp_path):
    """Without AWS_REQUEST_CHECKSUM_CALCULATION=when_required, Arrow's AWS SDK sends parts in
    aws-chunked encoding, which this server refuses: the save is an error naming the object
    and the server's answer, and no object of the save is left. In a process of its own: the
    SDK reads the variable once per client, and this process's clients may have read it."""
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "save.py"
    script.write_text(
        "import json, sys, numpy as np, shardload\n"
        "options = json.loads(sys.argv[2])\n"
        "try:\n"
        "    shardload.save(np.ones((4000, 8), np.float32), sys.argv[1], num_shards=2,\n"
        "                   storage_options=options)\n"
        "except shardload.ShardWriteError as e:\n"
        "    print('ERROR', e)\n")
    env = {k: v for k, v in os.environ.items() if k != "AWS_REQUEST_CHECKSUM_CALCULATION"}
    options = {**bucket.options, "multipart_threshold": "0"}
    done = subprocess.run([sys.executable, str(script), bucket.url("mp/"), json.dumps(options)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert out.startswith("ERROR"), (out, done.stderr[-2000:])
    assert "mp/shard_000" in out and "411" in out and "MissingContentLength" in out, out
    left = bucket.client.list_objects_v2(Bucket=bucket.name, Prefix="mp/").get("Contents", [])
    assert left == [], left
