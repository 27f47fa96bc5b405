#!/usr/bin/env python
"""The load benchmark: one run, the same files, the same Legate configuration.

Compares, on each dataset:
  shardload    shardload.load(dir) (one manual launch of the C++ load task);
  sequential   np.concatenate([np.load(f) for f in files]);
  python-task  a pure-Python Legate task loader after the pattern of the seed
               document (np.load with mmap, slice, copy into the task's view);
and the same-run bounds measured by bench_bounds (memory copy with as many
threads as processors; parallel positional reads of the files).

Datasets: (a) about 2 GB in 16 shards, hot page cache; (b) the same, page
cache emptied before every run (posix_fadvise DONTNEED on every file);
(c) 10,000 small shards of about 100 KB, hot page cache.

Run it through scripts/bench_load.sh, which sets up and configures Legate.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import json
import os
import pathlib
import statistics
import subprocess
import time

import numpy as np

import cupynumeric as cn
from legate.core import TaskContext, TaskTarget, VariantCode, get_legate_runtime
from legate.core.task import OutputStore, task

import shardload

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = pathlib.Path(os.environ.get("SHARDLOAD_BUILD", ROOT / "build"))

# ---- the Python-task loader, as the seed document writes it ------------------------------
# The driver sets these module globals before the launch (control replication runs the
# driver on every rank, so every worker sees the same values).
PATHS: list[str] = []
CUM_ROWS: np.ndarray = np.zeros(1, dtype=np.int64)
TILE_ROWS = 1


@task(variants=(VariantCode.CPU, VariantCode.GPU))
def load_tile(ctx: TaskContext, dst: OutputStore) -> None:
    t = ctx.task_index[0]
    if ctx.get_variant_kind() == VariantCode.GPU:
        import cupy as cp

        view = cp.from_dlpack(dst)
    else:
        view = np.asarray(dst)
    row_start = t * TILE_ROWS
    row_end = row_start + view.shape[0]
    first = bisect.bisect_right(CUM_ROWS, row_start) - 1
    last = bisect.bisect_right(CUM_ROWS, row_end - 1) - 1
    for f in range(first, last + 1):
        lo = max(row_start, int(CUM_ROWS[f]))
        hi = min(row_end, int(CUM_ROWS[f + 1]))
        if hi <= lo:
            continue
        chunk = np.ascontiguousarray(
            np.load(PATHS[f], mmap_mode="r")[lo - int(CUM_ROWS[f]):hi - int(CUM_ROWS[f])])
        if ctx.get_variant_kind() == VariantCode.GPU:
            view[lo - row_start:hi - row_start].set(chunk)
        else:
            view[lo - row_start:hi - row_start] = chunk


def python_task_load(paths: list[str]) -> cn.ndarray:
    global PATHS, CUM_ROWS, TILE_ROWS
    rows, trailing, dtype = [], None, None
    for p in paths:
        hdr = np.load(p, mmap_mode="r")
        trailing, dtype = hdr.shape[1:], hdr.dtype
        rows.append(hdr.shape[0])
    PATHS = paths
    CUM_ROWS = np.cumsum([0] + rows, dtype=np.int64)
    total = int(CUM_ROWS[-1])
    out = cn.empty((total, *trailing), dtype=dtype)
    rt = get_legate_runtime()
    machine = rt.get_machine()
    procs = max(machine.count(TaskTarget.GPU), machine.count(TaskTarget.OMP),
                machine.count(TaskTarget.CPU), 1)
    TILE_ROWS = max(1, (total + procs - 1) // procs)
    tasks = (total + TILE_ROWS - 1) // TILE_ROWS
    store = list(out.__legate_data_interface__["data"].values())[0].data
    part = store.partition_by_tiling((TILE_ROWS, *trailing))
    t = rt.create_manual_task(load_tile.library, load_tile.task_id, (tasks,) + (1,) * len(trailing))
    t.add_output(part)
    rt.submit(t)
    return out


# ---- helpers ----------------------------------------------------------------------------------
def fence() -> None:
    get_legate_runtime().issue_execution_fence(block=True)


def drop_cache(paths: list[str]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm_cache(paths: list[str]) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(64 << 20):
                pass


def bound(*args: str) -> float:
    out = subprocess.run([str(BUILD / "bench_bounds"), *args], check=True, capture_output=True,
                         text=True).stdout.split()
    return float(out[0])


def make_set(directory: pathlib.Path, shards: int, shape: str) -> list[str]:
    meta = directory / "_meta.json"
    want = {"num_shards": shards, "shape": [int(x) for x in shape.split(",")]}
    if meta.exists():
        m = json.loads(meta.read_text())
        if m.get("num_shards") == want["num_shards"] and m.get("shape") == want["shape"]:
            return shardload.discover(directory).paths
    subprocess.run([str(BUILD / "shardload"), "write", "--shard-dir", str(directory),
                    "--num-shards", str(shards), "--shape", shape, "--dtype", "float32",
                    "--seed", "1"], check=True, capture_output=True)
    return shardload.discover(directory).paths


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


def check_equal(directory: pathlib.Path, paths: list[str]) -> None:
    a = np.asarray(shardload.load(directory))
    b = np.asarray(python_task_load(paths))
    ref = np.concatenate([np.load(p) for p in paths])
    step = max(1, ref.shape[0] // 5000)
    assert np.array_equal(a[::step], ref[::step]) and np.array_equal(b[::step], ref[::step])
    assert np.array_equal(a[-3:], ref[-3:])
    del a, b, ref
    gc.collect()


def run_set(name: str, directory: pathlib.Path, paths: list[str], reps: int, cold: bool,
            procs: int) -> dict:
    nbytes = sum(os.path.getsize(p) for p in paths)
    before = (lambda: drop_cache(paths)) if cold else (lambda: None)
    if not cold:
        warm_cache(paths)
    methods = {
        "shardload": lambda: shardload.load(directory),
        "sequential": lambda: np.concatenate([np.load(p) for p in paths]),
        "python-task": lambda: python_task_load(paths),
    }
    times: dict[str, list[float]] = {m: [] for m in methods}
    bounds: dict[str, list[float]] = {"memcpy": [], "read": []}
    for _ in range(reps):
        for m, fn in methods.items():
            times[m].append(timed(fn, before))
        bounds["memcpy"].append(bound("--reps", "1", "memcpy", str(nbytes), str(procs)))
        before()
        bounds["read"].append(bound("read", str(procs), *paths))
    med = {m: statistics.median(v) for m, v in times.items()}
    medb = {m: statistics.median(v) for m, v in bounds.items()}
    gb = nbytes / 1e9
    row = {"set": name, "bytes": nbytes, "shards": len(paths), "reps": reps, "cold": cold,
           "seconds": med, "bounds": medb,
           "gbps": {m: gb / t for m, t in med.items()},
           "bound_gbps": {m: gb / t for m, t in medb.items()}}
    s = med["shardload"]
    row["ratios"] = {
        "vs_sequential": med["sequential"] / s,
        "vs_python_task": med["python-task"] / s,
        "of_memcpy_bound": medb["memcpy"] / s,
        "of_read_bound": medb["read"] / s,
    }
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=str(ROOT / "bench-data" / "load"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sets", default="a,b,c")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    base = pathlib.Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    rt = get_legate_runtime()
    m = rt.get_machine()
    procs = max(m.count(TaskTarget.GPU), m.count(TaskTarget.OMP), m.count(TaskTarget.CPU))
    print(f"Legate: {m.count(TaskTarget.CPU)} CPU, {m.count(TaskTarget.OMP)} OMP, "
          f"{m.count(TaskTarget.GPU)} GPU processors; LEGATE_CONFIG={os.environ.get('LEGATE_CONFIG')}")

    big = base / "big"
    small = base / "small"
    rows = []
    sets = args.sets.split(",")
    if "a" in sets or "b" in sets:
        paths = make_set(big, 16, "31250000,16")  # 2.0 GB float32
        # Warm both loaders (runtime start, task registration, first mapping).
        shardload.load(small if small.exists() else big)
        fence()
        check_equal(big, paths)
        if "a" in sets:
            rows.append(run_set("(a) 16 shards, hot cache", big, paths, args.reps, False, procs))
        if "b" in sets:
            rows.append(run_set("(b) 16 shards, cold cache", big, paths, args.reps, True, procs))
    if "c" in sets:
        paths = make_set(small, 10000, "8000000,32")  # 10,000 x ~100 KB
        check_equal(small, paths)
        rows.append(run_set("(c) 10,000 small shards, hot cache", small, paths, args.reps, False,
                            procs))

    print()
    print("| dataset | GB | shardload s (GB/s) | sequential s | python-task s | memcpy bound s "
          "| read bound s | vs seq | vs py-task | of memcpy | of read |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s, b, q = r["seconds"], r["bounds"], r["ratios"]
        print(f"| {r['set']} | {r['bytes'] / 1e9:.2f} | {s['shardload']:.3f} "
              f"({r['gbps']['shardload']:.2f}) | {s['sequential']:.3f} | {s['python-task']:.3f} "
              f"| {b['memcpy']:.3f} | {b['read']:.3f} | {q['vs_sequential']:.2f}x "
              f"| {q['vs_python_task']:.2f}x | {100 * q['of_memcpy_bound']:.0f}% "
              f"| {100 * q['of_read_bound']:.0f}% |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
