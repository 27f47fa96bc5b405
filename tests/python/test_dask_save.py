"""shardload.dask.save: a Dask array written as one shard per chunk, by whichever worker
computes the chunk, and published once. Compared with numpy (np.load of each shard: its rows
are the chunk's) and zarr-python, on the threaded scheduler and on a dask.distributed cluster
of 2 worker processes; a failing chunk publishes nothing."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr

import shardload
import shardload.numpy
from shardload import _core
from conftest import random_array

da = pytest.importorskip("dask.array")
import shardload.dask as sdask  # noqa: E402

# Ragged chunks, a 0-row one among them.
CHUNKS = (300, 0, 451, 1, 248)


def staging_left(d):
    return [n for n in os.listdir(d) if ".shardload-tmp-" in n]


def shard(dest, i, fmt, dtype, trailing):
    """Shard i read by numpy (npy, raw) or zarr-python (zarr), not by shardload."""
    if fmt == "npy":
        return np.load(dest / f"shard_{i:04d}.npy")
    if fmt == "raw":
        return np.fromfile(dest / f"shard_{i:04d}.bin", dtype).reshape(-1, *trailing)
    return zarr.open(str(dest / f"shard_{i:04d}.zarr"), mode="r")[...]


@pytest.mark.parametrize("fmt", ["npy", "raw", "zarr"])
def test_each_chunk_is_one_shard_and_the_dataset_reads_back(tmp_path, fmt):
    rng = np.random.default_rng(1)
    a = random_array(rng, (sum(CHUNKS), 4, 3), "float32")
    # Trailing axes split too: joined before the save, a shard holds whole rows.
    x = da.from_array(a, chunks=(CHUNKS, 2, (1, 2)))
    dest = tmp_path / "d"
    info = sdask.save(x, dest, format=fmt)
    assert (info.target, info.num_shards, info.tiles, info.bytes) == ("dask", 5, 5, a.nbytes)
    assert info.processors == 1  # the threaded scheduler: this process
    np.testing.assert_array_equal(shardload.numpy.load(dest), a)
    lo = 0
    for i, r in enumerate(CHUNKS):
        np.testing.assert_array_equal(shard(dest, i, fmt, a.dtype, (4, 3)), a[lo:lo + r])
        lo += r
    assert (dest / "shardload.manifest").exists()
    assert staging_left(tmp_path) == []
    # Read back as a Dask array too, chunk for chunk.
    np.testing.assert_array_equal(sdask.load(dest).compute(), a)


def test_big_endian_and_bool_and_1d_arrays(tmp_path):
    a = np.arange(1000, dtype=">i8")
    sdask.save(da.from_array(a, chunks=333), tmp_path / "be", checksum="xxh3")
    back = np.load(tmp_path / "be" / "shard_0000.npy")
    assert back.dtype == np.dtype("int64") and back.dtype.isnative
    np.testing.assert_array_equal(shardload.numpy.load(tmp_path / "be"), a)
    assert shardload.verify(str(tmp_path / "be")) is not None
    b = np.random.default_rng(2).random((50, 2)) > 0.5
    sdask.save(da.from_array(b, chunks=(7, 2)), tmp_path / "b", manifest=False)
    assert not (tmp_path / "b" / "shardload.manifest").exists()
    np.testing.assert_array_equal(shardload.numpy.load(tmp_path / "b"), b)
    # No rows at all: one empty shard.
    sdask.save(da.zeros((0, 3), chunks=(1, 3), dtype="u2"), tmp_path / "e")
    assert np.load(tmp_path / "e" / "shard_0000.npy").shape == (0, 3)


def test_overwrite_rules(tmp_path):
    dest = tmp_path / "d"
    a = np.arange(60, dtype="int32").reshape(20, 3)
    sdask.save(da.from_array(a, chunks=(10, 3)), dest)
    with pytest.raises(shardload.DestinationExistsError, match="pass overwrite"):
        sdask.save(da.from_array(a + 1, chunks=(5, 3)), dest)
    np.testing.assert_array_equal(shardload.numpy.load(dest), a)
    sdask.save(da.from_array(a + 1, chunks=(5, 3)), dest, overwrite=True)
    assert sorted(os.listdir(dest)) == [f"shard_{i:04d}.npy" for i in range(4)] + [
        "shardload.manifest"]
    np.testing.assert_array_equal(shardload.numpy.load(dest), a + 1)
    (dest / "notes.txt").write_text("mine")
    with pytest.raises(shardload.DestinationExistsError, match="notes.txt"):
        sdask.save(da.from_array(a, chunks=(10, 3)), dest, overwrite=True)
    assert (dest / "notes.txt").read_text() == "mine"
    assert staging_left(tmp_path) == []


def _boom(block, block_info=None):
    if block_info[0]["chunk-location"][0] == 2:
        raise RuntimeError("chunk 2 cannot be computed")
    return block


def test_a_chunk_that_raises_publishes_nothing(tmp_path):
    a = np.arange(400, dtype="float64").reshape(100, 4)
    x = da.from_array(a, chunks=(20, 4)).map_blocks(_boom, dtype=a.dtype)
    with pytest.raises(RuntimeError, match="chunk 2 cannot be computed"):
        sdask.save(x, tmp_path / "new")
    assert sorted(os.listdir(tmp_path)) == []  # no dataset, no staging directory
    # Over an old dataset with overwrite: it stays whole.
    old = tmp_path / "old"
    sdask.save(da.from_array(a[:10], chunks=(5, 4)), old)
    with pytest.raises(RuntimeError, match="chunk 2"):
        sdask.save(x, old, overwrite=True)
    np.testing.assert_array_equal(shardload.numpy.load(old), a[:10])
    assert staging_left(tmp_path) == []


COMMIT_INTERRUPTED = """
import os, pathlib, signal, sys, threading, time, traceback
import numpy as np
import dask.array as da
import shardload.numpy as snp
import shardload.dask as sdask
dest = pathlib.Path(sys.argv[1])
snp.save(np.zeros((3000, 2)), dest, num_shards=3000)  # an old dataset whose removal takes a while
new = np.arange(40000 * 4, dtype=np.float64).reshape(40000, 4)
x = da.from_array(new, chunks=(5000, 4))
def staged():
    return any(".shardload-tmp-" in n for n in os.listdir(dest.parent))
