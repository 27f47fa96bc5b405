"""The public functions, over the private binding ``shardload._core``."""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import logging
import math
import operator
import os
import signal
import sys
import threading
import time
import warnings
from typing import (TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, TypedDict, Union,
                    Unpack)

import numpy as np

if TYPE_CHECKING:
    import cupynumeric

from . import _core, _runtime

from ._errors import (Error, LayoutError, OutOfMemoryError, RuntimeStartError, ShardReadError,
                      SourceNotFoundError)

Layout = _core.Layout

logger = logging.getLogger("shardload")
logger.addHandler(logging.NullHandler())
# A load that takes longer than this logs its summary at INFO (DEBUG otherwise).
_SUMMARY_AFTER_S = 2.0

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
SourceLike = Union[PathLike, Sequence[PathLike]]
DTypeLike = Union[str, "np.dtype", type]

_INT64_MAX = 2**63 - 1
_PATH_TYPES = (str, bytes, os.PathLike)


def _layout_repr(self: Layout) -> str:
    return (f"<shardload.Layout format={self.format!r} shape={self.shape} dtype={self.dtype} "
            f"shards={self.num_shards}>")


def _layout_str(self: Layout) -> str:
    return self.describe()


def _layout_len(self: Layout) -> int:
    return self.total_rows


def _layout_getitem(self: Layout, key: object) -> np.ndarray:
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


def _layout_eq(self: Layout, other: object) -> bool:
    if not isinstance(other, Layout):
        return NotImplemented
    # The encoding holds the shards (paths, rows, snapshots), the dtype, the trailing shape
    # and the format options: all a layout is.
    return bool(self.encode() == other.encode())


def _layout_hash(self: Layout) -> int:
    return hash(self.encode())


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


def _decode_layout(encoded: bytes, manifest_status: str, manifest_state: str = "none") -> Layout:
    """Unpickles a Layout (``Layout.__reduce__``); the state is absent from older pickles."""
    return _core.decode_layout(encoded, manifest_status, manifest_state)


def _layout_reduce(self: Layout) -> tuple:
    return (_decode_layout, (self.encode(), self.manifest_status, self.manifest_state.value))


def _layout_rows(self: Layout) -> list[int]:
    warnings.warn("Layout.rows is deprecated; use Layout.shard_rows", DeprecationWarning,
                  stacklevel=2)
    return self.shard_rows


Layout.__repr__ = _layout_repr  # type: ignore[method-assign]
Layout.__str__ = _layout_str  # type: ignore[method-assign]
Layout.__len__ = _layout_len  # type: ignore[attr-defined]
Layout.__getitem__ = _layout_getitem  # type: ignore[attr-defined]
Layout.__eq__ = _layout_eq  # type: ignore[method-assign,assignment]
Layout.__hash__ = _layout_hash  # type: ignore[method-assign,assignment]
Layout.__reduce__ = _layout_reduce  # type: ignore[method-assign,assignment]
Layout.ndim = property(lambda self: len(self.shape),  # type: ignore[attr-defined]
                       doc="The number of dimensions (``len(shape)``).")
Layout.size = property(lambda self: int(np.prod(self.shape, dtype=object)),  # type: ignore
                       doc="The number of elements (the product of ``shape``), as numpy's.")
Layout.itemsize = property(lambda self: self.dtype.itemsize,  # type: ignore[attr-defined]
                           doc="The bytes of one element.")
Layout.rows = property(_layout_rows,  # type: ignore[attr-defined]
                       doc="Deprecated spelling of :attr:`shard_rows`.")
Layout.manifest_state = property(  # type: ignore[attr-defined]
    lambda self: ManifestState(self._manifest_state),
    doc="How discovery used the directory's manifest, as a :class:`ManifestState` (a str "
        "enum); ``manifest_status`` says the same for people, with the reason.")


# Arguments are checked here, before the binding: its conversions would
# truncate (1.9 -> 1), split strings ("12" -> (1, 2)) or fail with a signature
# dump that names no parameter.

def _found(value: object) -> str:
    # Redacted before it is cut short: a URL inside a wrong argument (a dict of sources, say).
    text = _core.redact_secrets(repr(value))
    if "\n" in text or isinstance(value, Layout):
        return type(value).__name__
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__} {text}"


def _int(name: str, value: object) -> int:
    """An int or numpy integer (anything with __index__), never a bool or a float."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected an int, found {_found(value)}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name}: expected an int, found {_found(value)}") from None


def _text(name: str, value: object) -> str | None:
    """None (not given) or a non-empty str; "" is refused rather than read as "not given"."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a str, found {_found(value)}")
    if not value:
        raise ValueError(f"{name}: expected a non-empty str, found ''; leave it out for the "
                         "default")
    return value


def _pattern(value: object) -> str | bytes | None:
    """None (not given) or a non-empty str or bytes (a file name pattern may hold bytes that
    are not UTF-8)."""
    if value is None:
        return None
    if not isinstance(value, (str, bytes)):
        raise TypeError(f"pattern: expected a str or bytes, found {_found(value)}")
    if not value:
        raise ValueError(f"pattern: expected a non-empty str or bytes, found {value!r}; leave it "
                         "out for the default")
    return value


# The options an s3:// URL takes in its query (Arrow's S3 URI options), which
# ``storage_options=`` spells as a dict.
def _with_storage_options(source: object, storage_options: object) -> object:
    """``source`` with ``storage_options`` added to the query of each s3:// URL in it
    (``s3://bucket/dir/?endpoint_override=host:port&scheme=http``), which configures the
    store for every object under it. TypeError for options that are not a dict of str keys
    and str / int / bool values; ValueError when the source names no s3:// URL."""
    if storage_options is None:
        return source
    if not isinstance(storage_options, dict):
        raise TypeError("storage_options: expected a dict of str keys and str values, found "
                        f"{_found(storage_options)}")
    for k, v in storage_options.items():
        if not isinstance(k, str) or not k:
            raise TypeError(f"storage_options: expected non-empty str keys, found {k!r}")
        if not isinstance(v, (str, int, bool)):
            # The type alone: the value may be a secret (secret_key's, session_token's).
            raise TypeError(f"storage_options[{k!r}]: expected a str, int or bool, found "
                            f"{type(v).__name__}")
    if not storage_options:
        return source
    from urllib.parse import urlencode

    query = urlencode({k: (str(v).lower() if isinstance(v, bool) else str(v))
                       for k, v in storage_options.items()})

    def one(path: object) -> object:
        if isinstance(path, str) and path.startswith("s3://"):
            return path + ("&" if "?" in path else "?") + query
        shown = _core.redact_secrets(os.fsdecode(path)) if isinstance(path, _PATH_TYPES) else path
        raise ValueError(f"storage_options: apply to s3:// URLs only, found {shown!r}")

    if isinstance(source, (list, tuple)):
        return [one(p) for p in source]
    return one(source)


