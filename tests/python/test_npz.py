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
    # An end record whose comment length does not reach the file's end: bytes appended after
    # the archive, or its comment cut short. The record's offset and both lengths are named.
    at = end_record(good)
    refused(good + b"junk", rf"record at offset {at} declares a 0-byte comment, but 4 bytes "
                            r"follow it \(truncated, or bytes appended")
    raw = bytearray(good)
    raw[at + 20:at + 22] = struct.pack("<H", 40)
    refused(bytes(raw) + b"c" * 10, rf"record at offset {at} declares a 40-byte comment, but 10 "
                                    r"bytes follow it")
    # ZIP64: the 32-bit central directory offset says "see the ZIP64 record".
    raw = bytearray(good)
    raw[end_record(good) + 16:end_record(good) + 20] = b"\xff\xff\xff\xff"
    refused(bytes(raw), r"ZIP64 archives are not supported")
    # Encrypted: general purpose flag bit 0 of the member's directory entry.
    raw = bytearray(good)
    flags = central_entry(good) + 8
    raw[flags] |= 1
    refused(bytes(raw), r"member 'x\.npy': encrypted; encrypted archives are not supported")
    # Strong encryption (bit 6) and patched data (bit 5): not the array's bytes; numpy's
    # zipfile refuses both.
    for bit, match in [(6, r"member 'x\.npy': encrypted; encrypted archives are not supported"),
                       (5, r"member 'x\.npy': compressed patched data \(flag bit 5\)")]:
        raw = bytearray(good)
        raw[flags] |= 1 << bit
        refused(bytes(raw), match)
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


def _write_member(z: zipfile.ZipFile, name: str, a: np.ndarray) -> None:
    with z.open(name, "w", force_zip64=True) as f:  # as numpy's savez writes members
        np.lib.format.write_array(f, a)


def _end(raw: bytes) -> tuple[int, int, int, int]:
    """(offset, entries, directory size, directory offset) of the archive's last end record."""
    e = end_record(raw)
    entries, size, offset = struct.unpack("<HII", raw[e + 10:e + 20])
    return e, entries, size, offset


@pytest.mark.parametrize("compressed", [False, True], ids=["stored", "deflated"])
def test_a_member_written_twice_reads_the_last_copy_as_numpy_does(tmp_path: pathlib.Path,
                                                                   compressed: bool) -> None:
    """zipfile's append mode writes an updated member again and keeps the old entry: the
    directory lists x.npy twice, and numpy (zipfile's name lookup) reads the last one."""
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    rng = np.random.default_rng(11)
    for i, rows in enumerate((5, 8)):
        path = tmp_path / f"shard_{i:04d}.npz"
        (np.savez_compressed if compressed else np.savez)(path, x=np.zeros((rows, 3)),
                                                          y=np.arange(4))
        with zipfile.ZipFile(path, "a", compression=method) as z:
            _write_member(z, "x.npy", rng.standard_normal((rows + 1, 3)))
        assert zipfile.ZipFile(path).namelist().count("x.npy") == 2
    expected = np.concatenate([np.load(tmp_path / f"shard_{i:04d}.npz")["x"] for i in range(2)])
    assert expected.any()  # the new copies, not the zeros
    for name in ("x", "x.npy"):
        layout = shardload.discover(tmp_path, dataset=name)
        assert layout.shape == expected.shape
        check_all_ranges(layout, expected, step=2)
    # One array written twice is still one array: no name needed.
    path = tmp_path / "one" / "shard_0000.npz"
    path.parent.mkdir()
    np.savez(path, x=np.zeros(3))
    with zipfile.ZipFile(path, "a", compression=method) as z:
        _write_member(z, "x.npy", np.arange(7.0))
    np.testing.assert_array_equal(shardload.discover(path.parent).read(0, 7),
                                  np.load(path)["x"])


