"""Credentials in URLs are never shown. Every form a URL can carry one in (the password of its
user part, a presigned URL's signature or token, a bearer token, shardload's own secret_key and
session_token) goes through every output that shows a URL: ``repr``/``str``/``describe`` of a
Layout, ``manifest_status`` and the log, ``shardload inspect`` (text and ``--json``),
``shardload read``'s source line and shard list, ``shardload index``'s and ``shardload write``'s
"wrote" lines, the manifests that ``index`` and ``save`` write, ``verify``'s mismatches (Python
and the command line), errors for a missing object, a bad header and a save over a dataset
(Python and the command line), and ``load``'s progress reports. Not one character of a secret may appear; the rest of the URL must.

Every secret below holds the marker ``s3cr3t``, so one search finds any part of any of them."""

from __future__ import annotations

import contextlib
import email.quoprimime
import io
import json
import logging
import pickle
import re
import subprocess
import urllib.parse
from typing import Iterator

import numpy as np
import pytest

boto3 = pytest.importorskip("boto3")

import shardload  # noqa: E402

import closing_server  # noqa: E402
from test_http import serving  # noqa: E402

MARK = "s3cr3t"
# (name, query): each a URL's query carrying one known secret form beside what is not secret
# (which must still show).
QUERY_FORMS = [
    ("sigv4", "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAVISIBLE%2F20240101%2F"
              "us-east-1%2Fs3%2Faws4_request&X-Amz-Date=20240101T000000Z&X-Amz-Expires=3600&"
              "X-Amz-SignedHeaders=host&X-Amz-Security-Token=FwoG-s3cr3t-sts%2B%2F%3D&"
              "X-Amz-Signature=5e3c-s3cr3t-9f1a"),
    ("sigv2", "AWSAccessKeyId=AKIAVISIBLE&Expires=2000000000&Signature=v2-s3cr3t%2Bab%3D"),
    ("cloudfront", "Policy=eyJTdGF0ZW1lbnQiOltdfQ__&Signature=cf-s3cr3t~Qx_&"
                   "Key-Pair-Id=KVISIBLE"),
    ("token", "token=tk-s3cr3t-1&expires=2000000000"),
    ("access_token", "access_token=ya29.s3cr3t-Af/B+c=&alt=media"),
    ("azure_sas", "sv=2022-11-02&sp=r&se=2030-01-01&sig=sas-s3cr3t%2B%3D"),
    ("upper_case", "TOKEN=up-s3cr3t&Access_Token=at-s3cr3t&SIG=sg-s3cr3t"),
    ("encoded_key", "%74oken=enc-s3cr3t&x%2Damz%2Dsignature=enc2-s3cr3t"),
    ("semicolon", "ref=main;token=sc-s3cr3t"),
    ("gitlab", "private_token=gl-s3cr3t&ref=main"),
    # nginx's secure_link download link; Cloudflare's token authentication
    ("nginx_secure_link", "md5=nx-s3cr3t_Ab9&expires=2147483647"),
    ("cloudflare", "verify=1484063137-cf-s3cr3t"),
    # no list names these: a key holding a secret's word is one (status.cc)
    ("by_word", "sas_token=a-s3cr3t&jsessionid=b-s3cr3t&X-Amz-Security-Token2=c-s3cr3t&"
                "clientSecretV2=d-s3cr3t&dbPassword=e-s3cr3t&my_api_key=f-s3cr3t&"
                "token_type=bearer&AWSAccessKeyId=AKIAVISIBLE"),
    # a presigned URL passed to a fetching proxy: its query percent-encoded into a value, once
    # or twice; and a '&' written as JSON's "\u0026" (as Go's json.Marshal writes a URL)
    ("proxied_presigned", "url=https%3A%2F%2Fb.s3.amazonaws.com%2Fk.npy%3FX-Amz-Credential%3D"
                          "AKIAVISIBLE%26X-Amz-Signature%3Dnest-s3cr3t%26X-Amz-Date%3D1&alt=media"),
    ("proxied_twice", "next=%252Fx.npy%253Fa%253D1%2526token%253Dnest2-s3cr3t&alt=media"),
    ("json_amp", "a=1\\u0026token=js-s3cr3t"),
    # a presigned URL given to a proxy as RFC 3986 lets a query value hold it ('=' and '&'
    # escaped, '?' and '/' left: Spring's UriComponentsBuilder writes it so)
    ("proxied_plain_marks", "url=https://b/k.npy?token%3Dsp-s3cr3t%26a%3D1"),
    # CDNs' and hosts' own keys: Akamai's hdnea, Tencent's sign, Dropbox's rlkey, Upyun's _upt
    ("cdn_keys", "hdnea=exp=1~acl=%2Fd%2F%2A~hmac=ak-s3cr3t&sign=1700000000-r-0-tc-s3cr3t&"
                 "rlkey=db-s3cr3t&dl=1&_upt=up-s3cr3t"),
    # a SharePoint/OneDrive download link (Microsoft Graph's downloadUrl: a bearer JWT as
    # tempauth=), an Azure Functions function key, a CAS service ticket, a one-time password,
    # a WordPress nonce, passwords named in other languages
    ("tempauth", "UniqueId=1b2c&Translate=false&tempauth=eyJ0eXAi.tempauth-s3cr3t.sig&"
                 "ApiVersion=2.0"),
    ("azure_function_code", "code=fnkey-s3cr3t%3D%3D&name=x"),
    ("cas_ticket", "ticket=ST-1-s3cr3t-cas&service=x"),
    ("one_time", "otp=otp-s3cr3t&_wpnonce=wp-s3cr3t&mot_de_passe=fr-s3cr3t&"
                 "contrasena=es-s3cr3t&contrase%C3%B1a=es2-s3cr3t&lang=fr"),
]
# What of each form must still show (besides the host and the object's name).
VISIBLE = {"sigv4": ["X-Amz-Credential=AKIAVISIBLE", "X-Amz-Signature=***"],
           "sigv2": ["AWSAccessKeyId=AKIAVISIBLE", "Signature=***"],
           "cloudfront": ["Key-Pair-Id=KVISIBLE", "Signature=***"],
           "token": ["token=***", "expires=2000000000"],
           "access_token": ["access_token=***", "alt=media"],
           "azure_sas": ["sv=2022-11-02", "sig=***"],
           "upper_case": ["TOKEN=***", "SIG=***"],
           "encoded_key": ["%74oken=***"],
           "semicolon": ["ref=main;token=***"],
           "gitlab": ["private_token=***&ref=main"],
           "nginx_secure_link": ["md5=***&expires=2147483647"],
           "cloudflare": ["verify=***"],
           "proxied_plain_marks": ["url=https://b/k.npy?token%3D***"],
           "cdn_keys": ["hdnea=***&sign=***&rlkey=***&dl=1&_upt=***"],
           "by_word": ["sas_token=***&jsessionid=***&X-Amz-Security-Token2=***",
                       "dbPassword=***&my_api_key=***&token_type=bearer",
                       "AWSAccessKeyId=AKIAVISIBLE"],
           "proxied_presigned": ["url=https%3A%2F%2Fb.s3.amazonaws.com%2Fk.npy%3FX-Amz-Credential"
                                 "%3DAKIAVISIBLE%26X-Amz-Signature%3D***&alt=media"],
           "proxied_twice": ["next=%252Fx.npy%253Fa%253D1%2526token%253D***&alt=media"],
           "json_amp": ["a=1\\u0026token=***"],
           "tempauth": ["UniqueId=1b2c&Translate=false&tempauth=***&ApiVersion=2.0"],
           "azure_function_code": ["code=***&name=x"],
           "cas_ticket": ["ticket=***&service=x"],
           "one_time": ["otp=***&_wpnonce=***&mot_de_passe=***&contrasena=***&"
                        "contrase%C3%B1a=***&lang=fr"],
           "userinfo": ["alice:***@"]}
# shardload's own store options for s3:// (a SigV4 key pair and an STS token).
S3_SECRETS = {"access_key": "AKIAVISIBLE", "secret_key": "wJal-s3cr3t/K7+MDENG",
              "session_token": "FQoG-s3cr3t+tok/=="}


def npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def run(cli, *args: str, ok: bool = True) -> str:
    """The command's stdout and stderr together (a secret may be in either)."""
    r = subprocess.run([str(cli), *args], capture_output=True, text=True, timeout=300)
    if ok:
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode != 0, r.stdout
    return r.stdout + r.stderr


# In `visible`: the secret storage options shown hidden, as a path made from the source holds
# them (their handle, "credentials=***") or as the URL typed holds them.
SEALED = object()


def sealed_form(shown: str) -> str:
    """``shown`` (a piece of an http(s) URL as the redaction shows it typed) as a path made
    from that URL shows it: the user part gone from before the host, and the query's secret
    items, from the first to the last, one ``credentials=***`` (seal_credentials); BunnyCDN's
    token gone from the path (its place kept by the handle too)."""
    shown = re.sub(r"[^/@]*\*\*\*@|^@", "", shown, count=1)
    shown = re.sub(r"(?i)(?<=/)bcdn_token=\*\*\*(&|(?=[?#]|$))", "", shown, count=1)
    items = shown.split("&")
    secret = [i for i, item in enumerate(items) if "***" in item]  # "%3D***" too
    if secret:
        items[secret[0]:secret[-1] + 1] = ["credentials=***"]
    return "&".join(items)


def assert_hidden(text: str, *visible: object) -> None:
    """No part of any secret is in ``text``, and each of ``visible`` is: as typed, or as a
    path made from the URL shows it (its secrets by handle, "credentials=***")."""
    assert MARK not in text, text
    for v in visible:
        if v is SEALED:
            assert ("credentials=***" in text
                    or ("secret_key=***" in text and "session_token=***" in text)), text
        elif v not in text:
            assert "credentials=***" in text and sealed_form(v) in text, (v, text)


def with_query(url: str, query: str) -> str:
    return url + ("&" if "?" in url else "?") + query


@pytest.fixture
def web():
    with serving() as s:
        yield s


@pytest.fixture
def http_dataset(web, tmp_path):
    """Two npy shards served under /d/ with the manifest of a local copy (whose snapshots no
    HTTP answer matches: every discovery finds it stale and says so, naming a shard's URL),
    a header that is not npy at /bad/x.npy, and nothing at /gone/x.npy."""
    store, base = web
    parts = [np.arange(12, dtype=np.float32).reshape(4, 3), np.ones((2, 3), np.float32)]
    for i, p in enumerate(parts):
        np.save(tmp_path / f"shard_{i:04d}.npy", p)
    shardload.index(tmp_path)
    for f in sorted(tmp_path.iterdir()):
        store.put(f"/d/{f.name}", f.read_bytes())
    store.put("/bad/x.npy", b"\x93NUMPY this is no header" + bytes(100))
    return store, base, np.concatenate(parts)