def _source(value: object) -> object:
    # Type checks only: the value goes on to the binding unchanged, which
    # turns paths (str, bytes, os.PathLike) into the file system's bytes.
    if isinstance(value, _PATH_TYPES):
        return value
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if not isinstance(item, _PATH_TYPES):
                raise TypeError(f"source[{i}]: expected a str, bytes or os.PathLike path, "
                                f"found {_found(item)}")
        return value
    hint = "; pass a Layout to load(), or use it directly" if isinstance(value, Layout) else ""
    raise TypeError("source: expected a str, bytes or os.PathLike path or a list/tuple of them, "
                    f"found {_found(value)}{hint}")


def _dtype(value: object, name: str = "dtype") -> str | None:
    if value is None or isinstance(value, str):
        return _text(name, value)
    if isinstance(value, (np.dtype, type)):
        try:
            dt = np.dtype(value)  # type: ignore[call-overload]
        except TypeError:
            raise TypeError(f"{name}: {value!r} is not a numpy dtype") from None
        # A byte order travels only when spelled: numpy writes the machine's
        # own order as "=", which must not contradict a raw sidecar's order.
        return dt.str if dt.byteorder in "<>" else dt.name
    raise TypeError(f"{name}: expected a str, a numpy dtype or a numpy type such as "
                    f"np.float32, found {_found(value)}")


def _shape(value: object, name: str = "trailing_shape") -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        items: Sequence[object] = value
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        items = (value,)  # an int n is (n,), as in numpy
    else:
        raise TypeError(f"{name}: expected a tuple of ints (or one int), found {_found(value)}")
    dims = [_int(f"{name}[{i}]", d) for i, d in enumerate(items)]
    for i, d in enumerate(dims):
        if d < 0:
            raise ValueError(f"{name}[{i}]: expected a non-negative int, found {d}")
    return dims


def _count(name: str, value: object) -> int | None:
    if value is None:
        return None
    n = _int(name, value)
    if not 0 <= n <= _INT64_MAX:
        raise ValueError(f"{name}: expected an int in [0, 2**63), found {n}")
    return n


def _columns(value: object) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise TypeError(f"columns: expected a list of column names, found {_found(value)}; "
                        f"write [{value!r}]")
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"columns: expected a list of column names, found {_found(value)}")
    for i, c in enumerate(value):
        if not isinstance(c, str):
            raise TypeError(f"columns[{i}]: expected a str, found {_found(c)}")
    if not value:
        raise ValueError("columns: expected at least one column name, found []; leave it out "
                         "for every numeric column")
    return list(value)


def _text_list(name: str, value: object) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{name}: expected a list of str, found {_found(value)}")
    for i, c in enumerate(value):
        if not isinstance(c, str):
            raise TypeError(f"{name}[{i}]: expected a str, found {_found(c)}")
    if not value:
        raise ValueError(f"{name}: expected at least one str, found []; leave it out for the "
                         "default")
    return list(value)


def _number(name: str, value: object) -> float | None:
    # Numbers travel as float64; whether the dtype holds a fill value (1.5
    # or 300 for uint8) is the reader's check, which must see the value given.
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_, float, np.floating)):
        # A long double past float64's range would arrive as inf: refused, as an int that
        # float64 cannot hold is (inf written as such is taken).
        with np.errstate(over="ignore"):
            f = float(value)
        if math.isinf(f) and np.isfinite(value):
            raise ValueError(f"{name}: {value!s} is past a float64's range (it travels as a "
                             f"float64, in which it would be {f})")
        return f
    if isinstance(value, (int, np.integer)):
        n = int(value)
        try:
            f = float(n)
        except OverflowError:
            f = float("inf")
        if f != n:
            raise ValueError(f"{name}: {n} cannot be passed exactly (it travels as a float64, "
                             "which holds every int only up to 2**53)")
        return f
    raise TypeError(f"{name}: expected a bool, int or float, found {_found(value)}")


def _format(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"format: expected a str, found {_found(value)}")
    if not value:
        raise ValueError("format: expected a format name, found ''")
    return value


