#!/usr/bin/env python
"""The Python reader benchmark: shardload.load(..., reader=NAME) against the seed-pattern
Python-task loader of bench_load.py, on the same .npy files, alternating in one run.

Both read each piece with np.load(path, mmap_mode="r")[lo:hi] inside a Python Legate task
and copy it into the task's piece of the output; the Python reader adds shardload's checks
(rows() per file, the returned array's dtype and shape) and its plan. The ratio is the
median time of the Python reader over the median time of the seed-pattern loader (goal:
at most 1.2).

    python bench/bench_custom_reader.py [--dir DIR] [--reps 5] [--sets a,b]

Sets: (a) 16 shards, about 400 MB float32, hot page cache; (b) 2,000 shards of about
100 KB, hot page cache. Run it with LEGATE_CONFIG set as for the tests.
"""

from __future__ import annotations

import argparse
import gc
import json
import pathlib
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_load  # noqa: E402  (the seed-pattern loader, its helpers and datasets)

import shardload  # noqa: E402


def npy_rows(path: str) -> int:
    return int(np.load(path, mmap_mode="r").shape[0])


def npy_read(path: str, lo: int, hi: int) -> np.ndarray:
    return np.load(path, mmap_mode="r")[lo:hi]


def run_set(name: str, directory: pathlib.Path, paths: list[str], reps: int) -> dict:
    bench_load.warm_cache(paths)
    methods = {
        "python-task": lambda: bench_load.python_task_load(paths),
        "python-reader": lambda: shardload.load(paths, reader="npy-mmap"),
    }
    times: dict[str, list[float]] = {m: [] for m in methods}
    for _ in range(reps):
        for m, fn in methods.items():
            times[m].append(bench_load.timed(fn))
    med = {m: statistics.median(v) for m, v in times.items()}
    nbytes = sum(pathlib.Path(p).stat().st_size for p in paths)
    return {"set": name, "bytes": nbytes, "shards": len(paths), "reps": reps, "seconds": med,
            "all": times, "ratio": med["python-reader"] / med["python-task"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=str(bench_load.ROOT / "bench-data" / "custom-reader"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sets", default="a,b")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    base = pathlib.Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    shardload.register_reader("npy-mmap", count_rows=npy_rows, read=npy_read, dtype="float32")

    sets = {"a": ("(a) 16 shards, 400 MB, hot cache", "big", 16, "6250000,16"),
            "b": ("(b) 2,000 shards of 100 KB, hot cache", "small", 2000, "1600000,32")}
    rows = []
    for key in args.sets.split(","):
        label, sub, shards, shape = sets[key]
        paths = bench_load.make_set(base / sub, shards, shape)
        # Warm both (task registration, first mapping) and check they agree with numpy.
        ref = np.concatenate([np.load(p) for p in paths])
        a = np.asarray(shardload.load(paths, reader="npy-mmap", overdecompose=1))
        b = np.asarray(bench_load.python_task_load(paths))
        assert np.array_equal(a, ref) and np.array_equal(b, ref)
        del a, b, ref
        gc.collect()
        rows.append(run_set(label, base / sub, paths, args.reps))

    print("| dataset | GB | python-task s | python reader s | reader / task |")
    print("|---|---|---|---|---|")
    for r in rows:
        s = r["seconds"]
        print(f"| {r['set']} | {r['bytes'] / 1e9:.2f} | {s['python-task']:.3f} "
              f"| {s['python-reader']:.3f} | {r['ratio']:.2f} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.0f} s)")
