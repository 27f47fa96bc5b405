"""shardload.load under Legate (LEGATE_CONFIG with two CPUs) against numpy."""

from __future__ import annotations

import os
import pathlib
import subprocess

import numpy as np
import pytest

import shardload
from conftest import DTYPES, random_array
from test_core import write_shards

import cupynumeric as cn  # noqa: E402  (a pinned dependency: its absence must fail, not skip)


def load_and_compare(directory: pathlib.Path, arrays: list[np.ndarray], k: int) -> None:
    out = shardload.load(directory, overdecompose=k)
    expected = np.concatenate(arrays)
    assert isinstance(out, cn.ndarray)
    assert out.shape == expected.shape and out.dtype == expected.dtype
    np.testing.assert_array_equal(np.asarray(out), expected)


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("seed", range(6))
def test_random_layouts(tmp_path: pathlib.Path, seed: int, k: int) -> None:
    rng = np.random.default_rng(100 + seed)
    for case in range(4):
        d = tmp_path / f"case{case}"
        n = int(rng.integers(1, 51))
        rows = [0 if rng.random() < 0.2 else int(rng.integers(0, 40)) for _ in range(n)]
        trailing = tuple(int(x) for x in rng.integers(1, 4, size=int(rng.integers(0, 4))))
        dtype = DTYPES[int(rng.integers(0, len(DTYPES)))]
        arrays = [random_array(rng, (r, *trailing), dtype) for r in rows]
        write_shards(d, arrays, big=list(rng.random(n) < 0.3), fortran=list(rng.random(n) < 0.3))
        load_and_compare(d, arrays, k)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype(tmp_path: pathlib.Path, dtype: str) -> None:
    rng = np.random.default_rng(7)
    arrays = [random_array(rng, (r, 3), dtype) for r in (17, 0, 5, 40)]
    write_shards(tmp_path, arrays, big=[True, False, False, True], fortran=[False, True, True, False])
    load_and_compare(tmp_path, arrays, 1)


def test_downstream_math(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(8)
    arrays = [rng.standard_normal((r, 4)) for r in (1000, 3, 777, 0, 2048)]
    write_shards(tmp_path, arrays)
    a = shardload.load(tmp_path, overdecompose=3)
    expected = np.concatenate(arrays)
    np.testing.assert_allclose(float(a.sum()), expected.sum(), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(a.mean(axis=0)), expected.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(np.asarray((a * 2 + 1)[5:10]), expected[5:10] * 2 + 1)


def test_sources_and_empty(tmp_path: pathlib.Path) -> None:
    arrays = [np.arange(i * 3, dtype=np.int32).reshape(i, 3) for i in range(6)]
    write_shards(tmp_path / "p", arrays, name="part-{:05d}.npy")
    expected = np.concatenate(arrays)
    np.testing.assert_array_equal(
        np.asarray(shardload.load(tmp_path / "p", pattern="part-{:05d}.npy")), expected)
    np.testing.assert_array_equal(
        np.asarray(shardload.load(str(tmp_path / "p" / "part-*.npy"))), expected)
    paths = sorted((tmp_path / "p").glob("part-*.npy"))
    np.testing.assert_array_equal(np.asarray(shardload.load(paths)), expected)
    layout = shardload.discover(tmp_path / "p", pattern="part-{:05d}.npy")
    np.testing.assert_array_equal(np.asarray(shardload.load(layout)), expected)
    write_shards(tmp_path / "e", [np.zeros((0, 2), np.float32)] * 3)
    empty = shardload.load(tmp_path / "e")
    assert empty.shape == (0, 2) and empty.dtype == np.float32


def test_bad_layout_then_good_load(tmp_path: pathlib.Path) -> None:
    write_shards(tmp_path / "bad", [np.zeros(3, np.float32), np.zeros(3, np.float64)])
    with pytest.raises(shardload.LayoutError, match="shard_0001.npy: dtype float64 differs"):
        shardload.load(tmp_path / "bad")
    with pytest.raises(ValueError, match="overdecompose"):
        shardload.load(tmp_path / "bad", overdecompose=0)
    arrays = [np.arange(10.0)]
    write_shards(tmp_path / "good", arrays)
    load_and_compare(tmp_path / "good", arrays, 1)


def test_truncated_after_discovery_raises_in_the_caller(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(9)
    arrays = [rng.standard_normal((500, 3)) for _ in range(4)]
    write_shards(tmp_path, arrays)
    layout = shardload.discover(tmp_path)
    victim = tmp_path / "shard_0002.npy"
    os.truncate(victim, victim.stat().st_size - 24)
    with pytest.raises(shardload.ShardReadError) as e:
        shardload.load(layout, overdecompose=3)
    assert isinstance(e.value, OSError)
    assert str(victim) in str(e.value) and "rows [" in str(e.value)
    # The same process goes on loading.
    write_shards(tmp_path, arrays)
    load_and_compare(tmp_path, arrays, 3)


def test_one_hundred_thousand_shards(tmp_path: pathlib.Path, cli) -> None:
    out = tmp_path / "many"
    subprocess.run([cli, "write", "--shard-dir", out, "--num-shards", "100000", "--shape",
                    "300000,2", "--dtype", "int32", "--seed", "5"], check=True,
                   capture_output=True)
    a = shardload.load(out, overdecompose=2)
    assert a.shape == (300000, 2)
    from conftest import synth
    np.testing.assert_array_equal(np.asarray(a).reshape(-1), synth("int32", 5, 0, 600000))


@pytest.mark.parametrize("name", ["a#1", "q?m", "h#?x#", "#lead", "?lead"])
def test_a_local_name_holding_a_hash_or_a_question_mark_is_that_file(tmp_path, monkeypatch, name):
    """'#' and '?' are a URL's delimiters but ordinary characters of a file name: a local
    file or directory so named loads as spelled (one file, a list, the directory, its
    numbered pattern, and relative to the working directory)."""
    x = np.arange(24.0).reshape(12, 2)
    d = tmp_path / f"d{name}"
    d.mkdir()
    np.save(d / f"shard_{name}.npy", x[:5])
    np.save(d / "shard_0000.npy", x[:7])
    np.save(d / "shard_0001.npy", x[7:])
    np.testing.assert_array_equal(np.asarray(shardload.load(d / f"shard_{name}.npy")), x[:5])
    np.testing.assert_array_equal(np.asarray(shardload.load(str(d / f"shard_{name}.npy"))), x[:5])
    np.testing.assert_array_equal(
        np.asarray(shardload.load([str(d / f"shard_{name}.npy"), str(d / "shard_0000.npy")])),
        np.concatenate([x[:5], x[:7]]))
    np.testing.assert_array_equal(np.asarray(shardload.load(str(d))), x)
    np.testing.assert_array_equal(
        np.asarray(shardload.load(str(d), pattern="shard_{:04d}.npy")), x)
    monkeypatch.chdir(d)
    np.testing.assert_array_equal(np.asarray(shardload.load(f"shard_{name}.npy")), x[:5])
