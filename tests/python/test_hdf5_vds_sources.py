"""The source datasets of an HDF5 virtual dataset get the storage checks a shard's own dataset
gets at discovery, against h5py as the oracle where the data is valid.

HDF5 1.10 reads a virtual dataset's source as it reads any dataset: contiguous storage past the
end of the source's file as zeros, a compact buffer shorter than its elements into other
memory, a contiguous layout recording fewer bytes than the elements need as other rows, chunks
never written with fill time 'never' as whatever memory held, an external storage file cut
short as zeros. Each was refused for a shard's own dataset and loaded without a word through a
virtual dataset's mapping."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import shardload
import shardload.numpy
from test_hdf5 import truncate_past_a_dataset

import h5py  # noqa: E402

A = np.arange(1, 1001, dtype="<f4").reshape(250, 4)


def _vds(sub: pathlib.Path, sources: list[tuple[str, str, slice]], rows: int = 250) -> pathlib.Path:
    """sub/shard_0000.h5 with /v: each (file, dataset, rows of /v) maps that dataset's whole
    extent onto those rows; rows no mapping covers (or of a missing source) are -7."""
    sub.mkdir(exist_ok=True)
    layout = h5py.VirtualLayout(shape=(rows, 4), dtype="<f4")
    for file, dataset, where in sources:
        n = len(range(*where.indices(rows)))
        layout[where] = h5py.VirtualSource(file, dataset, shape=(n, 4))
    shard = sub / "shard_0000.h5"
    with h5py.File(shard, "w", libver=("earliest", "v110")) as f:
        f.create_virtual_dataset("v", layout, fillvalue=-7)
    return shard


def _compact(f: h5py.File, name: bytes, a: np.ndarray) -> None:
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    ds = h5py.h5d.create(f.id, name, h5py.h5t.IEEE_F32LE, h5py.h5s.create_simple(a.shape),
                         dcpl=dcpl)
    ds.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(a))


def _fill_never(f: h5py.File, name: bytes, a: np.ndarray, written: int) -> None:
    """Chunks of 50 rows, fill time never, only rows [0, written) written."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((50, 4))
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    dcpl.set_fill_value(np.array(3.0, dtype="f4"))
    ds = h5py.h5d.create(f.id, name, h5py.h5t.IEEE_F32LE, h5py.h5s.create_simple(a.shape),
                         dcpl=dcpl)
    h5py.Dataset(ds)[0:written] = a[0:written]


def _compact_size_cut(raw: bytearray) -> bytearray:
    """The file's one compact layout message for A (layout v3, compact, 4000 bytes) made to
    say 1000 bytes."""
    message = bytes([3, 0]) + A.nbytes.to_bytes(2, "little")
    assert raw.count(message) == 1
    at = raw.find(message)
    raw[at + 2:at + 4] = (1000).to_bytes(2, "little")
    return raw


def _refused(sub: pathlib.Path, source: str) -> str:
    """The discovery error of sub's virtual dataset, checked to name the shard and source."""
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(sub)
    msg = str(e.value)
    assert (f"{sub / 'shard_0000.h5'}: dataset '/v' is a virtual dataset whose source "
            f"{source} is refused: ") in msg, msg
    with pytest.raises(shardload.LayoutError, match="is refused: "):
        np.asarray(shardload.load(str(sub)))
    return msg


def _damaged_source_refused_as_h5py_refuses(tmp_path: pathlib.Path, raw: bytearray) -> str:
    """src.h5 written as ``raw``, mapped whole by s/shard_0000.h5's /v: h5py's read fails, and
    discovery's refusal (its message) names the source."""
    (tmp_path / "src.h5").write_bytes(bytes(raw))
    _vds(tmp_path / "s", [("../src.h5", "y", slice(None))])
    with pytest.raises(OSError):
        with h5py.File(tmp_path / "s" / "shard_0000.h5") as f:
            f["v"][()]
    return _refused(tmp_path / "s", f"{tmp_path / 's'}/../src.h5:/y")


