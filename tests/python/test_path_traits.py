"""The Python package asks storage what the store behind a path is like (_core.path_traits,
split_options, join_key) instead of testing the path's scheme: the binding gives
shardload/location.hpp's answers, and the front ends' decisions follow them (index refuses a
store that takes no writes, verify of a directory URL reads its manifest, storage_options=
joins a URL's query only where its store takes the keys)."""

from __future__ import annotations

import re

import pytest

import shardload
from shardload import _core

ROWS = _core.storage_option_rows()  # (name, kind, stores, ...)


@pytest.mark.parametrize("path,kernel_files,listable,writable,query_sent,label", [
    ("/data/d/x.npy", True, True, True, False, ""),
    (b"/data/d/x?.npy", True, True, True, False, ""),
    ("s3://b/d/x.npy?region=us-east-1", False, True, True, False, "s3://"),
    ("http://h/d/x.npy", False, False, False, True, "http(s)://"),
    ("https://h/d/x.npy?sig=1", False, False, False, True, "http(s)://"),
])
def test_the_traits_of_a_paths_store(path, kernel_files, listable, writable, query_sent,
                                     label):
    t = _core.path_traits(path)
    assert (t.kernel_files, t.listable, t.writable, t.query_sent, t.scheme_label) == \
        (kernel_files, listable, writable, query_sent, label)
    assert t.round_trips == (not kernel_files)


def test_the_options_a_urls_store_takes_are_the_option_tables_rows():
    assert _core.path_traits("/d/x.npy").storage_options == ()
    assert _core.path_traits("s3://b/x").storage_options == tuple(
        r[0] for r in ROWS if "s3" in r[2])
    assert _core.path_traits("https://h/x").storage_options == tuple(
        r[0] for r in ROWS if "http" in r[2])
    assert "region" not in _core.path_traits("https://h/x").storage_options


def test_a_name_joins_before_the_urls_options_and_splits_from_them():
    assert _core.join_key("s3://b/d?region=r", "shardload.manifest") == \
        "s3://b/d/shardload.manifest?region=r"
    assert _core.join_key("http://h/d/", "m") == "http://h/d/m"
    assert _core.join_key("/data/d?x", "m") == "/data/d?x/m"  # a local '?' is a name's
    assert _core.split_options("s3://b/d/m?region=r") == ("s3://b/d/m", "?region=r")
    assert _core.split_options("/data/a?b") == ("/data/a?b", "")
    # The secrets leave the string (by handle), as every path made from a source holds them.
    name, options = _core.split_options("s3://b/k?secret_key=sk-s3cr3t&region=r")
    assert name == "s3://b/k" and "sk-s3cr3t" not in options and "credentials=" in options


def test_index_of_a_store_without_writes_is_refused_before_any_request():
    with pytest.raises(ValueError, match="a manifest cannot be written over HTTP"):
        shardload.index("http://127.0.0.1:9/d/")


@pytest.mark.parametrize("options,found", [
    ({"region": "r"}, "region applies to s3:// URLs only (an http(s):// URL takes max_attempts"),
    ({"no_such": "1", "region": "r"}, "no_such, region apply to s3:// URLs only"),
])
def test_storage_options_an_http_urls_store_does_not_take_are_refused(options, found):
    with pytest.raises(ValueError, match=re.escape(found)):
        shardload.discover("http://127.0.0.1:9/d/x.npy", storage_options=options)