def http_forms(base: str) -> list[tuple[str, str]]:
    """(name, the URL of the directory /d/ carrying that secret form)."""
    forms = [(name, with_query(f"{base}/d/", q)) for name, q in QUERY_FORMS]
    forms.append(("userinfo", base.replace("://", "://alice:pw-s3cr3t%40x@") + "/d/"))
    return forms


def swap_object(url: str, key: str) -> str:
    """The same URL (user part and query kept) naming ``key`` instead of the directory."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path=key))


def test_every_secret_form_of_an_http_url_is_hidden_from_every_output(http_dataset, cli, caplog):
    store, base, want = http_dataset
    host = base.split("://", 1)[1]
    for name, url in http_forms(base):
        visible = VISIBLE[name]
        # The layout, shown: no secret.
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="shardload"):
            layout = shardload.discover(url)
        assert layout.manifest_state is shardload.ManifestState.STALE, layout.manifest_status
        # Its paths name the secrets by handle; the requests made from them carry them.
        assert all(MARK not in p and "credentials=" in p for p in layout.paths), layout.paths
        np.testing.assert_array_equal(layout.read(), want)  # the credentials were used
        assert_hidden(repr(layout))
        for shown in (str(layout), layout.describe(), layout.manifest_status):
            assert_hidden(shown, host, *visible)
        assert "shard_0001.npy" in str(layout)
        assert_hidden(shardload.redact_secrets(layout.paths[0]), host, "shard_0000.npy", *visible)

        out = run(cli, "inspect", url)
        assert_hidden(out, f"{host}/d/shard_0001.npy", *visible)
        assert "manifest: stale because" in out
        doc = json.loads(run(cli, "inspect", "--json", url))
        assert_hidden(json.dumps(doc), host, *visible)
        assert doc["shards"][0]["path"].split("?")[0].endswith(f"{host}/d/shard_0000.npy")

        # A missing object and a header that is not npy: the error and its filename.
        for key, what in (("/gone/x.npy", "HTTP 404"), ("/bad/x.npy", "header")):
            bad = swap_object(url, key)
            with pytest.raises(shardload.Error) as e:
                shardload.discover([bad])
            assert_hidden(str(e.value), f"{host}{key}", what, *visible)
            assert_hidden(str(getattr(e.value, "filename", None) or ""))
            assert_hidden(run(cli, "inspect", bad, ok=False), f"{host}{key}", what, *visible)
        assert_hidden(caplog.text)
        assert not any(MARK in str(r.args) for r in caplog.records)

        # A source given without its command, and given twice.
        assert_hidden(run(cli, url, ok=False), "unknown command")
        assert_hidden(run(cli, "read", url, url, ok=False), "is the second")


def test_shardload_read_hides_every_secret_form(http_dataset, cli):
    """One read per form (each starts Legate): its source line, manifest line and shard list."""
    _store, base, want = http_dataset
    host = base.split("://", 1)[1]
    for name, url in http_forms(base):
        out = run(cli, "read", url, "--no-verify")
        assert f"({want.shape[0]}, 3)" in out, out
        source = next(line for line in out.splitlines() if line.startswith("source:"))
        assert_hidden(source, f"{host}/d/", *VISIBLE[name])
        assert_hidden(out, f"{host}/d/shard_0000.npy", "manifest: stale because")


def test_load_progress_and_log_carry_no_secret(http_dataset, caplog):
    _store, base, want = http_dataset
    reports = []
    for _name, url in http_forms(base)[:2]:
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="shardload"):
            got = shardload.load(url, progress=reports.append)
        np.testing.assert_array_equal(np.asarray(got), want)
        assert_hidden(caplog.text, "manifest: stale because")
    assert reports and all(MARK not in repr(r) for r in reports)


def test_s3_secret_options_are_hidden_from_every_output(bucket, cli, caplog):
    """secret_key and session_token given as storage options (and so in every URL's query), on
    the signed path: the layout, inspect, index's line and the manifest it writes, read,
    errors."""
    options = {**bucket.options, **S3_SECRETS}
    parts = [np.arange(8, dtype=np.int32).reshape(4, 2), np.zeros((3, 2), np.int32)]
    for i, p in enumerate(parts):
        bucket.put_npy(f"d/shard_{i:04d}.npy", p)
    bucket.put("bad/x.npy", b"not an npy file at all" + bytes(64))
    url = bucket.url("d/")
    flags = [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]
    # The secrets are taken out of the paths made from the source: they show as their handle,
    # itself hidden (a URL quoted as the user typed it shows secret_key=*** instead).
    visible = [f"{bucket.name}/d/", "access_key=AKIAVISIBLE", SEALED]

    with caplog.at_level(logging.DEBUG, logger="shardload"):
        written = shardload.index(url, storage_options=options)
        layout = shardload.discover(url, storage_options=options)
    assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status
    # The secrets are taken out of the paths (credentials=HANDLE holds their place).
    assert not any(MARK in p for p in layout.paths)
    np.testing.assert_array_equal(layout.read(), np.concatenate(parts))
    assert_hidden(repr(layout) + layout.manifest_status + caplog.text)
    assert_hidden(str(layout), *visible)
    assert_hidden(shardload.redact_secrets(written), "shardload.manifest", *visible)
    manifest = bucket.client.get_object(Bucket=bucket.name, Key="d/shardload.manifest")
    assert MARK.encode() not in manifest["Body"].read()

    out = run(cli, "index", url, *flags)
    assert_hidden(out, "wrote s3://", "shardload.manifest", *visible)
    manifest = bucket.client.get_object(Bucket=bucket.name, Key="d/shardload.manifest")
    assert MARK.encode() not in manifest["Body"].read()
    assert_hidden(run(cli, "inspect", url, *flags), "d/shard_0001.npy", *visible)
    assert_hidden(run(cli, "inspect", "--json", url, *flags), "d/shard_0001.npy", *visible)
    out = run(cli, "read", url, "--no-verify", *flags)
    assert "(7, 2)" in out
    assert_hidden(out, "d/shard_0001.npy", *visible)

    # (A lone missing key is no object and no prefix to the command line, a 404 in a list.)
    for key, what, cli_what in (("gone/x.npy", "404", "no such object or prefix"),
                                ("bad/x.npy", "header", "header")):
        with pytest.raises(shardload.Error) as e:
            shardload.discover([bucket.url(key)], storage_options=options)
        assert_hidden(str(e.value), f"{bucket.name}/{key}", what, SEALED)
        assert_hidden(str(getattr(e.value, "filename", None) or ""))
        assert_hidden(run(cli, "inspect", bucket.url(key), *flags, ok=False),
                      f"{bucket.name}/{key}", cli_what, SEALED)
    # Options for a source they do not apply to: the refusal quotes the source.
    with pytest.raises(ValueError) as e:
        shardload.discover("http://alice:pw-s3cr3t@h/a.npy", storage_options=options)
    assert_hidden(str(e.value), "alice:***@h/a.npy")
    assert_hidden(run(cli, "inspect", "http://alice:pw-s3cr3t@h/a.npy", *flags, ok=False),
                  "alice:***@h/a.npy")


def test_s3_secrets_are_hidden_from_verify_save_and_write(bucket, cli):
    """The Legate paths: verify's mismatches (Python and the command line), a save's manifest
    and its refusal to overwrite, and `shardload write`'s line."""
    options = {**bucket.options, **S3_SECRETS}
    flags = [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]
    visible = [f"{bucket.name}/", SEALED]
    a = np.arange(40, dtype=np.float32).reshape(10, 4)
    url = bucket.url("s/")
    shardload.save(a, url, num_shards=2, checksum="xxh3", storage_options=options)
    manifest = bucket.client.get_object(Bucket=bucket.name, Key="s/shardload.manifest")
    assert MARK.encode() not in manifest["Body"].read()
    with pytest.raises(shardload.Error) as e:
        shardload.save(a, url, num_shards=2, storage_options=options)
    assert_hidden(str(e.value), *visible)
    # A shard changed in place (same size): its checksum no longer matches.
    body = bucket.client.get_object(Bucket=bucket.name, Key="s/shard_0001.npy")["Body"].read()
    bucket.put("s/shard_0001.npy", body[:-4] + b"\xff\xff\xff\xff")
    bad = shardload.verify(url, storage_options=options)
    assert [m.shard for m in bad] == [1] and MARK not in bad[0].path
    assert_hidden(repr(bad), "shard_0001.npy", *visible)
    assert_hidden(run(cli, "verify", url, *flags, ok=False), "shard_0001.npy", "differ from",
                  *visible)
    query = urllib.parse.urlencode(options)
    out = run(cli, "write", "--shard-dir", f"{bucket.url('w/')}?{query}", "--num-shards", "2",
              "--shape", "6")
    assert_hidden(out, "wrote 2 shards to", *visible)
    assert_hidden(run(cli, "read", f"{bucket.url('w/')}?{query}"), "verify:         OK",
                  *visible)


def test_refused_arguments_do_not_echo_a_secret(cli):
    """An argument refused before any request: its secret stays out of the message, also one
    that no URL query would end (a '&' inside the value) and one of the wrong type."""
    out = run(cli, "inspect", "s3://b/d/", "--storage-option", "secret_key=ab&c-s3cr3t", ok=False)
    assert_hidden(out, "--storage-option: expected KEY=VALUE", "'secret_key=***'")
    out = run(cli, "inspect", "s3://b/d/", "--storage-option", "region=a&b", ok=False)
    assert "'region=***'" in out  # the key part alone, whatever the key
    with pytest.raises(TypeError) as e:
        shardload.discover("s3://b/d/", storage_options={"secret_key": ["k-s3cr3t"]})
    assert_hidden(str(e.value), "storage_options['secret_key']", "found list")
    with pytest.raises(TypeError) as e:
        shardload.discover({"train": "https://h/d/?token=t-s3cr3t&x=1"})
    assert_hidden(str(e.value), "found dict", "token=***")


def test_checksum_mismatch_shows_its_path_redacted():
    m = shardload.ChecksumMismatch(0, "s3://b/d/a.npy?secret_key=k-s3cr3t&region=r", "gone")
    assert_hidden(repr(m), "s3://b/d/a.npy?secret_key=***&region=r")
    assert MARK in m.path  # the path to open stays whole


@pytest.mark.parametrize("options", [
    {"aws_secret_access_key": "k-s3cr3t"},                        # boto3's spelling
    {"secret_access_key": "k-s3cr3t", "aws_session_token": "t-s3cr3t"},
    {"key": "AKIAVISIBLE", "secret": "k-s3cr3t"},                 # s3fs's spelling
])
def test_a_credential_option_of_another_library_is_refused_without_its_value(options):
    """Options spelled as boto3 or s3fs spell them are not shardload's, and are refused: the
    refusal shows the URL with its options, and the value of each such secret must not show
    (it did: `Unexpected query parameter in S3 URI: 'aws_secret_access_key'` after the URL
    with the key in clear)."""
    with pytest.raises(ValueError) as e:
        shardload.discover("s3://b/d/x.npy", storage_options=options)
    assert_hidden(str(e.value), "s3://b/d/x.npy?")
    for key in options:
        assert f"{key}=" in str(e.value), str(e.value)


@pytest.mark.parametrize("query,visible", [
    # Key names no list held (shown in clear before): each holds a word that names a secret.
    ("sas_token=a-s3cr3t&sv=2022", "sas_token=***&sv=2022"),
    ("jsessionid=a-s3cr3t&PHPSESSID=b-s3cr3t&sessionId=c-s3cr3t&session_key=d-s3cr3t",
     "jsessionid=***&PHPSESSID=***&sessionId=***&session_key=***"),
    ("X-Amz-Security-Token2=a-s3cr3t&x_amz_security_token=b-s3cr3t&SecurityToken=c-s3cr3t",
     "X-Amz-Security-Token2=***&x_amz_security_token=***&SecurityToken=***"),
    ("client_secret_v2=a-s3cr3t&clientSecret=b-s3cr3t&app-secret=c-s3cr3t",
     "client_secret_v2=***&clientSecret=***&app-secret=***"),
    ("dbPassword=a-s3cr3t&user_passwd=b-s3cr3t&PWD=c-s3cr3t", "dbPassword=***&user_passwd=***&PWD=***"),
    ("my_api_key=a-s3cr3t&APIKEY=b-s3cr3t&private_key=c-s3cr3t&sas_key=d-s3cr3t",
     "my_api_key=***&APIKEY=***&private_key=***&sas_key=***"),
    ("url_sig=a-s3cr3t&hmac=b-s3cr3t&basic_auth=c-s3cr3t&ProxyAuthorization=d-s3cr3t",
     "url_sig=***&hmac=***&basic_auth=***&ProxyAuthorization=***"),
    ("refresh-token=a-s3cr3t&IdToken=b-s3cr3t&x-ms-signature=c-s3cr3t",
     "refresh-token=***&IdToken=***&x-ms-signature=***"),
    # OAuth's client assertion, a signed JWT standing for the client's secret (shown before)
    ("client_assertion=eyJ-s3cr3t&client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Ajwt-bearer",
     "client_assertion=***&client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Ajwt-bearer"),
    # The short and other forms of a password, and a session's id or cookie (shown before).
    ("user=u&pass=a-s3cr3t&pw=b-s3cr3t&passphrase=c-s3cr3t&db_passcode=d-s3cr3t",
     "user=u&pass=***&pw=***&passphrase=***&db_passcode=***"),
    ("sid=a-s3cr3t&cookie=b-s3cr3t&creds=c-s3cr3t&bypass=1",
     "sid=***&cookie=***&creds=***&bypass=1"),
    # What only names or describes a credential stays: identifiers, the kind of a value.
    ("AWSAccessKeyId=AK&access_key=AK2&Key-Pair-Id=KP&oauth_consumer_key=CK&keyId=K3&"
     "token_type=bearer&oauth_signature_method=HMAC-SHA1&X-Amz-Signature-Version=4&"
     "X-Amz-SignedHeaders=host&X-Amz-Credential=AK%2Fx&session_expires=9&sig=a-s3cr3t",
     "AWSAccessKeyId=AK&access_key=AK2&Key-Pair-Id=KP&oauth_consumer_key=CK&keyId=K3&"
     "token_type=bearer&oauth_signature_method=HMAC-SHA1&X-Amz-Signature-Version=4&"
     "X-Amz-SignedHeaders=host&X-Amz-Credential=AK%2Fx&session_expires=9&sig=***"),
])
def test_a_key_holding_a_secrets_word_is_hidden(query, visible):
    """The list matched whole key names only, so every other spelling of a secret showed
    (sas_token, jsessionid, ...): a key holding a secret's word (token, secret, signature,
    password, session, sig, auth, an API or private key, ...) is one, in every output."""
    test_more_query_forms_are_hidden(query, visible)


@pytest.mark.parametrize("query,visible", [
    ("a=1;token=tk-s3cr3t", "a=1;token=***"),                  # ';' between parameters
    ("private_token=gl-s3cr3t&ref=main", "private_token=***&ref=main"),  # GitLab's API token
    ("auth=fb-s3cr3t&print=pretty", "auth=***&print=pretty"),  # Firebase's REST auth token
    # signed URLs of other object stores: Alibaba OSS (V1 with STS, V4), Tencent COS,
    # Huawei OBS, a Backblaze B2 download authorization
    ("OSSAccessKeyId=AK&Expires=1&Signature=s-s3cr3t&security-token=t-s3cr3t",
     "OSSAccessKeyId=AK&Expires=1&Signature=***&security-token=***"),
    ("x-oss-credential=AK&x-oss-signature=s-s3cr3t&x-oss-security-token=t-s3cr3t",
     "x-oss-credential=AK&x-oss-signature=***&x-oss-security-token=***"),
    ("q-sign-algorithm=sha1&q-ak=AK&q-signature=s-s3cr3t&x-cos-security-token=t-s3cr3t",
     "q-sign-algorithm=sha1&q-ak=AK&q-signature=***&x-cos-security-token=***"),
    ("AccessKeyId=AK&Signature=s-s3cr3t&x-obs-security-token=t-s3cr3t",
     "AccessKeyId=AK&Signature=***&x-obs-security-token=***"),
    ("Authorization=b2-s3cr3t&b2ContentType=x", "Authorization=***&b2ContentType=x"),
    # a ';' inside a value is the value's: the rest of it is hidden too
    ("X-Amz-Signature=5e3c;s3cr3t&x=1", "X-Amz-Signature=***&x=1"),
    # more spellings of a token, a password, an API key, a signature (shown in clear before),
    # beside keys that hold those words and are no secret's, which stay
    ("auth_token=a-s3cr3t&token_type=bearer", "auth_token=***&token_type=bearer"),
    ("X-Auth-Token=a-s3cr3t&x=1", "X-Auth-Token=***&x=1"),
    ("api_token=a-s3cr3t&apiToken=b-s3cr3t&authToken=c-s3cr3t&auth-token=d-s3cr3t",
     "api_token=***&apiToken=***&authToken=***&auth-token=***"),
    ("accessToken=a-s3cr3t&access-token=b-s3cr3t", "accessToken=***&access-token=***"),
    ("user=bob&passwd=p-s3cr3t&pwd=q-s3cr3t", "user=bob&passwd=***&pwd=***"),
    ("api-key=k-s3cr3t&x-api-key=l-s3cr3t", "api-key=***&x-api-key=***"),
    ("jwt=eyJ-s3cr3t.x.y", "jwt=***"),
    ("oauth_consumer_key=ck&oauth_signature=s-s3cr3t%3D&oauth_signature_method=HMAC-SHA1",
     "oauth_consumer_key=ck&oauth_signature=***&oauth_signature_method=HMAC-SHA1"),
    # an OpenStack Swift temporary URL; Akamai's signed URLs (Token Auth: __token__, hdnts)
    ("temp_url_sig=da39-s3cr3t&temp_url_expires=1323479485",
     "temp_url_sig=***&temp_url_expires=1323479485"),
    ("__token__=exp=1~acl=/*~hmac=s3cr3t&x=1", "__token__=***&x=1"),
    ("hdnts=st=1~exp=2~hmac=s3cr3t", "hdnts=***"),
    # a query percent-encoded into a value (hex digits in lower case; a fragment's token; ';'
    # between its parameters): its secret is hidden to where the outer value ends
    ("next=%2fx.npy%3ftoken%3dnx-s3cr3t%26a%3d1&b=2", "next=%2fx.npy%3ftoken%3d***&b=2"),
    ("u=https%3A%2F%2Fh%2Fk%23access_token%3Dat-s3cr3t&b=2",
     "u=https%3A%2F%2Fh%2Fk%23access_token%3D***&b=2"),
    ("u=%2Fk%3Fref%3Dmain%3Bsig%3Dsg-s3cr3t", "u=%2Fk%3Fref%3Dmain%3Bsig%3D***"),
])
def test_more_query_forms_are_hidden(query, visible):
    url = f"http://127.0.0.1:9/d/x.npy?{query}"
    assert_hidden(shardload.redact_secrets(f"{url}: cannot open"), visible)
    with pytest.raises(shardload.Error) as e:
        shardload.discover(url)
    assert_hidden(str(e.value), visible)


def test_a_bunnycdn_token_in_the_path_is_hidden():
    """BunnyCDN signs a URL in its path ("/bcdn_token=T&expires=E&token_path=/v/"): the token
    showed in clear, and token_path (a path, no secret) was hidden with the object's name."""
    url = "http://127.0.0.1:9/bcdn_token=bn-s3cr3t&expires=1598024587&token_path=%2Fv%2F/v/x.npy"
    visible = "/bcdn_token=***&expires=1598024587&token_path=%2Fv%2F/v/x.npy"
    assert_hidden(shardload.redact_secrets(f"{url}: cannot open"), visible)
    with pytest.raises(shardload.Error) as e:
        shardload.discover(url)
    assert_hidden(str(e.value), visible)


@pytest.mark.parametrize("query,visible", [
    # what only holds such a word, or names a code that is no credential, stays
    ("country_code=FR&zipcode=75001&status_code=200&author=bob&oauth_nonce=n1&ticket_type=ST&"
     "code=cd-s3cr3t", "country_code=FR&zipcode=75001&status_code=200&author=bob&oauth_nonce=n1&"
     "ticket_type=ST&code=***"),
    ("resourcekey=0-rk-s3cr3t&id=1", "resourcekey=***&id=1"),  # a Google Drive link's key
    ("accessCode=ac-s3cr3t&serviceTicket=st-s3cr3t&totp=tp-s3cr3t&csrf_token=c-s3cr3t",
     "accessCode=***&serviceTicket=***&totp=***&csrf_token=***"),
    ("senha=pt-s3cr3t&Kennwort=de-s3cr3t&wachtwoord=nl-s3cr3t&motDePasse=fr-s3cr3t",
     "senha=***&Kennwort=***&wachtwoord=***&motDePasse=***"),
])
def test_service_credentials_the_list_missed_are_hidden(query, visible):
    """A SharePoint tempauth=, an Azure Functions code=, a CAS ticket=, otp=, _wpnonce= and
    passwords named in other languages showed in clear in every output."""
    test_more_query_forms_are_hidden(query, visible)


OCI_PAR = "/p/PAR-s3cr3t-Zx9_a:b/n/ns/b/bucket/o/d/x.npy"


@pytest.mark.parametrize("host", ["objectstorage.us-ashburn-1.oraclecloud.com",
                                  "ns.objectstorage.eu-frankfurt-1.oci.customer-oci.com"])
def test_an_oci_pre_authenticated_requests_path_token_is_hidden(host):
    """An Oracle Cloud pre-authenticated request keeps its secret in the path, after /p/ and
    before /n/NAMESPACE/b/BUCKET/: it showed in clear in every output."""
    url = f"https://{host}{OCI_PAR}"
    visible = f"{host}/p/***/n/ns/b/bucket/o/d/x.npy"
    assert_hidden(shardload.redact_secrets(f"{url}: HTTP 404: no PAR-s3cr3t-Zx9_a:b"), visible)
    # Not such a path: shown as written.
    for shown in ("https://h/p/page-2/index.html", "https://h/p/x/n/y.npy", "/data/p/x/b/y/n/z"):
        assert shardload.redact_secrets(shown) == shown


def test_an_oci_pre_authenticated_request_is_hidden_from_every_output(web, cli):
    store, base = web
    url = base + OCI_PAR
    visible = "/p/***/n/ns/b/bucket/o/d/x.npy"
    with pytest.raises(shardload.Error) as e:
        shardload.discover(url, format="npy")
    assert_hidden(str(e.value), visible, "HTTP 404")
    assert_hidden(run(cli, "inspect", url, ok=False), visible, "HTTP 404")
    want = np.arange(8, dtype=np.float32)
    store.put("/p/PAR-s3cr3t-Zx9_a:b/n/ns/b/bucket/o/d/x.npy", npy_bytes(want))
    layout = shardload.discover(url, format="npy")
    np.testing.assert_array_equal(layout.read(), want)
    for shown in (str(layout), layout.describe(), repr(layout),
                  shardload.redact_secrets(layout.paths[0])):
        assert_hidden(shown)
    assert_hidden(str(layout), visible)
    out = run(cli, "inspect", url)
    assert_hidden(out, visible)
    assert_hidden(run(cli, "inspect", "--json", url))


def test_an_oci_pre_authenticated_requests_token_is_sealed_out_of_the_layouts_paths(web):
    """The token of an OCI pre-authenticated request lives in the path (``/p/TOKEN/n/...``):
    hidden where shown, it stayed in ``Layout.paths`` as typed. It is sealed into the handle
    with its '/', put back after ``/p/`` in each request only, and a pickled layout reads."""
    store, base = web
    expected = np.arange(8, dtype=np.float32)
    store.put("/p/PAR-s3cr3t-Zx9_a:b/n/ns/b/bucket/o/d/x.npy", npy_bytes(expected))
    layout = shardload.discover(base + OCI_PAR, format="npy")
    assert all(MARK not in p and "credentials=" in p for p in layout.paths), layout.paths
    assert layout.paths[0].startswith(base + "/p/n/ns/b/bucket/o/d/x.npy?credentials="), \
        layout.paths[0]
    np.testing.assert_array_equal(layout.read(), expected)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(layout)).read(), expected)
    assert all(p.startswith("/p/PAR-s3cr3t-Zx9_a:b/n/ns/") for _, p, _ in store.requests)


