"""shardload.save writes the dataset's manifest last, inside the hidden directory, before the
rename: discovering the destination then takes the manifest (its snapshots survive the
rename) and gets exactly what probing the files gives; checksums verify; overwrite replaces
a dataset that has one; a failed save leaves no manifest anywhere."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import shardload
from shardload import _core

import cupynumeric as cn  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=FutureWarning)

MANIFEST = "shardload.manifest"
EXT = {"npy": ".npy", "raw": ".bin", "zarr": ".zarr"}


def probed(dest: pathlib.Path, **kw) -> shardload.Layout:
    # Python's discover has no switch for it; the core's discover does.
    return _core.discover(str(dest), options=kw, use_manifest=False)


def assert_manifest_used(dest: pathlib.Path, **kw) -> shardload.Layout:
    got = shardload.discover(dest, **kw)
    assert got.manifest_status.startswith("manifest: used ("), got.manifest_status
    assert got.encode() == probed(dest, **kw).encode()
    return got


@pytest.mark.parametrize("fmt", ["npy", "raw", "zarr"])
@pytest.mark.parametrize("shape,num_shards", [((37, 3), 4), ((5,), 8), ((0, 2), 2)])
def test_discovery_of_a_save_uses_its_manifest(tmp_path, fmt, shape, num_shards):
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    dest = tmp_path / "out"
    shardload.save(cn.asarray(x), dest, format=fmt, num_shards=num_shards)
    assert (dest / MANIFEST).is_file()
    layout = assert_manifest_used(dest)
    assert len(layout.paths) == num_shards
    # The manifest's layout is the probed one, byte for byte, also with the format named.
    assert_manifest_used(dest, format=fmt)
    manifest = _core.read_manifest(dest / MANIFEST)
    assert manifest["pattern"] == f"shard_{{:04d}}{EXT[fmt]}"
    # And what it describes is the data.
    np.testing.assert_array_equal(np.asarray(shardload.load(dest)), x)
    # Deleting it gives the same layout by probing.
    before = layout.encode()
    (dest / MANIFEST).unlink()
    after = shardload.discover(dest)
    assert after.manifest_status == "manifest: absent"
    assert after.encode() == before


def test_manifest_is_written_after_every_other_file(tmp_path):
    dest = tmp_path / "out"
    shardload.save(np.arange(40, dtype=np.int64).reshape(20, 2), dest, format="raw",
                   num_shards=3)
    times = {p.name: p.stat().st_mtime_ns for p in dest.iterdir()}
    assert set(times) == {"shard_0000.bin", "shard_0001.bin", "shard_0002.bin",
                          "shardload.json", MANIFEST}
    assert all(times[MANIFEST] >= t for t in times.values())


def test_manifest_false_writes_none(tmp_path):
    dest = tmp_path / "out"
    shardload.save(np.arange(10), dest, num_shards=2, manifest=False)
    assert sorted(os.listdir(dest)) == ["shard_0000.npy", "shard_0001.npy"]
    assert shardload.discover(dest).manifest_status == "manifest: absent"


def test_checksums_verify_and_a_flipped_byte_is_named(tmp_path):
    dest = tmp_path / "out"
    x = np.arange(3000, dtype=np.float64).reshape(1000, 3)
    shardload.save(cn.asarray(x), dest, num_shards=4, checksum="xxh3")
    assert _core.read_manifest(dest / MANIFEST)["checksum"] == "xxh3"
    assert shardload.verify(dest) == []
    assert shardload.verify(dest, on_host=True) == []
    victim = dest / "shard_0002.npy"
    data = bytearray(victim.read_bytes())
    data[-5] ^= 0x40
    victim.write_bytes(bytes(data))
    bad = shardload.verify(dest)
    assert [(m.shard, pathlib.Path(m.path).name) for m in bad] == [(2, "shard_0002.npy")]
    assert "xxh3" in bad[0].what and "expected" in bad[0].what


def test_raw_checksums(tmp_path):
    dest = tmp_path / "out"
    shardload.save(np.arange(30, dtype=np.int16), dest, format="raw", num_shards=3,
                   checksum="xxh3")
    assert shardload.verify(dest) == []
    assert_manifest_used(dest)


def test_checksum_arguments(tmp_path):
    x = np.arange(4)
    for bad in ("crc32c", "XXH3"):
        with pytest.raises(ValueError, match="checksum="):
            shardload.save(x, tmp_path / "a", checksum=bad)
    for bad in (1, None):  # a wrong type
        with pytest.raises(TypeError, match="checksum= must be a str"):
            shardload.save(x, tmp_path / "a", checksum=bad)
    with pytest.raises(ValueError, match="manifest=False"):
        shardload.save(x, tmp_path / "a", checksum="xxh3", manifest=False)
    with pytest.raises(ValueError, match="Zarr shard is a directory"):
        shardload.save(x, tmp_path / "a", format="zarr", checksum="xxh3")
    with pytest.raises(TypeError, match="manifest= must be True or False"):
        shardload.save(x, tmp_path / "a", manifest="yes")
    assert not (tmp_path / "a").exists()
    assert not [p for p in tmp_path.iterdir() if ".shardload-tmp-" in p.name]


@pytest.mark.parametrize("fmt", ["npy", "raw", "zarr"])
def test_overwrite_of_a_dataset_with_a_manifest(tmp_path, fmt):
    dest = tmp_path / "out"
    shardload.save(np.arange(100, dtype=np.int32), dest, num_shards=5, format=fmt)
    old = (dest / MANIFEST).read_bytes()
    y = np.arange(60, dtype=np.float32).reshape(20, 3)
    shardload.save(cn.asarray(y), dest, num_shards=2, format=fmt, overwrite=True)
    assert (dest / MANIFEST).read_bytes() != old
    layout = assert_manifest_used(dest)
    assert len(layout.paths) == 2 and tuple(layout.shape) == (20, 3)
    np.testing.assert_array_equal(np.asarray(shardload.load(dest)), y)
    # Overwriting without a manifest removes the old one with the rest.
    shardload.save(np.arange(3), dest, num_shards=1, format=fmt, overwrite=True,
                   manifest=False)
    assert not (dest / MANIFEST).exists()
    assert shardload.discover(dest).manifest_status == "manifest: absent"


def test_overwrite_refuses_a_manifest_that_is_not_a_file(tmp_path):
    dest = tmp_path / "out"
    shardload.save(np.arange(10), dest, num_shards=2, manifest=False)
    (dest / MANIFEST).mkdir()
    with pytest.raises(shardload.DestinationExistsError, match=MANIFEST):
        shardload.save(np.arange(4), dest, overwrite=True)
    assert (dest / MANIFEST).is_dir()


def test_cli_write_has_a_manifest(tmp_path, cli):
    out = tmp_path / "set"
    r = subprocess.run([cli, "write", "--shard-dir", out, "--num-shards", "3", "--shape",
                        "100,2", "--seed", "3"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(out)) == ["_meta.json", "shard_0000.npy", "shard_0001.npy",
                                       "shard_0002.npy", MANIFEST]
    # _meta.json went in before the manifest: the manifest is the last file.
    assert (out / MANIFEST).stat().st_mtime_ns >= (out / "_meta.json").stat().st_mtime_ns
    assert_manifest_used(out)
    # A second write replaces the set and its manifest.
    r = subprocess.run([cli, "write", "--shard-dir", out, "--num-shards", "2", "--shape", "7"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert len(assert_manifest_used(out).paths) == 2


def test_a_failed_save_leaves_no_manifest(tmp_path):
    """A file size limit fails the save: no destination, no staging directory, no manifest
    or temporary manifest anywhere under the parent."""
    script = textwrap.dedent(f"""
        import resource, signal
        import numpy as np
        import shardload
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
        try:
            shardload.save(np.zeros((1 << 20, 4), np.float32), {str(tmp_path / 'o')!r},
                           num_shards=2, checksum="xxh3")
        except shardload.ShardWriteError as e:
            print("RAISED", e)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "RAISED" in r.stdout, r.stdout
    assert not (tmp_path / "o").exists()
    assert not [p for p in tmp_path.rglob("*") if "manifest" in p.name
                or ".shardload-tmp-" in p.name]


