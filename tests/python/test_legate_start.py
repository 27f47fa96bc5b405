"""When Legate cannot start: the stand-in driver counts as no driver (a CPU configuration is
chosen), and any other start-up failure is one shardload.RuntimeStartError (Python) or two lines
and exit status 1 (the CLI) with Legate's first line and the fix, not Legate's report of a
hundred lines and more. Each case runs in a fresh process, since Legate starts once per process."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import shardload
from shardload import _runtime

PACKAGE_ROOT = str(pathlib.Path(shardload.__file__).resolve().parents[1])
ROOT = pathlib.Path(__file__).resolve().parents[2]
# More GPUs than any test machine has: Legate refuses to start with it, with or without a driver.
IMPOSSIBLE = "--cpus 1 --gpus 64 --sysmem 256"


def environment(**changes: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def python(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def dataset(tmp_path: pathlib.Path) -> tuple[pathlib.Path, np.ndarray]:
    data = np.arange(30, dtype=np.float32).reshape(10, 3)
    np.save(tmp_path / "shard_0000.npy", data[:4])
    np.save(tmp_path / "shard_0001.npy", data[4:])
    return tmp_path, data


@pytest.mark.skipif(not _runtime.standin_is_the_driver(),
                    reason="the libcuda.so.1 found here is a real driver, not the stand-in")
def test_the_stand_in_driver_counts_as_no_driver_and_gets_a_cpu_configuration(dataset):
    directory, data = dataset
    r = python(f"""
        import numpy as np, shardload
        from shardload import _runtime
        print(_runtime.legate_config_default)
        a = shardload.load({str(directory)!r})
        np.save({str(directory / "got.npy")!r}, np.asarray(a))
        """, environment(LEGATE_CONFIG=None))
    assert r.returncode == 0, r.stderr[-3000:]
    chosen = r.stdout.splitlines()[0]  # cpu_config(), whose --sysmem follows free memory
    assert chosen.startswith(_runtime.cpu_config().split(" --sysmem")[0] + " --sysmem "), chosen
    np.testing.assert_array_equal(np.load(directory / "got.npy"), data)


def test_the_user_s_legate_config_is_kept_with_the_stand_in(dataset):
    r = python("""
        import os, shardload
        print(os.environ["LEGATE_CONFIG"])
        print(shardload._runtime.legate_config_default)
        """, environment(LEGATE_CONFIG="--cpus 1 --gpus 0 --sysmem 300"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines() == ["--cpus 1 --gpus 0 --sysmem 300", "None"]


def test_a_legate_that_cannot_start_is_one_runtime_start_error(dataset):
    directory, _ = dataset
    r = python(f"""
        import shardload
        try:
            shardload.load({str(directory)!r})
        except shardload.RuntimeStartError as e:
            assert isinstance(e, shardload.Error) and isinstance(e, RuntimeError)
            assert "LEGATE ERROR" in e.legate_report
            print(str(e))
        """, environment(LEGATE_CONFIG=IMPOSSIBLE))
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert len(lines) == 2, r.stdout
    assert lines[0].startswith("Legate could not start: ")
    assert "LEGATE ERROR" not in lines[0] and "#0" not in lines[0]
    assert f"It was given LEGATE_CONFIG={IMPOSSIBLE!r}" in lines[1]
    assert "Set LEGATE_CONFIG to what this machine has, e.g. LEGATE_CONFIG='--cpus" in lines[1]


def test_an_uncaught_start_failure_prints_a_few_lines(dataset):
    directory, _ = dataset
    r = python(f"import shardload; shardload.load({str(directory)!r})",
               environment(LEGATE_CONFIG=IMPOSSIBLE))
    assert r.returncode == 1
    assert "shardload._errors.RuntimeStartError: Legate could not start: " in r.stderr
    assert "LEGATE ERROR" not in r.stderr
    assert len(r.stderr.splitlines()) < 20, r.stderr


def test_the_cli_says_in_two_lines_that_legate_cannot_start(cli, dataset):
    directory, _ = dataset
    for args in (["read", directory], ["write", f"--shard-dir={directory / 'new'}",
                                       "--num-shards=2", "--shape=10,3"]):
        r = subprocess.run([str(cli), *map(str, args)], env=environment(LEGATE_CONFIG=IMPOSSIBLE),
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 1, r.stderr[-3000:]
        lines = r.stderr.splitlines()
        assert len(lines) == 2, r.stderr[-3000:]
        assert lines[0].startswith(f"shardload {args[0]}: Legate could not start: ")
        assert "LEGATE ERROR" not in r.stderr
        assert f"it was given LEGATE_CONFIG='{IMPOSSIBLE}'; set LEGATE_CONFIG to" in lines[1]


@pytest.mark.parametrize("report, first", [
    ("LEGATE ERROR: =====\nLEGATE ERROR: System: Linux\nLEGATE ERROR: LEGATE_CONFIG: \n"
     "LEGATE ERROR: Exception stack contains 1 exception(s) (bottom-most exception first):\n"
     "LEGATE ERROR:\nLEGATE ERROR: #0 legate::detail::AutoConfigurationError: it failed: why\n"
     "LEGATE ERROR: Stack trace (most recent call first):\n"
     "LEGATE ERROR: #0   0x00007f952f0eceba at /x/liblegate.so\n", "it failed: why"),
    ("libcuda.so.1: cannot open shared object file: No such file or directory",
     "libcuda.so.1: cannot open shared object file: No such file or directory"),
    ("", "no reason given"),
])
def test_legate_s_first_line_is_the_bottom_most_exception(report, first):
    assert _runtime._legate_first_line(report) == first


def test_the_fix_points_to_the_section_that_has_it(cli, dataset):
    # The hint names docs/install.md's section (the README has none of that name).
    section = '"Running without a GPU"'
    assert re.search(r"^## Running without a GPU$", (ROOT / "docs" / "install.md").read_text(),
                     re.M)
    assert f"docs/install.md, {section}" in _runtime.start_failure(RuntimeError("x"))
    directory, _ = dataset
    r = subprocess.run([str(cli), "read", str(directory)],
                       env=environment(LEGATE_CONFIG=IMPOSSIBLE), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1 and f"(docs/install.md, {section})" in r.stderr, r.stderr[-3000:]


@pytest.mark.parametrize("command", ["read", "write"])
def test_an_unknown_flag_in_legate_config_is_two_lines_not_legate_s_usage(cli, dataset,
                                                                          command):
    # Legate prints its whole usage (over 160 lines) and exits from inside its start.
    directory, _ = dataset
    args = {"read": ["read", directory],
            "write": ["write", f"--shard-dir={directory / 'new'}", "--num-shards=2",
                      "--shape=10,3"]}[command]
    config = "--cpus 1 --cpuz 2"
    r = subprocess.run([str(cli), *map(str, args)], env=environment(LEGATE_CONFIG=config),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    assert len(lines) == 2, r.stderr[-3000:]
    assert lines[0] == f"shardload {command}: Legate could not start: Unknown argument: --cpuz"
    assert lines[1].startswith(f"shardload {command}: it was given LEGATE_CONFIG='{config}'; "
                               "set LEGATE_CONFIG to what this machine has")
    assert not (directory / "new").exists()


def test_an_unknown_flag_in_legate_config_ends_python_with_the_two_lines(dataset):
    # Legate exits from inside its start, so no RuntimeStartError can be raised; the process
    # ends with Legate's status and the two lines instead of its usage.
    directory, _ = dataset
    config = "--cpus 1 --cpuz 2"
    r = python(f"import shardload; shardload.load({str(directory)!r})",
               environment(LEGATE_CONFIG=config))
    assert r.returncode == 1, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    assert lines == ["Legate could not start: Unknown argument: --cpuz",
                     lines[1]], r.stderr[-3000:]
    assert lines[1].startswith(f"It was given LEGATE_CONFIG={config!r}. Set LEGATE_CONFIG to ")
    assert lines[1].endswith('(see docs/install.md, "Running without a GPU").')


@pytest.mark.parametrize("end", ["returns", "exits", "exits with the usage"])
def test_what_the_start_writes_is_held_and_passed_on_in_order(end):
    # The hold alone, without Legate: the start's output comes out as it was written, whether
    # the start returns or the process exits inside it (a report without the usage), and only
    # an exit with Legate's usage becomes the two lines.
    inside = {"returns": "",
              "exits": "ctypes.CDLL(None).exit(3)",
              "exits with the usage": "os.write(2, b'Usage: LEGATE_CONFIG can contain: [--help]\\n'); "
                                      "ctypes.CDLL(None).exit(3)"}[end]
    r = python(f"""
        import ctypes, os
        from shardload import _runtime
        os.write(2, b"before\\n")
        with _runtime.held_start_output():
            os.write(2, b"line 1\\n")
            os.write(2, b"== LEGATE ERROR:\\n== LEGATE ERROR: Unknown argument: --x\\n")
            {inside}
        os.write(2, b"after\\n")
        """, environment(LEGATE_CONFIG="--cpus 1 --x 2"))
    lines = r.stderr.splitlines()
    if end == "returns":
        assert r.returncode == 0 and lines == [
            "before", "line 1", "== LEGATE ERROR:", "== LEGATE ERROR: Unknown argument: --x",
            "after"], r.stderr
    elif end == "exits":
        assert r.returncode == 3 and lines == [
            "before", "line 1", "== LEGATE ERROR:", "== LEGATE ERROR: Unknown argument: --x"], \
            r.stderr
    else:
        assert r.returncode == 3 and len(lines) == 4, r.stderr
        assert lines[:3] == ["before", "line 1", "Legate could not start: Unknown argument: --x"]
        assert lines[3].startswith("It was given LEGATE_CONFIG='--cpus 1 --x 2'. Set ")
