"""Parquet and Arrow IPC shards in an S3 bucket (moto's server mode on 127.0.0.1), read through
Arrow's random-access files over ranged GETs, compared with pyarrow reading the local
originals."""

from __future__ import annotations

import pathlib
import re
import subprocess

import numpy as np
import pytest

moto = pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
boto3 = pytest.importorskip("boto3")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
feather = pytest.importorskip("pyarrow.feather")

import shardload  # noqa: E402

from s3_server import Bucket  # noqa: E402
from s3_fault_proxy import FaultProxy, Rule  # noqa: E402


EXT = {"parquet": "parquet", "arrow": "arrow"}
FORMATS = ["parquet", "arrow"]


def write(path: pathlib.Path, table: pa.Table, fmt: str, group: int) -> None:
    if fmt == "parquet":
        pq.write_table(table, path, row_group_size=group)
    else:
        with pa.ipc.new_file(path, table.schema) as w:
            for batch in table.to_batches(max_chunksize=group):
                w.write_batch(batch)


def read_local(path: pathlib.Path, fmt: str) -> pa.Table:
    return pq.read_table(path) if fmt == "parquet" else feather.read_table(path)


def put_shards(bucket: Bucket, tmp: pathlib.Path, fmt: str, tables: list[pa.Table],
               group: int, prefix: str = "d") -> list[pathlib.Path]:
    """Writes each table locally, uploads it, and returns the local originals."""
    paths = []
    for i, t in enumerate(tables):
        p = tmp / f"shard_{i:04d}.{EXT[fmt]}"
        write(p, t, fmt, group)
        bucket.upload(f"{prefix}/{p.name}", p)
        paths.append(p)
    return paths


def ragged_tables(rng: np.random.Generator, rows: list[int]) -> list[pa.Table]:
    out = []
    for n in rows:
        v = rng.standard_normal((n, 3)).astype(np.float32)
        out.append(pa.table({
            "a": rng.standard_normal(n).astype(np.float32),
            "name": [f"r{j}" for j in range(n)],  # not numeric: left out by default
            "b": rng.integers(-1000, 1000, n).astype(np.float32),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), 3),
        }))
    return out


def oracle(paths: list[pathlib.Path], fmt: str, columns: list[str]) -> np.ndarray:
    """pyarrow's reading of the local originals: (rows, columns) or one column's values."""
    parts = []
    for p in paths:
        t = read_local(p, fmt)
        cols = []
        for c in columns:
            col = t.column(c).combine_chunks()
            if pa.types.is_fixed_size_list(col.type):
                cols.append(col.flatten().to_numpy().reshape(len(col), col.type.list_size))
            else:
                cols.append(col.to_numpy())
        parts.append(cols[0] if len(cols) == 1 else np.stack(cols, axis=1))
    return np.concatenate(parts)


@pytest.mark.parametrize("fmt", FORMATS)
def test_ragged_shards_match_pyarrow(bucket, tmp_path, fmt):
    rng = np.random.default_rng(11)
    rows = [37, 0, 5, 64, 1, 23]
    paths = put_shards(bucket, tmp_path, fmt, ragged_tables(rng, rows), group=8)
    url = bucket.url("d/")
    opts = bucket.options
    # The default: every numeric scalar column, in schema order.
    want = oracle(paths, fmt, ["a", "b"])
    layout = shardload.discover(url, storage_options=opts)
    assert layout.total_rows == sum(rows) and layout.shape == (sum(rows), 2)
    np.testing.assert_array_equal(np.asarray(shardload.load(url, storage_options=opts,
                                                            overdecompose=3)), want)
    np.testing.assert_array_equal(layout.read(3, 100), want[3:100])
    # columns= picks and orders; a fixed-size list gives a trailing dimension.
    want = oracle(paths, fmt, ["b", "a"])
    got = shardload.load(url, storage_options=opts, columns=["b", "a"])
    np.testing.assert_array_equal(np.asarray(got), want)
    want = oracle(paths, fmt, ["v"])
    got = shardload.load(url, storage_options=opts, columns=["v"])
    assert got.shape == (sum(rows), 3)
    np.testing.assert_array_equal(np.asarray(got), want)
    # row_range= across shard and group boundaries; a glob and a list of URLs.
    got = shardload.load(bucket.url(f"d/shard_*.{EXT[fmt]}"), storage_options=opts,
                         columns=["v"], row_range=(30, 110))
    np.testing.assert_array_equal(np.asarray(got), want[30:110])
    urls = [bucket.url(f"d/{paths[i].name}") for i in (3, 0)]
    got = shardload.load(urls, storage_options=opts, columns=["a"])
    np.testing.assert_array_equal(np.asarray(got), oracle([paths[3], paths[0]], fmt, ["a"]))


