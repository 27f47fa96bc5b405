"""The Python API's help to the user: load(..., info=True) and LoadInfo, progress reports and
the `shardload` logger, Layout's docstrings, the binding stubs, and h5py after a load."""

from __future__ import annotations

import ast
import dataclasses
import logging
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import shardload
from shardload import _api, _core
from conftest import synth
from test_core import write_shards

import cupynumeric as cn  # noqa: E402  (a pinned dependency: its absence must fail, not skip)

PACKAGE = pathlib.Path(shardload.__file__).parent


def dataset(tmp_path: pathlib.Path, rows=(40, 0, 17, 33, 5), trailing=(3,)) -> tuple:
    arrays = [synth("float32", 4, 0, r * int(np.prod(trailing))).reshape(r, *trailing) + i
              for i, r in enumerate(rows)]
    write_shards(tmp_path / "set", arrays)
    return tmp_path / "set", np.concatenate(arrays)


# ---- info=True ------------------------------------------------------------------------------

def test_info_gives_the_plan_sizes_and_stage_times(tmp_path: pathlib.Path) -> None:
    d, expected = dataset(tmp_path)
    out, info = shardload.load(d, overdecompose=3, info=True)
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert isinstance(out, cn.ndarray) and isinstance(info, shardload.LoadInfo)
    layout = shardload.discover(d)
    # The plan is the read plan for the processors of LEGATE_CONFIG (two CPUs).
    assert (info.target, info.processors, info.overdecompose) == ("CPU", 2, 3)
    plan = _core.plan(layout.shard_rows, info.processors, 3)
    assert (info.tile_rows, info.tiles) == (plan["tile_rows"], plan["tiles"])
    assert info.total_rows == layout.total_rows == 95 and info.bytes == layout.nbytes == 95 * 12
    for name in ("discovery_s", "startup_s", "launch_s", "fill_s", "total_s"):
        assert isinstance(getattr(info, name), float) and getattr(info, name) >= 0, name
    assert info.discovery_s > 0 and info.launch_s > 0 and info.fill_s > 0
    assert info.total_s >= info.discovery_s + info.startup_s + info.launch_s + info.fill_s
    assert info.gb_per_s == pytest.approx(info.bytes / 1e9 / info.total_s)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.tiles = 1  # type: ignore[misc]

    # With a Layout nothing is discovered; the runtime is up by now; no info, no tuple.
    out2, info2 = shardload.load(layout, info=True)
    assert info2.discovery_s == 0.0 and info2.startup_s == 0.0 and info2.overdecompose == 1
    plain = shardload.load(layout)
    assert isinstance(plain, cn.ndarray)
    np.testing.assert_array_equal(np.asarray(plain), expected)


def test_info_of_an_empty_dataset(tmp_path: pathlib.Path) -> None:
    write_shards(tmp_path / "e", [np.zeros((0, 2), np.int16), np.zeros((0, 2), np.int16)])
    out, info = shardload.load(tmp_path / "e", info=True)
    assert out.shape == (0, 2) and info.bytes == 0 and info.tiles == 0
    assert info.fill_s == 0.0 and info.gb_per_s == 0.0


def test_info_and_progress_are_type_checked(tmp_path: pathlib.Path) -> None:
    d, _ = dataset(tmp_path)
    for bad in ("yes", 1, None):
        with pytest.raises(TypeError, match=r"^info: expected a bool"):
            shardload.load(d, info=bad)
    with pytest.raises(TypeError, match=r"^progress: expected a callable"):
        shardload.load(d, progress=3)


# ---- progress and logging -------------------------------------------------------------------

def test_progress_true_draws_a_bar_on_stderr(tmp_path: pathlib.Path, capsys) -> None:
    d, expected = dataset(tmp_path)
    out = shardload.load(d, progress=True)
    np.testing.assert_array_equal(np.asarray(out), expected)
    err = capsys.readouterr().err
    assert "shardload.load:" in err and "B/s" in err  # tqdm's bar of bytes
    # The rows beside the bytes; the final state drawn before the bar closes.
    rows = f"{len(expected)}/{len(expected)} rows"
    assert "100%" in err and rows in err, err
    from shardload import numpy as snp

    np.testing.assert_array_equal(snp.load(d, progress=True), expected)
    err = capsys.readouterr().err
    assert "shardload.numpy.load" in err and "100%" in err and rows in err, err


