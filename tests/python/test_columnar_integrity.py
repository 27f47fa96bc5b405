"""Arrow IPC and Parquet files whose metadata claims more (or other) rows than their bytes hold,
made here by rewriting the counts of a pyarrow-written file in place, locally, from s3:// and
from http://; and fill values that the dtype cannot hold. Each is refused naming the file and
the batch, row group or value: never a read past a batch's buffers, never rows lost or made up,
never a null filled with inf."""

from __future__ import annotations

import pathlib
import re
import struct

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
ipc = pytest.importorskip("pyarrow.ipc")
pq = pytest.importorskip("pyarrow.parquet")

import shardload  # noqa: E402

from thrift_compact import integers, rewrite  # noqa: E402

CLAIM = 100_000


# --- Arrow IPC: the record batches' metadata, found by walking the flatbuffers -------------

def _u(fmt: str, b: bytes, at: int) -> int:
    return struct.unpack_from("<" + fmt, b, at)[0]


def _field(b: bytes, table: int, i: int) -> int | None:
    vt = table - _u("i", b, table)
    slot = 4 + 2 * i
    if slot + 2 > _u("H", b, vt):
        return None
    off = _u("H", b, vt + slot)
    return table + off if off else None


def batch_places(b: bytes) -> list[tuple[int, list[int]]]:
    """For each record batch of the IPC file bytes `b`: where its RecordBatch.length lies and
    where each of its FieldNodes' length lies (Message.fbs), walking the messages that follow
    the 8-byte magic up to the end-of-stream marker."""
    out = []
    at = 8
    while True:
        assert _u("I", b, at) == 0xFFFFFFFF, at
        n = _u("i", b, at + 4)
        if n == 0:
            return out
        m = at + 8
        root = m + _u("I", b, m)
        kind, header, body = _field(b, root, 1), _field(b, root, 2), _field(b, root, 3)
        if kind is not None and b[kind] == 3:  # MessageHeader.RecordBatch
            rb = header + _u("I", b, header)
            length, nodes = _field(b, rb, 0), _field(b, rb, 1)
            vec = nodes + _u("I", b, nodes)
            out.append((length, [vec + 4 + 16 * k for k in range(_u("I", b, vec))]))
        at = m + n + (_u("q", b, body) if body else 0)


def write_ipc(path: pathlib.Path, table: pa.Table, batch: int, compression=None) -> None:
    opts = ipc.IpcWriteOptions(compression=compression)
    with ipc.new_file(path, table.schema, options=opts) as w:
        for b in table.to_batches(max_chunksize=batch):
            w.write_batch(b)


def claim_rows(path: pathlib.Path, batch: int, rows: int, length: bool = True,
               nodes: tuple[int, ...] = (0,)) -> None:
    """Makes record batch `batch` of the file claim `rows` rows: in RecordBatch.length (when
    `length`) and in the FieldNodes numbered `nodes`, in place."""
    b = bytearray(path.read_bytes())
    at_length, at_nodes = batch_places(bytes(b))[batch]
    places = ([at_length] if length else []) + [at_nodes[k] for k in nodes]
    for p in places:
        struct.pack_into("<q", b, p, rows)
    path.write_bytes(bytes(b))


def tables(kind: str, rows: int) -> pa.Table:
    x = np.arange(rows) * 0.5
    if kind == "float64":
        return pa.table({"v": x})
    if kind == "nulls":
        return pa.table({"v": pa.array(x, mask=np.arange(rows) % 3 == 1)})
    assert kind == "fixed_size_list"
    return pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(rows * 4.0)), 4)})


def where(fmt: str, tmp: pathlib.Path, bucket, name: str) -> tuple[object, dict]:
    """The source of one shard `name` written under tmp: the local file, or its upload."""
    if bucket is None:
        return tmp / name, {}
    bucket.upload(f"d/{name}", tmp / name)
    kw = {"storage_options": bucket.options} if bucket.options is not None else {}
    return bucket.url(f"d/{name}"), kw


class Web:
    """test_http's server, seen as a bucket."""

    options = None

    def __init__(self, store, base: str) -> None:
        self.store, self.base = store, base

    def upload(self, key: str, path: pathlib.Path) -> None:
        self.store.put(f"/{key}", path.read_bytes())

    def url(self, key: str) -> str:
        return f"{self.base}/{key}"


@pytest.fixture(params=["local", "s3", "http"])
def store(request):
    if request.param == "local":
        yield None
    elif request.param == "s3":
        pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
        yield request.getfixturevalue("bucket")
    else:
        from test_http import serving

        with serving() as (web, base):
            yield Web(web, base)


