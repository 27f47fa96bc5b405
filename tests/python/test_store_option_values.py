"""Store option values are text without control characters: a CR or LF (percent-encoded in a
URL's query, raw in storage_options= or --storage-option) would add header lines to the
requests the value goes into (the key in the Authorization header, the region in its scope, a
session token as a header of its own). Each is refused by the one parse, naming the option and
never its value, before any request."""
import subprocess

import pytest

import shardload
from closing_server import recording

SECRET = "SECRETsk1234567"


@pytest.fixture
def endpoint():
    """A server on 127.0.0.1 that records every request it receives (and answers 404)."""
    with recording() as (ep, seen):
        yield ep, seen


def options(ep, **over):
    o = {"endpoint_override": ep, "scheme": "http", "region": "us-east-1", "access_key": "AK",
         "secret_key": SECRET}
    o.update(over)
    return o


@pytest.mark.parametrize("key", ["access_key", "region", "session_token", "secret_key"])
@pytest.mark.parametrize("bad", ["%0D%0AX-Injected:%20yes", "%0AX-Injected:%20yes", "%00zz",
                                 "%09x", "%7F"])
def test_a_control_character_in_a_query_value_is_refused_naming_the_option(endpoint, key, bad):
    ep, seen = endpoint
    query = "&".join(f"{k}={v}" for k, v in options(ep).items() if k != key)
    url = f"s3://bkt/x.npy?{query}&{key}=T{bad}"
    with pytest.raises(ValueError) as e:
        shardload.discover(url)
    message = str(e.value)
    assert f"{key} holds a control character" in message, message
    # The URL is shown as given (a secret hidden); the words after it never repeat the value.
    words = message.split("bad object-storage URL or options:", 1)[1]
    assert "Injected" not in words and "zz" not in words, message
    assert SECRET not in message, message
    assert seen == []  # refused before any request


@pytest.mark.parametrize("key", ["access_key", "region", "session_token"])
def test_a_raw_crlf_in_storage_options_is_refused_before_any_request(endpoint, key):
    ep, seen = endpoint
    with pytest.raises(ValueError, match=f"{key} holds a control character \\(0x0D"):
        shardload.discover("s3://bkt/x.npy",
                           storage_options=options(ep, **{key: "T\r\nX-Injected: yes"}))
    assert seen == []


def test_the_command_line_refuses_a_crlf_in_a_storage_option(endpoint, cli):
    ep, seen = endpoint
    args = [f"{k}={v}" for k, v in options(ep).items()] + ["session_token=T%0D%0AX-Injected:%20yes"]
    cmd = [str(cli), "inspect", "s3://bkt/x.npy"]
    for a in args:
        cmd += ["--storage-option", a]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "session_token holds a control character" in p.stderr, p.stderr
    assert SECRET not in p.stderr + p.stdout
    assert seen == []


def test_printable_values_still_reach_the_server(endpoint):
    """The oracle that the server records what a request sends: a clean value gets there."""
    ep, seen = endpoint
    with pytest.raises(Exception):
        shardload.discover("s3://bkt/x.npy", storage_options=options(ep, session_token="T-ok"))
    assert any("T-ok" in line for req in seen for line in req)


@pytest.mark.parametrize("region", ["x@{ep}/%23", "x@{ep}/", "x@{ep}%23", "{ep}%2F", "a.b", "a%20b"])
def test_a_region_that_is_no_regions_name_is_refused_before_any_request(endpoint, monkeypatch,
                                                                         region):
    # Without endpoint_override the region goes into the host name of AWS's endpoint
    # (BUCKET.s3.REGION.amazonaws.com): 'x@HOST:PORT/#' there names HOST:PORT, which would get
    # the request signed with the secret and the session token.
    ep, seen = endpoint
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(var, raising=False)
    url = (f"s3://bkt/x.npy?scheme=http&region={region.format(ep=ep)}&access_key=AK"
           f"&secret_key={SECRET}&session_token=TOKEN987")
    with pytest.raises(ValueError, match="region must be a region's name") as e:
        shardload.discover(url)
    assert SECRET not in str(e.value) and "TOKEN987" not in str(e.value)
    assert seen == []


@pytest.mark.parametrize("region", ["us-east-1", "eu-central-2", "my_minio_Region", ""])
def test_a_regions_name_is_taken(endpoint, region):
    # Not refused by the parse: what answers is the server (endpoint_override) or the client.
    ep, seen = endpoint
    with pytest.raises(Exception) as e:
        shardload.discover("s3://bkt/x.npy", storage_options=options(ep, region=region))
    assert "region must be a region's name" not in str(e.value)
