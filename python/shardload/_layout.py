"""``Layout``: the package's class, a subclass of the binding's (``shardload._core.Layout``,
which holds the C++ layout and its fields), defined here in one class body: the array-like
surface, equality, pickling, the row-bounds rule of ``read`` and ``slice_rows``, and the docs;
plus :class:`ManifestState`.

The binding's functions (``_core.discover``, ``decode_layout``, ``read_manifest``,
``_legate.discover_once``, ``Layout.slice_rows``) give the binding's class; the package hands
each such object on through :func:`_made`, so every layout a user gets is a :class:`Layout`.
Nothing is set on the binding's class.
"""

from __future__ import annotations

import enum
import warnings
from typing import Any

import numpy as np

from . import _core
from ._args import _found, _int


class ManifestState(str, enum.Enum):
    """How discovery used a directory's manifest (``Layout.manifest_state``); decide on this,
    not on the text of ``Layout.manifest_status``."""

    NONE = "none"
    """No directory was discovered (a list, a glob, a layout of its own), so no manifest."""
    ABSENT = "absent"
    """The directory holds no manifest; the files were probed."""
    USED = "used"
    """Taken from the manifest after checking that no shard changed since indexing."""
    TRUSTED = "trusted"
    """Taken from the manifest without touching a shard (``trust_manifest=True``)."""
    STALE = "stale"
    """A shard changed since indexing; the files were probed."""
    OTHER_OPTIONS = "other_options"
    """The manifest was indexed with other format options than asked; the files were probed."""
    OTHER_PATTERN = "other_pattern"
    """The manifest was indexed under another pattern than the request's; the files were
    probed."""


def _decode_layout(encoded: bytes, manifest_status: str,
                   manifest_state: str = "none") -> Layout:
    """Unpickles a Layout (``Layout.__reduce__``); the state is absent from older pickles."""
    return _made(_core.decode_layout(encoded, manifest_status, manifest_state))


def _row_bounds(total: int, lo: object, hi: object) -> tuple[int, int]:
    # One rule for read(), slice_rows() and load(row_range=): row indexes in
    # [0, total] with lo <= hi, never reinterpreted (negative) or clamped.
    first = 0 if lo is None else _int("lo", lo)
    end = total if hi is None else _int("hi", hi)
    for name, v in (("lo", first), ("hi", end)):
        if v < 0:
            raise ValueError(f"{name}: negative row indexes are not accepted, found {v} (rows "
                             f"run from 0 to {total}; for the last n rows pass total_rows - n)")
        if v > total:
            raise ValueError(f"{name}: {v} is past the end of the dataset's {total} rows")
    if first > end:
        raise ValueError(f"rows [{first}, {end}): lo is greater than hi")
    return first, end


def _rows(value: object, total: int) -> tuple[int, int]:
    """``row_range=``: a (lo, hi) pair or a slice with step None or 1, under the bounds rule of
    :meth:`Layout.read` (None for a default bound; no negative or clamped bounds)."""
    if isinstance(value, slice):
        if value.step is not None and (isinstance(value.step, bool) or value.step != 1):
            raise ValueError(f"row_range: a slice with step {value.step!r} is not a row range "
                             "(only step None or 1)")
        return _row_bounds(total, value.start, value.stop)
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return _row_bounds(total, value[0], value[1])
    raise TypeError(f"row_range: expected a (lo, hi) pair or a slice lo:hi, found "
                    f"{_found(value)}")



