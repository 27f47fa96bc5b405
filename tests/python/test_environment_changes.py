"""The environment changed while shardload reads: Python's ``os.environ[k] = v`` (glibc's setenv)
on one thread while a load runs on another, and ``AWS_ENDPOINT_URL`` pointed at another server
between two loads.

A new variable may move the array getenv walks and free the old one; the engine's threads read
the environment on every request (libcurl's proxy look-up, the credential sources compared, the
container token's variables), and so do the libraries they call: the AWS SDK inside Arrow's S3
client as it makes a client and on each of its requests, HDF5 at each file's and dataset's open.
A getenv at that moment read freed memory: the process died of SIGSEGV. The races run in a
child process for a few seconds each and their exit status is asserted. A store kept per bucket
read, listed and wrote the first server's objects after AWS_ENDPOINT_URL named another one,
without an error; against two moto servers here."""

from __future__ import annotations

import io
import json
import os
import pathlib
import shutil
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

# Loads `source` (a JSON list: one source, or a list of URLs) with `kwargs` (JSON) on
# `threads` threads for `seconds` while the main thread adds variables, dropping them every 500 (each
# setenv of a new name may move environ). Where `fresh` is 1, each load's storage options differ
# (its backoff_ms), so each makes a store of its own and its clients: no load before the race
# made them. Each load is compared with `want` (JSON). Prints the count of loads and errors.
RACE = textwrap.dedent("""
    import itertools, json, os, sys, threading, time
    import numpy as np
    import shardload.numpy
    source, kwargs, rows, seconds, fresh, threads = json.loads(sys.argv[1]), \\
        json.loads(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5] == "1", \\
        int(sys.argv[6])
    want = json.loads(sys.argv[7])
    lib = None
    if len(sys.argv) > 8:
        # A C library loaded after the first call, which sets variables through its own slots.
        import ctypes
        shardload.numpy.load(source, **kwargs)
        lib = ctypes.CDLL(sys.argv[8])
    stop = time.monotonic() + seconds
    loads, errors, count = [0], [], itertools.count(1)
    def reader():
        while time.monotonic() < stop:
            kw = dict(kwargs)
            if fresh:
                kw["storage_options"] = {**kw["storage_options"],
                                         "backoff_ms": str(next(count) % 60000)}
            try:
                got = shardload.numpy.load(source, **kw)
                assert got.shape[0] == rows, got.shape
                assert got.tolist() == want, got
                loads[0] += 1
            except Exception as e:
                errors.append(repr(e)[:300])
    threads = [threading.Thread(target=reader) for _ in range(threads)]
    for t in threads:
        t.start()
    i = 0
    while time.monotonic() < stop:
        if lib is not None:
            lib.add_vars(i, 200)
            i += 200
            continue
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


def _race(source: str | list[str], kwargs: dict, shards: int, env: dict[str, str],
          fresh: bool = False, threads: int = 2, late_library: str | None = None) -> dict:
    """Races loads of `shards` shards, shard i a (2, 2) int32 array of i."""
    want = np.repeat(np.arange(shards, dtype=np.int32), 2)[:, None].repeat(2, axis=1)
    p = subprocess.run([sys.executable, "-c", RACE, json.dumps(source), json.dumps(kwargs),
                        str(2 * shards), str(SECONDS), "1" if fresh else "0", str(threads),
                        json.dumps(want.tolist())] + ([late_library] if late_library else []),
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


@pytest.mark.parametrize("keys", ["environment", "options", "arrows client"])
def test_an_s3_load_survives_variables_added_on_another_thread(shards: s3_server.Bucket,
                                                                keys: str) -> None:
    """Every load makes its store's clients (Arrow's, whose AWS SDK reads the environment as it
    makes one), with keys from the environment (the credential sources compared on each
    request too) or from the options (libcurl's proxy look-up), or reads through Arrow's client
    (the AWS SDK's getenv on each request): exit 139 before, within seconds."""
    options = dict(shards.options)
    if keys == "options":
        options.update(access_key="testing", secret_key="testing")
    elif keys == "arrows client":
        options.update(s3_server.ARROWS_CLIENT)
    _race(shards.url("d/*.npy"), {"storage_options": options}, 32, s3_server.CLIENT_ENV,
          fresh=True)


LATE_LIBRARY = r"""
#include <stdio.h>
#include <stdlib.h>
void add_vars(int from, int n) {
  char k[64];
  for (int i = from; i < from + n; ++i) {
    snprintf(k, sizeof k, "SHARDLOAD_LATE_%d", i);
    setenv(k, "xxxxxxxxxxxxxxxxxxxxxxxx", 1);
  }
  for (int i = from; i < from + n; ++i) {
    snprintf(k, sizeof k, "SHARDLOAD_LATE_%d", i);
    unsetenv(k);
  }
}
"""


def test_a_c_library_loaded_after_the_first_load_that_sets_variables_races_no_load(
        shards: s3_server.Bucket, tmp_path: pathlib.Path) -> None:
    """A C extension imported after the first load calls setenv through its own slots, which
    the first call's pass over the libraries did not see: each call redirects the libraries the
    loader loaded since (dlpi_adds). Before: exit -11 within seconds."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the late library")
    (tmp_path / "late.c").write_text(LATE_LIBRARY)
    lib = tmp_path / "late.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(lib), str(tmp_path / "late.c")],
                   check=True)
    options = dict(shards.options, **s3_server.ARROWS_CLIENT)
    _race(shards.url("d/*.npy"), {"storage_options": options}, 32, s3_server.CLIENT_ENV,
          fresh=True, threads=4, late_library=str(lib))


def test_an_http_load_survives_variables_added_on_another_thread() -> None:
    with test_http.serving() as (store, base):
        urls = []
        for i in range(32):
            store.put_npy(f"/d/shard_{i:04d}.npy", np.full((2, 2), i, np.int32))
            urls.append(f"{base}/d/shard_{i:04d}.npy")
        _race(urls, {}, 32, {})


def test_an_hdf5_load_of_external_storage_and_a_virtual_dataset_survives_variables_added(
        tmp_path: pathlib.Path) -> None:
    """The HDF5 library, loaded by the first HDF5 file's probe on an engine thread, reads
    HDF5_EXTFILE_PREFIX, HDF5_VDS_PREFIX and HDF5_USE_FILE_LOCKING as it starts, while variables
    are added: its getenv waits for them now. A window of a few calls once a process, which
    this race seldom hits (it passed before too); it checks that the library so guarded reads
    external storage and a virtual dataset right."""
    h5py = pytest.importorskip("h5py")
    shards = tmp_path / "d"
    shards.mkdir()
    for i in range(8):
        a = np.full((2, 2), i, np.int32)
        ext = tmp_path / f"external_{i}.bin"
        ext.write_bytes(a.tobytes())
        with h5py.File(shards / f"shard_{i:04d}.h5", "w") as f:
            f.create_dataset("x", shape=a.shape, dtype=a.dtype, external=[(str(ext), 0, a.nbytes)])
    with h5py.File(tmp_path / "source.h5", "w") as f:
        f["x"] = np.full((2, 2), 8, np.int32)
    virtual = h5py.VirtualLayout(shape=(2, 2), dtype=np.int32)
    virtual[:] = h5py.VirtualSource(str(tmp_path / "source.h5"), "x", shape=(2, 2))
    with h5py.File(shards / "shard_0008.h5", "w") as f:
        f.create_virtual_dataset("x", virtual)
    # One thread loads: two loads of the virtual dataset at once fail on their own (its source
    # opened twice with other file-locking flags), which is no part of this race.
    _race(str(shards), {"format": "hdf5"}, 9, {}, threads=1)


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
