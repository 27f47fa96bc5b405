"""The command line's progress bar: `read`, `index --checksum`, `verify` and `write` draw one on
stderr when stderr is a terminal (a pseudo-terminal here), ending at 100% and cleared; piped,
they write nothing but what they always wrote. The bar shows no file name, so neither a
control character nor a secret of a name can reach the terminal through it."""

from __future__ import annotations

import fcntl
import os
import pathlib
import pty
import re
import select
import struct
import subprocess
import termios

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORE = ROOT / "build" / "shardload-core"
LEGATE = ROOT / "build" / "shardload"


def run_on_terminal(args: list, cwd: pathlib.Path,
                    columns: int = 120) -> tuple[int, bytes, bytes]:
    """Runs the command with stderr on a pseudo-terminal of ``columns`` columns and stdout on
    a pipe; returns the exit status, stdout, and everything written to the terminal."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    p = subprocess.Popen([os.fsencode(a) if isinstance(a, (str, pathlib.Path)) else a
                          for a in args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=follower, cwd=cwd)
    os.close(follower)
    seen = b""
    # poll, not select: a test process holding more than 1024 descriptors (servers' sockets of
    # earlier tests) is given a terminal whose descriptor select() cannot take.
    poller = select.poll()
    poller.register(leader, select.POLLIN)
    try:
        while True:
            if not poller.poll(120_000):
                break
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the last writer closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        out = p.stdout.read()
        p.wait(timeout=120)
    finally:
        os.close(leader)
    return p.returncode, out, seen


def run_piped(args: list, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([os.fsencode(a) if isinstance(a, (str, pathlib.Path)) else a
                           for a in args], capture_output=True, cwd=cwd, timeout=300)


# Each long command, with the build that runs it (shardload-core: no Legate), after `write`
# made the dataset "d" and `index --checksum` its manifest.
COMMANDS = {
    "write": (CORE, ["write", "--shard-dir", "w", "--num-shards", "5", "--shape", "20000,8"]),
    "write under Legate": (LEGATE, ["write", "--shard-dir", "w", "--num-shards", "5",
                                    "--shape", "20000,8"]),
    "index --checksum": (CORE, ["index", "d", "--checksum", "xxh3"]),
    "read": (CORE, ["read", "d"]),
    "read under Legate": (LEGATE, ["read", "d"]),
    "verify": (LEGATE, ["verify", "d"]),
}


@pytest.fixture
def dataset(tmp_path: pathlib.Path) -> pathlib.Path:
    run_piped([CORE, "write", "--shard-dir", "d", "--num-shards", "5", "--shape", "20000,8"],
              tmp_path).check_returncode()
    run_piped([CORE, "index", "d", "--checksum", "xxh3"], tmp_path).check_returncode()
    return tmp_path


def bar_frames(seen: bytes, label: str) -> list[str]:
    """The bar's frames as drawn (each starts with a carriage return), blanks left out."""
    frames = [f.strip() for f in seen.decode().split("\r")]
    return [f for f in frames if f.startswith(label + " ")]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_long_command_draws_a_bar_on_a_terminal_that_ends_at_100(dataset, name):
    program, args = COMMANDS[name]
    rc, out, seen = run_on_terminal([program, *args], dataset)
    assert rc == 0, seen
    frames = bar_frames(seen, args[0])
    assert frames, f"no bar on the terminal: {seen!r}"
    percents = [int(re.match(rf"{args[0]} +(\d+)%", f).group(1)) for f in frames]
    assert percents == sorted(percents)  # it only moves forward
    assert percents[-1] == 100
    # The bytes done equal the total (about 640 kB of data, with the .npy headers where the
    # files are counted), the rate and the seconds.
    m = re.search(r"\] (\d+ kB)/(\d+ kB), .*\d\.\d\d GB/s, \d+\.\d s$", frames[-1])
    assert m and m.group(1) == m.group(2) and m.group(1) in ("640 kB", "641 kB"), frames[-1]
    if args[0] in ("read",) and program == CORE:
        assert frames[-1].count("20000/20000 rows") == 1
    # Cleared at the end: the terminal's last bytes blank the line and return to its start.
    assert re.search(rb"\r {20,}\r$", seen)
    # The report on stdout is the one a pipe gets.
    if args[0] != "read":  # read's report holds the time it took
        piped = run_piped([program, *args], dataset)
        assert piped.stdout == out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_pipe_gets_no_bar(dataset, name):
    program, args = COMMANDS[name]
    r = run_piped([program, *args], dataset)
    assert r.returncode == 0, r.stderr
    assert r.stderr == b""
    assert b"%" not in r.stdout


