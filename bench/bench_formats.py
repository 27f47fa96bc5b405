#!/usr/bin/env python
"""Format benchmark: shardload.load against each format's own Python library.

One run, the same Legate configuration (two CPU processors), hot page cache. For
every format the same logical dataset (float32, ROWS x 16, in 8 shards of uneven
rows) is written once; then shardload.load(dir, format=...) and the library's
sequential read-and-concatenate are timed alternately, medians of --reps runs.

Run it through scripts/bench_formats.sh, which sets up and configures Legate.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import statistics
import time

import h5py  # before cupynumeric: it loads Legate's HDF5 into the global scope
import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import zarr

import cupynumeric as cn
from legate.core import get_legate_runtime

import shardload

ROOT = pathlib.Path(__file__).resolve().parents[1]
COLS = 16


def shards(rows: int, n: int, seed: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.integers(0, rows + 1, size=n - 1))
    counts = np.diff(np.concatenate([[0], cuts, [rows]]))
    return [rng.standard_normal((int(c), COLS)).astype(np.float32) for c in counts]


# ---- writers and the libraries' own sequential readers ------------------------------------
def write_raw(d: pathlib.Path, arrays):
    for i, a in enumerate(arrays):
        a.tofile(d / f"shard_{i:04d}.bin")
    (d / "shardload.json").write_text(json.dumps({"dtype": "<f4", "shape": [COLS]}))


def read_raw(d: pathlib.Path):
    files = sorted(d.glob("shard_*.bin"))
    return np.concatenate([np.fromfile(f, dtype="<f4").reshape(-1, COLS) for f in files])


def write_h5(d: pathlib.Path, arrays, **kw):
    for i, a in enumerate(arrays):
        with h5py.File(d / f"shard_{i:04d}.h5", "w") as f:
            f.create_dataset("data", data=a, **kw)


def read_h5(d: pathlib.Path):
    out = []
    for f in sorted(d.glob("shard_*.h5")):
        with h5py.File(f, "r") as h:
            out.append(h["data"][:])
    return np.concatenate(out)


def table(a: np.ndarray) -> pa.Table:
    return pa.table({f"c{j}": a[:, j] for j in range(COLS)})


def to_array(t: pa.Table) -> np.ndarray:
    return np.stack([c.to_numpy() for c in t.columns], axis=1)


def write_parquet(d: pathlib.Path, arrays):
    for i, a in enumerate(arrays):
        pq.write_table(table(a), d / f"shard_{i:04d}.parquet", row_group_size=256 * 1024)


def read_parquet(d: pathlib.Path):
    return np.concatenate([to_array(pq.read_table(f)) for f in sorted(d.glob("*.parquet"))])


def write_arrow(d: pathlib.Path, arrays):
    for i, a in enumerate(arrays):
        feather.write_feather(table(a), d / f"shard_{i:04d}.arrow", compression="uncompressed",
                              chunksize=256 * 1024)


def read_arrow(d: pathlib.Path):
    return np.concatenate([to_array(feather.read_table(f, memory_map=False))
                           for f in sorted(d.glob("*.arrow"))])


def write_zarr(d: pathlib.Path, arrays, **kw):
    for i, a in enumerate(arrays):
        z = zarr.create_array(store=str(d / f"shard_{i:04d}.zarr"), shape=a.shape, dtype=a.dtype,
                              chunks=(65536, COLS), **kw)
        z[:] = a


def read_zarr(d: pathlib.Path):
    return np.concatenate([zarr.open_array(str(f), mode="r")[:]
                           for f in sorted(d.glob("*.zarr"))])


FORMATS = {
    # name: (format, writer, reader, goal ratio)
    "npy": ("npy", lambda d, a: [np.save(d / f"shard_{i:04d}.npy", x) for i, x in enumerate(a)],
            lambda d: np.concatenate([np.load(f) for f in sorted(d.glob("*.npy"))]), 1.0),
    "raw": ("raw", write_raw, read_raw, 1.5),
    "hdf5 contiguous": ("hdf5", write_h5, read_h5, 1.0),
    "hdf5 gzip": ("hdf5", lambda d, a: write_h5(d, a, chunks=(16384, COLS), maxshape=(None, COLS),
                                                compression="gzip", compression_opts=1),
                  read_h5, 1.5),
    "parquet (snappy)": ("parquet", write_parquet, read_parquet, 1.0),
    "arrow ipc": ("arrow", write_arrow, read_arrow, 1.0),
    "zarr v3 uncompressed": ("zarr", lambda d, a: write_zarr(d, a, compressors=None,
                                                             zarr_format=3), read_zarr, 1.5),
    "zarr v2 blosc": ("zarr", lambda d, a: write_zarr(d, a, zarr_format=2), read_zarr, 1.0),
}


def timed(fn) -> float:
    gc.collect()
    t0 = time.perf_counter()
    r = fn()
    if isinstance(r, cn.ndarray):
        get_legate_runtime().issue_execution_fence(block=True)
    dt = time.perf_counter() - t0
    del r
    gc.collect()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=str(ROOT / "bench-data" / "formats"))
    ap.add_argument("--rows", type=int, default=4_000_000)  # 256 MB of float32 x 16
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    base = pathlib.Path(args.dir)
    arrays = shards(args.rows, 8)
    expected = np.concatenate(arrays)
    nbytes = expected.nbytes
    print(f"dataset: {expected.shape} float32 in 8 shards, {nbytes / 1e9:.3f} GB; "
          f"LEGATE_CONFIG={os.environ.get('LEGATE_CONFIG')}")
    rows = []
    for name, (fmt, write, read, goal) in FORMATS.items():
        if args.only and args.only not in name:
            continue
        d = base / name.replace(" ", "_").replace("(", "").replace(")", "")
        stamp = d / ".complete"
        if not stamp.exists() or stamp.read_text() != str(args.rows):
            if d.exists():
                for p in sorted(d.rglob("*"), reverse=True):
                    p.rmdir() if p.is_dir() else p.unlink()
            d.mkdir(parents=True, exist_ok=True)
            write(d, arrays)
            stamp.write_text(str(args.rows))
        disk = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
        load = lambda: shardload.load(d, format=fmt)  # noqa: E731
        # Correctness first, and a warm page cache for both readers.
        np.testing.assert_array_equal(np.asarray(load()), expected)
        np.testing.assert_array_equal(read(d), expected)
        ts, tl = [], []
        for _ in range(args.reps):
            ts.append(timed(load))
            tl.append(timed(lambda: read(d)))
        s, lib = statistics.median(ts), statistics.median(tl)
        rows.append((name, disk, s, lib, goal))
        print(f"{name:22s} shardload {s:.3f} s  library {lib:.3f} s  ratio {lib / s:.2f}x "
              f"(goal {goal:.1f}x)", flush=True)
    print()
    print("| format | on disk MB | shardload s (GB/s) | library s (GB/s) | ratio | goal |")
    print("|---|---|---|---|---|---|")
    for name, disk, s, lib, goal in rows:
        print(f"| {name} | {disk / 1e6:.0f} | {s:.3f} ({nbytes / 1e9 / s:.2f}) | {lib:.3f} "
              f"({nbytes / 1e9 / lib:.2f}) | {lib / s:.2f}x | {goal:.1f}x |")


if __name__ == "__main__":
    main()
