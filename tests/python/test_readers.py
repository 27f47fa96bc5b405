"""Python readers (shardload.register_reader, load(reader=...)) under Legate, against numpy.

The made-up format of these tests: a text line "ROWS <dtype> <rows> [<dim> ...]\\n", then the
rows, raw, in this machine's byte order (the C++ example's format, examples/cpp)."""

from __future__ import annotations

import errno
import itertools
import os
import re
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import shardload
from conftest import DTYPES, random_array

import cupynumeric as cn  # noqa: E402

_names = itertools.count()


def write_rows(path: os.PathLike | str | bytes, a: np.ndarray) -> None:
    dims = " ".join(str(d) for d in a.shape)
    with open(path, "wb") as f:
        f.write(f"ROWS {a.dtype.str} {dims}\n".encode())
        f.write(np.ascontiguousarray(a).tobytes())


def header(path: str) -> tuple[np.dtype, list[int], int]:
    with open(path, "rb") as f:
        line = f.readline(257)
    words = line.split()
    return np.dtype(words[1].decode()), [int(w) for w in words[2:]], len(line)


def rows_of(path: str) -> int:
    return header(path)[1][0]


def read_rows(path: str, lo: int, hi: int) -> np.ndarray:
    dtype, shape, offset = header(path)
    data = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=tuple(shape))
    return np.array(data[lo:hi])


def register(**kwargs) -> str:
    """A reader under a new name (names cannot be registered twice), by default the ROWS one."""
    name = f"test{next(_names)}"
    kwargs.setdefault("read", read_rows)
    kwargs.setdefault("count_rows", rows_of)
    shardload.register_reader(name, **kwargs)
    return name


def write_set(d: pathlib.Path, arrays: list[np.ndarray], ext: str = ".rows") -> list[str]:
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, a in enumerate(arrays):
        paths.append(str(d / f"shard_{i:04d}{ext}"))
        write_rows(paths[-1], a)
    return paths


@pytest.mark.parametrize("k", [1, 3, 8])
def test_round_trip_across_shard_boundaries(tmp_path: pathlib.Path, k: int) -> None:
    rng = np.random.default_rng(7 + k)
    name = register()
    for case in range(3):
        rows = [0 if rng.random() < 0.25 else int(rng.integers(1, 30)) for _ in range(9)]
        trailing = tuple(int(x) for x in rng.integers(1, 4, size=case))
        dtype = DTYPES[int(rng.integers(0, len(DTYPES)))]
        arrays = [random_array(rng, (r, *trailing), dtype) for r in rows]
        paths = write_set(tmp_path / f"c{case}", arrays)
        out = shardload.load(paths, reader=name, overdecompose=k)
        assert isinstance(out, cn.ndarray)
        expected = np.concatenate(arrays)
        assert out.shape == expected.shape and out.dtype == expected.dtype
        np.testing.assert_array_equal(np.asarray(out), expected)


def test_directory_by_extension_pattern_rows_and_astype(tmp_path: pathlib.Path) -> None:
    arrays = [np.arange(12, dtype=np.float32).reshape(4, 3) + 100 * i for i in range(5)]
    write_set(tmp_path / "d", arrays, ext=".myrows")
    expected = np.concatenate(arrays)
    name = register(extension=".myrows", dtype="float32", trailing_shape=(3,))
    np.testing.assert_array_equal(np.asarray(shardload.load(tmp_path / "d", reader=name)),
                                  expected)
    got = shardload.load(str(tmp_path / "d/shard_{:04d}.myrows"), reader=name, row_range=(3, 13))
    np.testing.assert_array_equal(np.asarray(got), expected[3:13])
    got = shardload.load(tmp_path / "d", reader=name, row_range=slice(5, 5))
    assert got.shape == (0, 3)
    got = shardload.load(tmp_path / "d", reader=name, astype="int64", overdecompose=4)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(np.asarray(got), expected.astype(np.int64))


def test_only_zero_row_files(tmp_path: pathlib.Path) -> None:
    paths = write_set(tmp_path, [np.zeros((0, 2), np.int16)] * 3)
    out = shardload.load(paths, reader=register())
    assert out.shape == (0, 2) and out.dtype == np.int16