@pytest.mark.parametrize("fmt", FORMATS)
def test_nulls_are_an_error_or_filled(bucket, tmp_path, fmt):
    tables = [pa.table({"v": [9.0] * 4}),
              pa.table({"v": [1.5, None, 3.0, None, 5.0, 6.0, 7.0]})]
    put_shards(bucket, tmp_path, fmt, tables, group=3)
    url = bucket.url("d/")
    layout = shardload.discover(url, storage_options=bucket.options)
    np.testing.assert_array_equal(layout.read(0, 5), [9.0] * 4 + [1.5])
    with pytest.raises(shardload.ShardReadError,
                       match=rf"shard_0001\.{EXT[fmt]}(\?\S*)?: column 'v': row 3 is null"):
        layout.read(7, 11)
    got = shardload.load(url, storage_options=bucket.options, fill_value=-1.0)
    np.testing.assert_array_equal(np.asarray(got), [9.0] * 4 + [1.5, -1, 3, -1, 5, 6, 7])


def test_parquet_reads_ranges_of_the_object_never_all_of_it(server, tmp_path):
    """One small column of a file whose other column is large: the footer and that column's
    chunks travel, by ranged GETs, and far fewer bytes than the object holds."""
    with FaultProxy(server) as proxy:
        b = Bucket(server, proxy.endpoint)
        rng = np.random.default_rng(5)
        n = 20000
        big = rng.standard_normal((n, 8))
        t = pa.table({"x": (np.arange(n) % 100).astype(np.int16),
                      "big": pa.FixedSizeListArray.from_arrays(pa.array(big.reshape(-1)), 8)})
        p = tmp_path / "shard_0000.parquet"
        pq.write_table(t, p, row_group_size=5000, compression="none")
        b.upload("d/shard_0000.parquet", p)
        got = shardload.load(b.url("d/"), storage_options=b.options, columns=["x"])
        np.testing.assert_array_equal(np.asarray(got), t.column("x").to_numpy())
        gets = [(r, t) for m, t, r, _ in proxy.log
                if m == "GET" and "shard_0000.parquet" in t]
        assert gets and all(r is not None for r, _ in gets), gets
        fetched = 0
        for r, _ in gets:
            m = re.fullmatch(r"bytes=(\d*)-(\d+)", r)
            assert m, r
            # "bytes=-N" (the probe's last N bytes) or "bytes=A-B".
            fetched += int(m.group(2)) if not m.group(1) else int(m.group(2)) - int(m.group(1)) + 1
        assert fetched < p.stat().st_size // 4, (fetched, p.stat().st_size)