def test_a_contiguous_source_past_the_end_of_its_file_is_refused(tmp_path):
    """F7 (a): rows 237-249 loaded as 0.0 (h5py refuses the source)."""
    with h5py.File(tmp_path / "src.h5", "w") as f:
        f.create_dataset("y", data=A)
    _vds(tmp_path / "s", [("../src.h5", "y", slice(None))])
    truncate_past_a_dataset(tmp_path / "src.h5", 200)
    with pytest.raises(OSError):
        with h5py.File(tmp_path / "s" / "shard_0000.h5") as f:
            f["v"][()]
    size = (tmp_path / "src.h5").stat().st_size
    msg = _refused(tmp_path / "s", f"{tmp_path / 's'}/../src.h5:/y")
    assert "its contiguous storage (4000 bytes at offset " in msg, msg
    assert f") runs past the end of the file ({size} bytes): the file is truncated" in msg, msg


def test_a_sources_external_storage_file_cut_short_is_refused(tmp_path):
    """F7 (b): the source's external file cut by 200 bytes loaded rows 237-249 as 0.0 (h5py
    too), where the same dataset as a shard is refused."""
    ext = tmp_path / "ext.bin"
    with h5py.File(tmp_path / "src.h5", "w") as f:
        f.create_dataset("y", data=A, external=[(str(ext), 0, h5py.h5f.UNLIMITED)])
    _vds(tmp_path / "s", [("../src.h5", "y", slice(None))])
    np.testing.assert_array_equal(shardload.discover(tmp_path / "s").read(), A)
    ext.write_bytes(ext.read_bytes()[:-200])
    msg = _refused(tmp_path / "s", f"{tmp_path / 's'}/../src.h5:/y")
    assert (f"external storage file {ext} holds 3800 bytes, but the dataset's data runs to byte "
            "4000 of it: the file is truncated (HDF5 would read the rest as zeros)") in msg, msg


def test_a_sources_contiguous_layout_recording_too_few_bytes_is_refused(tmp_path):
    """F7 (c): the source's layout recording 3200 of 4000 bytes loaded 50 wrong rows (h5py
    reads them right; the same dataset as a shard is refused)."""
    src = tmp_path / "src.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("y", data=A)
    raw = bytearray(src.read_bytes())
    message = bytes([3, 1])  # layout v3, contiguous: address, then the size
    at = [i for i in range(len(raw) - 18) if raw[i:i + 2] == message
          and int.from_bytes(raw[i + 10:i + 18], "little") == A.nbytes]
    assert len(at) == 1
    raw[at[0] + 10:at[0] + 18] = (A.nbytes - 800).to_bytes(8, "little")
    src.write_bytes(bytes(raw))
    _vds(tmp_path / "s", [("../src.h5", "y", slice(None))])
    msg = _refused(tmp_path / "s", f"{tmp_path / 's'}/../src.h5:/y")
    assert "its contiguous storage holds 3200 bytes, where its elements need 4000" in msg, msg


def test_a_compact_source_shorter_than_its_elements_is_refused(tmp_path):
    """F8: a compact source whose size field says 1000 of 4000 bytes: HDF5 1.10 copied heap
    bytes into the array, different on each load (h5py refuses it)."""
    src = tmp_path / "src.h5"
    with h5py.File(src, "w") as f:
        _compact(f, b"y", A)
    raw = _compact_size_cut(bytearray(src.read_bytes()))
    msg = _damaged_source_refused_as_h5py_refuses(tmp_path, raw)
    assert "its compact storage holds 1000 bytes, where its elements need 4000" in msg, msg


def test_a_fill_time_never_source_with_chunks_never_written_is_refused(tmp_path):
    """F9: read() gave uninitialised memory and numpy.load(out=) left out's earlier values in
    rows 50-249. Refused before anything is read: out= stays as it was."""
    with h5py.File(tmp_path / "src.h5", "w") as f:
        _fill_never(f, b"y", A, written=50)
    sub = tmp_path / "s"
    _vds(sub, [("../src.h5", "y", slice(None))])
    msg = _refused(sub, f"{sub}/../src.h5:/y")
    assert ("some of its chunks were never written and its fill time is 'never', so HDF5 gives "
            "those elements no value") in msg, msg
    out = np.full(A.shape, 12345.0, dtype="<f4")
    with pytest.raises(shardload.LayoutError, match="fill time is 'never'"):
        shardload.numpy.load(str(sub), out=out)
    assert (out == 12345.0).all()


