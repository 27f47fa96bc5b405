"""discover()'s options, checked once for every entry point that discovers (the format and
discovery option tables of the binding, by kind), and the astype policy: which formats decode
into a chosen type, and which ``astype`` a load or a batch iterator takes."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, Mapping, Sequence, TypedDict

import numpy as np

from . import _core
from ._args import (DTypeLike, _bool, _columns, _count, _dtype, _format, _found, _name,
                    _number, _pattern, _renamed, _shape, _text, _text_list)
from ._core import Layout
from ._errors import Error, LayoutError


def _name_text(name: str, value: object) -> str | bytes | None:
    """None (not given) or a non-empty str naming bytes in the files (:func:`_args._name`)."""
    text = _text(name, value)
    return None if text is None else _name(name, text)


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
    # A name looked up in the files (an HDF5 dataset, a Zarr array's directory, an npz
    # member), which may be bytes that are not UTF-8: encoded as a path is.
    "dataset": lambda name, value: _name_text(name, value),
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


# The store option table's rows (shardload/store_options.hpp): the keys of storage_options=,
# and the Python types each kind takes besides a str (the query's own spelling of any value).
_STORAGE_OPTIONS = {name: kind for name, kind, *_ in _core.storage_option_rows()}
# The rows whose values are secrets (secret_key, session_token): never shown in a message.
_SECRET_OPTIONS = frozenset(name for name, _, _, secret, *_ in _core.storage_option_rows()
                            if secret)
_STORAGE_KIND_TYPES: dict[str, tuple[type, ...]] = {
    "count": (int,),
    "number": (int, float),
    "flag": (bool,),
    "text": (),
}


class StorageOptions(TypedDict, total=False):
    """``storage_options=`` of every entry point that reads or writes ``s3://``: one key per
    row of the store option table (docs/object_storage.md, "Store options"), a str as the
    URL's query spells it or a value of the row's kind."""

    max_attempts: int | str
    backoff_ms: int | str
    max_backoff_ms: int | str
    connect_timeout: float | str
    request_timeout: float | str
    request_bytes: int | str
    requests_in_flight: int | str
    max_requests: int | str
    chunks_in_flight: int | str
    multipart_threshold: int | str
    access_key: str
    secret_key: str
    session_token: str
    anonymous: bool | str
    region: str
    endpoint_override: str
    scheme: str
    allow_bucket_creation: bool | str
    allow_bucket_deletion: bool | str
    tls_ca_file_path: str
    tls_verify_certificates: bool | str


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


def _decodable(dt: np.dtype) -> bool:
    """Whether the engine decodes parquet/arrow columns into ``dt``: bool, int8-64,
    uint8-64, float16/32/64, complex64/128 (a long double is none of them)."""
    sizes = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16)}
    return dt.itemsize in sizes.get(dt.kind, ())


def _columnar_for_cast(discover_with: Callable[[_Options, str | None], Layout],
                       options: _Options, astype: np.dtype, *,
                       stored: Layout | None = None) -> Layout:
    """The parquet/arrow layout that gives load() and batches() ``astype``, with numpy's
    ``astype`` meaning for every format: columns of one stored type that convert to
    ``astype`` without loss (``np.can_cast(..., "safe")``) are decoded straight into it, the
    same values in one pass; others, and types the engine does not decode into (a long
    double), are read as stored and cast after, as numpy casts (float to int truncates).
    Columns of different types have no stored type of their own: they are decoded into
    ``astype``, and a value that does not convert exactly is an error."""
    if stored is None:
        try:
            stored = discover_with(options, None)
        except LayoutError:
            # Columns of different types (or a fault the retry reports as well); into a type
            # the engine does not decode into, the error as it is.
            if not _decodable(astype):
                raise
            return discover_with(options, _dtype_text(astype))
    if stored.dtype != astype and _decodable(astype) and \
            np.can_cast(stored.dtype, astype, "safe"):
        return discover_with(options, _dtype_text(astype))
    return stored


def _fill_problem(fill: float, stored: np.dtype, astype: np.dtype) -> str | None:
    """Why nulls filled with ``fill`` in the columns' own ``stored`` type, then cast to
    ``astype`` as numpy casts, would not hold what a fill in ``astype`` holds (the reader's
    rule: integers and bools take it exactly; a float may round it, but a finite value must
    stay finite; inf and nan fill a float as written); None where they do. The cast after
    the fill must not make of -1 a uint8 255, of 70000 a float16 inf, of inf an int32
    -2**31, nor of 65519 through a float16 column a uint16 65504."""
    exact = np.isfinite(fill) and fill == int(fill)
    if astype.kind == "b":
        fits = exact and fill in (0, 1)
    elif astype.kind in "iu":
        info = np.iinfo(astype)
        fits = exact and info.min <= int(fill) <= info.max
    else:
        with np.errstate(all="ignore"):
            fits = not np.isfinite(fill) or bool(np.isfinite(
                np.array(fill, np.float64).astype(astype).real))
    if not fits:
        return f"is not representable as {astype.name}"
    with np.errstate(all="ignore"):
        want = np.array(fill, np.float64).astype(astype)
        got = np.array(fill, np.float64).astype(stored).astype(astype)
    if got == want or (np.isnan(got) and np.isnan(want)):
        return None
    return (f"would be {got.item()!r} as {astype.name}: the nulls are filled in the columns' "
            f"{stored.name} ({np.array(fill, np.float64).astype(stored).item()!r}) before "
            f"the cast")


def _check_fill_cast(layout: Layout, options: _Options, astype: np.dtype, where: str) -> None:
    """A parquet/arrow layout read in its own type and cast after to ``astype``: its nulls
    are filled before the cast, so ``fill_value`` is held to ``astype`` here (discovery held
    it to the stored type only)."""
    fill = options.values.get("fill_value")
    if fill is None or layout.format not in _COLUMNAR or layout.dtype == astype:
        return
    why = _fill_problem(float(fill), np.dtype(layout.dtype), astype)  # type: ignore[arg-type]
    if why is not None:
        raise LayoutError(f"{where}: fill_value={float(fill)!r} {why} (astype= casts the "
                          f"{np.dtype(layout.dtype).name} columns after their nulls are "
                          "filled)")


def _decoded(discover_with: Callable[[_Options, str | None], Layout], options: _Options,
             astype: np.dtype | None, where: str, *, cast_after: bool) -> Layout:
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
    if options.format in _COLUMNAR:
        if cast_after:
            layout = _columnar_for_cast(discover_with, options, astype)
            _check_fill_cast(layout, options, astype, where)
            return layout
        return discover_with(options, _dtype_text(astype))
    if options.format != "auto":
        if not cast_after:
            raise ValueError(f"{where}: astype= is the type parquet and arrow columns are "
                             f"decoded into; {options.format} files give their own dtype (pass "
                             "astype= to load() or batches() to cast the array)")
        return discover_with(options, None)
    # format="auto": whether astype= is a type to decode into is the answer of the format that
    # discovery finds in the files (their bytes, local or remote), never of their names.
    if options.dtype is not None:
        layout = discover_with(options, None)
        if layout.format in _COLUMNAR:
            raise TypeError(f"{where}: dtype= is the deprecated spelling of astype= for "
                            "parquet and arrow; pass astype= only")
    elif cast_after:
        try:
            layout = discover_with(options, None)
        except LayoutError as stored_error:
            # Columns of different types have no stored type: parquet and arrow decode them
            # into astype (a value that does not convert exactly is an error).
            if not _decodable(astype):
                raise stored_error from None
            try:
                decoded = discover_with(options, _dtype_text(astype))
            except Error:
                raise stored_error from None
            if decoded.format not in _COLUMNAR:
                raise stored_error from None
            return decoded
    else:
        # The decode into astype, as the engine and the CLI ask it; the readers of the
        # formats that give their own dtype refuse it, and are then named.
        try:
            layout = discover_with(options, _dtype_text(astype))
        except LayoutError as decoded_error:
            try:
                layout = discover_with(options, None)
            except Error:
                raise decoded_error from None
            if layout.format in _COLUMNAR:
                raise decoded_error from None
        else:
            if layout.format in _COLUMNAR:
                return layout
    if layout.format in _COLUMNAR:
        layout = _columnar_for_cast(discover_with,
                                    dataclasses.replace(options, format=layout.format),
                                    astype, stored=layout)
        _check_fill_cast(layout, options, astype, where)
        return layout
    if not cast_after:
        raise ValueError(f"{where}: astype= is the type parquet and arrow columns are "
                         f"decoded into; these are {layout.format} files, which give their "
                         "own dtype (pass astype= to load() or batches() to cast the array)")
    return layout


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
    except (TypeError, UnicodeEncodeError):
        # numpy encodes a str to UTF-8 first: a lone surrogate ('f\udcff') is its
        # UnicodeEncodeError, naming no argument.
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
