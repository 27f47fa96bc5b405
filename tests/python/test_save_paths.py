"""shardload.save to local destinations spelled with '..' and reached through symbolic links:
the save checks, writes, renames into and cleans up the one directory the destination named
when it began, whatever a link on the way says later."""

from __future__ import annotations

import os
import shutil
import pathlib
import re
import threading
import time

import numpy as np
import pytest

import shardload


def staging_dirs(root: pathlib.Path) -> list[pathlib.Path]:
    return [p for p in root.rglob("*") if ".shardload-tmp-" in p.name]


def contents(d: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_dot_dot_after_a_link_is_the_directory_the_kernel_resolves(tmp_path):
    """"out/../other" with `out` a link to a/deep: the dataset is a/other, as open(2) and
    `ls out/../other` see it, and an overwrite spelled the same replaces that one."""
    (tmp_path / "a" / "deep").mkdir(parents=True)
    (tmp_path / "out").symlink_to(tmp_path / "a" / "deep")
    dest = f"{tmp_path}/out/../other/"
    x = np.arange(12.0).reshape(6, 2)
    shardload.save(x, dest, num_shards=2)
    assert sorted(os.listdir(tmp_path / "a" / "other")) == [
        "shard_0000.npy", "shard_0001.npy", "shardload.manifest"]
    assert not (tmp_path / "other").exists()
    np.testing.assert_array_equal(np.asarray(shardload.load(dest)), x)
    shardload.save(-x, dest, num_shards=3, overwrite=True)
    np.testing.assert_array_equal(np.asarray(shardload.load(tmp_path / "a" / "other")), -x)
    assert not staging_dirs(tmp_path)


def test_a_link_changed_during_the_save_moves_no_write_and_no_clean_up(tmp_path):
    """The destination "current/../data" while `current` is switched from a/t1 to b/t2 in the
    middle of the save (as a deployment flips its `current` link): the save finishes in a/,
    the directory it checked, and b/data, a user's dataset it never checked, is untouched."""
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "t1").mkdir(parents=True)
    (b / "t2").mkdir(parents=True)
    users = np.full((4, 2), 7.0)
    shardload.save(users, b / "data", num_shards=1)
    before = contents(b / "data")
    x = np.arange(100000 * 8, dtype=np.float32).reshape(100000, 8)
    for attempt in range(3):
        link = tmp_path / f"current{attempt}"
        link.symlink_to(a / "t1")
        dest = f"{link}/../data{attempt}"
        late = []

        def switch():
            while not any(".shardload-tmp-" in n for n in os.listdir(a)):
                time.sleep(0.0005)
            new = tmp_path / "switch"
            new.symlink_to(b / "t2")
            os.replace(new, link)
            late.append((a / f"data{attempt}").exists())

        t = threading.Thread(target=switch)
        t.start()
        try:
            shardload.save(x, dest, num_shards=3000, overwrite=True)
        finally:
            t.join()
        assert os.readlink(link) == str(b / "t2")
        assert contents(b / "data") == before
        assert not (b / f"data{attempt}").exists()
        assert not staging_dirs(tmp_path)
        if late[0]:
            continue  # switched after the rename: nothing to check
        np.testing.assert_array_equal(np.asarray(shardload.load(a / f"data{attempt}")), x)
        return
    pytest.skip("the link was switched after the save, three times")


