#!/usr/bin/env python
"""Object storage: shardload.load("s3://...") against its peers, on one S3 server.

Starts moto's S3 server on 127.0.0.1 (the tests' server), uploads SHARDS .npy shards of
about MB_PER_SHARD MB each, and times, in one run on the same objects:
  shardload    shardload.load("s3://bucket/data/") (discovery included) -> host array;
  sl-4req      the same with requests_in_flight=4: a piece larger than request_bytes (8 MiB)
               read as up to 4 ranged GETs at once (docs/object_storage.md), against the
               default of one GET per piece;
  sl-arrow     the same load on Arrow's S3 client, as every s3:// read was made before the
               GETs signed by shardload (an Arrow option the signed path does not know, as
               where only the AWS SDK finds the credentials: a HEAD and a header GET per
               object at discovery, a HEAD after each object's reads);
  sl-noregion  the same load with no region in the options or the environment: the bucket's
               own, asked once per process by its HEAD, and the GETs signed by shardload;
  sl-discover  shardload.discover("s3://bucket/data/") alone: the part of shardload's time
               that the bound does not pay (its GB/s are the data's, for comparison only);
  sl-manifest  shardload.load once the prefix has a manifest (shardload.index, after the
               columns above): its GET, then each object's check against it;
  sl-trusted   the same with trust_manifest=True: discovery is the manifest's GET alone;
  boto3-seq    boto3 get_object of each object in turn, np.load, np.concatenate;
  s3fs-dask    s3fs + dask: a LIST (fs.glob) and each object's npy header read through s3fs
               (discovery, as shardload's), then dask.array.from_delayed over np.load of each
               s3fs file, concatenated and computed to one numpy array by dask's threaded
               scheduler with as many workers as shardload has processors;
  get-bound    a plain parallel-GET bound: the same data bytes by ranged GETs into one
               preallocated array, with as many threads as shardload's load has tiles in
               flight (its processors): no shardload, no discovery (boto3 in Python threads);
  curl-bound   the same ranges fetched by the curl program (--parallel, as many at once as
               get-bound's threads, each signed with --aws-sigv4) into files in /dev/shm: no
               Python in the data path (left out where there is no curl program).
Each is the median of --repeat runs, after one untimed run, taken in rounds over the loaders
(each round in another order, so that a drift of the machine falls on all alike); every run's
result is compared with the expected array outside the timing, and a loader whose result
differs (or that raises) is reported instead of timed. The last line names the fastest peer
and how shardload compares with it and with the GET bound (the issue's goals: 2x the best
peer, 80% of the bound). The server is a Python process: on one machine it is the bottleneck
of every column, so the ratios, not the GB/s, are what carries over. With --server rclone the
server is rclone's `serve s3` instead (Go, several threads, the objects in files of a temporary
directory, every signature checked; tests/python/s3_server.py): a server that is not itself
the bottleneck of one Python process.

With --format parquet the shards are Parquet files of 64 float32 columns (row groups of about
1 MB) and the columns are:
  shardload    shardload.load("s3://bucket/data/") -> host array (rows, 64);
  sl-od4       the same with overdecompose=4 (four tiles per processor): most objects read
               in pieces by two tiles or more, each piece opening its object;
  pa-dataset   pyarrow.dataset over pyarrow's S3FileSystem on the same server, to_table()
               (pyarrow's own threads and read-ahead); its table is checked as an array
               outside the timing;
  pa-numpy     the same and then the (rows, 64) array shardload returns (np.stack of the
               columns);
  sl-discover, sl-trusted  as for npy (sl-trusted after shardload.index);
  get-bound    every object whole by parallel GETs (as many threads as shardload's
               processors): the bytes only, no footer's round trip, no decoding;
  decode-bound the objects' bytes, fetched before the timing, decoded by pyarrow from memory
               into one table (its own threads): no request at all.
With --format arrow the same data as Arrow IPC files (Feather v2, uncompressed, record batches
of about 1 MB) and the same columns, pa-dataset reading them as format="arrow".

With --format zarr the data is one Zarr v3 array (rows, 64) float32 in chunks of about 1 MB,
zstd-compressed (zarr-python's defaults), written by zarr-python and uploaded object by object:
  shardload    shardload.load("s3://bucket/data.zarr") -> host array;
  zarr-s3fs    zarr-python over s3fs (FsspecStore) on the same server, array[:];
  tensorstore  TensorStore's zarr3 driver over its S3 key-value store on the same server;
  get-bound    every chunk object fetched whole by parallel GETs (as many threads as
               shardload's processors): the compressed bytes only, no decoding;
  decode-bound the chunk objects' bytes, fetched before the timing, decoded (zstd, numcodecs)
               into the array by as many threads as shardload's processors: the decoding
               alone, no request (a load can take no less than this or get-bound);
  sl-cN        shardload with chunks_in_flight=N, for each N of --chunks-in-flight (N = 1:
               each tile's chunks one after another, as before fetching ahead).
With --format hdf5 the same data as npy's in HDF5 files (h5py, one contiguous float32
dataset each, h5py's default layout), and the columns are:
  shardload    shardload.load("s3://bucket/data/") -> host array;
  h5py-s3fs    h5py over s3fs file objects (h5py.File(fs.open(...))[...]), the objects
               read at once by as many threads as shardload's processors;
  boto3-seq    boto3 get_object of each object in turn, h5py from memory, np.concatenate;
  sl-discover  as for npy;
  get-bound    the datasets' byte ranges (h5py's get_offset, outside the timing) by parallel
               GETs, as many threads as shardload's processors.
With --hdf5-gzip the datasets are chunked (about 1 MB per chunk) and gzip-compressed (level 1,
values rounded to 1/64), and get-bound fetches the whole objects, compressed, undecoded.
With --latency-ms MS every loader reads through tests/python/s3_fault_proxy.py, which holds
each request MS milliseconds before forwarding it: a store farther away than loopback.

Run it with the project's environment (source scripts/env.sh) so Legate is configured:
  python bench/bench_s3.py --shards 16 --mb 8 --repeat 3
  python bench/bench_s3.py --format parquet --shards 8 --mb 8 --repeat 3
  python bench/bench_s3.py --format arrow --shards 8 --mb 8 --repeat 3 --latency-ms 20
  python bench/bench_s3.py --format zarr --shards 8 --mb 8 --repeat 3  (SHARDS x MB of data)
  python bench/bench_s3.py --server rclone --shards 8 --mb 32 --repeat 5
  python bench/bench_s3.py --server rclone --format hdf5 --shards 8 --mb 32 --repeat 5
"""

