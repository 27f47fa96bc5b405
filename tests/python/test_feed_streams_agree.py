"""shardload.feed: the ranks of a job cut one stream, or every rank refuses at the loop's start.

Ranks whose feeds were built with other seeds or batch sizes, or on which a state was loaded or
an epoch set on one rank only, would cut the epoch's stream differently: overlapping samples (a
per-rank seed), or other batch counts and a hang in the next collective. Checked here on 2
processes over gloo on loopback (torch, CPU): every rank raises the same ValueError naming what
differs, none hangs, and ranks that agree get the oracle's disjoint batches. Also: set_epoch
during a loop is refused, so the state never names an epoch the loop is not in."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import shardload
import shardload.feed as sf
from test_feed import expected_batches, ids, oracle_stream, write_rows

SEED, BATCH = 7, 4

CHILD = r"""
import json, sys
import numpy as np
import torch.distributed as dist
import shardload.feed as sf
case, d, rank, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
dist.init_process_group("gloo", rank=rank, world_size=2, init_method="env://")
result = {}
try:
    feed = sf.Feed(d, 4 + (rank if case == "batch_size" else 0),
                   seed=7 + (rank if case == "seed" else 0))
    if case == "state" and rank == 0:  # a checkpoint restored on rank 0 only
        state = feed.state_dict()
        state["position"] = 16
        feed.load_state_dict(state)
    if case == "epoch" and rank == 0:  # set_epoch on rank 0 only
        feed.set_epoch(1)
    batches = []
    for b in feed:
        batches.append(b[:, 0].tolist())
        dist.all_reduce(__import__("torch").zeros(1))  # the training step's collective
    result["batches"] = batches
except Exception as e:
    result["error"] = [type(e).__name__, str(e)]
with open(out, "w") as f:  # before the teardown, which is not what is tested here
    json.dump(result, f)
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_ranks(case: str, d: pathlib.Path, tmp: pathlib.Path, timeout: float = 120) -> list:
    # The children import the shardload this process imported.
    here = str(pathlib.Path(shardload.__file__).resolve().parents[1])
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    outs = [tmp / f"{case}-{r}.json" for r in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, case, str(d), str(r), str(outs[r])],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env) for r in range(2)]
    deadline = time.monotonic() + timeout
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"{case}: the ranks did not end in {timeout} s (a hang)")
    assert all(o.exists() for o in outs), "\n".join(logs)
    return [json.loads(o.read_text()) for o in outs]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed: scripts/setup_torch.sh installs it")
@pytest.mark.parametrize("case", ["agree", "seed", "batch_size", "state", "epoch"])
def test_ranks_whose_loops_would_cut_different_streams_all_refuse(tmp_path, case):
    d = tmp_path / "d"
    n = write_rows(d)
    got = _two_ranks(case, d, tmp_path)
    if case == "agree":
        stream = oracle_stream("row", n, SEED, 0)
        for r in range(2):
            want = expected_batches(stream, BATCH, 2, r, True)
            assert got[r]["batches"] == [w.tolist() for w in want]
        return
    # Before: the seeds' and epochs' ranks each served their own order (samples seen twice,
    # others never, no error); the batch sizes' and the state's ended in a hang or in gloo's
    # "Connection reset by peer".
    assert all("error" in g for g in got), got
    assert got[0]["error"] == got[1]["error"]
    kind, text = got[0]["error"]
    assert kind == "ValueError"
    assert text.startswith("Feed: the ranks' loops would cut different streams (")
    what = {"seed": "seed 7 on rank 0, 8 on rank 1", "batch_size": "batch_size 4 on rank 0, "
            "5 on rank 1", "state": "position 16 on rank 0, 0 on rank 1",
            "epoch": "epoch 1 on rank 0, 0 on rank 1"}[case]
    assert what in text


def test_set_epoch_during_a_loop_is_refused_and_the_state_stays_true(tmp_path):
    d = tmp_path / "d"
    n = write_rows(d)
    feed = sf.Feed(d, BATCH, seed=3)
    it = iter(feed)
    next(it)
    # Before: accepted; the loop went on in epoch 0 and wrote its position, so the state said
    # epoch 1 at position 8, and a resume from it skipped 8 samples of epoch 1.
    with pytest.raises(RuntimeError, match=r"set_epoch\(1\): the feed is being iterated in "
                                           r"epoch 0"):
        feed.set_epoch(1)
    feed.set_epoch(0)  # the epoch the loop is in: nothing to change
    next(it)
    assert (feed.state_dict()["epoch"], feed.state_dict()["position"]) == (0, 2 * BATCH)
    it.close()
    resumed = sf.Feed(d, BATCH)
    resumed.load_state_dict(json.loads(json.dumps(feed.state_dict())))
    stream = oracle_stream("row", n, 3, 0)
    assert [ids(b).tolist() for b in resumed] == \
        [w.tolist() for w in expected_batches(stream, BATCH, 1, 0, True, start=2 * BATCH)]
    feed.set_epoch(1)  # after the loop: starts epoch 1
    assert (feed.epoch, feed.position) == (1, 0)
    assert np.array_equal(np.concatenate([ids(b) for b in feed]),
                          oracle_stream("row", n, 3, 1)[:len(feed) * BATCH])


JAX_CHILD = r"""
import json, sys
import jax
d, out, port, pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                           process_id=pid, initialization_timeout=60)
jax.process_index()  # the backends start together (each waits for the other's)
import shardload.feed as sf

got = {}
for case in ("seed", "agree"):
    feed = sf.Feed(d, 4, seed=7 + (pid if case == "seed" else 0))
    try:
        got[case] = {"batches": [b[:, 0].tolist() for b in feed]}
    except Exception as e:
        got[case] = {"error": [type(e).__name__, str(e)]}
with open(out, "w") as f:
    json.dump(got, f)
jax.distributed.shutdown()
"""


def test_jax_processes_whose_seeds_differ_all_refuse(tmp_path):
    """The same on 2 JAX processes (the exchange through jax.distributed's key-value store): a
    per-process seed is the same ValueError on both; then feeds that agree serve the oracle's
    disjoint batches."""
    pytest.importorskip("jax")
    from test_feed import run_two_jax_processes

    d = tmp_path / "d"
    n = write_rows(d)
    got = run_two_jax_processes(tmp_path, JAX_CHILD, [str(d)])
    assert got[0]["seed"] == got[1]["seed"]
    assert got[0]["seed"]["error"][0] == "ValueError"
    assert "(seed 7 on rank 0, 8 on rank 1)" in got[0]["seed"]["error"][1]
    stream = oracle_stream("row", n, SEED, 0)
    for r in range(2):
        assert got[r]["agree"]["batches"] == \
            [w.tolist() for w in expected_batches(stream, BATCH, 2, r, True)]
