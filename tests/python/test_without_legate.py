"""Without the legate extra: the package imports, the NumPy front end and the command line work,
and every call that runs under Legate raises an ImportError naming the extra (not a loader error
about liblegate.so). Legate is hidden from a child process (``sys.modules["legate"] = None``
makes ``importlib.util.find_spec`` answer None, as where it is not installed); check_install.sh
does the same with a real venv without it."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

CHILD = r"""
import json, sys
sys.modules["legate"] = None
sys.modules["cupynumeric"] = None
import numpy as np
import shardload, shardload.numpy
from shardload import _runtime
data = sys.argv[1]
out = {"loaded": shardload.numpy.load(data).tolist(), "errors": {}}
calls = {
    "load": lambda: shardload.load(data),
    "batches": lambda: next(iter(shardload.batches(data, 2))),
    "save": lambda: shardload.save(np.zeros((2, 2)), data + "-out"),
    "verify": lambda: shardload.verify(data),
    "discover_once": lambda: shardload.discover_once(data),
}
for name, call in calls.items():
    try:
        call()
        out["errors"][name] = None
    except ImportError as e:
        out["errors"][name] = str(e)
out["program"] = _runtime.CORE_PROGRAM if not _runtime.legate_installed() else _runtime.PROGRAM
print(json.dumps(out))
"""


def test_the_legate_calls_name_the_extra_and_numpy_reads(tmp_path):
    parts = [np.arange(6).reshape(3, 2) + i for i in range(3)]
    for i, p in enumerate(parts):
        np.save(tmp_path / f"shard_{i:04d}.npy", p)
    run = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.splitlines()[-1])
    assert out["loaded"] == np.concatenate(parts).tolist()
    for name, message in out["errors"].items():
        assert message is not None, f"shardload.{name} without Legate raised no ImportError"
        assert f"shardload.{name}" in message and "shardload[legate]" in message, message
    assert out["program"].endswith("shardload-core")
    assert not (tmp_path.parent / (tmp_path.name + "-out")).exists()
