#!/usr/bin/env python
"""Columnar benchmark: shardload against pyarrow on Parquet and Arrow IPC shards.

For each case (format, compression, row group size, columns) the same float32 data is written
once as --shards files; then, alternately in one run, hot page cache, medians of --reps:

  shardload   shardload.load(layout) of a layout discovered once (Legate, the processors of
              LEGATE_CONFIG), or with --core, Layout.read() on the calling thread alone;
  to_table    to_table(use_threads=...) of a pyarrow.dataset.dataset(dir) made once, with
              pyarrow's CPU pool set to --threads (--core: use_threads=False);
  to_numpy    to_table and then the 2-D array a user needs (np.stack of the columns).

With --embeddings the files hold one FixedSizeList<float32>[--dim] column instead, and the
second baseline is to_table + np.stack of the column's rows (via its flattened values).

Run it through scripts/bench_columnar.sh, which sets up and configures Legate.
"""

from __future__ import annotations

import argparse
import gc
import os
import pathlib
import statistics
import time

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.feather as feather
import pyarrow.parquet as pq

ROOT = pathlib.Path(__file__).resolve().parents[1]


def write_case(d: pathlib.Path, fmt: str, comp: str, group: int, cols: int, rows: int,
               shards: int, dim: int) -> None:
    rng = np.random.default_rng(7)
    per = rows // shards
    for i in range(shards):
        if dim:
            flat = rng.standard_normal(per * dim, dtype=np.float32)
            t = pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(flat), dim)})
        else:
            a = rng.standard_normal((cols, per), dtype=np.float32)
            t = pa.table({f"c{j}": a[j] for j in range(cols)})
        g = per if group <= 0 else group
        if fmt == "parquet":
            pq.write_table(t, d / f"shard_{i:04d}.parquet", row_group_size=g, compression=comp)
        else:
            feather.write_feather(t, d / f"shard_{i:04d}.arrow", chunksize=g,
                                  compression="uncompressed" if comp == "none" else comp)


def to_numpy(t: pa.Table, dim: int) -> np.ndarray:
    if dim:
        col = t.column(0)
        return np.concatenate([np.stack(c.to_numpy(zero_copy_only=False)) for c in col.chunks])
    if t.num_columns == 1:  # one column loads 1-D
        return t.column(0).to_numpy()
    return np.stack([c.to_numpy() for c in t.columns], axis=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=str(ROOT / "bench-data" / "columnar"))
    ap.add_argument("--mb", type=int, default=256,
                    help="MiB of float32 values per case (rows follow from the columns)")
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--cols", default="16", help="comma list of column counts")
    ap.add_argument("--groups", default="0", help="comma list of row group rows; 0: one per file")
    ap.add_argument("--compression", default="snappy", help="comma list: snappy, zstd, none")
    ap.add_argument("--formats", default="parquet", help="comma list: parquet, arrow")
    ap.add_argument("--embeddings", type=int, default=0, metavar="DIM",
                    help="one FixedSizeList<float32>[DIM] column instead of --cols")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--core", action="store_true",
                    help="one thread, no Legate: Layout.read() against to_table(use_threads=False)")
    args = ap.parse_args()
    pa.set_cpu_count(args.threads)
    # The I/O pool keeps its default size: with 2 threads, to_table of IPC files deadlocks
    # (its file readers wait inside the I/O pool on reads queued behind them).
    import shardload

    if not args.core:
        import cupynumeric as cn
        from legate.core import get_legate_runtime

    def timed(fn) -> float:
        gc.collect()
        t0 = time.perf_counter()
        r = fn()
        if not args.core and isinstance(r, cn.ndarray):
            get_legate_runtime().issue_execution_fence(block=True)
        dt = time.perf_counter() - t0
        del r
        gc.collect()
        return dt

    print(f"threads {args.threads}, core {args.core}, LEGATE_CONFIG="
          f"{os.environ.get('LEGATE_CONFIG')}, pyarrow {pa.__version__}")
    out = []
    dim = args.embeddings
    for fmt in args.formats.split(","):
        for comp in args.compression.split(","):
            if fmt == "arrow" and comp == "snappy":
                continue  # Arrow IPC compresses with lz4 or zstd only
            for group in [int(g) for g in args.groups.split(",")]:
                for cols in ([1] if dim else [int(c) for c in args.cols.split(",")]):
                    rows = (args.mb << 20) // (4 * cols * max(dim, 1))
                    rows -= rows % args.shards
                    name = f"{fmt}-{comp}-g{group}-c{cols}-d{dim}-r{rows}-s{args.shards}"
                    d = pathlib.Path(args.dir) / name
                    if not (d / ".complete").exists():
                        d.mkdir(parents=True, exist_ok=True)
                        write_case(d, fmt, comp, group, cols, rows, args.shards, dim)
                        (d / ".complete").write_text("")
                    dsfmt = "parquet" if fmt == "parquet" else "ipc"
                    dset = ds.dataset(str(d), format=dsfmt)
                    use_threads = not args.core
                    table = lambda: dset.to_table(use_threads=use_threads)  # noqa: E731
                    # Discovery once for both, as the dataset object once for pyarrow.
                    layout = shardload.discover(d, format=fmt)
                    if args.core:
                        load = layout.read
                    else:
                        load = lambda: shardload.load(layout)  # noqa: E731
                    nbytes = to_numpy(table(), dim).nbytes
                    np.testing.assert_array_equal(np.asarray(load()), to_numpy(table(), dim))
                    ts, tt, tn = [], [], []
                    for _ in range(args.reps):
                        ts.append(timed(load))
                        tt.append(timed(table))
                        tn.append(timed(lambda: to_numpy(table(), dim)))
                    s, t, n = (statistics.median(x) for x in (ts, tt, tn))
                    disk = sum(p.stat().st_size for p in d.iterdir() if p.is_file())
                    g = "one per file" if group <= 0 else f"{group}"
                    shape = f"[{dim}] x 1" if dim else f"{cols}"
                    out.append((fmt, comp, g, shape, nbytes, disk, s, t, n))
                    print(f"{name}: shardload {s:.3f} s, to_table {t:.3f} s ({s / t:.2f}x its "
                          f"time), to_numpy {n:.3f} s ({n / s:.2f}x faster)", flush=True)
    print()
    print("| format | compression | row group rows | columns | GB | shardload s | to_table s "
          "| shardload / to_table | to_table + numpy s | speed-up over to_table + numpy |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for fmt, comp, g, shape, nbytes, disk, s, t, n in out:
        print(f"| {fmt} | {comp} | {g} | {shape} | {nbytes / 1e9:.3f} | {s:.3f} | {t:.3f} | "
              f"{s / t:.2f}x | {n:.3f} | {n / s:.2f}x |")


if __name__ == "__main__":
    main()
