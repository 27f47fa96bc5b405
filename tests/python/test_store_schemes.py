"""A store driver registered under a scheme is read by every reader, from Python as from C++:
tests/cpp/memory_store_library.cc registers in-memory stores in libshardload's registry of store
schemes (the library the extension modules share), and shardload.discover / shardload.numpy.load
read them by URL. numpy, h5py, pyarrow and zarr write the files (and are the oracles); the faults
are injected per key."""

from __future__ import annotations

import ctypes
import os
import pathlib
import subprocess

import numpy as np
import pytest

import shardload
import shardload.numpy
from conftest import BUILD

SCHEME = b"pymem"


@pytest.fixture(scope="module")
def library() -> ctypes.CDLL:
    return memory_store_library()


def memory_store_library() -> ctypes.CDLL:
    """The test library of in-memory stores (registered as schemes by its calls), typed."""
    path = BUILD / "libshardload_test_memory_store.so"
    if not path.exists():
        pytest.fail(f"{path} is not built; run scripts/setup.sh")
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    lib.shardload_test_memory_write.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
                                                ctypes.c_size_t]
    lib.shardload_test_memory_fail.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                               ctypes.c_int]
    lib.shardload_test_memory_short.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.shardload_test_memory_delay.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
    lib.shardload_test_memory_reads.restype = ctypes.c_ulonglong
    return lib


class Store:
    """One registered in-memory store: SCHEME://bucket/KEY."""

    def __init__(self, lib: ctypes.CDLL, scheme: bytes) -> None:
        self.lib, self.scheme = lib, scheme

    def url(self, key: str) -> str:
        return f"{self.scheme.decode()}://bucket/{key}"

    def put(self, key: str, data: bytes) -> None:
        assert self.lib.shardload_test_memory_write(self.scheme, key.encode(), data, len(data)) == 1

    def put_tree(self, root: pathlib.Path, prefix: str) -> None:
        for p in sorted(root.rglob("*")):
            if p.is_file():
                self.put(prefix + p.relative_to(root).as_posix(), p.read_bytes())

    def reads(self) -> int:
        return self.lib.shardload_test_memory_reads(self.scheme)


@pytest.fixture
def store(library):
    assert library.shardload_test_memory_register(SCHEME, 0) == 1
    yield Store(library, SCHEME)
    library.shardload_test_memory_unregister(SCHEME)


def write_npy(d: pathlib.Path) -> np.ndarray:
    rng = np.random.default_rng(7)
    d.mkdir()
    parts = [rng.standard_normal((n, 3)).astype(np.float32) for n in (9, 1, 20)]
    for i, a in enumerate(parts):
        np.save(d / f"shard_{i:04d}.npy", a)
    return np.concatenate(parts)


def test_npy_sources_load_as_s3_sources_do(store, tmp_path) -> None:
    expected = write_npy(tmp_path / "ds")
    store.put_tree(tmp_path, "")
    for source in ("ds/", "ds/shard_{:04d}.npy", "ds/shard_*.npy"):
        before = store.reads()
        got = shardload.numpy.load(store.url(source), threads=2)
        np.testing.assert_array_equal(got, expected)
        assert store.reads() > before
    layout = shardload.discover(store.url("ds/"))
    assert layout.paths[-1] == store.url("ds/shard_0002.npy")


def test_every_format_loads_from_a_registered_store(store, tmp_path) -> None:
    h5py = pytest.importorskip("h5py")
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    zarr = pytest.importorskip("zarr")
    rng = np.random.default_rng(3)
    d = tmp_path / "d"
    d.mkdir()
    h = rng.standard_normal((50, 4))
    with h5py.File(d / "data.h5", "w") as f:
        f.create_dataset("data", data=h, chunks=(8, 4), compression="gzip")
    t = pa.table({f"c{c}": rng.standard_normal(70) for c in range(2)})
    pq.write_table(t, d / "data.parquet", row_group_size=30)
    cols = np.stack([t.column(c).to_numpy() for c in range(2)], axis=1)
    z = rng.integers(-100, 100, size=(33, 5)).astype(np.int32)
    a = zarr.create_array(store=str(d / "v3.zarr"), shape=z.shape, chunks=(10, 5), dtype="int32",
                          zarr_format=3)
    a[:] = z
    n = rng.standard_normal((12, 2)).astype(np.float32)
    np.savez(d / "data.npz", n)
    store.put_tree(d, "d/")
    for key, expected in (("data.h5", h), ("data.parquet", cols), ("v3.zarr", z), ("data.npz", n)):
        got = shardload.numpy.load(store.url("d/" + key), threads=2)
        np.testing.assert_array_equal(got, expected, err_msg=key)


