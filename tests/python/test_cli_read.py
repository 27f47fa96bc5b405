"""`shardload read` end to end: it loads under Legate (LEGATE_CONFIG from the
environment), verifies against _meta.json's seed, and reports failures by exit status."""

from __future__ import annotations

import io
import json
import os
import pathlib
import subprocess

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr

from conftest import synth


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
    assert r.returncode == 2 and "--overdecompose: expected an integer >= 1" in r.stderr


def test_read_of_a_directory_that_lost_its_last_shard_fails_its_verification(
        tmp_path: pathlib.Path, cli) -> None:
    """The last shard lost (no gap in the numbering to see), or a _meta.json whose shape is not
    the shards': the rows left matched the seed and the verification said OK, exit 0. The
    directory's shape is compared with the one write recorded; a file of it still verifies."""
    d = tmp_path / "v"
    assert run(cli, "write", "--shard-dir", d, "--num-shards", "3", "--shape", "9,2",
               "--seed", "3").returncode == 0
    assert run(cli, "read", d).returncode == 0
    os.remove(d / "shard_0002.npy")
    r = run(cli, "read", d)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "verify: _meta.json says shape (9, 2), the shards hold (8, 2)" in r.stderr, r.stderr
    one = run(cli, "read", d / "shard_0000.npy")
    assert one.returncode == 0 and "verify:         OK" in one.stdout, one.stdout + one.stderr


@pytest.mark.parametrize("program", ["shardload", "shardload-core"])
def test_read_of_a_part_of_a_directory_verifies_it_at_its_rows_in_the_dataset(
        tmp_path: pathlib.Path, cli, program: str) -> None:
    """`read D/shard_0001.npy` of an intact dataset said "FAILED: 534 of 534 elements differ"
    (exit 1): the seed's values were those of the part's own rows from 0, and write's are those
    of the element's index in the whole array. A part (a shard, a glob or pattern of some) is
    verified at its rows in the dataset, from _meta.json's rows and the shards' numbers, under
    Legate and on host threads; one whose place cannot be told is skipped, saying why."""
    exe = cli.parent / program
    d = tmp_path / "ds"
    assert run(cli, "write", "--shard-dir", d, "--num-shards", "3", "--shape", "300,2",
               "--seed", "7").returncode == 0
    rows = json.loads((d / "_meta.json").read_text())["rows"]
    assert len(rows) == 3 and min(rows) > 0, rows
    starts = [0, rows[0], rows[0] + rows[1], 300]
    whole = np.concatenate([np.load(d / f"shard_{i:04d}.npy") for i in range(3)])
    # The oracle: write's values are those of each element's index in the whole array.
    np.testing.assert_array_equal(whole.ravel(), synth("float32", 7, 0, 600))
    for part, lo, hi in [("shard_0000.npy", 0, starts[1]), ("shard_0001.npy", starts[1], starts[2]),
                         ("shard_0002.npy", starts[2], 300), ("shard_000[12].npy", starts[1], 300),
                         ("shard_{:04d}.npy", 0, 300)]:
        r = run(exe, "read", d / part)
        assert r.returncode == 0, (part, r.stdout, r.stderr)
        assert (f"verify:         OK ({(hi - lo) * 2} elements match seed 7 at rows [{lo}, {hi}) "
                f"of the dataset in {d})") in r.stdout, (part, r.stdout)
    # --seed names the values; _meta.json still tells the place.
    r = run(exe, "read", d / "shard_0001.npy", "--seed", "7")
    assert r.returncode == 0 and f"at rows [{starts[1]}, {starts[2]})" in r.stdout, r.stdout
    r = run(exe, "read", d / "shard_0001.npy", "--seed", "8")
    assert r.returncode == 1 and "verify:         FAILED" in r.stdout, r.stdout
    # Shards that are not consecutive: no one place.
    r = run(exe, "read", d / "shard_000[02].npy")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (f"verify:         skipped ({d}/shard_000[02].npy is a part of the dataset in {d} "
            "whose place in it cannot be told: its shards are not consecutive shards of the "
            "dataset (shard_0000.npy is followed by shard_0002.npy))") in r.stdout, r.stdout
    # One value changed in shard 1: that element differs, at its place.
    damaged = whole[starts[1]:starts[2]].copy()
    damaged[5, 1] += 1
    np.save(d / "shard_0001.npy", damaged)
    r = run(exe, "read", d / "shard_0001.npy")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"verify:         FAILED: 1 of {(starts[2] - starts[1]) * 2} elements differ" in r.stdout
    # A shard that lost rows is not the shard _meta.json records.
    np.save(d / "shard_0001.npy", whole[starts[1]:starts[2] - 1])
    r = run(exe, "read", d / "shard_0001.npy")
    assert r.returncode == 1, r.stdout + r.stderr
    assert (f"shardload read: verify: _meta.json says shard_0001.npy holds {rows[1]} rows, it "
            f"holds {rows[1] - 1}") in r.stderr, r.stderr



