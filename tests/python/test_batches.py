"""shardload.batches: a dataset in batches of consecutive rows, each loaded under Legate (two
CPUs), the next ones read ahead. Batches put back together equal the numpy oracle; a read
error surfaces when its batch is handed out, naming the file; a dataset larger than Legate's
memory iterates to the end where load() of it is refused."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import h5py  # before cupynumeric: see "Which HDF5" in docs/formats.md
import numpy as np
import pytest

import shardload
from test_load_formats import dataset, write

import cupynumeric as cn  # noqa: E402


def collect(it) -> list[np.ndarray]:
    out = []
    for batch in it:
        assert isinstance(batch, cn.ndarray)
        out.append(np.asarray(batch))
        del batch
    return out


def check_batches(got: list[np.ndarray], expected: np.ndarray, rows_per_batch: int) -> None:
    total = expected.shape[0]
    assert len(got) == -(-total // rows_per_batch)
    for i, b in enumerate(got):
        lo, hi = i * rows_per_batch, min(total, (i + 1) * rows_per_batch)
        assert b.shape == (hi - lo,) + expected.shape[1:], (i, b.shape)
        assert b.dtype == expected.dtype
        np.testing.assert_array_equal(b, expected[lo:hi], err_msg=f"batch {i}")


@pytest.mark.parametrize("fmt", ["npy", "raw", "hdf5", "parquet", "zarr2", "zarr3"])
def test_every_format_in_batches_equals_the_data(tmp_path: pathlib.Path, fmt: str) -> None:
    arrays = dataset(21)  # shards of 1500, 0, 777, 2049 and 13 rows
    expected = np.concatenate(arrays)
    opts = write(fmt, tmp_path / fmt, arrays)
    # 700 rows: batches span shard boundaries and the empty shard; 4349 = total - 1 leaves a
    # last batch of one row.
    for rows_per_batch, prefetch, k in ((700, 1, 1), (1000, 0, 3), (4349, 2, 1)):
        it = shardload.batches(tmp_path / fmt, rows_per_batch, prefetch=prefetch,
                               overdecompose=k, **opts)
        assert len(it) == -(-expected.shape[0] // rows_per_batch)
        check_batches(collect(it), expected, rows_per_batch)


def test_awkward_shapes(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(5)
    parts = [rng.integers(-1000, 1000, size=(n, 2, 3), dtype=np.int32) for n in (0, 4, 0, 1, 6, 0)]
    for i, a in enumerate(parts):
        np.save(tmp_path / f"shard_{i:04d}.npy", a)
    expected = np.concatenate(parts)  # 11 rows of 2 x 3
    layout = shardload.discover(tmp_path)
    for rows_per_batch in (1, 2, 3, 5, 10, 11, 12, 10**6, 2**63 - 1, 2**70):
        for prefetch in (0, 1, 4, 100, 2**63 - 1, 2**70):
            got = collect(shardload.batches(layout, rows_per_batch, prefetch=prefetch))
            check_batches(got, expected, min(rows_per_batch, 11))


def test_astype_and_a_numpy_integer_count(tmp_path: pathlib.Path) -> None:
    a = np.arange(25, dtype=np.float64).reshape(5, 5) / 2
    np.save(tmp_path / "shard_0000.npy", a)
    got = collect(shardload.batches(tmp_path, np.int64(2), astype=np.int16))
    assert [b.dtype for b in got] == [np.int16] * 3
    np.testing.assert_array_equal(np.concatenate(got), a.astype(np.int16))


def test_empty_datasets(tmp_path: pathlib.Path) -> None:
    (tmp_path / "none").mkdir()
    np.save(tmp_path / "none" / "shard_0000.npy", np.zeros((0, 4), np.float32))
    np.save(tmp_path / "none" / "shard_0001.npy", np.zeros((0, 4), np.float32))
    it = shardload.batches(tmp_path / "none", 3)
    assert len(it) == 0 and list(it) == [] and list(it) == []
    # Rows without bytes: batches of shape (n, 0), nothing read.
    (tmp_path / "flat").mkdir()
    np.save(tmp_path / "flat" / "shard_0000.npy", np.zeros((5, 0), np.float32))
    got = collect(shardload.batches(tmp_path / "flat", 2))
    assert [b.shape for b in got] == [(2, 0), (2, 0), (1, 0)]


@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_an_error_in_batch_3_is_raised_when_batch_3_is_handed_out(
        tmp_path: pathlib.Path, prefetch: int) -> None:
    parts = [np.arange(10.0) + 100 * i for i in range(6)]
    paths = []
    for i, a in enumerate(parts):
        paths.append(tmp_path / f"shard_{i:04d}.npy")
        np.save(paths[-1], a)
    layout = shardload.discover(tmp_path)
    np.save(paths[3], np.arange(7.0))  # changed after discovery: only a read can tell
    it = shardload.batches(layout, 10, prefetch=prefetch)
    for i in range(3):
        np.testing.assert_array_equal(np.asarray(next(it)), parts[i])
    with pytest.raises(shardload.ShardReadError) as e:
        next(it)
    assert e.value.filename == str(paths[3]), str(e.value)
    message = str(e.value)
    assert "batch 3 (rows [30, 40))" in message and "changed since discovery" in message, message
    assert str(paths[3]) in message
    # The iteration ends with its error.
    assert list(it) == []


def test_a_damaged_zarr_chunk_names_the_chunk(tmp_path: pathlib.Path) -> None:
    arrays = dataset(12)
    opts = write("zarr3", tmp_path / "z", arrays)
    chunk = tmp_path / "z" / "shard_0003.zarr" / "c" / "1" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-3])
    it = shardload.batches(tmp_path / "z", 1000, prefetch=2, **opts)
    expected = np.concatenate(arrays)
    got = []
    with pytest.raises(shardload.ShardReadError) as e:
        for batch in it:
            got.append(np.asarray(batch))
            del batch
    # Shard 3 holds global rows [2277, 4326): batch 2 (rows [2000, 3000)) reads its chunk 1.
    assert len(got) == 2
    check_batches(got, expected[:2000], 1000)
    assert str(chunk) in str(e.value) and "batch 2 (rows [2000, 3000))" in str(e.value)


def test_arguments_are_checked_when_called(tmp_path: pathlib.Path) -> None:
    np.save(tmp_path / "shard_0000.npy", np.arange(10.0))
    cases = [
        ({"rows_per_batch": 0}, ValueError, "rows_per_batch: expected an int >= 1, found 0"),
        ({"rows_per_batch": -5}, ValueError, "rows_per_batch"),
        ({"rows_per_batch": 1.5}, TypeError, "rows_per_batch: expected an int, found float"),
        ({"rows_per_batch": True}, TypeError, "rows_per_batch: expected an int, found bool"),
        ({"rows_per_batch": "3"}, TypeError, "rows_per_batch"),
        ({"rows_per_batch": None}, TypeError, "rows_per_batch"),
        ({"rows_per_batch": 2, "prefetch": -1}, ValueError,
         "prefetch: expected an int >= 0, found -1"),
        ({"rows_per_batch": 2, "prefetch": 1.0}, TypeError, "prefetch"),
        ({"rows_per_batch": 2, "prefetch": None}, TypeError, "prefetch"),
        ({"rows_per_batch": 2, "overdecompose": 0}, ValueError, "overdecompose"),
        ({"rows_per_batch": 2, "astype": "nope"}, ValueError, "astype"),
        ({"rows_per_batch": 2, "astype": 3}, TypeError, "astype"),
        ({"rows_per_batch": 2, "format": 3}, TypeError, "format"),
    ]
    for kwargs, error, text in cases:
        with pytest.raises(error) as e:
            shardload.batches(tmp_path, **kwargs)
        assert text in str(e.value), (kwargs, str(e.value))
    with pytest.raises(TypeError, match="dtype cannot be passed with a Layout"):
        shardload.batches(shardload.discover(tmp_path), 2, dtype="f8")
    with pytest.raises(TypeError, match="source"):
        shardload.batches(3, 2)
    with pytest.raises(shardload.SourceNotFoundError):
        shardload.batches(tmp_path / "missing", 2)


RUNNER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import h5py  # before cupynumeric
    import shardload
    source, rows_per_batch = sys.argv[1], int(sys.argv[2])
    out = {}
    try:
        shardload.load(source)
        out["load"] = "loaded"
    except shardload.OutOfMemoryError as e:
        out["load"] = str(e)
    try:
        shardload.batches(source, int(sys.argv[3]))
        out["big"] = "iterated"
    except shardload.OutOfMemoryError as e:
        out["big"] = str(e)
    total = 0.0
    count = 0
    it = shardload.batches(source, rows_per_batch, prefetch=1)
    for batch in it:
        total += float(batch.sum())
        count += 1
        del batch
    out["sum"], out["batches"] = total, count
    print("RESULT " + json.dumps(out))
    """
)