@pytest.mark.parametrize("gzip", [False, True])
def test_a_sources_chunk_layout_recording_another_element_size_is_refused(tmp_path, gzip):
    """A source whose chunk layout records 8-byte elements for float32: h5py refuses it, and
    so does discovery for the same dataset as a shard."""
    src = tmp_path / "src.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("y", data=A, chunks=(50, 4), compression="gzip" if gzip else None)
    raw = bytearray(src.read_bytes())
    at = raw.find(bytes([3, 2, 3]))  # layout v3, chunked, rank + 1
    assert at != -1 and raw[at + 11:at + 23] == np.array([50, 4, 4], "<u4").tobytes()
    raw[at + 19:at + 23] = (8).to_bytes(4, "little")
    msg = _damaged_source_refused_as_h5py_refuses(tmp_path, raw)
    assert "its chunk layout records elements of 8 bytes, where its type's are 4" in msg, msg


def test_a_source_compressed_with_a_filter_the_library_lacks_is_refused(tmp_path):
    """h5py's LZF, which only h5py's own HDF5 has: refused at discovery naming the filter, as
    for a shard's own dataset, instead of failing the read in HDF5's words."""
    with h5py.File(tmp_path / "src.h5", "w") as f:
        f.create_dataset("y", data=A, chunks=(50, 4), compression="lzf")
    _vds(tmp_path / "s", [("../src.h5", "y", slice(None))])
    msg = _refused(tmp_path / "s", f"{tmp_path / 's'}/../src.h5:/y")
    assert "compressed with the filter 'lzf' (id 32000)" in msg, msg


def test_a_sources_external_storage_file_that_is_a_fifo_is_refused(tmp_path):
    """HDF5 opens a source's external storage file with a plain open when it reads: a FIFO
    there would wait for a writer forever."""
    ext = tmp_path / "ext.bin"
    with h5py.File(tmp_path / "src.h5", "w") as f:
        f.create_dataset("y", data=A, external=[(str(ext), 0, h5py.h5f.UNLIMITED)])
    ext.unlink()
    os.mkfifo(ext)
    _vds(tmp_path / "s", [("../src.h5", "y", slice(None))])
    msg = _refused(tmp_path / "s", f"{tmp_path / 's'}/../src.h5:/y")
    assert f"external storage file {ext}: not a regular file" in msg, msg


def test_a_damaged_source_in_the_shards_own_file_is_refused(tmp_path):
    """A mapping of source file "." reads a dataset of the shard itself: checked the same."""
    shard = _vds(tmp_path, [(".", "y", slice(None))])
    with h5py.File(shard, "a") as f:
        _compact(f, b"y", A)
    raw = _compact_size_cut(bytearray(shard.read_bytes()))
    shard.write_bytes(bytes(raw))
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(tmp_path, dataset="v")
    assert (f"{shard}: dataset '/v' is a virtual dataset whose source /y is refused: its compact "
            "storage holds 1000 bytes, where its elements need 4000") in str(e.value), str(e.value)


def test_a_damaged_source_behind_a_source_virtual_dataset_is_refused(tmp_path):
    """The checks follow a source that is itself a virtual dataset to its own sources."""
    with h5py.File(tmp_path / "src.h5", "w") as f:
        f.create_dataset("y", data=A)
    with h5py.File(tmp_path / "mid.h5", "w", libver=("earliest", "v110")) as f:
        layout = h5py.VirtualLayout(shape=A.shape, dtype="<f4")
        layout[:] = h5py.VirtualSource("src.h5", "y", shape=A.shape)
        f.create_virtual_dataset("w", layout, fillvalue=-7)
    sub = tmp_path / "s"
    _vds(sub, [("../mid.h5", "w", slice(None))])
    np.testing.assert_array_equal(shardload.discover(sub).read(), A)
    truncate_past_a_dataset(tmp_path / "src.h5", 200)
    msg = _refused(sub, f"{sub}/../src.h5:/y")  # as HDF5 finds it beside mid.h5
    assert "runs past the end of the file" in msg, msg


