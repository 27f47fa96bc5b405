"""One process of test_feed_torch.py. torch is imported only in processes of their own: its
libtorch_cuda.so loads libcufile, whose driver open spins when Legate starts in the same
process on a machine without NVIDIA's driver (docs/feed.md), and the pytest workers start
Legate. What the process saw goes to --out as JSON; the test compares it with the oracle.

  torch_worker.py dlpack DIR OUT
  torch_worker.py loader DIR OUT --cases JSON
  torch_worker.py train  DIR OUT --rank R --world W --port P --ckpt FILE
  torch_worker.py resume DIR OUT --rank R --world W --port P --ckpt FILE
  torch_worker.py killed DIR OUT --rank R --world W --port P --ckpt FILE
  torch_worker.py fault  DIR OUT --rank R --world W --port P --fault changed|vanished:SHARD
  torch_worker.py differ DIR OUT --rank R --world W --port P --fault SHARD
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import gc
import json
import os
import pathlib
import signal
import time

import numpy as np
import torch
import torch.distributed as dist

import shardload
import shardload.feed as sf

BATCH = 4
SEED = 11


def ids(x) -> list[int]:
    """The rows of a batch (row i holds i in every column)."""
    a = x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    assert (a == a[:, :1]).all(), a
    return a[:, 0].astype(np.int64).tolist()


def dlpack(d: str) -> dict:
    feed = sf.Feed(d, 5, shuffle="row", seed=3, prefetch=2)
    same, seen, kept = [], [], []
    for k, batch in enumerate(feed):
        t = torch.from_dlpack(batch)
        same.append(t.data_ptr() == batch.ctypes.data)
        seen.append(ids(batch))
        del batch  # the tensor alone holds the buffer now
        if k % 3 == 0:
            kept.append((k, t))
        del t
    allocated = feed._pool.allocated
    del feed
    gc.collect()  # the feed and its pool are gone; the kept tensors still hold their buffers
    out = {"same": same, "seen": seen, "kept": [[k, ids(t)] for k, t in kept],
           "kept_pointers": [t.data_ptr() for _, t in kept], "allocated": allocated}
    # Tensors dropped at once: the pool's few buffers serve the whole epoch.
    feed = sf.Feed(d, 5, shuffle="row", seed=3, prefetch=2)
    out["released_pointers"] = len({torch.from_dlpack(b).data_ptr() for b in feed})
    return out


def loader(d: str, cases: str) -> dict:
    """Each case (num_workers, shuffle, drop_last, resume position) over rank 1 of 2."""
    from torch.utils.data import DataLoader

    out = []
    for workers, shuffle, drop_last, position in json.loads(cases):
        feed = sf.Feed(d, BATCH, rank=1, world_size=2, shuffle=shuffle, seed=5,
                       drop_last=drop_last, block_rows=3, window_blocks=2)
        feed.set_epoch(1)
        if position is not None:
            feed.load_state_dict({**feed.state_dict(), "position": position})
        before = feed.state_dict()
        dl = DataLoader(feed.torch_dataset(), batch_size=None, num_workers=workers)
        got = []
        for x in dl:
            assert isinstance(x, torch.Tensor) and x.dtype == torch.int64, type(x)
            got.append(ids(x))
        out.append({"workers": workers, "len": len(dl), "batches": got, "before": before,
                    "after": feed.state_dict()})
    # Workers started by spawn would need the feed pickled: refused, saying what to use.
    spawned = DataLoader(sf.Feed(d, BATCH).torch_dataset(), batch_size=None, num_workers=1,
                         multiprocessing_context="spawn")
    try:
        next(iter(spawned))
        refused = None
    except TypeError as e:
        refused = str(e)
    return {"cases": out, "spawn": refused}


def init(args) -> None:
    # A hang (a rank short of a batch, a lost peer) fails within the timeout, not never.
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=60))


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))


def step(net: torch.nn.Module, opt: torch.optim.Optimizer, batch: np.ndarray) -> None:
    x = torch.from_dlpack(batch) / 100.0  # float32 rows, no copy for the hand-off
    loss = net(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def feed_of(d: str, drop_last: bool = True) -> sf.Feed:
    # No rank= or world_size=: both come from the initialised process group.
    return sf.Feed(d, BATCH, shuffle="row", seed=SEED, astype="float32", drop_last=drop_last)


def train(args) -> dict:
    init(args)
    out: dict = {"epochs": {}}
    for drop_last in (True, False):
        feed = feed_of(args.dir, drop_last)
        net = model()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        got = []
        for batch in feed:
            got.append(ids(batch))
            step(net, opt, batch)
        out["epochs"][str(drop_last)] = {
            "rank": feed.rank, "world": feed.world_size, "len": len(feed), "batches": got,
            "weights": [p.detach().tolist() for p in net.parameters()]}
    with open(args.out, "w") as f:
        json.dump(out, f)
    # The run that dies: a checkpoint after 3 steps, then every rank killed in step 5.
    feed = feed_of(args.dir)
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for k, batch in enumerate(feed):
        if k == 5:
            os.kill(os.getpid(), signal.SIGKILL)
        step(net, opt, batch)
        if k == 2 and dist.get_rank() == 0:
            state = {"feed": feed.state_dict(), "model": net.module.state_dict()}
            torch.save(state, args.ckpt + ".tmp")
            os.replace(args.ckpt + ".tmp", args.ckpt)
        dist.barrier()  # the checkpoint is on disk before any rank goes on
    raise AssertionError("the run was to be killed in step 5")


def resume(args) -> dict:
    init(args)
    ckpt = torch.load(args.ckpt)
    feed = feed_of(args.dir)
    feed.load_state_dict(ckpt["feed"])
    net = model()
    net.module.load_state_dict(ckpt["model"])
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    got = []
    left = feed.batches_left()
    for epoch in range(feed.epoch, 1):
        feed.set_epoch(epoch)  # the resumed epoch keeps its position
        for batch in feed:
            got.append(ids(batch))
            step(net, opt, batch)
    state = feed.state_dict()
    del net, opt
    # The feed lives on past destroy_process_group() to the interpreter's exit, as one kept in
    # a script's global does (main's exit hook counts what it holds then); used after it, it
    # says why it cannot exchange.
    dist.destroy_process_group()
    KEPT.append(feed)
    feed.set_epoch(1)
    try:
        next(iter(feed))
        after = None
    except RuntimeError as e:
        after = str(e)
    return {"rank": feed.rank, "world": feed.world_size, "left": left, "batches": got,
            "state": state, "after_destroy": after}


KEPT: list = []  # feeds kept to the interpreter's exit


def count_groups_at_exit(out: str) -> None:
    """Registered before shardload.feed registers its own exit hook, so it runs after it
    (atexit runs hooks in reverse): what the kept feeds and the feed module still hold when
    the interpreter's finalisation begins, where a live gloo group can abort the process."""
    with open(out, "w") as f:
        json.dump({"groups_held": groups_reachable_from(sf, *KEPT)}, f)


