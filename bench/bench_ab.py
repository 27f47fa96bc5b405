#!/usr/bin/env python
"""A/B: the same load timed with two builds of shardload, side by side in one run.

Each round starts one process per build (alternating A, B, A, B, ...), and each process does a
warm-up load, then --loads timed loads of the same dataset with a fence after each; the median of
each process is one sample. Processes, not one process, since two builds cannot share one: their
libraries register the same Legate library. The data is read once first, so every load is hot.

    python bench/bench_ab.py --a OLD/python --b NEW/python --dir DATA [--rounds 5] [--loads 5]

--a / --b are the `python` folders of two checkouts whose builds put _core / _legate there.
Prints one line per sample, the medians of A and B and their ratio B / A (time), and the
median of each round's B / A.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

CHILD = r"""
import json, statistics, sys, time
import shardload
from legate.core import get_legate_runtime
source, loads, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
layout = shardload.discover(source)
a = shardload.load(layout, overdecompose=k)  # warm-up: runtime start, first launch
del a
times = []
for _ in range(loads):
    t0 = time.perf_counter()
    a = shardload.load(layout, overdecompose=k)
    get_legate_runtime().issue_execution_fence(block=True)
    times.append(time.perf_counter() - t0)
    del a
print("AB " + json.dumps({"median": statistics.median(times), "bytes": layout.nbytes,
                          "file": shardload.__file__}))
"""


def sample(pythonpath: str, source: str, loads: int, k: int) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath
    r = subprocess.run([sys.executable, "-c", CHILD, source, str(loads), str(k)], env=env,
                       capture_output=True, text=True, timeout=900)
    lines = [x for x in r.stdout.splitlines() if x.startswith("AB ")]
    if r.returncode != 0 or not lines:
        sys.exit(f"the {pythonpath} process failed (rc {r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(lines[0][3:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="python folder of build A (the baseline)")
    ap.add_argument("--b", required=True, help="python folder of build B")
    ap.add_argument("--dir", required=True, help="the dataset (any source shardload takes)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--overdecompose", type=int, default=1)
    args = ap.parse_args()
    for p in pathlib.Path(args.dir).glob("*"):  # hot page cache
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(64 << 20):
                    pass
    got: dict[str, list[float]] = {"A": [], "B": []}
    for r in range(args.rounds):
        for name, path in (("A", args.a), ("B", args.b)):
            s = sample(path, args.dir, args.loads, args.overdecompose)
            got[name].append(s["median"])
            print(f"round {r} {name}: {s['median']:.4f} s, {s['bytes'] / s['median'] / 1e9:.2f} GB/s"
                  f"  ({s['file']})", flush=True)
    a, b = statistics.median(got["A"]), statistics.median(got["B"])
    # Each round's B against the A just before it: the machine's drift cancels in the pair.
    paired = statistics.median(y / x for x, y in zip(got["A"], got["B"]))
    print(f"median A {a:.4f} s, B {b:.4f} s, B/A {b / a:.3f}; median of paired B/A {paired:.3f}")


if __name__ == "__main__":
    main()
