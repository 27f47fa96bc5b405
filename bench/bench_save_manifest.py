#!/usr/bin/env python
"""What the manifest costs a save, and what it saves the next discovery; side by side.

One process, two cases: --shards small shards (rows of 64 float32, 16 rows each) and one
--mb MB array in 2 shards. For --rounds rounds, in an order that turns every round, it times
shardload.save with manifest=False, manifest=True and checksum="xxh3" (npy), then
shardload.discover of the result (the manifest's freshness check, or probing when there is
none). Every directory is removed and os.sync() run outside the timing. Prints medians and the
ratios to the save without a manifest. A first round warms up and is not counted.

    python bench/bench_save_manifest.py --dir /tmp/bench-savemf [--shards 2000] [--mb 256]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time

import numpy as np

MODES = {"none": {"manifest": False}, "manifest": {}, "xxh3": {"checksum": "xxh3"}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--shards", type=int, default=2000)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    import cupynumeric as cn

    import shardload

    os.makedirs(a.dir, exist_ok=True)
    cases = {
        f"{a.shards} shards x 4 KB": (cn.ones((a.shards * 16, 64), cn.float32), a.shards),
        f"{a.mb} MB, 2 shards": (cn.ones((a.mb * (1 << 20) // 256, 64), cn.float32), 2),
    }
    names = list(MODES)
    for case, (x, n) in cases.items():
        save_t = {m: [] for m in names}
        disc_t = {m: [] for m in names}
        for r in range(-1, a.rounds):  # round -1 warms up and is not counted
            for m in names[r % len(names):] + names[:r % len(names)]:
                dest = os.path.join(a.dir, "out")
                shutil.rmtree(dest, ignore_errors=True)
                os.sync()
                t = time.perf_counter()
                shardload.save(x, dest, num_shards=n, **MODES[m])
                saved = time.perf_counter() - t
                t = time.perf_counter()
                layout = shardload.discover(dest)
                if r >= 0:
                    save_t[m].append(saved)
                    disc_t[m].append(time.perf_counter() - t)
                assert ("used" in layout.manifest_status) == (m != "none"), layout.manifest_status
        base = statistics.median(save_t["none"])
        dbase = statistics.median(disc_t["none"])
        print(f"{case}:")
        for m in names:
            s, d = statistics.median(save_t[m]), statistics.median(disc_t[m])
            print(f"  {m:9s} save {s:8.4f} s ({s / base:5.2f}x)   discover {d:8.4f} s "
                  f"({d / dbase:5.2f}x)")
    shutil.rmtree(os.path.join(a.dir, "out"), ignore_errors=True)


if __name__ == "__main__":
    main()
