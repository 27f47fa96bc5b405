#!/usr/bin/env python
"""Decode once: one large Zarr chunk loaded at K = 1 and K = 64, and decode counts.

One run, side by side: zarr-python writes one array in ONE chunk (--mib, 128 MiB by default,
float32, zstd level 1), then shardload.load(store, overdecompose=K) is timed for K = 1 and K = 64
alternately (medians of --reps, hot page cache), with the tiles of each plan. The goal: K = 64
within 1.5x of K = 1 (before chunk-aware tiles each of the 2 x 64 tiles decoded the whole chunk).

Then the decode counts of the device fill (bench_decode_count, the staging pipeline without a GPU
through HostCopyBackend): an HDF5 gzip 4096 x 64 float32 dataset in 4 chunks of 1024 rows
(256 KiB each) through 32 KiB staging buffers (the goal: decodes = chunk count = 4), and the
one-chunk Zarr store under the plan for P = 2, K = 64 with the chunk-aware tiles and without.

    python bench/bench_decode.py [--dir DIR] [--mib 128] [--reps 3]

Needs the environment of docs/benchmarks.md (Legate on two CPUs, SHARDLOAD_BUILD for the
bench_decode_count program).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import time

import h5py  # before cupynumeric: it loads Legate's HDF5 into the global scope
import numpy as np
import zarr

import cupynumeric as cn  # noqa: F401  (starts the runtime as the load does)
from legate.core import get_legate_runtime

import shardload

ROOT = pathlib.Path(__file__).resolve().parents[1]


def fence() -> None:
    get_legate_runtime().issue_execution_fence(block=True)


def write_one_chunk(path: pathlib.Path, mib: int) -> np.ndarray:
    cols = 64
    rows = mib * (1 << 20) // (4 * cols)
    rng = np.random.default_rng(5)
    # Rounded normal values: compressible as measured data often is.
    a = np.round(rng.standard_normal((rows, cols)), 2).astype(np.float32)
    if not path.exists():
        z = zarr.create_array(store=str(path), shape=a.shape, chunks=a.shape, dtype="float32")
        z[:] = a
    return a


def timed_load(path: pathlib.Path, k: int) -> tuple[float, shardload.LoadInfo]:
    t0 = time.perf_counter()
    out, info = shardload.load(path, overdecompose=k, info=True)
    fence()
    dt = time.perf_counter() - t0
    del out
    return dt, info


def count(program: str, path: pathlib.Path, *args: str) -> dict:
    r = subprocess.run([program, str(path), *args], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=str(ROOT / "bench-data" / "decode"))
    ap.add_argument("--mib", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    base = pathlib.Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    print(f"LEGATE_CONFIG={os.environ.get('LEGATE_CONFIG')}")

    store = base / f"one_chunk_{args.mib}mib.zarr"
    expected = write_one_chunk(store, args.mib)
    out = shardload.load(store)  # warm-up: runtime start, page cache, first mapping
    np.testing.assert_array_equal(np.asarray(out), expected)
    del out
    times: dict[int, list[float]] = {1: [], 64: []}
    tiles = {}
    for _ in range(args.reps):
        for k in (1, 64):
            dt, info = timed_load(store, k)
            times[k].append(dt)
            tiles[k] = (info.tiles, info.tile_rows)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"one {args.mib} MiB Zarr chunk ({expected.shape[0]} x {expected.shape[1]} float32):")
    for k in (1, 64):
        print(f"  K = {k:2d}: median {med[k]:.3f} s over {args.reps} "
              f"({', '.join(f'{t:.3f}' for t in times[k])}), tiles {tiles[k][0]} of "
              f"{tiles[k][1]} rows")
    print(f"  K = 64 / K = 1: {med[64] / med[1]:.2f} (goal <= 1.5)")

    build = pathlib.Path(os.environ.get("SHARDLOAD_BUILD", ROOT / "build"))
    program = str(build / "bench_decode_count")
    h5 = base / "gzip_4096x64.h5"
    if not h5.exists():
        a = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64)
        with h5py.File(h5, "w") as f:
            f.create_dataset("data", data=a, chunks=(1024, 64), compression="gzip")
    c = count(program, h5, "--staging-bytes", str(32 << 10), "--buffers", "4", "--readers", "3")
    print(f"HDF5 gzip 4096 x 64, 4 chunks of 1024 rows, 32 KiB staging buffers: "
          f"{c['decodes']} decodes (goal 4), {c['cache_hits']} cache hits")
    for units in ("on", "off"):
        c = count(program, store, "--processors", "2", "--overdecompose", "64", "--units", units)
        print(f"one-chunk Zarr, device fill over the plan for P = 2, K = 64, chunk-aware tiles "
              f"{units}: {c['tiles']} tiles, {c['decodes']} decodes")


if __name__ == "__main__":
    main()