@pytest.mark.parametrize("order", [("x.npy", "x"), ("x", "x.npy")])
def test_the_member_of_exactly_the_name_wins_as_numpy_does(tmp_path: pathlib.Path,
                                                          order: tuple[str, str]) -> None:
    """Members `x.npy` and `x` in one archive: numpy reads `x` for "x" and `x.npy` for
    "x.npy", in either order of the directory; an error lists them in one order."""
    path = tmp_path / "shard_0000.npz"
    with zipfile.ZipFile(path, "w") as z:
        for k, name in enumerate(order):
            _write_member(z, name, np.full((3 + k, 2), 10 * k + 1, dtype=np.int32))
    npz = np.load(path)
    for name in ("x", "x.npy"):
        np.testing.assert_array_equal(shardload.discover(tmp_path, dataset=name).read(),
                                      npz[name])
    with pytest.raises(shardload.LayoutError,
                       match=r"expected exactly one array when none is named, found 2 "
                             r"\(x, x\.npy\)"):
        shardload.discover(tmp_path)


def test_archives_that_readers_could_take_differently_are_refused(
        tmp_path: pathlib.Path) -> None:
    """Each archive here is one that numpy reads as another array than the directory (or
    the local headers) alone would give, or refuses: refused, naming the file."""
    path = tmp_path / "shard_0000.npz"
    old, new = np.arange(6.0), np.arange(100.0, 109.0)

    def refused(raw: bytes, match: str) -> None:
        path.write_bytes(raw)
        with pytest.raises(shardload.LayoutError, match=match) as e:
            shardload.discover(tmp_path)
        assert str(path) in str(e.value)

    # An end record that counts fewer entries than its directory holds: zipfile reads the
    # directory to its end, and so the newer copy of x; the count alone gives the stale one.
    np.savez(path, x=old)
    with zipfile.ZipFile(path, "a") as z:
        _write_member(z, "x.npy", new)
    raw = bytearray(path.read_bytes())
    e, _, _, _ = _end(bytes(raw))
    raw[e + 8:e + 12] = struct.pack("<HH", 1, 1)
    path.write_bytes(bytes(raw))
    np.testing.assert_array_equal(np.load(path)["x"], new)
    refused(bytes(raw), r"shard_0000\.npz: central directory: \d+ bytes follow its 1 entries")

    # A second end record inside the comment of the first, with its own directory: zipfile
    # takes the last signature (the copy holding `new`); the comment length points to the first.
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        _write_member(z, "x.npy", old)
        _write_member(z, "y.npy", new)
    two = buf.getvalue()
    e, _, size, offset = _end(two)
    entries = zipfile.ZipFile(io.BytesIO(two)).infolist()
    cd = two[offset:offset + size]
    first = cd[:cd.index(b"PK\x01\x02", 4)]  # the entry of x.npy
    second = bytearray(cd[len(first):])        # y.npy's, renamed x.npy
    second[46:51] = b"x.npy"
    # Its comment length (3) does not reach the file's end (7 bytes follow): zipfile takes
    # it all the same.
    tail = bytes(second) + b"PK\x05\x06" + struct.pack(
        "<HHHHIIH", 0, 0, 1, 1, len(second), offset + len(first) + 22, 3) + b"comment"
    crafted = (two[:offset] + first + b"PK\x05\x06" +
               struct.pack("<HHHHIIH", 0, 0, 1, 1, len(first), offset, len(tail)) + tail)
    # y.npy's local header must say x.npy too for zipfile to read it.
    crafted = bytearray(crafted)
    ly = entries[1].header_offset
    crafted[ly + 30:ly + 35] = b"x.npy"
    np.testing.assert_array_equal(np.load(io.BytesIO(bytes(crafted)))["x"], new)
    refused(bytes(crafted), r"a second end of central directory signature, at offset \d+ in "
                            r"the archive comment, makes the archive ambiguous")

    # A local header that names another member than the directory: zipfile refuses it.
    np.savez(path, x=old)
    raw = bytearray(path.read_bytes())
    raw[30:35] = b"z.npy"
    path.write_bytes(bytes(raw))
    with pytest.raises(zipfile.BadZipFile, match="differ"):
        np.load(path)["x"]
    refused(bytes(raw), r"member 'x\.npy': the local header at offset 0 names another member "
                        r"\('z\.npy'\)")

    # A local header whose sizes (in its ZIP64 field, as savez writes them) differ from the
    # directory's: a reader walking the local headers would take other bytes.
    np.savez(path, x=old)
    raw = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", raw[26:30])
    field = 30 + name_len + 4  # the ZIP64 extra field's values: uncompressed, compressed
    # Sizes of 0xFFFFFFFF put the ZIP64 field's in force (Python 3.11.4+ writes them so; older
    # zipfiles wrote the sizes themselves beside the field, which then counts for nothing).
    raw[18:26] = struct.pack("<II", 0xFFFFFFFF, 0xFFFFFFFF)
    raw[field:field + 8] = struct.pack("<Q", struct.unpack("<Q", raw[field:field + 8])[0] - 8)
    refused(bytes(raw), r"member 'x\.npy': the local header gives \d+ bytes \(\d+ "
                        r"uncompressed\), the central directory")

    # An archive after other bytes: zipfile shifts every offset by their length.
    np.savez(path, x=new)
    refused(b"#!/bin/sh\nexit 0\n" + path.read_bytes(),
            r"central directory \(\d+ bytes at offset \d+\) ends at offset \d+, not where the "
            r"end record begins")


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