def _bool(name: str, value: object) -> bool:
    """A bool or numpy bool; anything else (0, 1, "yes", None) is a TypeError."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a bool, found {_found(value)}")
    return bool(value)


def _renamed(where: str, deprecated: dict[str, Any], renames: dict[str, str],
             current: dict[str, Any], stacklevel: int = 3) -> dict[str, Any]:
    """Takes the old spellings of renamed keywords (``renames``: old -> new) from
    ``deprecated``, the keywords a function got beyond its own, into ``current`` (new -> value,
    None when not given), with a DeprecationWarning each, attributed to the caller
    ``stacklevel`` frames up. An unknown keyword is the TypeError Python gives, and an old and
    a new spelling together a TypeError."""
    for old, value in deprecated.items():
        new = renames.get(old)
        if new is None:
            raise TypeError(f"{where}() got an unexpected keyword argument {old!r}")
        if current.get(new) is not None:
            raise TypeError(f"{where}: {old}= is the deprecated spelling of {new}=; pass "
                            f"{new}= only")
        warnings.warn(f"{where}: {old}= is deprecated; use {new}=", DeprecationWarning,
                      stacklevel=stacklevel)
        current[new] = value
    return current


# The formats whose columns are decoded into a type of the caller's choice (astype=).
_COLUMNAR = ("parquet", "arrow")
# The format options are the C++ option table's (shardload/format.hpp), checked by their
# kind; a name of the table's gets the checks of its kind unless named here (messages that
# speak of what the option holds).
_KIND_CHECKS: dict[str, Callable[[str, object], object]] = {
    "dtype": lambda name, value: _dtype(value, name),
    "dims": lambda name, value: _shape(value, name),
    "count": _count,
    "text": _text,
    "text_list": _text_list,
    "number": _number,
    "flag": _bool,
}
_NAMED_CHECKS: dict[str, Callable[[str, object], object]] = {
    "columns": lambda name, value: _columns(value),
}
_FORMAT_CHECKS = {name: _NAMED_CHECKS.get(name, _KIND_CHECKS[kind])
                  for name, kind in _core.format_option_rows()}
# The discovery option table's rows: each one's check and its value when left out (a flag's
# False; None otherwise, which the check keeps as the default).
_DISCOVERY_CHECKS = {name: (_KIND_CHECKS[kind], False if kind == "flag" else None)
                     for name, kind in _core.discover_option_rows()}
# discover()'s options, as every entry point that discovers takes them.
_DISCOVER_OPTIONS = ("pattern", "format", *_FORMAT_CHECKS, *_DISCOVERY_CHECKS)
_OPTION_RENAMES = {"shape": "trailing_shape"}


class DiscoverOptions(TypedDict, total=False):
    """The keywords of :func:`discover`, which :func:`load`, :func:`batches`, :func:`index`
    and :func:`discover_once` take as well (``**options``); see :func:`discover`."""

    pattern: str | bytes | None
    format: str
    dtype: DTypeLike | None
    trailing_shape: Sequence[int] | int | None
    header_bytes: int | None
    footer_bytes: int | None
    dataset: str | None
    columns: Sequence[str] | None
    fill_value: float | None
    trust_manifest: bool
    probe_threads: int | None


def _passed(given: Mapping[str, object], format: object) -> dict[str, object]:
    """``given`` with None for what stands for the default: format "auto", a flag False."""
    passed = {**given, "format": None if format == "auto" else format}
    for name, (_, default) in _DISCOVERY_CHECKS.items():
        if default is False:
            passed[name] = given.get(name) or None
    return passed


@dataclasses.dataclass(frozen=True)
class _Options:
    """discover()'s options, checked once (:func:`_options`), for every entry point that
    discovers: discover, load, batches, index and discover_once."""

    pattern: str | bytes | None
    format: str
    values: dict[str, object]  # the format options by the table's names; None: the default
    discovery: dict[str, object]  # the discovery options by their table's names, as values
    given: tuple[str, ...]  # the options passed, in _DISCOVER_OPTIONS order

    @property
    def trust_manifest(self) -> bool:
        return bool(self.discovery.get("trust_manifest"))

    @property
    def dtype(self) -> str | None:
        return self.values.get("dtype")  # type: ignore[return-value]

    def format_args(self, dtype: str | None = None) -> dict[str, object]:
        """The format options as the bindings take them; ``dtype`` in place of the option's
        (the type parquet/arrow columns are decoded into)."""
        args: dict[str, object] = {"format": self.format, **self.values}
        if dtype is not None:
            args["dtype"] = dtype
        return args


def _options(where: str, options: Mapping[str, object], *, layout: bool = False) -> _Options:
    """Checks discover()'s options for the entry point ``where`` (``options``: the keywords it
    got beyond its own): the same types, values and messages for all of them. Old spellings
    (``shape=`` for ``trailing_shape=``) are taken with a DeprecationWarning; any other name
    is the TypeError Python gives. With ``layout`` (the source is a Layout) any option passed
    is a TypeError, whatever its value."""
    given: dict[str, Any] = dict(options)
    deprecated = {k: given.pop(k) for k in list(given) if k not in _DISCOVER_OPTIONS}
    if deprecated:
        # The caller of the entry point that called this.
        given = _renamed(where, deprecated, _OPTION_RENAMES, given, stacklevel=4)
    pattern = given.get("pattern")
    format = given.get("format", "auto")
    if layout:
        passed = _passed(given, format)
        named = [n for n in _DISCOVER_OPTIONS if passed.get(n) is not None]
        if named:
            raise TypeError(f"{where}: {', '.join(named)} cannot be passed with a Layout, "
                            "which keeps the options it was discovered with; pass them to "
                            "discover()")
    checked_pattern = _pattern(pattern)
    checked_format = _format(format)
    values = {name: check(name, given.get(name)) for name, check in _FORMAT_CHECKS.items()}
    discovery = {name: check(name, given.get(name, default))
                 for name, (check, default) in _DISCOVERY_CHECKS.items()}
    passed = _passed({**given, **discovery}, format)
    return _Options(pattern=checked_pattern, format=checked_format, values=values,
                    discovery=discovery,
                    given=tuple(n for n in _DISCOVER_OPTIONS if passed.get(n) is not None))


def _dtype_text(dt: np.dtype) -> str:
    return dt.str if dt.byteorder in "<>" else dt.name


# The names format="auto" takes for parquet and arrow files, and for the others: the format
# table's (src/readers/formats.cc), so that a format added there is counted here too.
_COLUMNAR_EXTENSIONS = tuple(e for row in _core.format_rows() if row["name"] in _COLUMNAR
                             for e in row["extensions"])
_OTHER_EXTENSIONS = tuple(e for row in _core.format_rows() if row["name"] not in _COLUMNAR
                          for e in row["extensions"])


def _named_columnar(source: object, pattern: str | bytes | None) -> bool:
    """Whether format="auto" will find parquet or arrow files by their names, from the names
    alone (no file is opened): a directory's entries when no pattern is given (some columnar,
    none of another format), else the source's first path."""
    try:
        if pattern is None and isinstance(source, _PATH_TYPES) and os.path.isdir(source):
            names = [os.fsdecode(n) for n in os.listdir(source)]
            return any(n.endswith(_COLUMNAR_EXTENSIONS) for n in names) and not any(
                n.endswith(_OTHER_EXTENSIONS) for n in names)
        paths = _core.resolve(source, pattern)
    except (Error, ValueError, OSError):
        return False  # discovery itself gives the error
    return bool(paths) and paths[0].rstrip("/").endswith(_COLUMNAR_EXTENSIONS)


def _columnar_for_cast(discover_with: Callable[[_Options, str | None], Layout],
                       options: _Options, astype: np.dtype, *,
                       stored: Layout | None = None) -> Layout:
    """The parquet/arrow layout that gives load() and batches() ``astype``, with numpy's
    ``astype`` meaning for every format: columns of one stored type that convert to
    ``astype`` without loss (``np.can_cast(..., "safe")``) are decoded straight into it, the
    same values in one pass; others are read as stored and cast after, as numpy casts
    (float to int truncates). Columns of different types have no stored type of their own:
    they are decoded into ``astype``, and a value that does not convert exactly is an error."""
    if stored is None:
        try:
            stored = discover_with(options, None)
        except LayoutError:
            # Columns of different types (or a fault the retry reports as well).
            return discover_with(options, _dtype_text(astype))
    if stored.dtype != astype and np.can_cast(stored.dtype, astype, "safe"):
        return discover_with(options, _dtype_text(astype))
    return stored


