"""http:// and https:// sources: shards served by a small HTTP server on 127.0.0.1 that this
module starts (Python's http.server, with the Range support and ETags written here), read
through shardload's libcurl backend."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import io
import json
import posixpath
import re
import shutil
import ssl
import subprocess
import threading
import urllib.parse
import urllib.request
from typing import Iterator

import numpy as np
import pytest

import shardload
import closing_server


CUT = -1  # a fault: half the body, then the connection closed
RESET = -2  # a fault: the connection closed before any answer


class Store:
    """The server's objects (path -> bytes) and its faults, shared with its handler threads."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.lock = threading.Lock()
        self.ignore_range = False  # answer every GET with 200 and the whole object
        self.etag = True  # send an ETag (else only Last-Modified)
        self.last_modified = True  # send a Last-Modified (neither: the size tells versions apart)
        self.fail_next: dict[str, list[int]] = {}  # path -> statuses to answer first, in order
        self.decode_paths = False  # look objects up by the percent-decoded path, as most servers
        # Cut each segment's path parameters (";jsessionid=X") first and resolve dot segments
        # after decoding, as servlet containers (Tomcat, Jetty) map a path to a file.
        self.strip_path_parameters = False
        # Map a path as a Windows server (IIS) does: '\\' separates segments, a segment's
        # trailing dots and blanks are dropped, names match in any case.
        self.windows_paths = False
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range)

    def put(self, path: str, data: bytes) -> None:
        with self.lock:
            self.objects[path] = data

    def put_npy(self, path: str, array: np.ndarray) -> None:
        buf = io.BytesIO()
        np.save(buf, array)
        self.put(path, buf.getvalue())


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
    store: Store

    def log_message(self, *args) -> None:
        pass

    def _answer(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None,
                head: bool = False) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _serve(self, head: bool) -> None:
        s = self.store
        path = self.path.split("?")[0]
        if s.strip_path_parameters:
            path = "/".join(segment.split(";")[0] for segment in path.split("/"))
        if s.decode_paths:
            path = urllib.parse.unquote(path)
        if s.strip_path_parameters:
            path = posixpath.normpath(path)
        if s.windows_paths:
            path = posixpath.normpath("/".join(
                segment if segment in (".", "..") else segment.rstrip(". ")
                for segment in path.replace("\\", "/").split("/")))
            path = next((k for k in s.objects if k.lower() == path.lower()), path)
        with s.lock:
            s.requests.append((self.command, self.path, self.headers.get("Range")))
            queue = s.fail_next.get(path)
            # A cut body is a GET's fault: a HEAD has no body to cut, so it leaves the fault
            # for the next GET (tiles' HEADs and GETs interleave in any order).
            fault = queue.pop(0) if queue and not (head and queue[0] == CUT) else None
            data = s.objects.get(path)
        if fault == CUT and not head and data is not None:
            # The whole Content-Length announced, half the body sent, the connection closed.
            body = self._range_of(data)[1]
            self.send_response(206 if self.headers.get("Range") else 200)
            if s.etag:  # as a real answer cut short carries it (a 206 carries a 200's ETag)
                self.send_header("ETag", '"' + hashlib.md5(data).hexdigest() + '"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if fault == RESET:
            self.close_connection = True  # closed with no answer at all
            return
        if fault is not None and fault > 0:
            self._answer(fault, f"<error>{fault}</error>".encode(), head=head)
            return
        if data is None:
            self._answer(404, b"<error>not found</error>", head=head)
            return
        headers = {"Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT"} if s.last_modified else {}
        if s.etag:
            headers["ETag"] = '"' + hashlib.md5(data).hexdigest() + '"'
        if_match = self.headers.get("If-Match")
        if if_match is not None and s.etag and if_match != headers["ETag"]:
            self._answer(412, b"<error>precondition failed</error>", head=head)
            return
        rng = self.headers.get("Range")
        if head or rng is None or s.ignore_range:
            self._answer(200, data, headers, head=head)
            return
        first, body = self._range_of(data)
        if first >= len(data):
            self._answer(416, b"", {"Content-Range": f"bytes */{len(data)}"})
            return
        headers["Content-Range"] = f"bytes {first}-{first + len(body) - 1}/{len(data)}"
        self._answer(206, body, headers)

    def _range_of(self, data: bytes) -> tuple[int, bytes]:
        """The first byte and the bytes of the request's Range (all of it without one)."""
        rng = self.headers.get("Range")
        if rng is None:
            return 0, data
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", rng)
        assert m, rng
        first, last = int(m.group(1)), min(int(m.group(2)), len(data) - 1)
        return first, data[first:last + 1]

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._serve(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve(head=True)


@contextlib.contextmanager
def serving(tls: ssl.SSLContext | None = None) -> Iterator[tuple[Store, str]]:
    store = Store()
    handler = type("BoundHandler", (Handler,), {"store": store})
    with closing_server.serving(handler, tls=tls, poll_interval=0.05) as server:
        scheme = "https" if tls is not None else "http"
        yield store, f"{scheme}://{closing_server.address(server)}"


@pytest.fixture
def web() -> Iterator[tuple[Store, str]]:
    with serving() as s:
        yield s


def _ragged(rng: np.random.Generator, rows: list[int]) -> list[np.ndarray]:
    return [rng.standard_normal((r, 3, 2)).astype("float32") for r in rows]


def test_npy_list_ragged_matches_numpy(web):
    store, base = web
    rng = np.random.default_rng(1)
    parts = _ragged(rng, [7, 0, 1, 13, 5, 2, 11])
    urls = []
    for i, p in enumerate(parts):
        store.put_npy(f"/d/shard_{i:04d}.npy", p)
        urls.append(f"{base}/d/shard_{i:04d}.npy")
    want = np.concatenate(parts)
    layout = shardload.discover(urls)
    assert layout.total_rows == want.shape[0]
    np.testing.assert_array_equal(np.asarray(shardload.load(urls)), want)
    np.testing.assert_array_equal(layout.read(3, 30), want[3:30])
    got = shardload.load(urls, row_range=(2, 25))
    np.testing.assert_array_equal(np.asarray(got), want[2:25])
    # One URL alone is a source too; every GET was a ranged one.
    np.testing.assert_array_equal(np.asarray(shardload.load(urls[3])), parts[3])
    gets = [r for r in store.requests if r[0] == "GET"]
    assert gets and all(r[2] is not None and r[2].startswith("bytes=") for r in gets)


def test_raw_shards_with_header(web):
    store, base = web
    rng = np.random.default_rng(3)
    parts = [rng.integers(-1000, 1000, size=(r, 5)).astype(">i4") for r in (4, 1, 17, 6)]
    urls = []
    for i, p in enumerate(parts):
        store.put(f"/raw/s{i}.bin", b"HDR!" * 4 + p.tobytes())
        urls.append(f"{base}/raw/s{i}.bin")
    got = shardload.load(urls, format="raw", dtype=">i4", trailing_shape=(5,), header_bytes=16)
    np.testing.assert_array_equal(np.asarray(got), np.concatenate(parts))


def test_parquet_and_arrow_through_the_same_backend(web):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    feather = pytest.importorskip("pyarrow.feather")
    store, base = web
    rng = np.random.default_rng(7)
    tables = [pa.table({"a": rng.standard_normal(r), "b": rng.standard_normal(r)})
              for r in (13, 1, 29)]
    want = np.concatenate([np.stack([t["a"].to_numpy(), t["b"].to_numpy()], axis=1)
                           for t in tables])
    for ext, write in (("parquet", lambda t, b: pq.write_table(t, b, row_group_size=4)),
                       ("arrow", feather.write_feather)):
        urls = []
        for i, t in enumerate(tables):
            buf = io.BytesIO()
            write(t, buf)
            store.put(f"/{ext}/s{i}.{ext}", buf.getvalue())
            urls.append(f"{base}/{ext}/s{i}.{ext}")
        got = shardload.load(urls, columns=["a", "b"])
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=ext)


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
@pytest.mark.parametrize("last_modified", [True, False])
def test_a_layout_read_after_a_same_size_replacement_without_etag_reads_the_new_version(
        web, fmt, last_modified):
    """A server without ETags, an object replaced by one of the same size (a Last-Modified
    kept by the copy, or none sent): a layout made before reads the new version, as an .npy's
    does. The footer a read parsed was kept in the process by the snapshot, which names both
    versions alike: the first version's IPC batch blocks over the second's bytes were refused
    as "Buffer 2 exceeds IPC file area". Footers are kept across reads only for an ETag's
    snapshot: the new footer is read, and an IPC file whose batches moved is refused naming
    the batch."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    store, base = web
    store.etag, store.last_modified = False, last_modified

    def encode(values: np.ndarray, first: int) -> bytes:
        t = pa.table({"a": values})
        buf = io.BytesIO()
        if fmt == "arrow":  # batches of `first` rows and the rest
            with ipc.new_file(buf, t.schema) as w:
                for part in (values[:first], values[first:]):
                    w.write_batch(pa.record_batch([pa.array(part)], names=["a"]))
        else:
            pq.write_table(t, buf, row_group_size=first, compression="none",
                           write_statistics=False, use_dictionary=False)
        return buf.getvalue()

    old = np.arange(16, dtype="<i8")
    if fmt == "arrow":
        new = old + 1000
        a, b = encode(old, 4), encode(new, 12)
    else:  # row groups of one size: the size alike, the values reversed
        new = old[::-1] + 1000
        a, b = encode(old, 4), encode(new, 4)
    assert len(a) == len(b) and a != b
    url = f"{base}/t/s.{fmt}"
    store.put(f"/t/s.{fmt}", a)
    layout = shardload.discover([url], format=fmt)
    np.testing.assert_array_equal(layout.read(0, 16), old)
    store.put(f"/t/s.{fmt}", b)
    if fmt == "arrow":
        # Its batches moved (4 + 12 rows, now 12 + 4): what the layout recorded of them is
        # compared with the object's own footer, read anew.
        with pytest.raises(shardload.ShardReadError,
                           match=f"{url}: record batch 0: 12 rows, expected 4"):
            layout.read(0, 16)
        layout = shardload.discover([url], format=fmt)
    np.testing.assert_array_equal(layout.read(0, 16), new)
    np.testing.assert_array_equal(layout.read(2, 14), new[2:14])


@pytest.mark.parametrize("batch,claim", [(0, 0), (1, 0), (0, 1), (1, 4), (0, 3 + 2**23)])
def test_an_ipc_batch_claiming_other_rows_than_its_columns_is_refused(web, tmp_path, batch,
                                                                      claim):
    """A record batch's Message whose length says other rows than its columns hold (3): the
    remote path took each batch's rows from its Message alone, so one claiming 0 rows was never
    decoded and its rows vanished, every later row shifted (6 x 2 loaded as 3 x 2, no error);
    one claiming 2**23 more showed a layout of that many rows. pyarrow and the local path refuse
    the file; discovery over http(s) now does too, naming the object and the batch (pass 13,
    fault 6). The same file unpatched loads as pyarrow reads it."""
    import struct

    import pyarrow as pa
    import pyarrow.ipc as ipc

    store, base = web
    a = np.arange(12, dtype="<f4").reshape(6, 2) * 1.5 - 3
    t = pa.table({"a": a[:, 0], "b": a[:, 1]})
    buf = io.BytesIO()
    with ipc.new_file(buf, t.schema) as w:
        for rb in t.to_batches(max_chunksize=3):
            w.write_batch(rb)
    good = buf.getvalue()
    # Each batch's Message holds its length, 3, as an int64, and then its field nodes vector
    # (a count, 2, then (3, 0) per column): the 3s that are no node are the two lengths.
    threes = [b for b in range(len(good)) if good[b:b + 8] == struct.pack("<q", 3)]
    lengths = [b for b in threes
               if good[b - 4:b] != struct.pack("<I", 2) and b - 16 not in threes]
    assert len(lengths) == 2, threes
    bad = bytearray(good)
    bad[lengths[batch]:lengths[batch] + 8] = struct.pack("<q", claim)
    (tmp_path / "bad.arrow").write_bytes(bytes(bad))
    with pytest.raises(OSError, match="length did not match"):  # the oracle refuses
        ipc.open_file(str(tmp_path / "bad.arrow")).read_all()
    store.put("/ipc/good.arrow", good)
    store.put("/ipc/bad.arrow", bytes(bad))
    np.testing.assert_array_equal(np.asarray(shardload.load([f"{base}/ipc/good.arrow"])), a)
    for call in (shardload.discover, shardload.load):
        with pytest.raises(shardload.LayoutError) as e:
            call([f"{base}/ipc/bad.arrow"], format="arrow")
        assert (f"{base}/ipc/bad.arrow: record batch {batch}: not a readable Arrow IPC file "
                f"(Feather v2): record batch metadata: the batch claims {claim} rows, its "
                "column 0 holds 3" in str(e.value)), e.value
    with pytest.raises(shardload.LayoutError, match="record batch length"):  # as before
        shardload.discover([str(tmp_path / "bad.arrow")], format="arrow")


def test_hdf5_by_ranged_reads(web, tmp_path):
    """HDF5 files read through shardload's file driver: metadata and chunks by ranged GETs,
    compared with h5py."""
    h5py = pytest.importorskip("h5py")
    store, base = web
    rng = np.random.default_rng(21)
    urls, parts = [], []
    for i, n in enumerate([17, 1, 30]):
        a = rng.integers(-99, 99, (n, 4)).astype("<i4")
        p = tmp_path / f"s{i}.h5"
        with h5py.File(p, "w") as f:
            f.create_dataset("v", data=a, chunks=(6, 4), maxshape=(None, 4), compression="gzip")
        store.put(f"/h5/s{i}.h5", p.read_bytes())
        urls.append(f"{base}/h5/s{i}.h5")
        parts.append(a)
    want = np.concatenate(parts)
    np.testing.assert_array_equal(np.asarray(shardload.load(urls)), want)
    np.testing.assert_array_equal(shardload.discover(urls).read(5, 40), want[5:40])


def test_npz_and_a_reader_that_opens_paths_itself(web):
    store, base = web
    rng = np.random.default_rng(33)
    parts = [rng.integers(0, 50, (n, 2)).astype("<i2") for n in [6, 11]]
    for i, p in enumerate(parts):
        buf = io.BytesIO()
        np.savez_compressed(buf, p)
        store.put(f"/z/s{i}.npz", buf.getvalue())
    urls = [f"{base}/z/s{i}.npz" for i in range(2)]
    np.testing.assert_array_equal(np.asarray(shardload.load(urls)), np.concatenate(parts))
    # A reader registered from Python opens its paths by name: refused for a URL.
    shardload.register_reader("http-refused-rows", read=lambda p, lo, hi: np.zeros((hi - lo, 2)),
                              count_rows=lambda p: 3)
    with pytest.raises(shardload.LayoutError,
                       match=r"a\.rows: the custom format is not yet supported for http\(s\):// "
                             r"sources \(npy, raw, hdf5, parquet, arrow, zarr and npz are\)"):
        shardload.load([f"{base}/h/a.rows"], reader="http-refused-rows")


def test_dot_segments_in_a_url_path_are_sent_as_written(web):
    """A URL path with "." and ".." segments names the object of that very path: libcurl
    would resolve "new/../keep/x.npy" to "keep/x.npy", another object than the one named (and
    than the one an s3:// request signs). This server keeps both under their literal paths."""
    store, base = web
    store.put_npy("/keep/x.npy", np.zeros((3, 2)))
    dotted = {"/new/../keep/x.npy": np.arange(6.0).reshape(3, 2),
              "/keep/./y.npy": np.arange(8.0).reshape(4, 2)}
    for path, a in dotted.items():
        store.put_npy(path, a)
    for path, a in dotted.items():
        np.testing.assert_array_equal(np.asarray(shardload.load([base + path])), a)
    assert {p.split("?")[0] for _, p, _ in store.requests} == set(dotted)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zarr_store_by_key(web, tmp_path, zarr_format):
    """A Zarr store's metadata and chunks are objects under the store's URL; a chunk the
    server does not have (404) is the fill value, as a missing chunk file is."""
    zarr = pytest.importorskip("zarr")
    store, base = web
    want = np.arange(37 * 3, dtype=np.float32).reshape(37, 3)
    local = tmp_path / "a.zarr"
    z = zarr.create_array(str(local), shape=want.shape, chunks=(8, 3), dtype="float32",
                          zarr_format=zarr_format, fill_value=-1)
    z[:] = want
    z[16:24] = -1  # all fill: zarr-python writes no chunk for it
    want[16:24] = -1
    for f in sorted(local.rglob("*")):
        if f.is_file():
            store.put("/z/a.zarr/" + f.relative_to(local).as_posix(), f.read_bytes())
    got = shardload.load(f"{base}/z/a.zarr")
    np.testing.assert_array_equal(np.asarray(got), want)


def test_cli_read_http(web, cli):
    """The command line takes one SOURCE: one URL (a list of URLs is Python's)."""
    store, base = web
    store.put_npy("/c/a.npy", np.arange(16 * 3, dtype=np.float64).reshape(16, 3))
    r = subprocess.run([str(cli), "read", f"{base}/c/a.npy", "--no-verify"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "(16, 3)" in r.stdout and "remote retries: 0" in r.stdout, r.stdout
    r = subprocess.run([str(cli), "inspect", f"{base}/c/"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "HTTP has no directory listing" in r.stderr, r.stderr
    # An http URL takes the store option rows marked http(s), from --storage-option as from its
    # own query; any other key (which would go to the server) is refused.
    r = subprocess.run([str(cli), "inspect", f"{base}/c/a.npy", "--storage-option",
                        "max_attempts=2"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "(16, 3)" in r.stdout, r.stderr
    r = subprocess.run([str(cli), "inspect", f"{base}/c/a.npy", "--storage-option",
                        "max_attempts=2", "--storage-option", "region=x"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--storage-option region applies to s3:// SOURCEs only" in \
        r.stderr, r.stderr
    r = subprocess.run([str(cli), "inspect", f"{base}/c/a.npy?max_attempts=2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "(16, 3)" in r.stdout, r.stderr


def test_server_ignoring_range_never_corrupts(web):
    """A server that answers every GET with 200 and the whole object: its bytes are never read
    as a range. A read from offset 0 of the whole object is exactly the object; any other is a
    clear error naming the URL."""
    store, base = web
    a = np.arange(60, dtype=np.int64).reshape(20, 3)
    store.put_npy("/r/a.npy", a)
    store.ignore_range = True
    url = f"{base}/r/a.npy"
    with pytest.raises(shardload.Error) as e:
        np.asarray(shardload.load(url))
    assert url in str(e.value) and "ignored the Range" in str(e.value)
    # The whole object asked for at once (a raw shard without a header) is the object.
    store.put("/r/b.bin", a.tobytes())
    layout = shardload.discover(f"{base}/r/b.bin", format="raw", dtype="<i8", trailing_shape=(3,))
    np.testing.assert_array_equal(layout.read(0, 20), a)


@pytest.mark.parametrize("status", [404, 403])
def test_client_errors_name_the_url_and_are_not_retried(web, status):
    store, base = web
    store.put_npy("/e/a.npy", np.zeros((2, 2)))
    url = f"{base}/e/b.npy"
    if status == 403:
        store.put_npy("/e/b.npy", np.zeros((2, 2)))
        store.fail_next["/e/b.npy"] = [403] * 10
    with pytest.raises(shardload.Error) as e:
        shardload.discover([f"{base}/e/a.npy", url])
    assert url in str(e.value) and f"HTTP {status}" in str(e.value)
    assert getattr(e.value, "errno", None) in (None, 2 if status == 404 else 13)
    # Asked once: a 4xx is an answer, not a fault (a HEAD's 403 once more, by the GET of its
    # first byte that stands in for a HEAD a presigned GET URL refuses).
    asked = [r[0] for r in store.requests if r[1] == "/e/b.npy"]
    assert asked == (["HEAD"] if status == 404 else ["HEAD", "GET"]), asked


def test_5xx_retried_then_fine_and_counted(web):
    store, base = web
    a = np.arange(24, dtype=np.float64).reshape(8, 3)
    store.put_npy("/t/a.npy", a)
    url = f"{base}/t/a.npy?backoff_ms=1"
    store.fail_next["/t/a.npy"] = [503, 500, 503]
    np.testing.assert_array_equal(np.asarray(shardload.load(url)), a)
    assert sum(1 for r in store.requests if r[1].startswith("/t/a.npy")) >= 4
    # In the load's own requests (its HEADs and ranged GETs), each refused answer one retry.
    layout = shardload.discover(url)
    store.fail_next["/t/a.npy"] = [503, 429, 500]
    got, info = shardload.load(layout, info=True)
    np.testing.assert_array_equal(np.asarray(got), a)
    assert not store.fail_next["/t/a.npy"] and info.remote_retries == 3
    # Beyond max_attempts: an error naming the URL and the attempts.
    store.fail_next["/t/a.npy"] = [503] * 5
    with pytest.raises(shardload.Error) as e:
        shardload.discover(f"{base}/t/a.npy?backoff_ms=1&max_attempts=2")
    assert f"{base}/t/a.npy" in str(e.value) and "HTTP 503" in str(e.value)
    assert "gave up after 2 attempts" in str(e.value)


def test_cut_body_and_reset_retried_never_wrong_data(web):
    store, base = web
    a = np.arange(3000, dtype=np.float64).reshape(1000, 3)
    store.put_npy("/k/a.npy", a)
    url = f"{base}/k/a.npy?backoff_ms=1"
    layout = shardload.discover(url)
    store.fail_next["/k/a.npy"] = [RESET, CUT, CUT, RESET]
    got, info = shardload.load(layout, info=True)
    np.testing.assert_array_equal(np.asarray(got), a)
    # Each cut body is a counted retry; libcurl itself reconnects once, uncounted, when a
    # connection it reused is closed before any answer, so a reset may not be.
    assert not store.fail_next["/k/a.npy"] and 2 <= info.remote_retries <= 4
    # Cut every time: an error naming the URL, not short data.
    layout = shardload.discover(f"{base}/k/a.npy?backoff_ms=1&max_attempts=2")
    store.fail_next["/k/a.npy"] = [CUT] * 40
    with pytest.raises(shardload.ShardReadError) as e:
        layout.read(0, 1000)
    assert f"{base}/k/a.npy" in str(e.value) and "gave up after 2 attempts" in str(e.value)


def test_large_reads_are_split_into_ranged_gets_in_flight(web):
    store, base = web
    a = np.random.default_rng(9).standard_normal((4000, 5))
    store.put_npy("/big/a.npy", a)
    url = f"{base}/big/a.npy?request_bytes=4096&requests_in_flight=4"
    layout = shardload.discover(url)
    before = len(store.requests)
    np.testing.assert_array_equal(layout.read(0, 4000), a)
    ranges = [r[2] for r in store.requests[before:] if r[0] == "GET"]
    # 160000 bytes in parts of at most 4096: each its own ranged GET, none larger.
    sizes = [int(b) - int(f) + 1 for f, b in (r[len("bytes="):].split("-") for r in ranges)]
    assert len(sizes) >= 160000 // 4096 and max(sizes) <= 4096 and sum(sizes) >= 160000


def test_retry_options_checked(web):
    _, base = web
    with pytest.raises(ValueError, match="max_attempts must be an integer"):
        shardload.discover(f"{base}/x.npy?max_attempts=0")
    with pytest.raises(ValueError, match="max_attempts must be an integer"):
        shardload.discover(f"{base}/x.npy", storage_options={"max_attempts": 0})
    # A key http(s) does not take would go to the server: refused, naming those it takes.
    with pytest.raises(ValueError, match=r"storage_options: region, secret_key apply to s3:// "
                                         r"URLs only \(an http\(s\):// URL takes max_attempts, "):
        shardload.discover(f"{base}/x.npy", storage_options={"region": "x", "secret_key": "S",
                                                             "max_attempts": 2})


def test_storage_options_give_an_http_url_its_request_keys(web):
    """storage_options= configures an http(s) store as its query does (before, it was refused
    for http(s) URLs, and the keys had to be written into each URL)."""
    store, base = web
    a = np.arange(40000, dtype=np.float32)
    store.put_npy("/so/a.npy", a)
    store.put_npy("/so/b.npy", a + 1)
    urls = [f"{base}/so/a.npy", f"{base}/so/b.npy"]
    layout = shardload.discover(urls, storage_options={"request_bytes": 4096,
                                                       "requests_in_flight": 4})
    assert all(p.endswith("?request_bytes=4096&requests_in_flight=4") for p in layout.paths)
    before = len(store.requests)
    np.testing.assert_array_equal(layout.read(0, 80000), np.concatenate([a, a + 1]))
    ranges = [r[2] for r in store.requests[before:] if r[0] == "GET"]
    sizes = [int(b) - int(f) + 1 for f, b in (r[len("bytes="):].split("-") for r in ranges)]
    assert len(sizes) >= 2 * 160000 // 4096 and max(sizes) <= 4096
    # Every request of the server had the option taken out of its query.
    assert not any("request_bytes" in r[1] for r in store.requests), store.requests[-1]


@pytest.mark.parametrize("options,found", [
    ({"request_bytes": "4096&token=abc"}, "request_bytes must be an integer"),  # no 2nd key
    ({"request_bytes": "4096#x"}, "request_bytes must be an integer"),
    ({"request_bytes": 4096.0}, "expected a str, int or bool, found float"),
    ({"requests_in_flight": np.int64(3)}, "expected a str, int or bool, found int64"),
    ({"requests_in_flight": None}, "expected a str, int or bool, found NoneType"),
    ({"request_bytes": 2**64}, "request_bytes must be an integer from 4096"),
    ({"requests_in_flight": 0}, "requests_in_flight must be an integer from 1 to 64"),
    ({"region": "us-east-1"}, "region applies to s3:// URLs only"),
])
def test_storage_options_of_an_http_url_smuggle_no_key_and_are_checked(web, options, found):
    """A guard (tenth hostile pass): a value cannot add a key to the URL's query (it is
    percent-encoded, then refused as the option's value), and types, ranges and s3-only keys
    are refused naming the option; no request reaches the server with a smuggled key."""
    store, base = web
    store.put_npy("/so/a.npy", np.arange(10.0))
    with pytest.raises((shardload.LayoutError, TypeError, ValueError), match=re.escape(found)):
        shardload.discover(f"{base}/so/a.npy", storage_options=options)
    assert not any("token" in r[1] for r in store.requests), store.requests


def test_a_refused_head_and_a_server_ignoring_ranges_is_refused_without_the_whole_body(web):
    """A guard (tenth hostile pass): the HEAD refused (405), the GET of byte 0 answered 200
    with the whole 200 MB object. Its size is taken from the Content-Length and the transfer
    is cut there; the next ranged read, answered whole again, is refused naming the URL."""
    store, base = web
    store.put_npy("/big/x.npy", np.arange(25_000_000, dtype=np.float64))
    store.ignore_range = True
    store.fail_next["/big/x.npy"] = [405]
    with pytest.raises(shardload.LayoutError, match=r"big/x\.npy: .*ignored the Range"):
        shardload.discover(f"{base}/big/x.npy")
    assert [r[2] for r in store.requests[:3]] == [None, "bytes=0-0", "bytes=0-511"]


def test_object_changed_after_discover_is_an_error(web):
    store, base = web
    a = np.arange(40, dtype=np.float32).reshape(10, 4)
    store.put_npy("/o/a.npy", a)
    store.put_npy("/o/b.npy", a + 100)
    urls = [f"{base}/o/a.npy", f"{base}/o/b.npy"]
    layout = shardload.discover(urls)
    # The same size, other bytes: only the ETag tells.
    store.put_npy("/o/b.npy", a - 100)
    with pytest.raises(shardload.Error) as e:
        shardload.load(layout)
    assert urls[1] in str(e.value) and "changed" in str(e.value)
    with pytest.raises(shardload.ShardReadError, match="overwritten") as e:
        layout.read(0, 20)
    assert urls[1] in str(e.value)
    # Without an ETag, Last-Modified is the snapshot; the same bytes again read fine.
    store.put_npy("/o/b.npy", a + 100)
    store.etag = False
    layout = shardload.discover(urls)
    np.testing.assert_array_equal(layout.read(0, 20), np.concatenate([a, a + 100]))


def test_no_listing_over_http(web):
    _, base = web
    for source in (f"{base}/d/", f"{base}/d/*.npy", f"{base}/d/shard_{{:04d}}.npy"):
        with pytest.raises(ValueError, match="HTTP has no directory listing") as e:
            shardload.discover(source)
        assert source in str(e.value)


def _self_signed(tmp_path) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl (the command) makes the test's certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return str(cert), str(key)


def test_https_with_a_self_signed_certificate(tmp_path, monkeypatch):
    cert, key = _self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    with serving(tls) as (store, base):
        a = np.arange(30, dtype=np.int32).reshape(10, 3)
        store.put_npy("/s/a.npy", a)
        url = f"{base}/s/a.npy"
        # Not trusted by default: an error naming the URL, not data.
        monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        with pytest.raises(shardload.Error) as e:
            shardload.discover(url)
        assert url in str(e.value)
        monkeypatch.setenv("CURL_CA_BUNDLE", cert)
        np.testing.assert_array_equal(np.asarray(shardload.load(url)), a)


@pytest.mark.parametrize("path", ["/f/x.npy#x", "/f/x.npy#", "/f/#x", "/f/#x/", "/f/a#1.npy",
                                  "/f/x.npy?request_timeout=30#x", "/f/x.npy#x?request_timeout=30",
                                  "/f/x.npy#sig=s3cr3t-frag"])
def test_an_http_url_holding_a_fragment_is_refused_naming_it_before_any_request(web, cli, path):
    """A '#' begins an http(s) URL's fragment, which no request sends: "x.npy#x" read x.npy
    and failed as a Zarr store ("both .zarray and zarr.json exist"), "a#1.npy" read the object
    "a" (another object's rows, where one is there), a fragment after the query became part of
    an option's value. Refused naming the URL, before any request; a '#' of an object's name
    is written %23 (below), an s3:// key's '#' is sent (test_s3's odd keys)."""
    store, base = web
    store.put_npy("/f/x.npy", np.arange(6.0).reshape(3, 2))
    store.put_npy("/f/a", np.full((3, 2), 666.0))
    url = base + path
    for source in (url, [f"{base}/f/x.npy", url]):
        with pytest.raises(ValueError, match="fragment") as e:
            shardload.load(source)
        shown = str(e.value)
        assert "holding '#' is refused" in shown and "%23" in shown, shown
        assert "s3cr3t" not in shown
        assert url.replace("sig=s3cr3t-frag", "sig=***") in shown, shown
    with pytest.raises(ValueError, match="fragment"):
        shardload.discover(url, storage_options={"request_timeout": 30})
    r = subprocess.run([str(cli), "inspect", url], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "holding '#' is refused" in r.stderr, r.stderr
    assert "s3cr3t" not in r.stderr + r.stdout
    assert store.requests == []


def test_a_hash_of_an_objects_name_written_percent_23_loads_that_object(web):
    store, base = web
    store.decode_paths = True
    want = np.arange(8.0).reshape(4, 2)
    store.put_npy("/f/a#1.npy", want)
    store.put_npy("/f/a", np.full((3, 2), 666.0))
    np.testing.assert_array_equal(np.asarray(shardload.load(f"{base}/f/a%231.npy")), want)


def test_an_ipc_object_with_nested_columns_beside_the_read_ones_loads(web):
    """The batches' column lengths are checked at the field node of each top-level column,
    which nested columns (a struct's children, a list's values, a dictionary) come between:
    such a file loads over http(s) as pyarrow reads it."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    store, base = web
    n = 7
    t = pa.table({
        "s": pa.array([{"x": i, "y": [i, i]} for i in range(n)]),
        "l": pa.array([[float(i)] * (i % 3) for i in range(n)], pa.list_(pa.float32())),
        "d": pa.array(["u", "v"] * 3 + ["u"]).dictionary_encode(),
        "a": pa.array(np.arange(n, dtype="f4") * 2),
        "b": pa.array(np.arange(n, dtype="f4") - 1),
    })
    buf = io.BytesIO()
    with ipc.new_file(buf, t.schema) as w:
        for rb in t.to_batches(max_chunksize=3):
            w.write_batch(rb)
    store.put("/nested/x.arrow", buf.getvalue())
    got = shardload.load([f"{base}/nested/x.arrow"], columns=["a", "b"])
    want = np.stack([t["a"].to_numpy(), t["b"].to_numpy()], axis=1)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_a_url_whose_host_is_an_ipv6_address_loads():
    """RFC 3986 writes an IPv6 host in brackets (``http://[::1]:8000/d/x.npy``): the brackets
    were taken for a glob's and the URL refused before any request, in Python and the CLI. The
    wildcards are looked for in the path only; the object loads, with a token too."""
    import socket

    class V6(closing_server.ClosingHTTPServer):
        address_family = socket.AF_INET6

    store = Store()
    expected = np.arange(12, dtype=np.float32).reshape(4, 3)
    store.put_npy("/d/x.npy", expected)
    try:
        server = V6(("::1", 0), type("Bound", (Handler,), {"store": store}))
    except OSError as e:
        pytest.skip(f"no IPv6 loopback here: {e}")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        for url in (f"http://[::1]:{port}/d/x.npy", f"http://[0:0:0:0:0:0:0:1]:{port}/d/x.npy",
                    f"http://[::1]:{port}/d/x.npy?token=tk-s3cr3t"):
            np.testing.assert_array_equal(shardload.discover(url).read(), expected)
        # A glob in the path is still refused as one.
        with pytest.raises(ValueError, match="a glob"):
            shardload.discover(f"http://[::1]:{port}/d/*.npy")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize("name", ["shardload.json", "_meta.json", "shard_meta.json",
                                  "shardload.manifest"])
@pytest.mark.parametrize("server, spelling", [
    ("servlet", "{};jsessionid=ABC"), ("servlet", "{};v=1"), ("servlet", "{}/.;x"),
    ("windows", "{upper}"), ("windows", "{}."), ("windows", "{}%20"), ("windows", "x%5C..%5C{}")])
def test_a_listed_metadata_url_with_path_parameters_is_refused(name: str, server: str,
                                                                spelling: str) -> None:
    """A servlet container (Tomcat, Jetty) cuts each segment's path parameters before it maps
    the path to a file, so "shardload.json;jsessionid=ABC" is served as the sidecar, whose
    bytes a list read as raw were loaded as rows; a Windows server (IIS) serves it for
    "SHARDLOAD.JSON", "shardload.json." and "x\\..\\shardload.json" (hostile pass 30, B5). The
    name compared is the one such a server resolves: refused naming the metadata file."""
    import shardload.numpy as snp

    spelled = spelling.format(name, upper=name.upper())
    with serving() as (store, base):
        store.decode_paths = True
        store.strip_path_parameters = server == "servlet"
        store.windows_paths = server == "windows"
        store.put("/d/part_0.bin", np.arange(8, dtype="<u1").tobytes())
        store.put("/d/part_1.bin", np.arange(8, 16, dtype="<u1").tobytes())
        store.put("/d/shardload.json", json.dumps({"dtype": "u1", "shape": []}).encode())
        meta = b"M" * 40
        for other in ("_meta.json", "shard_meta.json", "shardload.manifest"):
            store.put(f"/d/{other}", meta)
        # The server's own answer is the oracle: it serves the metadata file by that spelling.
        with urllib.request.urlopen(f"{base}/d/{spelled}") as r:
            assert r.read() == store.objects[f"/d/{name}"]
        urls = [f"{base}/d/part_0.bin", f"{base}/d/{spelled}", f"{base}/d/part_1.bin"]
        with pytest.raises(shardload.LayoutError) as e:
            snp.load(urls, format="raw")
        shown = spelled.replace("jsessionid=ABC", "jsessionid=***")  # a session id is a secret
        assert f"{base}/d/{shown}: the dataset's metadata file ({name}), not a shard" \
            in str(e.value), str(e.value)
        # The shards alone load as the server holds them.
        np.testing.assert_array_equal(snp.load([urls[0], urls[2]], format="raw"),
                                      np.arange(16, dtype="<u1"))


@pytest.mark.parametrize("spelled", ["shardload.json", "shardload%2Ejson", "%73hardload.json",
                                     "x%2Fshardload.json", "x%2fshardload.json",
                                     "x%2F..%2Fshardload.json", "shardload.json?v=1"])
def test_a_listed_metadata_url_is_refused_however_its_name_is_encoded(spelled):
    """A list naming a raw directory's sidecar by URL, its name percent-encoded: the server
    decodes it and serves the sidecar, which was loaded as raw rows (the check compared the
    name as written). It is refused naming the metadata file, however it is spelled: its '/'
    encoded too ("x%2Fshardload.json" is the sidecar of x/ to a server that decodes the path
    before it resolves it; the check took the last segment before decoding), or followed by a
    query the server does not read."""
    with serving() as (store, base):
        store.decode_paths = True  # as http.server and nginx decode %XX in a path
        store.put("/d/part_0.bin", np.arange(8, dtype="<u1").tobytes())
        side = json.dumps({"dtype": "u1", "shape": []}).encode()
        store.put("/d/shardload.json", side)
        store.put("/d/x/shardload.json", side)
        with pytest.raises(shardload.LayoutError) as e:
            shardload.discover([f"{base}/d/part_0.bin", f"{base}/d/{spelled}"])
        assert f"{base}/d/{spelled}: the dataset's metadata file (shardload.json), not a shard" \
            in str(e.value), str(e.value)
