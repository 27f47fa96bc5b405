"""The .npz reader against numpy's savez / savez_compressed as the oracle: one named array
of each archive, stored members read by ranges, deflated members inflated, and archives
that are not what they claim refused naming the file."""

from __future__ import annotations

import io
import pathlib
import struct
import zipfile

import numpy as np
import pytest

import shardload
from conftest import DTYPES, random_array


def check_all_ranges(layout: shardload.Layout, expected: np.ndarray, step: int = 3) -> None:
    total = expected.shape[0]
    for lo in range(0, total + 1, step):
        for hi in range(lo, total + 1, step + 1):
            np.testing.assert_array_equal(layout.read(lo, hi), expected[lo:hi])


def save(path: pathlib.Path, compressed: bool, **arrays: np.ndarray) -> None:
    (np.savez_compressed if compressed else np.savez)(path, **arrays)


def awkward(rng: np.random.Generator, dtype: str) -> list[np.ndarray]:
    """Five shards: odd rows, an empty one, big-endian, Fortran order, one row."""
    arrays = [random_array(rng, (r, 3, 2), dtype) for r in (7, 0, 13, 9, 1)]
    if arrays[2].dtype.itemsize > 1:
        arrays[2] = arrays[2].astype(arrays[2].dtype.newbyteorder(">"))
    arrays[3] = np.asfortranarray(arrays[3])
    return arrays


