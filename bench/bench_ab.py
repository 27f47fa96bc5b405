#!/usr/bin/env python
"""A/B: the same loads timed with two builds of shardload, alternating, in one run.

    python bench/bench_ab.py --a BEFORE --b AFTER [--data DIR] [--cases npy2g,small,hdf5,zarr,parquet,s3]
                             [--rounds 4] [--loads 3] [--discovers 3] [--overdecompose 1]

--a / --b are two checkouts, each built (its `python/shardload` holds `_core` and `_legate`), or
their `python` folders. Each build runs in its own processes, with its own PYTHONPATH and, where
the checkout has one, its own `.venv`'s Python; both get the same LEGATE_CONFIG (--legate-config).
Processes, not one process, since two builds cannot share one: both register the same Legate
library.

The datasets are written once under --data (kept, and reused by a later run with the same
parameters) or, without --data, under a temporary folder removed at the end:
  npy2g    2.1 GB: 8 `.npy` shards of 4,194,304 x 16 float32 (256 MiB each)
  small    10,000 `.npy` shards of 800 x 32 float32 (100 KiB each)
  hdf5     16 HDF5 files (h5py) of 250,000 x 16 float32, gzip level 1, chunks of 16,384 rows
  zarr     16 Zarr v3 stores (zarr-python) of the same, zstd level 1, chunks of 16,384 rows
  zarr2    the same as Zarr v2 (numcodecs Zstd level 1); not in the default set
  parquet  16 Parquet files (pyarrow) of 250,000 rows x 16 float32 columns, snappy,
           row groups of 65,536 rows (4 per file)
  s3       8 `.npy` shards of 262,144 x 16 float32 (16 MiB each) as objects on moto's S3
           server on 127.0.0.1 (tests/python/s3_server.py, started for the case and stopped
           after it; the objects uploaded from the local copy, which is the oracle), loaded by
           s3:// URL through the signed path
The HDF5, Zarr and Parquet values are normal samples rounded to 2 decimals (they compress).
--dir DATASET adds a dataset of your own (any source shardload takes; --format for its format):
it is timed and A and B are compared with each other, with no oracle.

For each case every file is read once first (the page cache cannot be dropped without root, so
every load is hot instead), then --rounds rounds run, A B in even rounds and B A in odd ones
(A B B A A B ...: the machine's drift hits both). Each run is one process: discover the
dataset --discovers times (timed), one warm-up load (runtime start, first launch), then --loads
timed loads of the discovered layout, each ended by a blocking execution fence; the medians of
one process are one sample. Every process copies rows of its last load back to the host and
the parent checks them bit for bit against the format's own library (numpy, h5py, zarr,
pyarrow): the first and last rows, rows around shard boundaries and random rows. The first
process of each build also hashes its whole array and A's hash must equal B's.

Prints one line per process, then a Markdown table with a row per case: for the load and for
discovery, the medians of A and B, B / A (time: under 1 is faster) and the median of each
round's B / A (the pair run back to back); for the load also the CPU time it took (user +
system time of every thread of the process over the load: the reads' copies, the runtime's
threads), which other work on a shared machine disturbs far less than the wall time (not the
work of another process, such as the s3 case's server); and the load average before and after
the case. --a and --b may name the same build: the ratios of such a run are this machine's
noise.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

CHILD = r"""
import hashlib, json, resource, statistics, sys, time
import numpy as np
import shardload
from legate.core import get_legate_runtime
spec = json.loads(sys.argv[1])
opts = spec["options"]
disc = []
for _ in range(spec["discovers"]):
    t0 = time.perf_counter()
    layout = shardload.discover(spec["source"], **opts)
    disc.append(time.perf_counter() - t0)
a = shardload.load(layout, overdecompose=spec["k"])  # warm-up: runtime start, first launch
get_legate_runtime().issue_execution_fence(block=True)
del a
def cpu_s():  # user + system time of every thread of this process so far
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
times, cpus = [], []
for i in range(spec["loads"]):
    c0 = cpu_s()
    t0 = time.perf_counter()
    a = shardload.load(layout, overdecompose=spec["k"])
    get_legate_runtime().issue_execution_fence(block=True)
    times.append(time.perf_counter() - t0)
    cpus.append(cpu_s() - c0)
    if i + 1 < spec["loads"]:
        del a
