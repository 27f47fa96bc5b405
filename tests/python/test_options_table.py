"""The option tables as the Python package sees them: every row of the C++ format and
discovery option tables is a keyword of discover() (and of every entry point that forwards its
options), typed in DiscoverOptions and documented in discover()'s docstring, so that a row added
in C++ and forgotten here fails a test instead of drifting."""

from __future__ import annotations

import importlib
import pathlib
import re
import typing

import numpy as np
import pytest

import shardload
from shardload import _core, _options


def _rows() -> list[tuple[str, str]]:
    return [*_core.format_option_rows(), *_core.discover_option_rows()]


def test_every_row_of_both_tables_is_a_discover_option() -> None:
    names = [name for name, _ in _rows()]
    assert len(names) == len(set(names)), names
    assert set(names) <= set(_options._DISCOVER_OPTIONS)
    assert set(_options._DISCOVER_OPTIONS) - set(names) == {"pattern", "format"}
    # Every kind has its check.
    assert {kind for _, kind in _rows()} <= set(_options._KIND_CHECKS)


def test_the_typed_dict_lists_exactly_the_discover_options() -> None:
    hints = typing.get_type_hints(_options.DiscoverOptions)
    assert set(hints) == set(_options._DISCOVER_OPTIONS)
    # A flag row is a bool keyword, a count row an int one.
    for name, kind in _core.discover_option_rows():
        if kind == "flag":
            assert hints[name] is bool, name
        if kind == "count":
            assert "int" in str(hints[name]), (name, hints[name])


def test_discover_documents_every_option() -> None:
    doc = shardload.discover.__doc__ or ""
    for name in _options._DISCOVER_OPTIONS:
        assert re.search(rf"^\s+{name}: ", doc, re.M), name


def test_a_flag_row_keeps_its_checks_and_its_default() -> None:
    # trust_manifest is a row of the discovery table: left out it is False, None or 1 is the
    # TypeError every flag gives, and a Layout refuses it only when True.
    assert _options._options("discover", {}).trust_manifest is False
    assert _options._options("discover", {"trust_manifest": True}).given == ("trust_manifest",)
    for bad in (None, 1, "yes"):
        try:
            _options._options("discover", {"trust_manifest": bad})
        except TypeError as e:
            assert "trust_manifest: expected a bool" in str(e)
        else:
            raise AssertionError(bad)
    assert _options._options("load", {"trust_manifest": False}, layout=True).given == ()


# ---- probe_threads: one row of the discovery table, end to end ------------------------------

def _write_npy_shards(d, n: int = 37) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    arrays = []
    for i in range(n):
        a = rng.standard_normal((int(rng.integers(0, 5)), 3)).astype(np.float32)
        np.save(d / f"shard_{i:04d}.npy", a)
        arrays.append(a)
    return arrays


def test_probe_threads_gives_the_same_layout_and_the_same_first_error(tmp_path) -> None:
    arrays = _write_npy_shards(tmp_path)
    plain = shardload.discover(tmp_path)
    for n in (0, 1, 3, 1024):
        layout = shardload.discover(tmp_path, probe_threads=n)
        assert layout.paths == plain.paths
        assert list(layout.shard_rows) == [len(a) for a in arrays]
        np.testing.assert_array_equal(layout.read(), np.concatenate(arrays))
    # index() forwards it too.
    assert shardload.index(tmp_path, probe_threads=2)
    # Two bad shards: the first in path order is named, whatever the threads did.
    np.save(tmp_path / "shard_0005.npy", np.zeros((2, 4), np.float32))
    np.save(tmp_path / "shard_0020.npy", np.zeros((2, 5), np.float32))
    for n in (1, 4):
        with pytest.raises(shardload.LayoutError, match="shard_0005.npy"):
            shardload.discover(tmp_path, probe_threads=n, trust_manifest=False)


def test_probe_threads_is_checked_as_every_count() -> None:
    with pytest.raises(TypeError, match="probe_threads"):
        shardload.discover(".", probe_threads="2")
    with pytest.raises(TypeError, match="probe_threads"):
        shardload.discover(".", probe_threads=True)
    with pytest.raises(ValueError, match="probe_threads"):
        shardload.discover(".", probe_threads=-1)


def test_probe_threads_beyond_its_maximum_is_a_value_error(tmp_path) -> None:
    _write_npy_shards(tmp_path, 2)
    with pytest.raises(ValueError, match=r"probe_threads: expected at most 1024, found 1025"):
        shardload.discover(tmp_path, probe_threads=1025)


# ---- storage options: the third table (shardload/store_options.hpp) --------------------------

ROOT = pathlib.Path(__file__).resolve().parents[2]
# A row's kind as StorageOptions types it: a value of the kind, or the query's str.
_STORAGE_KIND_HINTS = {"count": int | str, "number": float | str, "flag": bool | str,
                       "text": str}


def test_the_storage_typed_dict_is_the_store_option_table() -> None:
    rows = _core.storage_option_rows()
    hints = typing.get_type_hints(_options.StorageOptions)
    assert list(hints) == [row[0] for row in rows]
    for name, kind, *_ in rows:
        assert hints[name] == _STORAGE_KIND_HINTS[kind], (name, kind, hints[name])


