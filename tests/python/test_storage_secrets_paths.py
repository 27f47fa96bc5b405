"""Credentials given as storage options never enter a path string: whether they come through
``storage_options=``, the command line's ``--storage-option`` or the URL's query, the paths a
layout holds (its shards', its shard list's) name them by a handle of the process
(``credentials=HANDLE``), and such a layout still loads, in the same process and pickled into
another one. Two sets of credentials for one bucket are two handles, each loading.

Every secret holds the marker ``s3cr3t``: one search finds any part of any of them."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
import urllib.parse

import numpy as np
import pytest

pytest.importorskip("boto3")

import shardload  # noqa: E402

MARK = "s3cr3t"
SECRETS = {"access_key": "AKIAVISIBLE", "secret_key": "wJal-s3cr3t/K7+MDENG",
           "session_token": "FQoG-s3cr3t+tok/=="}
HANDLE = re.compile(r"credentials=[0-9a-f]{32}")

# Unpickles a Layout from stdin and prints its values and paths (another process, as a dask
# worker is).
CHILD = ("import pickle, sys, json; import shardload; "
         "layout = pickle.loads(sys.stdin.buffer.read()); "
         "print(json.dumps({'values': layout.read().tolist(), 'paths': list(layout.paths)}))")


def dataset(bucket, prefix: str) -> np.ndarray:
    parts = [np.arange(8, dtype=np.int32).reshape(4, 2), np.full((3, 2), 7, np.int32)]
    for i, p in enumerate(parts):
        bucket.put_npy(f"{prefix}/shard_{i:04d}.npy", p)
    return np.concatenate(parts)


def assert_no_secret_in_paths(layout) -> None:
    # Its shards' paths, a row slice's (what a dask chunk or a Legate tile holds) and the
    # files its shards link to.
    paths = list(layout.paths) + list(layout.slice_rows(1, layout.total_rows - 1).paths)
    paths += list(layout._linked_paths)
    assert paths
    for p in paths:
        assert MARK not in p and "secret_key" not in p and "session_token" not in p, p
        assert HANDLE.search(p), p


def load_in_another_process(layout) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD], input=pickle.dumps(layout),
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


def test_storage_options_secrets_stay_out_of_the_layouts_paths(bucket):
    expected = dataset(bucket, "d")
    layout = shardload.discover(bucket.url("d/"), storage_options={**bucket.options, **SECRETS})
    assert_no_secret_in_paths(layout)
    np.testing.assert_array_equal(layout.read(), expected)
    np.testing.assert_array_equal(shardload.load(layout), expected)

    again = pickle.loads(pickle.dumps(layout))
    assert again == layout
    assert_no_secret_in_paths(again)
    np.testing.assert_array_equal(again.read(), expected)

    child = load_in_another_process(layout)
    np.testing.assert_array_equal(np.array(child["values"], np.int32), expected)
    assert child["paths"] == list(layout.paths)

    # Another process that discovers the same source itself (another rank) makes the same
    # paths, which a feed's ranks compare.
    script = ("import sys, json, shardload; "
              "print(json.dumps(shardload.discover(sys.argv[1], "
              "storage_options=json.loads(sys.argv[2])).paths))")
    done = subprocess.run([sys.executable, "-c", script, bucket.url("d/"),
                           json.dumps({**bucket.options, **SECRETS})],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == list(layout.paths)


def test_url_query_secrets_stay_out_of_the_layouts_paths(bucket):
    expected = dataset(bucket, "q")
    query = urllib.parse.urlencode({**bucket.options, **SECRETS})
    for source in (f"{bucket.url('q/')}?{query}",
                   [f"{bucket.url(f'q/shard_{i:04d}.npy')}?{query}" for i in range(2)]):
        layout = shardload.discover(source)
        assert_no_secret_in_paths(layout)
        np.testing.assert_array_equal(layout.read(), expected)
        child = load_in_another_process(layout)
        np.testing.assert_array_equal(np.array(child["values"], np.int32), expected)


def test_command_line_storage_option_secrets_stay_out_of_the_shard_list(bucket, cli):
    dataset(bucket, "c")
    flags = [a for k, v in {**bucket.options, **SECRETS}.items()
             for a in ("--storage-option", f"{k}={v}")]
    done = subprocess.run([str(cli), "inspect", "--json", bucket.url("c/"), *flags],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # The shard list as the command line holds it (shown redacted, so a secret held would show
    # as secret_key=***): the handle only (itself shown as ***, as every key named so is).
    shards = json.loads(done.stdout)["shards"]
    assert len(shards) == 2
    for shard in shards:
        assert MARK not in shard["path"] and "secret_key" not in shard["path"], shard
        assert "session_token" not in shard["path"] and "credentials=" in shard["path"], shard


def test_two_credentials_for_one_bucket_are_two_handles_each_loading(bucket):
    expected = dataset(bucket, "t")
    other = {**SECRETS, "secret_key": "other-s3cr3t-key"}
    first = shardload.discover(bucket.url("t/"), storage_options={**bucket.options, **SECRETS})
    second = shardload.discover(bucket.url("t/"), storage_options={**bucket.options, **other})
    assert HANDLE.search(first.paths[0]).group() != HANDLE.search(second.paths[0]).group()
    # The same credentials again: the same handle, so an equal layout.
    assert shardload.discover(bucket.url("t/"),
                              storage_options={**bucket.options, **SECRETS}) == first
    for layout in (first, second):
        assert_no_secret_in_paths(layout)
        np.testing.assert_array_equal(layout.read(), expected)


def test_a_handle_another_process_was_never_given_is_refused_naming_the_url(bucket):
    dataset(bucket, "h")
    layout = shardload.discover(bucket.url("h/"), storage_options={**bucket.options, **SECRETS})
    script = ("import sys, shardload\n"
              "try:\n"
              "    shardload.discover([sys.argv[1]])\n"
              "except shardload.Error as e:\n"
              "    print(type(e).__name__, e)\n")
    done = subprocess.run([sys.executable, "-c", script, layout.paths[0]], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "names no credentials given to this process" in done.stdout, done.stdout
    assert "shard_0000.npy" in done.stdout and MARK not in done.stdout
