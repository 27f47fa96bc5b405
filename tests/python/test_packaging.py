"""The package's version and what it arranges for Legate on a machine without a driver
(shardload/_runtime.py). The installed wheel itself is checked by scripts/check_install.sh."""

from __future__ import annotations

import re
import subprocess

import pytest

import shardload
from shardload import _runtime

from conftest import ROOT


def test_version_is_the_cmake_project_version(cli):
    cmake = (ROOT / "CMakeLists.txt").read_text()
    want = re.search(r"project\(shardload VERSION ([0-9.]+)", cmake).group(1)
    assert shardload.__version__ == want
    out = subprocess.run([str(cli), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"shardload {want}"


def test_cpu_config_is_a_complete_cpu_configuration(monkeypatch):
    monkeypatch.setattr(_runtime.os, "sched_getaffinity", lambda pid: set(range(12)))
    config = _runtime.cpu_config()
    match = re.fullmatch(
        r"--cpus (\d+) --utility 1 --gpus 0 --sysmem (\d+) --logging gpu=6,threads=5", config
    )
    assert match, config
    assert int(match.group(1)) == 11  # one core left to the utility processor and Python
    assert int(match.group(2)) >= 256


@pytest.mark.parametrize("cores, cpus", [(1, 1), (2, 2), (3, 2), (64, 16)])
def test_cpu_config_cpus(monkeypatch, cores, cpus):
    monkeypatch.setattr(_runtime.os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert f"--cpus {cpus} " in _runtime.cpu_config()


def test_a_users_legate_config_is_kept():
    env = {"LEGATE_CONFIG": "--cpus 1"}
    assert _runtime.default_legate_config(env) is None
    assert env == {"LEGATE_CONFIG": "--cpus 1"}
    env = {}
    assert _runtime.default_legate_config(env) == env["LEGATE_CONFIG"]


def test_program_environment_appends_the_standin_only_where_needed(monkeypatch):
    monkeypatch.setattr(_runtime, "_needs_standin", True)
    env = {"LD_LIBRARY_PATH": "/opt/x", "LEGATE_CONFIG": "--cpus 1"}
    _runtime.program_environment(env)
    assert env["LD_LIBRARY_PATH"] == f"/opt/x:{_runtime.STANDIN_DIR}"
    assert env["LEGATE_CONFIG"] == "--cpus 1"
    monkeypatch.setattr(_runtime, "_needs_standin", False)
    env = {}
    _runtime.program_environment(env)
    assert env == {}


def test_a_development_tree_loads_no_standin():
    # scripts/env.sh arranges the stand-in there; the package must not add a second one.
    assert not _runtime.standin_loaded
    assert _runtime.PRODUCT_DIR == str(ROOT / "python" / "shardload")


def test_launcher_runs_the_program_with_the_arguments(monkeypatch, tmp_path):
    from shardload import _launcher

    program = tmp_path / "shardload"
    program.write_text("")
    calls = []
    monkeypatch.setattr(_runtime, "PROGRAM", str(program))
    monkeypatch.setattr(_runtime, "_needs_standin", True)
    monkeypatch.setattr(_launcher.os, "execve", lambda *args: calls.append(args))
    monkeypatch.setattr(_launcher.sys, "argv", ["/venv/bin/shardload", "read", "--dtype=f4", "d"])
    monkeypatch.delenv("LEGATE_CONFIG", raising=False)
    _launcher.main()
    (path, argv, env), = calls
    assert path == str(program)
    assert argv == ["shardload", "read", "--dtype=f4", "d"]
    assert env["LD_LIBRARY_PATH"].split(":")[-1] == _runtime.STANDIN_DIR
    assert env["LEGATE_CONFIG"].startswith("--cpus ")


def test_launcher_names_a_missing_program(monkeypatch, tmp_path):
    from shardload import _launcher

    monkeypatch.setattr(_runtime, "PROGRAM", str(tmp_path / "bin" / "shardload"))
    with pytest.raises(SystemExit, match=r"bin/shardload is missing; the package is not fully"):
        _launcher.main()


def test_program_environment_adds_the_wheels_cudart_where_none_is_found(monkeypatch, tmp_path):
    cudart = tmp_path / "nvidia" / "cu13" / "lib" / "libcudart.so.13"
    cudart.parent.mkdir(parents=True)
    cudart.write_text("")
    monkeypatch.setattr(_runtime, "CUDART", str(cudart))
    monkeypatch.setattr(_runtime, "_needs_standin", False)
    monkeypatch.setitem(_runtime._found, "libcudart.so.13", False)
    env = {}
    _runtime.program_environment(env)
    assert env == {"LD_LIBRARY_PATH": str(cudart.parent)}
    monkeypatch.setitem(_runtime._found, "libcudart.so.13", True)
    env = {}
    _runtime.program_environment(env)
    assert env == {}
