"""An http(s) URL's secrets never enter a path string: its user part (``user:password@``) and a
signed URL's secret query items (those the redaction hides: ``X-Amz-Signature=``,
``X-Amz-Security-Token=``, ``token=``, ...) leave every path a layout holds, which names them by a
handle of the process (``credentials=HANDLE``), and are put back only into the request sent. The
server here answers only a request with the Basic credentials and the query exactly as typed (in
its order), so every load below shows that the requests still carry them.

Every secret holds the marker ``s3cr3t``: one search finds any part of any of them."""

from __future__ import annotations

import base64
import contextlib
import json
import pickle
import re
import subprocess
import sys
from typing import Iterator

import numpy as np
import pytest

import shardload
from shardload import _discover

import closing_server
from test_http import Handler, Store

MARK = "s3cr3t"
USER = "alice"
PASSWORD = "pw-s3cr3t"
# A presigned URL's query: secret items (the security token, the signature, a token) with
# others between and after them, and one of shardload's own keys (taken out of the request).
SIGNED = ("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDVISIBLE%2F20240101"
          "&X-Amz-Security-Token=tok-s3cr3t%2Bx&X-Amz-SignedHeaders=host"
          "&X-Amz-Signature=sig-s3cr3t0123&v=1&token=tk-s3cr3t")
OPTION = "requests_in_flight=2"
SECRETS = (PASSWORD, "tok-s3cr3t", "sig-s3cr3t0123", "tk-s3cr3t")
HANDLE = re.compile(r"credentials=[0-9a-f]{32}")
CHILD = ("import pickle, sys, json; import shardload; "
         "layout = pickle.loads(sys.stdin.buffer.read()); "
         "print(json.dumps({'values': layout.read().tolist(), 'paths': list(layout.paths)}))")


class Checking(Handler):
    """Serves a request only with the Basic credentials and the query ``expected``; answers
    401 / 403 otherwise and counts it in ``store.refused``."""

    def _serve(self, head: bool) -> None:
        s = self.store
        want_auth = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        query = self.path.partition("?")[2]
        if self.headers.get("Authorization") != want_auth or query != s.expected:
            with s.lock:
                s.refused.append((self.path, self.headers.get("Authorization")))
            code = 401 if self.headers.get("Authorization") != want_auth else 403
            self._answer(code, b"<error>refused</error>", head=head)
            return
        super()._serve(head)


@contextlib.contextmanager
def checking(expected: str) -> Iterator[tuple[Store, str]]:
    store = Store()
    store.expected = expected
    store.refused = []
    handler = type("BoundChecking", (Checking,), {"store": store})
    with closing_server.serving(handler) as server:
        yield store, closing_server.address(server)


def dataset(store: Store, prefix: str) -> np.ndarray:
    parts = [np.arange(8, dtype=np.int32).reshape(4, 2), np.full((3, 2), 7, np.int32),
             np.arange(6, dtype=np.int32).reshape(3, 2) * 5]
    for i, p in enumerate(parts):
        store.put_npy(f"/{prefix}/shard_{i:04d}.npy", p)
    return np.concatenate(parts)


def no_secret(text: str) -> bool:
    return MARK not in text and f"{USER}:" not in text and "@" not in text.partition("?")[0]


def assert_no_secret_in_paths(layout) -> None:
    paths = list(layout.paths) + list(layout.slice_rows(1, layout.total_rows - 1).paths)
    paths += list(layout._linked_paths)
    assert paths
    for p in paths:
        assert no_secret(p), p
        assert HANDLE.search(p), p
    assert no_secret(str(layout)) and no_secret(repr(layout))


@pytest.fixture
def signed():
    with checking(SIGNED) as s:
        yield s


