"""The package's exceptions: one base, the standard bases kept, the file as data."""

from __future__ import annotations

import errno
import os
import pathlib

import numpy as np
import pytest

import shardload
from test_core import write_shards


def test_exceptions_share_one_base_and_keep_their_standard_ones() -> None:
    for cls, std in [(shardload.LayoutError, ValueError), (shardload.ShardReadError, OSError),
                     (shardload.OutOfMemoryError, MemoryError)]:
        assert issubclass(cls, shardload.Error) and issubclass(cls, std)
    assert issubclass(shardload.SourceNotFoundError, shardload.LayoutError)
    assert issubclass(shardload.SourceNotFoundError, FileNotFoundError)


def test_missing_source_is_file_not_found_and_layout_error(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError) as e:
        shardload.discover(missing)
    assert isinstance(e.value, shardload.LayoutError)
    assert e.value.filename == str(missing)
    assert str(missing) in str(e.value) and "not found" in str(e.value)


def test_read_error_names_the_file_as_data(tmp_path: pathlib.Path) -> None:
    write_shards(tmp_path, [np.arange(10.0), np.arange(5.0)])
    layout = shardload.discover(tmp_path)
    np.save(tmp_path / "shard_0001.npy", np.arange(4.0))
    with pytest.raises(shardload.ShardReadError) as e:
        layout.read()
    assert e.value.filename == str(tmp_path / "shard_0001.npy")
    # The message stays the message (OSError's own str would show errno and filename).
    assert str(e.value).endswith(str(e.value.args[0])) and "changed since discovery" in str(e.value)


def test_bad_argument_stays_a_plain_value_error(tmp_path: pathlib.Path) -> None:
    write_shards(tmp_path, [np.arange(10.0)])
    with pytest.raises(ValueError) as e:
        shardload.discover(tmp_path, format="nosuchformat")
    assert not isinstance(e.value, shardload.Error)


def test_a_load_error_names_the_shard_as_data(tmp_path: pathlib.Path) -> None:
    # The file crosses Legate's task boundary as data, not found again in the message (where
    # one path here is a prefix of another).
    paths = [tmp_path / "x.npy", tmp_path / "x.npy.npy", tmp_path / "y.npy"]
    for p, n in zip(paths, (10, 5, 7)):
        with open(p, "wb") as f:
            np.save(f, np.arange(float(n)))
    layout = shardload.discover(paths)
    with open(paths[1], "wb") as f:
        np.save(f, np.arange(4.0))
    with pytest.raises(shardload.ShardReadError) as e:
        shardload.load(layout)
    assert e.value.filename == str(paths[1]), str(e.value)
    assert e.value.errno is None
    assert "changed since discovery" in str(e.value)


@pytest.mark.parametrize("how", ["load", "batches"])
def test_a_shard_removed_after_discovery_is_named_with_its_errno(tmp_path: pathlib.Path,
                                                                 how: str) -> None:
    # The file and errno come from the task as data: a name no message search could find
    # (the message writes its bytes that are not UTF-8 as \xNN) still comes back whole.
    d = tmp_path / "data"
    d.mkdir()
    odd = os.fsencode(d) + b"/sh\xffard_0001.npy"
    paths = [os.fsencode(d / "shard_0000.npy"), odd, os.fsencode(d / "shard_0002.npy")]
    for i, p in enumerate(paths):
        with open(p, "wb") as f:
            np.save(f, np.arange(6.0).reshape(3, 2) + i)
    layout = shardload.discover(paths)
    os.unlink(odd)
    with pytest.raises(shardload.ShardReadError) as e:
        if how == "load":
            shardload.load(layout)
        else:
            list(shardload.batches(layout, 3))
    assert isinstance(e.value, OSError)
    assert e.value.errno == errno.ENOENT, str(e.value)
    assert os.fsencode(e.value.filename) == odd, str(e.value)
    assert "discovery found it" in str(e.value)


@pytest.mark.parametrize("how", ["load", "batches"])
def test_the_lowest_failing_tile_is_reported(tmp_path: pathlib.Path, how: str) -> None:
    # Several tiles fail: each point's failure is a record in tile order, read once all have
    # run, so the error is the lowest failing tile's whichever point finished first.
    write_shards(tmp_path, [np.full((16, 3), i, np.int16) for i in range(8)])
    layout = shardload.discover(tmp_path)
    _, info = shardload.load(layout, overdecompose=4, info=True)
    assert info.tiles >= 3 and info.tile_rows % 16 == 0, info
    low = info.tile_rows // 16  # tile 1's first shard: changed; the tiles after it: gone
    bad = tmp_path / f"shard_{low:04d}.npy"
    os.truncate(bad, bad.stat().st_size - 2)
    for i in range(2 * low, 8):
        os.unlink(tmp_path / f"shard_{i:04d}.npy")
    for _ in range(5):
        with pytest.raises(shardload.ShardReadError) as e:
            if how == "load":
                shardload.load(layout, overdecompose=4)
            else:  # one batch of every row
                list(shardload.batches(layout, 128, overdecompose=4))
        assert e.value.filename == str(bad), str(e.value)
        assert e.value.errno is None, str(e.value)
        assert "changed since discovery" in str(e.value)
        assert f"tile 1 (rows [{info.tile_rows}, " in str(e.value)


@pytest.mark.parametrize("row_range", [None, (4, 8)])
def test_a_tiles_read_error_names_the_files_rows(tmp_path: pathlib.Path,
                                                  row_range: tuple[int, int] | None) -> None:
    """A Legate tile reads a view of its shard cut at the tile's first row, and "reading rows
    [A, B)" counted from that cut: a damaged Zarr chunk of the file's rows [6, 8) was reported
    as rows [0, 2) or [0, 4). The rows named are the file's, as Layout.read names them."""
    zarr = pytest.importorskip("zarr")
    store = tmp_path / "z.zarr"
    z = zarr.open_array(str(store), mode="w", shape=(8, 3), chunks=(2, 3), dtype="i4",
                        zarr_format=2, compressor=None, fill_value=0)
    z[:] = np.arange(24).reshape(8, 3)
    first = row_range[0] if row_range else 0  # the file's row that is the load's row 0
    _, info = shardload.load(store, row_range=row_range, overdecompose=4, info=True)
    assert (6 - first) // info.tile_rows > 0, info  # the chunk's tile is not the first
    with open(store / "3.0", "ab") as f:  # the chunk of rows [6, 8)
        f.write(b"xx")
    with pytest.raises(shardload.ShardReadError) as e:
        shardload.load(store, row_range=row_range, overdecompose=4)
    lo = (6 - first) // info.tile_rows * info.tile_rows  # the failing tile's rows of the layout
    hi = min(lo + info.tile_rows, 8 - first)
    assert (f"(rows [{lo}, {hi})): reading rows [{first + lo}, {first + hi}): {store}/3.0: "
            "size: 26 bytes, expected 24") in str(e.value), str(e.value)
