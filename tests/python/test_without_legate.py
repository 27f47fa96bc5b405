"""Without the legate extra: the package imports, the NumPy front end and the command line work,
and every call that runs under Legate raises an ImportError naming the extra (not a loader error
about liblegate.so). Legate is hidden from a child process (``sys.modules["legate"] = None``
makes ``importlib.util.find_spec`` answer None, as where it is not installed); check_install.sh
does the same with a real venv without it."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

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


CORE = pathlib.Path(__file__).resolve().parents[2] / "build" / "shardload-core"


def test_the_command_without_legate_reads_on_host_threads_and_verifies(tmp_path):
    if not CORE.exists():
        pytest.fail(f"{CORE} is not built; run scripts/setup.sh")
    data = tmp_path / "w"
    run = subprocess.run([CORE, "write", "--shard-dir", data, "--num-shards", "5", "--shape",
                          "30000,3", "--seed", "7"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    run = subprocess.run([CORE, "read", data, "--repeat", "2"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "host threads (no Legate)" in run.stdout
    assert run.stdout.count("load:") == 2
    assert "verify:         OK (90000 elements match seed 7)" in run.stdout
    victim = sorted(data.glob("shard_*.npy"))[2]
    a = np.load(victim)
    a.flat[-1] += 1
    np.save(victim, a)
    run = subprocess.run([CORE, "read", data], capture_output=True, text=True)
    assert run.returncode == 1 and "FAILED: 1 of 90000 elements differ" in run.stdout
    victim.unlink()
    victim.mkdir()
    run = subprocess.run([CORE, "read", data], capture_output=True, text=True)
    assert run.returncode == 1 and victim.name in run.stderr, run.stderr
    run = subprocess.run([CORE, "verify", data], capture_output=True, text=True)
    assert run.returncode == 2 and "shardload[legate]" in run.stderr, run.stderr