def load_all(source, **kw) -> np.ndarray:
    return shardload.discover(source, **kw).read()


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
@pytest.mark.parametrize("kind", ["float64", "nulls", "fixed_size_list"])
def test_ipc_batch_claiming_more_rows_than_its_buffers_hold_is_refused(tmp_path, store, kind,
                                                                        compression):
    t = tables(kind, 1000)
    path = tmp_path / "shard_0000.arrow"
    write_ipc(path, t, 400, compression)
    # The untouched file is read as pyarrow reads it.
    src, kw = where("arrow", tmp_path, store, path.name)
    fill = {"fill_value": -1.0} if kind == "nulls" else {}
    want = ipc.open_file(path).read_all().column("v").combine_chunks()
    got = load_all(src, **kw, **fill)
    if kind == "fixed_size_list":
        np.testing.assert_array_equal(got, want.flatten().to_numpy().reshape(-1, 4))
    else:
        np.testing.assert_array_equal(got, want.fill_null(-1.0).to_numpy())
    # Batch 1 (400 rows) claims 100,000 in its length and in its column's node (and, for the
    # list column, the values' node as many times over): every count agrees, the buffers do
    # not hold them.
    claim_rows(path, 1, CLAIM, nodes=(0,))
    if kind == "fixed_size_list":
        b = bytearray(path.read_bytes())
        struct.pack_into("<q", b, batch_places(bytes(b))[1][1][1], 4 * CLAIM)
        path.write_bytes(bytes(b))
    src, kw = where("arrow", tmp_path, store, path.name)
    with pytest.raises(shardload.Error) as e:
        load_all(src, **kw, **fill)
    msg = str(e.value)
    assert f"{path.name}" in msg and "record batch 1" in msg, msg
    assert f"{CLAIM} rows" in msg and "buffers" in msg, msg
    # Rows of the honest batches still read.
    if store is None:
        return
    layout = shardload.discover(src, **kw, **fill)
    assert layout.read(0, 400).shape[0] == 400


def test_small_ipc_file_claiming_a_hundred_thousand_rows_is_refused(tmp_path, store):
    """The shape of the report: a file of a few hundred bytes whose only batch says 100,000."""
    path = tmp_path / "shard_0000.arrow"
    write_ipc(path, pa.table({"v": np.arange(3, dtype=np.float32)}), 3)
    claim_rows(path, 0, CLAIM)
    assert path.stat().st_size < 1000
    src, kw = where("arrow", tmp_path, store, path.name)
    with pytest.raises(shardload.Error,
                       match=rf"{path.name}(\?\S*)?: record batch 0: .*{CLAIM} rows.*buffers"):
        load_all(src, **kw)


def test_ipc_batch_lying_in_the_selected_column_alone_is_refused(tmp_path, store):
    """Arrow checks a node against the batch length only for the columns it loads: a batch
    whose length and selected column's node agree on a lie, beside an honest column that is not
    read, is still refused."""
    path = tmp_path / "shard_0000.arrow"
    write_ipc(path, pa.table({"a": np.arange(50.0), "b": np.arange(50.0)}), 50, "zstd")
    claim_rows(path, 0, CLAIM, nodes=(0,))
    src, kw = where("arrow", tmp_path, store, path.name)
    # Over s3:// and http(s):// discovery compares every column's node with the batch first.
    with pytest.raises(shardload.Error, match=rf"{path.name}(\?\S*)?: record batch 0: "
                       rf".*(buffers|claims {CLAIM} rows, its column 1 holds 50)"):
        load_all(src, columns=["a"], **kw)


@pytest.mark.parametrize("length,nodes", [(True, ()), (False, (0,))])
def test_ipc_batch_whose_length_and_node_disagree_is_refused(tmp_path, store, length, nodes):
    path = tmp_path / "shard_0000.arrow"
    write_ipc(path, pa.table({"v": np.arange(20.0)}), 8)
    claim_rows(path, 2, CLAIM, length=length, nodes=nodes)
    src, kw = where("arrow", tmp_path, store, path.name)
    with pytest.raises(shardload.Error, match=rf"{path.name}(\?\S*)?: record batch 2"):
        load_all(src, **kw)


# --- Parquet: counts in the footer and the page headers, rewritten in place ---------------

ROWS = 1000  # a varint of 2 bytes, as are the counts written over it below


def write_parquet(path: pathlib.Path, columns: int = 1, version: str = "1.0",
                  compression: str = "none") -> pa.Table:
    t = pa.table({f"c{i}": np.arange(ROWS) * 0.5 + i for i in range(columns)})
    pq.write_table(t, path, compression=compression, use_dictionary=False,
                   data_page_version=version, write_statistics=False, row_group_size=ROWS)
    return t


def patch_parquet(path: pathlib.Path, footer: set, page: set = frozenset(),
                  value: int = 1500) -> None:
    """Rewrites the integer fields at the thrift field paths `footer` (of FileMetaData) and
    `page` (of the first page's header) to `value`."""
    b = bytearray(path.read_bytes())
    start = len(b) - 8 - _u("i", b, len(b) - 8)
    hits = 0
    for first, chosen in ((4, page), (start, footer)):
        fields, _ = integers(bytes(b), first)
        for p, s, e, v in fields:
            if p in chosen:
                rewrite(b, s, e, value)
                hits += 1
    assert hits >= len(page) + len(footer), hits
    path.write_bytes(bytes(b))


FILE_ROWS, GROUP_ROWS = (3,), (4, 0, 3)  # FileMetaData.num_rows, RowGroup[0].num_rows


def column_values(c: int) -> tuple:  # RowGroup[0].columns[c].meta_data.num_values
    return (4, 0, 1, c, 3, 5)


