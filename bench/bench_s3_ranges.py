#!/usr/bin/env python
"""Requests per load over s3://, and the time, for the formats whose readers ask a store for
many byte ranges of one object: two builds of shardload side by side in one run.

    python bench/bench_s3_ranges.py --a BEFORE --b AFTER
                                    [--cases parquet,hdf5,hdf5-small,zarr-sharded]
                                    [--rounds 3] [--threads 2]

--a / --b are two built checkouts (or their `python` folders), each run in its own processes
(shardload.numpy.load, no Legate), with the checkout's build/libshardload.so, where it has
one, first on the library path. One moto server on 127.0.0.1 (tests/python/s3_server.py)
holds the datasets; every request of a load goes through a counting proxy in front of it
(tests/python/s3_fault_proxy.py, which forwards and counts, injecting nothing). Per case and
build: the GETs (ranged and whole), HEADs and LISTs of one load, discovery included, and the
median load time of --rounds processes (A B, then B A, ...), each checked bit for bit against
the format's own library (pyarrow, h5py, zarr-python) reading the local copy.

  parquet       4 Parquet files of 200,000 rows x 16 float32 columns, snappy, row groups of
                16,384 rows
  hdf5          4 HDF5 files (h5py) of 200,000 x 16 float32, gzip 1, chunks of 4,096 rows
  hdf5-small    the same with chunks of 256 rows (16 KiB before gzip): many small chunks
  zarr-sharded  4 Zarr v3 stores of 200,000 x 16 float32, shards of 65,536 rows holding
                inner chunks of 1,024 rows, zstd 1

The server is a Python process on the same machine: the time ratios carry over, the GB/s do
not; the request counts are exact.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "python"))
import s3_server  # noqa: E402
from s3_fault_proxy import FaultProxy  # noqa: E402

SHARDS, ROWS, COLS = 4, 200_000, 16

CHILD = r"""
import json, sys, time
import numpy as np
import shardload.numpy as snp
spec = json.loads(sys.argv[1])
t0 = time.perf_counter()
a = snp.load(spec["source"], threads=spec["threads"], storage_options=spec["storage"],
             **spec["options"])