def test_the_bar_shows_no_name_and_so_no_control_character(tmp_path):
    name = "d\x1b[31m\x07"
    rc, out, seen = run_on_terminal([CORE, "write", "--shard-dir", name, "--num-shards", "3",
                                     "--shape", "3000,4"], tmp_path)
    assert rc == 0
    rc, out, seen = run_on_terminal([CORE, "index", name, "--checksum", "xxh3"], tmp_path)
    assert rc == 0
    assert bar_frames(seen, "index")[-1].startswith("index 100%")
    # Only the bar's own carriage returns: no escape, bell or other control byte.
    assert not re.search(rb"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f]", seen), seen


@pytest.mark.parametrize("columns", [80, 40, 12])
def test_the_bar_fits_a_narrow_terminal(dataset, columns):
    """A line longer than the terminal wraps, and a carriage return then redraws only its last
    part: the bar narrows, then goes, then the text is cut, so that every frame fits."""
    rc, out, seen = run_on_terminal([CORE, "index", "d", "--checksum", "xxh3"], dataset,
                                    columns=columns)
    assert rc == 0
    frames = seen.decode().split("\r")
    assert all(len(f) < columns for f in frames), [f for f in frames if len(f) >= columns]
    drawn = [f for f in frames if f.strip()]
    assert drawn[-1].startswith("index 100%"[:columns - 1]), drawn
    if columns >= 80:
        assert "[###" in drawn[-1] and "5/5 shards" in drawn[-1]
    elif columns == 40:
        assert "[" not in drawn[-1]


def test_a_failed_command_clears_its_bar_before_the_message(dataset):
    # A shard that changed since indexing: verify names it, at the start of a line.
    path = dataset / "d" / "shard_0002.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    rc, out, seen = run_on_terminal([LEGATE, "verify", "d"], dataset)
    assert rc == 1
    text = seen.decode()
    assert re.search(r"(^|\r\n|\r {20,}\r)shardload verify: d/shard_0002.npy: xxh3 ", text), text


def test_the_bar_of_an_s3_source_shows_no_secret(bucket, tmp_path):
    """index --checksum, verify and read of an s3:// dataset whose options carry a secret:
    the terminal (the bar and every message) and stdout show none of it."""
    import numpy as np

    mark = "s3cr3t"
    options = {**bucket.options, "access_key": "AKIAVISIBLE",
               "secret_key": f"wJal-{mark}/K7+MDENG", "session_token": f"FQoG-{mark}+tok/=="}
    for i in range(3):
        bucket.put_npy(f"d/shard_{i:04d}.npy", np.arange(4000 * i, 4000 * (i + 1),
                                                         dtype=np.int64).reshape(-1, 4))
    flags = [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]
    url = bucket.url("d/")
    for program, args in ((CORE, ["index", url, "--checksum", "xxh3", *flags]),
                          (LEGATE, ["verify", url, *flags]),
                          (CORE, ["read", url, "--no-verify", *flags])):
        rc, out, seen = run_on_terminal([program, *args], tmp_path)
        assert rc == 0, seen
        assert bar_frames(seen, args[0])[-1].startswith(f"{args[0]} 100%"), seen
        assert mark.encode() not in seen + out, seen + out