def test_a_failing_key_is_a_shard_read_error_naming_it(store, tmp_path) -> None:
    write_npy(tmp_path / "ds")
    store.put_tree(tmp_path, "")
    layout = shardload.discover(store.url("ds/"))
    assert store.lib.shardload_test_memory_fail(SCHEME, b"ds/shard_0002.npy", b"injected reset",
                                                1000) == 1
    with pytest.raises(shardload.ShardReadError, match="injected reset") as e:
        shardload.numpy.load(layout, threads=2)
    assert e.value.filename == store.url("ds/shard_0002.npy")


def test_a_short_read_is_an_error_never_data(store, tmp_path) -> None:
    write_npy(tmp_path / "ds")
    store.put_tree(tmp_path, "")
    layout = shardload.discover(store.url("ds/"))
    assert store.lib.shardload_test_memory_short(SCHEME, b"ds/shard_0000.npy", 4) == 1
    with pytest.raises(shardload.ShardReadError,
                       match="a short read before the key's end is refused"):
        shardload.numpy.load(layout, threads=2)


def test_a_key_written_again_after_discovery_is_changed(store, tmp_path) -> None:
    write_npy(tmp_path / "ds")
    store.put_tree(tmp_path, "")
    layout = shardload.discover(store.url("ds/"))
    store.put("ds/shard_0001.npy", (tmp_path / "ds" / "shard_0001.npy").read_bytes())
    with pytest.raises(shardload.ShardReadError,
                       match=r"shard_0001\.npy: changed since discovery: .*its generation differs"):
        shardload.numpy.load(layout, threads=2)


def test_a_read_past_the_deadline_fails_naming_the_key(library, tmp_path) -> None:
    assert library.shardload_test_memory_register(b"pyslow", 100) == 1
    try:
        slow = Store(library, b"pyslow")
        write_npy(tmp_path / "ds")
        slow.put_tree(tmp_path, "")
        layout = shardload.discover(slow.url("ds/"))
        assert library.shardload_test_memory_delay(b"pyslow", b"ds/shard_0001.npy", 3000) == 1
        with pytest.raises(shardload.ShardReadError,
                           match="no answer within the read deadline of 100 ms") as e:
            shardload.numpy.load(layout, threads=2)
        assert e.value.filename == slow.url("ds/shard_0001.npy")
    finally:
        library.shardload_test_memory_unregister(b"pyslow")


def test_secrets_in_its_urls_are_not_shown(store, tmp_path) -> None:
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover("pymem://me:hunter2@bucket/ds/")
    assert "hunter2" not in str(e.value) and "hunter2" not in (e.value.filename or "")
    with pytest.raises(shardload.LayoutError) as e:
        shardload.discover(store.url("none/?secret_key=hunter3"))
    assert "hunter3" not in str(e.value) and "hunter3" not in (e.value.filename or "")


def test_an_unregistered_scheme_is_refused(library) -> None:
    with pytest.raises(ValueError, match="pymem:// scheme is not supported"):
        shardload.discover("pymem://bucket/ds/")


_TYPOS = ["{s}: //alice:{pw}@bucket/d/", "{s}:/ /alice:{pw}@bucket/d/",
          "{s}:.//alice:{pw}@bucket/d/", "{s}//alice:{pw}@bucket/d/",
          "{s};//alice:{pw}@bucket/d/", "{s}.//alice:{pw}@bucket/d/", "{s}/alice:{pw}@bucket/d/",
          "{s}\\alice:{pw}@bucket/d/", "{s}\uff1a//alice:{pw}@bucket/d/"]


