"""Links of procfs on a local Zarr chunk's path: the walk that holds every symbolic link a chunk's
path resolves through to discovery's start follows them (their text read whole, whatever size
lstat gives them) and checks the links behind them; where it cannot finish, the chunk is
refused, never read unchecked; procfs's links are followed through a descriptor, as the kernel
follows them. Oracle: zarr-python."""

from __future__ import annotations

import os
import re
import shutil
import time

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")

import shardload  # noqa: E402

A = np.arange(40, dtype="float32").reshape(10, 4)

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/root"), reason="needs procfs")


def write(path, values):
    z = zarr.open_array(str(path), mode="w", shape=values.shape, chunks=(3, 4),
                        dtype=values.dtype, zarr_format=2, compressor=None)
    z[...] = values


def through_proc(path) -> str:
    """``path`` (absolute) spelled through procfs's link to this process's root directory."""
    return "/proc/self/root" + str(path)


def chain(tmp_path):
    """``cur/1.0 -> /proc/self/root/T/hop -> T/v1/1.0``, made before discovery; v2 holds A + 1000."""
    write(tmp_path / "v1", A)
    write(tmp_path / "v2", A + 1000)
    write(tmp_path / "cur", A)
    (tmp_path / "hop").symlink_to(tmp_path / "v1" / "1.0")
    (tmp_path / "cur" / "1.0").unlink()
    (tmp_path / "cur" / "1.0").symlink_to(through_proc(tmp_path / "hop"))
    return tmp_path / "cur", tmp_path / "hop"


def test_a_link_behind_a_procfs_link_re_pointed_after_discovery_is_refused(tmp_path):
    """procfs's links have a size of 0 for lstat: the walk read one byte of their text and
    stopped there, so the link behind (`hop`), re-pointed after discovery at another version,
    read that version's rows beside this one's, no error."""
    store, hop = chain(tmp_path)
    time.sleep(0.05)
    layout = shardload.discover([store], format="zarr")
    time.sleep(0.05)
    (tmp_path / "next").symlink_to(tmp_path / "v2" / "1.0")
    (tmp_path / "next").rename(hop)  # ln -sfn
    mixed = zarr.open_array(str(store), mode="r")[...]
    assert np.array_equal(mixed[3:6], A[3:6] + 1000)  # the oracle: another version's rows
    # Named as the walk reached it: through the procfs link, as the kernel resolves it.
    want = (r"changed since discovery: the symbolic link (/proc/self/root)?" + re.escape(str(hop)) +
            r" on its path was made after discovery began")
    with pytest.raises(shardload.ShardReadError, match=want):
        layout.read(0, 10)


def test_a_chain_through_a_procfs_link_unchanged_since_discovery_reads(tmp_path):
    """procfs makes its links when they are first looked up (their ctime is then), and nobody
    re-points them: they are followed, not held to discovery's start."""
    store, _ = chain(tmp_path)
    time.sleep(0.05)
    layout = shardload.discover([store], format="zarr")
    np.testing.assert_array_equal(layout.read(0, 10), zarr.open_array(str(store), mode="r")[...])
    np.testing.assert_array_equal(layout.read(0, 10), A)


def test_a_link_whose_text_names_no_path_is_followed_as_the_kernel_does(tmp_path):
    """A chunk reached through a procfs link whose text is no path (the descriptor of a file
    deleted since it was opened: `/proc/PID/fd/N` reads `/.../1.0 (deleted)`): the walk follows
    procfs's links through a descriptor opened on them, as the kernel does, not by their text,
    so it reaches the file the kernel reads (no link behind it) and the rows are read; by its
    text the walk could not go on and refused the chunk."""
    write(tmp_path / "v1", A)
    write(tmp_path / "cur", A)
    fd = os.open(tmp_path / "v1" / "1.0", os.O_RDONLY)
    try:
        (tmp_path / "v1" / "1.0").unlink()
        (tmp_path / "cur" / "1.0").unlink()
        (tmp_path / "cur" / "1.0").symlink_to(f"/proc/{os.getpid()}/fd/{fd}")
        assert os.readlink(f"/proc/{os.getpid()}/fd/{fd}").endswith(" (deleted)")
        np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "cur"), mode="r")[...], A)
        time.sleep(0.05)
        layout = shardload.discover([tmp_path / "cur"], format="zarr")
        np.testing.assert_array_equal(layout.read(0, 10), A)
    finally:
        os.close(fd)


