"""A dataset copied with its manifest (``cp -r``, a restore, another machine): every file is
another one (new inodes, times), so no snapshot the manifest holds matches. Where the check
reads each shard's own metadata (npy, raw, Zarr), a copy whose sizes and metadata match is
what probing would give: its manifest is used and the layout takes the copies' snapshots.
Where the check is the snapshot alone (HDF5, Parquet, Arrow, npz), nothing was read to stand
for the metadata: the manifest is stale, and the status says that it is a copy and what
restores it. Never is a copied manifest believed for what no one read, and never does a
layout keep a snapshot of another file."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import h5py
import numpy as np
import pytest

import shardload

MANIFEST = "shardload.manifest"
PARTS = [np.arange(n * 3, dtype=np.float32).reshape(n, 3) + 100 * i
         for i, n in enumerate((4, 0, 7, 2))]
EXPECTED = np.concatenate(PARTS)


def write(directory: pathlib.Path, fmt: str) -> dict:
    """The shards in `fmt`, and the options discovery and index take for them."""
    directory.mkdir()
    options: dict = {}
    for i, part in enumerate(PARTS):
        if fmt == "npy":
            np.save(directory / f"shard_{i:04d}.npy", part)
        elif fmt == "raw":
            part.tofile(directory / f"shard_{i:04d}.bin")
            options = {"format": "raw", "dtype": "float32", "trailing_shape": (3,)}
        elif fmt == "zarr":
            import zarr

            z = zarr.open_array(str(directory / f"shard_{i:04d}.zarr"), mode="w",
                                shape=part.shape, chunks=(3, 3), dtype=part.dtype,
                                zarr_format=2)
            z[...] = part
        elif fmt == "hdf5":
            with h5py.File(directory / f"shard_{i:04d}.h5", "w") as f:
                f["x"] = part
        else:
            raise AssertionError(fmt)
    return options


def cp_r(src: pathlib.Path, dst: pathlib.Path) -> None:
    """A copy as `cp -r` makes it: new files, new inodes and times, the same bytes."""
    subprocess.run(["cp", "-r", str(src), str(dst)], check=True)


def probed(directory: pathlib.Path, options: dict) -> shardload.Layout:
    """The layout the files give (a glob source never consults a manifest)."""
    return shardload.discover(str(directory / "shard_*"), **options)


@pytest.mark.parametrize("fmt", ["npy", "raw", "zarr"])
def test_a_copy_keeps_its_manifest_where_the_check_reads_each_header(tmp_path, fmt):
    options = write(tmp_path / "d", fmt)
    shardload.index(tmp_path / "d", **options)
    assert shardload.discover(tmp_path / "d", **options).manifest_status.endswith(
        "shards unchanged since indexing)")
    cp_r(tmp_path / "d", tmp_path / "copy")
    layout = shardload.discover(tmp_path / "copy", **options)
    status = layout.manifest_status
    assert layout.manifest_state is shardload.ManifestState.USED, status
    assert status == (f"manifest: used ({len(PARTS)} shards as indexed; {len(PARTS)} of them "
                      "other files with the same size and header, as after a copy: their "
                      "snapshots were taken from the files)")
    # What probing the copy gives, snapshots included: a read checks the copies, not the
    # originals, and the originals may go.
    assert layout.encode() == probed(tmp_path / "copy", options).encode()
    shutil.rmtree(tmp_path / "d")
    np.testing.assert_array_equal(layout.read(), EXPECTED)


def test_a_copy_whose_header_differs_is_stale(tmp_path):
    write(tmp_path / "d", "npy")
    shardload.index(tmp_path / "d")
    cp_r(tmp_path / "d", tmp_path / "copy")
    # The same sizes, another dtype: int32 shards where the manifest says float32.
    for i, part in enumerate(PARTS):
        np.save(tmp_path / "copy" / f"shard_{i:04d}.npy", part.astype(np.int32))
    layout = shardload.discover(tmp_path / "copy")
    assert layout.manifest_state is shardload.ManifestState.STALE, layout.manifest_status
    assert "shard_0000.npy: the file says dtype int32, the manifest float32" in \
        layout.manifest_status
    np.testing.assert_array_equal(layout.read(), EXPECTED.astype(np.int32))


def test_a_file_touched_in_place_is_still_stale(tmp_path):
    # Not a copy: the indexed file itself, its time changed. As before, stale.
    write(tmp_path / "d", "npy")
    shardload.index(tmp_path / "d")
    target = tmp_path / "d" / "shard_0002.npy"
    st = target.stat()
    import os

    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))
    layout = shardload.discover(tmp_path / "d")
    assert layout.manifest_state is shardload.ManifestState.STALE, layout.manifest_status
    assert "mtime" in layout.manifest_status and "as after a copy" not in layout.manifest_status


def test_a_copy_checked_by_snapshots_says_what_it_costs(tmp_path):
    write(tmp_path / "d", "hdf5")
    shardload.index(tmp_path / "d")
    cp_r(tmp_path / "d", tmp_path / "copy")
    layout = shardload.discover(tmp_path / "copy")
    status = layout.manifest_status
    assert layout.manifest_state is shardload.ManifestState.STALE, status
    assert status.startswith(f"manifest: stale because {tmp_path / 'copy' / 'shard_0000.h5'}: "
                             "size "), status
    assert status.endswith(
        "; probed the files instead (hdf5 shards are checked by their snapshots alone, and this "
        "is another file of the indexed size, as after a copy: every discovery of this "
        "directory probes until shardload index runs in it again)"), status
    np.testing.assert_array_equal(layout.read(), EXPECTED)
    # What the status says restores it.
    shardload.index(tmp_path / "copy")
    assert shardload.discover(tmp_path / "copy").manifest_state is shardload.ManifestState.USED


def test_a_trusted_manifest_of_a_copy_fails_the_read_never_reads_wrong_data(tmp_path):
    # trust_manifest touches no shard, so it cannot see the copy; the read's snapshot check does.
    write(tmp_path / "d", "npy")
    shardload.index(tmp_path / "d")
    cp_r(tmp_path / "d", tmp_path / "copy")
    layout = shardload.discover(tmp_path / "copy", trust_manifest=True)
    assert layout.manifest_state is shardload.ManifestState.TRUSTED
    with pytest.raises(shardload.ShardReadError, match="changed since discovery"):
        layout.read()
