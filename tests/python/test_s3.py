"""Object storage: shards in an S3 bucket, read through Arrow's S3 client against a real
S3-compatible server (moto's server mode) that the tests start on 127.0.0.1."""

from __future__ import annotations

import io
import json
import subprocess
import urllib.parse
import uuid

import numpy as np
import pytest

moto = pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
boto3 = pytest.importorskip("boto3")

import shardload  # noqa: E402

import s3_server  # noqa: E402
from s3_server import Bucket  # noqa: E402
from conftest import ROOT  # noqa: E402


def _start_server(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    try:
        return s3_server.start(env)
    except RuntimeError as e:
        pytest.fail(str(e))


_stop = s3_server.stop


def _ragged(rng: np.random.Generator, rows: list[int], trailing: tuple[int, ...],
            dtype: str) -> list[np.ndarray]:
    return [rng.standard_normal((r, *trailing)).astype(dtype) for r in rows]


def test_npy_directory_ragged_matches_numpy(bucket):
    rng = np.random.default_rng(1)
    parts = _ragged(rng, [7, 0, 1, 13, 5, 2, 11, 3, 9, 4, 6, 8], (3, 2), "float32")
    for i, p in enumerate(parts):
        bucket.put_npy(f"data/shard_{i:04d}.npy", p)
    bucket.put("data/notes.txt", b"not a shard")
    want = np.concatenate(parts)
    layout = shardload.discover(bucket.url("data/"), storage_options=bucket.options)
    assert layout.total_rows == want.shape[0]
    assert len(layout.paths) == 12
    assert layout.paths[10].startswith(bucket.url("data/shard_0010.npy"))
    got = shardload.load(bucket.url("data/"), storage_options=bucket.options, overdecompose=3)
    np.testing.assert_array_equal(np.asarray(got), want)
    # A prefix without the trailing '/' is the same directory.
    got = shardload.load(bucket.url("data"), storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_npy_row_range_glob_and_list(bucket):
    rng = np.random.default_rng(2)
    parts = _ragged(rng, [5, 9, 2, 14, 6], (4,), "int64")
    for i, p in enumerate(parts):
        bucket.put_npy(f"g/part-{i}.npy", p)
    want = np.concatenate(parts)
    got = shardload.load(bucket.url("g/part-*.npy"), storage_options=bucket.options,
                         row_range=(3, 31))
    np.testing.assert_array_equal(np.asarray(got), want[3:31])
    urls = [bucket.url(f"g/part-{i}.npy") for i in (3, 0)]
    got = shardload.load(urls, storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(got), np.concatenate([parts[3], parts[0]]))
    got = shardload.load(bucket.url("g/part-{}.npy"), storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(got), want)
    # A layout read on the host (no Legate) reads the same ranges.
    layout = shardload.discover(bucket.url("g/part-*.npy"), storage_options=bucket.options)
    np.testing.assert_array_equal(layout.read(4, 20), want[4:20])


def test_raw_ragged_big_endian_with_header(bucket):
    rng = np.random.default_rng(3)
    rows = [4, 1, 17, 0, 6]
    parts = [rng.integers(-1000, 1000, size=(r, 5)).astype(">i4") for r in rows]
    for i, p in enumerate(parts):
        bucket.put(f"raw/shard_{i:04d}.bin", b"HDR!" * 4 + p.tobytes())
    got = shardload.load(bucket.url("raw/"), format="raw", dtype=">i4", trailing_shape=(5,),
                         header_bytes=16, storage_options=bucket.options, row_range=(2, 25))
    np.testing.assert_array_equal(np.asarray(got), np.concatenate(parts)[2:25])


def test_raw_sidecar_beside_the_objects(bucket):
    rng = np.random.default_rng(5)
    parts = [rng.standard_normal((r, 3)).astype("<f8") for r in (6, 2, 9)]
    for i, p in enumerate(parts):
        bucket.put(f"rs/shard_{i:04d}.bin", p.tobytes())
    bucket.put("rs/shardload.json", b'{"dtype": "<f8", "shape": [3]}')
    got = shardload.load(bucket.url("rs/"), format="raw", storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(got), np.concatenate(parts))


def test_raw_sidecar_rows_list_gives_each_object_its_own_rows(bucket):
    # "rows" lists each shard's rows by position: every object gets its own entry, also when
    # the objects are probed on several threads.
    rng = np.random.default_rng(6)
    rows = [6, 2, 9, 0, 4]
    parts = [rng.standard_normal((r, 3)).astype("<f8") for r in rows]
    for i, p in enumerate(parts):
        bucket.put(f"rl/shard_{i:04d}.bin", p.tobytes())
    bucket.put("rl/shardload.json", json.dumps(
        {"dtype": "<f8", "shape": [3], "header_bytes": 0, "rows": rows}).encode())
    layout = shardload.discover(bucket.url("rl/"), format="raw", storage_options=bucket.options)
    assert list(layout.shard_rows) == rows
    got = shardload.load(bucket.url("rl/"), format="raw", storage_options=bucket.options)
    np.testing.assert_array_equal(np.asarray(got), np.concatenate(parts))


def test_cli_read_s3(bucket, cli):
    rng = np.random.default_rng(4)
    parts = _ragged(rng, [3, 8, 5], (2,), "float64")
    for i, p in enumerate(parts):
        bucket.put_npy(f"c/shard_{i:04d}.npy", p)
    opts = [f"--storage-option=endpoint_override={bucket.endpoint}",
            "--storage-option", "scheme=http", "--storage-option", "region=us-east-1"]
    r = subprocess.run([str(cli), "inspect", bucket.url("c/"), *opts],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "16" in r.stdout and "shard_0002.npy" in r.stdout
    r = subprocess.run([str(cli), "read", bucket.url("c/"), "--no-verify", *opts],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "16" in r.stdout, r.stdout
    assert "remote retries: 0" in r.stdout, r.stdout
    r = subprocess.run([str(cli), "inspect", "/tmp", "--storage-option", "scheme=http"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "s3:// SOURCEs only" in r.stderr


def test_missing_object_and_bucket_name_the_url(bucket):
    bucket.put_npy("m/shard_0000.npy", np.zeros((2, 2)))
    url = bucket.url("m/shard_0001.npy")
    with pytest.raises(shardload.Error) as e:
        shardload.discover([bucket.url("m/shard_0000.npy"), url],
                           storage_options=bucket.options)
    assert url in str(e.value)
    missing = "s3://no-such-bucket-" + uuid.uuid4().hex[:8] + "/d/"
    with pytest.raises(shardload.Error) as e:
        shardload.discover(missing, storage_options=bucket.options)
    assert missing.rstrip("/") in str(e.value)
    with pytest.raises(shardload.Error) as e:
        shardload.discover(bucket.url("nothing-here/"), storage_options=bucket.options)
    assert bucket.url("nothing-here") in str(e.value)


def test_a_missing_key_that_is_no_object_and_no_prefix_is_a_source_not_found(bucket):
    """`s3://B/d` with nothing at `d` nor under `d/` was a ShardReadError ("no such object or
    prefix", an OSError of a read) where `s3://B/d/`, a missing local file and a missing local
    directory are SourceNotFoundError: the same fault, one error class, naming the URL."""
    bucket.put_npy("there/shard_0000.npy", np.zeros((2, 2)))
    for key in ("nothing-here", "there/shard_0009.npy"):
        url = bucket.url(key)
        with pytest.raises(shardload.SourceNotFoundError) as e:
            shardload.discover(url, storage_options=bucket.options)
        assert url in str(e.value) and "no such object or prefix" in str(e.value)
        assert isinstance(e.value, FileNotFoundError)


def test_a_directory_urls_glob_hint_keeps_its_query_at_the_end(bucket):
    """A prefix of objects that are not numbered: the error suggests a glob, and with the
    store's options in the URL's query that glob is one that works (the query after the
    pattern, not the pattern after the query)."""
    want = np.arange(12, dtype=np.float32).reshape(6, 2)
    bucket.put_npy("g/alpha.npy", want[:4])
    bucket.put_npy("g/beta.npy", want[4:])
    query = "?" + urllib.parse.urlencode(bucket.options)
    with pytest.raises(shardload.Error) as e:
        shardload.discover(bucket.url("g/") + query)
    glob = bucket.url("g/*.npy") + query
    assert f"pass a glob '{glob}'" in str(e.value), e.value
    np.testing.assert_array_equal(np.asarray(shardload.load(glob)), want)


@pytest.mark.parametrize("name", ["sp ace", "per%25cent", "pct%41", "plus+sign", "hash#x",
                                  "br[ac]ket", "star*", "uni-\u00fc", "amp&x", "eq=x", "til~de"])
def test_odd_object_names_are_read_as_listed_and_as_spelled(bucket, name):
    """Keys are taken literally (never percent-decoded), and a key that looks like a glob is
    that object where it exists, as a file is."""
    parts = [np.arange(6, dtype=np.int32).reshape(3, 2) + 10 * i for i in range(2)]
    for i, p in enumerate(parts):
        bucket.put_npy(f"odd/{name}_{i:04d}.npy", p)
    # A decoy that the percent-decoded or globbed spelling would name instead.
    bucket.put_npy("odd/decoy_0000.npy", np.full((5, 2), -1, dtype=np.int32))
    got = shardload.load(bucket.url("odd/"), storage_options=bucket.options,
                         pattern=name + "_{:04d}.npy")
    np.testing.assert_array_equal(np.asarray(got), np.concatenate(parts))
    one = bucket.url(f"odd/{name}_0001.npy")
    layout = shardload.discover(one, storage_options=bucket.options)
    assert [p.split("?")[0] for p in layout.paths] == [one]
    np.testing.assert_array_equal(layout.read(), parts[1])


@pytest.mark.parametrize("name", ["a{b}.npy", "v{2}.npy", "x_{:04d}.npy", "{}"])
def test_a_key_spelled_like_a_numbered_pattern_is_that_object(bucket, name):
    """Braces in a key's last part: the object of that name is read, not a pattern (which
    would be refused as one, or would number other objects)."""
    want = np.arange(10, dtype=np.int16).reshape(5, 2)
    bucket.put_npy(f"br/{name}", want)
    # What the pattern would name if the key were taken as one.
    bucket.put_npy("br/x_0000.npy", np.full((3, 2), -1, dtype=np.int16))
    bucket.put_npy("br/0000", np.full((3, 2), -2, dtype=np.int16))
    one = bucket.url(f"br/{name}")
    layout = shardload.discover(one, storage_options=bucket.options)
    assert [p.split("?")[0] for p in layout.paths] == [one]
    np.testing.assert_array_equal(np.asarray(shardload.load(layout)), want)
    np.testing.assert_array_equal(
        np.asarray(shardload.load(bucket.url("br/"), pattern=name,
                                  storage_options=bucket.options)), want)


def test_a_key_holding_a_question_mark_is_a_clear_error(bucket):
    bucket.put_npy("qm/a?b_0000.npy", np.zeros((2, 2)))
    for source in (bucket.url("qm/"), bucket.url("qm/a?b_0000.npy")):
        with pytest.raises((shardload.Error, ValueError)) as e:
            shardload.discover(source, storage_options=bucket.options)
        msg = str(e.value)
        assert "a?b_0000.npy" in msg and "cannot be named by an s3:// URL" in msg, msg



@pytest.mark.parametrize("how", ["directory", "glob", "pattern", "manifest"])
def test_a_listed_key_whose_rest_reads_as_store_options_is_refused(bucket, tmp_path,
                                                                   monkeypatch, how):
    """A key holding '?' whose rest is valid store options
    ("a?endpoint_override=HOST&scheme=http&region=us-east-0.npy"), listed under a prefix read
    with the endpoint from the environment (no query of the user's): each shard's URL took the
    key's rest as its options, and shardload read key "d/a" from the server the key named (the
    rows of that server, not the objects'), signing with the user's credentials; from a
    directory (the scan takes the names as one numbered group), a glob, the pattern itself or a
    manifest that names such objects. Refused naming the object, before any shard is read."""
    with s3_server.serving() as other:
        theirs = Bucket(other)
        theirs.name = bucket.name  # the same bucket name on the server the key names
        theirs.client.create_bucket(Bucket=theirs.name)
        theirs.put_npy("d/a", np.full((4, 2), 666))
        names = [f"a?endpoint_override={other}&scheme=http&region=us-east-{i}.npy"
                 for i in range(2)]
        for i, name in enumerate(names):
            bucket.put_npy(f"d/{name}", np.full((4, 2), i))
        if how == "manifest":
            for i, name in enumerate(names):
                np.save(tmp_path / name, np.full((4, 2), i))
            shardload.index(tmp_path)
            bucket.upload("d/shardload.manifest", tmp_path / "shardload.manifest")
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{bucket.endpoint}")
        source, options = {
            "directory": (bucket.url("d/"), {}),
            "glob": (bucket.url("d/*.npy"), {}),
            "pattern": (bucket.url("d/"),
                        {"pattern": names[0].replace("us-east-0", "us-east-{}")}),
            "manifest": (bucket.url("d/"), {"trust_manifest": True}),
        }[how]
        with pytest.raises(shardload.LayoutError) as e:
            np.asarray(shardload.load(source, **options))
        msg = str(e.value)
        assert "cannot be named by an s3:// URL" in msg and "a?endpoint_override=" in msg, msg

def test_object_overwritten_after_discover_is_an_error(bucket):
    a = np.arange(40, dtype=np.float32).reshape(10, 4)
    bucket.put_npy("o/shard_0000.npy", a)
    bucket.put_npy("o/shard_0001.npy", a + 100)
    layout = shardload.discover(bucket.url("o/"), storage_options=bucket.options)
    # The same size, other bytes: only the ETag tells.
    bucket.put_npy("o/shard_0001.npy", a - 100)
    with pytest.raises(shardload.Error) as e:
        shardload.load(layout)
    assert "shard_0001.npy" in str(e.value) and "changed" in str(e.value)
    with pytest.raises(shardload.ShardReadError, match="overwritten") as e:
        layout.read(0, 20)
    assert bucket.url("o/shard_0001.npy") in str(e.value)
    # The same bytes again: the same ETag, and the data is what discovery saw.
    bucket.put_npy("o/shard_0001.npy", a + 100)
    np.testing.assert_array_equal(layout.read(0, 20), np.concatenate([a, a + 100]))


def test_wrong_credentials_are_a_clear_error(server):
    """A server that checks signatures (moto does after its first unchecked requests): the
    keys it does not know are refused with 403, an error naming the URL."""
    proc, endpoint = _start_server({"INITIAL_NO_AUTH_ACTION_COUNT": "2"})
    try:
        b = Bucket(endpoint)  # the two unchecked requests: the bucket and this object
        b.put_npy("a/shard_0000.npy", np.zeros((3, 2)))
        url = b.url("a/shard_0000.npy")
        with pytest.raises(shardload.Error) as e:
            shardload.discover(url, storage_options=b.options)
        msg = str(e.value)
        assert url in msg and ("403" in msg or "InvalidAccessKeyId" in msg or
                               "ACCESS_DENIED" in msg or "denied" in msg.lower()), msg
        assert getattr(e.value, "errno", None) in (None, 13)
    finally:
        _stop(proc)


@pytest.mark.parametrize("compress", [False, True])
def test_npz_archives_ragged(bucket, compress):
    """npz archives (stored members read in place, deflated ones inflated from a stream of
    ranged GETs), compared with numpy."""
    rng = np.random.default_rng(31 + compress)
    parts = [rng.standard_normal((n, 3)).astype("<f4") for n in [9, 0, 25, 4]]
    for i, p in enumerate(parts):
        buf = io.BytesIO()
        (np.savez_compressed if compress else np.savez)(buf, x=p, y=p[:, :1])
        bucket.put(f"z/shard_{i:04d}.npz", buf.getvalue())
    want = np.concatenate(parts)
    got = shardload.load(bucket.url("z/"), storage_options=bucket.options, dataset="x")
    np.testing.assert_array_equal(np.asarray(got), want)
    layout = shardload.discover(bucket.url("z/"), storage_options=bucket.options, dataset="x")
    np.testing.assert_array_equal(layout.read(5, 33), want[5:33])


def test_reader_that_opens_paths_itself_is_refused(bucket):
    # A reader registered from Python opens its paths by name, which object storage has not.
    shardload.register_reader("s3-refused-rows", read=lambda p, lo, hi: np.zeros((hi - lo, 2)),
                              count_rows=lambda p: 3)
    url = bucket.url("h/a.rows")
    with pytest.raises(shardload.LayoutError,
                       match=r"a\.rows: the custom format is not yet supported for s3:// "
                             r"sources \(npy, raw, hdf5, parquet, arrow, zarr and npz are\)"):
        shardload.load([url], reader="s3-refused-rows")


@pytest.mark.parametrize("query", ["no_such_option=1", "scheme=ftp&endpoint_override=127.0.0.1:9"])
def test_a_first_s3_url_that_makes_no_client_leaves_the_process_exiting_cleanly(query):
    """The first s3:// URL of a process initialises S3; where its client could not be made
    (an option Arrow does not know, a scheme it refuses), the error was raised, then the
    process crashed at exit (SIGSEGV: the AWS SDK's state was never finalised, "FinalizeS3
    was not called")."""
    import os
    import sys

    url = f"s3://b/x.npy?{query}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    script = ("import shardload\n"
              "try:\n"
              f"    shardload.discover({url!r})\n"
              "except ValueError as e:\n"
              "    print('refused:', e)\n")
    py = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                        text=True, timeout=120)
    assert py.returncode == 0 and py.stdout.startswith("refused: "), (py.returncode, py.stdout,
                                                                      py.stderr)
    assert "FinalizeS3" not in py.stderr, py.stderr
    cli = subprocess.run([str(ROOT / "build" / "shardload"), "inspect", url], env=env,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode in (1, 2) and "x.npy" in cli.stderr, (cli.returncode, cli.stderr)
    assert "FinalizeS3" not in cli.stderr, cli.stderr


@pytest.mark.parametrize("first", ["s3://bkt/x.npy?frobnicate=1",
                                   "s3://bkt/x.npy?allow_bucket_deletion=maybe",
                                   "s3://a b/x.npy"])
def test_a_refused_s3_url_then_a_region_look_up_ends_the_process_with_its_status(first):
    """A first s3:// URL refused while its options are parsed (an option Arrow does not know, a
    bad value of an option only Arrow takes, an unparsable URL), then a URL whose bucket's region
    Arrow looks up (no region, no endpoint: the look-up is tried, and fails where AWS cannot be
    reached, an OSError): the look-up made Arrow's first client, and with it the static state
    that S3's finalization uses, after the exit handler was registered; that state was gone when
    the handler ran, and the process ended with SIGSEGV after the script's last line."""
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    script = ("import shardload, sys\n"
              "for url in sys.argv[1:]:\n"
              "    try:\n"
              "        shardload.discover(url)\n"
              "    except (ValueError, OSError) as e:\n"
              "        print('refused:', type(e).__name__)\n"
              "print('end of script')\n")
    py = subprocess.run([sys.executable, "-c", script, first, "s3://bkt/x.npy"], env=env,
                        capture_output=True, text=True, timeout=300)
    assert py.stdout.splitlines()[-1:] == ["end of script"], (py.stdout, py.stderr[-2000:])
    assert py.stdout.startswith("refused: "), py.stdout
    assert py.returncode == 0, (py.returncode, py.stdout, py.stderr[-2000:])


def test_storage_options_checked():
    with pytest.raises(ValueError, match="s3:// URLs only"):
        shardload.discover("/tmp", storage_options={"scheme": "http"})
    with pytest.raises(TypeError, match="storage_options"):
        shardload.discover("s3://b/d/", storage_options=[("scheme", "http")])
    with pytest.raises(ValueError, match="bad object-storage URL or options"):
        shardload.discover("s3://b/d/x.npy", storage_options={"no_such_option": "1"})


EMPTY_SEGMENT_SOURCES = ["a//", "a///", "a//shard_*.npy", "a//shard_{:04d}.npy",
                         "a//shard_0000.npy", "x//a/", "a//b/shard_0000.npy"]


@pytest.mark.parametrize("path", ["signed", "arrow"])
def test_a_source_whose_key_holds_an_empty_segment_is_refused_before_any_request(
        server: str, path: str) -> None:
    """s3://B/a// was listed as a/ (the LIST drops an empty segment at the prefix's end) while
    the names listed were read as a//NAME: with 3 shards under a// and 2 under a/, a load gave
    a//'s first 2 shards and no error, and index wrote a//shardload.manifest of those 2. A
    source whose key holds an empty segment anywhere is refused naming it, before any request
    (as a save to one is): a discovery, a load and an index send none and write nothing."""
    import shardload.numpy as snp
    from s3_fault_proxy import FaultProxy

    with FaultProxy(server) as proxy:
        bucket = Bucket(server, endpoint=proxy.endpoint)
        options = bucket.options if path == "signed" else {**bucket.options,
                                                           **s3_server.ARROWS_CLIENT}
        x = np.arange(24.0).reshape(12, 2)
        for i in range(3):
            bucket.put_npy(f"a//shard_{i:04d}.npy", x[4 * i:4 * i + 4])
        for i in range(2):
            bucket.put_npy(f"a/shard_{i:04d}.npy", np.ones((4, 2)))
        before = {k: bucket.get(k) for k in bucket.keys()}
        proxy.log.clear()
        refused = r"(the key holds|the URL ends in) an empty segment \('//'\)"
        for key in EMPTY_SEGMENT_SOURCES:
            source = bucket.url(key)
            shown = source[:source.rfind("/") + 1]  # a glob's or a pattern's prefix at least
            with pytest.raises(ValueError, match=refused) as e:
                shardload.discover(source, storage_options=options)
            assert shown in str(e.value), str(e.value)
        with pytest.raises(ValueError, match=refused):
            snp.load(bucket.url("a//"), storage_options=options)
        with pytest.raises(ValueError, match=refused):
            shardload.index(bucket.url("a//"), storage_options=options)
        assert proxy.log == []
        assert {k: bucket.get(k) for k in bucket.keys()} == before
        # The prefix spelled with one '/' is a/, and loads.
        np.testing.assert_array_equal(snp.load(bucket.url("a/"), storage_options=options),
                                      np.ones((8, 2)))


def test_a_key_with_an_empty_segment_lists_no_phantom_entry(bucket):
    """A key `d//x.npy` makes a LIST of `d/` answer the common prefix `d//`, which Arrow names
    `d` like the directory itself: no glob or directory of `d/` takes it for an entry `d/d`
    (which is no object: the load failed naming it), and the shards beside it load."""
    rng = np.random.default_rng(4)
    parts = _ragged(rng, [3, 5], (2,), "float32")
    for i, p in enumerate(parts):
        bucket.put_npy(f"e/shard_{i:04d}.npy", p)
    bucket.put_npy("e//x.npy", parts[0])
    want = np.concatenate(parts)
    for source in ("e/", "e/*", "e/shard_*.npy"):
        layout = shardload.discover(bucket.url(source), storage_options=bucket.options)
        assert [p.split("?")[0] for p in layout.paths] == [
            bucket.url(f"e/shard_{i:04d}.npy") for i in range(2)], source
        np.testing.assert_array_equal(layout.read(0, layout.total_rows), want)
