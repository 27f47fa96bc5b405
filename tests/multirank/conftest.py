"""Running a command on 2 Legate ranks (scripts/multirank.sh) and reading what each rank did.

Every test starts one job through scripts/multirank.sh with a bounded time, each rank through
rank.sh, which keeps that rank's stdout, stderr and exit status in files of its own (and, when
asked, an strace of the files it opened and renamed). The scenarios in scenarios/ write each
rank's results into ``<out>/rank<R>/``; the tests compare them with numpy, h5py, pyarrow and
zarr run here, in the test process, which never starts Legate.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

# h5py before anything that could load another HDF5 (see tests/python/conftest.py).
import h5py  # noqa: F401
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
MULTIRANK = ROOT / "scripts" / "multirank.sh"
RANK = HERE / "rank.sh"
SCENARIOS = HERE / "scenarios"
PYTHON = ROOT / ".venv-mr" / "bin" / "python"
BUILD = ROOT / "build-mr"
RANKS = 2
# A job of a few loads takes 10-60 s on a busy 2-core machine; none may wait for ever.
TIMEOUT = int(os.environ.get("SHARDLOAD_MR_TIMEOUT", "300"))


@dataclass(repr=False)
class Rank:
    """What one rank left behind."""

    index: int
    out: str
    err: str
    rc: int | None
    dir: pathlib.Path
    trace: list[tuple[str, str, str]] = field(default_factory=list)  # (call, path, flags)

    def __repr__(self) -> str:  # short: pytest prints it in every failure
        return f"Rank({self.index}, exit {self.rc}, {len(self.trace)} traced calls)"

    def results(self) -> dict:
        return json.loads((self.dir / "results.json").read_text())

    def array(self, name: str) -> np.ndarray:
        return np.load(self.dir / f"{name}.npy")

    def opened(self, under: pathlib.Path | str, *, since: str | None = None,
               until: str | None = None, writing: bool | None = None,
               creating: bool | None = None) -> list[str]:
        """The paths under ``under`` this rank opened (successfully), in order, between the
        markers ``since`` and ``until`` (files whose names the scenario opens to say where a
        phase starts); only for writing or reading when ``writing`` says so, only with or
        without O_CREAT when ``creating`` says so."""
        under = str(under).rstrip("/") + "/"
        active = since is None
        found = []
        for call, path, flags in self.trace:
            if not call.startswith("open"):
                continue
            name = os.path.basename(path)
            if since is not None and name == f"marker-{since}":
                active = True
                continue
            if until is not None and name == f"marker-{until}":
                active = False
                continue
            if not active or not path.startswith(under):
                continue
            is_write = bool(re.search(r"O_WRONLY|O_RDWR", flags))
            is_create = "O_CREAT" in flags
            if writing is not None and writing != is_write:
                continue
            if creating is not None and creating != is_create:
                continue
            found.append(path)
        return found

    def renamed(self, under: pathlib.Path | str) -> list[tuple[str, str]]:
        under = str(under).rstrip("/") + "/"
        return [(a, b) for call, a, b in self.trace
                if call.startswith("rename") and (a.startswith(under) or b.startswith(under))]


@dataclass(repr=False)
class Job:
    rc: int
    output: str  # mpirun's own output (both ranks' stderr from before rank.sh ran, if any)
    ranks: list[Rank]
    seconds: float

    def __repr__(self) -> str:
        return f"Job(exit {self.rc}, {self.seconds:.0f} s, {self.ranks})"

    def describe(self) -> str:
        parts = [f"mpirun exit {self.rc} after {self.seconds:.0f} s; {self.output[-3000:]}"]
        for r in self.ranks:
            parts.append(f"--- rank {r.index} (exit {r.rc})\nstdout:\n{r.out[-3000:]}\n"
                         f"stderr:\n{r.err[-3000:]}")
        return "\n".join(parts)


_TRACE_LINE = re.compile(r'^\d+\s+(\w+)\((.*)\)\s+=\s+(-?\d+)')


# A quoted name and the descriptor before it, as strace -y prints them ("3</d>, \"x\"",
# "AT_FDCWD</cwd>, \"x\""), or a name alone (open, rename).
_NAME = re.compile(r'(?:(?:AT_FDCWD|\d+)<((?:[^>\\]|\\.)*)>,\s*)?"((?:[^"\\]|\\.)*)"')


def _paths(args: str) -> list[str]:
    """A call's names as paths: one relative to a descriptor (openat or renameat through a
    directory held open, as index writes its manifest) joined to that descriptor's path."""
    return [os.path.join(d, name) if d and not name.startswith("/") else name
            for d, name in _NAME.findall(args)]


