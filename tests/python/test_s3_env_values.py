"""Values an s3:// read takes from the environment, the shared credentials and config files
(credentials, region, endpoint) are checked as the same values given as options are: a
credential holding a control character would go into every signed request's headers (a
trailing newline ended the header block: a bare HTTP 403; CR LF added headers), a region or an
endpoint into the URI Arrow parses and the signed requests' URL ('&k=v' became another option of
Arrow's, '#' or '?' moved the bucket and key out of the path). Each case runs in a process of
its own, with the variables set as a user's shell would, against the tests' moto server."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import pathlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
pytest.importorskip("boto3")

import closing_server  # noqa: E402
import s3_server  # noqa: E402

CHILD = textwrap.dedent("""
    import json, sys
    import shardload.numpy as snp
    try:
        got = snp.load(sys.argv[1], storage_options=json.loads(sys.argv[2]))
        print(json.dumps({"loaded": got.tolist()}))
    except Exception as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))
""")

SECRET = "SECRETVALUE"


def _load(url: str, options: dict[str, str], env: dict[str, str]) -> dict:
    """What a fresh process's shardload.numpy.load(url) gives with only ``env``'s AWS_*
    variables set (the server's client environment below them)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    full.update(s3_server.CLIENT_ENV)
    full.update(env)
    p = subprocess.run([sys.executable, "-c", CHILD, url, json.dumps(options)], env=full,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture
def data(bucket: s3_server.Bucket) -> s3_server.Bucket:
    bucket.put_npy("d/x.npy", np.arange(6.0))
    return bucket


def test_plain_values_from_the_environment_load(data: s3_server.Bucket) -> None:
    got = _load(data.url("d/x.npy"), data.options, {"AWS_SESSION_TOKEN": "TOK"})
    assert got == {"loaded": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]}


@pytest.mark.parametrize("name, value, code", [
    ("AWS_SESSION_TOKEN", SECRET + "\n", "0x0A"),  # a Kubernetes secret made from a file
    ("AWS_SESSION_TOKEN", SECRET + "\r\nX-Injected: 1", "0x0D"),
    ("AWS_ACCESS_KEY_ID", SECRET + "\n", "0x0A"),
    ("AWS_SECRET_ACCESS_KEY", SECRET + "\tx", "0x09"),
])
def test_a_credential_with_a_control_character_is_refused_naming_the_variable(
        data: s3_server.Bucket, name: str, value: str, code: str) -> None:
    got = _load(data.url("d/x.npy"), data.options, {name: value})
    assert got.get("error") == "ValueError", got
    assert f"{name} holds a control character ({code};" in got["message"], got
    assert SECRET not in got["message"]


@pytest.mark.parametrize("value, code", [
    (SECRET + "\u0085END", "U+0085"),  # NEL: a C1 control, as UTF-8 0xC2 0x85
    (SECRET + "\u009bEND", "U+009B"),  # CSI
    (SECRET + "\u2028END", "U+2028"),  # a line separator
    (SECRET + "\u00e9END", "U+00E9"),  # a letter beyond ASCII
])
@pytest.mark.parametrize("how", ["AWS_SESSION_TOKEN", "AWS_SECRET_ACCESS_KEY", "session_token",
                                 "secret_key"])
def test_a_credential_with_a_non_ascii_character_is_refused_naming_where_it_came_from(
        data: s3_server.Bucket, how: str, value: str, code: str) -> None:
    """A credential holding a character beyond ASCII (a C1 control, a look-alike copied from a
    document) went into the signed request's headers as UTF-8: a bare HTTP 403. AWS's keys and
    tokens are ASCII: it is refused before any request, as a control character is, naming the
    variable or option and the character's code, never the value."""
    options, env = dict(data.options), {}
    if how.startswith("AWS_"):
        env[how] = value
    else:
        options.update({"access_key": "testing", "secret_key": "testing", how: value})
    got = _load(data.url("d/x.npy"), options, env)
    assert got.get("error") == "ValueError", got
    assert f"{how} holds a non-ASCII character ({code}; a credential is ASCII" in got["message"], \
        got
    assert SECRET not in got["message"] and value[len(SECRET):] not in got["message"], got


def test_a_credentials_file_value_with_a_control_character_is_refused(
        data: s3_server.Bucket, tmp_path: pathlib.Path) -> None:
    creds = tmp_path / "credentials"
    creds.write_bytes(b"[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
                      b"aws_session_token = " + SECRET.encode() + b"\x0bX-Injected: 1\n")
    env = {"AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_ACCESS_KEY_ID": "",
           "AWS_SECRET_ACCESS_KEY": ""}
    got = _load(data.url("d/x.npy"), data.options, env)
    assert got.get("error") == "ValueError", got
    assert "the shared credentials file (AWS_SHARED_CREDENTIALS_FILE" in got["message"]
    assert "holds a control character (0x0B;" in got["message"]
    assert SECRET not in got["message"]
    # The same file written with CRLF (Windows) is read: a line's end is no part of a value.
    creds.write_bytes(b"[default]\r\naws_access_key_id = testing\r\n"
                      b"aws_secret_access_key = testing\r\n")
    assert _load(data.url("d/x.npy"), data.options, env) == {
        "loaded": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]}