@pytest.mark.parametrize("claim", [700, 1500])
def test_parquet_row_group_whose_columns_hold_other_rows_is_refused(tmp_path, store, claim):
    """pyarrow reads 700 rows of a group whose footer says 700 while its column chunks hold
    1000 (the other 300 lost without a word), and 1000 of one that says 1500."""
    path = tmp_path / "shard_0000.parquet"
    write_parquet(path, columns=2)
    patch_parquet(path, {FILE_ROWS, GROUP_ROWS}, value=claim)
    assert pq.read_table(path).num_rows == min(claim, ROWS)
    src, kw = where("parquet", tmp_path, store, path.name)
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(src, **kw)
    msg = str(e.value)
    assert (f"{path.name}" in msg and "row group 0" in msg and "column 'c0'" in msg
            and f"{ROWS} values" in msg and f"{claim} rows" in msg), msg


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_parquet_pages_holding_fewer_rows_than_the_footer_says_are_refused(tmp_path, store,
                                                                           version):
    """Footer counts that agree with each other (1500) over pages that hold 1000: the rows the
    pages hold read as written; a read past them is an error naming the row group, never
    zeros, and never called a change of the file."""
    path = tmp_path / "shard_0000.parquet"
    t = write_parquet(path, version=version, compression="zstd")
    patch_parquet(path, {FILE_ROWS, GROUP_ROWS, column_values(0)})
    src, kw = where("parquet", tmp_path, store, path.name)
    layout = shardload.discover(src, **kw)
    assert layout.total_rows == 1500
    np.testing.assert_array_equal(layout.read(0, 500), t.column("c0").to_numpy()[:500])
    with pytest.raises(shardload.ShardReadError) as e:
        layout.read(900, 1100)
    msg = str(e.value)
    assert f"{path.name}" in msg and "row group 0" in msg, msg
    assert f"its pages hold {ROWS} rows" in msg and "1500" in msg, msg
    assert "changed" not in msg, msg


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("compression", ["none", "snappy"])
def test_parquet_page_header_claiming_more_values_is_refused(tmp_path, store, version,
                                                             compression):
    """A data page whose header claims 1500 values where its bytes hold 1000 (the footer
    untouched) is refused when read, naming the file and row group."""
    path = tmp_path / "shard_0000.parquet"
    write_parquet(path, version=version, compression=compression)
    patch_parquet(path, set(), {(5, 1) if version == "1.0" else (8, 1)})
    src, kw = where("parquet", tmp_path, store, path.name)
    layout = shardload.discover(src, **kw)
    with pytest.raises(shardload.ShardReadError, match=rf"{path.name}(\?\S*)?: row group 0"):
        layout.read()


# --- fill_value: a finite value must stay finite in the dtype ----------------------------

def nulls_file(tmp: pathlib.Path, fmt: str, values: pa.Array) -> pathlib.Path:
    path = tmp / f"shard_0000.{fmt}"
    t = pa.table({"v": values})
    if fmt == "parquet":
        pq.write_table(t, path)
    else:
        write_ipc(path, t, 2)
    return path


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
@pytest.mark.parametrize("stored,astype,fill,shown", [
    ("float32", None, 1e300, "1e+300"),
    ("float32", None, -1e39, "-1e+39"),
    ("float64", "float32", 1e300, "1e+300"),
    ("float64", "float16", 70000, "70000.0"),
    ("float64", "float16", -65520, "-65520.0"),
    ("int32", "float16", 1e5, "100000.0"),
    ("float64", "complex64", 1e39, "1e+39"),
])
def test_fill_value_the_dtype_cannot_hold_is_refused(tmp_path, fmt, stored, astype, fill, shown):
    d = np.dtype(astype or stored)
    path = nulls_file(tmp_path, fmt, pa.array([1, None, 3], pa.from_numpy_dtype(np.dtype(stored))))
    with pytest.raises(ValueError) as e:
        shardload.discover(path, fill_value=fill, astype=astype)
    assert re.search(rf"fill_value=?\s*{re.escape(shown)} is not representable as {d.name}$",
                     str(e.value)), e.value


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
@pytest.mark.parametrize("astype,fill", [
    ("float16", 65504.0), ("float16", 65519.0), ("float16", -65504), ("float16", 1e-9),
    ("float32", 3.4028234663852886e38), ("float32", 1e-300), ("float64", 1e300),
    ("float16", float("inf")), ("float32", float("-inf")), ("float64", float("nan")),
    ("complex64", float("inf")),
])
def test_fill_value_that_rounds_or_is_written_as_inf_or_nan_is_taken(tmp_path, fmt, astype,
                                                                     fill):
    """Rounding is a float's nature (65519 is float16's 65504, as numpy rounds it); inf and nan
    are taken where the user writes them for a float dtype."""
    path = nulls_file(tmp_path, fmt, pa.array([1.0, None, 3.0]))
    got = shardload.discover(path, fill_value=fill, astype=astype).read()
    want = np.array([1.0, fill, 3.0]).astype(astype)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_fill_value_inf_or_nan_for_integers_is_refused(tmp_path, fmt):
    path = nulls_file(tmp_path, fmt, pa.array([1, None, 3], pa.int32()))
    for fill, shown in ((float("inf"), "inf"), (float("nan"), "nan"), (1e10, "10000000000.0")):
        with pytest.raises(ValueError,
                           match=rf"fill_value=?\s*{shown} is not representable as int32"):
            shardload.discover(path, fill_value=fill)