def _decoded(discover_with: Callable[[_Options, str | None], Layout], options: _Options,
             astype: np.dtype | None, where: str, *, cast_after: bool,
             source: object) -> Layout:
    """Discovery with ``astype`` decoded into where the format decodes into a chosen type
    (parquet, arrow): ``discover_with(options, dtype)`` discovers with ``dtype`` in place of
    the dtype option. Elsewhere ``astype`` is for the caller to cast after the read
    (``cast_after``), or a ValueError before anything is read (discover's)."""
    if options.dtype is not None and options.format in _COLUMNAR:
        if astype is not None:
            raise TypeError(f"{where}: dtype= is the deprecated spelling of astype= for "
                            f"{options.format}; pass astype= only")
        warnings.warn(f"{where}: dtype= for {options.format} is deprecated; use astype=",
                      DeprecationWarning, stacklevel=3)
    if astype is None:
        layout = discover_with(options, None)
        if options.dtype is not None and options.format == "auto" and \
                layout.format in _COLUMNAR:
            warnings.warn(f"{where}: dtype= for {layout.format} is deprecated; use astype=",
                          DeprecationWarning, stacklevel=3)
        return layout
    if options.format in _COLUMNAR or (options.format == "auto" and
                                       _named_columnar(source, options.pattern)):
        if options.dtype is not None:
            raise TypeError(f"{where}: dtype= is the deprecated spelling of astype= for "
                            "parquet and arrow; pass astype= only")
        if cast_after:
            return _columnar_for_cast(discover_with, options, astype)
        return discover_with(options, _dtype_text(astype))
    if options.format != "auto" and not cast_after:
        raise ValueError(f"{where}: astype= is the type parquet and arrow columns are "
                         f"decoded into; {options.format} files give their own dtype (pass "
                         "astype= to load() or batches() to cast the array)")
    layout = discover_with(options, None)
    if layout.format in _COLUMNAR:
        # Told by the files' first bytes, not their names.
        return _columnar_for_cast(discover_with,
                                  dataclasses.replace(options, format=layout.format), astype,
                                  stored=layout)
    elif not cast_after:
        raise ValueError(f"{where}: astype= is the type parquet and arrow columns are "
                         f"decoded into; these are {layout.format} files, which give their "
                         "own dtype (pass astype= to load() or batches() to cast the array)")
    return layout


def _overdecompose(value: object) -> int:
    k = _int("overdecompose", value)
    if k < 1:
        raise ValueError(f"overdecompose: expected an int >= 1, found {k}")
    # Every K past the plan's cap gives the same plan, so K need not fit int64.
    return min(k, _INT64_MAX)


_core_read = Layout.read


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