@pytest.mark.parametrize("endpoint", ["http://alice:pw-s3cr3t@127.0.0.1:9",
                                      "alice:pw-s3cr3t@127.0.0.1:9", "tok-s3cr3t@127.0.0.1:9"])
def test_a_password_in_the_endpoint_option_is_hidden(endpoint):
    """endpoint_override shows percent-encoded in the URL's query, where the user part's
    password is no '://...@' the user-part rule sees: it showed in clear in every message."""
    with pytest.raises(shardload.Error) as e:
        shardload.discover("s3://b/k.npy", storage_options={
            "endpoint_override": endpoint, "scheme": "http", "max_attempts": "1",
            "region": "us-east-1", "access_key": "AK", "secret_key": "sk"})
    assert_hidden(str(e.value), "endpoint_override=***%40127.0.0.1%3A9", "s3://b/k.npy?")
    assert_hidden(shardload.redact_secrets(
        f"s3://b/k.npy?endpoint_override={urllib.parse.quote(endpoint, safe='')}&region=r"),
        "endpoint_override=***%40127.0.0.1%3A9&region=r")


@pytest.mark.parametrize("url", ["s3://AKIAVISIBLE:sk-s3cr3t@b/d/x.npy",
                                 "s3://AKIAVISIBLE:sk%2Fs3cr3t@b/d/x.npy",
                                 "s3://tok-s3cr3t@b/d/x.npy", "s3://AKIAVISIBLE:sk-s3cr3t@b/d/",
                                 "s3://AKIAVISIBLE:sk-s3cr3t@b/d/shard_*.npy"])
