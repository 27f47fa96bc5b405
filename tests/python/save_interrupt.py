"""Ctrl-C during a save, as the save tests of every front end check it: SIGINT is sent from a
thread of the saving process the moment the save's staging directory appears; the save must
raise KeyboardInterrupt with the staging directory removed and nothing at the destination."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest


def staging_dirs(parent: pathlib.Path | str) -> list[str]:
    """The hidden staging directories of saves under ``parent``."""
    return sorted(n for n in os.listdir(parent) if ".shardload-tmp-" in n)


SCRIPT = """
import os, signal, sys, threading, pathlib, time
import numpy as np
dest = pathlib.Path(sys.argv[1])
{prelude}
late = []
def interrupt():
    while not any(".shardload-tmp-" in n for n in os.listdir(dest.parent)):
        time.sleep(0.0002)
    os.kill(os.getpid(), signal.SIGINT)
    late.append(dest.exists())
t = threading.Thread(target=interrupt)
t.start()
try:
    {call}
    print("SAVED")
except KeyboardInterrupt:
    print("INTERRUPTED")
t.join()
print("LATE" if late[0] else "IN TIME", dest.exists())
"""


def ctrl_c_during_a_save_publishes_nothing(tmp_path: pathlib.Path, prelude: str,
                                           call: str) -> None:
    """Runs ``prelude`` (imports, the array ``x``) then the save ``call`` (to ``dest``) in a
    child process interrupted as the module docstring says; up to three tries, since the signal
    may come after the rename on a fast machine (then there is nothing to check)."""
    script = SCRIPT.format(prelude=textwrap.dedent(prelude).strip(), call=call)
    for attempt in range(3):
        dest = tmp_path / f"o{attempt}"
        r = subprocess.run([sys.executable, "-c", script, str(dest)], capture_output=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        if "LATE" in r.stdout:
            continue  # the signal came after the rename: nothing to check
        assert r.stdout.split() == ["INTERRUPTED", "IN", "TIME", "False"], r.stdout
        assert not dest.exists()
        assert not staging_dirs(tmp_path)
        return
    pytest.skip("the signal came after the save, three times")
