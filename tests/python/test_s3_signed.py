"""s3:// reads signed by shardload itself (AWS Signature Version 4) and sent through libcurl,
where the credentials and region are known without the AWS SDK: the signature checked against
botocore's own signer (moto does not check signatures), the requests they cost counted through
a recording proxy, and the choice between this path and Arrow's."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import io
import os
import urllib.parse
import uuid
from unittest import mock

import numpy as np
import pytest

moto = pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
boto3 = pytest.importorskip("boto3")
botocore_auth = pytest.importorskip("botocore.auth")
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402

import shardload  # noqa: E402

import closing_server  # noqa: E402
from s3_fault_proxy import FaultProxy, Rule  # noqa: E402
from s3_server import ARROWS_CLIENT  # noqa: E402


@pytest.fixture
def proxy(server):
    with FaultProxy(server) as p:
        yield p


class Data:
    """Ragged .npy shards under "d/" of a new bucket, written straight to the server."""

    def __init__(self, server: str, rows=(7, 0, 13, 5, 9), seed=0):
        self.name = "s-" + uuid.uuid4().hex[:12]
        self.client = boto3.client("s3", endpoint_url=f"http://{server}",
                                   region_name="us-east-1", aws_access_key_id="testing",
                                   aws_secret_access_key="testing")
        self.client.create_bucket(Bucket=self.name)
        rng = np.random.default_rng(seed)
        self.parts = [rng.standard_normal((r, 3)).astype("float32") for r in rows]
        for i, p in enumerate(self.parts):
            buf = io.BytesIO()
            np.save(buf, p)
            self.client.put_object(Bucket=self.name, Key=f"d/shard_{i:04d}.npy",
                                   Body=buf.getvalue())
        self.want = np.concatenate(self.parts)

    def url(self, key: str = "d/") -> str:
        return f"s3://{self.name}/{key}"


def _lowered(headers: dict[str, str]) -> dict[str, str]:
    """A request's headers by their lower-case names (HTTP names are case-insensitive)."""
    return {k.lower(): v for k, v in headers.items()}


def _botocore_authorization(method: str, url: str, sent: dict[str, str], access_key: str,
                            secret_key: str, token: str | None, body: bytes = b"") -> str:
    """The Authorization header botocore's S3 signer gives the request as it was sent (the
    headers it signed, at its x-amz-date; over http it hashes ``body`` into the signature)."""
    auth = sent["Authorization"]
    signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
    lower = _lowered(sent)
    headers = {k: lower[k] for k in signed if k not in ("host", "x-amz-security-token")}
    req = AWSRequest(method=method, url=url, headers=headers, data=body)
    when = datetime.datetime.strptime(lower["x-amz-date"], "%Y%m%dT%H%M%SZ")
    signer = botocore_auth.S3SigV4Auth(Credentials(access_key, secret_key, token), "s3",
                                       "us-east-1")
    with mock.patch.object(botocore_auth, "get_current_datetime", return_value=when):
        signer.add_auth(req)
    # botocore writes ", " between the parts, shardload ","; either is AWS's form.
    return req.headers["Authorization"].replace(", ", ",")


def _object_requests(proxy: FaultProxy, data: Data) -> list[tuple[str, str, dict[str, str]]]:
    return [(m, t, h) for m, t, h in proxy.headers if t.startswith(f"/{data.name}/d/shard_")]


