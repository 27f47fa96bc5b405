"""shardload.feed: per-rank batches in a seeded global order, equal batch counts, exact resume
(also on another world size and after SIGKILL), zero-copy hand-off and buffer reuse.

The oracle of every order is computed here by brute force: the Feistel network re-implemented
on Python ints over the whole domain, and the block order built by materialising the blocks,
windows and their permutations. The data are row indexes (row i holds i), so each batch says
which rows it served."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import types

import numpy as np
import pytest

import shardload
import shardload.feed as sf
from shardload import _feed_order

M64 = (1 << 64) - 1


# ---- the oracle ------------------------------------------------------------------------------
def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _splitmix(x: int) -> int:
    return _mix((x + 0x9E3779B97F4A7C15) & M64)


def oracle_keys(seed: int, epoch: int, stream: int) -> list[int]:
    k = _splitmix(_splitmix(_splitmix(seed) ^ epoch) ^ stream)
    keys = []
    for _ in range(6):
        k = _splitmix(k)
        keys.append(k)
    return keys


def oracle_permutation(n: int, keys: list[int]) -> list[int]:
    """The whole permutation of [0, n) the keyed bijection defines, by brute force: a Feistel
    network over 4**h >= n on Python ints, cycle-walked into [0, n)."""
    if n <= 1:
        return list(range(n))
    h = 1
    while 4 ** h < n:
        h += 1
    mask = (1 << h) - 1

    def enc(x: int) -> int:
        left, right = x >> h, x & mask
        for k in keys:
            left, right = right, left ^ (_mix(right ^ k) & mask)
        return (left << h) | right

    out = []
    for x in range(n):
        y = enc(x)
        while y >= n:
            y = enc(y)
        out.append(y)
    return out


def oracle_stream(mode: str, n: int, seed: int, epoch: int, block_rows: int = 1,
                  window_blocks: int = 1) -> np.ndarray:
    """The rows of the epoch's global stream, materialised."""
    if mode == "none":
        return np.arange(n)
    if mode == "row":
        return np.array(oracle_permutation(n, oracle_keys(seed, epoch, 0)))
    nb = -(-n // block_rows)
    border = oracle_permutation(nb, oracle_keys(seed, epoch, 0))
    blocks = [list(range(b * block_rows, min(n, (b + 1) * block_rows))) for b in border]
    out: list[int] = []
    for j in range(0, nb, window_blocks):
        rows = [r for blk in blocks[j:j + window_blocks] for r in blk]
        perm = oracle_permutation(len(rows), oracle_keys(seed, epoch, 1 + j // window_blocks))
        out.extend(rows[p] for p in perm)
    return np.array(out)


def expected_batches(stream: np.ndarray, batch: int, world: int, rank: int, drop_last: bool,
                     start: int = 0) -> list[np.ndarray]:
    n = len(stream)
    step = batch * world
    steps = (n - start) // step if drop_last else -(-(n - start) // step)
    out = []
    for k in range(steps):
        first = start + k * step + rank * batch
        out.append(stream[np.arange(first, first + batch) % n])
    return out


# ---- data --------------------------------------------------------------------------------------
SHARD_ROWS = [7, 0, 13, 1, 22, 5, 19]  # 67 rows, uneven, an empty shard


def write_rows(d: pathlib.Path, shard_rows=SHARD_ROWS, cols: int = 3) -> int:
    """Shards whose row i holds i in every column (int64)."""
    d.mkdir(parents=True, exist_ok=True)
    at = 0
    for i, r in enumerate(shard_rows):
        a = np.repeat(np.arange(at, at + r, dtype=np.int64)[:, None], cols, axis=1)
        np.save(d / f"shard_{i:04d}.npy", a)
        at += r
    return at


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "d"
    n = write_rows(d)
    return d, n


def ids(batch: np.ndarray) -> np.ndarray:
    assert (batch == batch[:, :1]).all()
    return batch[:, 0].copy()


def run_epoch(feed) -> list[np.ndarray]:
    return [ids(b) for b in feed]


# ---- the bijection -----------------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 16, 17, 63, 64, 65, 255, 1000])
def test_the_bijection_is_the_oracles_permutation(n):
    keys = _feed_order.round_keys(12345, 3, 0)
    assert list(keys) == oracle_keys(12345, 3, 0)
    got = _feed_order.permute(np.arange(n, dtype=np.int64), n, keys)
    assert got.tolist() == oracle_permutation(n, list(keys))
    assert sorted(got.tolist()) == list(range(n))
    back = _feed_order.permute(got, n, keys, inverse=True)
    assert back.tolist() == list(range(n))


def test_the_order_is_a_function_of_seed_and_epoch():
    n = 500
    a = _feed_order.Order("row", n, 7, 0).rows(np.arange(n))
    assert (a == _feed_order.Order("row", n, 7, 0).rows(np.arange(n))).all()
    assert (a != _feed_order.Order("row", n, 7, 1).rows(np.arange(n))).any()
    assert (a != _feed_order.Order("row", n, 8, 0).rows(np.arange(n))).any()
    # Not the identity, and rows move far: a shuffle, not a local jitter.
    assert np.abs(a - np.arange(n)).mean() > n / 5


@pytest.mark.parametrize("n,b,w", [(1, 1, 1), (10, 3, 1), (10, 3, 2), (67, 4, 3), (67, 5, 4),
                                   (64, 8, 2), (100, 7, 100)])
def test_the_block_order_is_the_materialised_one(n, b, w):
    got = _feed_order.Order("block", n, 99, 2, b, w).rows(np.arange(n))
    assert got.tolist() == oracle_stream("block", n, 99, 2, b, w).tolist()


def test_a_position_at_a_billion_rows_costs_no_memory_nor_time():
    n = 10 ** 9
    t = time.perf_counter()
    for mode in ("row", "block"):
        o = _feed_order.Order(mode, n, 5, 1, 4096, 4)
        rows = o.rows(np.arange(n - 300, n - 44))
        assert ((rows >= 0) & (rows < n)).all() and len(set(rows.tolist())) == 256
    assert time.perf_counter() - t < 1.0


# ---- batches per rank ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["none", "row", "block"])
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("drop_last", [True, False])
def test_each_rank_gets_its_part_of_each_step_in_equal_counts(data, mode, world, drop_last):
    d, n = data
    stream = oracle_stream(mode, n, 11, 0, 4, 3)
    counts = set()
    served = []
    for rank in range(world):
        feed = sf.Feed(d, 5, rank=rank, world_size=world, shuffle=mode, seed=11, block_rows=4,
                       window_blocks=3, drop_last=drop_last, prefetch=2, threads=2)
        got = run_epoch(feed)
        want = expected_batches(stream, 5, world, rank, drop_last)
        assert [g.tolist() for g in got] == [w.tolist() for w in want]
        assert len(got) == len(feed)
        counts.add(len(got))
        served.extend(np.concatenate(got).tolist() if got else [])
    assert len(counts) == 1  # equal batch counts: DDP never waits on one rank
    if drop_last:
        assert len(served) == len(set(served))  # disjoint across ranks
        assert len(served) == (n // (5 * world)) * 5 * world
    else:
        assert set(served) == set(range(n))  # every row, the padding repeats the first ones


@pytest.mark.parametrize("mode", ["row", "block"])
def test_the_global_order_is_the_same_for_any_world_size(data, mode):
    d, n = data
    seqs = []
    for world in (1, 2, 4):
        feeds = [sf.Feed(d, 4, rank=r, world_size=world, shuffle=mode, seed=3, block_rows=5,
                         drop_last=True) for r in range(world)]
        per_rank = [run_epoch(f) for f in feeds]
        steps = len(per_rank[0])
        seq = [x for k in range(steps) for r in range(world) for x in per_rank[r][k].tolist()]
        seqs.append(seq)
    shortest = min(len(s) for s in seqs)
    assert seqs[0][:shortest] == seqs[1][:shortest] == seqs[2][:shortest]


def test_epochs_follow_one_another_and_set_epoch_starts_one(data):
    d, n = data
    feed = sf.Feed(d, 8, seed=1)
    e0, e1 = run_epoch(feed), run_epoch(feed)
    assert feed.epoch == 2 and feed.position == 0
    assert [x.tolist() for x in e1] == [
        x.tolist() for x in expected_batches(oracle_stream("row", n, 1, 1), 8, 1, 0, True)]
    assert [x.tolist() for x in e0] != [x.tolist() for x in e1]
    feed.set_epoch(0)
    assert [x.tolist() for x in run_epoch(feed)] == [x.tolist() for x in e0]


# ---- state and resume ----------------------------------------------------------------------------
def test_the_state_is_json_and_at_most_256_bytes(tmp_path):
    d = tmp_path / "d"
    n = write_rows(d, [100, 3])
    feed = sf.Feed(d, 2, rank=1, world_size=3, shuffle="block", block_rows=2 ** 63 - 1,
                   window_blocks=2 ** 63 - 1, seed=2 ** 64 - 1)
    feed.load_state_dict({**feed.state_dict(), "epoch": 2 ** 64 - 1})
    next(iter(feed))
    state = feed.state_dict()
    encoded = json.dumps(state)
    assert len(encoded.encode()) <= sf.STATE_MAX_BYTES
    assert json.loads(encoded) == state
    assert state["rows"] == n and state["position"] == 6 and state["world_size"] == 3
    # Sizes far past the rows (a state's are not bounded above) are held as the order takes
    # them, the rows' count and the blocks': the same order, its state as small (before: a
    # state of 10**300-row blocks ran and its state_dict() was 755 bytes).
    order = feed.order()
    feed.load_state_dict({**state, "shuffle": f"block/{10 ** 300}/{10 ** 300}"})
    assert json.dumps(feed.state_dict()) == encoded
    assert feed.order().rows(np.arange(n)).tolist() == order.rows(np.arange(n)).tolist()


def take(feed, k):
    it = iter(feed)
    out = [ids(next(it)) for _ in range(k)]
    it.close()
    return out


@pytest.mark.parametrize("mode", ["row", "block", "none"])
def test_a_resume_continues_at_exactly_the_next_sample(data, mode):
    d, n = data
    whole = run_epoch(sf.Feed(d, 3, shuffle=mode, seed=5, block_rows=4))
    feed = sf.Feed(d, 3, shuffle=mode, seed=5, block_rows=4)
    first = take(feed, 7)
    state = feed.state_dict()
    again = sf.Feed(d, 3, shuffle=mode, seed=5, block_rows=4)
    again.load_state_dict(json.loads(json.dumps(state)))
    rest = run_epoch(again)
    assert [x.tolist() for x in first + rest] == [x.tolist() for x in whole]


def test_replay_accelerate_4195_resume_keeps_the_shuffle_order(data):
    """accelerate#4195: the position came back, the shuffle order did not (the resumed
    sampler drew a fresh permutation). The state carries the order: a feed built with another
    seed, or none, continues the saved stream."""
    d, n = data
    feed = sf.Feed(d, 4, shuffle="row", seed=777)
    first = take(feed, 5)
    state = feed.state_dict()
    resumed = sf.Feed(d, 4)  # default seed and shuffle, as a restarted script would build it
    resumed.load_state_dict(state)
    rest = run_epoch(resumed)
    want = expected_batches(oracle_stream("row", n, 777, 0), 4, 1, 0, True)
    assert [x.tolist() for x in first + rest] == [x.tolist() for x in want]


def test_replay_datasets_8308_a_second_resume_does_not_restart(data):
    """datasets#8308: resuming a second time in the same epoch started it over. Each resume
    here continues from the last state."""
    d, n = data
    want = [x.tolist() for x in expected_batches(oracle_stream("row", n, 9, 0), 2, 1, 0, True)]
    feed = sf.Feed(d, 2, seed=9)
    seen = take(feed, 4)
    for chunk in (5, 6):
        state = feed.state_dict()
        feed = sf.Feed(d, 2, seed=9)
        feed.load_state_dict(state)
        seen += take(feed, chunk)
    state = feed.state_dict()
    feed = sf.Feed(d, 2, seed=9)
    feed.load_state_dict(state)
    seen += run_epoch(feed)
    assert [x.tolist() for x in seen] == want


def test_replay_torchdata_1513_a_resume_is_in_the_right_epoch(data):
    """torchdata#1513: a loader restored from a state saved at (or near) an epoch's end came
    back in the wrong epoch. The state after an epoch's last batch is the next epoch at 0, and
    a state saved mid-epoch 2 resumes epoch 2 and then goes on to epoch 3."""
    d, n = data
    feed = sf.Feed(d, 5, seed=4)
    for _ in feed:
        last = feed.state_dict()
    assert (last["epoch"], last["position"]) == (1, 0)
    run_epoch(feed)
    mid = take(feed, 3)
    state = feed.state_dict()
    assert state["epoch"] == 2
    resumed = sf.Feed(d, 5, seed=4)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # a loop's set_epoch of the current epoch keeps the position
    rest = run_epoch(resumed)
    for epoch, got in ((2, mid + rest), (3, run_epoch(resumed))):
        want = expected_batches(oracle_stream("row", n, 4, epoch), 5, 1, 0, True)
        assert [x.tolist() for x in got] == [x.tolist() for x in want]


@pytest.mark.parametrize("before,after", [(2, 3), (3, 2), (2, 1), (1, 4)])
def test_replay_orbax_648_a_resume_on_another_world_size(data, before, after):
    """orbax#648: no restore on another device count. The rest of the epoch, positions
    [position, n), is cut into steps of the new world size: every remaining sample is served
    exactly once across the new ranks, and before + after is exactly the epoch's stream."""
    d, n = data
    b = 3
    feeds = [sf.Feed(d, b, rank=r, world_size=before, seed=21, drop_last=False)
             for r in range(before)]
    first = [take(f, 2) for f in feeds]
    state = feeds[0].state_dict()
    assert state["position"] == 2 * before * b
    assert all(f.state_dict() == {**state, "world_size": before} for f in feeds)
    new = [sf.Feed(d, b, rank=r, world_size=after, seed=0) for r in range(after)]
    for f in new:
        f.load_state_dict(state)
    rest = [run_epoch(f) for f in new]
    assert len({len(r) for r in rest}) == 1  # still equal batch counts
    seq = [x for k in range(2) for r in range(before) for x in first[r][k].tolist()]
    seq += [x for k in range(len(rest[0])) for r in range(after) for x in rest[r][k].tolist()]
    stream = oracle_stream("row", n, 21, 0)
    assert seq[:n] == stream.tolist()  # each sample once, in the epoch's order
    assert seq[n:] == stream[:len(seq) - n].tolist()  # the padding of the last step


CHILD = r"""
import json, os, sys, time
import shardload.feed as sf
d, state_path, log_path, stop_after = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
feed = sf.Feed(d, 3, seed=8, shuffle="block", block_rows=4)
if os.path.exists(state_path):
    feed.load_state_dict(json.load(open(state_path)))
with open(log_path, "a") as log:
    for k, batch in enumerate(feed):
        log.write(json.dumps(batch[:, 0].tolist()) + "\n")
        log.flush()
        os.fsync(log.fileno())
        tmp = state_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(feed.state_dict(), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, state_path)  # the checkpoint: the batch is trained on, then saved
        if k + 1 == stop_after:
            print("saved", flush=True)
            time.sleep(60)
"""


def test_a_resume_after_sigkill_sees_the_epoch_exactly_once(data, tmp_path):
    d, n = data
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    state, log = tmp_path / "state.json", tmp_path / "log.jsonl"
    env = dict(os.environ)
    child = subprocess.Popen([sys.executable, str(script), str(d), str(state), str(log), "6"],
                             stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert child.stdout.readline().strip() == "saved"
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    saved = json.loads(state.read_text())
    assert saved["position"] == 18
    subprocess.run([sys.executable, str(script), str(d), str(state), str(log), "0"], check=True,
                   env=env, timeout=60)
    seen = [r for line in log.read_text().splitlines() for r in json.loads(line)]
    stream = oracle_stream("block", n, 8, 0, 4, 4)
    assert seen == stream[:(n // 3) * 3].tolist()
    assert len(seen) == len(set(seen))


def test_a_state_of_another_dataset_or_malformed_is_refused(data):
    d, n = data
    feed = sf.Feed(d, 2)
    good = feed.state_dict()
    for bad, msg in (({**good, "rows": n + 1}, "68 rows"), ({**good, "position": n + 1}, "outside"),
                     ({**good, "v": 2}, "version"), ({**good, "shuffle": "block/0/1"}, "below 1"),
                     ({**good, "shuffle": "zigzag"}, "zigzag"), ({**good, "seed": -1}, "seed"),
                     ({k: v for k, v in good.items() if k != "epoch"}, "lacks epoch")):
        with pytest.raises(ValueError, match=msg):
            feed.load_state_dict(bad)
    assert feed.state_dict() == good


@pytest.mark.parametrize("epoch", [2 ** 64, 2 ** 64 + 3, 2 ** 70])
def test_an_epoch_the_order_cannot_tell_apart_is_refused(data, epoch):
    """The order keys on the epoch modulo 2**64: a hand-made state (or set_epoch) of epoch
    2**64 + e replayed epoch e's order without a word. Refused naming the bound, the feed
    unchanged; the largest epoch the order tells apart (2**64 - 1) is taken."""
    d, n = data
    feed = sf.Feed(d, 2, seed=5)
    good = feed.state_dict()
    with pytest.raises(ValueError, match=r"epoch \d+ is past 2\*\*64 - 1"):
        feed.load_state_dict({**good, "epoch": epoch})
    with pytest.raises(ValueError, match=r"epoch: expected an int in \[0, 2\*\*64\)"):
        feed.set_epoch(epoch)
    assert feed.state_dict() == good
    feed.load_state_dict({**good, "epoch": 2 ** 64 - 1})
    assert feed.epoch == 2 ** 64 - 1 and len(next(iter(feed))) == 2


@pytest.mark.parametrize("change,err,msg", [
    ({"seed": 1.0}, TypeError, "seed"), ({"seed": "1"}, TypeError, "seed"),
    ({"seed": True}, TypeError, "seed"), ({"seed": 2 ** 64}, ValueError, "seed"),
    ({"epoch": -1}, ValueError, "negative"), ({"epoch": 1.5}, TypeError, "epoch"),
    ({"position": -1}, ValueError, "outside"), ({"position": 10 ** 30}, ValueError, "outside"),
    ({"position": "3"}, TypeError, "position"), ({"rows": None}, TypeError, "rows"),
    ({"drop_last": 1}, ValueError, "drop_last"), ({"drop_last": np.bool_(True)}, ValueError,
                                                    "drop_last"),
    ({"shuffle": "block/1e3/2"}, ValueError, "block/B/W"),
    ({"shuffle": "block/-1/2"}, ValueError, "below 1"),
    ({"shuffle": "block/4/2/1"}, ValueError, "expected"), ({"shuffle": None}, ValueError,
                                                            "expected"),
    ({"shuffle": ["row"]}, ValueError, "expected"), ({"v": "1"}, ValueError, "version"),
])
def test_hand_made_states_of_wrong_types_or_ranges_are_refused(data, change, err, msg):
    """A fifth hostile pass: states crafted by hand (a seed of another type, a position past
    any dataset, a block spec of floats or negative sizes, a bool that is numpy's) are refused
    naming the field, and the feed is left as it was."""
    d, n = data
    feed = sf.Feed(d, 2, seed=5)
    good = feed.state_dict()
    with pytest.raises(err, match=msg):
        feed.load_state_dict({**good, **change})
    assert feed.state_dict() == good


def test_a_states_huge_block_size_serves_what_a_feed_of_that_size_serves(data):
    """A block spec larger than the dataset (even past 2**64) is one block: the batches of a
    feed made with that block size, every row once."""
    d, n = data
    huge = 10 ** 20
    made = sf.Feed(d, 3, shuffle="block", block_rows=huge, window_blocks=1, seed=2,
                   drop_last=False)
    loaded = sf.Feed(d, 3, shuffle="row", seed=2, drop_last=False)
    loaded.load_state_dict({**loaded.state_dict(), "shuffle": f"block/{huge}/1"})
    want = [b.copy() for b in made]
    got = [b.copy() for b in loaded]
    assert len(got) == len(want) == -(-n // 3)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    rows = np.concatenate(got)[:n]
    assert sorted(rows.reshape(n, -1)[:, 0].tolist()) == sorted(
        np.concatenate(want)[:n].reshape(n, -1)[:, 0].tolist())


@pytest.mark.parametrize("trial", range(12))
def test_a_crafted_state_resumes_on_the_order_of_a_feed_made_with_its_settings(data, trial):
    """A seventh hostile pass: a state of random settings (seed, epoch up to 2**64 - 1, any
    position, block sizes past the dataset, drop_last) loaded into a feed of other settings
    (and any read-ahead) serves, from its position on, the rows the order of a feed made with
    those settings puts there."""
    d, n = data
    rng = np.random.default_rng(trial)

    def pick(*values: int) -> int:  # Python ints: numpy would make 2**64 - 1 a float
        return values[int(rng.integers(len(values)))]

    b, w = pick(1, 7, n, 10 ** 9), pick(1, 3, 10 ** 6)
    mode = ["none", "row", f"block/{b}/{w}"][trial % 3]
    state = {"v": 1, "seed": pick(0, 12345, 2 ** 64 - 1), "epoch": pick(0, 7, 2 ** 64 - 1),
             "position": int(rng.integers(0, n + 1)), "rows": n, "shuffle": mode,
             "drop_last": bool(trial % 2)}
    batch = pick(1, 5)
    feed = sf.Feed(d, batch, shuffle="row", seed=3, prefetch=pick(0, 1, 3))
    feed.load_state_dict(state)
    got = [ids(x) for x in feed]
    made = sf.Feed(d, batch, shuffle=mode.split("/")[0], seed=state["seed"],
                   **({"block_rows": b, "window_blocks": w} if mode.startswith("block") else {}))
    order = made.order(state["epoch"])
    want, p = [], state["position"]
    while (p + batch <= n) if state["drop_last"] else (p < n):
        want.append(order.rows(np.arange(p, p + batch) % n))
        p += batch
    assert len(got) == len(want)
    for g, e in zip(got, want):
        np.testing.assert_array_equal(g, e)

# ---- buffers and hand-off ------------------------------------------------------------------------
def test_a_kept_batch_stays_valid_and_released_buffers_are_reused(tmp_path):
    d = tmp_path / "d"
    n = write_rows(d, [400, 400])
    feed = sf.Feed(d, 10, shuffle="row", seed=2, prefetch=2)
    kept, views, want = [], [], expected_batches(oracle_stream("row", n, 2, 0), 10, 1, 0, True)
    for k, batch in enumerate(feed):
        if k % 10 == 0:
            kept.append((k, batch))
        if k % 10 == 5:
            views.append((k, batch[2:4]))  # a view keeps its buffer too
        assert ((batch.ctypes.data) % 64) == 0
    for k, b in kept:
        assert (b[:, 0] == want[k]).all()
    for k, v in views:
        assert (v[:, 0] == want[k][2:4]).all()
    # 80 batches: those kept (16) plus the pool (prefetch + 2) and the few in flight.
    assert feed._pool.allocated <= len(kept) + len(views) + 6
    # Released at once, the same few buffers serve a whole epoch.
    feed = sf.Feed(d, 10, shuffle="row", seed=2, prefetch=2)
    pointers = {b.ctypes.data for b in feed}
    assert len(pointers) <= 4 and feed._pool.allocated <= 4


def test_batches_go_through_dlpack_without_a_copy(data):
    d, n = data
    batch = next(iter(sf.Feed(d, 4, seed=1)))
    assert batch.flags.c_contiguous
    assert np.from_dlpack(batch).ctypes.data == batch.ctypes.data


def test_jax_takes_a_batch_without_a_copy(data):
    jax = pytest.importorskip("jax")
    d, n = data
    # float32: JAX without x64 would convert (copy) int64 to int32.
    batch = next(iter(sf.Feed(d, 4, seed=1, astype="float32")))
    x = jax.dlpack.from_dlpack(batch)
    assert x.unsafe_buffer_pointer() == batch.ctypes.data
    y = jax.device_put(batch)
    assert y.unsafe_buffer_pointer() == batch.ctypes.data
    assert (np.asarray(x) == batch).all()


def test_a_jax_training_loop_over_the_feed(data):
    """A few SGD steps of a tiny linear model under jax.jit, each batch handed over by
    jax.device_put without a copy. Every input array is kept: the feed must not read a later
    batch into a buffer a JAX array still aliases. The weights equal the same steps done in
    NumPy on the oracle's batches."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    d, n = data

    def loss(w, x):
        y = x[:, 1:] / 64.0
        return jnp.mean(jnp.square(y @ w - x[:, :1] / 64.0))

    @jax.jit
    def step(w, x):
        return w - 0.5 * jax.grad(loss)(w, x)

    feed = sf.Feed(d, 8, shuffle="block", seed=4, block_rows=5, astype="float32", prefetch=2)
    w = jnp.zeros((2, 1), jnp.float32)
    kept, pointers = [], []
    for batch in feed:
        x = jax.device_put(batch)  # CPU: the batch's own memory
        pointers.append(x.unsafe_buffer_pointer() == batch.ctypes.data)
        del batch  # the JAX array alone holds the buffer now
        w = step(w, x)
        kept.append(x)
    assert len(kept) == n // 8 and all(pointers)
    want = expected_batches(oracle_stream("block", n, 4, 0, 5, 4), 8, 1, 0, True)
    for x, rows in zip(kept, want, strict=True):
        assert (np.asarray(x) == rows[:, None].astype(np.float32)).all()
    ref = np.zeros((2, 1), np.float32)
    for rows in want:
        x = np.repeat(rows[:, None], 3, axis=1).astype(np.float32)
        y, t = x[:, 1:] / 64.0, x[:, :1] / 64.0
        ref = ref - 0.5 * (2.0 / len(rows)) * y.T @ (y @ ref - t)
    np.testing.assert_allclose(np.asarray(w), ref, rtol=1e-5, atol=1e-6)


JAX_CHILD = r"""
import json, sys
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
d, out, port, pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                           process_id=pid, initialization_timeout=60)
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import shardload.feed as sf

feed = sf.Feed(d, 4, shuffle="row", seed=6, astype="float32")  # rank and size from JAX
rows = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P("data"))


def loss(w, x):
    y = x[:, 1:] / 64.0
    return jnp.mean(jnp.square(y @ w - x[:, :1] / 64.0))


@jax.jit
def step(w, x):  # x: the global batch, each process's rows on its device
    return w - 0.5 * jax.grad(loss)(w, x)


w = jnp.zeros((2, 1), jnp.float32)
seen = []
for batch in feed:
    seen.append(batch[:, 0].astype(int).tolist())
    x = jax.make_array_from_process_local_data(rows, batch)
    w = step(w, x)
json.dump({"rank": feed.rank, "world": feed.world_size, "batches": seen,
           "w": np.asarray(jax.device_get(w)).tolist()}, open(out, "w"))
jax.distributed.shutdown()
"""


def run_two_jax_processes(tmp_path: pathlib.Path, child: str, args: list[str]) -> list:
    """Runs `child` as 2 processes of one jax.distributed job on loopback, each given `args`,
    its JSON output file, the coordinator's port and its rank; returns what each wrote. A run
    that does not end in 120 s is a hang, and fails the test."""
    import socket

    script = tmp_path / "jax_child.py"
    script.write_text(child)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    outs = [tmp_path / f"jax-{r}.json" for r in (0, 1)]
    procs = [subprocess.Popen([sys.executable, str(script), *args, str(outs[r]), str(port),
                               str(r)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in (0, 1)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=120)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail("the 2 JAX processes did not end in 120 s (a hang)")
    assert [p.returncode for p in procs] == [0, 0], "\n".join(logs)
    return [json.loads(o.read_text()) for o in outs]


def test_jax_data_parallel_on_two_processes(data, tmp_path):
    """2 JAX processes under jax.distributed (gloo on loopback): each feed takes its rank and
    world size from JAX, the two feeds' batches are one global batch
    (make_array_from_process_local_data) of a jitted SGD step. Each rank's batches are the
    oracle's, the ranks' samples are disjoint, and both end with the weights of the same steps
    done in NumPy on the global batches."""
    pytest.importorskip("jax")
    d, n = data
    got = run_two_jax_processes(tmp_path, JAX_CHILD, [str(d)])
    stream = oracle_stream("row", n, 6, 0)
    assert [(g["rank"], g["world"]) for g in got] == [(0, 2), (1, 2)]
    want = [expected_batches(stream, 4, 2, r, True) for r in (0, 1)]
    for r in (0, 1):
        assert got[r]["batches"] == [w.tolist() for w in want[r]]
    served = [x for g in got for b in g["batches"] for x in b]
    assert len(served) == len(set(served)) == 64
    ref = np.zeros((2, 1), np.float32)
    for k in range(len(want[0])):
        x = np.repeat(np.concatenate([want[0][k], want[1][k]])[:, None], 3, axis=1)
        y, t = x[:, 1:].astype(np.float32) / 64.0, x[:, :1].astype(np.float32) / 64.0
        ref = ref - 0.5 * (2.0 / len(x)) * y.T @ (y @ ref - t)
    for g in got:
        np.testing.assert_allclose(np.array(g["w"]), ref, rtol=1e-5, atol=1e-6)


def test_prefetch_does_not_change_the_batches(data):
    d, n = data
    runs = [[x.tolist() for x in run_epoch(sf.Feed(d, 4, seed=6, prefetch=p, threads=t))]
            for p, t in ((0, 1), (1, 2), (5, None))]
    assert runs[0] == runs[1] == runs[2]


# ---- sources, casts, faults, arguments -----------------------------------------------------
def test_every_format_and_s3_sources(tmp_path, bucket):
    import h5py
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zarr

    rows = [9, 4, 11]
    n = sum(rows)
    ref = np.arange(n, dtype=np.float64)
    formats = ("parquet", "hdf5", "zarr", "npz", "arrow", "raw")
    for fmt in formats:
        (tmp_path / fmt).mkdir()
    at = 0
    for i, r in enumerate(rows):
        part = ref[at:at + r]
        np.savez(tmp_path / "npz" / f"shard_{i:04d}.npz", data=part)
        part.tofile(tmp_path / "raw" / f"shard_{i:04d}.bin")
        table = pa.table({"x": part})
        with pa.OSFile(str(tmp_path / "arrow" / f"shard_{i:04d}.arrow"), "wb") as f:
            with pa.ipc.new_file(f, table.schema) as w:
                w.write_table(table)
        pq.write_table(table, tmp_path / "parquet" / f"shard_{i:04d}.parquet")
        with h5py.File(tmp_path / "hdf5" / f"shard_{i:04d}.h5", "w") as f:
            f.create_dataset("data", data=part)
        z = zarr.open_array(str(tmp_path / "zarr" / f"shard_{i:04d}.zarr"), mode="w",
                            shape=part.shape, chunks=(4,), dtype=part.dtype, zarr_format=2)
        z[:] = part
        bucket.put_npy(f"d/shard_{i:04d}.npy", part)
        at += r
    sources = {fmt: (str(tmp_path / fmt), {}) for fmt in formats}
    sources["raw"] = (str(tmp_path / "raw"), {"dtype": "float64", "trailing_shape": ()})
    sources["s3"] = (bucket.url("d/"), {"storage_options": bucket.options})
    want = expected_batches(oracle_stream("row", n, 3, 0), 4, 2, 1, True)
    for name, (src, kw) in sources.items():
        feed = sf.Feed(src, 4, rank=1, world_size=2, seed=3, **kw)
        got = list(feed)
        assert [g.tolist() for g in got] == [w.astype(np.float64).tolist() for w in want], name


FORMATS = ["npy", "npy-big-endian-fortran", "raw", "hdf5", "hdf5-gzip", "parquet", "arrow",
           "zarr2", "zarr3-sharded", "npz"]


def write_format(d: pathlib.Path, fmt: str, shard_rows=SHARD_ROWS, cols: int = 3
                 ) -> tuple[str, dict]:
    """write_rows's data (row i holds i in every column, int64) in one format; returns the
    source and the options it needs."""
    import h5py
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zarr

    d.mkdir(parents=True)
    at = 0
    for i, r in enumerate(shard_rows):
        a = np.repeat(np.arange(at, at + r, dtype=np.int64)[:, None], cols, axis=1)
        at += r
        name = d / f"shard_{i:04d}"
        if fmt == "npy":
            np.save(f"{name}.npy", a)
        elif fmt == "npy-big-endian-fortran":
            np.save(f"{name}.npy", np.asfortranarray(a.astype(">i8")))
        elif fmt == "raw":
            a.tofile(f"{name}.bin")
        elif fmt.startswith("hdf5"):
            # gzip chunks of 4 rows: a batch's rows cut across chunks; an empty dataset
            # cannot be chunked.
            chunked = {"chunks": (min(4, r), cols), "compression": "gzip"} \
                if fmt == "hdf5-gzip" and r else {}
            with h5py.File(f"{name}.h5", "w") as f:
                f.create_dataset("data", data=a, **chunked)
        elif fmt in ("parquet", "arrow"):
            table = pa.table({f"c{j}": a[:, j] for j in range(cols)})
            if fmt == "parquet":
                pq.write_table(table, f"{name}.parquet", row_group_size=5)
            else:
                with pa.OSFile(f"{name}.arrow", "wb") as f:
                    with pa.ipc.new_file(f, table.schema) as w:
                        for batch in table.to_batches(max_chunksize=5):
                            w.write_batch(batch)
        elif fmt == "zarr2":
            z = zarr.create_array(f"{name}.zarr", shape=a.shape, chunks=(4, cols),
                                  dtype=a.dtype, zarr_format=2)
            z[:] = a
        elif fmt == "zarr3-sharded":
            z = zarr.create_array(f"{name}.zarr", shape=a.shape, chunks=(2, cols),
                                  shards=(6, cols), dtype=a.dtype, zarr_format=3)
            z[:] = a
        elif fmt == "npz":
            np.savez(f"{name}.npz", data=a)
        else:
            raise AssertionError(fmt)
    options = {"dtype": "int64", "trailing_shape": (cols,)} if fmt == "raw" else {}
    return str(d), options


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_gives_the_oracles_batches(tmp_path, fmt):
    """The feed over each format shardload reads, 2-D rows in uneven shards with an empty one,
    each order, on each of 2 ranks, with and without drop_last: the oracle's batches."""
    source, options = write_format(tmp_path / fmt, fmt)
    n = sum(SHARD_ROWS)
    for mode in ("none", "row", "block"):
        stream = oracle_stream(mode, n, 13, 1, 4, 3)
        for drop_last in (True, False):
            for rank in (0, 1):
                feed = sf.Feed(source, 5, rank=rank, world_size=2, shuffle=mode, seed=13,
                               block_rows=4, window_blocks=3, drop_last=drop_last, threads=2,
                               **options)
                feed.set_epoch(1)
                assert feed.layout.dtype == np.int64 and feed.layout.shape == (n, 3), fmt
                got = [b.copy() for b in feed]
                want = expected_batches(stream, 5, 2, rank, drop_last)
                assert [g[:, 0].tolist() for g in got] == [w.tolist() for w in want], (
                    fmt, mode, drop_last, rank)
                assert all((g == g[:, :1]).all() for g in got)


def test_astype_and_row_range(data):
    d, n = data
    feed = sf.Feed(d, 4, seed=2, astype="float32", row_range=(10, 50))
    got = list(feed)
    assert all(b.dtype == np.float32 for b in got)
    want = expected_batches(oracle_stream("row", 40, 2, 0) + 10, 4, 1, 0, True)
    assert [b[:, 0].tolist() for b in got] == [w.astype(np.float32).tolist() for w in want]


@pytest.mark.parametrize("fault", ["changed", "vanished"])
@pytest.mark.parametrize("mode", ["none", "row", "block"])
def test_a_shard_changed_mid_epoch_raises_the_read_error_naming_it(tmp_path, fault, mode):
    d = tmp_path / "d"
    write_rows(d, [50, 50, 50])
    feed = sf.Feed(d, 10, shuffle=mode, block_rows=7, prefetch=1)
    it = iter(feed)
    next(it)
    state = feed.state_dict()
    if fault == "changed":
        np.save(d / "shard_0002.npy", np.zeros((60, 3), np.int64))  # rewritten: another size
    else:
        os.remove(d / "shard_0002.npy")
    with pytest.raises(shardload.ShardReadError, match="shard_0002.npy"):
        for _ in it:
            pass
    assert feed.state_dict()["position"] >= state["position"]
    if fault == "vanished":
        return
    assert run_epoch(sf.Feed(d, 10, shuffle="none"))  # rediscovered, it reads


@pytest.mark.parametrize("fault", ["rewritten", "deleted"])
@pytest.mark.parametrize("fmt", ["zarr2", "zarr3-sharded"])
@pytest.mark.parametrize("mode", ["none", "block"])
def test_a_zarr_chunk_changed_mid_epoch_raises_the_read_error_naming_it(tmp_path, fmt, fault,
                                                                       mode):
    """A Zarr chunk (or a v3 shard file) rewritten or deleted between two batches: its change
    time (a deleted one's directory's) is after the feed's discovery, so the batch that needs
    it raises the ShardReadError naming it, instead of the rows as they now are."""
    import zarr

    source, _ = write_format(tmp_path / fmt, fmt)
    store = pathlib.Path(source) / "shard_0006.zarr"  # rows 48..66
    chunk, lo = (store / "2.0", 8) if fmt == "zarr2" else (store / "c/1/0", 6)  # rows lo..11
    feed = sf.Feed(source, 5, shuffle=mode, seed=4, block_rows=4, prefetch=1)
    it = iter(feed)
    first = next(it)
    time.sleep(0.05)  # past the file system's timestamp granularity
    if fault == "deleted":
        chunk.unlink()
    else:
        zarr.open_array(str(store), mode="r+")[lo:12] = -1
    assert not set(ids(first).tolist()) & set(range(48 + lo, 48 + 12))
    with pytest.raises(shardload.ShardReadError, match=re.escape(str(chunk)) +
                       ": changed since discovery"):
        for _ in it:
            pass
    # Rediscovered, the store reads as it now is (zarr-python's fill value where deleted).
    got = np.concatenate(run_epoch(sf.Feed(source, 1, shuffle="none")))
    assert (got[48:67] == zarr.open_array(str(store), mode="r")[:, 0]).all()


@pytest.mark.parametrize("fault", ["rewritten", "deleted"])
def test_a_zarr_chunk_changed_mid_epoch_raises_on_every_rank(tmp_path, monkeypatch, fault):
    """Chunk 2.0 of shard 6 (rows 56..59) changes after each rank's first batch; only rank 0
    reads it (step 7 on 2 ranks x 4), and both ranks raise the ShardReadError naming the chunk
    file at that step."""
    import threading

    import zarr

    source, _ = write_format(tmp_path / "zarr2", "zarr2")
    store = pathlib.Path(source) / "shard_0006.zarr"
    chunk = store / "2.0"
    started = threading.Barrier(2, timeout=30)

    def body(r: int):
        feed = sf.Feed(source, 4, shuffle="none", prefetch=0)
        seen = 0
        try:
            for k, _ in enumerate(feed):
                seen += 1
                if k == 0:
                    started.wait()
                    if r == 0:
                        time.sleep(0.05)  # past the file system's timestamp granularity
                        if fault == "deleted":
                            chunk.unlink()
                        else:
                            zarr.open_array(str(store), mode="r+")[8:12] = -1
                    started.wait()
        except shardload.ShardReadError as e:
            return seen, e
        return seen, None

    got = on_ranks(monkeypatch, 2, body)
    assert [seen for seen, _ in got] == [7, 7], got
    for r, (_, e) in enumerate(got):
        assert isinstance(e, shardload.ShardReadError), (r, e)
        assert re.search(re.escape(str(chunk)) + ": changed since discovery", str(e)), e
    assert got[1][1].__notes__ == ["raised by the feed on rank 0; this rank (1) stopped at the "
                                   "same batch"]


TRUNCATE_CHILD = r"""
import ctypes, os, sys
import numpy as np
import shardload, shardload.feed as sf
d, mode, replace = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
feed = sf.Feed(d, 256, shuffle=mode, seed=3, block_rows=64, threads=2)
assert feed._maps_for(feed.order()) is not None  # the rows are copied from maps
if replace:
    # Another SIGBUS handler put in after the guard (as a DataLoader worker's is, after the
    # fork): each fill started later puts the guard back in front of it.
    first = iter(feed)
    next(first)
    first.close()  # the guard installed by its fills, which have ended
    ctypes.CDLL(None).signal(7, ctypes.c_void_p(0))
it = iter(feed)
next(it)
with open(os.path.join(d, "shard_0002.npy"), "r+b") as f:
    f.truncate(4096)  # in place, under the maps: its later rows' pages are gone
try:
    for _ in it:
        pass
except shardload.ShardReadError as e:
    print("raised:", e)
    sys.exit(0)
print("no error")
sys.exit(3)
"""


@pytest.mark.parametrize("mode", ["row", "block"])
@pytest.mark.parametrize("replace", [False, True])
def test_a_shard_truncated_under_the_maps_raises_the_read_error_not_sigbus(tmp_path, mode,
                                                                           replace):
    """A shuffled fill copies its rows from maps of the files; a file truncated in place under
    them makes the copy's read a SIGBUS, which the guard turns into the ShardReadError naming
    the file (in a child process: a SIGBUS that got through ends it with -7), also after
    another SIGBUS handler replaced the guard's."""
    d = tmp_path / "d"
    write_rows(d, [4096, 4096, 4096, 4096], cols=128)  # 16 MiB of 1 KiB rows, 4 fills
    res = subprocess.run([sys.executable, "-c", TRUNCATE_CHILD, str(d), mode,
                          "1" if replace else "0"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr[-2000:])
    assert "raised:" in res.stdout and "shard_0002.npy" in res.stdout, res.stdout
    assert "changed while reading" in res.stdout, res.stdout


SIGBUS_ELSEWHERE_CHILD = r"""
import faulthandler, sys
import numpy as np
import shardload.feed as sf
faulthandler.enable()
d, victim = sys.argv[1], sys.argv[2]
feed = sf.Feed(d, 256, shuffle="row", seed=3, threads=2)
for _ in feed:  # the guard installed
    pass
m = np.memmap(victim, np.uint8, "r")
with open(victim, "r+b") as f:
    f.truncate(0)
print(int(m[-1]))  # a SIGBUS outside any guarded copy
"""


def test_a_sigbus_outside_the_feeds_copies_still_reaches_the_handler_before_it(tmp_path):
    """The guard takes only the SIGBUS of its own copies: another one (user code reading a
    truncated memmap) goes to the handler that was there before (faulthandler here), which
    reports it, and the process ends by SIGBUS as it would without the feed."""
    d = tmp_path / "d"
    write_rows(d, [4096, 4096], cols=128)
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"\1" * 65536)
    res = subprocess.run([sys.executable, "-c", SIGBUS_ELSEWHERE_CHILD, str(d), str(victim)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == -signal.SIGBUS, (res.returncode, res.stdout, res.stderr[-2000:])
    assert "Bus error" in res.stderr, res.stderr[-2000:]


MAP_LIMIT_CHILD = r"""
import ctypes, sys
import numpy as np
import shardload.feed as sf
d, n, left = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
limit = int(open("/proc/sys/vm/max_map_count").read())
held = sum(1 for _ in open("/proc/self/maps"))
# The process's other maps (a framework's, a model's): all but `left` of the limit, one page
# each, the protections alternating so that the kernel merges none of them.
for i in range(limit - held - left):
    assert libc.mmap(None, 4096, 1 if i % 2 else 0, 0x22, -1, 0) not in (None, 2**64 - 1)
feed = sf.Feed(d, 64, shuffle="row", seed=5, threads=2)
got = np.sort(np.concatenate([b[:, 0] for b in feed]))
assert len(np.unique(got)) == len(got) and got[0] >= 0 and got[-1] < n, got  # each row once
print("rows", len(got), "maps", feed._maps_for(feed.order()) is not None)
"""


def test_a_feed_maps_no_more_files_than_the_process_has_maps_left(tmp_path):
    """Each mapped shard is one of the process's vm.max_map_count maps. A feed that mapped
    more files than the process had maps left made every later map fail: a DataLoader's or
    the feed's own thread then never started (its stack unmapped), and the epoch hung (70,000
    one-row shards hung it the same way). The feed now reads without maps where they would
    not fit in half of the limit; the epoch completes with every row once."""
    d = tmp_path / "d"
    n = write_rows(d, [1] * 3000, cols=2)
    res = subprocess.run([sys.executable, "-c", MAP_LIMIT_CHILD, str(d), str(n), "2000"],
                         capture_output=True, text=True, timeout=90)
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr[-2000:])
    assert res.stdout.split() == ["rows", str(n // 64 * 64), "maps", "False"], res.stdout


def test_maps_are_used_only_where_the_files_are_served_as_stored(tmp_path):
    """Maps of a layout are usable for local npy and raw files in C order and this host's byte
    order; a bool, byte-swapped or Fortran-ordered shard reads as before (and right)."""
    from shardload import _feed_core

    d = tmp_path / "d"
    write_rows(d)
    assert _feed_core.Maps(shardload.discover(d)).usable
    for name, a in (("bool", np.arange(40).reshape(10, 4) % 3 == 0),
                    ("swapped", np.arange(40, dtype=">i4").reshape(10, 4)),
                    ("fortran", np.asfortranarray(np.arange(40, dtype=np.int64).reshape(10, 4)))):
        e = tmp_path / name
        e.mkdir()
        np.save(e / "shard_0000.npy", a)
        layout = shardload.discover(e)
        assert not _feed_core.Maps(layout).usable, name
        rows = np.random.default_rng(0).permutation(10).astype(np.int64)
        out = np.empty((10, 4), layout.dtype)
        _feed_core.gather(layout, rows, out, 2, maps=_feed_core.Maps(layout))
        np.testing.assert_array_equal(out, np.asarray(a)[rows].astype(layout.dtype), name)
    with pytest.raises(ValueError, match="the Maps of this layout"):
        _feed_core.gather(shardload.discover(d), np.zeros(1, np.int64),
                          np.empty((1, 3), np.int64), maps=_feed_core.Maps(shardload.discover(d)))


def test_world_comes_from_torch_distributed_when_initialised_and_given_wins(monkeypatch):
    dist = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                 get_rank=lambda: 2, get_world_size=lambda: 5)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(distributed=dist))
    assert sf.world() == (2, 5)
    assert sf.world(0, 1) == (0, 1)
    dist.is_initialized = lambda: False
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    assert sf.world() == (0, 1)


def test_world_comes_from_jax_distributed_when_initialised(monkeypatch):
    jax = types.SimpleNamespace(distributed=types.SimpleNamespace(is_initialized=lambda: True),
                                process_index=lambda: 1, process_count=lambda: 3)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setitem(sys.modules, "jax", jax)
    assert sf.world() == (1, 3)


def test_arguments_are_checked(data):
    d, n = data
    for kw, err, msg in (
            ({"batch_size": 0}, ValueError, "batch_size"),
            ({"batch_size": 40, "world_size": 2, "rank": 0}, ValueError, "no rank gets a batch"),
            ({"batch_size": 2, "rank": 2, "world_size": 2}, ValueError, "rank"),
            ({"batch_size": 2, "rank": 0}, ValueError, "both rank and world_size"),
            ({"batch_size": 2, "shuffle": "random"}, ValueError, "shuffle"),
            ({"batch_size": 2, "seed": 2 ** 64}, ValueError, "seed"),
            ({"batch_size": 2, "block_rows": 0, "shuffle": "block"}, ValueError, "block_rows"),
            ({"batch_size": 2, "prefetch": -1}, ValueError, "prefetch"),
            ({"batch_size": "2"}, TypeError, "batch_size")):
        with pytest.raises(err, match=msg):
            sf.Feed(d, **kw)
    feed = sf.Feed(d, 40, rank=0, world_size=2, drop_last=False)
    assert len(feed) == 1
    huge = sf.Feed(d, 2 ** 50, drop_last=False)  # padded: one batch of 2**50 rows
    with pytest.raises(shardload.OutOfMemoryError, match="does not fit"):
        next(iter(huge))


def test_one_loop_at_a_time(data):
    d, n = data
    feed = sf.Feed(d, 2)
    it = iter(feed)
    next(it)
    with pytest.raises(RuntimeError, match="one loop at a time"):
        next(iter(feed))
    with pytest.raises(RuntimeError, match="before the loop"):
        feed.load_state_dict(feed.state_dict())
    it.close()
    assert next(iter(feed)) is not None


def test_resume_at_a_billion_rows_holds_no_order_of_the_rows(tmp_path):
    """Resuming a shuffled feed near the end of a billion rows computes the rows of its next
    batches only: in a process of its own, its peak memory stays under 1 GiB, where an order of
    the billion rows held at once would take 4 GB or more (counted by memory, not by time).
    The peak is VmHWM, this process's own: ru_maxrss starts at the peak of the process that
    forked it (Linux keeps it across exec), a pytest worker's gigabyte after a few thousand
    tests."""
    d = tmp_path / "big"
    d.mkdir()
    with open(d / "shard_0000.bin", "wb") as f:
        f.truncate(10 ** 9)  # sparse: a billion one-byte rows, no disk
    script = textwrap.dedent(f"""
        import json, sys
        import shardload.feed as sf
        path = {str(d / "shard_0000.bin")!r}
        feed = sf.Feed(path, 256, format="raw", dtype="uint8", trailing_shape=(), seed=1,
                       rank=1, world_size=4)
        state = {{**feed.state_dict(), "position": 10 ** 9 - 4096, "epoch": 7}}
        again = sf.Feed(path, 256, format="raw", dtype="uint8", trailing_shape=(), rank=1,
                        world_size=4)
        again.load_state_dict(state)
        batch = next(iter(again))
        print(json.dumps({{"shape": list(batch.shape), "position": again.state_dict()["position"],
                           "peak_kib": [int(line.split()[1]) for line in open("/proc/self/status")
                                        if line.startswith("VmHWM:")][0]}}))
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["shape"] == [256]
    assert got["position"] == 10 ** 9 - 4096 + 1024
    assert got["peak_kib"] < 1024 * 1024, got


def test_the_gather_checks_its_rows_and_buffer(data):
    from shardload import _feed_core

    d, n = data
    layout = shardload.discover(d)
    rows = np.array([66, 0, 5, 6, 7, 30, 31, 2], dtype=np.int64)
    out = np.empty((8, 3), np.int64)
    _feed_core.gather(layout, rows, out, 3)
    assert (out[:, 0] == rows).all()
    _feed_core.gather(layout, np.empty(0, np.int64), np.empty((0, 3), np.int64), 2)  # no rows
    # [66, 67]: a run of consecutive rows whose first is the last row (it once read past it).
    for bad in (np.array([67]), np.array([-1]), np.array([66, 67]), np.array([5, 65, 66, 67])):
        with pytest.raises(ValueError, match="outside the layout's 67 rows"):
            _feed_core.gather(layout, bad.astype(np.int64), np.empty((len(bad), 3), np.int64))
    for wrong in (np.empty((7, 3), np.int64), np.empty((8, 3), np.int32),
                  np.empty((3, 8), np.int64).T):
        with pytest.raises(ValueError, match="C-contiguous array of 192 bytes"):
            _feed_core.gather(layout, rows, wrong)
    with pytest.raises(ValueError, match="threads"):
        _feed_core.gather(layout, rows, out, 0)
    with pytest.raises(ValueError, match=r"position 67 is outside \[0, 67\)"):
        _feed_core.permute(np.array([3, 67], np.int64), 67, [1, 2, 3, 4, 5, 6])


@pytest.mark.parametrize("cols", [3, 8192])
def test_a_gather_serves_numpys_rows_read_coalesced_or_one_by_one(tmp_path, cols):
    """Rows close together in the source (24-byte rows: any of these) are read in runs into
    scratch and copied to their places; rows far apart (64 KiB rows: a gap of two rows is too
    far) each with a read of their own. Both against numpy's fancy index of the shards:
    duplicates, rows either side of the empty shard, the dataset's last row, reversed runs, a
    block order."""
    from shardload import _feed_core

    d = tmp_path / "d"
    n = write_rows(d, cols=cols)
    layout = shardload.discover(d)
    every = np.concatenate([np.load(p) for p in sorted(d.glob("*.npy"))])
    rng = np.random.default_rng(5)
    cases = [rng.permutation(n), rng.permutation(n)[:9], np.array([66, 66, 0, 0, 6, 7, 8, 6]),
             np.arange(n)[::-1], np.array([3, 5, 4, 20, 21, 19, 45, 47, 46, 66]),
             _feed_order.Order("block", n, 3, 0, 5, 3).rows(np.arange(n)),
             np.array([6, 7]), np.array([0, 66]), np.array([30])]
    for rows in cases:
        rows = rows.astype(np.int64)
        out = np.full((len(rows), cols), -1, np.int64)
        _feed_core.gather(layout, rows, out, 3)
        np.testing.assert_array_equal(out, every[rows])
        again = np.full_like(out, -1)
        assert _feed_core.Gather(layout, rows, again, 2).result() is again
        np.testing.assert_array_equal(again, every[rows])


@pytest.mark.parametrize("shards,cols,b,w,batch,world,drop_last", [
    (SHARD_ROWS, 3, 1, 1, 3, 1, True),
    (SHARD_ROWS, 3, 3, 5, 4, 2, False),
    (SHARD_ROWS, 3, 16, 2, 5, 3, True),
    (SHARD_ROWS, 3, 64, 3, 7, 1, False),  # one block past the rows: a short block only
    (SHARD_ROWS, 3, 5, 100, 2, 2, True),  # one window of every block
    ([1] * 40, 3, 3, 2, 4, 1, False),  # a shard a row: every block spans shards
    ([1000, 1000, 1000, 1096], 128, 16, 3, 100, 2, False),  # fills of several windows
    ([1000, 0, 1000, 1000, 1096], 128, 100, 4, 64, 3, True),  # windows cut by fills
])
@pytest.mark.parametrize("mapped", [True, False])
def test_a_block_shuffled_feed_serves_the_oracles_batches(tmp_path, monkeypatch, shards, cols, b,
                                                          w, batch, world, drop_last, mapped):
    """The block shuffle's fills, read by the engine (copied from the files' maps, or without
    them whole blocks read into scratch and the window's permutation applied in C++), against
    the materialised block order, for block and window sizes that do not divide the shards,
    the rows or the batches, on each rank."""
    if not mapped:
        monkeypatch.setattr(sf.Feed, "_maps_for", lambda self, order: None)
    d = tmp_path / "d"
    n = write_rows(d, shards, cols=cols)
    stream = oracle_stream("block", n, 21, 1, b, w)
    for rank in range(world):
        feed = sf.Feed(d, batch, rank=rank, world_size=world, shuffle="block", seed=21,
                       block_rows=b, window_blocks=w, drop_last=drop_last, threads=2)
        feed.set_epoch(1)
        got = run_epoch(feed)
        want = expected_batches(stream, batch, world, rank, drop_last)
        assert [g.tolist() for g in got] == [x.tolist() for x in want]


CAST_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
               "uint64", "float16", "float32", "float64"]


@pytest.mark.parametrize("source", CAST_DTYPES)
def test_a_gather_casts_as_numpy_does_or_refuses_the_cast(tmp_path, source):
    """gather(cast=True) into a batch of another dtype: numpy's same_kind casts among bool,
    the ints, float32 and float64 on the engine's threads, each element as numpy's astype
    (ints wrap, floats round, float32 overflow inf, nan kept); any other a ValueError (the
    feed casts those with numpy)."""
    from shardload import _feed_core

    rng = np.random.default_rng(9)
    src = np.dtype(source)
    if src.kind == "f":
        vals = np.concatenate([rng.standard_normal(60) * 1e6, [np.nan, np.inf, -np.inf, 1e300,
                                                              -1e300, 0.5, -2.5, 3e38]])
        with np.errstate(over="ignore", invalid="ignore"):
            a = vals.astype(src)
    elif src.kind == "b":
        a = rng.random(68) < 0.5
    else:
        info = np.iinfo(src)
        a = rng.integers(info.min, info.max, 68, dtype=src, endpoint=True)
        a[:2] = [info.min, info.max]
    a = a.reshape(17, 4)
    d = tmp_path / "d"
    d.mkdir()
    np.save(d / "shard_0000.npy", a[:9])
    np.save(d / "shard_0001.npy", a[9:])
    layout = shardload.discover(d)
    rows = np.random.default_rng(1).permutation(17).astype(np.int64)
    for target in CAST_DTYPES:
        dst = np.dtype(target)
        out = np.empty((17, 4), dst)
        if not sf._engine_casts(src, dst) and src != dst:
            with pytest.raises(ValueError, match=f"no cast here from the layout's {source} "
                                                 f"to {target}"):
                _feed_core.gather(layout, rows, out, 2, cast=True)
            continue
        _feed_core.gather(layout, rows, out, 2, cast=True)
        with np.errstate(over="ignore", invalid="ignore"):
            want = a[rows].astype(dst)
        np.testing.assert_array_equal(out, want, err_msg=f"{source} -> {target}")
        again = np.empty_like(out)
        _feed_core.Gather(layout, rows, again, 2, cast=True).result()
        np.testing.assert_array_equal(again, want, err_msg=f"{source} -> {target}")


@pytest.mark.parametrize("mode", ["none", "row", "block"])
@pytest.mark.parametrize("astype", [None, "float32", "float64", "int32", "int16"])
def test_fills_of_every_order_and_cast_are_read_on_the_engines_threads(data, monkeypatch, mode,
                                                                       astype):
    """The block shuffle and the casts the engine has fill on the engine's own threads
    (_feed_core.Gather), not in the feed's Python read-ahead thread (Feed._fill there); the
    batches are the oracle's rows, cast as numpy casts them."""
    d, n = data
    monkeypatch.setattr(sf.Feed, "_fill",
                        lambda *a: pytest.fail("a fill in the Python read-ahead thread"))
    feed = sf.Feed(d, 4, shuffle=mode, seed=5, block_rows=6, window_blocks=2, astype=astype,
                   threads=2)
    got = list(feed)
    want = expected_batches(oracle_stream(mode, n, 5, 0, 6, 2), 4, 1, 0, True)
    assert [b.dtype for b in got] == [np.dtype(astype or np.int64)] * len(want)
    assert [b[:, 0].tolist() for b in got] == [w.astype(astype or np.int64).tolist()
                                                for w in want]


def test_a_cast_the_engine_lacks_is_numpys_in_the_read_ahead_thread(data):
    d, n = data
    for astype in ("float16", "uint64", "complex64"):  # float16, int to uint, complex
        feed = sf.Feed(d, 4, shuffle="block", seed=5, block_rows=6, astype=astype)
        got = list(feed)
        want = expected_batches(oracle_stream("block", n, 5, 0, 6, 4), 4, 1, 0, True)
        assert [b.dtype for b in got] == [np.dtype(astype)] * len(want)
        assert [b[:, 0].tolist() for b in got] == [w.astype(astype).tolist() for w in want]


def test_a_gather_started_on_its_own_threads_hands_back_its_array_or_its_error(data):
    """_feed_core.Gather: the read-ahead's fill, started at construction on threads of its own,
    waited for by result(): the rows as gather puts them, the array itself; the error (naming
    the file) at result(), again at each call; an unfinished one dropped waits for its reads."""
    import gc
    import sys as _sys

    from shardload import _feed_core

    d, n = data
    layout = shardload.discover(d)
    rows = np.random.default_rng(3).permutation(n).astype(np.int64)
    out = np.full((n, 3), -1, np.int64)
    held = _sys.getrefcount(out)
    g = _feed_core.Gather(layout, rows, out, 2)
    assert _sys.getrefcount(out) == held + 1  # the fill holds its array while it writes
    assert g.result() is out and g.done() and not g.cancel()
    assert (out[:, 0] == rows).all() and (out == out[:, :1]).all()
    for bad, err in (((np.array([n], np.int64), np.empty((1, 3), np.int64)), ValueError),):
        with pytest.raises(err, match=f"outside the layout's {n} rows"):
            _feed_core.Gather(layout, *bad).result()
    with pytest.raises(ValueError, match="C-contiguous array of"):
        _feed_core.Gather(layout, rows, np.empty((n, 3), np.int32))
    for _ in range(20):  # dropped while reading: waits, then frees
        _feed_core.Gather(layout, rows, np.empty((n, 3), np.int64), 2)
    gc.collect()
    os.remove(d / "shard_0002.npy")
    g = _feed_core.Gather(layout, rows, out, 2)
    for _ in range(2):
        with pytest.raises(shardload.ShardReadError, match="shard_0002.npy"):
            g.result()


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
@pytest.mark.parametrize("mode", ["row", "block"])
def test_a_shuffled_fill_checks_each_shard_once_not_each_row(tmp_path, mode):
    """A shuffled fill of local npy shards checks each shard's file at its open and once after
    the fill, not after every row (an fstat per 1 KiB row cost as much as the row); and a
    fill whose rows lie close together (here every row of the 4 MiB: an epoch is one fill)
    reads them in a few long reads, not a pread per row (4,096 an epoch before): counted by
    strace over two epochs."""
    d = tmp_path / "d"
    n = write_rows(d, [1000, 1000, 1000, 1096], cols=128)  # 1 KiB rows, 4 MiB

    def count(epochs: int) -> dict[str, int]:
        script = (f"import shardload.feed as sf\n"
                  f"f = sf.Feed({str(d)!r}, 256, shuffle={mode!r}, seed=1, threads=2)\n"
                  f"for _ in range({epochs}):\n"
                  f"    assert sum(b.shape[0] for b in f) == {n // 256 * 256}\n")
        res = subprocess.run(["strace", "-f", "-c", "-e",
                              "trace=pread64,fstat,newfstatat,statx", sys.executable, "-c",
                              script], capture_output=True, text=True, timeout=120)
        if res.returncode != 0 and "ptrace" in res.stderr:
            pytest.skip(f"strace cannot trace here: {res.stderr[-200:]}")
        assert res.returncode == 0, res.stderr[-2000:]
        calls = {"pread64": 0, "stat": 0}
        for line in res.stderr.splitlines():
            parts = line.split()
            if len(parts) >= 5 and parts[-1] in ("pread64", "fstat", "newfstatat", "statx"):
                calls["pread64" if parts[-1] == "pread64" else "stat"] += int(parts[3])
        return calls

    # Two epochs less none: what the epochs cost, without the imports and the discovery.
    base, two = count(0), count(2)
    preads, stats = (two[k] - base[k] for k in ("pread64", "stat"))
    assert preads <= 2 * 16, (base, two)  # were 2 * 4,096
    # Each fill opening and checking the 4 shards, where a check after each read made 4,096
    # more an epoch.
    assert stats <= 2 * 40, (base, two)


# ---- ranks that agree ---------------------------------------------------------------------------
# The exchanges between ranks through a group of threads, each thread one rank whose feed takes
# its place from a stand-in for torch.distributed (test_feed_torch.py does the same with real
# torch on 2 processes).
class ThreadPeers:
    def __init__(self, barrier: "threading.Barrier", slots: list, rank: int) -> None:
        self.barrier, self.slots, self.rank, self.size = barrier, slots, rank, len(slots)
        self.rounds = 0

    def gather(self, obj):
        self.rounds += 1
        self.slots[self.rank] = obj
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out

    def any(self, flag):
        return any(self.gather(flag))


def on_ranks(monkeypatch, world: int, body) -> list:
    """body(rank) on `world` threads, each seeing itself as that rank of an initialised
    torch.distributed; returns what each returned or raised."""
    import threading

    barrier = threading.Barrier(world, timeout=30)  # a rank left waiting fails, never hangs
    slots: list = [None] * world
    local = threading.local()
    monkeypatch.setattr(sf, "_world", lambda rank, size: (local.rank, world, "torch"))
    monkeypatch.setattr(sf, "_peers", lambda where: ThreadPeers(barrier, slots, local.rank))
    got: list = [None] * world

    def run(r: int) -> None:
        local.rank = r
        try:
            got[r] = body(r)
        except BaseException as e:  # noqa: BLE001 - the test compares them
            got[r] = e

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    return got


def test_ranks_that_agree_on_the_dataset_each_get_their_part(data, monkeypatch):
    d, n = data
    got = on_ranks(monkeypatch, 2, lambda r: (sf.Feed(d, 4, shuffle="row", seed=2).rank,
                                              run_epoch(sf.Feed(d, 4, shuffle="row", seed=2))))
    stream = oracle_stream("row", n, 2, 0)
    for r in (0, 1):
        assert got[r][0] == r
        assert [b.tolist() for b in got[r][1]] == [
            w.tolist() for w in expected_batches(stream, 4, 2, r, True)]


@pytest.mark.parametrize("change", ["grown", "rewritten", "added", "removed"])
def test_ranks_that_found_different_datasets_raise_the_same_error(tmp_path, monkeypatch, change):
    """A shard grown, rewritten in place with the same size (another modification time), a
    shard added or one removed between rank 0's discovery and rank 1's: both ranks raise the
    same LayoutError naming the first shard that differs."""
    d = tmp_path / "d"
    write_rows(d)
    layouts = [shardload.discover(d)]
    shard = d / "shard_0002.npy"
    if change == "grown":
        np.save(shard, np.concatenate([np.load(shard), np.load(shard)[:2]]))
    elif change == "rewritten":
        time.sleep(0.01)  # another modification time, whatever the file system's resolution
        a = np.load(shard)
        np.save(shard, a[::-1])
        os.utime(shard, ns=(time.time_ns(), time.time_ns() + 10 ** 9))
    elif change == "added":
        np.save(d / "shard_0007.npy", np.zeros((3, 3), np.int64))
    else:
        (d / "shard_0006.npy").unlink()
    layouts.append(shardload.discover(d))
    got = on_ranks(monkeypatch, 2, lambda r: sf.Feed(layouts[r], 4))
    assert all(isinstance(e, shardload.LayoutError) for e in got), got
    assert str(got[0]) == str(got[1])
    msg = str(got[0])
    assert msg.startswith("Feed: the ranks found different datasets (")
    name = {"added": "shard_0007.npy", "removed": "shard_0006.npy"}.get(change,
                                                                       "shard_0002.npy")
    assert name in msg
    if change == "grown":
        assert "on rank 0 13 rows, 440 bytes" in msg and "on rank 1 15 rows, 488 bytes" in msg
    elif change == "added":
        assert "rank 1 has a shard more" in msg
    elif change == "removed":
        assert "rank 0 has a shard more" in msg


@pytest.mark.parametrize("spec", ["block/1000000000000000000000/3",
                                  "block/3/10000000000000000000000",
                                  "block/9223372036854775807/9223372036854775807",
                                  "block/18446744073709551616/1", "block/ 3/2", "block/1_0/2"])
def test_a_state_with_a_block_spec_past_int64_serves_every_row_once(data, spec):
    """A state made by hand whose block shuffle's sizes are far past the rows (and past 64
    bits) or spelled as Python's int() takes them: the epoch is still a permutation of the
    rows, never an overflow into repeated or missing rows."""
    d, n = data
    feed = sf.Feed(d, 4, rank=0, world_size=1, seed=1, drop_last=False)
    feed.load_state_dict(dict(feed.state_dict(), shuffle=spec))
    got = np.concatenate(run_epoch(feed))
    assert sorted(got.tolist()[:n]) == list(range(n))


@pytest.mark.parametrize("secret", ["query", "user"])
def test_ranks_that_found_different_datasets_show_no_secret_of_a_url(monkeypatch, secret):
    """The LayoutError of ranks whose datasets differ names the first shard that differs: an
    http(s) shard's URL showed its token or password in clear."""
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from test_http import serving

    with serving() as (store, url):
        for i in range(3):
            store.put_npy(f"/d/shard_{i:04d}.npy", np.arange(i * 10, i * 10 + 10))
        if secret == "user":
            url, query = url.replace("http://", "http://alice:pw-s3cr3t@"), ""
        else:
            query = "?token=tk-s3cr3t"
        urls = [f"{url}/d/shard_{i:04d}.npy{query}" for i in range(3)]
        layouts = [shardload.discover(urls)]
        store.put_npy("/d/shard_0001.npy", np.arange(12))
        layouts.append(shardload.discover(urls))
        got = on_ranks(monkeypatch, 2, lambda r: sf.Feed(layouts[r], 2))
    assert all(isinstance(e, shardload.LayoutError) for e in got), got
    msg = str(got[0])
    assert "shard_0001.npy" in msg and "s3cr3t" not in msg, msg
    # Shown as the URL typed holds the secret, or as a path made from the source holds it
    # (its credentials' handle, hidden too).
    shown = "alice:***@" if secret == "user" else "token=***"
    assert shown in msg or "credentials=***" in msg, msg


def test_ranks_that_found_an_object_rewritten_at_the_same_size_raise_the_same_error(
        monkeypatch):
    """An http(s) shard rewritten with the same size between two ranks' discoveries (a
    regenerated shard of the same shape): the fingerprint held a modification time of 0 and no
    ETag, so the digests were equal and the feeds built; the rank with the older snapshot
    then failed its first read mid-epoch (hostile pass 31, B2). The object's version (its ETag,
    else its Last-Modified) is in the fingerprint: both ranks raise docs/feed.md's LayoutError
    at construction, naming the object."""
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from test_http import serving

    with serving() as (store, base):  # an ETag (md5) and a Last-Modified that never changes
        a = np.arange(20, dtype=np.int32).reshape(10, 2)
        url = f"{base}/d/s1.npy"
        store.put_npy("/d/s1.npy", a)
        layouts = [shardload.discover(url)]
        store.put_npy("/d/s1.npy", a + 1000)  # the same size, other rows
        layouts.append(shardload.discover(url))
        # The oracle: the two discoveries are two versions of the object.
        np.testing.assert_array_equal(layouts[1].read(0, 10), a + 1000)
        with pytest.raises(shardload.ShardReadError):
            layouts[0].read(0, 2)
        got = on_ranks(monkeypatch, 2, lambda r: sf.Feed(layouts[r], 2))
    assert all(isinstance(e, shardload.LayoutError) for e in got), got
    assert str(got[0]) == str(got[1])
    msg = str(got[0])
    assert msg.startswith("Feed: the ranks found different datasets (shard "), msg
    assert "s1.npy" in msg and "10 rows, 208 bytes, version 0x" in msg, msg


def test_a_discovery_error_on_one_rank_is_raised_on_every_rank(data, monkeypatch):
    d, n = data
    got = on_ranks(monkeypatch, 2,
                   lambda r: sf.Feed(d if r == 0 else d / "missing", 4))
    assert all(isinstance(e, shardload.SourceNotFoundError) for e in got), got
    assert str(got[0]) == str(got[1]) and "missing" in str(got[0])
    assert got[0].__notes__ == ["raised by the feed on rank 1; this rank (0) stopped at the "
                                "same batch"]


@pytest.mark.parametrize("cols", [3, 8])
@pytest.mark.parametrize("mode", ["none", "row"])
def test_a_read_error_on_one_rank_is_raised_on_every_rank_at_the_same_step(tmp_path, monkeypatch,
                                                                          mode, cols):
    """Shard 6 (rows 48..66) vanishes after each rank's first batch; with shuffle="none" only
    rank 1 reads it, in step 6 (rows 52..55 on 2 ranks x 4). Both ranks raise ShardReadError
    naming it at that step, having yielded the same steps before. With rows of 8 int64 the
    batches are read 3 to a fill and the ranks agree once a fill until one fails, then once a
    step."""
    import threading

    monkeypatch.setattr(sf, "_FILL_BYTES", 4 * 8 * 8 * 3)
    d = tmp_path / "d"
    n = write_rows(d, cols=cols)
    started = threading.Barrier(2, timeout=30)
    rounds = []

    def body(r: int):
        feed = sf.Feed(d, 4, shuffle=mode, seed=3, prefetch=0)
        seen = []
        try:
            for k, batch in enumerate(feed):
                seen.append(ids(batch).tolist())
                if k == 0:
                    started.wait()
                    if r == 0:
                        (d / "shard_0006.npy").unlink()
                    started.wait()
        except shardload.ShardReadError as e:
            rounds.append(feed._peers.rounds)
            return seen, e
        return seen, None

    got = on_ranks(monkeypatch, 2, body)
    steps = {len(seen) for seen, _ in got}
    # Exchanges: 2 at construction; one at the loop's start (the stream); then one a fill (a
    # fill a step with 3 columns: a batch of 96 bytes is not a multiple of 64) and, in the
    # fill that failed, one a step more, and one more at the failing step (the errors).
    fills = -(-(min(steps) + 1) // (1 if cols == 3 else 3))
    in_fill = min(steps) % (1 if cols == 3 else 3)
    assert rounds == [2 + 1 + fills + in_fill + 2] * 2, (rounds, steps)
    assert len(steps) == 1, got  # the same step on both ranks
    for r, (seen, e) in enumerate(got):
        assert isinstance(e, shardload.ShardReadError), (r, e)
        assert e.filename.endswith("shard_0006.npy")
        want = expected_batches(oracle_stream(mode, n, 3, 0), 4, 2, r, True)
        assert seen == [w.tolist() for w in want[:len(seen)]]
    if mode == "none":
        assert steps == {6}  # steps 0..5 yielded, the error at step 6 (rows 48..55 vs 52..55)


# ---- several batches to a fill --------------------------------------------------------------------
# Rows of 8 int64 (64 bytes): every batch's bytes are a multiple of the alignment, so the feed
# reads several batches in one fill and hands each out as a view of the fill's buffer.
@pytest.mark.parametrize("mode", ["none", "row", "block"])
@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("drop_last", [True, False])
def test_batches_read_several_to_a_fill_are_the_oracles(tmp_path, monkeypatch, mode, world,
                                                        drop_last):
    monkeypatch.setattr(sf, "_FILL_BYTES", 5 * 64 * 3)  # 3 batches a fill
    d = tmp_path / "d"
    n = write_rows(d, cols=8)
    stream = oracle_stream(mode, n, 4, 1, 4, 3)
    for rank in range(world):
        for prefetch in (0, 2, 7):
            feed = sf.Feed(d, 5, rank=rank, world_size=world, shuffle=mode, seed=4,
                           block_rows=4, window_blocks=3, drop_last=drop_last,
                           prefetch=prefetch)
            assert feed._per_fill == 3
            feed.set_epoch(1)
            got = [b.copy() for b in feed]  # each a view of its fill's buffer, aligned
            want = expected_batches(stream, 5, world, rank, drop_last)
            assert [ids(g).tolist() for g in got] == [w.tolist() for w in want]
            # A resume in the middle of a fill starts its fills there.
            feed.load_state_dict({**feed.state_dict(), "epoch": 1,
                                  "position": 4 * 5 * world})
            rest = [ids(b).tolist() for b in feed]
            assert rest == [w.tolist() for w in expected_batches(stream, 5, world, rank,
                                                                 drop_last, start=20 * world)]


def test_a_kept_batch_of_a_fill_stays_valid_and_fills_are_reused(tmp_path, monkeypatch):
    monkeypatch.setattr(sf, "_FILL_BYTES", 10 * 64 * 4)  # 4 batches a fill
    d = tmp_path / "d"
    n = write_rows(d, [400, 400], cols=8)
    feed = sf.Feed(d, 10, shuffle="row", seed=2, prefetch=2)
    assert feed._per_fill == 4
    want = expected_batches(oracle_stream("row", n, 2, 0), 10, 1, 0, True)
    kept = []
    for k, batch in enumerate(feed):
        assert batch.ctypes.data % 64 == 0 and batch.shape == (10, 8)
        if k % 20 == 0:
            kept.append((k, batch[3:]))  # a view of a batch keeps its whole fill
    for k, b in kept:
        assert (b[:, 0] == want[k][3:]).all()
    # 20 fills: the 4 kept, each of which may also push a pooled buffer out (the pool keeps
    # 3: 1 ahead + 2), plus one in flight; far fewer than the fills.
    assert feed._pool.allocated <= 2 * len(kept) + 4
    feed = sf.Feed(d, 10, shuffle="row", seed=2, prefetch=2)
    pointers = {b.ctypes.data for b in feed}
    assert len(pointers) <= 4 * 4 and feed._pool.allocated <= 4


@pytest.mark.parametrize("mode", ["none", "block"])
def test_a_read_error_in_a_fill_comes_at_the_batch_that_needs_the_file(tmp_path, monkeypatch,
                                                                      mode):
    """4 batches of 10 rows a fill; shard 2 (rows 100..149) removed after the first batch.
    The fill of batches 8..11 fails; its batches are read again one by one, so batches 8 and 9
    are yielded and the error comes at batch 10, as with one batch a fill."""
    monkeypatch.setattr(sf, "_FILL_BYTES", 10 * 64 * 4)
    d = tmp_path / "d"
    write_rows(d, [50, 50, 50], cols=8)
    # Blocks of 50 rows in windows of 1: with seed 4 the removed shard's block is the last of
    # the block order, so its first rows are in batch 10, in the third fill, which is read
    # after the removal (the second may be read before it: one fill ahead).
    feed = sf.Feed(d, 10, shuffle=mode, block_rows=50, window_blocks=1, prefetch=1, seed=4)
    stream = feed.order(0).rows(np.arange(150))
    first_bad = int(np.flatnonzero(stream >= 100)[0]) // 10
    assert first_bad == 10
    it = iter(feed)
    seen = [ids(next(it)).tolist()]
    os.remove(d / "shard_0002.npy")
    with pytest.raises(shardload.ShardReadError, match="shard_0002.npy"):
        for b in it:
            seen.append(ids(b).tolist())
    assert seen == [stream[k * 10:(k + 1) * 10].tolist() for k in range(first_bad)]
    assert feed.state_dict()["position"] == first_bad * 10


def test_check_ranks_needs_a_process_group_and_false_turns_it_off(data, monkeypatch):
    d, n = data
    with pytest.raises(ValueError, match="check_ranks=True: .* from its arguments"):
        sf.Feed(d, 4, rank=0, world_size=2, check_ranks=True)
    with pytest.raises(TypeError, match="check_ranks"):
        sf.Feed(d, 4, check_ranks="yes")
    # Off: ranks that found different datasets are not compared (no exchange at all).
    monkeypatch.setattr(sf, "_world", lambda rank, size: (0, 2, "torch"))
    monkeypatch.setattr(sf, "_peers", lambda where: pytest.fail("an exchange"))
    assert len(list(sf.Feed(d, 4, check_ranks=False))) == n // 8


JAX_AGREE_CHILD = r"""
import json, pathlib, sys, time
import jax
d, d2, out, port, pid = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                           process_id=pid, initialization_timeout=60)
from jax._src import distributed
import numpy as np
import shardload
import shardload.feed as sf

client = distributed.global_state.client
jax.process_index()  # the backends start together (each waits for the other's)
got = {}
# 1. A shard grown between rank 0's discovery and rank 1's.
flag = pathlib.Path(d).parent / "discovered"
if pid == 0:
    prepare = sf._frontend.prepare

    def prepared_then_flag(*a, **kw):
        result = prepare(*a, **kw)
        flag.touch()
        return result

    sf._frontend.prepare = prepared_then_flag
else:
    while not flag.exists():
        time.sleep(0.01)
    shard = pathlib.Path(d) / "shard_0002.npy"
    a = np.load(shard)
    np.save(shard, np.concatenate([a, a[:4]]))
try:
    sf.Feed(d, 4)
    got["layout"] = None
except shardload.LayoutError as e:
    got["layout"] = str(e)
# 2. A shard that only rank 1 reads removed once both ranks have their first batch.
feed = sf.Feed(d2, 4, shuffle="none")
steps = []
try:
    for k, batch in enumerate(feed):
        steps.append(batch[:, 0].tolist())
        if k == 0:
            client.wait_at_barrier("first", 60000)
            if pid == 0:
                (pathlib.Path(d2) / "shard_0001.npy").unlink()
            client.wait_at_barrier("removed", 60000)
    got["read"] = None
except shardload.ShardReadError as e:
    got["read"] = {"filename": e.filename, "message": str(e),
                   "notes": getattr(e, "__notes__", [])}
got["steps"] = steps
json.dump(got, open(out, "w"))
jax.distributed.shutdown()
"""


def test_jax_processes_agree_on_the_dataset_and_on_read_errors(tmp_path):
    """2 JAX processes under jax.distributed (the feed's exchanges through its key-value
    store): a shard grown between their discoveries gives both the same LayoutError; a shard
    that only process 1 reads, removed mid-epoch, gives both a ShardReadError naming it at the
    same step (rows 28..31, step 3 of 2 x 4 rows in order)."""
    pytest.importorskip("jax")
    d, d2 = tmp_path / "a" / "d", tmp_path / "b" / "d"
    write_rows(d)
    write_rows(d2, [28, 4, 8, 24])
    got = run_two_jax_processes(tmp_path, JAX_AGREE_CHILD, [str(d), str(d2)])
    assert got[0]["layout"] == got[1]["layout"] and got[0]["layout"] is not None
    assert "the ranks found different datasets" in got[0]["layout"]
    assert "shard_0002.npy" in got[0]["layout"]
    for r in (0, 1):
        err = got[r]["read"]
        assert err is not None and err["filename"].endswith("shard_0001.npy"), got[r]
        assert len(got[r]["steps"]) == 3, got[r]
    assert got[1]["read"]["notes"] == []  # its own error
    assert got[0]["read"]["notes"] == ["raised by the feed on rank 1; this rank (0) stopped at "
                                       "the same batch"]


def test_a_dataloader_workers_share_of_batches_read_several_to_a_fill(tmp_path, monkeypatch):
    """What Feed.torch_dataset's worker i of k iterates (steps i, i + k, ...), with 3 batches a
    fill: the oracle's batches of those steps, each once."""
    monkeypatch.setattr(sf, "_FILL_BYTES", 5 * 64 * 3)
    d = tmp_path / "d"
    n = write_rows(d, cols=8)
    stream = oracle_stream("row", n, 9, 0)
    want = expected_batches(stream, 5, 2, 1, False)
    for workers in (1, 2, 3):
        got = []
        for i in range(workers):
            feed = sf.Feed(d, 5, rank=1, world_size=2, seed=9, drop_last=False)
            assert feed._per_fill == 3
            got.append([ids(b).tolist() for b in feed._run(i, workers, worker=True)])
        for i in range(workers):
            assert got[i] == [w.tolist() for w in want[i::workers]], (workers, i)


@pytest.mark.parametrize("mode", ["none", "block", "row"])
@pytest.mark.parametrize("holder", ["memoryview", "frombuffer", "reshaped view", "transposed view",
                                    "dlpack", "ctypes array"])
def test_a_batch_kept_by_any_holder_of_its_memory_stays_valid(tmp_path, monkeypatch, mode,
                                                             holder):
    """Whatever keeps a batch's memory (a memoryview, an array over its buffer, views that
    numpy bases on the fill, a DLPack import, an array over its ctypes pointer object) keeps
    the batch's rows: the feed never refills a buffer something still holds."""
    monkeypatch.setattr(sf, "_FILL_BYTES", 10 * 64 * 4)  # 4 batches a fill
    d = tmp_path / "d"
    n = write_rows(d, [400, 400], cols=8)
    hold = {
        "memoryview": memoryview,
        "frombuffer": lambda b: np.frombuffer(b, dtype=b.dtype).reshape(b.shape),
        "reshaped view": lambda b: b.reshape(-1)[8:].reshape(-1, 8),
        "transposed view": lambda b: b.T[:, 1:].T,
        "dlpack": np.from_dlpack,
        "ctypes array": lambda b: np.ctypeslib.as_array(
            b.ctypes.data_as(np.ctypeslib.ctypes.POINTER(np.ctypeslib.ctypes.c_float)),
            shape=b.shape),
    }[holder]
    feed = sf.Feed(d, 10, shuffle=mode, seed=5, block_rows=50, window_blocks=2, prefetch=2,
                   astype="float32")
    want = expected_batches(oracle_stream(mode, n, 5, 0, 50, 2), 10, 1, 0, True)
    kept = [(k, hold(b)) for k, b in enumerate(feed)]
    for k, b in kept:
        rows = np.asarray(b)
        first = 1 if holder in ("reshaped view", "transposed view") else 0
        assert (rows[:, 0] == want[k][first:]).all(), k


# ---- the order computed on the fill's threads -------------------------------------------------
@pytest.mark.parametrize("mode", ["none", "row", "block"])
@pytest.mark.parametrize("mapped", [True, False])
def test_the_order_computed_on_the_fills_threads_is_the_reference_order(tmp_path, mode, mapped):
    """A fill named by its order and positions (_feed_core.FillOrder), its rows computed on the
    Gather's own threads (each the part of the fill it copies), holds the rows that
    _feed_order.Order.rows gives for the fill's positions and that the materialised oracle
    stream holds there, for several seeds, epochs, world sizes, ranks, starting positions
    and fills that wrap past the end (drop_last=False's padding)."""
    from shardload import _feed_core

    d = tmp_path / "d"
    n = write_rows(d, [700, 0, 1300, 311, 900, 1])  # 3,212 rows: fills split among threads
    layout = shardload.discover(d)
    maps = _feed_core.Maps(layout) if mapped else None
    assert maps is None or maps.usable
    b, w = 50, 3
    for seed, epoch in ((0, 0), (7, 1), (2**64 - 1, 5)):
        stream = oracle_stream(mode, n, seed, epoch, b, w)
        order = _feed_order.Order(mode, n, seed, epoch, b, w)
        for world, rank, batch, start, steps in ((1, 0, 1024, 0, 2), (2, 1, 300, 17, 3),
                                                 (3, 2, 256, 1000, 4), (4, 0, 500, 3000, 2)):
            step = batch * world
            first = start + rank * batch
            fill = order.fill(first, batch, step, steps)
            positions = np.concatenate([np.arange(first + k * step, first + k * step + batch)
                                        for k in range(steps)]) % n
            want = stream[positions]
            assert fill.size == positions.size
            assert (order.rows(positions) == want).all()
            assert (fill.rows() == want).all(), (seed, epoch, world, rank, start)
            out = np.full((positions.size, 3), -1, np.int64)
            assert _feed_core.Gather(layout, fill, out, 2, maps=maps).result() is out
            assert (ids(out) == want).all(), (seed, epoch, world, rank, start)


def test_a_fill_order_of_sizes_out_of_range_is_refused(data):
    from shardload import _feed_core

    d, n = data
    layout = shardload.discover(d)
    ok = dict(mode="block", n=n, block_rows=6, window_blocks=2, seed=1, epoch=0, rounds=6,
              first=0, batch=4, stride=4, count=3)
    assert _feed_core.FillOrder(**ok).size == 12
    for change in ({"mode": "rows"}, {"n": 0}, {"block_rows": n + 1}, {"window_blocks": 13},
                   {"rounds": 0}, {"first": -1}, {"batch": 0}, {"stride": -4}, {"count": -1},
                   {"first": 2**62, "stride": 2**62, "count": 3}):
        with pytest.raises(ValueError, match="FillOrder: expected"):
            _feed_core.FillOrder(**{**ok, **change})
    with pytest.raises(ValueError, match="C-contiguous array of 288 bytes"):
        _feed_core.Gather(layout, _feed_core.FillOrder(**ok), np.empty((11, 3), np.int64))


# ---- pinned host buffers ---------------------------------------------------------------------
def cuda_device() -> str | None:
    """None where the CUDA runtime finds a device, else why it does not (what Feed's
    pin_memory=True refuses with)."""
    try:
        sf._PinnedHost()
    except RuntimeError as e:
        return str(e)
    return None


def test_pin_memory_without_a_cuda_device_is_refused_naming_what_is_missing(data):
    """Without a CUDA device (or runtime) Feed(pin_memory=True) raises RuntimeError at
    construction, naming what is missing; pin_memory=False is the default and reads as ever."""
    if cuda_device() is None:
        pytest.skip("a CUDA device is present here: the refusal cannot happen")
    d, n = data
    with pytest.raises(RuntimeError, match=r"Feed\(pin_memory=True\): page-locked buffers need "
                                           r"(a CUDA device, and the CUDA runtime \(.*\) finds "
                                           r"none \(cudaGetDeviceCount: |the CUDA runtime)"):
        sf.Feed(d, 4, pin_memory=True)
    with pytest.raises(TypeError, match="pin_memory"):
        sf.Feed(d, 4, pin_memory="yes")
    feed = sf.Feed(d, 4, shuffle="row", seed=2, pin_memory=False)
    assert [ids(b).tolist() for b in feed] == [
        w.tolist() for w in expected_batches(oracle_stream("row", n, 2, 0), 4, 1, 0, True)]


@pytest.mark.parametrize("mode", ["none", "block", "row"])
def test_pinned_batches_are_page_locked_and_handed_over_without_a_copy(tmp_path, monkeypatch,
                                                                      mode):
    """With a CUDA device, pin_memory=True batches are the oracle's, page-locked (the CUDA
    runtime's cudaPointerGetAttributes says host memory it registered), and still taken by
    np.from_dlpack without a copy; a kept batch's buffer stays valid and pinned."""
    import ctypes

    why = cuda_device()
    if why is not None:
        pytest.skip(f"the pinned path needs a CUDA device (the refusal is tested instead): {why}")
    monkeypatch.setattr(sf, "_FILL_BYTES", 5 * 64 * 3)  # 3 batches a fill
    d = tmp_path / "d"
    n = write_rows(d, cols=8)
    feed = sf.Feed(d, 5, shuffle=mode, seed=3, block_rows=4, window_blocks=3, pin_memory=True)
    lib = feed._pool.pinned._lib

    class Attributes(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int),
                    ("devicePointer", ctypes.c_void_p), ("hostPointer", ctypes.c_void_p)]

    def pinned(a: np.ndarray) -> bool:
        attr = Attributes()
        rc = lib.cudaPointerGetAttributes(ctypes.byref(attr), ctypes.c_void_p(a.ctypes.data))
        return rc == 0 and attr.type == 1  # cudaMemoryTypeHost: registered host memory

    kept = []
    want = expected_batches(oracle_stream(mode, n, 3, 0, 4, 3), 5, 1, 0, True)
    for batch, w in zip(feed, want, strict=True):
        assert np.from_dlpack(batch).ctypes.data == batch.ctypes.data
        assert pinned(batch)
        assert ids(batch).tolist() == w.tolist()
        kept.append(batch)
    assert [ids(b).tolist() for b in kept] == [w.tolist() for w in want]
    assert all(pinned(b) for b in kept)


@pytest.mark.parametrize("batch_size", [2 ** 59, 2 ** 61 + 1, 2 ** 63 - 1, 2 ** 64])
def test_a_batch_past_64_bits_of_bytes_is_the_out_of_memory_error(data, batch_size):
    """drop_last=False lets batch_size pass the rows: a batch of more bytes than 64 bits count
    is the OutOfMemoryError of a batch that does not fit (as 2**50 rows are), naming its
    size. Before: the buffer's size wrapped past 2**63 (numpy's 'array is too big' from the
    batch's reshape), or its size could not be shown (a TypeError from size_string)."""
    d, _ = data
    feed = sf.Feed(d, batch_size, drop_last=False)
    with pytest.raises(shardload.OutOfMemoryError,
                       match=rf"a batch of \({batch_size}, 3\) int64 \((.* \()?"
                             rf"{batch_size * 24} bytes\)\)? does not fit"):
        next(iter(feed))



_CTRL_C_IN_A_FILL = r"""
import os, signal, sys, threading
import numpy as np
import shardload
from shardload.feed import Feed

signal.signal(signal.SIGINT, signal.default_int_handler)  # a test runner may ignore it

d, shuffle, prefetch = sys.argv[1], sys.argv[2], sys.argv[3]
prefetch = None if prefetch == "None" else int(prefetch)
for i in range(4):
    with open(os.path.join(d, f"shard_{i:04d}.rowfile"), "w") as f:
        f.write(str(i))
lock = threading.Lock()
reads = [0]
signalled = [False]
after = [0]  # rows of the reads in flight at the Ctrl-C or begun after it


def read(path, lo, hi):
    with lock:
        reads[0] += 1
        late = signalled[0]
        if reads[0] == 3 and not late:
            # A Ctrl-C landing while the engine reads the first fill.
            signalled[0] = True
            os.kill(os.getpid(), signal.SIGINT)
    with open(path) as f:
        k = int(f.read())
    rows = np.arange(lo, hi, dtype="f8") + 1000 * k
    with lock:
        if late or signalled[0]:
            after[0] += hi - lo
    return rows


shardload.register_reader("rowfile", read=read, count_rows=lambda p: 500, dtype="float64",
                          trailing_shape=(), extension=".rowfile")
layout = shardload.discover(d, format="rowfile")
try:
    for batch in Feed(layout, 8, shuffle=shuffle, prefetch=prefetch, seed=1, threads=2):
        pass
    print("NO INTERRUPT", reads[0], flush=True)
except KeyboardInterrupt:
    print("INTERRUPTED", after[0], flush=True)
# The interrupt is over: a next epoch reads every row once.
signalled[0] = True
rows = np.concatenate([np.asarray(b).copy() for b in Feed(layout, 8, shuffle=shuffle,
                                                           prefetch=prefetch, seed=2)])
expected = np.concatenate([np.arange(500.0) + 1000 * k for k in range(4)])
assert np.array_equal(np.sort(rows), expected), rows
print("NEXT EPOCH OK", flush=True)
"""


@pytest.mark.parametrize("shuffle,prefetch", [("row", "None"), ("row", "0"), ("row", "64")])
def test_a_ctrl_c_ends_a_fill_of_a_python_reader_after_the_reads_in_flight(
        tmp_path, shuffle, prefetch):
    """A Ctrl-C while the feed's fills read through a Python reader: each fill ends before its
    next read, and the loop raises KeyboardInterrupt. Before, a row shuffle's fill of 512 rows
    was read as whole shards (the gather's coalescing, which reads rows skipped between those
    asked, took the Python reader's rows for page-cache copies), and every read of the fills
    read ahead went on after the Ctrl-C (31 s in the report; the interrupt ended remote
    requests only). Counted as the rows of the reads in flight at the Ctrl-C or begun after
    it: a row per read the fills' threads were in."""
    r = subprocess.run([sys.executable, "-c", _CTRL_C_IN_A_FILL, str(tmp_path), shuffle,
                        prefetch], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    m = re.search(r"INTERRUPTED (\d+)", r.stdout)
    assert m is not None, r.stdout
    # The fills end between reads of a row each: a few dozen rows at most were seen; before,
    # 997 to 2990 (every fill read ahead read whole, its shards' rows among them).
    assert int(m.group(1)) <= 256, r.stdout
    assert "NEXT EPOCH OK" in r.stdout, r.stdout


def test_a_fill_s_wait_blocks_instead_of_polling(tmp_path):
    """The loop's wait for a fill whose reads take a while (a Python reader waiting on its
    source) slept 100 us at a time: about 5,000 wake-ups of the main thread for half a second
    of reading. It blocks until the fill ends, waking only to look for a Ctrl-C (every 10 ms).
    Counted as the main thread's voluntary context switches during the wait."""
    import threading

    for i in range(2):
        (tmp_path / f"shard_{i:04d}.slowrow").write_text(str(i))
    release = threading.Event()

    def read(path, lo, hi):
        release.wait(30)
        return np.arange(lo, hi, dtype="f8")

    shardload.register_reader("slowrow", read=read, count_rows=lambda p: 16, dtype="float64",
                              trailing_shape=(), extension=".slowrow")
    layout = shardload.discover(tmp_path, format="slowrow")
    status = pathlib.Path(f"/proc/self/task/{threading.main_thread().native_id}/status")
    if not status.exists():
        pytest.skip("needs /proc/self/task")

    def switches() -> int:
        line = next(x for x in status.read_text().splitlines()
                    if x.startswith("voluntary_ctxt_switches:"))
        return int(line.split()[1])

    batches = iter(sf.Feed(layout, 8, prefetch=0))
    threading.Timer(0.5, release.set).start()
    before = switches()
    first = next(batches)
    woken = switches() - before
    assert np.asarray(first).shape == (8,) and set(np.asarray(first).tolist()) <= set(range(16))
    assert release.is_set()  # the wait lasted until the reads were let go
    # 0.5 s at 10 ms a wake-up is 50; at 100 us, 5,000.
    assert woken < 500, woken


@pytest.mark.parametrize("mode", ["row", "block"])
def test_an_interrupt_as_a_loop_starts_leaves_the_feed_usable(data, monkeypatch, mode):
    """A Ctrl-C that lands in a loop's first statements (the order, the fills, the maps of the
    first shuffled loop, which read /proc/self/maps) left the feed marked as iterated: every
    later loop, set_epoch and load_state_dict refused ("already being iterated"). The failure
    is injected where the maps are made; the next loop then serves the whole epoch."""
    d, n = data
    feed = sf.Feed(d, 5, shuffle=mode, seed=4, block_rows=4)
    real = sf._maps_in_use

    def interrupted(*args, **kwargs):
        monkeypatch.setattr(sf, "_maps_in_use", real)  # once
        raise KeyboardInterrupt

    monkeypatch.setattr(sf, "_maps_in_use", interrupted)
    with pytest.raises(KeyboardInterrupt):
        next(iter(feed))
    assert sf._maps_in_use is real  # the interrupt landed where it was meant to
    assert feed.position == 0
    want = run_epoch(sf.Feed(d, 5, shuffle=mode, seed=4, block_rows=4))
    assert [x.tolist() for x in run_epoch(feed)] == [x.tolist() for x in want]
    feed.set_epoch(0)