def test_a_link_re_pointed_in_another_mount_namespace_behind_its_root_link_is_refused(tmp_path):
    """`cur/1.0 -> /proc/PID/root/T/over/hop` where PID lives in another mount namespace with a
    tmpfs on `T/over` (a container's tree seen from outside): the text of `/proc/PID/root` is
    "/", so a walk by text checked this namespace's `T/over/hop` (never changed) while the
    kernel reads PID's, re-pointed after discovery at another version: its rows were loaded
    beside this one's, no error. Followed through a descriptor, the walk checks PID's link."""
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare")
    for name, values in (("cur", A), ("v1", A), ("v2", A + 1000)):
        write(tmp_path / name, values)
    over = tmp_path / "over"
    over.mkdir()
    (over / "hop").symlink_to(tmp_path / "v1" / "1.0")  # this namespace's: never re-pointed
    script = (f"mount -t tmpfs none {over} && ln -s {tmp_path}/v1/1.0 {over}/hop && "
              f"touch {tmp_path}/ready && while [ ! -e {tmp_path}/go ]; do sleep 0.01; done; "
              f"ln -s {tmp_path}/v2/1.0 {over}/hop.new && mv -T {over}/hop.new {over}/hop && "
              f"touch {tmp_path}/done && sleep 60")
    ns = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "ready").exists():
            if ns.poll() is not None or time.monotonic() > deadline:
                pytest.skip("cannot make a mount namespace here (needs CAP_SYS_ADMIN)")
            time.sleep(0.01)
        (tmp_path / "cur" / "1.0").unlink()
        (tmp_path / "cur" / "1.0").symlink_to(f"/proc/{ns.pid}/root{over}/hop")
        time.sleep(0.05)
        layout = shardload.discover([tmp_path / "cur"], format="zarr")
        np.testing.assert_array_equal(layout.read(0, 10), A)
        (tmp_path / "go").touch()
        while not (tmp_path / "done").exists():
            assert ns.poll() is None and time.monotonic() < deadline + 20
            time.sleep(0.01)
        mixed = zarr.open_array(str(tmp_path / "cur"), mode="r")[...]
        assert np.array_equal(mixed[3:6], A[3:6] + 1000)  # the oracle: the kernel reads v2's
        with pytest.raises(shardload.ShardReadError,
                           match=r"changed since discovery: the symbolic link /proc/" +
                                 str(ns.pid) + "/root" + re.escape(str(over / "hop")) +
                                 " on its path was made after discovery began"):
            layout.read(0, 10)
    finally:
        ns.kill()
        ns.wait()


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_chunk_or_metadata_link_whose_target_is_gone_is_refused_naming_it(tmp_path, zarr_format):
    """A chunk file linked from a pool whose file was deleted is no chunk never written: its
    rows are an error naming the link, not the fill value (zarr-python reads them as the fill
    value; shardload refuses rather than fill real rows); the store's metadata file as such a
    link is named too, not "neither .zarray nor zarr.json exists"."""
    store = tmp_path / "s.zarr"
    z = zarr.create_array(str(store), shape=(4,), chunks=(2,), dtype="<i4",
                          zarr_format=zarr_format, compressors=None, fill_value=-1)
    z[...] = [1, 2, 3, 4]
    chunk = store / ("1" if zarr_format == 2 else "c/1")
    pool = tmp_path / "pool"
    pool.mkdir()
    os.rename(chunk, pool / "1")
    os.symlink(pool / "1", chunk)
    np.testing.assert_array_equal(shardload.discover([str(store)]).read(0, 4), [1, 2, 3, 4])
    os.remove(pool / "1")
    with pytest.raises(shardload.ShardReadError) as e:
        shardload.discover([str(store)]).read(0, 4)
    assert f"{chunk}: a symbolic link whose target does not exist" in str(e.value), str(e.value)
    meta = store / (".zarray" if zarr_format == 2 else "zarr.json")
    os.rename(meta, tmp_path / "meta.bak")
    os.symlink(tmp_path / "gone", meta)
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover([str(store)])
    assert f"{meta}: a symbolic link whose target does not exist" in str(e.value), str(e.value)