from __future__ import annotations

import argparse
import io
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import dask
import dask.array as da
import numpy as np
import s3fs

import shardload

# The tests' server, started and stopped as the tests do.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "python"))
import s3_server  # noqa: E402

ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
       "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


def mismatch(got: np.ndarray, want: np.ndarray) -> str | None:
    """None when got equals want, else what differs."""
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{got.dtype}{got.shape}, expected {want.dtype}{want.shape}"
    if np.array_equal(got, want):
        return None
    bad = np.argwhere(got != want)
    return f"{len(bad)} elements differ, the first at {tuple(int(i) for i in bad[0])}"


def measure(loaders, want: np.ndarray, repeat: int) -> tuple[dict[str, float], dict[str, str]]:
    """Each loader's median time over repeat runs after one untimed run, and the loaders not
    timed with why: a result unlike want (checked after every run, outside the timing) or an
    exception. loaders: (name, fn, to_array), to_array turning fn's result into the array
    compared (None: the result is the array). The runs go round the loaders, each round in
    another order, so that a drift of the machine or the server (the first column of a run
    was once its slowest, whichever loader it was) falls on every loader alike."""
    runs: dict[str, list[float]] = {name: [] for name, _, _ in loaders}
    failed: dict[str, str] = {}
    for i in range(repeat + 1):
        shift = i % len(loaders)
        for name, fn, to_array in loaders[shift:] + loaders[:shift]:
            if name in failed:
                continue
            try:
                t = time.perf_counter()
                out = fn()
                runs[name].append(time.perf_counter() - t)
                why = mismatch(to_array(out) if to_array else out, want)
                if why is not None:
                    raise ValueError(f"wrong data in run {i}: {why}")
            except Exception as e:  # noqa: BLE001  a peer's failure is reported, not fatal
                failed[name] = f"{type(e).__name__}: {e}"
    times = {name: statistics.median(r[1:]) for name, r in runs.items()
             if name not in failed and len(r) > 1}
    return times, failed