@pytest.mark.parametrize("fmt", FORMATS)
def test_object_overwritten_after_discover_is_an_error(bucket, tmp_path, fmt):
    rng = np.random.default_rng(7)
    tables = ragged_tables(rng, [12, 9])
    put_shards(bucket, tmp_path, fmt, tables, group=4)
    layout = shardload.discover(bucket.url("d/"), storage_options=bucket.options)
    # Other values in the same schema and rows: another object under the same name.
    other = tmp_path / "other"
    other.mkdir()
    name = f"shard_0001.{EXT[fmt]}"
    write(other / name, ragged_tables(rng, [9])[0], fmt, 4)
    assert (other / name).stat().st_size == (tmp_path / name).stat().st_size
    bucket.upload(f"d/{name}", other / name)
    url = bucket.url(f"d/{name}")
    with pytest.raises(shardload.Error) as e:
        shardload.load(layout)
    assert f"shard_0001.{EXT[fmt]}" in str(e.value) and "changed" in str(e.value)
    with pytest.raises(shardload.ShardReadError) as e:
        layout.read(0, 21)
    assert url in str(e.value) and "changed since discovery" in str(e.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_transient_500_is_retried(server, tmp_path, fmt):
    with FaultProxy(server) as proxy:
        b = Bucket(server, proxy.endpoint)
        b.options.update({"max_attempts": "4", "backoff_ms": "5", "max_backoff_ms": "50"})
        rng = np.random.default_rng(9)
        paths = put_shards(b, tmp_path, fmt, ragged_tables(rng, [20, 33, 7]), group=6)
        layout = shardload.discover(b.url("d/"), storage_options=b.options)
        key = f"/{b.name}/d/shard_0001.{EXT[fmt]}"
        rule = proxy.add(Rule("GET", path=key, ranged=True, action="500", count=2))
        got, info = shardload.load(layout, info=True)
        np.testing.assert_array_equal(np.asarray(got), oracle(paths, fmt, ["a", "b"]))
        assert rule.fired == 2
        assert info.remote_retries >= 2


def test_cli_read_parquet_from_s3(bucket, tmp_path, cli):
    rng = np.random.default_rng(13)
    put_shards(bucket, tmp_path, "parquet", ragged_tables(rng, [10, 0, 17]), group=5)
    opts = [f"--storage-option=endpoint_override={bucket.endpoint}",
            "--storage-option", "scheme=http", "--storage-option", "region=us-east-1"]
    r = subprocess.run([str(cli), "read", bucket.url("d/"), "--columns", "v", *opts],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "27" in r.stdout, r.stdout
    assert "remote retries: 0" in r.stdout, r.stdout



@pytest.mark.parametrize("fmt", FORMATS)
def test_a_read_asks_no_object_state(server, tmp_path, fmt):
    """A read of a discovered layout makes no HEAD: it opens each object with the snapshot's
    size, and each ranged GET's answer carries the object's ETag, compared with the
    snapshot's; an object overwritten since discovery is still an error naming the URL."""
    with FaultProxy(server) as proxy:
        b = Bucket(server, proxy.endpoint)
        tables = ragged_tables(np.random.default_rng(11), [40, 25, 33])
        paths = put_shards(b, tmp_path, fmt, tables, group=10)
        layout = shardload.discover(b.url("d/"), storage_options=b.options, columns=["a", "b"])
        proxy.clear()
        np.testing.assert_array_equal(layout.read(0, layout.total_rows),
                                      oracle(paths, fmt, ["a", "b"]))
        for p in paths:
            heads = proxy.requests("HEAD", p.name)
            assert heads == 0 and proxy.requests("GET", p.name) > 0, (p.name, proxy.log)
        b.upload(f"d/{paths[1].name}", paths[0])
        with pytest.raises(shardload.ShardReadError, match="changed") as e:
            layout.read(0, layout.total_rows)
        assert b.url(f"d/{paths[1].name}") in str(e.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_objects_are_probed_and_a_tiles_objects_read_with_requests_in_flight(
        server, tmp_path, fmt):
    """Each object's probe and each tile's object are a request's round trip or more: several
    are in flight at once. Every request for a shard is held 0.3 s by the proxy, so probes in
    turn would never overlap, and a load of two tiles reading their objects in turn would have
    at most two in flight."""
    with FaultProxy(server) as proxy:
        b = Bucket(server, proxy.endpoint)
        tables = ragged_tables(np.random.default_rng(17), [9, 4, 12, 7, 3, 10, 6, 8])
        paths = put_shards(b, tmp_path, fmt, tables, group=4)
        proxy.add(Rule(None, path="/d/shard_", action="delay", delay_s=0.3, count=None))
        layout = shardload.discover(b.url("d/"), storage_options=b.options)
        assert proxy.max_in_flight >= 2, proxy.log
        # One open per object at discovery (its answer holds the Parquet footer of a small
        # object): no HEAD, and for Parquet no second GET of the same object.
        for p in paths:
            assert proxy.requests("HEAD", p.name) == 0, proxy.log
            if fmt == "parquet":
                assert proxy.requests("GET", p.name) == 1, (p.name, proxy.log)
        proxy.clear()
        proxy.add(Rule(None, path="/d/shard_", action="delay", delay_s=0.3, count=None))
        got, info = shardload.load(layout, info=True)
        np.testing.assert_array_equal(np.asarray(got), oracle(paths, fmt, ["a", "b"]))
        assert info.tiles <= 2, info
        assert proxy.max_in_flight >= 3, (proxy.max_in_flight, proxy.log)


def test_a_parquet_object_is_probed_by_one_get_of_its_last_bytes(server, tmp_path):
    """The probe's open asks for an object's last 64 KiB (a suffix range), which hold its
    footer and say its size and ETag: one GET per object at discovery, whatever its size;
    damaged objects are still errors naming them."""
    with FaultProxy(server) as proxy:
        b = Bucket(server, proxy.endpoint)
        tables = ragged_tables(np.random.default_rng(29), [9000, 10, 7000])
        paths = put_shards(b, tmp_path, "parquet", tables, group=1000)
        assert paths[0].stat().st_size > 3 * 65536 and paths[1].stat().st_size < 65536
        layout = shardload.discover(b.url("d/"), storage_options=b.options)
        assert layout.total_rows == 16010
        for p in paths:
            ranges = [r for m, t, r, _ in proxy.log if p.name in t]
            assert ranges == ["bytes=-65536"], (p.name, proxy.log)
        np.testing.assert_array_equal(np.asarray(shardload.load(layout)),
                                      oracle(paths, "parquet", ["a", "b"]))
        # Not Parquet: cut to its last half, a few bytes, nothing at all.
        whole = paths[1].read_bytes()
        for i, bad in enumerate([whole[len(whole) // 2:], b"PAR1", b""]):
            b.put(f"bad{i}/shard_0000.parquet", bad)
            with pytest.raises(shardload.Error) as e:
                shardload.discover(b.url(f"bad{i}/"), format="parquet",
                                   storage_options=b.options)
            assert b.url(f"bad{i}/shard_0000.parquet") in str(e.value), str(e.value)


def test_an_arrow_ipc_object_is_probed_from_its_footer_and_batch_metadata(server, tmp_path):
    """An IPC probe's open asks for the object's last 64 KiB (a suffix range), where the
    footer lists the batches: a smaller object comes whole, so its probe is that one GET; a
    larger one's batches' rows come from their metadata alone, the metadata of batches less
    than 64 KiB apart in one request (up to 4 MiB), none asked twice, none in the bytes the
    open fetched."""
    with FaultProxy(server) as proxy:
        b = Bucket(server, proxy.endpoint)
        tables = ragged_tables(np.random.default_rng(31), [9000, 10, 130000])
        paths = put_shards(b, tmp_path, "arrow", tables, group=1000)
        sizes = [p.stat().st_size for p in paths]
        assert sizes[1] < 1 << 16 < sizes[0] < 1 << 20 < (3 << 20) < sizes[2] < 4 << 20
        proxy.clear()
        layout = shardload.discover(b.url("d/"), storage_options=b.options)
        assert layout.total_rows == 139010
        for p, size, most in zip(paths, sizes, [2, 1, 3]):
            ranges = [r for m, t, r, _ in proxy.log if p.name in t]
            assert ranges[0] == "bytes=-65536", ranges
            assert 1 <= len(ranges) <= most, (p.name, ranges)
            assert len(ranges) == len(set(ranges)), ranges
            for r in ranges[1:]:
                first, last = (int(x) for x in r.removeprefix("bytes=").split("-"))
                assert first < size - (1 << 16), (r, size)  # not in what the open fetched
                assert last - first < 4 << 20, r
        np.testing.assert_array_equal(np.asarray(shardload.load(layout)),
                                      oracle(paths, "arrow", ["a", "b"]))


def test_a_parquet_footer_is_fetched_once_per_object_not_once_per_piece(server, tmp_path):
    """Each object split among several tiles, each tile's piece opening it again: the footer
    the probe parsed serves every piece of that snapshot, so the load asks only for row
    groups (no GET covers an object's last byte, where the footer ends), and an object
    overwritten since is still refused by its changed ETag."""
    with FaultProxy(server) as proxy:
        b = Bucket(server, proxy.endpoint)
        tables = ragged_tables(np.random.default_rng(23), [400, 300])
        paths = put_shards(b, tmp_path, "parquet", tables, group=50)
        layout = shardload.discover(b.url("d/"), storage_options=b.options)
        footers = {p.name: p.stat().st_size - 1 for p in paths}
        proxy.clear()
        got, info = shardload.load(layout, overdecompose=4, info=True)
        np.testing.assert_array_equal(np.asarray(got), oracle(paths, "parquet", ["a", "b"]))
        assert info.tiles >= 4, info
        gets = [(t, r) for m, t, r, _ in proxy.log if m == "GET" and "/d/shard_" in t]
        for p in paths:
            mine = [r for t, r in gets if p.name in t]
            assert len(mine) >= 2, (p.name, gets)  # pieces of several tiles
            ends = [int(re.fullmatch(r"bytes=\d+-(\d+)", r).group(1)) for r in mine]
            assert footers[p.name] not in ends, (p.name, mine)
        b.upload(f"d/{paths[1].name}", paths[0])
        with pytest.raises(shardload.Error, match="changed"):
            shardload.load(layout, overdecompose=4)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_failure_among_a_tiles_objects_is_the_first_in_row_order(server, tmp_path, fmt):
    """Two objects of one tile refused, the later one answering first: the error names the
    earlier, as reading them in turn would."""
    with FaultProxy(server) as proxy:
        b = Bucket(server, proxy.endpoint)
        b.options.update({"max_attempts": "1"})
        tables = ragged_tables(np.random.default_rng(19), [5] * 6)
        put_shards(b, tmp_path, fmt, tables, group=5)
        layout = shardload.discover(b.url("d/"), storage_options=b.options)
        proxy.add(Rule("GET", path=f"/d/shard_0001.{EXT[fmt]}", action="403", delay_s=0.5,
                       count=None))
        proxy.add(Rule("GET", path=f"/d/shard_0002.{EXT[fmt]}", action="403", count=None))
        with pytest.raises(shardload.ShardReadError) as e:
            layout.read(0, layout.total_rows)
        assert f"shard_0001.{EXT[fmt]}" in str(e.value), e.value
        assert f"shard_0002.{EXT[fmt]}" not in str(e.value), e.value


def test_an_arrow_ipc_objects_batches_are_fetched_several_at_once(server, tmp_path):
    """A remote IPC object of many batches: their metadata asked for together, then their
    columns `chunks_in_flight` batches at once (each batch's requests were made one after
    another), no range asked twice. A batch refused in the middle is an error naming the
    object."""
    with FaultProxy(server) as proxy:
        b = Bucket(server, proxy.endpoint)
        b.options.update({"max_attempts": "1"})
        tables = ragged_tables(np.random.default_rng(41), [150000])
        paths = put_shards(b, tmp_path, "arrow", tables, group=1000)
        batches = 150
        layout = shardload.discover(b.url("d/"), storage_options=b.options)
        # Each request held 20 ms, as a store farther than loopback would.
        proxy.clear()
        proxy.add(Rule(action="delay", delay_s=0.02, count=None))
        got = layout.read(0, layout.total_rows)
        np.testing.assert_array_equal(got, oracle(paths, "arrow", ["a", "b"]))
        ranges = [r for m, t, r, _ in proxy.log if m == "GET" and "/d/shard_0000.arrow" in t]
        # Besides the footer (the object's last 8 KiB: each opened reader reads it), per batch
        # its metadata and the buffers of the two columns ("name" lies between them), each
        # asked once.
        whole = paths[0].stat().st_size
        body = [r for r in ranges if int(r.removeprefix("bytes=").split("-")[0]) < whole - 8192]
        assert batches <= len(body) <= 3 * batches, len(body)
        assert len(set(body)) == len(body)
        assert len(ranges) - len(body) <= 4, ranges
        assert proxy.max_in_flight >= 4, proxy.max_in_flight
        # A part of the rows: only the batches that hold them.
        proxy.clear()
        np.testing.assert_array_equal(layout.read(40500, 52500),
                                      oracle(paths, "arrow", ["a", "b"])[40500:52500])
        # 13 batches (40 to 52); the partial first and last are read apart (the decode
        # unit's cache), so the object is opened three times, each reading its footer twice.
        assert proxy.requests("GET", "/d/shard_0000.arrow") <= 3 * 13 + 3 * 4
        # One batch's columns refused: the read fails, naming the object.
        proxy.clear()
        middle = sorted(body, key=lambda r: int(r.removeprefix("bytes=").split("-")[0]))[len(body) // 2]
        proxy.add(Rule("GET", path="/d/shard_0000.arrow", range=middle,
                       action="403", count=None))
        with pytest.raises(shardload.ShardReadError) as e:
            layout.read(0, layout.total_rows)
        assert b.url("d/shard_0000.arrow") in str(e.value), e.value


def test_an_arrow_ipc_objects_batches_come_in_few_requests(server, tmp_path):
    """Remote IPC objects whose selected columns are all of their bytes: discovery counts each
    batch's rows from its metadata alone (neighbouring metadata in one request), and a load
    fetches a piece's batches as a few ranges, each asked once, the footer kept from
    discovery. Batches of irregular rows (empty ones too), compressed bodies and the format
    before Arrow 0.15 read as pyarrow reads them; an object overwritten after discovery is an
    error naming it."""
    rng = np.random.default_rng(43)

    def table(n):
        return pa.table({c: rng.standard_normal(n).astype(np.float32) for c in "xyz"})

    regular = table(150000)
    irregular = [pa.record_batch([rng.standard_normal(int(n)).astype(np.float32) for _ in "xyz"],
                                 schema=regular.schema)
                 for n in [0, 3, 1000, 0, 1, 777] + list(rng.integers(0, 2000, 40))]
    objects = {  # name: (batches, write options)
        "shard_0000.arrow": (regular.to_batches(max_chunksize=1000), None),
        "shard_0001.arrow": (irregular, None),
        "shard_0002.arrow": (regular.slice(0, 9000).to_batches(max_chunksize=700),
                             pa.ipc.IpcWriteOptions(compression="zstd")),
        "shard_0003.arrow": (regular.slice(5, 3000).to_batches(max_chunksize=333),
                             pa.ipc.IpcWriteOptions(use_legacy_format=True)),
    }
    with FaultProxy(server) as proxy:
        b = Bucket(server, proxy.endpoint)
        b.options.update({"max_attempts": "1"})
        paths = []
        for name, (batches, options) in objects.items():
            p = tmp_path / name
            with pa.ipc.new_file(p, regular.schema, options=options) as w:
                for batch in batches:
                    w.write_batch(batch)
            b.upload(f"d/{name}", p)
            paths.append(p)
        assert pa.ipc.open_file(paths[1]).get_batch(0).num_rows == 0
        want = oracle(paths, "arrow", list("xyz"))
        proxy.clear()
        layout = shardload.discover(b.url("d/"), storage_options=b.options)
        assert layout.total_rows == len(want)
        # The regular object (150 batches of 12 KB): its last bytes, then every batch's
        # metadata in one range.
        assert proxy.requests("GET", "/d/shard_0000.arrow") <= 3, proxy.log
        proxy.clear()
        np.testing.assert_array_equal(layout.read(0, layout.total_rows), want)
        ranges = [r for m, t, r, _ in proxy.log if m == "GET" and "/d/shard_0000.arrow" in t]
        # About 1.9 MB of batches in ranges of 1 MiB or more: two or three requests.
        assert 1 <= len(ranges) <= 3, ranges
        assert len(set(ranges)) == len(ranges)
        # Rows of batches 40 to 52 of the regular object: the partial first and last batches
        # are read apart from the rest (the decode unit's cache), a range each.
        proxy.clear()
        np.testing.assert_array_equal(layout.read(40500, 52500), want[40500:52500])
        assert proxy.requests("GET", "/d/shard_0000.arrow") <= 3, proxy.log
        # Every object read alone, at rows that cut batches.
        start = 0
        for p in paths:
            n = pa.ipc.open_file(p).read_all().num_rows
            lo, hi = start + n // 3, start + max(n // 3, n - 7)
            np.testing.assert_array_equal(layout.read(lo, hi), want[lo:hi])
            start += n
        # The regular object written again with other values: the read fails, naming it.
        with pa.ipc.new_file(paths[0], regular.schema) as w:
            for batch in table(150000).to_batches(max_chunksize=1000):
                w.write_batch(batch)
        b.upload("d/shard_0000.arrow", paths[0])
        with pytest.raises(shardload.Error) as e:
            layout.read(0, 150000)
        assert b.url("d/shard_0000.arrow") in str(e.value), e.value
