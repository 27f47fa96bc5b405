"""The process's credentials table (docs/object_storage.md, "What the process keeps"): an entry
lives while an object that names its handle does (a Source, a Layout, the front end's sealed
source), and besides among the recently sealed ones; a handle that only a string still names is
then forgotten and refused as a handle never given. Memory is bounded by what the program
holds, not by how many secrets it ever sealed."""

from __future__ import annotations

import gc
import json
import pickle
import subprocess
import sys

import numpy as np
import pytest

import shardload
from shardload import _core

from test_http_secrets_paths import CHILD, MARK, PASSWORD, SIGNED, USER, checking, dataset

# More than the recently sealed ones the table keeps (kRecentlySealed, 1024).
OTHERS = 10_000
# A presigned URL as a service signs each anew: a 700-byte security token and a signature.
PRESIGNED = ("https://bucket.s3.amazonaws.com/x.npy?X-Amz-Algorithm=AWS4-HMAC-SHA256"
             "&X-Amz-Credential=AKID%2F20261206&X-Amz-Security-Token=" + "T" * 700 +
             "&X-Amz-Signature=")


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def seal_and_drop(n: int, tag: str = "") -> None:
    """Seals ``n`` distinct presigned URLs, keeping none of them."""
    for i in range(n):
        _core.seal_store_url(PRESIGNED + f"{tag}{i:060x}")


def test_distinct_presigned_urls_sealed_and_dropped_keep_memory_bounded() -> None:
    # Before: every entry stayed, about 2 KB each (+390 MB for these 200,000).
    seal_and_drop(5_000, "warm")
    gc.collect()
    before = rss_mb()
    seal_and_drop(200_000)
    gc.collect()
    grown = rss_mb() - before
    assert grown < 40, f"RSS grew {grown:.1f} MB over 200,000 URLs sealed and dropped"


def test_a_live_layouts_handle_reads_after_others_were_sealed_and_dropped() -> None:
    with checking(SIGNED) as (store, host):
        want = dataset(store, "live")
        urls = [f"http://{USER}:{PASSWORD}@{host}/live/shard_{i:04d}.npy?{SIGNED}"
                for i in range(3)]
        layout = shardload.discover(urls)
        assert all("credentials=" in p and MARK not in p for p in layout.paths)
        seal_and_drop(OTHERS)
        gc.collect()
        np.testing.assert_array_equal(layout.read(), want)
        # The layout's pickle carries its entries; one decoded here reads too, as does a
        # discovery of the paths it names while it lives.
        np.testing.assert_array_equal(pickle.loads(pickle.dumps(layout)).read(), want)
        np.testing.assert_array_equal(shardload.discover(list(layout.paths)).read(), want)
        assert not store.refused, store.refused


def test_a_source_of_many_urls_sealed_with_storage_options_is_discovered_whole() -> None:
    # storage_options= seals each URL before the discovery: more of them than the table keeps
    # of those nothing pins (kRecentlySealed, 1024) are all still held when it pins them.
    with checking(SIGNED + "&n=0") as (store, host):
        want = np.arange(3, dtype=np.int16)
        store.put_npy("/many/one.npy", want)
        urls = [f"http://{USER}:{PASSWORD}@{host}/many/one.npy?{SIGNED}&n={i}"
                for i in range(1_500)]
        sealed = shardload._discover._with_storage_options(urls, {"requests_in_flight": 2})
        assert all(MARK not in p for p in sealed)
        seal_and_drop(OTHERS)
        gc.collect()
        # The first URL, sealed before 1,499 others and 10,000 more: still held by its str.
        np.testing.assert_array_equal(shardload.discover(sealed[:1]).read(), want)
        assert not store.refused, store.refused
        # Pickled, it is the str it spells (no pin leaves the process).
        assert type(pickle.loads(pickle.dumps(sealed[0]))) is str


def _refused_once_forgotten(sealed: str, shown: str) -> None:
    """`sealed` is refused as a handle this process no longer holds once more than the recently
    sealed ones follow it, its URL named (`shown`) and no secret in the message."""
    seal_and_drop(OTHERS)
    gc.collect()
    with pytest.raises(shardload.LayoutError) as raised:
        shardload.discover([sealed])
    message = str(raised.value)
    assert "names no credentials given to this process" in message, message
    assert shown in message and MARK not in message, message


def test_a_forgotten_handle_is_refused_naming_the_url_redacted() -> None:
    # A handle only a string names: forgotten once more than the recently sealed ones follow.
    url = f"https://{USER}:{PASSWORD}@127.0.0.1:9/gone/shard_0000.npy?{SIGNED}"
    sealed = _core.seal_store_url(url)
    assert "credentials=" in sealed and MARK not in sealed
    _refused_once_forgotten(sealed, "/gone/shard_0000.npy")
    # s3:// too: refused at the URL's options, before any request.
    s3 = _core.seal_store_url("s3://bkt/gone/x.npy?endpoint_override=127.0.0.1:9&access_key=AK"
                              "&secret_key=sk-s3cr3t&session_token=st-s3cr3t")
    _refused_once_forgotten(s3, "s3://bkt/gone/x.npy")


def test_a_url_sealed_around_a_handle_keeps_and_carries_both_entries() -> None:
    # Secret items written around a sealed URL's handle: the new entry's span names the first
    # handle, which it keeps while it is, and a pickle carries both to the process that reads.
    with checking("sig=A&" + SIGNED + "&token=B") as (store, host):
        want = np.arange(6, dtype=np.int32)
        store.put_npy("/n/shard_0000.npy", want)
        inner = _core.seal_store_url(f"http://{USER}:{PASSWORD}@{host}/n/shard_0000.npy?{SIGNED}")
        query = inner.partition("?")[2]
        layout = shardload.discover([f"http://{host}/n/shard_0000.npy?sig=A&{query}&token=B"])
        del inner
        seal_and_drop(OTHERS)
        gc.collect()
        np.testing.assert_array_equal(layout.read(), want)
        # The reading process decodes it, then seals 10,000 others before it reads (signatures
        # as a signer makes them, 64 hex digits: a short one would cost a key of scrypt each).
        child = CHILD.replace("layout = pickle.loads(sys.stdin.buffer.read()); ",
                              "layout = pickle.loads(sys.stdin.buffer.read()); "
                              "[shardload._core.seal_store_url(f'https://h/x?sig={i:064x}') "
                              f"for i in range({OTHERS})]; ")
        assert child != CHILD
        done = subprocess.run([sys.executable, "-c", child], input=pickle.dumps(layout),
                              capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()
        np.testing.assert_array_equal(np.array(json.loads(done.stdout)["values"], np.int32), want)
        assert not store.refused, store.refused
