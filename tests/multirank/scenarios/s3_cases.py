"""Runs a list of shardload operations on s3:// sources on this rank and keeps each outcome.

Spec: {"ops": [{"name", "op", ...}], "rank_env"?: {"R": {...}}} with op one of
  load     source, kwargs; once?: discover_once's kwargs (the Layout is then loaded); wait?:
           a name: between discover_once and the load this rank opens marker-<name> and
           waits (at most "timeout" s) for the test to write go-<name> into the job's folder
                                                  -> <name>.npy, the layout's summary if once
  once     source, kwargs                         -> the layout's summary (discover_once only)
  index    source, kwargs                         -> the manifest's URL
  batches  source, rows_per_batch, kwargs         -> <name>.npy: the batches concatenated
  save     source (loaded first), dest, save (save's kwargs), kwargs (the load's of dest)
                                                  -> <name>.npy: dest loaded back; the SaveInfo
"rank_env" sets environment variables on rank R before anything is read (each rank reaching
the store through an endpoint of its own: AWS_ENDPOINT_URL_S3). An op with "uncaught": true
runs after the results so far are saved and lets its exception end the program. Outcomes (or
the error) go to results.json, with the names of the AWS_* variables this rank sees ("env")."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import sys
import time

import _rank
import numpy as np

import shardload


def summary(layout) -> dict:
    return {"rows": int(layout.total_rows), "files": [str(p) for p in layout.paths],
            "rows_per_shard": [int(n) for n in layout.shard_rows],
            "manifest_state": layout.manifest_state.name}


def kwargs_of(op: dict, key: str = "kwargs") -> dict:
    kwargs = dict(op.get(key, {}))
    if isinstance(kwargs.get("row_range"), list):
        kwargs["row_range"] = tuple(kwargs["row_range"])
    return kwargs


def wait(name: str, timeout: float) -> None:
    """Waits for the test to write go-<name> into the job's folder."""
    go = pathlib.Path(os.environ["SHARDLOAD_MR_OUT"]) / f"go-{name}"
    deadline = time.monotonic() + timeout
    while not go.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{go} did not appear within {timeout} s")
        time.sleep(0.05)


def run(op: dict) -> dict:
    kind = op["op"]
    if kind == "once":
        return {"ok": True, "layout": summary(shardload.discover_once(op["source"],
                                                                      **kwargs_of(op)))}
    if kind == "index":
        return {"ok": True, "manifest": shardload.index(op["source"], **kwargs_of(op))}
    if kind == "load":
        record: dict = {"ok": True}
        source = op["source"]
        if "once" in op:
            source = shardload.discover_once(source, **kwargs_of(op, "once"))
            record["layout"] = summary(source)
        if "wait" in op:
            _rank.marker(op["wait"])
            wait(op["wait"], op.get("timeout", 120))
        arr = np.asarray(shardload.load(source, **kwargs_of(op)))
        np.save(_rank.OUT / f"{op['name']}.npy", arr)
        return record
    if kind == "batches":
        got = [np.asarray(b).copy() for b in shardload.batches(
            op["source"], op["rows_per_batch"], **kwargs_of(op))]
        np.save(_rank.OUT / f"{op['name']}.npy", np.concatenate(got))
        return {"ok": True, "batches": [len(b) for b in got]}
    if kind == "save":
        info = shardload.save(shardload.load(op["source"]), op["dest"], **kwargs_of(op, "save"))
        back = np.asarray(shardload.load(op["dest"], **kwargs_of(op)))
        np.save(_rank.OUT / f"{op['name']}.npy", back)
        return {"ok": True, "info": dataclasses.asdict(info)}
    raise ValueError(kind)


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    # What the launcher gave this rank, before the spec adds to it.
    env = {"env": sorted(k for k in os.environ if k.startswith("AWS_"))}
    os.environ.update(spec.get("rank_env", {}).get(str(_rank.RANK), {}))
    _rank.run_ops(spec["ops"], run, env)


if __name__ == "__main__":
    main()