def test_a_user_part_the_store_quotes_without_its_scheme_is_hidden(url, cli):
    """Arrow's S3 errors quote the path they were given, user part and all but without the
    scheme (`got a URI: 'AKIAVISIBLE:sk-s3cr3t@b/d/x.npy'`, `in bucket 'tok-s3cr3t@b'`), where
    the user-part rule, which looks for "://", did not see it: the password showed in clear
    in the error, on the command line too. A URL's own password is hidden wherever it echoes."""
    options = {"endpoint_override": "127.0.0.1:9", "scheme": "http", "max_attempts": "1",
               "region": "us-east-1"}
    with pytest.raises(shardload.Error) as e:
        shardload.discover(url, storage_options=options)
    assert_hidden(str(e.value) + repr(e.value.args) + str(getattr(e.value, "filename", "")),
                  "@b/d/")
    flags = [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]
    assert_hidden(run(cli, "inspect", url, *flags, ok=False), "@b/d/")


@pytest.mark.parametrize("url", ["s3://AKIAVISIBLE:sk-s3cr3t?s3cr3t-tail@b/d/x.npy",
                                 "s3://AKIAVISIBLE:sk-s3cr3t#s3cr3t-tail@b/d/x.npy"])
def test_a_hash_or_question_mark_in_a_user_parts_password_hides_all_of_it(url, cli):
    """A '?' or '#' in the password ends the URL's authority there, and the parser that refuses
    the URL quotes the pieces apart (`'s3cr3t-tail@b/d/x.npy' after the URL's first '?' is not a
    KEY=VALUE option`): the tail after the '?' or '#' showed in clear in the error and on the
    command line. Every piece of the password is hidden."""
    options = {"endpoint_override": "127.0.0.1:9", "scheme": "http", "max_attempts": "1",
               "region": "us-east-1"}
    with pytest.raises(ValueError) as e:
        shardload.discover(url, storage_options=options)
    assert_hidden(str(e.value) + repr(e.value.args), "AKIAVISIBLE:***@b")
    flags = [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]
    assert_hidden(run(cli, "inspect", url, *flags, ok=False), "AKIAVISIBLE:***@b")


@pytest.mark.parametrize("source,kw,visible", [
    ("http://alice:p@ss-s3cr3t@127.0.0.1:9/d/x.npy", {}, "alice:***@127.0.0.1:9/d/x.npy"),
    ("http://127.0.0.1:9/d/x.npy#sv=2022-11-02&sig=sas-s3cr3t", {}, "#sv=2022-11-02&sig=***"),
    ("http://127.0.0.1:9/d;token=s3cr3t/x.npy", {}, "/d;token=***"),
    ("http://127.0.0.1:9/d/x.npy?X-Amz-Signature=s3cr3t%26more&x=1", {}, "X-Amz-Signature=***"),
    (".", {"pattern": "x_{:04d}.npy?token=s3cr3t"}, "x_{:04d}.npy?token=***"),
    (".", {"pattern": "http://u:s3cr3t@h/x_{:04d}.npy"}, "u:***@h/x_{:04d}.npy"),
    (".", {"pattern": "x*.npy#sig=s3cr3t"}, "x*.npy#sig=***"),
])
def test_more_places_and_spellings_of_a_secret_are_hidden(tmp_path, monkeypatch, cli, source,
                                                          kw, visible):
    """A password holding an unencoded '@', a SAS in the fragment, a token in a path segment's
    parameters, a signature whose value holds an encoded '&', and secrets in the pattern=
    argument: in the error (message, args, filename) and on the command line."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises((shardload.Error, ValueError)) as e:
        shardload.discover(source, **kw)
    shown = str(e.value) + repr(e.value.args) + str(getattr(e.value, "filename", ""))
    assert_hidden(shown, visible)
    flags = [f"--pattern={kw['pattern']}"] if kw else []
    assert_hidden(run(cli, "inspect", source, *flags, ok=False), visible)


_SAVES = ["save", "numpy.save", "dask.save"]


@pytest.mark.parametrize("call,dest,visible", [
    *[(c, "s3://b/p/\0?secret_key=sk-s3cr3t&region=r", "secret_key=***&region=r") for c in _SAVES],
    *[(c, "http://alice:pw-s3cr3t@h/p/\0", "alice:***@h/p/") for c in _SAVES],
    *[(c, "d/x?token=tk-s3cr3t\0", "x?token=***") for c in _SAVES + ["index"]],
    ("dask.save", "s3://AKIAVISIBLE:sk-s3cr3t@b/p/", "AKIAVISIBLE:***@b/p/"),
    ("dask.save", "https://h/p/?token=tk-s3cr3t&x=1", "token=***&x=1"),
    ("index", "https://h/p/?token=tk-s3cr3t&x=1", "token=***&x=1"),
])
def test_a_refused_destination_does_not_echo_its_secret(tmp_path, monkeypatch, call, dest,
                                                        visible):
    """Refusals made before any request quoted the destination whole: shardload.dask.save's
    "writes to a directory only" (an object-storage URL), the NUL byte that save, numpy.save
    and dask.save refuse, index's "not a directory"."""
    import shardload.numpy

    monkeypatch.chdir(tmp_path)
    x = np.ones((4, 2))
    if call == "save":
        run_it = lambda: shardload.save(x, dest)  # noqa: E731
    elif call == "numpy.save":
        run_it = lambda: shardload.numpy.save(x, dest)  # noqa: E731
    elif call == "dask.save":
        da = pytest.importorskip("dask.array")
        import shardload.dask

        run_it = lambda: shardload.dask.save(da.from_array(x), dest)  # noqa: E731
    else:
        run_it = lambda: shardload.index(dest)  # noqa: E731
    with pytest.raises((shardload.Error, ValueError, TypeError, NotImplementedError)) as e:
        run_it()
    assert_hidden(str(e.value) + repr(e.value.args) + str(getattr(e.value, "filename", "") or ""),
                  visible)


