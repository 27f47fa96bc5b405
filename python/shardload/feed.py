"""The training feed: per-rank batches of a sharded dataset, in a seeded global order that is the
same for any number of ranks, resumable exactly from a state of a few dozen bytes.

::

    import shardload.feed

    feed = shardload.feed.Feed("data/", batch_size=256, shuffle="row", seed=42)
    for epoch in range(3):
        feed.set_epoch(epoch)          # as torch's DistributedSampler.set_epoch
        for batch in feed:             # numpy arrays of (256, *row_shape)
            x = torch.from_dlpack(batch)   # no copy
            ...
            ckpt["feed"] = feed.state_dict()   # {"v": 1, "seed": 42, "epoch": 0, ...}

    feed = shardload.feed.Feed("data/", batch_size=256)   # after a restart, any world size
    feed.load_state_dict(ckpt["feed"])                    # the next sample, in O(1)

**The global stream.** Each epoch's samples form one stream of ``n`` positions (``n`` the rows
of the source, or of ``row_range``); position ``p`` is row ``order(seed, epoch)(p)``. The
stream is cut into *steps* of ``world_size * batch_size`` positions; in each step rank ``r``
takes the ``batch_size`` positions that start at ``r * batch_size``. The order does not depend
on the world size, so a run that changes size goes on through the same stream.

**Equal batches on every rank.** Every rank yields ``steps`` batches per epoch, the same
number on every rank whatever the shard sizes: with ``drop_last=True`` (the default)
``steps = (n - start) // (world_size * batch_size)`` and the last ``< world_size *
batch_size`` positions of the stream are not served this epoch (with a shuffle they are other
rows each epoch); with ``drop_last=False`` ``steps`` rounds up and the positions past the end
wrap to the epoch's first ones (position ``p >= n`` serves position ``p mod n``), as
``DistributedSampler`` pads.

**Orders** (``shuffle=``), each a pure function of (seed, epoch) computed in O(1) memory per
position through a keyed bijection on ``[0, n)`` (a Feistel network with cycle-walking,
``shardload._feed_order``), never a materialised permutation:

- ``"row"`` (or True): an exact shuffle of all rows. Each fill's rows are gathered by the
  engine in one call (``shardload._feed_core.gather``). Where every shard is a local npy or
  raw file stored as served (C order, this host's byte order, not bool; at most 8 GiB in
  all, and as many files as fit half of the process's ``vm.max_map_count``), the feed maps
  the files once and each row is one copy from the map to its place, no system call a row;
  a file truncated under the map is the ShardReadError naming it (a
  SIGBUS guard on the copies), and each file is checked against its snapshot when mapped
  and after each fill. Otherwise the rows, sorted, are read with a positional read each
  (consecutive rows merged), one reader per thread keeping its files open (local npy and
  raw files checked at their open and once after the call, not after each row).
- ``"block"``: the rows are cut into blocks of ``block_rows``; the blocks follow the
  bijection over blocks; each window of ``window_blocks`` consecutive blocks of that order has
  its rows shuffled by a bijection of its own. A fill is one engine gather, as the row
  shuffle's (from the maps where they serve); without maps its rows, sorted, are read in
  runs (a block is one range read, rows up to about 64 KiB apart read through) into scratch,
  and each row then copied to its place, on the engine's threads. On ``w`` ranks each rank
  reads whole the blocks its batches touch: cheap from page cache or a local disk, up to
  ``w`` times the bytes from object storage.
- ``"none"`` (or False, None): the rows in order; each batch is one contiguous read.

**State and resume.** :meth:`Feed.state_dict` is a JSON-able dict of at most 256 bytes
encoded: ``{"v": 1, "seed", "epoch", "position", "world_size", "rows", "batch_size",
"shuffle", "drop_last"}``. ``position`` counts the global samples consumed this epoch: a step
counts as consumed once this rank has yielded its batch of it (ranks of one DDP job yield in
lock step; save the state of one rank, usually rank 0). :meth:`Feed.load_state_dict` sets the
epoch and position and adopts the state's seed, order and ``drop_last`` (the stream is the
saved one whatever the feed was built with); the next batch is computed from the position
directly, in constant time. On another world size or batch size, the rest of the epoch,
positions ``[position, n)``, is cut into steps of the new ``world_size * batch_size`` from
``position``, so each remaining sample is served exactly once across the new ranks.
The state after an epoch's last batch is already the next epoch at position 0.

**Buffers.** Batches are C-contiguous numpy arrays, 64-byte aligned, which
``np.from_dlpack``, ``torch.from_dlpack`` and ``jax.dlpack.from_dlpack`` /
``jax.device_put`` (CPU) take without a copy (``jnp.asarray`` copies on CPU). A buffer is
reused only when nothing else holds it (its reference count: the batch, a view of it, a
tensor made from it through DLPack all hold it); a batch the caller keeps stays valid and the
feed takes a new buffer instead. ``prefetch`` batches are read ahead by the engine on threads
of its own (``_feed_core.Gather``), ``astype`` cast there where it is numpy's same_kind among
bool, ints, float32 and float64; another cast is numpy's, in a background thread whose engine
calls release the GIL. Where a batch's bytes are
a multiple of 64, several batches (about 4 MiB) are read in one fill, each a view of the fill's
buffer, which is reused once none of them is held.
``pin_memory=True`` page-locks the buffers (``cudaHostRegister`` through the CUDA runtime,
loaded by ctypes) for one-DMA copies to a GPU; a RuntimeError names what is missing where there
is no CUDA runtime or device.

**Ranks that agree.** Under torch.distributed or jax.distributed (``check_ranks``) the ranks
compare a digest of the dataset each discovered at construction (a LayoutError on every rank
naming the first shard that differs), at each loop's start on what cuts the stream (seed,
epoch, position, order, batch size, drop_last: a ValueError on every rank where one differs),
and before each step's batch whether any rank failed to read its own, so that every rank raises
the error naming the file at the same step.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import hashlib
import json
import logging
import math
import os
import pickle
import sys
import threading
import weakref
from typing import Any, Iterator, Mapping, Optional, Unpack

import numpy as np

from . import _core, _feed_core, _frontend
from ._args import DTypeLike, SourceLike, _bool, _found, _int
from ._layout import Layout
from ._options import DiscoverOptions
from ._errors import LayoutError, OutOfMemoryError
from ._feed_order import Order

__all__ = ["Feed", "STATE_MAX_BYTES", "world"]

logger = logging.getLogger("shardload")

STATE_MAX_BYTES = 256
"""The largest JSON encoding of :meth:`Feed.state_dict` (``json.dumps(state)``)."""

_STATE_VERSION = 1
_ALIGN = 64  # XLA's CPU client aliases host memory aligned to 64 bytes; torch takes any
_SEED_MAX = (1 << 64) - 1
_FILL_BYTES = 4 << 20  # the bytes a fill aims at: a few engine calls per second at most
_FILL_BATCHES = 64


# Each mapped file is one of the process's memory maps, of which Linux allows
# vm.max_map_count (65530 by default) for everything: malloc's arenas, thread stacks, the
# libraries' maps. Past it every map fails, and a thread's start then waits forever (its
# stack cannot be mapped), so a feed maps its files only where they, the maps the process
# has and those the other feeds may still make stay within half of the limit; else it reads.
_NO_MAPS = object()
_maps_lock = threading.Lock()
_maps_reserved = 0  # the files the live feeds' maps may map


def _map_limit() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 65530


def _maps_in_use() -> int:
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def _release_maps(files: int) -> None:
    global _maps_reserved
    with _maps_lock:
        _maps_reserved -= files


def _reserve_maps(feed: object, files: int) -> bool:
    """Whether ``files`` more maps fit (then held until ``feed`` goes)."""
    global _maps_reserved
    with _maps_lock:
        if _maps_in_use() + _maps_reserved + files > _map_limit() // 2:
            return False
        _maps_reserved += files
    weakref.finalize(feed, _release_maps, files)
    return True


def world(rank: Optional[int] = None, world_size: Optional[int] = None) -> tuple[int, int]:
    """This process's (rank, world size): the arguments when given (both, or neither); else
    ``torch.distributed``'s when torch is imported and its process group initialised; else
    JAX's process index and count when jax is imported and ``jax.distributed`` initialised;
    else (0, 1). Neither library is imported here."""
    r, w, _ = _world(rank, world_size)
    return r, w


def _world(rank: Optional[int], world_size: Optional[int]) -> tuple[int, int, str]:
    """:func:`world` and where it came from: "args", "torch", "jax" or "alone"."""
    if rank is not None or world_size is not None:
        if rank is None or world_size is None:
            raise ValueError("Feed: give both rank and world_size, or neither (found "
                             f"rank={rank!r}, world_size={world_size!r})")
        r, w = _int("rank", rank), _int("world_size", world_size)
        if w < 1:
            raise ValueError(f"world_size: expected an int >= 1, found {w}")
        if not 0 <= r < w:
            raise ValueError(f"rank: expected 0 <= rank < world_size ({w}), found {r}")
        return r, w, "args"
    torch = sys.modules.get("torch")
    if torch is not None:
        dist = getattr(torch, "distributed", None)
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size()), "torch"
    jax = sys.modules.get("jax")
    if jax is not None:
        distributed = getattr(jax, "distributed", None)
        is_init = getattr(distributed, "is_initialized", None)
        if is_init is not None and is_init():
            return int(jax.process_index()), int(jax.process_count()), "jax"
    return 0, 1, "alone"


class _TorchPeers:
    """The ranks of torch.distributed's default group, through a gloo group of the feed's own
    (made once per default group, by every rank: a collective), so that the feed's small
    exchanges on CPU tensors work whatever the training's backend (NCCL included) and never
    interleave with the training's own collectives.

    The gloo group is held in one module slot only, never by a feed, and dropped at exit: a
    process group that a Python object keeps alive past ``destroy_process_group()`` is torn
    down during the interpreter's finalisation, where gloo's teardown can abort the process
    ("terminate called without an active exception"; it did in 6 of 40 two-rank runs here)."""

    def __init__(self) -> None:
        import torch
        import torch.distributed as dist

        self._torch, self._dist = torch, dist
        if _gloo_group() is _NO_GROUP:
            # Made by every rank at its first feed: new_group is itself a collective.
            _GLOO[0] = dist.new_group(backend="gloo") if dist.is_gloo_available() else None
            if not _GLOO[1]:
                _GLOO[1] = True
                atexit.register(_GLOO.__setitem__, 0, _NO_GROUP)
        self.rank, self.size = int(dist.get_rank()), int(dist.get_world_size())

    @property
    def _group(self) -> Any:
        group = _gloo_group()
        if group is _NO_GROUP:
            raise RuntimeError("Feed: torch.distributed's default group was destroyed after "
                               "this feed was made; make the feed again")
        return group

    def gather(self, obj: object) -> list:
        out: list = [None] * self.size
        self._dist.all_gather_object(out, obj, group=self._group)
        return out

    def any(self, flag: bool) -> bool:
        if self._group is None:  # no gloo: the default group's object collective
            return any(self.gather(flag))
        t = self._torch.tensor([int(flag)], dtype=self._torch.int32)
        self._dist.all_reduce(t, op=self._dist.ReduceOp.MAX, group=self._group)
        return bool(t.item())


class _JaxPeers:
    """The processes of jax.distributed, through its coordinator's key-value store (no device
    collective, so it works on any backend): each exchange is one key per process, read by
    all; a process deletes its key of two exchanges ago, which every process has read."""

    _count = 0  # feeds made in this process: the same sequence on every process

    def __init__(self) -> None:
        import jax
        from jax._src import distributed

        self._client = distributed.global_state.client
        if self._client is None:
            raise RuntimeError("Feed: jax.distributed is initialised but has no client")
        self.rank, self.size = int(jax.process_index()), int(jax.process_count())
        _JaxPeers._count += 1
        self._prefix = f"shardload/feed/{_JaxPeers._count}"
        self._round = 0

    def gather(self, obj: object) -> list:
        import pickle

        k = self._round
        self._round += 1
        self._client.key_value_set_bytes(f"{self._prefix}/{k}/{self.rank}", pickle.dumps(obj))
        out = [pickle.loads(self._client.blocking_key_value_get_bytes(
            f"{self._prefix}/{k}/{r}", _PEER_TIMEOUT_MS)) for r in range(self.size)]
        if k >= 2:
            self._client.key_value_delete(f"{self._prefix}/{k - 2}/{self.rank}")
        return out

    def any(self, flag: bool) -> bool:
        return any(self.gather(flag))


_NO_GROUP = object()
# [the feeds' gloo group (None where gloo is missing) or _NO_GROUP, the exit hook registered]
_GLOO: list = [_NO_GROUP, False]


def _gloo_group() -> Any:
    """The feeds' gloo group while it belongs to torch's current default group, else
    _NO_GROUP (none made yet, or the default group destroyed since: torch no longer knows it)."""
    group = _GLOO[0]
    if group is None or group is _NO_GROUP:
        return group
    import torch.distributed as dist

    try:
        dist.get_process_group_ranks(group)
    except (KeyError, ValueError, RuntimeError):
        _GLOO[0] = _NO_GROUP
    return _GLOO[0]


_PEER_TIMEOUT_MS = 30 * 60 * 1000  # as torch.distributed's default timeout


def _peers(source: str) -> "_TorchPeers | _JaxPeers":
    return _TorchPeers() if source == "torch" else _JaxPeers()


def _fingerprint(layout: Layout) -> tuple:
    """What every rank must agree on: the rows, the dtype and row shape, and each shard's
    path, first file row, rows, size and modification time, and an object's version (the
    hash of its ETag, else of its Last-Modified; 0 for a local file)."""
    return (int(layout.total_rows), str(layout.dtype), tuple(layout.shape[1:]),
            tuple(_feed_core.shard_states(layout)))


def _describe_shard(state: tuple) -> str:
    path, first, rows, size, mtime, version = state
    view = f" from file row {first}" if first else ""
    # An object's snapshot has no modification time: its version (ETag) tells a rewrite.
    when = f"version {version:#018x}" if version else f"modified at {mtime} ns"
    return f"{os.fsdecode(path)!r}: {rows} rows{view}, {size} bytes, {when}"


def _layout_difference(mine: tuple, theirs: tuple, rank: int) -> str:
    """The first difference between rank 0's fingerprint (`mine`) and rank `rank`'s."""
    a, b = mine[3], theirs[3]
    for i in range(max(len(a), len(b))):
        if i >= len(a):
            return f"rank {rank} has a shard more, {_describe_shard(b[i])}"
        if i >= len(b):
            return f"rank 0 has a shard more, {_describe_shard(a[i])}"
        if a[i] != b[i]:
            if a[i][0] != b[i][0]:
                return (f"shard {i} is {_describe_shard(a[i])} on rank 0 but "
                        f"{_describe_shard(b[i])} on rank {rank}")
            return (f"shard {os.fsdecode(a[i][0])!r} differs: on rank 0 "
                    f"{_describe_shard(a[i]).split(': ', 1)[1]}, on rank {rank} "
                    f"{_describe_shard(b[i]).split(': ', 1)[1]}")
    return (f"rank 0 has {mine[0]} rows of {mine[1]} {mine[2]}, rank {rank} {theirs[0]} "
            f"rows of {theirs[1]} {theirs[2]}")


def _check_same_layout(peers: "_TorchPeers | _JaxPeers", layout: Optional[Layout],
                       error: Optional[BaseException]) -> None:
    """One exchange of a digest of the layout (or of the error this rank's discovery raised);
    on a difference, and only then, one of the fingerprints, so that every rank raises the
    same error: the lowest rank's discovery error, or a LayoutError naming the first shard
    that differs between rank 0 and the lowest rank whose layout is not rank 0's."""
    fp = digest = None
    if error is None:
        assert layout is not None
        fp = _fingerprint(layout)
        digest = hashlib.sha256(repr(fp).encode("utf-8", "surrogateescape")).digest()
    agreed = _agreed(peers, error)
    if agreed is not None:
        raise agreed
    digests = peers.gather(digest)
    if all(d == digests[0] for d in digests):
        return
    other = next(r for r, d in enumerate(digests) if d != digests[0])
    fps = peers.gather(fp if peers.rank in (0, other) else None)
    # The shards are named by their paths, which for http(s) and s3:// hold credentials.
    difference = _core.redact_secrets(_layout_difference(fps[0], fps[other], other))
    raise LayoutError(
        f"Feed: the ranks found different datasets ({difference}"
        f"), so their orders and batch counts would differ: a shard was added, removed or "
        f"rewritten between the ranks' discoveries. Build every rank's feed from one Layout "
        f"(shardload.discover on one rank, sent to the others) of a dataset that no longer "
        f"changes, or pass check_ranks=False where the ranks' copies differ only in what the "
        f"check compares")


def _agreed(peers: "_TorchPeers | _JaxPeers", error: Optional[BaseException]
            ) -> Optional[BaseException]:
    """The error this rank raises at a batch, agreed with its peers: its own; else that of the
    lowest rank that had one (so that every rank stops at the same step with the error that
    names the file, not in the training's next collective); else None."""
    if not peers.any(error is not None):
        return None
    try:
        mine = pickle.dumps(error) if error is not None else None
    except Exception:
        text = _core.redact_secrets(f"{type(error).__name__}: {error}")
        mine = pickle.dumps(RuntimeError(text))
    everyone = peers.gather(mine)
    if error is not None:
        return error
    first = next(r for r, e in enumerate(everyone) if e is not None)
    theirs = pickle.loads(everyone[first])
    theirs.add_note(f"raised by the feed on rank {first}; this rank ({peers.rank}) stopped at "
                    f"the same batch")
    return theirs


def _check_same_stream(peers: "_TorchPeers | _JaxPeers", spec: tuple) -> None:
    """One exchange at a loop's start of what cuts the stream (seed, epoch, position, order,
    batch size, drop_last): ranks that differ (a per-rank seed, a state loaded or set_epoch
    called on one rank only, other batch sizes) would serve overlapping samples or other batch
    counts (a hang in the next collective), so every rank raises the same ValueError."""
    everyone = peers.gather(spec)
    other = next((r for r, s in enumerate(everyone) if s != everyone[0]), None)
    if other is None:
        return
    name, a, b = next((x[0], x[1], y[1]) for x, y in zip(everyone[0], everyone[other])
                      if x != y)
    raise ValueError(
        f"Feed: the ranks' loops would cut different streams ({name} {a!r} on rank 0, {b!r} "
        f"on rank {other}), so their samples would overlap or their batch counts differ: build "
        f"every rank's feed with the same seed, shuffle, batch_size and drop_last, and call "
        f"load_state_dict and set_epoch on every rank alike")


def _engine_casts(source: np.dtype, target: np.dtype) -> bool:
    """Whether ``_feed_core.gather(cast=True)`` casts ``source`` to ``target``."""
    def plain(dt: np.dtype) -> bool:
        return dt.kind in "biu" or (dt.kind == "f" and dt.itemsize in (4, 8))

    return plain(source) and plain(target) and target.kind != "b" and \
        bool(np.can_cast(source, target, "same_kind"))


def _shuffle_arg(value: object) -> str:
    if value is True:
        return "row"
    if value is False or value is None:
        return "none"
    if value in ("row", "block", "none"):
        return str(value)
    raise ValueError(f"shuffle: expected \"row\", \"block\", \"none\", True, False or None, "
                     f"found {_found(value)}")


class _PinnedHost:
    """Page-locked host memory through the CUDA runtime (``Feed(pin_memory=True)``): each
    batch buffer registered with ``cudaHostRegister`` (portable: pinned for every device) and
    unregistered when numpy frees it. The runtime is loaded by ctypes (no torch, no JAX);
    construction raises RuntimeError naming what is missing where it has no library or no
    device."""

    _NAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so")
    _PORTABLE = 1  # cudaHostRegisterPortable

    def __init__(self) -> None:
        import ctypes

        from . import _runtime

        self._pid = os.getpid()
        lib, tried = None, []
        for name in (*self._NAMES, _runtime.CUDART):
            try:
                lib = ctypes.CDLL(name)
                self.library = name
                break
            except OSError as e:
                tried.append(f"{name}: {e}")
        if lib is None:
            raise RuntimeError("Feed(pin_memory=True): page-locked buffers need the CUDA runtime "
                               "(libcudart) and a CUDA device, and no CUDA runtime could be "
                               "loaded (" + "; ".join(tried) + ")")
        lib.cudaGetDeviceCount.argtypes = [ctypes.POINTER(ctypes.c_int)]
        lib.cudaGetErrorName.restype = ctypes.c_char_p
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
        self._lib = lib
        count = ctypes.c_int(0)
        rc = lib.cudaGetDeviceCount(ctypes.byref(count))
        if rc != 0 or count.value < 1:
            why = self._error(rc) if rc != 0 else "0 devices"
            raise RuntimeError(f"Feed(pin_memory=True): page-locked buffers need a CUDA device, "
                               f"and the CUDA runtime ({self.library}) finds none "
                               f"(cudaGetDeviceCount: {why}); pass pin_memory=False")

    def _error(self, rc: int) -> str:
        name = (self._lib.cudaGetErrorName(rc) or b"?").decode(errors="replace")
        text = (self._lib.cudaGetErrorString(rc) or b"").decode(errors="replace")
        return f"{name}, {text}" if text else name

    def pin(self, raw: np.ndarray) -> None:
        """Registers ``raw``'s memory, unregistered when ``raw`` is freed. In a forked child (a
        DataLoader worker, whose batches reach the loop by a copy) the CUDA runtime is not
        usable, and the buffer stays pageable."""
        if os.getpid() != self._pid or raw.nbytes == 0:
            return
        at = raw.ctypes.data
        rc = self._lib.cudaHostRegister(at, raw.nbytes, self._PORTABLE)
        if rc != 0:
            raise OutOfMemoryError(f"Feed(pin_memory=True): {_core.size_string(raw.nbytes)} "
                                   f"could not be page-locked: cudaHostRegister: "
                                   f"{self._error(rc)}")
        weakref.finalize(raw, self._lib.cudaHostUnregister, at)


def _size(nbytes: int) -> str:
    """_core.size_string of any byte count (it takes at most 64 bits)."""
    return _core.size_string(nbytes) if nbytes < 1 << 64 else f"{nbytes} bytes"


class _Pool:
    """Batch buffers, reused only when no one but the pool holds them; page-locked through
    ``pinned`` where given."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, keep: int,
                 pinned: Optional[_PinnedHost] = None) -> None:
        self.pinned = pinned
        self.shape = shape
        self.dtype = dtype
        # In Python ints: np.prod wraps past 2**63 (a drop_last=False batch_size of 2**62),
        # and the buffer taken was then too small for the batch's shape.
        self.nbytes = math.prod(shape) * dtype.itemsize
        self.keep = keep
        self._raw: list[np.ndarray] = []
        probe = [np.empty(1, np.uint8)]
        self._alone = sys.getrefcount(probe[0])  # held by the list only, seen from here
        self.allocated = 0
        self._evict = 0

    def _view(self, raw: np.ndarray) -> np.ndarray:
        off = (-raw.ctypes.data) % _ALIGN
        return raw[off:off + self.nbytes].view(self.dtype).reshape(self.shape)

    def take(self) -> np.ndarray:
        for i in range(len(self._raw)):
            if sys.getrefcount(self._raw[i]) <= self._alone:
                return self._view(self._raw[i])
        try:
            raw = np.empty(self.nbytes + _ALIGN, np.uint8)
        except (MemoryError, ValueError) as e:
            raise OutOfMemoryError(f"Feed: a batch of {self.shape} {self.dtype} "
                                   f"({_size(self.nbytes)}) does not fit this "
                                   f"process's memory: {e}") from None
        if self.pinned is not None:
            self.pinned.pin(raw)
        self.allocated += 1
        if len(self._raw) < self.keep:
            self._raw.append(raw)
        else:
            # Every pooled buffer is held: the oldest becomes its holder's alone (it is freed
            # when they drop it) and the new one takes its place.
            self._raw[self._evict % self.keep] = raw
            self._evict += 1
        return self._view(raw)


def _device_arg(device: object) -> "tuple[str, Optional[int]]":
    """``Feed(device=)``: None or "cpu" (host batches), "cuda" (device 0), "cuda:N", or
    anything whose str() is one of those (a ``torch.device``). Returns (text, index)."""
    if device is None:
        return "None", None
    text = str(device) if hasattr(device, "type") else device
    if not isinstance(text, str):
        raise TypeError(f"device: expected None, 'cpu', 'cuda' or 'cuda:N', found "
                        f"{type(device).__name__}")
    if text == "cpu":
        return text, None
    if text == "cuda":
        return text, 0
    head, _, index = text.partition(":")
    if head == "cuda" and index.isdigit() and index.isascii():
        return text, int(index)
    raise ValueError(f"device: expected None, 'cpu', 'cuda' or 'cuda:N', found {text!r}")


def _device_batches(text: str, index: int) -> Any:
    """The engine's device batches for ``Feed(device=text)`` (``_feed_cuda.Device``), or the
    RuntimeError naming what is missing: the CUDA backend in this build, or a CUDA device."""
    try:
        from . import _feed_cuda
    except ImportError as e:
        raise RuntimeError(f"Feed(device={text!r}): batches on a CUDA device need shardload "
                           f"built with its CUDA backend (nvcc at build time), and this build "
                           f"has none ({e}); pass device=None for host batches") from None
    why = _feed_cuda.device_status()
    if why:
        raise RuntimeError(f"Feed(device={text!r}): batches on a CUDA device need one, and the "
                           f"CUDA runtime finds none ({why}); pass device=None for host "
                           f"batches")
    try:
        return _feed_cuda.Device(index)
    except RuntimeError as e:
        raise RuntimeError(f"Feed(device={text!r}): {e}") from None


def _runs(rows: np.ndarray) -> "list[tuple[int, int]]":
    """``rows`` as ranges [lo, hi) of consecutive rows, in order."""
    cuts = (np.flatnonzero(np.diff(rows) != 1) + 1).tolist()
    bounds = [0, *cuts, len(rows)]
    return [(int(rows[a]), int(rows[b - 1]) + 1) for a, b in zip(bounds, bounds[1:])]


class Feed:
    """Batches of ``batch_size`` rows of a sharded dataset for one rank of a data-parallel
    job, in a seeded global order; see the module's documentation for the stream, the orders,
    the state and the buffers.

    Args:
        source: anything :func:`shardload.numpy.load` reads (a directory, pattern, glob, list
            of paths or URLs, every format, ``s3://``), or a :class:`Layout`.
        batch_size: rows per batch, an int >= 1.
        rank, world_size: this process's place; both or neither (then :func:`world`).
        shuffle: ``"row"`` (True), ``"block"`` or ``"none"`` (False, None).
        seed: an int in ``[0, 2**64)``; the order is a function of (seed, epoch) only.
        block_rows: rows per block of ``shuffle="block"`` (default: about 1 MiB of rows).
        window_blocks: blocks per shuffle window of ``shuffle="block"`` (default 4).
        drop_last: True: equal batches by dropping the stream's tail; False: by padding (the
            tail's step wraps to the epoch's first positions).
        prefetch: batches read ahead (by the engine's threads, or a background thread for
            an ``astype`` cast the engine lacks), rounded up to whole fills of
            several batches (see Buffers in the module's documentation); at least one fill.
            None (default): two fills where the engine's threads read them, else one.
        threads: the engine's threads per read (None: one per core).
        row_range, astype, reader, storage_options, options: as for
            :func:`shardload.numpy.load`; discovery happens once, here.
        check_ranks: whether the ranks agree, through the process group the rank comes from:
            at construction on the dataset (one exchange of a digest of each rank's shards),
            then at each step on read errors, so that every rank raises at the same step.
            None (default): when the rank comes from torch.distributed or jax.distributed and
            there are several ranks. Every rank must then construct its feed and iterate it in
            lock step.
        pin_memory: as torch's ``DataLoader(pin_memory=True)``: the batch buffers are
            page-locked host memory (``cudaHostRegister`` through the CUDA runtime, loaded by
            ctypes), so that a copy to a GPU (``tensor.to("cuda", non_blocking=True)``,
            ``jax.device_put``) is one DMA. The batches stay the same numpy arrays, handed
            over without a copy. RuntimeError at construction where no CUDA runtime or no
            device is found.
        device: None (default) or "cpu": host batches. "cuda" or "cuda:N" (or a
            ``torch.device``): each batch is a ``_feed_cuda.DeviceBatch`` in that device's
            memory, of its own, which ``torch.from_dlpack``, ``jax.dlpack.from_dlpack`` and
            CuPy take without a copy (DLPack, kDLCUDA). In order (``shuffle="none"``, no
            ``astype``) each batch is the engine's device fill of its rows (staged through
            page-locked buffers, read by the engine's threads); shuffled, the host gather
            into the feed's page-locked buffers (``pin_memory`` implied) and one async copy.
            RuntimeError at construction where this build has no CUDA backend or the CUDA
            runtime finds no device.

    Raises:
        TypeError, ValueError: an argument is wrong, or ``batch_size * world_size`` exceeds
            the rows with ``drop_last=True`` (no rank would get a batch).
        LayoutError, ShardReadError: as :func:`shardload.numpy.load`; a read error raises
            from the iteration at the batch that needed it, naming the file (with
            ``check_ranks``, on every rank at that step). A LayoutError, the same on every
            rank, when the ranks found different datasets.
        OutOfMemoryError: from the iteration, when a batch buffer cannot be allocated (or,
            with ``pin_memory``, page-locked).
        RuntimeError: ``pin_memory=True`` or ``device="cuda"`` where the CUDA runtime or a
            CUDA device is missing.
    """

    def __init__(
        self,
        source: SourceLike | Layout,
        batch_size: int,
        *,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        shuffle: "str | bool | None" = "row",
        seed: int = 0,
        block_rows: Optional[int] = None,
        window_blocks: int = 4,
        drop_last: bool = True,
        prefetch: Optional[int] = None,
        threads: Optional[int] = None,
        row_range: "tuple[int | None, int | None] | slice | None" = None,
        astype: DTypeLike | None = None,
        reader: Optional[str] = None,
        storage_options: Optional[Mapping[str, str]] = None,
        check_ranks: Optional[bool] = None,
        pin_memory: bool = False,
        device: Any = None,
        **options: Unpack[DiscoverOptions],
    ) -> None:
        self._batch_size = _int("batch_size", batch_size)
        if self._batch_size < 1:
            raise ValueError(f"batch_size: expected an int >= 1, found {self._batch_size}")
        self._rank, self._world, where = _world(rank, world_size)
        if check_ranks is None:
            check = where in ("torch", "jax") and self._world > 1
        else:
            check = _bool("check_ranks", check_ranks)
            if check and where not in ("torch", "jax"):
                raise ValueError("check_ranks=True: the ranks are checked through the process "
                                 "group the rank comes from (torch.distributed or "
                                 "jax.distributed), and this feed's rank comes from "
                                 + ("its arguments" if where == "args" else "neither"))
        self._mode = _shuffle_arg(shuffle)
        self._seed = self._seed_arg(seed)
        self._drop_last = _bool("drop_last", drop_last)
        self._prefetch = None if prefetch is None else _int("prefetch", prefetch)
        if self._prefetch is not None and self._prefetch < 0:
            raise ValueError(f"prefetch: expected an int >= 0, found {self._prefetch}")
        self._threads = _frontend.threads_arg(threads)
        # Checked before discovery: a machine without a CUDA device refuses at once.
        device_text, device_index = _device_arg(device)
        self._device = None if device_index is None else _device_batches(device_text,
                                                                         device_index)
        pinned = _PinnedHost() if _bool("pin_memory", pin_memory) or self._device else None
        try:
            prepared = _frontend.prepare("shardload.feed.Feed", source, row_range=row_range,
                                         astype=astype, reader=reader,
                                         storage_options=storage_options, options=options)
            error = None
        except Exception as e:  # raised on every rank, after the exchange, when checked
            prepared, error = None, e
        self._peers = _peers(where) if check else None
        if self._peers is not None:
            _check_same_layout(self._peers, prepared.layout if prepared else None, error)
        elif error is not None:
            raise error
        assert prepared is not None
        self._layout = prepared.layout
        self._cast = prepared.cast
        # astype cast on the engine's threads where it has the cast (numpy's same_kind among
        # bool, ints, float32 and float64); numpy in the read-ahead thread otherwise.
        self._engine_cast = self._cast is not None and _engine_casts(self._layout.dtype,
                                                                     self._cast)
        self._maps: Optional[Any] = None  # _feed_core.Maps, made at the first shuffled loop
        self._n = int(self._layout.total_rows)
        row_bytes = max(1, self._layout.nbytes // self._n) if self._n else 1
        if block_rows is None:
            self._block_rows = max(1, (1 << 20) // row_bytes)
        else:
            self._block_rows = _int("block_rows", block_rows)
            if self._block_rows < 1:
                raise ValueError(f"block_rows: expected an int >= 1, found {self._block_rows}")
        self._window_blocks = _int("window_blocks", window_blocks)
        if self._window_blocks < 1:
            raise ValueError(f"window_blocks: expected an int >= 1, found "
                             f"{self._window_blocks}")
        if self._n == 0:
            raise ValueError("Feed: the source has no rows")
        self._block_rows, self._window_blocks = self._sizes(self._block_rows,
                                                            self._window_blocks)
        self._check_steps()
        self._epoch = 0
        self._position = 0
        self._lock = threading.Lock()
        self._iterating = False
        row_shape = tuple(self._layout.shape[1:])
        # Batches are read several to a fill of about _FILL_BYTES (one engine call, one hand-off
        # to the loop), each batch a view of the fill's buffer; only where a
        # batch's bytes are a multiple of the alignment, so that every view stays aligned.
        batch_bytes = self._batch_size * int(np.prod(row_shape, dtype=np.int64)) * \
            prepared.dtype.itemsize
        self._per_fill = 1
        if batch_bytes and batch_bytes % _ALIGN == 0:
            self._per_fill = max(1, min(_FILL_BATCHES, _FILL_BYTES // batch_bytes))
        # Fills read ahead: `prefetch` batches in whole fills, at least one. By default two
        # where the engine reads them on threads of its own (_run), so that the next fill's
        # reads have begun when the loop takes a fill, and one through the read-ahead thread
        # (two there measured slower: the loop and that thread contended for the GIL).
        self._ahead = None if self._prefetch is None else \
            max(1, -(-self._prefetch // self._per_fill))
        self._pool = _Pool((self._per_fill * self._batch_size,) + row_shape, prepared.dtype,
                           keep=(self._ahead or 2) + 2, pinned=pinned)

    # -- arguments and state ------------------------------------------------------------------
    @staticmethod
    def _seed_arg(seed: object) -> int:
        s = _int("seed", seed)
        if not 0 <= s <= _SEED_MAX:
            raise ValueError(f"seed: expected an int in [0, 2**64), found {s}")
        return s

    def _check_steps(self) -> None:
        if self._drop_last and self._batch_size * self._world > self._n:
            raise ValueError(
                f"Feed: batch_size {self._batch_size} x world_size {self._world} = "
                f"{self._batch_size * self._world} rows per step exceeds the source's "
                f"{self._n} rows, so with drop_last=True no rank gets a batch")

    @property
    def layout(self) -> Layout:
        """The rows served (after ``row_range``)."""
        return self._layout

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def epoch(self) -> int:
        """The epoch of the next batch."""
        return self._epoch

    @property
    def position(self) -> int:
        """Global samples of this epoch consumed (whole steps), all ranks together."""
        return self._position

    @property
    def shuffle(self) -> str:
        """The order's spec as the state holds it: ``"none"``, ``"row"`` or
        ``"block/B/W"``."""
        if self._mode == "block":
            return f"block/{self._block_rows}/{self._window_blocks}"
        return self._mode

    def _steps(self, start: int) -> int:
        step = self._batch_size * self._world
        left = self._n - start
        return left // step if self._drop_last else -(-left // step)

    def _advance(self, epoch: int, start: int, done: int, steps: int, step_rows: int) -> None:
        """The state after ``done`` of the loop's ``steps`` batches from ``start``: after the
        epoch's last (or where it has none) already the next epoch's start, so that a state
        saved then resumes there."""
        if done == steps:
            self._epoch, self._position = epoch + 1, 0
        else:
            self._position = start + done * step_rows

    def __len__(self) -> int:
        """Batches this rank yields in a whole epoch (the same on every rank)."""
        return self._steps(0)

    def batches_left(self) -> int:
        """Batches this rank yields in the rest of the current epoch."""
        return self._steps(self._position)

    def set_epoch(self, epoch: int) -> None:
        """Starts ``epoch`` at position 0, as ``DistributedSampler.set_epoch``; the current
        epoch (after :meth:`load_state_dict`, say) keeps its position, so a loop that calls
        ``set_epoch(e)`` at the top resumes mid-epoch instead of starting it over. Another
        epoch while a loop over the feed runs is refused (RuntimeError)."""
        e = _int("epoch", epoch)
        if not 0 <= e <= _SEED_MAX:
            # The order keys on the epoch modulo 2**64: 2**64 + e would replay epoch e's.
            raise ValueError(f"epoch: expected an int in [0, 2**64), found {e}")
        with self._lock:
            if e == self._epoch:
                return
            if self._iterating:
                # The loop goes on in its own epoch and writes its position: the state would
                # say epoch e at the loop's position, and a resume would skip that much of e.
                raise RuntimeError(f"set_epoch({e}): the feed is being iterated in epoch "
                                   f"{self._epoch}; end the loop (or close its iterator) first")
            self._epoch, self._position = e, 0

    def state_dict(self) -> dict[str, Any]:
        """The feed's place: ``{"v", "seed", "epoch", "position", "world_size", "rows",
        "batch_size", "shuffle", "drop_last"}``, JSON-able, at most :data:`STATE_MAX_BYTES`
        bytes as ``json.dumps`` writes it. The batches yielded so far are consumed; batches
        read ahead are not."""
        return {"v": _STATE_VERSION, "seed": self._seed, "epoch": self._epoch,
                "position": self._position, "world_size": self._world, "rows": self._n,
                "batch_size": self._batch_size, "shuffle": self.shuffle,
                "drop_last": self._drop_last}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continues at the state's next sample: its epoch and position, its seed, order and
        drop_last. This feed's world size, rank and batch size stay (the rest of the epoch is
        cut by them). Raises ValueError for a state of another dataset (another row count) or
        one that is malformed; nothing changes then."""
        if not isinstance(state, Mapping):
            raise TypeError(f"load_state_dict: expected a dict, found {_found(state)}")
        need = ("v", "seed", "epoch", "position", "rows", "shuffle", "drop_last")
        missing = [k for k in need if k not in state]
        if missing:
            raise ValueError(f"load_state_dict: the state lacks {', '.join(missing)}")
        if state["v"] != _STATE_VERSION:
            raise ValueError(f"load_state_dict: state version {state['v']!r}, expected "
                             f"{_STATE_VERSION}")
        rows = _int("rows", state["rows"])
        if rows != self._n:
            raise ValueError(f"load_state_dict: the state is of a dataset of {rows} rows; this "
                             f"feed's has {self._n}")
        seed = self._seed_arg(state["seed"])
        epoch = _int("epoch", state["epoch"])
        position = _int("position", state["position"])
        if epoch < 0:
            raise ValueError(f"load_state_dict: epoch {epoch} is negative")
        if epoch > _SEED_MAX:
            # The order keys on the epoch modulo 2**64: 2**64 + e would replay epoch e's.
            raise ValueError(f"load_state_dict: epoch {epoch} is past 2**64 - 1, the last "
                             "epoch the order tells apart")
        if not 0 <= position <= rows:
            raise ValueError(f"load_state_dict: position {position} is outside [0, {rows}]")
        spec = state["shuffle"]
        mode, block_rows, window = self._mode, self._block_rows, self._window_blocks
        if spec in ("none", "row"):
            mode = spec
        elif isinstance(spec, str) and spec.startswith("block/") and spec.count("/") == 2:
            try:
                block_rows, window = (int(x) for x in spec.split("/")[1:])
            except ValueError:
                raise ValueError(f"load_state_dict: shuffle {spec!r} is not block/B/W") from None
            if block_rows < 1 or window < 1:
                raise ValueError(f"load_state_dict: shuffle {spec!r} has a size below 1")
            mode = "block"
        else:
            raise ValueError(f"load_state_dict: shuffle {spec!r}: expected \"none\", \"row\" "
                             "or \"block/B/W\"")
        drop_last = state["drop_last"]
        if not isinstance(drop_last, bool):
            raise ValueError(f"load_state_dict: drop_last {drop_last!r} is not a bool")
        with self._lock:
            if self._iterating:
                raise RuntimeError("load_state_dict: the feed is being iterated; load the state "
                                   "before the loop")
            old = (self._drop_last,)
            self._drop_last = drop_last
            try:
                self._check_steps()
            except ValueError:
                (self._drop_last,) = old
                raise
            self._seed, self._mode = seed, mode
            self._block_rows, self._window_blocks = self._sizes(block_rows, window)
            self._epoch, self._position = epoch, position

    def _sizes(self, block_rows: int, window: int) -> tuple[int, int]:
        """The block and window sizes as the order takes them: a block of the rows' count or
        more is one block, a window of all blocks or more all blocks (the same order). So the
        state, which holds them as text, stays within STATE_MAX_BYTES for any size given."""
        block_rows = min(block_rows, self._n)
        return block_rows, min(window, -(-self._n // block_rows))

    # -- the order ------------------------------------------------------------------------------
    def order(self, epoch: Optional[int] = None) -> Order:
        """The order of ``epoch`` (default: the current one): ``order.rows(positions)`` gives
        the rows at global stream positions."""
        e = self._epoch if epoch is None else epoch
        return Order(self._mode, self._n, self._seed, e, self._block_rows, self._window_blocks)

    def batch_positions(self, step: int, start: int = 0) -> np.ndarray:
        """The global stream positions of this rank's batch of ``step`` counted from
        ``start`` (positions past the end wrap, as ``drop_last=False`` pads)."""
        first = start + step * self._batch_size * self._world + self._rank * self._batch_size
        return np.arange(first, first + self._batch_size, dtype=np.int64) % self._n

    # -- reading ----------------------------------------------------------------------------------
    def _maps_for(self, order: Order) -> Optional[Any]:
        """The layout's files mapped, for a shuffled order's gathers (each row one copy from
        the map, not a pread); None in order (one read a fill either way) or where the
        files cannot be mapped as served (not local npy/raw, byte-swapped, ...)."""
        if order.mode == "none":
            return None
        if self._maps is None:
            maps = _feed_core.Maps(self._layout)
            self._maps = maps if maps.usable and _reserve_maps(self, len(self._layout.paths)) \
                else _NO_MAPS
        return None if self._maps is _NO_MAPS else self._maps

    def _fill(self, order: Order, positions: np.ndarray, out: np.ndarray) -> np.ndarray:
        """The rows at ``positions`` into ``out`` in one engine call: rows that follow each
        other in the source and the batch one read (a batch in order is one piece, two at a
        wrap); a block shuffle's blocks read whole and their rows copied to their places
        (``_feed_core.gather``)."""
        direct = self._cast is None or self._engine_cast
        dst = out if direct else np.empty((positions.size,) + out.shape[1:], self._layout.dtype)
        _feed_core.gather(self._layout, order.rows(positions), dst,
                          self._threads or _core.default_host_threads(), cast=self._engine_cast,
                          maps=self._maps_for(order))
        if not direct:
            np.copyto(out, dst, casting="unsafe")
        return out

    def __iter__(self) -> Iterator[np.ndarray]:
        """This rank's batches of the rest of the current epoch, then the epoch ends: the
        next iteration is the next epoch. One loop at a time."""
        if self._device is not None:
            return self._run_device()
        return self._run()

    def _run_device(self) -> Iterator[Any]:
        """Device batches (``device=``): in order, the engine's device fill of each batch's
        rows; otherwise the host batch (in page-locked buffers) copied in one async copy."""
        if self._mode != "none" or self._cast is not None:
            for batch in self._run():
                yield self._device.copy(batch)
                del batch  # its buffer goes back to the feed's pool
            return
        with self._lock:
            if self._iterating:
                raise RuntimeError("Feed: already being iterated (one loop at a time)")
            self._iterating = True
        # Anything raised before the loop's try (a KeyboardInterrupt, a failed mapping) must
        # not leave the feed marked as iterated: no loop could run on it again.
        try:
            epoch, start = self._epoch, self._position
            steps = self._steps(start)
            step_rows = self._batch_size * self._world
            order = self.order(epoch)
            shape = (self._batch_size,) + tuple(self._layout.shape[1:])
            pool = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                         thread_name_prefix="shardload-feed")
        except BaseException:
            self._end_iterating()
            raise

        def fill(k: int) -> Any:  # the engine's call releases the GIL
            rows = order.rows(self.batch_positions(k, start))
            return self._device.fill_rows(self._layout, _runs(rows), shape)

        peers = self._peers
        pending: collections.deque = collections.deque()
        try:
            if peers is not None:
                _check_same_stream(peers, self._stream_spec(epoch, start))
            # One batch read ahead, on the read-ahead thread, while the loop uses this one.
            pending.extend(pool.submit(fill, k) for k in range(min(steps, 1)))
            for k in range(steps):
                try:
                    batch, error = pending.popleft().result(), None
                except Exception as e:
                    batch, error = None, e
                if k + 1 < steps:
                    pending.append(pool.submit(fill, k + 1))
                if peers is not None:
                    error = _agreed(peers, error)
                if error is not None:
                    raise error
                self._advance(epoch, start, k + 1, steps, step_rows)
                yield batch
                del batch
            if steps == 0:
                self._advance(epoch, start, 0, 0, step_rows)
        finally:
            for f in pending:
                f.cancel()
            pool.shutdown(wait=True)
            self._end_iterating()

    def _end_iterating(self) -> None:
        with self._lock:
            self._iterating = False

    def torch_dataset(self) -> Any:
        """This feed as a ``torch.utils.data.IterableDataset`` of its batches, for
        ``torch.utils.data.DataLoader(feed.torch_dataset(), batch_size=None)``, which then
        yields the feed's batches as tensors (sharing the batch's memory with
        ``num_workers=0``). With ``num_workers=k > 0`` worker ``i`` (a forked copy of the feed)
        reads this rank's batches ``i, i + k, ...`` of the rest of the epoch and the loader
        yields them in the feed's order, each once; the feed in this process then does not
        move (its state stays the loop's start: checkpoint with ``num_workers=0``), so call
        :meth:`set_epoch` before each epoch, and leave ``persistent_workers`` off. Imports
        torch (ImportError without it)."""
        return _torch_dataset_type()(self)

    def __getstate__(self) -> Any:
        # A feed holds a lock, its buffers and the engine's layout: a copy by pickling would be
        # another feed. DataLoader workers get theirs by fork (Linux's default start method).
        raise TypeError(_NO_PICKLE)

    def _run(self, first: int = 0, stride: int = 1, worker: bool = False
             ) -> Iterator[np.ndarray]:
        """The batches of steps ``first, first + stride, ...`` of the rest of the epoch (all of
        them by default; a DataLoader worker's share otherwise: a forked worker has no share
        of the parent's process group, so it does not exchange its errors)."""
        with self._lock:
            if self._iterating:
                raise RuntimeError("Feed: already being iterated (one loop at a time)")
            self._iterating = True
        # Anything raised before the loop's try (a KeyboardInterrupt, a failed mapping) must
        # not leave the feed marked as iterated: no loop could run on it again.
        try:
            epoch, start = self._epoch, self._position
            steps = self._steps(start)
            mine = range(first, steps, stride)
            order = self.order(epoch)
            step_rows = self._batch_size * self._world
            per = self._per_fill
            fills = [mine[i:i + per] for i in range(0, len(mine), per)]
            engine = self._cast is None or self._engine_cast
            maps = self._maps_for(order)
            ahead = self._ahead or (2 if engine else 1)
            pending: collections.deque = collections.deque()
            alone: collections.deque = collections.deque()
            submitted = 0
            pool = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                         thread_name_prefix="shardload-feed")
        except BaseException:
            self._end_iterating()
            raise

        def positions(ks: range) -> np.ndarray:
            return np.concatenate([self.batch_positions(k, start) for k in ks])

        def submit() -> None:
            nonlocal submitted
            ks = fills[submitted]
            submitted += 1
            try:
                buf = self._pool.take()[:len(ks) * self._batch_size]
            except Exception as e:  # raised where the fill's batches are taken, as a read's
                failed: concurrent.futures.Future = concurrent.futures.Future()
                failed.set_exception(e)
                pending.append(failed)
                return
            if engine:
                # The engine reads the fill on threads of its own, started here: no Python
                # thread, so the fill never waits for the GIL behind the loop.
                # The fill's rows are named by the order and its positions, and computed
                # there too: the loop's thread only starts the fill.
                rows = order.fill(start + ks.start * step_rows + self._rank * self._batch_size,
                                  self._batch_size, ks.step * step_rows, len(ks))
                pending.append(_feed_core.Gather(self._layout, rows, buf,
                                                 self._threads or _core.default_host_threads(),
                                                 cast=self._engine_cast, maps=maps))
            else:
                pending.append(pool.submit(self._fill, order, positions(ks), buf))

        def batches(ks: range, buf: Optional[np.ndarray], error: Optional[Exception]
                    ) -> Iterator[tuple[int, np.ndarray]]:
            """The batches of fill `ks`, views of its buffer. Where the fill failed (`buf`
            None), each of its batches is read again alone (on the read-ahead thread, after
            what is in flight there), so that the error comes at the batch whose rows need
            the file; a buffer that could not be allocated is raised at the fill's first."""
            if isinstance(error, OutOfMemoryError):
                raise error
            if buf is None:
                alone.extend(pool.submit(self._fill, order, self.batch_positions(k, start),
                                         self._pool_one().take()) for k in ks)
            if submitted < len(fills):
                submit()
            b = self._batch_size
            for j, k in enumerate(ks):
                yield k, buf[j * b:(j + 1) * b] if buf is not None else alone.popleft().result()

        peers = None if worker else self._peers
        try:
            if peers is not None:
                _check_same_stream(peers, self._stream_spec(epoch, start))
            while submitted < min(len(fills), ahead):
                submit()
            for ks in fills:
                try:
                    buf, error = pending.popleft().result(), None
                except Exception as e:
                    buf, error = None, e
                # The ranks' fills cover the same steps, so they agree once a fill (every rank
                # passes here in lock step) on whether any failed; only then once a step.
                careful = peers is not None and peers.any(buf is None)
                it = batches(ks, buf, error)
                del error
                while True:
                    if not careful:
                        try:
                            k, batch = next(it)
                        except StopIteration:
                            break
                    else:
                        # A fill failed on some rank: each step's batch is read again there,
                        # and before each is yielded the ranks agree on whether any of them
                        # failed to read its batch; all raise then, at that step.
                        try:
                            k, batch = next(it)
                            error = None
                        except StopIteration:
                            break
                        except Exception as e:
                            error = e
                        agreed = _agreed(peers, error)
                        if agreed is not None:
                            raise agreed
                    self._advance(epoch, start, k + 1, steps, step_rows)
                    yield batch
                    del batch
            if steps == 0:
                self._advance(epoch, start, 0, 0, step_rows)
        finally:
            for f in (*pending, *alone):
                f.cancel()
            pending.clear()  # an engine fill still reading is waited for here
            pool.shutdown(wait=True)
            self._end_iterating()

    def _stream_spec(self, epoch: int, start: int) -> tuple:
        """What the ranks' loops must agree on to cut one stream into disjoint batches."""
        return (("seed", self._seed), ("epoch", epoch), ("position", start),
                ("shuffle", self.shuffle), ("batch_size", self._batch_size),
                ("drop_last", self._drop_last))

    def _pool_one(self) -> _Pool:
        """Buffers of one batch, for the batches of a failed fill read one at a time."""
        one = getattr(self, "_one", None)
        if one is None:
            one = self._one = _Pool((self._batch_size,) + self._pool.shape[1:],
                                    self._pool.dtype, keep=2, pinned=self._pool.pinned)
        return one

    def __repr__(self) -> str:
        return (f"Feed(rows={self._n}, batch_size={self._batch_size}, rank={self._rank}, "
                f"world_size={self._world}, shuffle={self.shuffle!r}, seed={self._seed}, "
                f"epoch={self._epoch}, position={self._position})")


_TORCH_DATASET: Optional[type] = None
_NO_PICKLE = ("Feed cannot be pickled: give DataLoader workers the feed by fork "
              "(multiprocessing_context='fork', Linux's default before Python 3.14), or use "
              "num_workers=0 (the feed reads ahead in its own thread)")


def _torch_dataset_type() -> type:
    """The IterableDataset class of :meth:`Feed.torch_dataset`, made on first use so that
    nothing here imports torch before then."""
    global _TORCH_DATASET
    if _TORCH_DATASET is None:
        try:
            import torch.utils.data as tud
        except ImportError as e:
            raise ImportError(f"Feed.torch_dataset needs torch, which is not importable: {e}"
                              ) from None

        class FeedDataset(tud.IterableDataset):
            """A :class:`Feed`'s batches for a ``DataLoader(..., batch_size=None)``."""

            def __init__(self, feed: Feed) -> None:
                self.feed = feed

            def __iter__(self) -> Iterator[np.ndarray]:
                info = tud.get_worker_info()
                if info is None:
                    return iter(self.feed)
                # Worker i of k takes every k-th batch from the i-th: the loader asks its
                # workers in turn, so it yields them in the feed's order; a worker whose
                # share is one batch shorter ends first, as the turn reaches it last.
                return self.feed._run(info.id, info.num_workers, worker=True)

            def __len__(self) -> int:
                return self.feed.batches_left()

            def __reduce_ex__(self, protocol: Any) -> Any:
                raise TypeError(_NO_PICKLE)  # what a spawn or forkserver worker would need

            def __repr__(self) -> str:
                return f"FeedDataset({self.feed!r})"

        FeedDataset.__module__ = __name__
        _TORCH_DATASET = FeedDataset
    return _TORCH_DATASET


def state_bytes(state: Mapping[str, Any]) -> int:
    """The size of ``state`` as ``json.dumps`` encodes it."""
    return len(json.dumps(state).encode())
