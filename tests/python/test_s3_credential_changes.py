"""Credentials from the environment and the shared credentials file that change while the process
runs: a notebook that fixes os.environ after a 403, a tool that rewrites ~/.aws/credentials with
a renewed session token. They were read once per store (bucket and URL options) and kept, so a
process went on signing with the old ones, every load a bare HTTP 403 until it restarted; a new
load now signs with what the environment and the file hold then. Against rclone's ``serve s3``,
which checks every request's signature against its one key pair (testing/testing), in this
process, as a notebook would."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

pytest.importorskip("boto3")

import shardload  # noqa: E402

from s3_server import Bucket  # noqa: E402
from test_s3_rclone import rclone  # noqa: E402,F401 (a fixture: rclone serve s3 once a module)

WANT = np.arange(12.0).reshape(6, 2)


@pytest.fixture
def bucket(rclone: str) -> Bucket:
    b = Bucket(rclone, prefix="cc-")
    b.put_npy("d/shard_0000.npy", WANT[:4])
    b.put_npy("d/shard_0001.npy", WANT[4:])
    return b


def _refused(bucket: Bucket) -> str:
    """The error of a directory's load (a LIST through Arrow's client, GETs signed by
    shardload) that the server refuses."""
    with pytest.raises(shardload.LayoutError) as e:
        shardload.load(bucket.url("d/"), storage_options=bucket.options)
    text = str(e.value)
    assert "403" in text, text
    return text


def _loads(bucket: Bucket) -> None:
    got = shardload.load(bucket.url("d/"), storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(got), WANT)


def _saves(bucket: Bucket, prefix: str) -> None:
    rows = np.arange(8, dtype=np.int32).reshape(4, 2)
    shardload.save(rows, bucket.url(prefix), storage_options=bucket.options)
    np.testing.assert_array_equal(
        np.asarray(shardload.load(bucket.url(prefix), storage_options=bucket.options)), rows)


def test_a_secret_corrected_in_the_environment_is_taken_by_the_next_load(
        bucket: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    assert "wrong-secret" not in _refused(bucket)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    _loads(bucket)  # the same URL, the same process
    _saves(bucket, "e/")


def test_keys_taken_out_of_the_environment_are_not_signed_with_again(
        bucket: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other way: a key pair the user replaced (a revoked one) is not used after it."""
    _loads(bucket)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "revoked")
    _refused(bucket)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    _loads(bucket)


def _credentials_file(path: pathlib.Path, secret: str) -> None:
    path.write_text(f"[default]\naws_access_key_id = testing\naws_secret_access_key = {secret}\n")


@pytest.mark.parametrize("how", ["in place", "replaced"])
def test_a_rewritten_credentials_file_is_taken_by_the_next_load(
        bucket: Bucket, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path,
        how: str) -> None:
    """A wrong secret in the file, then the right one: written over in place with the same
    size (only its modification time tells), or written beside it and renamed over it (a new
    inode), as tools that renew a session token write it."""
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    credentials = tmp_path / "credentials"
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    _credentials_file(credentials, "testinX")  # the right one's length
    assert "testinX" not in _refused(bucket)
    if how == "in place":
        _credentials_file(credentials, "testing")
    else:
        _credentials_file(tmp_path / "credentials.new", "testing")
        os.replace(tmp_path / "credentials.new", credentials)
    _loads(bucket)
    _saves(bucket, "f/")


def test_with_nothing_changed_a_credential_process_runs_once(
        bucket: Bucket, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    """The environment and the files are looked at for each load, but what they lead to is
    asked again only where they changed: loads and a save with nothing changed run the
    profile's credential_process once (a helper that prompts would prompt for each)."""
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    runs = tmp_path / "runs"
    script = tmp_path / "creds.sh"
    script.write_text(f"#!/bin/sh\necho run >> {runs}\n"
                      "echo '{\"Version\": 1, \"AccessKeyId\": \"testing\", "
                      "\"SecretAccessKey\": \"testing\"}'\n")
    script.chmod(0o755)
    config = tmp_path / "config"
    config.write_text(f"[default]\ncredential_process = {script}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    _loads(bucket)
    _loads(bucket)
    _saves(bucket, "g/")
    assert runs.read_text().splitlines() == ["run"]
