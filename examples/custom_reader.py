"""Read a format shardload does not know with a reader written in Python.

    python examples/custom_reader.py [DIR]

The made-up ".rows" format: one text line "ROWS <dtype> <rows> [<dim> ...]", then the rows,
raw, in this machine's byte order (examples/cpp/rows_format.hpp reads the same files in C++).
The reader is two functions: count_rows(path), the file's row count, and read(path, lo, hi),
rows [lo, hi) as a numpy array. shardload calls count_rows() on every file, checks what it
says, plans the tiles as for its own formats and runs read() inside parallel Legate tasks.
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import numpy as np

import shardload


def write_rows(path: pathlib.Path, a: np.ndarray) -> None:
    with open(path, "wb") as f:
        f.write(f"ROWS {a.dtype.str} {' '.join(map(str, a.shape))}\n".encode())
        f.write(np.ascontiguousarray(a).tobytes())


def header(path: str) -> tuple[np.dtype, tuple[int, ...], int]:
    with open(path, "rb") as f:
        line = f.readline(257)
    magic, dtype, *dims = line.split()
    if magic != b"ROWS":
        raise ValueError("not a ROWS file")
    return np.dtype(dtype.decode()), tuple(int(d) for d in dims), len(line)


def count_rows(path: str) -> int:
    return header(path)[1][0]


def read(path: str, lo: int, hi: int) -> np.ndarray:
    # A memory map reads only the rows asked for.
    dtype, shape, offset = header(path)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)[lo:hi]


# Before any load, in every process of the program (here: at import, as a script's top would).
shardload.register_reader("rows", count_rows=count_rows, read=read, dtype="float32",
                          trailing_shape=(8,), extension=".rows")


def main(directory: pathlib.Path) -> None:
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((n, 8)).astype(np.float32) for n in (1000, 0, 2500, 731)]
    for i, part in enumerate(parts):
        write_rows(directory / f"shard_{i:04d}.rows", part)

    array = shardload.load(directory, reader="rows", overdecompose=2)
    expected = np.concatenate(parts)
    assert np.array_equal(np.asarray(array), expected)
    print(f"loaded {array.shape} {array.dtype} through the Python reader 'rows'")
    print("column means:", np.round(np.asarray(array.mean(axis=0)), 4))

    window = shardload.load(directory, reader="rows", row_range=(900, 1100))
    assert np.array_equal(np.asarray(window), expected[900:1100])
    print("rows [900, 1100) match numpy")

    # A file that lies about its rows fails the load with the file and rows named.
    with open(directory / "shard_0002.rows", "r+b") as f:
        f.truncate(1000)
    try:
        shardload.load(directory, reader="rows")
    except shardload.ShardReadError as e:
        print("a damaged file is reported:", str(e).splitlines()[0][:160])
    else:
        raise AssertionError("the truncated file was not reported")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(pathlib.Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as d:
            main(pathlib.Path(d))