def test_dtype_and_trailing_shape_from_an_empty_read(tmp_path: pathlib.Path) -> None:
    arrays = [np.full((3, 2, 2), i, dtype=np.uint16) for i in range(3)]
    paths = write_set(tmp_path, arrays)
    calls = []

    def read(path: str, lo: int, hi: int) -> np.ndarray:
        calls.append((path, lo, hi))
        return read_rows(path, lo, hi)

    out = shardload.load(paths, reader=register(read=read))
    assert out.dtype == np.uint16 and out.shape == (9, 2, 2)
    np.testing.assert_array_equal(np.asarray(out), np.concatenate(arrays))
    assert calls[0] == (paths[0], 0, 0)


def test_strided_and_fortran_results_are_written_right(tmp_path: pathlib.Path) -> None:
    arrays = [np.arange(40, dtype=np.float64).reshape(8, 5) * (i + 1) for i in range(3)]
    paths = write_set(tmp_path, arrays)

    def read(path: str, lo: int, hi: int) -> np.ndarray:
        a = read_rows(path, lo, hi)
        return np.asfortranarray(a) if lo % 2 else np.repeat(a, 2, axis=1)[:, ::2]

    out = shardload.load(paths, reader=register(read=read), overdecompose=5)
    np.testing.assert_array_equal(np.asarray(out), np.concatenate(arrays))


def test_a_reader_that_raises_is_a_shard_read_error_naming_file_and_rows(
        tmp_path: pathlib.Path) -> None:
    arrays = [np.ones((10, 2), np.float32)] * 3
    paths = write_set(tmp_path, arrays)

    def read(path: str, lo: int, hi: int) -> np.ndarray:
        if path == paths[1]:
            raise OSError("the disk is on fire")
        return read_rows(path, lo, hi)

    with pytest.raises(shardload.ShardReadError) as e:
        shardload.load(paths, reader=register(read=read, dtype="float32", trailing_shape=2))
    message = str(e.value)
    # Two tiles on two CPUs: shard 1 is split between them, and either half may fail first.
    # The engine's context (the tile and its rows) in front, as for every format.
    assert re.search(re.escape(paths[1]) + r": rows \[(0, 5|5, 10)\): read\(\) of the reader",
                     message), message
    assert "raised OSError: the disk is on fire" in message
    assert e.value.filename == paths[1]
    # The process goes on: another load works.
    np.testing.assert_array_equal(np.asarray(shardload.load(paths, reader=register())),
                                  np.concatenate(arrays))


def test_the_failing_file_is_data_not_found_in_the_message(tmp_path: pathlib.Path) -> None:
    # The message of shard 1's failure names shard 0, whose path is longer: filename is the
    # file that failed, whatever the message holds.
    arrays = [np.ones((4, 2), np.float32)] * 2
    paths = [str(tmp_path / "a_longer_name.rows"), str(tmp_path / "b.rows")]
    for p, a in zip(paths, arrays):
        write_rows(p, a)

    def read(path: str, lo: int, hi: int) -> np.ndarray:
        if path == paths[1]:
            raise OSError(f"the copy of {paths[0]} differs")
        return read_rows(path, lo, hi)

    with pytest.raises(shardload.ShardReadError) as e:
        shardload.load(paths, reader=register(read=read, dtype="float32", trailing_shape=2))
    assert e.value.filename == paths[1]
    assert e.value.errno is None
    assert f"{paths[1]}: rows [" in str(e.value)
    assert "\x1e" not in str(e.value)


def test_a_file_gone_since_discovery_carries_file_and_errno(tmp_path: pathlib.Path) -> None:
    paths = write_set(tmp_path, [np.ones((4, 2), np.float32)] * 2)

    def read(path: str, lo: int, hi: int) -> np.ndarray:
        rows = read_rows(path, lo, hi)
        if lo == hi == 0 and path == paths[1]:  # discovery's last question: the file goes
            os.remove(paths[1])
        return rows

    with pytest.raises(shardload.ShardReadError) as e:
        shardload.load(paths, reader=register(read=read))
    assert e.value.filename == paths[1]
    assert e.value.errno == errno.ENOENT
    assert "cannot open" in str(e.value)


