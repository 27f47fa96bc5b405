"""Mean and standard deviation of a dataset four times larger than Legate's memory, in batches.

    python examples/batches_mean_std.py [DIR]

The process gives Legate a small memory (--sysmem, and --fbmem where GPUs are configured;
128 MiB, or SHARDLOAD_EXAMPLE_MEMORY_MIB) whatever LEGATE_CONFIG says, so that the dataset it
writes (numpy, into DIR or a temporary directory) is four times that memory: shardload.load
of it is refused, while shardload.batches reads it a batch at a time, the next batch while
cuPyNumeric reduces the current one. Column means and standard deviations are merged batch
by batch (Chan et al.'s pairwise update) and checked against the same streaming computation
in numpy over the shard files.
"""

from __future__ import annotations

import os
import pathlib
import re
import sys
import tempfile

MEMORY_MIB = int(os.environ.get("SHARDLOAD_EXAMPLE_MEMORY_MIB", "128"))


def small_legate_memory() -> None:
    """Before Legate starts: LEGATE_CONFIG with --sysmem (and --fbmem, with GPUs) set small."""
    config = os.environ.get("LEGATE_CONFIG", "--cpus 2 --utility 1 --gpus 0")
    gpus = re.search(r"--gpus[ =](\d+)", config)
    flags = ["--sysmem"] + (["--fbmem"] if gpus and int(gpus.group(1)) > 0 else [])
    for flag in flags:
        if re.search(rf"{flag}[ =]\d+", config):
            config = re.sub(rf"{flag}[ =]\d+", f"{flag} {MEMORY_MIB}", config)
        else:
            config += f" {flag} {MEMORY_MIB}"
    os.environ["LEGATE_CONFIG"] = config


small_legate_memory()

import numpy as np  # noqa: E402

import shardload  # noqa: E402  (starts nothing yet; Legate reads LEGATE_CONFIG when it starts)

COLUMNS = 16


def write_dataset(directory: pathlib.Path) -> int:
    """Shards of float32 rows totalling four times Legate's memory; returns the rows."""
    total_rows = 4 * (MEMORY_MIB << 20) // (4 * COLUMNS)
    rng = np.random.default_rng(7)
    cuts = np.sort(rng.choice(np.arange(1, total_rows), size=9, replace=False))
    bounds = [0, *cuts.tolist(), total_rows]
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        # Columns of different scale and offset, so that a naive sum of squares would lose
        # digits where the pairwise update keeps them.
        part = rng.standard_normal((hi - lo, COLUMNS), dtype=np.float32)
        part *= np.arange(1, COLUMNS + 1, dtype=np.float32)
        part += np.float32(1000)
        np.save(directory / f"shard_{i:04d}.npy", part)
    return total_rows


def merge(n: float, mean: np.ndarray, m2: np.ndarray, n_b: float, mean_b: np.ndarray,
          m2_b: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Chan et al.: the count, mean and sum of squared deviations of two parts together."""
    total = n + n_b
    delta = mean_b - mean
    return (total, mean + delta * (n_b / total), m2 + m2_b + delta * delta * (n * n_b / total))


def numpy_mean_std(directory: pathlib.Path) -> tuple[np.ndarray, np.ndarray]:
    n, mean, m2 = 0.0, np.zeros(COLUMNS), np.zeros(COLUMNS)
    for path in sorted(directory.glob("shard_*.npy")):
        part = np.load(path, mmap_mode="r").astype(np.float64)
        if len(part):
            mean_b = part.mean(axis=0)
            n, mean, m2 = merge(n, mean, m2, len(part), mean_b,
                                ((part - mean_b) ** 2).sum(axis=0))
    return mean, np.sqrt(m2 / n)


def main(directory: pathlib.Path) -> None:
    total_rows = write_dataset(directory)
    layout = shardload.discover(directory)
    print(f"{layout.nbytes / 2**20:.0f} MiB in {layout.num_shards} shards; Legate has "
          f"{MEMORY_MIB} MiB")
    try:
        shardload.load(layout)
        raise AssertionError("load() of four times Legate's memory was not refused")
    except shardload.OutOfMemoryError as e:
        print("load():", str(e).split(";")[0])

    # An eighth of the memory per batch: two alive (prefetch=1) plus the temporaries of the
    # reduction below fit.
    rows_per_batch = (MEMORY_MIB << 20) // 8 // (4 * COLUMNS)
    it = shardload.batches(layout, rows_per_batch, prefetch=1)
    n, mean, m2 = 0.0, np.zeros(COLUMNS), np.zeros(COLUMNS)
    for batch in it:
        # In float64: each batch's sums over up to a million rows.
        mean_b = batch.mean(axis=0, dtype=np.float64)
        m2_b = ((batch - mean_b) ** 2).sum(axis=0)
        n, mean, m2 = merge(n, mean, m2, batch.shape[0], np.asarray(mean_b), np.asarray(m2_b))
        del batch, mean_b, m2_b  # drop the batch before the next: memory stays bounded
    std = np.sqrt(m2 / n)
    print(f"{len(it)} batches of {rows_per_batch} rows")
    assert n == total_rows

    want_mean, want_std = numpy_mean_std(directory)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-9)
    np.testing.assert_allclose(std, want_std, rtol=1e-7)
    print("mean:", np.round(mean[:4], 4), "...")
    print("std: ", np.round(std[:4], 4), "...")
    print("both equal to numpy's streaming computation")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        target = pathlib.Path(sys.argv[1])
        target.mkdir(parents=True, exist_ok=True)
        main(target)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(pathlib.Path(tmp))
