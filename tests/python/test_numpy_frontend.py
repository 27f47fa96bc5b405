"""shardload.numpy.load: a sharded dataset into one numpy array on the engine's threads, no
runtime. Compared with numpy, pyarrow, h5py and zarr-python on awkward data; faults reach the
caller as the typed error naming the file."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import threading

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr

import shardload
import shardload.numpy as snp
from conftest import random_array

# Ragged shards, empty ones among them, and rows that the threads' tiles cut across.
ROWS = [1000, 0, 3, 4096, 1, 0, 2500]


def write_npy(tmp_path, rng, trailing=(3, 2), dtype="float32"):
    parts = [random_array(rng, (r, *trailing), dtype) for r in ROWS]
    d = tmp_path / "npy"
    d.mkdir()
    for i, a in enumerate(parts):
        np.save(d / f"shard_{i:04d}.npy", a)
    return d, np.concatenate(parts)


@pytest.mark.parametrize("dtype", ["float32", "int16", "bool", "complex64", ">f8"])
@pytest.mark.parametrize("threads", [1, 2, 7])
def test_npy_equals_numpy_concatenate(tmp_path, dtype, threads):
    rng = np.random.default_rng(len(dtype) + threads)
    d, want = write_npy(tmp_path, rng, dtype=dtype)
    got, info = snp.load(d, threads=threads, info=True)
    assert got.dtype == want.dtype.newbyteorder("=") and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)
    assert info.target == "host" and info.total_rows == sum(ROWS)
    assert 1 <= info.processors <= threads and info.tiles >= info.processors
    assert info.bytes == got.nbytes and info.startup_s == 0.0


def test_row_range_and_astype_match_numpy(tmp_path):
    d, want = write_npy(tmp_path, np.random.default_rng(1))
    for lo, hi in [(0, 0), (999, 1004), (1003, 7600), (0, sum(ROWS)), (7599, 7600)]:
        got = snp.load(d, row_range=(lo, hi), astype="float64")
        np.testing.assert_array_equal(got, want[lo:hi].astype("float64"))
        assert got.dtype == np.float64
    got = snp.load(d, row_range=slice(5, 20), astype=np.int8)  # numpy's cast: truncation
    np.testing.assert_array_equal(got, want[5:20].astype(np.int8))
    assert snp.load(d, astype=np.longdouble).dtype == np.longdouble  # no Legate type needed


def test_out_is_filled_in_place_and_checked(tmp_path):
    d, want = write_npy(tmp_path, np.random.default_rng(10))
    out = np.full(want.shape, -1, want.dtype)
    assert snp.load(d, out=out, threads=2) is out
    np.testing.assert_array_equal(out, want)
    cast = np.zeros((20, *want.shape[1:]), np.float64)
    assert snp.load(d, row_range=(3, 23), astype="float64", out=cast) is cast
    np.testing.assert_array_equal(cast, want[3:23].astype(np.float64))
    for bad, message in [(np.zeros(want.shape, np.float64),
                          "out= has dtype float64, expected float32"),
                         (np.zeros((5, 3, 2), want.dtype), r"shape \(5, 3, 2\)"),
                         (np.zeros(want.shape[::-1], want.dtype).T, "out= is not C-contiguous")]:
        with pytest.raises(ValueError, match=message):
            snp.load(d, out=bad)
    frozen = np.zeros_like(want)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="out= is not writable"):
        snp.load(d, out=frozen)
    with pytest.raises(TypeError, match="out="):
        snp.load(d, out=[0])


@pytest.mark.parametrize("spelling", ["np.float32", "'<f4'", "unpickled", "deepcopy",
                                      "newbyteorder('=')", "'>f4' made native"])
def test_out_of_an_equal_dtype_that_is_another_object_is_filled(tmp_path, spelling: str):
    """An out= whose dtype equals the result's by value but is another dtype object (sent
    pickled from another process, deep-copied, a big-endian file's dtype made native) was
    refused by the C++ check, which compared dtypes by identity: "host_load: expected a
    writable C-contiguous float32 array", for exactly such an array (hostile pass 31, A3).
    numpy, the oracle, calls the dtypes equal; the load fills out= as np.load would read."""
    import copy
    import pickle

    a = np.arange(12, dtype="<f4").reshape(4, 3)
    np.save(tmp_path / "shard_0000.npy", a)
    dtype = {"np.float32": np.dtype(np.float32), "'<f4'": np.dtype("<f4"),
             "unpickled": pickle.loads(pickle.dumps(np.dtype("f4"))),
             "deepcopy": copy.deepcopy(np.dtype("f4")),
             "newbyteorder('=')": np.dtype("f4").newbyteorder("="),
             "'>f4' made native": np.dtype(">f4").newbyteorder("=")}[spelling]
    assert dtype == np.float32  # numpy's equality: the result's dtype
    out = np.full((4, 3), -1, dtype)
    assert snp.load(tmp_path, out=out) is out
    np.testing.assert_array_equal(out, np.load(tmp_path / "shard_0000.npy"))
    for astype in ("float32", "float64"):  # astype= naming the stored type, and a cast
        want = a.astype(astype)
        out = np.full((4, 3), -1, pickle.loads(pickle.dumps(np.dtype(astype))))
        assert snp.load(tmp_path, out=out, astype=astype) is out
        np.testing.assert_array_equal(out, want)


def test_the_core_fill_still_refuses_an_out_of_the_other_byte_order(tmp_path):
    """By value, dtypes of another byte order differ: the core's fill (below the front end's
    own check) refuses a big-endian out= for little-endian float32 rows rather than fill it
    with bytes it would read as other values."""
    from shardload import _core

    np.save(tmp_path / "shard_0000.npy", np.arange(12, dtype="<f4").reshape(4, 3))
    layout = shardload.discover(tmp_path)
    big = np.zeros((4, 3), ">f4")
    with pytest.raises(ValueError, match="expected a writable C-contiguous float32 array"):
        _core.host_load(layout, big)
    native = np.zeros((4, 3), np.dtype(">f4").newbyteorder("="))
    _core.host_load(layout, native)
    np.testing.assert_array_equal(native, np.arange(12, dtype="<f4").reshape(4, 3))


def _out_over_a_shard(tmp_path, how):
    """A dataset and an ``out=`` array that maps (MAP_SHARED) one of its files, as ``how``
    says; returns (source, row_range, out, the mapped file)."""
    n = 200_000
    d = tmp_path / "d"
    d.mkdir()
    if how.startswith("a Zarr chunk"):
        # Its store in a directory whose name holds a newline (/proc/self/maps writes it as
        # \012), or the chunk mapped through a hard link: refused by identity, not by name.
        if how == "a Zarr chunk, its directory's name holding a newline":
            d = tmp_path / "new\nline"
            d.mkdir()
        z = zarr.create_array(d / "shard_0000.zarr", shape=(n,), chunks=(n,), dtype="int64",
                              zarr_format=2, compressors=None, fill_value=0)
        z[:] = np.arange(n)
        mapped = d / "shard_0000.zarr" / "0"
        if how == "a Zarr chunk through a hard link":
            os.link(mapped, tmp_path / "chunk")
            mapped = tmp_path / "chunk"
        if how == "a Zarr chunk that is a link into a pool":
            os.rename(mapped, tmp_path / "pooled")
            os.symlink(tmp_path / "pooled", mapped)
            mapped = tmp_path / "pooled"
        if how == "a Zarr chunk under a linked directory":
            # The store itself reached through a link; its chunk mapped by its real path.
            os.rename(d / "shard_0000.zarr", tmp_path / "pool.zarr")
            os.symlink(tmp_path / "pool.zarr", d / "shard_0000.zarr")
            mapped = tmp_path / "pool.zarr" / "0"
        return d, (0, n), np.memmap(mapped, np.int64, "r+", shape=(n,)), mapped
    if how == "an HDF5 dataset's external file":
        mapped = tmp_path / "external.bin"
        np.arange(n, dtype=np.int64).tofile(mapped)
        with h5py.File(d / "shard_0000.h5", "w") as f:
            f.create_dataset("x", shape=(n,), dtype="<i8", external=[(str(mapped), 0, n * 8)])
        out = np.memmap(mapped, np.int64, "r+", shape=(n,))[1000:]
        out[:] = np.array(out)
        return d, (0, n - 1000), out, mapped
    if how == "an HDF5 virtual dataset's source file":
        # The shard's /v maps ../source.h5's /y: HDF5 opens that file itself when it reads.
        mapped = tmp_path / "source.h5"
        with h5py.File(mapped, "w") as f:
            offset = f.create_dataset("y", data=np.arange(n, dtype="<i8")).id.get_offset()
        with h5py.File(d / "shard_0000.h5", "w") as f:
            layout = h5py.VirtualLayout(shape=(n,), dtype="<i8")
            layout[:] = h5py.VirtualSource("../source.h5", "y", shape=(n,))
            f.create_virtual_dataset("v", layout, fillvalue=-1)
        out = np.memmap(mapped, np.int64, "r+", offset=offset + 8000, shape=(n - 1000,))
        out[:] = np.array(out)
        return d, (0, n - 1000), out, mapped
    np.save(d / "shard_0000.npy", np.arange(n, dtype=np.int64))
    mapped = d / "shard_0000.npy"
    if how == "a hard link":
        os.link(mapped, tmp_path / "link.npy")
        mapped = tmp_path / "link.npy"
    whole = np.load(mapped, mmap_mode="r+")
    if how == "rows shifted":
        # The load reads rows [0, n - 1000) into the file's rows [1000, n): a row's bytes are
        # overwritten before a later tile reads them.
        out = whole[1000:]
        out[:] = np.array(out)  # pages already dirty: no write moves the file's mtime
        return d, (0, n - 1000), out, mapped
    return d, (0, n), whole, mapped


@pytest.mark.parametrize("how", ["the same rows", "rows shifted", "a hard link", "a Zarr chunk",
                                 "a Zarr chunk through a hard link",
                                 "a Zarr chunk that is a link into a pool",
                                 "a Zarr chunk under a linked directory",
                                 "a Zarr chunk, its directory's name holding a newline",
                                 "an HDF5 dataset's external file",
                                 "an HDF5 virtual dataset's source file"])
def test_an_out_array_mapped_from_a_file_of_the_source_is_refused(tmp_path, how):
    # Before, out=np.load(shard, mmap_mode="r+")[1000:] over rows [0, n - 1000) read rows whose
    # bytes the load had already overwritten in the shard: 1,985,000 of 1,999,000 rows wrong
    # (4 threads) and no error, and the shard itself was rewritten. The same through the
    # source file of an HDF5 virtual dataset: 193,000 of 199,000 rows wrong, the file rewritten.
    d, rows, out, mapped = _out_over_a_shard(tmp_path, how)
    before = pathlib.Path(mapped).read_bytes()
    with pytest.raises(ValueError, match=r"out= is memory mapped from .*, a file of the source"):
        snp.load(d, row_range=rows, out=out, threads=4)
    assert pathlib.Path(mapped).read_bytes() == before


def test_an_out_array_mapped_privately_or_from_another_file_is_filled(tmp_path):
    d, rows, _, mapped = _out_over_a_shard(tmp_path, "the same rows")
    want = np.arange(rows[1], dtype=np.int64)
    private = np.load(mapped, mmap_mode="c")  # copy-on-write: the file is not written
    assert snp.load(d, out=private, threads=4) is private
    np.testing.assert_array_equal(private, want)
    other = np.lib.format.open_memmap(tmp_path / "other.npy", "w+", np.int64, want.shape)
    np.testing.assert_array_equal(snp.load(d, out=other, threads=4), want)
    np.testing.assert_array_equal(np.load(mapped), want)


def test_a_layout_and_its_slices_are_taken(tmp_path):
    d, want = write_npy(tmp_path, np.random.default_rng(2))
    layout = shardload.discover(d)
    np.testing.assert_array_equal(snp.load(layout), want)
    np.testing.assert_array_equal(snp.load(layout.slice_rows(10, 4000)), want[10:4000])
    with pytest.raises(TypeError, match="with a Layout"):
        snp.load(layout, format="npy")


def test_formats_match_their_own_readers(tmp_path):
    rng = np.random.default_rng(3)
    parts = [random_array(rng, (r, 4), "float64") for r in (700, 0, 1300, 5)]
    want = np.concatenate(parts)
    (tmp_path / "h5").mkdir()
    (tmp_path / "pq").mkdir()
    for i, a in enumerate(parts):
        with h5py.File(tmp_path / "h5" / f"s_{i}.h5", "w") as f:
            chunked = {"chunks": (min(64, len(a)), 4), "compression": "gzip"} if len(a) else {}
            f.create_dataset("x", data=a, **chunked)
        pq.write_table(pa.table({f"c{j}": a[:, j] for j in range(4)}),
                       tmp_path / "pq" / f"s_{i}.parquet", row_group_size=128)
    z = zarr.create_array(str(tmp_path / "one.zarr"), shape=want.shape, dtype=want.dtype,
                          chunks=(256, 4), zarr_format=2)
    z[:] = want
    np.testing.assert_array_equal(snp.load(str(tmp_path / "h5" / "s_*.h5"), dataset="x"), want)
    np.testing.assert_array_equal(snp.load(str(tmp_path / "pq" / "*.parquet")), want)
    np.testing.assert_array_equal(snp.load(str(tmp_path / "one.zarr")), want)
    cols = snp.load(str(tmp_path / "pq" / "*.parquet"), columns=["c2", "c0"], astype="float32")
    np.testing.assert_array_equal(cols, want[:, [2, 0]].astype("float32"))


def test_object_storage_matches_numpy(bucket, tmp_path):
    d, want = write_npy(tmp_path, np.random.default_rng(4), trailing=(5,))
    for p in sorted(d.iterdir()):
        bucket.upload(f"d/{p.name}", p)
    got = snp.load(bucket.url("d/"), storage_options=bucket.options, threads=3)
    np.testing.assert_array_equal(got, want)


def test_progress_reports_each_tile_and_an_exception_stops_the_load(tmp_path):
    d, want = write_npy(tmp_path, np.random.default_rng(5))
    seen = []
    snp.load(d, threads=2, overdecompose=3, progress=seen.append)
    stages = [p.stage for p in seen]
    assert stages[0] == "discovered" and stages[-1] == "filled"
    filling = [p for p in seen if p.stage == "filling"]
    assert [p.tiles_done for p in filling] == list(range(1, len(filling) + 1))
    assert filling[-1].tiles == len(filling) and seen[-1].bytes_done == want.nbytes
    assert all(a.bytes_done <= b.bytes_done for a, b in zip(seen, seen[1:]))

    class Stop(Exception):
        pass

    def stop(p):
        if p.stage == "filling":
            raise Stop

    with pytest.raises(Stop):
        snp.load(d, threads=2, progress=stop)
    with pytest.raises(TypeError, match="progress"):
        snp.load(d, progress="yes")


@pytest.mark.parametrize("inner", ["numpy.load", "discover and read", "dask compute"])
def test_a_progress_callback_may_load_again_from_the_engines_thread(tmp_path, inner):
    """A seventh hostile pass: the callback runs on an engine thread, and a load, a discovery
    or a Dask computation made there finishes (no thread of the engine waits on itself)."""
    d, want = write_npy(tmp_path, np.random.default_rng(7))
    results = []

    def again(p):
        if p.stage != "filling" or len(results) >= 2:
            return
        if inner == "numpy.load":
            results.append(snp.load(d, threads=2))
        elif inner == "discover and read":
            results.append(shardload.discover(d).read())
        else:
            from shardload import dask as sdask

            results.append(sdask.load(d, chunks=500).compute(scheduler="threads"))

    got = snp.load(d, threads=2, overdecompose=8, progress=again)
    np.testing.assert_array_equal(got, want)
    assert len(results) == 2
    for r in results:
        np.testing.assert_array_equal(r, want)


def test_a_shard_changed_after_discovery_is_a_read_error_naming_it(tmp_path):
    d, _ = write_npy(tmp_path, np.random.default_rng(6))
    layout = shardload.discover(d)
    victim = d / "shard_0003.npy"
    a = np.load(victim)
    np.save(victim, a + 1)  # same size, new contents and mtime
    with pytest.raises(shardload.ShardReadError, match="shard_0003.npy"):
        snp.load(layout, threads=2)
    os.remove(victim)
    with pytest.raises(shardload.ShardReadError, match="shard_0003.npy"):
        snp.load(layout, threads=2)


def test_arguments_are_checked_as_load_checks_them(tmp_path):
    d, _ = write_npy(tmp_path, np.random.default_rng(7))
    # One range in Python's terms at both ends (the engine's own offers 0, "one per core",
    # which Python spells None and refuses as an int).
    for bad in (0, 4097):
        with pytest.raises(ValueError, match=rf"threads: expected an int from 1 to 4096 or None, "
                                             rf"found {bad}$"):
            snp.load(d, threads=bad)
    assert snp.load(d, threads=4096).shape[0] > 0
    with pytest.raises(TypeError, match="threads"):
        snp.load(d, threads=1.5)
    with pytest.raises(ValueError, match="overdecompose"):
        snp.load(d, overdecompose=0)
    with pytest.raises(ValueError, match="past the end"):
        snp.load(d, row_range=(0, sum(ROWS) + 1))
    with pytest.raises(ValueError, match="astype"):
        snp.load(d, astype="U3")
    with pytest.raises(TypeError, match="no_such_option"):
        snp.load(d, no_such_option=1)
    with pytest.raises(shardload.SourceNotFoundError):
        snp.load(tmp_path / "absent")


def test_threads_of_the_caller_may_load_at_once(tmp_path):
    d, want = write_npy(tmp_path, np.random.default_rng(8))
    got: list = [None] * 4

    def run(i):
        got[i] = snp.load(d, row_range=(i * 100, i * 100 + 3000), threads=2)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for i in range(4):
        np.testing.assert_array_equal(got[i], want[i * 100:i * 100 + 3000])


def test_no_runtime_is_imported(tmp_path):
    d, _ = write_npy(tmp_path, np.random.default_rng(9))
    code = ("import sys, shardload.numpy as snp\n"
            f"a = snp.load({str(d)!r})\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('legate', 'cupynumeric')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# ---- a fourth hostile pass: row_range spellings through every front end -----------------------

@pytest.mark.parametrize("row_range", [
    slice(2, 7), slice(2, 7, 1), slice(2, 7, np.int64(1)), (np.int64(2), np.int32(7)),
    slice(np.uint64(2), 7), (None, None), [2, 7],
    slice(0, 10, 2), slice(None, None, -1), slice(2, 7, 0), slice(-5, None), (3, -3),
    slice(5, 2), (0, 100), (2.0, 7), (True, 5), slice("2", 7), (2, 7, 1), np.array([2, 7]),
    range(2, 7),
], ids=repr)
def test_row_range_spellings_read_the_same_rows_in_every_front_end_or_are_refused(tmp_path,
                                                                                  row_range):
    """shardload.numpy.load, shardload.dask.load and (where installed) shardload.jax.load take
    a row range alike: the rows [lo, hi) numpy's a[lo:hi] gives, or the same TypeError /
    ValueError from each (a step other than 1, negative or past-the-end bounds, lo > hi, a
    float, a bool, a str, three numbers, an array, a range)."""
    a = np.arange(40, dtype=np.float64).reshape(20, 2)
    for i in range(4):
        np.save(tmp_path / f"shard_{i:04d}.npy", a[i * 5:(i + 1) * 5])
    loads = {"numpy": lambda: snp.load(tmp_path, row_range=row_range)}
    try:
        import shardload.dask as sdask

        loads["dask"] = lambda: sdask.load(tmp_path, row_range=row_range).compute(
            scheduler="sync")
    except ImportError:
        pass
    try:
        import shardload.jax as sjax

        loads["jax"] = lambda: np.asarray(sjax.load(tmp_path, row_range=row_range))
    except ImportError:
        pass
    outcomes = {}
    for name, load in loads.items():
        try:
            outcomes[name] = ("rows", load())
        except (TypeError, ValueError) as e:
            outcomes[name] = (type(e).__name__, str(e))
    first = outcomes["numpy"]
    for name, got in outcomes.items():
        assert got[0] == first[0], outcomes
        if got[0] == "rows":
            lo, hi = ((row_range.start, row_range.stop) if isinstance(row_range, slice)
                      else tuple(row_range))
            np.testing.assert_array_equal(got[1], a[slice(lo, hi)])
        else:
            assert got[1] == first[1], outcomes
