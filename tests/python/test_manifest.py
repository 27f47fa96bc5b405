"""The manifest: shardload.index / verify / discover_once, discover's use of the manifest, and the
`shardload index` / `shardload verify` commands. numpy is the oracle for the data."""

from __future__ import annotations

import contextlib
import os
import pathlib
import pickle
import json
import re
import subprocess
import time

import numpy as np
import pytest

import shardload

MANIFEST = "shardload.manifest"


def write_shards(directory: pathlib.Path, rows: list[int], start: int = 0) -> np.ndarray:
    directory.mkdir(parents=True, exist_ok=True)
    parts = []
    base = start
    for i, n in enumerate(rows):
        a = (np.arange(n * 3, dtype=np.float32) + base).reshape(n, 3)
        np.save(directory / f"shard_{i:04d}.npy", a)
        parts.append(a)
        base += n * 3
    return np.concatenate(parts)


def probed(directory: pathlib.Path) -> shardload.Layout:
    """The layout from the files themselves (a list source never consults a manifest)."""
    paths = sorted(str(p) for p in directory.glob("shard_*.npy"))
    return shardload.discover(paths)


@pytest.fixture
def data(tmp_path: pathlib.Path) -> tuple[pathlib.Path, np.ndarray]:
    d = tmp_path / "d"
    return d, write_shards(d, [3, 0, 5, 7, 1, 4])


def test_round_trip_equals_discover(data):
    d, expected = data
    before = shardload.discover(d)
    assert before.manifest_status == "manifest: absent"
    assert before.manifest_state is shardload.ManifestState.ABSENT
    path = shardload.index(d)
    assert path == str(d / MANIFEST)
    after = shardload.discover(d)
    assert after.manifest_status.startswith("manifest: used")
    assert after.manifest_state is shardload.ManifestState.USED and after.manifest_state == "used"
    # A pickled layout keeps its state; one not consulting a manifest has none.
    assert pickle.loads(pickle.dumps(after)).manifest_state is shardload.ManifestState.USED
    assert shardload.discover(probed(d).paths).manifest_state is shardload.ManifestState.NONE
    assert after.encode() == before.encode()
    assert after.paths == before.paths and after.shard_rows == before.shard_rows
    np.testing.assert_array_equal(after.read(), expected)


@pytest.mark.parametrize("change", ["touch", "resize", "delete", "add"])
def test_stale_manifest_falls_back_and_says_why(data, change):
    d, _ = data
    shardload.index(d)
    target = d / "shard_0003.npy"
    if change == "touch":
        st = target.stat()
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))
    elif change == "resize":
        np.save(target, np.ones((2, 3), np.float32))
    elif change == "delete":
        for i in (3, 4, 5):  # keep the numbering without gaps
            (d / f"shard_{i:04d}.npy").unlink()
        target = d / "shard_0003.npy"
    else:
        target = d / "shard_0006.npy"
        np.save(target, np.ones((2, 3), np.float32))
    layout = shardload.discover(d)
    status = layout.manifest_status
    assert layout.manifest_state is shardload.ManifestState.STALE, status
    assert str(target) in status, status
    want = {"touch": "mtime", "resize": "size", "delete": "", "add": "is new"}[change]
    assert want in status, status
    assert layout.encode() == probed(d).encode()


def test_trust_manifest_needs_no_shard(data):
    d, _ = data
    shardload.index(d)
    want = shardload.discover(d).encode()
    for p in d.glob("shard_*.npy"):
        p.unlink()
    layout = shardload.discover(d, trust_manifest=True)
    assert layout.encode() == want
    assert layout.manifest_state is shardload.ManifestState.TRUSTED
    # Without trust the missing files are seen.
    with pytest.raises(shardload.LayoutError):
        shardload.discover(d)


def test_trust_manifest_argument_checked(data):
    d, _ = data
    with pytest.raises(TypeError, match="trust_manifest"):
        shardload.discover(d, trust_manifest="yes")