# --- a second pass of crafted files: each refused as pyarrow refuses it, or read as it reads it

def messages(b: bytes) -> list[dict]:
    """Where each record batch's counts, buffers and body length lie in the IPC file `b`."""
    out = []
    at = 8
    while _u("i", b, at + 4):
        n = _u("i", b, at + 4)
        m = at + 8
        root = m + _u("I", b, m)
        kind, header, body = _field(b, root, 1), _field(b, root, 2), _field(b, root, 3)
        size = _u("q", b, body) if body else 0
        if kind is not None and b[kind] == 3:
            rb = header + _u("I", b, header)
            nodes, bufs = _field(b, rb, 1), _field(b, rb, 2)
            nv, bv = nodes + _u("I", b, nodes), bufs + _u("I", b, bufs)
            out.append({"length": _field(b, rb, 0), "body_length": body, "body": m + n,
                        "nodes": [nv + 4 + 16 * k for k in range(_u("I", b, nv))],
                        "buffers": [bv + 4 + 16 * k for k in range(_u("I", b, bv))]})
        at = m + n + size
    return out


def footer_block_body_length(b: bytes, batch: int) -> int:
    """Where the footer's Block.bodyLength of record batch `batch` lies."""
    f = len(b) - 10 - _u("i", b, len(b) - 10)
    root = f + _u("I", b, f)
    vec = _field(b, root, 3)
    vec += _u("I", b, vec)
    return vec + 4 + 24 * batch + 16


def poke(path: pathlib.Path, at: int, value: int) -> None:
    b = bytearray(path.read_bytes())
    struct.pack_into("<q", b, at, value)
    path.write_bytes(bytes(b))


def refused_as_pyarrow_refuses(path: pathlib.Path, store, batch: int | None, *,
                               fmt: str = "arrow", **kw) -> str:
    with pytest.raises(Exception):  # noqa: B017 (pyarrow's own exceptions)
        t = ipc.open_file(path).read_all() if fmt == "arrow" else pq.read_table(path)
        t.validate(full=True)
    src, skw = where(fmt, path.parent, store, path.name)
    with pytest.raises(shardload.Error) as e:
        load_all(src, **skw, **kw)
    msg = str(e.value)
    assert path.name in msg, msg
    if batch is not None:
        assert (f"record batch {batch}" if fmt == "arrow" else f"row group {batch}") in msg, msg
    return msg


X = np.random.default_rng(7).random(1000)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
@pytest.mark.parametrize("claim", [100, 8000])
def test_ipc_buffer_whose_uncompressed_size_lies_is_refused(tmp_path, store, codec, claim):
    """A compressed buffer's prefix (its uncompressed length) smaller or larger than what its
    bytes inflate to."""
    path = tmp_path / "shard_0000.arrow"
    write_ipc(path, pa.table({"v": X}), 500, codec)
    m = messages(path.read_bytes())[1]
    poke(path, m["body"] + _u("q", path.read_bytes(), m["buffers"][1]), claim)
    refused_as_pyarrow_refuses(path, store, 1)


def test_ipc_buffer_said_to_be_uncompressed_reads_as_pyarrow_reads_it(tmp_path, store):
    """An lz4 buffer whose prefix says -1 (stored uncompressed) is its compressed bytes as
    values: a valid file, read as pyarrow reads it, never past the buffer."""
    path = tmp_path / "shard_0000.arrow"
    write_ipc(path, pa.table({"v": X}), 500, "lz4")
    m = messages(path.read_bytes())[1]
    poke(path, m["body"] + _u("q", path.read_bytes(), m["buffers"][1]), -1)
    want = ipc.open_file(path).read_all().column("v").to_numpy()
    src, kw = where("arrow", tmp_path, store, path.name)
    np.testing.assert_array_equal(load_all(src, **kw), want)


@pytest.mark.parametrize("where_", ["footer", "message"])
@pytest.mark.parametrize("codec", [None, "zstd"])
def test_ipc_body_length_smaller_than_its_buffers_is_refused(tmp_path, store, where_, codec):
    path = tmp_path / "shard_0000.arrow"
    write_ipc(path, pa.table({"v": X}), 500, codec)
    b = path.read_bytes()
    at = footer_block_body_length(b, 1) if where_ == "footer" else messages(b)[1]["body_length"]
    poke(path, at, 64)
    refused_as_pyarrow_refuses(path, store, 1)


