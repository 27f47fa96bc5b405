"""A file name or key with control characters (ESC, newline, carriage return, DEL, C1) is
shown escaped wherever a person reads it (the command line's plain text, every error message,
``print(layout)``, ``manifest_status``): a crafted name can neither rewrite the terminal nor
forge a line of output. ``--json`` keeps the name exact (JSON escapes it itself)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import shardload

# ESC ] 0 ; ... BEL sets a terminal's title; ESC [ 2 J clears it; "\n" and "\r" forge a line;
# U+009B is CSI to a terminal that takes C1 controls; U+202E reverses what follows.
NAME = "x\x1b]0;owned\x07\x1b[2J\nshardload: all rows verified\r\x7f\u009b[1m\u202ey"
SHOWN = r"x\x1b]0;owned\x07\x1b[2J\nshardload: all rows verified\r\x7f\u009b[1m\u202ey"


def raw_controls(text: str) -> list[str]:
    """The control characters in `text` other than the line ends of its own lines."""
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f
            or 0x202a <= ord(c) <= 0x202e or 0x2066 <= ord(c) <= 0x2069]


@pytest.fixture
def dataset(tmp_path: pathlib.Path) -> tuple[pathlib.Path, np.ndarray]:
    d = tmp_path / NAME
    d.mkdir()
    a = np.arange(12, dtype=np.float32).reshape(6, 2)
    np.save(d / "shard_0000.npy", a[:4])
    np.save(d / "shard_0001.npy", a[4:])
    return d, a


def run(cli, *args):
    return subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def test_the_command_lines_plain_text_shows_a_name_escaped(cli, dataset):
    d, _ = dataset
    r = run(cli, "inspect", d)
    assert r.returncode == 0, r.stderr
    assert not raw_controls(r.stdout), repr(r.stdout)
    assert f"source:         {d.parent}/{SHOWN}\n" in r.stdout, r.stdout
    assert f"{SHOWN}/shard_0001.npy: 2\n" in r.stdout, r.stdout
    assert "all rows verified" not in r.stdout.replace(r"\nshardload: all rows verified", "")
    r = run(cli, "index", d)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"wrote {d.parent}/{SHOWN}/shardload.manifest: "), r.stdout
    assert not raw_controls(r.stdout), repr(r.stdout)
    r = run(cli, "inspect", d)
    assert "manifest: used" in r.stdout and not raw_controls(r.stdout), repr(r.stdout)
    np.save(d / "shard_0002.npy", np.zeros((1, 2), np.float32))  # the manifest is now stale
    r = run(cli, "inspect", d)
    assert f"manifest: stale because {d.parent}/{SHOWN}/shard_0002.npy is new" in r.stdout, r.stdout
    assert not raw_controls(r.stdout), repr(r.stdout)


def test_json_keeps_the_name_exact(cli, dataset):
    d, _ = dataset
    r = run(cli, "inspect", d, "--json")
    assert r.returncode == 0, r.stderr
    assert not raw_controls(r.stdout), repr(r.stdout)
    out = json.loads(r.stdout)
    assert out["source"] == str(d)
    assert [s["path"] for s in out["shards"]] == [str(d / "shard_0000.npy"),
                                                  str(d / "shard_0001.npy")]


def test_an_error_message_shows_the_name_escaped(cli, dataset):
    d, _ = dataset
    (d / "shard_0001.npy").write_bytes(b"\x93NUMPY not a header")
    with pytest.raises(shardload.LayoutError) as info:
        shardload.discover(d)
    message = str(info.value)
    assert f"{SHOWN}/shard_0001.npy" in message and not raw_controls(message), repr(message)
    r = run(cli, "inspect", d)
    assert r.returncode == 1 and f"{SHOWN}/shard_0001.npy" in r.stderr, r.stderr
    assert not raw_controls(r.stderr), repr(r.stderr)
    # A name echoed by a usage error.
    r = run(cli, NAME)
    assert r.returncode == 2 and SHOWN in r.stderr and not raw_controls(r.stderr), repr(r.stderr)


def test_print_layout_and_manifest_status_show_the_name_escaped(dataset):
    d, expected = dataset
    layout = shardload.discover(d)
    assert layout.paths[1] == str(d / "shard_0001.npy")  # the path to open: exact
    text = str(layout)
    assert f"{SHOWN}/shard_0001.npy: 2" in text and not raw_controls(text), repr(text)
    shardload.index(d)
    (d / "shard_0000.npy").unlink()
    # Another file with other rows (its header differs): stale whatever inode it gets (one of
    # the same size and header in a new inode is taken as a copy, docs/manifest.md).
    np.save(d / "shard_0000.npy", expected[:3] + 1)
    status = shardload.discover(d).manifest_status
    assert f"{SHOWN}/shard_0000.npy" in status and not raw_controls(status), repr(status)


def test_a_name_that_is_not_utf8_shows_its_bytes_escaped(cli, tmp_path):
    d = os.path.join(os.fsencode(tmp_path), b"bad\x9b[2Jname")
    os.mkdir(d)
    np.save(os.path.join(d, b"shard_0000.npy").decode("utf-8", "surrogateescape"),
            np.zeros((2, 2), np.float32))
    r = subprocess.run([str(cli), "inspect", d], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert b"\x9b" not in r.stdout and rb"bad\x9b[2Jname" in r.stdout, r.stdout
    r = subprocess.run([str(cli), "inspect", d, "--json"], capture_output=True, timeout=300)
    assert os.fsencode(json.loads(r.stdout)["source"]) == d


def test_a_message_python_makes_shows_the_name_escaped(tmp_path):
    f = tmp_path / NAME
    f.write_text("x")
    with pytest.raises(ValueError) as info:
        shardload.index(f)
    message = str(info.value)
    assert message.startswith(f"{tmp_path}/{SHOWN}: not a directory"), repr(message)
    assert not raw_controls(message), repr(message)


@pytest.mark.parametrize("raw", [b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
                                 b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xe2\x80",
                                 b"\xe2\x80\xa8", b"\xef\xbb\xbf", b"\xef\xbf\xbe",
                                 b"\xf4\x8f\xbf\xbf", b"\\u0041"])
def test_json_names_of_ill_formed_or_odd_utf8_give_back_the_exact_bytes(cli, tmp_path, raw):
    """Overlong forms, encoded surrogates, code points past U+10FFFF, 5-byte and cut
    sequences are not UTF-8: each byte comes back as os.fsdecode makes it (a lone surrogate),
    never as the character it would spell; line separators, a BOM, a noncharacter and a
    backslash-u text are kept as they are. os.fsencode of the JSON name is the file's name."""
    path = os.path.join(os.fsencode(tmp_path), b"a" + raw + b".npy")
    with open(path, "wb") as f:
        np.save(f, np.arange(3.0))
    r = subprocess.run([str(cli), "inspect", "--json", path], capture_output=True)
    assert r.returncode == 0, r.stderr
    name = json.loads(r.stdout)["shards"][0]["path"]
    assert os.fsencode(name) == path
    assert name == shardload.discover(os.fsdecode(path)).paths[0]
