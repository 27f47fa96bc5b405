"""A directory over http:// named by its manifest: HTTP has no listing, so
``https://host/d/shardload.manifest`` names the objects. The manifest is a real one: written by
``shardload.index`` of an s3:// copy in moto's server (its snapshots are the objects' sizes and
ETags, which the HTTP server of test_http.py sends alike: the quoted MD5 of a plain upload),
and the objects' bytes and the manifest are then served by that HTTP server on 127.0.0.1."""

from __future__ import annotations

import io
import re
import subprocess

import numpy as np
import pytest

moto = pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
boto3 = pytest.importorskip("boto3")

import shardload  # noqa: E402

import s3_server  # noqa: E402
from test_http import Store, serving  # noqa: E402


@pytest.fixture(scope="module")
def s3():
    with s3_server.serving() as endpoint:
        yield endpoint


@pytest.fixture
def web():
    with serving() as s:
        yield s


def publish(s3: str, store: Store, prefix: str, objects: dict[str, bytes],
            **index_options) -> s3_server.Bucket:
    """``objects`` (name -> bytes) uploaded under ``prefix`` in a new bucket and indexed there,
    then every object of the prefix, the manifest included, served at ``/prefix/NAME``."""
    bucket = s3_server.Bucket(s3, prefix="h-")
    for name, data in objects.items():
        bucket.put(f"{prefix}/{name}", data)
    shardload.index(bucket.url(f"{prefix}/"), storage_options=bucket.options, **index_options)
    got = bucket.client.list_objects_v2(Bucket=bucket.name, Prefix=f"{prefix}/")
    for o in got["Contents"]:
        body = bucket.client.get_object(Bucket=bucket.name, Key=o["Key"])["Body"].read()
        store.put("/" + o["Key"], body)
    assert f"/{prefix}/shardload.manifest" in store.objects
    return bucket


def npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def ragged_npy(seed: int, rows: list[int]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((r, 3, 2)).astype("float32") for r in rows]


def shard_requests(store: Store, prefix: str) -> list[tuple[str, str, str | None]]:
    return [r for r in store.requests
            if r[1].startswith(f"/{prefix}/") and "shardload.manifest" not in r[1]]


def test_npy_directory_from_its_manifest_matches_numpy(s3, web):
    store, base = web
    parts = ragged_npy(1, [7, 0, 1, 13, 5, 2, 11])
    publish(s3, store, "d", {f"shard_{i:04d}.npy": npy_bytes(p) for i, p in enumerate(parts)})
    want = np.concatenate(parts)
    url = f"{base}/d/"

    # Checked: one HEAD per object (size and ETag), no GET of a shard's header.
    before = len(store.requests)
    layout = shardload.discover(url)
    assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status
    assert layout.paths == [f"{base}/d/shard_{i:04d}.npy" for i in range(len(parts))]
    assert layout.total_rows == want.shape[0]
    checks = shard_requests(store, "d")
    assert sorted(m for m, _, _ in checks[before:]) == ["HEAD"] * len(parts), checks[before:]
    np.testing.assert_array_equal(np.asarray(shardload.load(url)), want)
    np.testing.assert_array_equal(np.asarray(shardload.load(url, row_range=(3, 30))), want[3:30])

    # Trusted: the manifest alone (its HEAD and GET).
    before = len(store.requests)
    trusted = shardload.discover(url, trust_manifest=True)
    assert trusted.manifest_state is shardload.ManifestState.TRUSTED
    assert all(p.endswith("/d/shardload.manifest") for _, p, _ in store.requests[before:])
    np.testing.assert_array_equal(np.asarray(shardload.load(url, trust_manifest=True)), want)

    batches = [np.asarray(b).copy() for b in shardload.batches(url, 9)]
    np.testing.assert_array_equal(np.concatenate(batches), want)
    once = shardload.discover_once(url)
    assert once == layout and once.manifest_state is shardload.ManifestState.USED


