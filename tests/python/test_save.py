"""shardload.save under Legate: round trips through every format it writes, read back by
shardload.load and by the formats' own libraries (numpy, zarr-python) as oracles; overwrite
semantics; errors, with nothing half-written left visible."""

from __future__ import annotations

import json
import os
import pathlib
import stat
import warnings

import numpy as np
import pytest
import zarr

import shardload
from conftest import DTYPES, random_array

import cupynumeric as cn  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=FutureWarning)

FORMATS = ["npy", "raw", "zarr"]
EXT = {"npy": ".npy", "raw": ".bin", "zarr": ".zarr"}


def shard_names(d: pathlib.Path, fmt: str) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(EXT[fmt]))


def read_with_oracle(d: pathlib.Path, fmt: str, dtype: np.dtype,
                     trailing: tuple[int, ...]) -> np.ndarray:
    """The dataset as numpy / zarr-python read it, without shardload."""
    parts = []
    names = shard_names(d, fmt)
    if fmt == "raw":
        side = json.loads((d / "shardload.json").read_text())
        assert side["shape"] == list(trailing) and side["header_bytes"] == 0
        assert np.dtype(side["dtype"]) == dtype
        assert len(side["rows"]) == len(names)
    for i, name in enumerate(names):
        assert name == f"shard_{i:04d}{EXT[fmt]}"
        if fmt == "npy":
            parts.append(np.load(d / name))
        elif fmt == "zarr":
            parts.append(np.asarray(zarr.open_array(str(d / name), mode="r")[...]))
        else:
            flat = np.fromfile(d / name, dtype=dtype)
            if 0 in trailing:  # numpy cannot infer -1 beside a 0
                assert flat.size == 0
                flat = np.empty((side["rows"][i], *trailing), dtype)
            parts.append(flat.reshape((-1, *trailing)) if flat.ndim == 1 else flat)
            assert parts[-1].shape[0] == side["rows"][i]
    return np.concatenate(parts) if parts else np.empty((0, *trailing), dtype)


def no_staging_left(parent: pathlib.Path) -> bool:
    return not [p for p in parent.iterdir() if ".shardload-tmp-" in p.name]


def round_trip(tmp_path: pathlib.Path, x: np.ndarray, fmt: str, **kwargs) -> pathlib.Path:
    dest = tmp_path / "out"
    shardload.save(cn.asarray(x), dest, format=fmt, **kwargs)
    back = shardload.load(dest, format=fmt)
    assert back.shape == x.shape and back.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(back), x)
    np.testing.assert_array_equal(read_with_oracle(dest, fmt, x.dtype, x.shape[1:]), x)
    assert no_staging_left(tmp_path)
    return dest


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype(tmp_path, fmt, dtype):
    rng = np.random.default_rng(abs(hash((fmt, dtype))) % 2**32)
    x = random_array(rng, (37, 3), dtype)
    dest = round_trip(tmp_path, x, fmt, num_shards=4)
    assert len(shard_names(dest, fmt)) == 4


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape,num_shards", [
    ((101,), 3),            # 1-D
    ((23, 2, 3, 2), 5),     # N-D trailing shape
    ((0, 3), 3),            # zero rows: every shard empty
    ((5, 2), 8),            # more shards than rows: the last ones empty
    ((64, 4), 1),           # one shard
    ((50, 3), None),        # the default: one shard per processor
    ((9, 1), 9),            # one row per shard
    ((6, 0), 2),            # rows of zero bytes: files without data, Zarr stores without chunks
])
def test_layouts(tmp_path, fmt, shape, num_shards):
    rng = np.random.default_rng(3)
    x = random_array(rng, shape, "float32")
    dest = round_trip(tmp_path, x, fmt, num_shards=num_shards)
    names = shard_names(dest, fmt)
    # The default is one shard per CPU processor (LEGATE_CONFIG gives 2 in the tests).
    assert len(names) == (num_shards or shardload.save(x, tmp_path / "again").processors)


@pytest.mark.parametrize("fmt", FORMATS)
def test_rows_split_evenly(tmp_path, fmt):
    x = np.arange(10 * 3, dtype=np.int32).reshape(10, 3)
    dest = round_trip(tmp_path, x, fmt, num_shards=4)
    layout = shardload.discover(dest, format=fmt)
    assert list(layout.shard_rows) == [3, 3, 3, 1]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("rows", [[0, 4, 0, 5, 1, 0], [10], [1] * 10, [2, 7, 1]])
