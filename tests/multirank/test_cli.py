"""The shardload program on 2 ranks: write, read, index, verify and inspect each print one
report (one rank speaks) and exit with the same status on every rank."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
from conftest import BUILD, run_job

CLI = str(BUILD / "shardload")


def _one_report(job, needle: str) -> str:
    """The report: printed by exactly one rank (stdout and stderr); the others print nothing."""
    speaking = [r for r in job.ranks if (r.out + r.err).strip()]
    assert len(speaking) == 1, job.describe()
    report = speaking[0].out + speaking[0].err
    assert needle in report, job.describe()
    return report


def _same_status(job, expected: int) -> None:
    assert [r.rc for r in job.ranks] == [expected] * len(job.ranks), job.describe()
    assert (job.rc == 0) == (expected == 0), job.describe()


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    base = tmp_path_factory.mktemp("cli")
    data = base / "data"
    job = run_job(base / "write", [CLI, "write", "--shard-dir", str(data), "--num-shards", "6",
                                   "--shape", "1000,3", "--seed", "4"])
    return base, data, job


def test_write(written):
    _, data, job = written
    _same_status(job, 0)
    _one_report(job, "shard")
    files = sorted(data.glob("shard_*.npy"))
    assert len(files) == 6
    whole = np.concatenate([np.load(f) for f in files])
    assert whole.shape == (1000, 3) and whole.dtype == np.float32
    assert json.loads((data / "_meta.json").read_text())["seed"] == 4


def test_read_verifies_and_discovers_on_one_rank(written):
    base, data, _ = written
    job = run_job(base / "read", [CLI, "read", str(data), "--overdecompose", "2"], trace=True)
    _same_status(job, 0)
    report = _one_report(job, "source:")
    assert "verif" in report.lower(), report
    # `shardload write` wrote a manifest: one rank discovered by reading it (and listing the
    # directory), the other touched neither; both read shards for their tiles.
    manifest = str(data / "shardload.manifest")
    readers = [r.index for r in job.ranks if manifest in r.opened(data)]
    listers = [r.index for r in job.ranks if str(data) in
               [c[1] for c in r.trace if c[0].startswith("open")]]
    assert len(readers) == 1 and listers == readers, (readers, listers)
    assert all(any(p.endswith(".npy") for p in r.opened(data)) for r in job.ranks)


def test_index_then_verify(written):
    base, data, _ = written
    job = run_job(base / "index", [CLI, "index", str(data), "--checksum", "xxh3"], trace=True)
    _same_status(job, 0)
    _one_report(job, "manifest")
    # One rank read every shard (probes and checksums) and wrote the manifest; the other
    # opened none of it.
    shards = sorted(str(f) for f in data.glob("shard_*.npy"))
    workers = [r.index for r in job.ranks if r.opened(data)]
    assert len(workers) == 1, [r.opened(data) for r in job.ranks]
    worker = job.ranks[workers[0]]
    assert sorted(set(p for p in worker.opened(data, writing=False)
                      if p.endswith(".npy"))) == shards
    assert any("shardload.manifest" in b for _, b in worker.renamed(data))
    job = run_job(base / "verify", [CLI, "verify", str(data)])
    _same_status(job, 0)
    _one_report(job, "6")


def test_verify_names_a_changed_shard_with_status_1_on_every_rank(written):
    base, data, _ = written
    # test_index_then_verify (run before, in file order) wrote the manifest
    assert (data / "shardload.manifest").exists()
    bad = pathlib.Path(sorted(data.glob("shard_*.npy"))[4])
    raw = bytearray(bad.read_bytes())
    raw[-5] ^= 0xFF  # same size: only the checksum can tell
    bad.write_bytes(bytes(raw))
    job = run_job(base / "verify-bad", [CLI, "verify", str(data)])
    _same_status(job, 1)
    assert bad.name in _one_report(job, bad.name)
    raw[-5] ^= 0xFF
    bad.write_bytes(bytes(raw))


def test_inspect(written):
    base, data, _ = written
    job = run_job(base / "inspect", [CLI, "inspect", str(data), "--json"])
    _same_status(job, 0)
    report = _one_report(job, "shard_0000.npy")
    assert json.loads(report)["total_rows"] == 1000 if "total_rows" in report else True
