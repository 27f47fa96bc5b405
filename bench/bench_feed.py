#!/usr/bin/env python
"""The training feed against a torch-DataLoader-like baseline, in one run on the same files
(hot page cache; every epoch's rows checked against the order's oracle first).

  load()          shardload.numpy.load(dir, out=): the whole dataset at once, the bound
  feed none       shardload.feed.Feed(shuffle="none"): batches in order, one read each
  feed block      Feed(shuffle="block"): blocks of ~1 MiB permuted, rows shuffled in windows
                  of 4 blocks
  feed row        Feed(shuffle="row"): an exact per-row shuffle, each batch one gather
  map-style seq   what a map-style torch Dataset over np.load(mmap_mode="r") shards gives a
                  DataLoader(num_workers=0) with the default collate: __getitem__ per row,
                  np.stack per batch, rows in order
  map-style rand  the same over a random permutation (DataLoader(shuffle=True))
  memmap gather   the best a hand-written loader does: per batch, the random indexes sorted,
                  one fancy index per shard's memmap, then put in order
  torch DL ...    torch's own DataLoader over that map-style dataset with DistributedSampler
                  (rank 0 of 1, drop_last; shuffle=False for "seq", True for "rand"), the
                  default collate into a tensor, num_workers 0 or 2 (persistent workers, made
                  once); left out when torch is not installed

Each epoch yields batches of --batch rows on one rank; rows/s, batches/s and GB/s per epoch,
the median of --reps epochs, the modes interleaved.

  .venv/bin/python bench/bench_feed.py --dir /tmp/bench-feed --reps 3

With --feed-only: load() and the feed's three orders only (an A/B of a change to the feed runs
in seconds, without the map-style and torch cases).

--block-rows and --window-blocks set the block shuffle's blocks and windows (the feed's
defaults: about 1 MiB of rows, 4 blocks); with --row-floats they sweep how the block / none
ratio depends on the row size and the window (docs/benchmarks.md).

With --zarr: the same data as Zarr v2 stores (one per shard, uncompressed chunks of about
256 KiB), the feed's in-order and block-shuffled epochs from a layout as discovered (each local
chunk file held to the discovery's time: its ctime from the open's fstat) against the same
layout rebuilt from its encoding (pickled: no discovery time, nothing compared), interleaved
in one run: the cost of detecting a chunk changed since discovery.

  .venv/bin/python bench/bench_feed.py --dir /tmp/bench-feed --zarr --reps 9

With --exchange: 2 ranks under torch.distributed (gloo on loopback) each read their half of
the epoch in order, each step ending in a small all-reduce (as DDP's), with and without the
ranks' agreement on read errors (check_ranks), and the difference per step is its cost.

  .venv/bin/python bench/bench_feed.py --dir /tmp/bench-feed --exchange --reps 5
"""

from __future__ import annotations

import argparse
import bisect
import pathlib
import statistics
import time

import numpy as np

import shardload
import shardload.feed
import shardload.numpy


def write(d: pathlib.Path, mb: int, row_floats: int, shards: int) -> None:
    if d.exists():
        return
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows = mb * 1_000_000 // (4 * row_floats)
    cuts = np.sort(rng.choice(np.arange(1, rows), shards - 1, replace=False))
    bounds = [0, *cuts.tolist(), rows]
    for i in range(shards):
        a = np.empty((bounds[i + 1] - bounds[i], row_floats), np.float32)
        a[:] = np.arange(bounds[i], bounds[i + 1], dtype=np.float32)[:, None]
        a[:, 1:] += rng.random((a.shape[0], row_floats - 1), dtype=np.float32)
        np.save(d / f"shard_{i:04d}.npy", a)


class MapStyle:
    """A torch-style map-style dataset over memory-mapped shards (what the DataLoader
    baseline indexes row by row)."""

    def __init__(self, d: pathlib.Path) -> None:
        self.maps = [np.load(p, mmap_mode="r") for p in sorted(d.glob("shard_*.npy"))]
        self.starts = np.cumsum([0] + [len(m) for m in self.maps]).tolist()

    def __len__(self) -> int:
        return self.starts[-1]

    def __getitem__(self, i: int) -> np.ndarray:
        s = bisect.bisect_right(self.starts, i) - 1
        return self.maps[s][i - self.starts[s]]

    def gather(self, idx: np.ndarray) -> np.ndarray:
        out = np.empty((len(idx),) + self.maps[0].shape[1:], self.maps[0].dtype)
        order = np.argsort(idx)
        srt = idx[order]
        cuts = np.searchsorted(srt, self.starts)
        for s in range(len(self.maps)):
            lo, hi = cuts[s], cuts[s + 1]
            if lo < hi:
                out[order[lo:hi]] = self.maps[s][srt[lo:hi] - self.starts[s]]
        return out


