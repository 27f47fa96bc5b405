#!/usr/bin/env python
"""Batches against one load, in one process under one Legate memory.

    python bench/bench_batches.py [--memory-mib 512] [--rounds 5] [--dir bench-data/batches]

Legate gets --memory-mib of system memory (set in LEGATE_CONFIG before it starts; the rest of
LEGATE_CONFIG is kept, CPUs only). The dataset (float32, 16 columns, 16 .npy shards, written
once with `shardload write`) is four times --memory-mib. Each round, in turn:

  load        shardload.load(row_range=(0, quarter)) and its sum: a quarter of the dataset, less
              what Legate keeps of its memory (16 MiB and 1%) and 8 MiB for the sum;
  batches p1  shardload.batches(whole dataset, prefetch=1) with a sum per batch;
  batches p0  the same with prefetch=0 (each batch read only when asked for).

Throughput is bytes / seconds from the call to the sum's value on the host (float()), page
cache hot. Reported: medians, the ratios of medians to the load, and the medians of the ratios
paired within a round. Goal: batches p1 >= 0.8 x load.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = pathlib.Path(os.environ.get("SHARDLOAD_BUILD", ROOT / "build"))
COLUMNS = 16
ROW_BYTES = 4 * COLUMNS


def configure(memory_mib: int) -> None:
    config = os.environ.get("LEGATE_CONFIG", "--cpus 2 --utility 1 --gpus 0")
    if re.search(r"--sysmem[ =]\d+", config):
        config = re.sub(r"--sysmem[ =]\d+", f"--sysmem {memory_mib}", config)
    else:
        config += f" --sysmem {memory_mib}"
    os.environ["LEGATE_CONFIG"] = config


def usable_bytes(memory_mib: int) -> int:
    """What load() lets one array take of a memory (src/legate/load.cc, check_memory)."""
    capacity = memory_mib << 20
    return capacity - ((16 << 20) + capacity // 100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memory-mib", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=16,
                    help="batches over the dataset (4 per quarter by default)")
    ap.add_argument("--dir", type=pathlib.Path, default=ROOT / "bench-data" / "batches")
    args = ap.parse_args()
    configure(args.memory_mib)

    total_rows = 4 * (args.memory_mib << 20) // ROW_BYTES
    # The quarter, as far as one load may take it: Legate keeps 16 MiB and 1% of its memory,
    # and the sum needs a few small stores of its own.
    quarter_rows = min(total_rows // 4, (usable_bytes(args.memory_mib) - (8 << 20)) // ROW_BYTES)
    rows_per_batch = -(-total_rows // args.batches)
    marker = args.dir / f"rows-{total_rows}"
    if not marker.exists():
        args.dir.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(BUILD / "shardload"), "write", "--shard-dir", str(args.dir),
                        "--num-shards", "16", "--shape", f"{total_rows},{COLUMNS}", "--dtype",
                        "float32", "--seed", "1"], check=True)
        marker.write_text("")

    import numpy as np

    import shardload

    layout = shardload.discover(args.dir)
    assert layout.total_rows == total_rows, layout
    nbytes = layout.nbytes
    quarter_bytes = quarter_rows * ROW_BYTES
    print(f"Legate memory {args.memory_mib} MiB; dataset {nbytes / 1e9:.3f} GB "
          f"({nbytes / (args.memory_mib << 20):.2f} x the memory) in {layout.num_shards} shards; "
          f"load of {quarter_bytes / 1e9:.3f} GB ({quarter_rows / total_rows:.3f} of it); {args.batches} batches of {rows_per_batch} "
          f"rows ({rows_per_batch * ROW_BYTES / 1e6:.1f} MB)", flush=True)
    try:
        shardload.load(layout)
        sys.exit("load() of the whole dataset was not refused: it is not larger than memory")
    except shardload.OutOfMemoryError:
        pass

    def run_load() -> tuple[float, float]:
        t0 = time.perf_counter()
        a = shardload.load(layout, row_range=(0, quarter_rows))
        s = float(a.sum())
        dt = time.perf_counter() - t0
        del a
        return quarter_bytes / dt / 1e9, s

    def run_batches(prefetch: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        acc = None
        for batch in shardload.batches(layout, rows_per_batch, prefetch=prefetch):
            part = batch.sum()
            acc = part if acc is None else acc + part
            del batch, part
        s = float(acc)
        dt = time.perf_counter() - t0
        return nbytes / dt / 1e9, s

    # Warm-up: the page cache, the runtime, the tasks; and the sums agree with numpy's.
    _, s_load = run_load()
    _, s_all = run_batches(1)
    want = sum(float(np.load(p, mmap_mode="r").sum(dtype=np.float64)) for p in layout.paths)
    assert abs(s_all - want) <= 1e-4 * max(1.0, abs(want)), (s_all, want)

    results: dict[str, list[float]] = {"load": [], "batches p1": [], "batches p0": []}
    for r in range(args.rounds):
        results["load"].append(run_load()[0])
        results["batches p1"].append(run_batches(1)[0])
        results["batches p0"].append(run_batches(0)[0])
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.3f} GB/s" for k, v in results.items()),
              flush=True)

    base = results["load"]
    print("\n| run | median GB/s | / load (medians) | / load (median of paired) |")
    print("| --- | --- | --- | --- |")
    for name, v in results.items():
        paired = statistics.median(x / y for x, y in zip(v, base))
        print(f"| {name} | {statistics.median(v):.3f} | "
              f"{statistics.median(v) / statistics.median(base):.3f} | {paired:.3f} |")
    p1, p0 = results["batches p1"], results["batches p0"]
    print(f"\nprefetch=1 / prefetch=0: {statistics.median(p1) / statistics.median(p0):.3f} "
          f"(median of paired {statistics.median(x / y for x, y in zip(p1, p0)):.3f})")


if __name__ == "__main__":
    main()
