"""The environment changed while shardload reads: Python's ``os.environ[k] = v`` (glibc's setenv)
on one thread while a load runs on another, and ``AWS_ENDPOINT_URL`` pointed at another server
between two loads.

A new variable may move the array getenv walks and free the old one; the engine's threads read
the environment on every request (libcurl's proxy look-up, the credential sources compared, the
container token's variables), and a getenv at that moment read freed memory: the process died
of SIGSEGV. The races run in a child process for a few seconds each and their exit status is
asserted. A store kept per bucket read, listed and wrote the first server's objects after
AWS_ENDPOINT_URL named another one, without an error; against two moto servers here."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
pytest.importorskip("boto3")

import shardload.numpy  # noqa: E402

import s3_server  # noqa: E402
import test_http  # noqa: E402

# Loads `sources` (a JSON list: one source, or a list of URLs) with `options` (JSON) once, then
# on two threads for `seconds` while the main thread adds variables, dropping them every 500
# (each setenv of a new name may move environ). Prints the count of loads and errors.
RACE = textwrap.dedent("""
    import json, os, sys, threading, time
    import numpy as np
    import shardload.numpy
    source, options, rows, seconds = json.loads(sys.argv[1]), json.loads(sys.argv[2]), \\
        int(sys.argv[3]), float(sys.argv[4])
    stop = time.monotonic() + seconds
    loads, errors = [0], []
    def reader():
        while time.monotonic() < stop:
            try:
                got = shardload.numpy.load(source, storage_options=options or None)
                assert got.shape[0] == rows, got.shape
                loads[0] += 1
            except Exception as e:
                errors.append(repr(e)[:300])
    # The first load makes the store's clients: the AWS SDK inside Arrow's client reads the
    # environment itself as it makes one, which no copy can stand in for (left, docs/errors.md).
    shardload.numpy.load(source, storage_options=options or None)
    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    i = 0
    while time.monotonic() < stop:
        os.environ[f"SHARDLOAD_RACE_{i}"] = "x" * (i % 50)
        i += 1
        if i % 500 == 0:
            for k in [k for k in os.environ if k.startswith("SHARDLOAD_RACE_")]:
                del os.environ[k]
    for t in threads:
        t.join()
    print(json.dumps({"loads": loads[0], "writes": i, "errors": errors[:3]}))
""")

SECONDS = 8.0


def _race(source: str | list[str], options: dict[str, str], rows: int,
          env: dict[str, str]) -> dict:
    p = subprocess.run([sys.executable, "-c", RACE, json.dumps(source), json.dumps(options),
                        str(rows), str(SECONDS)],
                       env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["errors"] == [], got
    assert got["loads"] > 0 and got["writes"] > 0, got
    return got


@pytest.fixture
def shards(bucket: s3_server.Bucket) -> s3_server.Bucket:
    for i in range(32):
        bucket.put_npy(f"d/shard_{i:04d}.npy", np.full((2, 2), i, np.int32))
    return bucket


@pytest.mark.parametrize("keys", ["environment", "options"])
def test_an_s3_load_survives_variables_added_on_another_thread(shards: s3_server.Bucket,
                                                                keys: str) -> None:
    """Keys from the environment (the credential sources compared on each request) or from
    the options (libcurl's proxy look-up alone): exit 139 before, within seconds."""
    options = dict(shards.options)
    if keys == "options":
        options.update(access_key="testing", secret_key="testing")
    _race(shards.url("d/*.npy"), options, 64, s3_server.CLIENT_ENV)


def test_an_http_load_survives_variables_added_on_another_thread() -> None:
    with test_http.serving() as (store, base):
        urls = []
        for i in range(32):
            store.put_npy(f"/d/shard_{i:04d}.npy", np.full((2, 2), i, np.int32))
            urls.append(f"{base}/d/shard_{i:04d}.npy")
        _race(urls, {}, 64, {})


def test_a_proxy_variable_set_in_python_is_taken_by_the_next_load(
        shards: s3_server.Bucket) -> None:
    """libcurl is handed the proxy now (it read the variables itself before): one named in
    os.environ is asked by the next load, and one removed is no longer asked."""
    import closing_server

    url = shards.url("d/shard_0003.npy")
    options = {**shards.options, "max_attempts": "1"}
    with closing_server.recording() as (proxy, seen):
        os.environ["http_proxy"] = f"http://{proxy}"
        try:
            with pytest.raises(Exception):
                shardload.numpy.load(url, storage_options=options)
        finally:
            del os.environ["http_proxy"]
        assert seen, "the proxy was not asked"
        asked = len(seen)
        np.testing.assert_array_equal(shardload.numpy.load(url, storage_options=options),
                                      np.full((2, 2), 3, np.int32))
        assert len(seen) == asked


@pytest.fixture
def two_servers() -> Iterator[list[str]]:
    """Two moto servers, each with bucket "bkt" holding d/x.npy: [100]*4 on the first,
    [101]*4 on the second."""
    import boto3

    saved = {k: os.environ.get(k) for k in [*s3_server.CLIENT_ENV, "AWS_ENDPOINT_URL"]}
    os.environ.update(s3_server.CLIENT_ENV)
    procs = []
    try:
        for i in range(2):
            procs.append(s3_server.start())
            c = boto3.client("s3", endpoint_url=f"http://{procs[-1][1]}", region_name="us-east-1",
                             aws_access_key_id="testing", aws_secret_access_key="testing")
            c.create_bucket(Bucket="bkt")
            buf = io.BytesIO()
            np.save(buf, np.full(4, 100 + i))
            c.put_object(Bucket="bkt", Key="d/x.npy", Body=buf.getvalue())
        yield [ep for _, ep in procs]
    finally:
        for p, _ in procs:
            s3_server.stop(p)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _keys(endpoint: str, prefix: str) -> list[str]:
    import boto3

    c = boto3.client("s3", endpoint_url=f"http://{endpoint}", region_name="us-east-1",
                     aws_access_key_id="testing", aws_secret_access_key="testing")
    got = c.list_objects_v2(Bucket="bkt", Prefix=prefix)
    return sorted(o["Key"] for o in got.get("Contents", []))


def test_a_load_after_aws_endpoint_url_names_another_server_reads_that_one(
        two_servers: list[str]) -> None:
    """Before, every load below read the first server's [100]*4 (wrong data, no error)."""
    for endpoint, want in [(two_servers[0], 100), (two_servers[1], 101), (two_servers[0], 100)]:
        os.environ["AWS_ENDPOINT_URL"] = f"http://{endpoint}"
        for source in ["s3://bkt/d/x.npy", "s3://bkt/d/*.npy"]:
            np.testing.assert_array_equal(shardload.numpy.load(source), np.full(4, want))


def test_a_save_after_aws_endpoint_url_names_another_server_writes_there(
        two_servers: list[str]) -> None:
    os.environ["AWS_ENDPOINT_URL"] = f"http://{two_servers[0]}"
    np.testing.assert_array_equal(shardload.numpy.load("s3://bkt/d/x.npy"), np.full(4, 100))
    os.environ["AWS_ENDPOINT_URL"] = f"http://{two_servers[1]}"
    shardload.numpy.save(np.arange(4), "s3://bkt/e/")
    assert _keys(two_servers[0], "e/") == []
    assert _keys(two_servers[1], "e/") != []
    np.testing.assert_array_equal(shardload.numpy.load("s3://bkt/e/"), np.arange(4))