def test_read_of_a_part_of_a_dataset_written_to_object_storage_verifies_it_at_its_rows(
        bucket, cli) -> None:
    """`read s3://B/D/shard_0002.npy` of a dataset `write` made in s3:// (likewise over
    http(s)) was held to the whole dataset: "_meta.json says shape (20, 3), the shards hold
    (6, 3)", exit 1, and with --seed "FAILED", for intact objects. Whether a URL is the dataset
    or a part is told by where its _meta.json lies (below the key, or beside it); a part is
    verified at its rows in the dataset, as a local one is."""
    pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
    from test_http import serving as http_serving

    url = bucket.url("w")
    query = "?" + "&".join(f"{k}={v}" for k, v in bucket.options.items())
    assert run(cli, "write", "--shard-dir", url + query, "--num-shards", "4", "--shape", "20,3",
               "--dtype", "int16", "--seed", "9").returncode == 0
    rows = json.loads(bucket.get("w/_meta.json"))["rows"]
    starts = np.concatenate([[0], np.cumsum(rows)]).tolist()
    assert len(rows) == 4 and len(set(rows)) > 1 and starts[-1] == 20, rows
    # The oracle: write's values are those of each element's index in the whole array.
    whole = np.concatenate([np.load(io.BytesIO(bucket.get(f"w/shard_{i:04d}.npy")))
                            for i in range(4)])
    np.testing.assert_array_equal(whole.ravel(), synth("int16", 9, 0, 60))
    for part, lo, hi in [("shard_0002.npy", starts[2], starts[3]),
                         ("shard_000[23].npy", starts[2], 20), ("shard_0000.npy", 0, starts[1]),
                         ("shard_*.npy", 0, 20)]:
        r = run(cli, "read", f"{url}/{part}{query}")
        assert r.returncode == 0, (part, r.stdout, r.stderr)
        assert (f"verify:         OK ({(hi - lo) * 3} elements match seed 9 at rows [{lo}, {hi}) "
                f"of the dataset in {url}?") in r.stdout, (part, r.stdout)
    r = run(cli, "read", f"{url}/shard_0002.npy{query}", "--seed", "9")
    assert r.returncode == 0 and f"at rows [{starts[2]}, {starts[3]})" in r.stdout, r.stdout
    r = run(cli, "read", f"{url}/shard_0002.npy{query}", "--seed", "8")
    assert r.returncode == 1 and "verify:         FAILED" in r.stdout, r.stdout
    # The prefix itself is the dataset: its shape is _meta.json's.
    r = run(cli, "read", url + query)
    assert r.returncode == 0 and "verify:         OK (60 elements match seed 9)\n" in r.stdout, \
        r.stdout
    # The same objects over http(s): a file beside its _meta.json is a part too.
    with http_serving() as (store, base):
        for key in bucket.keys("w/"):
            store.put("/" + key, bucket.get(key))
        r = run(cli, "read", f"{base}/w/shard_0002.npy")
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert (f"verify:         OK ({(starts[3] - starts[2]) * 3} elements match seed 9 at rows "
                f"[{starts[2]}, {starts[3]}) of the dataset in {base}/w)") in r.stdout, r.stdout


@pytest.mark.parametrize("rows, why", [
    ([2**63 - 1, 1, 1], "rows: they add up to more than int64 holds"),
    ([], "rows: they add up to 0, where shape[0] is 300"),
    ([100, 100, 101], "rows: they add up to 301, where shape[0] is 300"),
])
def test_read_of_a_part_refuses_a_meta_json_whose_rows_do_not_add_up(
        tmp_path: pathlib.Path, cli, rows: list[int], why: str) -> None:
    """A part's place is summed from _meta.json's rows: a list that overflowed put it at
    negative rows, and an empty one fell back to a FAILED against the values of rows from 0.
    rows that do not add up to shape[0] make _meta.json damaged, named with why."""
    d = tmp_path / "ds"
    assert run(cli, "write", "--shard-dir", d, "--num-shards", "3", "--shape", "300,2",
               "--seed", "7").returncode == 0
    meta = json.loads((d / "_meta.json").read_text())
    meta["rows"] = rows
    (d / "_meta.json").write_text(json.dumps(meta))
    for source, seed in ((d / "shard_0001.npy", ()), (d, ()),
                         (d / "shard_0001.npy", ("--seed", "7"))):
        r = run(cli, "read", source, *seed)
        assert r.returncode == 1, (source, r.stdout, r.stderr)
        assert f"{d}/_meta.json: {why}: the file is damaged" in r.stdout + r.stderr \
            if "int64" not in why else f"{d}/_meta.json: {why}" in r.stdout + r.stderr, \
            (source, r.stdout, r.stderr)