# The element types a Legate store (legate.core.types) and so a cuPyNumeric array can hold.
# numpy's long double types (float128, complex256 on x86-64) have none: a cast to them would
# fail inside cuPyNumeric, after the whole load.
_LEGATE_DTYPES: tuple[np.dtype, ...] = tuple(np.dtype(t) for t in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128"))


def _legate_dtypes_text() -> str:
    return ", ".join(str(t) for t in _LEGATE_DTYPES)


def _astype(value: object, *, legate: bool = True) -> np.dtype | None:
    """``astype=``: a numeric or bool numpy dtype in native byte order; with ``legate`` also
    one a Legate store can hold (the front ends that fill host memory take numpy's long
    double types too)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, np.dtype, type)):
        raise TypeError(f"astype: expected a str, a numpy dtype or a numpy type such as "
                        f"np.float32, found {_found(value)}")
    try:
        dt = np.dtype(value)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(f"astype: {value!r} is not a numpy dtype") from None
    if dt.fields is not None or dt.subdtype is not None or dt.kind not in "biufc":
        raise ValueError(f"astype: {dt} is not a numeric or bool dtype")
    if not dt.isnative:
        raise ValueError(f"astype: {dt.str} is not in the machine's byte order; arrays in "
                         f"memory are native (pass {dt.newbyteorder('=')})")
    if legate and dt not in _LEGATE_DTYPES:
        raise ValueError(f"astype: {dt} has no Legate type, so cuPyNumeric cannot hold it; "
                         f"astype takes {_legate_dtypes_text()}")
    return dt


def _layout_read(self: Layout, lo: int | None = None, hi: int | None = None) -> np.ndarray:
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
    return _core_read(self, first, end)


_core_slice_rows = Layout.slice_rows


def _layout_slice_rows(self: Layout, lo: int | None = None, hi: int | None = None) -> Layout:
    """Rows [lo, hi) as a Layout of their own, without opening a file: the shards the range
    covers, each a view of its file's rows, so that :func:`load` and :meth:`read` of it read
    only those rows. Bounds follow :meth:`read`'s rule (no negative or clamped bounds)."""
    first, end = _row_bounds(self.total_rows, lo, hi)
    return _core_slice_rows(self, first, end)


Layout.slice_rows = _layout_slice_rows  # type: ignore[method-assign]
Layout.read = _layout_read  # type: ignore[method-assign]

Layout.__doc__ = """A discovered, validated dataset: its shards in order, their rows, the dtype
and the shape, and a snapshot (size, mtime) of every file. Made by :func:`discover`; pass it
to :func:`load`, or read rows on the host with :meth:`read`. Immutable.

It reads like an array's description: ``shape``, ``dtype``, ``ndim``, ``size``, ``itemsize``,
``nbytes``, and ``len(layout)`` (the rows). ``layout[lo:hi]`` reads rows on the host as
``layout.read(lo, hi)`` (numpy's rules for negative and clipped bounds; step 1 only) and
``layout[i]`` reads row i. ``repr()`` is one line; ``str()`` is :meth:`describe`. Two
layouts are equal when they hold the same shards (paths, rows, file snapshots), dtype,
trailing shape and format options. A Layout pickles (to pass it to another process)."""

_LAYOUT_DOCS = {
    "format": "The format of the shards: ``'npy'``, ``'raw'``, ``'hdf5'``, ``'parquet'``, "
              "``'arrow'``, ``'zarr'`` or ``'npz'`` (never ``'auto'``), or the name of a "
              "reader registered with :func:`register_reader`.",
    "dtype": "The numpy dtype of the array, in native byte order.",
    "shape": "The shape of the whole array: ``(total_rows, *trailing_shape)``.",
    "trailing_shape": "The shape of one row (``shape[1:]``), the same in every shard; ``()`` "
                      "for 1-D data.",
    "paths": "The shard paths in order, as str (names that are not UTF-8 as os.fsdecode "
             "gives them): the URLs as given, with their credentials, to be opened; "
             "``print(layout)``, ``describe()`` and every message show them redacted "
             "(:func:`shardload.redact_secrets`).",
    "shard_rows": "The rows of each shard, in order (a list of int; a shard may have 0 "
                  "rows).",
    "offsets": "The first global row of each shard, and the total last: ``num_shards + 1`` "
               "ints from 0 to ``total_rows``.",
    "total_rows": "The number of rows of the array (``shape[0]``).",
    "nbytes": "The size of the array in bytes (``total_rows`` x the bytes of one row).",
    "num_shards": "The number of shards.",
    "manifest_status": "How discovery used the directory's manifest, for people: "
                       "``manifest: used ...``, ``manifest: stale because ...``, "
                       "``manifest: absent``, ``manifest: not used: ...``; empty where no "
                       "directory was discovered (see docs/manifest.md). URLs in it have "
                       "their secrets redacted.",
}


def _document_layout() -> None:
    for name, doc in _LAYOUT_DOCS.items():
        prop = Layout.__dict__[name]
        # pybind11's properties are plain property objects: rebuild each with its doc.
        setattr(Layout, name, property(prop.fget, doc=doc))
    encode = Layout.encode
    describe = Layout.describe

    def _encode(self: Layout) -> bytes:
        """The layout as bytes for shardload's Legate tasks (private; the format may change
        between versions)."""
        return encode(self)

    def _describe(self: Layout, edge_shards: int = 3) -> str:
        """A summary for people, over several lines: format, shard count, dtype, shapes, size,
        and the rows of the first and last ``edge_shards`` shards. ``str(layout)`` is this
        summary with ``edge_shards=3``."""
        edge = _int("edge_shards", edge_shards)
        if edge < 0:
            raise ValueError(f"edge_shards: expected an int >= 0, found {edge}")
        return describe(self, edge)

    Layout.encode = _encode  # type: ignore[method-assign]
    Layout.describe = _describe  # type: ignore[method-assign]


_document_layout()


def discover(
    source: SourceLike,
    *,
    astype: DTypeLike | None = None,
    storage_options: dict[str, str] | None = None,
    **options: Unpack[DiscoverOptions],
) -> Layout:
    """Finds and validates the shards of a dataset without reading their data.

    Every argument is checked before any file is opened: a wrong type is a
    TypeError naming the parameter (a numpy integer counts as an int, a bool
    does not; nothing is truncated or split), a bad value a ValueError. The
    options left out (None) take their defaults; an empty string or list is
    refused rather than read as "left out".

    Args:
        source: a directory of numbered shards (default ``shard_0000.npy`` ...),
            a numbered pattern such as ``"dir/part-{:05d}.npy"``, a glob such as
            ``"dir/*.npy"`` (ordered naturally), or an ordered list (or tuple)
            of paths. Paths are str, bytes or os.PathLike, converted with
            os.fsencode, so names that are not UTF-8 work (``layout.paths``
            gives them back as os.fsdecode does). An existing directory or
            file is taken as such even when its name holds ``{`` ``*`` ``?``
            or ``[``; a path holding a NUL character is refused (ValueError).
            Each may also be a URL: ``s3://bucket/prefix/...`` (listed for a
            directory or glob) or ``http(s)://host/...`` (a directory, ending in
            ``/``, through its manifest, since HTTP has no listing); see
            docs/object_storage.md.
        pattern: the numbering of the files in a directory source (default
            ``shard_{:04d}`` with the format's extension).
        format: ``"auto"`` (from the extension or the store's metadata),
            ``"npy"``, ``"raw"``, ``"hdf5"``, ``"parquet"``, ``"arrow"``, ``"zarr"``,
            ``"npz"``.
        dtype: raw: the element type stored in the files. A str
            (``"float32"``, ``">f4"``), a numpy dtype or a numpy type
            (``np.float32``); a numpy dtype states a byte order only when it
            is not the machine's (``np.dtype(">f4")``). The other formats
            give their own (a ``dtype`` they are given is refused); for
            parquet/arrow ``dtype`` is a deprecated spelling of ``astype``.
        trailing_shape: raw: the shape of one row, a tuple of ints (``()`` for
            1-D data; an int n means ``(n,)``). ``shape=`` is its deprecated
            spelling.
        header_bytes: raw: bytes to skip at the start of each file (an int >= 0).
        footer_bytes: raw: bytes to skip at the end of each file (an int >= 0), such as
            the record length that ends a Fortran unformatted file's record
            (``header_bytes=4, footer_bytes=4`` reads one such record per file).
        dataset: hdf5: the dataset in each file; zarr: the array in each store;
            npz: the array in each archive (default: its only one).
        columns: parquet/arrow: a list of column names (default: every numeric
            one); a bare str is refused, not split into letters.
        fill_value: parquet/arrow: the value for nulls (default: nulls are an
            error); a bool, int or float. It travels as a float64, so an int
            beyond 2**53 that float64 cannot hold exactly is refused; whether
            the dtype (after ``astype``) holds it the reader checks: 1.5 or 300
            for uint8 is refused, and so is a finite value that would turn inf
            (``1e300`` for float32, ``70000`` for float16); a float dtype may
            round it, and takes ``inf``, ``-inf`` and ``nan`` as written.
        trust_manifest: a directory source with a manifest (``DIR/shardload.manifest``,
            written by :func:`shardload.index`) is discovered from it when it was made with
            the same format options and every shard still matches it (npy, raw, Zarr: the
            header or metadata read and compared; HDF5, Parquet, Arrow, npz: size and times,
            one stat per file); else the files are probed and ``layout.manifest_status`` says
            why. True takes the manifest without touching any shard at all. See
            docs/manifest.md.
        probe_threads: threads probing the shards (an int from 0 to 1024; default 0: several
            for many npy or raw shards on a local file system, else one). More help on a
            network file system, where each probe waits on the server; the layout and the
            first bad shard reported are the same whatever the count.
        astype: parquet/arrow only: the type the columns are decoded into (the layout's
            dtype); numeric, native, one Legate has (see :func:`load`). For the other
            formats the files give the dtype, and ``astype`` is a ValueError here (pass it to
            :func:`load` or :func:`batches`, which cast the array).
        storage_options: object storage: options added to the query of each ``s3://`` URL
            in the source (Arrow's S3 URI options: ``endpoint_override``, ``scheme``,
            ``region``, ...), e.g. ``{"endpoint_override": "127.0.0.1:9000", "scheme":
            "http"}``; credentials come from the AWS environment and credentials chain.
            Every format (npy, raw, HDF5, Parquet, Arrow, Zarr, npz) is read from
            ``s3://`` and ``http(s)://`` URLs (see docs/object_storage.md).

    Returns:
        The layout: shard paths, rows per shard, dtype, shape, byte count.
        ``layout.read(lo, hi)`` reads rows [lo, hi) into a numpy array on the
        host (no Legate) and raises ShardReadError when reading fails.

    Raises:
        TypeError: an argument has the wrong type; the message names it.
        ValueError: an argument has a bad value (unknown format or dtype,
            negative size, empty string).
        LayoutError: the source or one of its files is not a valid dataset;
            the message names the file and what was expected and found.
    """
    source = _with_storage_options(_source(source), storage_options)
    checked = _options("discover", options)
    return _decoded(lambda o, dt: _discover(source, o, dt), checked, _astype(astype),
                    "discover", cast_after=False, source=source)


def _discover(source: object, options: _Options, dtype: str | None = None) -> Layout:
    """discover() of checked options in this process; ``dtype`` as in
    :meth:`_Options.format_args`."""
    return _core.discover(source, options.pattern, options.format_args(dtype),
                          options.discovery)


# Realm installs a SIGINT handler that prints a backtrace and aborts the
# process (Legate asks for it through REALM_BACKTRACE), so Ctrl-C would kill
# a Python session even while it idles. shardload gives SIGINT back to the
# handler Python had, once, when it first sees the runtime started; the
# freeze-on-error debugging modes, which need Realm's handler, keep it.
_FREEZE_VARIABLES = ("REALM_FREEZE_ON_ERROR", "LEGION_FREEZE_ON_ERROR")
_runtime_ready = False


def _import_h5py_first() -> None:
    """Imports h5py, when it is installed, before cuPyNumeric starts.

    cuPyNumeric loads its library with RTLD_GLOBAL, which puts Legate's own HDF5 into the
    process's global symbol scope; an h5py imported after that binds to that HDF5 instead of
    its own and fails ("ValueError: Not a datatype"). Imported first, h5py keeps its own, so
    ``import h5py`` after ``shardload.load`` works. Nothing can be done once cuPyNumeric was
    imported before shardload started it: then h5py must be imported before cuPyNumeric.
    """
    if "h5py" in sys.modules or "cupynumeric" in sys.modules:
        return
    if importlib.util.find_spec("h5py") is None:
        return
    try:
        import h5py  # noqa: F401
    except Exception as e:  # a broken h5py must not stop a load that does not need it
        logger.debug("importing h5py before cuPyNumeric failed: %r", e)


def _import_cupynumeric() -> None:
    """Starts the Legate runtime (cuPyNumeric starts it on import). A start that fails raises
    one RuntimeStartError of a few lines, not Legate's report of a hundred lines and more."""
    try:
        with _runtime.held_start_output():
            import cupynumeric  # noqa: F401
    except Exception as e:
        raise RuntimeStartError(_runtime.start_failure(e), str(e)) from None


def _start_runtime() -> None:
    global _runtime_ready
    if _runtime_ready:
        return
    _require_legate("starting Legate")
    _import_h5py_first()
    previous = signal.getsignal(signal.SIGINT)
    if previous is None or any(os.environ.get(v, "0") not in ("", "0")
                               for v in _FREEZE_VARIABLES):
        _import_cupynumeric()
        _runtime_ready = True
        return
    # While the runtime starts, a Ctrl-C is held back: noted by a handler
    # that does not interrupt the import, or left pending by the mask (which
    # the runtime's threads inherit, so they never take SIGINT later either),
    # then delivered to the restored handler once the runtime is up.
    noted: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        _import_cupynumeric()
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    _runtime_ready = True
    if noted:
        signal.raise_signal(signal.SIGINT)


# How the usual launchers (Open MPI's mpirun, MPICH / PMI, Slurm's srun, MVAPICH) tell a process
# how many processes its job has. Seen with a value above 1, the runtime is asked for its ranks.
_JOB_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS",
                       "MV2_COMM_WORLD_SIZE")


