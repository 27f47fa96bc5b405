"""Array columns of Parquet and Arrow IPC files: FixedSizeList (nested too) and Arrow's
fixed_shape_tensor extension type load as trailing dimensions. pyarrow is the oracle for every
shape of column: its values, flattened and reshaped, are what each row must hold."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import shardload

import pyarrow as pa  # noqa: E402
import pyarrow.feather as feather  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

FORMATS = ["parquet", "arrow"]
EXT = {"parquet": "parquet", "arrow": "arrow"}
ROWS = [23, 0, 11, 1, 30]  # ragged, with an empty shard and a one-row one


def write(path: pathlib.Path, table: pa.Table, fmt: str, group: int) -> None:
    if fmt == "parquet":
        pq.write_table(table, path, row_group_size=group)
    else:
        feather.write_feather(table, path, chunksize=group)


def list_array(values: np.ndarray, shape: tuple[int, ...]) -> pa.Array:
    """values (rows, *shape) as nested FixedSizeLists, innermost last."""
    arr = pa.array(values.reshape(-1))
    for n in reversed(shape):
        arr = pa.FixedSizeListArray.from_arrays(arr, n)
    return arr


def oracle(table: pa.Table, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """The column's rows as pyarrow gives them, flattened and reshaped (no nulls)."""
    col = table.column(name).combine_chunks()
    if isinstance(col.type, pa.FixedShapeTensorType):
        return col.to_numpy_ndarray()
    flat = col
    while pa.types.is_fixed_size_list(flat.type):
        flat = flat.flatten()
    return flat.to_numpy(zero_copy_only=False).reshape((len(col),) + shape)


def check_ranges(layout, expected: np.ndarray) -> None:
    total = expected.shape[0]
    for lo in range(0, total + 1, 5):
        for hi in range(lo, total + 1, 7):
            np.testing.assert_array_equal(layout.read(lo, hi), expected[lo:hi])


def make_shards(tmp: pathlib.Path, fmt: str, make, group: int = 4) -> list[pa.Table]:
    tables = []
    for i, n in enumerate(ROWS):
        t = make(i, n)
        write(tmp / f"shard_{i:04d}.{EXT[fmt]}", t, fmt, group)
        tables.append(t)
    return tables


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype, shape", [("float32", (5,)), ("int16", (3, 4)),
                                          ("uint8", (2, 1, 3)), ("float64", (1,))])
def test_fixed_size_lists_give_trailing_dimensions(tmp_path: pathlib.Path, fmt: str, dtype: str,
                                                   shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(abs(hash((fmt, dtype))) % 2**32)

    def make(i, n):
        v = (rng.standard_normal((n,) + shape) * 100).astype(dtype)
        return pa.table({"id": np.arange(n), "v": list_array(v, shape)})

    tables = make_shards(tmp_path, fmt, make)
    expected = np.concatenate([oracle(t, "v", shape) for t in tables])
    layout = shardload.discover(tmp_path, format=fmt, columns=["v"])
    assert layout.dtype == np.dtype(dtype)
    assert layout.shape == (sum(ROWS),) + shape
    check_ranges(layout, expected)


@pytest.mark.parametrize("fmt", FORMATS)
def test_fixed_shape_tensor_columns(tmp_path: pathlib.Path, fmt: str) -> None:
    rng = np.random.default_rng(3)
    ttype = pa.fixed_shape_tensor(pa.float32(), [2, 3])

    def make(i, n):
        v = rng.standard_normal((n, 2, 3)).astype(np.float32)
        storage = pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), 6)
        return pa.table({"t": pa.ExtensionArray.from_storage(ttype, storage)})

    tables = make_shards(tmp_path, fmt, make)
    expected = np.concatenate([oracle(t, "t", (2, 3)) for t in tables if t.num_rows])
    layout = shardload.discover(tmp_path, format=fmt)  # the only column: selected by default
    assert layout.shape == (sum(ROWS), 2, 3)
    check_ranges(layout, expected)


