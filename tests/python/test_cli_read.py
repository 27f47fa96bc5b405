"""`shardload read` end to end: it loads under Legate (LEGATE_CONFIG from the
environment), verifies against _meta.json's seed, and reports failures by exit status."""

from __future__ import annotations

import os
import pathlib
import subprocess


def run(cli, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def test_read_reports_plan_time_and_verification(tmp_path: pathlib.Path, cli) -> None:
    d = tmp_path / "set"
    assert run(cli, "write", "--shard-dir", d, "--num-shards", "7", "--shape", "20000,3,2",
               "--dtype", "int16", "--seed", "9").returncode == 0
    r = run(cli, "read", "--shard-dir", d, "--overdecompose", "3", "--repeat", "2")
    assert r.returncode == 0, r.stderr
    assert "shards:         7" in r.stdout and "shape:          (20000, 3, 2)" in r.stdout
    assert "CPU processors, K 3" in r.stdout and " tasks" in r.stdout
    assert r.stdout.count("load:           ") == 2 and "GB/s" in r.stdout
    assert "verify:         OK (120000 elements match seed 9)" in r.stdout

    wrong = run(cli, "read", "--shard-dir", d, "--seed", "10")
    assert wrong.returncode == 1 and "verify:         FAILED" in wrong.stdout

    skipped = run(cli, "read", "--shard-dir", d, "--no-verify")
    assert skipped.returncode == 0 and "skipped (--no-verify)" in skipped.stdout


def test_read_errors_exit_one_and_name_the_file(tmp_path: pathlib.Path, cli) -> None:
    r = run(cli, "read", "--shard-dir", tmp_path / "missing")
    assert r.returncode == 1 and "shard directory not found" in r.stderr
    d = tmp_path / "set"
    run(cli, "write", "--shard-dir", d, "--num-shards", "3", "--shape", "100", "--seed", "1")
    os.remove(d / "shard_0001.npy")
    r = run(cli, "read", "--shard-dir", d)
    assert r.returncode == 1 and "gap in the numbering" in r.stderr and "shard_0001.npy" in r.stderr
    r = run(cli, "read", "--shard-dir", d, "--overdecompose", "x")
    assert r.returncode == 2 and "take integers" in r.stderr


def test_read_refuses_a_malformed_meta_json_naming_it(tmp_path: pathlib.Path, cli) -> None:
    d = tmp_path / "set"
    run(cli, "write", "--shard-dir", d, "--num-shards", "2", "--shape", "10", "--seed", "1")
    for text, needle in [('{"seed": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
                          "JSON nesting deeper than 64 levels"),
                         ('{"seed": 99999999999999999999999}', "seed: expected an integer"),
                         ('{"seed": 1, "dtype": "int32"' + " " * 1_000_000, "not valid JSON")]:
        (d / "_meta.json").write_text(text)
        r = run(cli, "read", "--shard-dir", d)
        assert r.returncode == 1 and str(d / "_meta.json") in r.stderr and needle in r.stderr, \
            r.stderr
