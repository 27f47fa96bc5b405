"""The training feed's sample order: a keyed bijection on ``[0, n)`` and the three orders built
on it (none, block, row). Everything here is a pure function of its arguments and costs O(1)
memory per position asked; nothing materialises a permutation of the rows.

The bijection is a balanced Feistel network of :data:`ROUNDS` rounds over the smallest
``4**h >= n`` (two halves of ``h`` bits; the splitmix64 finaliser as round function),
restricted to ``[0, n)`` by cycle-walking: a value that lands at or past ``n`` is encrypted
again until it falls inside. The domain is at most ``4n``, so a walk takes fewer than 4 steps
on average. The network is a permutation of its domain for any keys, so the walk is one of
``[0, n)``.
"""

from __future__ import annotations

import numpy as np

from . import _feed_core

ROUNDS = 6
_M64 = (1 << 64) - 1


def _splitmix(x: int) -> int:
    """splitmix64 of a Python int: the seed and key schedule."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def round_keys(seed: int, epoch: int, stream: int) -> tuple[int, ...]:
    """The round keys of one bijection: a function of (seed, epoch, stream) only. ``stream``
    tells apart the bijections of one epoch (0: rows or blocks, 1 + j: block window j)."""
    k = _splitmix(seed & _M64)
    k = _splitmix(k ^ (epoch & _M64))
    k = _splitmix(k ^ (stream & _M64))
    keys = []
    for _ in range(ROUNDS):
        k = _splitmix(k)
        keys.append(k)
    return tuple(keys)


def permute(x: np.ndarray, n: int, keys: tuple[int, ...], inverse: bool = False) -> np.ndarray:
    """The bijection of ``[0, n)`` keyed by ``keys`` applied to each element of ``x`` (ints in
    ``[0, n)``); ``inverse`` applies its inverse. Returns int64. The network runs in C++
    (``_feed_core.permute``, about 20 ns a position): in numpy, a batch's worst cycle-walk
    cost a millisecond."""
    xs = np.ascontiguousarray(np.asarray(x).astype(np.int64, copy=False).reshape(-1))
    return _feed_core.permute(xs, n, list(keys), inverse)


class Order:
    """The order of one epoch: ``rows(positions)`` maps positions in the global sample stream
    (``[0, n)``) to row indexes. ``mode`` is ``"none"``, ``"block"`` or ``"row"``."""

    def __init__(self, mode: str, n: int, seed: int, epoch: int, block_rows: int = 1,
                 window_blocks: int = 1) -> None:
        self.mode, self.n, self.seed, self.epoch = mode, n, seed, epoch
        self.block_rows, self.window_blocks = block_rows, window_blocks
        self._keys = round_keys(seed, epoch, 0)

    def __repr__(self) -> str:
        return (f"Order({self.mode!r}, n={self.n}, seed={self.seed}, epoch={self.epoch}, "
                f"block_rows={self.block_rows}, window_blocks={self.window_blocks})")

    def fill(self, first: int, batch: int, stride: int, count: int) -> "_feed_core.FillOrder":
        """The rows of ``count`` batches of ``batch`` consecutive positions, the k-th from
        ``first + k * stride``, each modulo ``n`` (a fill's batches), named by this order for
        ``_feed_core.Gather``, which computes them on its own threads: the same rows as
        ``rows()`` of those positions."""
        b = min(self.block_rows, self.n) if self.mode == "block" else 1
        w = min(self.window_blocks, -(-self.n // b)) if self.mode == "block" else 1
        return _feed_core.FillOrder(self.mode, self.n, b, w, self.seed & _M64, self.epoch & _M64,
                                    ROUNDS, first, batch, stride, count)

    def rows(self, positions: np.ndarray) -> np.ndarray:
        p = np.ascontiguousarray(np.asarray(positions, dtype=np.int64).reshape(-1))
        if self.mode == "none":
            return p.copy()
        if self.mode == "row":
            return permute(p, self.n, self._keys)
        # The block order: blocks of B rows in the bijection's order over blocks (keys of
        # stream 0), then the rows of each window of W consecutive blocks of that order in the
        # order of the window's own bijection (stream 1 + j), the dataset's one short block
        # (its last) where the block order puts it. In C++ (_feed_core.block_order_rows):
        # in numpy it took a third of a block-shuffled epoch.
        # A block of n rows or more is one block, a window of all blocks or more all blocks:
        # the same order as the spec (which a state may carry past 64 bits) gives.
        b = min(self.block_rows, self.n)
        w = min(self.window_blocks, -(-self.n // b))
        return _feed_core.block_order_rows(p, self.n, b, w, self.seed & _M64,
                                           self.epoch & _M64, ROUNDS)