@pytest.mark.parametrize("form", ["userinfo", "token", "sigv4"])
def test_a_read_errors_filename_pickle_and_traceback_hide_the_secret(web, form):
    """An object changed after discovery (ShardReadError) and one that is missing
    (LayoutError): the message, ``args``, ``filename``, the traceback as printed, and the
    error after a pickle round trip (as a Dask worker sends it) show the URL without its
    secret."""
    import pickle
    import traceback

    store, base = web
    a = np.arange(40, dtype=np.float32).reshape(10, 4)
    store.put_npy("/e/a.npy", a)
    if form == "userinfo":
        url, visible = base.replace("http://", "http://alice:pw-s3cr3t@") + "/e/a.npy", "alice:***@"
    else:
        query = dict(QUERY_FORMS)[form]
        url, visible = with_query(f"{base}/e/a.npy", query), VISIBLE[form][-1]
    layout = shardload.discover(url)
    store.put_npy("/e/a.npy", a[:5])
    errors = []
    with pytest.raises(shardload.ShardReadError) as e:
        layout.read()
    errors.append(e.value)
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(url.replace("/e/a.npy", "/e/gone.npy"))
    errors.append(e.value)
    for err in errors:
        back = pickle.loads(pickle.dumps(err))
        shown = "".join(traceback.format_exception(err)) + repr(err.args) + str(back) + repr(back)
        shown += str(getattr(err, "filename", "") or "") + str(getattr(back, "filename", "") or "")
        assert_hidden(shown, visible)


@pytest.mark.parametrize("url,visible", [
    ("https://alice:pw s3cr3t@127.0.0.1:9/d/x.npy", "@127.0.0.1:9/d/x.npy"),
    ("https://alice:pw\ts3cr3t@127.0.0.1:9/d/x.npy", "@127.0.0.1:9/d/x.npy"),
    ("https://alice:pw\ns3cr3t@127.0.0.1:9/d/x.npy", "@127.0.0.1:9/d/x.npy"),
    ("https://127.0.0.1:9/d/x.npy?token=pw\ts3cr3t&v=1", "&v=1"),
    ("https://127.0.0.1:9/d/x.npy?token=pw\ns3cr3t&v=1", "&v=1"),
])
def test_a_secret_holding_white_space_is_hidden_whole(url, visible, cli):
    """A password or query secret typed with a space, tab or newline in it: the secret ended
    where the text looked for a word's end, and its rest (or, with a space in the password,
    all of it) showed in the CLI's error and in Python's. Escaped first, then hidden, whole."""
    with pytest.raises(shardload.Error) as e:
        shardload.discover(url)
    assert_hidden(str(e.value) + repr(e.value.args), visible)
    assert_hidden(run(cli, "inspect", url, ok=False), visible)


@pytest.mark.parametrize("slashes", ["///", "////"])
def test_a_url_with_more_slashes_before_its_user_part_is_refused_its_password_hidden(
        web, cli, slashes):
    """libcurl takes "http:///alice:PASSWORD@HOST/d/x.npy" as "http://alice:PASSWORD@HOST/...":
    the password went to the server as Basic auth and the data loaded, while the redaction saw
    an empty authority and showed the password in clear in every output (the layout, errors,
    the command line). Such a URL is refused before any request, and a user part after any
    run of slashes is hidden."""
    store, base = web
    store.put_npy("/d/x.npy", np.arange(6.0).reshape(3, 2))
    host = base.split("://")[1]
    url = f"http:{slashes}alice:pw-s3cr3t@{host}/d/x.npy"
    with pytest.raises(ValueError, match="no host after its '//'") as e:
        shardload.discover([url])
    assert_hidden(str(e.value) + repr(e.value.args) + str(getattr(e.value, "filename", "")),
                  f"http:{slashes}alice:***@{host}/d/x.npy")
    with pytest.raises(ValueError, match="no host"):
        shardload.discover(url)
    assert_hidden(run(cli, "inspect", url, ok=False), "alice:***@")
    assert_hidden(run(cli, "inspect", "--json", url, ok=False), "alice:***@")
    assert store.requests == []
    assert_hidden(shardload._core.redact_secrets(f"https:{slashes}alice:pw-s3cr3t@h/x"),
                  "alice:***@h/x")


@pytest.mark.parametrize("url,visible", [
    ("http://alice:Pa#ss=s3cr3tword@127.0.0.1:9/d/x.npy", "alice:***@127.0.0.1:9/d/x.npy"),
    ("https://alice:Pa?ss=s3cr3tword@127.0.0.1:9/d/", "alice:***@127.0.0.1:9/d/"),
    ("http://alice:Pa#s3cr3t/word@127.0.0.1:9/d/x.npy", "alice:***@127.0.0.1:9/d/x.npy"),
    ("http://alice:Pa/s3cr3t#word@127.0.0.1:9/d/x.npy", "alice:***@127.0.0.1:9/d/x.npy"),
    ("http://alice:Pa/s3cr3t?word@127.0.0.1:9/d/x.npy", "alice:***@127.0.0.1:9/d/x.npy"),
    ("http://alice:pa#ss s3cr3t@127.0.0.1:9/d/x.npy", "alice:***@127.0.0.1:9/d/x.npy"),
    ("http://alice:pa#s3cr3t&k=v@127.0.0.1:9/d/x.npy", "alice:***@127.0.0.1:9/d/x.npy"),
    ("s3://AKIAVISIBLE:sk#ss=s3cr3tword@b/d/x.npy", "AKIAVISIBLE:***@b/d/x.npy"),
])
def test_a_password_mixing_a_hash_or_question_mark_with_equals_slash_or_space_is_hidden(
        url, visible, cli):
    """A '#' or '?' in a password, and after it a '=', '/' or space (or a '/' and then a '#'
    or '?'): the user part's '@' was looked for only up to the first of those, so the whole
    password showed in the error, its traceback, inspect and inspect --json (pass 13, fault 1)."""
    options = ({"endpoint_override": "127.0.0.1:9", "scheme": "http", "max_attempts": "1",
                "region": "us-east-1"} if url.startswith("s3") else {})
    assert_hidden(shardload.redact_secrets(f"reading '{url}': failed"), visible)
    with pytest.raises(Exception) as e:
        shardload.discover([url], format="npy", storage_options=options or None)
    assert_hidden(str(e.value) + repr(e.value.args) + str(getattr(e.value, "filename", "")))
    flags = [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]
    for extra in ([], ["--json"]):
        assert_hidden(run(cli, "inspect", url, "--format", "npy", *flags, *extra, ok=False))


@pytest.mark.parametrize("user", ["ghp_s3cr3ttoken1234567890:", "ghp_s3cr3ttoken1234567890:x-oauth-basic"])
def test_a_token_as_the_user_name_with_an_empty_or_constant_password_is_hidden(
        http_dataset, cli, user):
    """"https://TOKEN:@host/" and GitHub's "https://TOKEN:x-oauth-basic@host/" (libcurl sends
    the token as Basic credentials): only the password was hidden, so the token showed in
    print(layout), inspect's source line and every error (pass 13, fault 2). The user part goes
    whole, as "https://TOKEN@host/"'s does."""
    store, base, want = http_dataset
    url = base.replace("://", f"://{user}@") + "/d/"
    layout = shardload.discover(url)
    np.testing.assert_array_equal(layout.read(), want)
    assert_hidden(str(layout) + repr(layout), "://***@")
    for extra in ([], ["--json"]):
        assert_hidden(run(cli, "inspect", url, *extra), "***@")
    gone = base.replace("://", f"://{user}@") + "/gone/x.npy"
    with pytest.raises(Exception) as e:
        shardload.discover([gone])
    assert_hidden(str(e.value), "://***@")
    assert_hidden(shardload.redact_secrets(f"{url} {gone}"), "://***@127.0.0.1")


@pytest.mark.parametrize("value", [" sk-s3cr3tTAILvalue", "  sk-s3cr3tTAILvalue"])
def test_a_secret_option_typed_with_a_leading_space_is_hidden(value, cli):
    """`--storage-option "secret_key= V"` (a space after the '='): the command line put it into
    the URL's query as typed, and the redaction ended the value at the space, so the whole
    secret printed in every message of inspect (pass 13, fault 5)."""
    flags = ["--storage-option", "endpoint_override=127.0.0.1:9", "--storage-option",
             "scheme=http", "--storage-option", "max_attempts=1", "--storage-option",
             "access_key=AKIAVISIBLE", "--storage-option", f"secret_key={value}"]
    for extra in ([], ["--json"]):
        assert_hidden(run(cli, "inspect", "s3://bkt/d/x.npy", "--format", "npy", *flags, *extra,
                          ok=False), "secret_key=***")
    url = f"s3://bkt/d/x.npy?secret_key=ab s3cr3tTAIL&access_key=AKIAVISIBLE"
    assert_hidden(shardload.redact_secrets(f"loading {url}: failed"), "secret_key=***&access")


@pytest.mark.parametrize("key", ["secret_key ", " secret_key", "secret_key\t", "  session_token  "])
def test_a_secret_option_whose_key_is_typed_with_a_space_is_hidden(key, cli):
    """`--storage-option "secret_key =V"` or `" secret_key=V"` (a space around the key): the
    redaction ended the key at the space and compared it whole, so no secret key was seen and
    the whole secret printed in every message of inspect (pass 14, fault 6). The key is
    compared without its blanks."""
    flags = ["--storage-option", "endpoint_override=127.0.0.1:9", "--storage-option",
             "scheme=http", "--storage-option", "max_attempts=1", "--storage-option",
             "access_key=AKIAVISIBLE", "--storage-option", f"{key}=sk-s3cr3tTAILvalue"]
    for extra in ([], ["--json"]):
        assert_hidden(run(cli, "inspect", "s3://bkt/d/x.npy", "--format", "npy", *flags, *extra,
                          ok=False), "=***", key.strip())  # a tab shows escaped
    url = f"s3://bkt/d/x.npy?access_key=AKIAVISIBLE&{key}=sk-s3cr3tTAIL&v=1"
    assert_hidden(shardload.redact_secrets(f"loading {url}: failed"), "=***&v=1")


