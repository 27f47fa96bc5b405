#!/usr/bin/env python
"""The NumPy front end against what a NumPy user writes, and against the Legate front end, in
one run on the same files (hot page cache; every result checked against numpy first).

  shardload.numpy   shardload.numpy.load(dir): the engine's threads fill one array
  numpy, out=       the same into an array of an earlier call (memory already touched)
  concatenate       np.concatenate([np.load(f) for f in files])
  by hand           out = np.empty(...); out[a:b] = np.load(f, mmap_mode="r") per file
  legate steady     shardload.load(dir) under Legate, in a process that already loaded once
  legate first      the first shardload.load of a new process: import and runtime start included

Datasets: (a) ~400 MB float32 in 16 shards of uneven rows; (b) 2,000 shards of ~100 KB;
(c) the same bytes as (a) as 16 Parquet files (column chunks decoded by Arrow).

  .venv/bin/python bench/bench_numpy.py --dir /tmp/bench-numpy --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np

import shardload
import shardload.numpy

ROOT = pathlib.Path(__file__).resolve().parents[1]


def write(base: pathlib.Path) -> dict[str, pathlib.Path]:
    rng = np.random.default_rng(0)
    out = {}
    a = base / "a"
    if not a.exists():
        a.mkdir(parents=True)
        rows = rng.integers(300_000, 1_300_000, 16)
        rows = (rows * (6_250_000 / rows.sum())).astype(int)  # ~400 MB of (N, 16) float32
        for i, r in enumerate(rows):
            np.save(a / f"shard_{i:04d}.npy", rng.random((int(r), 16), dtype=np.float32))
    out["a"] = a
    b = base / "b"
    if not b.exists():
        b.mkdir(parents=True)
        for i in range(2000):
            np.save(b / f"shard_{i:04d}.npy", rng.random((800, 32), dtype=np.float32))
    out["b"] = b
    c = base / "c"
    if not c.exists():
        import pyarrow as pa
        import pyarrow.parquet as pq

        c.mkdir(parents=True)
        for i, f in enumerate(sorted(a.iterdir())):
            x = np.load(f)
            pq.write_table(pa.table({f"c{j}": x[:, j] for j in range(16)}),
                           c / f"shard_{i:04d}.parquet", row_group_size=65536,
                           compression="none")
    out["c"] = c
    return out


def concatenate(d: pathlib.Path) -> np.ndarray:
    return np.concatenate([np.load(f) for f in sorted(d.glob("*.npy"))])


def by_hand(d: pathlib.Path) -> np.ndarray:
    files = sorted(d.glob("*.npy"))
    maps = [np.load(f, mmap_mode="r") for f in files]
    out = np.empty((sum(len(m) for m in maps), *maps[0].shape[1:]), maps[0].dtype)
    at = 0
    for m in maps:
        out[at:at + len(m)] = m
        at += len(m)
    return out


def pyarrow_numpy(d: pathlib.Path) -> np.ndarray:
    import pyarrow.parquet as pq

    parts = []
    for f in sorted(d.glob("*.parquet")):
        t = pq.read_table(f)
        parts.append(np.stack([c.to_numpy() for c in t.columns], axis=1))
    return np.concatenate(parts)


LEGATE_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import shardload
import numpy as np
d, reps = sys.argv[1], int(sys.argv[2])
a = shardload.load(d)
first = time.perf_counter() - t0
want = np.asarray(a).copy()
steady = []
for _ in range(reps):
    del a
    t = time.perf_counter()
    a = shardload.load(d)
    steady.append(time.perf_counter() - t)
np.save(sys.argv[3], want[:: max(1, len(want) // 1000)])
print(json.dumps({"first": first, "steady": steady}))
"""


def legate(d: pathlib.Path, reps: int, work: pathlib.Path) -> dict:
    env = dict(os.environ)
    env.setdefault("LEGATE_CONFIG", "--cpus 2 --utility 1 --gpus 0 --sysmem 6000")
    sample = work / f"legate-{d.name}.npy"
    run = subprocess.run([sys.executable, "-c", LEGATE_CHILD, str(d), str(reps), str(sample)],
                         capture_output=True, text=True, env=env, check=True)
    out = json.loads(run.stdout.strip().splitlines()[-1])
    out["sample"] = np.load(sample)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/bench-numpy")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-legate", action="store_true")
    args = ap.parse_args()
    base = pathlib.Path(args.dir)
    data = write(base)
    reused = {k: shardload.numpy.load(data[k]) for k in ("a", "b")}
    cases = {
        "a": {"shardload.numpy": lambda: shardload.numpy.load(data["a"]),
              "numpy, out=": lambda: shardload.numpy.load(data["a"], out=reused["a"]),
              "concatenate": lambda: concatenate(data["a"]),
              "by hand": lambda: by_hand(data["a"])},
        "b": {"shardload.numpy": lambda: shardload.numpy.load(data["b"]),
              "numpy, out=": lambda: shardload.numpy.load(data["b"], out=reused["b"]),
              "concatenate": lambda: concatenate(data["b"]),
              "by hand": lambda: by_hand(data["b"])},
        "c": {"shardload.numpy": lambda: shardload.numpy.load(str(data["c"] / "*.parquet")),
              "pyarrow + numpy": lambda: pyarrow_numpy(data["c"])},
    }
    print(f"# {os.cpu_count()} CPUs, reps {args.reps}, threads "
          f"{shardload._core.default_host_threads()}")
    for name, loaders in cases.items():
        want = None
        for label, fn in loaders.items():  # warm the cache and check every result
            got = fn()
            if want is None:
                want = got
            assert got.shape == want.shape and np.array_equal(got, want), (name, label)
            del got
        times: dict[str, list[float]] = {label: [] for label in loaders}
        for _ in range(args.reps):  # interleaved
            for label, fn in loaders.items():
                t = time.perf_counter()
                got = fn()
                times[label].append(time.perf_counter() - t)
                del got
        med = {label: statistics.median(v) for label, v in times.items()}
        if not args.no_legate and name in ("a", "b"):
            r = legate(data[name], args.reps, base)
            assert np.array_equal(r["sample"], want[:: max(1, len(want) // 1000)]), name
            med["legate steady"] = statistics.median(r["steady"])
            med["legate first"] = r["first"]
        gb = want.nbytes / 1e9
        mine = med["shardload.numpy"]
        print(f"\n({name}) {want.shape} {want.dtype}, {gb:.2f} GB")
        for label, t in med.items():
            ratio = "" if label == "shardload.numpy" else f"  ({t / mine:.2f}x shardload.numpy)"
            print(f"  {label:16s} {t:8.3f} s  {gb / t:6.2f} GB/s{ratio}")


if __name__ == "__main__":
    main()