host = np.asarray(a)
np.savez(spec["sample_out"], **{f"r{lo}_{hi}": np.array(host[lo:hi]) for lo, hi in spec["ranges"]})
digest = None
if spec["digest"]:
    h = hashlib.blake2b(digest_size=16)
    h.update(str((host.dtype.str, host.shape)).encode())
    h.update(memoryview(np.ascontiguousarray(host)).cast("B"))
    digest = h.hexdigest()
print("AB " + json.dumps({"load": statistics.median(times), "cpu": statistics.median(cpus),
                          "discover": statistics.median(disc),
                          "bytes": layout.nbytes, "shape": list(host.shape),
                          "dtype": host.dtype.str, "digest": digest, "file": shardload.__file__}))
"""

NPY2G_SHARDS, NPY2G_ROWS = 8, 4_194_304
SMALL_SHARDS, SMALL_ROWS = 10_000, 800
COLUMNAR_SHARDS, COLUMNAR_ROWS, CHUNK_ROWS, ROW_GROUP = 16, 250_000, 16_384, 65_536
COLS = 16
S3_SHARDS, S3_ROWS = 8, 262_144
DEFAULT_CASES = "npy2g,small,hdf5,zarr,parquet,s3"
DEFAULT_LEGATE = "--cpus 2 --utility 1 --gpus 0 --sysmem 9000"


# ---- the datasets: writers and their oracles ----------------------------------------------
def _rounded(rng: np.random.Generator, rows: int) -> np.ndarray:
    return np.round(rng.standard_normal((rows, COLS), dtype=np.float32), 2)


def write_npy2g(d: pathlib.Path) -> None:
    rng = np.random.default_rng(1)
    for i in range(NPY2G_SHARDS):
        np.save(d / f"shard_{i:04d}.npy", rng.random((NPY2G_ROWS, COLS), dtype=np.float32))


def write_small(d: pathlib.Path) -> None:
    rng = np.random.default_rng(2)
    for i in range(SMALL_SHARDS):
        np.save(d / f"shard_{i:04d}.npy", rng.random((SMALL_ROWS, 32), dtype=np.float32))


def write_s3(d: pathlib.Path) -> None:
    rng = np.random.default_rng(6)
    for i in range(S3_SHARDS):
        np.save(d / f"shard_{i:04d}.npy", rng.random((S3_ROWS, COLS), dtype=np.float32))


def write_hdf5(d: pathlib.Path) -> None:
    import h5py

    rng = np.random.default_rng(3)
    for i in range(COLUMNAR_SHARDS):
        with h5py.File(d / f"shard_{i:04d}.h5", "w") as f:
            f.create_dataset("data", data=_rounded(rng, COLUMNAR_ROWS), chunks=(CHUNK_ROWS, COLS),
                             compression="gzip", compression_opts=1)


def _write_zarr(d: pathlib.Path, zarr_format: int) -> None:
    import zarr

    if zarr_format == 3:
        compressors = zarr.codecs.ZstdCodec(level=1)
    else:
        import numcodecs

        compressors = numcodecs.Zstd(level=1)
    rng = np.random.default_rng(4)
    for i in range(COLUMNAR_SHARDS):
        z = zarr.create_array(store=str(d / f"shard_{i:04d}.zarr"), shape=(COLUMNAR_ROWS, COLS),
                              chunks=(CHUNK_ROWS, COLS), dtype="float32", compressors=compressors,
                              zarr_format=zarr_format)
        z[:] = _rounded(rng, COLUMNAR_ROWS)


def write_parquet(d: pathlib.Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(5)
    for i in range(COLUMNAR_SHARDS):
        a = _rounded(rng, COLUMNAR_ROWS)
        t = pa.table({f"c{j:02d}": a[:, j] for j in range(COLS)})
        pq.write_table(t, d / f"shard_{i:04d}.parquet", row_group_size=ROW_GROUP,
                       compression="snappy")


def _rows_npy(path: pathlib.Path, lo: int, hi: int) -> np.ndarray:
    return np.array(np.load(path, mmap_mode="r")[lo:hi])


def _rows_hdf5(path: pathlib.Path, lo: int, hi: int) -> np.ndarray:
    import h5py

    with h5py.File(path, "r") as f:
        return f["data"][lo:hi]


def _rows_zarr(path: pathlib.Path, lo: int, hi: int) -> np.ndarray:
    import zarr

    return zarr.open_array(str(path), mode="r")[lo:hi]


def _rows_parquet(path: pathlib.Path, lo: int, hi: int) -> np.ndarray:
    import pyarrow.parquet as pq

    t = pq.read_table(path).slice(lo, hi - lo)
    return np.column_stack([t.column(j).to_numpy() for j in range(t.num_columns)])


def cases() -> dict:
    """name: (writer, shards, rows per shard, file suffix, oracle rows, discover options, what)"""
    return {
        "npy2g": (write_npy2g, NPY2G_SHARDS, NPY2G_ROWS, ".npy", _rows_npy, {"format": "npy"},
                  f"{NPY2G_SHARDS} .npy shards of {NPY2G_ROWS:,} x {COLS} float32"),
        "small": (write_small, SMALL_SHARDS, SMALL_ROWS, ".npy", _rows_npy, {"format": "npy"},
                  f"{SMALL_SHARDS:,} .npy shards of {SMALL_ROWS} x 32 float32"),
        "hdf5": (write_hdf5, COLUMNAR_SHARDS, COLUMNAR_ROWS, ".h5", _rows_hdf5,
                 {"format": "hdf5", "dataset": "data"},
                 f"{COLUMNAR_SHARDS} HDF5 files of {COLUMNAR_ROWS:,} x {COLS} float32, gzip 1, "
                 f"chunks of {CHUNK_ROWS:,} rows"),
        "zarr": (lambda d: _write_zarr(d, 3), COLUMNAR_SHARDS, COLUMNAR_ROWS, ".zarr", _rows_zarr,
                 {"format": "zarr"},
                 f"{COLUMNAR_SHARDS} Zarr v3 stores of {COLUMNAR_ROWS:,} x {COLS} float32, zstd 1, "
                 f"chunks of {CHUNK_ROWS:,} rows"),
        "zarr2": (lambda d: _write_zarr(d, 2), COLUMNAR_SHARDS, COLUMNAR_ROWS, ".zarr", _rows_zarr,
                  {"format": "zarr"},
                  f"{COLUMNAR_SHARDS} Zarr v2 stores of {COLUMNAR_ROWS:,} x {COLS} float32, zstd 1, "
                  f"chunks of {CHUNK_ROWS:,} rows"),
        "s3": (write_s3, S3_SHARDS, S3_ROWS, ".npy", _rows_npy, {"format": "npy"},
               f"{S3_SHARDS} .npy shards of {S3_ROWS:,} x {COLS} float32 on moto's S3 server "
               "(s3://, 127.0.0.1)"),
        "parquet": (write_parquet, COLUMNAR_SHARDS, COLUMNAR_ROWS, ".parquet", _rows_parquet,
                    {"format": "parquet"},
                    f"{COLUMNAR_SHARDS} Parquet files of {COLUMNAR_ROWS:,} rows x {COLS} float32 "
                    f"columns, snappy, row groups of {ROW_GROUP:,} rows"),
    }


CASES = cases()


def prepare(name: str, data: pathlib.Path) -> pathlib.Path:
    """Writes the case's dataset unless --data already holds one written the same way."""
    writer, shards, rows, _, _, _, what = CASES[name]
    d = data / name
    stamp = data / f"{name}.done.json"  # beside, not inside: discovery sees only the shards
    want = {"what": what, "shards": shards, "rows": rows, "version": 1}
    if d.is_dir() and stamp.is_file() and json.loads(stamp.read_text()) == want:
        return d
    shutil.rmtree(d, ignore_errors=True)
    stamp.unlink(missing_ok=True)
    d.mkdir(parents=True)
    t0 = time.perf_counter()
    writer(d)
    stamp.write_text(json.dumps(want))
    print(f"wrote {name} in {time.perf_counter() - t0:.1f} s: {what}", flush=True)
    return d