def _npy(a: np.ndarray) -> bytes:
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


class _Unseekable(io.RawIOBase):
    """A stream zipfile cannot seek back in: it writes data descriptors after each member."""

    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.data += b
        return len(b)


def _central(raw: bytes) -> int:
    return struct.unpack_from("<I", raw, raw.rfind(b"PK\x05\x06") + 16)[0]


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED],
                         ids=["stored", "deflated"])
def test_zip_variants_numpy_reads_are_read_alike(tmp_path: pathlib.Path, method) -> None:
    """Members written with a data descriptor (sizes after the data, as to a pipe), with
    ZIP64 extra fields on a small member, or whose local header alone sets the encryption
    flag (zipfile reads the directory's): each reads as numpy reads it."""
    a = np.arange(24.0).reshape(6, 4)
    path = tmp_path / "shard_0000.npz"
    pipe = _Unseekable()
    with zipfile.ZipFile(pipe, "w", method) as z, z.open("x.npy", "w") as f:
        f.write(_npy(a))
    zip64 = io.BytesIO()
    with zipfile.ZipFile(zip64, "w", method) as z, z.open("x.npy", "w", force_zip64=True) as f:
        f.write(_npy(a))
    plain = io.BytesIO()
    with zipfile.ZipFile(plain, "w", method) as z:
        z.writestr("x.npy", _npy(a))
    local_flag = bytearray(plain.getvalue())
    local_flag[6] |= 1
    for raw in (bytes(pipe.data), zip64.getvalue(), bytes(local_flag)):
        path.write_bytes(raw)
        np.testing.assert_array_equal(np.load(path)["x"], a)
        np.testing.assert_array_equal(shardload.discover(tmp_path).read(), a)


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED],
                         ids=["stored", "deflated"])
def test_zip_tricks_numpy_refuses_are_refused(tmp_path: pathlib.Path, method) -> None:
    """The encryption flag in the directory, a compressed size of 0 for 320 bytes of data, an
    uncompressed size smaller than the data: numpy refuses each, and so does shardload, naming
    the file. A ZIP64 extra field in the local header giving other sizes than the directory
    (zipfile reads the directory's) is refused as the archive's headers disagreeing."""
    a = np.arange(24.0).reshape(6, 4)
    path = tmp_path / "shard_0000.npz"
    plain = io.BytesIO()
    with zipfile.ZipFile(plain, "w", method) as z:
        z.writestr("x.npy", _npy(a))
    base = plain.getvalue()
    cd = _central(base)
    encrypted = bytearray(base)
    encrypted[cd + 8] |= 1
    empty = bytearray(base)
    struct.pack_into("<I", empty, 18, 0)
    struct.pack_into("<I", empty, cd + 20, 0)
    smaller = bytearray(base)
    size = struct.unpack_from("<I", base, 22)[0]
    struct.pack_into("<I", smaller, 22, size - 8)
    struct.pack_into("<I", smaller, cd + 24, size - 8)
    zip64 = io.BytesIO()
    with zipfile.ZipFile(zip64, "w", method) as z, z.open("x.npy", "w", force_zip64=True) as f:
        f.write(_npy(a))
    lying = bytearray(zip64.getvalue())
    extra = 30 + struct.unpack_from("<H", lying, 26)[0]
    assert struct.unpack_from("<H", lying, extra)[0] == 1  # the ZIP64 extra field
    struct.pack_into("<II", lying, 18, 0xFFFFFFFF, 0xFFFFFFFF)  # in force (see above)
    struct.pack_into("<QQ", lying, extra + 4, 10**6, 10**6)
    cases = [(encrypted, "encrypted"), (empty, r"0 bytes"),
             (smaller, r"size: expected|stored with 320 bytes in the archive for 312"),
             (lying, "the local header gives 1000000 bytes")]
    for raw, match in cases:
        path.write_bytes(bytes(raw))
        if raw is not lying:
            with pytest.raises(Exception):  # noqa: B017 (numpy's and zipfile's own)
                np.load(path)["x"]
        with pytest.raises(shardload.LayoutError, match=match) as e:
            shardload.discover(tmp_path)
        assert str(path) in str(e.value)