def _job_ranks() -> int:
    """The number of Legate ranks of this job. A process that no launcher started as one of
    several is alone: the runtime is not started to ask."""
    if not any(os.environ.get(v, "").strip() not in ("", "0", "1") for v in _JOB_SIZE_VARIABLES):
        return 1
    _start_runtime()
    from legate.core import get_legate_runtime

    return int(get_legate_runtime().node_count)


def _discover_for_job(source: object, options: _Options, dtype: str | None = None) -> Layout:
    """discover() in a process of its own; discover_once() on several ranks, so that one rank
    touches the files and every rank gets the same layout, or the same error (ranks that each
    discovered could disagree, one raising while the others went on into the launch).
    ``dtype`` as in :meth:`_Options.format_args`."""
    source = _source(source)
    if isinstance(source, (str, bytes, os.PathLike)) and _job_ranks() > 1:
        from ._manifest import _discover_once

        return _discover_once(source, options, dtype)
    return _discover(source, options, dtype)


def _require_legate(what: str) -> None:
    """Refuses a call that runs under Legate where the ``legate`` extra is not installed, with
    an ImportError naming the call and the extra (instead of a loader error about liblegate)."""
    if not _runtime.legate_installed():
        raise ImportError(f"{what} {_runtime.LEGATE_MISSING}", name="legate")


def _check_thread(what: str) -> None:
    """Refuses a call from a thread other than the main one, and one without Legate installed;
    ``what`` names the call (each Legate entry point calls this first)."""
    _require_legate(what)
    current = threading.current_thread()
    if current is not threading.main_thread():
        raise RuntimeError(
            f"{what} was called from thread {current.name!r}; it works only in the main "
            "thread: Legate takes launches only from the thread that started its runtime, and "
            "elsewhere it aborts the process (discover() and Layout.read() work in any thread)")


def _check_legate_dims(layout: Layout) -> None:
    """Refuses a layout of more dimensions than a Legate array can have, before the runtime
    starts: the launchers' own check (``shardload::check_legate_dims``), so that the message
    is theirs and no Legate error report comes first. Host reads (:meth:`Layout.read`) take
    any number of dimensions."""
    from . import _legate

    if len(layout.shape) > _legate.MAX_DIMS:
        _legate.check_layout_dims(layout)  # raises LayoutError


