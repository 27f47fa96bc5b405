"""A load during which rank 1's process is killed with SIGKILL, from inside one of its tasks
(a Python reader's read), so the kill lands while the load runs; rank 0 waits for the load."""

from __future__ import annotations

import os
import signal
import sys

import _rank
import numpy as np

import shardload


def _rows(path: str) -> int:
    return 4


def _read(path: str, lo: int, hi: int) -> np.ndarray:
    if _rank.RANK == 1:
        _rank.marker("killing")
        os.kill(os.getpid(), signal.SIGKILL)
    return np.zeros((hi - lo, 2), dtype=np.float32)


shardload.register_reader("mr-kill", count_rows=_rows, read=_read, dtype="float32",
                          trailing_shape=(2,), extension=".dat")

arr = shardload.load(sys.argv[1], reader="mr-kill")
float(np.asarray(arr).sum())
_rank.marker("rank-survived")
