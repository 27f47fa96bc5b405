#!/usr/bin/env python
"""Saving to object storage: shardload.save(x, "s3://...") against its peers, on one S3 server.

Starts moto's S3 server on 127.0.0.1 (the tests' server), makes a cuPyNumeric array of --mb MB
of float32 in rows of 64, and times, in one run, writing it as --shards shards:
  sl-npy     shardload.save(x, "s3://bench/P/", num_shards=SHARDS, format="npy"): each shard
             one PUT where it is within multipart_threshold (64 MiB by default);
  sl-npy-mp  the same with multipart_threshold=0: each shard a multipart upload (8 MiB parts);
  sl-npy-chosen  the same objects' count with shard_rows= of alternately 5/8 and 3/8 of two
             shards' rows: one launch per shard instead of one tiled launch;
  sl-zarr    format="zarr" (one uncompressed v2 store per shard);
  zarr-s3fs  what a user without save does for Zarr: np.asarray(x) (the gather to one host
             array), then zarr-python writing one uncompressed v2 array in chunks of a shard's
             rows through s3fs (FsspecStore), its own concurrent uploads;
  put-bound  a plain parallel-PUT bound: the same bytes as SHARDS objects, each one PUT by
             boto3 of a shard's bytes made beforehand, on as many threads as shardload has
             processors: no runtime, no headers, no metadata, no manifest, no gather.
Each is the median of --repeat runs after one untimed run, in rounds that turn the order;
each run writes a new prefix, deleted (and, for shardload, read back and compared with the
array once) outside the timing. The server is a Python process that every column waits on:
the ratios, not the GB/s, are what carries over.

Run it with the project's environment (source scripts/env.sh) so Legate is configured:
  python bench/bench_s3_save.py --mb 256 --shards 8 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import numpy as np

import shardload

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "python"))
import s3_server  # noqa: E402

ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
       "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


def empty(client, prefix: str) -> None:
    """Deletes every object under prefix (outside the timing)."""
    while True:
        got = client.list_objects_v2(Bucket="bench", Prefix=prefix).get("Contents", [])
        if not got:
            return
        client.delete_objects(Bucket="bench",
                              Delete={"Objects": [{"Key": o["Key"]} for o in got]})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=256.0, help="MB of data in all")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    s3_server.add_server_option(ap)
    ap.add_argument("--multipart-threshold", default=None,
                    help="multipart_threshold for sl-npy and sl-zarr (default: the store's)")
    args = ap.parse_args()
    os.environ.update(ENV)
    if args.server == "rclone":
        os.environ.update(s3_server.RCLONE_CLIENT_ENV)
    import cupynumeric as cn
    import s3fs
    import zarr
    from legate.core import get_legate_runtime

    proc, endpoint = s3_server.start(kind=args.server)
    try:
        client = boto3.client("s3", endpoint_url=f"http://{endpoint}", region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        options = {"endpoint_override": endpoint, "scheme": "http", "region": "us-east-1"}
        if args.multipart_threshold is not None:
            options["multipart_threshold"] = args.multipart_threshold
        cols = 64
        rows = max(args.shards, int(args.mb * 1e6 / (cols * 4)))
        x = cn.arange(rows * cols, dtype=cn.float32).reshape(rows, cols) + 0.5
        want = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) + np.float32(0.5)
        get_legate_runtime().issue_execution_fence(block=True)
        per = -(-rows // args.shards)
        fs = s3fs.S3FileSystem(key="bench", secret="bench", anon=False, asynchronous=True,
                               client_kwargs={"endpoint_url": f"http://{endpoint}",
                                              "region_name": "us-east-1"})
        counter = iter(range(1 << 30))
        threads = None  # shardload's processors, from its first save

        # Ragged shards of the same count: alternately 5 and 3 parts of 8 per two shards.
        ends = [rows * sum(5 if j % 2 == 0 else 3 for j in range(i)) // (4 * args.shards)
                for i in range(args.shards)] + [rows]
        chosen = [b - a for a, b in zip(ends, ends[1:])]

        def sl(fmt: str, shard_rows: list[int] | None = None, **extra: str):
            def run() -> str:
                nonlocal threads
                prefix = f"{fmt}-{next(counter)}/"
                how = ({"shard_rows": shard_rows} if shard_rows else
                       {"num_shards": args.shards})
                info = shardload.save(x, f"s3://bench/{prefix}", **how,
                                      format=fmt, storage_options={**options, **extra})
                threads = threads or info.processors
                return prefix
            return run

        def zarr_s3fs() -> str:
            prefix = f"zp-{next(counter)}"
            host = np.asarray(x + 0)  # a new array each run: gathered, as a user would
            store = zarr.storage.FsspecStore(fs, path=f"bench/{prefix}")
            z = zarr.create_array(store, shape=host.shape, chunks=(per, cols),
                                  dtype=host.dtype, compressors=None, zarr_format=2)
            z[...] = host
            return prefix + "/"

        # boto3 takes bytes, not a view: the bodies are made once, outside the timing.
        bodies = [want[i * per:(i + 1) * per].tobytes() for i in range(args.shards)]

        def put_bound() -> str:
            prefix = f"put-{next(counter)}/"

            def put(i: int) -> None:
                client.put_object(Bucket="bench", Key=f"{prefix}shard_{i:04d}.bin",
                                  Body=bodies[i])

            with ThreadPoolExecutor(threads or 1) as pool:
                list(pool.map(put, range(args.shards)))
            return prefix

        writers = [("sl-npy", sl("npy")), ("sl-npy-mp", sl("npy", multipart_threshold="0")),
                   ("sl-npy-chosen", sl("npy", chosen)),
                   ("sl-zarr", sl("zarr")), ("zarr-s3fs", zarr_s3fs), ("put-bound", put_bound)]
        runs: dict[str, list[float]] = {n: [] for n, _ in writers}
        checked = set()
        for i in range(args.repeat + 1):
            shift = i % len(writers)
            for name, fn in writers[shift:] + writers[:shift]:
                t = time.perf_counter()
                prefix = fn()
                runs[name].append(time.perf_counter() - t)
                if name.startswith("sl-") and name not in checked:
                    back = np.asarray(shardload.load(f"s3://bench/{prefix}",
                                                     storage_options=options))
                    if not np.array_equal(back, want):
                        raise SystemExit(f"{name}: what was saved does not read back equal")
                    checked.add(name)
                empty(client, prefix)
        times = {n: statistics.median(r[1:]) for n, r in runs.items()}
        print(f"save {want.nbytes / 1e6:.0f} MB ({rows} x {cols} float32) as {args.shards} "
              f"shards to moto on {endpoint}; {threads} processors; median of {args.repeat}")
        for name, t in times.items():
            print(f"  {name:13s} {t:7.3f} s  {want.nbytes / 1e9 / t:6.3f} GB/s  "
                  f"sl-zarr x{t / times['sl-zarr']:.2f}")
        print(f"  sl-zarr: {times['zarr-s3fs'] / times['sl-zarr']:.2f}x zarr-s3fs, "
              f"{times['put-bound'] / times['sl-zarr']:.0%} of put-bound; "
              f"sl-npy {times['put-bound'] / times['sl-npy']:.0%} of put-bound, "
              f"{times['sl-npy-mp'] / times['sl-npy']:.2f}x sl-npy-mp, "
              f"sl-npy-chosen (shard rows {chosen[:2]}...) "
              f"{times['sl-npy-chosen'] / times['sl-npy']:.2f}x sl-npy's time")
    finally:
        s3_server.stop(proc)


if __name__ == "__main__":
    main()
