#!/usr/bin/env python
"""Discovery of many small s3:// objects: each object's probe is a request's round trip, so
what counts is how many are in flight at once.

Starts moto's S3 server on 127.0.0.1 (the tests' server), uploads SHARDS objects of each
format (.npy, and raw .bin with a shardload.json sidecar listing every object's rows by
position) and times shardload.discover of each prefix, side by side in rounds:
  npy-1, raw-1   probe_threads=1: one object after another (how raw shards were probed while
                 the sidecar's positional "rows" needed one reader counting in order);
  npy, raw       the default: up to 16 objects at once.
Each is the median of --repeat runs after one untimed run; every layout's rows are checked.
With --latency-ms MS every request goes through the tests' proxy, held MS milliseconds: a
store farther away than loopback, where the round trips, not the server's work, add up.

Run it with the project's environment (source scripts/env.sh):
  python bench/bench_s3_probe.py --shards 32 --latency-ms 20 --repeat 5
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import time

import boto3
import numpy as np

import shardload
from bench_s3 import ENV, farther, s3_server


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=5)
    s3_server.add_server_option(ap)
    ap.add_argument("--latency-ms", type=float, default=0.0)
    args = ap.parse_args()
    os.environ.update(ENV)
    if args.server == "rclone":
        os.environ.update(s3_server.RCLONE_CLIENT_ENV)
    proc, endpoint = s3_server.start(kind=args.server)
    proxy = None
    try:
        client = boto3.client("s3", endpoint_url=f"http://{endpoint}", region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        rng = np.random.default_rng(0)
        rows = [int(r) for r in rng.integers(50, 150, args.shards)]
        for i, r in enumerate(rows):
            a = rng.standard_normal((r, 8)).astype(np.float32)
            buf = io.BytesIO()
            np.save(buf, a)
            client.put_object(Bucket="bench", Key=f"npy/shard_{i:04d}.npy", Body=buf.getvalue())
            client.put_object(Bucket="bench", Key=f"raw/shard_{i:04d}.bin", Body=a.tobytes())
        client.put_object(Bucket="bench", Key="raw/shardload.json",
                          Body=json.dumps({"dtype": "<f4", "shape": [8], "rows": rows}).encode())
        proxy, endpoint, client = farther(args, endpoint, client)
        options = {"endpoint_override": endpoint, "scheme": "http", "region": "us-east-1"}

        def discover(fmt: str, threads: int):
            def run():
                layout = shardload.discover(f"s3://bench/{fmt}/", format=fmt,
                                            probe_threads=threads, storage_options=options)
                assert list(layout.shard_rows) == rows, fmt
            return run

        loaders = [("npy-1", discover("npy", 1)), ("npy", discover("npy", 0)),
                   ("raw-1", discover("raw", 1)), ("raw", discover("raw", 0))]
        runs: dict[str, list[float]] = {name: [] for name, _ in loaders}
        for i in range(args.repeat + 1):
            shift = i % len(loaders)
            for name, fn in loaders[shift:] + loaders[:shift]:
                t = time.perf_counter()
                fn()
                runs[name].append(time.perf_counter() - t)
        times = {name: statistics.median(r[1:]) for name, r in runs.items()}
        print(f"{args.shards} objects per format, median of {args.repeat}"
              + (f", {args.latency_ms:g} ms added per request" if proxy else ""))
        for name, t in times.items():
            print(f"  {name:6s} {t * 1000:8.1f} ms")
        for fmt in ("npy", "raw"):
            print(f"  {fmt}: {times[fmt + '-1'] / times[fmt]:.2f}x faster than one at a time")
    finally:
        if proxy:
            proxy.close()
        s3_server.stop(proc)


if __name__ == "__main__":
    main()