@pytest.mark.parametrize("field,value", [
    ("length", -1), ("length", -100_000), ("length", 2**62), ("length", 2**63 - 1),
    ("offset", -8), ("offset", 2**62), ("size", -8), ("size", 2**62),
])
def test_ipc_negative_or_huge_counts_are_refused(tmp_path, store, field, value):
    path = tmp_path / "shard_0000.arrow"
    write_ipc(path, pa.table({"v": X}), 500)
    m = messages(path.read_bytes())[1]
    if field == "length":
        poke(path, m["length"], value)
        poke(path, m["nodes"][0], value)
    else:
        poke(path, m["buffers"][1] + (0 if field == "offset" else 8), value)
    # From object storage the rows are the batches' metadata alone: a count past 2**62 is
    # refused as the dataset's size, before any batch is read.
    huge = field == "length" and value > 0 and store is not None
    msg = refused_as_pyarrow_refuses(path, store, None if huge else 1)
    if huge:
        assert "overflows 64 bits" in msg, msg


@pytest.mark.parametrize("lie", ["child node", "child buffer"])
def test_ipc_fixed_size_list_whose_values_are_fewer_than_length_times_size(tmp_path, store,
                                                                          lie):
    path = tmp_path / "shard_0000.arrow"
    write_ipc(path, pa.table({"v": pa.FixedSizeListArray.from_arrays(
        pa.array(np.arange(400.0)), 4)}), 100)
    m = messages(path.read_bytes())[0]
    if lie == "child node":
        poke(path, m["nodes"][1], 40)
    else:
        poke(path, m["buffers"][-1] + 8, 16)
    assert "buffers" in refused_as_pyarrow_refuses(path, store, 0)


def _rewrite_varint(b: bytearray, start: int, end: int, value: int) -> None:
    """`value` zigzag-encoded in exactly end - start bytes (padded with continuation bytes,
    which Thrift's readers take)."""
    v = (value << 1) ^ (value >> 63)
    for k in range(start, end):
        b[k] = (v & 0x7F) | (0x80 if k < end - 1 else 0)
        v >>= 7
    assert v == 0, value


def patch_first_page(path: pathlib.Path, field: tuple, value) -> None:
    """Sets the integer at `field` of the first page header of column c0 to value(old)."""
    b = bytearray(path.read_bytes())
    fields, _ = integers(bytes(b), 4)
    for p, s, e, v in fields:
        if p == field:
            _rewrite_varint(b, s, e, value(v))
            path.write_bytes(bytes(b))
            return
    raise KeyError(field)


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("compression,field,delta", [
    ("snappy", (2,), -100), ("snappy", (2,), 100), ("zstd", (2,), -100), ("zstd", (2,), 100),
    ("gzip", (2,), -100), ("gzip", (2,), 100), ("none", (3,), -10), ("none", (3,), 10),
])
def test_parquet_page_whose_sizes_lie_is_refused(tmp_path, store, version, compression,
                                                 field, delta):
    """A page header's uncompressed_page_size (2) or compressed_page_size (3) off by `delta`."""
    path = tmp_path / "shard_0000.parquet"
    write_parquet(path, version=version, compression=compression)
    patch_first_page(path, field, lambda v: v + delta)
    refused_as_pyarrow_refuses(path, store, 0, fmt="parquet")


def test_parquet_dictionary_page_claiming_fewer_entries_is_refused(tmp_path, store):
    path = tmp_path / "shard_0000.parquet"
    pq.write_table(pa.table({"c0": np.arange(1000) % 7 * 0.5}), path, use_dictionary=True)
    patch_first_page(path, (7, 1), lambda v: 3)
    refused_as_pyarrow_refuses(path, store, 0, fmt="parquet")


@pytest.mark.parametrize("field,value", [((8, 2), 0), ((8, 2), 900), ((8, 3), 10)])
def test_parquet_v2_page_whose_null_and_row_counts_lie_reads_as_pyarrow_reads_it(
        tmp_path, store, field, value):
    """num_nulls and num_rows of a v2 page are hints: the levels decide, for both readers."""
    path = tmp_path / "shard_0000.parquet"
    x = pa.array(np.arange(1000) * 0.5, mask=np.arange(1000) % 5 == 0)
    pq.write_table(pa.table({"c0": x}), path, use_dictionary=False, data_page_version="2.0",
                   compression="none", write_statistics=False)
    patch_first_page(path, field, lambda v: value)
    want = pq.read_table(path).column("c0").combine_chunks().fill_null(-1.0).to_numpy()
    src, kw = where("parquet", tmp_path, store, path.name)
    np.testing.assert_array_equal(load_all(src, **kw, fill_value=-1.0), want)


@pytest.mark.parametrize("stored,fill,want", [
    ("float64", -0.0, "-0.0"), ("float32", -0.0, "-0.0"), ("float64", 5e-324, "5e-324"),
    ("float32", 1e-45, "1e-45"), ("float32", 3.4028235e38, "3.4028235e+38"),
    ("int64", -2**63, "-9223372036854775808"), ("uint64", 2**53, "9007199254740992"),
    ("int8", 127.0, "127"), ("int8", -0.0, "0"), ("bool", 1, "True"), ("bool", -0.0, "False"),
])
def test_fill_value_edges_fill_as_numpy_casts_them(tmp_path, stored, fill, want):
    """Each value lands as numpy casts it to the dtype, its sign bit included."""
    values = (pa.array([True, None, False]) if stored == "bool"
              else pa.array([1, None, 3], pa.from_numpy_dtype(np.dtype(stored))))
    path = nulls_file(tmp_path, "parquet", values)
    got = np.asarray(shardload.discover(path, columns=["v"], fill_value=fill).read())[1]
    expected = np.array(fill).astype(stored)
    assert got.dtype == np.dtype(stored) and repr(got.item()) == repr(expected.item()), got
    assert str(expected) == want and np.signbit(got) == np.signbit(expected)


