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


def permute_one(x: int, n: int, keys: tuple[int, ...], inverse: bool = False) -> int:
    return int(permute(np.array([x], dtype=np.int64), n, keys, inverse)[0])


class Order:
    """The order of one epoch: ``rows(positions)`` maps positions in the global sample stream
    (``[0, n)``) to row indexes. ``mode`` is ``"none"``, ``"block"`` or ``"row"``."""

    def __init__(self, mode: str, n: int, seed: int, epoch: int, block_rows: int = 1,
                 window_blocks: int = 1) -> None:
        self.mode, self.n, self.seed, self.epoch = mode, n, seed, epoch
        self.block_rows, self.window_blocks = block_rows, window_blocks
        self._keys = round_keys(seed, epoch, 0)
        self._nb = self._short = self._spos = 0
        if mode == "block" and n:
            nb = -(-n // block_rows)
            self._nb = nb
            self._short = n - (nb - 1) * block_rows
            # Where the one short block (the dataset's last) lands in the block order: the
            # windows before it hold whole blocks, so a position's window is direct.
            self._spos = permute_one(nb - 1, nb, self._keys, inverse=True)

    def __repr__(self) -> str:
        return (f"Order({self.mode!r}, n={self.n}, seed={self.seed}, epoch={self.epoch}, "
                f"block_rows={self.block_rows}, window_blocks={self.window_blocks})")

    # -- block order: blocks of B rows in the bijection's order over blocks, then the rows of
    # each window of W consecutive blocks (of that order) in the order of the window's own
    # bijection.
    def _window_start(self, j: int) -> int:
        """The first stream position of window j."""
        b, w = self.block_rows, self.window_blocks
        start = j * w * b
        if self._spos < j * w:  # the short block lies in an earlier window
            start -= b - self._short
        return start

    def window_of(self, pos: int) -> int:
        b, w = self.block_rows, self.window_blocks
        j = pos // (w * b)
        # Positions after the short block's window sit up to B - short earlier than whole
        # blocks would put them, so the window is j or j + 1.
        if j + 1 <= (self._nb - 1) // w and self._window_start(j + 1) <= pos:
            j += 1
        return j

    def window_blocks_of(self, j: int) -> list[tuple[int, int, int]]:
        """The blocks of window j in order: (block, first row, rows)."""
        b, w = self.block_rows, self.window_blocks
        first = j * w
        last = min(first + w, self._nb)
        ks = np.arange(first, last, dtype=np.int64)
        blocks = permute(ks, self._nb, self._keys)
        out = []
        for blk in blocks.tolist():
            rows = self._short if blk == self._nb - 1 else b
            out.append((blk, blk * b, rows))
        return out

    def window_rows(self, j: int) -> int:
        return sum(r for _, _, r in self.window_blocks_of(j))

    def window_local(self, j: int, local: np.ndarray) -> np.ndarray:
        """Positions inside window j (``[0, rows of window j)``) to offsets into the window's
        blocks laid end to end in window order."""
        size = self.window_rows(j)
        return permute(local, size, round_keys(self.seed, self.epoch, 1 + j))

    def rows(self, positions: np.ndarray) -> np.ndarray:
        p = np.asarray(positions, dtype=np.int64)
        if self.mode == "none":
            return p.copy()
        if self.mode == "row":
            return permute(p, self.n, self._keys)
        out = np.empty_like(p)
        i = 0
        while i < p.size:
            j = self.window_of(int(p[i]))
            start = self._window_start(j)
            end = start + self.window_rows(j)
            inside = (p[i:] >= start) & (p[i:] < end)
            k = p.size if inside.all() else i + int(np.argmin(inside))
            offs = self.window_local(j, (p[i:k] - start))
            out[i:k] = self._window_offsets_to_rows(j, offs)
            i = k
        return out

    def _window_offsets_to_rows(self, j: int, offs: np.ndarray) -> np.ndarray:
        blocks = self.window_blocks_of(j)
        sizes = np.array([r for _, _, r in blocks], dtype=np.int64)
        firsts = np.array([f for _, f, _ in blocks], dtype=np.int64)
        cum = np.concatenate([[0], np.cumsum(sizes)])
        which = np.searchsorted(cum, offs, side="right") - 1
        return firsts[which] + (offs - cum[which])