def test_progress_true_without_tqdm_is_an_import_error_naming_it(tmp_path, monkeypatch):
    """In every front end, before anything is read (a JAX process or Legate rank that does
    not draw checks too, so that every process of a job fails alike)."""
    d, _ = dataset(tmp_path)
    from shardload import dask as sdask, numpy as snp

    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    for name, load in (("shardload.load", shardload.load), ("shardload.numpy.load", snp.load),
                       ("shardload.dask.load", sdask.load)):
        with pytest.raises(ImportError, match=rf"^{re.escape(name)}: progress=True draws its "
                                              r"bar with tqdm, which is not installed"):
            load(d, progress=True)
    reporter_args = (snp._frontend.prepare("w", d, row_range=None, astype=None, reader=None,
                                           storage_options=None, options={}), "w")
    with pytest.raises(ImportError, match="^w: progress=True"):
        snp._frontend._Reporter(True, *reporter_args, bar=False)


def test_progress_reports_each_stage_boundary(tmp_path: pathlib.Path) -> None:
    d, expected = dataset(tmp_path)
    reports: list[shardload.LoadProgress] = []
    out, info = shardload.load(d, overdecompose=2, info=True, progress=reports.append)
    np.testing.assert_array_equal(np.asarray(out), expected)
    assert [r.stage for r in reports] == ["discovered", "started", "launching", "filled"]
    nbytes = expected.nbytes
    for r in reports[:-1]:
        # Nothing is known to be filled, and the plan is unknown, until the launch returns.
        assert (r.tiles_done, r.tiles, r.bytes_done, r.bytes) == (0, None, 0, nbytes)
    last = reports[-1]
    assert (last.tiles_done, last.tiles, last.bytes_done, last.bytes) == \
        (info.tiles, info.tiles, nbytes, nbytes)
    elapsed = [r.elapsed_s for r in reports]
    assert elapsed == sorted(elapsed) and elapsed[-1] == info.total_s
    with pytest.raises(dataclasses.FrozenInstanceError):
        last.stage = "x"  # type: ignore[misc]


@pytest.mark.parametrize("stop_at", ["discovered", "started", "launching"])
def test_an_exception_from_progress_stops_the_load(tmp_path: pathlib.Path, stop_at: str) -> None:
    d, _ = dataset(tmp_path)
    seen: list[str] = []

    def progress(p: shardload.LoadProgress) -> None:
        seen.append(p.stage)
        if p.stage == stop_at:
            raise KeyboardInterrupt  # what a user's Ctrl-C in a callback looks like

    with pytest.raises(KeyboardInterrupt):
        shardload.load(d, progress=progress)
    assert seen[-1] == stop_at and "filled" not in seen


def test_logger_records_stages_and_a_summary(tmp_path: pathlib.Path, caplog,
                                            monkeypatch) -> None:
    d, _ = dataset(tmp_path)
    assert logging.getLogger("shardload") is _api.logger
    # A summary at INFO only for loads longer than the threshold: set it out of reach ...
    monkeypatch.setattr(_api, "_SUMMARY_AFTER_S", 1e9)
    with caplog.at_level(logging.DEBUG, logger="shardload"):
        shardload.load(d)
    records = [r for r in caplog.records if r.name == "shardload"]
    assert records and all(r.levelno == logging.DEBUG for r in records)
    text = "\n".join(r.getMessage() for r in records)
    for stage in ("discovered 5 shards, 95 rows, 1140 bytes", "started", "launching",
                  "filled"):
        assert stage in text, text
    assert re.search(r"loaded \(95, 3\) float32 \(1\.14 kB \(1140 bytes\)\) in [0-9.]+ s: "
                     r"\d+ tiles on 2 CPU processors, [0-9.]+ GB/s", text), text
    # ... and within reach: the summary comes at INFO, the stages stay at DEBUG.
    caplog.clear()
    monkeypatch.setattr(_api, "_SUMMARY_AFTER_S", 0.0)
    with caplog.at_level(logging.INFO, logger="shardload"):
        shardload.load(d)
    records = [r for r in caplog.records if r.name == "shardload"]
    assert len(records) == 1 and records[0].levelno == logging.INFO
    assert records[0].getMessage().startswith("loaded (95, 3) float32")


# ---- docstrings, py.typed, stubs ------------------------------------------------------------