@pytest.mark.parametrize("stored,fill", [
    ("float32", 3.4028235677973366e38),  # halfway to 2**128: numpy rounds it to inf
    ("int64", 2**63), ("uint64", -1), ("uint64", 2**64), ("int8", 128), ("bool", 2),
    ("bool", 0.5), ("bool", float("nan")),
])
def test_fill_value_edges_the_dtype_cannot_hold_are_refused(tmp_path, stored, fill):
    values = (pa.array([True, None, False]) if stored == "bool"
              else pa.array([1, None, 3], pa.from_numpy_dtype(np.dtype(stored))))
    path = nulls_file(tmp_path, "parquet", values)
    with pytest.raises(ValueError, match=rf"is not representable as {stored}$"):
        shardload.discover(path, columns=["v"], fill_value=fill)


# --- a third pass: other lies of the same files, each read as pyarrow reads it or refused ----

def _stream_as_file(tmp: pathlib.Path) -> pathlib.Path:
    path = tmp / "shard_0000.arrow"
    t = pa.table({"v": X})
    with ipc.new_stream(path, t.schema) as w:
        w.write_table(t)
    return path


def _ipc_with(tmp: pathlib.Path, table: pa.Table, lie) -> pathlib.Path:
    path = tmp / "shard_0000.arrow"
    write_ipc(path, table, 400)
    if lie is not None:
        lie(path, messages(path.read_bytes())[1])
    return path


NULLS = pa.array(X, mask=np.arange(1000) % 3 == 1)


def _parquet_with(tmp: pathlib.Path, field: tuple, value: int) -> pathlib.Path:
    path = tmp / "shard_0000.parquet"
    pq.write_table(pa.table({"v": np.arange(ROWS) * 0.5}), path, compression="none",
                   use_dictionary=False, write_statistics=False)
    patch_parquet(path, {field}, value=value)
    return path


def _fixed_size_schema_over_lists_of_other_sizes(tmp: pathlib.Path) -> pathlib.Path:
    """The Arrow schema stored beside the data says FixedSizeList[4]; the lists hold 4, 3, 5."""
    fixed = tmp / "fixed.parquet"
    pq.write_table(pa.table({"v": pa.FixedSizeListArray.from_arrays(
        pa.array(np.arange(12.0)), 4)}), fixed)
    path = tmp / "shard_0000.parquet"
    lists = pa.array([[0.0, 1, 2, 3], [4.0, 5, 6], [7.0, 8, 9, 10, 11]], pa.list_(pa.float64()))
    w = pq.ParquetWriter(path, pa.schema([("v", lists.type)]), store_schema=False)
    w.write_table(pa.table({"v": lists}))
    w.add_key_value_metadata({b"ARROW:schema": pq.ParquetFile(fixed).metadata.metadata[
        b"ARROW:schema"]})
    w.close()
    fixed.unlink()
    return path


THIRD_PASS = {
    "ipc stream format named .arrow": _stream_as_file,
    "ipc validity bitmap shorter than the batch": lambda t: _ipc_with(
        t, pa.table({"v": NULLS}), lambda p, m: poke(p, m["buffers"][0] + 8, 8)),
    "ipc null count without a bitmap": lambda t: _ipc_with(
        t, pa.table({"v": X}), lambda p, m: poke(p, m["nodes"][0] + 8, 5)),
    "ipc bitmap pointing into the values": lambda t: _ipc_with(
        t, pa.table({"v": NULLS}), lambda p, m: poke(
            p, m["buffers"][0], _u("q", p.read_bytes(), m["buffers"][1]))),
    "ipc dictionary column": lambda t: _ipc_with(
        t, pa.table({"v": pa.array(np.arange(1000) % 7 * 0.5).dictionary_encode()}), None),
    "parquet schema says float, chunks hold doubles": lambda t: _parquet_with(t, (2, 1, 1), 4),
    "parquet schema says int64, chunks hold doubles": lambda t: _parquet_with(t, (2, 1, 1), 2),
    "parquet column chunk of another physical type": lambda t: _parquet_with(
        t, (4, 0, 1, 0, 3, 1), 2),
    "parquet optional column said required": lambda t: _parquet_with(t, (2, 1, 3), 0),
    "parquet optional column said repeated": lambda t: _parquet_with(t, (2, 1, 3), 2),
    "parquet fixed-size schema over lists of other sizes":
        _fixed_size_schema_over_lists_of_other_sizes,
}