def test_a_dataset_larger_than_legate_memory_iterates(tmp_path: pathlib.Path) -> None:
    sysmem_mib = 128
    # 4 x the memory Legate has, in 8 shards of float64 (each shard row 1 KiB).
    rows_per_shard = sysmem_mib * 4 * 1024 // 8
    d = tmp_path / "big"
    d.mkdir()
    expected = 0.0
    for i in range(8):
        a = np.full((rows_per_shard, 128), float(i + 1), dtype=np.float64)
        a[:, 0] = np.arange(rows_per_shard)
        np.save(d / f"shard_{i:04d}.npy", a)
        expected += float(a.sum())
        del a
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    env = dict(os.environ)
    env["LEGATE_CONFIG"] = f"--cpus 2 --utility 1 --gpus 0 --sysmem {sysmem_mib}"
    rows_per_batch = 16 * 1024  # 16 MiB batches
    # 60 MiB batches: one fits, two (prefetch=1) do not.
    too_big = 60 * 1024
    r = subprocess.run([sys.executable, str(script), str(d), str(rows_per_batch), str(too_big)],
                       env=env,
                       capture_output=True, text=True, timeout=600)
    lines = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    assert r.returncode == 0 and lines, f"the process died (rc {r.returncode}):\n" + \
        r.stdout[-3000:] + r.stderr[-3000:]
    import json
    out = json.loads(lines[0][len("RESULT "):])
    assert "the dataset needs" in out["load"], out
    assert "2 batches (prefetch + 1)" in out["big"] and "--sysmem" in out["big"], out
    assert out["batches"] == 8 * rows_per_shard // rows_per_batch
    assert out["sum"] == pytest.approx(expected, rel=1e-12)


def test_errors_name_odd_and_long_paths_whole(tmp_path: pathlib.Path) -> None:
    # Glob characters, a name that is not UTF-8, and a path of over 2,000 bytes: the error
    # record of the batch must carry the whole path.
    deep = tmp_path
    for i in range(9):
        deep = deep / (f"{i}" + "d" * 240)
    odd = os.fsencode(deep / "we[i]rd*{x}?") + b"-\xff"
    os.makedirs(odd)
    paths = []
    for i in range(3):
        paths.append(odd + b"/shard_%04d.npy" % i)
        with open(paths[-1], "wb") as f:
            np.save(f, np.arange(5.0) + i)
    layout = shardload.discover(odd)
    with open(paths[1], "wb") as f:
        np.save(f, np.arange(6.0))
    it = shardload.batches(layout, 5)
    np.testing.assert_array_equal(np.asarray(next(it)), np.arange(5.0))
    with pytest.raises(shardload.ShardReadError) as e:
        next(it)
    assert len(paths[1]) > 2000
    assert e.value.filename == os.fsdecode(paths[1]), str(e.value)[:200]
    # Whole, with the byte that is not UTF-8 written as \xff.
    assert paths[1].decode("utf-8", "backslashreplace") in str(e.value)