def groups_reachable_from(*roots: object) -> int:
    """The torch process groups reachable from `roots` through object references."""
    seen, todo, found = set(), list(roots), 0
    while todo:
        o = todo.pop()
        if id(o) in seen or (isinstance(o, type(np)) and not any(o is r for r in roots)):
            continue  # not into other modules (torch's own registry is not the feed's hold)
        seen.add(id(o))
        if isinstance(o, dist.ProcessGroup):
            found += 1
            continue
        todo.extend(gc.get_referents(o))
        if not isinstance(o, type) and hasattr(o, "__dict__"):
            todo.append(vars(o))
    return found


def killed(args) -> None:
    """A run (drop_last=False) that the test kills from outside mid-epoch: each batch logged
    to OUT as it is trained on, a checkpoint after 3 steps, then at step 5 "at step 5" on
    stdout and a wait for the SIGKILL with batches read ahead in flight."""
    init(args)
    feed = feed_of(args.dir, drop_last=False)
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with open(args.out, "w") as log:
        for k, batch in enumerate(feed):
            step(net, opt, batch)
            log.write(json.dumps(ids(batch)) + "\n")
            log.flush()
            os.fsync(log.fileno())
            if k == 2:
                if dist.get_rank() == 0:
                    state = {"feed": feed.state_dict(), "model": net.module.state_dict()}
                    torch.save(state, args.ckpt + ".tmp")
                    os.replace(args.ckpt + ".tmp", args.ckpt)
                dist.barrier()  # the checkpoint is on disk before any rank goes on
            if k == 4:
                print("at step 5", flush=True)
                time.sleep(120)
    raise AssertionError("the run was to be killed in step 5")


