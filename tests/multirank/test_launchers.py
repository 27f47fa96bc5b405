"""The other ways onto 2 ranks: Legate's own driver (legate --launcher mpirun
--ranks-per-node 2), and a C++ program (the C++ API's test binary) under mpirun."""

from __future__ import annotations

import numpy as np
from conftest import BUILD, run_job, python_job, write_spec
from data import RAGGED, dataset, write_shards


def test_the_legate_driver_runs_a_load_on_two_ranks(tmp_path):
    rng = np.random.default_rng(11)
    parts = dataset(rng, "npy", RAGGED)
    write_shards(tmp_path / "npy", "npy", parts)
    spec = write_spec(tmp_path / "spec.json", {"cases": [
        {"name": "K1", "source": str(tmp_path / "npy"), "kwargs": {}},
        {"name": "once-K4", "source": str(tmp_path / "npy"), "once": {},
         "kwargs": {"overdecompose": 4}}]})
    job = python_job(tmp_path / "out", "load_cases.py", str(spec), legate_driver=True)
    assert job.rc == 0, job.describe()
    whole = np.concatenate(parts)
    for r in range(2):
        d = tmp_path / "out" / f"rank{r}"
        assert d.is_dir(), f"rank {r} did not run: {job.output[-3000:]}"
        for name in ("K1", "once-K4"):
            np.testing.assert_array_equal(np.load(d / f"{name}.npy"), whole)


def test_a_cpp_program_on_two_ranks(tmp_path):
    # Tests of the C++ API whose files every rank can make alike (the others write into a
    # directory named by the process id, which differs between ranks).
    job = run_job(tmp_path / "out", [str(BUILD / "legate_tests"), "--gtest_brief=1",
                                     "--gtest_filter=LegateLoad.EmptyDataset:"
                                     "LegateLoad.DatasetLargerThanLegateMemoryIsRefused"])
    assert job.rc == 0 and [r.rc for r in job.ranks] == [0, 0], job.describe()
    for r in job.ranks:
        assert "2 tests" in r.out and "FAILED" not in r.out, r.out
