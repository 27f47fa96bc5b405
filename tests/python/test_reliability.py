"""Reliability under Legate: repeated loads leak nothing, concurrent use stays correct,
and each in-task fault reaches the caller while the process goes on loading."""

from __future__ import annotations

import gc
import os
import pathlib

import numpy as np
import pytest

import shardload
from test_core import write_shards

import cupynumeric as cn  # noqa: E402  (a pinned dependency: its absence must fail, not skip)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def test_a_thousand_loads_leak_nothing(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((r, 16)) for r in (300, 0, 1000, 77, 2048)]
    write_shards(tmp_path, arrays)
    expected_sum = float(np.concatenate(arrays).sum())
    layout = shardload.discover(tmp_path)

    def one(k: int) -> None:
        a = shardload.load(layout, overdecompose=k)
        del a

    for i in range(100):  # warm up: runtime pools, mapper caches, allocator
        one(1 + i % 3)
    gc.collect()
    fds0, rss0 = open_fds(), rss_bytes()
    for i in range(1000):
        one(1 + i % 3)
    gc.collect()
    fds1, rss1 = open_fds(), rss_bytes()
    print(f"1000 loads: fds {fds0} -> {fds1}, RSS {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB")
    assert fds1 <= fds0, f"open descriptors grew from {fds0} to {fds1}"
    # Each load makes a 0.5 MB array; a leak of it, or of a descriptor's worth of memory per
    # load, would show as hundreds of MiB. Allow allocator noise only.
    assert rss1 - rss0 < 32 * 2**20, f"RSS grew by {(rss1 - rss0) / 2**20:.1f} MiB"
    a = shardload.load(layout)
    assert float(a.sum()) == pytest.approx(expected_sum, rel=1e-12)


def test_back_to_back_loads_and_use_while_loading(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(2)
    xs = [rng.integers(0, 1000, size=(r, 3)) for r in (500, 7, 1200)]
    ys = [rng.integers(0, 1000, size=(r, 3)) for r in (1000, 707)]
    write_shards(tmp_path / "x", xs)
    write_shards(tmp_path / "y", ys)
    a = shardload.load(tmp_path / "x", overdecompose=3)
    b = shardload.load(tmp_path / "y", overdecompose=2)
    total = a + b  # both arrays in use at once
    c = shardload.load(tmp_path / "x")  # a load while a, b and total are alive
    np.testing.assert_array_equal(np.asarray(total), np.concatenate(xs) + np.concatenate(ys))
    np.testing.assert_array_equal(np.asarray(c), np.concatenate(xs))
    np.testing.assert_array_equal(np.asarray(a), np.concatenate(xs))


def faults(tmp_path: pathlib.Path):
    """Faults that can only appear inside a task: each changes a file after discovery."""

    def truncated(p: pathlib.Path) -> None:
        os.truncate(p, p.stat().st_size - 8)

    def deleted(p: pathlib.Path) -> None:
        p.unlink()

    def rewritten_same_size(p: pathlib.Path) -> None:
        data = p.read_bytes()
        os.utime(p, ns=(1, 1))  # a different mtime, same size
        p.write_bytes(data)
        os.utime(p, ns=(10**9, 10**9))

    def replaced_by_directory(p: pathlib.Path) -> None:
        p.unlink()
        p.mkdir()

    return {"truncated": truncated, "deleted": deleted, "rewritten": rewritten_same_size,
            "directory": replaced_by_directory}


@pytest.mark.parametrize("fault", ["truncated", "deleted", "rewritten", "directory"])
def test_in_task_faults_reach_the_caller_and_the_process_goes_on(tmp_path: pathlib.Path,
                                                                 fault: str) -> None:
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((400, 2)) for _ in range(5)]
    write_shards(tmp_path, arrays)
    layout = shardload.discover(tmp_path)
    victim = tmp_path / "shard_0003.npy"
    faults(tmp_path)[fault](victim)
    with pytest.raises(shardload.ShardReadError) as e:
        shardload.load(layout, overdecompose=2)
    assert str(victim) in str(e.value) and "rows [" in str(e.value), str(e.value)
    # The same process loads a good dataset correctly right after.
    good = tmp_path / "good"
    write_shards(good, arrays)
    np.testing.assert_array_equal(np.asarray(shardload.load(good)), np.concatenate(arrays))