@pytest.mark.parametrize("wrong, found", [
    (lambda a: a[:-1], "returned shape (4, 3); expected (5, 3)"),
    (lambda a: a.reshape(-1), "returned shape (15,); expected (5, 3)"),
    (lambda a: a.astype(np.float64), "returned dtype float64; expected float32"),
    (lambda a: a.tolist(), "returned list; expected a numpy array of shape (5, 3)"),
])
def test_a_result_that_does_not_fit_is_a_clear_error(tmp_path: pathlib.Path, wrong,
                                                     found: str) -> None:
    paths = write_set(tmp_path, [np.ones((5, 3), np.float32)] * 2)
    name = register(read=lambda p, lo, hi: wrong(read_rows(p, lo, hi)), dtype="float32",
                    trailing_shape=(3,))
    with pytest.raises(shardload.ShardReadError) as e:
        shardload.load(paths, reader=name)
    assert f": rows [0, 5): read() of the reader '{name}' {found}" in str(e.value)
    assert e.value.filename in paths


@pytest.mark.parametrize("value, shown", [(-1, "int -1"), (2.0, "float 2.0"), (True, "bool True"),
                                          (None, "NoneType None"), ("3", "str '3'")])
def test_rows_must_return_an_int_not_below_zero(tmp_path: pathlib.Path, value: object,
                                                shown: str) -> None:
    paths = write_set(tmp_path, [np.ones((5, 3), np.float32)] * 2)
    name = register(count_rows=lambda p: value if p == paths[1] else 5, dtype="float32",
                    trailing_shape=(3,))
    with pytest.raises(shardload.LayoutError) as e:
        shardload.load(paths, reader=name)
    assert str(e.value).endswith(f": {paths[1]}: count_rows(): the reader '{name}' returned "
                                 f"{shown}; expected an int >= 0")


def test_rows_raising_is_a_layout_error_naming_the_file(tmp_path: pathlib.Path) -> None:
    paths = write_set(tmp_path, [np.ones((5, 3), np.float32)])
    def rows(path: str) -> int:
        raise ValueError("bad header")

    with pytest.raises(shardload.LayoutError) as e:
        shardload.load(paths, reader=register(count_rows=rows, dtype="f4", trailing_shape=3))
    assert f": {paths[0]}: count_rows(): the reader 'test" in str(e.value)
    assert str(e.value).endswith("raised ValueError: bad header")


def test_special_files_are_refused_before_the_reader_sees_them(tmp_path: pathlib.Path) -> None:
    fifo = tmp_path / "pipe.rows"
    os.mkfifo(fifo)
    seen = []
    name = register(count_rows=lambda p: seen.append(p) or 0, dtype="f4", trailing_shape=())
    with pytest.raises(shardload.LayoutError, match=f": {fifo}: not a regular file$"):
        shardload.load([fifo], reader=name)
    with pytest.raises(shardload.LayoutError, match=": /dev/null: not a regular file$"):
        shardload.load(["/dev/null"], reader=name)
    assert seen == []