@pytest.mark.parametrize("name", ["AWS_REGION", "AWS_DEFAULT_REGION"])
@pytest.mark.parametrize("value", ["us-east-1&secret_key=" + SECRET, "us-east-1#x", "us east 1",
                                   "us-east-1\r\nx"])
def test_a_region_from_the_environment_is_a_regions_name(data: s3_server.Bucket, name: str,
                                                        value: str) -> None:
    options = {k: v for k, v in data.options.items() if k != "region"}
    env = {"AWS_REGION": "", "AWS_DEFAULT_REGION": "", name: value}
    got = _load(data.url("d/x.npy"), options, env)
    assert got.get("error") == "ValueError", got
    assert f"{name} (environment) must be a region's name" in got["message"], got
    assert SECRET not in got["message"]
    # The region option, given, is the one taken: the environment's is not read.
    got = _load(data.url("d/x.npy"), data.options, env)
    assert got == {"loaded": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]}, got


def test_the_config_files_region_is_a_regions_name(data: s3_server.Bucket,
                                                  tmp_path: pathlib.Path) -> None:
    config = tmp_path / "config"
    config.write_text("[default]\nregion = us-east-1&secret_key=CFGX\n")
    options = {k: v for k, v in data.options.items() if k != "region"}
    got = _load(data.url("d/x.npy"), options,
                {"AWS_CONFIG_FILE": str(config), "AWS_DEFAULT_REGION": ""})
    assert got.get("error") == "ValueError", got
    assert "the region of the shared config file's profile" in got["message"], got


