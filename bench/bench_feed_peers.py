#!/usr/bin/env python
"""The training feed against Grain, MosaicML Streaming and Ray Data at equal shuffle quality, in
one run on bench_feed.py's data (hot page cache; one rank; every epoch's rows checked).

Run it with the peers' venv (bench/setup_peers.sh makes .venv-peers):

  .venv-peers/bin/python bench/bench_feed_peers.py --dir /tmp/bench-feed-128 --mb 128 --batch 256

Three shuffle qualities, each with its cases:

  none   feed shuffle="none"; Grain MapDataset.source(rows).batch(); Grain's DataLoader
         (IndexSampler, no shuffle, worker_count=0, read in the calling thread); Grain
         MapDataset.range(n).batch() mapped by a vectorised memmap gather (the best a Grain
         user writes over NumPy shards);
         MosaicML StreamingDataset(shuffle=False) over MDS shards; Ray Data read_numpy() of the
         .npy shards + iter_batches() (preserve_order), read anew each epoch
  row    an exact per-row global shuffle: feed shuffle="row"; Grain .shuffle(seed) / the
         DataLoader's IndexSampler(shuffle=True); MosaicML shuffle_algo="naive" (a global
         permutation of all samples); Ray random_shuffle(seed)
  block  MosaicML's block shuffles against the feed's block shuffle of the same structure:
         py1s (shards permuted, rows shuffled inside each shard) against feed
         shuffle="block" with block_rows = the MDS shard's rows and window_blocks=1; py1br
         (shards permuted, rows shuffled inside blocks of 0.75-1.25 x shuffle_block_size) against
         window_blocks=4 with shuffle_block_size = 4 shards' rows. num_canonical_nodes=1 so that
         MosaicML's order is one stream, as the feed's is.

A reference that is no peer: bench_feed.py's hand-written vectorised gather over the memory
maps in a random permutation ("ref memmap gather row"), left out of the best peer.

Every batch's first column (the global row index, as bench_feed.py writes it) is copied out in
the timed loop of every case alike; after each epoch the rows are checked: the count, each row
once, in order where the quality is "none" and not in order otherwise. Startup (Ray's runtime,
a StreamingDataset's construction, the MDS conversion) is timed once and reported apart.
Medians of --reps epochs, the cases interleaved. The "blocks per batch" column is a measure of
the shuffle's quality: the mean count of distinct blocks of --block-rows source rows in a batch.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import shutil
import statistics
import sys
import time
from typing import Callable, Iterable

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_feed import MapStyle, data_arguments, write  # noqa: E402  (the same data and dataset as bench_feed)

import shardload  # noqa: E402
import shardload.feed  # noqa: E402
import shardload.numpy  # noqa: E402


class Sink:
    """Takes each batch's first column (the rows' global indexes) so that an epoch can be
    checked after it is timed; the same per-batch cost for every case."""

    def __init__(self, n: int, batch: int) -> None:
        self.seen = np.empty(n, np.int64)
        self.batch = batch
        self.rows = 0
        self.batches = 0
        self.short = 0

    def start(self) -> None:
        self.rows = self.batches = self.short = 0

    def add(self, x: np.ndarray) -> None:
        b = len(x)
        if b != self.batch:
            self.short += 1
        self.seen[self.rows:self.rows + b] = x[:, 0]
        self.rows += b
        self.batches += 1


def check(name: str, sink: Sink, n: int, quality: str) -> None:
    rows = sink.rows
    want = n // sink.batch * sink.batch
    got = sink.seen[:rows]
    if sink.short or rows != want:
        raise AssertionError(f"{name}: {rows} rows in {sink.batches} batches ({sink.short} "
                             f"short), expected {want} rows in batches of {sink.batch}")
    if got.min() < 0 or got.max() >= n or np.unique(got).size != rows:
        raise AssertionError(f"{name}: rows repeated or out of range")
    in_order = bool((got == np.arange(rows)).all())
    if (quality == "none") != in_order:
        raise AssertionError(f"{name}: expected {'in' if quality == 'none' else 'out of'} order")


def mixing(sink: Sink, block: int) -> float:
    """The mean count of distinct source blocks of `block` rows in a batch: a shuffle quality
    measure (1 or 2 in order, about the batch size for an exact row shuffle)."""
    got = sink.seen[:sink.rows].reshape(-1, sink.batch) // block
    got.sort(axis=1)
    return float(((np.diff(got, axis=1) != 0).sum(axis=1) + 1).mean())


def timed(sink: Sink, batches: Callable[[], Iterable[np.ndarray]]) -> float:
    sink.start()
    t = time.perf_counter()
    for x in batches():
        sink.add(x)
    return time.perf_counter() - t


def rebatch(samples: Iterable[np.ndarray], batch: int) -> Iterable[np.ndarray]:
    """Samples (one row each) into batches of `batch` rows, the last partial one dropped (what a
    DataLoader(batch_size=B, drop_last=True) does with the default collate, in NumPy)."""
    rows: list[np.ndarray] = []
    for s in samples:
        rows.append(s)
        if len(rows) == batch:
            yield np.stack(rows)
            rows = []


def convert_mds(src: pathlib.Path, out: pathlib.Path, rows_per_shard: int) -> tuple[float, int]:
    """The .npy shards as MosaicML MDS shards of about `rows_per_shard` rows, uncompressed;
    returns (seconds, rows in the first MDS shard)."""
    from streaming import MDSWriter

    if out.exists():
        # Made anew each run (the conversion is timed), but only over an earlier MDS output.
        if not (out / "index.json").is_file():
            raise SystemExit(f"{out}: exists and holds no MDS index.json; not replacing it")
        shutil.rmtree(out)
    maps = [np.load(p, mmap_mode="r") for p in sorted(src.glob("shard_*.npy"))]
    width, dtype = maps[0].shape[1], maps[0].dtype
    # An MDS shard holds a 4-byte count, a 4-byte offset per sample and one more, then the
    # samples: a limit that fits rows_per_shard samples of a fixed-size column and not one more.
    row = maps[0][0].nbytes
    limit = 4 * (rows_per_shard + 2) + rows_per_shard * row + row // 2
    t = time.perf_counter()
    with MDSWriter(out=str(out), columns={"x": f"ndarray:{dtype.name}:{width}"},
                   compression=None, size_limit=limit) as w:
        for m in maps:
            for row in m:
                w.write({"x": row})
    secs = time.perf_counter() - t
    index = json.loads((out / "index.json").read_text())
    return secs, int(index["shards"][0]["samples"])


def version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def main() -> None:
    ap = data_arguments(__doc__.split("\n")[0])
    ap.add_argument("--block-rows", type=int, default=1024,
                    help="rows per MDS shard and per feed block (1 MiB of 1 KiB rows)")
    ap.add_argument("--skip", default="", help="comma-separated peers to leave out: "
                    "grain,mosaicml,ray")
    args = ap.parse_args()
    skip = {s for s in args.skip.split(",") if s}
    write(args.dir, args.mb, args.row_floats, args.shards)
    layout = shardload.discover(args.dir)
    n, nbytes, B = layout.total_rows, layout.nbytes, args.batch
    print(f"{n} rows of {layout.shape[1:]} {layout.dtype} in {layout.num_shards} shards, "
          f"{nbytes / 1e6:.0f} MB; batch {B}; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f} at the start")
    print("versions: " + ", ".join(f"{p} {version(p)}" for p in (
        "numpy", "grain", "mosaicml-streaming", "ray", "torch")))
    shardload.numpy.load(layout)  # warms the page cache
    ds = MapStyle(args.dir)
    sink = Sink(n, B)
    startup: dict[str, float] = {}
    # name -> (quality, the epoch's batches as a function of the epoch)
    cases: dict[str, tuple[str, Callable[[int], Iterable[np.ndarray]]]] = {}

    block_rows = args.block_rows
    mds = args.dir.parent / (args.dir.name + "-mds")
    if "mosaicml" not in skip:
        secs, block_rows = convert_mds(args.dir, mds, args.block_rows)
        startup["MosaicML: MDS conversion (apart)"] = secs
        print(f"MDS conversion: {secs:.2f} s, {block_rows} rows per MDS shard")

    def feed(mode: str, **kw) -> Callable[[int], Iterable[np.ndarray]]:
        f = shardload.feed.Feed(layout, B, shuffle=mode, seed=1, **kw)

        def epoch(e: int) -> Iterable[np.ndarray]:
            f.set_epoch(e)
            return f
        return epoch

    cases["feed none"] = ("none", feed("none"))
    cases["feed row"] = ("row", feed("row"))
    cases[f"feed block {block_rows}/1"] = ("block/1", feed("block", block_rows=block_rows,
                                                          window_blocks=1))
    cases[f"feed block {block_rows}/4"] = ("block/4", feed("block", block_rows=block_rows,
                                                          window_blocks=4))

    def reference(e: int) -> Iterable[np.ndarray]:
        perm = np.random.default_rng(e).permutation(n)
        return (ds.gather(perm[k:k + B]) for k in range(0, n // B * B, B))

    # No library: bench_feed.py's hand-written gather over the memory maps, for scale.
    cases["ref memmap gather row"] = ("row", reference)

    if "grain" not in skip:
        import grain

        def grain_map(shuffle: bool) -> Callable[[int], Iterable[np.ndarray]]:
            def epoch(e: int) -> Iterable[np.ndarray]:
                d = grain.MapDataset.source(ds)
                if shuffle:
                    d = d.shuffle(seed=e)
                return d.batch(B, drop_remainder=True).to_iter_dataset()
            return epoch

        def grain_gather(shuffle: bool) -> Callable[[int], Iterable[np.ndarray]]:
            def epoch(e: int) -> Iterable[np.ndarray]:
                d = grain.MapDataset.range(n)
                if shuffle:
                    d = d.shuffle(seed=e)
                return d.batch(B, drop_remainder=True).map(ds.gather).to_iter_dataset()
            return epoch

        def grain_loader(shuffle: bool) -> Callable[[int], Iterable[np.ndarray]]:
            def epoch(e: int) -> Iterable[np.ndarray]:
                sampler = grain.samplers.IndexSampler(
                    num_records=n, shard_options=grain.sharding.NoSharding(), shuffle=shuffle,
                    num_epochs=1, seed=e)
                # Reading in the calling thread: Grain's default read threads made this
                # loader about 8x slower here.
                return grain.DataLoader(data_source=ds, sampler=sampler,
                                        operations=[grain.transforms.Batch(
                                            B, drop_remainder=True)], worker_count=0,
                                        read_options=grain.ReadOptions(num_threads=0))
            return epoch

        for shuffle, q in ((False, "none"), (True, "row")):
            cases[f"grain map {q}"] = (q, grain_map(shuffle))
            cases[f"grain DataLoader {q}"] = (q, grain_loader(shuffle))
            cases[f"grain gather {q}"] = (q, grain_gather(shuffle))

    if "mosaicml" not in skip:
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()

        def mosaic(q: str, **kw) -> Callable[[int], Iterable[np.ndarray]]:
            t = time.perf_counter()
            sd = StreamingDataset(local=str(mds), batch_size=B, num_canonical_nodes=1,
                                  shuffle_seed=1, **kw)
            startup[f"MosaicML: StreamingDataset({q})"] = time.perf_counter() - t

            def epoch(e: int) -> Iterable[np.ndarray]:
                return rebatch((s["x"] for s in sd), B)
            return epoch

        cases["mosaicml none"] = ("none", mosaic("none", shuffle=False))
        cases["mosaicml naive"] = ("row", mosaic("naive", shuffle=True, shuffle_algo="naive"))
        cases["mosaicml py1s"] = ("block/1", mosaic("py1s", shuffle=True, shuffle_algo="py1s"))
        cases["mosaicml py1br"] = ("block/4", mosaic("py1br", shuffle=True, shuffle_algo="py1br",
                                                     shuffle_block_size=4 * block_rows))

    if "ray" not in skip:
        import logging

        import ray

        t = time.perf_counter()
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        ctx.execution_options.preserve_order = True
        paths = [str(p) for p in sorted(args.dir.glob("shard_*.npy"))]
        # The first (untimed) pass starts Ray Data's workers: part of its startup.
        for _ in ray.data.read_numpy(paths).iter_batches(batch_size=B, batch_format="numpy"):
            pass
        startup["Ray: init + a first read_numpy pass"] = time.perf_counter() - t

        def ray_epoch(shuffle: bool) -> Callable[[int], Iterable[np.ndarray]]:
            def epoch(e: int) -> Iterable[np.ndarray]:
                d = ray.data.read_numpy(paths)
                if shuffle:
                    d = d.random_shuffle(seed=e)
                return (b["data"] for b in d.iter_batches(batch_size=B, batch_format="numpy",
                                                          drop_last=True))
            return epoch

        cases["ray none"] = ("none", ray_epoch(False))
        cases["ray random_shuffle"] = ("row", ray_epoch(True))

    for name, s in startup.items():
        print(f"startup: {name}: {s:.2f} s")
    times: dict[str, list[float]] = {k: [] for k in cases}
    mixed: dict[str, float] = {}
    for rep in range(args.reps):
        for name, (q, fn) in cases.items():
            s = timed(sink, lambda: fn(rep))
            check(name, sink, n, "none" if q == "none" else "shuffled")
            times[name].append(s)
            mixed[name] = mixing(sink, block_rows)
    med = {k: statistics.median(v) for k, v in times.items()}
    rows = n // B * B
    row_bytes = nbytes / n
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    print(f"| case (batch {B}, {args.reps} epochs) | quality | s/epoch | rows/s | GB/s | "
          f"blocks of {block_rows} rows per batch |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (q, _) in cases.items():
        print(f"| {name} | {q} | {med[name]:.3f} | {rows / med[name]:,.0f} | "
              f"{rows * row_bytes / med[name] / 1e9:.2f} | {mixed[name]:.1f} |")
    print("| ratio | s/epoch of the peer | feed / peer |")
    print("| --- | --- | --- |")
    feeds = {q: name for name, (q, _) in cases.items() if name.startswith("feed")}
    for q, fname in feeds.items():
        if "ref memmap gather row" in med and q == "row":
            print(f"| {fname} / ref memmap gather row (no library) | "
                  f"{med['ref memmap gather row']:.3f} | "
                  f"{med['ref memmap gather row'] / med[fname]:.2f} |")
        peers = {k: v for k, v in med.items()
                 if cases[k][0] == q and not k.startswith(("feed", "ref"))}
        for p, s in sorted(peers.items(), key=lambda kv: kv[1]):
            print(f"| {fname} / {p} | {s:.3f} | {s / med[fname]:.2f} |")
        if peers:
            best = min(peers, key=peers.get)
            r = peers[best] / med[fname]
            print(f"| **{fname} / best peer ({best})** | {peers[best]:.3f} | **{r:.2f}** "
                  f"({'met' if r >= 2 else 'not met'}: >= 2) |")
    if "ray" not in skip:
        ray.shutdown()


if __name__ == "__main__":
    main()