def test_raw_and_parquet_directories_from_their_manifests(s3, web):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    store, base = web
    rng = np.random.default_rng(3)
    raws = [rng.integers(-1000, 1000, size=(r, 5)).astype(">i4") for r in (4, 1, 17, 0, 6)]
    raw_options = dict(format="raw", dtype=">i4", trailing_shape=(5,), header_bytes=16)
    publish(s3, store, "raw", {f"shard_{i:04d}.bin": b"HDR!" * 4 + p.tobytes()
                               for i, p in enumerate(raws)}, **raw_options)
    layout = shardload.discover(f"{base}/raw/", **raw_options)
    assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status
    np.testing.assert_array_equal(np.asarray(shardload.load(f"{base}/raw/", **raw_options)),
                                  np.concatenate(raws))

    tables = [pa.table({"a": rng.standard_normal(r), "b": rng.standard_normal(r)})
              for r in (13, 1, 29)]
    files = {}
    for i, t in enumerate(tables):
        buf = io.BytesIO()
        pq.write_table(t, buf, row_group_size=4)
        files[f"shard_{i:04d}.parquet"] = buf.getvalue()
    publish(s3, store, "pq", files, columns=["a", "b"])
    want = np.concatenate([np.stack([t["a"].to_numpy(), t["b"].to_numpy()], axis=1)
                           for t in tables])
    layout = shardload.discover(f"{base}/pq/", columns=["a", "b"])
    assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status
    np.testing.assert_array_equal(np.asarray(shardload.load(layout)), want)
    # Other options than indexed: the objects the manifest names are probed instead.
    other = shardload.discover(f"{base}/pq/", columns=["b"])
    assert other.manifest_state is shardload.ManifestState.OTHER_OPTIONS
    assert "probed the objects it names instead" in other.manifest_status
    np.testing.assert_array_equal(np.asarray(shardload.load(other)).reshape(-1), want[:, 1])


def test_stale_manifest_probes_the_objects_it_names(s3, web):
    store, base = web
    parts = ragged_npy(5, [6, 4, 9])
    publish(s3, store, "s", {f"shard_{i:04d}.npy": npy_bytes(p) for i, p in enumerate(parts)})
    url = f"{base}/s/"
    trusted = shardload.discover(url, trust_manifest=True)
    # The same size, other bytes: only the ETag tells.
    parts[1] = parts[1] + 100
    store.put("/s/shard_0001.npy", npy_bytes(parts[1]))
    layout = shardload.discover(url)
    assert layout.manifest_state is shardload.ManifestState.STALE
    assert f"{base}/s/shard_0001.npy" in layout.manifest_status
    assert "probed the objects it names instead" in layout.manifest_status
    np.testing.assert_array_equal(np.asarray(shardload.load(url)), np.concatenate(parts))
    # Trusted, the manifest's snapshot: the load's own check names the object.
    with pytest.raises(shardload.Error) as e:
        shardload.load(trusted)
    assert f"{base}/s/shard_0001.npy" in str(e.value) and "changed" in str(e.value)
    # Another shape in the new bytes: probing sees it (the manifest's rows are not taken).
    parts[2] = parts[2][:2]
    store.put("/s/shard_0002.npy", npy_bytes(parts[2]))
    layout = shardload.discover(url)
    assert layout.manifest_state is shardload.ManifestState.STALE and layout.total_rows == 12


def test_object_gone_is_an_error_naming_its_url(s3, web):
    store, base = web
    parts = ragged_npy(7, [3, 5])
    publish(s3, store, "g", {f"shard_{i:04d}.npy": npy_bytes(p) for i, p in enumerate(parts)})
    trusted = shardload.discover(f"{base}/g/", trust_manifest=True)
    del store.objects["/g/shard_0001.npy"]
    gone = f"{base}/g/shard_0001.npy"
    with pytest.raises(shardload.Error) as e:
        shardload.discover(f"{base}/g/")
    assert gone in str(e.value) and "HTTP 404" in str(e.value), str(e.value)
    with pytest.raises(shardload.Error) as e:
        shardload.load(trusted)
    assert gone in str(e.value) and "HTTP 404" in str(e.value), str(e.value)


