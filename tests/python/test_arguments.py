"""The Python API checks its arguments before the binding: wrong types are a TypeError
naming the parameter, nothing is truncated or split, numpy integers count as ints and
bools do not. Layout.read refuses bounds outside [0, total_rows] instead of slicing."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shardload
from test_core import write_shards

ROWS = [4, 0, 7, 1, 5]


@pytest.fixture
def npy(tmp_path: pathlib.Path) -> tuple[pathlib.Path, np.ndarray]:
    arrays = [np.arange(r * 3, dtype=np.int32).reshape(r, 3) + 100 * i for i, r in enumerate(ROWS)]
    write_shards(tmp_path / "npy", arrays)
    return tmp_path / "npy", np.concatenate(arrays)


@pytest.fixture
def raw(tmp_path: pathlib.Path) -> tuple[pathlib.Path, np.ndarray]:
    d = tmp_path / "raw"
    d.mkdir()
    data = np.arange(12 * 12, dtype="<f4").reshape(12, 12)
    (d / "shard_0000.bin").write_bytes(b"HDR" + data[:5].tobytes())
    (d / "shard_0001.bin").write_bytes(b"HDR" + data[5:].tobytes())
    return d, data


@pytest.fixture
def parquet(tmp_path: pathlib.Path) -> pathlib.Path:
    d = tmp_path / "pq"
    d.mkdir()
    pq.write_table(pa.table({"a": pa.array([1, None, 3], pa.int64()),
                             "b": pa.array([4, 5, 6], pa.int64())}), d / "shard_0000.parquet")
    return d


def raises(exc: type[BaseException], match: str, fn, *args, **kwargs) -> str:
    with pytest.raises(exc, match=match) as e:
        fn(*args, **kwargs)
    # A pybind11 conversion failure lists the binding's signature; ours never do.
    assert "incompatible function arguments" not in str(e.value)
    assert "Invoked with" not in str(e.value)
    return str(e.value)


# --- Types: a TypeError naming the parameter, never a signature dump.

@pytest.mark.parametrize("fn", [shardload.discover, shardload.load])
def test_source_types(npy, fn) -> None:
    d, _ = npy
    raises(TypeError, r"^source: expected a str, bytes or os.PathLike path or a list/tuple of "
           r"them, found int 3$", fn, 3)
    raises(TypeError, r"^source: .*found set", fn, {str(d)})  # unordered
    raises(TypeError, r"^source\[1\]: expected a str, bytes or os.PathLike path, found int 7$",
           fn, [str(d / "shard_0000.npy"), 7])
    raises(TypeError, r"^source: .*found NoneType None$", fn, None)


def test_discover_refuses_a_layout_with_a_hint(npy) -> None:
    layout = shardload.discover(npy[0])
    raises(TypeError, r"^source: .*found Layout; pass a Layout to load\(\), or use it directly$",
           shardload.discover, layout)


def test_sources_of_every_accepted_type(npy) -> None:
    d, expected = npy
    paths = [d / f"shard_{i:04d}.npy" for i in range(len(ROWS))]
    for source in (d, str(d), paths, tuple(paths), [str(p) for p in paths], (str(d / "*.npy"))):
        np.testing.assert_array_equal(shardload.discover(source).read(), expected)


@pytest.mark.parametrize("fn", [shardload.discover, shardload.load])
@pytest.mark.parametrize("name, value, found", [
    ("format", None, "NoneType None"),
    ("format", 1, "int 1"),
    ("dataset", ["x"], "list \\['x'\\]"),
])
def test_string_options_need_a_str(npy, fn, name, value, found) -> None:
    raises(TypeError, rf"^{name}: expected a str, found {found}$", fn, npy[0], **{name: value})


@pytest.mark.parametrize("fn", [shardload.discover, shardload.load])
def test_pattern_is_a_str_or_bytes(npy, fn) -> None:
    # bytes, for file names that are not UTF-8
    raises(TypeError, r"^pattern: expected a str or bytes, found int 5$", fn, npy[0], pattern=5)
    assert fn(npy[0], pattern=b"shard_{:04d}.npy").shape == fn(npy[0]).shape


@pytest.mark.parametrize("fn", [shardload.discover, shardload.load])
@pytest.mark.parametrize("name", ["pattern", "dataset", "dtype", "format"])
def test_empty_strings_are_refused_not_read_as_left_out(npy, fn, name) -> None:
    raises(ValueError, rf"^{name}: expected a .*found ''", fn, npy[0], **{name: ""})


@pytest.mark.parametrize("fn", [shardload.discover, shardload.load])
def test_shape_is_never_split_or_truncated(raw, fn) -> None:
    d, _ = raw
    opts = dict(format="raw", dtype="float32", header_bytes=3)
    # "12" used to become (1, 2), and 2.5 would be truncated.
    raises(TypeError, r"^trailing_shape: expected a tuple of ints \(or one int\), found str '12'$",
           fn, d, trailing_shape="12", **opts)
    raises(TypeError, r"^trailing_shape\[0\]: expected an int, found float 12.0$", fn, d,
           trailing_shape=(12.0,), **opts)
    raises(TypeError, r"^trailing_shape\[1\]: expected an int, found bool True$", fn, d,
           trailing_shape=[3, True], **opts)
    raises(TypeError,
           r"^trailing_shape: expected a tuple of ints \(or one int\), found bool True$", fn, d,
           trailing_shape=True, **opts)
    raises(TypeError, r"^trailing_shape: .*found float 12.0$", fn, d, trailing_shape=12.0, **opts)
    raises(ValueError, r"^trailing_shape\[0\]: expected a non-negative int, found -12$", fn, d,
           trailing_shape=(-12,), **opts)


def test_shape_and_header_bytes_accept_numpy_integers(raw) -> None:
    d, data = raw
    for shape in [(12,), [12], 12, (np.int64(12),), np.int32(12), (np.uint8(12),)]:
        layout = shardload.discover(d, format="raw", dtype="float32", trailing_shape=shape,
                                    header_bytes=np.int64(3))
        assert layout.shape == (12, 12)
        np.testing.assert_array_equal(layout.read(), data)
    one_d = shardload.discover(d, format="raw", dtype="float32", trailing_shape=(), header_bytes=3)
    assert one_d.shape == (12 * 12,)


@pytest.mark.parametrize("fn", [shardload.discover, shardload.load])
def test_header_bytes(raw, fn) -> None:
    d, _ = raw
    opts = dict(format="raw", dtype="float32", trailing_shape=(12,))
    raises(TypeError, r"^header_bytes: expected an int, found float 3.5$", fn, d,
           header_bytes=3.5, **opts)
    raises(TypeError, r"^header_bytes: expected an int, found float 3.0$", fn, d,
           header_bytes=3.0, **opts)
    raises(TypeError, r"^header_bytes: expected an int, found bool True$", fn, d,
           header_bytes=True, **opts)
    raises(TypeError, r"^header_bytes: expected an int, found str '3'$", fn, d,
           header_bytes="3", **opts)
    raises(ValueError, r"^header_bytes: expected an int in \[0, 2\*\*63\), found -1$", fn, d,
           header_bytes=-1, **opts)
    raises(ValueError, r"^header_bytes: .*found 18446744073709551616$", fn, d,
           header_bytes=2**64, **opts)


def test_dtype_accepts_str_numpy_dtype_and_numpy_type(raw) -> None:
    d, data = raw
    for dtype in ["float32", "<f4", np.float32, np.dtype("float32"), np.dtype("<f4")]:
        layout = shardload.discover(d, format="raw", dtype=dtype, trailing_shape=(12,),
                                    header_bytes=3)
        assert layout.dtype == np.float32
        np.testing.assert_array_equal(layout.read(), data)
    # A non-native numpy dtype keeps its byte order: the bytes read as big-endian.
    big = shardload.discover(d, format="raw", dtype=np.dtype(">f4"), trailing_shape=(12,),
                             header_bytes=3)
    np.testing.assert_array_equal(big.read(), data.view(">f4"))
    assert shardload.discover(d, format="raw", dtype=np.int32, trailing_shape=(12,),
                              header_bytes=3).dtype == np.int32


@pytest.mark.parametrize("fn", [shardload.discover, shardload.load])
def test_dtype_types(raw, fn) -> None:
    d, _ = raw
    opts = dict(format="raw", trailing_shape=(12,), header_bytes=3)
    raises(TypeError, r"^dtype: expected a str, a numpy dtype or a numpy type such as "
           r"np.float32, found int 4$", fn, d, dtype=4, **opts)
    # A type numpy reads as a dtype shardload cannot hold is the parser's ValueError.
    raises(ValueError, r"^unsupported dtype 'object'", fn, d, dtype=pathlib.Path, **opts)
    raises(ValueError, r"^unsupported dtype 'str96'", fn, d, dtype=np.dtype("U3"), **opts)


@pytest.mark.parametrize("fn", [shardload.discover, shardload.load])
def test_columns(parquet, fn) -> None:
    # A bare str used to become its letters: columns="ab" read columns 'a' and 'b'.
    raises(TypeError, r"^columns: expected a list of column names, found str 'ab'; "
           r"write \['ab'\]$", fn, parquet, columns="ab")
    raises(TypeError, r"^columns\[1\]: expected a str, found int 2$", fn, parquet,
           columns=["a", 2])
    raises(TypeError, r"^columns: expected a list of column names, found dict", fn, parquet,
           columns={"a": 1})
    raises(ValueError, r"^columns: expected at least one column name, found \[\]", fn, parquet,
           columns=[])


def test_columns_as_list_or_tuple(parquet) -> None:
    for columns in (["b"], ("b",)):
        np.testing.assert_array_equal(
            shardload.discover(parquet, format="parquet", columns=columns).read(), [4, 5, 6])


@pytest.mark.parametrize("fn", [shardload.discover, shardload.load])
def test_fill_value_types(parquet, fn) -> None:
    raises(TypeError, r"^fill_value: expected a bool, int or float, found str '0'$", fn,
           parquet, columns=["a"], fill_value="0")
    raises(TypeError, r"^fill_value: expected a bool, int or float, found complex 1j$", fn,
           parquet, columns=["a"], fill_value=1j)
    # 2**53 + 1 would arrive as 2**53: refused, not changed.
    raises(ValueError, r"^fill_value: 9007199254740993 cannot be passed exactly", fn, parquet,
           columns=["a"], fill_value=2**53 + 1)
    raises(ValueError, r"^fill_value: .*cannot be passed exactly", fn, parquet, columns=["a"],
           fill_value=10**400)


def test_a_long_double_past_float64s_range_is_refused(tmp_path: pathlib.Path) -> None:
    """np.longdouble(1e400) is finite, and arrived as inf, filling nulls with it (as
    --fill-value=1e400 did): refused as the int past 2**53 is. One in range rounds."""
    if not np.isfinite(np.longdouble("1e400")):
        pytest.skip("this platform's long double is a float64")
    parquet = tmp_path / "shard_0000.parquet"
    pq.write_table(pa.table({"a": pa.array([1.0, None, 3.0])}), parquet)
    for fill in (np.longdouble("1e400"), -np.longdouble("1e400")):
        with pytest.raises(ValueError, match=r"^fill_value: -?1e\+400 is past a float64's "
                                             r"range \(it travels as a float64, in which it "
                                             r"would be -?inf\)$"):
            shardload.discover(parquet, format="parquet", columns=["a"], fill_value=fill)
    got = shardload.discover(parquet, format="parquet", columns=["a"],
                             fill_value=np.longdouble(1) / 3).read()
    np.testing.assert_array_equal(got, [1, 1 / 3, 3])


def test_a_long_double_that_float64_rounds_to_or_from_a_whole_number_is_refused(
        tmp_path: pathlib.Path) -> None:
    """2**53 + 1 as a long double filled an int64 column's nulls with 2**53, and 1 + 2**-62
    with 1 (a fraction, which is refused as 1.5 is): float64 rounded them to whole numbers the
    reader took as exact. Refused as the int 2**53 + 1 is; a long double float64 holds exactly
    is taken, and other fractions round as any float does."""
    if np.finfo(np.longdouble).nmant <= np.finfo(np.float64).nmant:
        pytest.skip("this platform's long double is a float64")
    parquet = tmp_path / "shard_0000.parquet"
    pq.write_table(pa.table({"a": pa.array([1, None, 3], pa.int64())}), parquet)
    for fill in (np.longdouble(2**53) + 1, np.longdouble(1) + np.longdouble(2) ** -62,
                 -(np.longdouble(2**60) + 1)):
        with pytest.raises(ValueError, match=r"^fill_value: .* cannot be passed exactly \(it "
                                             r"travels as a float64, in which it would be "):
            shardload.discover(parquet, format="parquet", columns=["a"], fill_value=fill)
    got = shardload.discover(parquet, format="parquet", columns=["a"],
                             fill_value=np.longdouble(2**53)).read()
    np.testing.assert_array_equal(got, np.array([1, 2**53, 3], dtype=np.int64))


def test_fill_value_values(parquet) -> None:
    def read(fill):
        return shardload.discover(parquet, format="parquet", columns=["a"], fill_value=fill).read()

    for fill in (-7, np.int64(-7), -7.0, np.float32(-7)):
        np.testing.assert_array_equal(read(fill), [1, -7, 3])
    np.testing.assert_array_equal(read(2**53), [1, 2**53, 3])
    np.testing.assert_array_equal(read(True), [1, 1, 3])
    # Whether the dtype holds the value is the reader's check, on the value given.
    with pytest.raises(ValueError, match=r"fill_value=1.5\d* is not representable as int64"):
        read(1.5)


# --- Layout.read: bounds in [0, total_rows], lo <= hi; refused, never clamped.

def test_read_every_valid_range_against_numpy(npy) -> None:
    d, expected = npy
    layout = shardload.discover(d)
    total = expected.shape[0]
    assert total == layout.total_rows
    for lo in range(total + 1):
        np.testing.assert_array_equal(layout.read(lo), expected[lo:])
        for hi in range(lo, total + 1):
            np.testing.assert_array_equal(layout.read(lo, hi), expected[lo:hi])
            np.testing.assert_array_equal(layout.read(np.int64(lo), np.uint16(hi)),
                                          expected[lo:hi])
            np.testing.assert_array_equal(layout.read(lo=lo, hi=hi), expected[lo:hi])
        np.testing.assert_array_equal(layout.read(None, lo), expected[:lo])
    np.testing.assert_array_equal(layout.read(), expected)
    np.testing.assert_array_equal(layout.read(total - 3), expected[-3:])


def test_read_refuses_negative_and_out_of_range_bounds(npy) -> None:
    d, _ = npy
    layout = shardload.discover(d)
    total = layout.total_rows
    # read(0, -1) used to mean "to the end"; as a slice it would drop the last row.
    raises(ValueError, r"^hi: negative row indexes are not accepted, found -1 \(rows run from 0 "
           rf"to {total}; for the last n rows pass total_rows - n\)$", layout.read, 0, -1)
    raises(ValueError, r"^lo: negative row indexes are not accepted, found -3", layout.read, -3)
    raises(ValueError, rf"^hi: {total + 1} is past the end of the dataset's {total} rows$",
           layout.read, 0, total + 1)
    raises(ValueError, rf"^lo: {total + 5} is past the end", layout.read, total + 5)
    raises(ValueError, r"^rows \[5, 2\): lo is greater than hi$", layout.read, 5, 2)


def test_read_bound_types(npy) -> None:
    layout = shardload.discover(npy[0])
    raises(TypeError, r"^lo: expected an int, found float 1.0$", layout.read, 1.0)
    raises(TypeError, r"^hi: expected an int, found float 2.9$", layout.read, 0, 2.9)
    raises(TypeError, r"^lo: expected an int, found bool True$", layout.read, True)
    raises(TypeError, r"^hi: expected an int, found str '3'$", layout.read, 0, "3")
    raises(TypeError, r"^lo: expected an int, found bool np.True_$", layout.read,
           np.bool_(True))


# --- load: checks that need no runtime (they come before it starts).

def test_load_overdecompose_types(npy) -> None:
    d, _ = npy
    for value, found in [(1.9, "float 1.9"), (2.0, "float 2.0"), (True, "bool True"),
                         ("2", "str '2'"), (None, "NoneType None")]:
        raises(TypeError, rf"^overdecompose: expected an int, found {found}$", shardload.load,
               d, overdecompose=value)
    for value in (0, -1, np.int64(0)):
        raises(ValueError, rf"^overdecompose: expected an int >= 1, found {int(value)}$",
               shardload.load, d, overdecompose=value)


@pytest.mark.parametrize("name, value", [
    ("pattern", "shard_{:04d}.npy"), ("format", "npy"), ("dtype", "float32"),
    ("trailing_shape", (3,)),
    ("header_bytes", 0), ("dataset", "x"), ("columns", ["a"]), ("fill_value", 0),
    ("dtype", np.float32), ("columns", []), ("pattern", ""),
])
def test_load_refuses_options_with_a_layout(npy, name, value) -> None:
    layout = shardload.discover(npy[0])
    raises(TypeError, rf"^load: {name} cannot be passed with a Layout, which keeps the options "
           r"it was discovered with; pass them to discover\(\)$", shardload.load, layout,
           **{name: value})


def test_load_names_every_option_passed_with_a_layout(npy) -> None:
    layout = shardload.discover(npy[0])
    raises(TypeError, r"^load: format, dtype, fill_value cannot be passed", shardload.load,
           layout, fill_value=1, dtype="int32", format="raw")


# --- load under Legate (LEGATE_CONFIG with two CPUs): these start the runtime.

@pytest.fixture
def legate_runtime():
    import cupynumeric  # a pinned dependency: its absence must fail, not skip

    return cupynumeric


def test_load_with_huge_overdecompose_is_bounded_and_equal(tmp_path: pathlib.Path,
                                                           legate_runtime) -> None:
    from shardload import _legate

    rng = np.random.default_rng(11)
    arrays = [rng.integers(-1000, 1000, size=(r, 2), dtype=np.int32)
              for r in (40_000, 0, 33_333, 26_670)]
    write_shards(tmp_path, arrays)
    expected = np.concatenate(arrays)
    layout = shardload.discover(tmp_path)
    # Without the cap, K = 10**12 meant one tile per row: 100,003 points.
    _owner, info = _legate.load(layout, 10**12)
    assert info["tiles"] <= 256 * info["processors"]
    for k in (10**12, np.int64(10**12), 2**63 - 1, 10**30):
        out = shardload.load(tmp_path, overdecompose=k)
        np.testing.assert_array_equal(np.asarray(out), expected)
    np.testing.assert_array_equal(np.asarray(shardload.load(layout, overdecompose=10**12)),
                                  expected)


def test_load_accepts_numpy_integers_and_numpy_dtypes(raw, legate_runtime) -> None:
    d, data = raw
    out = shardload.load(d, overdecompose=np.int64(3), format="raw", dtype=np.float32,
                         trailing_shape=(np.int32(12),), header_bytes=np.uint8(3))
    np.testing.assert_array_equal(np.asarray(out), data)
    layout = shardload.discover(d, format="raw", dtype="float32", trailing_shape=12, header_bytes=3)
    np.testing.assert_array_equal(np.asarray(shardload.load(layout, overdecompose=np.uint16(2))),
                                  data)


def test_a_name_option_holding_a_nul_is_refused_for_every_format(tmp_path) -> None:
    """dataset= (HDF5, Zarr, npz) and columns= holding a NUL are refused naming the option:
    HDF5 read the dataset named by the text before the NUL (/x for 'x\\0y'), Zarr gave a
    wrong reason."""
    import h5py
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zarr

    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["x"] = np.arange(6.0).reshape(3, 2)
        f["y"] = -np.arange(6.0).reshape(3, 2)
    zarr.open_group(str(tmp_path / "s.zarr"), mode="w").create_array(
        "x", shape=(3, 2), dtype="f8")[...] = 1.0
    np.savez(tmp_path / "b.npz", x=np.arange(3.0))
    pq.write_table(pa.table({"a": [1.0, 2.0]}), tmp_path / "c.parquet")
    cases = [(tmp_path / "a.h5", {"dataset": "x\0y"}), (tmp_path / "a.h5", {"dataset": "/x\0/../y"}),
             (tmp_path / "s.zarr", {"format": "zarr", "dataset": "x\0y"}),
             (tmp_path / "b.npz", {"dataset": "x\0"}),
             (tmp_path / "c.parquet", {"columns": ["a\0b"]})]
    for path, kw in cases:
        option = next(iter(k for k in kw if k != "format"))
        with pytest.raises(ValueError, match=rf"{option}= holds a NUL character") as e:
            shardload.discover([str(path)], **kw)
        assert str(path) in str(e.value), (kw, str(e.value))