def _linked_from_pool(store, name: str, pool) -> None:
    """Moves ``store/name`` (a chunk directory or a group) into ``pool`` and links it back."""
    pool.mkdir(exist_ok=True)
    os.rename(store / name, pool / os.path.basename(name))
    os.symlink(pool / os.path.basename(name), store / name)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_chunk_directory_link_whose_target_is_gone_is_refused_naming_it(tmp_path, zarr_format):
    """A chunk directory (v2 with "/" keys: the row block's "1/"; v3: the whole "c/") linked
    from a pool that was deleted: the chunk's own lstat says ENOENT, as for a chunk never
    written, and every chunk below it read as the fill value, the whole v3 array, no error.
    zarr-python reads them so (the oracle for the rows while the pool is there); shardload
    refuses, naming the chunk and the link. A chunk directory that is not there at all, or a
    linked one whose target is there but lacks the chunk, still reads the fill value."""
    store = tmp_path / "s.zarr"
    values = np.arange(1, 17, dtype="<i4").reshape(4, 4)
    if zarr_format == 2:
        z = zarr.open_array(str(store), mode="w", shape=(4, 4), chunks=(2, 4), dtype="<i4",
                            zarr_format=2, dimension_separator="/", fill_value=0, compressor=None)
        linked, chunk = "1", "1/0"
    else:
        z = zarr.create_array(str(store), shape=(4, 4), chunks=(2, 4), dtype="<i4",
                              compressors=None, fill_value=0)
        linked, chunk = "c", "c/1/0"
    z[...] = values
    pool = tmp_path / "pool"
    _linked_from_pool(store, linked, pool)
    np.testing.assert_array_equal(zarr.open_array(str(store), mode="r")[...], values)
    np.testing.assert_array_equal(shardload.discover([str(store)]).read(), values)
    # The target there, the chunk in it gone: a chunk never written, as zarr-python reads it.
    os.rename(pool / chunk, tmp_path / "kept")
    want = zarr.open_array(str(store), mode="r")[...]
    assert (want[2:] == 0).all()
    np.testing.assert_array_equal(shardload.discover([str(store)]).read(), want)
    os.rename(tmp_path / "kept", pool / chunk)
    layout = shardload.discover([str(store)])
    shutil.rmtree(pool)
    assert (zarr.open_array(str(store), mode="r")[2:] == 0).all()  # the oracle fills them
    with pytest.raises(shardload.ShardReadError) as e:
        layout.read()
    # Each chunk below the link is refused; v3's first is c/0/0.
    assert re.search(re.escape(f"{store / linked}/") + r"[0-9/]+: its directory " +
                     re.escape(f"{store / linked} is a symbolic link whose target does not exist"),
                     str(e.value)), str(e.value)
    with pytest.raises(shardload.ShardReadError) as e:
        shardload.load(str(store))
    assert f"its directory {store / linked} is a symbolic link" in str(e.value), str(e.value)
    # No link at all: the directory's chunks were never written.
    os.unlink(store / linked)
    np.testing.assert_array_equal(shardload.discover([str(store)]).read(),
                                  zarr.open_array(str(store), mode="r")[...])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_group_link_whose_target_is_gone_is_named_not_taken_for_no_metadata(tmp_path,
                                                                             zarr_format):
    """dataset='grp/arr' where the group "grp" is a link into a pool that was deleted: the
    message was "no Zarr array metadata (neither .../grp/arr/.zarray nor ... exists)", the
    wording for an array that is not there; it names the link."""
    store = tmp_path / "g.zarr"
    g = zarr.open_group(str(store), mode="w", zarr_format=zarr_format)
    g.create_array("grp/arr", shape=(4,), chunks=(2,), dtype="<i4")[...] = [1, 2, 3, 4]
    g.create_array("other", shape=(2,), dtype="<i4")
    pool = tmp_path / "pool"
    _linked_from_pool(store, "grp", pool)
    np.testing.assert_array_equal(shardload.discover([str(store)], dataset="grp/arr").read(),
                                  [1, 2, 3, 4])
    shutil.rmtree(pool)
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover([str(store)], dataset="grp/arr")
    assert (f"{store / 'grp/arr'}: its directory {store / 'grp'} is a symbolic link whose target "
            "does not exist") in str(e.value), str(e.value)
    assert "no Zarr array metadata" not in str(e.value), str(e.value)
    # A group that is not there at all keeps its message and the arrays there are.
    os.unlink(store / "grp")
    with pytest.raises(shardload.LayoutError, match="no Zarr array metadata.*other"):
        shardload.discover([str(store)], dataset="grp/arr")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_store_passed_as_its_directory_whose_metadata_link_is_gone_is_named(tmp_path,
                                                                              zarr_format):
    """The store passed as a directory (not as a list of one): telling a store from a directory
    of shards took its metadata link whose target is gone for no metadata, and said "no
    numbered shards of a known format"; the store's reader names the link."""
    store = tmp_path / "s.zarr"
    zarr.create_array(str(store), shape=(4,), chunks=(2,), dtype="<i4",
                      zarr_format=zarr_format)[...] = [1, 2, 3, 4]
    meta = store / (".zarray" if zarr_format == 2 else "zarr.json")
    meta.unlink()
    meta.symlink_to(tmp_path / "gone")
    for load in (lambda: shardload.discover(str(store)), lambda: shardload.load(str(store))):
        with pytest.raises(shardload.LayoutError) as e:
            load()
        assert f"{meta}: a symbolic link whose target does not exist" in str(e.value), str(e.value)
