"""The option tables as the Python package sees them: every row of the C++ format and
discovery option tables is a keyword of discover() (and of every entry point that forwards its
options), typed in DiscoverOptions and documented in discover()'s docstring, so that a row added
in C++ and forgotten here fails a test instead of drifting."""

from __future__ import annotations

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
