"""One engine library in the process: both extension modules and libshardload_legate link
libshardload.so, so a reader registered in C++ serves shardload.discover / load / batches, the
process-wide state is the same seen from either module, and a Layout passes from _core to
_legate as an object."""

from __future__ import annotations

import ctypes
import pathlib

import numpy as np
import pytest

import shardload
from shardload import _core
from conftest import BUILD

import cupynumeric as cn  # noqa: E402  (a pinned dependency: its absence must fail, not skip)

# tests/cpp/rows_reader_library.cc: its static initializer registers the example reader
# (examples/cpp/rows_format.hpp) under this name and extension.
NAME = "cxx_rows"
EXT = ".cxxrows"


@pytest.fixture(scope="module")
def rows_library() -> ctypes.CDLL:
    path = BUILD / "libshardload_test_rows_reader.so"
    if not path.exists():
        pytest.fail(f"{path} is not built; run scripts/setup.sh")
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    assert lib.shardload_test_rows_registered() == 1
    return lib


def write_rows(path: pathlib.Path, array: np.ndarray) -> None:
    """A file of the example format: one header line, then the rows raw in C order."""
    dims = " ".join(str(d) for d in array.shape[1:])
    head = f"ROWS {array.dtype.name} {array.shape[0]}{' ' + dims if dims else ''}\n"
    path.write_bytes(head.encode() + np.ascontiguousarray(array).tobytes())


def write_set(d: pathlib.Path, seed: int, dtype: str, trailing: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(seed)
    d.mkdir()
    # Uneven shards, one empty, none a multiple of anything the plan uses.
    rows = [7, 0, 13, 1, 29]
    arrays = []
    for i, n in enumerate(rows):
        a = (rng.standard_normal((n, *trailing)) * 100).astype(dtype)
        write_rows(d / f"shard_{i:04d}{EXT}", a)
        arrays.append(a)
    return np.concatenate(arrays)


CASES = [("float32", (3,)), ("int16", ()), ("float64", (2, 5))]


@pytest.mark.parametrize("dtype,trailing", CASES)
def test_discover_by_name_and_by_extension(rows_library, tmp_path, dtype, trailing) -> None:
    expected = write_set(tmp_path / "d", 11, dtype, trailing)
    for layout in (shardload.discover(tmp_path / "d", format=NAME),
                   shardload.discover(tmp_path / "d")):
        assert layout.shape == expected.shape and layout.dtype == expected.dtype
        assert layout.shard_rows == [7, 0, 13, 1, 29]
        np.testing.assert_array_equal(layout.read(), expected)
        np.testing.assert_array_equal(layout.read(5, 22), expected[5:22])


@pytest.mark.parametrize("dtype,trailing", CASES)
@pytest.mark.parametrize("k", [1, 3])
def test_load_through_legate(rows_library, tmp_path, dtype, trailing, k) -> None:
    expected = write_set(tmp_path / "d", 12 + k, dtype, trailing)
    out = shardload.load(tmp_path / "d", format=NAME, overdecompose=k)
    assert isinstance(out, cn.ndarray)
    assert out.shape == expected.shape and out.dtype == expected.dtype
    np.testing.assert_array_equal(np.asarray(out), expected)
    part = shardload.load(tmp_path / "d", row_range=(6, 40), overdecompose=k)
    np.testing.assert_array_equal(np.asarray(part), expected[6:40])


def test_batches_and_discover_once(rows_library, tmp_path) -> None:
    expected = write_set(tmp_path / "d", 21, "float32", (4,))
    got = [np.asarray(b) for b in shardload.batches(tmp_path / "d", 8, format=NAME)]
    assert [len(b) for b in got] == [8] * 6 + [2]
    np.testing.assert_array_equal(np.concatenate(got), expected)
    once = shardload.discover_once(tmp_path / "d", format=NAME)
    assert once == shardload.discover(tmp_path / "d", format=NAME)


def test_unknown_format_name_still_refused(rows_library, tmp_path) -> None:
    write_set(tmp_path / "d", 31, "float32", ())
    with pytest.raises(ValueError, match=r"unknown format 'no_such_rows'"):
        shardload.discover(tmp_path / "d", format="no_such_rows")


def test_process_state_is_single(rows_library) -> None:
    from shardload import _legate

    core, legate = _core._process_state(), _legate._process_state()
    # One I/O backend, one registry: the C++ reader is seen from both modules.
    assert core["posix_io"] == legate["posix_io"] != 0
    assert NAME in core["readers"]
    assert core["readers"] == legate["readers"]


def test_layout_crosses_to_legate_as_an_object(tmp_path, monkeypatch) -> None:
    """load and batches hand the Layout itself to _legate: neither encodes it (a Layout's
    encoding is for pickling and comparison only)."""
    rng = np.random.default_rng(41)
    parts = [rng.standard_normal((n, 2)).astype("float32") for n in (9, 0, 23, 5)]
    for i, part in enumerate(parts):
        np.save(tmp_path / f"shard_{i:04d}.npy", part)
    expected = np.concatenate(parts)
    layout = shardload.discover(tmp_path)

    def refuse(self):
        raise AssertionError("the layout was encoded to reach _legate")

    monkeypatch.setattr(shardload.Layout, "encode", refuse)
    np.testing.assert_array_equal(np.asarray(shardload.load(layout)), expected)
    got = [np.asarray(b) for b in shardload.batches(layout, 16)]
    np.testing.assert_array_equal(np.concatenate(got), expected)
