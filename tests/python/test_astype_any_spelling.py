"""``astype=`` for parquet and Arrow IPC shards is the type the columns are decoded into, and
its exactness checks hold, whatever the source's spelling: a local file with or without its
extension, an ``http://`` URL with or without a query, an ``s3://`` URL with its options in the
query or in ``storage_options``. Whether the source is columnar is the format discovery finds
in the bytes, never the name's ending. pyarrow's safe cast is the oracle."""

from __future__ import annotations

import pathlib
import shutil
from typing import Iterator

import numpy as np
import pytest

pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
pytest.importorskip("boto3")
pa = pytest.importorskip("pyarrow")
pc = pytest.importorskip("pyarrow.compute")
pq = pytest.importorskip("pyarrow.parquet")
ipc = pytest.importorskip("pyarrow.ipc")

import shardload  # noqa: E402
import shardload.numpy  # noqa: E402

from test_http import serving  # noqa: E402

# (stored column, astype): a fraction and an overflow pyarrow's safe cast refuses, a cast it
# makes exactly (values that are not "safe" for numpy's can_cast: float64 to int32).
CASES = {
    "fraction": (pa.array(np.array([1.5, 2.0, 3.0])), "int32"),
    "overflow": (pa.array(np.array([1, 2**63], dtype=np.uint64)), "int64"),
    "float_past_uint64": (pa.array(np.array([1.0, 2.0**64])), "uint64"),
    "exact": (pa.array(np.array([1.0, -2.0, 3e9])), "int64"),
    "safe": (pa.array(np.array([7, 2**40], dtype=np.uint64)), "float64"),
}
SPELLINGS = ["local", "local_no_extension", "http", "http_query", "s3_query",
             "s3_storage_options"]


@pytest.fixture(scope="module")
def web() -> Iterator[tuple[object, str]]:
    with serving() as s:
        yield s


def _write(path: pathlib.Path, fmt: str, table: pa.Table) -> None:
    if fmt == "parquet":
        pq.write_table(table, path)
    else:
        with ipc.new_file(path, table.schema) as writer:
            writer.write_table(table)


def _source(spelling: str, local: pathlib.Path, web, bucket) -> tuple[str, dict]:
    """The file ``local`` spelled as ``spelling`` (uploaded where the spelling is remote)."""
    store, base = web
    key = f"{spelling}/{local.name}"
    data = local.read_bytes()
    if spelling == "local":
        return str(local), {}
    if spelling == "local_no_extension":
        bare = local.with_name(local.stem + "_" + local.suffix[1:])
        shutil.copy(local, bare)
        return str(bare), {}
    if spelling.startswith("http"):
        store.put("/" + key, data)
        return f"{base}/{key}" + ("?v=1" if spelling == "http_query" else ""), {}
    bucket.put(key, data)
    if spelling == "s3_query":
        query = "&".join(f"{k}={v}" for k, v in bucket.options.items())
        return f"s3://{bucket.name}/{key}?{query}", {}
    return f"s3://{bucket.name}/{key}", {"storage_options": bucket.options}


def _pyarrow(column: pa.Array, astype: str) -> np.ndarray | None:
    """pyarrow's safe cast of ``column`` to ``astype``; None where it refuses the values."""
    try:
        return pc.cast(column, pa.from_numpy_dtype(np.dtype(astype)), safe=True).to_numpy()
    except pa.ArrowInvalid:
        return None


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_discover_decodes_into_astype_whatever_the_spelling(
        tmp_path, web, bucket, spelling, fmt, case):
    column, astype = CASES[case]
    local = tmp_path / f"f.{fmt}"
    _write(local, fmt, pa.table({"f": column}))
    source, kw = _source(spelling, local, web, bucket)
    want = _pyarrow(column, astype)

    layout = shardload.discover([source], columns=["f"], astype=astype, **kw)
    assert (layout.format, layout.dtype) == (fmt, np.dtype(astype))
    if want is None:
        with pytest.raises(shardload.ShardReadError, match=r"column 'f': row 1: value .* "
                           rf"cannot be cast exactly to {astype}" if case != "fraction" else
                           rf"column 'f': row 0: value 1\.5.* cannot be cast exactly to "
                           rf"{astype}"):
            layout.read()
    else:
        got = np.asarray(layout.read())
        assert got.dtype == np.dtype(astype)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("spelling", ["local_no_extension", "http_query", "s3_query"])
def test_columns_of_different_types_load_into_astype_whatever_the_spelling(
        tmp_path, web, bucket, spelling):
    # Columns of different types have no stored type: astype= is what they decode into, for
    # numpy.load() as for discover(), once discovery has found parquet in the bytes.
    table = pa.table({"i": pa.array(np.array([1, -2, 3], dtype=np.int32)),
                      "g": pa.array(np.array([0.5, 2.25, -8.0], dtype=np.float32))})
    local = tmp_path / "m.parquet"
    pq.write_table(table, local)
    source, kw = _source(spelling, local, web, bucket)
    want = np.column_stack([_pyarrow(table[c].combine_chunks(), "float64") for c in "ig"])

    got = shardload.numpy.load([source], columns=["i", "g"], astype="float64", **kw)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(got), want)
    layout = shardload.discover([source], columns=["i", "g"], astype="float64", **kw)
    assert layout.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(layout.read()), want)