def test_no_manifest_says_both_no_listing_and_no_manifest(web):
    store, base = web
    store.put_npy("/n/shard_0000.npy", np.zeros((2, 2)))
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(f"{base}/n/")
    msg = str(e.value)
    assert "HTTP has no directory listing" in msg, msg
    assert f"{base}/n/shardload.manifest" in msg and "HTTP 404" in msg, msg
    # A manifest refused (403, to the HEAD and to the GET that stands in for it) is that
    # error, not "absent".
    store.put("/f/shardload.manifest", b"x")
    store.fail_next["/f/shardload.manifest"] = [403, 403]
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(f"{base}/f/")
    assert f"{base}/f/shardload.manifest" in str(e.value) and "HTTP 403" in str(e.value)
    # Without using a manifest there is nothing to discover by.
    with pytest.raises(ValueError, match="HTTP has no directory listing"):
        shardload.discover(f"{base}/n/*.npy")


def test_query_of_the_directory_goes_to_the_manifest_and_every_object(s3, web):
    """A signed-URL-style query (the server's) is sent with the manifest's request and with
    every object's; shardload's own keys (max_attempts ...) are taken out of it."""
    store, base = web
    parts = ragged_npy(9, [4, 0, 6])
    publish(s3, store, "q", {f"shard_{i:04d}.npy": npy_bytes(p) for i, p in enumerate(parts)})
    url = f"{base}/q/?token=abc%2Fdef&max_attempts=2"
    before = len(store.requests)
    layout = shardload.discover(url)
    assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status
    # The token (a secret) is named by a handle in every path, and sent with every request.
    assert re.fullmatch(f"{re.escape(base)}/q/shard_0001.npy"
                        r"\?credentials=[0-9a-f]{32}&max_attempts=2", layout.paths[1]), \
        layout.paths[1]
    np.testing.assert_array_equal(np.asarray(shardload.load(layout)), np.concatenate(parts))
    sent = [p for _, p, _ in store.requests[before:]]
    assert any(p.startswith("/q/shardload.manifest?") for p in sent), sent
    assert sent and all(p.endswith("?token=abc%2Fdef") for p in sent), sent


def test_index_over_http_and_the_manifest_url_as_a_source(web):
    store, base = web
    with pytest.raises(ValueError, match="cannot be written over HTTP") as e:
        shardload.index(f"{base}/d/")
    assert f"{base}/d/" in str(e.value)
    assert not any(m == "PUT" for m, _, _ in store.requests)
    # The manifest's own URL is an object, as a local manifest file given as the source is.
    store.put("/m/shardload.manifest", b"SLMANIF\n" + b"\0" * 40)
    with pytest.raises(shardload.LayoutError, match="cannot tell the format"):
        shardload.discover(f"{base}/m/shardload.manifest")


