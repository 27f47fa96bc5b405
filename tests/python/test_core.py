"""The core (discovery and host reads) against numpy as the oracle."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import shardload
from shardload import _core
from conftest import DTYPES, assert_bools_normalised, dirty_bools, random_array, synth


def write_shards(directory: pathlib.Path, arrays: list[np.ndarray], *, big: list[bool] | None = None,
                 fortran: list[bool] | None = None, name: str = "shard_{:04d}.npy") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i, a in enumerate(arrays):
        if big and big[i]:
            a = a.astype(a.dtype.newbyteorder(">"))
        if fortran and fortran[i]:
            a = np.asfortranarray(a)
        np.save(directory / name.format(i), a)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_mixed_orders(tmp_path: pathlib.Path, dtype: str) -> None:
    rng = np.random.default_rng(abs(hash(dtype)) % 2**32)
    rows = [5, 0, 7, 1, 12]
    arrays = [random_array(rng, (r, 3, 2), dtype) for r in rows]
    write_shards(tmp_path, arrays, big=[False, True, True, False, True],
                 fortran=[False, False, True, True, True])
    layout = shardload.discover(tmp_path)
    expected = np.concatenate(arrays)
    assert layout.shape == expected.shape
    assert layout.dtype == expected.dtype
    assert layout.shard_rows == rows
    np.testing.assert_array_equal(layout.read(), expected)
    # Every sub-range, including ones that cut shards.
    total = expected.shape[0]
    for lo in range(0, total + 1, 3):
        for hi in range(lo, total + 1, 4):
            np.testing.assert_array_equal(layout.read(lo, hi), expected[lo:hi])


@pytest.mark.parametrize("trailing", [(), (4,), (2, 3), (3, 1, 2)])
def test_one_to_four_dimensions(tmp_path: pathlib.Path, trailing: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(trailing))
    arrays = [random_array(rng, (r, *trailing), "float64") for r in [3, 9, 0, 4]]
    write_shards(tmp_path, arrays, fortran=[True, False, True, True])
    layout = shardload.discover(tmp_path)
    np.testing.assert_array_equal(layout.read(), np.concatenate(arrays))


def test_tiles_not_dividing_rows(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(3)
    arrays = [random_array(rng, (r, 5), "int32") for r in [13, 0, 0, 7, 29, 1]]
    write_shards(tmp_path, arrays)
    layout = shardload.discover(tmp_path)
    expected = np.concatenate(arrays)
    for processors in [1, 2, 3, 7, 64]:
        for k in [1, 3]:
            plan = _core.plan(layout.shard_rows, processors, k)
            parts = [layout.read(t * plan["tile_rows"],
                                 min(len(expected), (t + 1) * plan["tile_rows"]))
                     for t in range(plan["tiles"])]
            np.testing.assert_array_equal(np.concatenate(parts), expected)
            assert plan["tiles"] <= processors * k


def test_ten_thousand_small_shards(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(4)
    rows = rng.integers(0, 4, size=10_000)
    arrays = [np.arange(r * 2, dtype=np.uint16).reshape(r, 2) + i for i, r in enumerate(rows)]
    write_shards(tmp_path, arrays)
    layout = shardload.discover(tmp_path)
    assert layout.num_shards == 10_000
    np.testing.assert_array_equal(layout.read(), np.concatenate(arrays))


def test_sources_pattern_glob_list(tmp_path: pathlib.Path) -> None:
    arrays = [np.full((i + 1, 2), i, dtype=np.int64) for i in range(12)]
    write_shards(tmp_path / "p", arrays, name="part-{:05d}.npy")
    expected = np.concatenate(arrays)
    np.testing.assert_array_equal(
        shardload.discover(tmp_path / "p", pattern="part-{:05d}.npy").read(), expected)
    np.testing.assert_array_equal(
        shardload.discover(str(tmp_path / "p" / "part-{:05d}.npy")).read(), expected)
    write_shards(tmp_path / "g", arrays, name="x{}.npy")
    # Natural order puts x2 before x10.
    np.testing.assert_array_equal(shardload.discover(str(tmp_path / "g" / "x*.npy")).read(),
                                  expected)
    paths = [tmp_path / "g" / f"x{i}.npy" for i in (3, 1)]
    np.testing.assert_array_equal(shardload.discover(paths).read(),
                                  np.concatenate([arrays[3], arrays[1]]))


# ---- errors: each names the offending file ---------------------------------------

def layout_error(source, **kw) -> str:
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(source, **kw)
    assert isinstance(e.value, ValueError)
    return str(e.value)


def test_error_missing_directory(tmp_path: pathlib.Path) -> None:
    msg = layout_error(tmp_path / "nope")
    assert str(tmp_path / "nope") in msg and "not found" in msg


def test_error_nothing_matches(tmp_path: pathlib.Path) -> None:
    (tmp_path / "other.npy").write_bytes(b"")
    msg = layout_error(tmp_path)
    # Nothing numbered: the error says what the directory holds and what to pass.
    assert "no numbered shards of a known format" in msg, msg
    assert "the directory holds 1 file: 1 *.npy (other.npy)" in msg, msg
    assert f"pass a glob '{tmp_path}/*.npy'" in msg, msg
    msg = layout_error(tmp_path, pattern="shard_{:04d}.npy")
    assert "shard_{:04d}.npy: no files match the pattern; the directory holds 1 file" in msg, msg


def test_error_gap(tmp_path: pathlib.Path) -> None:
    write_shards(tmp_path, [np.zeros(2)] * 10)
    for i in (2, 5, 6, 7, 8, 9):
        if i != 9:
            os.remove(tmp_path / f"shard_{i:04d}.npy")
    msg = layout_error(tmp_path)
    assert "5 of 10 files missing" in msg
    assert "shard_0002.npy, shard_0005.npy, shard_0006.npy, shard_0007.npy, shard_0008.npy" in msg


def test_error_dtype_mismatch(tmp_path: pathlib.Path) -> None:
    write_shards(tmp_path, [np.zeros(2, np.float32), np.zeros(2, np.float32), np.zeros(2)])
    msg = layout_error(tmp_path)
    assert f"{tmp_path}/shard_0002.npy: dtype float64 differs from float32" in msg


def test_error_trailing_shape_mismatch(tmp_path: pathlib.Path) -> None:
    write_shards(tmp_path, [np.zeros((2, 3)), np.zeros((2, 4))])
    msg = layout_error(tmp_path)
    assert f"{tmp_path}/shard_0001.npy: trailing shape (4,) differs from (3,)" in msg


def test_error_not_regular_file(tmp_path: pathlib.Path) -> None:
    write_shards(tmp_path, [np.zeros(2)])
    (tmp_path / "shard_0001.npy").mkdir()
    msg = layout_error(tmp_path)
    assert f"{tmp_path}/shard_0001.npy: not a regular file" in msg


def test_error_unreadable(tmp_path: pathlib.Path) -> None:
    write_shards(tmp_path, [np.zeros(2)])
    os.symlink(tmp_path / "gone", tmp_path / "shard_0001.npy")
    msg = layout_error(tmp_path)
    assert f"{tmp_path}/shard_0001.npy: cannot open" in msg


@pytest.mark.parametrize("make,needle", [
    (lambda: np.array([object(), 1], dtype=object), "object dtype"),
    (lambda: np.array(["ab", "c"]), "string dtype"),
    (lambda: np.zeros(2, dtype=[("a", "<f4"), ("b", "<i2")]), "structured"),
    (lambda: np.array(["2020-01-01"], dtype="datetime64[D]"), "datetime"),
    (lambda: np.float64(3.0), "0-d"),
])
def test_error_unsupported_arrays(tmp_path: pathlib.Path, make, needle: str) -> None:
    np.save(tmp_path / "shard_0000.npy", make(), allow_pickle=True)
    msg = layout_error(tmp_path)
    assert f"{tmp_path}/shard_0000.npy: header:" in msg and needle in msg


def test_error_truncated_and_trailing(tmp_path: pathlib.Path) -> None:
    write_shards(tmp_path, [np.arange(10.0)])
    p = tmp_path / "shard_0000.npy"
    data = p.read_bytes()
    p.write_bytes(data[:-3])
    assert "truncated" in layout_error(tmp_path)
    p.write_bytes(data + b"xx")
    assert "trailing bytes" in layout_error(tmp_path)


def test_read_after_change_raises_shard_read_error(tmp_path: pathlib.Path) -> None:
    write_shards(tmp_path, [np.arange(10.0), np.arange(5.0)])
    layout = shardload.discover(tmp_path)
    np.save(tmp_path / "shard_0001.npy", np.arange(4.0))
    with pytest.raises(shardload.ShardReadError) as e:
        layout.read()
    assert isinstance(e.value, OSError)
    assert f"{tmp_path}/shard_0001.npy: changed since discovery" in str(e.value)
    np.testing.assert_array_equal(layout.read(0, 10), np.arange(10.0))


def rewrite_keeping_size_and_mtime(path: pathlib.Path, data: bytes) -> None:
    """Writes `data` (of the file's size) in place and puts the mtime back, as
    touch -d or cp -p would; ctime moves (waited for, whatever the clock's
    granularity)."""
    before = os.stat(path)
    assert len(data) == before.st_size
    with open(path, "r+b") as f:
        f.write(data)
    while True:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = os.stat(path)
        if after.st_ctime_ns != before.st_ctime_ns:
            break
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_rewrite_that_keeps_size_and_mtime_is_refused(tmp_path: pathlib.Path) -> None:
    write_shards(tmp_path, [np.arange(10.0), np.arange(5.0)])
    layout = shardload.discover(tmp_path)
    p = tmp_path / "shard_0001.npy"
    np.save(tmp_path / "other.npy", np.arange(5.0) + 100)
    rewrite_keeping_size_and_mtime(p, (tmp_path / "other.npy").read_bytes())
    with pytest.raises(shardload.ShardReadError,
                       match=r"shard_0001\.npy: changed since discovery: .*, ctime "):
        layout.read()


# ---- the command line -------------------------------------------------------------

@pytest.mark.parametrize("dtype,shape", [("float32", "1000,8"), ("int16", "77"),
                                         ("complex128", "50,2,3"), ("bool", "31,4"),
                                         ("float16", "300,3"), ("uint64", "40,1,1,2")])
def test_write_values_match_the_formula(tmp_path: pathlib.Path, cli, dtype: str,
                                        shape: str) -> None:
    out = tmp_path / "set"
    subprocess.run([cli, "write", "--shard-dir", out, "--num-shards", "5", "--shape", shape,
                    "--dtype", dtype, "--seed", "123"], check=True, capture_output=True)
    meta = json.loads((out / "_meta.json").read_text())
    dims = [int(x) for x in shape.split(",")]
    assert meta["seed"] == 123 and meta["shape"] == dims and meta["dtype"] == dtype
    arrays = [np.load(out / f"shard_{i:04d}.npy") for i in range(5)]
    assert [a.shape[0] for a in arrays] == meta["rows"]
    whole = np.concatenate(arrays)
    assert whole.shape == tuple(dims) and whole.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(whole.reshape(-1), synth(dtype, 123, 0, whole.size))


def test_write_removes_stale_shards_and_inspect(tmp_path: pathlib.Path, cli) -> None:
    out = tmp_path / "set"
    run = lambda *a: subprocess.run([cli, *a], capture_output=True, text=True)  # noqa: E731
    assert run("write", "--shard-dir", out, "--num-shards", "9", "--shape", "100,2").returncode == 0
    assert run("write", "--shard-dir", out, "--num-shards", "3", "--shape", "100,2").returncode == 0
    assert sorted(p.name for p in out.glob("shard_*")) == [f"shard_{i:04d}.npy" for i in range(3)]
    r = run("inspect", out)
    assert r.returncode == 0, r.stderr
    assert "shards:         3" in r.stdout and "shape:          (100, 2)" in r.stdout
    os.remove(out / "shard_0001.npy")
    r = run("inspect", out)
    assert r.returncode == 1
    assert "gap in the numbering" in r.stderr and "shard_0001.npy" in r.stderr
    r = run("write", "--shard-dir", out, "--num-shards", "0", "--shape", "5")
    assert r.returncode != 0 and "--num-shards" in r.stderr
    r = run("write", "--shard-dir", out, "--num-shards", "2", "--shape", "5", "--dtype", "float8")
    assert r.returncode != 0 and "unsupported dtype 'float8'" in r.stderr


def test_error_empty_sources(tmp_path: pathlib.Path) -> None:
    assert "list of shard paths is empty" in layout_error([])
    (tmp_path / "empty").mkdir()
    assert "the directory is empty" in layout_error(tmp_path / "empty")
    with pytest.raises(ValueError, match="the source is empty"):
        shardload.discover("")
    assert "no files match the glob" in layout_error(str(tmp_path / "*.npy"))


def test_error_format_unknown_from_the_name(tmp_path: pathlib.Path) -> None:
    (tmp_path / "data.foo").write_bytes(b"\0" * 16)
    msg = layout_error([tmp_path / "data.foo"])
    assert f"{tmp_path}/data.foo: cannot tell the format from the name" in msg


def test_bool_bytes_other_than_0_and_1_read_as_numpy_does(tmp_path: pathlib.Path) -> None:
    """A .npy bool byte of 2 or 255 is True, and lands as 1, in C and Fortran order."""
    rng = np.random.default_rng(12)
    arrays = [dirty_bools(rng, (r, 3, 2)) for r in [9, 0, 5, 13]]
    for i, a in enumerate(arrays):
        np.save(tmp_path / f"shard_{i:04d}.npy", np.asfortranarray(a) if i % 2 else a)
    stored = np.concatenate(arrays)
    layout = shardload.discover(tmp_path)
    assert layout.dtype == np.bool_
    assert_bools_normalised(layout.read(), stored)
    for lo, hi in [(1, 8), (8, 16), (20, 27)]:
        assert_bools_normalised(layout.read(lo, hi), stored[lo:hi])


# ---- a fourth hostile pass: crafted .npy headers ----------------------------------------------

def _npy_with_header(path: pathlib.Path, header: str, data: bytes) -> None:
    pad = (-(10 + len(header) + 1)) % 64
    text = (header + " " * pad + "\n").encode("latin1")
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + data)


_F8 = np.arange(4, dtype="<f8").tobytes()


@pytest.mark.parametrize("header,data", [
    ("{'descr': '<i4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", _F8[:16]),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (4,), }", _F8[:16]),
    ("{'descr': '<l', 'fortran_order': False, 'shape': (4,), }", _F8),
    ("{'descr': 'd', 'fortran_order': False, 'shape': (4,), }", _F8),
    ("{'descr': '|f8', 'fortran_order': False, 'shape': (4,), }", _F8),
    ("{'descr': '\\x3cf8', 'fortran_order': False, 'shape': (4,), }", _F8),
    ("{'descr': u'<f8', 'fortran_order': False, 'shape': (4,), }", _F8),
    ("{'descr': '<' 'f8', 'fortran_order': False, 'shape': (4,), }", _F8),
    ("{'descr': '<f8', 'fortran_order': False, 'shape': (0x4,), }", _F8),
    ("{'descr': '<f8', 'fortran_order': False, 'shape': (+4,), }", _F8),
    ("{'descr': '<f8', 'fortran_order': False, 'shape': (True, 4), }", _F8),
    ("{'descr': '<f8', 'fortran_order': 1, 'shape': (2, 2), }", _F8),
    ("{'descr': '<f8', 'fortran_order': False, 'shape': (4,), } # x", _F8),
    ("({'descr': '<f8', 'fortran_order': False, 'shape': (4,), })", _F8),
    ("{'descr': '<M8[s]', 'fortran_order': False, 'shape': (4,), }", _F8),
    ("{'descr': '=f8', 'fortran_order': False, 'shape': (4,), }", _F8),
    ("{'descr': '>f8', 'fortran_order': False, 'shape': (4,), }",
     np.arange(4, dtype=">f8").tobytes()),
    ('{"descr": "<f8", "fortran_order": False, "shape": (4,), }', _F8),
    ("{'shape': (2, 2), 'fortran_order': True, 'descr': '<f8'}", _F8),
    ("{'descr':\t'<f8',\n 'fortran_order': False, 'shape': (4, 1), }", _F8),
], ids=["descr twice", "shape twice", "C long", "char code", "pipe order", "escape", "u prefix",
        "concatenated", "hex shape", "plus shape", "bool in shape", "fortran 1", "comment",
        "parenthesised", "datetime", "native order", "big endian", "double quotes",
        "keys reordered", "tab and newline"])
def test_crafted_npy_headers_read_as_numpy_does_or_are_refused(tmp_path, header, data):
    """numpy as the oracle: where shardload reads a header, its data equals numpy's (values
    and shape; big-endian arrives in native order); spellings numpy reads that shardload does
    not (a duplicate key numpy takes the last of, a C type code, an escape, a Python literal
    numpy's ast evaluates) are a LayoutError naming the file, never another reading."""
    path = tmp_path / "shard_0000.npy"
    _npy_with_header(path, header, data)
    try:
        ref = np.load(path)
    except Exception:
        ref = None
    try:
        layout = shardload.discover(path)
    except shardload.LayoutError as e:
        assert str(path) in str(e) and "header" in str(e), str(e)
        return
    got = layout.read()
    assert ref is not None, "shardload read a header numpy refuses"
    assert got.shape == ref.shape and got.dtype == ref.dtype.newbyteorder("=")
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("shape,descr,message", [
    ("(4, 4611686018427387904)", "|u1", "the element count overflows 64 bits"),
    ("(4611686018427387904, 4)", "|u1", "the element count overflows 64 bits"),
    ("(4, 4611686018427387904, 0)", "|u1", "the element count overflows 64 bits"),
    ("(3, 6148914691236517206)", "<u8", "the element count overflows 64 bits"),
    ("(1, 4294967296, 4294967296)", "|u1", "the element count overflows 64 bits"),
    ("(2, 9223372036854775808)", "|u1", "a non-negative integer that fits int64"),
    ("(18446744073709551616,)", "|u1", "a non-negative integer that fits int64"),
    ("(2, -1)", "|u1", "a non-negative integer that fits int64"),
    ("(0, 4611686018427387904, 4)", "|u1", "the row size overflows 64 bits"),
])
def test_npy_shapes_whose_sizes_overflow_are_refused(tmp_path, shape, descr, message):
    """A fifth hostile pass: shapes whose element count or row size wraps 64 bits (to 0, so
    an empty file would check out) are refused at discovery, where numpy refuses them too."""
    path = tmp_path / "shard_0000.npy"
    _npy_with_header(path, f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}",
                     b"")
    with pytest.raises((ValueError, OverflowError)):
        np.load(path, mmap_mode="r")
    with pytest.raises(shardload.LayoutError, match=message):
        shardload.discover(tmp_path)