def test_a_save_whose_manifest_cannot_be_written_leaves_nothing(tmp_path):
    """The manifest is the last write: when it fails (its temporary file cannot be created),
    the error names it and nothing of the new dataset becomes visible, an old one stays."""
    dest = tmp_path / "out"
    shardload.save(np.arange(10), dest, num_shards=2)
    old = {p.name: p.read_bytes() for p in dest.iterdir()}
    # A file size limit that the tiny shards fit under and the manifest of 40 shards does
    # not: the manifest's write is what fails.
    script = textwrap.dedent(f"""
        import resource, signal
        import numpy as np
        import shardload
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (600, resource.RLIM_INFINITY))
        try:
            shardload.save(np.arange(40, dtype=np.int8), {str(dest)!r}, num_shards=40,
                           overwrite=True)
        except (shardload.ShardWriteError, shardload.LayoutError) as e:
            print("RAISED", type(e).__name__, e)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "RAISED" in r.stdout and MANIFEST in r.stdout, r.stdout
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == old
    assert not [p for p in tmp_path.iterdir() if ".shardload-tmp-" in p.name]


@pytest.mark.parametrize("name", ["o*t?", "out[1]", "{a,b}", b"out\xff\xfe"])
def test_odd_destination_names(tmp_path, name):
    dest = (os.path.join(os.fsencode(tmp_path), name) if isinstance(name, bytes)
            else str(tmp_path / name))
    x = np.arange(12, dtype=np.float64).reshape(4, 3)
    shardload.save(x, dest, num_shards=3, checksum="xxh3")
    got = shardload.discover(os.fsdecode(dest))
    assert got.manifest_status.startswith("manifest: used ("), got.manifest_status
    assert shardload.verify(os.fsdecode(dest)) == []
    np.testing.assert_array_equal(np.asarray(shardload.load(os.fsdecode(dest))), x)


def test_an_indexed_zarr_directory_is_fresh(tmp_path):
    """Independent of save: a Zarr store's snapshot is its .zarray's, so the freshness check
    compares that file, not the store directory; xxh3 is refused naming the store."""
    import zarr

    for i in range(3):
        z = zarr.open_array(str(tmp_path / f"shard_{i:04d}.zarr"), mode="w", shape=(5, 2),
                            chunks=(2, 2), dtype="i4", zarr_format=2)
        z[...] = np.arange(10, dtype=np.int32).reshape(5, 2) + i
    shardload.index(tmp_path)
    assert_manifest_used(tmp_path)
    with pytest.raises(ValueError, match=r"shard_0000\.zarr.*Zarr store"):
        shardload.index(tmp_path, checksum="xxh3")
    # A store whose metadata changed is stale, and says which.
    meta = tmp_path / "shard_0001.zarr" / ".zarray"
    meta.write_text(meta.read_text().replace('"chunks": [\n        2,', '"chunks": [\n        3,'))
    got = shardload.discover(tmp_path)
    assert "stale because" in got.manifest_status and "shard_0001.zarr" in got.manifest_status


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_overwrite_refuses_a_special_file_named_like_the_manifest(tmp_path, kind):
    dest = tmp_path / "out"
    shardload.save(np.arange(10), dest, num_shards=2, manifest=False)
    if kind == "fifo":
        os.mkfifo(dest / MANIFEST)
    else:
        (tmp_path / "elsewhere").write_bytes(b"x")
        (dest / MANIFEST).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(shardload.ShardWriteError, match="not a regular file") as e:
        shardload.save(np.arange(4), dest, overwrite=True)
    assert e.value.filename.endswith(MANIFEST)
    assert (tmp_path / "elsewhere").exists() if kind == "symlink" else True
    assert sorted(os.listdir(dest)) == ["shard_0000.npy", "shard_0001.npy", MANIFEST]


SUPPORT = pathlib.Path(__file__).resolve().parent / "support"


@pytest.fixture(scope="module")
def swap_manifest_shim(tmp_path_factory) -> pathlib.Path:
    shim = tmp_path_factory.mktemp("shim") / "swap_manifest.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", shim, SUPPORT / "swap_manifest.c",
                    "-ldl"], check=True)
    return shim


@pytest.mark.parametrize("front", ["numpy", "dask"])
@pytest.mark.parametrize("mode", ["link", "copy"])
def test_a_manifest_replaced_right_after_its_write_is_never_published(tmp_path,
                                                                      swap_manifest_shim,
                                                                      front, mode):
    """Another writer renames a file over the staged manifest between its write and the save's
    record of it (the shim does it right after the manifest's rename, every time): a hard link
    to a file outside the destination, or another dataset's manifest. The save refuses it as a
    staged key replaced ("is not the file the save made there"), publishes nothing and removes
    its staging; the outside file is unchanged."""
    victim = tmp_path / "victim.dat"
    if mode == "link":
        victim.write_bytes(b"V" * 4096)
    else:
        shardload.save(np.ones((10, 4)), tmp_path / "other", num_shards=2)
        victim.write_bytes((tmp_path / "other" / MANIFEST).read_bytes())
    before = victim.read_bytes()
    dest = tmp_path / "dest"
    if front == "numpy":
        save = f"shardload.numpy.save(a, {str(dest)!r}, num_shards=4)"
    else:
        save = ("import dask, dask.array as da, shardload.dask\n"
                "with dask.config.set(scheduler='threads'):\n"
                f"    shardload.dask.save(da.from_array(a, chunks=(25, 4)), {str(dest)!r})")
    script = ("import numpy as np, shardload, shardload.numpy\n"
              "a = np.full((100, 4), 5.0)\n"
              "try:\n"
              + textwrap.indent(save, "    ") + "\n"
              "    print('SAVED')\n"
              "except shardload.ShardWriteError as e:\n"
              "    print('RAISED', e)\n")
    env = dict(os.environ, LD_PRELOAD=str(swap_manifest_shim), SWAP_MANIFEST_MODE=mode,
               SWAP_MANIFEST_WITH=str(victim))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "swap_manifest: swapped" in r.stderr, r.stderr[-3000:]
    assert "RAISED" in r.stdout, r.stdout
    assert "is not the file the save made there" in r.stdout, r.stdout
    assert MANIFEST in r.stdout, r.stdout
    assert not dest.exists()
    assert not [p for p in tmp_path.iterdir() if ".shardload-tmp" in p.name]
    assert victim.read_bytes() == before