@pytest.mark.parametrize("spelling", [".", "..", "x/.", "x/..", "x/./", "x/../"])
def test_a_destination_ending_in_a_dot_segment_is_refused(tmp_path, monkeypatch, spelling):
    (tmp_path / "x").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="must name a directory by its name"):
        shardload.save(np.arange(3), spelling, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["x"] and not os.listdir(tmp_path / "x")


# --- a third pass: names a glob or a pattern could take, and a save killed midway -----------

@pytest.mark.parametrize("name", ["a[b]", "st*r", "q?m", "br{0}ce", "sh_{:04d}", "new\nline",
                                  b"n\xffu"], ids=repr)
def test_a_destination_named_with_glob_or_pattern_characters_is_that_directory(tmp_path, name):
    """Saved to and loaded from as spelled: a glob of the name would also take the sibling
    spelled without the brackets or with another letter, which holds other data."""
    x = np.arange(24.0).reshape(12, 2)
    if isinstance(name, bytes):
        dest = os.fsencode(tmp_path) + b"/" + name
        sibling = tmp_path / "nXu"
    else:
        dest = tmp_path / name
        sibling = tmp_path / name.replace("[", "").replace("]", "").replace("*", "X").replace(
            "?", "X")
    if sibling != dest:
        shardload.save(-x, sibling, num_shards=2)
    shardload.save(x, dest, num_shards=3)
    assert sorted(os.listdir(dest)) == [
        b"shard_0000.npy", b"shard_0001.npy", b"shard_0002.npy", b"shardload.manifest"] if (
        isinstance(dest, bytes)) else ["shard_0000.npy", "shard_0001.npy", "shard_0002.npy",
                                       "shardload.manifest"]
    src = os.fsdecode(dest) if isinstance(dest, bytes) else dest
    np.testing.assert_array_equal(np.asarray(shardload.load(src)), x)
    np.testing.assert_array_equal(shardload.discover(src).read(), x)
    assert not staging_dirs(tmp_path)


def test_an_overwrite_killed_midway_leaves_the_old_dataset_or_the_new_one(tmp_path):
    """SIGKILL at several moments after the overwrite's staging directory appears: the
    destination then loads as the old dataset whole or the new one whole, never a mix of
    their shards, and a file beside it is untouched."""
    import shutil
    import signal
    import subprocess
    import sys

    old = np.arange(400000.0).reshape(100000, 4)
    dest = tmp_path / "data"
    (tmp_path / "keep.txt").write_text("mine")
    script = ("import sys, numpy as np, shardload\n"
              "print('go', flush=True)\n"
              "shardload.save(-np.arange(400000.0).reshape(100000, 4), sys.argv[1],"
              " num_shards=7, overwrite=True)\n")
    for delay in (0.0, 0.1, 0.2, 0.3, 0.4):
        if dest.exists():
            shutil.rmtree(dest)
        shardload.save(old, dest, num_shards=4)
        p = subprocess.Popen([sys.executable, "-c", script, str(dest)], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        assert p.stdout.readline().strip() == "go"
        while p.poll() is None and not any(f"-{p.pid}-" in n.name for n in staging_dirs(tmp_path)):
            time.sleep(0.001)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=300)
        got = np.asarray(shardload.load(dest))
        # Which of the two a kill leaves depends on the machine's speed; a mix never.
        assert np.array_equal(got, old) or np.array_equal(got, -old), delay
        assert (tmp_path / "keep.txt").read_text() == "mine"


# --- a fourth pass: links as the destination or inside the dataset an overwrite replaces -------

def _tree(root: pathlib.Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = pathlib.Path(dirpath) / n
            out[str(p.relative_to(root))] = (
                "-> " + os.readlink(p) if p.is_symlink() else "dir" if p.is_dir() else
                p.read_bytes())
    return out


def _saver(which: str):
    import shardload.numpy as snp

    if which == "save":
        return lambda x, dest, **kw: shardload.save(x, dest, **kw)
    if which == "numpy.save":
        return lambda x, dest, **kw: snp.save(x, dest, **kw)
    da = pytest.importorskip("dask.array")
    import shardload.dask as sdask

    def dask_save(x, dest, num_shards=2, **kw):
        return sdask.save(da.from_array(x, chunks=-(-len(x) // num_shards)), dest, **kw)
    return dask_save


@pytest.mark.parametrize("which", ["save", "numpy.save", "dask.save"])
@pytest.mark.parametrize("link", ["a user's directory", "a dataset", "nothing", "a file",
                                  "an empty directory", "a shard of the old dataset",
                                  "a Zarr store of the old dataset", "the raw sidecar"])
def test_a_link_as_the_destination_or_inside_it_moves_no_write_outside(tmp_path, which, link):
    """The destination a symbolic link (to a user's directory, a dataset, nothing, a file, an
    empty directory), or a shard, a Zarr store or the raw sidecar of the dataset an overwrite
    replaces a link to a file elsewhere: refused (with and without overwrite) naming the
    link, and nothing where the link leads changes."""
    import shardload.numpy as snp

    save = _saver(which)
    x = np.arange(12.0).reshape(6, 2)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dest = tmp_path / "out"
    fmt = "zarr" if "Zarr" in link else "raw" if "sidecar" in link else "npy"
    if link == "a user's directory":
        (elsewhere / "notes.txt").write_text("mine")
        dest.symlink_to(elsewhere)
    elif link == "a dataset":
        snp.save(-x, elsewhere / "ds", num_shards=3)
        dest.symlink_to(elsewhere / "ds")
    elif link == "nothing":
        dest.symlink_to(elsewhere / "absent")
    elif link == "a file":
        (elsewhere / "f").write_text("mine")
        dest.symlink_to(elsewhere / "f")
    elif link == "an empty directory":
        (elsewhere / "empty").mkdir()
        dest.symlink_to(elsewhere / "empty")
    else:
        snp.save(-x, dest, num_shards=2, format=fmt)
        name = {"npy": "shard_0001.npy", "zarr": "shard_0001.zarr", "raw": "shardload.json"}[fmt]
        inside = dest / name
        target = elsewhere / name
        if inside.is_dir():
            shutil.copytree(inside, target)
            shutil.rmtree(inside)
        else:
            shutil.copy(inside, target)
            inside.unlink()
        inside.symlink_to(target)
    before = _tree(elsewhere)
    for overwrite in (False, True):
        with pytest.raises(shardload.ShardWriteError) as e:
            save(x, dest, num_shards=2, overwrite=overwrite, format=fmt)
        assert str(dest) in str(e.value), str(e.value)
    assert _tree(elsewhere) == before
    assert not staging_dirs(tmp_path)


@pytest.mark.parametrize("dest", ["S3://bucket/d/", "FILE:///tmp/d/", "Gs://bucket/d/",
                                  "HTTP://host/d/", "s3a://bucket/d/"])
def test_a_destination_scheme_spelled_in_another_case_is_refused_naming_it(tmp_path,
                                                                          monkeypatch, dest):
    """A guard (tenth hostile pass): a scheme in another case, or a look-alike of s3://, is
    no scheme save writes: refused naming it, nothing created (not written to './S3:/...',
    nor to s3://)."""
    monkeypatch.chdir(tmp_path)
    scheme = dest.split("://")[0]
    for save in (shardload.save, __import__("shardload.numpy").numpy.save):
        with pytest.raises(ValueError, match=f"the {scheme}:// scheme is not supported"):
            save(np.arange(8.0).reshape(4, 2), dest)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("dest", ["gs://bucket/d/", "hdfs://namenode/d", "file:///tmp/d/",
                                  "az://container/d/", "ftp://host/d/"])
def test_a_destination_of_an_unsupported_scheme_is_refused_naming_it(tmp_path, monkeypatch, cli,
                                                                     dest):
    """save to gs://, hdfs://, file://, ... was taken as a local relative path ("./gs:/..."),
    and failed as "cannot resolve the directory it is in": refused by its scheme, naming it and
    what save writes, before anything is created (as a load source of such a scheme is)."""
    import subprocess

    import shardload.numpy as snp

    monkeypatch.chdir(tmp_path)
    scheme = dest.split("://")[0]
    message = (f"the destination '{dest}': the {scheme}:// scheme is not supported (save writes "
               f"local paths and s3:// URLs; a local path spelled so can be written './{dest}')")
    x = np.arange(8.0).reshape(4, 2)
    for save in (shardload.save, snp.save):
        with pytest.raises(ValueError) as e:
            save(x, dest)
        assert message in str(e.value), e.value
    r = subprocess.run([str(cli), "write", "--shard-dir", dest, "--num-shards", "2",
                        "--shape", "4,2"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and message in r.stderr, r.stderr
    assert os.listdir(tmp_path) == []
    # Spelled as a local path, it is one (its parent made first, as for any local save).
    os.makedirs(os.path.dirname(f"./{dest}".rstrip("/")))
    shardload.save(x, f"./{dest}", num_shards=2)
    np.testing.assert_array_equal(np.asarray(shardload.load(f"./{dest}")), x)


def test_an_overwrite_replaces_a_manifest_temporary_file_a_killed_index_left(tmp_path):
    """`index` writes the manifest through `.shardload.manifest.XXXXXX` and renames it; killed
    in between, it leaves that file, and every overwrite of the dataset was refused from then
    on (`holds '.shardload.manifest.eBrTZA', which a save does not write`). It is shardload's
    own: an overwrite replaces it with the dataset. Another name is still a user's file."""
    import shardload.numpy as sn

    dest = tmp_path / "d"
    sn.save(np.arange(24.0).reshape(6, 4), dest, num_shards=2)
    (dest / ".shardload.manifest.eBrTZA").write_bytes(b"SLMF partial")
    new = np.arange(24.0).reshape(6, 4) * 2
    sn.save(new, dest, num_shards=3, overwrite=True)
    np.testing.assert_array_equal(sn.load(dest), new)
    assert not (dest / ".shardload.manifest.eBrTZA").exists()
    assert sorted(os.listdir(dest)) == ["shard_0000.npy", "shard_0001.npy", "shard_0002.npy",
                                        "shardload.manifest"]
    for other in (".shardload.manifest.eBrTZ", ".shardload.manifest.eBrTZA7",
                  ".shardload.manifest.eBr-ZA"):
        (dest / other).write_bytes(b"mine")
        with pytest.raises(shardload.DestinationExistsError, match=re.escape(other)):
            sn.save(new, dest, num_shards=3, overwrite=True)
        (dest / other).unlink()
