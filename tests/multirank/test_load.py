"""Every format on 2 ranks equals numpy: K=1 and K=4, ragged and empty shards, row_range=, astype=.

One job loads every case (a job starts Legate on both ranks, which costs more than the loads);
each rank writes what it got and the tests compare both ranks' arrays with the oracle."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from conftest import PYTHON, python_job, write_spec
from data import RAGGED, dataset, write_shards

FORMATS = ["npy", "raw", "hdf5", "parquet", "arrow", "zarr"]
KS = [1, 4]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    base = tmp_path_factory.mktemp("load")
    rng = np.random.default_rng(19)
    oracle, cases = {}, []
    for fmt in FORMATS:
        parts = dataset(rng, fmt, RAGGED)
        kwargs = write_shards(base / fmt, fmt, parts)
        whole = np.concatenate(parts)
        for k in KS:
            name = f"{fmt}-K{k}"
            cases.append({"name": name, "source": str(base / fmt),
                          "kwargs": {**kwargs, "overdecompose": k}})
            oracle[name] = whole
        # row_range= crossing empty shards and shard edges, and astype=, at K=4
        cases.append({"name": f"{fmt}-rows", "source": str(base / fmt),
                      "kwargs": {**kwargs, "overdecompose": 4, "row_range": [3, 27]}})
        oracle[f"{fmt}-rows"] = whole[3:27]
        cases.append({"name": f"{fmt}-astype", "source": str(base / fmt),
                      "kwargs": {**kwargs, "overdecompose": 4, "astype": "float32"}})
        oracle[f"{fmt}-astype"] = whole.astype(np.float32)
        cases.append({"name": f"{fmt}-rows-astype", "source": str(base / fmt),
                      "kwargs": {**kwargs, "overdecompose": 1, "row_range": [5, 6],
                                 "astype": "int64"}})
        oracle[f"{fmt}-rows-astype"] = whole[5:6].astype(np.int64)
    # progress=True: one bar for the job, on the first rank.
    cases.append({"name": "npy-bar", "source": str(base / "npy"),
                  "kwargs": {"progress": True}})
    oracle["npy-bar"] = oracle["npy-K1"]
    spec = write_spec(base / "spec.json", {"cases": cases})
    job = python_job(base / "out", "load_cases.py", str(spec))
    assert job.rc == 0, job.describe()
    return job, oracle


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("what", ["K1", "K4", "rows", "astype", "rows-astype"])
def test_every_format_equals_numpy_on_both_ranks(loaded, fmt, what):
    job, oracle = loaded
    name = f"{fmt}-{what}"
    expected = oracle[name]
    for rank in job.ranks:
        result = rank.results()[name]
        assert result["ok"], f"rank {rank.index}: {result}"
        got = rank.array(name)
        assert got.dtype == expected.dtype and got.shape == expected.shape, (rank.index, name)
        np.testing.assert_array_equal(got, expected, err_msg=f"rank {rank.index}: {name}")


def test_progress_true_draws_one_bar_on_the_first_rank(loaded):
    """Every rank takes progress=True, and only the first draws; without tqdm in the job's
    Python every rank raises the same ImportError (one that went on alone would hang)."""
    job, oracle = loaded
    if subprocess.run([str(PYTHON), "-c", "import tqdm"], capture_output=True).returncode:
        for rank in job.ranks:
            result = rank.results()["npy-bar"]
            assert not result["ok"] and result["type"] == "ImportError", result
            assert "shardload.load: progress=True draws its bar with tqdm" in result["message"]
        return
    for rank in job.ranks:
        assert rank.results()["npy-bar"]["ok"], rank.results()["npy-bar"]
        np.testing.assert_array_equal(rank.array("npy-bar"), oracle["npy-bar"])
    rows = len(oracle["npy-bar"])
    assert "shardload.load: 100%" in job.ranks[0].err, job.ranks[0].err[-2000:]
    assert f"{rows}/{rows} rows" in job.ranks[0].err
    assert "shardload.load:" not in job.ranks[1].err, job.ranks[1].err[-2000:]