@pytest.mark.parametrize("compressed", [False, True], ids=["savez", "savez_compressed"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_stored_and_deflated(tmp_path: pathlib.Path, dtype: str,
                                         compressed: bool) -> None:
    rng = np.random.default_rng(abs(hash((dtype, compressed))) % 2**32)
    arrays = awkward(rng, dtype)
    for i, a in enumerate(arrays):
        save(tmp_path / f"shard_{i:04d}.npz", compressed, data=a)
    layout = shardload.discover(tmp_path)  # by the extension
    expected = np.concatenate([a.astype(a.dtype.newbyteorder("=")) for a in arrays])
    assert layout.format == "npz"
    assert layout.dtype == expected.dtype
    assert layout.shape == expected.shape
    assert layout.shard_rows == [a.shape[0] for a in arrays]
    check_all_ranges(layout, expected)


@pytest.mark.parametrize("compressed", [False, True], ids=["savez", "savez_compressed"])
def test_one_and_four_dimensions(tmp_path: pathlib.Path, compressed: bool) -> None:
    rng = np.random.default_rng(3)
    for shape, sub in (((17,), "one"), ((5, 2, 3, 4), "four")):
        d = tmp_path / sub
        d.mkdir()
        arrays = [rng.standard_normal((r,) + shape[1:]).astype(np.float32) for r in (shape[0], 4)]
        arrays[1] = np.asfortranarray(arrays[1])
        for i, a in enumerate(arrays):
            save(d / f"shard_{i:04d}.npz", compressed, x=a)
        check_all_ranges(shardload.discover(d, format="npz"), np.concatenate(arrays), step=2)


@pytest.mark.parametrize("compressed", [False, True], ids=["savez", "savez_compressed"])
def test_named_member_and_several_members(tmp_path: pathlib.Path, compressed: bool) -> None:
    rng = np.random.default_rng(5)
    parts = [dict(a=rng.integers(0, 100, (r, 2)), b=rng.standard_normal((r + 1, 3)))
             for r in (4, 6)]
    for i, p in enumerate(parts):
        save(tmp_path / f"shard_{i:04d}.npz", compressed, **p)
    with pytest.raises(shardload.LayoutError,
                       match=r"shard_0000\.npz: array: expected exactly one array when none is "
                             r"named, found 2 \(a, b\); name one with dataset="):
        shardload.discover(tmp_path)
    for name in ("b", "b.npy"):
        layout = shardload.discover(tmp_path, dataset=name)
        check_all_ranges(layout, np.concatenate([p["b"] for p in parts]), step=2)
    with pytest.raises(shardload.LayoutError, match=r"shard_0000\.npz: array 'c' not found "
                                                    r"\(arrays in the archive: a, b\)"):
        shardload.discover(tmp_path, dataset="c")


def test_positional_arrays_and_sniffing(tmp_path: pathlib.Path) -> None:
    """np.savez(path, a) names the member arr_0; a file without the extension is told by its
    first bytes (a ZIP archive whose first member is an .npy)."""
    a = np.arange(30, dtype=np.int16).reshape(10, 3)
    np.savez(tmp_path / "x.npz", a)
    (tmp_path / "x.npz").rename(tmp_path / "part0")
    layout = shardload.discover([tmp_path / "part0"])
    assert layout.format == "npz"
    np.testing.assert_array_equal(layout.read(0, 10), a)
    np.testing.assert_array_equal(shardload.discover([tmp_path / "part0"], dataset="arr_0")
                                  .read(2, 9), a[2:9])


def test_options_of_other_formats_are_refused(tmp_path: pathlib.Path) -> None:
    np.savez(tmp_path / "shard_0000.npz", x=np.arange(3))
    with pytest.raises(ValueError, match=r"npz: columns= does not apply"):
        shardload.discover(tmp_path, columns=["a"])


def end_record(raw: bytes) -> int:
    return raw.rindex(b"PK\x05\x06")


def central_entry(raw: bytes) -> int:
    return raw.index(b"PK\x01\x02")


def test_bad_archives_are_refused_naming_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "shard_0000.npz"
    np.savez_compressed(path, x=np.arange(100, dtype=np.float64))
    good = path.read_bytes()

    def refused(raw: bytes, match: str) -> None:
        path.write_bytes(raw)
        with pytest.raises(shardload.LayoutError, match=match) as e:
            shardload.discover(tmp_path)
        assert str(path) in str(e.value)

    refused(good[:-30], r"shard_0000\.npz: not a ZIP archive \(no end of central directory")
    refused(b"PK", r"not a ZIP archive \(2 bytes")
    # ZIP64: the 32-bit central directory offset says "see the ZIP64 record".
    raw = bytearray(good)
    raw[end_record(good) + 16:end_record(good) + 20] = b"\xff\xff\xff\xff"
    refused(bytes(raw), r"ZIP64 archives are not supported")
    # Encrypted: general purpose flag bit 0 of the member's directory entry.
    raw = bytearray(good)
    flags = central_entry(good) + 8
    raw[flags] |= 1
    refused(bytes(raw), r"member 'x\.npy': encrypted; encrypted archives are not supported")
    # A compression method other than stored and deflated (bzip2 is 12).
    raw = bytearray(good)
    raw[central_entry(good) + 10:central_entry(good) + 12] = struct.pack("<H", 12)
    refused(bytes(raw), r"member 'x\.npy': compression method 12 is not supported")
    # The directory running past the end record.
    raw = bytearray(good)
    e = end_record(good)
    raw[e + 12:e + 16] = struct.pack("<I", struct.unpack("<I", good[e + 12:e + 16])[0] + 100)
    refused(bytes(raw), r"central directory \(.*\) runs past the end record")
    # Not an archive at all, named as one.
    refused(b"\x93NUMPY" + b"\0" * 100, r"not a ZIP archive")


def test_damaged_deflated_data_is_a_read_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "shard_0000.npz"
    a = np.random.default_rng(8).standard_normal((500, 4))
    np.savez_compressed(path, x=a)
    good = path.read_bytes()
    # The CRC the directory keeps: the data inflates, and the check at its end tells.
    raw = bytearray(good)
    c = central_entry(good) + 16
    raw[c:c + 4] = struct.pack("<I", struct.unpack("<I", good[c:c + 4])[0] ^ 1)
    path.write_bytes(bytes(raw))
    layout = shardload.discover(tmp_path)
    with pytest.raises(shardload.ShardReadError, match=r"shard_0000\.npz: member 'x\.npy': "
                                                       r"CRC-32 mismatch") as e:
        layout.read(0, 500)
    assert e.value.filename == str(path)
    # Rows from the stream's middle: the damage inflates into an error or a CRC mismatch.
    raw = bytearray(good)
    info = zipfile.ZipFile(io.BytesIO(good)).infolist()[0]
    off = info.header_offset
    name_len, extra_len = struct.unpack("<HH", good[off + 26:off + 30])
    start = off + 30 + name_len + extra_len
    mid = start + info.compress_size // 2
    raw[mid:mid + 40] = bytes(40)
    path.write_bytes(bytes(raw))
    layout = shardload.discover(tmp_path)
    with pytest.raises(shardload.ShardReadError, match=r"shard_0000\.npz: member 'x\.npy': "):
        layout.read(0, 500)


def test_load_under_legate(tmp_path: pathlib.Path) -> None:
    import cupynumeric as cn  # noqa: F401  (a pinned dependency)

    rng = np.random.default_rng(9)
    arrays = [rng.standard_normal((r, 3)).astype(np.float32) for r in (1500, 0, 777, 13)]
    for i, a in enumerate(arrays):
        save(tmp_path / f"shard_{i:04d}.npz", i % 2 == 1, data=a)
    for k in (1, 3):
        np.testing.assert_array_equal(np.asarray(shardload.load(tmp_path, overdecompose=k)),
                                      np.concatenate(arrays))


def test_discover_once_and_the_cli_name_npz(tmp_path: pathlib.Path, cli: pathlib.Path) -> None:
    """format="npz" crosses to the one-point discovery task (discover_once, the CLI's read)."""
    import subprocess

    rng = np.random.default_rng(10)
    arrays = [rng.standard_normal((r, 2)).astype(np.float32) for r in (4, 0, 9)]
    for i, a in enumerate(arrays):
        save(tmp_path / f"shard_{i:04d}.npz", i == 2, data=a)
    layout = shardload.discover_once(tmp_path, format="npz")
    assert layout == shardload.discover(tmp_path, format="npz")
    np.testing.assert_array_equal(layout.read(), np.concatenate(arrays))
    run = subprocess.run([str(cli), "read", str(tmp_path), "--format", "npz", "--no-verify"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "shape:          (13, 2)" in run.stdout, run.stdout
