"""The `shardload` command line's conventions, end to end with the built binary: --help for
every command, --version, SOURCE as an argument, --opt=value, inspect --json, sizes for people,
messages in the command line's spelling, and no Legate start for --help or inspect."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import warnings

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
import zarr

import shardload

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMMANDS = ["write", "inspect", "read"]
FORMAT_OPTIONS = ["--format", "--dtype", "--astype", "--trailing-shape", "--header-bytes",
                  "--dataset", "--columns", "--fill-value", "--footer-bytes",
                  "--storage-option"]
# The rows of the discovery option table, under "discovery options:" in the help.
DISCOVERY_OPTIONS = ["--trust-manifest", "--probe-threads"]
# Every option each command accepts; a test below checks the parser takes each one.
OPTIONS = {
    "write": ["--shard-dir", "--num-shards", "--shape", "--dtype", "--seed"],
    "inspect": ["--pattern", "--json", *FORMAT_OPTIONS, *DISCOVERY_OPTIONS],
    "read": ["--pattern", "--overdecompose", "--repeat", "--seed", "--no-verify", "--shard-dir",
             *FORMAT_OPTIONS, *DISCOVERY_OPTIONS],
}
FLAGS = ("--json", "--no-verify", "--trust-manifest")
# A Legate start with this configuration fails at once ("Unknown argument: --bogus"), so a
# command that succeeds under it did not start Legate.
NO_LEGATE = {"LEGATE_CONFIG": "--bogus"}


def run(cli, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = None if env is None else {**os.environ, **env}
    return subprocess.run([str(cli), *[a if isinstance(a, bytes) else str(a) for a in args]],
                          capture_output=True, timeout=300, env=full_env)


def out(r: subprocess.CompletedProcess) -> str:
    return r.stdout.decode()


def err(r: subprocess.CompletedProcess) -> str:
    return r.stderr.decode(errors="backslashreplace")


def write_set(cli, d: pathlib.Path, shards: int = 3, shape: str = "100,2", seed: int = 5) -> None:
    r = run(cli, "write", "--shard-dir", d, "--num-shards", shards, "--shape", shape,
            "--seed", seed)
    assert r.returncode == 0, err(r)


# ---- --help and --version -----------------------------------------------------------------

@pytest.mark.parametrize("cmd", COMMANDS)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_has_help_listing_every_option(cli, cmd: str, flag: str) -> None:
    # After other arguments too, and whatever they are: help wins and exits 0.
    for args in ([flag], ["SOURCE", "--overdecompose", "x", flag]):
        r = run(cli, cmd, *args, env=NO_LEGATE)
        assert r.returncode == 0, err(r)
        text = out(r)
        assert text.startswith(f"usage: shardload {cmd} ")
        assert "LEGATE ERROR" not in text + err(r)
        lines = text.splitlines()
        for option in OPTIONS[cmd]:
            listed = [ln for ln in lines if ln.startswith(f"  {option} ") or ln == f"  {option}"]
            assert len(listed) == 1, (option, text)
            # One line each, with a description (on the next line when the name is long).
            i = lines.index(listed[0])
            rest = listed[0][len(option) + 2:].strip()
            assert len(rest.split()) >= 2 or lines[i + 1].startswith(" " * 24), (option, text)
        assert "--help" in text
    # `shardload help CMD` prints the same.
    assert out(run(cli, "help", cmd)) == out(run(cli, cmd, flag))


def test_every_listed_option_is_accepted(cli, tmp_path: pathlib.Path) -> None:
    # The parser and the help agree: each option of the help parses (a value-taking option
    # given a value); what is refused afterwards is the value, not the option.
    for cmd in COMMANDS:
        for option in OPTIONS[cmd]:
            flag = option in FLAGS
            args = [option] if flag else [f"{option}=1"]
            r = run(cli, cmd, *args, "--help", env=NO_LEGATE)
            assert r.returncode == 0, (cmd, option, err(r))


def test_discovery_options_come_from_their_table(cli) -> None:
    # Each row of the C++ discovery table is a flag of the commands that discover, listed
    # under its own heading, a row's '_' spelled '-'.
    rows = [name.replace("_", "-") for name, _ in shardload._core.discover_option_rows()]
    assert [f"--{r}" for r in rows] == DISCOVERY_OPTIONS
    for cmd in ("inspect", "read"):
        text = out(run(cli, cmd, "--help", env=NO_LEGATE))
        heading = text.index("\ndiscovery options:\n")
        for r in rows:
            assert text.index(f"  --{r}") > heading, (cmd, r, text)
    # A flag takes no value, as any flag.
    r = run(cli, "inspect", "SOURCE", "--trust-manifest=1", env=NO_LEGATE)
    assert r.returncode == 2
    assert "--trust-manifest takes no value" in err(r)


def test_top_level_help_and_version(cli) -> None:
    for flag in ["--help", "-h", "help"]:
        r = run(cli, flag)
        assert r.returncode == 0 and out(r).startswith("usage: shardload")
        for cmd in COMMANDS:
            assert re.search(rf"^  {cmd}\s+\S", out(r), re.M), out(r)
    version = re.search(r"project\(shardload VERSION ([0-9.]+)",
                        (ROOT / "CMakeLists.txt").read_text()).group(1)
    for flag in ["--version", "-V"]:
        r = run(cli, flag, env=NO_LEGATE)
        assert r.returncode == 0 and out(r) == f"shardload {version}\n", out(r) + err(r)
    r = run(cli)
    assert r.returncode == 2 and "usage: shardload" in err(r)


@pytest.mark.parametrize("cmd", COMMANDS)
def test_unknown_options_exit_2_naming_them_and_pointing_at_help(cli, cmd: str) -> None:
    for args, needle in [(["--bogus", "1"], "unknown option --bogus"),
                         (["--bogus=1"], "unknown option --bogus"),
                         (["-x"], "unknown option -x"),
                         (["--dtypo", "f4"], "unknown option --dtypo")]:
        r = run(cli, cmd, "SOURCE", *args, env=NO_LEGATE)
        assert r.returncode == 2, (args, err(r))
        assert needle in err(r) and f"shardload {cmd} --help" in err(r), err(r)
        assert "LEGATE ERROR" not in err(r)
    # A value-taking option at the end, and a flag given a value.
    value_option = OPTIONS[cmd][0] if cmd != "inspect" else "--pattern"
    r = run(cli, cmd, "SOURCE", value_option, env=NO_LEGATE)
    assert r.returncode == 2 and f"{value_option} needs a value" in err(r), err(r)
    if cmd != "write":
        flag = "--json" if cmd == "inspect" else "--no-verify"
        r = run(cli, cmd, "SOURCE", f"{flag}=yes", env=NO_LEGATE)
        assert r.returncode == 2 and f"{flag} takes no value" in err(r), err(r)
    for top in (["frobnicate"], ["--frobnicate"]):
        r = run(cli, *top)
        assert r.returncode == 2 and top[0] in err(r) and "shardload --help" in err(r)


# ---- no Legate for --help, inspect and usage errors ----------------------------------------

def test_help_inspect_and_usage_errors_do_not_start_legate(cli, tmp_path: pathlib.Path) -> None:
    d = tmp_path / "set"
    write_set(cli, d)
    for args in (["read", "--help"], ["read", d, "--help"], ["inspect", d], ["inspect", "--help"],
                 ["inspect", d, "--json"], ["--version"]):
        r = run(cli, *args, env=NO_LEGATE)
        assert r.returncode == 0 and "LEGATE ERROR" not in err(r), (args, err(r))
    for args in (["read"], ["read", d, "--overdecompose", "0"], ["read", d, "--repeat=x"],
                 ["read", d, "--format", "tiff"], ["read", d, d]):
        r = run(cli, *args, env=NO_LEGATE)
        assert r.returncode == 2 and "LEGATE ERROR" not in err(r), (args, err(r))
    # The probe works: a read that does start Legate fails on the bogus configuration.
    r = run(cli, "read", d, env=NO_LEGATE)
    assert r.returncode != 0 and "Unknown argument: --bogus" in err(r)


def test_probe_threads_from_the_table_steers_inspect_and_read(cli, tmp_path: pathlib.Path) -> None:
    d = tmp_path / "set"
    write_set(cli, d, shards=9, shape="200,2")
    plain = run(cli, "inspect", d, env=NO_LEGATE)
    assert plain.returncode == 0, err(plain)
    for n in ("1", "3"):
        r = run(cli, "inspect", d, "--probe-threads", n, env=NO_LEGATE)
        assert r.returncode == 0 and out(r) == out(plain), err(r)
    for bad, says in (("x", "--probe-threads: expected an integer >= 0, found 'x'"),
                      ("-2", "--probe-threads: expected an integer >= 0, found '-2'"),
                      ("1025", "--probe-threads: expected at most 1024, found 1025")):
        for cmd in ("inspect", "read"):
            r = run(cli, cmd, d, f"--probe-threads={bad}", env=NO_LEGATE)
            assert r.returncode == 2 and says in err(r), (cmd, bad, err(r))
            assert "LEGATE ERROR" not in err(r)
    # read takes it to the discovering point task.
    r = run(cli, "read", d, "--probe-threads", "2")
    assert r.returncode == 0 and "verify:         OK" in out(r), out(r) + err(r)


# ---- read SOURCE, --opt=value --------------------------------------------------------------

def test_read_takes_the_source_as_an_argument(cli, tmp_path: pathlib.Path) -> None:
    d = tmp_path / "set"
    write_set(cli, d, shards=4, shape="300,3", seed=11)
    ok = "verify:         OK (900 elements match seed 11)"
    r = run(cli, "read", d, "--overdecompose", "2")
    assert r.returncode == 0 and ok in out(r), out(r) + err(r)
    assert "deprecated" not in err(r)
    # A pattern, a glob or one file as SOURCE: _meta.json is looked for beside the files, and
    # the part (here all of it) is verified at its rows in the dataset.
    at = f"verify:         OK (900 elements match seed 11 at rows [0, 300) of the dataset in {d})"
    for source in (d / "shard_{:04d}.npy", d / "*.npy"):
        r = run(cli, "read", source)
        assert r.returncode == 0 and at in out(r) and "shards:         4" in out(r), err(r)
    # The old spelling keeps working, with a note.
    r = run(cli, "read", "--shard-dir", d)
    assert r.returncode == 0 and ok in out(r) and "--shard-dir is deprecated" in err(r)
    r = run(cli, "read", d, "--shard-dir", d, env=NO_LEGATE)
    assert r.returncode == 2 and "not both" in err(r)
    r = run(cli, "read", d, d, env=NO_LEGATE)
    assert r.returncode == 2 and "expected one SOURCE" in err(r)


def test_every_option_takes_the_equals_form(cli, tmp_path: pathlib.Path) -> None:
    d = tmp_path / "set"
    r = run(cli, "write", "--shard-dir=" + str(d), "--num-shards=3", "--shape=200,2",
            "--dtype=int16", "--seed=7")
    assert r.returncode == 0, err(r)
    r = run(cli, "inspect", d, "--format=npy", "--pattern=shard_{:04d}.npy")
    assert r.returncode == 0 and "shape:          (200, 2)" in out(r), err(r)
    r = run(cli, "read", d, "--overdecompose=2", "--repeat=2", "--seed=7", "--format=npy",
            "--pattern=shard_{:04d}.npy")
    assert r.returncode == 0 and "verify:         OK (400 elements match seed 7)" in out(r), \
        out(r) + err(r)
    # Raw options, an empty value ("--trailing-shape=" is 1-D) and a value with '=' in it.
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "shard_0000.bin").write_bytes(b"\0" * 8 + np.arange(6, dtype=">f4").tobytes())
    r = run(cli, "inspect", raw, "--format=raw", "--dtype=>f4", "--trailing-shape=",
            "--header-bytes=8")
    assert r.returncode == 0 and "shape:          (6,)" in out(r), err(r)
    r = run(cli, "inspect", raw, "--format=raw", "--dtype=>f4", "--trailing-shape=3",
            "--header-bytes=8")
    assert r.returncode == 0 and "shape:          (2, 3)" in out(r), err(r)
    # Only the first '=' splits: the value keeps the others.
    np.save(raw / "x=y_0000.npy", np.arange(4))
    r = run(cli, "inspect", raw, "--pattern=x=y_{:04d}.npy")
    assert r.returncode == 0 and "x=y_0000.npy: 4" in out(r), err(r)


# ---- --footer-bytes: the option table's newest row, through the command line ---------------

def test_footer_bytes_reads_fortran_records(cli, tmp_path: pathlib.Path) -> None:
    d = tmp_path / "records"
    d.mkdir()
    rng = np.random.default_rng(3)
    arrays = [rng.integers(-9, 9, (r, 2), dtype="<i4") for r in [5, 0, 3]]
    for i, a in enumerate(arrays):
        marker = np.int32(a.nbytes).tobytes()
        (d / f"shard_{i:04d}.bin").write_bytes(marker + a.tobytes() + marker)
    opts = ["--format=raw", "--dtype=<i4", "--trailing-shape=2", "--header-bytes=4"]
    r = run(cli, "inspect", d, *opts, "--footer-bytes=4", "--json", env=NO_LEGATE)
    assert r.returncode == 0, err(r)
    j = json.loads(r.stdout)
    layout = shardload.discover(d, format="raw", dtype="<i4", trailing_shape=(2,),
                                header_bytes=4, footer_bytes=4)
    assert [s["rows"] for s in j["shards"]] == layout.shard_rows == [5, 0, 3]
    np.testing.assert_array_equal(layout.read(), np.concatenate(arrays))
    r = run(cli, "inspect", d, *opts, "--footer-bytes=-4", env=NO_LEGATE)
    assert r.returncode == 2, err(r)
    assert "--footer-bytes: expected an integer >= 0, found '-4'" in err(r), err(r)


# ---- inspect --json ------------------------------------------------------------------------

def test_inspect_json_matches_the_layout(cli, tmp_path: pathlib.Path) -> None:
    d = tmp_path / "set"
    write_set(cli, d, shards=5, shape="1000,3,2")
    r = run(cli, "inspect", d, "--json")
    assert r.returncode == 0, err(r)
    j = json.loads(r.stdout)
    layout = shardload.discover(d)
    assert j["format"] == "npy" and j["dtype"] == "float32" == str(layout.dtype)
    assert j["shape"] == [1000, 3, 2] and j["trailing_shape"] == [3, 2]
    assert j["total_rows"] == 1000 and j["bytes"] == layout.nbytes == 1000 * 24
    assert j["row_bytes"] == 24 and j["num_shards"] == 5
    assert [s["path"] for s in j["shards"]] == layout.paths
    assert [s["rows"] for s in j["shards"]] == layout.shard_rows
    assert [s["first_row"] for s in j["shards"]] == layout.offsets[:-1]
    assert [s["bytes"] for s in j["shards"]] == [r * 24 for r in layout.shard_rows]
    assert sum(s["bytes"] for s in j["shards"]) == j["bytes"]
    # An error is still a message and exit 1, not JSON.
    r = run(cli, "inspect", tmp_path / "missing", "--json")
    assert r.returncode == 1 and r.stdout == b"" and "missing" in err(r)


def test_inspect_json_escapes_paths_that_are_not_utf8(cli, tmp_path: pathlib.Path) -> None:
    # A directory name with valid UTF-8 (é, U+1F600), bytes that are not UTF-8 (a lone
    # continuation byte, 0xff, a truncated sequence, an overlong '/' and an encoded
    # surrogate), a quote, a backslash, a tab and a newline.
    name = (b'caf\xc3\xa9 \xf0\x9f\x98\x80 \x80 \xff \xe2\x82 \xc0\xaf \xed\xa0\x80 "q" '
            b'back\\slash \t new\nline')
    d = os.fsencode(tmp_path) + b"/" + name
    r = run(cli, "write", "--shard-dir", d, "--num-shards", "2", "--shape", "10")
    assert r.returncode == 0, err(r)
    r = run(cli, "inspect", d, "--json")
    assert r.returncode == 0, err(r)
    text = r.stdout.decode("ascii", errors="strict") if r.stdout.isascii() else \
        r.stdout.decode("utf-8", errors="strict")  # valid UTF-8 JSON, whatever the names
    for byte in (0x80, 0xff, 0xe2, 0x82, 0xc0, 0xaf, 0xed, 0xa0):
        assert f"\\udc{byte:02x}" in text
    assert "é" in text and "\U0001F600" in text  # valid UTF-8 is kept as it is
    j = json.loads(text)
    # surrogateescape, as os.fsdecode: os.fsencode gives back the exact bytes.
    assert [os.fsencode(s["path"]) for s in j["shards"]] == \
        [d + b"/shard_0000.npy", d + b"/shard_0001.npy"]
    assert os.fsencode(j["source"]) == d
    assert [s["path"] for s in j["shards"]] == shardload.discover(d).paths


# ---- sizes for people ----------------------------------------------------------------------

@pytest.mark.parametrize("nbytes, text", [
    (0, "0 bytes"), (999, "999 bytes"), (1000, "1.00 kB (1000 bytes)"),
    (16000, "16.00 kB (16000 bytes)"), (999_994, "999.99 kB (999994 bytes)"),
    (999_999, "1.00 MB (999999 bytes)"), (1_234_567_890, "1.23 GB (1234567890 bytes)"),
    (5 * 10**12 + 1, "5.00 TB (5000000000001 bytes)")])
def test_inspect_prints_sizes_for_people(cli, tmp_path: pathlib.Path, nbytes: int,
                                         text: str) -> None:
    # A sparse raw file of uint8 rows has exactly the size asked for, and costs no space.
    d = tmp_path / "raw"
    d.mkdir()
    with open(d / "shard_0000.bin", "wb") as f:
        f.truncate(nbytes)
    r = run(cli, "inspect", d, "--format", "raw", "--dtype", "uint8", "--trailing-shape", "")
    assert r.returncode == 0, err(r)
    assert f"bytes:          {text}\n" in out(r), out(r)


def test_read_prints_sizes_for_people(cli, tmp_path: pathlib.Path) -> None:
    d = tmp_path / "set"
    write_set(cli, d, shards=2, shape="1000,4")
    r = run(cli, "read", d, "--no-verify")
    assert r.returncode == 0, err(r)
    assert "bytes:          16.00 kB (16000 bytes)" in out(r)
    assert re.search(r"^load: .* GB/s for 16\.00 kB \(16000 bytes\)$", out(r), re.M), out(r)


# ---- messages in the command line's spelling -----------------------------------------------

# The options the core names: the table's rows, and the three outside it.
OPTION_NAMES = [name for name, _ in shardload._core.format_option_rows()] + [
    "format", "pattern", "astype"]


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _python_spelling(text: str) -> list[str]:
    return re.findall(r"(?<![-\w])(?:" + "|".join(OPTION_NAMES) + r")=", text)


def _cli_spelling(text: str) -> list[str]:
    return re.findall(r"--(?:" + "|".join(flag(n)[2:] for n in OPTION_NAMES) + r")\b", text)


def _check_spellings(cli_err: str, python_msg: str, name: str | None) -> None:
    # Each front end names the option its own way, and never the other's way; no mark of the
    # core's is left in either.
    assert "\x1f" not in cli_err and "\x1f" not in python_msg, (cli_err, python_msg)
    assert _python_spelling(cli_err) == [], cli_err
    assert _cli_spelling(python_msg) == [], python_msg
    if name is not None:
        assert flag(name) in cli_err, (name, cli_err)
        assert f"{name}=" in python_msg, (name, python_msg)


def _discover_error(source: pathlib.Path, **kw) -> str:
    with pytest.raises(ValueError) as e:
        shardload.discover(source, **kw)
    return str(e.value)


def _cli_args(options: dict) -> list[str]:
    args = []
    for name, value in options.items():
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        args += [flag(name), str(value)]
    return args


def test_errors_name_options_as_each_front_end_spells_them(cli, tmp_path: pathlib.Path) -> None:
    # The same fault through the command line and through Python: the option it names is
    # --flag in one and keyword= in the other.
    def check(source: pathlib.Path, options: dict, name: str) -> None:
        r = run(cli, "inspect", source, *_cli_args(options))
        assert r.returncode == 1, (options, err(r))
        _check_spellings(err(r), _discover_error(source, **options), name)

    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "shard_0000.bin").write_bytes(bytes(48))
    check(raw, {"format": "raw"}, "dtype")
    check(raw, {"format": "raw", "dtype": "f4"}, "trailing_shape")
    (raw / "shardload.json").write_text(json.dumps({"dtype": "<f4", "shape": [3],
                                                    "header_bytes": 0}))
    check(raw, {"format": "raw", "dtype": "<f8"}, "dtype")
    check(raw, {"format": "raw", "dtype": ">f4"}, "dtype")
    check(raw, {"format": "raw", "trailing_shape": [4]}, "trailing_shape")
    check(raw, {"format": "raw", "header_bytes": 4}, "header_bytes")
    unknown = tmp_path / "data.weird"
    unknown.write_bytes(b"x")
    check(unknown, {}, "format")
    h5 = tmp_path / "two.h5"
    with h5py.File(h5, "w") as f:
        f["a"] = np.arange(3)
        f["b"] = np.arange(3)
    check(h5, {}, "dataset")
    g = zarr.open_group(str(tmp_path / "z" / "shard_0000.zarr"), mode="w")
    g.create_array("x", shape=(4,), dtype="f4")
    check(tmp_path / "z", {"format": "zarr"}, "dataset")
    pqf = tmp_path / "mixed.parquet"
    pq.write_table(pa.table({"a": np.arange(3, dtype=np.int32), "b": np.arange(3.0)}), pqf)
    check(pqf, {}, "astype")
    pq.write_table(pa.table({"a": np.arange(3.0), "s": ["x", "y", "z"]}), pqf)
    check(pqf, {"columns": ["a", "s"]}, "columns")
    check(pqf, {"columns": ["a", "a"]}, "columns")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    np.save(mixed / "shard_0000.npy", np.zeros(2))
    with h5py.File(mixed / "shard_0000.h5", "w") as f:
        f["x"] = np.zeros(2)
    check(mixed, {}, "pattern")


def _datasets(tmp_path: pathlib.Path) -> dict[str, pathlib.Path]:
    """One valid one-shard dataset of each format the tests can write, by format name."""
    out = {}
    for fmt in ("npy", "raw", "hdf5", "parquet", "arrow", "zarr", "npz"):
        d = tmp_path / fmt
        d.mkdir()
        out[fmt] = d
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.save(out["npy"] / "shard_0000.npy", data)
    data.tofile(out["raw"] / "shard_0000.bin")
    (out["raw"] / "shardload.json").write_text(json.dumps({"dtype": "<f4", "shape": [3]}))
    with h5py.File(out["hdf5"] / "shard_0000.h5", "w") as f:
        f["x"] = data
    table = pa.table({"a": data[:, 0], "b": data[:, 1]})
    pq.write_table(table, out["parquet"] / "shard_0000.parquet")
    feather.write_feather(table, out["arrow"] / "shard_0000.arrow")
    z = zarr.open_array(str(out["zarr"] / "shard_0000.zarr"), mode="w", shape=data.shape,
                        dtype="f4")
    z[:] = data
    np.savez(out["npz"] / "shard_0000.npz", x=data)
    return out


# A value of each kind of the option table, as Python takes it.
VALUE_OF_KIND = {"dtype": "float32", "dims": [3], "count": 4, "text": "x",
                 "text_list": ["a"], "number": 0.5}


def test_every_option_naming_error_names_the_option_as_each_front_end_spells_it(
        cli, tmp_path: pathlib.Path) -> None:
    # Every row of the option table, set on a valid dataset of every format: where that fails,
    # the command line and Python fail alike, each in its own spelling of the options named
    # (none in the other's), and an error that names the option in one names it in both.
    # npy takes no option of the table, so every row gives at least that refusal.
    datasets = _datasets(tmp_path)
    refused = set()
    for name, kind in shardload._core.format_option_rows():
        options = {name: VALUE_OF_KIND[kind]}
        for fmt, d in datasets.items():
            r = run(cli, "inspect", d, "--format", fmt, *_cli_args(options))
            try:
                with warnings.catch_warnings():  # dtype= for parquet/arrow: deprecated, works
                    warnings.simplefilter("ignore", DeprecationWarning)
                    shardload.discover(d, format=fmt, **options)
                python_msg = None
            except ValueError as e:
                python_msg = str(e)
            assert (r.returncode == 0) == (python_msg is None), (name, fmt, err(r), python_msg)
            if python_msg is None:
                continue
            named = flag(name) in err(r)
            assert named == (f"{name}=" in python_msg), (name, fmt, err(r), python_msg)
            _check_spellings(err(r), python_msg, name if named else None)
            if named:
                refused.add((name, fmt))
    assert {(name, "npy") for name in OPTION_NAMES[:-3]} <= refused, refused


def test_astype_is_the_read_as_type_and_dtype_the_stored_one(cli, tmp_path: pathlib.Path) -> None:
    # The flags mirror Python: --astype is what parquet/arrow decode into, --dtype the stored
    # type (raw); --dtype for parquet/arrow still works one release, with a note on stderr.
    pqd = tmp_path / "pq"
    pqd.mkdir()
    table = pa.table({"a": np.arange(5, dtype=np.int32), "b": np.arange(5.0)})
    pq.write_table(table, pqd / "shard_0000.parquet")
    for cmd in ("inspect", "index"):
        r = run(cli, cmd, pqd, "--astype", "float32")
        assert r.returncode == 0 and "deprecated" not in err(r), (cmd, err(r))
        r = run(cli, cmd, pqd, "--dtype", "float32")
        assert r.returncode == 0, (cmd, err(r))
        assert (f"shardload {cmd}: note: --dtype is deprecated for parquet data, where it is "
                "the type to decode into; pass --astype float32") in err(r), (cmd, err(r))
    r = run(cli, "inspect", pqd, "--astype", "float32", "--json")
    assert json.loads(out(r))["dtype"] == "float32", out(r)
    r = run(cli, "read", pqd, "--astype", "float64", "--no-verify")
    assert r.returncode == 0 and "dtype:          float64" in out(r), out(r) + err(r)
    # --astype where the format reads its stored type: named or found by discovery, exit 2.
    npyd = tmp_path / "npy"
    write_set(cli, npyd)
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "shard_0000.bin").write_bytes(np.arange(6, dtype="<f4").tobytes())
    for args, fmt in (([raw, "--format", "raw"], "raw"), ([npyd, "--format=npy"], "npy"),
                      ([npyd], "npy")):
        for cmd in ("inspect", "read"):
            r = run(cli, cmd, *args, "--astype", "float64", env=NO_LEGATE if "--format" in
                    " ".join(map(str, args)) else None)
            assert r.returncode == 2, (cmd, args, err(r))
            assert (f"--astype: only parquet and arrow decode into another type, and the data "
                    f"is {fmt}") in err(r), (cmd, args, err(r))
    # Both at once: which one is meant is a guess.
    r = run(cli, "inspect", pqd, "--astype", "float32", "--dtype", "float64", env=NO_LEGATE)
    assert r.returncode == 2 and "give one" in err(r), err(r)
    # Raw's --dtype is its stored type, without a note.
    r = run(cli, "inspect", raw, "--format", "raw", "--dtype", "<f4", "--trailing-shape=")
    assert r.returncode == 0 and "shape:          (6,)" in out(r) and err(r) == "", err(r)


def test_the_core_spells_no_option_the_way_one_front_end_does() -> None:
    # Besides the behaviour above: no string in the sources under the front ends names an
    # option as Python (dtype=) or the command line (--dtype) would; they mark it.
    sources = [p for p in (ROOT / "src").rglob("*") if p.suffix in (".cc", ".hpp", ".cu", ".h")
               and "cli" not in p.relative_to(ROOT).parts]
    assert len(sources) > 20
    found = []
    for path in sources:
        code = re.sub(r"(?m)^\s*//.*$", "", path.read_text())  # whole-line comments
        # Adjacent string literals joined, as the compiler does, then searched one by one.
        joined = re.sub(r'"\s*\n\s*"', "", code)
        for literal in re.findall(r'"((?:[^"\\\n]|\\.)*)"', joined):
            found += [(path.name, s) for s in _python_spelling(literal) + _cli_spelling(literal)]
    assert not found, found


def test_read_errors_use_the_command_line_spelling(cli, tmp_path: pathlib.Path) -> None:
    # A null found while reading, under Legate: the message suggests --fill-value.
    d = tmp_path / "nulls"
    d.mkdir()
    pq.write_table(pa.table({"a": pa.array([1.0, None, 3.0])}), d / "shard_0000.parquet")
    r = run(cli, "read", d / "shard_{:04d}.parquet", "--no-verify")
    assert r.returncode == 1 and "pass --fill-value to replace nulls" in err(r), err(r)
    _check_spellings(err(r), "", None)
    r = run(cli, "read", d / "shard_{:04d}.parquet", "--fill-value=0", "--no-verify")
    assert r.returncode == 0, err(r)


# ---- usage errors: what Python refuses, the command line refuses (exit 2, no Legate) -------

# Every value-taking option of every command, with a value that would otherwise be accepted
# (only --trailing-shape has a meaning for '': 1-D data).
VALUE_OPTIONS = {
    "write": ["--shard-dir", "--num-shards", "--shape", "--dtype", "--seed"],
    "inspect": ["--pattern", *[o for o in FORMAT_OPTIONS if o != "--trailing-shape"]],
    "index": ["--pattern", "--checksum", *[o for o in FORMAT_OPTIONS
                                           if o != "--trailing-shape"]],
    "verify": ["--groups"],
    "read": ["--pattern", "--overdecompose", "--repeat", "--seed", "--shard-dir",
             *[o for o in FORMAT_OPTIONS if o != "--trailing-shape"]],
}


def test_empty_values_are_refused_as_python_refuses_them(cli, tmp_path: pathlib.Path) -> None:
    # Before, --pattern= read as the default pattern, --checksum '' as none, --dataset '' as
    # no dataset and --columns '' as a column named '', where Python refuses pattern='',
    # checksum='', dataset='' and columns=[] (ValueError); --shard-dir '' exited 1.
    d = tmp_path / "set"
    write_set(cli, d)
    for cmd, options in VALUE_OPTIONS.items():
        source = [] if cmd == "write" else [d]
        for option in options:
            for args in ([f"{option}="], [option, ""]):
                r = run(cli, cmd, *source, *args, env=NO_LEGATE)
                assert r.returncode == 2, (cmd, args, err(r))
                assert f"{option}: expected a non-empty value" in err(r), (cmd, args, err(r))
                assert f"see 'shardload {cmd} --help'" in err(r)
                assert "LEGATE ERROR" not in err(r)
    for kwargs in ({"pattern": ""}, {"dataset": ""}, {"columns": []}, {"format": ""}):
        with pytest.raises(ValueError):
            shardload.discover(d, **kwargs)
    with pytest.raises(ValueError):
        shardload.index(d, checksum="")
    # An empty SOURCE (or DIR) too, as Python's discover("") raises ValueError.
    for cmd in ("inspect", "index", "verify", "read"):
        r = run(cli, cmd, "", env=NO_LEGATE)
        assert r.returncode == 2 and "an empty argument ('') is not a path" in err(r), \
            (cmd, err(r))
    # '' is still 1-D data for --trailing-shape.
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "shard_0000.bin").write_bytes(np.arange(3, dtype="<i4").tobytes())
    r = run(cli, "inspect", raw, "--format=raw", "--dtype=<i4", "--trailing-shape=")
    assert r.returncode == 0 and "shape:          (3,)" in out(r), err(r)


def test_storage_options_come_from_their_table(cli) -> None:
    # Each row of the C++ store option table is a KEY of --storage-option, listed with its
    # placeholder under its own heading in the help of every command that takes the flag.
    rows = [name for name, *_ in shardload._core.storage_option_rows()]
    for cmd in ("inspect", "read", "index", "verify"):
        text = out(run(cli, cmd, "--help", env=NO_LEGATE))
        heading = text.index("\nstorage options (each as --storage-option KEY=VALUE")
        at = [text.index(f"\n  {r}=", heading) for r in rows]
        assert at == sorted(at), (cmd, text)
    # A count row shows its default and its range from the row.
    assert "  max_attempts=N        tries of one request, the first included (default 5; 1 to " \
           "100; http(s) too)\n" in text, text
    assert "  region=REGION         the bucket's region" in text and "own)\n" in text, text
    # write takes no store, so no list.
    assert "storage options" not in out(run(cli, "write", "--help", env=NO_LEGATE))


def test_an_option_given_twice_is_refused(cli, tmp_path: pathlib.Path) -> None:
    # Before, the last value won silently (`inspect D --format npy --format raw` was raw).
    d = tmp_path / "set"
    write_set(cli, d)
    for cmd, options in VALUE_OPTIONS.items():
        source = [] if cmd == "write" else [d]
        for option in options:
            if option == "--storage-option":
                continue  # repeatable by design (test_s3::test_cli_read_s3)
            r = run(cli, cmd, *source, f"{option}=a", option, "b", env=NO_LEGATE)
            assert r.returncode == 2, (cmd, option, err(r))
            assert f"{option} is given twice ('a', then 'b'); give it once" in err(r), err(r)
    # A flag twice says nothing new and is taken.
    r = run(cli, "inspect", d, "--json", "--json", env=NO_LEGATE)
    assert r.returncode == 0 and json.loads(r.stdout)["total_rows"] == 100, err(r)


def test_version_and_help_take_no_extra_arguments(cli) -> None:
    # Before, `--version extra` printed the version and ignored the rest.
    for args in (["--version", "extra"], ["-V", "extra"], ["--version", "--version"]):
        r = run(cli, *args, env=NO_LEGATE)
        assert r.returncode == 2 and r.stdout == b"", (args, out(r))
        assert f"shardload: {args[0]} takes no argument, found '{args[1]}'" in err(r), err(r)
    r = run(cli, "help", "read", "extra")
    assert r.returncode == 2 and r.stdout == b"", out(r)
    assert "expected at most one COMMAND, found 'extra'" in err(r), err(r)
    # Help still wins over other arguments, as for every command.
    r = run(cli, "--help", "extra")
    assert r.returncode == 0 and out(r).startswith("usage: shardload")


def test_inspect_of_several_sources_says_each_directory_is_a_source_of_its_own(
        cli, tmp_path: pathlib.Path) -> None:
    # Before, `inspect D D` said "loading a list of 2 paths: D: cannot tell the format from
    # the name or the first bytes", as if D were a shard file of an unknown kind.
    d = tmp_path / "set"
    write_set(cli, d, shards=2)
    for args, what, name in (([d, d], "a directory", d),
                             ([d / "shard_0000.npy", d], "a directory", d),
                             ([d / "*.npy", d / "shard_0000.npy"], "a glob", d / "*.npy"),
                             ([d / "shard_0000.npy", d / "shard_{:04d}.npy"],
                              "a numbered pattern", d / "shard_{:04d}.npy"),
                             # Told as discovery tells them: braces in a directory part, or
                             # braces that are no field beside a wildcard, make no pattern.
                             ([d / "shard_0000.npy", tmp_path / "run{1}" / "*.npy"], "a glob",
                              tmp_path / "run{1}" / "*.npy"),
                             ([d / "shard_0000.npy", d / "a{b}_*.npy"], "a glob",
                              d / "a{b}_*.npy")):
        r = run(cli, "inspect", *args, env=NO_LEGATE)
        assert r.returncode == 2, (args, err(r))
        assert (f"'{name}' is {what}, a SOURCE of its own: give one directory, pattern or glob "
                "alone, or several files (2 arguments given)") in err(r), err(r)
    r = run(cli, "inspect", d / "shard_0000.npy", d / "shard_0001.npy", "--pattern", "x_{}.npy")
    assert r.returncode == 2 and "--pattern applies to one directory SOURCE" in err(r), err(r)
    # A list of files, and a list of Zarr stores (directories), are still one dataset.
    r = run(cli, "inspect", d / "shard_0000.npy", d / "shard_0001.npy")
    assert r.returncode == 0 and "total rows:     100" in out(r), err(r)
    stores = []
    for i in range(2):
        z = zarr.open_array(str(tmp_path / f"z{i}.zarr"), mode="w", shape=(3, 2), dtype="f4",
                            zarr_format=2)
        z[:] = i
        stores.append(tmp_path / f"z{i}.zarr")
    r = run(cli, "inspect", *stores)
    assert r.returncode == 0 and "shape:          (6, 2)" in out(r), err(r)
    # A store whose .zarray is a link whose target is gone is still a store of the list, whose
    # reader names the link (it was "a directory, a SOURCE of its own").
    meta = stores[1] / ".zarray"
    meta.unlink()
    meta.symlink_to(tmp_path / "gone")
    r = run(cli, "inspect", *stores, env=NO_LEGATE)
    assert r.returncode != 0 and "a SOURCE of its own" not in err(r), err(r)
    assert f"{meta}: a symbolic link whose target does not exist" in err(r), err(r)


def test_a_malformed_source_is_a_usage_error_before_legate(cli, tmp_path: pathlib.Path) -> None:
    # A pattern with a file or a glob: Python raises ValueError; the command line exited 1
    # (read: after starting Legate).
    d = tmp_path / "set"
    write_set(cli, d, shards=2)
    with pytest.raises(ValueError, match="a pattern applies only to a directory"):
        shardload.discover(d / "shard_0000.npy", pattern="shard_{:04d}.npy")
    for cmd in ("inspect", "index", "read"):
        for source in (d / "shard_0000.npy", d / "*.npy"):
            r = run(cli, cmd, source, "--pattern", "shard_{:04d}.npy", env=NO_LEGATE)
            assert r.returncode == 2, (cmd, source, err(r))
            assert "a pattern applies only to a directory" in err(r), err(r)
            assert "LEGATE ERROR" not in err(r)


def test_read_refuses_a_seed_it_would_not_use(cli, tmp_path: pathlib.Path) -> None:
    # --seed is what the verification compares with; --no-verify skips it, so the seed was
    # ignored.
    d = tmp_path / "set"
    write_set(cli, d)
    r = run(cli, "read", d, "--seed", "3", "--no-verify", env=NO_LEGATE)
    assert r.returncode == 2 and "give one of them" in err(r), err(r)


def test_verify_groups_is_an_integer_as_every_other_option_takes_it(
        cli, tmp_path: pathlib.Path) -> None:
    # verify parsed with std::stoll, which took " 3" and "+3" that every other integer option
    # refuses.
    d = tmp_path / "set"
    write_set(cli, d)
    for value in (" 3", "+3", "3 ", "0", "x"):
        r = run(cli, "verify", d, "--groups", value, env=NO_LEGATE)
        assert r.returncode == 2, (value, err(r))
        assert f"--groups: expected an integer >= 1, found '{value}'" in err(r), err(r)
        r = run(cli, "read", d, "--repeat", value, env=NO_LEGATE)
        assert r.returncode == 2 and "--repeat: expected an integer >= 1" in err(r), err(r)
    # --fill-value (strtod) took leading spaces too; a float it still takes whole.
    r = run(cli, "read", d, "--fill-value", " 1", env=NO_LEGATE)
    assert r.returncode == 2 and "--fill-value: expected a number, found ' 1'" in err(r), err(r)


def test_a_negative_trailing_dimension_is_a_usage_error(cli, tmp_path: pathlib.Path) -> None:
    # Python's trailing_shape=(-1,) is a ValueError; the command line exited 1 after discovery began.
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "shard_0000.bin").write_bytes(np.arange(6, dtype="<f4").tobytes())
    with pytest.raises(ValueError, match="expected a non-negative int"):
        shardload.discover(raw, format="raw", dtype="<f4", trailing_shape=(-1,))
    for cmd in ("inspect", "read"):
        r = run(cli, cmd, raw, "--format=raw", "--dtype=<f4", "--trailing-shape=2,-1",
                env=NO_LEGATE)
        assert r.returncode == 2, (cmd, err(r))
        assert "--trailing-shape: dimensions must be >= 0, found '2,-1'" in err(r), err(r)


# ---- dimensions: what a Legate array holds --------------------------------------------------

def test_write_refuses_more_dimensions_than_legate_holds(cli, tmp_path: pathlib.Path) -> None:
    # Before, `write --shape 4,2,2,2,2,2,2` aborted the process (SIGABRT, exit 134) in Legate,
    # and --help promised 1 to 8 dimensions.
    from legate import install_info  # the wheels' LEGATE_MAX_DIM, without starting Legate

    limit = install_info.max_dim
    r = run(cli, "write", "--help")
    assert f"the shape of the whole dataset (1 to {limit} dimensions" in out(r), out(r)
    for n in (limit + 1, 8):
        shape = ",".join(["4"] + ["2"] * (n - 1))
        d = tmp_path / f"d{n}"
        r = run(cli, "write", "--shard-dir", d, "--num-shards", "2", "--shape", shape,
                env=NO_LEGATE)
        assert r.returncode == 2, err(r)
        assert (f"--shape: {n} dimensions, and a Legate array has at most {limit} "
                f"(LEGATE_MAX_DIM); found '{shape}'") in err(r), err(r)
        assert not d.exists()
    # The limit itself is written and read back.
    d = tmp_path / "d6"
    r = run(cli, "write", "--shard-dir", d, "--num-shards", "3", "--shape",
            ",".join(["5"] + ["2"] * (limit - 1)), "--seed", "4")
    assert r.returncode == 0, err(r)
    r = run(cli, "read", d)
    assert r.returncode == 0 and "verify:         OK (160 elements match seed 4)" in out(r), \
        out(r) + err(r)


@pytest.mark.parametrize("shape, dtype", [
    ("4,4294967296,4294967296", "float32"),  # the element count wraps to 0
    ("0,4294967296,4294967296", "float32"),  # no element, and rows numpy cannot size
    ("2,4611686018427387904", "float32"),  # 2**63 elements, 2**65 bytes
    ("3,9223372036854775807,2", "int8"),
    ("9223372036854775807", "complex128"),
])
def test_write_refuses_a_shape_whose_bytes_overflow_64_bits(cli, tmp_path: pathlib.Path,
                                                             shape: str, dtype: str) -> None:
    # Before, the sizes wrapped: `--shape 4,4294967296,4294967296` exited 0 saying it wrote
    # (4, 4294967296, 4294967296) float32, and left .npy files of a header alone, which numpy
    # and shardload refuse; the others began writing exabytes into the directory.
    d = tmp_path / "d"
    r = run(cli, "write", "--shard-dir", d, "--num-shards", "2", "--shape", shape, "--dtype",
            dtype, env=NO_LEGATE)
    assert r.returncode == 2, out(r) + err(r)
    assert (f"--shape: more than 2**63 - 1 bytes of {dtype}, the most a file holds; found "
            f"'{shape}'") in err(r), err(r)
    assert not d.exists()


@pytest.mark.parametrize("args", [
    ["--shape", "0"], ["--shape", "0,5"], ["--shape", "2,0"], ["--shape", "2,0,4294967296"],
    ["--shape", "10,2", "--seed", "-5"], ["--shape", "10,2", "--seed", "9223372036854775807"],
    ["--shape", "10,2", "--dtype", "bool"], ["--shape", "10,2", "--dtype", "|b1"],
    ["--shape", "10,2", "--dtype", "complex128"], ["--shape", "10,2", "--dtype", "float16"],
])
def test_write_of_edge_shapes_seeds_and_dtypes_is_what_numpy_reads(tmp_path: pathlib.Path,
                                                                    args: list[str]) -> None:
    # A seventh hostile pass: each held; the shards numpy reads are the dataset shardload reads.
    # The command without Legate (the same argument checks, no runtime to start).
    d = tmp_path / "d"
    r = run(ROOT / "build" / "shardload-core", "write", "--shard-dir", d, "--num-shards", "3",
            *args)
    assert r.returncode == 0, err(r)
    meta = json.loads((d / "_meta.json").read_text())
    want = np.concatenate([np.load(d / f"shard_{i:04d}.npy") for i in range(3)])
    assert list(want.shape) == meta["shape"] and sum(meta["rows"]) == want.shape[0]
    got = shardload.discover(d).read()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [7, 8])
def test_read_refuses_more_dimensions_than_legate_holds(cli, tmp_path: pathlib.Path,
                                                        n: int) -> None:
    # Before, read of 7-D or 8-D data aborted the process (SIGABRT, exit 134) in Legate.
    d = tmp_path / "set"
    d.mkdir()
    data = np.arange(3 * 2 ** (n - 1), dtype=np.float32).reshape((3,) + (2,) * (n - 1))
    np.save(d / "shard_0000.npy", data[:2])
    np.save(d / "shard_0001.npy", data[2:])
    r = run(cli, "read", d)
    assert r.returncode == 1, err(r)
    shape = "(3, " + ", ".join(["2"] * (n - 1)) + ")"
    assert (f"shardload read: error: the dataset of {d}/shard_0000.npy and 1 more shard has "
            f"{n} dimensions, shape {shape}, and a Legate array has at most 6 "
            "(LEGATE_MAX_DIM of this Legate build); it cannot be loaded through Legate, but it "
            "can be read on the host") in err(r), err(r)
    assert "LEGATE ERROR" not in err(r) and "Signal 6" not in err(r)
    # inspect, which reads no data, describes it; host reads work (Layout.read).
    r = run(cli, "inspect", d)
    assert r.returncode == 0 and f"shape:          {shape}" in out(r), err(r)
    np.testing.assert_array_equal(shardload.discover(d).read(), data)