def test_load_uses_manifest(data, caplog):
    d, expected = data
    (d / "shard_0002.npy").touch()  # any state; index records it
    shardload.index(d)
    np.testing.assert_array_equal(np.asarray(shardload.load(d, trust_manifest=True)), expected)
    np.save(d / "shard_0000.npy", np.zeros((3, 3), np.float32))
    expected[:3] = 0
    with caplog.at_level("INFO", logger="shardload"):
        out = shardload.load(d)
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert any("manifest: stale because" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_damaged_manifest_is_an_error_naming_it(data, damage):
    d, _ = data
    path = pathlib.Path(shardload.index(d))
    raw = bytearray(path.read_bytes())
    if damage == "truncate":
        raw = raw[: len(raw) // 2]
    elif damage == "flip":
        raw[len(raw) // 2] ^= 0x10
    elif damage == "empty":
        raw = bytearray()
    else:
        raw = bytearray(b"\x93NUMPY" + bytes(100))
    path.write_bytes(bytes(raw))
    for trust in (False, True):
        with pytest.raises(shardload.LayoutError, match=str(path)):
            shardload.discover(d, trust_manifest=trust)


def test_fifo_manifest_is_an_error_not_a_hang(data):
    d, _ = data
    os.mkfifo(d / MANIFEST)
    with pytest.raises(shardload.LayoutError, match="not a regular file"):
        shardload.discover(d)


def test_a_manifest_link_whose_target_is_gone_is_an_error_not_absent(data, tmp_path):
    """The manifest linked from a pool that was deleted (a volume not mounted) is a manifest
    that cannot be read, not none: it was "manifest: absent" and the files probed, also with
    trust_manifest (here short of the shards deleted since indexing, which the trusted
    manifest's read would have named). Only no entry at all is no manifest."""
    d, expected = data
    path = pathlib.Path(shardload.index(d))
    pool = tmp_path / "pool"
    pool.mkdir()
    path.rename(pool / MANIFEST)
    path.symlink_to(pool / MANIFEST)
    assert shardload.discover(d).manifest_state is shardload.ManifestState.USED
    (pool / MANIFEST).unlink()
    (d / "shard_0005.npy").unlink()
    for trust in (False, True):
        with pytest.raises(shardload.LayoutError) as e:
            shardload.discover(d, trust_manifest=trust)
        assert (f"{path}: manifest: a symbolic link whose target does not exist; run shardload "
                "index again, or delete it") in str(e.value), str(e.value)
    path.unlink()
    layout = shardload.discover(d)
    assert layout.manifest_state is shardload.ManifestState.ABSENT
    np.testing.assert_array_equal(layout.read(), expected[:-4])


def test_index_is_atomic(data):
    d, _ = data
    (d / MANIFEST).mkdir()  # the rename cannot replace a directory
    with pytest.raises(shardload.Error, match=MANIFEST):
        shardload.index(d)
    assert sorted(p.name for p in d.iterdir() if p.name.startswith(".shardload")) == []
    (d / MANIFEST).rmdir()
    path = pathlib.Path(shardload.index(d, checksum="xxh3"))
    old = path.read_bytes()
    np.save(d / "shard_0001.npy", np.ones((0, 4), np.float32))  # another trailing shape
    with pytest.raises(shardload.LayoutError):
        shardload.index(d, checksum="xxh3")
    assert path.read_bytes() == old
    assert [p.name for p in d.iterdir() if p.name.startswith(".shardload")] == []


def test_index_arguments(data, tmp_path):
    d, _ = data
    with pytest.raises(ValueError, match="checksum"):
        shardload.index(d, checksum="md5")
    with pytest.raises(ValueError, match="crc32c"):
        shardload.index(d, checksum="crc32c")
    with pytest.raises(ValueError, match="not a directory"):
        shardload.index(d / "shard_0000.npy")


def test_other_pattern_or_options_do_not_use_it(tmp_path):
    d = tmp_path / "p"
    expected = write_shards(d, [2, 3])
    for i in range(2):
        os.rename(d / f"shard_{i:04d}.npy", d / f"part-{i}.npy")
    shardload.index(d, pattern="part-{}.npy")
    layout = shardload.discover(d, pattern="part-{}.npy")
    assert layout.manifest_status.startswith("manifest: used"), layout.manifest_status
    layout = shardload.discover(d)  # no pattern: the manifest's
    assert layout.manifest_status.startswith("manifest: used"), layout.manifest_status
    np.testing.assert_array_equal(layout.read(), expected)
    with pytest.raises(shardload.LayoutError, match="cannot be trusted"):
        shardload.discover(d, pattern="part-{:02d}.npy", trust_manifest=True)


@pytest.mark.parametrize("name", ["d[1]*?", b"non-utf8-\xff\xfe"])
def test_odd_directory_names(tmp_path, name):
    d = pathlib.Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), os.fsencode(name))))
    expected = write_shards(d, [2, 2])
    shardload.index(d, checksum="xxh3")
    layout = shardload.discover(d)
    assert layout.manifest_status.startswith("manifest: used")
    np.testing.assert_array_equal(layout.read(), expected)
    assert shardload.verify(d, on_host=True) == []


