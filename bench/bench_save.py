#!/usr/bin/env python
"""shardload.save against a parallel write bound and np.save, side by side in one run.

One process makes an array in cuPyNumeric (--mb MB of float32, rows of --cols) and, for
--rounds rounds, times in turn:

- save:  shardload.save(x, DIR, num_shards=P, format=F) (P = the CPU processors of Legate),
         once for each format F of --format (a comma-separated list: several formats are
         measured side by side in the same rounds, against the same bound);
- bound: P Python threads, each pwrite-ing one P-th of the same bytes (in one numpy array)
         into its own new file, then renaming it: the same bytes, files and renames,
         with no runtime, no metadata and no staging directory;
- npsave: np.save of each of the P shards in sequence from one numpy array (npsave_only),
         and that plus the time np.asarray takes to gather such an array from cuPyNumeric
         (npsave), which is what a user without save would do.

The order of the steps turns every round. Every written directory is removed, and
os.sync() run, outside the timing, so that each
method starts with no dirty pages of the others waiting for writeback (whose throttling is
otherwise the largest noise of the run). Medians, then the ratios
bound / save (>= 0.9 is the goal's "90% of the bound") and npsave / save (>= 3), for each
format.

Memory: for each format, a fresh child process makes the same array, reads its peak RSS (VmHWM), saves,
and reads it again; the growth during the save is what the save needed beside the array.

    python bench/bench_save.py --dir /tmp/bench-save [--mb 1024] [--rounds 5] \
        [--format npy,zarr,raw]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

MEM_CHILD = r"""
import json, sys
import shardload
import cupynumeric as cn
from legate.core import get_legate_runtime
mb, cols, dest, fmt = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = mb * (1 << 20) // (4 * cols)


def peak():  # VmHWM: this process's own; ru_maxrss starts at the forking parent's peak
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) * 1024