def fault(args) -> None:
    """A shard rewritten with other bytes of the same size (changed) or removed (vanished) by
    rank 0 once every rank has its first batch; then each rank trains on until it fails. What
    it saw and how it failed go to OUT; the exception then ends the process, as it would end a
    training script."""
    init(args)
    kind, shard = args.fault.split(":")
    path = pathlib.Path(args.dir) / shard
    feed = sf.Feed(args.dir, BATCH, shuffle="none", astype="float32")
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    out: dict = {"rank": feed.rank, "steps": [], "error": None}
    since = 0.0
    try:
        for k, batch in enumerate(feed):
            out["steps"].append(ids(batch))
            if k == 0:
                dist.barrier()  # every rank has discovered the shard and read a batch
                if dist.get_rank() == 0:
                    if kind == "changed":
                        np.save(path, np.full_like(np.load(path), -1))
                    else:
                        path.unlink()
                dist.barrier()
                since = time.monotonic()
            step(net, opt, batch)
    except Exception as e:
        out["error"] = {"type": f"{type(e).__module__}.{type(e).__qualname__}",
                        "shard_read_error": isinstance(e, shardload.ShardReadError),
                        "message": str(e), "filename": getattr(e, "filename", None),
                        "notes": getattr(e, "__notes__", []),
                        "after_s": time.monotonic() - since}
        with open(args.out, "w") as f:
            json.dump(out, f)
        raise
    with open(args.out, "w") as f:
        json.dump(out, f)


def differ(args) -> None:
    """A shard rewritten with 4 rows more between rank 0's discovery and rank 1's: rank 0's
    discovery writes DIR/../discovered when it returns; rank 1 waits for it, grows the shard,
    then discovers. Each rank then trains on its feed as long as it yields; what it saw and
    how it failed go to OUT."""
    init(args)
    shard = pathlib.Path(args.dir) / args.fault
    flag = pathlib.Path(args.dir).parent / "discovered"
    if dist.get_rank() == 0:
        prepare = sf._frontend.prepare

        def prepared_then_flag(*a, **kw):
            out = prepare(*a, **kw)
            flag.touch()
            return out

        sf._frontend.prepare = prepared_then_flag
    else:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert time.monotonic() < deadline, "rank 0 did not discover in 60 s"
            time.sleep(0.01)
        a = np.load(shard)
        np.save(shard, np.concatenate([a, a[:4]]))
    out: dict = {"rank": dist.get_rank(), "steps": [], "error": None}
    try:
        feed = sf.Feed(args.dir, BATCH, shuffle="none", astype="float32")
        out["len"] = len(feed)
        net = model()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for batch in feed:
            out["steps"].append(ids(batch))
            step(net, opt, batch)
    except Exception as e:
        out["error"] = {"type": f"{type(e).__module__}.{type(e).__qualname__}",
                        "message": str(e)}
        with open(args.out, "w") as f:
            json.dump(out, f)
        raise
    with open(args.out, "w") as f:
        json.dump(out, f)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("dlpack", "loader", "train", "resume", "killed",
                                       "fault", "differ"))
    ap.add_argument("dir")
    ap.add_argument("out")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--port", type=int)
    ap.add_argument("--ckpt")
    ap.add_argument("--cases")
    ap.add_argument("--fault")
    args = ap.parse_args()
    if args.mode == "resume":
        atexit.register(count_groups_at_exit, args.out + ".exit")
    try:
        if args.mode in ("train", "killed", "fault", "differ"):
            {"train": train, "killed": killed, "fault": fault, "differ": differ}[args.mode](args)
            return
        result = {"dlpack": lambda: dlpack(args.dir),
                  "loader": lambda: loader(args.dir, args.cases),
                  "resume": lambda: resume(args)}[args.mode]()
        with open(args.out, "w") as f:
            json.dump(result, f)
    finally:
        # Also when the run ends on an exception, as torch asks of every script: a process that
        # exits with its gloo groups alive can abort in their teardown during the interpreter's
        # finalisation ("terminate called without an active exception", SIGABRT), whatever its
        # exception was. The feed raises its errors on every rank at the same step, so no rank
        # is inside a collective here and the ranks can all destroy the groups.
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