def corrupt(path: pathlib.Path, at: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0xFF
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("on_host", [False, True])
def test_verify_names_every_corrupted_file(tmp_path, on_host):
    d = tmp_path / "v"
    write_shards(d, [4] * 9)
    shardload.index(d, checksum="xxh3")
    assert shardload.verify(d, on_host=on_host) == []
    corrupt(d / "shard_0002.npy", 130)
    corrupt(d / "shard_0007.npy", 140)
    bad = shardload.verify(d, on_host=on_host, **({} if on_host else {"groups": 4}))
    assert [(m.shard, m.path) for m in bad] == [
        (2, str(d / "shard_0002.npy")), (7, str(d / "shard_0007.npy"))]
    assert all("expected, found" in m.what for m in bad)
    (d / "shard_0005.npy").unlink()
    bad = shardload.verify(d / MANIFEST, on_host=on_host)
    assert [m.shard for m in bad] == [2, 5, 7]
    assert "read" in bad[1].what or "open" in bad[1].what


@pytest.mark.parametrize("on_host", [False, True])
def test_verify_without_checksums_is_an_error(data, on_host):
    d, _ = data
    shardload.index(d)
    with pytest.raises(shardload.LayoutError, match="no checksums"):
        shardload.verify(d, on_host=on_host)


@pytest.mark.parametrize("on_host", [False, True])
def test_verify_names_a_shard_added_after_indexing(tmp_path, on_host):
    """A shard added after indexing has no checksum to fail, yet discovery of the directory
    calls the manifest stale for it and loads it: verify names it, whether given the directory
    or the manifest."""
    d = tmp_path / "v"
    write_shards(d, [4] * 3)
    shardload.index(d, checksum="xxh3")
    np.save(d / "shard_0003.npy", np.full((4, 3), 7, np.float32))
    assert shardload.discover(d).manifest_state is shardload.ManifestState.STALE
    for source in (d, d / MANIFEST):
        bad = shardload.verify(source, on_host=on_host)
        assert [(m.shard, m.path) for m in bad] == [(3, str(d / "shard_0003.npy"))], bad
        assert "not in the manifest" in bad[0].what and "3 shards" in bad[0].what, bad
    corrupt(d / "shard_0001.npy", 140)
    bad = shardload.verify(d, on_host=on_host)
    assert [m.shard for m in bad] == [1, 3] and "expected, found" in bad[0].what, bad
    # Indexed again, the directory and the manifest agree.
    shardload.index(d, checksum="xxh3")
    assert shardload.verify(d, on_host=on_host) == []


def write_linked_h5(d: pathlib.Path, kind: str) -> list[pathlib.Path]:
    """Two HDF5 shards whose data lies in a linked file inside `d`: external storage or a
    virtual dataset's source file. Returns the linked files."""
    h5py = pytest.importorskip("h5py")
    d.mkdir()
    linked = []
    for i in range(2):
        a = np.arange(12, dtype="<i4").reshape(6, 2) + 100 * i
        if kind == "external":
            ext = d / f"ext{i}.extern"
            a.tofile(ext)
            with h5py.File(d / f"shard_{i:04d}.h5", "w") as f:
                f.create_dataset("x", shape=a.shape, dtype=a.dtype,
                                 external=[(str(ext), 0, a.nbytes)])
        else:
            ext = d / f"src{i}.h5src"
            with h5py.File(ext, "w") as f:
                f.create_dataset("s", data=a)
            lay = h5py.VirtualLayout(shape=a.shape, dtype=a.dtype)
            lay[...] = h5py.VirtualSource(ext.name, "s", shape=a.shape)
            with h5py.File(d / f"shard_{i:04d}.h5", "w") as f:
                f.create_virtual_dataset("x", lay)
        linked.append(ext)
    return linked


def change_linked(path: pathlib.Path, kind: str, how: str) -> None:
    """Row 1 of the linked file becomes -7: in place with its size and mtime kept, or in an
    edited copy renamed over it."""
    import shutil

    import h5py

    st = path.stat()
    target = path if how == "in_place" else path.with_name(path.name + ".tmp")
    if target != path:
        shutil.copy(path, target)
    if kind == "external":
        with open(target, "r+b") as f:
            f.seek(8)
            f.write(np.int32(-7).tobytes())
    else:
        with h5py.File(target, "r+") as f:
            f["s"][1, 0] = -7
    if target == path:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:
        os.rename(target, path)


@pytest.mark.parametrize("on_host", [False, True])
@pytest.mark.parametrize("kind", ["external", "vds"])
@pytest.mark.parametrize("how", ["in_place", "copy"])
def test_verify_names_a_linked_file_changed_after_indexing(tmp_path: pathlib.Path, on_host: bool,
                                                           kind: str, how: str) -> None:
    """An HDF5 shard's external storage or virtual-dataset source file is covered by its
    snapshot, not a checksum: changed after indexing (the shard file itself untouched), the
    data discovery loads differs from what was indexed, and verify names the linked file."""
    import shardload.numpy as snp

    d = tmp_path / "h"
    linked = write_linked_h5(d, kind)
    shardload.index(d, checksum="xxh3")
    indexed = snp.load(d)
    assert shardload.verify(d, on_host=on_host) == []
    change_linked(linked[1], kind, how)
    layout = shardload.discover(d)
    assert layout.manifest_state is shardload.ManifestState.STALE
    assert str(linked[1]) in layout.manifest_status
    assert snp.load(d)[7, 0] == -7 and indexed[7, 0] == 102  # numpy's oracle: the data changed
    for source in (d, d / MANIFEST):
        bad = shardload.verify(source, on_host=on_host)
        assert [(m.shard, m.path) for m in bad] == [(1, str(linked[1]))], bad
        assert bad[0].what.startswith(f"linked file of {d}/shard_0001.h5: changed after "
                                      "indexing ("), bad
        assert "its bytes are not verified" in bad[0].what, bad
    # Indexed again, the manifest holds the linked file as it is.
    shardload.index(d, checksum="xxh3")
    assert shardload.verify(d, on_host=on_host) == []


@pytest.mark.parametrize("rewrite", [{"dtype": "<f4"}, {"dtype": ">i4"}, {"header_bytes": 8}])
@pytest.mark.parametrize("on_host", [True, False])
def test_verify_names_a_raw_sidecar_rewritten_after_indexing(cli: pathlib.Path,
                                                             tmp_path: pathlib.Path,
                                                             on_host: bool, rewrite: dict) -> None:
    """A raw directory's shardload.json rewritten after indexing (another dtype, byte order or
    header) leaves every shard's bytes and checksum as they were, yet discovery calls the
    manifest stale and reads the same bytes as other values; verify said "every checksum
    matches" (hostile pass 30, A3's rest). It names the staleness discovery finds, and the
    CLI exits 1."""
    import shardload.numpy as snp

    d = tmp_path / "r"
    d.mkdir()
    for i in range(2):
        (d / f"shard_{i:04d}.bin").write_bytes(np.arange(8 * i, 8 * i + 8, dtype="<i4").tobytes())
    sidecar = {"dtype": "<i4", "shape": [2]}
    (d / "shardload.json").write_text(json.dumps(sidecar))
    shardload.index(d, checksum="xxh3")
    assert shardload.verify(d, on_host=on_host) == []
    (d / "shardload.json").write_text(json.dumps({**sidecar, **rewrite}))
    assert shardload.discover(d).manifest_state is shardload.ManifestState.STALE
    bad = shardload.verify(d, on_host=on_host)
    assert [m.path for m in bad] == [str(d / MANIFEST)], bad
    assert bad[0].what.startswith("every shard matches its checksum, but discovery calls this "
                                  "manifest stale: "), bad
    assert f"the directory's sidecar {d / 'shardload.json'} was written or changed" in bad[0].what
    r = run(cli, "verify", d)
    assert r.returncode == 1 and "discovery calls this manifest stale" in r.stderr, r.stderr
    shardload.index(d, checksum="xxh3")
    assert shardload.verify(d, on_host=on_host) == []
    np.testing.assert_array_equal(snp.load(d, trust_manifest=True), snp.load(d))


@pytest.mark.parametrize("case", ["sidecar_removed", "sidecar_added"])
@pytest.mark.parametrize("on_host", [True, False])
def test_verify_spells_the_options_a_stale_reason_names_and_says_what_changed(
        cli: pathlib.Path, tmp_path: pathlib.Path, on_host: bool, case: str) -> None:
    """verify passed discovery's stale reason through with the core's option marks (0x1f:
    "pass \\x1fdtype\\x1f", "differs from \\x1fdtype=\\x1ffloat32"), said discovery "reads
    the files instead" where it fails, and the CLI counted "1 of 2 shards differ" where only
    the sidecar changed (hostile pass 31, A2). The reason is spelled as discovery spells it in
    each front end (dtype= in Python, --dtype on the command line), says that discovery fails,
    names the sidecar, and the CLI's summary says no shard differs."""
    d = tmp_path / "r"
    d.mkdir()
    for i in range(2):
        np.arange(12, dtype=np.float32).reshape(4, 3).tofile(d / f"shard_{i:04d}.bin")
    if case == "sidecar_removed":
        (d / "shard_meta.json").write_text(json.dumps(
            {"dtype": "float32", "trailing_shape": [3], "rows_per_shard": 4}))
        r = run(cli, "index", "--checksum", "xxh3", d)
        assert r.returncode == 0, r.stderr
        (d / "shard_meta.json").unlink()
        python_says, cli_says = "pass dtype= or write", "pass --dtype or write"
        found = "sidecar (shardload.json or shard_meta.json) was removed since indexing"
    else:
        r = run(cli, "index", "--checksum", "xxh3", "--dtype", "float32", "--trailing-shape", "3",
                d)
        assert r.returncode == 0, r.stderr
        (d / "shardload.json").write_text(json.dumps({"dtype": "float64", "shape": [3]}))
        python_says, cli_says = "differs from dtype=float32", "differs from --dtype=float32"
        found = f"sidecar {d / 'shardload.json'} was written or changed since indexing"
    # The oracle: discovery's own message, with the options the manifest was indexed with.
    indexed = {} if case == "sidecar_removed" else {"dtype": "float32", "trailing_shape": (3,)}
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(d, **indexed)
    assert python_says in str(e.value), e.value
    bad = shardload.verify(d, on_host=on_host)
    assert [(m.shard, m.path) for m in bad] == [(0, str(d / MANIFEST))], bad
    what = bad[0].what
    assert "\x1f" not in what and python_says in what, what
    assert what.startswith("every shard matches its checksum, but discovery calls this manifest "
                           "stale and fails probing the files in its place: "), what
    assert found in what and "reads the files" not in what, what
    r = run(cli, "verify", d)
    assert r.returncode == 1, r.stderr
    assert "x1f" not in r.stderr and cli_says in r.stderr and found in r.stderr, r.stderr
    assert "shards differ" not in r.stderr, r.stderr
    assert (f"error: every one of the 2 shards matches its checksum, but discovery calls "
            f"{d / MANIFEST} stale") in r.stderr, r.stderr


@pytest.mark.parametrize("changed", [True, False])
@pytest.mark.parametrize("on_host", [True, False])
@pytest.mark.parametrize("place", ["s3", "http"])
def test_verify_of_a_remote_raw_directory_names_a_sidecar_rewritten_after_indexing(
        cli: pathlib.Path, tmp_path: pathlib.Path, server: str, place: str, on_host: bool,
        changed: bool) -> None:
    """An s3:// or http:// raw directory whose shardload.json was rewritten after indexing
    (another dtype: the same bytes read as other values): discovery calls the manifest stale
    and loads int32, yet verify passed (`[]`, exit 0, "every checksum matches"); its check
    of what discovery would say ran for local directories only (hostile pass 32, A1). It names
    it as for a local directory. Over http the objects' snapshots never match the indexed
    copy's (discovery always probes there): with the sidecar as indexed, verify passes."""
    import closing_server
    import s3_server
    import shardload.numpy as snp
    from test_http import Handler, Store

    a = np.arange(12, dtype="<f4").reshape(6, 2)
    files = {"shard_0000.bin": a[:3].tobytes(), "shard_0001.bin": a[3:].tobytes(),
             "shardload.json": json.dumps({"dtype": "<f4", "shape": [2]}).encode()}
    rewritten = json.dumps({"dtype": "<i4", "shape": [2]}).encode()  # same bytes, other values
    with contextlib.ExitStack() as stack:
        if place == "s3":
            b = s3_server.Bucket(server)
            for name, data in files.items():
                b.put(f"d/{name}", data)
            query = "?" + "&".join(f"{k}={v}" for k, v in b.options.items())
            url, shown = f"s3://{b.name}/d/{query}", f"s3://{b.name}/d/"
            shardload.index(url, checksum="xxh3")
            if changed:
                b.put("d/shardload.json", rewritten)
            flags = [f"--storage-option={k}={v}" for k, v in b.options.items()]
        else:
            # A web server serving a copy of a directory indexed locally, as docs/manifest.md
            # describes: its ETags are not the local files' snapshots.
            d = tmp_path / "d"
            d.mkdir()
            for name, data in files.items():
                (d / name).write_bytes(data)
            shardload.index(d, checksum="xxh3")
            store = Store()
            for f in d.iterdir():
                store.objects[f"/d/{f.name}"] = f.read_bytes()
            if changed:
                store.objects["/d/shardload.json"] = rewritten
            handler = type("BoundHandler", (Handler,), {"store": store})
            web = stack.enter_context(closing_server.serving(handler, poll_interval=0.05))
            url = shown = f"http://{closing_server.address(web)}/d/"
            flags = []
        # The oracle: what discovery and a load make of the directory now.
        layout = shardload.discover(url)
        assert layout.manifest_state is shardload.ManifestState.STALE or \
            (place == "s3" and not changed), layout.manifest_state
        assert layout.dtype == (np.int32 if changed else np.float32), layout.dtype
        np.testing.assert_array_equal(snp.load(url), a.view("<i4") if changed else a)
        bad = shardload.verify(url, on_host=on_host)
        r = run(cli, "verify", shown, *flags)
        if not changed:
            assert bad == [], bad
            assert r.returncode == 0 and "every checksum matches" in r.stdout, r.stderr
            return
        assert [m.shard for m in bad] == [0] and bad[0].path.startswith(shown + MANIFEST), bad
        what = bad[0].what
        assert what.startswith("every shard matches its checksum, but discovery calls this "
                               "manifest stale: "), what
        assert "the file says dtype int32, the manifest float32" in what, what
        assert (f"no shard changed: the directory's sidecar {shown}shardload.json was written "
                "or changed since indexing") in what, what
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert "every checksum matches" not in r.stdout, r.stdout
        assert "error: every one of the 2 shards matches its checksum, but discovery calls " \
            f"{shown}{MANIFEST}" in r.stderr, r.stderr


def test_verify_over_http_hides_the_credentials_of_the_url_in_discoverys_reason(
        tmp_path: pathlib.Path) -> None:
    """verify's stale-sidecar message over http(s) quoted discovery's reason with a shard's
    URL as the engine holds it: `?credentials=<32 hex>`, where every other line (the
    manifest's path, discovery's manifest_status) shows `credentials=***` (hostile pass 32,
    A4). The password and token of the URL are shown in no form."""
    import re

    from test_http import serving

    d = tmp_path / "d"
    d.mkdir()
    a = np.arange(12, dtype="<f4").reshape(6, 2)
    a[:3].tofile(d / "shard_0000.bin")
    a[3:].tofile(d / "shard_0001.bin")
    (d / "shardload.json").write_text(json.dumps({"dtype": "<f4", "shape": [2]}))
    shardload.index(d, checksum="xxh3")
    with serving() as (store, base):
        for f in d.iterdir():
            store.put(f"/c/{f.name}", f.read_bytes())
        store.put("/c/shardload.json", json.dumps({"dtype": "<i4", "shape": [2]}).encode())
        host = base.split("://")[1]
        url = f"http://user:S3cr3tPassw0rd@{host}/c/?token=T0k3nValue123456"
        # The oracle: discovery's own status shows the handle hidden.
        layout = shardload.discover(url)
        assert "credentials=***" in layout.manifest_status, layout.manifest_status
        bad = shardload.verify(url, on_host=True)
        assert len(bad) == 1 and "the file says dtype int32" in bad[0].what, bad
        # `path` is the URL the process can open again (its repr hides the handle); `what`
        # is text for a person.
        shown = repr(bad) + bad[0].what
        assert "shard_0000.bin?credentials=***: the file says" in bad[0].what, bad[0].what
        assert not re.findall(r"credentials=[0-9a-f]{16,}", shown), shown
        assert "S3cr3tPassw0rd" not in shown and "T0k3nValue123456" not in shown, shown


@pytest.mark.parametrize("how", [["-r"], ["-a"]])
@pytest.mark.parametrize("kind", ["npy", "raw"])
def test_verify_of_a_copied_directory_passes_where_discovery_uses_its_manifest(
        cli: pathlib.Path, tmp_path: pathlib.Path, kind: str, how: list[str]) -> None:
    """A copy of an indexed directory (cp -r, cp -a: new inodes, same sizes and headers) is
    used by discovery (docs/manifest.md, "A copied directory"), yet verify failed, exit 1,
    "discovery calls this manifest stale: ... replaced by another file" (hostile pass 32, A5):
    its check did not take a copy's snapshots as discovery does. With the copy's sidecar
    rewritten (raw), verify still names it."""
    d = tmp_path / "orig"
    d.mkdir()
    for i in range(2):
        part = np.arange(10.0).reshape(5, 2) + i
        if kind == "npy":
            np.save(d / f"shard_{i:04d}.npy", part)
        else:
            part.tofile(d / f"shard_{i:04d}.bin")
    if kind == "raw":
        (d / "shardload.json").write_text(json.dumps({"dtype": "<f8", "shape": [2]}))
    shardload.index(d, checksum="xxh3")
    copy = tmp_path / "copy"
    subprocess.run(["cp", *how, str(d), str(copy)], check=True)
    # The oracle: discovery of the copy uses the manifest.
    assert shardload.discover(copy).manifest_state is shardload.ManifestState.USED
    for on_host in (True, False):
        assert shardload.verify(copy, on_host=on_host) == []
    r = run(cli, "verify", copy)
    assert r.returncode == 0 and "every checksum matches" in r.stdout, (r.stdout, r.stderr)
    if kind == "raw":
        (copy / "shardload.json").write_text(json.dumps({"dtype": "<i8", "shape": [2]}))
        assert shardload.discover(copy).manifest_state is shardload.ManifestState.STALE
        bad = shardload.verify(copy, on_host=True)
        assert [m.path for m in bad] == [str(copy / MANIFEST)], bad
        assert "the file says dtype int64, the manifest float64" in bad[0].what, bad
        assert run(cli, "verify", copy).returncode == 1


def test_index_refuses_a_listing_older_than_the_directory(tmp_path):
    """An index whose listing saw a dataset that an overwrite then replaced (4 shards where the
    listing saw 3, the probes by path reaching the new files) must not write its manifest over
    the save's: a trusted load would return 3 of the 4 shards without an error. The write the
    index makes after its probe, given that layout, refuses naming the directory; the save's
    manifest stays, and trusted and plain loads give the new dataset (numpy the oracle)."""
    import shardload.numpy as snp
    from shardload import _core

    d = tmp_path / "D"
    new = np.arange(160, dtype=np.float64).reshape(80, 2)
    snp.save(np.full((60, 2), 1.0), d, num_shards=3)
    snp.save(new, d, num_shards=4, overwrite=True)
    saved = (d / MANIFEST).read_bytes()
    listed_before = shardload.discover([str(d / f"shard_{i:04d}.npy") for i in range(3)])
    with pytest.raises(shardload.LayoutError, match=re.escape(
            f"{d}: changed while indexing: {d}/shard_0003.npy is not in the listing indexed")):
        _core.write_manifest(listed_before, str(d), "none")
    assert (d / MANIFEST).read_bytes() == saved
    assert not [p for p in os.listdir(d) if p.startswith(".shardload.manifest")]
    np.testing.assert_array_equal(snp.load(d, trust_manifest=True), new)
    np.testing.assert_array_equal(snp.load(d), new)
    # The same count of shards, other files (the probes saw the old ones): refused as well.
    old = probed(d)
    snp.save(new + 1, d, num_shards=4, overwrite=True)
    with pytest.raises(shardload.LayoutError, match="changed while indexing.*shard_0000.npy"):
        _core.write_manifest(old, str(d), "none")
    np.testing.assert_array_equal(snp.load(d, trust_manifest=True), new + 1)


def test_index_of_a_prefix_refuses_a_listing_older_than_the_prefix(server, bucket, monkeypatch):
    """B8 in object storage: the index's LIST answered from the old prefix (3 shards) and held
    while a save overwrites it with 4; the index then probes the 3 keys listed, now the new
    objects. It must not upload the manifest of that listing over the save's (a trusted load
    returned 60 of the 80 rows): the prefix is listed again before the upload and it refuses."""
    import threading

    import s3_fault_proxy as fp
    import shardload.numpy as snp

    held = threading.Event()
    left = [1]
    serve = fp._Handler._serve

    def hold_the_first_listing(self) -> None:
        if self.command == "GET" and "list-type=2" in self.path and left[0] > 0:
            left[0] -= 1
            status, reason, headers, data = self._upstream(self._body())  # the old listing
            held.set()
            time.sleep(3)
            self.send_response_only(status, reason)
            for k, v in headers:
                if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        serve(self)

    monkeypatch.setattr(fp._Handler, "_serve", hold_the_first_listing)
    url = bucket.url("d/")
    new = np.full((80, 2), 2.0)
    snp.save(np.full((60, 2), 1.0), url, num_shards=3, storage_options=bucket.options)
    proxy = fp.FaultProxy(server)
    outcome: list[BaseException | str] = []

    def run_index() -> None:
        try:
            shardload.index(url, storage_options={**bucket.options,
                                                  "endpoint_override": proxy.endpoint})
            outcome.append("written")
        except shardload.Error as e:
            outcome.append(e)

    try:
        t = threading.Thread(target=run_index)
        t.start()
        assert held.wait(60)
        snp.save(new, url, num_shards=4, overwrite=True, storage_options=bucket.options)
        t.join(120)
    finally:
        proxy.close()
    assert len(outcome) == 1 and isinstance(outcome[0], shardload.LayoutError), outcome
    assert "changed while indexing" in str(outcome[0]) and "shard_0003.npy" in str(outcome[0])
    for trust in (False, True):
        got = snp.load(url, storage_options=bucket.options, trust_manifest=trust)
        np.testing.assert_array_equal(got, new)


@pytest.mark.parametrize("rows", [[20, 20, 20], [4, 16, 40]], ids=["same-sizes", "other-sizes"])
def test_index_of_a_prefix_refuses_an_overwrite_that_keeps_the_shard_names(server, bucket, rows):
    """An overwrite of the prefix with as many shards (the same names, other objects) while
    the index probes it: the index's listing before the upload compared names only, and it
    uploaded a manifest of shard_0000's old snapshot and the new ones of the others over the
    overwrite's own (every trusted load then failed, "changed since discovery", until indexed
    again). Each shard's size and ETag is compared too: it refuses, naming the shard, and the
    overwrite's manifest stays."""
    import s3_fault_proxy as fp
    import shardload.numpy as snp

    url = bucket.url("d/")
    snp.save(np.full((60, 2), 1.0), url, num_shards=3, storage_options=bucket.options)
    new = np.arange(2.0 * sum(rows)).reshape(-1, 2)
    saved = []

    def overwrite() -> None:  # once the probe of shard_0001 is answered, before its answer
        snp.save(new, url, shard_rows=rows, overwrite=True, storage_options=bucket.options)
        saved.append(True)

    with fp.FaultProxy(server) as proxy:
        rule = proxy.add(fp.Rule(None, path="/d/shard_0001.npy", action="held-answer",
                                 count=1, after=overwrite))
        with pytest.raises(shardload.LayoutError) as e:
            shardload.index(url, storage_options={**bucket.options,
                                                  "endpoint_override": proxy.endpoint})
    assert rule.fired == 1 and saved == [True]
    msg = str(e.value)
    assert "changed while indexing" in msg and "the manifest was not written" in msg, msg
    # The lowest shard whose probe saw the old object: shard_0000's, or the held shard_0001's.
    assert re.search(rf"s3://{bucket.name}/d/shard_000[01]\.npy[?][^:]*: .*ETag", msg), msg
    for trust in (False, True):
        got = snp.load(url, storage_options=bucket.options, trust_manifest=trust)
        np.testing.assert_array_equal(got, new)


def test_discover_once_equals_discover(data):
    d, _ = data
    direct = shardload.discover(d)
    once = shardload.discover_once(d)
    assert once.encode() == direct.encode()
    assert once.manifest_status == "manifest: absent"
    assert once.manifest_state is shardload.ManifestState.ABSENT
    shardload.index(d)
    once = shardload.discover_once(d, trust_manifest=True)
    assert once.encode() == direct.encode()
    assert once.manifest_state is shardload.ManifestState.TRUSTED
    with pytest.raises(shardload.LayoutError, match="missing"):
        shardload.discover_once(d / "missing")


def test_a_manifest_written_once_for_the_job_equals_the_one_written_here(data):
    """The one-point task index() uses on several ranks, run in this process: the same
    manifest as _core.write_manifest's, and its errors the same."""
    from shardload import _core, _legate

    d, expected = data
    layout = shardload.discover(d)
    here = pathlib.Path(_core.write_manifest(layout, str(d), "xxh3"))
    want = here.read_bytes()
    here.unlink()
    shardload._legate_start._start_runtime()
    once = _legate.write_manifest_once(layout, os.fsencode(d), "xxh3")
    assert pathlib.Path(once) == here and here.read_bytes() == want
    assert shardload.discover(d).manifest_state is shardload.ManifestState.USED
    np.testing.assert_array_equal(np.asarray(shardload.load(d)), expected)
    gone = d / "gone"
    errors = []
    for write in (lambda: _core.write_manifest(layout, str(gone), "xxh3"),
                  lambda: _legate.write_manifest_once(layout, os.fsencode(gone), "xxh3")):
        with pytest.raises((shardload.LayoutError, ValueError)) as e:
            write()
        errors.append((type(e.value), str(e.value)))
    assert errors[0] == errors[1] and "not inside" in errors[0][1], errors
    with pytest.raises(ValueError, match="crc32c"):
        _legate.write_manifest_once(layout, os.fsencode(d), "crc32c")


def run(cli, *args):
    return subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def test_cli_index_verify(cli, tmp_path):
    d = tmp_path / "c"
    write_shards(d, [5] * 6)
    r = run(cli, "index", d, "--checksum", "xxh3")
    assert r.returncode == 0, r.stderr
    assert "6 shards" in r.stdout
    r = run(cli, "inspect", d)
    assert "manifest: used" in r.stdout
    r = run(cli, "inspect", d, "--trust-manifest")
    assert "trusted" in r.stdout
    r = run(cli, "verify", d)
    assert r.returncode == 0, r.stderr
    corrupt(d / "shard_0001.npy", 150)
    corrupt(d / "shard_0004.npy", 150)
    r = run(cli, "verify", d, "--groups", "3")
    assert r.returncode == 1
    for i in (1, 4):
        assert f"{d}/shard_{i:04d}.npy: xxh3 " in r.stderr, r.stderr
    assert "2 of 6 shards differ" in r.stderr
    r = run(cli, "index", d, "--checksum", "md5")
    assert r.returncode == 2 and "--checksum" in r.stderr
    r = run(cli, "index", d / "shard_0000.npy")
    assert r.returncode == 1 and "directory" in r.stderr


def test_cli_verify_names_a_shard_added_after_indexing(cli, tmp_path):
    d = tmp_path / "c"
    write_shards(d, [3] * 3)
    assert run(cli, "index", d, "--checksum", "xxh3").returncode == 0
    np.save(d / "shard_0003.npy", np.full((4, 3), 7, np.float32))
    r = run(cli, "verify", d)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"{d}/shard_0003.npy: not in the manifest: added after indexing" in r.stderr, r.stderr
    assert ("0 of 3 shards differ from " + str(d / MANIFEST) +
            ", and 1 shard of the directory is not in it") in r.stderr, r.stderr
    assert "every checksum matches" not in r.stdout


def test_cli_verify_names_a_linked_file_changed_after_indexing(cli: pathlib.Path,
                                                               tmp_path: pathlib.Path) -> None:
    d = tmp_path / "h"
    linked = write_linked_h5(d, "vds")
    assert run(cli, "index", d, "--checksum", "xxh3").returncode == 0
    change_linked(linked[0], "vds", "in_place")
    r = run(cli, "verify", d)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert (f"{linked[0]}: linked file of {d}/shard_0000.h5: changed after indexing ("
            in r.stderr), r.stderr
    assert f"1 of 2 shards differ from {d / MANIFEST}" in r.stderr, r.stderr
    assert "every checksum matches" not in r.stdout


def test_discover_once_with_format_options(tmp_path):
    d = tmp_path / "raw"
    d.mkdir()
    data = np.arange(7 * 4, dtype=">i2").reshape(7, 4)
    for i, (lo, hi) in enumerate([(0, 3), (3, 7)]):
        (d / f"shard_{i:04d}.bin").write_bytes(b"HDR!" + data[lo:hi].tobytes())
    opts = dict(format="raw", dtype=">i2", trailing_shape=(4,), header_bytes=4)
    direct = shardload.discover(d, **opts)
    once = shardload.discover_once(d, **opts)
    assert once.encode() == direct.encode()
    np.testing.assert_array_equal(np.asarray(shardload.load(once)), data)
    shardload.index(d, **opts)
    once = shardload.discover_once(d, trust_manifest=True, **opts)
    assert once.encode() == direct.encode() and "trusted" in once.manifest_status
    with pytest.raises(TypeError, match="source"):
        shardload.discover_once(3)


def test_a_manifest_made_with_options_does_not_change_a_plain_load(tmp_path, cli):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    d = tmp_path / "pq"
    d.mkdir()
    parts = []
    for i, n in enumerate([5, 4]):
        a = np.arange(n, dtype=np.float64) + 10 * i
        b = [None if (i + r) % 3 == 0 else float(r) for r in range(n)]
        c = np.arange(n, dtype=np.float64) - 2
        pq.write_table(pa.table({"a": a, "b": b, "c": c}), d / f"shard_{i:04d}.parquet")
        parts.append(np.stack([a, c], axis=1).astype(np.float32))
    opts = dict(columns=["a", "c"], fill_value=0, astype="float32")
    shardload.index(d, **opts)
    # The oracle: the same plain request of a list source, which never reads a manifest.
    files = shardload.discover(sorted(str(p) for p in d.glob("shard_*.parquet")))
    assert files.shape == (9, 3) and files.dtype == np.float64

    plain = shardload.discover(d)
    assert plain.manifest_status.startswith(
        "manifest: not used: it was indexed with other format options (format parquet, dtype "
        "float32, columns [a, c], fill value 0) than asked (format parquet)"), \
        plain.manifest_status
    assert plain.manifest_state is shardload.ManifestState.OTHER_OPTIONS
    assert plain.encode() == files.encode()
    with pytest.raises(shardload.ShardReadError, match="column 'b': row 0 is null"):
        plain.read()
    with pytest.raises(shardload.ShardReadError, match="column 'b': row 0 is null"):
        shardload.load(d)
    with pytest.raises(shardload.ShardReadError, match="column 'b': row 0 is null"):
        list(shardload.batches(d, 4))
    once = shardload.discover_once(d)
    assert once.encode() == files.encode()
    assert once.manifest_status == plain.manifest_status
    assert once.manifest_state is shardload.ManifestState.OTHER_OPTIONS
    with pytest.raises(shardload.LayoutError, match="cannot be trusted for this request"):
        shardload.discover(d, trust_manifest=True)
    # Another cast than the manifest's is not the manifest's either.
    other = shardload.discover(d, **{**opts, "astype": "float64"})
    assert other.manifest_state is shardload.ManifestState.OTHER_OPTIONS
    assert other.dtype == np.float64

    # Asked with the options it was made with, the manifest is used.
    used = shardload.discover(d, **opts)
    assert used.manifest_state is shardload.ManifestState.USED, used.manifest_status
    np.testing.assert_array_equal(np.asarray(shardload.load(d, **opts)), np.concatenate(parts))

    r = run(cli, "inspect", d)
    assert r.returncode == 0, r.stderr
    assert "manifest: not used" in r.stdout and "float64" in r.stdout, r.stdout
    r = run(cli, "read", d, "--no-verify")
    assert r.returncode == 1 and re.search(r"column 'b': row \d+ is null", r.stderr), \
        r.stdout + r.stderr


def test_snapshot_check_of_many_shards_names_the_first_that_changed(tmp_path):
    """Enough Parquet files for the check's stats to run on several threads: the first shard
    that changed is named, whatever the timing, and every other change is seen as well."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    d = tmp_path / "many"
    d.mkdir()
    n = 1100  # past 1024: two threads
    for i in range(n):
        pq.write_table(pa.table({"a": np.full(2, i, dtype=np.int32)}), d / f"p_{i:04d}.parquet")
    shardload.index(d)
    assert shardload.discover(d).manifest_state is shardload.ManifestState.USED
    for i in (1050, 700, 901):
        st = os.stat(d / f"p_{i:04d}.parquet")
        os.utime(d / f"p_{i:04d}.parquet", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    for _ in range(3):
        layout = shardload.discover(d)
        assert layout.manifest_state is shardload.ManifestState.STALE
        assert f"{d}/p_0700.parquet: size" in layout.manifest_status, layout.manifest_status
    shardload.index(d)
    st = os.stat(d / "p_1099.parquet")
    os.utime(d / "p_1099.parquet", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    layout = shardload.discover(d)
    assert f"{d}/p_1099.parquet: size" in layout.manifest_status, layout.manifest_status


@pytest.mark.parametrize("where", [".", "./", "d", "./d", "d/", "./d/"])
def test_a_relatively_spelled_directory_uses_the_manifest_index_wrote(tmp_path, monkeypatch, cli,
                                                                       where):
    # The working directory (".", "./") and a directory named relative to it: index writes a
    # manifest that discovery of the same directory, under any of its spellings, then uses.
    d = tmp_path / "d"
    expected = write_shards(d, [3, 0, 5, 2])
    here = where.rstrip("/") == "."
    monkeypatch.chdir(d if here else tmp_path)
    assert os.path.samefile(shardload.index(where), d / MANIFEST)
    spellings = ([".", "./"] if here else ["d", "./d", "d/", "./d/"]) + [str(d), f"{d}/"]
    for spelling in spellings:
        layout = shardload.discover(spelling)
        assert layout.manifest_state is shardload.ManifestState.USED, (spelling,
                                                                        layout.manifest_status)
        np.testing.assert_array_equal(layout.read(), expected)
    os.unlink(d / MANIFEST)
    r = run(cli, "index", where)
    assert r.returncode == 0, r.stderr
    for spelling in spellings:
        r = run(cli, "inspect", spelling)
        assert r.returncode == 0 and "manifest: used" in r.stdout, (spelling, r.stdout, r.stderr)


# ---- a seventh hostile pass: a manifest whose checksum is right and whose rows lie ---------

def _manifest_with_rows(d: pathlib.Path, ext: str, rows: int, lie: int, **options) -> None:
    """Writes D's manifest, its container checksum valid, the first shard's rows changed from
    `rows` to `lie` (as a hand editor recomputing the checksum would write it)."""
    from shardload._layout import _decode_layout

    encoded = bytearray(shardload.discover(d, **options).encode())
    # The first shard's name past the paths' common prefix ("0.EXT", its varint length first),
    # then its rows as one varint byte.
    suffix = b"0." + ext.encode()
    at = encoded.find(bytes([len(suffix)]) + suffix) + 1 + len(suffix)
    assert at > len(suffix) and encoded[at] == rows
    encoded[at] = lie
    shardload._core.write_manifest(_decode_layout(bytes(encoded), ""), str(d), "none", "")


@pytest.mark.parametrize("lie", [80, 120])
@pytest.mark.parametrize("fmt", ["npy", "raw", "zarr", "hdf5-chunked", "parquet", "arrow"])
def test_a_manifest_whose_rows_lie_is_stale_or_fails_the_read_naming_the_shard(tmp_path, fmt,
                                                                               lie):
    # npy, raw and Zarr: the check reads each header and finds the lie; chunked HDF5, Parquet
    # and Arrow: the manifest is believed (docs/manifest.md), and the read compares the file.
    import h5py
    import pyarrow as pa
    import pyarrow.feather as feather
    import pyarrow.parquet as pq
    import zarr

    a = np.arange(200, dtype=np.float32).reshape(100, 2)
    ext = {"hdf5-chunked": "h5"}.get(fmt, {"raw": "bin"}.get(fmt, fmt))
    for i in range(2):
        p = tmp_path / f"shard_{i:04d}.{ext}"
        if fmt == "npy":
            np.save(p, a)
        elif fmt == "raw":
            a.tofile(p)
        elif fmt == "zarr":
            zarr.create_array(p, shape=a.shape, chunks=(10, 2), dtype=a.dtype, zarr_format=2)[:] = a
        elif fmt == "hdf5-chunked":
            with h5py.File(p, "w") as f:
                f.create_dataset("x", data=a, chunks=(10, 2), compression="gzip")
        elif fmt == "parquet":
            pq.write_table(pa.table({"a": a[:, 0], "b": a[:, 1]}), p, row_group_size=30)
        else:
            feather.write_feather(pa.table({"a": a[:, 0], "b": a[:, 1]}), p,
                                  compression="uncompressed", chunksize=30)
    options = {"dtype": "float32", "trailing_shape": (2,)} if fmt == "raw" else {}
    _manifest_with_rows(tmp_path, ext, 100, lie, **options)
    shard = tmp_path / f"shard_0000.{ext}"
    layout = shardload.discover(tmp_path, **options)
    if fmt in ("npy", "raw", "zarr"):
        assert layout.manifest_status.startswith(
            f"manifest: stale because {shard}: the file says rows 100, the manifest {lie}")
        np.testing.assert_array_equal(layout.read(), np.concatenate([a, a]))
    else:
        assert layout.manifest_status.startswith("manifest: used")
        assert layout.total_rows == 100 + lie
        # A ShardReadError naming the file, what the layout says and what the file holds, for
        # every format (Parquet and Arrow raised a plain ValueError, "the layout's per-shard
        # Arrow metadata is malformed").
        with pytest.raises(shardload.ShardReadError, match=re.escape(str(shard))) as e:
            layout.read()
        if fmt == "hdf5-chunked":
            assert f"shape differs from the layout's ({lie} rows" in str(e.value), e.value
        else:
            assert (f"rows differ from the layout's: its 4 row groups hold 100 rows, the layout "
                    f"says {lie}") in str(e.value), e.value


def test_index_failing_after_its_rename_keeps_the_old_manifest(tmp_path):
    """docs/cli.md: "index fails, the old manifest kept, where DIR changed while it was
    indexed". A change found after the rename (a shard added and removed in a loop, as a writer
    adding one does) took back the manifest written by deleting it, and the old one, which the
    rename had replaced, was gone with it. The old one is put back: after every failed index the
    directory holds the manifest it held before, byte for byte."""
    import threading

    d = tmp_path / "ds"
    d.mkdir()
    for i in range(3):
        np.save(d / f"shard_{i:04d}.npy", np.full((4, 2), i, "<i4"))
    extra = tmp_path / "extra.npy"
    np.save(extra, np.full((4, 2), 9, "<i4"))
    shardload.index(str(d))
    m = d / "shardload.manifest"
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            try:
                os.link(extra, d / "shard_0003.npy")
            except FileExistsError:
                pass
            try:
                os.remove(d / "shard_0003.npy")
            except FileNotFoundError:
                pass

    after_rename: list[str] = []
    th = threading.Thread(target=churn, daemon=True)
    th.start()
    try:
        t = time.monotonic()
        while time.monotonic() - t < 60 and len(after_rename) < 3:
            before = m.read_bytes()
            try:
                shardload.index(str(d))
            except shardload.Error as e:  # a shard gone during discovery is another error
                msg = str(e)
                if "the manifest written was removed" not in msg:
                    assert m.read_bytes() == before
                    continue
                after_rename.append(msg)
                assert m.exists() and m.read_bytes() == before, msg
                assert "the old manifest was put back" in msg, msg
    finally:
        stop.set()
        th.join()
    assert after_rename, "no index failed after its rename in 60 s"
    assert not [p.name for p in d.iterdir() if p.name.startswith(".shardload.manifest")]