@pytest.mark.parametrize("how", ["option", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"])
@pytest.mark.parametrize("tail, found", [("#x", "'#'"), ("?x=1", "'?'"), (" ", "' '"),
                                         ("\r\nX-Injected: 1", "a control character (0x0D)")])
def test_an_endpoint_is_host_and_port(data: s3_server.Bucket, server: str, how: str, tail: str,
                                      found: str) -> None:
    options = {k: v for k, v in data.options.items() if k != "endpoint_override"}
    env: dict[str, str] = {}
    if how == "option":
        options["endpoint_override"] = server + tail
        where = "endpoint_override"
    else:
        env[how] = f"http://{server}{tail}"
        where = f"{how} (environment)"
    got = _load(data.url("d/x.npy"), options, env)
    assert got.get("error") == "ValueError", got
    if how == "option" and "\r" in tail:  # refused as any option's value is, before
        assert "endpoint_override holds a control character (0x0D;" in got["message"], got
        return
    if how == "option" and tail == " ":
        found = "'+'"  # the blank as the URL's query carries it
    assert f"{where} must be an endpoint, [http:// or https://]HOST[:PORT][/PATH], found " \
        f"{found}" in got["message"], got
    # The endpoint itself, as host:port or as the environment's URL, is read.
    env = {how: f"http://{server}"} if how != "option" else {}
    options = {**data.options} if how == "option" else options
    assert _load(data.url("d/x.npy"), options, env) == {
        "loaded": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]}


class PrefixProxy(contextlib.ExitStack):
    """A server in front of moto that answers only paths under /pfx/ (an S3 store behind a
    path prefix), forwarding them without it; each request's method, path and User-Agent is
    logged."""

    def __init__(self, server: str) -> None:
        super().__init__()
        self.log: list[tuple[str, str, str]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                proxy.log.append((self.command, self.path, self.headers.get("User-Agent", "")))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if not self.path.startswith("/pfx/"):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                conn = http.client.HTTPConnection(server, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                conn.request(self.command, self.path[len("/pfx"):], body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_HEAD = do_PUT = do_DELETE = do_POST = _forward  # noqa: N815

        self.httpd = self.enter_context(closing_server.serving(Handler))
        self.endpoint = closing_server.address(self.httpd)


@pytest.fixture
def prefixed(server: str) -> Iterator[PrefixProxy]:
    with PrefixProxy(server) as proxy:
        yield proxy


@pytest.mark.parametrize("how", ["option", "AWS_ENDPOINT_URL"])
def test_an_endpoints_path_prefixes_every_request(data: s3_server.Bucket, prefixed: PrefixProxy,
                                                  how: str) -> None:
    """An endpoint with a path (a store behind a path prefix) took Arrow's client alone, the
    signed path stepping aside (a HEAD per object, its redirects followed, and an https one
    refused as though no key pair were found): both clients now put the path before
    /BUCKET/KEY, objects by the signed path's requests."""
    data.put_npy("dir/shard_0000.npy", np.arange(3.0))
    options = {k: v for k, v in data.options.items() if k != "endpoint_override"}
    env: dict[str, str] = {}
    if how == "option":
        options["endpoint_override"] = prefixed.endpoint + "/pfx/"
    else:
        env[how] = f"http://{prefixed.endpoint}/pfx"
    assert _load(data.url("d/x.npy"), options, env) == {
        "loaded": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]}
    # The object's requests are shardload's own (the AWS SDK's say so in their User-Agent).
    objects = [ua for _, p, ua in prefixed.log if "/d/x.npy" in p]
    assert objects and not any(ua.startswith("aws-sdk") for ua in objects), prefixed.log
    assert _load(data.url("dir/"), options, env) == {"loaded": [0.0, 1.0, 2.0]}
    assert all(p.startswith(f"/pfx/{data.name}") for _, p, _ in prefixed.log), prefixed.log


@pytest.mark.parametrize("path, segment", [("/pfx/../x", ".."), ("/a//b", ""), ("/a%2Fb", "a%2Fb"),
                                           ("/./a", ".")])
def test_an_endpoints_path_is_plain_segments(data: s3_server.Bucket, server: str, path: str,
                                             segment: str) -> None:
    options = {**data.options, "endpoint_override": server + path}
    got = _load(data.url("d/x.npy"), options, {})
    assert got.get("error") == "ValueError", got
    assert f"endpoint_override must be an endpoint, [http:// or https://]HOST[:PORT][/PATH], " \
        f"found the path segment '{segment}'" in got["message"], got


@pytest.mark.parametrize("scheme", ["HTTP", "Http", "hTtP"])
@pytest.mark.parametrize("how", ["option", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"])
def test_an_endpoints_scheme_in_capitals_is_http(data: s3_server.Bucket, server: str, how: str,
                                                 scheme: str) -> None:
    """A scheme is case-insensitive (RFC 3986 3.1; boto3 and the AWS CLI take HTTP://H:P): an
    endpoint written HTTP://H:P passed the endpoint check and was then taken as a host named
    HTTP ("Could not resolve host: HTTP"). It is http://H:P, for an object (the signed path's
    requests) and for a prefix (Arrow's client lists it)."""
    data.put_npy("dir/shard_0000.npy", np.arange(3.0))
    options = {k: v for k, v in data.options.items() if k != "endpoint_override"}
    env: dict[str, str] = {}
    if how == "option":
        options["endpoint_override"] = f"{scheme}://{server}"
    else:
        env[how] = f"{scheme}://{server}"
    assert _load(data.url("d/x.npy"), options, env) == {
        "loaded": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]}
    assert _load(data.url("dir/"), options, env) == {"loaded": [0.0, 1.0, 2.0]}
