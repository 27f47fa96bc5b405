#!/usr/bin/env python
"""The JAX front end's benchmark: one run, the same files, hot page cache.

One process with 2 CPU devices (both cores), the same global array (axis 0 over the 2 devices):
  shardload        shardload.jax.load(dir)
  concatenate      jnp.concatenate([np.load(f) for f in files]) (one device: the habit it
                   replaces), then device_put onto the sharding (the same array)
  by hand          jax.make_array_from_callback(shape, sharding, cb), cb np.loading the files
                   of its rows, concatenating and slicing
Many processes on one machine: 2 processes x 1 CPU device (each pinned to one core, 1 read
thread, jax.distributed over loopback) vs 1 process x 2 CPU devices (2 threads); the time of
a load is from a barrier to the last process's array, the wait for each other included.

    .venv/bin/python bench/bench_jax.py [--mb 400] [--shards 40] [--repeat 5] [--json F]

JAX needs its device count before it is imported, so each configuration is a process of its
own (this script, re-run with --role); the parent never imports jax.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
COLS = 64  # float32: 256 bytes a row


def make_dataset(d: pathlib.Path, mb: int, shards: int) -> int:
    """About ``mb`` MB of float32 rows in ``shards`` .npy files of uneven size; returns rows
    (a multiple of 4, so that 1, 2 and 4 devices divide it)."""
    rows = (mb * 1_000_000 // (COLS * 4)) // 4 * 4
    rng = np.random.default_rng(1)
    weights = rng.uniform(0.5, 1.5, shards)
    edges = np.concatenate([[0], np.cumsum(weights / weights.sum() * rows).astype(np.int64)])
    edges[-1] = rows
    for i in range(shards):
        n = int(edges[i + 1] - edges[i])
        np.save(d / f"shard_{i:04d}.npy",
                np.arange(edges[i] * COLS, (edges[i] + n) * COLS, dtype=np.float32)
                .reshape(n, COLS))
    return rows


def _timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def role_single(args: argparse.Namespace) -> dict:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax
    import jax.numpy as jnp

    import shardload
    import shardload.jax as sj

    d = pathlib.Path(args.dir)
    files = sorted(d.glob("shard_*.npy"))
    sharding = sj.default_sharding()
    layout = shardload.discover(d)
    shape = tuple(layout.shape)
    offsets = list(layout.offsets) + [layout.total_rows]
    reference = np.concatenate([np.load(f) for f in files])

    def shardload_load():
        return sj.load(d, sharding=sharding).block_until_ready()

    def concatenate():
        x = jnp.concatenate([np.load(f) for f in files])
        return jax.device_put(x, sharding).block_until_ready()

    def concatenate_one_device():
        return jnp.concatenate([np.load(f) for f in files]).block_until_ready()

    def by_hand():
        def cb(index):
            lo, hi, _ = index[0].indices(shape[0])
            parts = [np.load(f) for f, a, b in zip(files, offsets, offsets[1:])
                     if a < hi and b > lo]
            first = next(a for a, b in zip(offsets, offsets[1:]) if a < hi and b > lo)
            return np.concatenate(parts)[lo - first:hi - first]
        return jax.make_array_from_callback(shape, sharding, cb).block_until_ready()

    out = {"devices": len(jax.devices()), "rows": shape[0], "bytes": layout.nbytes}
    for name, fn in [("shardload", shardload_load), ("concatenate", concatenate),
                     ("concatenate_one_device", concatenate_one_device),
                     ("by_hand", by_hand)]:
        x = fn()
        assert x.shape == shape and x.sharding == sharding or name == "concatenate_one_device"
        assert np.array_equal(np.asarray(x), reference), name
        del x
        out[name] = _timed(fn, args.repeat)
    return out


def role_multi(args: argparse.Namespace) -> dict:
    me = args.process
    os.sched_setaffinity(0, {me % os.cpu_count()})
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{args.port}", num_processes=2,
                               process_id=me)
    from jax.experimental import multihost_utils

    import shardload
    import shardload.jax as sj

    d = pathlib.Path(args.dir)
    layout = shardload.discover(d)
    sharding = sj.default_sharding()
    times = []
    for i in range(args.repeat + 1):
        multihost_utils.sync_global_devices(f"before {i}")
        t = time.perf_counter()
        x = sj.load(layout, sharding=sharding, threads=1).block_until_ready()
        multihost_utils.sync_global_devices(f"after {i}")
        if i:  # the first is the warm-up
            times.append(time.perf_counter() - t)
        del x
    jax.distributed.shutdown()
    return {"process": me, "times": times}


def role_one_process_two(args: argparse.Namespace) -> dict:
    """1 process x 2 CPU devices, 2 threads: the same Layout, the same measure as role_multi."""
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import shardload
    import shardload.jax as sj

    layout = shardload.discover(pathlib.Path(args.dir))
    sharding = sj.default_sharding()
    sj.load(layout, sharding=sharding, threads=2).block_until_ready()
    return {"times": _timed(lambda: sj.load(layout, sharding=sharding, threads=2)
                            .block_until_ready(), args.repeat)}


def _child(args: argparse.Namespace, role: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "python")] + os.environ.get("PYTHONPATH", "").split(os.pathsep))}
    return subprocess.Popen([sys.executable, __file__, "--role", role, "--dir", args.dir,
                             "--repeat", str(args.repeat), *extra], env=env,
                            stdout=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate(timeout=900)
    if proc.returncode:
        raise SystemExit(f"a benchmark process failed ({proc.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mb", type=int, default=400)
    p.add_argument("--shards", type=int, default=40)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", type=pathlib.Path)
    p.add_argument("--role", default=None)
    p.add_argument("--dir")
    p.add_argument("--process", type=int, default=0)
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    if args.role:
        role = {"single": role_single, "multi": role_multi,
                "one_process_two": role_one_process_two}[args.role]
        print(json.dumps(role(args)))
        return

    with tempfile.TemporaryDirectory(prefix="bench_jax_") as tmp:
        args.dir = tmp
        rows = make_dataset(pathlib.Path(tmp), args.mb, args.shards)
        import shardload

        shardload.index(tmp)  # every process discovers from the manifest
        for f in pathlib.Path(tmp).iterdir():  # hot page cache for every contender
            f.read_bytes()
        single = _result(_child(args, "single"))
        one_two = _result(_child(args, "one_process_two"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = [_child(args, "multi", "--process", str(i), "--port", str(port))
                 for i in range(2)]
        multi = [_result(proc) for proc in procs]

    med = {k: statistics.median(single[k]) for k in
           ("shardload", "concatenate", "concatenate_one_device", "by_hand")}
    two_by_one = statistics.median(max(a, b) for a, b in zip(multi[0]["times"],
                                                               multi[1]["times"]))
    one_by_two = statistics.median(one_two["times"])
    gb = single["bytes"] / 1e9
    report = {
        "bytes": single["bytes"], "rows": rows, "shards": args.shards, "repeat": args.repeat,
        "median_s": med, "two_processes_x_1_cpu_s": two_by_one,
        "one_process_x_2_cpus_s": one_by_two,
        "ratios": {
            "concatenate / shardload": med["concatenate"] / med["shardload"],
            "concatenate_one_device / shardload": med["concatenate_one_device"]
            / med["shardload"],
            "by_hand / shardload": med["by_hand"] / med["shardload"],
            "2x1 / 1x2": two_by_one / one_by_two,
        },
    }
    print(f"{gb * 1000:.0f} MB, {rows} rows x {COLS} float32 in {args.shards} .npy shards, "
          f"hot page cache, median of {args.repeat}")
    print("1 process x 2 CPU devices, axis 0 over both:")
    for k, v in med.items():
        print(f"  {k:24s} {v:7.3f} s  {gb / v:6.2f} GB/s  "
              f"{v / med['shardload']:5.2f}x shardload's time")
    print(f"2 processes x 1 CPU  {two_by_one:.3f} s   1 process x 2 CPUs  {one_by_two:.3f} s   "
          f"ratio {two_by_one / one_by_two:.2f} (goal <= 1.2)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