def test_a_password_and_a_signed_query_stay_out_of_every_path_and_the_loads_send_them(signed):
    store, host = signed
    expected = dataset(store, "d")
    urls = [f"http://{USER}:{PASSWORD}@{host}/d/shard_{i:04d}.npy?{SIGNED}&{OPTION}"
            for i in range(3)]
    layout = shardload.discover(urls)
    assert_no_secret_in_paths(layout)
    # The handle stands where the secrets were; the items around them are kept.
    assert layout.paths[0].startswith(f"http://{host}/d/shard_0000.npy?X-Amz-Algorithm="), \
        layout.paths[0]
    assert "X-Amz-Credential=AKIDVISIBLE" in layout.paths[0] and OPTION in layout.paths[0]
    np.testing.assert_array_equal(layout.read(), expected)
    np.testing.assert_array_equal(np.asarray(shardload.load(layout)), expected)

    # A pickle (a dask task's, a worker's) carries each secret once, in its credentials
    # entry, not in each of its paths.
    data = pickle.dumps(layout)
    for secret in SECRETS:
        assert data.count(secret.encode()) == 1, (secret, data.count(secret.encode()))
    again = pickle.loads(data)
    assert again == layout
    assert_no_secret_in_paths(again)
    np.testing.assert_array_equal(again.read(), expected)
    done = subprocess.run([sys.executable, "-c", CHILD], input=data, capture_output=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    child = json.loads(done.stdout)
    np.testing.assert_array_equal(np.array(child["values"], np.int32), expected)
    assert child["paths"] == list(layout.paths)

    # One URL, and the same URLs with storage options joined to them.
    one = shardload.discover(urls[1])
    assert_no_secret_in_paths(one)
    np.testing.assert_array_equal(one.read(), expected[4:7])
    plain = [u.removesuffix("&" + OPTION) for u in urls]
    joined = shardload.discover(plain, storage_options={"requests_in_flight": 2})
    assert_no_secret_in_paths(joined)
    np.testing.assert_array_equal(joined.read(), expected)
    assert not store.refused, store.refused
    assert store.requests


def test_the_python_join_hands_on_a_sealed_url(signed):
    """storage_options= joined to a URL gives a string that names the secrets by handle."""
    _, host = signed
    url = f"https://{USER}:{PASSWORD}@{host}/d/a.npy?{SIGNED}"
    out = _discover._with_storage_options(url, {"requests_in_flight": 2})
    assert no_secret(out) and HANDLE.search(out) and out.endswith("requests_in_flight=2"), out
    many = _discover._with_storage_options([url, url], {"requests_in_flight": 2})
    assert many == [out, out]
    # An s3:// URL's key pair given as storage options, likewise.
    s3 = _discover._with_storage_options(
        "s3://bkt/d/", {"access_key": "AKIAVISIBLE", "secret_key": "sk-s3cr3t/x+y"})
    assert MARK not in s3 and HANDLE.search(s3) and "access_key=AKIAVISIBLE" in s3, s3


def test_a_password_alone_goes_back_into_each_request(signed):
    store, host = signed
    store.expected = ""
    expected = dataset(store, "p")
    layout = shardload.discover([f"http://{USER}:{PASSWORD}@{host}/p/shard_{i:04d}.npy"
                                 for i in range(3)])
    assert_no_secret_in_paths(layout)
    assert layout.paths[2] == f"http://{host}/p/shard_0002.npy?" + \
        HANDLE.search(layout.paths[2]).group()
    np.testing.assert_array_equal(layout.read(), expected)
    assert not store.refused, store.refused


def test_a_handle_another_process_was_never_given_is_refused_naming_the_url(signed):
    store, host = signed
    dataset(store, "h")
    layout = shardload.discover(f"http://{USER}:{PASSWORD}@{host}/h/shard_0000.npy?{SIGNED}")
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
    assert not store.refused, store.refused  # refused before any request


def test_command_line_shard_list_holds_no_secret(signed, cli):
    store, host = signed
    dataset(store, "c")
    urls = [f"http://{USER}:{PASSWORD}@{host}/c/shard_{i:04d}.npy?{SIGNED}" for i in range(3)]
    done = subprocess.run([str(cli), "inspect", "--json", *urls,
                           "--storage-option", OPTION], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    shards = json.loads(done.stdout)["shards"]
    assert len(shards) == 3
    for shard in shards:
        assert no_secret(shard["path"]) and "credentials=" in shard["path"], shard
    assert MARK not in done.stdout + done.stderr
    assert not store.refused, store.refused


def test_a_directory_named_by_its_manifest_with_a_password_and_a_token(signed):
    """A directory over http(s) is named by its manifest (written by shardload.index of an
    s3:// copy, as test_http_manifest does): the manifest's request and every object's carry
    the credentials; the paths made from the manifest's names hold the handle only."""
    pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
    import s3_server
    from test_http_manifest import npy_bytes, publish

    store, host = signed
    parts = [np.arange(12, dtype=np.float32).reshape(4, 3), np.ones((2, 3), np.float32)]
    with s3_server.serving() as endpoint:
        publish(endpoint, store, "m", {f"shard_{i:04d}.npy": npy_bytes(p)
                                       for i, p in enumerate(parts)})
    layout = shardload.discover(f"http://{USER}:{PASSWORD}@{host}/m/?{SIGNED}")
    assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status
    assert_no_secret_in_paths(layout)
    assert no_secret(str(layout.manifest_status))
    np.testing.assert_array_equal(layout.read(), np.concatenate(parts))
    assert any("shardload.manifest" in p for _, p, _ in store.requests)
    assert not store.refused, store.refused


def test_a_handle_named_toward_another_host_is_refused_before_any_request(signed):
    """A handle is put back only into a request to the origin it was sealed for: a path made
    to name another host (another port) with it is refused naming it, and that host is asked
    nothing, so it never gets the password or the signature."""
    store, host = signed
    dataset(store, "o")
    layout = shardload.discover(f"http://{USER}:{PASSWORD}@{host}/o/shard_0000.npy?{SIGNED}")
    with checking(SIGNED) as (other, other_host):
        other.put("/o/shard_0000.npy", store.objects["/o/shard_0000.npy"])
        for scheme in ("http", "https"):
            moved = layout.paths[0].replace(f"http://{host}", f"{scheme}://{other_host}")
            with pytest.raises(shardload.Error) as e:
                shardload.discover([moved])
            text = str(e.value)
            assert "a handle is used only with the origin it was sealed for" in text, text
            assert other_host in text and MARK not in text
        assert not other.requests and not other.refused
    # Its own host still reads with it.
    np.testing.assert_array_equal(shardload.discover([layout.paths[0]]).read(),
                                  np.arange(8, dtype=np.int32).reshape(4, 2))


# BunnyCDN signs a URL in its path: the token segment comes first, the object's path after it.
PATH_TOKEN = "bcdn_token=bn-s3cr3t&expires=1598024587&token_path=%2Fb%2F"


@pytest.mark.parametrize("with_query", [False, True])
def test_a_path_token_stays_out_of_every_path_and_the_loads_send_it(signed, with_query):
    """BunnyCDN's token in the path (``/bcdn_token=T&expires=E&token_path=P/...``) was hidden in
    every output but stayed in ``Layout.paths`` as typed. It is sealed with the URL's other
    secrets (its user part, its query's), and put back where it was, in the request only: the
    server serves the objects only under the token's path, and only with the password and the
    signed query."""
    store, host = signed
    store.expected = SIGNED if with_query else ""
    expected = dataset(store, f"{PATH_TOKEN}/b")
    query = f"?{SIGNED}" if with_query else ""
    urls = [f"http://{USER}:{PASSWORD}@{host}/{PATH_TOKEN}/b/shard_{i:04d}.npy{query}"
            for i in range(3)]
    layout = shardload.discover(urls)
    assert_no_secret_in_paths(layout)
    # The rest of the path stays, and the object's name.
    assert layout.paths[0].startswith(
        f"http://{host}/expires=1598024587&token_path=%2Fb%2F/b/shard_0000.npy?"), layout.paths[0]
    np.testing.assert_array_equal(layout.read(), expected)
    np.testing.assert_array_equal(layout.slice_rows(5, 9).read(), expected[5:9])
    data = pickle.dumps(layout)
    assert data.count(b"bn-s3cr3t") == 1
    done = subprocess.run([sys.executable, "-c", CHILD], input=data, capture_output=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    np.testing.assert_array_equal(np.array(json.loads(done.stdout)["values"], np.int32),
                                  expected)
    assert not store.refused, store.refused
    assert all(p.startswith(f"/{PATH_TOKEN}/b/") for _, p, _ in store.requests)


def test_a_path_token_alone_is_sealed_and_sent():
    """A URL whose only secret is its path token (here after a first directory): sealed into a
    handle all the same, and put back after that directory only."""
    from test_http import Handler, Store

    store = Store()
    expected = dataset(store, f"p/{PATH_TOKEN}/a")
    handler = type("Bound", (Handler,), {"store": store})
    with closing_server.serving(handler) as server:
        host = closing_server.address(server)
        layout = shardload.discover(f"http://{host}/p/{PATH_TOKEN}/a/shard_0001.npy")
        assert MARK not in layout.paths[0] and HANDLE.search(layout.paths[0]), layout.paths[0]
        assert layout.paths[0].startswith(f"http://{host}/p/expires=1598024587&"), layout.paths[0]
        assert MARK not in str(layout)
        np.testing.assert_array_equal(layout.read(), expected[4:7])
        # A path made to name another directory with the handle: refused, nothing asked.
        asked = len(store.requests)
        moved = layout.paths[0].replace(f"http://{host}/p/", f"http://{host}/q/", 1)
        with pytest.raises(shardload.Error) as e:
            shardload.discover([moved])
        text = str(e.value)
        assert "path token" in text and "after '/p/'" in text and MARK not in text, text
        assert len(store.requests) == asked


def test_a_path_token_is_put_back_whole_whatever_the_lengths_around_it():
    """BunnyCDN's signer writes ``/bcdn_token=T&expires=E/...``: the token was put back from
    memory already freed (the entry's items, gone with the call that read them), so whether a
    URL loaded depended on the lengths of its parts: ``expires=12`` loaded, ``expires=123`` was
    refused as sealed "after" some garbage. Every length loads, each from its own path."""
    from test_http import Handler, Store

    store = Store()
    handler = type("Bound", (Handler,), {"store": store})
    with closing_server.serving(handler) as server:
        host = closing_server.address(server)
        for n in range(1, 41):
            path = f"/bcdn_token=bn-s3cr3t&expires={'1' * n}/a.npy"
            expected = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
            store.put_npy(path, expected)
            layout = shardload.discover(f"http://{host}{path}")
            assert MARK not in layout.paths[0] and HANDLE.search(layout.paths[0]), layout.paths[0]
            np.testing.assert_array_equal(layout.read(), expected)
        assert all(p.startswith("/bcdn_token=bn-s3cr3t&expires=") for _, p, _ in store.requests)


def test_a_path_token_ended_by_a_slash_is_that_segment_alone():
    """A token segment with nothing after its value (``/bcdn_token=T/b/a.npy``) took the rest of
    the path with it: the object's URL became the host's root, and discovery asked for objects
    no one named. The token ends at its segment; the object keeps its path."""
    from test_http import Handler, Store

    store = Store()
    expected = dataset(store, "bcdn_token=bn-s3cr3t/b")
    handler = type("Bound", (Handler,), {"store": store})
    with closing_server.serving(handler) as server:
        host = closing_server.address(server)
        urls = [f"http://{host}/bcdn_token=bn-s3cr3t/b/shard_{i:04d}.npy" for i in range(3)]
        layout = shardload.discover(urls)
        assert layout.paths[0].startswith(f"http://{host}/b/shard_0000.npy?credentials="), \
            layout.paths[0]
        assert MARK not in str(layout) and MARK not in layout.paths[2]
        np.testing.assert_array_equal(layout.read(), expected)
        assert all(p.startswith("/bcdn_token=bn-s3cr3t/b/shard_000") for _, p, _ in store.requests)


def test_a_secret_path_parameter_of_a_directory_is_sealed_and_sent():
    """A directory segment's parameter whose key names a secret (Java's ``;jsessionid=S``) was
    hidden where shown but kept in ``Layout.paths`` as typed. It is sealed into the handle and
    put back in its place in each request only."""
    from test_http import Handler, Store

    store = Store()
    param = ";jsessionid=js-s3cr3t0"
    expected = dataset(store, f"d{param}")
    handler = type("Bound", (Handler,), {"store": store})
    with closing_server.serving(handler) as server:
        host = closing_server.address(server)
        layout = shardload.discover(
            [f"http://{host}/d{param}/shard_{i:04d}.npy" for i in range(3)])
        for p in layout.paths:
            assert MARK not in p and "jsessionid" not in p and HANDLE.search(p), p
        assert MARK not in str(layout)
        np.testing.assert_array_equal(layout.read(), expected)
        np.testing.assert_array_equal(pickle.loads(pickle.dumps(layout)).read(), expected)
        assert all(param in p for _, p, _ in store.requests), store.requests


def test_a_secret_path_parameter_of_the_object_itself_stays_and_what_lies_beside_it_is_found():
    """On the object's own segment (``/d/x.bin;jsessionid=S``, where Tomcat puts it) a sealed
    parameter would not go back into the names looked up beside the object, made from its
    directory: a raw file's sidecar was refused before any request. Such a parameter stays in
    the path (hidden where shown, the documented limit), and the sidecar is found."""
    from test_http import Handler, Store

    store = Store()
    rows = np.arange(40, dtype="<f4").reshape(10, 4)
    param = ";jsessionid=js-s3cr3t0"
    store.put(f"/d/x.bin{param}", b"H" * 16 + rows.tobytes())
    store.put("/d/shardload.json",
              json.dumps({"dtype": "<f4", "shape": [4], "header_bytes": 16}).encode())
    handler = type("Bound", (Handler,), {"store": store})
    with closing_server.serving(handler) as server:
        host = closing_server.address(server)
        layout = shardload.discover(f"http://{host}/d/x.bin{param}", format="raw")
        assert MARK not in str(layout)
        np.testing.assert_array_equal(layout.read(), rows)


@pytest.mark.parametrize("path", [
    "/p/PAR-s3cr3t-a/n/ns/b/bk/o/d;jsessionid=js-s3cr3t1/x.npy",
    "/a;jsessionid=js-s3cr3t1/b;sig=sg-s3cr3t2/x.npy",
    "/bcdn_token=bn-s3cr3t&x=1/d;jsessionid=js-s3cr3t1/x.npy",
])
def test_paths_given_back_put_every_sealed_token_back(path):
    """A path's second secret stays in the path; ``Layout.paths`` given back to discover seal it
    into a second handle. Only the last handle's token was put back, so the request went
    without the first (an HTTP 404, or a refusal). Each is put back, the last sealed first."""
    from test_http import Handler, Store

    store = Store()
    expected = np.arange(8, dtype=np.float32).reshape(4, 2)
    store.put_npy(path, expected)
    handler = type("Bound", (Handler,), {"store": store})
    with closing_server.serving(handler) as server:
        host = closing_server.address(server)
        first = shardload.discover(f"http://{host}{path}")
        again = shardload.discover(list(first.paths))
        assert MARK not in again.paths[0], again.paths[0]
        np.testing.assert_array_equal(again.read(), expected)
        assert {p for _, p, _ in store.requests} == {path}, store.requests
