"""Saves arrays from every rank with shardload.save and reads each back.

Spec: {"cases": [{"name", "source" (a dataset loaded with shardload.load first), "dest",
"save": {save's kwargs}}]}. Results: results.json (SaveInfo fields or the error), and
<name>.npy, the dataset loaded back from dest after the save."""

from __future__ import annotations

import dataclasses
import json
import sys

import _rank
import numpy as np

import shardload


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    results = {}
    for case in spec["cases"]:
        _rank.marker(case["name"])
        try:
            arr = shardload.load(case["source"])
            info = shardload.save(arr, case["dest"], **case["save"])
            back = np.asarray(shardload.load(case["dest"]))
            np.save(_rank.OUT / f"{case['name']}.npy", back)
            results[case["name"]] = {"ok": True, "info": dataclasses.asdict(info)
                                     if dataclasses.is_dataclass(info) else repr(info)}
        except Exception as e:
            results[case["name"]] = _rank.error_record(e)
    _rank.marker("end")
    _rank.save_results(results)


if __name__ == "__main__":
    main()