def _parse_trace(path: pathlib.Path) -> list[tuple[str, str, str]]:
    calls = []
    if not path.exists():
        return calls
    for line in path.read_text(errors="replace").splitlines():
        m = _TRACE_LINE.match(line)
        if not m or int(m.group(3)) < 0:
            continue  # an unfinished/resumed pair or a failed call: nothing was opened
        call, args = m.group(1), m.group(2)
        strings = re.findall(r'"((?:[^"\\]|\\.)*)"', args)
        paths = _paths(args)
        if call.startswith("open") and strings:
            calls.append((call, paths[0], args.split(strings[0] + '"', 1)[-1]))
        elif call.startswith("rename") and len(strings) >= 2:
            calls.append((call, paths[0], paths[1]))
    return calls


def run_job(out: pathlib.Path, command: list[str], *, ranks: int = RANKS, trace: bool = False,
            legate_driver: bool = False, env: dict | None = None,
            timeout: int = TIMEOUT) -> Job:
    """Runs ``command`` on ``ranks`` ranks; each rank's files go to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ)
    full_env.pop("LEGATE_CONFIG", None)
    full_env.update(env or {})
    full_env["SHARDLOAD_MR_OUT"] = str(out)
    full_env["SHARDLOAD_MR_TRACE"] = "1" if trace else "0"
    if legate_driver:
        # The driver runs a Python script itself: rank.sh cannot wrap it, so the script
        # writes its own per-rank files (scenarios/_rank.py) and the job's output is kept.
        argv = [str(MULTIRANK), "-n", str(ranks), "--legate", *command]
    else:
        argv = [str(MULTIRANK), "-n", str(ranks), str(RANK), *command]
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=full_env, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        job = _collect(out, ranks, proc.returncode, output, time.monotonic() - start)
        pytest.fail(f"the job did not end within {timeout} s:\n{job.describe()}")
    return _collect(out, ranks, proc.returncode, output, time.monotonic() - start)


def _collect(out: pathlib.Path, ranks: int, rc: int, output: str, seconds: float) -> Job:
    found = []
    for r in range(ranks):
        def text(suffix: str) -> str:
            p = out / f"rank{r}.{suffix}"
            return p.read_text(errors="replace") if p.exists() else ""
        rc_text = text("rc").strip()
        found.append(Rank(r, text("out"), text("err"), int(rc_text) if rc_text else None,
                          out / f"rank{r}", _parse_trace(out / f"rank{r}.trace")))
    # What the suite shows of each job in the output of scripts/test.sh.
    print(f"[multirank] {ranks} ranks, mpirun exit {rc}, {seconds:.0f} s: "
          + ", ".join(f"rank {r.index} exit {r.rc}" for r in found))
    return Job(rc, output, found, seconds)


def python_job(out: pathlib.Path, scenario: str, *args: str, **kw) -> Job:
    """Runs scenarios/<scenario> with the networked build's Python on every rank."""
    if kw.get("legate_driver"):
        return run_job(out, [str(SCENARIOS / scenario), *args], **kw)
    return run_job(out, [str(PYTHON), str(SCENARIOS / scenario), *args], **kw)


def write_spec(path: pathlib.Path, spec: dict) -> pathlib.Path:
    path.write_text(json.dumps(spec))
    return path


def pytest_configure(config):
    if not PYTHON.exists() or not (BUILD / "shardload").exists():
        raise pytest.UsageError("the networked build is missing: run scripts/setup_multirank.sh")
    sys.path.insert(0, str(HERE))