x = cn.arange(rows * cols, dtype=cn.float32).reshape(rows, cols) + 0.5
get_legate_runtime().issue_execution_fence(block=True)
before = peak()
shardload.save(x, dest, format=fmt)
after = peak()
print("MEM " + json.dumps({"bytes": rows * cols * 4, "before": before, "after": after}))
"""


def rm(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def bound(buf, dest: str, parts: int) -> None:
    """P threads, each writing its share of the bytes to its own file (then a rename)."""
    os.mkdir(dest)
    view = memoryview(buf.reshape(-1).view("uint8"))
    n = len(view)
    errors = []

    def work(i: int) -> None:
        try:
            lo, hi = n * i // parts, n * (i + 1) // parts
            tmp = os.path.join(dest, f".part_{i:04d}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                off = 0
                while lo + off < hi:
                    off += os.pwrite(fd, view[lo + off:min(hi, lo + off + (1 << 30))], off)
            finally:
                os.close(fd)
            os.rename(tmp, os.path.join(dest, f"part_{i:04d}.bin"))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(parts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def npsave(np, g, dest: str, parts: int) -> None:
    os.mkdir(dest)
    rows = g.shape[0]
    per = -(-rows // parts)
    for i in range(parts):
        np.save(os.path.join(dest, f"shard_{i:04d}.npy"), g[i * per:(i + 1) * per])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, help="a scratch folder (removed and made again)")
    ap.add_argument("--mb", type=int, default=1024, help="array size in MiB (float32)")
    ap.add_argument("--cols", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--format", default="npy",
                    help="npy, raw or zarr, or several separated by commas (side by side)")
    args = ap.parse_args()
    formats = args.format.split(",")
    for f in formats:
        if f not in ("npy", "raw", "zarr") or formats.count(f) > 1:
            ap.error(f"--format: expected distinct npy, raw or zarr, found {args.format!r}")

    rm(args.dir)
    os.makedirs(args.dir)
    mems = {}
    for f in formats:
        r = subprocess.run([sys.executable, "-c", MEM_CHILD, str(args.mb), str(args.cols),
                            os.path.join(args.dir, "mem"), f],
                           capture_output=True, text=True, timeout=900)
        mem_lines = [x for x in r.stdout.splitlines() if x.startswith("MEM ")]
        if r.returncode != 0 or not mem_lines:
            sys.exit(f"the memory child ({f}) failed (rc {r.returncode}):\n{r.stderr[-3000:]}")
        mems[f] = json.loads(mem_lines[0][4:])
        rm(os.path.join(args.dir, "mem"))

    import numpy as np

    import cupynumeric as cn
    import shardload
    from legate.core import get_legate_runtime

    rows = args.mb * (1 << 20) // (4 * args.cols)
    x = cn.arange(rows * args.cols, dtype=cn.float32).reshape(rows, args.cols) + 0.5
    get_legate_runtime().issue_execution_fence(block=True)
    # Warm-up: one untimed save of the whole array (the first save of an array in a process
    # was several times slower than the next ones: first-use costs, not the write path).
    warm_s = {}
    for f in formats:
        warm = shardload.save(x, os.path.join(args.dir, "warm"), format=f)
        warm_s[f] = warm.total_s
        parts = warm.processors
        rm(os.path.join(args.dir, "warm"))
    # The gather np.save needs, timed on a copy of x: once np.asarray has mapped an array
    # whole, later saves of that array were 2-5x slower in our runs, so x itself is never
    # gathered. The bound and np.save write the same bytes, made by numpy.
    y = x + 0
    get_legate_runtime().issue_execution_fence(block=True)
    t0 = time.perf_counter()
    gathered = np.asarray(y)
    gather_s = time.perf_counter() - t0
    del gathered, y
    g = np.arange(rows * args.cols, dtype=np.float32).reshape(rows, args.cols) + np.float32(0.5)

    saves = [f"save_{f}" for f in formats]
    times: dict[str, list[float]] = {k: [] for k in saves + ["bound", "npsave_only", "npsave"]}

    def run_save(f: str):
        return lambda d: shardload.save(x, d, num_shards=parts, format=f)

    def run_npsave(d: str) -> None:
        npsave(np, g, d, parts)

    steps = [(f"save_{f}", run_save(f)) for f in formats]
    steps += [("bound", lambda d: bound(g, d, parts)), ("npsave_only", run_npsave)]
    for rnd in range(args.rounds):
        # The order turns every round, so that no method always follows the same one.
        k = rnd % len(steps)
        order = steps[k:] + steps[:k]
        for name, step in order:
            d = os.path.join(args.dir, f"{name}{rnd}")
            os.sync()
            t0 = time.perf_counter()
            step(d)
            times[name].append(time.perf_counter() - t0)
            rm(d)
        times["npsave"].append(times["npsave_only"][-1] + gather_s)
        print(f"round {rnd}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in times.items()),
              flush=True)

    med = {k: statistics.median(v) for k, v in times.items()}
    nbytes = rows * args.cols * 4
    print("warm-up saves (untimed in the medians): " +
          ", ".join(f"{f} {s:.3f} s" for f, s in warm_s.items()))
    print(f"array: ({rows}, {args.cols}) float32, {nbytes / 1e9:.3f} GB; formats {args.format}; "
          f"P = {parts} CPU processors, {parts} shards; {args.rounds} rounds; gather "
          f"{gather_s:.3f} s")
    for k, v in med.items():
        print(f"median {k:12s} {v:.3f} s  {nbytes / 1e9 / v:.2f} GB/s")
    for f, sv in zip(formats, saves):
        paired = statistics.median(b / s for b, s in zip(times["bound"], times[sv]))
        print(f"{f}: bound / save (goal >= 0.9):   {med['bound'] / med[sv]:.3f} "
              f"(median of the rounds' ratios {paired:.3f})")
        print(f"{f}: npsave / save (goal >= 3):    {med['npsave'] / med[sv]:.3f}")
        print(f"{f}: npsave_only / save:           {med['npsave_only'] / med[sv]:.3f}")
        mem = mems[f]
        grown = mem["after"] - mem["before"]
        print(f"{f}: memory: array {mem['bytes'] / 2**20:.1f} MiB; peak before the save "
              f"{mem['before'] / 2**20:.1f} MiB, after {mem['after'] / 2**20:.1f} MiB: the save "
              f"grew the peak by {grown / 2**20:.1f} MiB ({grown / mem['bytes']:.3f} of the "
              f"array)")
    rm(args.dir)


if __name__ == "__main__":
    main()
