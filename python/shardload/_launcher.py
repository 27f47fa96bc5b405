"""The ``shardload`` command of an installed package: runs the C++ program in bin/ with what it
needs on this machine (see _runtime), passing its arguments through."""

from __future__ import annotations

import os
import sys

from . import _runtime


def main() -> None:
    program = _runtime.PROGRAM
    if not _runtime.legate_installed() and os.path.exists(_runtime.CORE_PROGRAM):
        program = _runtime.CORE_PROGRAM  # the program itself would not load without liblegate
    if not os.path.exists(program):
        sys.exit(f"shardload: {program} is missing; the package is not fully installed (pip install . from the checkout)")
    env = dict(os.environ)
    if program == _runtime.PROGRAM:
        _runtime.program_environment(env)
    os.execve(program, ["shardload", *sys.argv[1:]], env)
