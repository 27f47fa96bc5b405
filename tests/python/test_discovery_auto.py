"""A directory named without format= or pattern= is recognised by what it holds: the
numbered files of one format (by extension, or by magic bytes where the extension is
missing or odd), numbered Zarr stores, or one Zarr store; when nothing fits, the error says
what the directory holds and what to pass. Host-side (discover, Layout.read): no Legate."""

from __future__ import annotations

import json
import pathlib
import re

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
import zarr

import shardload

ROWS = (5, 0, 7, 3)


def arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.standard_normal((r, 2)).astype(np.float32) for r in ROWS]


def write_one(kind: str, path: pathlib.Path, a: np.ndarray) -> None:
    if kind == "npy":
        with open(path, "wb") as f:
            np.save(f, a)
    elif kind == "raw":
        a.tofile(path)
    elif kind == "hdf5":
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=a)
    elif kind == "parquet":
        pq.write_table(pa.table({"a": a[:, 0], "b": a[:, 1]}), path)
    elif kind == "arrow":
        feather.write_feather(pa.table({"a": a[:, 0], "b": a[:, 1]}), str(path),
                              compression="uncompressed")
    elif kind in ("zarr2", "zarr3"):
        z = zarr.create_array(store=str(path), shape=a.shape, dtype=a.dtype,
                              chunks=(4, 2), zarr_format=2 if kind == "zarr2" else 3)
        z[:] = a
    else:
        raise AssertionError(kind)


def write_set(d: pathlib.Path, kind: str, name: str) -> np.ndarray:
    d.mkdir(parents=True, exist_ok=True)
    parts = arrays()
    for i, a in enumerate(parts):
        write_one(kind, d / name.format(i), a)
    if kind == "raw":
        (d / "shardload.json").write_text(json.dumps({"dtype": "<f4", "shape": [2]}))
    return np.concatenate(parts)


EXPECTED_FORMAT = {"npy": "npy", "raw": "raw", "hdf5": "hdf5", "parquet": "parquet",
                   "arrow": "arrow", "zarr2": "zarr", "zarr3": "zarr"}


@pytest.mark.parametrize("kind, name", [
    ("npy", "shard_{:04d}.npy"),
    ("raw", "shard_{:04d}.bin"),
    ("hdf5", "shard_{:04d}.h5"),
    ("hdf5", "shard_{:04d}.hdf5"),
    ("parquet", "shard_{:04d}.parquet"),
    ("parquet", "part-{}.parquet"),
    ("arrow", "shard_{:04d}.arrow"),
    ("arrow", "shard_{:04d}.feather"),
    ("zarr2", "shard_{:04d}.zarr"),
    ("zarr3", "shard_{:04d}.zarr"),
    # Numbered stores without the extension: their metadata tells.
    ("zarr2", "shard_{:04d}"),
    ("zarr3", "chunk{:03d}"),
])
def test_a_directory_of_numbered_shards_is_recognised(tmp_path: pathlib.Path, kind: str,
                                                      name: str) -> None:
    want = write_set(tmp_path / "d", kind, name)
    (tmp_path / "d" / "README.txt").write_text("not a shard")
    layout = shardload.discover(tmp_path / "d")
    assert layout.format == EXPECTED_FORMAT[kind]
    assert layout.shard_rows == list(ROWS)
    assert [pathlib.Path(p).name for p in layout.paths] == [name.format(i) for i in range(4)]
    np.testing.assert_array_equal(layout.read(), want)


@pytest.mark.parametrize("kind, name", [
    ("hdf5", "shard_{:04d}"),        # no extension
    ("hdf5", "shard_{:04d}.nc"),     # an extension of its own
    ("parquet", "part_{}.pqt"),
    ("arrow", "batch-{:02d}.ipc2"),
    ("npy", "x{}"),
])
def test_magic_bytes_tell_the_format_where_the_extension_does_not(
        tmp_path: pathlib.Path, kind: str, name: str) -> None:
    want = write_set(tmp_path / "d", kind, name)
    layout = shardload.discover(tmp_path / "d")
    assert layout.format == EXPECTED_FORMAT[kind]
    np.testing.assert_array_equal(layout.read(), want)
    # A glob or list of such files resolves its format the same way.
    glob = str(tmp_path / "d" / name.replace("{:04d}", "*").replace("{:02d}", "*")
               .replace("{}", "*"))
    np.testing.assert_array_equal(shardload.discover(glob).read(), want)


