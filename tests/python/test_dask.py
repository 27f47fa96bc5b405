"""shardload.dask.load: a sharded dataset as a lazy dask array whose chunks are the engine's
tiles. Compared with numpy, h5py, pyarrow and zarr-python on awkward data, on the threaded
scheduler and on a dask.distributed cluster of 2 worker processes; the graph holds the layout
once; faults reach the caller as the typed error naming the file."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr

import shardload
from conftest import random_array

da = pytest.importorskip("dask.array")
import dask  # noqa: E402

import shardload.dask as sdask  # noqa: E402

# Ragged shards, empty ones among them (first and last too), rows no chunk size divides.
ROWS = [0, 1000, 0, 3, 4096, 1, 0, 2500, 0]


def write_npy(d, rng, rows=ROWS, trailing=(3, 2), dtype="float32"):
    d.mkdir()
    parts = [random_array(rng, (r, *trailing), dtype) for r in rows]
    for i, a in enumerate(parts):
        np.save(d / f"shard_{i:04d}.npy", a)
    return np.concatenate(parts)


def threaded(x):
    return x.compute(scheduler="threads")


def bounds_of(x) -> list[int]:
    return [0, *np.cumsum(x.chunks[0]).tolist()]


def test_npy_equals_numpy_on_the_threaded_scheduler(tmp_path):
    rng = np.random.default_rng(1)
    want = write_npy(tmp_path / "d", rng)
    for chunks in (None, 1, 700, "100 KiB", 10**9):
        x = sdask.load(tmp_path / "d", chunks=chunks)
        assert isinstance(x, da.Array) and x.shape == want.shape and x.dtype == want.dtype
        assert x.chunks[1:] == ((3,), (2,))  # trailing axes are never cut
        got = threaded(x)
        np.testing.assert_array_equal(got, want)
    assert sdask.load(tmp_path / "d", chunks=700).chunks[0] == (700,) * 10 + (600,)
    # A byte size counts the result's bytes: 24 bytes a row of float32 (3, 2).
    assert sdask.load(tmp_path / "d", chunks="24000B").chunks[0][0] == 1000
    assert sdask.load(tmp_path / "d", chunks="24000B", astype="float64").chunks[0][0] == 500


def test_row_range_astype_and_3d_match_numpy(tmp_path):
    rng = np.random.default_rng(2)
    want = write_npy(tmp_path / "d", rng, trailing=(2, 3, 2), dtype="int16")
    for lo, hi in [(0, 0), (999, 1004), (1003, 7600), (0, sum(ROWS)), (7599, 7600)]:
        x = sdask.load(tmp_path / "d", row_range=(lo, hi), astype="float64", chunks=333)
        assert x.dtype == np.float64 and x.shape == (hi - lo, 2, 3, 2)
        np.testing.assert_array_equal(threaded(x), want[lo:hi].astype("float64"))
    x = sdask.load(tmp_path / "d", row_range=slice(5, 2000), astype=np.int8)
    np.testing.assert_array_equal(threaded(x), want[5:2000].astype(np.int8))
    # Dask's own operations see the chunks as any array's.
    x = sdask.load(tmp_path / "d", chunks=512)
    np.testing.assert_array_equal(threaded(x[1500:1510, 1]), want[1500:1510, 1])
    np.testing.assert_allclose(threaded(x.astype("float64").sum(axis=0)),
                               want.astype("float64").sum(axis=0))


def test_an_empty_dataset_is_one_empty_chunk(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    for i in range(3):
        np.save(d / f"shard_{i:04d}.npy", np.zeros((0, 4), "uint8"))
    x = sdask.load(d)
    assert x.shape == (0, 4) and x.chunks == ((0,), (4,))
    assert threaded(x).shape == (0, 4)


def test_formats_match_their_own_readers(tmp_path):
    rng = np.random.default_rng(3)
    rows = (700, 0, 1300, 5)
    parts = [random_array(rng, (r, 4), "float64") for r in rows]
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
    for chunks in (None, 100):
        got = threaded(sdask.load(str(tmp_path / "h5" / "s_*.h5"), dataset="x", chunks=chunks))
        np.testing.assert_array_equal(got, want)
        got = threaded(sdask.load(str(tmp_path / "pq" / "*.parquet"), chunks=chunks))
        np.testing.assert_array_equal(got, want)
        got = threaded(sdask.load(str(tmp_path / "one.zarr"), chunks=chunks))
        np.testing.assert_array_equal(got, want)
    cols = sdask.load(str(tmp_path / "pq" / "*.parquet"), columns=["c2", "c0"],
                      astype="float32", row_range=(650, 2000))
    np.testing.assert_array_equal(threaded(cols), want[650:2000][:, [2, 0]].astype("float32"))


def test_raw_arrow_ipc_and_npz_match_numpy(tmp_path):
    import pyarrow.feather as feather

    rng = np.random.default_rng(12)
    rows = (0, 513, 7, 0, 1200)
    parts = [random_array(rng, (r, 3), "int32") for r in rows]
    want = np.concatenate(parts)
    for sub in ("raw", "ipc", "npz"):
        (tmp_path / sub).mkdir()
    for i, a in enumerate(parts):
        (tmp_path / "raw" / f"shard_{i:04d}.bin").write_bytes(a.tobytes())
        feather.write_feather(pa.table({f"c{j}": a[:, j] for j in range(3)}),
                              str(tmp_path / "ipc" / f"s_{i}.arrow"), chunksize=100,
                              compression="uncompressed")
        # Big-endian and Fortran order in the files; native and C order out.
        np.savez_compressed(tmp_path / "npz" / f"shard_{i:04d}.npz",
                            x=np.asfortranarray(a.astype(">i4")))
    cases = [sdask.load(tmp_path / "raw", format="raw", dtype="int32", trailing_shape=(3,),
                        chunks=250),
             sdask.load(str(tmp_path / "ipc" / "*.arrow"), chunks=250),
             sdask.load(tmp_path / "npz", chunks=250)]
    for x in cases:
        np.testing.assert_array_equal(threaded(x), want)
    x = sdask.load(str(tmp_path / "ipc" / "*.arrow"), row_range=(500, 1700), astype="float64")
    np.testing.assert_array_equal(threaded(x), want[500:1700].astype("float64"))


def test_chunks_meet_the_decode_units(tmp_path):
    rng = np.random.default_rng(4)
    want = random_array(rng, (10_500, 3), "int32")
    z = zarr.create_array(str(tmp_path / "z.zarr"), shape=want.shape, dtype=want.dtype,
                          chunks=(1000, 3), zarr_format=3)
    z[:] = want
    for chunks in (None, 1, 999, 1001, 2500, "16 KiB", 10**6):
        x = sdask.load(str(tmp_path / "z.zarr"), chunks=chunks)
        assert all(b % 1000 == 0 for b in bounds_of(x)[:-1]), (chunks, x.chunks[0])
        assert bounds_of(x)[-1] == 10_500
        np.testing.assert_array_equal(threaded(x), want)
    # Parquet shards of whole row groups (500 rows each): chunks hold whole row groups.
    d = tmp_path / "pq"
    d.mkdir()
    for i in range(4):
        pq.write_table(pa.table({"a": want[i * 2000:(i + 1) * 2000, 0]}),
                       d / f"s_{i}.parquet", row_group_size=500)
    for chunks in (None, 700, 1):
        x = sdask.load(str(d / "*.parquet"), chunks=chunks)
        assert all(b % 500 == 0 for b in bounds_of(x)), x.chunks[0]
        np.testing.assert_array_equal(threaded(x), want[:8000, 0])
    # A row range that starts inside a unit: chunks end on the store's unit boundaries.
    for chunks in (None, 1, 2500):
        x = sdask.load(str(tmp_path / "z.zarr"), row_range=(500, 9700), chunks=chunks)
        assert all((b + 500) % 1000 == 0 for b in bounds_of(x)[1:-1]), x.chunks[0]
        np.testing.assert_array_equal(threaded(x), want[500:9700])
    # Ragged HDF5 files chunked by 64 rows: no chunk boundary inside a file cuts a unit.
    rows = [700, 0, 1300, 5, 333]
    h5 = tmp_path / "h5"
    h5.mkdir()
    for i, r in enumerate(rows):
        with h5py.File(h5 / f"s_{i}.h5", "w") as f:
            f.create_dataset("x", data=want[:r], maxshape=(None, 3), chunks=(64, 3))
    starts = np.cumsum([0, *rows]).tolist()
    for chunks in (None, 1, 100, 1000):
        x = sdask.load(str(h5 / "s_*.h5"), dataset="x", chunks=chunks)
        for b in bounds_of(x):
            inside = [s for s in range(len(rows)) if starts[s] < b < starts[s + 1]]
            assert all((b - starts[s]) % 64 == 0 for s in inside), (chunks, x.chunks[0])
        if chunks is not None:
            assert min(x.chunks[0][:-1]) >= chunks
        np.testing.assert_array_equal(threaded(x), np.concatenate([want[:r] for r in rows]))
    # The default is the read plan's tiles: about 4 per worker thread.
    layout = shardload.discover(str(tmp_path / "z.zarr"))
    assert sdask.chunk_bounds(layout, processors=2) == [0, 2000, 4000, 6000, 8000, 10000,
                                                        10500]


def test_object_storage_matches_numpy(bucket, tmp_path):
    want = write_npy(tmp_path / "d", np.random.default_rng(5), trailing=(5,))
    for p in sorted((tmp_path / "d").iterdir()):
        bucket.upload(f"d/{p.name}", p)
    x = sdask.load(bucket.url("d/"), storage_options=bucket.options, chunks=900)
    np.testing.assert_array_equal(threaded(x), want)
    x = sdask.load(bucket.url("d/"), storage_options=bucket.options, row_range=(990, 5000),
                   astype="float64")
    np.testing.assert_array_equal(threaded(x), want[990:5000].astype("float64"))


def test_the_graph_holds_the_layout_once_and_grows_by_a_small_task_per_chunk(tmp_path):
    rng = np.random.default_rng(6)
    rows = [int(r) for r in rng.integers(0, 60, 400)]
    write_npy(tmp_path / "d", rng, rows=rows, trailing=(2,))
    layout = shardload.discover(tmp_path / "d")
    layout_bytes = len(pickle.dumps(layout))
    sizes = {}
    for n in (10, 100, 1000):
        x = sdask.load(layout, chunks=-(-layout.total_rows // n))
        graph = dict(x.__dask_graph__())
        assert len(graph) == len(x.chunks[0]) + 1  # the chunks and the layout
        blob = pickle.dumps(graph)
        assert blob.count(layout.encode()[-400:]) == 1  # the layout, pickled once
        sizes[len(x.chunks[0])] = len(blob)
    (n1, s1), (n2, s2), (n3, s3) = sorted(sizes.items())
    per_task = (s3 - s2) / (n3 - n2)
    assert per_task < 200, sizes  # a key and (read, layout key, lo, hi, cast, threads)
    assert abs((s2 - s1) / (n2 - n1) - per_task) < 0.25 * per_task, sizes  # linear
    assert s1 < layout_bytes + 200 * n1, (sizes, layout_bytes)
    # Options travel inside the layout, not in each task.
    x = sdask.load(tmp_path / "d", chunks=100, astype="float64")
    assert all(len(pickle.dumps(v)) < 300 for k, v in dict(x.__dask_graph__()).items()
               if isinstance(k, tuple))


def test_a_shard_changed_or_gone_after_discovery_fails_compute_naming_it(tmp_path):
    want = write_npy(tmp_path / "d", np.random.default_rng(7))
    x = sdask.load(tmp_path / "d", chunks=500)
    victim = tmp_path / "d" / "shard_0004.npy"
    np.save(victim, np.load(victim) + 1)  # same size, new contents and mtime
    with pytest.raises(shardload.ShardReadError, match="shard_0004.npy") as e:
        threaded(x)
    assert e.value.filename == str(victim)
    # Chunks that do not touch the file still read.
    np.testing.assert_array_equal(threaded(x[:1000]), want[:1000])
    os.remove(victim)
    with pytest.raises(shardload.ShardReadError, match="shard_0004.npy"):
        threaded(x)
    # A Zarr chunk damaged after discovery: the chunk that decodes it names the chunk's file.
    z = zarr.create_array(str(tmp_path / "z.zarr"), shape=(3000, 2), dtype="float32",
                          chunks=(1000, 2), zarr_format=2)
    z[:] = want[:3000, 0, :]
    x = sdask.load(str(tmp_path / "z.zarr"))
    with open(tmp_path / "z.zarr" / "1.0", "r+b") as f:
        f.write(b"\0" * 16)
    # Written within the clock tick discovery began in, the chunk is read and found corrupt;
    # later, its ctime says it changed since discovery: either error names the chunk's file.
    with pytest.raises(shardload.ShardReadError,
                       match=r"z\.zarr/1\.0: .*(corrupt|changed since discovery)"):
        threaded(x)
    np.testing.assert_array_equal(threaded(x[:1000]), want[:1000, 0, :])


def test_arguments_are_checked_before_a_graph_exists(tmp_path):
    write_npy(tmp_path / "d", np.random.default_rng(8))
    d = tmp_path / "d"
    for bad, err in [(0, ValueError), (-5, ValueError), ("lots", ValueError), ("0 B", ValueError),
                     ("1e400 B", ValueError),
                     (1.5, TypeError), (True, TypeError), ((100,), TypeError)]:
        with pytest.raises(err, match="chunks"):
            sdask.load(d, chunks=bad)
    for bad in (0, 4097):
        with pytest.raises(ValueError, match="threads"):
            sdask.load(d, threads=bad)
    np.testing.assert_array_equal(threaded(sdask.load(d, threads=3, chunks=5000)),
                                  threaded(sdask.load(d)))
    with pytest.raises(ValueError, match="overdecompose"):
        sdask.load(d, overdecompose=0)
    with pytest.raises(ValueError, match="past the end"):
        sdask.load(d, row_range=(0, sum(ROWS) + 1))
    with pytest.raises(ValueError, match="astype"):
        sdask.load(d, astype="U3")
    with pytest.raises(TypeError, match="no_such_option"):
        sdask.load(d, no_such_option=1)
    with pytest.raises(shardload.SourceNotFoundError):
        sdask.load(tmp_path / "absent")
    assert sdask.load(d, chunks="auto").chunks == sdask.load(d).chunks


def test_import_shardload_imports_no_dask_and_the_front_end_no_runtime(tmp_path):
    write_npy(tmp_path / "d", np.random.default_rng(9))
    code = ("import sys, shardload\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'dask', 'distributed'}))\n"
            "import shardload.dask as sd\n"
            f"sd.load({str(tmp_path / 'd')!r}).compute()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('legate', 'cupynumeric')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "[]"], out.stdout + out.stderr


def test_shard_read_error_keeps_filename_and_errno_through_pickle():
    # What dask.distributed does to an error raised in a worker process.
    e = shardload.ShardReadError("rows [0, 7): d/shard_0002.npy: changed since discovery")
    e.filename = "d/shard_0002.npy"
    e.errno = 2
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is shardload.ShardReadError and str(back) == str(e)
    assert back.filename == "d/shard_0002.npy" and back.errno == 2
    missing = pickle.loads(pickle.dumps(shardload.SourceNotFoundError("D: no such directory")))
    assert isinstance(missing, FileNotFoundError) and str(missing) == "D: no such directory"


def _check_reports(reports, want_nbytes, chunks):
    """Each chunk once, in one count that only grows, ending at "filled" with every byte."""
    assert [p.stage for p in reports] == ["filling"] * (chunks - 1) + ["filled"]
    assert [p.tiles_done for p in reports] == list(range(1, chunks + 1))
    assert {p.tiles for p in reports} == {chunks} and {p.bytes for p in reports} == {want_nbytes}
    done = [p.bytes_done for p in reports]
    assert done == sorted(done) and done[-1] == want_nbytes


def test_progress_reports_each_chunk_once_as_it_is_read(tmp_path, capsys):
    want = write_npy(tmp_path / "d", np.random.default_rng(12))
    seen = []
    x = sdask.load(tmp_path / "d", chunks=700, progress=seen.append, astype="float64")
    assert seen == []  # nothing is read before compute
    np.testing.assert_array_equal(threaded(x), want.astype("float64"))
    # The bytes as read (float32), before the cast.
    _check_reports(seen, want.nbytes, len(x.chunks[0]))
    # Computed again: every chunk was counted, nothing more is reported.
    n = len(seen)
    np.testing.assert_array_equal(x.compute(scheduler="sync"), want.astype("float64"))
    assert len(seen) == n
    # A part computed reports its chunks alone.
    part = []
    y = sdask.load(tmp_path / "d", chunks=700, progress=part.append)
    y[:10].compute(scheduler="threads")
    assert [(p.stage, p.tiles_done, p.bytes_done) for p in part] == [("filling", 1, 700 * 24)]
    # True: one bar on stderr, drawn as the chunks are read.
    capsys.readouterr()
    threaded(sdask.load(tmp_path / "d", chunks=700, progress=True))
    bar = capsys.readouterr().err
    assert "shardload.dask.load" in bar and "100%" in bar and f"{len(want)}/{len(want)} rows" in bar
    with pytest.raises(TypeError, match="^progress: expected a callable"):
        sdask.load(tmp_path / "d", progress="yes")


def test_a_progress_callback_that_raises_fails_compute_with_its_exception(tmp_path):
    want = write_npy(tmp_path / "d", np.random.default_rng(13))

    class Stop(Exception):
        pass

    calls = []

    def stop(p):
        calls.append(p.stage)
        if p.tiles_done == 2:
            raise Stop("enough")

    x = sdask.load(tmp_path / "d", chunks=300, progress=stop)
    with pytest.raises(Stop, match="enough"):
        threaded(x)
    # No report after the callback raised, on this computation or the next, which reads
    # the data as any computation does.
    assert calls == ["filling", "filling"]
    np.testing.assert_array_equal(threaded(x), want)
    assert calls == ["filling", "filling"]


def test_a_progress_callback_may_compute_the_same_array_again(tmp_path):
    """A hostile callback: it computes the array whose chunks report to it, from inside a
    report; the inner chunks queue their reports rather than wait for the outer one."""
    want = write_npy(tmp_path / "d", np.random.default_rng(15))
    seen, inner = [], []

    def again(p):
        seen.append(p)
        if len(seen) == 1:
            inner.append(threaded(x))

    x = sdask.load(tmp_path / "d", chunks=700, progress=again)
    np.testing.assert_array_equal(threaded(x), want)
    np.testing.assert_array_equal(inner[0], want)
    _check_reports(seen, want.nbytes, len(x.chunks[0]))


@pytest.mark.parametrize("stage,error", [("filling", KeyboardInterrupt), ("filled", ValueError)])
def test_a_progress_callback_raising_a_base_exception_or_at_the_last_report(tmp_path, stage,
                                                                             error):
    """Hostile callbacks (tenth hostile pass): a BaseException that is no Exception, or an
    exception at the last report only. compute raises it; the next compute reads the data."""
    want = write_npy(tmp_path / "d", np.random.default_rng(17))

    def stop(p):
        if p.stage == stage:
            raise error("stop")

    x = sdask.load(tmp_path / "d", chunks=300, progress=stop)
    with pytest.raises(error, match="stop"):
        threaded(x)
    np.testing.assert_array_equal(threaded(x), want)


# ---- dask.distributed: one LocalCluster of 2 worker processes for the module ----------------

COUNTED = "dask_counted_npy"


def _counted_read(path, lo, hi):
    # The reads of this process, one line each: the pid, the file and its rows.
    with open(os.environ["SHARDLOAD_TEST_READ_LOG"], "a") as log:
        log.write(f"{os.getpid()}\t{path}\t{lo}\t{hi}\n")
    return np.load(path, mmap_mode="r")[lo:hi]


def _counted_rows(path):
    return int(np.load(path, mmap_mode="r").shape[0])


def _register_counted_reader(log_path):
    os.environ["SHARDLOAD_TEST_READ_LOG"] = str(log_path)
    if COUNTED not in shardload.registered_readers():
        shardload.register_reader(COUNTED, read=_counted_read, count_rows=_counted_rows,
                                  extension=".cnpy")
    return os.getpid()


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    distributed = pytest.importorskip("distributed")
    log = tmp_path_factory.mktemp("reads") / "reads.log"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, worker_dashboard_address=None) as c:
        with distributed.Client(c) as cl:
            pids = cl.run(_register_counted_reader, str(log))
            _register_counted_reader(log)
            yield cl, log, pids


def test_a_cluster_of_two_processes_reads_each_chunk_on_its_worker_only(tmp_path, client):
    cl, log, pids = client
    rng = np.random.default_rng(10)
    rows = [0, 700, 1, 0, 1500, 333, 2000, 0, 999]
    parts = [random_array(rng, (r, 2, 3), "float64") for r in rows]
    d = tmp_path / "d"
    d.mkdir()
    for i, a in enumerate(parts):
        with open(d / f"shard_{i:04d}.cnpy", "wb") as f:
            np.save(f, a)
    want = np.concatenate(parts)
    # Default chunks: the plan's tiles for the client's 2 threads.
    x = sdask.load(d, reader=COUNTED)
    assert len(x.chunks[0]) == 8
    (layout,) = [v for v in dict(x.__dask_graph__()).values() if isinstance(v, shardload.Layout)]
    log.write_text("")
    x = x.persist()
    distributed = pytest.importorskip("distributed")
    distributed.wait(x, timeout=60)
    who = cl.who_has(x)
    np.testing.assert_array_equal(x.compute(), want)

    offsets = layout.offsets
    bounds = bounds_of(x)
    expected: dict[int, set] = {pid: set() for pid in pids.values()}
    for key, workers in who.items():
        (worker,) = workers
        i = key[1]
        expected[pids[worker]].update(range(bounds[i], bounds[i + 1]))
    read: dict[int, set] = {pid: set() for pid in pids.values()}
    files: dict[int, set] = {pid: set() for pid in pids.values()}
    for line in log.read_text().splitlines():
        pid, path, lo, hi = line.split("\t")
        s = layout.paths.index(path)
        rows_read = range(offsets[s] + int(lo), offsets[s] + int(hi))
        assert not read[int(pid)] & set(rows_read), "a row read twice"
        read[int(pid)].update(rows_read)
        files[int(pid)].add(path)
    assert os.getpid() not in read  # the client reads nothing
    for pid in expected:
        # Each worker read exactly its chunks' rows, so only the files they cover.
        assert read[pid] == expected[pid]
        assert files[pid] == {layout.paths[s] for s in range(len(rows))
                              if set(range(offsets[s], offsets[s + 1])) & expected[pid]}
    assert all(expected.values()), "both workers computed chunks"


def test_a_fault_on_a_worker_reaches_the_caller_typed_and_naming_the_file(tmp_path, client):
    cl, _, _ = client
    want = write_npy(tmp_path / "d", np.random.default_rng(11))
    x = sdask.load(tmp_path / "d", chunks=600)
    np.testing.assert_array_equal(cl.compute(x).result(timeout=60), want)
    victim = tmp_path / "d" / "shard_0007.npy"
    np.save(victim, np.load(victim)[:-1])  # shorter: changed since discovery
    t0 = time.monotonic()
    with pytest.raises(shardload.ShardReadError, match="shard_0007.npy") as e:
        cl.compute(x).result(timeout=60)
    assert e.value.filename == str(victim)
    assert time.monotonic() - t0 < 30
    os.remove(victim)
    with pytest.raises(shardload.ShardReadError, match="shard_0007.npy"):
        cl.compute(x[-10:]).result(timeout=60)
    # The workers go on: another array computes.
    np.testing.assert_array_equal(cl.compute(x[:1000]).result(timeout=60), want[:1000])


# ---- a fourth hostile pass: a shard rewritten between load() and compute() --------------------

@pytest.mark.parametrize("fmt", ["npy", "parquet", "hdf5"])
@pytest.mark.parametrize("how", ["in place, size and mtime kept", "renamed over, mtime kept"])
def test_a_shard_rewritten_keeping_size_and_mtime_fails_compute_and_numpy_load(tmp_path, fmt,
                                                                               how):
    """One byte of shard 1 changed after discovery, its size and mtime put back (in place, or
    a copy renamed over it): compute() of the Dask array, and shardload.numpy.load of the
    layout discovered before, raise ShardReadError naming the shard; no chunk of other data
    is returned."""
    ext = {"npy": "npy", "parquet": "parquet", "hdf5": "h5"}[fmt]

    def make() -> str:
        d = tmp_path / "d"
        d.mkdir(exist_ok=True)
        for i in range(3):
            a = np.arange(i * 10, i * 10 + 10, dtype=np.float64)
            p = d / f"shard_{i:04d}.{ext}"
            if fmt == "npy":
                np.save(p, a.reshape(10, 1))
            elif fmt == "parquet":
                pq.write_table(pa.table({"x": a}), p)
            else:
                with h5py.File(p, "w") as f:
                    f["x"] = a
        return str(d)

    def rewrite() -> str:
        p = tmp_path / "d" / f"shard_0001.{ext}"
        st = os.stat(p)
        raw = bytearray(p.read_bytes())
        raw[-20] ^= 0xFF
        target = p if how.startswith("in place") else p.with_suffix(".tmp")
        with open(target, "r+b" if target == p else "wb") as f:
            f.write(raw)
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
        if target != p:
            os.replace(target, p)
        return str(p)

    arr = sdask.load(make(), chunks=10)
    changed = rewrite()
    with pytest.raises(shardload.ShardReadError, match="changed since discovery") as e:
        arr.compute(scheduler="sync")
    assert e.value.filename == str(changed)
    layout = shardload.discover(make())
    changed = rewrite()
    from shardload import numpy as snp

    with pytest.raises(shardload.ShardReadError, match="changed since discovery") as e:
        snp.load(layout)
    assert e.value.filename == str(changed)


def test_progress_on_a_cluster_comes_to_the_client_and_a_raising_callback_stops_it(tmp_path,
                                                                                   client):
    """On dask.distributed each chunk task sends its report to the client (a worker event);
    the callback runs there; when it raises, the chunks not yet started fail with its
    exception type and message."""
    cl, _, _ = client
    want = write_npy(tmp_path / "d", np.random.default_rng(14))
    seen = []
    x = sdask.load(tmp_path / "d", chunks=600, progress=seen.append)
    np.testing.assert_array_equal(cl.compute(x).result(timeout=60), want)
    deadline = time.monotonic() + 30
    while (not seen or seen[-1].stage != "filled") and time.monotonic() < deadline:
        time.sleep(0.01)  # the events arrive after the results
    _check_reports(seen, want.nbytes, len(x.chunks[0]))

    def stop(p):
        if p.tiles_done == 1:
            raise ValueError("enough")

    many = sdask.load(tmp_path / "d", chunks=5, progress=stop)  # 1520 chunks
    with pytest.raises(ValueError, match="^enough$"):
        cl.compute(many).result(timeout=120)
    # The workers go on.
    np.testing.assert_array_equal(cl.compute(x[:1000]).result(timeout=60), want[:1000])


def test_the_arrays_name_is_made_from_no_secret_of_a_url():
    """The array's name (in every graph key, the dashboard and the logs) was a token of the
    SHA-256 of the layout's encoding, which carries a URL's password and token in clear: with
    the handle and the rest shown, a guess of a weak password was checked in microseconds, no
    scrypt. The name is made from the encoding without the secrets; the array still reads."""
    import hashlib

    from dask.base import tokenize

    import test_http

    password, token = "hunter2pw", "tk-s3cr3t-abc"
    expected = np.arange(12, dtype="<f4").reshape(4, 3)
    with test_http.serving() as (store, base):
        store.put_npy("/d/a.npy", expected)
        host = base.split("//")[1]
        url = f"http://alice:{password}@{host}/d/a.npy?token={token}"
        layout = shardload.discover(url)
        carried = layout.encode()
        assert password.encode() in carried and token.encode() in carried  # what a task needs
        public = layout.encode(credentials=False)
        assert password.encode() not in public and token.encode() not in public
        d = sdask.load(url)
        assert password not in d.name and token not in d.name
        bounds = [int(b) for b in np.cumsum((0,) + d.chunks[0])]
        # The name as it was made: a guess of the password with it found the shown name.
        for secret in (carried, carried.replace(password.encode(), b"hunter1pw")):
            guess = "shardload-" + tokenize(hashlib.sha256(secret).hexdigest(), bounds, "None", 1,
                                            None)
            assert guess != d.name
        # Two loads of one source share their name, and the array reads.
        assert sdask.load(url).name == d.name
        np.testing.assert_array_equal(d.compute(), expected)
        assert hash(layout) == hash(shardload.discover(url))
