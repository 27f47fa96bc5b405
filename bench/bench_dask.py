#!/usr/bin/env python
"""The Dask front end against what a Dask user writes, in one run on the same ~400 MB (hot page
cache; every result checked against numpy first).

  shardload.dask      shardload.dask.load(dir).compute(): chunks are the engine's tiles
  from_npy_stack      da.from_npy_stack(stack).compute(): the same .npy files, one chunk each
  from_delayed        da.concatenate([da.from_delayed(delayed(np.load)(f), ...)]).compute()
  from_zarr           da.from_zarr(store).compute(): the same rows as one uncompressed Zarr array
  shardload.dask zarr shardload.dask.load(store).compute(), that Zarr array

The same for ``x.sum(axis=0)``, where no chunk is copied into one result. Then the scheduler's cost per chunk (a dataset of many tiny chunks, compute() against the same
reads called in a loop), and dask.distributed: a LocalCluster of 2 processes x 1 thread against
1 process x 2 threads, for ``x.sum()`` (reads and reduction on the workers) and for
``compute()`` (every chunk sent to the client).

  .venv/bin/python bench/bench_dask.py --dir /tmp/bench-dask --reps 5
"""

from __future__ import annotations

import argparse
import itertools
import os
import pathlib
import pickle
import statistics
import time

import dask
import dask.array as da
import numpy as np

import shardload
import shardload.dask
import shardload.numpy


def write(base: pathlib.Path) -> dict[str, pathlib.Path]:
    rng = np.random.default_rng(0)
    a = base / "npy"
    if not a.exists():
        a.mkdir(parents=True)
        rows = rng.integers(300_000, 1_300_000, 16)
        rows = (rows * (6_250_000 / rows.sum())).astype(int)  # ~400 MB of (N, 16) float32
        for i, r in enumerate(rows):
            np.save(a / f"shard_{i:04d}.npy", rng.random((int(r), 16), dtype=np.float32))
    files = sorted(a.glob("*.npy"))
    stack = base / "stack"
    if not stack.exists():  # da.to_npy_stack's layout over the same files (hard links)
        stack.mkdir()
        rows = tuple(int(np.load(f, mmap_mode="r").shape[0]) for f in files)
        for i, f in enumerate(files):
            os.link(f, stack / f"{i}.npy")
        with open(stack / "info", "wb") as fh:
            pickle.dump({"chunks": (rows, (16,)), "dtype": np.dtype(np.float32), "axis": 0}, fh)
    z = base / "one.zarr"
    if not z.exists():
        import zarr

        want = np.concatenate([np.load(f) for f in files])
        arr = zarr.create_array(str(z), shape=want.shape, dtype=want.dtype,
                                chunks=(65536, 16), compressors=None, zarr_format=3)
        arr[:] = want
    return {"npy": a, "stack": stack, "zarr": z}


def from_delayed(d: pathlib.Path) -> da.Array:
    parts = []
    for f in sorted(d.glob("*.npy")):
        m = np.load(f, mmap_mode="r")
        parts.append(da.from_delayed(dask.delayed(np.load)(f), m.shape, m.dtype))
    return da.concatenate(parts)


def timed(fn, reps: int) -> float:
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        r = fn()
        out.append(time.perf_counter() - t)
        del r
    return statistics.median(out)


_names = itertools.count()

def front_ends(data: dict[str, pathlib.Path], reps: int, reduce: bool) -> None:
    import zarr

    arrays = {
        "shardload.dask": lambda: shardload.dask.load(data["npy"]),
        "from_npy_stack": lambda: da.from_npy_stack(str(data["stack"])),
        "from_delayed": lambda: from_delayed(data["npy"]),
        "from_zarr": lambda: da.from_zarr(zarr.open_array(str(data["zarr"]), mode="r")),
        "shardload.dask zarr": lambda: shardload.dask.load(str(data["zarr"])),
    }
    # Not a loader: the same rows already in memory, each chunk a view of them, in shardload's
    # chunks. What Dask itself costs with nothing to read (the tasks, and for compute() the
    # concatenation of the chunks into one array), so the fastest any loader that returns
    # through Dask could be. (da.from_array is no such floor: its tasks copy each chunk.)
    memory = shardload.numpy.load(data["npy"])
    chunks = shardload.dask.load(data["npy"]).chunks

    def in_memory() -> da.Array:
        name = f"in-memory-{next(_names)}"
        at = np.concatenate([[0], np.cumsum(chunks[0])])
        graph = {(name, i, 0): memory[at[i]:at[i + 1]] for i in range(len(chunks[0]))}
        return da.Array(graph, name, chunks, memory.dtype)

    arrays["(nothing to read)"] = in_memory
    if reduce:
        cases = {k: (lambda f=f: f().sum(axis=0, dtype=np.float64).compute())
                 for k, f in arrays.items()}
    else:
        cases = {k: (lambda f=f: f().compute()) for k, f in arrays.items()}
        # Not a Dask peer: the one-copy bound, the engine's threads filling one array.
        cases["(shardload.numpy.load)"] = lambda: shardload.numpy.load(data["npy"])
    want = None
    for label, fn in cases.items():  # warm the cache and check every result
        got = fn()
        if want is None:
            want = got
        assert got.shape == want.shape, label
        if reduce:
            assert np.allclose(got, want, rtol=1e-9), label
        else:
            assert np.array_equal(got, want), label
        del got
    times: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(reps):  # interleaved
        for label, fn in cases.items():
            times[label].append(timed(fn, 1))
    med = {label: statistics.median(v) for label, v in times.items()}
    x = shardload.dask.load(data["npy"])
    gb = x.nbytes / 1e9
    what = "x.sum(axis=0).compute()" if reduce else "x.compute()"
    print(f"\n(threaded scheduler, {what}) {x.shape} {x.dtype}, {gb:.2f} GB, "
          f"{len(x.chunks[0])} shardload chunks")
    mine = med["shardload.dask"]
    for label, t in med.items():
        ratio = "" if label == "shardload.dask" else f"  ({t / mine:.2f}x shardload.dask)"
        print(f"  {label:20s} {t:8.3f} s  {gb / t:6.2f} GB/s{ratio}")
    peers = [med[k] for k in ("from_npy_stack", "from_delayed", "from_zarr")]
    print(f"  best peer / shardload.dask: {min(peers) / mine:.2f}x (goal >= 2x)")
    print(f"  best peer / (nothing to read): {min(peers) / med['(nothing to read)']:.2f}x "
          "(the most any Dask loader could reach)")


