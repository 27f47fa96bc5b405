"""Each rank opens only the files its own tiles need; discover_once and `shardload read`
touch the shard files on one rank only.

Counted per rank by strace (rank.sh): every open of every thread of the rank's process, with
markers the scenario opens between the phases (discovery, each load)."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from conftest import BUILD, run_job, python_job, write_spec
from plan import files_of, split_between_ranks, tiles

PROCESSORS = 2  # one CPU per rank
EVEN = [4] * 8
RAGGED = [3, 0, 9, 1, 6, 0, 7, 5]


def _write(directory: pathlib.Path, rows: list[int], seed: int) -> list[np.ndarray]:
    directory.mkdir()
    rng = np.random.default_rng(seed)
    parts = [rng.integers(0, 1000, size=(n, 2), dtype=np.int64) for n in rows]
    for i, p in enumerate(parts):
        np.save(directory / f"shard_{i:04d}.npy", p)
    return parts


def _indices(paths: list[str]) -> set[int]:
    return {int(pathlib.Path(p).stem.split("_")[1]) for p in paths}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    base = tmp_path_factory.mktemp("opens")
    even = _write(base / "even", EVEN, 1)
    ragged = _write(base / "ragged", RAGGED, 2)
    cases = []
    for name, d in (("even", base / "even"), ("ragged", base / "ragged")):
        cases.append({"name": f"{name}-discover", "source": str(d), "once": {}, "load": False})
        for k in (1, 4):
            cases.append({"name": f"{name}-K{k}", "source": str(d), "once": {},
                          "kwargs": {"overdecompose": k}})
    spec = write_spec(base / "spec.json", {"cases": cases})
    job = python_job(base / "out", "load_cases.py", str(spec), trace=True)
    assert job.rc == 0, job.describe()
    return base, job, {"even": np.concatenate(even), "ragged": np.concatenate(ragged)}


@pytest.mark.parametrize("name", ["even", "ragged"])
def test_discover_once_touches_the_files_on_one_rank(traced, name):
    base, job, _ = traced
    opened = [_indices(r.opened(base / name, since=f"{name}-discover", until=f"{name}-K1"))
              for r in job.ranks]
    rows = EVEN if name == "even" else RAGGED
    assert sorted(map(len, opened)) == [0, len(rows)], opened
    # ... and both ranks hold the same layout
    layouts = [r.results()[f"{name}-discover"]["layout"] for r in job.ranks]
    assert layouts[0] == layouts[1] and layouts[0]["rows_per_shard"] == rows


@pytest.mark.parametrize("name", ["even", "ragged"])
@pytest.mark.parametrize("k", [1, 4])
def test_each_rank_opens_only_its_tiles_files(traced, name, k):
    base, job, oracle = traced
    rows = EVEN if name == "even" else RAGGED
    until = f"{name}-K4" if k == 1 else ("ragged-discover" if name == "even" else "end")
    opened = [_indices(r.opened(base / name, since=f"{name}-K{k}-load", until=until))
              for r in job.ranks]
    # Both ranks read (the work is split) and the files each opened during the load (after its
    # discover_once) are exactly those of the tiles it ran.
    assert all(opened), opened
    assert split_between_ranks(rows, PROCESSORS, k, opened), (opened, tiles(rows, PROCESSORS, k))
    for r in job.ranks:
        np.testing.assert_array_equal(r.array(f"{name}-K{k}"), oracle[name])


def test_cli_read_discovers_on_one_rank(tmp_path):
    _write(tmp_path / "data", EVEN, 3)
    job = run_job(tmp_path / "out", [str(BUILD / "shardload"), "read", str(tmp_path / "data")],
                  trace=True)
    assert job.rc == 0 and [r.rc for r in job.ranks] == [0, 0], job.describe()
    opened = [_indices(r.opened(tmp_path / "data")) for r in job.ranks]
    everything = set(range(len(EVEN)))
    discoverer = [i for i, s in enumerate(opened) if s == everything]
    assert len(discoverer) == 1, opened
    other = opened[1 - discoverer[0]]
    # The other rank opened only what its tiles of the load read (and maybe the warm-up load's
    # one shard, the smallest: shard 0), never the whole set.
    its_tiles = [files_of(EVEN, t) for t in tiles(EVEN, PROCESSORS, 1)]
    assert other and any(other - {0} <= t for t in its_tiles), opened
    # One report: only one rank printed.
    reports = [r.out for r in job.ranks if "source:" in r.out]
    assert len(reports) == 1, job.describe()