def test_shards_of_chosen_rows(tmp_path, fmt, rows):
    """shard_rows= keeps a sharding of the caller's (a loaded dataset's own, say): empty
    shards anywhere, shards that span the even tiles or share one."""
    rng = np.random.default_rng(len(rows))
    x = random_array(rng, (10, 2), "int32")
    dest = round_trip(tmp_path, x, fmt, shard_rows=rows)
    assert len(shard_names(dest, fmt)) == len(rows)
    assert list(shardload.discover(dest, format=fmt).shard_rows) == rows
    # The rows of a loaded dataset go back in as they came out.
    again = shardload.save(shardload.load(dest, format=fmt), tmp_path / "again", format=fmt,
                           shard_rows=shardload.discover(dest, format=fmt).shard_rows)
    assert again.num_shards == len(rows)
    assert list(shardload.discover(tmp_path / "again", format=fmt).shard_rows) == rows


def test_shard_rows_errors_name_the_argument(tmp_path):
    x = np.arange(20, dtype=np.int16).reshape(10, 2)
    cases = [
        ({"shard_rows": [4, 5]}, ValueError, "add up to 9, but the array has 10 rows"),
        ({"shard_rows": [2**62] * 3}, ValueError, "add up to more than the array's 10 rows"),
        ({"shard_rows": [2**63]}, ValueError, r"shard_rows\[0\] must be below 2\*\*63"),
        ({"shard_rows": [11, -1]}, ValueError, r"shard_rows\[1\] must be >= 0, found -1"),
        ({"shard_rows": []}, ValueError, "from 1 to 1000000 shards, found 0"),
        ({"shard_rows": [5, 5], "num_shards": 2}, ValueError, "not both"),
        ({"shard_rows": "55"}, TypeError, "sequence of integers"),
        ({"shard_rows": [5.0, 5]}, TypeError, r"shard_rows\[0\] must be an integer"),
        ({"shard_rows": [True, 9]}, TypeError, r"shard_rows\[0\] must be an integer"),
    ]
    for kwargs, kind, words in cases:
        with pytest.raises(kind, match=words):
            shardload.save(x, tmp_path / "out", **kwargs)
        assert not (tmp_path / "out").exists() and no_staging_left(tmp_path)
    # A numpy array of rows is taken as a sequence.
    shardload.save(x, tmp_path / "out", shard_rows=np.array([3, 7]))
    assert list(shardload.discover(tmp_path / "out").shard_rows) == [3, 7]


@pytest.mark.parametrize("fmt", FORMATS)
def test_views_that_are_not_dense(tmp_path, fmt):
    """A transposed view or a column slice: the task gathers its rows through a bounded
    buffer. (Legate takes no stepped slices such as [::2].)"""
    base = np.arange(12 * 40, dtype=np.float64).reshape(12, 40)
    c = cn.asarray(base)
    for i, (view, expected) in enumerate([(c.T, base.T), (c[:, 5:17], base[:, 5:17]),
                                          (c[3:9], base[3:9]),
                                          # Broadcast: Legate cannot tile the promoted axis,
                                          # so every point gets all rows and writes its own.
                                          (cn.broadcast_to(c[4], (30, 40)),
                                           np.broadcast_to(base[4], (30, 40))),
                                          (c.reshape(12, 4, 10).transpose((1, 2, 0)),
                                           base.reshape(12, 4, 10).transpose((1, 2, 0)))]):
        dest = tmp_path / f"v{i}"
        shardload.save(view, dest, format=fmt, num_shards=3)
        np.testing.assert_array_equal(np.asarray(shardload.load(dest, format=fmt)), expected)


def test_numpy_and_logical_array_inputs(tmp_path):
    x = np.arange(30, dtype=np.int64).reshape(10, 3)
    shardload.save(x, tmp_path / "np", num_shards=2)
    np.testing.assert_array_equal(np.asarray(shardload.load(tmp_path / "np")), x)
    from legate.core import LogicalArray

    c = cn.asarray(x)
    la = next(iter(c.__legate_data_interface__["data"].values()))
    assert isinstance(la, LogicalArray)
    shardload.save(la, tmp_path / "la", num_shards=3)
    np.testing.assert_array_equal(np.asarray(shardload.load(tmp_path / "la")), x)