# --- a third pass: members whose .npy header lies, and directories that lie after a data
# descriptor; each read as numpy reads it, or refused naming the file


def _member_cases(a: np.ndarray) -> dict[str, bytes]:
    """The bytes of one member x.npy, as written or with its header lying."""
    header = _npy(a)
    return {
        "fortran order": _npy(np.asfortranarray(a)),
        "object dtype": b"",  # written by np.save with allow_pickle below
        "structured dtype": _npy(np.zeros(3, dtype=[("x", "<f4"), ("y", "<i4")])),
        "shape with more rows than the data": header.replace(b"(6, 4)", b"(9, 4)"),
        "shape with fewer rows than the data": header.replace(b"(6, 4)", b"(3, 4)"),
        "descr of a smaller dtype": header.replace(b"'<f8'", b"'<f4'"),
        "0-d array": _npy(np.float64(3)),
    }


def _descriptor_lies(a: np.ndarray, method: int) -> dict[str, bytes]:
    """A member written with a data descriptor (to a pipe), its directory's or its
    descriptor's CRC or sizes then rewritten."""
    pipe = _Unseekable()
    with zipfile.ZipFile(pipe, "w", method) as z, z.open("x.npy", "w") as f:
        f.write(_npy(a))
    base = bytes(pipe.data)
    cd, dd = _central(base), base.rfind(b"PK\x07\x08")
    out = {}
    for name, at, delta in [("directory crc", cd + 16, 1),
                            ("directory compressed size", cd + 20, 8),
                            ("directory size", cd + 24, -8), ("descriptor crc", dd + 4, 1),
                            ("descriptor compressed size", dd + 8, -8),
                            ("descriptor size", dd + 12, 8)]:
        raw = bytearray(base)
        struct.pack_into("<I", raw, at, (struct.unpack_from("<I", raw, at)[0] + delta) % 2**32)
        out[name] = bytes(raw)
    return out


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED],
                         ids=["stored", "deflated"])
def test_members_and_directories_that_lie_read_as_numpy_reads_them_or_are_refused(
        tmp_path: pathlib.Path, method) -> None:
    """numpy as the oracle. Beyond it: trailing bytes after a member's rows, a 0-d member and a
    stored member whose directory gives more bytes than its data are refused (numpy reads the
    first rows, the scalar, the data), and a stored member's CRC is not checked
    (docs/formats.md: it is read by ranges, as a .npy is)."""
    a = np.arange(24.0).reshape(6, 4)
    path = tmp_path / "shard_0000.npz"
    archives = {}
    for name, member in _member_cases(a).items():
        buf = io.BytesIO()
        if name == "object dtype":
            np.save(buf, np.array([1, "x", None], dtype=object), allow_pickle=True)
            member = buf.getvalue()
            buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", method) as z:
            z.writestr("x.npy", member)
        archives[name] = buf.getvalue()
    archives.update(_descriptor_lies(a, method))
    stricter = {"shape with fewer rows than the data", "descr of a smaller dtype", "0-d array"}
    if method == zipfile.ZIP_STORED:  # a stored member's sizes must agree with each other
        stricter.add("directory compressed size")
    unchecked = {"directory crc"} if method == zipfile.ZIP_STORED else set()
    for name, raw in archives.items():
        path.write_bytes(raw)
        try:
            want = np.load(path)["x"]
        except Exception:  # noqa: BLE001 (numpy's and zipfile's own)
            want = None
        if name in unchecked:
            np.testing.assert_array_equal(shardload.discover(tmp_path).read(), a)
            continue
        if want is None or name in stricter or want.dtype.kind not in "biufc" or (
                want.dtype.names is not None):
            with pytest.raises(shardload.Error) as e:
                shardload.discover(tmp_path).read()
            assert str(path) in str(e.value), (name, str(e.value))
            continue
        np.testing.assert_array_equal(shardload.discover(tmp_path).read(), want, err_msg=name)