killed = threading.Event()
def killer():
    # Sent once the staging directory is renamed into place: the commit is then removing
    # the old dataset.
    while not staged():
        time.sleep(0.0002)
    while staged():
        time.sleep(0.0002)
    os.kill(os.getpid(), signal.SIGINT)
    killed.set()
threading.Thread(target=killer, daemon=True).start()
outcome = notes = None
try:
    try:
        sdask.save(x, dest, overwrite=True)
        outcome = "SAVED"
    except KeyboardInterrupt as e:
        last = traceback.extract_tb(e.__traceback__)[-1]
        # Raised by the commit's call itself, or later (after it returned: nothing to check).
        outcome = "IN THE CALL" if "staged_save_commit" in (last.line or "") else "LATER"
        notes = getattr(e, "__notes__", [])
    killed.wait(30)
except KeyboardInterrupt:
    outcome = "AFTER THE CALL"
print("OUTCOME", outcome)
print("NOTES", notes)
got = snp.load(dest) if dest.exists() else None
print("DEST", "new" if got is not None and np.array_equal(got, new) else "other")
if got is not None and got.shape == new.shape:
    oracle = np.concatenate([np.load(dest / f"shard_{i:04d}.npy") for i in range(8)])
    print("NUMPY", "new" if np.array_equal(oracle, new) else "other")
