"""``shardload.numpy.save``: a numpy array written as shards by the engine's threads, without
Legate, published as ``shardload.save`` publishes (hidden staging directory renamed into
place, manifest last; to ``s3://`` the manifest as the commit point). Compared with numpy
(``np.load`` of each shard, zarr, the raw bytes) and read back with ``shardload.numpy.load``."""

from __future__ import annotations

import errno
import io
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import shardload
import shardload.numpy as snp
from conftest import random_array
from save_interrupt import ctrl_c_during_a_save_publishes_nothing, staging_dirs


def pieces(a: np.ndarray, rows: list[int]) -> list[np.ndarray]:
    """The oracle: a's axis 0 cut into pieces of these rows."""
    bounds = np.cumsum([0, *rows])
    return [a[bounds[i]:bounds[i + 1]] for i in range(len(rows))]


def even_rows(n: int, num_shards: int) -> list[int]:
    """shardload.save's split: ceil(n / num_shards) rows each, the last ones shorter or 0."""
    per = max(1, -(-n // num_shards))
    return [max(0, min(n, (i + 1) * per) - min(n, i * per)) for i in range(num_shards)]


def read_shard(dest, fmt: str, i: int, dtype, trailing, rows: int) -> np.ndarray:
    """Shard i as numpy (or zarr) reads it."""
    if fmt == "npy":
        return np.load(dest / f"shard_{i:04d}.npy")
    if fmt == "raw":
        return np.fromfile(dest / f"shard_{i:04d}.bin", dtype=dtype).reshape(rows, *trailing)
    zarr = pytest.importorskip("zarr")
    return zarr.open_array(str(dest / f"shard_{i:04d}.zarr"), mode="r", zarr_format=2)[...]


@pytest.mark.parametrize("fmt", ["npy", "raw", "zarr"])
@pytest.mark.parametrize("shape,dtype,split", [
    ((1001, 3), "float32", {"shard_rows": [500, 0, 1, 0, 500]}),   # ragged, empty shards
    ((10,), "int16", {"num_shards": 4}),                          # 3, 3, 3, 1; 1-D
    ((3, 2, 2), "uint8", {"num_shards": 5}),                      # more shards than rows
    ((7, 2, 1, 3), "complex128", {"num_shards": 2}),              # 4-D
    ((9, 4), "bool", {"num_shards": 3}),
    ((0, 5), "float64", {"num_shards": 3}),                       # no rows
    ((6, 0), "int32", {"num_shards": 2}),                         # rows of no bytes
])
def test_round_trip_against_numpy_per_shard_and_through_load(tmp_path, fmt, shape, dtype,
                                                             split):
    rng = np.random.default_rng(sum(shape) + len(shape))
    a = random_array(rng, shape, dtype)
    dest = tmp_path / "d"
    info = snp.save(a, dest, format=fmt, **split)
    rows = split.get("shard_rows") or even_rows(shape[0], split["num_shards"])
    assert info.num_shards == len(rows) and info.bytes == a.nbytes and info.target == "host"
    assert info.total_s >= info.write_s >= 0
    got = [read_shard(dest, fmt, i, a.dtype, shape[1:], r) for i, r in enumerate(rows)]
    for g, want in zip(got, pieces(a, rows)):
        assert g.dtype == a.dtype and g.shape == want.shape
        np.testing.assert_array_equal(g, want)
    np.testing.assert_array_equal(np.concatenate(got), a)
    assert (dest / "shardload.manifest").is_file()
    if fmt == "raw":
        side = json.loads((dest / "shardload.json").read_text())
        assert side["rows"] == rows
    layout = shardload.discover(dest, format=fmt)
    assert layout.manifest_state is shardload.ManifestState.USED, layout.manifest_status
    assert list(layout.shard_rows) == rows
    if a.nbytes:
        back = snp.load(dest, format=fmt)
        assert back.dtype == a.dtype and back.shape == a.shape
        np.testing.assert_array_equal(back, a)
    assert not staging_dirs(tmp_path)


def test_default_is_one_shard_per_core(tmp_path):
    a = np.arange(100, dtype=np.int64)
    info = snp.save(a, tmp_path / "d")
    assert info.num_shards == len(os.sched_getaffinity(0))
    np.testing.assert_array_equal(snp.load(tmp_path / "d"), a)


@pytest.mark.parametrize("make", [
    lambda a: a[::2],                      # not contiguous
    lambda a: np.asfortranarray(a),        # Fortran order
    lambda a: a.T,                         # transposed view
    lambda a: a.astype(a.dtype.newbyteorder(">")),  # other byte order
    lambda a: a[:, ::-1],                  # negative strides
], ids=["strided", "fortran", "transposed", "big_endian", "reversed"])
def test_any_numpy_array_is_saved_as_its_values(tmp_path, make):
    base = np.arange(8 * 6, dtype=np.float64).reshape(8, 6)
    x = make(base)
    snp.save(x, tmp_path / "d", num_shards=3)
    back = np.concatenate([np.load(tmp_path / "d" / f"shard_{i:04d}.npy") for i in range(3)])
    assert back.dtype == np.dtype("float64")  # native order
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("dtype", [object, [("a", "<i4"), ("b", "<f8")], "U3", "M8[s]",
                                   np.longdouble, "V8"],
                         ids=["object", "structured", "str", "datetime", "longdouble", "void"])
def test_dtypes_no_format_holds_are_refused(tmp_path, dtype):
    x = np.zeros(4, dtype=dtype)
    with pytest.raises(TypeError, match="cannot be saved"):
        snp.save(x, tmp_path / "d")
    assert not (tmp_path / "d").exists() and not staging_dirs(tmp_path)


def test_arguments_are_checked_as_shardload_save_checks_them(tmp_path):
    x = np.arange(6)
    d = tmp_path / "d"
    with pytest.raises(TypeError, match="expected a numpy.ndarray"):
        snp.save([1, 2, 3], d)
    with pytest.raises(TypeError, match="masked arrays cannot be saved"):
        snp.save(np.ma.masked_array([1, 2], mask=[0, 1]), d)
    with pytest.raises(ValueError, match="1 or more dimensions"):
        snp.save(np.array(1.0), d)
    with pytest.raises(ValueError, match="num_shards= must be from 1"):
        snp.save(x, d, num_shards=0)
    with pytest.raises(TypeError, match="num_shards= must be an integer"):
        snp.save(x, d, num_shards=True)
    with pytest.raises(ValueError, match="not both"):
        snp.save(x, d, num_shards=2, shard_rows=[3, 3])
    with pytest.raises(ValueError, match="add up to 5, but the array has 6 rows"):
        snp.save(x, d, shard_rows=[2, 3])
    with pytest.raises(ValueError, match="format= must be one of"):
        snp.save(x, d, format="hdf5")
    with pytest.raises(ValueError, match="is kept in the manifest"):
        snp.save(x, d, checksum="xxh3", manifest=False)
    with pytest.raises(ValueError, match="a Zarr shard is a directory"):
        snp.save(x, d, checksum="xxh3", format="zarr")
    with pytest.raises(ValueError, match="NUL"):
        snp.save(x, "a\0b")
    with pytest.raises(TypeError, match="overwrite= must be True or False"):
        snp.save(x, d, overwrite="yes")
    with pytest.warns(DeprecationWarning, match="info= is deprecated") as w:
        snp.save(x, d, info=True, num_shards=1)
    assert w[0].filename == __file__  # the warning points at the caller
    assert not staging_dirs(tmp_path)


def test_checksums_are_kept_for_verify(tmp_path):
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    snp.save(x, tmp_path / "d", num_shards=3, checksum="xxh3")
    assert shardload.verify(tmp_path / "d", on_host=True) == []
    shard = tmp_path / "d" / "shard_0001.npy"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1  # one bit of the last value, the size unchanged
    shard.write_bytes(bytes(data))
    bad = shardload.verify(tmp_path / "d", on_host=True)
    assert len(bad) == 1 and "shard_0001.npy" in str(bad[0])


def test_overwrite_rules(tmp_path):
    dest = tmp_path / "d"
    a = np.arange(6)
    b = np.arange(9) * 2
    snp.save(a, dest, num_shards=2)
    with pytest.raises(shardload.DestinationExistsError):
        snp.save(b, dest, num_shards=3)
    np.testing.assert_array_equal(snp.load(dest), a)
    inode = os.stat(dest).st_ino
    os.chmod(dest, 0o750)
    snp.save(b, dest, num_shards=3, overwrite=True)  # one atomic exchange
    np.testing.assert_array_equal(snp.load(dest), b)
    assert sorted(os.listdir(dest)) == [f"shard_{i:04d}.npy" for i in range(3)] + [
        "shardload.manifest"]
    assert os.stat(dest).st_ino != inode and os.stat(dest).st_mode & 0o777 == 0o750
    # A file a save did not write is refused, even with overwrite, and kept.
    (dest / "notes.txt").write_text("mine")
    with pytest.raises(shardload.DestinationExistsError, match="notes.txt"):
        snp.save(a, dest, overwrite=True)
    assert (dest / "notes.txt").read_text() == "mine"
    np.testing.assert_array_equal(snp.load(dest), b)
    # A regular file at dest is refused.
    (tmp_path / "f").write_text("x")
    with pytest.raises(OSError):
        snp.save(a, tmp_path / "f", overwrite=True)
    assert (tmp_path / "f").read_text() == "x"
    assert not staging_dirs(tmp_path)


@pytest.mark.parametrize("kind", ["file", "fifo", "/dev/null"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_destination_that_is_no_directory_is_refused_as_documented(tmp_path, kind, overwrite):
    """A regular file, a FIFO or a device at dest (docs/save.md, "Errors": "D is a file"):
    DestinationExistsError (EEXIST) without overwrite, ShardWriteError (ENOTDIR) with it, the
    same message, and nothing written there or beside it (no staging directory in /dev)."""
    if kind == "file":
        dest = tmp_path / "f"
        dest.write_text("x")
    elif kind == "fifo":
        dest = tmp_path / "p"
        os.mkfifo(dest)
    else:
        dest = pathlib.Path(kind)
    before = sorted(os.listdir(dest.parent))
    with pytest.raises(shardload.ShardWriteError) as e:
        snp.save(np.arange(6), dest, overwrite=overwrite)
    if overwrite:
        assert type(e.value) is shardload.ShardWriteError and e.value.errno == errno.ENOTDIR
    else:
        assert isinstance(e.value, shardload.DestinationExistsError)
        assert isinstance(e.value, FileExistsError) and e.value.errno == errno.EEXIST
    assert str(e.value) == (f"saving to {dest}: {dest}: the destination exists and is not a "
                            "directory (expected a directory of shards, or nothing)"), str(e.value)
    assert e.value.filename == str(dest)
    assert not staging_dirs(dest.parent)
    if kind != "/dev/null":  # /dev is the system's, and may change meanwhile
        assert sorted(os.listdir(dest.parent)) == before
    if kind == "file":
        assert dest.read_text() == "x"


def test_an_empty_existing_directory_is_filled(tmp_path):
    dest = tmp_path / "d"
    dest.mkdir()
    snp.save(np.arange(5), dest, num_shards=2)
    np.testing.assert_array_equal(snp.load(dest), np.arange(5))


def test_a_failed_write_leaves_nothing(tmp_path):
    """A file size limit (as a full disk would): a shard cannot be made at its size, the save
    raises ShardWriteError naming it, and nothing is left, staging directory included."""
    script = textwrap.dedent("""
        import resource, signal, sys
        import numpy as np
        import shardload, shardload.numpy
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
        try:
            shardload.numpy.save(np.ones((1 << 20, 2), np.float32), sys.argv[1], num_shards=4)
        except shardload.ShardWriteError as e:
            print("FAILED", e.errno, e.filename.rsplit("/", 1)[-1])
    """)
    dest = tmp_path / "d"
    r = subprocess.run([sys.executable, "-c", script, str(dest)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    word, errno_, name = r.stdout.split()
    assert word == "FAILED" and int(errno_) == 27 and name.startswith("shard_")  # EFBIG
    assert not dest.exists() and not staging_dirs(tmp_path)


def test_ctrl_c_during_a_save_publishes_nothing(tmp_path):
    """SIGINT arrives while the threads write (sent when the staging directory appears): the
    save raises KeyboardInterrupt, with the staging directory removed and nothing at dest."""
    ctrl_c_during_a_save_publishes_nothing(tmp_path, """
        import shardload.numpy
        x = np.ones((200000, 64), np.float32)
        """, "shardload.numpy.save(x, dest, num_shards=3000)")


PUBLISH_INTERRUPTED = """
import os, pathlib, signal, sys, threading, time, traceback
import numpy as np
import shardload.numpy as snp
dest, fmt, overwrite = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
if overwrite:
    snp.save(np.zeros((6, 4)), dest, num_shards=2, format=fmt)
new = np.arange(400000 * 4, dtype=np.float64).reshape(400000, 4)
def staged():
    return any(".shardload-tmp-" in n for n in os.listdir(dest.parent))
wake = threading.Lock()
wake.acquire()
killed = threading.Event()
def killer():
    # Let go at the save's last look (a lock's release keeps the GIL); it runs once the look
    # lets go of the GIL, as the publish step begins.
    wake.acquire()
    os.kill(os.getpid(), signal.SIGINT)
    killed.set()
threading.Thread(target=killer, daemon=True).start()
seen = []
def at_the_last_look(signum, frame):
    # Python's handlers run at the save's last look: the dataset complete in its staging
    # directory, not yet published.
    seen.append(staged())
    wake.release()
signal.signal(signal.SIGUSR1, at_the_last_look)
def poke():
    while not staged():
        time.sleep(0.0002)
    os.kill(os.getpid(), signal.SIGUSR1)
t = threading.Thread(target=poke)
t.start()
outcome = notes = None
try:
    try:
        snp.save(new, dest, num_shards=200, format=fmt, overwrite=overwrite)
        outcome = "SAVED"
    except KeyboardInterrupt as e:
        last = traceback.extract_tb(e.__traceback__)[-1]
        # Raised by the save's call itself, or later (after it returned: nothing to check).
        outcome = "IN THE CALL" if "host_save" in (last.line or "") else "AFTER THE CALL"
        notes = getattr(e, "__notes__", [])
    killed.wait(30)
except KeyboardInterrupt:
    outcome = "AFTER THE CALL"
t.join()
print("OUTCOME", outcome, "AT THE LOOK" if seen == [True] else "LATE")
print("NOTES", notes)
got = snp.load(dest, format=fmt) if dest.exists() else None
print("DEST", "new" if got is not None and np.array_equal(got, new) else
      "old" if got is not None and got.shape == (6, 4) else "other")
if fmt == "npy" and got is not None and got.shape == new.shape:
    oracle = np.concatenate([np.load(dest / f"shard_{i:04d}.npy") for i in range(200)])
    print("NUMPY", "new" if np.array_equal(oracle, new) else "other")
"""


@pytest.mark.parametrize("overwrite", [False, True], ids=["new", "overwrite"])
@pytest.mark.parametrize("fmt", ["npy", "raw", "zarr"])
def test_ctrl_c_during_the_publish_step_completes_the_save_and_says_so(tmp_path, fmt, overwrite):
    """A SIGINT that comes after the save's last look, during its publish step (the staged
    files checked again, the manifest, the rename, with overwrite the old dataset's removal),
    does not stop the publish: KeyboardInterrupt is raised after it, and its note says the save
    completed and where, so that the outcome is known (before: a bare KeyboardInterrupt with
    the new dataset in place and, with overwrite, the old one gone). The signal is sent by a
    thread that a handler run at the last look itself wakes."""
    for attempt in range(5):
        dest = tmp_path / f"o{attempt}"
        r = subprocess.run([sys.executable, "-c", PUBLISH_INTERRUPTED, str(dest), fmt,
                            "1" if overwrite else "0"], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr[-3000:]
        lines = r.stdout.splitlines()
        if lines[0] != "OUTCOME IN THE CALL AT THE LOOK":
            continue  # the look came before the poke, or the signal after the call returned
        assert "the save completed before this interrupt was raised" in lines[1], r.stdout
        assert str(dest) in lines[1], r.stdout
        assert "DEST new" in lines, r.stdout
        if fmt == "npy":
            assert "NUMPY new" in lines, r.stdout
        assert not staging_dirs(tmp_path)
        return
    pytest.skip(f"the signal came outside the publish step five times: {r.stdout}")


def test_numpy_save_imports_no_legate():
    """The NumPy front end saves without Legate: no legate or cupynumeric module is imported
    by importing it and saving."""
    script = textwrap.dedent("""
        import sys, tempfile, pathlib
        import numpy as np
        import shardload.numpy
        with tempfile.TemporaryDirectory() as t:
            shardload.numpy.save(np.arange(12).reshape(4, 3), pathlib.Path(t) / "d",
                                 num_shards=2)
            back = shardload.numpy.load(pathlib.Path(t) / "d")
        assert (back == np.arange(12).reshape(4, 3)).all()
        print(sorted(m for m in sys.modules
                     if m.split(".")[0] in ("legate", "cupynumeric")
                     or m == "shardload._legate"))
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "[]"


# --- s3:// -----------------------------------------------------------------------------------

def _need_moto():
    pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
    pytest.importorskip("boto3")


@pytest.mark.parametrize("fmt", ["npy", "raw"])
@pytest.mark.parametrize("split", [{"num_shards": 4}, {"shard_rows": [3, 0, 7, 0]}])
def test_s3_round_trip_per_object_and_through_load(bucket, fmt, split):
    _need_moto()
    rng = np.random.default_rng(3)
    a = rng.standard_normal((10, 3)).astype(np.float32)
    info = snp.save(a, bucket.url("d/"), format=fmt, storage_options=bucket.options, **split)
    rows = split.get("shard_rows") or even_rows(10, 4)
    assert info.num_shards == 4 and info.bytes == a.nbytes
    ext = "npy" if fmt == "npy" else "bin"
    names = [f"d/shard_{i:04d}.{ext}" for i in range(4)]
    got = bucket.client.list_objects_v2(Bucket=bucket.name, Prefix="d/")
    keys = sorted(o["Key"] for o in got.get("Contents", []))
    extra = ["d/shardload.json"] if fmt == "raw" else []
    assert keys == sorted([*names, *extra, "d/shardload.manifest"])
    for key, want in zip(names, pieces(a, rows)):
        body = bucket.client.get_object(Bucket=bucket.name, Key=key)["Body"].read()
        g = np.load(io.BytesIO(body)) if fmt == "npy" else np.frombuffer(
            body, np.float32).reshape(-1, 3)
        np.testing.assert_array_equal(g, want)
    back = snp.load(bucket.url("d/"), format=fmt, storage_options=bucket.options)
    np.testing.assert_array_equal(back, a)


def test_s3_overwrite_rules(bucket):
    _need_moto()
    a = np.arange(6, dtype=np.int32)
    snp.save(a, bucket.url("o/"), num_shards=2, storage_options=bucket.options)
    with pytest.raises(shardload.DestinationExistsError):
        snp.save(a * 2, bucket.url("o/"), num_shards=2, storage_options=bucket.options)
    snp.save(a * 3, bucket.url("o/"), num_shards=3, overwrite=True,
             storage_options=bucket.options)
    np.testing.assert_array_equal(snp.load(bucket.url("o/"), storage_options=bucket.options),
                                  a * 3)
    bucket.client.put_object(Bucket=bucket.name, Key="o/notes.txt", Body=b"mine")
    with pytest.raises(shardload.DestinationExistsError, match="notes.txt"):
        snp.save(a, bucket.url("o/"), overwrite=True, storage_options=bucket.options)
    assert bucket.client.get_object(Bucket=bucket.name, Key="o/notes.txt")["Body"].read() == \
        b"mine"


def test_s3_a_failed_save_publishes_no_manifest(bucket):
    """The bucket is not there: the save fails naming the destination and nothing is made."""
    _need_moto()
    url = bucket.url("x/").replace(bucket.name, bucket.name + "-missing", 1)
    with pytest.raises(OSError):
        snp.save(np.arange(4), url, num_shards=2, storage_options=bucket.options)


# ---- a fifth hostile pass: odd arrays --------------------------------------------------------
class _Sub(np.ndarray):
    pass


_x = np.arange(24.0).reshape(6, 4)
ODD_ARRAYS = {
    "matrix": lambda: np.asmatrix(_x),
    "recarray of a plain dtype": lambda: _x.view(np.recarray),
    "subclass": lambda: _x.view(_Sub),
    "read-only": lambda: np.frombuffer(_x.tobytes(), dtype=np.float64).reshape(6, 4),
    "every other row, reversed columns": lambda: _x[::2, ::-1],
    "negative stride": lambda: _x[::-1],
    "broadcast (stride 0)": lambda: np.broadcast_to(np.arange(4.0), (6, 4)),
    "unaligned": lambda: np.frombuffer(b"\0" + _x.tobytes(), dtype=np.float64, offset=1),
    "dtype with metadata": lambda: np.arange(6, dtype=np.dtype(np.int32, metadata={"k": 1})),
    "big-endian Fortran": lambda: np.asfortranarray(_x.astype(">f8")),
    "no rows": lambda: np.zeros((0, 4)),
    "rows of no elements": lambda: np.zeros((5, 0)),
    "bool bytes other than 0 and 1": lambda: np.array([0, 1, 2, 255], np.uint8).view(np.bool_),
}


@pytest.mark.parametrize("kind", ODD_ARRAYS)
def test_odd_arrays_save_as_numpy_holds_them(tmp_path, kind):
    """A fifth hostile pass: subclasses, read-only, strided, broadcast, unaligned and empty
    arrays are saved as numpy holds them: numpy.load of each shard gives back its rows."""
    a = ODD_ARRAYS[kind]()
    snp.save(a, tmp_path / "d", num_shards=2)
    back = np.concatenate([np.load(p) for p in sorted((tmp_path / "d").glob("shard_*.npy"))])
    assert back.shape == np.shape(a) and back.dtype == a.dtype.newbyteorder("=")
    np.testing.assert_array_equal(back.view(np.uint8) if a.dtype == bool else back,
                                  np.asarray(a).view(np.uint8) if a.dtype == bool else a)


@pytest.mark.parametrize("dtype", ["O", [("a", "<f8"), ("b", "<i4")], [("a", "<f8")],
                                   [("a", "<f8", (2,))], "M8[s]", "m8[ns]", "<U1", "|S2", "V8",
                                   "longdouble", "clongdouble"])
def test_dtypes_no_format_holds_are_refused_before_anything_is_written(tmp_path, dtype):
    a = np.zeros(6, dtype=dtype)
    with pytest.raises(TypeError, match="cannot be saved"):
        snp.save(a, tmp_path / "d")
    assert not (tmp_path / "d").exists()