def overhead(base: pathlib.Path, reps: int) -> None:
    d = base / "tiny"
    if not d.exists():
        d.mkdir()
        rng = np.random.default_rng(1)
        for i in range(8):
            np.save(d / f"shard_{i:04d}.npy", rng.random((2500, 4), dtype=np.float32))
    layout = shardload.discover(d)
    for n in (1000, 10000):
        rows = layout.total_rows // n
        x = shardload.dask.load(layout, chunks=rows)
        chunks = len(x.chunks[0])
        bounds = [0, *np.cumsum(x.chunks[0]).tolist()]

        def loop():
            return [layout.read(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]

        def build():
            return shardload.dask.load(layout, chunks=rows)

        t_build = timed(build, reps)
        t_sync = timed(lambda: x.compute(scheduler="synchronous"), reps)
        t_threads = timed(lambda: x.compute(scheduler="threads"), reps)
        t_loop = timed(loop, reps)
        # Dask's own cost for the same chunks, with nothing to read: a numpy array cut alike.
        plain = da.from_array(np.zeros(x.shape, x.dtype), chunks=(x.chunks[0], 4))
        t_plain = timed(lambda: plain.compute(scheduler="threads"), reps)
        print(f"\n(scheduler cost) {chunks} chunks of {rows} rows of 16 B, "
              f"graph {len(pickle.dumps(dict(x.__dask_graph__())))} B pickled")
        print(f"  the reads alone (loop)     {t_loop * 1e6 / chunks:8.1f} us/chunk")
        print(f"  load() building the graph  {t_build * 1e6 / chunks:8.1f} us/chunk")
        print(f"  compute() synchronous      {t_sync * 1e6 / chunks:8.1f} us/chunk  "
              f"(+{(t_sync - t_loop) * 1e6 / chunks:.1f} over the reads)")
        print(f"  compute() threads          {t_threads * 1e6 / chunks:8.1f} us/chunk  "
              f"(+{(t_threads - t_loop) * 1e6 / chunks:.1f} over the reads)")
        print(f"  da.from_array, threads     {t_plain * 1e6 / chunks:8.1f} us/chunk  "
              "(Dask alone: in-memory chunks, nothing read)")


def cluster(data: dict[str, pathlib.Path], reps: int) -> None:
    from contextlib import ExitStack

    from distributed import Client, LocalCluster

    ref = shardload.dask.load(data["npy"]).compute()
    ref_sum = ref.sum(dtype=np.float64)
    shapes = {"2 processes x 1 thread": (2, 1), "1 process x 2 threads": (1, 2)}
    times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in shapes}
    with ExitStack() as stack:
        clients = {}
        for label, (workers, threads) in shapes.items():  # both up, the runs interleaved
            c = stack.enter_context(LocalCluster(n_workers=workers, threads_per_worker=threads,
                                                 processes=True, dashboard_address=":0"))
            clients[label] = stack.enter_context(Client(c, set_as_default=False))
        x = shardload.dask.load(data["npy"], chunks=None)  # the tiles for 2 threads
        s = x.sum(dtype=np.float64)
        for label, cl in clients.items():
            got = cl.compute(x).result()
            assert np.array_equal(got, ref), label
            del got
            assert np.isclose(cl.compute(s).result(), ref_sum), label
        for _ in range(reps):
            for label, cl in clients.items():
                times[label][0].append(timed(lambda: cl.compute(s).result(), 1))
                times[label][1].append(timed(lambda: cl.compute(x).result(), 1))
    gb = ref.nbytes / 1e9
    print(f"\n(dask.distributed LocalCluster, {gb:.2f} GB, {len(x.chunks[0])} chunks, "
          "runs interleaved)")
    med = {k: (statistics.median(a), statistics.median(b)) for k, (a, b) in times.items()}
    for label, (t_sum, t_all) in med.items():
        print(f"  {label:24s} x.sum() {t_sum:7.3f} s ({gb / t_sum:5.2f} GB/s)   "
              f"compute() {t_all:7.3f} s ({gb / t_all:5.2f} GB/s)")
    a, b = med["2 processes x 1 thread"], med["1 process x 2 threads"]
    print(f"  2x1 / 1x2: x.sum() {a[0] / b[0]:.2f}x, compute() {a[1] / b[1]:.2f}x "
          "(goal <= 1.2x)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/bench-dask")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--skip", default="", help="comma-separated: front,reduce,overhead,cluster")
    args = ap.parse_args()
    base = pathlib.Path(args.dir)
    data = write(base)
    skip = set(args.skip.split(","))
    print(f"# {os.cpu_count()} CPUs, reps {args.reps}, dask {dask.__version__}, "
          f"shardload {shardload.__version__}")
    if "front" not in skip:
        front_ends(data, args.reps, reduce=False)
    if "reduce" not in skip:
        front_ends(data, args.reps, reduce=True)
    if "overhead" not in skip:
        overhead(base, args.reps)
    if "cluster" not in skip:
        cluster(data, args.reps)


if __name__ == "__main__":
    main()