"""


def test_ctrl_c_during_the_commit_completes_the_save_and_says_so(tmp_path):
    """A SIGINT during the commit (sent once the staging directory is renamed into place, while
    the commit removes the overwritten dataset's 3000 shards) does not stop it: the
    KeyboardInterrupt raised after it says in its note that the save completed and where
    (before: a bare KeyboardInterrupt, with the new dataset in place and the old one gone)."""
    import subprocess
    import sys
    for attempt in range(5):
        dest = tmp_path / f"o{attempt}"
        r = subprocess.run([sys.executable, "-c", COMMIT_INTERRUPTED, str(dest)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr[-3000:]
        lines = r.stdout.splitlines()
        if lines[0] != "OUTCOME IN THE CALL":
            continue  # the signal came after the commit's call returned: nothing to check
        assert "the save completed before this interrupt was raised" in lines[1], r.stdout
        assert str(dest) in lines[1], r.stdout
        assert "DEST new" in lines and "NUMPY new" in lines, r.stdout
        assert staging_left(tmp_path) == []
        return
    pytest.skip(f"the signal came after the commit five times: {r.stdout}")


def test_a_chunk_of_another_dtype_than_the_array_says_fails_the_save(tmp_path):
    a = np.arange(40, dtype="float64").reshape(10, 4)
    # meta says float32, the second block is float64 (the first float32, so that which chunk
    # fails does not hang on the scheduler's order): the write checks the block against the save.
    x = da.from_array(a, chunks=(5, 4)).map_blocks(
        lambda b, block_info=None: b if block_info[0]["chunk-location"][0] else b.astype("f4"),
        dtype="float32")
    with pytest.raises(ValueError, match=r"rows \[5, 10\): expected float32, found float64"):
        sdask.save(x, tmp_path / "d")
    assert os.listdir(tmp_path) == []


def _mask_second_chunk(block, block_info=None):
    if block_info[0]["chunk-location"][0] == 1:
        return np.ma.masked_greater(block, 6)
    return block


def test_a_masked_array_or_chunk_is_refused_as_numpy_save_refuses_it(tmp_path):
    """The formats hold no mask: a masked Dask array (its meta a MaskedArray), or a chunk
    that computes to one, was saved with its masked-out values as data; numpy.save refuses
    such an array. Refused, naming the rows, and nothing is published."""
    a = np.arange(10, dtype="int64")
    masked = da.ma.masked_greater(da.from_array(a, chunks=5), 5)
    with pytest.raises(TypeError, match="masked arrays cannot be saved"):
        sdask.save(masked, tmp_path / "d")
    assert os.listdir(tmp_path) == []
    sneaky = da.from_array(a, chunks=5).map_blocks(_mask_second_chunk, dtype=a.dtype,
                                                   meta=np.array((), a.dtype))
    with pytest.raises(TypeError, match=r"rows \[5, 10\): masked arrays cannot be saved"):
        sdask.save(sneaky, tmp_path / "d")
    assert os.listdir(tmp_path) == []
    # The filled array is saved as its values.
    sdask.save(da.ma.filled(masked, -1), tmp_path / "d")
    np.testing.assert_array_equal(shardload.numpy.load(tmp_path / "d"),
                                  np.ma.masked_greater(a, 5).filled(-1))


def test_arguments_are_checked_as_shardload_save_checks_them(tmp_path):
    x = da.ones((10, 2), chunks=(5, 2))
    with pytest.raises(TypeError, match="expected a dask.array.Array, found ndarray"):
        sdask.save(np.ones(3), tmp_path / "d")
    with pytest.raises(ValueError, match="format= must be one of"):
        sdask.save(x, tmp_path / "d", format="hdf5")
    with pytest.raises(ValueError, match="a Zarr shard is a directory"):
        sdask.save(x, tmp_path / "d", format="zarr", checksum="xxh3")
    with pytest.raises(TypeError, match="overwrite= must be True or False"):
        sdask.save(x, tmp_path / "d", overwrite="yes")
    with pytest.raises(TypeError, match="arrays of dtype object cannot be saved"):
        sdask.save(da.from_array(np.array([1, "a"], dtype=object), chunks=1), tmp_path / "d")
    with pytest.raises(ValueError, match="1 or more dimensions"):
        sdask.save(da.from_array(np.float32(1)), tmp_path / "d")
    unknown = da.from_array(np.arange(10), chunks=5)
    unknown = unknown[unknown > 3]
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        sdask.save(unknown, tmp_path / "d")
    with pytest.raises(NotImplementedError, match=r"shardload.numpy.save\(x.compute\(\)"):
        sdask.save(x, "s3://bucket/prefix/")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("dest,error,found", [
    ("s3://bucket/prefix/", NotImplementedError, "writes to a directory only"),
    ("https://h/prefix/", NotImplementedError, "writes to a directory only"),
    ("gs://bucket/prefix/", ValueError, "the gs:// scheme is not supported"),
    ("http:/h/prefix/", ValueError, "a URL needs two slashes after the scheme"),
])
def test_a_destination_no_directory_names_is_refused_as_its_store_says(tmp_path, monkeypatch,
                                                                        dest, error, found):
    """A store's keys (s3://, http(s)://) are no directory that every worker writes into; a
    scheme no store serves, or a mistyped URL, is no store at all and is refused as save
    refuses it (it was taken for object storage by its "SCHEME://" and told to save with
    shardload.numpy.save, which refuses it too). Nothing is written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error, match=found):
        sdask.save(da.from_array(np.ones((4, 2)), chunks=2), dest)
    assert os.listdir(tmp_path) == []