LAYOUT_MEMBERS = ["format", "dtype", "shape", "trailing_shape", "paths", "shard_rows", "offsets",
                  "total_rows", "nbytes", "num_shards", "manifest_status", "manifest_state",
                  "encode", "describe", "read", "slice_rows"]
# Added in Python over the binding's (the array-like ones, and Layout.rows, deprecated).
LAYOUT_PYTHON_MEMBERS = ["ndim", "size", "itemsize", "rows"]


def test_layout_and_its_members_have_docstrings(tmp_path: pathlib.Path) -> None:
    assert len(shardload.Layout.__doc__ or "") > 40
    public = sorted(n for n in dir(shardload.Layout) if not n.startswith("_"))
    assert public == sorted(LAYOUT_MEMBERS + LAYOUT_PYTHON_MEMBERS)
    for name in public:
        doc = getattr(shardload.Layout, name).__doc__ or ""
        # A sentence of its own, not pybind11's generated signature.
        assert len(doc) > 20 and "(self: shardload._core.Layout" not in doc, (name, doc)
    for cls in (shardload.LoadInfo, shardload.LoadProgress):
        assert len(cls.__doc__ or "") > 100
    # Still the properties they were.
    d, expected = dataset(tmp_path)
    layout = shardload.discover(d)
    assert layout.shape == expected.shape and layout.nbytes == expected.nbytes
    assert layout.shard_rows == [40, 0, 17, 33, 5] and layout.offsets == [0, 40, 40, 57, 90, 95]
    assert layout.describe(1).count("\n") < layout.describe().count("\n")
    assert str(layout) == layout.describe() and "\n" not in repr(layout)
    with pytest.raises(ValueError, match=r"^edge_shards: expected an int >= 0"):
        layout.describe(-1)
    with pytest.raises(TypeError, match=r"^edge_shards: expected an int"):
        layout.describe(1.5)


def _stub_names(path: pathlib.Path) -> tuple[set[str], set[str]]:
    tree = ast.parse(path.read_text())
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    # Constants too (``MAX_DIMS: int``).
    top |= {n.target.id for n in tree.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    layout: set[str] = set()
    for n in tree.body:
        if isinstance(n, ast.ClassDef) and n.name == "Layout":
            layout = {f.name for f in n.body if isinstance(f, ast.FunctionDef)}
    return top, layout


def test_py_typed_and_stubs_cover_what_the_package_uses() -> None:
    from shardload import _legate

    assert (PACKAGE / "py.typed").is_file()
    source = "\n".join(p.read_text() for p in PACKAGE.glob("*.py"))
    for module in (_core, _legate):
        name = module.__name__.rsplit(".", 1)[1]
        top, _ = _stub_names(PACKAGE / f"{name}.pyi")
        used = set(re.findall(rf"\b{name}\.([A-Za-z_]\w*)", source))
        assert used and used <= top, (name, used - top)
        # Everything the stub lists is really there.
        assert all(hasattr(module, n) for n in top if not n.startswith("_")), name
    _, layout = _stub_names(PACKAGE / "_core.pyi")
    # The binding's class as it is built (shardload.Layout subclasses it), private members
    # included: the files besides the shards that a load reads (HDF5 external storage), which
    # numpy.load(out=) checks an out= array against, and the ManifestState's value.
    built = {n for n in vars(_core.Layout) if not n.startswith(("__", "_pybind11"))}
    assert layout == built | {"__init__"}
    assert built == set(LAYOUT_MEMBERS) - {"manifest_state"} | {"_linked_paths", "_manifest_state"}


# ---- h5py after a load ----------------------------------------------------------------------

def test_h5py_imported_after_a_load_works(tmp_path: pathlib.Path) -> None:
    # In a fresh process: cuPyNumeric puts Legate's HDF5 into the global symbol scope, and an
    # h5py imported only after that fails on import ("Not a datatype") unless shardload has
    # imported it first.
    d, expected = dataset(tmp_path)
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        import shardload
        assert "h5py" not in sys.modules and "cupynumeric" not in sys.modules
        a = shardload.load({str(d)!r})
        import h5py
        with h5py.File({str(tmp_path / "after.h5")!r}, "w") as f:
            f["x"] = np.asarray(a)
        with h5py.File({str(tmp_path / "after.h5")!r}, "r") as f:
            print("sum", float(f["x"][...].sum()))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"sum {float(expected.sum())}" in r.stdout