def test_a_session_token_in_no_url_is_hidden_where_the_server_echoes_it(cli, tmp_path):
    """A session token from the environment travels in a header only; a server whose error
    page echoes the request's headers (a gateway, a debugging proxy) had it printed in the
    error, since the redaction looked only for values spelled in the URL (pass 13, fault 4).
    The signed path gives each request's token and signature to the redaction."""
    import os

    token = "FwoGZXIvYXdzs3cr3tSESSIONtoken0123456789"
    with _echo_server(lambda h: json.dumps({"token": h.headers.get("x-amz-security-token"),
                                             "auth": h.headers.get("Authorization")})) as server:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "AKIAVISIBLE", "AWS_SECRET_ACCESS_KEY":
               "sk-s3cr3tKEY012345", "AWS_SESSION_TOKEN": token, "AWS_EC2_METADATA_DISABLED":
               "true", "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
               "AWS_DEFAULT_REGION": "us-east-1"}
        url = (f"s3://bkt/d/x.npy?endpoint_override=127.0.0.1:{server.server_address[1]}"
               "&scheme=http&max_attempts=1")
        r = subprocess.run([str(cli), "inspect", url], capture_output=True, text=True,
                           timeout=120, env=env)
        out = r.stdout + r.stderr
        assert r.returncode != 0 and "HTTP 403" in out, out
        assert_hidden(out, '"token": "***"')
        assert "Signature=" not in out or "Signature=***" in out, out


_TOKEN_ESCAPES = {
    # .NET's System.Text.Json escapes '+' (and '<', '>', '&', "'"), not '/'.
    "json_plus": lambda t: t.replace("+", "\\u002B"),
    "json_plus_and_slash": lambda t: t.replace("/", "\\/").replace("+", "\\u002b"),
    "json_every_mark": lambda t: "".join(c if c.isalnum() else f"\\u{ord(c):04X}" for c in t),
    "xml_plus": lambda t: t.replace("+", "&#43;"),
    "html_plus_and_equals": lambda t: t.replace("+", "&#x2B;").replace("=", "&#x3D;"),
    "html_equals": lambda t: t.replace("=", "&#x3d;"),
    "percent_twice": lambda t: urllib.parse.quote(urllib.parse.quote(t, safe=""), safe=""),
    "html5_names": lambda t: t.replace("+", "&plus;").replace("/", "&sol;").replace("=", "&equals;"),
    "javascript_hex": lambda t: t.replace("+", "\\x2B"),
    "no_padding": lambda t: t.rstrip("="),
    # Quoted-printable (a mail-like body): the standard library's encoder, '=' as "=3D" and a
    # soft line break ("=" at a line's end) at 40 columns; and '+' as "=2B" too.
    "quoted_printable": lambda t: email.quoprimime.body_encode(t, maxlinelen=40, eol="\r\n"),
    "quoted_printable_marks": lambda t: "".join(f"={ord(c):02X}" if c in "+=" else c for c in t),
    # Wrapped across lines: a PEM-style block of 64 columns, CR LF at 32, a folded header.
    "wrapped_64": lambda t: "\n".join(t[i:i + 64] for i in range(0, len(t), 64)),
    "wrapped_crlf": lambda t: "\r\n".join(t[i:i + 32] for i in range(0, len(t), 32)),
    "folded": lambda t: "\r\n ".join(t[i:i + 30] for i in range(0, len(t), 30)),
}
_SESSION_TOKEN = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQD+abc/def+ghi=="


@pytest.mark.parametrize("escape", sorted(_TOKEN_ESCAPES))
def test_a_token_echoed_with_some_of_its_characters_escaped_is_hidden(cli, escape):
    """A token holding '+' and '/' (every STS session token) echoed by a page that escapes one
    of them and not the other (.NET's JSON writer: "\\u002B" for '+', '/' as it is; an XML
    writer's "&#43;") was shown: only whole spellings, each character escaped alike, were
    looked for (hostile pass 30, B2). Each character may now be spelt its own way: the
    session token of the signed path and an http(s) URL's ?token= alike. Quoted-printable
    ("=2B", "=3D", soft line breaks) and a token wrapped across lines were shown too (B2's
    residuals): read as their readers read them."""
    import os

    spell = _TOKEN_ESCAPES[escape]
    page = {"s3": lambda h: '{"t":"%s"}' % spell(h.headers.get("x-amz-security-token") or ""),
            "http": lambda h: '{"t":"%s"}' % spell(urllib.parse.parse_qs(
                urllib.parse.urlsplit(h.path).query).get("token", [""])[0])}
    for where in ("s3", "http"):
        with _echo_server(page[where]) as server:
            port = server.server_address[1]
            env = {**os.environ, "AWS_ACCESS_KEY_ID": "AKIAVISIBLE", "AWS_SECRET_ACCESS_KEY":
                   "sk-s3cr3tKEY012345", "AWS_SESSION_TOKEN": _SESSION_TOKEN,
                   "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
                   "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_DEFAULT_REGION": "us-east-1"}
            url = (f"s3://bkt/d/x.npy?endpoint_override=127.0.0.1:{port}&scheme=http"
                   "&max_attempts=1" if where == "s3" else
                   f"http://127.0.0.1:{port}/d/x.npy?max_attempts=1&token="
                   + urllib.parse.quote(_SESSION_TOKEN, safe=""))
            r = subprocess.run([str(cli), "inspect", url], capture_output=True, text=True,
                               timeout=120, env=env)
            out = r.stdout + r.stderr
            assert r.returncode != 0 and "HTTP 403" in out and '"t":"***' in out, (where, out)
            assert "ghi" not in out and "IQoJ" not in out, (where, out)


@pytest.mark.parametrize("user", ["alice:hunter2-S3cret", "alice:p%40ss-S3cret", "tok-S3cret0123"])
def test_a_url_passwords_basic_header_echoed_by_the_server_is_hidden(cli, user):
    """libcurl sends an http(s) URL's user part as "Authorization: Basic BASE64(user:password)";
    a server whose error page echoes the request's headers gave the password back in base64
    (pass 28, B5). The Basic credential is hidden as the signed path's headers are, in the
    error and on the command line."""
    import base64

    with _echo_server(lambda h: "Authorization: " + str(h.headers.get("Authorization"))) \
            as server:
        url = f"http://{user}@127.0.0.1:{server.server_address[1]}/d/x.npy"
        sent = user if ":" in user else user + ":"
        encoded = base64.b64encode(shardload_unquote(sent).encode()).decode()
        with pytest.raises(shardload.Error) as e:
            shardload.discover(url)
        shown = str(e.value) + repr(e.value.args)
        assert "HTTP 403" in shown, shown
        assert "Basic ***" in shown and encoded not in shown, shown
        out = run(cli, "inspect", url, ok=False)
        assert "Basic ***" in out and encoded not in out, out


def _quoted_lower(text: str) -> str:
    """``text`` percent-encoded with lower-case hex digits (as some encoders write them)."""
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(),
                  urllib.parse.quote(text, safe=""))


def _echoes(text: str, credential: str) -> list[str]:
    """The spellings of ``credential`` (a Basic header's base64) that ``text`` holds."""
    return [f for f in (credential, urllib.parse.quote(credential, safe=""),
                        _quoted_lower(credential)) if f in text]


_ECHO_PAGES = {
    "plain": lambda auth: "denied: Authorization: " + auth,
    "quoted": lambda auth: "auth=" + urllib.parse.quote(auth, safe=""),  # a log line, ?next=
    "quoted_lower": lambda auth: "auth=" + _quoted_lower(auth),
}


@pytest.mark.parametrize("page", sorted(_ECHO_PAGES))
@pytest.mark.parametrize("user", ["u:zz%3F%3F%3E%3E~~1", "alice:hunter2%2FS3cret%2Bx",
                                  "tok%3AS3cret-01234"])
def test_a_basic_header_echoed_in_any_spelling_is_hidden(cli, user, page):
    """The Authorization libcurl made of a URL's user part was hidden only as its exact base64:
    a page quoting it percent-encoded ("Basic%20dTp6ej8%2FPj5%2BfjE%3D") showed it, and a
    user part whose only ':' is encoded ("tok%3AS3cret", the user "tok:S3cret" and no
    password to libcurl, which sends "tok:S3cret:") was encoded otherwise than libcurl does,
    and shown even verbatim (pass 29, B1). The header the server got is the oracle."""
    got: list[str] = []

    def answer(h) -> str:
        auth = str(h.headers.get("Authorization"))
        got.append(auth)
        return _ECHO_PAGES[page](auth)

    with _echo_server(answer) as server:
        url = f"http://{user}@127.0.0.1:{server.server_address[1]}/d/x.npy"
        with pytest.raises(shardload.Error) as e:
            shardload.discover(url)
        out = run(cli, "inspect", url, ok=False)
    assert got and got[-1].startswith("Basic "), got
    credential = got[-1].split()[1]
    for shown in (str(e.value) + repr(e.value.args), out):
        assert "HTTP 403" in shown, shown
        assert not _echoes(shown, credential), shown
        assert "Basic" in shown and "***" in shown, shown


@pytest.mark.parametrize("page", sorted(_ECHO_PAGES))
def test_a_proxys_basic_credentials_echoed_by_it_are_hidden(cli, monkeypatch, page):
    """libcurl sends the user part of http_proxy (http://USER:PASSWORD@HOST:PORT) as
    "Proxy-Authorization: Basic BASE64(USER:PASSWORD)"; a proxy whose 403 page echoes it gave
    the proxy's password back in every error and in `inspect` (pass 29, B1). The proxy's
    credentials, from the environment, are hidden as a URL's are, in every spelling."""
    got: list[str] = []

    def answer(h) -> str:
        auth = str(h.headers.get("Proxy-Authorization"))
        got.append(auth)
        return _ECHO_PAGES[page](auth)

    with _echo_server(answer) as proxy:
        monkeypatch.setenv("http_proxy",
                           f"http://pu:proxy%2Fpw%2B9@127.0.0.1:{proxy.server_address[1]}")
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        url = "http://example.invalid/d/x.npy"
        with pytest.raises(shardload.Error) as e:
            shardload.discover(url)
        out = run(cli, "inspect", url, ok=False)
    assert got and got[-1].startswith("Basic "), got
    credential = got[-1].split()[1]
    import base64

    assert base64.b64decode(credential) == b"pu:proxy/pw+9"
    for shown in (str(e.value) + repr(e.value.args), out):
        assert "HTTP 403" in shown, shown
        assert not _echoes(shown, credential), shown
        assert "proxy/pw+9" not in shown and "proxy%2Fpw%2B9" not in shown, shown


