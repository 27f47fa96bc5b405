"""Loads each case of a JSON spec with shardload on this rank and keeps what it got.

Spec: {"cases": [{"name", "source", "kwargs", "once"?: {discover_once's kwargs},
"load"?: false}]}. Each case's array goes to <name>.npy, its outcome to results.json. A case
with "once" discovers with discover_once first and loads the Layout; with "load": false it
only discovers (the layout's summary is kept).
"""

from __future__ import annotations

import json
import sys

import _rank
import numpy as np

import shardload


def layout_summary(layout) -> dict:
    return {"rows": int(layout.total_rows), "dtype": str(layout.dtype),
            "shape": list(layout.shape), "files": [str(p) for p in layout.paths],
            "rows_per_shard": [int(n) for n in layout.shard_rows]}


def run(case: dict) -> dict:
    _rank.marker(case["name"])
    kwargs = dict(case.get("kwargs", {}))
    if isinstance(kwargs.get("row_range"), list):
        kwargs["row_range"] = tuple(kwargs["row_range"])
    source = case["source"]
    record: dict = {"ok": True}
    if "once" in case:
        source = shardload.discover_once(source, **case["once"])
        record["layout"] = layout_summary(source)
        if case.get("load") is False:
            return record
    _rank.marker(f"{case['name']}-load")  # what follows is the load alone
    arr = shardload.load(source, **kwargs)
    host = np.asarray(arr)
    np.save(_rank.OUT / f"{case['name']}.npy", host)
    record.update(shape=list(host.shape), dtype=str(host.dtype))
    return record


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    results = {}
    for case in spec["cases"]:
        try:
            results[case["name"]] = run(case)
        except Exception as e:  # each case's outcome is the result
            results[case["name"]] = _rank.error_record(e)
    _rank.marker("end")
    _rank.save_results(results)


if __name__ == "__main__":
    main()
