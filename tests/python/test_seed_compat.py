"""Data the seed recipe's users already have: raw shards described by its sidecar
`shard_meta.json` (rows_per_shard, dtype, trailing_shape), and a `_meta.json` that another
tool wrote, which `shardload read` must not verify against its own value formula."""

from __future__ import annotations

import json
import pathlib
import subprocess

import numpy as np
import pytest

import shardload

ROWS = [6, 0, 4, 9]


def raw_set(d: pathlib.Path, dtype: str = "<f4", trailing: tuple[int, ...] = (3,),
            rows: list[int] = ROWS) -> np.ndarray:
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    parts = [(rng.standard_normal((r, *trailing)) * 100).astype(dtype) for r in rows]
    for i, a in enumerate(parts):
        a.tofile(d / f"shard_{i:04d}.bin")
    return np.concatenate(parts).astype(np.dtype(dtype).newbyteorder("="))


def seed_meta(d: pathlib.Path, **fields: object) -> pathlib.Path:
    p = d / "shard_meta.json"
    p.write_text(json.dumps(fields))
    return p


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "int16", "<u8", "float64"])
def test_the_seed_sidecar_describes_raw_shards(tmp_path: pathlib.Path, dtype: str) -> None:
    want = raw_set(tmp_path, dtype, (3,))
    seed_meta(tmp_path, rows_per_shard=ROWS, dtype=dtype, trailing_shape=[3])
    layout = shardload.discover(tmp_path)  # no format=, no dtype=: the sidecar tells
    assert layout.format == "raw" and layout.shard_rows == ROWS
    assert layout.dtype == np.dtype(dtype).newbyteorder("=")
    assert layout.shape == (sum(ROWS), 3)
    np.testing.assert_array_equal(layout.read(), want)


def test_one_int_gives_the_rows_of_every_shard(tmp_path: pathlib.Path) -> None:
    want = raw_set(tmp_path, "int32", (2, 2), [5, 5, 5])
    seed_meta(tmp_path, rows_per_shard=5, dtype="int32", trailing_shape=[2, 2])
    layout = shardload.discover(tmp_path)
    assert layout.shard_rows == [5, 5, 5]
    np.testing.assert_array_equal(layout.read(), want)
    # The int is a check on each file's size, as a list is.
    seed_meta(tmp_path, rows_per_shard=4, dtype="int32", trailing_shape=[2, 2])
    with pytest.raises(shardload.LayoutError, match=r"shard_meta\.json says 4 rows"):
        shardload.discover(tmp_path)


def test_shardload_json_wins_over_the_seed_sidecar(tmp_path: pathlib.Path) -> None:
    want = raw_set(tmp_path, "<f4", (3,))
    seed_meta(tmp_path, rows_per_shard=ROWS, dtype="int8", trailing_shape=[12])
    (tmp_path / "shardload.json").write_text(json.dumps({"dtype": "<f4", "shape": [3]}))
    np.testing.assert_array_equal(shardload.discover(tmp_path).read(), want)


@pytest.mark.parametrize("fields, needle", [
    ({"rows_per_shard": ROWS, "dtype": "<f4", "trailing_shape": [3], "generator": "np"},
     "unknown field 'generator' (expected dtype, trailing_shape, rows_per_shard)"),
    ({"rows_per_shard": "6", "dtype": "<f4", "trailing_shape": [3]},
     "rows_per_shard: expected a list of rows per shard or one int for every shard"),
    ({"rows_per_shard": -1, "dtype": "<f4", "trailing_shape": [3]}, "rows_per_shard"),
    ({"rows_per_shard": ROWS, "dtype": "float33", "trailing_shape": [3]}, "dtype"),
    ({"rows_per_shard": ROWS, "dtype": "<f4", "trailing_shape": [-3]}, "trailing_shape"),
    ({"rows_per_shard": ROWS, "dtype": 4, "trailing_shape": [3]}, "dtype: expected"),
    ({"rows_per_shard": [6, 0], "dtype": "<f4", "trailing_shape": [3]},
     "rows_per_shard"),
])
def test_the_seed_sidecar_is_read_strictly_naming_file_and_field(
        tmp_path: pathlib.Path, fields: dict, needle: str) -> None:
    raw_set(tmp_path, "<f4", (3,))
    p = seed_meta(tmp_path, **fields)
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(tmp_path)
    assert str(p) in str(e.value) and needle in str(e.value), str(e.value)


def test_a_seed_sidecar_that_is_not_json_names_the_file(tmp_path: pathlib.Path) -> None:
    raw_set(tmp_path)
    (tmp_path / "shard_meta.json").write_text('{"dtype": "<f4",')
    with pytest.raises(shardload.LayoutError, match="shard_meta.json"):
        shardload.discover(tmp_path)


def run(cli: pathlib.Path, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("meta", [
    # What the seed's reference script writes beside its shards.
    {"seed": 0, "num_shards": 2, "rows_per_shard": [5, 5], "dtype": "float64"},
    # shardload write's keys plus one more is not shardload write's either.
    {"seed": 1, "dtype": "float64", "shape": [10], "num_shards": 2, "rows": [5, 5],
     "generator": "numpy.random.default_rng"},
    {},
])
def test_read_skips_verification_against_a_meta_json_it_did_not_write(
        tmp_path: pathlib.Path, cli: pathlib.Path, meta: dict) -> None:
    d = tmp_path / "set"
    d.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        np.save(d / f"shard_{i:04d}.npy", rng.standard_normal(5))
    (d / "_meta.json").write_text(json.dumps(meta))
    r = run(cli, "read", d)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"verify:         skipped (_meta.json in {d} was not written by shardload write)" \
        in r.stdout, r.stdout
    # Its own _meta.json still verifies; a seed given on the command line is still checked
    # (and fails here: these are not shardload's values).
    own = tmp_path / "own"
    assert run(cli, "write", "--shard-dir", own, "--num-shards", "2", "--shape", "10",
               "--seed", "4", "--dtype", "float64").returncode == 0
    assert "verify:         OK" in run(cli, "read", own).stdout
    checked = run(cli, "read", d, "--seed", "4")
    assert checked.returncode == 1 and "verify:         FAILED" in checked.stdout