def test_a_damaged_file_of_a_printf_style_source_is_refused(tmp_path):
    """src_%b.h5: the second block's file is the damaged one, and it is the one named."""
    for b in range(2):
        with h5py.File(tmp_path / f"src_{b}.h5", "w") as f:
            f.create_dataset("y", data=A[b * 125:(b + 1) * 125])
    sub = tmp_path / "s"
    sub.mkdir()
    with h5py.File(sub / "shard_0000.h5", "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        vspace = h5py.h5s.create_simple((250, 4), (h5py.h5s.UNLIMITED, 4))
        vspace.select_hyperslab((0, 0), (h5py.h5s.UNLIMITED, 1), (125, 4), (125, 4))
        dcpl.set_virtual(vspace, b"../src_%b.h5", b"/y", h5py.h5s.create_simple((125, 4)))
        dcpl.set_fill_value(np.array(-7.0, dtype="f4"))
        h5py.h5d.create(f.id, b"v", h5py.h5t.IEEE_F32LE, vspace, dcpl=dcpl)
    with h5py.File(sub / "shard_0000.h5") as f:
        want = f["v"][()]
    np.testing.assert_array_equal(want, A)
    got = shardload.discover(sub).read()
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    truncate_past_a_dataset(tmp_path / "src_1.h5", 100)
    msg = _refused(sub, f"{sub}/../src_1.h5:/y")
    assert "runs past the end of the file" in msg, msg


def test_valid_sources_of_every_storage_and_a_missing_one_read_as_h5py_does(tmp_path):
    """Sources of each storage the checks look at, whole: no false alarm, and the rows bit for
    bit as h5py reads them; a missing source file and a missing dataset give the fill value as
    HDF5 (and h5py) gives it. Two mappings of one file's datasets, and one dataset of the
    shard's own file ("."), among them."""
    with h5py.File(tmp_path / "contig.h5", "w") as f:
        f.create_dataset("y", data=A[0:25])
        f.create_dataset("z", data=A[25:50], chunks=(10, 4), compression="gzip", shuffle=True)
    with h5py.File(tmp_path / "compact.h5", "w") as f:
        _compact(f, b"y", A[50:75])
    ext = tmp_path / "ext.bin"
    with h5py.File(tmp_path / "external.h5", "w") as f:
        f.create_dataset("y", data=A[75:100], external=[(str(ext), 0, h5py.h5f.UNLIMITED)])
    with h5py.File(tmp_path / "never.h5", "w") as f:
        _fill_never(f, b"y", A[100:150], written=50)  # every chunk written
    with h5py.File(tmp_path / "unwritten.h5", "w") as f:
        f.create_dataset("y", shape=(25, 4), dtype="<f4", fillvalue=5.0)  # never written
    with h5py.File(tmp_path / "big.h5", "w") as f:
        f.create_dataset("y", data=A[175:200].astype(">f4"))
    sub = tmp_path / "s"
    shard = _vds(sub, [("../contig.h5", "y", slice(0, 25)), ("../contig.h5", "z", slice(25, 50)),
                       ("../compact.h5", "y", slice(50, 75)),
                       ("../external.h5", "y", slice(75, 100)),
                       ("../never.h5", "y", slice(100, 150)),
                       ("../unwritten.h5", "y", slice(150, 175)),
                       ("../big.h5", "y", slice(175, 200)),
                       ("../absent.h5", "y", slice(200, 210)),
                       ("../contig.h5", "absent", slice(210, 220)),
                       (".", "own", slice(220, 240))])
    with h5py.File(shard, "a") as f:
        f.create_dataset("own", data=A[220:240])
    with h5py.File(shard) as f:
        want = f["v"][()]
    assert (want[200:220] == -7).all() and (want[240:] == -7).all()
    assert (want[150:175] == 5.0).all()
    np.testing.assert_array_equal(want[:150], A[:150])
    layout = shardload.discover(sub, dataset="v")
    got = layout.read()
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    for lo, hi in [(0, 30), (60, 130), (145, 215), (230, 250)]:
        assert layout.read(lo, hi).tobytes() == want[lo:hi].tobytes()
    out = np.full(A.shape, 12345.0, dtype="<f4")
    shardload.numpy.load(str(sub), dataset="v", out=out)
    assert out.tobytes() == want.tobytes()


# ---- a shard in object storage: its sources in its own file ("."), the only ones HDF5 reads


def _own_file_vds(path: pathlib.Path, sources: list[tuple[str, slice]]) -> None:
    """path with /v mapping datasets of its own file onto rows of it (-7 elsewhere)."""
    layout = h5py.VirtualLayout(shape=A.shape, dtype="<f4")
    for dataset, where in sources:
        n = len(range(*where.indices(len(A))))
        layout[where] = h5py.VirtualSource(".", dataset, shape=(n, 4))
    with h5py.File(path, "a", libver=("earliest", "v110")) as f:
        f.create_virtual_dataset("v", layout, fillvalue=-7)


def test_a_remote_shards_damaged_source_in_its_own_file_is_refused(request, tmp_path):
    """From object storage the mappings were not followed at all: a compact dataset of the
    shard's own file whose size field is short loaded 188 rows of other memory."""
    pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
    bucket = request.getfixturevalue("bucket")
    shard = tmp_path / "v.h5"
    with h5py.File(shard, "w") as f:
        _compact(f, b"y", A)
    _own_file_vds(shard, [("y", slice(None))])
    raw = _compact_size_cut(bytearray(shard.read_bytes()))
    shard.write_bytes(bytes(raw))
    bucket.upload("v/v.h5", shard)
    url = bucket.url("v/v.h5")
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(url, dataset="v", storage_options=bucket.options)
    msg = str(e.value)
    assert (": dataset '/v' is a virtual dataset whose source /y is refused: its compact storage "
            "holds 1000 bytes, where its elements need 4000") in msg, msg
    assert "v/v.h5" in msg, msg


def test_a_remote_virtual_dataset_that_reads_itself_is_refused(request, tmp_path):
    """/v mapping "." /v, from object storage: the read died of SIGSEGV in HDF5's endless
    recursion (locally this was refused already)."""
    pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
    bucket = request.getfixturevalue("bucket")
    shard = tmp_path / "v.h5"
    layout = h5py.VirtualLayout(shape=(10, 4), dtype="f8")
    layout[:] = h5py.VirtualSource(".", "v", shape=(10, 4))
    with h5py.File(shard, "w", libver=("earliest", "v110")) as f:
        f.create_virtual_dataset("v", layout, fillvalue=-1)
    bucket.upload("v/v.h5", shard)
    script = textwrap.dedent(f"""
        import shardload
        try:
            shardload.discover({bucket.url("v/v.h5")!r},
                               storage_options={bucket.options!r}).read()
        except shardload.LayoutError as e:
            print(e)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert ("dataset '/v' is a virtual dataset whose mappings lead back to itself (/v -> /v)"
            in r.stdout), r.stdout


def test_a_remote_shards_valid_sources_in_its_own_file_read_as_h5py_does(request, tmp_path):
    """No false alarm from object storage: contiguous, gzip chunked and compact datasets of the
    shard's own file, and a missing one (the fill value), bit for bit as h5py reads the
    local copy."""
    pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
    bucket = request.getfixturevalue("bucket")
    shard = tmp_path / "v.h5"
    with h5py.File(shard, "w") as f:
        f.create_dataset("a", data=A[0:100])
        f.create_dataset("b", data=A[100:200], chunks=(30, 4), compression="gzip")
        _compact(f, b"c", A[200:230])
    _own_file_vds(shard, [("a", slice(0, 100)), ("b", slice(100, 200)), ("c", slice(200, 230)),
                          ("absent", slice(230, 240))])
    with h5py.File(shard) as f:
        want = f["v"][()]
    assert (want[230:] == -7).all()
    np.testing.assert_array_equal(want[:230], A[:230])
    bucket.upload("v/v.h5", shard)
    layout = shardload.discover(bucket.url("v/v.h5"), dataset="v",
                                storage_options=bucket.options)
    got = layout.read()
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    assert layout.read(90, 235).tobytes() == want[90:235].tobytes()


# ---- a source HDF5 cannot open: it gives the fill value, as for a missing one, silently

_NEWER_FILTERS = {
    "gzip": dict(compression="gzip"),
    "shuffle+gzip": dict(compression="gzip", shuffle=True),
    "fletcher32": dict(fletcher32=True),
}


def _newer_dataset(f: h5py.File, name: str, a: np.ndarray, kind: str) -> None:
    """A filtered chunked dataset in h5py's newest format (libver="latest"): HDF5 2.0 writes
    its layout message in a version HDF5 1.10 cannot read."""
    f.create_dataset(name, data=a, chunks=(50, 4), **_NEWER_FILTERS[kind])


def _unopenable_reason(path: pathlib.Path, dataset: str) -> str:
    """HDF5's reason for refusing `dataset` of `path` as a shard: the same words are expected
    where it is a virtual dataset's source. Skips where h5py's HDF5 wrote it in a format the
    library reads (the case does not arise then)."""
    try:
        shardload.discover(path, format="hdf5", dataset=dataset)
    except shardload.LayoutError as e:
        msg = str(e)
        head = f"'/{dataset}' is not a readable dataset: "
        assert head in msg, msg
        return msg[msg.index(head) + len(head):]
    pytest.skip(f"h5py's HDF5 {h5py.version.hdf5_version} writes libver='latest' filtered "
                "chunks in a format the library reads")


@pytest.mark.parametrize("kind", sorted(_NEWER_FILTERS))
def test_a_source_dataset_the_library_cannot_open_is_refused_not_read_as_fill(tmp_path, kind):
    """A whole, undamaged source written by a newer HDF5 (h5py reads it through the mapping)
    loaded as the virtual dataset's fill value for every element, without a word: HDF5 takes a
    source dataset it cannot open for a missing one. The same dataset as a shard is refused
    with HDF5's reason; as a source now too, before anything is read."""
    with h5py.File(tmp_path / "src.h5", "w", libver="latest") as f:
        _newer_dataset(f, "y", A, kind)
    reason = _unopenable_reason(tmp_path / "src.h5", "y")
    sub = tmp_path / "s"
    shard = _vds(sub, [("../src.h5", "y", slice(None))])
    with h5py.File(shard) as f:
        np.testing.assert_array_equal(f["v"][()], A)
    msg = _refused(sub, f"{sub}/../src.h5:/y")
    assert f"is refused: it is not a readable dataset: {reason} (HDF5 1.10" in msg, msg
    assert "fill value" in msg, msg
    out = np.full(A.shape, 12345.0, dtype="<f4")
    with pytest.raises(shardload.LayoutError, match="is not a readable dataset"):
        shardload.numpy.load(str(sub), out=out)
    assert (out == 12345.0).all()


def test_a_source_the_library_cannot_open_is_refused_in_the_shards_own_file_and_behind_a_vds(
        tmp_path):
    """The same source as a dataset of the shard itself (".") and behind a source that is
    itself a virtual dataset, whose mapping HDF5 follows in turn."""
    own = tmp_path / "own"
    own.mkdir()
    shard = own / "shard_0000.h5"
    with h5py.File(shard, "w", libver="latest") as f:
        _newer_dataset(f, "y", A, "gzip")
    reason = _unopenable_reason(shard, "y")
    layout = h5py.VirtualLayout(shape=A.shape, dtype="<f4")
    layout[:] = h5py.VirtualSource(".", "y", shape=A.shape)
    with h5py.File(shard, "a", libver=("earliest", "v110")) as f:
        f.create_virtual_dataset("v", layout, fillvalue=-7)
    with h5py.File(shard) as f:
        np.testing.assert_array_equal(f["v"][()], A)
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(own, dataset="v")
    assert (f"{shard}: dataset '/v' is a virtual dataset whose source /y is refused: it is not "
            f"a readable dataset: {reason}") in str(e.value), str(e.value)

    with h5py.File(tmp_path / "src.h5", "w", libver="latest") as f:
        _newer_dataset(f, "y", A, "gzip")
    with h5py.File(tmp_path / "mid.h5", "w", libver=("earliest", "v110")) as f:
        layout = h5py.VirtualLayout(shape=A.shape, dtype="<f4")
        layout[:] = h5py.VirtualSource("src.h5", "y", shape=A.shape)
        f.create_virtual_dataset("w", layout, fillvalue=-7)
    sub = tmp_path / "s"
    shard = _vds(sub, [("../mid.h5", "w", slice(None))])
    with h5py.File(shard) as f:
        np.testing.assert_array_equal(f["v"][()], A)
    msg = _refused(sub, f"{sub}/../src.h5:/y")  # as HDF5 finds it beside mid.h5
    assert f"it is not a readable dataset: {reason}" in msg, msg


def test_a_remote_shards_own_source_the_library_cannot_open_is_refused(request, tmp_path):
    """From object storage, a dataset of the shard's own file that HDF5 cannot open."""
    pytest.importorskip("moto", reason="moto[server] is installed by scripts/setup.sh")
    bucket = request.getfixturevalue("bucket")
    shard = tmp_path / "v.h5"
    with h5py.File(shard, "w", libver="latest") as f:
        _newer_dataset(f, "y", A, "gzip")
    reason = _unopenable_reason(shard, "y")
    _own_file_vds(shard, [("y", slice(None))])
    bucket.upload("v/v.h5", shard)
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(bucket.url("v/v.h5"), dataset="v", storage_options=bucket.options)
    msg = str(e.value)
    assert "v/v.h5" in msg, msg
    assert (": dataset '/v' is a virtual dataset whose source /y is refused: it is not a "
            f"readable dataset: {reason}") in msg, msg


def test_a_source_dataset_in_the_newest_format_that_the_library_reads_is_read(tmp_path):
    """No false alarm: unfiltered chunks in the newest format open, and read as h5py reads
    them."""
    with h5py.File(tmp_path / "src.h5", "w", libver="latest") as f:
        f.create_dataset("y", data=A, chunks=(50, 4))
    sub = tmp_path / "s"
    shard = _vds(sub, [("../src.h5", "y", slice(None))])
    with h5py.File(shard) as f:
        want = f["v"][()]
    np.testing.assert_array_equal(want, A)
    got = shardload.discover(sub).read()
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("content", [b"", b"not an HDF5 file\n" * 100], ids=["empty", "text"])
def test_a_source_file_that_is_there_but_no_hdf5_file_is_refused(tmp_path, content):
    """HDF5 1.10 took a source file it cannot open for a missing one and gave the fill value;
    h5py's read fails on it."""
    (tmp_path / "src.h5").write_bytes(content)
    sub = tmp_path / "s"
    shard = _vds(sub, [("../src.h5", "y", slice(None))])
    with pytest.raises(OSError, match="file signature not found"):
        with h5py.File(shard) as f:
            f["v"][()]
    msg = _refused(sub, f"{sub}/../src.h5:/y")
    assert "is refused: not a readable HDF5 file: HDF5: " in msg, msg
    assert "fill value" in msg, msg


def _names_file(path: pathlib.Path) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("y", data=A[0:50])
        f["dangling"] = h5py.SoftLink("/nothing")
        f["to_y"] = h5py.SoftLink("/y")
        f.create_group("g")


def test_a_missing_source_dataset_or_a_soft_link_to_nothing_reads_the_fill_value(tmp_path):
    """Missing is missing (HDF5 and h5py give the fill value): no such name, a soft link to
    nothing; while a soft link to a dataset reads it. Bit for bit as h5py reads them."""
    _names_file(tmp_path / "src.h5")
    sub = tmp_path / "s"
    shard = _vds(sub, [("../src.h5", "to_y", slice(0, 50)),
                       ("../src.h5", "dangling", slice(50, 100)),
                       ("../src.h5", "absent", slice(100, 150)),
                       ("../src.h5", "g/absent", slice(150, 200))])
    with h5py.File(shard) as f:
        want = f["v"][()]
    np.testing.assert_array_equal(want[:50], A[:50])
    assert (want[50:] == -7).all()
    got = shardload.discover(sub).read()
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("name", ["g", "nogroup/y", "y/z"])
def test_a_source_name_that_is_there_but_no_dataset_is_refused_as_h5py_refuses_it(tmp_path,
                                                                                  name):
    """A group, a name under a group that is not there, a name under a dataset: HDF5 1.10
    gave the fill value, h5py's read fails; refused at discovery."""
    _names_file(tmp_path / "src.h5")
    sub = tmp_path / "s"
    shard = _vds(sub, [("../src.h5", name, slice(None))])
    with pytest.raises(OSError):
        with h5py.File(shard) as f:
            f["v"][()]
    msg = _refused(sub, f"{sub}/../src.h5:/{name}")
    assert "is refused: it is not a readable dataset: HDF5: " in msg, msg


# ---- a source file that is a symbolic link whose target is gone: no missing source


@pytest.mark.parametrize("linked", ["the file", "its directory", "a printf-style block's file"])
def test_a_source_file_link_whose_target_is_gone_is_refused_not_read_as_fill(tmp_path, linked):
    """A virtual dataset's source file linked from a pool that was deleted (the file, or a
    directory on its name): HDF5 (and h5py, the oracle) read its rows as the fill value, as for
    a source never made, and so did shardload, every row, no error. Refused, at discovery and
    by every load, naming the source and the link (a layout discovered while the pool was there
    fails its read: the source is a file it snapshotted).
    A source that is not there at all still reads the fill value."""
    pool = tmp_path / "pool"
    (pool / "data").mkdir(parents=True)
    sub = tmp_path / "s"
    if linked == "a printf-style block's file":
        for b in range(2):
            with h5py.File(pool / "data" / f"src_{b}.h5", "w") as f:
                f.create_dataset("y", data=A[b * 125:(b + 1) * 125])
            os.symlink(pool / "data" / f"src_{b}.h5", tmp_path / f"src_{b}.h5")
        sub.mkdir()
        with h5py.File(sub / "shard_0000.h5", "w") as f:
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            vspace = h5py.h5s.create_simple((250, 4), (h5py.h5s.UNLIMITED, 4))
            vspace.select_hyperslab((0, 0), (h5py.h5s.UNLIMITED, 1), (125, 4), (125, 4))
            dcpl.set_virtual(vspace, b"../src_%b.h5", b"/y", h5py.h5s.create_simple((125, 4)))
            dcpl.set_fill_value(np.array(-7.0, dtype="f4"))
            h5py.h5d.create(f.id, b"v", h5py.h5t.IEEE_F32LE, vspace, dcpl=dcpl)
        source, link = f"{sub}/../src_1.h5", f"{sub}/../src_1.h5"
        gone = pool / "data" / "src_1.h5"
    else:
        with h5py.File(pool / "data" / "src.h5", "w") as f:
            f.create_dataset("y", data=A)
        if linked == "the file":
            os.symlink(pool / "data" / "src.h5", tmp_path / "src.h5")
            _vds(sub, [("../src.h5", "y", slice(None))])
            source, link = f"{sub}/../src.h5", f"{sub}/../src.h5"
        else:
            os.symlink(pool / "data", tmp_path / "data")
            _vds(sub, [("../data/src.h5", "y", slice(None))])
            source, link = f"{sub}/../data/src.h5", f"{sub}/../data"
        gone = pool
    shard = sub / "shard_0000.h5"
    with h5py.File(shard) as f:
        np.testing.assert_array_equal(f["v"][()], A)
    layout = shardload.discover(sub)
    np.testing.assert_array_equal(layout.read(), A)
    if gone.is_dir():
        shutil.rmtree(gone)
    else:
        gone.unlink()
    with h5py.File(shard) as f:
        want = f["v"][()]
    assert (want[125 if linked.startswith("a printf") else 0:] == -7).all()  # the oracle fills
    said = (f"{shard}: dataset '/v' is a virtual dataset whose source file {source} " +
            ("is" if link == source else f"lies under {link}, which is") +
            " a symbolic link whose target does not exist (HDF5 would read its rows as the "
            "fill value)")
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(sub)
    assert said in str(e.value), str(e.value)
    # A layout of before: the source is a file it snapshotted, which cannot be opened now.
    with pytest.raises(shardload.ShardReadError) as e:
        layout.read()
    assert source in str(e.value), str(e.value)
    with pytest.raises(shardload.LayoutError) as e:
        shardload.numpy.load(str(sub))
    assert said in str(e.value), str(e.value)
    # No link at all: a missing source, the fill value as h5py reads it.
    os.unlink(link)
    with h5py.File(shard) as f:
        want = f["v"][()]
    got = shardload.discover(sub).read()
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("other", ["the same virtual dataset", "its source as a shard"])
def test_two_threads_loading_a_virtual_dataset_and_its_source_read_as_h5py_does(
        tmp_path: pathlib.Path, other: str) -> None:
    """HDF5 keeps one open file per path and refuses to open it again with other file locking.
    The reader opens shards and checks a virtual dataset's sources with locks off; HDF5 1.10
    opens the sources itself with its default file access list, locks on: two threads loading
    at once were refused at discovery ('file locking flag values don't match') or read the
    source's rows as the fill value."""
    src = tmp_path / "src" / "shard_0000.h5"
    src.parent.mkdir()
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=A)
    shard = _vds(tmp_path / "vds", [(str(src), "x", slice(None))])
    with h5py.File(shard, "r") as f:
        want = f["v"][()]
    np.testing.assert_array_equal(want, A)
    dirs = [shard.parent, shard.parent if other.startswith("the same") else src.parent]
    loads = 200
    failures: list[str] = []
    done = [0, 0]

    def run(i: int) -> None:
        for _ in range(loads):
            try:
                got = shardload.numpy.load(str(dirs[i]), format="hdf5")
            except Exception as e:  # noqa: BLE001 (every failure is counted and shown)
                failures.append(f"{dirs[i]}: {type(e).__name__}: {e}")
                continue
            if got.dtype != want.dtype or got.tobytes() != want.tobytes():
                rows = int((got != want).any(axis=1).sum()) if got.shape == want.shape else -1
                failures.append(f"{dirs[i]}: {rows} rows differ from h5py's (-7: the fill value): "
                                f"{got[(got != want).any(axis=1)][:2] if rows > 0 else got.shape}")
            done[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, f"{len(failures)} of {2 * loads} loads failed, first: {failures[0]}"
    assert done == [loads, loads]