def test_a_damaged_handle_touches_nothing(tmp_path):
    handle = _core.staged_save_begin(os.fsencode(tmp_path / "d"), [4, 2], "int32", [4], "npy",
                                     False, True, "none")
    mine = tmp_path / "mine"
    mine.mkdir()
    forged = (handle[0], handle[1], os.fsencode(mine), *handle[3:])
    with pytest.raises(ValueError, match="expected the staging directory"):
        _core.staged_save_write(forged, 0, 4, np.zeros((4, 2), "int32"))
    _core.staged_save_abort(forged)
    assert mine.is_dir()
    with pytest.raises(TypeError, match="expected the handle of staged_save_begin"):
        _core.staged_save_abort(("x",))
    _core.staged_save_abort(handle)
    _core.staged_save_abort(handle)
    assert sorted(os.listdir(tmp_path)) == ["mine"]


@pytest.mark.parametrize("fmt", ["raw", "npy"])
def test_a_worker_process_refuses_a_staged_file_linked_in_from_outside(tmp_path, fmt):
    """A worker process, which made none of the staged files, wrote its rows through a hard
    link to a file outside the destination renamed over a staged shard (nothing to compare
    the file with there): the handle carries the files the save made, and the worker refuses
    another one before writing. The outside file is unchanged and nothing is published."""
    import glob
    import pickle
    import subprocess
    import sys
    handle = _core.staged_save_begin(os.fsencode(tmp_path / "d"), [4, 2], "float64", [4], fmt,
                                     False, True, "none")
    staging = os.fsdecode(handle[2])
    (shard,) = glob.glob(os.path.join(staging, "shard_0000*"))
    victim = tmp_path / "victim.dat"
    victim.write_bytes(b"k" * os.path.getsize(shard))
    os.link(victim, os.path.join(staging, ".x"))
    os.replace(os.path.join(staging, ".x"), shard)
    worker = ("import pickle, sys, numpy as np\n"
              "from shardload import _core\n"
              "h = pickle.loads(sys.stdin.buffer.read())\n"
              "_core.staged_save_write(h, 0, 4, np.full((4, 2), 5.0))\n")
    r = subprocess.run([sys.executable, "-c", worker], input=pickle.dumps(handle),
                       capture_output=True, timeout=120)
    err = r.stderr.decode()
    assert r.returncode != 0, err
    assert "ShardWriteError" in err and "is not the file the save made there" in err, err
    assert victim.read_bytes() == b"k" * os.path.getsize(victim)
    _core.staged_save_abort(handle)
    assert sorted(os.listdir(tmp_path)) == ["victim.dat"]


# ---- dask.distributed: 2 worker processes ----------------------------------------------------

def test_a_cluster_of_two_processes_writes_the_chunks_on_both_workers(tmp_path):
    distributed = pytest.importorskip("distributed")
    rng = np.random.default_rng(3)
    a = random_array(rng, (4000, 5), "float64")
    x = da.from_array(a, chunks=((500,) * 3 + (0,) + (500,) * 5, 5)) * 2
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None,
                                  worker_dashboard_address=None) as c, distributed.Client(c):
        info = sdask.save(x, tmp_path / "d", format="raw")
        assert info.processors == 2  # chunks written by both worker processes
        assert info.num_shards == 9
        y = da.from_array(a, chunks=(1000, 5)).map_blocks(_boom, dtype=a.dtype)
        with pytest.raises(RuntimeError, match="chunk 2 cannot be computed"):
            sdask.save(y, tmp_path / "failed")
    np.testing.assert_array_equal(shardload.numpy.load(tmp_path / "d"), a * 2)
    assert sorted(os.listdir(tmp_path)) == ["d"]