@pytest.mark.parametrize("fmt", FORMATS)
def test_permuted_fixed_shape_tensor_is_refused(tmp_path: pathlib.Path, fmt: str) -> None:
    ttype = pa.fixed_shape_tensor(pa.float32(), [2, 3], permutation=[1, 0])
    storage = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(12, np.float32)), 6)
    write(tmp_path / f"shard_0000.{EXT[fmt]}",
          pa.table({"t": pa.ExtensionArray.from_storage(ttype, storage)}), fmt, 4)
    with pytest.raises(shardload.LayoutError,
                       match=r"column 't': fixed_shape_tensor with permutation \(1, 0\) is not "
                             r"supported"):
        shardload.discover(tmp_path, format=fmt, columns=["t"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_several_array_columns_stack_before_the_value_shape(tmp_path: pathlib.Path,
                                                            fmt: str) -> None:
    rng = np.random.default_rng(11)

    def make(i, n):
        a = rng.integers(-1000, 1000, (n, 3, 2)).astype(np.int32)
        b = rng.integers(-1000, 1000, (n, 3, 2)).astype(np.int32)
        return pa.table({"a": list_array(a, (3, 2)), "x": np.arange(n),
                         "b": list_array(b, (3, 2))})

    tables = make_shards(tmp_path, fmt, make)
    expected = np.concatenate(
        [np.stack([oracle(t, "b", (3, 2)), oracle(t, "a", (3, 2))], axis=1) for t in tables])
    layout = shardload.discover(tmp_path, format=fmt, columns=["b", "a"])
    assert layout.shape == (sum(ROWS), 2, 3, 2)
    check_ranges(layout, expected)


@pytest.mark.parametrize("fmt", FORMATS)
def test_default_columns_prefer_scalars_then_arrays(tmp_path: pathlib.Path, fmt: str) -> None:
    v = np.arange(12, dtype=np.float32).reshape(4, 3)
    write(tmp_path / f"shard_0000.{EXT[fmt]}",
          pa.table({"s": ["a", "b", "c", "d"], "v": list_array(v, (3,)), "n": np.arange(4)}),
          fmt, 4)
    assert shardload.discover(tmp_path, format=fmt).shape == (4,)  # n alone
    write(tmp_path / f"shard_0000.{EXT[fmt]}",
          pa.table({"s": ["a", "b", "c", "d"], "v": list_array(v, (3,))}), fmt, 4)
    layout = shardload.discover(tmp_path, format=fmt)
    np.testing.assert_array_equal(layout.read(), v)


@pytest.mark.parametrize("fmt", FORMATS)
def test_casts_of_array_columns(tmp_path: pathlib.Path, fmt: str) -> None:
    def make(i, n):
        v = (np.arange(n * 4, dtype=np.int16) - 7).reshape(n, 2, 2)
        return pa.table({"v": list_array(v, (2, 2))})

    tables = make_shards(tmp_path, fmt, make)
    expected = np.concatenate([oracle(t, "v", (2, 2)) for t in tables])
    layout = shardload.discover(tmp_path, format=fmt, astype="float64")
    assert layout.dtype == np.float64
    check_ranges(layout, expected.astype(np.float64))
    with pytest.raises(shardload.ShardReadError,
                       match=r"column 'v': row 0, element \[0, 0\]: value -7 cannot be cast "
                             r"exactly to uint8"):
        shardload.discover(tmp_path, format=fmt, astype="uint8").read(0, 2)


@pytest.mark.parametrize("fmt", FORMATS)
def test_nulls_in_array_columns_are_refused_or_filled(tmp_path: pathlib.Path, fmt: str) -> None:
    # Row 1 is a null list; row 2 holds a null value at [1, 0]; row 3 a null inner list.
    inner = pa.array([1.0, 2.0, 3.0, 4.0,
                      0.0, 0.0, 0.0, 0.0,
                      5.0, 6.0, None, 8.0,
                      9.0, 10.0, 11.0, 12.0,
                      13.0, 14.0, 15.0, 16.0], pa.float32())
    mid = pa.FixedSizeListArray.from_arrays(inner, 2, mask=pa.array(
        [False, False, False, False, False, False, False, True, False, False]))
    col = pa.FixedSizeListArray.from_arrays(mid, 2, mask=pa.array(
        [False, True, False, False, False]))
    write(tmp_path / f"shard_0000.{EXT[fmt]}", pa.table({"v": col}), fmt, 2)
    layout = shardload.discover(tmp_path, format=fmt)
    assert layout.shape == (5, 2, 2)
    np.testing.assert_array_equal(layout.read(0, 1), [[[1, 2], [3, 4]]])
    np.testing.assert_array_equal(layout.read(4, 5), [[[13, 14], [15, 16]]])
    with pytest.raises(shardload.ShardReadError,
                       match=rf"shard_0000\.{EXT[fmt]}: column 'v': row 1 is null"):
        layout.read(0, 3)
    with pytest.raises(shardload.ShardReadError,
                       match=r"column 'v': row 2: element \[1, 0\] is null"):
        layout.read(2, 3)
    with pytest.raises(shardload.ShardReadError,
                       match=r"column 'v': row 3: element \[1, 0\] is null"):
        layout.read(3, 4)
    filled = shardload.discover(tmp_path, format=fmt, fill_value=-1)
    # The oracle: pyarrow's values with every null, at any level, replaced.
    want = np.array([[[1, 2], [3, 4]], [[-1, -1], [-1, -1]], [[5, 6], [-1, 8]],
                     [[9, 10], [-1, -1]], [[13, 14], [15, 16]]], np.float32)
    np.testing.assert_array_equal(filled.read(), want)
    got = pa.table({"v": col}).column("v").to_pylist()
    for row, w in zip(got, want):
        if row is None:
            assert (w == -1).all()
            continue
        for sub, ws in zip(row, w):
            if sub is None:
                assert (ws == -1).all()
                continue
            assert [(-1 if x is None else x) for x in sub] == list(ws)


@pytest.mark.parametrize("fmt", FORMATS)
def test_array_and_scalar_columns_cannot_mix(tmp_path: pathlib.Path, fmt: str) -> None:
    v = np.zeros((2, 3), np.float32)
    w = np.zeros((2, 4), np.float32)
    write(tmp_path / f"shard_0000.{EXT[fmt]}",
          pa.table({"a": np.zeros(2, np.float32), "v": list_array(v, (3,)),
                    "w": list_array(w, (4,))}), fmt, 2)
    with pytest.raises(shardload.LayoutError,
                       match=r"columns: 'v' is an array column of shape \(3,\) but 'a' is a "
                             r"scalar column; array and scalar columns cannot be mixed "
                             r"\(pass columns= to choose\)"):
        shardload.discover(tmp_path, format=fmt, columns=["a", "v"])
    with pytest.raises(shardload.LayoutError,
                       match=r"columns: 'w' is an array column of shape \(4,\) but 'v' is an "
                             r"array column of shape \(3,\); array columns must share a shape"):
        shardload.discover(tmp_path, format=fmt, columns=["v", "w"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_strings_and_variable_lists_are_refused_naming_the_column(tmp_path: pathlib.Path,
                                                                  fmt: str) -> None:
    write(tmp_path / f"shard_0000.{EXT[fmt]}",
          pa.table({"name": ["x", "y"], "tags": pa.array([[1], [2, 3]]), "a": [1, 2]}), fmt, 2)
    with pytest.raises(shardload.LayoutError,
                       match=rf"shard_0000\.{EXT[fmt]}: column 'name': type string is not "
                             r"supported .*; name only numeric columns in columns="):
        shardload.discover(tmp_path, format=fmt, columns=["a", "name"])
    with pytest.raises(shardload.LayoutError,
                       match=r"column 'tags': type list<\w+: int64> is not supported .*"
                             r"variable-size lists cannot give one trailing shape"):
        shardload.discover(tmp_path, format=fmt, columns=["tags"])
    # The default selection leaves them out.
    np.testing.assert_array_equal(shardload.discover(tmp_path, format=fmt).read(), [1, 2])
    write(tmp_path / f"shard_0000.{EXT[fmt]}",
          pa.table({"b": list_array(np.array([[True, False], [False, True]]), (2,))}), fmt, 2)
    with pytest.raises(shardload.LayoutError, match=r"column 'b': .*\(lists of bool; expected "
                                                    r"lists of integers or floats\)"):
        shardload.discover(tmp_path, format=fmt, columns=["b"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_load_rows_and_astype_of_array_columns(tmp_path: pathlib.Path, fmt: str) -> None:
    rng = np.random.default_rng(21)

    def make(i, n):
        return pa.table({"e": list_array(rng.standard_normal((n, 8)).astype(np.float32), (8,))})

    tables = make_shards(tmp_path, fmt, make)
    expected = np.concatenate([oracle(t, "e", (8,)) for t in tables])
    got = shardload.load(tmp_path, format=fmt)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(np.asarray(got), expected)
    part = shardload.load(tmp_path, format=fmt, row_range=(9, 40), astype="float64")
    assert part.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(part), expected[9:40].astype(np.float64))


def test_parquet_without_the_arrow_schema_names_the_cause(tmp_path: pathlib.Path) -> None:
    """Parquet keeps a list's fixed size only in the Arrow schema stored beside it."""
    v = list_array(np.zeros((3, 4), np.float32), (4,))
    pq.write_table(pa.table({"v": v}), tmp_path / "shard_0000.parquet", store_schema=False)
    with pytest.raises(shardload.LayoutError,
                       match=r"column 'v': type list<element: float> is not supported .*"
                             r"written without the stored Arrow schema"):
        shardload.discover(tmp_path, format="parquet", columns=["v"])