def test_odd_names(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "we[ir]d *?"
    d.mkdir()
    arrays = [np.arange(6, dtype=np.int32).reshape(3, 2) + i for i in range(2)]
    paths = [os.path.join(os.fsencode(d), b"caf\xe9_%d.rows" % i) for i in range(2)]
    for p, a in zip(paths, arrays):
        write_rows(p, a)
    out = shardload.load(paths, reader=register())
    np.testing.assert_array_equal(np.asarray(out), np.concatenate(arrays))


def test_arguments_are_checked(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="no reader is registered as 'nope'"):
        shardload.load(tmp_path, reader="nope")
    with pytest.raises(TypeError, match="reader: expected the name"):
        shardload.load(tmp_path, reader=read_rows)
    name = register()
    with pytest.raises(TypeError, match="dtype cannot be passed with reader="):
        shardload.load(tmp_path, reader=name, dtype="f4", info=True)
    layout = shardload.discover(write_set(tmp_path / "l", [np.ones((2, 2), np.int8)]),
                                format=name)
    with pytest.raises(TypeError, match="a Layout cannot be passed with reader="):
        shardload.load(layout, reader=name)
    with pytest.raises(ValueError, match="already registered"):
        shardload.register_reader(name, read=read_rows, count_rows=rows_of)
    with pytest.raises(ValueError, match="name: expected 1 to 64"):
        shardload.register_reader("a b", read=read_rows, count_rows=rows_of)
    with pytest.raises(TypeError, match="read: expected a callable"):
        shardload.register_reader("x1", read=None, count_rows=rows_of)
    with pytest.raises(ValueError, match="dtype: expected a numeric dtype"):
        shardload.register_reader("x2", read=read_rows, count_rows=rows_of, dtype=object)
    with pytest.raises(ValueError, match="extension: expected a dot"):
        shardload.register_reader("x3", read=read_rows, count_rows=rows_of, extension="rows")
    with pytest.raises(ValueError, match="expected dimensions >= 0"):
        shardload.register_reader("x4", read=read_rows, count_rows=rows_of, trailing_shape=(2, -1))
    # A directory without a pattern needs the reader's extension.
    with pytest.raises(ValueError, match="registered without an extension"):
        shardload.load(tmp_path, reader=name)
    assert name in shardload.registered_readers()
    assert "x1" not in shardload.registered_readers()


def test_a_file_changed_since_discovery_is_a_shard_read_error(tmp_path: pathlib.Path) -> None:
    paths = write_set(tmp_path, [np.ones((4, 2), np.float32)] * 2)

    def read(path: str, lo: int, hi: int) -> np.ndarray:
        rows = read_rows(path, lo, hi)
        if path == paths[1]:
            with open(path, "ab") as f:  # a writer appends while the load reads
                f.write(b"more")
        return rows

    with pytest.raises(shardload.ShardReadError) as e:
        shardload.load(paths, reader=register(read=read, dtype="float32", trailing_shape=(2,)))
    # The read, then the check after it, which finds the append.
    assert f": {paths[1]}: changed while reading: size 45 -> 49 bytes" in str(e.value)
    assert e.value.filename == paths[1]


def test_huge_declared_sizes_fail_before_anything_is_allocated(tmp_path: pathlib.Path) -> None:
    paths = write_set(tmp_path, [np.ones((4, 2), np.float32)] * 3)
    read_calls = []

    def read(path: str, lo: int, hi: int) -> np.ndarray:
        read_calls.append(path)
        return read_rows(path, lo, hi)

    name = register(read=read, count_rows=lambda p: 2**62, dtype="float32", trailing_shape=(2,))
    with pytest.raises(shardload.LayoutError, match="rows: the dataset size overflows 64 bits"):
        shardload.load(paths, reader=name)
    # Fits 64 bits, not the 4 GB Legate has here: refused as load() refuses it.
    name = register(read=read, count_rows=lambda p: 10**10, dtype="float32", trailing_shape=(2,))
    with pytest.raises(shardload.OutOfMemoryError, match="the dataset needs 240.00 GB"):
        shardload.load(paths, reader=name)
    assert read_calls == []


def test_dtypes_cupynumeric_cannot_hold_are_refused_at_registration() -> None:
    # Big-endian: refused, not converted (read() must return arrays of exactly the dtype, and
    # cuPyNumeric holds native ones only); the message says what to pass instead.
    with pytest.raises(ValueError, match=r"^dtype: >f4 is not in the machine's byte order; a "
                                         r"reader's arrays are native: pass <f4 and return "
                                         r"arr\.astype\('<f4'\) from read\(\)$"):
        shardload.register_reader("be1", read=read_rows, count_rows=rows_of, dtype=">f4")
    with pytest.raises(ValueError, match="dtype: float128 has no Legate type"):
        shardload.register_reader("ld1", read=read_rows, count_rows=rows_of, dtype=np.longdouble)
    assert "be1" not in shardload.registered_readers()
    assert "ld1" not in shardload.registered_readers()
    # One-byte and native types are native whatever their spelling.
    shardload.register_reader("be2", read=read_rows, count_rows=rows_of, dtype=">u1")


def test_a_big_endian_dtype_told_by_an_empty_read_is_a_layout_error(
        tmp_path: pathlib.Path) -> None:
    paths = write_set(tmp_path, [np.ones((4, 2), np.float32)])
    name = register(read=lambda p, lo, hi: read_rows(p, lo, hi).astype(">f4"))
    with pytest.raises(shardload.LayoutError, match=r"read\(path, 0, 0\): dtype: >f4 is not in "
                                                    r"the machine's byte order"):
        shardload.load(paths, reader=name)


# Loads that, unguarded, hang or end the process: each runs in a child process with a bound.
_CHILD = """
import os, sys
import numpy as np
import shardload

d = sys.argv[1]
paths = [os.path.join(d, f"s{i}.arr") for i in range(2)]
for i, p in enumerate(paths):
    with open(p, "wb") as f:
        np.save(f, np.arange(6, dtype=np.float32).reshape(3, 2) + 10 * i)


def rows(p):
    return np.load(p, mmap_mode="r").shape[0]


def read(p, lo, hi):
    return np.array(np.load(p, mmap_mode="r")[lo:hi])


def attempt(name):
    try:
        a = shardload.load(paths, reader=name)
        print("LOADED", np.asarray(a).tolist(), flush=True)
    except shardload.ShardReadError as e:
        print("ERROR", e.filename, "|", e, flush=True)
"""


def run_child(tmp_path: pathlib.Path, body: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _CHILD + textwrap.dedent(body), str(tmp_path)],
                          capture_output=True, text=True, timeout=240)