def test_a_local_directory_named_with_a_query_shows_its_shard_names(tmp_path, cli):
    """A local directory whose name holds "?token=" (a name wget keeps, an experiment's): the
    hidden value ran over every '/' after it, so each message and describe() named the
    directory for every shard, never the damaged one (pass 29, A5). A local path has no query;
    the value is hidden to the end of its name only (as a scheme-less URL's token would be),
    and the shards' names follow it."""
    d = tmp_path / "run?token=tk-s3cr3t"
    d.mkdir()
    np.save(d / "shard_0000.npy", np.arange(3))
    np.save(d / "shard_0001.npy", np.arange(3))
    (d / "shard_0002.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(shardload.Error) as e:
        shardload.discover(str(d))
    out = run(cli, "inspect", str(d), ok=False)
    for shown in (str(e.value), out):
        assert "run?token=***/shard_0002.npy: header" in shown, shown
        assert "tk-s3cr3t" not in shown, shown
    (d / "shard_0002.npy").unlink()
    text = shardload.discover(str(d)).describe()
    for i in (0, 1):
        assert f"run?token=***/shard_000{i}.npy: 3" in text, text
    assert "tk-s3cr3t" not in text, text
    assert shardload.redact_secrets("/data/exp?key=train/shard_0001.npy") == \
        "/data/exp?key=***/shard_0001.npy"
    assert shardload.redact_secrets("exp#code=42/a.npy") == "exp#code=***/a.npy"
    # An AWS secret key or session token holds '/' as it is: hidden whole wherever it stands.
    assert shardload.redact_secrets("b/p/?secret_key=wJal/K7+MD&session_token=FQo/x==&a=1") == \
        "b/p/?secret_key=***&session_token=***&a=1"
    # A URL has a query, whose value may hold a '/': hidden to its end, as before.
    assert shardload.redact_secrets("https://h/d/x.npy?token=tk/s3cr3t&a=1 x/y") == \
        "https://h/d/x.npy?token=***&a=1 x/y"


def shardload_unquote(text: str) -> str:
    """A URL's user part as libcurl sends it: percent-decoded."""
    import urllib.parse

    return urllib.parse.unquote(text)


def _shown_prefix(text: str, secret: str) -> int:
    """The length of the longest start of `secret` (6 bytes or more) that `text` holds."""
    return max((k for k in range(6, len(secret) + 1) if secret[:k] in text), default=0)


@contextlib.contextmanager
def _echo_server(page) -> Iterator[closing_server.ClosingHTTPServer]:
    """A local http server answering each GET of an object with 403 and page(handler), and a
    HEAD with a size and an ETag; closed, with its connections, when the block ends."""
    import http.server

    class Echo(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def answer(self):
            if self.command == "HEAD":
                self.send_response(200)
                self.send_header("Content-Length", "160")
                self.send_header("ETag", '"e1"')
                self.end_headers()
                return
            body = page(self).encode()
            self.send_response(403)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_HEAD = answer

    with closing_server.serving(Echo) as server:
        yield server


_SINGLE_BYTE_ECHOES = {
    "latin-1": lambda raw: raw.decode("latin-1"),
    "cp1252": lambda raw: raw.decode("cp1252", "replace"),
    "bytes_repr": lambda raw: repr(raw),
    "latin-1_twice": lambda raw: raw.decode("latin-1").encode().decode("latin-1"),
}


@pytest.mark.parametrize("echo", sorted(_SINGLE_BYTE_ECHOES))
def test_a_token_past_ascii_echoed_in_a_single_byte_reading_is_hidden(cli, echo):
    """A token typed past ASCII goes percent-encoded as UTF-8; a server that decodes the query
    in a single-byte charset quotes it as mojibake, which no rule hid: latin-1 (a servlet
    container's default; hostile pass 29, B8), Windows-1252 (a Windows server, and WHATWG's
    "latin-1"), a byte string's repr, latin-1 twice (pass 30, B7). Each is hidden."""
    import urllib.parse as up

    secret = "p\u20acss-S3cret\u00e9\u201c\u201d99"

    def page(h):
        raw = up.unquote_to_bytes(up.urlsplit(h.path).query.split("token=")[-1])
        return "query was token=" + _SINGLE_BYTE_ECHOES[echo](raw)

    with _echo_server(page) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}/d/x.npy?token={secret}"
        with pytest.raises(shardload.Error) as e:
            shardload.load(url)
        r = subprocess.run([str(cli), "inspect", url], capture_output=True, text=True,
                           timeout=120)
        for out in (str(e.value) + repr(e.value.args), r.stdout + r.stderr):
            assert "HTTP 403" in out and "query was token=" in out and "***" in out, out
            assert "S3cret" not in out and "99" not in out.split("query was")[-1], out


@pytest.mark.parametrize("where", ["query", "userinfo"])
def test_a_secret_echoed_where_the_quote_cuts_it_shows_no_part_of_it(cli, where):
    """A server's error page quoting the request's token (or the password sent from the URL's
    user part) where the message's 120-byte quote of the page cuts it: the cut prefix was
    printed, since the secret was looked for whole after the cut (hostile pass 14, fault 7).
    The page is cleared of the request's secrets before it is quoted."""
    import base64
    import urllib.parse as up

    secret = "s3cr3tTOKENabcdefghijklmnopqrstuvwxyz0123456789"

    def page(h):
        given = up.parse_qs(up.urlsplit(h.path).query).get("token", [""])[0]
        auth = h.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            given = base64.b64decode(auth[6:]).decode().split(":", 1)[1]
        return json.dumps({"error": "forbidden", "detail": "x" * 50, "given": given})

    with _echo_server(page) as server:
        port = server.server_address[1]
        url = (f"http://127.0.0.1:{port}/d/x.npy?token={secret}&max_attempts=1"
               if where == "query" else
               f"http://alice:{secret}@127.0.0.1:{port}/d/x.npy?max_attempts=1")
        outs = []
        for call in (shardload.discover, shardload.load):
            with pytest.raises((OSError, ValueError)) as e:
                call([url])
            outs.append(str(e.value))
        r = subprocess.run([str(cli), "inspect", url], capture_output=True, text=True,
                           timeout=120)
        outs.append(r.stdout + r.stderr)
        for out in outs:
            assert "HTTP 403" in out and '"given": "' in out, out
            assert _shown_prefix(out, secret) == 0, out


def test_an_early_requests_echoed_signature_is_hidden_after_many_more_are_signed(monkeypatch):
    """The signed path's credentials were hidden from a global list of the 64 most recent: a
    request failing early, whose error was shown after more than 64 others were signed, had
    its own signature printed where the server echoed it (hostile pass 14, fault 8). Each
    request's own credentials now clear its own answer."""
    import hashlib
    import http.server
    import threading
    import time

    token = "FwoGZXIvYXdzs3cr3tSESSIONtokenABCDEFGHIJ0123456789"
    body = npy_bytes(np.arange(8, dtype=np.float32))
    n = 100
    seen = {"bad": None, "after": 0}
    lock = threading.Lock()

    class Server(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def answer(self):
            auth = self.headers.get("Authorization", "")
            with lock:  # the first GET fails, whichever object it is for
                first = self.command == "GET" and seen["bad"] is None
                if first:
                    seen["bad"] = auth.rsplit("Signature=", 1)[-1]
            if first:
                end = time.monotonic() + 10
                while seen["after"] <= 64 and time.monotonic() < end:
                    time.sleep(0.05)  # the others are signed and answered meanwhile
                page = json.dumps({"tok": self.headers.get("x-amz-security-token"),
                                   "sig": auth.rsplit("Signature=", 1)[-1]}).encode()
                self.send_response(403)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
                return
            with lock:
                seen["after"] += 1
            data, code = body, 200
            rng = self.headers.get("Range")
            if rng:
                a, z = (int(v) for v in rng.split("=")[1].split("-"))
                z = min(z, len(body) - 1)
                data, code = body[a:z + 1], 206
            self.send_response(code)
            self.send_header("ETag", '"' + hashlib.md5(body).hexdigest() + '"')
            self.send_header("Content-Length", str(len(data)))
            if code == 206:
                self.send_header("Content-Range", f"bytes {a}-{z}/{len(body)}")
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(data)

        do_GET = do_HEAD = answer

    for k, v in (("AWS_ACCESS_KEY_ID", "AKIAVISIBLE"),
                 ("AWS_SECRET_ACCESS_KEY", "sk-s3cr3tKEY0123"), ("AWS_SESSION_TOKEN", token)):
        monkeypatch.setenv(k, v)
    with closing_server.serving(Server) as server:
        options = {"endpoint_override": closing_server.address(server), "scheme": "http",
                   "region": "us-east-1", "max_attempts": 1}
        urls = [f"s3://bkt/d/x{i:04d}.npy" for i in range(n)]
        with pytest.raises((OSError, ValueError)) as e:
            shardload.discover(urls, storage_options=options)
        out = str(e.value)
        assert "HTTP 403" in out and '"sig": "' in out, out
        assert seen["after"] > 64, seen  # the failing request's answer came after 64 others
        assert _shown_prefix(out, seen["bad"]) == 0, out
        assert _shown_prefix(out, token) == 0, out


@pytest.mark.parametrize("options", [
    [("secret_key", "sk-s3cr3tVALUE1"), ("access_key", "AKIAVISIBLE")],
    {"secret_key": "sk-s3cr3tVALUE1", "access_key": "AKIAVISIBLE"}.items(),
    "secret_key=sk-s3cr3tVALUE1&access_key=AKIAVISIBLE",
    (("session_token", "tok-s3cr3tVALUE2"),),
])
def test_storage_options_of_another_type_are_refused_without_their_values(options):
    """storage_options given as pairs, dict.items() or a query string were refused quoting
    their repr, the secret key's value included (hostile pass 15, fault 4): the type alone."""
    import shardload.numpy
    calls = (lambda: shardload.discover("s3://bkt/d/x.npy", storage_options=options),
             lambda: shardload.load("s3://bkt/d/x.npy", storage_options=options),
             lambda: shardload.numpy.load("s3://bkt/d/x.npy", storage_options=options),
             lambda: shardload.numpy.save(np.zeros(4), "s3://bkt/d/", storage_options=options))
    for call in calls:
        with pytest.raises(TypeError) as e:
            call()
        out = str(e.value)
        assert "storage_options: expected a dict" in out and type(options).__name__ in out, out
        assert MARK not in out, out


@pytest.mark.parametrize("option", ["secret_key:sk-s3cr3tCLI1", "secret_key sk-s3cr3tCLI1",
                                    "SECRET_KEY:sk-s3cr3tCLI1", "session_token:tok-s3cr3tCLI2",
                                    " secret_key\tsk-s3cr3tCLI1"])
def test_a_storage_option_typed_without_its_equals_sign_is_refused_hidden(cli, option):
    """`--storage-option secret_key:V` (YAML's, a header's spelling) or "secret_key V": refused
    for its missing '=', quoting the whole text, secret and all (hostile pass 15, fault 5). A
    text that starts with a secret key's name shows that name only."""
    for extra in ([], ["--json"]):
        out = run(cli, "inspect", "s3://bkt/d/x.npy", "--storage-option", option, *extra,
                  ok=False)
        assert_hidden(out, "--storage-option: expected KEY=VALUE", "***'")
    out = run(cli, "inspect", "s3://bkt/d/x.npy", "--storage-option", "region:us-east-1",
              ok=False)
    assert "found 'region:***'" in out, out  # the key part alone, whatever the key


@pytest.mark.parametrize("option", [
    "secret_key%3Dsk-s3cr3tCLI1", "secret_key%3dsk-s3cr3tCLI1", "session_token%3Dtok-s3cr3tCLI2",
    "=secret_key=sk-s3cr3tCLI1", "==secret_key=sk-s3cr3tCLI1", "%3Dsecret_key%3Dsk-s3cr3tCLI1",
    "aws_secret_access_key%3Ask-s3cr3tCLI1", "x&secret_key=sk-s3cr3tCLI1"])
def test_a_refused_storage_option_shows_its_key_part_alone(cli, option):
    """A refused `--storage-option` shows its text up to the first '=', '%', ':' or blank,
    never the rest: its '=' percent-encoded (as copied from a URL's query) or leading, the
    whole text was quoted, secret and all (hostile pass 16, fault 4)."""
    for cmd in ("inspect", "index", "verify"):
        out = run(cli, cmd, "s3://bkt/d/", "--storage-option", option, ok=False)
        assert_hidden(out, "--storage-option: expected KEY=VALUE", "***'")
        cut = min((option.index(c) for c in "=%: " if c in option), default=len(option))
        assert f"found '{option[:cut + 1]}***'" in out, out


@pytest.mark.parametrize("option", [" =secret_key=sk-s3cr3tCLI1", "a b=x",
                                    "secret_key =sk-s3cr3tCLI1"])
def test_a_storage_option_whose_key_holds_a_blank_is_an_unknown_option(cli, option):
    """A key with a blank in it is no option's name: refused before any request, its value
    not shown (it was joined into every URL's query, `? =secret_key=V`, shown in errors)."""
    out = run(cli, "inspect", "s3://bkt/d/", "--storage-option", option, ok=False)
    key = option[:option.index("=")]
    assert_hidden(out, f"--storage-option: unknown option '{key}'", f"found '{key}=***'")


def _mistyped_separators() -> list[str]:
    """Every character of Unicode's categories Zs, Cf and Po (as this Python's unicodedata has
    them), and the look-alikes of ':' and '/' that are in none of them."""
    import sys
    import unicodedata
    chars = [chr(c) for c in range(sys.maxunicode + 1)
             if unicodedata.category(chr(c)) in ("Zs", "Cf", "Po")]
    look_alikes = ("\u02d0\u02f8\u0589\u05c3\u0703\u0704\u0903\u0a83\u16ec\u1803\u1809\u205a"
                   "\u2236\ua4fd\ua789\ufe13\ufe30\ufe55\uff1a"  # ':'
                   "\u1735\u2044\u2215\u2216\u2571\u2572\u27cb\u27cd\u29f5\u29f8\u29f9\u2f03"
                   "\ufe68\uff0f\uff3c")  # '/' and '\\'
    return chars + [c for c in look_alikes if c not in chars]


def test_a_mistyped_urls_password_is_hidden_whatever_stands_between_scheme_and_slashes():
    """A Unicode blank between the scheme's ':' and its slashes ("http:\\u00a0//",
    "http:/\\u200b/"), a look-alike of ':' ("http\\u2236//"), a percent-encoded ':' or '/', or
    no scheme at all ("//alice:PW@host/x") hid the user part from the redaction, which knew
    a list of such marks (hostile pass 16, fault 5): one rule now takes the user part after
    any two slashes in any spelling. Generated: each Zs, Cf and Po character and each
    look-alike, for the ':', after the ':', and (a blank) between the slashes."""
    seps = _mistyped_separators()
    blanks = [c for c in seps if __import__("unicodedata").category(c) in ("Zs", "Cf")]
    texts = [f"http{c}//alice:pw-{MARK}@h/x.npy" for c in seps]
    texts += [f"http:{c}//alice:pw-{MARK}@h/x.npy" for c in seps]
    texts += [f"http:/{c}/alice:pw-{MARK}@h/x.npy" for c in blanks]
    texts += [f"{scheme}{colon}{slash}{slash}alice:pw-{MARK}@h/x.npy"
              for scheme in ("http", "https", "s3", "hxxps", "pymem")
              for colon in (":", "%3A", "%3a", "\u2236", "\uff1a", "[:]", "")
              for slash in ("/", "\\", "%2F", "%2f", "%5C", "\u2215", "\uff0f", "\u2044")]
    texts += [f"//alice:pw-{MARK}@h/x.npy", f"\\\\alice:pw-{MARK}@h/x.npy",
              f"%2F%2Falice:pw-{MARK}@h/x.npy"]
    leaks = []
    for text in texts:
        for out in (shardload.redact_secrets(f"loading {text}: failed"),
                    shardload._core.printable_redacted(f"loading {text}: failed")):
            if MARK in out or "alice:***@h/x.npy: failed" not in out:
                leaks.append(out)
    assert not leaks, (len(leaks), len(texts), leaks[:10])
    # A token alone after a scheme-like word and marks (no password: "http\uff1a//TOKEN@h").
    for text in (f"http\u2236//tok-{MARK}@h/x", f"http%3A%2F%2Ftok-{MARK}@h/x",
                 f"hxxps[:]//tok-{MARK}@h/x", f"http:\u00a0//tok-{MARK}@h/x"):
        assert shardload.redact_secrets(text).endswith("//***@h/x") or \
            shardload.redact_secrets(text).endswith("%2F***@h/x"), text


@pytest.mark.parametrize("text", [
    "/data//v@2/x.npy", "./runs//model@step3.npy", "s3://b/k//v@2.npy: not found",
    "/tmp/alice:pw@host/x.npy", "see //wiki: ask ops@example.com", "a:b@c", "x.npy: //d/e@f",
])
def test_a_local_path_with_two_slashes_and_an_at_sign_is_shown_as_written(text):
    """Two slashes with no scheme-like word before them take a "user:password@" only: a
    path's '@' after a '//' (a version, a step) is shown as written."""
    assert shardload.redact_secrets(text) == text


@pytest.mark.parametrize("text", [
    "http:\u00a0//alice:pw-s3cr3t@127.0.0.1:9/x.npy", "http:/\u200b/alice:pw-s3cr3t@127.0.0.1:9/x.npy",
    "http\u2236//alice:pw-s3cr3t@127.0.0.1:9/x.npy", "http\ua789//alice:pw-s3cr3t@127.0.0.1:9/x.npy",
    "http\ufe55//alice:pw-s3cr3t@127.0.0.1:9/x.npy", "http%3A//alice:pw-s3cr3t@127.0.0.1:9/x.npy",
    "http%3A%2F%2Falice:pw-s3cr3t@127.0.0.1:9/x.npy", "//alice:pw-s3cr3t@127.0.0.1:9/x.npy",
    "hxxps[:]//alice:pw-s3cr3t@127.0.0.1:9/x.npy",
])
def test_a_mistyped_urls_password_is_hidden_from_every_output(tmp_path, monkeypatch, cli, text):
    """The spellings of hostile pass 16's fault 5 through every output that shows a source:
    discover (the text and a list), numpy's load and save, verify, index and the command
    line's inspect (plain and --json), verify and index."""
    import shardload.numpy
    monkeypatch.chdir(tmp_path)
    outs = []
    for call in (lambda: shardload.discover(text), lambda: shardload.discover([text]),
                 lambda: shardload.numpy.load(text),
                 lambda: shardload.numpy.save(np.ones((2, 2)), text),
                 lambda: shardload.verify(text, on_host=True), lambda: shardload.index(text)):
        with pytest.raises(Exception) as e:
            call()
        outs.append(f"{e.value!s} {e.value!r} {getattr(e.value, 'filename', '')}")
    for argv in (["inspect", text], ["inspect", "--json", text], ["verify", text],
                 ["index", text]):
        outs.append(run(cli, *argv, ok=False))
    for out in outs:
        assert_hidden(out, "***@127.0.0.1:9/x.npy")


# ... and the look-alikes percent-encoded as a browser or quote() sends them, either case, and
# each hex digit in its own case (a server decodes "%eF%Bc%a0" as it does "%EF%BC%A0").
_AT_SPELLINGS = ["%40", "%2540", "\uff20", "\ufe6b", "%EF%BC%A0", "%ef%bc%a0", "%EF%B9%AB",
                 "%ef%b9%ab", "%25EF%25BC%25A0", "%25ef%25b9%25ab", "%eF%Bc%A0", "%25Ef%25b9%25aB"]


@pytest.mark.parametrize("text", [
    *[f"https://tok-{MARK}{at}127.0.0.1:9/x.npy" for at in _AT_SPELLINGS],
    *[f"http://alice:pw-{MARK}{at}127.0.0.1:9/x.npy" for at in _AT_SPELLINGS],
    *[f"s3://tok-{MARK}{at}bkt/x.npy?endpoint_override=127.0.0.1:9&scheme=http&region=r"
      for at in _AT_SPELLINGS],
    '{"url": "http\\u2236//alice\\u2236pw-' + MARK + '@127.0.0.1:9/x.npy"}',
])
def test_a_user_part_whose_at_is_spelled_otherwise_is_hidden_from_every_output(tmp_path,
                                                                               monkeypatch, cli,
                                                                               text):
    """Hostile pass 18, fault 2: a user part whose '@' is percent-encoded (once or twice) or a
    look-alike (U+FF20, U+FE6B), a token alone too, and a mistyped URL written with JSON's
    escapes ("http\\u2236//alice\\u2236PW@host": its look-alike colons) were shown with the
    secret in discover's error and the command line's inspect (plain and --json)."""
    monkeypatch.chdir(tmp_path)
    outs = []
    with pytest.raises(Exception) as e:
        shardload.discover(text)
    outs.append(f"{e.value!s} {e.value!r} {getattr(e.value, 'filename', '')}")
    for argv in (["inspect", text], ["inspect", "--json", text]):
        outs.append(run(cli, *argv, ok=False))
    for out in outs:
        assert_hidden(out, "***")