def oracle(name: str, d: pathlib.Path, lo: int, hi: int) -> np.ndarray:
    """Rows [lo, hi) of the whole dataset, read with the format's own library."""
    _, shards, rows, suffix, read, _, _ = CASES[name]
    parts = []
    for s in range(lo // rows, (hi - 1) // rows + 1):
        a, b = max(lo, s * rows) - s * rows, min(hi, (s + 1) * rows) - s * rows
        parts.append(read(d / f"shard_{s:04d}{suffix}", a, b))
    return np.concatenate(parts)


def sample_ranges(shards: int, rows: int, seed: int = 7) -> list[tuple[int, int]]:
    """The first and last rows, rows across a few shard boundaries, and random rows."""
    total = shards * rows
    rng = np.random.default_rng(seed)
    out = [(0, 3), (total - 3, total)]
    for b in sorted({1, shards // 2, shards - 1} | set(rng.integers(1, shards, 3).tolist())):
        if 0 < b < shards:
            out.append((b * rows - 2, b * rows + 2))
    for lo in rng.integers(0, total - 5, 4).tolist():
        out.append((lo, lo + 5))
    return out


def warm(d: pathlib.Path) -> None:
    for p in sorted(d.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(64 << 20):
                    pass


# ---- the builds ------------------------------------------------------------------------------
class Build:
    def __init__(self, label: str, path: str) -> None:
        p = pathlib.Path(path).resolve()
        self.label = label
        self.root = p if (p / "python" / "shardload").is_dir() else p.parent
        self.pythonpath = p / "python" if (p / "python" / "shardload").is_dir() else p
        if not list((self.pythonpath / "shardload").glob("_legate*.so")):
            sys.exit(f"{path}: no built shardload there (expected python/shardload/_legate*.so)")
        venv = self.root / ".venv" / "bin" / "python"
        self.python = str(venv) if venv.exists() else sys.executable

    def run(self, spec: dict, legate_config: str) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.pythonpath)
        env["LEGATE_CONFIG"] = legate_config
        r = subprocess.run([self.python, "-c", CHILD, json.dumps(spec)], env=env,
                           capture_output=True, text=True, timeout=1800)
        lines = [x for x in r.stdout.splitlines() if x.startswith("AB ")]
        if r.returncode != 0 or not lines:
            sys.exit(f"build {self.label} ({self.pythonpath}) failed (rc {r.returncode}):\n"
                     f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
        got = json.loads(lines[0][3:])
        if not got["file"].startswith(str(self.pythonpath)):
            sys.exit(f"build {self.label} imported {got['file']}, not from {self.pythonpath}")
        return got


def check(name: str, d: pathlib.Path, sample: pathlib.Path, ranges, label: str) -> None:
    with np.load(sample) as got:
        for lo, hi in ranges:
            a, want = got[f"r{lo}_{hi}"], oracle(name, d, lo, hi)
            if a.dtype != want.dtype or a.shape != want.shape or a.tobytes() != want.tobytes():
                sys.exit(f"{name}: build {label} rows [{lo}, {hi}) differ from the oracle:\n"
                         f"{a}\nexpected\n{want}")


def main() -> None:
    global NPY2G_ROWS, SMALL_SHARDS, COLUMNAR_ROWS, CHUNK_ROWS, ROW_GROUP, S3_ROWS, CASES
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--a", required=True, help="build A (the baseline): a built checkout")
    ap.add_argument("--b", required=True, help="build B: a built checkout")
    ap.add_argument("--data", help="where the datasets are written and kept (default: a "
                                   "temporary folder, removed at the end)")
    ap.add_argument("--cases", default=DEFAULT_CASES,
                    help=f"comma-separated, of {', '.join(CASES)} (default {DEFAULT_CASES}); "
                         "empty for --dir alone")
    ap.add_argument("--dir", help="also time this dataset of your own (no oracle check)")
    ap.add_argument("--format", default="auto", help="the format of --dir")
    ap.add_argument("--rounds", type=int, default=4, help="rounds: A B, then B A, ...")
    ap.add_argument("--loads", type=int, default=3, help="timed loads per process")
    ap.add_argument("--discovers", type=int, default=3, help="timed discoveries per process")
    ap.add_argument("--overdecompose", type=int, default=1)
    ap.add_argument("--legate-config", default=DEFAULT_LEGATE,
                    help=f"LEGATE_CONFIG of every process (default {DEFAULT_LEGATE!r})")
    ap.add_argument("--quick", action="store_true",
                    help="tiny datasets (a few MB), to check the bench itself, not to time")
    ap.add_argument("--write-only", action="store_true",
                    help="write the datasets under --data and stop (time them in a later run)")
    args = ap.parse_args()
    if args.quick:
        NPY2G_ROWS, SMALL_SHARDS, COLUMNAR_ROWS, CHUNK_ROWS, ROW_GROUP = 5000, 50, 3000, 512, 1000
        S3_ROWS = 5000
        CASES = cases()
    names = [c for c in args.cases.split(",") if c]
    for c in names:
        if c not in CASES:
            ap.error(f"unknown case {c!r} (known: {', '.join(CASES)})")
    if args.write_only and not args.data:
        ap.error("--write-only needs --data")
    if args.rounds < 1 or args.loads < 1 or args.discovers < 1:
        ap.error("--rounds, --loads and --discovers must be at least 1")
    builds = {"A": Build("A", args.a), "B": Build("B", args.b)}
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench_ab_"))
    data = pathlib.Path(args.data).resolve() if args.data else tmp / "data"
    data.mkdir(parents=True, exist_ok=True)
    print(f"A: {builds['A'].pythonpath} ({builds['A'].python})\nB: {builds['B'].pythonpath} "
          f"({builds['B'].python})\nLEGATE_CONFIG={args.legate_config!r}, rounds {args.rounds}, "
          f"loads {args.loads}, discovers {args.discovers}, K {args.overdecompose}; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    results = []
    stack = contextlib.ExitStack()
    try:
        todo = [(c, prepare(c, data)) for c in names]
        if args.write_only:
            return
        if args.dir:
            todo.append(("dir", pathlib.Path(args.dir)))
        for name, d in todo:
            if name == "dir":
                source, options, ranges, what = str(d), {"format": args.format}, [], str(d)
            else:
                _, shards, rows, _, _, options, what = CASES[name]
                source, ranges = str(d), sample_ranges(shards, rows)
            server = None
            if name == "s3":
                # The objects on a server of this case's own; the processes inherit the
                # clients' environment (s3_server.CLIENT_ENV) that serving() sets.
                sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" /
                                       "python"))
                import s3_server

                server = stack.enter_context(contextlib.ExitStack())
                endpoint = server.enter_context(s3_server.serving())
                bucket = s3_server.Bucket(endpoint, prefix="ab-")
                bucket.upload_tree("s3", d)
                source = bucket.url("s3/")
                options = {**options, "storage_options": bucket.options}
            got: dict[str, list[dict]] = {"A": [], "B": []}
            digests: dict[str, str] = {}
            load_before = os.getloadavg()[0]
            for r in range(args.rounds):
                for label in ("AB" if r % 2 == 0 else "BA"):
                    out = tmp / f"sample_{name}_{label}.npz"
                    spec = {"source": source, "options": options, "k": args.overdecompose,
                            "loads": args.loads, "discovers": args.discovers,
                            "ranges": ranges, "sample_out": str(out),
                            "digest": label not in digests}
                    s = builds[label].run(spec, args.legate_config)
                    if name != "dir":
                        check(name, d, out, ranges, label)
                    out.unlink()
                    if s["digest"]:
                        digests[label] = s["digest"]
                    got[label].append(s)
                    print(f"{name} round {r} {label}: load {s['load']:.4f} s "
                          f"({s['bytes'] / s['load'] / 1e9:.2f} GB/s, {s['cpu']:.4f} CPU s), "
                          f"discover {s['discover'] * 1e3:.3g} ms", flush=True)
            if digests["A"] != digests["B"]:
                sys.exit(f"{name}: the arrays of A and B differ (hashes {digests})")
            shapes = {(tuple(s["shape"]), s["dtype"]) for v in got.values() for s in v}
            if len(shapes) != 1:
                sys.exit(f"{name}: shapes or dtypes differ between runs: {shapes}")
            row = {"case": name, "what": what, "bytes": got["A"][0]["bytes"],
                   "load_avg": (load_before, os.getloadavg()[0])}
            for m in ("load", "cpu", "discover"):
                a = [s[m] for s in got["A"]]
                b = [s[m] for s in got["B"]]
                row[m] = (statistics.median(a), statistics.median(b),
                          statistics.median(y / x if x else float("nan") for x, y in zip(a, b)))
            results.append(row)
            checked = f"{len(ranges)} row ranges match the oracle" if ranges else "no oracle"
            print(f"{name}: equal (A and B hashes {digests['A']}; {checked})", flush=True)
            if server is not None:
                server.close()
    finally:
        stack.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n| case | GB | load A s | load B s | B/A | paired B/A | load CPU A s | load CPU B s "
          "| paired B/A | discover A ms | discover B ms | B/A | paired B/A | load average |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in results:
        la, lb, lp = row["load"]
        ca, cb, cp = row["cpu"]
        da, db, dp = row["discover"]
        print(f"| {row['case']} | {row['bytes'] / 1e9:.2f} | {la:.4f} | {lb:.4f} | {lb / la:.3f} "
              f"| {lp:.3f} | {ca:.4f} | {cb:.4f} | {cp:.3f} | {da * 1e3:.3g} | {db * 1e3:.3g} "
              f"| {db / da:.3f} | {dp:.3f} | {row['load_avg'][0]:.1f}-{row['load_avg'][1]:.1f} |")
    for row in results:
        print(f"{row['case']}: {row['what']}")


if __name__ == "__main__":
    main()
