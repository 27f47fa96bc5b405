"""The Python interface as issue 21 ("Interface 1.0") fixed it: the renamed keywords and
attributes (the old spellings warn and still work for one release), Layout as an array-like
description, discover()'s options checked alike by every entry point, TypeError for a wrong
type and ValueError for a bad value everywhere, and the record types."""

from __future__ import annotations

import copy
import dataclasses
import os
import pathlib
import pickle
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shardload
from test_core import write_shards

ROWS = [4, 0, 7, 1, 5]


@pytest.fixture
def npy(tmp_path: pathlib.Path) -> tuple[pathlib.Path, np.ndarray]:
    rng = np.random.default_rng(21)
    arrays = [rng.standard_normal((r, 3, 2)).astype(np.float32) for r in ROWS]
    write_shards(tmp_path / "npy", arrays)
    return tmp_path / "npy", np.concatenate(arrays)


@pytest.fixture
def raw(tmp_path: pathlib.Path) -> tuple[pathlib.Path, np.ndarray]:
    d = tmp_path / "raw"
    d.mkdir()
    data = np.arange(6 * 4, dtype="<i2").reshape(6, 4)
    (d / "shard_0000.bin").write_bytes(data[:2].tobytes())
    (d / "shard_0001.bin").write_bytes(data[2:].tobytes())
    return d, data


@pytest.fixture
def mixed_parquet(tmp_path: pathlib.Path) -> tuple[pathlib.Path, np.ndarray]:
    """Columns of different types: readable only when decoded into one type."""
    d = tmp_path / "pq"
    d.mkdir()
    parts = []
    for i, n in enumerate([5, 3]):
        a = np.arange(n, dtype=np.int16) + 10 * i
        b = np.arange(n, dtype=np.float64) / 4
        pq.write_table(pa.table({"a": a, "b": b}), d / f"shard_{i:04d}.parquet")
        parts.append(np.stack([a, b], axis=1))
    return d, np.concatenate(parts)


def deprecated(match: str):
    return pytest.warns(DeprecationWarning, match=match)


