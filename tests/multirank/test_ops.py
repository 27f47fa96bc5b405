"""batches with prefetch 0, 1 and 3, a Python user-defined reader, index and verify, on 2
ranks; every rank's result equals numpy."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import python_job, write_spec

ROWS = [6, 0, 11, 3, 9]
MANY = 600


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    base = tmp_path_factory.mktemp("ops")
    rng = np.random.default_rng(3)
    parts = [rng.integers(-100, 100, size=(n, 4), dtype=np.int16) for n in ROWS]
    (base / "npy").mkdir()
    for i, p in enumerate(parts):
        np.save(base / "npy" / f"shard_{i:04d}.npy", p)
    texts = [rng.integers(-1000, 1000, size=(n, 3)) / 8 for n in ROWS]
    (base / "text").mkdir()
    for i, t in enumerate(texts):
        (base / "text" / f"shard_{i:04d}.txt").write_text(
            "".join(" ".join(repr(float(x)) for x in row) + "\n" for row in t))
    ops = [{"name": f"batches-p{p}", "op": "batches", "source": str(base / "npy"),
            "rows_per_batch": 7, "prefetch": p} for p in (0, 1, 3)]
    ops += [{"name": f"reader-K{k}", "op": "reader", "source": str(base / "text"),
             "overdecompose": k} for k in (1, 4)]
    # discover_once of a layout far larger than a task's default allocation pool (a few KiB)
    many = base / ("many-shards-" + "x" * 60)
    many.mkdir()
    for i in range(MANY):
        np.save(many / f"shard_{i:04d}.npy", np.full((2, 2), i, dtype=np.int16))
    ops += [{"name": "once-many", "op": "once", "source": str(many)}]
    ops += [{"name": "index", "op": "index", "source": str(base / "npy"), "checksum": "xxh3"},
            {"name": "verify", "op": "verify", "source": str(base / "npy")},
            {"name": "load-manifest", "op": "load", "source": str(base / "npy"),
             "kwargs": {"overdecompose": 2}}]
    # index's errors, raised alike on both ranks: a missing directory, and a damaged shard
    # (found while probing on one rank), and a checksum offered by no build.
    (base / "bad").mkdir()
    np.save(base / "bad" / "shard_0000.npy", parts[0])
    (base / "bad" / "shard_0001.npy").write_bytes(b"\x93NUMPY\x01\x00\xff\xff")
    ops += [{"name": "index-missing", "op": "index", "source": str(base / "missing"),
             "checksum": "none"},
            {"name": "index-bad", "op": "index", "source": str(base / "bad"), "checksum": "xxh3"},
            {"name": "index-crc", "op": "index", "source": str(base / "npy"),
             "checksum": "crc32c"}]
    spec = write_spec(base / "spec.json", {"ops": ops})
    job = python_job(base / "out", "ops.py", str(spec), trace=True)
    assert job.rc == 0, job.describe()
    return base, job, np.concatenate(parts), np.concatenate(texts)


def _ok(job, name):
    for rank in job.ranks:
        result = rank.results()[name]
        assert result["ok"], f"rank {rank.index}: {result}"
    return [rank.results()[name] for rank in job.ranks]


@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_batches(ops, prefetch):
    _, job, whole, _ = ops
    results = _ok(job, f"batches-p{prefetch}")
    assert all(r["batches"] == [7, 7, 7, 7, 1] for r in results), results
    for rank in job.ranks:
        np.testing.assert_array_equal(rank.array(f"batches-p{prefetch}"), whole)


@pytest.mark.parametrize("k", [1, 4])
def test_python_reader(ops, k):
    _, job, _, text = ops
    _ok(job, f"reader-K{k}")
    for rank in job.ranks:
        np.testing.assert_array_equal(rank.array(f"reader-K{k}"), text)


def test_index_verify_and_load_from_the_manifest(ops):
    base, job, whole, _ = ops
    results = _ok(job, "index")
    assert {r["manifest"] for r in results} == {str(base / "npy" / "shardload.manifest")}
    assert [r["mismatches"] for r in _ok(job, "verify")] == [[], []]
    _ok(job, "load-manifest")
    for rank in job.ranks:
        np.testing.assert_array_equal(rank.array("load-manifest"), whole)


@pytest.mark.parametrize("name, words", [("index-missing", "missing"),
                                         ("index-bad", "shard_0001.npy"),
                                         ("index-crc", "crc32c")])
def test_index_errors_are_the_same_on_every_rank(ops, name, words):
    base, job, _, _ = ops
    found = [rank.results()[name] for rank in job.ranks]
    assert not any(f["ok"] for f in found), found
    assert len({(f["type"], f["message"]) for f in found}) == 1, found
    assert words in found[0]["message"], found
    assert not (base / "bad" / "shardload.manifest").exists()


def test_index_reads_the_shards_on_one_rank(ops):
    base, job, _, _ = ops
    opened = [[p for p in r.opened(base / "npy", since="index", until="verify")
               if p.endswith(".npy")] for r in job.ranks]
    assert sorted(bool(o) for o in opened) == [False, True], opened
    assert sorted(set(max(opened, key=len))) == [
        str(base / "npy" / f"shard_{i:04d}.npy") for i in range(len(ROWS))]


def test_discover_once_of_many_shards(ops):
    _, job, _, _ = ops
    assert [(r["shards"], r["rows"]) for r in _ok(job, "once-many")] == [(MANY, 2 * MANY)] * 2
