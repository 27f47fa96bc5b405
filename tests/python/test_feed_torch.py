"""shardload.feed with real PyTorch (CPU, requirements-torch.txt): the DLPack hand-off without a
copy, DataLoader over Feed.torch_dataset() with and without workers, and DDP on 2 processes
over gloo on loopback with rank and world size from torch.distributed: equal batch counts on
uneven shards, each sample once per epoch, a killed run resumed exactly on 2 processes and on 1.

torch runs only in processes of its own (torch_worker.py; this process never imports it: see
the worker's docstring). What they saw is compared here with the brute-force oracle of
test_feed.py (the Feistel network on Python ints, the materialised block order)."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import queue
import socket
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from test_feed import expected_batches, oracle_stream, write_rows

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "torch_worker.py"
BATCH, SEED = 4, 11  # torch_worker.py's

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed: scripts/setup_torch.sh installs requirements-torch.txt "
           "(scripts/test.sh runs it)")


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HERE.parents[1] / "python")] + os.environ.get("PYTHONPATH", "").split(os.pathsep))}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(mode: str, d: pathlib.Path, tmp: pathlib.Path, world: int, *extra: str,
                ) -> tuple[list[subprocess.Popen], list[pathlib.Path]]:
    """Starts `world` ranks of the worker on one fresh port; returns them and their outputs."""
    port = free_port()
    procs, outs = [], []
    for r in range(world):
        out = tmp / f"{mode}-{world}-{r}.json"
        outs.append(out)
        procs.append(subprocess.Popen(
            [sys.executable, str(WORKER), mode, str(d), str(out), "--rank", str(r), "--world",
             str(world), "--port", str(port), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env()))
    return procs, outs


def run_ranks(mode: str, d: pathlib.Path, tmp: pathlib.Path, world: int, ckpt: pathlib.Path,
              timeout: float = 120, extra: tuple[str, ...] = ()
              ) -> tuple[list[int], list[dict | None], str]:
    """Starts `world` ranks of the worker; returns their exit codes, outputs and logs. A rank
    that has not ended by the deadline (a hang) is killed, and the test fails."""
    procs, outs = start_ranks(mode, d, tmp, world, "--ckpt", str(ckpt), *extra)
    deadline = time.monotonic() + timeout
    codes, logs = [], []
    try:
        for p in procs:
            log, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            codes.append(p.returncode)
            logs.append(log)
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"{mode} on {world} processes did not end in {timeout} s (a hang)")
    results = [json.loads(o.read_text()) if o.exists() else None for o in outs]
    return codes, results, "\n".join(logs)


def run_one(mode: str, d: pathlib.Path, out: pathlib.Path, *extra: str,
            timeout: float = 120) -> dict | list:
    r = subprocess.run([sys.executable, str(WORKER), mode, str(d), str(out), *extra],
                       capture_output=True, text=True, timeout=timeout, env=env())
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(out.read_text())


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "d"
    n = write_rows(d)  # 67 rows in 7 shards of uneven rows, one empty
    return d, n


def test_torch_takes_batches_without_a_copy_and_kept_ones_stay_valid(data, tmp_path):
    d, n = data
    got = run_one("dlpack", d, tmp_path / "out.json")
    want = expected_batches(oracle_stream("row", n, 3, 0), 5, 1, 0, True)
    assert len(got["same"]) == len(want) == 13
    assert all(got["same"])  # torch.from_dlpack: the batch's own memory
    assert got["seen"] == [w.tolist() for w in want]
    # Every third tensor kept (alone: its numpy batch dropped) past the feed's own end: each
    # still holds its batch's rows, so no later batch was read into a buffer a tensor held.
    assert got["kept"] == [[k, want[k].tolist()] for k in range(0, 13, 3)]
    assert len(set(got["kept_pointers"])) == len(got["kept"])
    assert got["allocated"] <= len(got["kept"]) + 4 + 1  # the kept, the pool, one in flight
    assert got["released_pointers"] <= 4  # tensors dropped at once: buffers reused


# (num_workers, shuffle, drop_last, resume position) over rank 1 of 2, batch 4, 67 rows:
# 8 steps (drop_last) or 9, so the workers' shares are 4+4, 5+4, 3+3+2 and, resumed after 3
# steps, 3+2.
LOADER_CASES = [(0, "row", True, None), (2, "row", False, None), (3, "block", True, None),
                (2, "row", True, 24)]


def test_a_dataloader_over_the_feed_yields_its_batches_with_and_without_workers(data, tmp_path):
    d, n = data
    got = run_one("loader", d, tmp_path / "out.json", "--cases", json.dumps(LOADER_CASES))
    for (workers, shuffle, drop_last, position), case in zip(LOADER_CASES, got["cases"],
                                                             strict=True):
        stream = oracle_stream(shuffle, n, 5, 1, block_rows=3, window_blocks=2)
        want = expected_batches(stream, BATCH, 2, 1, drop_last, start=position or 0)
        # Each batch once, in the feed's order: no worker duplicates or drops one.
        assert case["batches"] == [w.tolist() for w in want], (workers, shuffle, drop_last)
        assert case["len"] == len(want)
        if workers == 0:  # iterated here: the feed's state moved to the next epoch
            assert (case["after"]["epoch"], case["after"]["position"]) == (2, 0)
        else:  # iterated by forked copies: this process's feed is where the loop began
            assert case["after"] == case["before"]
    assert got["spawn"] is not None and got["spawn"].startswith("Feed cannot be pickled: give "
                                                               "DataLoader workers the feed by fork")


def test_ddp_on_two_processes_equal_batches_each_sample_once_and_a_resume(data, tmp_path):
    d, n = data
    ckpt = tmp_path / "ckpt.pt"
    codes, results, log = run_ranks("train", d, tmp_path, 2, ckpt)
    # Each rank wrote its epochs, then was killed in step 5 of the third run (a checkpoint
    # of step 3 on disk).
    assert codes == [-9, -9], log
    assert ckpt.exists(), log
    stream = oracle_stream("row", n, SEED, 0)
    for drop_last, steps in ((True, 8), (False, 9)):
        ranks = [res["epochs"][str(drop_last)] for res in results]
        assert [(r["rank"], r["world"]) for r in ranks] == [(0, 2), (1, 2)]  # from gloo
        # Equal batch counts whatever the shards' rows (7, 0, 13, 1, 22, 5, 19).
        assert [len(r["batches"]) for r in ranks] == [steps, steps]
        assert [r["len"] for r in ranks] == [steps, steps]
        for r in ranks:
            assert r["batches"] == [w.tolist() for w in
                                    expected_batches(stream, BATCH, 2, r["rank"], drop_last)]
        seen = np.concatenate([np.array(r["batches"]).reshape(-1) for r in ranks])
        if drop_last:  # the first 64 of the stream, each once; the last 3 rows not this epoch
            assert sorted(seen.tolist()) == sorted(stream[:64].tolist())
            assert len(set(seen.tolist())) == 64
        else:  # every row, the first 5 of the stream twice (the step past the end wraps)
            counts = np.bincount(seen, minlength=n)
            assert (counts >= 1).all() and counts.sum() == 72
            assert sorted(np.flatnonzero(counts == 2).tolist()) == sorted(stream[:5].tolist())
        # DDP averaged the gradients: both replicas end with the same weights.
        assert ranks[0]["weights"] == ranks[1]["weights"]
    whole = {r: results[r]["epochs"]["True"]["batches"] for r in (0, 1)}

    # Resumed on 2 processes from the step-3 checkpoint: each rank goes on with exactly the
    # batches the uninterrupted run had from step 3.
    codes, resumed, log = run_ranks("resume", d, tmp_path, 2, ckpt)
    assert codes == [0, 0], log
    for r in (0, 1):
        # A feed kept past destroy_process_group() says why it cannot exchange, and at the
        # interpreter's exit neither it nor its module holds a process group (one torn down in
        # the finalisation can abort the process: "terminate called without an active
        # exception", SIGABRT, about 1 exit in 7 of this test on a loaded machine).
        assert "destroyed" in resumed[r]["after_destroy"]
        exit_report = pathlib.Path(str(tmp_path / f"resume-2-{r}.json") + ".exit")
        assert json.loads(exit_report.read_text()) == {"groups_held": 0}
        assert resumed[r]["left"] == 5
        assert resumed[r]["batches"] == whole[r][3:]
        assert (resumed[r]["state"]["epoch"], resumed[r]["state"]["position"]) == (1, 0)

    # Resumed on 1 process: the rest of the epoch (positions 24..) in steps of 4, so before
    # and after together serve the stream's first 64 samples, each once.
    codes, alone, log = run_ranks("resume", d, tmp_path, 1, ckpt)
    assert codes == [0], log
    assert alone[0]["world"] == 1
    assert alone[0]["batches"] == [w.tolist() for w in
                                   expected_batches(stream, BATCH, 1, 0, True, start=24)]
    before = [x for r in (0, 1) for b in whole[r][:3] for x in b]
    after = [x for b in alone[0]["batches"] for x in b]
    assert sorted(before + after) == sorted(stream[:64].tolist())


def test_ddp_killed_mid_epoch_on_two_processes_resumes_on_three(data, tmp_path):
    """Both ranks of a 2-process run (drop_last=False) SIGKILLed from outside in step 5, with
    batches read ahead; the step-3 checkpoint resumed on 3 processes. The rest of the epoch,
    positions [24, 67) padded to 4 steps of 12, is served once across the 3 ranks, and the
    samples trained on before the checkpoint plus those after the resume are the
    uninterrupted 2-process epoch, position for position."""
    d, n = data
    ckpt = tmp_path / "ckpt.pt"
    procs, logs = start_ranks("killed", d, tmp_path, 2, "--ckpt", str(ckpt))
    lines: queue.Queue = queue.Queue()  # (rank, line); (rank, None) when its output ends

    def pump(r: int, p: subprocess.Popen) -> None:
        for line in p.stdout:
            lines.put((r, line))
        lines.put((r, None))

    for r, p in enumerate(procs):
        threading.Thread(target=pump, args=(r, p), daemon=True).start()
    try:
        deadline, waiting, said = time.monotonic() + 120, {0, 1}, []
        while waiting:  # each rank says when it is in step 5; one that fails says why
            try:
                r, line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"ranks {sorted(waiting)} did not reach step 5 in 120 s (a hang):"
                            f"\n{''.join(said)}")
            assert line is not None, f"rank {r} ended before step 5:\n{''.join(said)}"
            said.append(line)
            if line.startswith("at step 5"):
                waiting.discard(r)
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait(timeout=30)
    assert [p.returncode for p in procs] == [-signal.SIGKILL] * 2
    stream = oracle_stream("row", n, SEED, 0)
    whole = [expected_batches(stream, BATCH, 2, r, False) for r in (0, 1)]  # 9 steps each
    seen = [[json.loads(line) for line in log.read_text().splitlines()] for log in logs]
    for r in (0, 1):  # what each rank trained on before it was killed: the epoch's start
        assert seen[r] == [w.tolist() for w in whole[r][:5]]

    codes, resumed, log = run_ranks("resume", d, tmp_path, 3, ckpt)
    assert codes == [0, 0, 0], log
    for r in range(3):
        assert resumed[r]["world"] == 3 and resumed[r]["left"] == 4
        assert resumed[r]["batches"] == [w.tolist() for w in expected_batches(
            stream, BATCH, 3, r, False, start=24)]
        assert (resumed[r]["state"]["epoch"], resumed[r]["state"]["position"]) == (1, 0)
    # Steps 4 and 5 were trained on after the checkpoint: the resume serves them again, and
    # the sequence counts only the checkpointed steps before it.
    before = [x for k in range(3) for r in (0, 1) for x in seen[r][k]]
    after = [x for k in range(4) for r in range(3) for x in resumed[r]["batches"][k]]
    uninterrupted = [x for k in range(9) for r in (0, 1) for x in whole[r][k].tolist()]
    assert before + after == uninterrupted
    assert before + after == stream.tolist() + stream[:5].tolist()  # 72 positions, 5 padded
    assert sorted(after[:n - 24]) == sorted(stream[24:].tolist())  # the rest, each once


# The fault test's shards: with shuffle="none", 4 rows a batch on 2 ranks, step k of rank r
# is rows [8k + 4r, 8k + 4r + 4): shard_0001 (rows 28..31) is read by rank 1 alone, in step 3;
# shard_0002 (rows 32..39) by both, in step 4. Both past the 3 steps read ahead when the
# shard changes (after step 0).
FAULT_ROWS = [28, 4, 8, 24]


# Each fault with each set of readers (the feed's read path is the same for both faults, which
# test_feed.py checks in every order; each case here costs 2 torch processes).
@pytest.mark.parametrize("kind,shard,readers", [("changed", "shard_0002.npy", (0, 1)),
                                                ("vanished", "shard_0001.npy", (1,))])
def test_a_shard_changed_or_gone_under_ddp_fails_every_rank_without_a_hang(
        tmp_path, kind, shard, readers):
    """A shard rewritten with other bytes of the same size, or removed, once a 2-process DDP
    epoch has begun. Every rank raises ShardReadError naming it at the step whose batch needs
    it, having trained on every batch before, also a rank that does not read it (its rows are
    elsewhere): the ranks agree on each step's read errors before yielding its batches (one
    small exchange a step), so no rank goes on into DDP's all-reduce to fail there with
    gloo's "Connection closed by peer"."""
    d = tmp_path / "d"
    n = write_rows(d, FAULT_ROWS)
    fail_step = {"shard_0001.npy": 3, "shard_0002.npy": 4}[shard]
    codes, results, log = run_ranks("fault", d, tmp_path, 2, tmp_path / "unused",
                                    extra=("--fault", f"{kind}:{shard}"))
    assert codes == [1, 1], log  # both end on their exception; neither hangs
    stream = np.arange(n)
    for r, res in enumerate(results):
        assert res is not None, log
        err = res["error"]
        assert err is not None, log
        want = [w.tolist() for w in expected_batches(stream, BATCH, 2, r, True)]
        # The typed error naming the file, from the next() of the step that reads it.
        assert err["shard_read_error"], (r, err)
        assert err["filename"].endswith(shard), (r, err)
        assert shard in err["message"], (r, err)
        # A fill whose reads had begun before the change sees it after them ("while reading").
        assert any(m in err["message"] for m in (
            ("changed since discovery", "changed while reading") if kind == "changed" else
            ("No such file",))), (r, err)
        assert res["steps"] == want[:fail_step], r
        assert err["after_s"] < 30, err
        if r not in readers:  # the reader's error, saying where it was raised
            assert err["notes"] == [f"raised by the feed on rank {readers[0]}; this rank ({r}) "
                                    "stopped at the same batch"], err


def test_ranks_that_found_different_datasets_all_refuse_at_construction(tmp_path):
    """A shard grown by 4 rows between rank 0's discovery and rank 1's (the DDP job's ranks
    discover the dataset each for itself): without a check, rank 0 would serve 67 rows in 8
    steps and rank 1 71 rows in 8 or 9, other samples than rank 0 thinks, and the rank with a
    step more waits in DDP's all-reduce. The feeds exchange a digest of their layouts at
    construction: both ranks raise the same LayoutError naming the shard, before any step."""
    d = tmp_path / "d"
    write_rows(d)
    codes, results, log = run_ranks("differ", d, tmp_path, 2, tmp_path / "unused", timeout=90,
                                    extra=("--fault", "shard_0002.npy"))
    assert codes == [1, 1], log
    errors = [res["error"] for res in results]
    assert all(e is not None for e in errors), log
    assert errors[0] == errors[1], errors  # the same error on every rank
    assert errors[0]["type"] == "shardload._errors.LayoutError", errors
    message = errors[0]["message"]
    assert "the ranks found different datasets" in message
    assert "shard_0002.npy" in message and "13 rows" in message and "17 rows" in message
    assert "on rank 1" in message
    assert all(res["steps"] == [] for res in results)