def _check_shape_dims(shape: Sequence[int], what: str, *, write: bool = False) -> None:
    """:func:`_check_legate_dims` for an array's shape; ``what`` names the array. A
    ValueError with ``write``, else a LayoutError."""
    from . import _legate

    if len(shape) > _legate.MAX_DIMS:
        _legate.check_dims([int(d) for d in shape], what, write)


@dataclasses.dataclass(frozen=True)
class LoadInfo:
    """What a load did, returned by ``load(..., info=True)``.

    The plan: ``target`` (``"GPU"``, ``"OMP"`` or ``"CPU"``), ``processors`` (P),
    ``overdecompose`` (K), ``tile_rows`` and ``tiles`` (the launch). The size: ``total_rows``
    and ``bytes`` of the array. The times, in seconds of the wall clock:

    - ``discovery_s``: finding and checking the shards (0.0 when a Layout was passed);
    - ``startup_s``: starting the Legate runtime (0.0 after the first load);
    - ``launch_s``: from the call into the adapter to the launch (planning, the memory check,
      creating the array);
    - ``fill_s``: from the launch until every tile is filled (the load waits for every tile's
      error record);
    - ``total_s``: the whole call, argument checks included.

    ``gb_per_s`` is ``bytes / 1e9 / total_s``: the whole call, as for :class:`SaveInfo`.

    ``remote_retries``: requests to object storage (``s3://``) that were retried during the
    call, discovery and fill, after a 5xx, a SlowDown, a reset connection or a timeout (see
    docs/object_storage.md); counted in this process. 0 for local files.
    """

    target: str
    processors: int
    overdecompose: int
    tile_rows: int
    tiles: int
    total_rows: int
    bytes: int
    discovery_s: float
    startup_s: float
    launch_s: float
    fill_s: float
    total_s: float
    remote_retries: int = 0

    @property
    def gb_per_s(self) -> float:
        """Bytes per second of the whole call (``total_s``), in GB (1e9 bytes)."""
        return self.bytes / 1e9 / self.total_s if self.total_s > 0 else 0.0

    @property
    def rows(self) -> int:
        """Deprecated spelling of :attr:`total_rows`."""
        warnings.warn("LoadInfo.rows is deprecated; use LoadInfo.total_rows",
                      DeprecationWarning, stacklevel=2)
        return self.total_rows


@dataclasses.dataclass(frozen=True)
class LoadProgress:
    """One report to ``load(..., progress=callback)``, at the end of a stage.

    ``stage`` is ``"discovered"`` (the shards are found and checked), ``"started"`` (the
    runtime is up; also on loads after the first), ``"launching"`` (the launch is about to be
    submitted) or ``"filled"`` (every tile is filled). ``tiles_done`` of ``tiles`` and
    ``bytes_done`` of ``bytes`` say how far the data is; ``tiles`` is None until the plan is
    known, which is only when the load returns from Legate. ``elapsed_s`` counts from the
    call.

    Legate gives the caller no signal as a tile completes (the launch is one operation that
    returns when all of its tasks have finished), so ``tiles_done`` and ``bytes_done`` go
    from 0 to all at once, at ``"filled"``: progress is reported at stage boundaries only.
    """

    stage: str
    tiles_done: int
    tiles: Optional[int]
    bytes_done: int
    bytes: int
    elapsed_s: float


ProgressCallback = Callable[[LoadProgress], object]



def _reader_options(where: str, reader: str, source: object, given: dict[str, Any],
                    storage_options: object) -> dict[str, Any]:
    """The discovery options of ``reader=NAME``: a Python reader is a registered format, so
    reader=NAME is format=NAME, and a directory source without a pattern means the reader's
    numbered files. Only ``pattern`` may come with it (TypeError naming the others)."""
    from . import _readers

    found = _readers._reader(reader)
    passed = [n for n in given if n != "pattern"]
    passed += [name for name, value in (("storage_options", storage_options),
                                        ("a Layout", isinstance(source, Layout) or None))
               if value is not None]
    if passed:
        raise TypeError(f"{where}: {', '.join(passed)} cannot be passed with reader=, whose "
                        "functions say what the files hold")
    pattern = _readers._pattern(source, given.get("pattern"), found)
    return {"format": found.name, **({} if pattern is None else {"pattern": pattern})}