def test_info(tmp_path):
    x = np.ones((100, 4), np.float32)
    info = shardload.save(x, tmp_path / "o", num_shards=5)
    assert isinstance(info, shardload.SaveInfo)
    assert info.num_shards == 5 and info.bytes == x.nbytes and info.target == "CPU"
    assert info.processors >= 1 and 1 <= info.tiles <= info.processors
    assert info.gb_per_s == pytest.approx(info.bytes / 1e9 / info.total_s)


def test_computed_array_round_trip(tmp_path):
    """The use case: a result computed in cuPyNumeric, saved, loaded by the next job."""
    a = cn.arange(3000, dtype=cn.float64).reshape(1000, 3)
    b = a * 2 + 1
    shardload.save(b, tmp_path / "o", num_shards=7, format="zarr")
    np.testing.assert_array_equal(np.asarray(shardload.load(tmp_path / "o", format="zarr")),
                                  np.arange(3000, dtype=np.float64).reshape(1000, 3) * 2 + 1)


# --- overwrite ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_existing_dataset_is_refused_without_overwrite(tmp_path, fmt):
    dest = tmp_path / "o"
    first = np.arange(20, dtype=np.int16)
    shardload.save(first, dest, format=fmt, num_shards=2)
    before = sorted(os.listdir(dest))
    with pytest.raises(shardload.DestinationExistsError) as e:
        shardload.save(np.zeros(5, np.int16), dest, format=fmt, num_shards=2)
    assert isinstance(e.value, FileExistsError)
    assert str(dest) in str(e.value) and "overwrite" in str(e.value)
    assert sorted(os.listdir(dest)) == before
    np.testing.assert_array_equal(np.asarray(shardload.load(dest, format=fmt)), first)
    assert no_staging_left(tmp_path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_overwrite_replaces_every_old_shard(tmp_path, fmt):
    dest = tmp_path / "o"
    shardload.save(np.arange(40, dtype=np.float32), dest, format=fmt, num_shards=6)
    new = np.arange(10, dtype=np.float32) * -1
    shardload.save(new, dest, format=fmt, num_shards=2, overwrite=True)
    assert shard_names(dest, fmt) == [f"shard_{i:04d}{EXT[fmt]}" for i in range(2)]
    np.testing.assert_array_equal(np.asarray(shardload.load(dest, format=fmt)), new)
    assert no_staging_left(tmp_path)


def test_overwrite_across_formats(tmp_path):
    dest = tmp_path / "o"
    shardload.save(np.arange(12.0), dest, format="raw", num_shards=3)
    shardload.save(np.arange(6.0), dest, format="npy", num_shards=2, overwrite=True)
    assert sorted(os.listdir(dest)) == ["shard_0000.npy", "shard_0001.npy", "shardload.manifest"]
    np.testing.assert_array_equal(np.asarray(shardload.load(dest)), np.arange(6.0))


def test_empty_directory_is_used(tmp_path):
    dest = tmp_path / "o"
    dest.mkdir()
    shardload.save(np.arange(6), dest, num_shards=2)
    np.testing.assert_array_equal(np.asarray(shardload.load(dest)), np.arange(6))


def test_overwrite_refuses_a_directory_with_other_files(tmp_path):
    dest = tmp_path / "o"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    (dest / "shard_0000.npy").write_bytes(b"old")
    with pytest.raises(shardload.DestinationExistsError, match="notes.txt"):
        shardload.save(np.arange(6), dest, overwrite=True)
    assert (dest / "notes.txt").read_text() == "mine"
    assert (dest / "shard_0000.npy").read_bytes() == b"old"
    assert no_staging_left(tmp_path)


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("overwrite", [False, True])
def test_destination_is_a_file(tmp_path, overwrite):
    dest = tmp_path / "f"
    dest.write_text("x")
    with pytest.raises(shardload.ShardWriteError, match="not a directory") as e:
        shardload.save(np.arange(3), dest, overwrite=overwrite)
    assert e.value.filename == str(dest)
    assert dest.read_text() == "x"
    assert no_staging_left(tmp_path)


def test_destination_is_a_symlink(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(shardload.ShardWriteError, match="symbolic link"):
        shardload.save(np.arange(3), tmp_path / "link", overwrite=True)
    assert not os.listdir(tmp_path / "real")


def test_unwritable_parent(tmp_path):
    if os.geteuid() == 0:
        # Permission bits do not stop root; /proc takes no new directories from anyone.
        dest = pathlib.Path("/proc/shardload-save-test")
    else:
        parent = tmp_path / "ro"
        parent.mkdir()
        parent.chmod(stat.S_IRUSR | stat.S_IXUSR)
        dest = parent / "o"
    with pytest.raises(shardload.ShardWriteError, match="staging directory") as e:
        shardload.save(np.arange(3), dest)
    assert e.value.errno is not None
    assert not dest.exists()


def test_missing_parent(tmp_path):
    with pytest.raises(shardload.ShardWriteError) as e:
        shardload.save(np.arange(3), tmp_path / "no" / "such" / "dir")
    assert e.value.errno == 2


def test_fifo_in_place_of_a_shard(tmp_path):
    dest = tmp_path / "o"
    shardload.save(np.arange(8), dest, num_shards=2)
    (dest / "shard_0001.npy").unlink()
    os.mkfifo(dest / "shard_0001.npy")
    with pytest.raises(shardload.ShardWriteError, match="not a regular file") as e:
        shardload.save(np.arange(4), dest, num_shards=2, overwrite=True)
    assert e.value.filename == str(dest / "shard_0001.npy")
    assert stat.S_ISFIFO(os.lstat(dest / "shard_0001.npy").st_mode)
    assert no_staging_left(tmp_path)


def test_non_utf8_destination(tmp_path):
    dest = os.path.join(os.fsencode(tmp_path), b"out\xff\xfe")
    x = np.arange(15, dtype=np.uint8).reshape(5, 3)
    shardload.save(x, dest, num_shards=2)
    assert sorted(os.listdir(dest)) == [b"shard_0000.npy", b"shard_0001.npy",
                                        b"shardload.manifest"]
    np.testing.assert_array_equal(np.asarray(shardload.load(os.fsdecode(dest))), x)
    with pytest.raises(shardload.DestinationExistsError) as e:
        shardload.save(x, os.fsdecode(dest))
    assert os.fsencode(e.value.filename) == dest


@pytest.mark.parametrize("name", ["out[1]", "o*t?", "{a,b}", "x y"])
def test_glob_characters_in_destination(tmp_path, name):
    dest = tmp_path / name
    x = np.arange(12, dtype=np.float64).reshape(4, 3)
    shardload.save(x, dest, num_shards=3)
    assert sorted(os.listdir(dest)) == [f"shard_{i:04d}.npy" for i in range(3)] + [
        "shardload.manifest"]
    # An existing directory is taken as what it is, glob characters and all.
    np.testing.assert_array_equal(np.asarray(shardload.load(dest)), x)


def test_bad_arguments(tmp_path):
    x = np.arange(4)
    with pytest.raises(ValueError, match="format"):
        shardload.save(x, tmp_path / "a", format="hdf5")
    for bad in (0, -1):
        with pytest.raises(ValueError, match="num_shards"):
            shardload.save(x, tmp_path / "a", num_shards=bad)
    for bad in (1.5, True, "2"):
        with pytest.raises(TypeError, match="num_shards"):
            shardload.save(x, tmp_path / "a", num_shards=bad)
    with pytest.raises(ValueError, match="empty"):
        shardload.save(x, "")
    with pytest.raises(ValueError, match="NUL"):
        shardload.save(x, str(tmp_path / "a\0b"))
    with pytest.raises(TypeError, match="path"):
        shardload.save(x, 3)
    with pytest.raises(TypeError, match="cupynumeric"):
        shardload.save([1, 2, 3], tmp_path / "a")
    with pytest.raises(ValueError, match="dimensions"):
        shardload.save(cn.asarray(np.float32(3)), tmp_path / "a")
    with pytest.raises(TypeError, match="overwrite"):
        shardload.save(x, tmp_path / "a", overwrite=1)
    assert not (tmp_path / "a").exists() and no_staging_left(tmp_path)


def test_a_masked_array_is_refused_as_numpy_save_refuses_it(tmp_path):
    """Its mask was dropped without a word and the masked-out values saved as data."""
    x = np.ma.masked_greater(np.arange(10), 5)
    with pytest.raises(TypeError, match="masked arrays cannot be saved"):
        shardload.save(x, tmp_path / "a", num_shards=2)
    assert not (tmp_path / "a").exists() and no_staging_left(tmp_path)


def test_dot_destination_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="by its name"):
        shardload.save(np.arange(3), ".", overwrite=True)


# --- shardload write goes through save ----------------------------------------------------


def test_cli_write_is_a_save(tmp_path, cli):
    import subprocess

    from conftest import synth

    out = tmp_path / "set"
    r = subprocess.run([cli, "write", "--shard-dir", out, "--num-shards", "5", "--shape",
                        "1000,3", "--dtype", "int16", "--seed", "4"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"wrote 5 shards to {out}: shape (1000, 3) int16, seed 4\n"
    meta = json.loads((out / "_meta.json").read_text())
    whole = np.concatenate([np.load(out / f"shard_{i:04d}.npy") for i in range(5)])
    assert [len(np.load(out / f"shard_{i:04d}.npy")) for i in range(5)] == meta["rows"]
    np.testing.assert_array_equal(whole.reshape(-1), synth("int16", 4, 0, whole.size))
    assert no_staging_left(tmp_path)
    # Its output is a saved dataset: a save may replace it, and it replaces a save.
    shardload.save(np.arange(4), out, overwrite=True)
    assert sorted(os.listdir(out)) == ["shard_0000.npy", "shard_0001.npy", "shardload.manifest"]
    r = subprocess.run([cli, "write", "--shard-dir", out, "--num-shards", "2", "--shape", "7"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(out)) == ["_meta.json", "shard_0000.npy", "shard_0001.npy",
                                       "shardload.manifest"]
    # A directory with other files is refused, untouched, never emptied or mixed.
    (out / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    r = subprocess.run([cli, "write", "--shard-dir", out, "--num-shards", "3", "--shape", "9"],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert "shardload write: error:" in r.stderr and "notes.txt" in r.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert no_staging_left(tmp_path)


def test_a_failed_write_leaves_nothing(tmp_path):
    """A file size limit (as a full disk would) fails creating the shards: ShardWriteError
    naming the file and the errno, the staging directory removed, the destination absent."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import errno, os, resource, signal
        import numpy as np
        import shardload
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
        try:
            shardload.save(np.zeros((1 << 20, 4), np.float32), {str(tmp_path / 'o')!r},
                           num_shards=2)
        except shardload.ShardWriteError as e:
            assert e.errno == errno.EFBIG, e.errno
            assert e.filename.endswith("shard_0000.npy"), e.filename
            print("RAISED", e)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "RAISED" in r.stdout and "File too large" in r.stdout, r.stdout
    assert not (tmp_path / "o").exists()
    assert no_staging_left(tmp_path)


def test_concurrent_saves_to_one_destination(tmp_path):
    """Two saves racing for one destination: one wins whole, the other is refused."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import sys
        import numpy as np
        import shardload
        v = int(sys.argv[2])
        try:
            shardload.save(np.full((200000, 4), v, np.int32), sys.argv[1], num_shards=3)
            print("SAVED")
        except shardload.DestinationExistsError:
            print("REFUSED")
    """)
    dest = tmp_path / "o"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(dest), str(v)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for v in (1, 2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    results = sorted(o[0].strip() for o in outs)
    assert results == ["REFUSED", "SAVED"]
    x = np.asarray(shardload.load(dest))
    assert x.shape == (200000, 4) and len(np.unique(x)) == 1  # one writer's data, never a mix
    assert no_staging_left(tmp_path)


def test_a_reader_during_overwrites_never_sees_a_mix(tmp_path):
    """A reader (host reads, in another process) loops over the destination while it is
    overwritten again and again with datasets of one value each: every read that succeeds
    returns one whole dataset; the others fail with shardload's errors, never a mix."""
    import subprocess
    import sys
    import textwrap

    dest = tmp_path / "o"
    shardload.save(np.full((30000, 4), 0, np.int32), dest, num_shards=3)
    reader = textwrap.dedent(f"""
        import sys, time
        import numpy as np
        import shardload
        ok = failed = 0
        shardload.discover({str(dest)!r}).read()
        print("READY", flush=True)
        end = time.monotonic() + 600
        while time.monotonic() < end:
            try:
                x = shardload.discover({str(dest)!r}).read()
            except (shardload.LayoutError, shardload.ShardReadError, FileNotFoundError):
                failed += 1
            else:
                assert x.shape == (30000, 4), x.shape
                assert len(np.unique(x)) == 1, np.unique(x)
                ok += 1
            if sys.stdin.closed:
                break
            import select
            if select.select([sys.stdin], [], [], 0)[0]:
                break
        print("READS", ok, failed)
    """)
    p = subprocess.Popen([sys.executable, "-c", reader], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "READY", p.stderr.read()[-3000:]
        for v in range(1, 25):
            shardload.save(np.full((30000, 4), v, np.int32), dest, num_shards=3, overwrite=True)
    finally:
        out, errs = p.communicate("stop\n", timeout=300)
    assert p.returncode == 0, errs[-3000:]
    ok, failed = (int(n) for n in out.split()[1:3])
    print(f"reads during the overwrites: {ok} whole datasets, {failed} refused")
    assert ok + failed >= 2, (ok, failed)
    np.testing.assert_array_equal(np.asarray(shardload.load(dest)), np.full((30000, 4), 24))
    assert no_staging_left(tmp_path)


def test_cli_write_larger_than_legate_memory_is_refused(tmp_path, cli):
    import subprocess

    env = {**os.environ,
           "LEGATE_CONFIG": "--cpus 2 --utility 1 --gpus 0 --sysmem 256 --logging gpu=6,threads=5"}
    r = subprocess.run([cli, "write", "--shard-dir", tmp_path / "o", "--num-shards", "3",
                        "--shape", "100000000,2"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "the dataset needs 800000000 bytes" in r.stderr and "--sysmem" in r.stderr
    assert not (tmp_path / "o").exists() and no_staging_left(tmp_path)


# ---- a fifth hostile pass: odd numpy arrays given to shardload.save ---------------------------
class _Sub(np.ndarray):
    pass


_X = np.arange(24.0).reshape(6, 4)


@pytest.mark.parametrize("kind,make", [
    ("matrix", lambda: np.asmatrix(_X)),
    ("recarray of a plain dtype", lambda: _X.view(np.recarray)),
    ("subclass", lambda: _X.view(_Sub)),
    ("read-only", lambda: np.frombuffer(_X.tobytes(), dtype=np.float64).reshape(6, 4)),
    ("every other row, reversed columns", lambda: _X[::2, ::-1]),
    ("broadcast (stride 0)", lambda: np.broadcast_to(np.arange(4.0), (6, 4))),
    ("unaligned", lambda: np.frombuffer(b"\0" + _X.tobytes(), dtype=np.float64, offset=1)),
    ("big-endian Fortran", lambda: np.asfortranarray(_X.astype(">f8"))),
    ("no rows", lambda: np.zeros((0, 4))),
], ids=lambda v: v if isinstance(v, str) else "")
def test_odd_numpy_arrays_save_as_numpy_holds_them(tmp_path, kind, make):
    """A fifth hostile pass: subclasses, read-only, strided, broadcast, unaligned and empty
    numpy arrays given to shardload.save are saved with their values; numpy.load of the shards
    gives them back."""
    a = make()
    shardload.save(a, tmp_path / "d", num_shards=2)
    back = np.concatenate([np.load(p) for p in sorted((tmp_path / "d").glob("shard_*.npy"))])
    assert back.shape == np.shape(a)
    np.testing.assert_array_equal(back, np.asarray(a))


@pytest.mark.parametrize("dtype", ["O", [("a", "<f8"), ("b", "<i4")], "M8[s]", "<U1", "V8",
                                   "longdouble"])
def test_numpy_arrays_of_dtypes_no_format_holds_are_refused(tmp_path, dtype):
    with pytest.raises(TypeError):
        shardload.save(np.zeros(6, dtype=dtype), tmp_path / "d")
    assert not (tmp_path / "d").exists()
