"""s3:// reads signed by shardload itself (AWS Signature Version 4) and sent through libcurl,
where the credentials and region are known without the AWS SDK: the signature checked against
botocore's own signer (moto does not check signatures), the requests they cost counted through
a recording proxy, and the choice between this path and Arrow's."""

from __future__ import annotations

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

from s3_fault_proxy import FaultProxy  # noqa: E402


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


def _botocore_authorization(method: str, url: str, sent: dict[str, str], access_key: str,
                            secret_key: str, token: str | None, body: bytes = b"") -> str:
    """The Authorization header botocore's S3 signer gives the request as it was sent (the
    headers it signed, at its x-amz-date; over http it hashes ``body`` into the signature)."""
    auth = sent["Authorization"]
    signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
    lower = {k.lower(): v for k, v in sent.items()}
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


def test_without_a_region_arrows_path_reads_the_same(server, proxy, monkeypatch):
    """No region in the options or the environment: the AWS SDK's to find, so Arrow's client
    reads (a HEAD per object at discovery and after its reads), with the same data."""
    data = Data(server)
    for k in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(k, raising=False)
    options = {"endpoint_override": proxy.endpoint, "scheme": "http"}
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


def test_a_manifest_indexed_on_arrows_path_is_current_on_the_signed_path(server, monkeypatch):
    """Both paths take the same snapshot of an object (its size and the hash of its ETag as
    S3 sends it), so a manifest written by one is not stale for the other."""
    data = Data(server)
    signed = {"endpoint_override": server, "scheme": "http", "region": "us-east-1"}
    arrow = {"endpoint_override": server, "scheme": "http"}
    with monkeypatch.context() as m:
        for k in ("AWS_REGION", "AWS_DEFAULT_REGION"):
            m.delenv(k, raising=False)
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