def curl_bound(endpoint: str, ranges: list[tuple[str, int, int, int]], threads: int,
               want: np.ndarray):
    """A bound without Python in the data path: the curl program fetching the same ranges,
    `threads` at a time (--parallel), each signed (--aws-sigv4) with the environment's keys,
    into files in /dev/shm. (loader, to_array) for measure(); to_array puts the files'
    bytes into an array (outside the timing) so that the result is checked like the others.
    None where there is no curl program."""
    curl = shutil.which("curl")
    if curl is None:
        return None
    user = f"{os.environ['AWS_ACCESS_KEY_ID']}:{os.environ['AWS_SECRET_ACCESS_KEY']}"
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None

    def run() -> str:
        d = tempfile.mkdtemp(prefix="bench-s3-curl-", dir=shm)
        args = [curl, "--parallel", "--parallel-max", str(threads)]
        for i, (key, off, n, _) in enumerate(ranges):
            if i:
                args.append("--next")
            args += ["-s", "-f", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", user,
                     "-r", f"{off}-{off + n - 1}", "-o", f"{d}/{i}",
                     f"http://{endpoint}/bench/{key}"]
        subprocess.run(args, check=True)
        return d

    def to_array(d: str) -> np.ndarray:
        out = np.empty_like(want)
        flat = out.reshape(-1).view(np.uint8)
        row_bytes = want.nbytes // max(1, len(want))
        try:
            for i, (_, _, n, first) in enumerate(ranges):
                flat[first * row_bytes:first * row_bytes + n] = np.fromfile(f"{d}/{i}", np.uint8)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        return out

    return run, to_array


def report(times: dict[str, float], failed: dict[str, str], nbytes: int,
           bounds: tuple[str, ...] = ("get-bound", "curl-bound")) -> None:
    base = times.get("shardload")
    for name, t in times.items():
        ratio = f"  shardload x{t / base:.2f}" if base else ""
        print(f"  {name:12s} {t:7.3f} s  {nbytes / 1e9 / t:6.3f} GB/s{ratio}")
    for name, why in failed.items():
        print(f"  {name:12s} NOT TIMED: {why}")
    peers = {n: t for n, t in times.items()
             if n not in bounds and n != "shardload" and not n.startswith("sl-")}
    if base and peers:
        best = min(peers, key=peers.get)
        line = f"  best peer {best}: shardload {peers[best] / base:.2f}x its speed"
        for b in bounds:
            if b in times:
                line += f"; shardload at {times[b] / base:.0%} of {b}"
        print(line)


def ranged_get_bound(client, ranges, want: np.ndarray, threads: int):
    """get-bound: each (key, offset, nbytes, first row) of ``ranges``, the data bytes of one
    object, by ranged GETs ``threads`` at once into one array shaped as ``want``."""
    def bound():
        out = np.empty_like(want)
        flat = out.reshape(-1).view(np.uint8)
        row_bytes = want.shape[1] * want.itemsize

        def get(r):
            k, off, n, first = r
            body = client.get_object(Bucket="bench", Key=k,
                                     Range=f"bytes={off}-{off + n - 1}")["Body"].read()
            flat[first * row_bytes:first * row_bytes + n] = np.frombuffer(body, np.uint8)

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(get, ranges))
        return out

    return bound


def whole_get_bound(client, keys, want: np.ndarray, threads: int, at_most: int | None = None):
    """get-bound of stored (encoded) objects: every object of ``keys`` whole by parallel GETs,
    ``threads`` at once: the bytes without any round trip of a reader's or any decoding. The
    bytes are no array: ``want`` stands in for them (their count is checked, above 0 and at
    most ``at_most``)."""
    def bound():
        def get(k):
            return len(client.get_object(Bucket="bench", Key=k)["Body"].read())

        with ThreadPoolExecutor(threads) as pool:
            got = sum(pool.map(get, keys))
        assert got > 0 and (at_most is None or got <= at_most), got
        return want

    return bound