@pytest.mark.parametrize("case", sorted(THIRD_PASS))
def test_other_lies_read_as_pyarrow_reads_them_or_are_refused(tmp_path, store, case):
    """pyarrow as the oracle (its own validation, not the full one): where it reads a value
    column, shardload reads the same values; where it refuses, or the column is of a type
    shardload does not take, the error names the file."""
    path = THIRD_PASS[case](tmp_path)
    fmt = "arrow" if path.suffix == ".arrow" else "parquet"
    try:
        t = ipc.open_file(path).read_all() if fmt == "arrow" else pq.read_table(path)
        t.validate()
        column = t.column("v").combine_chunks()
        want = (column.fill_null(-7.0).to_numpy(zero_copy_only=False)
                if pa.types.is_floating(column.type) or pa.types.is_integer(column.type)
                else None)
    except (pa.ArrowException, OSError):
        want = None
    src, kw = where(fmt, tmp_path, store, path.name)
    if want is None:
        with pytest.raises(shardload.Error) as e:
            load_all(src, columns=["v"], fill_value=-7.0, **kw)
        assert path.name in str(e.value), str(e.value)
        return
    got = load_all(src, columns=["v"], fill_value=-7.0, **kw)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


# --- a sixth pass: an IPC file's footer and its leading schema, rewritten -----------------------

def _ipc_bytes(values: np.ndarray) -> bytearray:
    t = pa.table({"x": pa.array(values)})
    out = pa.BufferOutputStream()
    with ipc.new_file(out, t.schema) as w:
        for b in t.to_batches(max_chunksize=10):
            w.write_batch(b)
    return bytearray(out.getvalue().to_pybytes())


def _footer_blocks(b: bytes) -> int:
    """Where the footer's first record batch Block (offset, metadata length, body length,
    24 bytes each) lies."""
    return footer_block_body_length(b, 0) - 16


@pytest.mark.parametrize("case", ["blocks reordered", "a block listed twice",
                                  "leading schema of another type"])
def test_an_ipc_footer_that_disagrees_with_the_stream_reads_as_pyarrow_reads_it(tmp_path, store,
                                                                                 case):
    """The file reader follows the footer: its blocks in its order (a batch listed twice read
    twice) and its schema, whatever the stream's own schema message at the front says."""
    floats = np.arange(30, dtype=np.float64) + 0.5
    b = _ipc_bytes(floats)
    at = _footer_blocks(b)
    blocks = [bytes(b[at + 24 * k:at + 24 * k + 24]) for k in range(3)]
    if case == "leading schema of another type":
        ints = _ipc_bytes(np.arange(30, dtype=np.int64))
        head_f = struct.unpack_from("<q", b, at)[0]
        head_i = struct.unpack_from("<q", ints, _footer_blocks(ints))[0]
        b = bytearray(ints[:head_i] + b[head_f:])
        at += head_i - head_f
        for k in range(3):
            offset = struct.unpack_from("<q", b, at + 24 * k)[0]
            struct.pack_into("<q", b, at + 24 * k, offset + head_i - head_f)
    else:
        order = [2, 1, 0] if case == "blocks reordered" else [0, 0, 2]
        for k, j in enumerate(order):
            b[at + 24 * k:at + 24 * k + 24] = blocks[j]
    (tmp_path / "x.arrow").write_bytes(bytes(b))
    want = ipc.open_file(tmp_path / "x.arrow").read_all().column("x").to_numpy()
    src, kw = where("arrow", tmp_path, store, "x.arrow")
    got = load_all(src, **kw)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


# --- an eighth pass: fill_value= with a cast after the fill; a stored schema that lies -------

# (stored, astype, fill): a cast numpy makes after the fill (the columns do not convert to
# astype without loss), and a fill value astype cannot hold, or holds otherwise than the stored
# type carries it. Before: -1 filled a uint8 with 255, 128 an int8 with -128, 70000 a float16
# with inf, inf an int32 with -2**31, 0.5 an int8 with 0, 2 a bool with True, and 65519 a uint16
# with 65504 (rounded by the float16 column first).
FILLS_THE_CAST_CHANGES = [
    ("int8", "uint8", -1, "is not representable as uint8"),
    ("int16", "int8", 128, "is not representable as int8"),
    ("int32", "float16", 70000, "is not representable as float16"),
    ("float16", "int32", float("inf"), "is not representable as int32"),
    ("float16", "int8", 0.5, "is not representable as int8"),
    ("uint8", "bool", 2, "is not representable as bool"),
    ("float16", "uint16", 65519, "would be 65504 as uint16"),
]


def _cast_after_frontends():
    import shardload.numpy

    return {"numpy.load": lambda src, **kw: shardload.numpy.load(src, **kw),
            "load": lambda src, **kw: np.asarray(shardload.load(src, **kw)),
            "batches": lambda src, **kw: np.concatenate(
                [np.asarray(b) for b in shardload.batches(src, 2, **kw)])}


def _stored_values(stored: str) -> pa.Array:
    values = [1, None, 3] if stored != "bool" else [True, None, False]
    return pa.array(np.array([v or 0 for v in values]).astype(stored),
                    mask=np.array([v is None for v in values]))