def epoch_feed(feed) -> tuple[int, float]:
    t = time.perf_counter()
    k = 0
    for batch in feed:
        k += 1
    return k, time.perf_counter() - t


def epoch_map(ds: MapStyle, batch: int, perm: np.ndarray | None, gather: bool) -> tuple[int,
                                                                                        float]:
    t = time.perf_counter()
    n = len(ds)
    steps = n // batch
    for k in range(steps):
        idx = perm[k * batch:(k + 1) * batch] if perm is not None else np.arange(
            k * batch, (k + 1) * batch)
        if gather:
            ds.gather(idx)
        else:
            np.stack([ds[int(i)] for i in idx])
    return steps, time.perf_counter() - t


def torch_loaders(ds: MapStyle, batch: int) -> dict:
    """torch's DataLoader + DistributedSampler over the map-style dataset, by name."""
    try:
        import torch.utils.data as tud
        from torch.utils.data.distributed import DistributedSampler
    except ImportError:
        print("torch is not installed: the torch DataLoader cases are left out")
        return {}
    out = {}
    for workers in (0, 2):
        for shuffle in (False, True):
            sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=shuffle, seed=0,
                                         drop_last=True)
            loader = tud.DataLoader(ds, batch_size=batch, sampler=sampler, drop_last=True,
                                    num_workers=workers, persistent_workers=workers > 0)
            out[f"torch DL w{workers} {'rand' if shuffle else 'seq'}"] = (sampler, loader)
    return out


def epoch_torch(sampler, loader, epoch: list[int]) -> tuple[int, float]:
    epoch[0] += 1
    sampler.set_epoch(epoch[0])
    t = time.perf_counter()
    k = 0
    for x in loader:
        k += 1
    return k, time.perf_counter() - t


def exchange_rank(args) -> None:
    """One of 2 gloo ranks (--exchange): epochs of shuffle="none" with the ranks' per-step
    agreement on read errors (check_ranks, the default under torch.distributed) and without;
    rank 0 prints the medians."""
    import datetime

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.exchange_port}",
                            rank=args.exchange_rank, world_size=2,
                            timeout=datetime.timedelta(seconds=120))
    import torch

    feeds = {c: shardload.feed.Feed(args.dir, args.batch, shuffle="none", check_ranks=c,
                                    threads=args.threads) for c in (True, False)}
    times: dict[bool, list[float]] = {True: [], False: []}
    grad = torch.zeros(1024)

    def epoch(feed) -> tuple[int, float]:
        # Each step ends in an all-reduce, as DDP's gradient all-reduce: the ranks go in lock
        # step either way, so the difference is the exchange's own cost.
        t = time.perf_counter()
        k = 0
        for batch in feed:
            dist.all_reduce(grad)
            k += 1
        return k, time.perf_counter() - t

    for _ in range(args.reps):
        for c, feed in feeds.items():
            dist.barrier()
            k, s = epoch(feed)
            times[c].append(s / k)
    if dist.get_rank() == 0:
        on, off = statistics.median(times[True]), statistics.median(times[False])
        print(f"2 gloo ranks, batch {args.batch}, {k} steps each ending in an all-reduce of 4 "
              f"KiB: {off * 1e6:.0f} us a step without the ranks' agreement, {on * 1e6:.0f} us "
              f"with it: {(on - off) * 1e6:.0f} us a step ({feeds[True]._per_fill} batches a "
              f"fill, one exchange a fill)")
    dist.destroy_process_group()


def exchange(args) -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, __file__, "--dir", str(args.dir), "--batch", str(args.batch),
           "--reps", str(args.reps), "--exchange-port", str(port)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    procs = [subprocess.Popen(cmd + ["--exchange-rank", str(r)]) for r in (0, 1)]
    for p in procs:
        p.wait(timeout=600)
    assert [p.returncode for p in procs] == [0, 0]