def discovery_only(url: str, options: dict, want: np.ndarray):
    """sl-discover: shardload.discover(url) alone, and the check of its layout (discovery
    returns no array: its layout is checked, and stands in for the data)."""
    def sl_discover():
        return shardload.discover(url, storage_options=options)

    def checked_layout(layout):
        assert layout.shape == want.shape and layout.total_rows == len(want)
        return want

    return sl_discover, checked_layout


def farther(args: argparse.Namespace, endpoint: str, client):
    """With --latency-ms, a proxy in front of the server holding each request that long, and
    the endpoint and client that go through it; else (None, endpoint, client)."""
    if args.latency_ms <= 0:
        return None, endpoint, client
    from s3_fault_proxy import FaultProxy, Rule

    proxy = FaultProxy(endpoint)
    proxy.add(Rule(action="delay", delay_s=args.latency_ms / 1000, count=None))
    return proxy, proxy.endpoint, boto3.client("s3", endpoint_url=f"http://{proxy.endpoint}",
                                               region_name="us-east-1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--mb", type=float, default=8.0, help="MB per shard")
    ap.add_argument("--repeat", type=int, default=3)
    s3_server.add_server_option(ap)
    ap.add_argument("--format", choices=["npy", "hdf5", "parquet", "arrow", "zarr"],
                    default="npy")
    ap.add_argument("--chunks-in-flight", default="1",
                    help="zarr: comma-separated chunks_in_flight values timed as sl-cN columns")
    ap.add_argument("--hdf5-gzip", action="store_true",
                    help="hdf5: chunks of about 1 MB, gzip level 1 (get-bound: whole objects)")
    ap.add_argument("--latency-ms", type=float, default=0.0,
                    help="each request held this long by a proxy (0: no proxy)")
    args = ap.parse_args()
    os.environ.update(ENV)
    if args.server == "rclone":
        os.environ.update(s3_server.RCLONE_CLIENT_ENV)
    if args.format in ("parquet", "arrow"):
        columnar(args)
        return
    if args.format == "zarr":
        zarr_store(args)
        return
    if args.format == "hdf5":
        hdf5_files(args)
        return
    proc, endpoint = s3_server.start(kind=args.server)
    try:
        client = boto3.client("s3", endpoint_url=f"http://{endpoint}", region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        rows = max(1, int(args.mb * 1e6 / (64 * 4)))
        rng = np.random.default_rng(0)
        keys, parts = [], []
        for i in range(args.shards):
            a = rng.standard_normal((rows + i, 64)).astype(np.float32)  # ragged by a row
            buf = io.BytesIO()
            np.save(buf, a)
            key = f"data/shard_{i:04d}.npy"
            client.put_object(Bucket="bench", Key=key, Body=buf.getvalue())
            keys.append(key)
            parts.append(a)
        want = np.concatenate(parts)
        nbytes = want.nbytes
        proxy, endpoint, client = farther(args, endpoint, client)
        options = {"endpoint_override": endpoint, "scheme": "http", "region": "us-east-1"}

        def sl():
            return np.asarray(shardload.load("s3://bench/data/", storage_options=options))

        # An option of Arrow's that the signed path does not know: Arrow's client reads.
        arrow_options = {**options, **s3_server.ARROWS_CLIENT}

        def sl_arrow():
            return np.asarray(shardload.load("s3://bench/data/", storage_options=arrow_options))

        # No region in the options or the environment: the bucket's, from its HEAD.
        noregion_options = {"endpoint_override": endpoint, "scheme": "http"}

        def sl_noregion():
            saved = {k: os.environ.pop(k) for k in ("AWS_REGION", "AWS_DEFAULT_REGION")
                     if k in os.environ}
            try:
                return np.asarray(shardload.load("s3://bench/data/",
                                                 storage_options=noregion_options))
            finally:
                os.environ.update(saved)

        def sl_four_requests():
            return np.asarray(shardload.load("s3://bench/data/",
                                             storage_options={**options,
                                                              "requests_in_flight": "4"}))

        got, info = shardload.load("s3://bench/data/", storage_options=options, info=True)
        assert np.array_equal(np.asarray(got), want)
        threads = info.processors

        def seq():
            out = []
            for k in keys:
                body = client.get_object(Bucket="bench", Key=k)["Body"].read()
                out.append(np.load(io.BytesIO(body)))
            return np.concatenate(out)

        # The data's byte ranges (each object's header length from its own first bytes, as
        # discovery reads them: outside the timing).
        ranges = []
        row0 = 0
        for k, a in zip(keys, parts):
            head = client.get_object(Bucket="bench", Key=k, Range="bytes=0-4095")["Body"].read()
            ver = head[6]
            hlen = (int.from_bytes(head[8:10], "little") + 10 if ver == 1
                    else int.from_bytes(head[8:12], "little") + 12)
            ranges.append((k, hlen, a.nbytes, row0))
            row0 += a.shape[0]

        bound = ranged_get_bound(client, ranges, want, threads)

        # s3fs's own client on the same server, as a dask user would open it; no listings
        # cache, so each run LISTs as shardload's discovery does.
        fs = s3fs.S3FileSystem(endpoint_url=f"http://{endpoint}", use_listings_cache=False,
                               client_kwargs={"region_name": "us-east-1"})

        def npy_header(path: str) -> tuple[tuple[int, ...], np.dtype]:
            with fs.open(path, "rb") as f:
                version = np.lib.format.read_magic(f)
                read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                        else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read(f)
            return shape, dtype

        def npy_load(path: str) -> np.ndarray:
            with fs.open(path, "rb") as f:
                return np.load(f)

        def s3fs_dask():
            paths = sorted(fs.glob("bench/data/*.npy"))
            heads = dask.compute(*[dask.delayed(npy_header)(p) for p in paths],
                                 scheduler="threads", num_workers=threads)
            arr = da.concatenate([da.from_delayed(dask.delayed(npy_load)(p), shape, dtype)
                                  for p, (shape, dtype) in zip(paths, heads)])
            return arr.compute(scheduler="threads", num_workers=threads)

        sl_discover, checked_layout = discovery_only("s3://bench/data/", options, want)
        loaders = [("shardload", sl, None), ("sl-4req", sl_four_requests, None),
                   ("sl-arrow", sl_arrow, None), ("sl-noregion", sl_noregion, None),
                   ("sl-discover", sl_discover, checked_layout),
                   ("boto3-seq", seq, None), ("s3fs-dask", s3fs_dask, None),
                   ("get-bound", bound, None)]
        by_curl = curl_bound(endpoint, ranges, threads, want)
        if by_curl is not None:
            loaders.append(("curl-bound", *by_curl))
        times, failed = measure(tuple(loaders), want, args.repeat)
        # The same load once the prefix has a manifest (written after every column above,
        # which would otherwise read it): discovery is its GET and a check of each object
        # (sl-manifest), or its GET alone (sl-trusted, trust_manifest=True).
        shardload.index("s3://bench/data/", storage_options=options)

        def sl_trusted():
            return np.asarray(shardload.load("s3://bench/data/", storage_options=options,
                                             trust_manifest=True))

        more, more_failed = measure((("sl-manifest", sl, None), ("sl-trusted", sl_trusted, None)),
                                    want, args.repeat)
        times.update(more)
        failed.update(more_failed)
        print(f"{args.shards} shards, {nbytes / 1e6:.1f} MB, {threads} processors "
              f"({info.target}), median of {args.repeat}"
              + (f", {args.latency_ms:g} ms added per request" if proxy else ""))
        report(times, failed, nbytes)
        if proxy:
            proxy.close()
    finally:
        s3_server.stop(proc)


def columnar(args: argparse.Namespace) -> None:
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.feather as feather
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    ext = "parquet" if args.format == "parquet" else "arrow"

    proc, endpoint = s3_server.start(kind=args.server)
    try:
        client = boto3.client("s3", endpoint_url=f"http://{endpoint}", region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        cols = 64
        rows = max(1, int(args.mb * 1e6 / (cols * 4)))
        group = max(1, int(1e6 / (cols * 4)))
        rng = np.random.default_rng(0)
        parts = []
        for i in range(args.shards):
            a = rng.standard_normal((rows + i, cols)).astype(np.float32)  # ragged by a row
            buf = io.BytesIO()
            table = pa.table({f"c{j:02d}": a[:, j] for j in range(cols)})
            if args.format == "parquet":
                pq.write_table(table, buf, row_group_size=group)
            else:
                feather.write_feather(table, buf, chunksize=group, compression="uncompressed")
            client.put_object(Bucket="bench", Key=f"data/shard_{i:04d}.{ext}",
                              Body=buf.getvalue())
            parts.append(a)
        want = np.concatenate(parts)
        nbytes = want.nbytes
        keys = [f"data/shard_{i:04d}.{ext}" for i in range(args.shards)]
        proxy, endpoint, client = farther(args, endpoint, client)
        options = {"endpoint_override": endpoint, "scheme": "http", "region": "us-east-1"}
        fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", region="us-east-1",
                               access_key=ENV["AWS_ACCESS_KEY_ID"],
                               secret_key=ENV["AWS_SECRET_ACCESS_KEY"])

        def sl():
            return np.asarray(shardload.load("s3://bench/data/", storage_options=options))

        def sl_split():
            # Four tiles per processor: most objects are read in pieces by two tiles or more.
            return np.asarray(shardload.load("s3://bench/data/", storage_options=options,
                                             overdecompose=4))

        def pa_table():
            # The objects named (no listing): after sl-manifest the prefix holds the manifest,
            # which a dataset of the directory would take for a Parquet file.
            return ds.dataset([f"bench/{k}" for k in keys], format=args.format,
                              filesystem=fs).to_table()

        def table_array(t):
            return np.stack([t.column(j).to_numpy() for j in range(t.num_columns)], axis=1)

        def pa_numpy():
            return table_array(pa_table())

        got, info = shardload.load("s3://bench/data/", storage_options=options, info=True)
        assert np.array_equal(np.asarray(got), want)
        threads = info.processors

        bound = whole_get_bound(client, keys, want, threads)
        sl_discover, checked_layout = discovery_only("s3://bench/data/", options, want)

        # The objects' bytes, fetched before the timing, for decode-bound.
        held = [client.get_object(Bucket="bench", Key=k)["Body"].read() for k in keys]

        def decode_bound():
            # No request at all: pyarrow decoding the same bytes from memory into one table
            # (its own threads, as pa-dataset's), what any loader of these objects pays on
            # the cores the server shares.
            def one(b):
                reader = pa.BufferReader(b)
                if args.format == "parquet":
                    return pq.read_table(reader)
                return pa.ipc.open_file(reader).read_all()

            return pa.concat_tables([one(b) for b in held])

        times, failed = measure((("shardload", sl, None), ("sl-od4", sl_split, None),
                                 ("sl-discover", sl_discover, checked_layout),
                                 ("pa-dataset", pa_table, table_array),
                                 ("pa-numpy", pa_numpy, None), ("get-bound", bound, None),
                                 ("decode-bound", decode_bound, table_array)),
                                want, args.repeat)
        shardload.index("s3://bench/data/", storage_options=options)

        def sl_trusted():
            return np.asarray(shardload.load("s3://bench/data/", storage_options=options,
                                             trust_manifest=True))

        more, more_failed = measure((("sl-trusted", sl_trusted, None),), want, args.repeat)
        times.update(more)
        failed.update(more_failed)
        print(f"{args.format}: {args.shards} shards, {nbytes / 1e6:.1f} MB, {cols} columns, "
              f"{'row groups' if args.format == 'parquet' else 'record batches'} "
              f"of {group} rows, {info.processors} processors ({info.target}), "
              f"median of {args.repeat}"
              + (f", {args.latency_ms:g} ms added per request" if proxy else ""))
        report(times, failed, nbytes, bounds=("get-bound", "decode-bound"))
        if proxy:
            proxy.close()
    finally:
        s3_server.stop(proc)


def hdf5_files(args: argparse.Namespace) -> None:
    import h5py

    proc, endpoint = s3_server.start(kind=args.server)
    try:
        client = boto3.client("s3", endpoint_url=f"http://{endpoint}", region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        rows = max(1, int(args.mb * 1e6 / (64 * 4)))
        rng = np.random.default_rng(0)
        keys, parts, ranges = [], [], []
        row0 = 0
        # --hdf5-gzip: chunks of about 1 MB, gzip level 1, values rounded (they compress).
        chunked = ({"chunks": (max(1, int(1e6 / (64 * 4))), 64), "compression": "gzip",
                    "compression_opts": 1} if args.hdf5_gzip else {})
        for i in range(args.shards):
            a = rng.standard_normal((rows + i, 64)).astype(np.float32)  # ragged by a row
            if args.hdf5_gzip:
                a = np.round(a * 64) / 64
            buf = io.BytesIO()
            with h5py.File(buf, "w") as f:
                offset = f.create_dataset("x", data=a, **chunked).id.get_offset()
            key = f"data/shard_{i:04d}.h5"
            client.put_object(Bucket="bench", Key=key, Body=buf.getvalue())
            keys.append(key)
            parts.append(a)
            if not args.hdf5_gzip:  # a chunked dataset has no one range
                ranges.append((key, offset, a.nbytes, row0))
            row0 += a.shape[0]
        want = np.concatenate(parts)
        nbytes = want.nbytes
        proxy, endpoint, client = farther(args, endpoint, client)
        options = {"endpoint_override": endpoint, "scheme": "http", "region": "us-east-1"}

        def sl():
            return np.asarray(shardload.load("s3://bench/data/", storage_options=options))

        got, info = shardload.load("s3://bench/data/", storage_options=options, info=True)
        assert np.array_equal(np.asarray(got), want)
        threads = info.processors
        fs = s3fs.S3FileSystem(endpoint_url=f"http://{endpoint}", use_listings_cache=False,
                               client_kwargs={"region_name": "us-east-1"})

        def h5_s3fs():
            def one(path):
                with fs.open(path, "rb") as fo, h5py.File(fo, "r") as f:
                    return f["x"][...]

            paths = sorted(fs.glob("bench/data/*.h5"))
            with ThreadPoolExecutor(threads) as pool:
                return np.concatenate(list(pool.map(one, paths)))

        def seq():
            out = []
            for k in keys:
                body = client.get_object(Bucket="bench", Key=k)["Body"].read()
                with h5py.File(io.BytesIO(body), "r") as f:
                    out.append(f["x"][...])
            return np.concatenate(out)

        # gzip: the compressed objects whole, not decoded.
        bound = (whole_get_bound(client, keys, want, threads) if args.hdf5_gzip
                 else ranged_get_bound(client, ranges, want, threads))
        sl_discover, checked_layout = discovery_only("s3://bench/data/", options, want)
        loaders = (("shardload", sl, None), ("sl-discover", sl_discover, checked_layout),
                   ("h5py-s3fs", h5_s3fs, None), ("boto3-seq", seq, None),
                   ("get-bound", bound, None))
        times, failed = measure(loaders, want, args.repeat)
        print(f"hdf5: {args.shards} shards, {nbytes / 1e6:.1f} MB, "
              f"{'gzip chunks' if args.hdf5_gzip else 'contiguous'}, {threads} "
              f"processors ({info.target}), median of {args.repeat}"
              + (f", {args.latency_ms:g} ms added per request" if proxy else ""))
        report(times, failed, nbytes, bounds=("get-bound",))
        if proxy:
            proxy.close()
    finally:
        s3_server.stop(proc)


def zarr_store(args: argparse.Namespace) -> None:
    import tempfile

    import tensorstore as ts
    import zarr

    proc, endpoint = s3_server.start(kind=args.server)
    try:
        client = boto3.client("s3", endpoint_url=f"http://{endpoint}", region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        cols = 64
        rows = max(1, int(args.shards * args.mb * 1e6 / (cols * 4)))
        chunk = max(1, int(1e6 / (cols * 4)))
        rng = np.random.default_rng(0)
        # Rounded to 1/64 so that zstd finds something to compress, as in most real data.
        want = np.round(rng.standard_normal((rows, cols)) * 64).astype(np.float32) / 64
        with tempfile.TemporaryDirectory() as tmp:
            local = pathlib.Path(tmp) / "data.zarr"
            z = zarr.create_array(str(local), shape=want.shape, chunks=(chunk, cols),
                                  dtype="float32", zarr_format=3)
            z[:] = want
            stored = 0
            keys = []
            for f in sorted(local.rglob("*")):
                if f.is_file():
                    key = "data.zarr/" + f.relative_to(local).as_posix()
                    client.put_object(Bucket="bench", Key=key, Body=f.read_bytes())
                    stored += f.stat().st_size
                    keys.append(key)
        nbytes = want.nbytes
        url = "s3://bench/data.zarr"
        proxy, endpoint, client = farther(args, endpoint, client)
        if proxy:
            # The store named with its '/': without it, its look-up as an object and as a
            # prefix stalls at the proxy (see tests/python/test_s3_zarr.py's `proxied`).
            url += "/"
        options = {"endpoint_override": endpoint, "scheme": "http", "region": "us-east-1"}

        def sl():
            return np.asarray(shardload.load(url, storage_options=options))

        got, info = shardload.load(url, storage_options=options, info=True)
        assert np.array_equal(np.asarray(got), want)
        threads = info.processors

        fs_options = {"endpoint_url": f"http://{endpoint}", "use_listings_cache": False,
                      "client_kwargs": {"region_name": "us-east-1"}}

        def zarr_s3fs():
            store = zarr.storage.FsspecStore.from_url("s3://bench/data.zarr", read_only=True,
                                                      storage_options=fs_options)
            return zarr.open_array(store, mode="r")[:]

        spec = {"driver": "zarr3",
                "kvstore": {"driver": "s3", "bucket": "bench", "path": "data.zarr/",
                            "endpoint": f"http://{endpoint}", "aws_region": "us-east-1"}}

        def tensorstore():
            return ts.open(spec, read=True).result().read().result()

        chunk_keys = [k for k in keys if not k.endswith("zarr.json")]

        bound = whole_get_bound(client, chunk_keys, want, threads, at_most=stored)

        import numcodecs

        blobs = {k: client.get_object(Bucket="bench", Key=k)["Body"].read() for k in chunk_keys}
        codec = numcodecs.Zstd()

        def decode_bound():
            out = np.empty_like(want)

            def decode(k):
                # A v3 chunk key "data.zarr/c/I/0": rows [I * chunk, ...), the last cut short.
                lo = int(k.split("/")[-2]) * chunk
                rows_here = min(chunk, rows - lo)
                raw = np.frombuffer(codec.decode(blobs[k]), dtype="<f4")
                out[lo:lo + rows_here] = raw[:rows_here * cols].reshape(rows_here, cols)

            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(decode, chunk_keys))
            return out

        def sl_chunks(n: str):
            return lambda: np.asarray(shardload.load(
                url, storage_options={**options, "chunks_in_flight": n}))

        variants = tuple((f"sl-c{n}", sl_chunks(n), None)
                         for n in args.chunks_in_flight.split(",") if n)
        times, failed = measure((("shardload", sl, None), *variants,
                                 ("zarr-s3fs", zarr_s3fs, None),
                                 ("tensorstore", tensorstore, None), ("get-bound", bound, None),
                                 ("decode-bound", decode_bound, None)),
                                want, args.repeat)
        print(f"zarr: {rows} x {cols} float32 ({nbytes / 1e6:.1f} MB, {stored / 1e6:.1f} MB "
              f"stored in {len(chunk_keys)} chunks of {chunk} rows, zstd), {threads} processors "
              f"({info.target}), median of {args.repeat}"
              + (f", {args.latency_ms:g} ms added per request" if proxy else ""))
        report(times, failed, nbytes, bounds=("get-bound", "decode-bound"))
        if proxy:
            proxy.close()
    finally:
        s3_server.stop(proc)


if __name__ == "__main__":
    main()
