"""save from 2 ranks in every format, overwrite=True included: the dataset equals numpy, one
rename puts it in place, and each rank writes its own tiles' shards (counted by strace)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
from conftest import python_job, write_spec

SAVE_FORMATS = ["npy", "raw", "zarr"]
ROWS = [7, 0, 12, 5]  # ragged, one empty shard


def read_saved(dest: pathlib.Path, fmt: str) -> np.ndarray:
    """The saved dataset read with numpy / zarr alone."""
    if fmt == "npy":
        files = sorted(dest.glob("shard_*.npy"))
        return np.concatenate([np.load(f) for f in files])
    if fmt == "raw":
        meta = json.loads((dest / "shardload.json").read_text())
        dtype = np.dtype(meta["dtype"])
        trailing = tuple(meta.get("trailing_shape", meta.get("shape", []))[-1:]) or ()
        files = sorted(dest.glob("shard_*.bin"))
        return np.concatenate([np.fromfile(f, dtype=dtype).reshape((-1,) + trailing)
                               for f in files])
    import zarr

    files = sorted(dest.glob("shard_*.zarr"))
    return np.concatenate([zarr.open_array(str(f), mode="r")[...] for f in files])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    base = tmp_path_factory.mktemp("save")
    rng = np.random.default_rng(7)
    parts = [rng.standard_normal((n, 3)).astype(np.float32) for n in ROWS]
    (base / "src").mkdir()
    for i, p in enumerate(parts):
        np.save(base / "src" / f"shard_{i:04d}.npy", p)
    cases = []
    for fmt in SAVE_FORMATS:
        dest = base / "saves" / fmt
        cases.append({"name": f"{fmt}-new", "source": str(base / "src"), "dest": str(dest),
                      "save": {"format": fmt, "num_shards": 4}})
        # the same destination again, replaced
        cases.append({"name": f"{fmt}-overwrite", "source": str(base / "src"),
                      "dest": str(dest), "save": {"format": fmt, "num_shards": 6,
                                                  "overwrite": True}})
    (base / "saves").mkdir()
    spec = write_spec(base / "spec.json", {"cases": cases})
    job = python_job(base / "out", "save_cases.py", str(spec), trace=True)
    return base, job, np.concatenate(parts)


def _phase(fmt: str, kind: str) -> tuple[str, str]:
    order = [f"{f}-{k}" for f in SAVE_FORMATS for k in ("new", "overwrite")] + ["end"]
    name = f"{fmt}-{kind}"
    return name, order[order.index(name) + 1]


@pytest.mark.parametrize("fmt", SAVE_FORMATS)
@pytest.mark.parametrize("kind", ["new", "overwrite"])
def test_save_from_two_ranks(saved, fmt, kind):
    base, job, expected = saved
    assert job.rc == 0, job.describe()
    name, until = _phase(fmt, kind)
    for rank in job.ranks:
        result = rank.results()[name]
        assert result["ok"], f"rank {rank.index}: {result}"
        np.testing.assert_array_equal(rank.array(name), expected)
    # What is on disk now is the last save of this format.
    if kind == "overwrite":
        np.testing.assert_array_equal(read_saved(base / "saves" / fmt, fmt), expected)
    dest = str(base / "saves" / fmt)
    # One rename put the dataset in place (a rename onto dest, or an exchange with it).
    renames = [(r.index, a, b) for r in job.ranks for a, b in r.renamed(base / "saves")
               if b == dest]
    # Only the renames between this case's markers count.
    in_phase = []
    for r in job.ranks:
        active = False
        for call, a, b in r.trace:
            if call.startswith("open") and a.endswith(f"marker-{name}"):
                active = True
            elif call.startswith("open") and a.endswith(f"marker-{until}"):
                active = False
            elif active and call.startswith("rename") and b == dest:
                in_phase.append((r.index, a, b))
    assert len(in_phase) == 1, (in_phase, renames)
    # Each rank's tiles wrote shard files (opened for writing, not created: one rank creates
    # them all before the launch), and no shard file was written by both: the shards here
    # fall on tile edges, so no file belongs to two tiles.
    # (A Zarr shard's chunk files are created at their sizes beforehand too.)
    written = []
    for r in job.ranks:
        paths = {p for p in r.opened(base / "saves", since=name, until=until, writing=True,
                                     creating=False)
                 if "/shard_" in p and not pathlib.Path(p).name.startswith(".z")}
        written.append(paths)
    assert all(written), written
    assert not (written[0] & written[1]), written