def load(
    source: SourceLike | Layout,
    *,
    overdecompose: int = 1,
    row_range: "tuple[int | None, int | None] | slice | None" = None,
    astype: DTypeLike | None = None,
    info: bool = False,
    progress: ProgressCallback | None = None,
    reader: str | None = None,
    storage_options: dict[str, str] | None = None,
    **options: Unpack[DiscoverOptions],
) -> "cupynumeric.ndarray | tuple[cupynumeric.ndarray, LoadInfo]":
    """Loads a sharded dataset into one distributed ``cupynumeric.ndarray``.

    The source is discovered and validated first (see :func:`discover`, whose
    keyword arguments this function shares and checks the same way), or
    passed as a :class:`Layout`, which carries the options it was discovered
    with: passing any of them with a Layout is a TypeError. The output is
    allocated once with its final shape and dtype, split along axis 0 into
    about ``overdecompose`` tiles per processor (GPUs if any, else OpenMP,
    else CPUs), and filled by one parallel launch in which each tile reads
    only the slices of the shards it covers.

    Call it from the main thread (Legate launches only from the thread that
    started its runtime). The first call starts the runtime and gives SIGINT
    back to Python's handler: a Ctrl-C during a load raises
    KeyboardInterrupt when the load has finished (a launch cannot be
    cancelled), and one while idle raises it at once, as without Legate.

    Args:
        source: a directory, numbered pattern, glob, list of paths, or Layout.
        overdecompose: K, an int >= 1 (not a bool or a float); tiles =
            ceil(rows / ceil(rows / parts)) with parts = min(K, 256) * P, at
            most max(P, 65536) (see "The read plan" in docs/design.md), so any K
            gives a bounded launch.
        options: discover()'s keywords (:class:`DiscoverOptions`: pattern, format, the format
            and discovery options) and storage_options: as for :func:`discover`.
        row_range: load only rows [lo, hi): a pair ``(lo, hi)`` or a slice ``lo:hi`` (step
            None or 1; None for a default bound), under :meth:`Layout.read`'s rule: bounds
            in ``[0, total_rows]``, ``lo <= hi``, never negative or clamped (ValueError).
            Only the shards the range covers are opened and only those rows read.
            ``rows=`` is its deprecated spelling.
        astype: the dtype of the result, as ``ndarray.astype`` / h5py's ``astype`` cast
            (numpy casting rules, e.g. float to int truncates), for every format.
            Parquet/arrow columns that convert to it without loss are decoded straight into
            it (when the source is not a Layout); columns of different types, which have no
            stored dtype of their own, are decoded into it, and a value that does not
            convert exactly is then an error; everything else is cast after the read. A numeric dtype
            Legate has, native byte order: bool, int8-64, uint8-64, float16/32/64,
            complex64/128 (``float128`` is refused before anything is read). ``dtype``
            is the type stored in raw files.
        info: True to return ``(array, LoadInfo)``: the plan, the time of
            each stage, the bytes and GB/s (see :class:`LoadInfo`).
        reader: the name of a Python reader (:func:`register_reader`), the same as
            ``format=name`` but that a directory source without a pattern means the
            reader's numbered files: the files are read by its functions, in Legate tasks.
            Of the discovery options only ``pattern`` applies with it, and the source is
            not a Layout (TypeError otherwise).
        progress: a callable taking one :class:`LoadProgress`, called in
            this thread at each stage boundary (discovered, started,
            launching, filled). Legate reports no tile as it completes, so
            there is no report between "launching" and "filled": the filled
            fraction jumps from 0 to 1. An exception it raises propagates;
            raised before "filled", it stops the load before the launch (at
            "launching" the launch is not yet submitted).

    The ``shardload`` logger (:mod:`logging`) gets a DEBUG record per stage
    and a summary (shape, size, seconds, GB/s), at INFO when the load took
    more than 2 seconds, else at DEBUG.

    Returns:
        The array; it lives in Legate's memory and joins cuPyNumeric math.
        With ``info=True``, the tuple ``(array, LoadInfo)``.

    Raises:
        TypeError: an argument has the wrong type, or options were passed
            with a Layout; the message names them.
        ValueError: an argument has a bad value (see :func:`discover`), or K < 1.
        RuntimeError: called from a thread other than the main thread.
        LayoutError: the files do not form a valid dataset.
        ShardReadError: reading failed in some tile (I/O error, a file changed
            since discovery, damaged or null data); the message names the file
            and the rows.
        OutOfMemoryError: the dataset is larger than the memory Legate has for
            the processors of the load (a MemoryError; nothing was allocated).
    """
    t_call = time.perf_counter()
    retries_before = _core.remote_retries()
    _check_thread("shardload.load")
    given: dict[str, Any] = dict(options)
    if "rows" in given:
        row_range = _renamed("load", {"rows": given.pop("rows")}, {"rows": "row_range"},
                             {"row_range": row_range})["row_range"]
    if reader is not None:
        given = _reader_options("load", reader, source, given, storage_options)
    checked = _options("load", given, layout=isinstance(source, Layout))
    k = _overdecompose(overdecompose)
    _bool("info", info)
    cast = _astype(astype)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress: expected a callable taking a LoadProgress, or None, found "
                        f"{_found(progress)}")
    if isinstance(source, Layout):
        if storage_options is not None:
            raise TypeError("load: storage_options cannot be passed with a Layout, whose paths "
                            "carry them")
        layout = source
    else:
        source = _with_storage_options(_source(source), storage_options)
        layout = _decoded(lambda o, dt: _discover_for_job(source, o, dt), checked, cast, "load",
                          cast_after=True, source=source)
        if layout.manifest_state is not ManifestState.NONE:
            # A manifest that could not be used is worth a look; one used or absent is not.
            quiet = layout.manifest_state in (ManifestState.USED, ManifestState.TRUSTED,
                                              ManifestState.ABSENT)
            logger.log(logging.DEBUG if quiet else logging.INFO, "load: %s",
                       layout.manifest_status)
    if row_range is not None:
        layout = layout.slice_rows(*_rows(row_range, layout.total_rows))
    _check_legate_dims(layout)
    nbytes = layout.nbytes
    t_discovered = time.perf_counter()
    discovery_s = t_discovered - t_call if not isinstance(source, Layout) else 0.0

    def report(stage: str, tiles: int | None = None, elapsed: float | None = None) -> None:
        if elapsed is None:
            elapsed = time.perf_counter() - t_call
        logger.debug("load: %s after %.3f s", stage, elapsed)
        if progress is not None:
            done = stage == "filled"
            progress(LoadProgress(stage, tiles if done and tiles else 0, tiles,
                                  nbytes if done else 0, nbytes, elapsed))

    logger.debug("load: discovered %d shards, %d rows, %d bytes in %.3f s", layout.num_shards,
                 layout.total_rows, nbytes, discovery_s)
    report("discovered")
    started_before = _runtime_ready
    _start_runtime()
    startup_s = 0.0 if started_before else time.perf_counter() - t_discovered
    import cupynumeric
    from legate.core import LogicalArray

    from . import _legate

    report("started")
    report("launching")
    # A task's error names its file and errno as data: the exception carries them already.
    owner, plan = _legate.load(layout, k)
    # LogicalArray adopts a copy; the capsule frees the original when dropped.
    array = LogicalArray.from_raw_handle(_legate.handle(owner))
    del owner
    result = cupynumeric.asarray(array)
    if cast is not None and cast != result.dtype:
        # After the fill, as numpy's astype: one pass over the array in Legate.
        result = result.astype(cast)
    total_s = time.perf_counter() - t_call
    load_info = LoadInfo(target=plan["target"], processors=plan["processors"], overdecompose=k,
                         tile_rows=plan["tile_rows"], tiles=plan["tiles"],
                         total_rows=layout.total_rows, bytes=nbytes, discovery_s=discovery_s,
                         startup_s=startup_s, launch_s=plan["launch_s"], fill_s=plan["fill_s"],
                         total_s=total_s,
                         remote_retries=_core.remote_retries() - retries_before)
    logger.log(logging.INFO if total_s > _SUMMARY_AFTER_S else logging.DEBUG,
               "loaded %s %s (%s) in %.3f s: %d tiles on %d %s processors, %.3f GB/s (discovery "
               "%.3f s, start-up %.3f s, launch %.3f s, fill %.3f s)", layout.shape,
               layout.dtype, _core.size_string(nbytes), total_s, load_info.tiles,
               load_info.processors, load_info.target, load_info.gb_per_s, discovery_s,
               startup_s, load_info.launch_s, load_info.fill_s)
    report("filled", load_info.tiles, total_s)
    if info:
        return result, load_info
    return result
