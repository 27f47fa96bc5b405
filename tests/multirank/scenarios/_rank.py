"""What every scenario shares: this rank's number and its result folder."""

from __future__ import annotations

import json
import os
import pathlib
import traceback
from typing import Callable

# mpirun tells each process its rank; Legate's node_id is the same number on one node.
RANK = int(os.environ["OMPI_COMM_WORLD_RANK"])
OUT = pathlib.Path(os.environ["SHARDLOAD_MR_OUT"]) / f"rank{RANK}"
OUT.mkdir(parents=True, exist_ok=True)


def marker(name: str) -> None:
    """Opens a file named marker-<name>: in an strace of this rank it separates the phases."""
    with open(OUT / f"marker-{name}", "w") as f:
        f.write(name)


def error_record(e: BaseException) -> dict:
    return {"ok": False, "type": type(e).__name__,
            "mro": [c.__name__ for c in type(e).__mro__],
            "message": str(e), "filename": getattr(e, "filename", None),
            "traceback": traceback.format_exc()[-2000:]}


def save_results(results: dict) -> None:
    tmp = OUT / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=1, default=str))
    tmp.rename(OUT / "results.json")


def run_ops(ops: list[dict], run: Callable[[dict], object], results: dict | None = None) -> None:
    """Runs each op (a dict with a "name") in turn, each after its marker, and saves what each
    returned or raised, after ``results`` (records of the rank's own). An op marked "uncaught"
    saves the results so far and then runs with nothing to catch what it raises (the rank's
    exit is what a test looks at)."""
    results = dict(results or {})
    for op in ops:
        marker(op["name"])
        if op.get("uncaught"):
            save_results(results)
            run(op)
            continue
        try:
            results[op["name"]] = run(op)
        except Exception as e:
            results[op["name"]] = error_record(e)
    marker("end")
    save_results(results)