# ---- a fourth hostile pass: compression methods and member names -------------------------------

def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


@pytest.mark.parametrize("members,method,dataset", [
    ([("x.npy", "a")], zipfile.ZIP_BZIP2, None),
    ([("x.npy", "a")], zipfile.ZIP_LZMA, None),
    ([("sub/x.npy", "a")], zipfile.ZIP_STORED, "sub/x"),
    ([("sub/x.npy", "a")], zipfile.ZIP_DEFLATED, None),
    ([("../x.npy", "a")], zipfile.ZIP_STORED, "../x"),
    ([("./x.npy", "a")], zipfile.ZIP_STORED, "x"),
    ([("/x.npy", "a")], zipfile.ZIP_STORED, "x"),
    ([("a\\x.npy", "a")], zipfile.ZIP_STORED, None),
    ([(".npy", "a")], zipfile.ZIP_STORED, None),
    ([("X.npy", "a"), ("x.npy", "b")], zipfile.ZIP_STORED, "x"),
    ([("x.npy.npy", "a"), ("x.npy", "b")], zipfile.ZIP_DEFLATED, "x.npy"),
    ([("x", "a")], zipfile.ZIP_STORED, None),
], ids=["bzip2", "lzma", "directory", "directory default", "dot dot", "dot", "absolute",
        "backslash", "empty name", "case only", "name.npy.npy", "no extension"])
def test_methods_and_member_names_read_as_numpy_reads_them_or_are_refused(
        tmp_path: pathlib.Path, members, method, dataset) -> None:
    """numpy (NpzFile) as the oracle: a member named with directories, dot segments, a
    backslash, nothing before .npy, or names differing in case only is the one numpy gives
    for that key; a method numpy reads that shardload does not (bzip2, LZMA) and a key numpy
    does not have are a LayoutError naming the archive."""
    arrays = {"a": np.arange(12.0).reshape(6, 2), "b": -np.arange(12.0).reshape(6, 2)}
    path = tmp_path / "shard_0000.npz"
    with zipfile.ZipFile(path, "w", method) as z:
        for name, which in members:
            z.writestr(name, _npy(arrays[which]))
    kw = {} if dataset is None else {"dataset": dataset}
    with np.load(path) as npz:
        key = dataset if dataset is not None else npz.files[0]
        ref = npz[key] if key in npz.files else None
    try:
        got = shardload.discover(path, format="npz", **kw).read()
    except shardload.LayoutError as e:
        assert str(path) in str(e), str(e)
        assert ref is None or "compression method" in str(e), str(e)
        return
    assert ref is not None
    np.testing.assert_array_equal(got, ref)


def test_the_arrays_an_error_lists_are_ten_in_natural_order_and_a_count(
        tmp_path: pathlib.Path) -> None:
    """2,000 arrays made a message of 13,000 characters; the list is the first ten of numpy's
    names in natural order and how many more."""
    save(tmp_path / "shard_0000.npz", False, **{f"a{i}": np.arange(2) for i in range(2000)})
    names = sorted(np.load(tmp_path / "shard_0000.npz").files, key=lambda n: int(n[1:]))
    shown = ", ".join(names[:10]) + ", ... and 1990 more"
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(tmp_path)
    assert f"found 2000 ({shown}); name one with dataset=" in str(e.value), str(e.value)
    assert len(str(e.value)) < 500
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(tmp_path, dataset="nope")
    assert f"array 'nope' not found (arrays in the archive: {shown})" in str(e.value)
    assert len(str(e.value)) < 500