@pytest.mark.parametrize("kind", ["zarr2", "zarr3"])
def test_a_single_zarr_store_passed_as_a_string_is_that_store(tmp_path: pathlib.Path,
                                                              kind: str) -> None:
    a = np.arange(24, dtype=np.int16).reshape(12, 2)
    for store in (tmp_path / "one.zarr", tmp_path / "plain_name"):
        write_one(kind, store, a)
        layout = shardload.discover(str(store))
        assert layout.format == "zarr" and layout.num_shards == 1
        assert layout.paths == [str(store)]
        np.testing.assert_array_equal(layout.read(), a)
        # format="zarr" names the same store.
        np.testing.assert_array_equal(shardload.discover(store, format="zarr").read(), a)


def test_nothing_matches_lists_what_the_directory_holds(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    for i in range(10):
        write_one("hdf5", d / f"shard_{i:04d}.h5", np.zeros((2, 2)))
    (d / "notes.txt").write_text("x")
    (d / "meta.json").write_text("{}")
    # The format named, its default naming absent: what is there, and what to pass.
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(d, format="npy")
    msg = str(e.value)
    assert f"{d}/shard_{{:04d}}.npy: no files match the pattern" in msg, msg
    assert ("the directory holds 12 files: 10 *.h5 (shard_0000.h5 ... shard_0009.h5), 2 other"
            in msg), msg
    assert f"pass pattern='shard_{{:04d}}.h5' or a glob '{d}/*.h5'" in msg, msg
    # A named pattern that matches nothing says the same.
    with pytest.raises(shardload.LayoutError, match=re.escape("10 *.h5 (shard_0000.h5")):
        shardload.discover(d, pattern="part_{}.h5")


def test_no_known_format_lists_the_directory(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    for i in range(3):
        (d / f"rec_{i}.txt").write_text("not data")
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(d)
    msg = str(e.value)
    assert "no numbered shards of a known format" in msg, msg
    assert "holds 3 files: 3 other" in msg, msg
    assert f"pass pattern='rec_{{}}.txt' or a glob '{d}/*.txt'" in msg, msg
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(shardload.LayoutError, match="the directory is empty"):
        shardload.discover(empty)


def test_two_numbered_formats_are_ambiguous_and_both_are_named(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "d"
    write_set(d, "npy", "shard_{:04d}.npy")
    write_set(d, "hdf5", "shard_{:04d}.h5")
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(d)
    msg = str(e.value)
    assert "more than one kind" in msg, msg
    assert "shard_{:04d}.npy (4 files, npy)" in msg and "shard_{:04d}.h5 (4 files, hdf5)" in msg
    # Naming one is enough, as before.
    assert shardload.discover(d, format="hdf5").format == "hdf5"
    assert shardload.discover(d, pattern="shard_{:04d}.npy").format == "npy"


def test_the_default_naming_wins_among_groups_of_one_format(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "d"
    want = write_set(d, "npy", "shard_{:04d}.npy")
    np.save(d / "stats_1.npy", np.zeros(3))
    np.testing.assert_array_equal(shardload.discover(d).read(), want)
    # Two namings of one format and neither the default: ambiguous.
    e = tmp_path / "e"
    write_set(e, "npy", "a_{}.npy")
    write_set(e, "npy", "b_{}.npy")
    with pytest.raises(shardload.LayoutError, match=r"a_\{\}\.npy \(4 files, npy\) and b_"):
        shardload.discover(e)


def test_a_gap_in_recognised_numbering_is_still_an_error(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "d"
    write_set(d, "hdf5", "shard_{:04d}.h5")
    (d / "shard_0002.h5").unlink()
    with pytest.raises(shardload.LayoutError, match=r"gap in the numbering: 1 of 4 files missing "
                                                    r"\(shard_0002\.h5\)"):
        shardload.discover(d)


def test_the_cli_reads_a_directory_of_h5_shards(tmp_path: pathlib.Path, cli: pathlib.Path) -> None:
    import subprocess
    write_set(tmp_path / "d", "hdf5", "shard_{:04d}.h5")
    r = subprocess.run([str(cli), "inspect", str(tmp_path / "d")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "format:         hdf5" in r.stdout
    d = tmp_path / "bad"
    d.mkdir()
    (d / "x_1.txt").write_text("")
    r = subprocess.run([str(cli), "inspect", str(d)], capture_output=True, text=True)
    assert r.returncode != 0
    assert "pass --pattern='x_{}.txt' or a glob" in r.stderr, r.stderr


@pytest.mark.parametrize("kind, name, options", [
    ("npy", "shard_{:04d}.npy", {"format": "npy"}),
    ("hdf5", "shard_{:04d}.h5", {"format": "hdf5", "dataset": "x"}),
])
def test_a_named_file_format_does_not_look_for_store_metadata(
        tmp_path: pathlib.Path, kind: str, name: str, options: dict) -> None:
    # Issue 20: a named file format never takes the directory as a Zarr store, so discovery
    # must not look for one (a stat and two look-ups per call, on a network file system each a
    # round trip). The system calls are the only trace of it, so they are what is checked.
    import shutil
    import subprocess
    import sys
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed")
    d = tmp_path / "d"
    expected = write_set(d, kind, name)
    code = ("import sys, json, numpy as np, shardload\n"
            "l = shardload.discover(sys.argv[1], **json.loads(sys.argv[2]))\n"
            "print(l.shape[0])\n")
    log = tmp_path / "trace"
    r = subprocess.run([strace, "-f", "-qq", "-o", str(log), sys.executable, "-c", code, str(d),
                        json.dumps(options)], capture_output=True, text=True)
    if r.returncode != 0 and "ptrace" in r.stderr:
        pytest.skip("tracing is not permitted here: " + r.stderr.strip())
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(expected.shape[0])]
    calls = log.read_text(errors="replace").splitlines()
    assert any(str(d) in c for c in calls), "the trace shows no call on the directory"
    store = [c for c in calls if ".zarray" in c or "zarr.json" in c]
    assert store == []


@pytest.mark.parametrize("other", ["npy", "npz", "h5"])
def test_a_list_or_glob_of_two_formats_is_refused_naming_the_other_file(
        tmp_path: pathlib.Path, other: str) -> None:
    """The format told from a list's first file is not forced on a later file whose name says
    another: a .npy (.npz, .h5) after raw .bin shards is refused naming it, never read as raw
    rows (its header among them); format= named reads every file as that format."""
    a = np.arange(32, dtype="<f4").reshape(8, 4)
    a.tofile(tmp_path / "part_0.bin")
    late = tmp_path / f"part_1.{other}"
    if other == "npy":
        np.save(late, -a)
    elif other == "npz":
        np.savez(late, x=-a)
    else:
        with h5py.File(late, "w") as f:
            f["x"] = -a
    for source in ([str(tmp_path / "part_0.bin"), str(late)], str(tmp_path / "part_*")):
        with pytest.raises(shardload.LayoutError) as e:
            shardload.discover(source, dtype="float32", trailing_shape=(4,))
        assert f"{late}: a {'hdf5' if other == 'h5' else other} file by its name, among raw " \
               "shards" in str(e.value), str(e.value)
    # Named, the format is the user's for every file: the bytes are read as raw rows.
    layout = shardload.discover([str(tmp_path / "part_0.bin"), str(late)], format="raw",
                                dtype="float32", trailing_shape=(4,))
    assert layout.shape[0] == 8 + late.stat().st_size // 16


@pytest.mark.parametrize("name", ["shardload.json", "shard_meta.json", "_meta.json"])
def test_a_glob_over_a_raw_directory_never_takes_its_metadata_for_a_shard(
        tmp_path: pathlib.Path, name: str) -> None:
    """D/* over a raw directory matches its sidecar; where the sidecar's size is whole rows it
    was loaded as rows. It is refused naming it; D/*.bin loads the shards alone."""
    a = np.arange(64, dtype="<f4").reshape(16, 4)
    a[:8].tofile(tmp_path / "part_0.bin")
    a[8:].tofile(tmp_path / "part_1.bin")
    text = ('{"dtype": "float32", "trailing_shape": [4]}' if name == "shard_meta.json"
            else '{"dtype": "<f4", "shape": [4]}')
    (tmp_path / name).write_text(text + " " * (-len(text) % 16))  # whole rows of 16 bytes
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(str(tmp_path / "*"), format="raw", dtype="float32",
                           trailing_shape=(4,))
    assert f"{tmp_path / name}: the dataset's metadata file ({name}), not a shard" in str(
        e.value), str(e.value)
    got = shardload.discover(str(tmp_path / "*.bin"), format="raw", dtype="float32",
                             trailing_shape=(4,))
    np.testing.assert_array_equal(got.read(0, 16), a)


def numbered(d: pathlib.Path, names: list[str]) -> None:
    """One two-row .npy per name, each holding its file's position in `names`."""
    d.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        np.save(d / name, np.full((2, 2), i, dtype=np.int32))


FOUR = [f"shard_{i:04d}.npy" for i in range(3)]


@pytest.mark.parametrize("stray, other", [
    ("shard_00003.npy", "shard_{:05d}.npy (1 file, npy)"),  # a wider padding
    ("shard_3.npy", "shard_{}.npy (1 file, npy)"),  # unpadded, narrower than the padding
    ("shard_003.npy", "shard_{:03d}.npy (1 file, npy)"),  # a narrower padding
    ("shard_00002.npy", "shard_{:05d}.npy (1 file, npy)"),  # a number already there
])
def test_one_prefix_numbered_in_two_spellings_is_an_error_naming_both(
        tmp_path: pathlib.Path, stray: str, other: str) -> None:
    """Names of one prefix and extension that no one padding spells were taken as one group
    of the widest padding: a wider-padded file made the others a gap of "missing" files that
    are there, and an unpadded one was dropped without a word. Both spellings are named."""
    d = tmp_path / "d"
    numbered(d, FOUR + [stray])
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(d)
    msg = str(e.value)
    assert (f"{d}: holds numbered shards of more than one kind: shard_{{:04d}}.npy "
            f"(3 files, npy) and {other}; name one with pattern= (and format= where the "
            "name does not tell)") in msg, msg
    assert "gap" not in msg, msg
    # Named, a spelling is the user's: its files alone, in order.
    got = shardload.discover(d, pattern="shard_{:04d}.npy").read()
    np.testing.assert_array_equal(got, np.repeat(np.arange(3, dtype=np.int32), 2)[:, None]
                                  .repeat(2, axis=1))


def test_one_spelling_is_still_one_group(tmp_path: pathlib.Path) -> None:
    """What one spelling covers keeps loading: an unpadded run whose numbers grow a digit
    (shard_9, shard_10) and a padded run whose numbers outgrow the padding (shard_99,
    shard_100 under {:02d}), beside other prefixes whose default naming wins."""
    def want(n: int) -> np.ndarray:
        return np.repeat(np.arange(n, dtype=np.int32), 2)[:, None].repeat(2, axis=1)

    unpadded = tmp_path / "unpadded"
    numbered(unpadded, [f"part_{i}.npy" for i in range(12)])
    layout = shardload.discover(unpadded)
    assert [pathlib.Path(p).name for p in layout.paths][9:] == [
        "part_9.npy", "part_10.npy", "part_11.npy"]
    np.testing.assert_array_equal(layout.read(), want(12))
    past = tmp_path / "past"
    numbered(past, [f"part_{i:02d}.npy" for i in range(102)])
    layout = shardload.discover(past)
    assert pathlib.Path(layout.paths[-1]).name == "part_101.npy"
    np.testing.assert_array_equal(layout.read(), want(102))
    # Past 9999 under the default naming, with another prefix's files beside it: the default
    # wins and a stray past the end is a gap, as before (no second spelling).
    default = tmp_path / "default"
    numbered(default, FOUR + ["shard_0003.npy", "notes_1.npy"])
    np.testing.assert_array_equal(shardload.discover(default).read(), want(4))
    np.save(default / "shard_10000.npy", np.zeros((2, 2), np.int32))
    with pytest.raises(shardload.LayoutError, match=r"shard_\{:04d\}\.npy: gap in the "
                                                    r"numbering: 9996 of 10001 files missing"):
        shardload.discover(default)


def test_two_spellings_under_an_s3_prefix_are_named_too(bucket) -> None:
    """An object store's listing goes through the same numbering."""
    for i, name in enumerate(FOUR + ["shard_3.npy"]):
        bucket.put_npy(f"d/{name}", np.full((2, 2), i, dtype=np.int32))
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(bucket.url("d/"), storage_options=bucket.options)
    msg = str(e.value)
    assert ("holds numbered shards of more than one kind: shard_{:04d}.npy (3 files, npy) and "
            "shard_{}.npy (1 file, npy)") in msg, msg


@pytest.mark.parametrize("name", ["part_1", "part_1.NPY", "part_1.npy.1"])
def test_a_later_file_whose_first_bytes_say_another_format_is_refused_among_raw_shards(
        tmp_path: pathlib.Path, name: str) -> None:
    """Raw has no magic bytes: a later file whose name says no format but whose first bytes
    are a .npy's is refused naming it, never read as raw rows (its header among them)."""
    a = np.arange(32, dtype="<f4").reshape(8, 4)
    a.tofile(tmp_path / "part_0.bin")
    np.save(tmp_path / "tmp.npy", -a)
    (tmp_path / "tmp.npy").rename(tmp_path / name)
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover([str(tmp_path / "part_0.bin"), str(tmp_path / name)],
                           dtype="float32", trailing_shape=(4,))
    assert f"{tmp_path / name}: a npy file by its first bytes, among raw shards" in str(
        e.value), str(e.value)
    # A raw file without a known extension is still a raw shard.
    (-a).tofile(tmp_path / name)
    got = shardload.discover([str(tmp_path / "part_0.bin"), str(tmp_path / name)],
                             dtype="float32", trailing_shape=(4,))
    np.testing.assert_array_equal(got.read(0, 16), np.concatenate([a, -a]))


# ---- braces in names: literal, never a field of a pattern the user did not write -----------

BRACED = ["a{b}_", "a{}_", "a{0}_", "a{:04d}_", "a}{_"]


@pytest.mark.parametrize("prefix", BRACED)
def test_shards_whose_names_hold_braces_are_found_by_auto_discovery(tmp_path: pathlib.Path,
                                                                    prefix: str) -> None:
    """Auto-discovery built the pattern from the names as they are, so 'a{b}_0000.npy' ... was
    refused with an error about the pattern 'a{b}_{:04d}.npy', which the user never wrote.
    The names' braces are literal: the shards load in their order, as a list of them does."""
    d = tmp_path / "d"
    names = [f"{prefix}{i:04d}.npy" for i in range(3)]
    numbered(d, names)
    want = shardload.discover([str(d / n) for n in names]).read()
    layout = shardload.discover(d)
    assert layout.paths == [str(d / n) for n in names]
    np.testing.assert_array_equal(layout.read(), want)
    # The pattern it stands for, braces doubled as str.format spells them, names them too.
    escaped = prefix.replace("{", "{{").replace("}", "}}") + "{:04d}.npy"
    assert escaped.format(2) == names[2]
    np.testing.assert_array_equal(shardload.discover(d, pattern=escaped).read(), want)
    np.testing.assert_array_equal(shardload.discover(str(d / escaped)).read(), want)
    # A glob's braces are literal (glob(3) without GLOB_BRACE), escaped or, where the name is
    # no numbered pattern of its own ('a{}_*.npy' is one), plain.
    globs = ["*.npy", prefix.replace("{", "\\{").replace("}", "\\}") + "*.npy",
             prefix.replace("{", "[{]").replace("}", "[}]") + "*.npy"]
    if prefix not in ("a{}_", "a{:04d}_"):
        globs.append(f"{prefix}*.npy")
    for glob in globs:
        np.testing.assert_array_equal(shardload.discover(str(d / glob)).read(), want)


def test_a_brace_that_is_no_field_is_named_with_its_escape(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "d"
    numbered(d, FOUR)
    with pytest.raises(ValueError, match=re.escape(
            "pattern 'a{b}_{:04d}.npy': more than one field, or a '/' in the file-name pattern "
            "(expected one field such as {:04d} or {}; a literal brace is written {{ or }})")):
        shardload.discover(d, pattern="a{b}_{:04d}.npy")
    with pytest.raises(ValueError, match=re.escape("pattern 'a}_{:04d}.npy': a '}' that closes "
                                                   "no field")):
        shardload.discover(d, pattern="a}_{:04d}.npy")


def test_the_cli_inspects_and_suggests_braced_names(tmp_path: pathlib.Path,
                                                    cli: pathlib.Path) -> None:
    import subprocess
    d = tmp_path / "d"
    numbered(d, [f"a{{b}}_{i:04d}.npy" for i in range(3)])
    r = subprocess.run([str(cli), "inspect", str(d)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "shards:         3" in r.stdout, r.stdout
    # What the suggestion says to pass works as written.
    t = tmp_path / "t"
    t.mkdir()
    for i in range(2):
        (t / f"r{{x}}_{i}").write_text("not data")
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(t)
    msg = str(e.value)
    glob = f"{t}/r\\{{x\\}}_*"
    assert f"pass pattern='r{{{{x}}}}_{{}}' or a glob '{glob}'" in msg, msg
    raw = {"format": "raw", "dtype": "u1", "trailing_shape": ()}
    assert shardload.discover(t, pattern="r{{x}}_{}", **raw).shape == (16,)
    assert shardload.discover(glob, **raw).shape == (16,)


@pytest.mark.parametrize("name, escaped", [("run{1}", "run\\{1\\}"), ("run{}", "run\\{\\}"),
                                           ("run[1]", "run\\[1\\]"), ("r{:04d}", "r{:04d}")])
def test_a_glob_under_a_directory_whose_name_holds_braces(tmp_path: pathlib.Path, name: str,
                                                          escaped: str) -> None:
    """'run{1}/*.npy' was taken for a numbered pattern in the directory 'run{1}' (its only
    brace is in a directory part), and refused for lacking a number field, escaped or not,
    while docs/errors.md says to escape such a directory in a glob."""
    d = tmp_path / name
    numbered(d, ["part_0.npy", "part_1.npy"])
    want = shardload.discover([str(d / "part_0.npy"), str(d / "part_1.npy")]).read()
    np.testing.assert_array_equal(shardload.discover(str(tmp_path / escaped / "*.npy")).read(),
                                  want)
    if "[" not in name:
        np.testing.assert_array_equal(shardload.discover(str(d / "*.npy")).read(), want)
    # A pattern's directory part stays literal.
    np.testing.assert_array_equal(shardload.discover(str(d / "part_{}.npy")).read(), want)


def test_braced_names_under_an_s3_prefix(bucket) -> None:
    names = [f"a{{b}}_{i:04d}.npy" for i in range(3)]
    for i, name in enumerate(names):
        bucket.put_npy(f"br/{name}", np.full((2, 2), i, dtype=np.int32))
    want = shardload.discover([bucket.url(f"br/{n}") for n in names],
                              storage_options=bucket.options).read()
    assert want.shape == (6, 2)
    layout = shardload.discover(bucket.url("br/"), storage_options=bucket.options)
    np.testing.assert_array_equal(layout.read(), want)
    np.testing.assert_array_equal(
        shardload.discover(bucket.url("br/a{b}_*.npy"), storage_options=bucket.options).read(),
        want)
    np.testing.assert_array_equal(
        shardload.discover(bucket.url("br/a{{b}}_{:04d}.npy"),
                           storage_options=bucket.options).read(), want)