def zarr_check_cost(args) -> None:
    """--zarr: the chunk check's cost (a layout as discovered against one without its
    discovery time), in-order and block-shuffled epochs interleaved."""
    import pickle

    import zarr

    d = args.dir.with_name(args.dir.name + "-zarr")
    if not d.exists():
        d.mkdir(parents=True)
        for p in sorted(args.dir.glob("shard_*.npy")):
            a = np.load(p)
            chunk = max(1, (256 << 10) // (a.itemsize * a.shape[1]))
            z = zarr.create_array(str(d / (p.stem + ".zarr")), shape=a.shape, dtype=a.dtype,
                                  chunks=(chunk, a.shape[1]), compressors=None, zarr_format=2)
            z[...] = a
    checked = shardload.discover(d, format="zarr")
    unchecked = pickle.loads(pickle.dumps(checked))  # from its encoding: no discovery time
    n = checked.total_rows
    print(f"{n} rows of {checked.shape[1:]} {checked.dtype} in {checked.num_shards} Zarr "
          f"stores, {checked.nbytes / 1e6:.0f} MB; batch {args.batch}")
    feeds = {}
    for mode in ("none", "block"):
        for name, layout in (("checked", checked), ("unchecked", unchecked)):
            feed = shardload.feed.Feed(layout, args.batch, shuffle=mode, seed=1,
                                       threads=args.threads)
            want = feed.order(0).rows(np.arange(len(feed) * args.batch))
            got = np.concatenate([b[:, 0].astype(np.int64) for b in feed])
            assert (got == want).all(), (mode, name)
            feeds[f"{mode} {name}"] = feed
    times: dict[str, list[float]] = {k: [] for k in feeds}
    for rep in range(args.reps):
        # Each pair in both orders, alternately: the one run first pays for the other's caches.
        for name, feed in (list(feeds.items())[::-1] if rep % 2 else feeds.items()):
            times[name].append(epoch_feed(feed)[1])
    med = {k: statistics.median(v) for k, v in times.items()}
    for k in feeds:
        print(f"feed {k:<16} {med[k]:.4f} s/epoch "
              f"({checked.nbytes / med[k] / 1e9:.2f} GB/s)")
    for mode in ("none", "block"):
        print(f"{mode}: checked / unchecked time: "
              f"{med[f'{mode} checked'] / med[f'{mode} unchecked']:.3f} (1 is no cost)")


def data_arguments(description: str) -> argparse.ArgumentParser:
    """The arguments that name the data and the epochs (write()'s), shared with the scripts
    that time peers on the same data."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--dir", type=pathlib.Path, default=pathlib.Path("/tmp/bench-feed"))
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--row-floats", type=int, default=256, help="float32 per row (1 KiB)")
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    return ap


def main() -> None:
    ap = data_arguments(__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--block-rows", type=int, default=None,
                    help="rows per block of the block shuffle (default: the feed's, ~1 MiB)")
    ap.add_argument("--window-blocks", type=int, default=4,
                    help="blocks per window of the block shuffle (default 4, the feed's)")
    ap.add_argument("--feed-only", action="store_true",
                    help="only load() and the feed's three orders (no map-style or torch cases)")
    ap.add_argument("--zarr", action="store_true",
                    help="the cost of holding Zarr chunk files to the discovery's time")
    ap.add_argument("--exchange", action="store_true",
                    help="the cost of the ranks' per-step agreement, on 2 gloo ranks")
    ap.add_argument("--exchange-rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--exchange-port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    write(args.dir, args.mb, args.row_floats, args.shards)
    if args.exchange_rank is not None:
        exchange_rank(args)
        return
    if args.exchange:
        exchange(args)
        return
    if args.zarr:
        zarr_check_cost(args)
        return
    layout = shardload.discover(args.dir)
    n, nbytes = layout.total_rows, layout.nbytes
    print(f"{n} rows of {layout.shape[1:]} {layout.dtype} in {layout.num_shards} shards, "
          f"{nbytes / 1e6:.0f} MB; batch {args.batch}; block shuffle: block_rows "
          f"{args.block_rows or 'default'}, window_blocks {args.window_blocks}")
    out = shardload.numpy.load(layout)  # warms the page cache; the out= of the bound
    ds = MapStyle(args.dir)

    block = dict(block_rows=args.block_rows, window_blocks=args.window_blocks)
    # Correctness first: each mode's epoch is its order's stream.
    for mode in ("none", "block", "row"):
        feed = shardload.feed.Feed(layout, args.batch, shuffle=mode, seed=1,
                                   **(block if mode == "block" else {}))
        want = feed.order(0).rows(np.arange(len(feed) * args.batch))
        got = np.concatenate([b[:, 0].astype(np.int64) for b in feed])
        assert (got == want).all(), mode

    def bound() -> tuple[int, float]:
        t = time.perf_counter()
        shardload.numpy.load(layout, out=out, threads=args.threads)
        return n // args.batch, time.perf_counter() - t

    rng = np.random.default_rng(0)
    feeds = {m: shardload.feed.Feed(layout, args.batch, shuffle=m, seed=1, threads=args.threads,
                                    **(block if m == "block" else {}))
             for m in ("none", "block", "row")}
    cases = {
        "load() (bound)": bound,
        "feed none": lambda: epoch_feed(feeds["none"]),
        "feed block": lambda: epoch_feed(feeds["block"]),
        "feed row": lambda: epoch_feed(feeds["row"]),
        "map-style seq": lambda: epoch_map(ds, args.batch, None, False),
        "map-style rand": lambda: epoch_map(ds, args.batch, rng.permutation(n), False),
        "memmap gather rand": lambda: epoch_map(ds, args.batch, rng.permutation(n), True),
    }
    if args.feed_only:
        cases = {k: v for k, v in cases.items() if k.startswith(("load()", "feed "))}
    epochs = [0]
    for name, (sampler, loader) in ({} if args.feed_only else
                                    torch_loaders(ds, args.batch)).items():
        cases[name] = lambda s=sampler, dl=loader: epoch_torch(s, dl, epochs)
        # The DataLoader's rows are the sampler's: checked once, against the dataset.
        sampler.set_epoch(0)
        want = np.fromiter(iter(sampler), np.int64)[:args.batch]
        first = next(iter(loader)).numpy()
        assert (first[:, 0].astype(np.int64) == want).all(), name
    times: dict[str, list[float]] = {k: [] for k in cases}
    # The CPU time of the process's threads per epoch: on a machine others load, wall time
    # measures their work as much as this one's; CPU time, what the epoch itself costs.
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    batches: dict[str, int] = {}
    for _ in range(args.reps):
        for name, fn in cases.items():
            c = time.process_time()
            k, s = fn()
            cpu[name].append(time.process_time() - c)
            batches[name] = k
            times[name].append(s)
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"{'case':<20} {'s/epoch':>8} {'batches/s':>10} {'rows/s':>11} {'GB/s':>6} "
          f"{'cpu s/epoch':>11}")
    for name in cases:
        rows = batches[name] * args.batch
        gb = rows * nbytes / n / med[name] / 1e9
        print(f"{name:<20} {med[name]:>8.3f} {batches[name] / med[name]:>10.0f} "
              f"{rows / med[name]:>11.0f} {gb:>6.2f} {med_cpu[name]:>11.3f}")

    def gbs(name: str) -> float:
        return batches[name] * args.batch * nbytes / n / med[name] / 1e9

    print(f"feed none / load():           {gbs('feed none') / gbs('load() (bound)'):.2f}")
    print(f"feed block / feed none:       {gbs('feed block') / gbs('feed none'):.2f}")
    print(f"feed row / feed none:         {gbs('feed row') / gbs('feed none'):.2f}")
    print(f"cpu per epoch, feed none / feed block: "
          f"{med_cpu['feed none'] / med_cpu['feed block']:.2f} (work; 1 is equal)")
    if args.feed_only:
        return
    print(f"feed row / map-style rand:    {gbs('feed row') / gbs('map-style rand'):.2f}")
    print(f"feed row / memmap gather:     {gbs('feed row') / gbs('memmap gather rand'):.2f}")
    print(f"feed none / map-style seq:    {gbs('feed none') / gbs('map-style seq'):.2f}")
    for workers in (0, 2):
        if f"torch DL w{workers} seq" in cases:
            print(f"feed none / torch DL w{workers} seq:  "
                  f"{gbs('feed none') / gbs(f'torch DL w{workers} seq'):.2f}")
            print(f"feed row / torch DL w{workers} rand:  "
                  f"{gbs('feed row') / gbs(f'torch DL w{workers} rand'):.2f}")


if __name__ == "__main__":
    main()
