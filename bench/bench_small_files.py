#!/usr/bin/env python
"""Small files: the load of many ~100 KB shards against its same-run bounds, and discovery.

One run, the same files, measured side by side and interleaved (best read as ratios: the
machine may be shared):
  memcpy bound   bench_bounds: the same bytes copied between two pre-faulted buffers with as
                 many threads as processors (and with one thread, for fill_rows);
  read bound     bench_bounds: every file opened, read whole with positional reads, closed,
                 by as many threads as processors (and by one thread, for fill_rows);
  reread         bench_bounds: the first file read as many times, the same way: the calls
                 of the read bound with a source that stays in the CPU caches;
  load           shardload.load(layout): the Legate load of an already discovered layout;
  load(dir)      shardload.load(directory): discovery and load, what a user types;
  fill_rows      layout.read(): the C++ host fill on one thread, no Legate;
  cold           the same load and read bound after posix_fadvise(DONTNEED) on every file.
Discovery: shardload.discover(directory) of --discover-shards one-row .npy shards, hot.

Usage (with the Legate environment of the README):
  python bench/bench_small_files.py --dir /tmp/bench-small --reps 5
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import statistics
import subprocess
import time

import numpy as np

import cupynumeric as cn
from legate.core import get_legate_runtime

import shardload

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = pathlib.Path(os.environ.get("SHARDLOAD_BUILD", ROOT / "build"))


def fence() -> None:
    get_legate_runtime().issue_execution_fence(block=True)


def drop_cache(paths: list[str]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm_cache(paths: list[str]) -> None:
    for p in paths:
        with open(p, "rb") as f:
            f.read()


def bound(*args: str) -> float:
    out = subprocess.run([str(BUILD / "bench_bounds"), *args], check=True, capture_output=True,
                         text=True).stdout.split()
    return float(out[0])


def make_set(directory: pathlib.Path, shards: int, shape: str) -> None:
    meta = directory / "_meta.json"
    want = {"num_shards": shards, "shape": [int(x) for x in shape.split(",")]}
    if meta.exists():
        m = json.loads(meta.read_text())
        if m.get("num_shards") == want["num_shards"] and m.get("shape") == want["shape"]:
            return
    directory.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(BUILD / "shardload"), "write", "--shard-dir", str(directory),
                    "--num-shards", str(shards), "--shape", shape, "--dtype", "float32",
                    "--seed", "1"], check=True, capture_output=True)


def timed(fn, before=None) -> float:
    if before is not None:
        before()
    gc.collect()
    t0 = time.perf_counter()
    result = fn()
    if isinstance(result, cn.ndarray):
        fence()
    dt = time.perf_counter() - t0
    del result
    gc.collect()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=str(ROOT / "bench-data" / "small"))
    ap.add_argument("--shards", type=int, default=10000)
    ap.add_argument("--shape", default="8000000,32", help="of the small-file set (float32)")
    ap.add_argument("--discover-shards", type=int, default=100000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--procs", type=int, default=2, help="Legate CPU processors")
    ap.add_argument("--skip", default="", help="comma list of: cold, discovery")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    base = pathlib.Path(args.dir)
    small = base / "small"
    make_set(small, args.shards, args.shape)
    layout = shardload.discover(small)
    paths = layout.paths
    nbytes = sum(os.path.getsize(p) for p in paths)
    data_bytes = layout.nbytes
    ref = np.concatenate([np.load(p) for p in paths])
    assert np.array_equal(np.asarray(shardload.load(layout)), ref)
    assert np.array_equal(layout.read(), ref)
    del ref
    gc.collect()

    warm_cache(paths)
    hot = {"memcpy": [], "memcpy-1": [], "read": [], "read-1": [], "reread": [], "load": [],
           "load(dir)": [], "fill_rows": []}
    cold = {"read": [], "load": []}
    for _ in range(args.reps):
        hot["memcpy"].append(bound("--reps", "1", "memcpy", str(data_bytes), str(args.procs)))
        hot["memcpy-1"].append(bound("--reps", "1", "memcpy", str(data_bytes), "1"))
        hot["read"].append(bound("read", str(args.procs), *paths))
        hot["read-1"].append(bound("read", "1", *paths))
        hot["reread"].append(bound("--reps", "1", "reread", str(args.procs), str(len(paths)),
                                   paths[0]))
        hot["load"].append(timed(lambda: shardload.load(layout)))
        hot["load(dir)"].append(timed(lambda: shardload.load(small)))
        hot["fill_rows"].append(timed(lambda: layout.read()))
        if "cold" not in skip:
            drop_cache(paths)
            cold["read"].append(bound("read", str(args.procs), *paths))
            cold["load"].append(timed(lambda: shardload.load(layout), lambda: drop_cache(paths)))
            warm_cache(paths)
    med = {k: statistics.median(v) for k, v in hot.items()}
    medc = {k: statistics.median(v) for k, v in cold.items() if v}
    gb = data_bytes / 1e9
    print(f"{len(paths)} shards, {nbytes / 1e9:.3f} GB on disk, {gb:.3f} GB of data, "
          f"{args.procs} processors, medians of {args.reps}")
    for k, v in med.items():
        print(f"  hot  {k:10s} {v:8.4f} s  {gb / v:6.2f} GB/s")
    for k, v in medc.items():
        print(f"  cold {k:10s} {v:8.4f} s  {gb / v:6.2f} GB/s")
    ratios = {
        "load / memcpy bound": med["memcpy"] / med["load"],
        "load(dir) / memcpy bound": med["memcpy"] / med["load(dir)"],
        "load / read bound": med["read"] / med["load"],
        "fill_rows / 1-thread memcpy bound": med["memcpy-1"] / med["fill_rows"],
        "fill_rows / 1-thread read bound": med["read-1"] / med["fill_rows"],
        "read bound / memcpy bound": med["memcpy"] / med["read"],
        "reread / memcpy bound": med["memcpy"] / med["reread"],
    }
    if medc:
        ratios["cold load / cold read bound"] = medc["read"] / medc["load"]
    for k, v in ratios.items():
        print(f"  {k:36s} {100 * v:5.0f}%")
    result = {"shards": len(paths), "bytes": data_bytes, "hot": med, "cold": medc,
              "ratios": ratios}

    if "discovery" not in skip:
        many = base / "many"
        make_set(many, args.discover_shards, f"{args.discover_shards},8")
        shardload.discover(many)  # the page cache and the dentries hot
        times = [timed(lambda: shardload.discover(many)) for _ in range(max(3, args.reps // 2))]
        d = statistics.median(times)
        print(f"  discover {args.discover_shards} shards (hot): {d:.3f} s "
              f"({1e6 * d / args.discover_shards:.1f} us per shard)")
        result["discover"] = {"shards": args.discover_shards, "seconds": d}
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