def test_cli_read_and_index_of_an_http_directory(s3, web, cli):
    store, base = web
    parts = ragged_npy(11, [5, 8])
    publish(s3, store, "c", {f"shard_{i:04d}.npy": npy_bytes(p) for i, p in enumerate(parts)})
    r = subprocess.run([str(cli), "read", f"{base}/c/", "--no-verify"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "(13, 3, 2)" in r.stdout and "manifest: used" in r.stdout, r.stdout
    r = subprocess.run([str(cli), "index", f"{base}/c/"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1 and "cannot be written over HTTP" in r.stderr, (r.returncode,
                                                                            r.stderr)


def test_verify_over_s3_and_http(s3, web, cli):
    """verify of a bucket's manifest (and of the same objects served over HTTP): each object
    hashed through ranged reads, compared with the manifest's xxh3; an object overwritten with
    other bytes of the same size is named, the others are not."""
    store, base = web
    parts = ragged_npy(13, [300, 0, 41, 77])
    bucket = publish(s3, store, "v",
                     {f"shard_{i:04d}.npy": npy_bytes(p) for i, p in enumerate(parts)},
                     checksum="xxh3")
    opts = bucket.options
    for on_host in (True, False):
        assert shardload.verify(bucket.url("v/"), storage_options=opts, on_host=on_host) == []
        assert shardload.verify(f"{base}/v/", on_host=on_host) == []
    assert shardload.verify(bucket.url("v/shardload.manifest"), storage_options=opts) == []
    assert shardload.verify(f"{base}/v/shardload.manifest?max_attempts=2") == []
    flipped = npy_bytes(parts[2] + 1)
    bucket.put("v/shard_0002.npy", flipped)
    store.put("/v/shard_0002.npy", flipped)
    for on_host in (True, False):
        for bad in (shardload.verify(bucket.url("v/"), storage_options=opts, on_host=on_host),
                    shardload.verify(f"{base}/v/", on_host=on_host)):
            assert [(m.shard, m.path.split("?")[0][-14:]) for m in bad] == [(2, "shard_0002.npy")]
            assert "xxh3" in bad[0].what and "expected, found" in bad[0].what
    args = [str(cli), "verify", bucket.url("v/")] + [
        a for k, v in opts.items() for a in ("--storage-option", f"{k}={v}")]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert re.search(r"/v/shard_0002\.npy\?endpoint_override=[^ ]*: xxh3 0x", r.stderr), r.stderr
    assert "1 of 4 shards differ" in r.stderr, r.stderr
    bucket.put("v/shard_0002.npy", npy_bytes(parts[2]))
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "every checksum matches" in r.stdout, (r.stdout, r.stderr)


def test_manifest_of_a_local_copy_names_the_objects(web, tmp_path):
    """A manifest indexed from a local copy records the files' snapshots (times, inode), which
    no HTTP answer matches: the check finds it stale and the objects it names are probed, so
    it still serves as the directory's listing; trusted, the load's own check refuses it."""
    store, base = web
    parts = ragged_npy(17, [5, 0, 8])
    for i, p in enumerate(parts):
        np.save(tmp_path / f"shard_{i:04d}.npy", p)
    shardload.index(tmp_path)
    for f in tmp_path.iterdir():
        store.put(f"/l/{f.name}", f.read_bytes())
    layout = shardload.discover(f"{base}/l/")
    assert layout.manifest_state is shardload.ManifestState.STALE, layout.manifest_status
    assert "probed the objects it names instead" in layout.manifest_status
    np.testing.assert_array_equal(np.asarray(shardload.load(layout)), np.concatenate(parts))
    with pytest.raises(shardload.Error, match="changed"):
        shardload.load(f"{base}/l/", trust_manifest=True)


@pytest.mark.parametrize("trust", [False, True])
def test_a_manifest_name_holding_a_hash_is_encoded_not_cut_at_it(s3, web, trust):
    """Keys holding '#' ("a#0.npy", "a#1.npy": valid S3 keys, indexed in object storage and
    served over http as the objects are here): each object's URL ended at its '#' (a
    fragment, never sent), so every shard read the object "/h/a" instead, its rows loaded
    silently; then they were refused. Now percent-encoded in the URL ("a%230.npy"): the server
    decodes the path and serves the object the manifest names."""
    store, base = web
    store.decode_paths = True
    parts = [np.full((3, 2), i) for i in range(2)]
    publish(s3, store, "h", {f"a#{i}.npy": npy_bytes(parts[i]) for i in range(2)})
    store.put("/h/a", npy_bytes(np.full((3, 2), 666)))
    layout = shardload.discover(f"{base}/h/", trust_manifest=trust)
    assert layout.paths == [f"{base}/h/a%230.npy", f"{base}/h/a%231.npy"]
    np.testing.assert_array_equal(np.asarray(shardload.load(f"{base}/h/", trust_manifest=trust)),
                                  np.concatenate(parts))


def test_a_manifest_name_holding_a_percent_is_encoded_not_decoded_by_the_server(s3, web):
    """Names in an http(s) directory's manifest are keys (written by an index of object
    storage or of a local directory; none is written over http). A key holding '%'
    ("q%2Fx_0.npy") was sent as written, and a server that decodes paths (as most do, S3's
    own included) served another object ("q/x_0.npy"), whose rows were loaded silently; then
    it was refused. Now sent percent-encoded ("q%252Fx_0.npy"): the server decodes it to the
    key and serves that object."""
    store, base = web
    store.decode_paths = True
    parts = [np.full((3, 2), i) for i in range(2)]
    publish(s3, store, "p", {f"q%2Fx_{i}.npy": npy_bytes(parts[i]) for i in range(2)})
    for i in range(2):
        store.put(f"/p/q%2Fx_{i}.npy".replace("%2F", "/"), npy_bytes(np.full((3, 2), 666)))
    np.testing.assert_array_equal(np.asarray(shardload.load(f"{base}/p/")), np.concatenate(parts))


@pytest.mark.parametrize("trust", [False, True])
def test_a_manifest_name_with_a_space_or_past_ascii_is_encoded(s3, web, trust):
    """Keys with a space or UTF-8 beyond ASCII ("a b_0.npy", "é_1.npy", valid S3 keys) went
    into the request URL raw: libcurl refused the space ("URL using bad/illegal format"), and
    a byte past ASCII was sent as libcurl chose. Each is now percent-encoded in the key's URL,
    as '%', '#' and '?' are, and the server decodes it to the object the manifest names."""
    store, base = web
    store.decode_paths = True
    parts = [np.full((3, 2), i) for i in range(3)]
    publish(s3, store, "s", {f"a b\u00e9\t_{i}.npy": npy_bytes(p) for i, p in enumerate(parts)})
    encoded = [f"/s/a%20b%C3%A9%09_{i}.npy" for i in range(3)]
    layout = shardload.discover(f"{base}/s/", trust_manifest=trust)
    assert layout.paths == [base + e for e in encoded]
    np.testing.assert_array_equal(np.asarray(shardload.load(f"{base}/s/", trust_manifest=trust)),
                                  np.concatenate(parts))
    assert {r[1] for r in shard_requests(store, "s")} == set(encoded)


def test_a_url_naming_an_object_with_a_space_is_encoded(web):
    """A URL the user writes with a space ("https://host/d/a b.npy") was refused by libcurl;
    its path's spaces, controls and bytes past ASCII are sent percent-encoded ("a%20b.npy"),
    what it already holds encoded stays as written."""
    store, base = web
    store.decode_paths = True
    want = np.arange(6, dtype=np.int32).reshape(3, 2)
    store.put("/d/a b.npy", npy_bytes(want))
    store.put("/d/\u00e9 %.npy", npy_bytes(want + 1))
    np.testing.assert_array_equal(np.asarray(shardload.load(f"{base}/d/a b.npy")), want)
    np.testing.assert_array_equal(np.asarray(shardload.load(f"{base}/d/\u00e9 %25.npy")), want + 1)
    assert {r[1] for r in store.requests} == {"/d/a%20b.npy", "/d/%C3%A9%20%25.npy"}


def test_a_urls_query_with_a_space_a_control_or_past_ascii_is_encoded(web):
    """The query went as written: a space or a control made libcurl refuse the URL ("URL using
    bad/illegal format or missing URL", naming neither), and a byte past ASCII went raw (a
    server reading latin-1 echoed a token as mojibake, which no redaction hides). They are
    percent-encoded as the path's are; what is encoded already, '&' and '=' stay as written."""
    store, base = web
    want = np.arange(6, dtype=np.int32).reshape(3, 2)
    store.put("/d/x.npy", npy_bytes(want))
    got = shardload.load(f"{base}/d/x.npy?v=1 2&w=\u00e9&c=\x01&e=%41")
    np.testing.assert_array_equal(np.asarray(got), want)
    assert {r[1] for r in store.requests} == {"/d/x.npy?v=1%202&w=%C3%A9&c=%01&e=%41"}
