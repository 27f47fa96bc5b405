"""What a process keeps of the s3:// stores it was given credentials for (docs/object_storage.md,
"Configuration"): a store's client, limits and parsed options, each holding the
credentials, are kept for the stores in use and the recent ones only. A process given new
credentials again and again (a role's session token every hour, workers handed new layouts)
keeps memory bounded and no longer keeps every secret it was given; a layout still held reads
its data right after thousands of other credential sets came and went."""

from __future__ import annotations

import ctypes
import gc

import numpy as np

import shardload

# Distinct credential sets given after the held layout was discovered: far more than the
# stores and clients kept (64 and 8) and than the recently sealed credentials (1,024).
OTHERS = 2_000
# Each secret's size: large enough that keeping every set shows in the RSS.
SECRET = 64 << 10


def rss_mb() -> float:
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_distinct_credential_sets_keep_memory_bounded_and_a_held_layout_reads_right(bucket):
    rng = np.random.default_rng(14)
    want = [rng.standard_normal((5 + i, 3)) for i in range(3)]
    for i, a in enumerate(want):
        bucket.put_npy(f"d/shard_{i:04d}.npy", a)
    held = shardload.discover(bucket.url("d/"), storage_options={
        **bucket.options, "access_key": "AK", "secret_key": "held-" + "h" * SECRET})
    np.testing.assert_array_equal(held.read(), np.concatenate(want))

    def others(first: int, n: int) -> None:
        for k in range(first, first + n):
            layout = shardload.discover(bucket.url("d/"), storage_options={
                **bucket.options, "access_key": "AK", "secret_key": f"{k}-" + "s" * SECRET})
            assert layout.shard_rows == [5, 6, 7]

    others(0, 300)  # past every bound: what stays from here on is the steady state
    before = rss_mb()
    others(300, OTHERS - 300)
    grown = rss_mb() - before
    # Before: each set's secret stayed, twice (a store's options, the parsed query): +220 MB.
    assert grown < 40, f"RSS grew {grown:.1f} MB over {OTHERS - 300} credential sets"
    np.testing.assert_array_equal(held.read(), np.concatenate(want))