# ---- a fifth hostile pass: chunks that compute to something else ---------------------------
_B3 = np.arange(60.0).reshape(10, 2, 3)
LYING_CHUNKS = {
    "rows of another trailing shape": (lambda b: b.reshape(b.shape[0], 3, 2),
                                      r"expected rows of shape \(2, 3\), found \(3, 2\)"),
    "rows flattened": (lambda b: b.reshape(b.shape[0], 6),
                       r"expected rows of shape \(2, 3\), found \(6,\)"),
    "one row fewer": (lambda b: b[:-1], r"expected 5 rows, found 4"),
    "the same bytes as more rows": (lambda b: b.reshape(-1, 3), r"expected 5 rows, found 10"),
    "a scalar": (lambda b: np.float64(1.0), r"expected 5 rows"),
    "int64 bits of the floats": (lambda b: b.view(np.int64), r"expected float64, found int64"),
    "objects": (lambda b: b.astype(object), r"object"),
    "datetimes": (lambda b: b.astype("M8[ns]"), r"datetime64"),
}


@pytest.mark.parametrize("kind", LYING_CHUNKS)
def test_a_chunk_that_computes_to_another_shape_or_dtype_fails_the_save(tmp_path, kind):
    """A fifth hostile pass: a chunk whose computation gives other rows, another row shape or
    the same bytes in another dtype than the array declares fails the save naming its rows
    (or the dtype); nothing is published."""
    fn, msg = LYING_CHUNKS[kind]
    x = da.from_array(_B3, chunks=(5, 2, 3)).map_blocks(fn, dtype=np.float64)
    with pytest.raises((TypeError, ValueError), match=msg):
        sdask.save(x, tmp_path / "d")
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("kind", ["fortran", "matrix", "big-endian", "transposed copy"])
def test_chunks_in_any_memory_order_or_byte_order_save_their_values(tmp_path, kind):
    base = da.from_array(np.arange(40.0).reshape(10, 4), chunks=(5, 4))
    fn = {"fortran": np.asfortranarray, "matrix": np.asmatrix,
          "big-endian": lambda b: b.astype(">f8"),
          "transposed copy": lambda b: np.ascontiguousarray(b.T).T}[kind]
    sdask.save(base.map_blocks(fn, dtype=np.float64), tmp_path / "d")
    np.testing.assert_array_equal(shardload.numpy.load(tmp_path / "d"),
                                  np.arange(40.0).reshape(10, 4))


# ---- a seventh hostile pass: shapes of no bytes, a save over the dataset it computes from --

@pytest.mark.parametrize("fmt", ["npy", "raw", "zarr"])
@pytest.mark.parametrize("case", ["rows of 0 bytes", "no rows", "empty chunks around",
                                  "over its own source"])
def test_odd_shapes_and_a_save_over_its_own_source_read_back(tmp_path, fmt, case):
    dest = tmp_path / "d"
    if case == "rows of 0 bytes":
        want, x = np.zeros((10, 0)), da.zeros((10, 0), chunks=(3, 1))
    elif case == "no rows":
        want, x = np.zeros((0, 4)), da.zeros((0, 4), chunks=(3, 4))
    elif case == "empty chunks around":
        want = np.arange(12.0).reshape(6, 2)
        x = da.from_array(want, chunks=((0, 3, 0, 3, 0), (2,)))
    else:
        # The chunks read the old shards, and the overwrite replaces them only at the commit.
        old = np.arange(60.0).reshape(20, 3)
        shardload.numpy.save(old, dest, num_shards=3, format=fmt)
        want, x = old * 2, sdask.load(dest, chunks=5) * 2
    sdask.save(x, dest, format=fmt, overwrite=case == "over its own source")
    got = shardload.numpy.load(dest)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert staging_left(tmp_path) == []
