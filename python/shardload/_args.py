"""The checks of the public functions' arguments, each naming the parameter: a wrong type is a
TypeError, a bad value a ValueError, with the same message at every entry point."""

from __future__ import annotations

import math
import operator
import os
import warnings
from typing import Any, Sequence, Union

import numpy as np

from . import _core

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
SourceLike = Union[PathLike, Sequence[PathLike]]
DTypeLike = Union[str, np.dtype, type]

_INT64_MAX = 2**63 - 1
_PATH_TYPES = (str, bytes, os.PathLike)

# Arguments are checked here, before the binding: its conversions would
# truncate (1.9 -> 1), split strings ("12" -> (1, 2)) or fail with a signature
# dump that names no parameter.

def _found(value: object) -> str:
    # Redacted before it is cut short: a URL inside a wrong argument (a dict of sources, say).
    text = _core.redact_secrets(repr(value))
    if "\n" in text or isinstance(value, _core.Layout):
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


def _utf8(name: str, value: str, what: str) -> str:
    """``value`` where it is UTF-8 text. A str holding a lone surrogate (``'x\\udcff'``, how
    os.fsdecode and os.listdir spell a byte that is not UTF-8) is a ValueError naming ``name``:
    the binding would refuse it with an error naming nothing. ``what``: the option's values,
    none of which holds such a character ("format names")."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{name}: {value!r} is not UTF-8 text (it holds {value[e.start]!r}, "
                         "a lone surrogate such as os.fsdecode makes of a byte that is not "
                         f"UTF-8); no {what} holds one") from None
    return value


def _name(name: str, value: str) -> str | bytes:
    """A name looked up in the files (an HDF5 dataset, a Zarr array's directory, an npz
    member, a column), which the readers take as bytes: a str that is not UTF-8 text is
    encoded with os.fsencode, as a path is,
    so that the ``'x\\udcff'`` os.listdir gives names the bytes ``b'x\\xff'`` (as the command
    line's ``--dataset`` does); UTF-8 text goes on as it is. A lone surrogate os.fsencode cannot
    turn into a byte (``'\\ud800'``) names no bytes: a ValueError naming ``name``."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        pass
    try:
        return os.fsencode(value)
    except UnicodeEncodeError as e:
        raise ValueError(f"{name}: {value!r} names no bytes ({value[e.start]!r} is a lone "
                         "surrogate that os.fsencode cannot turn into a byte; a name that is not "
                         "UTF-8 comes as os.fsdecode or os.listdir gives it, or as bytes "
                         "decoded with errors='surrogateescape')") from None


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
    hint = ("; pass a Layout to load(), or use it directly" if isinstance(value, _core.Layout)
            else "")
    raise TypeError("source: expected a str, bytes or os.PathLike path or a list/tuple of them, "
                    f"found {_found(value)}{hint}")


def _dtype(value: object, name: str = "dtype") -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        _text(name, value)  # "" refused
        return _utf8(name, value, "dtype's name")
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


def _columns(value: object) -> list[str | bytes] | None:
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
    return [_name(f"columns[{i}]", c) for i, c in enumerate(value)]


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
        # A long double that float64 rounds: where it is a whole number, or rounds to one,
        # the reader would take the neighbour for an exact integer (2**53 + 1 filling an int
        # column with 2**53, 1 + 2**-62 with 1 where a fraction is refused). Other fractions
        # round as any float does.
        if (isinstance(value, np.floating) and np.isfinite(value) and not math.isinf(f)
                and type(value)(f) != value and (f.is_integer() or value == np.round(value))):
            raise ValueError(f"{name}: {value!s} cannot be passed exactly (it travels as a "
                             f"float64, in which it would be {f!r})")
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
    return _utf8("format", value, "format's name")


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


def _overdecompose(value: object) -> int:
    k = _int("overdecompose", value)
    if k < 1:
        raise ValueError(f"overdecompose: expected an int >= 1, found {k}")
    # Every K past the plan's cap gives the same plan, so K need not fit int64.
    return min(k, _INT64_MAX)
