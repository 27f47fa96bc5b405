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
    with pytest.raises(shardload.Error, match=rf"{path.name}(\?\S*)?: record batch 0: .*buffers"):
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