def test_read_refuses_a_meta_json_link_whose_target_is_gone(tmp_path: pathlib.Path, cli) -> None:
    """A _meta.json kept elsewhere and linked into the directory, its target since moved: the
    verification was skipped as if there were none (exit 0). It fails naming the link."""
    d = tmp_path / "v"
    assert run(cli, "write", "--shard-dir", d, "--num-shards", "2", "--shape", "6,2",
               "--seed", "1").returncode == 0
    os.rename(d / "_meta.json", tmp_path / "meta.json")
    os.symlink(tmp_path / "meta.json", d / "_meta.json")
    assert run(cli, "read", d).returncode == 0
    os.rename(tmp_path / "meta.json", tmp_path / "moved.json")
    r = run(cli, "read", d)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{d / '_meta.json'}: a symbolic link whose target does not exist" in r.stderr, r.stderr


def _write_format(fmt: str, d: pathlib.Path, parts: list[np.ndarray]) -> list[str]:
    """Writes the parts as shards of one format with that format's own library; returns the
    format options `read` needs."""
    d.mkdir(parents=True)
    for i, a in enumerate(parts):
        stem = d / f"shard_{i:04d}"
        if fmt == "hdf5":
            with h5py.File(f"{stem}.h5", "w") as f:
                # Chunked and compressed; unlimited rows so that short shards can be chunked.
                f.create_dataset("x", data=a, chunks=(7, a.shape[1]), maxshape=(None, a.shape[1]),
                                 compression="gzip")
        elif fmt == "zarr":
            z = zarr.create_array(f"{stem}.zarr", shape=a.shape, dtype=a.dtype,
                                  chunks=(5, a.shape[1]))
            z[:] = a
        elif fmt in ("parquet", "arrow"):
            table = pa.table({f"c{j}": a[:, j] for j in range(a.shape[1])})
            if fmt == "parquet":
                pq.write_table(table, f"{stem}.parquet", row_group_size=6)
            else:
                with pa.ipc.new_file(f"{stem}.arrow", table.schema) as w:
                    w.write_table(table, max_chunksize=6)
        elif fmt == "raw":
            a.astype(a.dtype.newbyteorder(">")).tofile(f"{stem}.bin")
        else:
            np.save(f"{stem}.npy", a)
    if fmt == "raw":
        return ["--format", "raw", "--dtype", ">" + parts[0].dtype.str[1:],
                "--trailing-shape", str(parts[0].shape[1]), "--pattern", "shard_{:04d}.bin"]
    if fmt == "npy":
        return []
    pattern = {"hdf5": "h5", "zarr": "zarr", "parquet": "parquet", "arrow": "arrow"}[fmt]
    return ["--format", fmt, "--pattern", f"shard_{{:04d}}.{pattern}"]


@pytest.mark.parametrize("fmt", ["npy", "raw", "hdf5", "zarr", "parquet", "arrow"])
def test_read_every_format_and_verify(tmp_path: pathlib.Path, cli, fmt: str) -> None:
    # The values of `shardload write` (seed 3) written by each format's own library, so the
    # parallel verification checks every element the CLI loaded.
    rows, cols, seed = [13, 1, 0, 29, 8], 3, 3
    flat = synth("float32", seed, 0, sum(rows) * cols).reshape(sum(rows), cols)
    parts = np.split(flat, np.cumsum(rows)[:-1])
    d = tmp_path / fmt
    opts = _write_format(fmt, d, parts)
    # What `shardload write` writes: only a _meta.json with its keys is taken as its own.
    (d / "_meta.json").write_text(json.dumps({"seed": seed, "dtype": "float32",
                                              "shape": [sum(rows), cols],
                                              "num_shards": len(rows), "rows": rows}))
    r = run(cli, "read", "--shard-dir", d, "--overdecompose", "2", *opts)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "shape:          (51, 3)" in r.stdout
    assert f"verify:         OK ({sum(rows) * cols} elements match seed {seed})" in r.stdout
    # The data of another seed is found out, in every format.
    wrong = run(cli, "read", "--shard-dir", d, "--seed", str(seed + 1), *opts)
    assert wrong.returncode == 1 and "verify:         FAILED" in wrong.stdout


def test_read_refuses_a_malformed_meta_json_naming_it(tmp_path: pathlib.Path, cli) -> None:
    d = tmp_path / "set"
    run(cli, "write", "--shard-dir", d, "--num-shards", "2", "--shape", "10", "--seed", "1")
    for text, needle in [('{"seed": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
                          "JSON nesting deeper than 64 levels"),
                         ('{"seed": 99999999999999999999999, "dtype": "float64", '
                          '"shape": [10], "num_shards": 2, "rows": [5, 5]}',
                          "seed: expected an integer"),
                         ('{"seed": 1, "dtype": "int32"' + " " * 1_000_000, "not valid JSON")]:
        (d / "_meta.json").write_text(text)
        r = run(cli, "read", "--shard-dir", d)
        assert r.returncode == 1 and str(d / "_meta.json") in r.stderr and needle in r.stderr, \
            r.stderr