def test_a_file_replaced_by_a_fifo_after_discovery_is_refused_before_read_opens_it(
        tmp_path: pathlib.Path) -> None:
    r = run_child(tmp_path, """
        def swapping_rows(p):
            n = rows(p)
            if p == paths[1]:  # after discovery's check of this file: a FIFO in its place
                os.mkfifo(p + ".fifo")
                os.replace(p + ".fifo", p)
            return n

        shardload.register_reader("swap", count_rows=swapping_rows, read=read, dtype="float32",
                                  trailing_shape=(2,))
        attempt("swap")
        os.unlink(paths[1])
        with open(paths[1], "wb") as f:
            np.save(f, np.zeros((1, 2), np.float32))
        shardload.register_reader("plain", count_rows=rows, read=read, dtype="float32",
                                  trailing_shape=(2,))
        attempt("plain")  # the runtime goes on
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith(("ERROR", "LOADED"))]
    p1 = str(tmp_path / "s1.arr")
    # Refused by the engine's opener (which does not block on a FIFO) before read() runs.
    assert lines[0].startswith(f"ERROR {p1} | "), r.stdout + r.stderr
    assert lines[0].endswith(f": {p1}: not a regular file"), r.stdout + r.stderr
    assert lines[1].startswith("LOADED [[0.0, 1.0], "), lines


def test_a_reader_calling_cupynumeric_is_a_clean_error(tmp_path: pathlib.Path) -> None:
    r = run_child(tmp_path, """
        import cupynumeric as cn


        def read_cn(p, lo, hi):
            return np.asarray(cn.arange((hi - lo) * 2, dtype=np.float32).reshape(hi - lo, 2))


        def read_swallowing(p, lo, hi):
            try:
                cn.zeros(3)
            except Exception:
                pass
            return read(p, lo, hi)


        for name, fn in (("cn", read_cn), ("swallow", read_swallowing), ("fine", read)):
            shardload.register_reader(name, count_rows=rows, read=fn, dtype="float32",
                                      trailing_shape=(2,))
            attempt(name)
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith(("ERROR", "LOADED"))]
    assert len(lines) == 3, r.stdout + r.stderr
    for line, name in zip(lines[:2], ("cn", "swallow")):
        assert re.fullmatch(rf"ERROR \S+ \| .*\S+: rows \[0, 3\): read\(\) of the reader "
                            rf"'{name}' called (cupynumeric|legate)\.\S+: cuPyNumeric and "
                            r"Legate cannot be called inside read\(\), which runs in a Legate "
                            r"task; return a numpy array", line), line
    assert lines[2] == ("LOADED [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [10.0, 11.0], "
                        "[12.0, 13.0], [14.0, 15.0]]"), lines