def _outputs_of(text: str) -> list[str]:
    """What discover (of the text and of a one-element list), load, save and redact_secrets
    show of `text`, which each refuses or does not find."""
    outs = [shardload.redact_secrets(text)]
    for call in (lambda: shardload.discover(text), lambda: shardload.discover([text]),
                 lambda: shardload.load(text),
                 lambda: shardload.save(np.arange(8.0).reshape(4, 2), text)):
        with pytest.raises(Exception) as e:
            call()
        outs.append(f"{e.value} {getattr(e.value, 'filename', '')}")
    return outs


def _cli(scheme: bytes, *argv: str, cwd: pathlib.Path) -> str:
    """The command line's stdout and stderr, run with `scheme` registered in it (the test
    library preloaded)."""
    env = dict(os.environ, LD_PRELOAD=str(BUILD / "libshardload_test_memory_store.so"),
               SHARDLOAD_TEST_MEMORY_SCHEME=scheme.decode())
    r = subprocess.run([str(BUILD / "shardload"), *argv], capture_output=True, text=True,
                       timeout=120, env=env, cwd=cwd)
    return f"{r.returncode} {r.stdout} {r.stderr}"


@pytest.mark.parametrize("scheme", [b"pymem", b"my.store+x-9"])
@pytest.mark.parametrize("typo", _TYPOS)
def test_a_registered_schemes_mistyped_url_hides_its_password_in_every_output(
        library, tmp_path, monkeypatch, scheme, typo) -> None:
    """A registered scheme's URL typed with a space, a '.' or ';' for the ':', one slash, a
    backslash or a full-width colon: the refusal or "not found" of discover (of the text or of
    a list), load, save, redact_secrets and the command line's inspect (plain and --json)
    printed the password, which the one redaction hid for http, https and s3 only."""
    pw = "Reg1steredPW"
    text = typo.format(s=scheme.decode(), pw=pw)
    monkeypatch.chdir(tmp_path)
    assert library.shardload_test_memory_register(scheme, 0) == 1
    try:
        outs = _outputs_of(text)
    finally:
        library.shardload_test_memory_unregister(scheme)
    for argv in (["inspect", text], ["inspect", "--json", text]):
        out = _cli(scheme, *argv, cwd=tmp_path)
        assert not out.startswith("0 "), out
        outs.append(out)
    for out in outs:
        assert pw not in out and "***" in out, (text, out)
    assert os.listdir(tmp_path) == []


def test_a_local_path_spelled_as_a_registered_scheme_shows_no_password(
        library, tmp_path, monkeypatch) -> None:
    """"pymem//alice:PW@bucket/d/" (the ':' left out) is a local path where such directories
    exist: it loads as numpy reads it, and its repr, print() (describe) and the command line's
    inspect (plain and --json) hide the user part as they hide a URL's."""
    pw = "Reg1steredPW"
    d = tmp_path / "pymem" / f"alice:{pw}@bucket" / "d"
    d.mkdir(parents=True)
    a = np.arange(12.0).reshape(4, 3)
    np.save(d / "shard_0000.npy", a)
    monkeypatch.chdir(tmp_path)
    text = f"pymem//alice:{pw}@bucket/d/"
    assert library.shardload_test_memory_register(SCHEME, 0) == 1
    try:
        layout = shardload.discover(text)
        np.testing.assert_array_equal(np.asarray(shardload.load(layout)),
                                      np.load(d / "shard_0000.npy"))
        assert pw not in repr(layout)
        outs = [str(layout), layout.describe()]
    finally:
        library.shardload_test_memory_unregister(SCHEME)
    for argv in (["inspect", text], ["inspect", "--json", text]):
        out = _cli(SCHEME, *argv, cwd=tmp_path)
        assert out.startswith("0 "), out
        outs.append(out)
    for out in outs:
        assert pw not in out and "***@bucket" in out, out
