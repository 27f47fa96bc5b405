"""shardload.save against a hostile or careless user: an overwrite never deletes a file that
is not a saved dataset's, to the last file inside a Zarr store; the destination keeps its
mode, owner, group and extended attributes; a killed save's staging directory is cleaned by
the next save and never discovered; Ctrl-C publishes nothing; arrays derived from 0-d values,
big-endian arrays and long names save; bad arguments are typed errors."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings

import numpy as np
import pytest
import zarr

import shardload
from save_interrupt import ctrl_c_during_a_save_publishes_nothing, staging_dirs

import cupynumeric as cn  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=FutureWarning)

MANIFEST = "shardload.manifest"


def tree(d: pathlib.Path) -> dict[str, bytes]:
    """Every file below d with its bytes."""
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def host() -> str:
    return "".join(c if c.isalnum() or c in "._" else "_" for c in socket.gethostname())


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


# --- item 1: an overwrite deletes only what a save wrote ------------------------------------


@pytest.mark.parametrize("manifest", [True, False])
@pytest.mark.parametrize("extra", [".zattrs", "results.txt", "sub/x.npy", "0.0.0", "00.0"])
def test_overwrite_refuses_a_users_file_inside_a_zarr_store(tmp_path, manifest, extra):
    dest = tmp_path / "ds"
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    shardload.save(x, dest, format="zarr", num_shards=2, manifest=manifest)
    target = dest / "shard_0001.zarr" / extra
    target.parent.mkdir(exist_ok=True)
    if extra == ".zattrs":  # as zarr-python writes it
        zarr.open_array(str(dest / "shard_0001.zarr"), mode="r+").attrs["owner"] = "me"
    else:
        target.write_bytes(b"mine")
    before = tree(dest)
    with pytest.raises(shardload.DestinationExistsError, match="shard_0001.zarr/") as e:
        shardload.save(np.zeros((4, 2), np.float32), dest, format="zarr", overwrite=True)
    # zarr-python rewrites .zarray beside the .zattrs it adds: either is named first.
    named = {".zattrs": (".zattrs", ".zarray")}.get(extra, (extra.split("/")[0],))
    assert any(f"shard_0001.zarr/{n}'" in str(e.value) for n in named), str(e.value)
    assert "remove it or save elsewhere" in str(e.value)
    assert tree(dest) == before
    assert not staging_dirs(tmp_path)


@pytest.mark.parametrize("manifest", [True, False])
@pytest.mark.parametrize("fmt", ["npy", "raw", "zarr"])
def test_overwrite_of_a_saved_dataset_still_works(tmp_path, fmt, manifest):
    dest = tmp_path / "ds"
    shardload.save(np.arange(30, dtype=np.int32).reshape(10, 3), dest, format=fmt,
                   num_shards=3, manifest=manifest)
    new = np.arange(12, dtype=np.int32).reshape(4, 3) * -1
    shardload.save(new, dest, format=fmt, num_shards=2, overwrite=True)
    np.testing.assert_array_equal(np.asarray(shardload.load(dest, format=fmt)), new)
    assert not staging_dirs(tmp_path)


def test_overwrite_refuses_a_shard_replaced_since_the_save(tmp_path):
    dest = tmp_path / "ds"
    shardload.save(np.arange(20, dtype=np.int64), dest, num_shards=2)
    mine = np.arange(7, dtype=np.int64) * 100
    np.save(dest / "shard_0001.npy", mine)  # the user's own file under a shard's name
    with pytest.raises(shardload.DestinationExistsError,
                       match=r"'shard_0001.npy', which changed since the save wrote it"):
        shardload.save(np.arange(4), dest, overwrite=True)
    np.testing.assert_array_equal(np.load(dest / "shard_0001.npy"), mine)


def test_overwrite_refuses_a_shard_the_manifest_does_not_list(tmp_path):
    dest = tmp_path / "ds"
    shardload.save(np.arange(20, dtype=np.int64), dest, num_shards=2)
    np.save(dest / "shard_0002.npy", np.arange(3))
    with pytest.raises(shardload.DestinationExistsError,
                       match=r"'shard_0002.npy', which the dataset's manifest .* does not list"):
        shardload.save(np.arange(4), dest, overwrite=True)
    assert (dest / "shard_0002.npy").exists()


def test_overwrite_refuses_a_chunk_the_store_does_not_have(tmp_path):
    """With a manifest, a chunk key past the store's rows is not the save's."""
    dest = tmp_path / "ds"
    shardload.save(np.arange(10, dtype=np.int8), dest, format="zarr", num_shards=1)
    (dest / "shard_0000.zarr" / "1").write_bytes(b"\0" * 10)
    with pytest.raises(shardload.DestinationExistsError, match=r"'shard_0000.zarr/1'"):
        shardload.save(np.arange(4), dest, format="zarr", overwrite=True)
    assert (dest / "shard_0000.zarr" / "1").exists()


def test_overwrite_refuses_a_damaged_manifest(tmp_path):
    dest = tmp_path / "ds"
    shardload.save(np.arange(10), dest, num_shards=2)
    (dest / MANIFEST).write_bytes(b"not a manifest")
    with pytest.raises(shardload.DestinationExistsError, match="its manifest cannot be read"):
        shardload.save(np.arange(4), dest, overwrite=True)
    assert (dest / "shard_0000.npy").exists()


def test_cli_write_refuses_a_users_file_inside_a_store(tmp_path, cli):
    dest = tmp_path / "ds"
    shardload.save(np.arange(10, dtype=np.float32), dest, format="zarr", num_shards=2)
    (dest / "shard_0000.zarr" / "notes.txt").write_text("mine")
    before = tree(dest)
    r = subprocess.run([cli, "write", "--shard-dir", dest, "--num-shards", "2", "--shape", "6"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "shard_0000.zarr/notes.txt" in r.stderr
    assert tree(dest) == before


# --- item 2: the destination keeps its attributes --------------------------------------------


def _xattr_supported(p: pathlib.Path) -> bool:
    try:
        os.setxattr(p, "user.shardload-test", b"1")
        os.removexattr(p, "user.shardload-test")
        return True
    except OSError:
        return False


@pytest.mark.parametrize("fmt", ["npy", "zarr"])
def test_overwrite_keeps_mode_owner_group_and_xattrs(tmp_path, fmt):
    dest = tmp_path / "ds"
    shardload.save(np.arange(10), dest, num_shards=2, format=fmt)
    os.chmod(dest, 0o750)
    if os.geteuid() == 0:
        os.chown(dest, 4321, 4322)
    xattrs = _xattr_supported(dest)
    if xattrs:
        os.setxattr(dest, "user.project", b"shardload \x00 test")
    want = os.stat(dest)
    shardload.save(np.arange(6), dest, num_shards=3, format=fmt, overwrite=True)
    got = os.stat(dest)
    assert stat.S_IMODE(got.st_mode) == 0o750
    assert (got.st_uid, got.st_gid) == (want.st_uid, want.st_gid)
    assert got.st_ino != want.st_ino  # it was replaced, not rewritten in place
    if xattrs:
        assert os.getxattr(dest, "user.project") == b"shardload \x00 test"
    np.testing.assert_array_equal(np.asarray(shardload.load(dest, format=fmt)), np.arange(6))


def test_a_pre_created_empty_destination_keeps_its_attributes(tmp_path):
    dest = tmp_path / "ds"
    dest.mkdir()
    os.chmod(dest, 0o700)
    if os.geteuid() == 0:
        os.chown(dest, 4321, 4322)
    want = os.stat(dest)
    shardload.save(np.arange(10), dest, num_shards=2)
    got = os.stat(dest)
    assert stat.S_IMODE(got.st_mode) == 0o700
    assert (got.st_uid, got.st_gid) == (want.st_uid, want.st_gid)


def _searchable_by_everyone(path: pathlib.Path) -> bool:
    """Whether every directory from / down to `path` lets any user pass (o+x)."""
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [path, *path.parents])


@pytest.fixture
def world_reachable_dir(tmp_path):
    """An empty directory that any user can reach. pytest's own tmp_path lies under
    pytest-of-USER, which only its owner may enter; a test that runs a child as another user
    makes its directory where that user can reach it (the system's temporary directory)."""
    if _searchable_by_everyone(tmp_path):
        yield tmp_path
        return
    base = pathlib.Path(tempfile.gettempdir())
    if not _searchable_by_everyone(base):
        pytest.fail(f"no directory that another user can reach: {tmp_path} and {base} are not")
    d = pathlib.Path(tempfile.mkdtemp(prefix="shardload-other-user-", dir=base))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _writable_by_everyone(base: pathlib.Path) -> pathlib.Path:
    """A directory under `base` that any user may write (the tests below need root, to run
    their save as another user)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the save as another user")
    parent = base / "shared"
    parent.mkdir()
    os.chmod(base, 0o755)
    os.chmod(parent, 0o777)
    return parent


def test_a_destination_of_another_owner_is_refused_before_writing(world_reachable_dir):
    """A save by another user (uid 65534, in a child) into a directory it may write, to an
    empty destination that root made and everyone may write: it cannot give the new directory
    root's ownership, so it is refused, with root's directory left as it was."""
    parent = _writable_by_everyone(world_reachable_dir)
    dest = parent / "ds"
    dest.mkdir()
    os.chmod(dest, 0o777)  # the other user may look and write: only the owner stops it
    before = os.stat(dest)
    r = _run_as_nobody(_SAVE_AS_NOBODY, dest, parent)
    assert r.stdout.startswith("REFUSED 1 "), r.stdout
    assert "belongs to user 0" in r.stdout, r.stdout
    after = os.stat(dest)
    assert (after.st_ino, after.st_uid, stat.S_IMODE(after.st_mode)) == (
        before.st_ino, 0, 0o777)
    assert not os.listdir(dest) and not staging_dirs(parent)


def test_a_destination_another_user_cannot_enter_is_refused_naming_it(world_reachable_dir):
    """The same save into root's directory of mode 0700: the other user cannot even look at
    what is there, and is told so (EACCES), with nothing written."""
    parent = _writable_by_everyone(world_reachable_dir)
    dest = parent / "ds"
    dest.mkdir(mode=0o700)
    (dest / "keep.txt").write_text("root's")
    r = _run_as_nobody(_SAVE_AS_NOBODY, dest, parent)
    assert r.stdout.startswith("REFUSED 13 "), r.stdout
    assert str(dest) in r.stdout, r.stdout
    assert sorted(os.listdir(dest)) == ["keep.txt"] and not staging_dirs(parent)


_SAVE_AS_NOBODY = textwrap.dedent("""
    import sys
    import numpy as np
    import shardload
    try:
        shardload.save(np.arange(10), sys.argv[1], num_shards=2)
        print("SAVED")
    except shardload.ShardWriteError as e:
        print("REFUSED", e.errno, e)
""")


def _run_as_nobody(script: str, dest: pathlib.Path, cwd: pathlib.Path):
    """Runs `script` with `dest` as uid/gid 65534. Skips only where that user cannot run this
    interpreter with shardload at all (a venv or checkout under a home only root may enter);
    once it can, any failure of the script fails the test."""
    env = {**os.environ, "HOME": str(cwd), "TMPDIR": str(cwd)}

    def run(*args: str):
        return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                              timeout=300, env=env, cwd=cwd,
                              preexec_fn=lambda: (os.setgid(65534), os.setuid(65534)))

    try:
        probe = run("-c", "import shardload")
    except PermissionError as e:  # the interpreter lies where that user cannot reach
        pytest.skip(f"cannot run the interpreter as uid 65534 here: {e}")
    if probe.returncode != 0:
        pytest.skip(f"uid 65534 cannot import shardload here: {probe.stderr[-300:]}")
    r = run("-c", script, str(dest))
    assert r.returncode == 0, r.stderr[-2000:]
    return r


@pytest.mark.parametrize("mask", [0o002, 0o077])
def test_new_files_get_the_modes_the_umask_gives(tmp_path, mask):
    old = os.umask(mask)
    try:
        shardload.save(np.arange(10), tmp_path / "n", num_shards=2)
        shardload.save(np.arange(10), tmp_path / "z", num_shards=2, format="zarr")
    finally:
        os.umask(old)
    for d in (tmp_path / "n", tmp_path / "z", tmp_path / "z" / "shard_0000.zarr"):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o777 & ~mask, d
    for f in ("n/shard_0000.npy", "z/shard_0000.zarr/.zarray", "z/shard_0000.zarr/0"):
        assert stat.S_IMODE(os.stat(tmp_path / f).st_mode) == 0o666 & ~mask, f


# --- item 14: a killed save's staging directory ----------------------------------------------


def test_stale_staging_directories_are_removed_by_the_next_save(tmp_path):
    dest = tmp_path / "ds"
    live = subprocess.Popen(["sleep", "600"])
    try:
        stale = tmp_path / f".ds.shardload-tmp-{host()}-{dead_pid()}-3"
        alive = tmp_path / f".ds.shardload-tmp-{host()}-{live.pid}-0"
        elsewhere = tmp_path / f".ds.shardload-tmp-otherhost-{dead_pid()}-0"
        other_dest = tmp_path / f".ds2.shardload-tmp-{host()}-{dead_pid()}-0"
        not_exact = tmp_path / f".ds.shardload-tmp-{host()}-{dead_pid()}-0x"
        for d in (stale, alive, elsewhere, other_dest, not_exact):
            d.mkdir()
            (d / "shard_0000.npy").write_bytes(b"partial")
        shardload.save(np.arange(10), dest, num_shards=2)
        assert not stale.exists()
        for d in (alive, elsewhere, other_dest, not_exact):
            assert (d / "shard_0000.npy").exists(), d
    finally:
        live.kill()
        live.wait()


def _kill_a_save_midway(tmp_path: pathlib.Path) -> pathlib.Path:
    """Runs a save in a child and SIGKILLs it once its staging directory exists; returns the
    staging directory left behind."""
    script = textwrap.dedent("""
        import sys
        import numpy as np
        import shardload
        shardload.save(np.ones((200000, 8), np.float32), sys.argv[1], num_shards=2000)
        print("SAVED")
    """)
    for attempt in range(3):
        dest = tmp_path / f"killed{attempt}"
        p = subprocess.Popen([sys.executable, "-c", script, str(dest)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            while p.poll() is None and not staging_dirs(tmp_path):
                time.sleep(0.001)
            p.kill()
        finally:
            p.communicate(timeout=300)
        left = [tmp_path / n for n in staging_dirs(tmp_path)]
        if left and not dest.exists():
            assert len(left) == 1
            return left[0]
        for d in left:
            import shutil
            shutil.rmtree(d)
    pytest.skip("the save finished before it could be killed, three times")


def test_a_killed_saves_staging_directory_is_never_discovered_and_is_cleaned(tmp_path):
    left = _kill_a_save_midway(tmp_path)
    # The parent holds only the hidden leftover: no shards, and no suggestion to load it.
    with pytest.raises(shardload.LayoutError) as e:
        shardload.load(tmp_path)
    assert "shardload-tmp" not in str(e.value)
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(tmp_path, format="zarr")
    assert "shardload-tmp" not in str(e.value)
    # The next save to that destination removes it.
    dest = tmp_path / left.name.split(".shardload-tmp-")[0][1:]
    shardload.save(np.arange(6), dest, num_shards=2)
    assert not staging_dirs(tmp_path)


# --- item 13: Ctrl-C publishes nothing ----------------------------------------------------


def test_ctrl_c_during_a_save_publishes_nothing(tmp_path):
    """SIGINT arrives while the save works (sent when its staging directory appears): the
    save raises KeyboardInterrupt, with the staging directory removed and nothing at dest."""
    ctrl_c_during_a_save_publishes_nothing(tmp_path, """
        import shardload
        x = np.ones((100000, 8), np.float32)
        shardload.save(x[:10], dest.parent / "warm", num_shards=1)  # start Legate first
        """, "shardload.save(x, dest, num_shards=3000)")


# --- item 8: arrays derived from 0-d values ---------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda x: cn.atleast_1d(x.sum()),
    lambda x: x.sum().reshape(1),
    lambda x: cn.broadcast_to(x.sum(), (5, 3)),
    lambda x: cn.broadcast_to(cn.asarray(np.float64(2.5)), (4,)),
    lambda x: x.sum().reshape(1, 1, 1),
], ids=["atleast_1d", "reshape", "broadcast_2d", "broadcast_scalar", "reshape_3d"])
@pytest.mark.parametrize("fmt", ["npy", "zarr"])
def test_arrays_derived_from_0d_values_save(tmp_path, make, fmt):
    x = cn.arange(12, dtype=np.float64).reshape(4, 3)
    y = make(x)
    want = np.asarray(y)
    shardload.save(y, tmp_path / "o", format=fmt, num_shards=2)
    got = np.asarray(shardload.load(tmp_path / "o", format=fmt))
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


# --- item 12: big-endian arrays -----------------------------------------------------------


@pytest.mark.parametrize("dtype", [">f4", ">i8", ">c16", ">u2", ">f2"])
def test_a_big_endian_numpy_array_saves_as_its_values(tmp_path, dtype):
    x = (np.arange(24).reshape(8, 3) - 5).astype(dtype)
    shardload.save(x, tmp_path / "o", num_shards=3)
    got = np.asarray(shardload.load(tmp_path / "o"))
    assert got.dtype == x.dtype.newbyteorder("=")
    np.testing.assert_array_equal(got, x)
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "shard_0000.npy"), x[:3])


# --- items 9 and 15: arguments and names ------------------------------------------------------


def test_num_shards_types_and_range(tmp_path):
    x = np.arange(4)
    for bad in (1.5, True, np.bool_(True), "2", [3]):
        with pytest.raises(TypeError, match="num_shards"):
            shardload.save(x, tmp_path / "a", num_shards=bad)
    for bad in (0, -1, 2**63, 2**64, np.uint64(2**63), np.int64(-5), 1_000_001):
        with pytest.raises(ValueError, match=r"num_shards= must be from 1 to 1000000"):
            shardload.save(x, tmp_path / "a", num_shards=bad)
    shardload.save(x, tmp_path / "a", num_shards=np.uint64(3))
    assert len(list((tmp_path / "a").glob("shard_*.npy"))) == 3


def test_bool_arguments_are_type_checked(tmp_path):
    for name in ("overwrite", "manifest"):
        with pytest.raises(TypeError, match=f"{name}= must be True or False"):
            shardload.save(np.arange(3), tmp_path / "a", **{name: "yes"})
    # info= is deprecated, and still checked.
    with pytest.warns(DeprecationWarning, match="info= is deprecated"):
        with pytest.raises(TypeError, match="info= must be True or False"):
            shardload.save(np.arange(3), tmp_path / "a", info="yes")
    assert not (tmp_path / "a").exists()


def test_a_symlink_destination_with_a_trailing_slash(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(shardload.ShardWriteError, match="symbolic link"):
        shardload.save(np.arange(3), str(tmp_path / "link") + "/", overwrite=True)
    assert not os.listdir(tmp_path / "real")
    assert not staging_dirs(tmp_path)


@pytest.mark.parametrize("length", [230, 240, 255])
def test_long_destination_names(tmp_path, length):
    dest = tmp_path / ("n" * length)
    x = np.arange(12, dtype=np.int16).reshape(4, 3)
    shardload.save(x, dest, num_shards=2)
    shardload.save(x * 2, dest, num_shards=3, overwrite=True)
    np.testing.assert_array_equal(np.asarray(shardload.load(dest)), x * 2)
    assert not staging_dirs(tmp_path)


def test_cli_write_bounds_num_shards_and_refuses_another_byte_order(tmp_path, cli):
    import sys as _sys

    other = ">f4" if _sys.byteorder == "little" else "<f4"
    for args, words in ((["--num-shards", "1000001"], "at most 1000000 shards"),
                        (["--num-shards", "9223372036854775807"], "at most 1000000 shards"),
                        (["--num-shards", "2", "--dtype", other], f"'{other}' is")):
        r = subprocess.run([cli, "write", "--shard-dir", tmp_path / "o", "--shape", "6", *args],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 2, (args, r.stderr[-2000:])
        assert words in r.stderr, r.stderr
        assert not (tmp_path / "o").exists()
    native = "<f4" if _sys.byteorder == "little" else ">f4"
    r = subprocess.run([cli, "write", "--shard-dir", tmp_path / "o", "--shape", "6",
                        "--num-shards", "2", "--dtype", native], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert np.load(tmp_path / "o" / "shard_0000.npy").dtype == np.dtype("float32")


def test_a_kept_save_error_frees_no_legate_object_on_another_thread(tmp_path):
    """A refused save's exception, kept by the caller in a cycle (as pytest.raises and
    `except ... as e` in a kept frame do), is freed by a garbage collection, which may run on
    any thread; a Legate object freed there ends the process. The save's frame holds none."""
    script = textwrap.dedent("""
        import gc, sys, threading
        import numpy as np
        import shardload
        dest = sys.argv[1]
        shardload.save(np.arange(4), dest, num_shards=1)
        gc.disable()
        def refused():
            try:
                shardload.save(np.arange(6), dest, num_shards=2)
            except shardload.DestinationExistsError as e:
                kept = e  # the exception -> its traceback -> this frame -> the exception
                return kept
        refused()
        t = threading.Thread(target=gc.collect)
        t.start()
        t.join()
        print("ALIVE")
    """)
    r = subprocess.run([sys.executable, "-c", script, str(tmp_path / "o")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ALIVE", r.stderr[-3000:]


def test_two_overwriting_saves_and_a_load_at_once_never_give_a_mix(tmp_path):
    """Two threads overwrite one destination 12 times each while a third loads it in a loop:
    every load returns one save's dataset whole (a single value), or a read error naming a
    file that changed; every save succeeds, or refuses a destination the other one changed
    under it, or keeps the other's files aside; nothing else appears beside the destination."""
    import threading

    import shardload.numpy as snp

    dest = tmp_path / "dest"
    snp.save(np.full((2000, 16), -1.0), dest, num_shards=4)
    outcomes: list[str] = []
    mixes: list[object] = []
    stop = threading.Event()

    def saver(base: int) -> None:
        for i in range(12):
            try:
                snp.save(np.full((2000, 16), float(base + i)), dest, num_shards=4,
                         overwrite=True)
                outcomes.append("saved")
            except (shardload.DestinationExistsError, shardload.ShardWriteError) as e:
                outcomes.append(type(e).__name__)

    def loader() -> None:
        while not stop.is_set():
            try:
                a = snp.load(dest)
            except (shardload.ShardReadError, shardload.SourceNotFoundError,
                    shardload.LayoutError):
                continue
            if a.shape != (2000, 16) or len(np.unique(a)) != 1:
                mixes.append(np.unique(a)[:4])

    threads = [threading.Thread(target=saver, args=(b,)) for b in (100, 200)]
    reading = threading.Thread(target=loader)
    reading.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    reading.join()
    assert not mixes, mixes
    assert outcomes.count("saved") >= 12, outcomes
    final = snp.load(dest)
    assert len(np.unique(final)) == 1
    beside = {p.name for p in tmp_path.iterdir()} - {"dest"}
    assert all(".shardload-kept-" in n for n in beside), beside
