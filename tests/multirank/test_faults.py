"""Faults on 2 ranks, each job bounded in time: a shard that only one rank's tiles read is
changed, corrupt or unreadable; a dataset larger than a rank's memory; an error inside
discover_once; a source one rank cannot see; a rank killed during a load."""

from __future__ import annotations

import os
import pathlib
import subprocess

import numcodecs
import numpy as np
import pytest
import zarr
from conftest import PYTHON, RANKS, python_job, write_spec

N = 8  # shards of 4 rows: with K=1 the last shard is read by the second tile alone


def _npy_set(d: pathlib.Path, seed: int) -> None:
    d.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for i in range(N):
        np.save(d / f"shard_{i:04d}.npy", rng.standard_normal((4, 2)))


def _index(d: pathlib.Path) -> None:
    """A manifest of the intact set, written here (no Legate) by the networked build."""
    subprocess.run([str(PYTHON), "-c", "import shardload, sys; shardload.index(sys.argv[1])",
                    str(d)], check=True, env={**os.environ, "SHARDLOAD_NO_STANDIN": "1"})


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    base = tmp_path_factory.mktemp("faults")
    last = f"shard_{N - 1:04d}"
    # changed after the manifest was taken: the tile that reads it finds another size
    _npy_set(base / "changed", 1)
    _index(base / "changed")
    with open(base / "changed" / f"{last}.npy", "ab") as f:
        f.write(b"\0" * 16)
    # unreadable: gone after the manifest was taken
    _npy_set(base / "gone", 2)
    _index(base / "gone")
    (base / "gone" / f"{last}.npy").unlink()
    # two bad shards, one in each rank's tile: the first changed, the last gone
    _npy_set(base / "two", 5)
    _index(base / "two")
    with open(base / "two" / "shard_0000.npy", "ab") as f:
        f.write(b"\0" * 16)
    (base / "two" / f"{last}.npy").unlink()
    # corrupt: a compressed Zarr chunk of the last shard damaged; its metadata stays intact
    (base / "corrupt").mkdir()
    rng = np.random.default_rng(3)
    for i in range(N):
        z = zarr.create_array(base / "corrupt" / f"shard_{i:04d}.zarr", shape=(4, 2),
                              dtype="float64", chunks=(2, 2), zarr_format=2,
                              compressors=numcodecs.Zlib(level=1))
        z[...] = rng.standard_normal((4, 2))
    chunk = base / "corrupt" / f"{last}.zarr" / "1.0"
    raw = bytearray(chunk.read_bytes())
    for k in range(2, len(raw) - 2):
        raw[k] ^= 0x5A
    chunk.write_bytes(bytes(raw))
    # discovery fails: a shard's header is damaged
    _npy_set(base / "badheader", 4)
    p = base / "badheader" / "shard_0003.npy"
    p.write_bytes(p.read_bytes().replace(b"'descr'", b"'dexcr'", 1))
    # larger than a rank's memory (a sparse file: the header says 2**31 rows of float64)
    (base / "huge").mkdir()
    np.lib.format.open_memmap(base / "huge" / "shard_0000.npy", mode="w+", dtype=np.float64,
                              shape=(2**31,))
    cases = [
        {"name": "changed", "source": str(base / "changed"),
         "kwargs": {"trust_manifest": True}},
        {"name": "gone", "source": str(base / "gone"), "kwargs": {"trust_manifest": True}},
        {"name": "corrupt", "source": str(base / "corrupt"), "kwargs": {}},
        {"name": "two", "source": str(base / "two"), "kwargs": {"trust_manifest": True}},
        {"name": "discover-error", "source": str(base / "badheader"), "once": {},
         "load": False},
        {"name": "huge", "source": str(base / "huge"), "kwargs": {}},
        # the runtime survived every error above on both ranks
        {"name": "after", "source": str(base / "gone"),
         "kwargs": {"row_range": [0, 8], "trust_manifest": True}},
    ]
    spec = write_spec(base / "spec.json", {"cases": cases})
    job = python_job(base / "out", "load_cases.py", str(spec), timeout=240)
    assert job.rc == 0, job.describe()  # every error was caught, on every rank
    return base, job