t = time.perf_counter() - t0
np.save(spec["out"], a)
import shardload
print("RANGES " + json.dumps({"load": t, "file": shardload.__file__}))
"""


def _values(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.round(rng.standard_normal((ROWS, COLS), dtype=np.float32), 2)


def write(case: str, d: pathlib.Path) -> np.ndarray:
    parts = []
    for i in range(SHARDS):
        a = _values(i)
        parts.append(a)
        if case == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({f"c{j:02d}": a[:, j] for j in range(COLS)}),
                           d / f"shard_{i:04d}.parquet", row_group_size=16_384,
                           compression="snappy")
        elif case in ("hdf5", "hdf5-small"):
            import h5py

            with h5py.File(d / f"shard_{i:04d}.h5", "w") as f:
                f.create_dataset("data", data=a, chunks=(4096 if case == "hdf5" else 256, COLS),
                                 compression="gzip", compression_opts=1)
        else:
            import zarr

            z = zarr.create_array(store=str(d / f"shard_{i:04d}.zarr"), shape=(ROWS, COLS),
                                  shards=(65_536, COLS), chunks=(1024, COLS), dtype="float32",
                                  compressors=zarr.codecs.ZstdCodec(level=1), zarr_format=3)
            z[:] = a
    # The oracle: each file read back by its format's own library.
    back = []
    for i in range(SHARDS):
        if case == "parquet":
            import pyarrow.parquet as pq

            t = pq.read_table(d / f"shard_{i:04d}.parquet")
            back.append(np.column_stack([t.column(j).to_numpy() for j in range(COLS)]))
        elif case in ("hdf5", "hdf5-small"):
            import h5py

            with h5py.File(d / f"shard_{i:04d}.h5", "r") as f:
                back.append(f["data"][:])
        else:
            import zarr

            back.append(zarr.open_array(str(d / f"shard_{i:04d}.zarr"), mode="r")[:])
    return np.concatenate(back)


OPTIONS = {"parquet": {"format": "parquet"}, "hdf5": {"format": "hdf5", "dataset": "data"},
           "hdf5-small": {"format": "hdf5", "dataset": "data"}, "zarr-sharded": {"format": "zarr"}}


def build_python(path: str) -> tuple[pathlib.Path, str]:
    p = pathlib.Path(path).resolve()
    pp = p / "python" if (p / "python" / "shardload").is_dir() else p
    if not list((pp / "shardload").glob("_core*.so")):
        sys.exit(f"{path}: no built shardload there (expected python/shardload/_core*.so)")
    return pp, sys.executable


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--a", required=True, help="build A (the baseline): a built checkout")
    ap.add_argument("--b", required=True, help="build B: a built checkout")
    ap.add_argument("--cases", default="parquet,hdf5,hdf5-small,zarr-sharded")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="the load's threads")
    args = ap.parse_args()
    builds = {"A": build_python(args.a), "B": build_python(args.b)}
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench_s3_ranges_"))
    rows = []
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    try:
        with s3_server.serving() as endpoint, FaultProxy(endpoint) as proxy:
            bucket = s3_server.Bucket(endpoint, endpoint=proxy.endpoint, prefix="ranges-")
            for case in [c for c in args.cases.split(",") if c]:
                d = tmp / case
                d.mkdir()
                want = write(case, d)
                bucket.upload_tree(case, d)
                got: dict[str, list[tuple[float, dict]]] = {"A": [], "B": []}
                for r in range(args.rounds):
                    for label in ("AB" if r % 2 == 0 else "BA"):
                        pp, py = builds[label]
                        out = tmp / f"{case}_{label}.npy"
                        spec = {"source": bucket.url(case + "/"), "threads": args.threads,
                                "storage": bucket.options, "options": OPTIONS[case],
                                "out": str(out)}
                        proxy.clear()
                        env = {**os.environ, "PYTHONPATH": str(pp)}
                        # The checkout's own library first: a copied checkout's extension
                        # still names the library path of the tree it was built in.
                        if (pp.parent / "build" / "libshardload.so").is_file():
                            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                                [str(pp.parent / "build")] +
                                [x for x in [os.environ.get("LD_LIBRARY_PATH")] if x])
                        p = subprocess.run([py, "-c", CHILD, json.dumps(spec)], env=env,
                                           capture_output=True, text=True, timeout=900)
                        lines = [x for x in p.stdout.splitlines() if x.startswith("RANGES ")]
                        if p.returncode != 0 or not lines:
                            sys.exit(f"{case} {label}: failed\n{p.stdout[-2000:]}\n"
                                     f"{p.stderr[-3000:]}")
                        s = json.loads(lines[0][7:])
                        if not s["file"].startswith(str(pp)):
                            sys.exit(f"build {label} imported {s['file']}, not from {pp}")
                        a = np.load(out)
                        if a.dtype != want.dtype or a.shape != want.shape or \
                                a.tobytes() != want.tobytes():
                            sys.exit(f"{case} {label}: the array differs from the oracle")
                        counts = {
                            "GET": sum(1 for m, t, _, _ in proxy.log
                                       if m == "GET" and "list-type" not in t),
                            "HEAD": proxy.requests("HEAD"),
                            "LIST": proxy.requests("GET", "list-type"),
                        }
                        got[label].append((s["load"], counts))
                        print(f"{case} round {r} {label}: {s['load']:.3f} s, {counts}",
                              flush=True)
                row = {"case": case}
                for label in "AB":
                    row[label] = (statistics.median(t for t, _ in got[label]),
                                  got[label][-1][1])
                row["paired"] = statistics.median(b[0] / a[0]
                                                  for a, b in zip(got["A"], got["B"]))
                rows.append(row)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n| case | GETs A | GETs B | HEADs A / B | LISTs A / B | load A s | load B s | B/A "
          "| paired B/A |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        (ta, ca), (tb, cb) = row["A"], row["B"]
        print(f"| {row['case']} | {ca['GET']} | {cb['GET']} | {ca['HEAD']} / {cb['HEAD']} "
              f"| {ca['LIST']} / {cb['LIST']} | {ta:.3f} | {tb:.3f} | {tb / ta:.3f} "
              f"| {row['paired']:.3f} |")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
