"""A new version published under a reader by re-pointing a link (`ln -sfn v2 current`) while the
reader discovers `current`: one discovery describes one version, never one version's listing or
sidecar with the other's files. A preload shim (support/swap_link.c) re-points the link at a
chosen file's open, so the swap lands between discovery's listing and its probes, or between a
raw sidecar's read and the files', every time. Host-side (discover, Layout.read): no Legate."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

SUPPORT = pathlib.Path(__file__).resolve().parent / "support"
EXT = {"npy": "npy", "raw": "bin", "hdf5": "h5", "parquet": "parquet"}

# Discover the directory, read it and say what came back: the layout's shard count, dtype and
# shape and the values read, or the error.
SCRIPT = """
import json, sys, numpy as np, shardload
try:
    l = shardload.discover(sys.argv[1])
    a = l.read()
    print(json.dumps({"shards": l.num_shards, "dtype": str(l.dtype), "shape": list(a.shape),
                      "values": np.unique(a).tolist()}))
except shardload.LayoutError as e:
    print(json.dumps({"layout_error": str(e)}))
"""


@pytest.fixture(scope="module")
def swap_link_shim(tmp_path_factory) -> pathlib.Path:
    shim = tmp_path_factory.mktemp("shim") / "swap_link.so"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", shim, SUPPORT / "swap_link.c", "-ldl"],
                   check=True)
    return shim


def write_version(d: pathlib.Path, fmt: str, count: int, value: int) -> None:
    d.mkdir()
    a = np.full((4, 2), value, "<i4")
    for i in range(count):
        path = d / f"shard_{i:04d}.{EXT[fmt]}"
        if fmt == "npy":
            np.save(path, a)
        elif fmt == "raw":
            a.tofile(path)
        elif fmt == "hdf5":
            with h5py.File(path, "w") as f:
                f["x"] = a
        else:
            pq.write_table(pa.table({"a": a[:, 0], "b": a[:, 1]}), path)
    if fmt == "raw":
        (d / "shardload.json").write_text('{"dtype": "<i4", "shape": [2]}')


def discover_swapping(shim: pathlib.Path, link: pathlib.Path, steps: str,
                      every: str | None = None, mode: str = "link",
                      source: str | None = None) -> tuple[dict, str]:
    """Discovers and reads `source` (the link's path unless told) in a subprocess whose opens
    swap `link` as `steps` says (support/swap_link.c)."""
    env = dict(os.environ, LD_PRELOAD=str(shim), SWAP_LINK=str(link), SWAP_LINK_STEPS=steps,
               SWAP_LINK_MODE=mode)
    if every is not None:
        env["SWAP_LINK_EVERY"] = every
    r = subprocess.run([sys.executable, "-c", SCRIPT, source or str(link)], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


@pytest.mark.parametrize("fmt", ["npy", "raw", "hdf5", "parquet"])
def test_a_link_swapped_between_listing_and_probes_gives_the_new_version_whole(
        tmp_path: pathlib.Path, swap_link_shim: pathlib.Path, fmt: str) -> None:
    """v1 holds 3 shards of 1s, v2 40 shards of 2s; `current` is re-pointed at v2 as its first
    shard is opened, after v1 was listed. The layout was v2's first 3 shards, 12 of its 160 rows
    read as the whole dataset with no error; it is v2, whole."""
    write_version(tmp_path / "v1", fmt, 3, 1)
    write_version(tmp_path / "v2", fmt, 40, 2)
    current = tmp_path / "current"
    current.symlink_to("v1")
    got, err = discover_swapping(swap_link_shim, current, f"shard_0000.{EXT[fmt]}=v2")
    assert "swap_link: " in err, err[-3000:]
    assert got == {"shards": 40, "dtype": "int32", "shape": [160, 2], "values": [2]}


@pytest.mark.parametrize("fmt", ["npy", "raw"])
def test_a_directory_exchanged_into_place_between_listing_and_probes_gives_the_new_version(
        tmp_path: pathlib.Path, swap_link_shim: pathlib.Path, fmt: str) -> None:
    """`current` is a directory (v1: 3 shards of 1s), exchanged with `next` (v2: 40 of 2s) as
    its first shard is opened, as a save with overwrite=True puts a new version in place. The
    layout was v2's first 3 shards; it is v2, whole."""
    write_version(tmp_path / "current", fmt, 3, 1)
    write_version(tmp_path / "next", fmt, 40, 2)
    current = tmp_path / "current"
    got, err = discover_swapping(swap_link_shim, current, f"shard_0000.{EXT[fmt]}=next",
                                 mode="exchange")
    assert "swap_link: " in err, err[-3000:]
    assert got == {"shards": 40, "dtype": "int32", "shape": [160, 2], "values": [2]}


def test_a_raw_sidecar_is_read_from_the_version_its_files_are_read_from(
        tmp_path: pathlib.Path, swap_link_shim: pathlib.Path) -> None:
    """v1's raw shards are <i4 rows of 2 (value 1), v2's <i2 rows of 4 (value 2), the same bytes
    per row, each with its shardload.json. `current` is re-pointed at v2 after v1's sidecar was
    read, as the first shard is opened: v2's int16 bytes were read under v1's int32
    (0x00020002 = 131074), no error. The layout is v2's."""
    for v, (dtype, shape) in {1: ("<i4", [2]), 2: ("<i2", [4])}.items():
        d = tmp_path / f"v{v}"
        d.mkdir()
        for i in range(8):
            np.full([4] + shape, v, dtype).tofile(d / f"shard_{i:04d}.bin")
        (d / "shardload.json").write_text(json.dumps({"dtype": dtype, "shape": shape}))
    current = tmp_path / "current"
    current.symlink_to("v1")
    got, err = discover_swapping(swap_link_shim, current, "shard_0000.bin=v2")
    assert "swap_link: " in err, err[-3000:]
    assert got == {"shards": 8, "dtype": "int16", "shape": [32, 4], "values": [2]}


def test_a_link_swapped_and_swapped_back_during_discovery_is_seen(
        tmp_path: pathlib.Path, swap_link_shim: pathlib.Path) -> None:
    """`current` goes to v2 as shard 1 is opened and back to v1 as shard 2 is: the directory
    `current` reaches is v1 at both ends of the discovery, but shard 1 was probed in v2. The
    link itself is another one (a new link each time), so the discovery is done again: v1,
    whole, as the link is left."""
    write_version(tmp_path / "v1", "npy", 3, 1)
    write_version(tmp_path / "v2", "npy", 40, 2)
    current = tmp_path / "current"
    current.symlink_to("v1")
    got, err = discover_swapping(swap_link_shim, current, "shard_0001.npy=v2,shard_0002.npy=v1")
    assert err.count("swap_link: ") == 2, err[-3000:]
    assert got == {"shards": 3, "dtype": "int32", "shape": [12, 2], "values": [1]}


def test_a_link_swapped_during_every_discovery_is_refused_naming_the_directory(
        tmp_path: pathlib.Path, swap_link_shim: pathlib.Path) -> None:
    """A publisher that never pauses: `current` is re-pointed at every open of a shard. The
    discovery is done again a few times, then refused as a LayoutError naming `current` as
    given, not answered with a layout of either version's files under the other's listing."""
    write_version(tmp_path / "v1", "npy", 3, 1)
    write_version(tmp_path / "v2", "npy", 40, 2)
    current = tmp_path / "current"
    current.symlink_to("v1")
    got, err = discover_swapping(swap_link_shim, current, "x=v2,x=v1", every="shard_0000.npy")
    assert "swap_link: " in err, err[-3000:]
    assert "layout_error" in got, got
    message = got["layout_error"]
    assert f"{current}: changed during discovery (replaced 4 times)" in message, message


V1_WHOLE = {"shards": 3, "dtype": "int32", "shape": [12, 2], "values": [1]}


@pytest.mark.parametrize("spelling", ["/.", "/sub", "/sub/*.npy", "/sub/shard_{:04d}.npy"])
def test_a_link_above_the_directory_swapped_and_back_during_discovery_is_seen(
        tmp_path: pathlib.Path, swap_link_shim: pathlib.Path, spelling: str) -> None:
    """The source reaches its directory through `current` without ending in it (`current/.`,
    `current/sub`, a glob or pattern under it); `current` goes to v2 as shard 1 is opened and
    back to v1 as shard 2 is. Every directory the path reaches is v1's at both ends, so
    discovery kept v1's listing with shard 1 probed in v2 (the read then failed, or with the
    next swap read v2's first 3 shards as the whole dataset). The link met on the way is another
    one, so the discovery is done again: v1, whole."""
    for v, count in {1: 3, 2: 40}.items():
        write_version(tmp_path / f"v{v}", "npy", count, v)
        write_version(tmp_path / f"v{v}" / "sub", "npy", count, v)
    current = tmp_path / "current"
    current.symlink_to("v1")
    got, err = discover_swapping(swap_link_shim, current, "shard_0001.npy=v2,shard_0002.npy=v1",
                                 source=str(current) + spelling)
    assert err.count("swap_link: ") == 2, err[-3000:]
    assert got == V1_WHOLE


@pytest.mark.parametrize("spelling", ["", "/sub"], ids=["current", "current/sub"])
def test_a_directory_exchanged_and_back_during_discovery_is_seen(
        tmp_path: pathlib.Path, swap_link_shim: pathlib.Path, spelling: str) -> None:
    """No link: `current` (v1) is exchanged with `next` (v2) as shard 1 is opened and exchanged
    back as shard 2 is (renameat2's RENAME_EXCHANGE, twice), the source `current` itself or
    `current/sub` below it. `current` is v1's directory at both ends, so discovery kept v1's
    listing with shard 1 probed in v2. The exchanged directory's change time moved past its
    modification time (a rename sets the one alone), so the discovery is done again: v1,
    whole."""
    for name, (v, count) in {"current": (1, 3), "next": (2, 40)}.items():
        write_version(tmp_path / name, "npy", count, v)
        write_version(tmp_path / name / "sub", "npy", count, v)
    current = tmp_path / "current"
    got, err = discover_swapping(swap_link_shim, current,
                                 "shard_0001.npy=next,shard_0002.npy=next", mode="exchange",
                                 source=str(current) + spelling)
    assert err.count("swap_link: ") == 2, err[-3000:]
    assert got == V1_WHOLE


@pytest.mark.parametrize("where", ["parent", "directory"])
def test_a_file_written_beside_the_dataset_during_every_discovery_is_no_new_version(
        tmp_path: pathlib.Path, swap_link_shim: pathlib.Path, where: str) -> None:
    """Another writer makes a file in the directory above the dataset (`where="parent"`), or in
    the dataset's own directory, at every open of shard 0, during discovery and the read. Each
    sets that directory's change time, as a rename does, but its modification time with it: no
    new version, so no discovery is done again and none is refused as replaced; the layout is
    v1's, whole."""
    write_version(tmp_path / "v1", "npy", 3, 1)
    current = tmp_path / "current"
    current.symlink_to("v1")
    written = tmp_path if where == "parent" else tmp_path / "v1"
    got, err = discover_swapping(swap_link_shim, written, "x=other,x=other", every="shard_0000.npy",
                                 mode="write", source=str(current))
    assert "swap_link: wrote" in err, err[-3000:]
    assert got == V1_WHOLE
    assert len(list(written.glob("other.*"))) == err.count("swap_link: wrote") >= 2