@pytest.mark.parametrize("frontend", ["numpy.load", "load", "batches"])
@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
@pytest.mark.parametrize("stored,astype,fill,why", FILLS_THE_CAST_CHANGES)
def test_a_fill_value_the_cast_after_the_fill_would_change_is_refused(tmp_path, frontend, fmt,
                                                                      stored, astype, fill,
                                                                      why):
    """The nulls of columns that astype= casts after the read are filled in the stored type:
    the fill value is held to astype's type as well (docs/formats.md: it must be
    representable in the dtype after astype=), before a byte is read."""
    nulls_file(tmp_path, fmt, _stored_values(stored))
    with pytest.raises(shardload.LayoutError) as e:
        _cast_after_frontends()[frontend](str(tmp_path), fill_value=fill, astype=astype)
    assert re.search(rf"fill_value={re.escape(repr(float(fill)))} {why}\b", str(e.value)), e.value


@pytest.mark.parametrize("frontend", ["numpy.load", "load", "batches"])
@pytest.mark.parametrize("stored,astype,fill", [
    ("int16", "int8", -5), ("int64", "uint8", 255), ("float64", "float16", 65519),
    ("float64", "int32", -7), ("int64", "float32", 2**24 + 1), ("float32", "float16", "inf"),
    ("float64", "float32", "nan"), ("int32", "bool", 1), ("float16", "uint16", 65504),
])
def test_a_fill_value_the_cast_keeps_is_taken(tmp_path, frontend, stored, astype, fill):
    """The same cast after the fill with a value that lands as astype holds it: the nulls read
    as numpy casts the filled column (a float may round it)."""
    fill = float(fill) if isinstance(fill, str) else fill
    nulls_file(tmp_path, "parquet", _stored_values(stored))
    got = _cast_after_frontends()[frontend](str(tmp_path), fill_value=fill, astype=astype)
    want = np.array([1, fill, 3 if stored != "bool" else 0], np.float64).astype(astype)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("lists,why", [
    ([[1, 2, 3], [4, 5], [6, 7, 8, 9], [1, 2, 3]], "index 2 had size=2"),
    ([[1, 2, 3], [4, 5, 6], [7], [8, 9]], "index 3 had size=1"),
    ([[1, 2, 3], [], [4, 5, 6], [7, 8, 9, 10, 11, 12]], "index 2 had size=0"),
    ([[1, 2, 3], None, [4, 5, 6], [1, None, 3]], None),
])
def test_a_stored_schema_of_fixed_size_lists_over_lists_of_other_sizes(tmp_path, lists, why):
    """A Parquet file whose stored Arrow schema says fixed_size_list<float>[3] where its
    lists hold other counts: refused as pyarrow refuses it, naming the file; lists of the
    size (a null one filled whole) read as pyarrow reads them."""
    fixed = pa.table({"v": pa.FixedSizeListArray.from_arrays(
        pa.array(np.arange(12, dtype=np.float32)), 3)})
    pq.write_table(fixed, tmp_path / "fixed.parquet")
    blob = pq.read_metadata(tmp_path / "fixed.parquet").metadata[b"ARROW:schema"]
    path = tmp_path / "d" / "shard_0000.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table({"v": pa.array(lists, type=pa.list_(pa.float32()))}), path)
    b = path.read_bytes()
    own = pq.read_metadata(path).metadata[b"ARROW:schema"]
    footer_len = struct.unpack("<i", b[-8:-4])[0]
    start = len(b) - 8 - footer_len
    footer = b[start:-8]

    def varint(n: int) -> bytes:
        out = b""
        while n >= 0x80:
            out, n = out + bytes([n & 0x7F | 0x80]), n >> 7
        return out + bytes([n])

    at = footer.index(own)
    assert footer[at - len(varint(len(own))):at] == varint(len(own))
    footer = footer[:at - len(varint(len(own)))] + varint(len(blob)) + blob + footer[at + len(own):]
    path.write_bytes(b[:start] + footer + struct.pack("<i", len(footer)) + b"PAR1")
    assert pq.read_schema(path).field("v").type == pa.list_(pa.float32(), 3)
    if why is not None:
        with pytest.raises(Exception, match=re.escape(why)):
            pq.read_table(path)
        with pytest.raises(shardload.ShardReadError) as e:
            shardload.discover(path.parent).read()
        assert str(path) in str(e.value) and why in str(e.value), e.value
        return
    want = pq.read_table(path).column("v").to_pylist()
    got = shardload.discover(path.parent, fill_value=-1).read()
    assert got.tolist() == [[-1.0] * 3 if r is None else [-1.0 if x is None else x for x in r]
                            for r in want]


@pytest.mark.parametrize("astype,fill", [("uint8", "-1"), ("float16", "70000"), ("bool", "2"),
                                         ("int32", "inf"), ("int8", "0.5")])
def test_the_cli_holds_a_fill_value_to_the_type_it_decodes_into(tmp_path, cli, astype, fill):
    """The CLI's --astype is the type the columns are decoded into, with the fill value held
    to it: refused naming the option as the command line spells it."""
    import subprocess

    nulls_file(tmp_path, "parquet", _stored_values("int32"))
    r = subprocess.run([str(cli), "inspect", str(tmp_path), "--astype", astype,
                        "--fill-value", fill], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert re.search(rf"--fill-value=\S+ is not representable as {astype}$", r.stderr.strip()), \
        r.stderr