@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzEXAMPLE+token/=="])
def test_signature_equals_botocores(server, proxy, token):
    data = Data(server)
    options = {"endpoint_override": proxy.endpoint, "scheme": "http", "region": "us-east-1",
               "access_key": "AKIDEXAMPLE", "secret_key": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLE"}
    if token:
        options["session_token"] = token
    got = shardload.load(data.url(), storage_options=options)
    np.testing.assert_array_equal(np.asarray(got), data.want)
    reqs = _object_requests(proxy, data)
    assert reqs and all(m == "GET" for m, _, _ in reqs), reqs
    for method, target, sent in reqs:
        assert sent["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
        assert "Range" in sent
        if token:
            assert sent["x-amz-security-token"] == token
        want = _botocore_authorization(method, f"http://{proxy.endpoint}{target}", sent,
                                       options["access_key"], options["secret_key"], token)
        assert sent["Authorization"] == want, (target, sent)


@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzEXAMPLE+token/=="])
def test_a_save_puts_each_object_signed_with_its_bytes_hash_as_botocore_signs_it(
        server, proxy, token):
    """Objects within multipart_threshold go up in one PUT each, signed here: over http with
    the SHA-256 of the bytes the store then holds, so a body changed on the way is refused."""
    data = Data(server, rows=(1,))
    options = {"endpoint_override": proxy.endpoint, "scheme": "http", "region": "us-east-1",
               "access_key": "AKIDEXAMPLE", "secret_key": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLE"}
    if token:
        options["session_token"] = token
    a = np.arange(60, dtype=np.int32).reshape(20, 3)
    prefix = "p/odd key+(1)=é/"
    shardload.save(a, data.url(prefix), num_shards=3, storage_options=options)
    puts = [(t, h) for m, t, h in proxy.headers if m == "PUT"]
    keys = sorted(urllib.parse.unquote(t.split("?")[0][len(f"/{data.name}/"):]) for t, _ in puts)
    assert keys == [f"{prefix}shard_{i:04d}.npy" for i in range(3)] + [
        f"{prefix}shardload.manifest"], keys
    assert not any(m == "POST" for m, _, _ in proxy.headers)  # no multipart upload
    for target, sent in puts:
        key = urllib.parse.unquote(target.split("?")[0][len(f"/{data.name}/"):])
        body = data.client.get_object(Bucket=data.name, Key=key)["Body"].read()
        assert sent["x-amz-content-sha256"] == hashlib.sha256(body).hexdigest(), key
        assert int(sent["Content-Length"]) == len(body) and "Expect" not in sent, sent
        if token:
            assert sent["x-amz-security-token"] == token
        want = _botocore_authorization("PUT", f"http://{proxy.endpoint}{target}", sent,
                                       options["access_key"], options["secret_key"], token,
                                       body)
        assert sent["Authorization"] == want, (target, sent)
    np.testing.assert_array_equal(
        np.asarray(shardload.load(data.url(prefix), storage_options=options)), a)


def test_a_key_with_spaces_and_symbols_is_signed_as_botocore_signs_it(server, proxy):
    data = Data(server, rows=(4,))
    a = np.arange(12, dtype=np.int16).reshape(4, 3)
    buf = io.BytesIO()
    np.save(buf, a)
    key = "d/odd name+(1)=é.npy"
    data.client.put_object(Bucket=data.name, Key=key, Body=buf.getvalue())
    options = {"endpoint_override": proxy.endpoint, "scheme": "http", "region": "us-east-1"}
    np.testing.assert_array_equal(
        np.asarray(shardload.load([data.url(key)], storage_options=options)), a)
    reqs = [(m, t, h) for m, t, h in proxy.headers if "odd" in t]
    assert reqs
    for method, target, sent in reqs:
        want = _botocore_authorization(method, f"http://{proxy.endpoint}{target}", sent,
                                       os.environ["AWS_ACCESS_KEY_ID"],
                                       os.environ["AWS_SECRET_ACCESS_KEY"], None)
        assert sent["Authorization"] == want, (target, sent)


def test_requests_one_get_per_object_at_discovery_and_per_piece_at_load(server, proxy):
    data = Data(server)
    options = {"endpoint_override": proxy.endpoint, "scheme": "http", "region": "us-east-1"}
    layout = shardload.discover(data.url(), storage_options=options)
    reqs = _object_requests(proxy, data)
    # One GET per object (its first bytes: the header, the size and the ETag), no HEAD.
    assert sorted(t for _, t, _ in reqs) == [f"/{data.name}/d/shard_{i:04d}.npy"
                                             for i in range(len(data.parts))], reqs
    assert {m for m, _, _ in reqs} == {"GET"}
    proxy.clear()
    np.testing.assert_array_equal(layout.read(0, layout.total_rows), data.want)
    reqs = _object_requests(proxy, data)
    # One ranged GET per non-empty object read, nothing after it.
    assert {m for m, _, _ in reqs} == {"GET"}, reqs
    assert sorted(t for _, t, _ in reqs) == [f"/{data.name}/d/shard_{i:04d}.npy"
                                             for i, p in enumerate(data.parts) if len(p)]


def test_credentials_file_only_takes_the_signed_path(server, proxy, tmp_path, monkeypatch):
    data = Data(server)
    creds = tmp_path / "credentials"
    creds.write_text("[other]\naws_access_key_id = WRONG\naws_secret_access_key = x\n\n"
                     "[research]\naws_access_key_id = AKIDFROMFILE\n"
                     "aws_secret_access_key = secretfromfile\n")
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_PROFILE", "research")
    options = {"endpoint_override": proxy.endpoint, "scheme": "http", "region": "us-east-1"}
    got = shardload.load(data.url(), storage_options=options)
    np.testing.assert_array_equal(np.asarray(got), data.want)
    reqs = _object_requests(proxy, data)
    assert reqs and {m for m, _, _ in reqs} == {"GET"}, reqs
    for method, target, sent in reqs:
        assert sent["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDFROMFILE/")
        want = _botocore_authorization(method, f"http://{proxy.endpoint}{target}", sent,
                                       "AKIDFROMFILE", "secretfromfile", None)
        assert sent["Authorization"] == want


@pytest.mark.parametrize("profile,section", [(None, "default"),
                                             ("research", "profile research")])
def test_a_region_in_the_config_file_takes_the_signed_path(server, proxy, tmp_path, monkeypatch,
                                                           profile, section):
    """`aws configure` writes the region to ~/.aws/config, not the credentials file: with no
    region in the options or the environment, the profile's there is the one signed for
    (section "[default]", else "[profile NAME]"), and the objects are read by signed GETs."""
    data = Data(server)
    config = tmp_path / "config"
    config.write_text("[profile other]\nregion = eu-west-3\n\n"
                      f"[{section}]\noutput = json\nregion = ap-south-1\n")
    for k in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    if profile:
        monkeypatch.setenv("AWS_PROFILE", profile)
    options = {"endpoint_override": proxy.endpoint, "scheme": "http"}
    got = shardload.load(data.url(), storage_options=options)
    np.testing.assert_array_equal(np.asarray(got), data.want)
    reqs = _object_requests(proxy, data)
    assert reqs and {m for m, _, _ in reqs} == {"GET"}, reqs  # no HEAD: the signed path
    for _, _, sent in reqs:
        assert "/ap-south-1/s3/aws4_request" in sent["Authorization"], sent["Authorization"]


def _signed_for(proxy: FaultProxy, data: Data, region: str) -> None:
    """Every object request was a GET signed here for `region` (no HEAD: the signed path)."""
    reqs = _object_requests(proxy, data)
    assert reqs and {m for m, _, _ in reqs} == {"GET"}, reqs
    for _, _, sent in reqs:
        assert f"/{region}/s3/aws4_request" in sent["Authorization"], sent["Authorization"]


def _bucket_heads(proxy: FaultProxy, data: Data) -> int:
    return sum(1 for m, t, _ in proxy.headers if m == "HEAD" and t == f"/{data.name}")


@pytest.mark.parametrize("variable", ["AWS_REGION", "AWS_DEFAULT_REGION"])
def test_a_region_in_the_environment_is_signed_for_without_asking_the_bucket(
        server, proxy, monkeypatch, variable):
    data = Data(server, seed=4)
    for k in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv(variable, "ap-northeast-2")
    options = {"endpoint_override": proxy.endpoint, "scheme": "http"}
    got = shardload.load(data.url(), storage_options=options)
    np.testing.assert_array_equal(np.asarray(got), data.want)
    _signed_for(proxy, data, "ap-northeast-2")
    assert _bucket_heads(proxy, data) == 0, proxy.log


@pytest.mark.parametrize("said", ["store", "301", "403", "hostile", "reset"])
def test_without_a_region_the_buckets_own_is_asked_once_and_signed_for(server, proxy,
                                                                        monkeypatch, said):
    """No region in the options, the environment or the config file: an unsigned HEAD of the
    bucket asks its region, as S3 (and moto) answers it in x-amz-bucket-region, with a 200 or
    AWS's 301 from another region's endpoint; a store that does not say (a 403 without it),
    or says what is no region's name, or does not answer, is in us-east-1, as Arrow's client
    takes it. Requests are then signed for it, Arrow's LIST included, and the objects read
    by signed GETs; the region is asked once per bucket, also for a URL of other options."""
    data = Data(server, seed=5)
    if said == "store":  # the bucket lives in eu-central-1: moto's own answer says so
        data.name = "r-" + uuid.uuid4().hex[:12]
        client = boto3.client("s3", endpoint_url=f"http://{server}", region_name="eu-central-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket=data.name,
                             CreateBucketConfiguration={"LocationConstraint": "eu-central-1"})
        for i, p in enumerate(data.parts):
            buf = io.BytesIO()
            np.save(buf, p)
            client.put_object(Bucket=data.name, Key=f"d/shard_{i:04d}.npy", Body=buf.getvalue())
    head = Rule("HEAD", path=f"/{data.name}", ranged=False, count=1,
                action={"store": "500", "301": "wrong-region", "403": "403",
                        "hostile": "wrong-region", "reset": "reset"}[said],
                region="evil.example/x?" if said == "hostile" else "sa-east-1")
    if said != "store":
        proxy.add(head)
    for k in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    want = {"store": "eu-central-1", "301": "sa-east-1"}.get(said, "us-east-1")
    options = {"endpoint_override": proxy.endpoint, "scheme": "http", "max_attempts": "1"}
    got = shardload.load(data.url(), storage_options=options)
    np.testing.assert_array_equal(np.asarray(got), data.want)
    _signed_for(proxy, data, want)
    lists = [h for m, t, h in proxy.headers if m == "GET" and "list-type=2" in t]
    assert lists and all(f"/{want}/s3/aws4_request" in _lowered(h)["authorization"]
                         for h in lists), lists
    assert _bucket_heads(proxy, data) == 1, proxy.log
    # Another URL of the same bucket, with other options: its region is known already (a
    # request that got no answer is asked again).
    more = {**options, "request_bytes": "65536"}
    got = shardload.load(data.url(), storage_options=more)
    np.testing.assert_array_equal(np.asarray(got), data.want)
    assert _bucket_heads(proxy, data) == (2 if said == "reset" else 1), proxy.log


def test_ctrl_c_during_the_buckets_head_keeps_no_region_for_it(server, proxy, tmp_path):
    """A Ctrl-C while the bucket's HEAD is awaited ends the discovery with KeyboardInterrupt
    and keeps nothing for the bucket: the next load asks again and signs for the region said
    then, not for us-east-1, the guess for a store that does not answer."""
    import signal
    import subprocess
    import sys
    import time

    data = Data(server, seed=6)
    hold = proxy.add(Rule("HEAD", path=f"/{data.name}", ranged=False, action="delay",
                          delay_s=300))
    proxy.add(Rule("HEAD", path=f"/{data.name}", ranged=False, action="wrong-region",
                   region="sa-east-1"))
    options = {"endpoint_override": proxy.endpoint, "scheme": "http"}
    out = tmp_path / "got.npy"
    script = ("import numpy, shardload\n"
              "try:\n"
              f"    shardload.discover({data.url()!r}, storage_options={options!r})\n"
              "    print('no interrupt', flush=True)\n"
              "except KeyboardInterrupt:\n"
              "    print('KeyboardInterrupt', flush=True)\n"
              f"a = shardload.load({data.url()!r}, storage_options={options!r})\n"
              f"numpy.save({str(out)!r}, numpy.asarray(a))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
    # The child gets SIGINT's default action back (a shell without job control may have
    # started this run with it ignored), so that Python makes its KeyboardInterrupt.
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while hold.fired == 0 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert hold.fired == 1, proxy.log
        time.sleep(0.3)  # inside the wait, not before it
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0 and "KeyboardInterrupt" in stdout, (stdout, stderr[-3000:])
    np.testing.assert_array_equal(np.load(out), data.want)
    _signed_for(proxy, data, "sa-east-1")
    assert _bucket_heads(proxy, data) == 2, proxy.log


def test_arrows_client_reads_the_same(server, proxy):
    """Where Arrow's client reads (an option of Arrow's that the signed path does not know;
    likewise credentials only the AWS SDK finds): a HEAD per object at discovery and after
    its reads, with the same data."""
    data = Data(server)
    options = {"endpoint_override": proxy.endpoint, "scheme": "http", "region": "us-east-1",
               **ARROWS_CLIENT}
    layout = shardload.discover(data.url(), storage_options=options)
    assert any(m == "HEAD" for m, _, _ in _object_requests(proxy, data))
    np.testing.assert_array_equal(layout.read(0, layout.total_rows), data.want)
    np.testing.assert_array_equal(np.asarray(shardload.load(layout)), data.want)
    # An object overwritten after discovery is still an error naming it on that path.
    buf = io.BytesIO()
    np.save(buf, data.parts[2] + 1)
    data.client.put_object(Bucket=data.name, Key="d/shard_0002.npy", Body=buf.getvalue())
    with pytest.raises(shardload.ShardReadError, match="overwritten") as e:
        layout.read(0, layout.total_rows)
    assert data.url("d/shard_0002.npy") in str(e.value)


@pytest.mark.parametrize("variable", ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"])
def test_an_endpoint_from_the_environment_is_the_one_asked(server, proxy, monkeypatch, variable):
    """No endpoint in the URL, one in the environment (as the AWS SDK reads it): the requests
    go there, never to AWS itself, signed here (one GET per object, no HEAD) as with an
    endpoint_override."""
    data = Data(server, seed=3)
    monkeypatch.setenv(variable, f"http://{proxy.endpoint}/")
    options = {"region": "us-east-1", "max_attempts": "1"}
    np.testing.assert_array_equal(
        np.asarray(shardload.load(data.url(), storage_options=options)), data.want)
    reqs = _object_requests(proxy, data)
    assert len(reqs) >= len(data.parts), proxy.log
    assert {m for m, _, _ in reqs} == {"GET"}, reqs


def test_overwritten_object_is_refused_by_its_get_without_a_head(server, proxy):
    data = Data(server)
    options = {"endpoint_override": proxy.endpoint, "scheme": "http", "region": "us-east-1"}
    layout = shardload.discover(data.url(), storage_options=options)
    buf = io.BytesIO()
    np.save(buf, data.parts[3] + 1)  # the same size, other bytes: only the ETag tells
    data.client.put_object(Bucket=data.name, Key="d/shard_0003.npy", Body=buf.getvalue())
    proxy.clear()
    with pytest.raises(shardload.ShardReadError, match="changed since discovery") as e:
        layout.read(0, layout.total_rows)
    assert data.url("d/shard_0003.npy") in str(e.value) and "overwritten" in str(e.value)
    assert not any(m == "HEAD" for m, _, _ in _object_requests(proxy, data))


def test_credential_options_are_checked(server):
    data = Data(server, rows=(2,))
    base = {"endpoint_override": server, "scheme": "http", "region": "us-east-1"}
    for extra, why in [({"access_key": "AK"}, "access_key and secret_key go together"),
                       ({"session_token": "T"}, "access_key and secret_key go together"),
                       ({"anonymous": "yes"}, "anonymous must be true or false, found 'yes'")]:
        with pytest.raises(ValueError, match=f"bad object-storage URL or options: {why}"):
            shardload.discover(data.url(), storage_options={**base, **extra})


def test_anonymous_requests_are_unsigned(server, proxy):
    data = Data(server)
    for i in (0, 2):  # readable without credentials; the rest stays private
        data.client.put_object_acl(Bucket=data.name, Key=f"d/shard_{i:04d}.npy",
                                   ACL="public-read")
    options = {"endpoint_override": proxy.endpoint, "scheme": "http", "region": "us-east-1",
               "anonymous": "true"}
    layout = shardload.discover([data.url("d/shard_0000.npy"), data.url("d/shard_0002.npy")],
                                storage_options=options)
    np.testing.assert_array_equal(layout.read(0, layout.total_rows),
                                  np.concatenate([data.parts[0], data.parts[2]]))
    reqs = _object_requests(proxy, data)
    assert reqs and all("Authorization" not in h for _, _, h in reqs), reqs
    # A private object refuses them: an error naming it, in the store's words.
    with pytest.raises(shardload.Error) as e:
        shardload.discover([data.url("d/shard_0001.npy")], storage_options=options)
    assert data.url("d/shard_0001.npy") in str(e.value) and "403" in str(e.value)


def test_a_manifest_indexed_on_arrows_path_is_current_on_the_signed_path(server):
    """Both paths take the same snapshot of an object (its size and the hash of its ETag as
    S3 sends it), so a manifest written by one is not stale for the other."""
    data = Data(server)
    signed = {"endpoint_override": server, "scheme": "http", "region": "us-east-1"}
    arrow = {**signed, **ARROWS_CLIENT}
    shardload.index(data.url(), storage_options=arrow)
    layout = shardload.discover(data.url(), storage_options=signed)
    assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status
    np.testing.assert_array_equal(layout.read(0, layout.total_rows), data.want)


def test_an_empty_object_is_opened_by_a_head_after_its_refused_range(server, proxy):
    """An object of 0 bytes has no byte 0 for the opening GET to ask for (416): its snapshot
    comes from a HEAD, and it is read as the 0 rows it holds."""
    data = Data(server, rows=(1,))
    parts = [np.arange(10, dtype="<i4").reshape(2, 5), np.zeros((0, 5), "<i4"),
             np.arange(15, dtype="<i4").reshape(3, 5)]
    for i, p in enumerate(parts):
        data.client.put_object(Bucket=data.name, Key=f"r/shard_{i:04d}.bin", Body=p.tobytes())
    options = {"endpoint_override": proxy.endpoint, "scheme": "http", "region": "us-east-1"}
    layout = shardload.discover(data.url("r/"), format="raw", dtype="<i4", trailing_shape=(5,),
                                storage_options=options)
    assert layout.total_rows == 5 and len(layout.paths) == 3
    np.testing.assert_array_equal(layout.read(0, 5), np.concatenate(parts))
    empty = [m for m, t, _, _ in proxy.log if t.endswith("/r/shard_0001.bin")]
    assert empty[:2] == ["GET", "HEAD"], proxy.log


class RoleSource(contextlib.ExitStack):
    """A credentials source on 127.0.0.1: the instance metadata service (IMDSv2: a session
    token by PUT, then the role's name and its credentials, each asked with the token) or a
    container's credentials endpoint (one GET with the Authorization token). Each answer of
    credentials is a new key pair, AKIDROLE1, AKIDROLE2, ..., expiring ``expires_in`` seconds
    later."""

    ROLE = "train-role"
    TOKEN = "imds-token-" + uuid.uuid4().hex[:8]

    def __init__(self, expires_in: int = 6 * 3600, container_token: str | None = None,
                 host: str = "127.0.0.1"):
        import http.server

        super().__init__()
        self.expires_in = expires_in
        self.container_token = container_token
        self.log: list[tuple[str, str, dict[str, str]]] = []
        self.issued = 0
        self.ours: list[int] = []  # the key pairs handed to shardload (not to the AWS SDK)
        source = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # noqa: ANN002
                pass

            def _answer(self, status: int, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:  # noqa: N802
                source.log.append(("PUT", self.path, dict(self.headers.items())))
                ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
                if self.path != "/latest/api/token" or not ttl:
                    return self._answer(400, "bad token request")
                self._answer(200, source.TOKEN)

            def do_GET(self) -> None:  # noqa: N802
                source.log.append(("GET", self.path, dict(self.headers.items())))
                base = "/latest/meta-data/iam/security-credentials/"
                if self.path == "/creds":
                    if self.headers.get("Authorization") != source.container_token:
                        return self._answer(403, "wrong token")
                    return self._answer(200, source.credentials(True, self.headers))
                if self.headers.get("X-aws-ec2-metadata-token") != source.TOKEN:
                    return self._answer(401, "no token")
                if self.path == base:
                    return self._answer(200, source.ROLE + "\n")
                if self.path == base + source.ROLE:
                    return self._answer(200, source.credentials(False, self.headers))
                self._answer(404, "not found")

        # Closed, with its connections, when the with-block ends.
        self.httpd = self.enter_context(closing_server.serving(Handler, host=host))
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def credentials(self, container: bool, headers) -> str:
        import json

        self.issued += 1
        # Arrow's client asks too, as the AWS SDK, which says so in its User-Agent.
        if not (headers.get("User-Agent") or "").startswith("aws-sdk"):
            self.ours.append(self.issued)
        when = (datetime.datetime.now(datetime.timezone.utc)
                + datetime.timedelta(seconds=self.expires_in))
        doc = {"AccessKeyId": f"AKIDROLE{self.issued}",
               "SecretAccessKey": f"rolesecret{self.issued}",
               "Token": f"roletoken{self.issued}",
               "Expiration": when.strftime("%Y-%m-%dT%H:%M:%SZ")}
        if not container:
            doc |= {"Code": "Success", "Type": "AWS-HMAC"}
        return json.dumps(doc)


def _load_in_a_new_process(data: Data, proxy: FaultProxy, tmp_path, env: dict[str, str],
                           fails: bool = False, save_to: str | None = None):
    """Loads ``data`` through ``proxy`` in a process of its own (role credentials are looked
    up once per process) with the credentials environment ``env`` alone, and saves it to
    ``save_to`` if given; the array (or, with ``fails``, the process's stderr: it must
    fail)."""
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("AWS_", "ECS_")) or k in ("AWS_REGION",)}
    clean |= {"AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_CONFIG_FILE": "/dev/null",
              **env}
    out = tmp_path / "got.npy"
    options = {"endpoint_override": proxy.endpoint, "scheme": "http", "region": "us-east-1"}
    script = ("import sys, numpy, shardload\n"
              f"a = shardload.load({data.url()!r}, storage_options={options!r})\n"
              f"numpy.save({str(out)!r}, numpy.asarray(a))\n")
    if save_to:
        script += f"shardload.save(a, {save_to!r}, num_shards=2, storage_options={options!r})\n"
    got = subprocess.run([sys.executable, "-c", script], env=clean, capture_output=True,
                         text=True, timeout=300)
    if fails:
        assert got.returncode != 0
        return got.stderr
    assert got.returncode == 0, got.stderr[-3000:]
    return np.load(out)


def _signed_by(proxy: FaultProxy, data: Data, n: int) -> None:
    """Every object request went on the signed path (GETs, no HEAD), signed with the n-th
    key pair of the role, as botocore signs with it."""
    reqs = _object_requests(proxy, data)
    assert reqs and {m for m, _, _ in reqs} == {"GET"}, reqs
    for method, target, sent in reqs:
        assert sent["Authorization"].startswith(f"AWS4-HMAC-SHA256 Credential=AKIDROLE{n}/"), \
            sent["Authorization"]
        assert sent["x-amz-security-token"] == f"roletoken{n}"
        want = _botocore_authorization(method, f"http://{proxy.endpoint}{target}", sent,
                                       f"AKIDROLE{n}", f"rolesecret{n}", f"roletoken{n}")
        assert sent["Authorization"] == want, (target, sent)


def test_an_instance_roles_credentials_take_the_signed_path(server, proxy, tmp_path):
    """No key pair anywhere: the instance metadata service's (IMDSv2) role credentials sign
    every GET, as an EC2 instance profile's would (before, such a user read through Arrow's
    client: a HEAD per object, and saves in parts)."""
    data = Data(server)
    with RoleSource() as imds:
        got = _load_in_a_new_process(data, proxy, tmp_path,
                                     {"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url},
                                     save_to=data.url("copy/"))
    np.testing.assert_array_equal(got, data.want)
    assert len(imds.ours) == 1, imds.log
    _signed_by(proxy, data, imds.ours[0])
    # The save: one PUT per object, signed with the same keys.
    puts = [(t, h) for m, t, h in proxy.headers if m == "PUT" and f"/{data.name}/copy/" in t]
    assert sorted(t.split("/")[-1] for t, _ in puts) == [
        "shard_0000.npy", "shard_0001.npy", "shardload.manifest"], puts
    key = f"Credential=AKIDROLE{imds.ours[0]}/"
    assert all(key in h["Authorization"] for _, h in puts), puts
    copy = b"".join(data.client.get_object(Bucket=data.name, Key=f"copy/shard_000{i}.npy")
                    ["Body"].read()[128:] for i in range(2))
    assert copy == data.want.tobytes()
    # shardload's requests (Arrow's client, which lists the prefix, asks the service too, as
    # the AWS SDK: those say so in their User-Agent): a session token, then the role's name
    # and credentials asked with it.
    lowered = [(m, p, _lowered(h)) for m, p, h in imds.log]
    ours = [r for r in lowered if not r[2].get("user-agent", "").startswith("aws-sdk")]
    base = "/latest/meta-data/iam/security-credentials/"
    assert [(m, p) for m, p, _ in ours] == [("PUT", "/latest/api/token"), ("GET", base),
                                            ("GET", base + RoleSource.ROLE)], ours
    assert all(h["x-aws-ec2-metadata-token"] == RoleSource.TOKEN for _, _, h in ours[1:])


def test_role_credentials_near_their_expiry_are_fetched_again(server, proxy, tmp_path):
    """Credentials that expire within five minutes are asked for again (at most every ten
    seconds), and the new ones sign the requests that follow."""
    data = Data(server)
    with RoleSource(expires_in=120) as imds:
        got = _load_in_a_new_process(data, proxy, tmp_path,
                                     {"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url})
    np.testing.assert_array_equal(got, data.want)
    # The first pair at the endpoint's making, the second at the first request (it expires
    # within five minutes), none after within ten seconds.
    assert len(imds.ours) >= 2, imds.log
    reqs = _object_requests(proxy, data)
    keys = {h["Authorization"].split("Credential=")[1].split("/")[0] for _, _, h in reqs}
    assert keys and keys <= {f"AKIDROLE{n}" for n in imds.ours[1:]}, (keys, imds.ours)
    # Arrow's client (the prefix's LIST) is given the keys shardload fetched: the AWS SDK asks
    # the service for no role's credentials of its own (it followed a container endpoint's
    # redirects, and took what another host gave).
    lists = [_lowered(h) for m, t, h in proxy.headers if m == "GET" and "list-type=2" in t]
    assert lists, proxy.headers
    for h in lists:
        key = h["authorization"].split("Credential=")[1].split("/")[0]
        assert key in {f"AKIDROLE{n}" for n in imds.ours}, (key, imds.ours)
    assert not any(p.endswith(RoleSource.ROLE) for _, p, h in imds.log
                   if _lowered(h).get("user-agent", "").startswith("aws-sdk")), imds.log


def test_a_containers_credentials_take_the_signed_path(server, proxy, tmp_path):
    data = Data(server)
    with RoleSource(container_token="Bearer pod-token") as source:
        got = _load_in_a_new_process(data, proxy, tmp_path, {
            "AWS_CONTAINER_CREDENTIALS_FULL_URI": source.url + "/creds",
            "AWS_CONTAINER_AUTHORIZATION_TOKEN": "Bearer pod-token"})
    np.testing.assert_array_equal(got, data.want)
    assert len(source.ours) == 1, source.log
    _signed_by(proxy, data, source.ours[0])
    assert {(m, p) for m, p, _ in source.log} == {("GET", "/creds")}


@pytest.mark.parametrize("variable", ["FULL_URI", "RELATIVE_URI"])
def test_a_containers_token_goes_to_no_host_the_sdks_refuse(server, proxy, tmp_path, variable):
    """AWS_CONTAINER_CREDENTIALS_FULL_URI=http://127.0.0.1@HOST/creds passed the check of a
    loopback host ("127." at the start) while libcurl connects to HOST, the part after the
    user part's '@': the container's token went in plain http to HOST, where
    http://HOST/creds itself is refused, as the SDKs refuse it. A relative URI that does not
    start with '/' ("@HOST/creds") made of ECS's address a user part the same way. Neither
    is asked now: the load ends without credentials, and HOST saw no request."""
    address = closing_server.this_hosts_address()
    if address is None:
        pytest.skip("this machine has no IPv4 address but loopback ones")
    data = Data(server)
    with RoleSource(container_token="Bearer pod-token", host="0.0.0.0") as source:
        where = f"{address}:{source.port}/creds"
        env = {"AWS_CONTAINER_AUTHORIZATION_TOKEN": "Bearer pod-token",
               "AWS_EC2_METADATA_DISABLED": "true"}
        if variable == "FULL_URI":
            env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = f"http://127.0.0.1@{where}"
        else:
            env["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"] = f"@{where}"
        _load_in_a_new_process(data, proxy, tmp_path, env, fails=True)
    assert source.log == [], source.log


def test_a_profiles_credential_process_is_run_here_and_signs(server, proxy, tmp_path):
    """A profile's credential_process comes before any role in the AWS SDK's chain: shardload
    runs it itself (once; the SDK's run of it was not checked, and a token holding CR LF went
    into every header block), asks no role source, and its keys sign the object's requests
    (the signed path) and Arrow's client's alike."""
    data = Data(server)
    process = tmp_path / "creds.sh"
    runs = tmp_path / "runs"
    process.write_text(f'#!/bin/sh\necho run >> {runs}\n'
                       'echo \'{"Version": 1, "AccessKeyId": "AKIDPROCESS", '
                       '"SecretAccessKey": "s"}\'\n')
    process.chmod(0o755)
    config = tmp_path / "config"
    config.write_text(f"[default]\ncredential_process = {process}\n")
    with RoleSource() as imds:
        got = _load_in_a_new_process(data, proxy, tmp_path, {
            "AWS_CONFIG_FILE": str(config), "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url})
    np.testing.assert_array_equal(got, data.want)
    # No role's credentials asked of the instance: shardload asks nothing, and the AWS SDK,
    # making Arrow's client, asks only what its region look-up asks (a token, the role's list,
    # the zone), given explicit keys.
    assert not any(p.endswith(RoleSource.ROLE) for _, p, _ in imds.log), imds.log
    assert all(_lowered(h).get("user-agent", "").startswith("aws-sdk") for _, _, h in imds.log)
    assert runs.read_text().splitlines() == ["run"]
    reqs = _object_requests(proxy, data)
    assert reqs and {m for m, _, _ in reqs} == {"GET"}, reqs
    signed = [_lowered(h).get("authorization", "") for _, _, h in reqs]
    assert all("Credential=AKIDPROCESS/" in a for a in signed), reqs


@pytest.mark.parametrize("how", ["disabled", "unreachable"])
def test_without_any_credentials_the_load_is_an_error_naming_the_object(server, proxy, tmp_path,
                                                                        how):
    """No key pair, and the metadata service switched off (AWS_EC2_METADATA_DISABLED=true:
    not asked) or not there (connections refused: asked once, then left): Arrow's client
    sends unsigned requests, which this server refuses; the error names the object, and
    nothing hangs."""
    import socket
    import time

    data = Data(server)
    with RoleSource() as imds:
        if how == "disabled":
            env = {"AWS_EC2_METADATA_DISABLED": "true",
                   "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url}
        else:
            with socket.socket() as s:  # a port nothing listens on
                s.bind(("127.0.0.1", 0))
                env = {"AWS_EC2_METADATA_SERVICE_ENDPOINT":
                       f"http://127.0.0.1:{s.getsockname()[1]}"}
        t = time.monotonic()
        err = _load_in_a_new_process(data, proxy, tmp_path, env, fails=True)
    assert time.monotonic() - t < 120
    assert data.url("d/shard_0000.npy").split("?")[0] in err and "ACCESS_DENIED" in err, err
    assert imds.log == []


# A region no host is in: AWS's names for it resolve nowhere, with or without a network, so
# that AWS is as unreachable from every machine as from one without a network.
_NOWHERE = "xx-nowhere-9"


def _aws_unreachable_env(**env: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ECS_"))}
    return clean | {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "sk-example",
                    "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
                    "AWS_SHARED_CREDENTIALS_FILE": os.devnull, **env}


@pytest.mark.parametrize("variable", ["AWS_REGION", "AWS_DEFAULT_REGION"])
@pytest.mark.parametrize("path", ["d/k.npy", "d/"])
def test_a_region_from_the_environment_is_given_to_arrows_client_too(variable: str,
                                                                     path: str) -> None:
    """On AWS itself (no endpoint) with the region in the environment, Arrow's client is given
    it, and makes no HeadBucket of its own (outside the retries and the deadline): AWS not
    answering is an I/O error naming the URL (an OSError), not a bad URL (ValueError)."""
    import subprocess
    import sys

    url = f"s3://mybucket/{path}?max_attempts=1&connect_timeout=1"
    script = ("import sys, shardload\n"
              "try:\n"
              "    shardload.discover(sys.argv[1])\n"
              "except Exception as e:\n"
              "    print(type(e).__name__, isinstance(e, shardload.Error),\n"
              "          isinstance(e, OSError), isinstance(e, ValueError))\n"
              "    print(e)\n")
    got = subprocess.run([sys.executable, "-c", script, url],
                         env=_aws_unreachable_env(**{variable: _NOWHERE}), capture_output=True,
                         text=True, timeout=120)
    lines = got.stdout.splitlines()
    assert got.returncode == 0 and len(lines) >= 2, (got.stdout, got.stderr[-3000:])
    name, is_error, is_os_error, is_value_error = lines[0].split()
    assert is_error == "True", got.stdout
    if path.endswith("/"):
        # Discovery's error (a ValueError too), naming the manifest's URL it could not read.
        assert name == "LayoutError" and "manifest: cannot open" in lines[1], got.stdout
    else:
        assert (name, is_os_error, is_value_error) == ("ShardReadError", "True", "False"), \
            got.stdout
    assert "s3://mybucket/d/" in lines[1] and "bad object-storage URL" not in got.stdout
    assert f"{_NOWHERE}.amazonaws.com" in got.stdout  # the region it was given, not another


def test_cli_exits_1_when_aws_does_not_answer_with_the_region_in_the_environment(cli) -> None:
    """`shardload inspect` of an s3:// URL that AWS does not answer: exit 1 (the source could
    not be read), not 2 (a usage error, "see --help")."""
    import subprocess

    url = "s3://mybucket/d/k.npy?max_attempts=1&connect_timeout=1"
    got = subprocess.run([str(cli), "inspect", url], capture_output=True, text=True,
                         timeout=120,
                         env=_aws_unreachable_env(AWS_REGION=_NOWHERE,
                                                  LEGATE_CONFIG="--bogus"))
    assert got.returncode == 1, (got.stdout, got.stderr[-3000:])
    assert "s3://mybucket/d/k.npy" in got.stderr and "bad object-storage URL" not in got.stderr