class Layout(_core.Layout):
    """A discovered, validated dataset: its shards in order, their rows, the dtype
    and the shape, and a snapshot (size, mtime) of every file. Made by :func:`discover`; pass it
    to :func:`load`, or read rows on the host with :meth:`read`. Immutable.

    It reads like an array's description: ``shape``, ``dtype``, ``ndim``, ``size``, ``itemsize``,
    ``nbytes``, and ``len(layout)`` (the rows). ``layout[lo:hi]`` reads rows on the host as
    ``layout.read(lo, hi)`` (numpy's rules for negative and clipped bounds; step 1 only) and
    ``layout[i]`` reads row i. ``repr()`` is one line; ``str()`` is :meth:`describe`. Two
    layouts are equal when they hold the same shards (paths, rows, file snapshots), dtype,
    trailing shape and format options. A Layout pickles (to pass it to another process)."""

    # No attribute of its own: a layout is its C++ value, immutable.
    __slots__ = ()

    def __init__(self) -> None:
        """No constructor: :func:`discover` makes a Layout (as do :meth:`slice_rows` and
        unpickling); ``Layout()`` raises TypeError."""
        # The package's own layouts come from _made(), which calls the binding's constructor.
        raise TypeError("shardload.Layout has no constructor: discover() makes one")

    # The binding's fields, with the docs people read.
    @property
    def format(self) -> str:
        """The format of the shards: ``'npy'``, ``'raw'``, ``'hdf5'``, ``'parquet'``,
        ``'arrow'``, ``'zarr'`` or ``'npz'`` (never ``'auto'``), or the name of a reader
        registered with :func:`register_reader`."""
        return super().format

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype of the array, in native byte order."""
        return super().dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the whole array: ``(total_rows, *trailing_shape)``."""
        return super().shape

    @property
    def trailing_shape(self) -> tuple[int, ...]:
        """The shape of one row (``shape[1:]``), the same in every shard; ``()`` for 1-D
        data."""
        return super().trailing_shape

    @property
    def paths(self) -> list[str]:
        """The shard paths in order, as str (names that are not UTF-8 as os.fsdecode gives
        them), to be opened: an ``s3://`` URL's secret options (``secret_key``,
        ``session_token``) and an ``http(s)://`` URL's user part and secret query items
        (a signature, a token) are not in them but in a table of the process, named by
        ``credentials=HANDLE`` (a pickled Layout carries them); ``print(layout)``,
        ``describe()`` and every message show URLs redacted
        (:func:`shardload.redact_secrets`)."""
        return super().paths

    @property
    def shard_rows(self) -> list[int]:
        """The rows of each shard, in order (a list of int; a shard may have 0 rows)."""
        return super().shard_rows

    @property
    def offsets(self) -> list[int]:
        """The first global row of each shard, and the total last: ``num_shards + 1`` ints
        from 0 to ``total_rows``."""
        return super().offsets

    @property
    def total_rows(self) -> int:
        """The number of rows of the array (``shape[0]``)."""
        return super().total_rows

    @property
    def nbytes(self) -> int:
        """The size of the array in bytes (``total_rows`` x the bytes of one row)."""
        return super().nbytes

    @property
    def num_shards(self) -> int:
        """The number of shards."""
        return super().num_shards

    @property
    def manifest_status(self) -> str:
        """How discovery used the directory's manifest, for people: ``manifest: used ...``,
        ``manifest: stale because ...``, ``manifest: absent``, ``manifest: not used: ...``;
        empty where no directory was discovered (see docs/manifest.md). URLs in it have their
        secrets redacted."""
        return super().manifest_status

    @property
    def manifest_state(self) -> ManifestState:
        """How discovery used the directory's manifest, as a :class:`ManifestState` (a str
        enum); ``manifest_status`` says the same for people, with the reason."""
        return ManifestState(self._manifest_state)

    def __repr__(self) -> str:
        return (f"<shardload.Layout format={self.format!r} shape={self.shape} dtype={self.dtype} "
                f"shards={self.num_shards}>")

    def __str__(self) -> str:
        return self.describe()

    def __len__(self) -> int:
        return self.total_rows

    def __getitem__(self, key: object) -> np.ndarray:
        """``layout[i]`` is row i, ``layout[lo:hi]`` rows [lo, hi), read on the host as
        :meth:`read` reads (no Legate); negative indices and slice bounds count from the end and
        slice bounds are clipped, as in numpy. The step must be 1 (or None)."""
        total = self.total_rows
        if isinstance(key, slice):
            if key.step is not None:
                step = _int("step", key.step)
                if step != 1:
                    text = ":".join("" if v is None else str(v) for v in (key.start, key.stop))
                    raise ValueError(f"layout[{text}:{step}]: only step 1 (or None) reads a row "
                                     "range")
            lo, hi, _ = slice(None if key.start is None else _int("start", key.start),
                              None if key.stop is None else _int("stop", key.stop)).indices(total)
            return self.read(lo, max(lo, hi))
        if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer)):
            raise TypeError(f"Layout indices must be an int or a slice lo:hi, found {_found(key)}")
        i = int(key)
        if not -total <= i < total:
            raise IndexError(f"row {i} is out of range for a dataset of {total} rows")
        if i < 0:
            i += total
        return self.read(i, i + 1)[0]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _core.Layout):
            return NotImplemented
        # The encoding holds the shards (paths, rows, snapshots), the dtype, the trailing shape
        # and the format options: all a layout is.
        return bool(self.encode() == other.encode())

    def __hash__(self) -> int:
        # Without the secrets: equal handles stand for equal credentials.
        return hash(self.encode(credentials=False))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_decode_layout, (self.encode(), self.manifest_status, self.manifest_state.value))

    @property
    def ndim(self) -> int:
        """The number of dimensions (``len(shape)``)."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements (the product of ``shape``), as numpy's."""
        return int(np.prod(self.shape, dtype=object))

    @property
    def itemsize(self) -> int:
        """The bytes of one element."""
        return self.dtype.itemsize

    @property
    def rows(self) -> list[int]:
        """Deprecated spelling of :attr:`shard_rows`."""
        warnings.warn("Layout.rows is deprecated; use Layout.shard_rows", DeprecationWarning,
                      stacklevel=2)
        return self.shard_rows

    def read(self, lo: int | None = None, hi: int | None = None) -> np.ndarray:
        """Reads rows [lo, hi) into a numpy array on the host (no Legate).

        ``lo`` defaults to 0 and ``hi`` to ``total_rows``. Bounds are row indexes
        in ``[0, total_rows]`` with ``lo <= hi``; unlike a slice, a negative
        bound, a bound past the end or ``lo > hi`` is refused (ValueError), never
        reinterpreted or clamped: ``read(total_rows - n)`` reads the last n rows.

        Raises:
            TypeError: a bound is not an int (a numpy integer is one; bool is not).
            ValueError: a bound is negative, past the end, or lo > hi.
            ShardReadError: reading failed; the message names the file and rows.
        """
        first, end = _row_bounds(self.total_rows, lo, hi)
        return super().read(first, end)

    def slice_rows(self, lo: int | None = None, hi: int | None = None) -> Layout:
        """Rows [lo, hi) as a Layout of their own, without opening a file: the shards the range
        covers, each a view of its file's rows, so that :func:`load` and :meth:`read` of it read
        only those rows. Bounds follow :meth:`read`'s rule (no negative or clamped bounds)."""
        first, end = _row_bounds(self.total_rows, lo, hi)
        return _made(super().slice_rows(first, end))

    def encode(self, credentials: bool = True) -> bytes:
        """The layout as bytes for shardload's Legate tasks (private; the format may change
        between versions). They carry the secrets its paths name by handle; with
        ``credentials=False`` they are left out (the layout's identity alone, for a hash or a
        token that is shown: decoded only where the handles are held)."""
        return super().encode(credentials)

    def describe(self, edge_shards: int = 3) -> str:
        """A summary for people, over several lines: format, shard count, dtype, shapes, size,
        and the rows of the first and last ``edge_shards`` shards. ``str(layout)`` is this
        summary with ``edge_shards=3``."""
        edge = _int("edge_shards", edge_shards)
        if edge < 0:
            raise ValueError(f"edge_shards: expected an int >= 0, found {edge}")
        return super().describe(edge)


def _made(made: _core.Layout) -> Layout:
    """The package's :class:`Layout` of a layout the binding made (discover, decode_layout,
    read_manifest, discover_once, slice_rows): the binding's copy constructor, called on an
    instance of the subclass; a :class:`Layout` is given back as it is."""
    if isinstance(made, Layout):
        return made
    layout = Layout.__new__(Layout)
    _core.Layout.__init__(layout, made)
    return layout