def _same_error(job, name: str) -> dict:
    found = [r.results()[name] for r in job.ranks]
    assert not any(f["ok"] for f in found), found
    assert len({(f["type"], f["message"]) for f in found}) == 1, found
    return found[0]


@pytest.mark.parametrize("name,code", [("changed", "changed"), ("gone", "No such file"),
                                        ("corrupt", "")])
def test_a_bad_shard_read_by_one_rank_raises_the_same_error_on_every_rank(faults, name, code):
    base, job = faults
    err = _same_error(job, name)
    assert "ShardReadError" in err["mro"], err
    assert f"shard_{N - 1:04d}" in err["message"], err
    assert code in err["message"], err


def test_bad_shards_on_both_ranks_raise_the_lowest_tiles_error_on_every_rank(faults):
    # Each rank's tile fails: every rank reads all the tiles' error records and raises the
    # lowest failing tile's, so the ranks agree whichever point finished first.
    base, job = faults
    err = _same_error(job, "two")
    assert "ShardReadError" in err["mro"], err
    assert {r.results()["two"]["filename"] for r in job.ranks} == {
        str(base / "two" / "shard_0000.npy")}, err
    assert "shard_0000.npy" in err["message"] and "changed" in err["message"], err
    assert "tile 0 (rows [0, " in err["message"], err


def test_an_error_in_discover_once_reaches_every_rank(faults):
    _, job = faults
    err = _same_error(job, "discover-error")
    assert "LayoutError" in err["mro"] and "shard_0003.npy" in err["message"], err


def test_too_large_for_a_rank_is_the_same_out_of_memory_error_everywhere(faults):
    _, job = faults
    err = _same_error(job, "huge")
    assert err["type"] == "OutOfMemoryError", err
    assert "17.18 GB" in err["message"] or "17179869184" in err["message"], err


def test_the_runtime_survives_on_every_rank(faults):
    _, job = faults
    for r in job.ranks:
        assert r.results()["after"]["ok"], r.results()["after"]


def test_a_source_one_rank_cannot_see(tmp_path):
    """Rank 1 sees an empty directory where rank 0 sees the shards (a mount namespace of its
    own). discover_once discovers on one rank: if that is rank 0, rank 1's tiles cannot open
    their files and every rank gets the ShardReadError saying the source must be visible to
    every rank; if it is rank 1, every rank gets its SourceNotFoundError. Never a hang."""
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespaces here (unshare -m: {probe.stderr.decode().strip()})")
    _npy_set(tmp_path / "local", 5)
    spec = write_spec(tmp_path / "spec.json", {"cases": [
        {"name": "local-once", "source": str(tmp_path / "local"), "once": {}, "kwargs": {}},
        # A plain load(source) on several ranks discovers once as well: before, each rank
        # discovered, rank 1 raised and rank 0 went on into the launch.
        {"name": "local-plain", "source": str(tmp_path / "local"), "kwargs": {}}]})
    job = python_job(tmp_path / "out", "load_cases.py", str(spec), timeout=240,
                     env={"SHARDLOAD_MR_HIDE": f"1:{tmp_path / 'local'}"})
    assert job.rc == 0, job.describe()
    for case in ("local-once", "local-plain"):
        err = _same_error(job, case)
        if err["type"] == "ShardReadError":
            assert "visible to every rank" in err["message"], err
        else:
            assert "SourceNotFoundError" in err["mro"], err


def test_a_rank_killed_during_a_load_ends_the_job(tmp_path):
    (tmp_path / "data").mkdir()
    for i in range(4):
        (tmp_path / "data" / f"shard_{i:04d}.dat").write_bytes(b"")
    job = python_job(tmp_path / "out", "killed.py", str(tmp_path / "data"), timeout=180)
    assert job.rc != 0, job.describe()
    assert (tmp_path / "out" / "rank1" / "marker-killing").exists(), job.describe()
    assert not (tmp_path / "out" / "rank1" / "marker-rank-survived").exists()
    assert len(job.ranks) == RANKS
