"""Runs a list of shardload operations on this rank and keeps each one's outcome.

Spec: {"ops": [{"name", "op", ...}]} with op one of
  batches  source, rows_per_batch, prefetch     -> <name>.npy: the batches concatenated
  reader   source, overdecompose                 -> <name>.npy: load(reader="mr-text")
  index    source, checksum                      -> the manifest's path
  verify   source                                -> the mismatches
  load     source, kwargs                        -> <name>.npy
  once     source                                -> discover_once's shard count and rows
Outcomes (or the error) go to results.json."""

from __future__ import annotations

import json
import sys

import _rank
import numpy as np

import shardload


# A Python reader of text files, three numbers a line: registered on every rank at the top
# of the program, as the readers' documentation asks.
def _text_rows(path: str) -> int:
    with open(path) as f:
        return sum(1 for line in f if line.strip())


def _text_read(path: str, lo: int, hi: int) -> np.ndarray:
    with open(path) as f:
        lines = [line for line in f if line.strip()][lo:hi]
    out = np.array([[float(x) for x in line.split()] for line in lines], dtype=np.float64)
    return out.reshape(hi - lo, 3)


shardload.register_reader("mr-text", count_rows=_text_rows, read=_text_read, dtype="float64",
                          trailing_shape=(3,), extension=".txt")


def run(op: dict):
    kind = op["op"]
    if kind == "batches":
        got = [np.asarray(b) for b in shardload.batches(op["source"], op["rows_per_batch"],
                                                         prefetch=op["prefetch"])]
        np.save(_rank.OUT / f"{op['name']}.npy", np.concatenate(got))
        return {"ok": True, "batches": [len(b) for b in got]}
    if kind == "reader":
        arr = shardload.load(op["source"], reader="mr-text", overdecompose=op["overdecompose"])
        np.save(_rank.OUT / f"{op['name']}.npy", np.asarray(arr))
        return {"ok": True}
    if kind == "index":
        return {"ok": True, "manifest": shardload.index(op["source"], checksum=op["checksum"])}
    if kind == "verify":
        return {"ok": True, "mismatches": [[m.shard, m.path, m.what]
                                           for m in shardload.verify(op["source"])]}
    if kind == "once":
        layout = shardload.discover_once(op["source"])
        return {"ok": True, "shards": int(layout.num_shards), "rows": int(layout.total_rows)}
    if kind == "load":
        arr = shardload.load(op["source"], **op.get("kwargs", {}))
        np.save(_rank.OUT / f"{op['name']}.npy", np.asarray(arr))
        return {"ok": True}
    raise ValueError(kind)


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    _rank.run_ops(spec["ops"], run)


if __name__ == "__main__":
    main()
