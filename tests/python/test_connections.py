"""What a process keeps open to the object stores it read: a bounded number of descriptors,
however many stores it used (docs/object_storage.md, "Connections kept"). Each store (a bucket
with its options) has an S3 client of Arrow's, whose libcurl handles keep connections and
descriptors of their own; a client was kept for every store the process had ever used, so a
test process that had read a few hundred buckets passed 1,024 descriptors. Counted here in
/proc/self/fd after loads from many stores of one moto server, each spelled with other
options (each is a store of its own), on the signed path and on Arrow's; and after loads from
many short-lived http:// servers of the tests (test_http.py's), which left both ends of every
kept-alive connection open in the test process until they closed them when they stop
(closing_server.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

moto = pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")

import shardload.numpy as snp  # noqa: E402

import s3_server  # noqa: E402
from test_http import serving  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"),
                                reason="counts the descriptors in /proc/self/fd")

# Stores read one after another: beyond the clients kept (8), each of which holds a few
# descriptors once used.
STORES = 120
# What the process may hold more at the end than after its first store: the clients kept, a
# few descriptors each (2 to 6 here), and the connections of shardload's own pool. Before the
# bound every store's client stayed: 2 descriptors a store on the signed path (its listing),
# 6 on Arrow's path, 240 and 720 in all.
MORE_AT_MOST = 100


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("path", ["signed", "arrow"])
def test_many_stores_leave_a_bounded_number_of_descriptors(bucket, path):
    a = np.arange(24, dtype=np.float32).reshape(6, 4)
    bucket.put_npy("d/shard_0000.npy", a[:4])
    bucket.put_npy("d/shard_0001.npy", a[4:])
    options = dict(bucket.options)
    if path == "arrow":
        options.update(s3_server.ARROWS_CLIENT)

    def load(i: int) -> None:
        # Another value of an option per load: another store, with a client of its own.
        got = snp.load(bucket.url("d/"), storage_options={**options, "backoff_ms": str(10 + i)})
        np.testing.assert_array_equal(got, a)

    load(0)
    first = _descriptors()
    for i in range(1, STORES):
        load(i)
    assert _descriptors() - first <= MORE_AT_MOST, (first, _descriptors())


# Servers started, used and stopped one after another: more than the pool's 128 idle
# connections' worth (two connections each).
SERVERS = 100
# The pool keeps up to 128 idle connections (its own end only, once each server closes its
# end when it stops), and the last server's handlers may still be closing theirs.
POOLED_AT_MOST = 128 + 12


def test_many_short_lived_http_servers_leave_at_most_the_pools_connections():
    a = np.arange(24, dtype=np.float32).reshape(6, 4)

    def load() -> None:
        with serving() as (store, base):
            store.put_npy("/a.npy", a[:4])
            store.put_npy("/b.npy", a[4:])
            got = snp.load([base + "/a.npy", base + "/b.npy"])
        np.testing.assert_array_equal(got, a)

    load()
    first = _descriptors()
    for _ in range(1, SERVERS):
        load()
    assert _descriptors() - first <= POOLED_AT_MOST, (first, _descriptors())