@pytest.fixture
def no_warnings():
    """New spellings warn about nothing."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        yield


# ---- the old spellings: one test each, that it warns and still works ----------------------

def test_discover_shape_is_trailing_shape(raw) -> None:
    d, data = raw
    with deprecated(r"discover: shape= is deprecated; use trailing_shape="):
        layout = shardload.discover(d, format="raw", dtype="<i2", shape=(4,))
    assert layout.trailing_shape == (4,)
    np.testing.assert_array_equal(layout.read(), data)
    with pytest.raises(TypeError, match="shape= is the deprecated spelling of trailing_shape="):
        shardload.discover(d, format="raw", dtype="<i2", shape=(4,), trailing_shape=(4,))
    with pytest.raises(TypeError, match=r"discover\(\) got an unexpected keyword argument "
                                        r"'shapes'"):
        shardload.discover(d, shapes=(4,))


def test_index_shape_is_trailing_shape(raw) -> None:
    d, _ = raw
    with deprecated(r"index: shape= is deprecated"):
        shardload.index(d, format="raw", dtype="<i2", shape=(4,))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        layout = shardload.discover(d, format="raw", dtype="<i2", trailing_shape=(4,))
    assert layout.manifest_status.startswith("manifest: used"), layout.manifest_status


def test_layout_rows_is_shard_rows(npy) -> None:
    layout = shardload.discover(npy[0])
    with deprecated(r"Layout.rows is deprecated; use Layout.shard_rows"):
        assert layout.rows == ROWS
    assert layout.shard_rows == ROWS


def test_register_reader_rows_is_count_rows(tmp_path: pathlib.Path) -> None:
    with deprecated(r"register_reader: rows= is deprecated; use count_rows="):
        shardload.register_reader("interface-old-rows", read=lambda p, lo, hi: None,
                                  rows=lambda p: 0, dtype="float32", trailing_shape=())
    assert "interface-old-rows" in shardload.registered_readers()
    with pytest.raises(TypeError, match="missing required keyword argument: 'count_rows'"):
        shardload.register_reader("interface-no-rows", read=lambda p, lo, hi: None)


def test_load_info_rows_is_total_rows() -> None:
    info = shardload.LoadInfo("CPU", 2, 1, 5, 2, 10, 80, 0.0, 0.0, 0.5, 0.5, 2.0)
    with deprecated(r"LoadInfo.rows is deprecated; use LoadInfo.total_rows"):
        assert info.rows == 10
    assert info.total_rows == 10


def test_save_info_shards_is_num_shards() -> None:
    info = shardload.SaveInfo("CPU", 2, 2, 3, 8000, 0.1, 0.2, 0.3, 4.0)
    with deprecated(r"SaveInfo.shards is deprecated; use SaveInfo.num_shards"):
        assert info.shards == 3
    assert info.num_shards == 3


def test_gb_per_s_is_bytes_over_the_whole_call() -> None:
    load = shardload.LoadInfo("CPU", 2, 1, 5, 2, 10, 8 * 10**9, 1.0, 1.0, 0.5, 1.5, 4.0)
    save = shardload.SaveInfo("CPU", 2, 2, 3, 8 * 10**9, 1.0, 1.0, 0.0, 4.0)
    assert load.gb_per_s == save.gb_per_s == 2.0
    assert dataclasses.replace(load, total_s=0.0).gb_per_s == 0.0


def test_parquet_dtype_is_astype(mixed_parquet) -> None:
    d, data = mixed_parquet
    with deprecated(r"discover: dtype= for parquet is deprecated; use astype="):
        old = shardload.discover(d, format="parquet", dtype="float64")
    with deprecated(r"discover: dtype= for parquet is deprecated; use astype="):
        auto = shardload.discover(d, dtype="float64")
    new = shardload.discover(d, astype="float64")
    assert old == new == auto and new.dtype == np.float64
    np.testing.assert_array_equal(new.read(), data)
    for fmt in ("parquet", "auto"):
        with pytest.raises(TypeError, match="dtype= is the deprecated spelling of astype="):
            shardload.discover(d, format=fmt, dtype="float64", astype="float64")


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_astype_casts_columnar_data_as_numpy_does(tmp_path, fmt) -> None:
    """astype= means numpy's astype for parquet and arrow too: float to int truncates (it is
    not the exact decode cast that refuses -0.5 -> int64), a lossless astype gives the same
    values, and batches agree with load."""
    import pyarrow as pa
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)
    parts = [rng.normal(scale=3.0, size=(n, 3)).astype(np.float32) for n in (5, 0, 9)]
    for i, part in enumerate(parts):
        table = pa.table({f"c{j}": part[:, j] for j in range(3)})
        if fmt == "parquet":
            pq.write_table(table, tmp_path / f"shard_{i:04d}.parquet")
        else:
            feather.write_feather(table, tmp_path / f"shard_{i:04d}.arrow")
    data = np.concatenate(parts)
    assert (np.trunc(data) != data).any()  # values an exact cast would refuse
    for astype in ("int64", "float64", "int16", "uint8", "bool"):
        got = shardload.load(str(tmp_path), astype=astype)
        np.testing.assert_array_equal(np.asarray(got), data.astype(astype))
        rows = [np.asarray(b) for b in shardload.batches(str(tmp_path), 4, astype=astype)]
        np.testing.assert_array_equal(np.concatenate(rows), data.astype(astype))
    got = shardload.load(str(tmp_path), astype="int64", row_range=(3, 12))
    np.testing.assert_array_equal(np.asarray(got), data[3:12].astype("int64"))


# ---- Layout as an array-like description --------------------------------------------------

def test_layout_describes_itself_like_an_array(npy, no_warnings) -> None:
    d, data = npy
    layout = shardload.discover(d)
    assert repr(layout) == ("<shardload.Layout format='npy' shape=(17, 3, 2) dtype=float32 "
                            "shards=5>")
    assert str(layout) == layout.describe() and "\n" in str(layout)
    assert (layout.ndim, layout.size, layout.itemsize, len(layout)) == (
        data.ndim, data.size, data.itemsize, len(data))
    assert layout.nbytes == data.nbytes


def test_layout_slicing_reads_as_numpy_slices(npy, no_warnings) -> None:
    d, data = npy
    layout = shardload.discover(d)
    n = len(data)
    rng = np.random.default_rng(5)
    bounds = [None, 0, 1, n, n + 3, -1, -n, -n - 4, 4, 11] + list(rng.integers(-n - 2, n + 2, 8))
    for lo in bounds:
        for hi in bounds:
            np.testing.assert_array_equal(layout[lo:hi], data[lo:hi], err_msg=f"[{lo}:{hi}]")
    np.testing.assert_array_equal(layout[2:9:1], data[2:9])
    np.testing.assert_array_equal(layout[np.int64(3):np.int32(5)], data[3:5])
    for i in [0, 3, n - 1, -1, -n, np.int64(6)]:
        np.testing.assert_array_equal(layout[i], data[i])
    for i in [n, -n - 1]:
        with pytest.raises(IndexError, match="out of range"):
            layout[i]
    with pytest.raises(ValueError,
                       match=r"^layout\[::2\]: only step 1 \(or None\) reads a row range$"):
        layout[::2]
    with pytest.raises(ValueError, match="only step 1"):
        layout[5:1:-1]
    for key in [1.0, True, (1, 2), "1", None]:
        with pytest.raises(TypeError, match="Layout indices must be an int or a slice"):
            layout[key]


def test_layout_equality_and_pickling(npy, tmp_path: pathlib.Path, no_warnings) -> None:
    d, data = npy
    layout = shardload.discover(d)
    again = shardload.discover(d)
    assert layout == again and hash(layout) == hash(again) and not layout != again
    # A different dataset: other rows, other paths, another format, a slice of it.
    other = tmp_path / "other"
    write_shards(other, [data[:4], data[4:]])
    assert layout != shardload.discover(other)
    assert layout != layout.slice_rows(0, 16) and layout.slice_rows(2, 9) == again.slice_rows(2, 9)
    assert layout != "a layout" and layout != None  # noqa: E711
    # A file that changed since is another dataset too.
    path = d / "shard_0004.npy"
    os.utime(path, ns=(0, 0))
    assert shardload.discover(d) != layout

    back = pickle.loads(pickle.dumps(layout))
    assert back == layout and type(back) is shardload.Layout
    assert back.paths == layout.paths and back.shard_rows == layout.shard_rows
    assert back.manifest_status == layout.manifest_status
    assert repr(back) == repr(layout)


def test_importing_the_package_sets_nothing_on_the_binding_class(tmp_path: pathlib.Path) -> None:
    # The binding's Layout as the extension module makes it, and as it is once the package is
    # imported: the same attributes, the same objects (Layout's Python side is a subclass).
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location(
            "shardload", {shardload.__file__!r},
            submodule_search_locations=[{os.path.dirname(shardload.__file__)!r}])
        package = importlib.util.module_from_spec(spec)
        sys.modules["shardload"] = package
        import shardload._core as core  # the package's __init__ has not run
        before = dict(vars(core.Layout))
        spec.loader.exec_module(package)
        after = dict(vars(core.Layout))
        changed = sorted(n for n in before.keys() | after.keys()
                         if before.get(n, None) is not after.get(n, None))
        assert not changed, f"set on the binding's Layout at import: {{changed}}"
        assert issubclass(package.Layout, core.Layout)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_every_layout_given_is_the_package_class(npy, tmp_path: pathlib.Path, no_warnings) -> None:
    d, data = npy
    layout = shardload.discover(d)
    made = {"discover": layout, "slice_rows": layout.slice_rows(2, 9),
            "pickle": pickle.loads(pickle.dumps(layout)), "copy": copy.copy(layout),
            "deepcopy": copy.deepcopy(layout), "batches": shardload.batches(d, 4).layout,
            "discover_once": shardload.discover_once(d)}
    shardload.index(d)
    made["discover with its manifest"] = shardload.discover(d)
    assert made["discover with its manifest"].manifest_state is shardload.ManifestState.USED
    for how, got in made.items():
        assert type(got) is shardload.Layout, how
    for got in (made["pickle"], made["copy"], made["deepcopy"], made["discover_once"]):
        assert got == layout and repr(got) == repr(layout)
    np.testing.assert_array_equal(made["slice_rows"].read(), data[2:9])
    # Still no constructor, and no attribute of a layout's own (it is immutable).
    with pytest.raises(TypeError, match=r"^shardload.Layout has no constructor: discover\(\) "
                                         r"makes one$"):
        shardload.Layout()
    with pytest.raises(TypeError):
        shardload.Layout(layout)
    with pytest.raises(AttributeError):
        layout.extra = 1
    with pytest.raises(AttributeError):
        layout.total_rows = 3


# ---- discover()'s options: one check for every entry point --------------------------------

def _discover(source, **kw):
    return shardload.discover(source, **kw)


def _load(source, **kw):
    return shardload.load(source, **kw)


def _batches(source, **kw):
    return shardload.batches(source, 4, **kw).layout


def _index(source, **kw):
    return shardload.index(source, **kw)


def _discover_once(source, **kw):
    return shardload.discover_once(source, **kw)


ENTRY_POINTS = [_discover, _load, _batches, _index, _discover_once]


@pytest.mark.parametrize("fn", ENTRY_POINTS, ids=lambda f: f.__name__.lstrip("_"))
@pytest.mark.parametrize("name, value, message", [
    ("pattern", 5, r"^pattern: expected a str or bytes, found int 5$"),
    ("pattern", ["a"], r"^pattern: expected a str or bytes, found list \['a'\]$"),
    ("format", 3, r"^format: expected a str, found int 3$"),
    ("dtype", 3, r"^dtype: expected a str, a numpy dtype or a numpy type"),
    ("trailing_shape", "12", r"^trailing_shape: expected a tuple of ints \(or one int\), found "
                             r"str '12'$"),
    ("trailing_shape", (1.5,), r"^trailing_shape\[0\]: expected an int, found float 1.5$"),
    ("header_bytes", 2.0, r"^header_bytes: expected an int, found float 2.0$"),
    ("dataset", b"x", r"^dataset: expected a str, found bytes b'x'$"),
    ("columns", "ab", r"^columns: expected a list of column names, found str 'ab'"),
    ("fill_value", "0", r"^fill_value: expected a bool, int or float, found str '0'$"),
    ("trust_manifest", 1, r"^trust_manifest: expected a bool, found int 1$"),
    ("astype", 3, r"^astype: expected a str, a numpy dtype or a numpy type"),
])
def test_every_entry_point_checks_the_options_alike(npy, fn, name, value, message) -> None:
    with pytest.raises(TypeError, match=message):
        fn(npy[0], **{name: value})


@pytest.mark.parametrize("fn", ENTRY_POINTS, ids=lambda f: f.__name__.lstrip("_"))
def test_every_entry_point_takes_bytes_patterns_and_the_new_names(tmp_path, fn,
                                                                  no_warnings) -> None:
    d = tmp_path / "caf\xe9"
    arrays = [np.arange(6, dtype=np.int32).reshape(3, 2) + 10 * i for i in range(3)]
    d.mkdir()
    for i, a in enumerate(arrays):
        with open(os.fsencode(d) + b"/part\xff-%d.npy" % i, "wb") as f:
            np.save(f, a)
    pattern = b"part\xff-{:d}.npy"
    got = fn(d, pattern=pattern)
    if fn is _index:
        got = shardload.discover(d, pattern=pattern)
        assert got.manifest_status.startswith("manifest: used"), got.manifest_status
    assert shardload.discover(d, pattern=pattern).shard_rows == [3, 3, 3]
    np.testing.assert_array_equal(np.asarray(got if fn is _load else got.read()),
                                  np.concatenate(arrays))


def test_batches_takes_trust_manifest(npy, no_warnings) -> None:
    d, data = npy
    shardload.index(d)
    # Trusted, the manifest is taken without a look at the shards: a change goes unseen.
    it = shardload.batches(d, 6, trust_manifest=True)
    assert it.layout.manifest_status.startswith("manifest: used"), it.layout.manifest_status
    assert it.layout == shardload.discover(d, trust_manifest=True)
    np.testing.assert_array_equal(np.concatenate([np.asarray(b) for b in it]), data)


@pytest.mark.parametrize("fn", [shardload.load, lambda s, **kw: shardload.batches(s, 2, **kw)],
                         ids=["load", "batches"])
def test_options_with_a_layout_are_refused_trust_manifest_included(npy, fn) -> None:
    layout = shardload.discover(npy[0])
    with pytest.raises(TypeError, match=r": trust_manifest, trailing_shape cannot be passed|"
                                        r": trailing_shape, trust_manifest cannot be passed"):
        fn(layout, trust_manifest=True, trailing_shape=(3,))


def test_astype_decodes_parquet_columns(mixed_parquet, no_warnings) -> None:
    d, data = mixed_parquet
    # Columns of two types are one array only when decoded into one type.
    with pytest.raises(shardload.LayoutError, match="columns must share a dtype"):
        shardload.discover(d)
    np.testing.assert_array_equal(np.asarray(shardload.load(d, astype="float64")), data)
    np.testing.assert_array_equal(
        np.asarray(shardload.load(d, format="parquet", astype=np.float32, row_range=(2, 7))),
        data[2:7].astype(np.float32))
    got = np.concatenate([np.asarray(b) for b in shardload.batches(d, 3, astype="float64")])
    np.testing.assert_array_equal(got, data)
    layout = shardload.discover(d, astype="int32")
    assert layout.dtype == np.int32
    with pytest.raises(ValueError, match="astype= is the type parquet and arrow columns are "
                                         "decoded into; npy files"):
        shardload.discover(d, format="npy", astype="float64")


def test_astype_in_discover_is_for_columnar_formats_only(npy) -> None:
    with pytest.raises(ValueError, match=r"^discover: astype= is the type parquet and arrow "
                                         r"columns are decoded into; these are npy files"):
        shardload.discover(npy[0], astype="float64")


# ---- load(row_range=), info, save's SaveInfo ----------------------------------------------

def test_load_rows_is_row_range(npy) -> None:
    d, data = npy
    with deprecated(r"load: rows= is deprecated; use row_range="):
        got = shardload.load(d, rows=(3, 9))
    np.testing.assert_array_equal(np.asarray(got), data[3:9])
    with pytest.raises(TypeError, match="rows= is the deprecated spelling of row_range="):
        shardload.load(d, rows=(3, 9), row_range=(3, 9))


def test_load_info_returns_the_pair(npy, no_warnings) -> None:
    d, data = npy
    out, info = shardload.load(d, info=True, row_range=slice(2, 12))
    np.testing.assert_array_equal(np.asarray(out), data[2:12])
    assert isinstance(info, shardload.LoadInfo) and info.total_rows == 10
    assert info.bytes == 10 * 6 * 4
    assert info.gb_per_s == pytest.approx(info.bytes / 1e9 / info.total_s)


def test_save_always_returns_its_info(tmp_path: pathlib.Path) -> None:
    x = np.arange(40, dtype=np.int64).reshape(10, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        info = shardload.save(x, tmp_path / "a", num_shards=3)
    assert isinstance(info, shardload.SaveInfo) and info.num_shards == 3
    assert info.bytes == x.nbytes
    with deprecated(r"save: info= is deprecated; save\(\) always returns its SaveInfo"):
        again = shardload.save(x, tmp_path / "b", num_shards=2, info=False)
    assert isinstance(again, shardload.SaveInfo) and again.num_shards == 2
    np.testing.assert_array_equal(np.asarray(shardload.load(tmp_path / "b")), x)


# ---- verify's records ---------------------------------------------------------------------

@pytest.mark.parametrize("on_host", [True, False])
def test_checksum_mismatch_is_a_frozen_record_with_a_str_path(tmp_path, on_host) -> None:
    d = tmp_path / "caf\xe9"
    write_shards(d, [np.arange(8, dtype=np.float64) + i for i in range(3)])
    shardload.index(d, checksum="xxh3")
    path = d / "shard_0001.npy"
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        f.write(b"\x01")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    bad = shardload.verify(d, on_host=on_host)
    assert len(bad) == 1
    m = bad[0]
    assert dataclasses.is_dataclass(m) and type(m) is shardload.ChecksumMismatch
    assert (m.shard, m.path) == (1, str(path)) and isinstance(m.path, str)
    assert m.what.startswith("xxh3 ")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.shard = 2  # type: ignore[misc]


# ---- TypeError for a wrong type, ValueError for a bad value -------------------------------

@pytest.mark.parametrize("call, error, message", [
    (lambda d: shardload.load(d, overdecompose=0), ValueError,
     r"^overdecompose: expected an int >= 1, found 0$"),
    (lambda d: shardload.batches(d, 2, overdecompose=0), ValueError,
     r"^overdecompose: expected an int >= 1, found 0$"),
    (lambda d: shardload.batches(d, 2, prefetch=-1), ValueError,
     r"^prefetch: expected an int >= 0, found -1$"),
    (lambda d: shardload.batches(d, 0), ValueError, r"^rows_per_batch: expected an int >= 1"),
    (lambda d: shardload.batches(d, 2.0), TypeError, r"^rows_per_batch: expected an int"),
    (lambda d: shardload.load(d, overdecompose=1.0), TypeError, r"^overdecompose: expected an "
                                                                  r"int, found float 1.0$"),
    (lambda d: shardload.load(d, info=1), TypeError, r"^info: expected a bool, found int 1$"),
    (lambda d: shardload.load(d, row_range=3), TypeError, r"^row_range: expected a \(lo, hi\) "
                                                          r"pair"),
    (lambda d: shardload.load(d, row_range=(5, 2)), ValueError, r"lo is greater than hi"),
    (lambda d: shardload.index(d, checksum=5), TypeError, r"^checksum: expected a str, found "
                                                          r"int 5$"),
    (lambda d: shardload.index(d, checksum="md5"), ValueError, r"^checksum: expected one of"),
    (lambda d: shardload.index(d, trust_manifest=True), ValueError, r"^trust_manifest: index"),
    (lambda d: shardload.verify(d, on_host=1), TypeError, r"^on_host: expected a bool"),
    (lambda d: shardload.verify(d, groups=0), ValueError, r"^groups: expected an int >= 1"),
    (lambda d: shardload.verify(d, groups="2"), TypeError, r"^groups: expected an int"),
    (lambda d: shardload.discover_once(d, trust_manifest=np.bool_(True), pattern=3), TypeError,
     r"^pattern: "),
    (lambda d: shardload.save(np.ones(3), d / "s", manifest=1), TypeError,
     r"^save: manifest= must be True or False"),
    (lambda d: shardload.save(np.ones(3), d / "s", checksum=1), TypeError,
     r"^save: checksum= must be a str"),
    (lambda d: shardload.save(np.ones(3), d / "s", format=1), TypeError,
     r"^save: format= must be a str"),
    (lambda d: shardload.save(np.ones(3), d / "s", format="hdf5"), ValueError,
     r"^save: format= must be one of"),
    (lambda d: shardload.discover(d).describe(edge_shards=-1), ValueError,
     r"^edge_shards: expected an int >= 0"),
    (lambda d: shardload.discover(d).describe(edge_shards="1"), TypeError,
     r"^edge_shards: expected an int"),
])
def test_wrong_types_and_bad_values(npy, call, error, message) -> None:
    with pytest.raises(error, match=message) as e:
        call(npy[0])
    # The plain type: a bad argument is not a dataset error.
    assert type(e.value) is error
