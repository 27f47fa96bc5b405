"""2 ranks x 1 CPU against 1 rank x 2 CPUs, and discover_once against every rank discovering.

Run with the networked build (scripts/setup_multirank.sh), from the repository root:

    .venv-mr/bin/python bench/bench_multirank.py [--gb 2] [--small 10000]

Writes two datasets under bench-data/multirank/ (once): N_BIG .npy shards of float32 summing to
--gb GB, and --small shards of 100 KB. Then runs two jobs with scripts/multirank.sh, each rank
with SHARDLOAD_MR_SYSMEM MiB: 1 rank with 2 CPUs and 2 ranks with 1 CPU each. In each job every
load is timed (launch + fill, LoadInfo; the layout from discover_once, so discovery is not
counted) three times after a warm-up, the best kept; the 2-rank job also times discover_once of
the small set against discover on every rank. Prints one table, ratios included.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "bench-data" / "multirank"
N_BIG = 16


def make_data(gb: float, small: int) -> tuple[pathlib.Path, pathlib.Path]:
    import numpy as np

    big = DATA / f"big-{gb:g}gb"
    if not (big / "done").exists():
        big.mkdir(parents=True, exist_ok=True)
        rows = int(gb * 1e9 / 4 / 256 / N_BIG)
        for i in range(N_BIG):
            np.save(big / f"shard_{i:04d}.npy", np.full((rows, 256), i, dtype=np.float32))
        (big / "done").write_text("")
    many = DATA / f"small-{small}"
    if not (many / "done").exists():
        many.mkdir(parents=True, exist_ok=True)
        part = np.arange(100 * 1024 // 8, dtype=np.float64).reshape(-1, 16)  # 100 KiB
        for i in range(small):
            np.save(many / f"shard_{i:04d}.npy", part)
        (many / "done").write_text("")
    return big, many


def worker(out: pathlib.Path, big: str, many: str, discovery: bool) -> None:
    import shardload

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    result: dict = {}
    for name, source in (("big", big), ("many", many)):
        layout = shardload.discover_once(source)
        arr, info = shardload.load(layout, info=True)  # warm-up
        del arr
        best = None
        for _ in range(3):
            arr, info = shardload.load(layout, info=True)
            secs = info.launch_s + info.fill_s
            best = secs if best is None else min(best, secs)
            del arr
        result[name] = {"s": best, "bytes": info.bytes, "processors": info.processors}
    if discovery:
        for label, fn in (("discover_once", shardload.discover_once),
                          ("discover_every_rank", shardload.discover)):
            t0 = time.perf_counter()
            fn(many)
            result[label] = time.perf_counter() - t0
    (out / f"rank{rank}.json").write_text(json.dumps(result))


def run_job(ranks: int, cpus: int, big: pathlib.Path, many: pathlib.Path,
            discovery: bool) -> dict:
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "SHARDLOAD_MR_CPUS": str(cpus),
               "SHARDLOAD_MR_SYSMEM": os.environ.get("SHARDLOAD_MR_SYSMEM", "2600")}
        cmd = [str(ROOT / "scripts" / "multirank.sh"), "-n", str(ranks),
               str(ROOT / ".venv-mr" / "bin" / "python"), __file__, "--worker", d, str(big),
               str(many)] + (["--discovery"] if discovery else [])
        subprocess.run(cmd, check=True, env=env, timeout=1800)
        return json.loads((pathlib.Path(d) / "rank0.json").read_text())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(pathlib.Path(sys.argv[2]), sys.argv[3], sys.argv[4], "--discovery" in sys.argv)
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gb", type=float, default=2.0)
    p.add_argument("--small", type=int, default=10000)
    a = p.parse_args()
    big, many = make_data(a.gb, a.small)
    one = run_job(1, 2, big, many, discovery=False)
    two = run_job(2, 1, big, many, discovery=True)
    print(f"{'dataset':<28}{'1 rank x 2 CPUs':>18}{'2 ranks x 1 CPU':>18}{'ratio 2r/1r':>14}")
    for name, label in (("big", f"{N_BIG} npy shards, {a.gb:g} GB"),
                        ("many", f"{a.small} x 100 KiB npy")):
        s1, s2 = one[name]["s"], two[name]["s"]
        gb = one[name]["bytes"] / 1e9
        print(f"{label:<28}{s1:>9.3f} s {gb / s1:>4.1f} GB/s{s2:>9.3f} s {gb / s2:>4.1f} GB/s"
              f"{s2 / s1:>10.2f}x")
    d1, d2 = two["discover_once"], two["discover_every_rank"]
    print(f"discovery of {a.small} shards on 2 ranks: discover_once {d1:.2f} s, discover on "
          f"every rank {d2:.2f} s ({d2 / d1:.2f}x)")


if __name__ == "__main__":
    main()