def test_every_entry_point_types_storage_options_by_the_table() -> None:
    import inspect

    import shardload.numpy

    entry_points = [shardload.discover, shardload.load, shardload.batches, shardload.index,
                    shardload.verify, shardload.discover_once, shardload.save,
                    shardload.numpy.load, shardload.numpy.save]
    for module in ("jax", "dask"):
        try:
            entry_points.append(importlib.import_module(f"shardload.{module}").load)
        except ImportError:
            pass
    for f in entry_points:
        annotation = inspect.signature(f).parameters["storage_options"].annotation
        assert annotation == "StorageOptions | None", (f.__module__, f.__name__, annotation)


def test_storage_options_values_by_the_rows_kind() -> None:
    from shardload._discover import _with_storage_options

    # A row of seconds takes a float as well; a count an int, a flag a bool, any row a str.
    got = _with_storage_options("s3://b/d/", {"connect_timeout": 0.5, "max_attempts": 2,
                                              "anonymous": True, "region": "x"})
    assert got == "s3://b/d/?connect_timeout=0.5&max_attempts=2&anonymous=true&region=x"
    with pytest.raises(TypeError, match=r"storage_options\['max_attempts'\]: expected a str, "
                                        r"int or bool, found float"):
        _with_storage_options("s3://b/d/", {"max_attempts": 2.0})
    # A secret's value is never shown, whatever its type.
    with pytest.raises(TypeError) as e:
        _with_storage_options("s3://b/d/", {"secret_key": b"S3cr3t"})
    assert "S3cr3t" not in str(e.value)


def test_a_float_of_seconds_out_of_its_rows_range_is_refused_naming_the_range() -> None:
    # The C++ row's range, through storage_options=, before any request is made.
    with pytest.raises(ValueError, match=r"connect_timeout must be a number of seconds above 0 "
                                         r"\(at most 86400\), found '86400.5'"):
        shardload.discover("s3://b/d/x.npy", storage_options={"connect_timeout": 86400.5})


@pytest.mark.parametrize("source,options", [
    ("s3://b/d/x.npy?max_attempts=1", {"max_attempts": 2}),
    ("s3://b/d/x.npy?region=a&region=b", {}),
    ("s3://b/d/x.npy?secret_key=S3cr3t", {"secret_key": "S3cr3t2", "access_key": "AK"}),
    ("http://127.0.0.1:9/d/x.npy?connect_timeout=1", {"connect_timeout": 2}),
])
def test_an_option_given_twice_is_refused_naming_it(source, options) -> None:
    """An option in the URL and in storage_options= (or twice in the URL) became a query with
    the key twice, and one value won without a word: refused, naming the key (a secret's
    value never shown), before any request."""
    key = re.match(r".*[?&]([a-z_]+)=", source).group(1)
    with pytest.raises(ValueError, match=rf"{key} is given twice") as e:
        shardload.discover(source, storage_options=options or None)
    assert "S3cr3t" not in str(e.value)


def _docs_store_options() -> list[list[str]]:
    text = (ROOT / "docs" / "object_storage.md").read_text()
    section = text[text.index("\n## Store options\n"):]
    section = section[:section.index("\n## ", 1)]
    lines = [line for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_the_docs_list_every_store_option_as_the_table_has_it() -> None:
    kinds = {"count": "count", "number": "seconds", "text": "text", "flag": "bool"}

    def default(kind: str, value: object) -> str:
        if value is None:
            return "unset"
        if kind == "text":
            return "none" if value == "" else f"`{value}`"
        if kind == "flag":
            return f"`{str(value).lower()}`"
        return f"`{value:g}`" if kind == "number" else f"`{value}`"

    want = []
    for name, kind, stores, secret, value, help in _core.storage_option_rows():
        want.append([f"`{name}`", ", ".join("http(s)" if s == "http" else s for s in stores),
                     kinds[kind] + (", secret" if secret else ""),
                     "yes" if value is None else "no", default(kind, value), help])
    assert _docs_store_options() == want


def test_the_retry_table_of_the_docs_keeps_the_rows_defaults_and_ranges() -> None:
    # docs/object_storage.md "Retries and time limits" explains the retry and request rows at
    # length, with their defaults: held to the rows, as the "Store options" table is.
    text = (ROOT / "docs" / "object_storage.md").read_text()
    section = text[text.index("\n## Retries and time limits\n"):]
    section = section[:section.index("\n## ", 1)]
    documented = {m.group(1): m.group(2) for m in
                  re.finditer(r"^\| `(\w+)` \| `([^`]+)`", section, re.M)}
    rows = {name: (kind, value) for name, kind, _, _, value, _ in _core.storage_option_rows()}
    assert documented and set(documented) <= set(rows), documented
    for name, shown in documented.items():
        kind, value = rows[name]
        assert float(shown) == float(value), (name, shown, value)
    # Every row the http(s) store takes, and multipart_threshold, is explained there.
    assert {n for n, (k, v) in rows.items() if k in ("count", "number")} <= set(documented)
