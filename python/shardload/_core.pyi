"""Private binding of shardload's engine-independent core (python/src/core_module.cc).

What the package's Python code uses; not a public interface."""

import os
from typing import Any, AnyStr, Callable, Literal, Sequence, Union, overload

import numpy as np

_Path = Union[str, bytes, os.PathLike[str], os.PathLike[bytes]]

# The exceptions are the package's own (shardload._errors); the binding raises them.

class Layout:
    # The C++ layout and its fields; shardload.Layout (shardload._layout) subclasses it with
    # the docs, the array-like surface and the argument checks.
    def __init__(self, made: Layout) -> None: ...  # a copy, for the package's subclass
    @property
    def format(self) -> str: ...
    @property
    def dtype(self) -> np.dtype[Any]: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def trailing_shape(self) -> tuple[int, ...]: ...
    @property
    def paths(self) -> list[str]: ...
    @property
    def _linked_paths(self) -> list[str]: ...  # HDF5 external storage files, in shard order
    @property
    def shard_rows(self) -> list[int]: ...
    @property
    def offsets(self) -> list[int]: ...
    @property
    def total_rows(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def num_shards(self) -> int: ...
    @property
    def manifest_status(self) -> str: ...
    @property
    def _manifest_state(self) -> str: ...  # a ManifestState's value
    def encode(self, credentials: bool = True) -> bytes: ...
    def describe(self, edge_shards: int = 3) -> str: ...
    # Bounds unchecked but for range (the package checks them first); hi -1 is total_rows.
    def slice_rows(self, lo: int, hi: int) -> Layout: ...
    def read(self, lo: int = 0, hi: int = -1) -> np.ndarray[Any, Any]: ...

def discover(
    source: Union[_Path, Sequence[_Path]],
    pattern: Union[str, bytes, None] = None,
    options: dict[str, object] = ...,
    discovery: dict[str, object] = ...,
    use_manifest: bool = True,
) -> Layout:
    """``options``: "format" and the option table's names (format_option_rows), values
    checked by the package; None keeps the default. ``discovery``: the discovery option
    table's names (discover_option_rows), likewise."""

def format_option_rows() -> list[tuple[str, str]]:
    """(name, kind) of each row of the C++ format option table, in order."""
def discover_option_rows() -> list[tuple[str, str]]:
    """(name, kind) of each row of the C++ discovery option table, in order."""
def storage_option_rows() -> list[tuple[str, str, tuple[str, ...], bool, object, str]]:
    """(name, kind, stores, secret, default, help) of each row of the C++ store option table,
    in order; stores "s3" / "http", default None for a row of Arrow's client."""
def format_rows() -> list[dict[str, Any]]:
    """The built-in formats of the C++ format table, in order: each a dict of ``name``,
    ``aliases``, ``extensions``, ``store`` (a shard is a directory), ``writable`` (save
    writes it) and ``capabilities`` (the names of the FormatCapabilities it has)."""
def resolve(source: Union[_Path, Sequence[_Path]], pattern: Union[str, bytes, None] = None) -> list[str]:
    """The source's paths in order (no file opened); errors as discover's."""

def write_manifest(
    layout: Layout, directory: _Path, checksum: str = "none", pattern: Union[str, bytes, None] = None
) -> str: ...
def read_manifest(path: _Path) -> dict[str, Any]:
    """{"layout": Layout, "pattern": str, "checksum": str, "checksums": [int, ...]}"""
def decode_layout(encoded: bytes, manifest_status: str = "", manifest_state: str = "none") -> Layout: ...
def manifest_path(directory: _Path) -> str: ...
def size_string(nbytes: int) -> str: ...
def remote_retries() -> int:
    """Requests to object storage retried so far in this process."""
def printable(text: str) -> str:
    """``text`` with each control character and each byte that is not UTF-8 escaped, as every
    message shows a name."""
def check_source(source: str | bytes) -> None:
    """Raises as discover() does for a source spelled as no path or URL should be: a mistyped
    URL (``http:/h/x``), a scheme no backend serves, a NUL."""
def printable_redacted(text: str) -> str:
    """``printable(text)`` with its secrets hidden, as every message shows a path."""
@overload
def seal_store_url(url: str, pinned: Literal[False] = ...) -> str: ...
@overload
def seal_store_url(url: str, pinned: Literal[True]) -> tuple[str, object]:
    """``url`` with its secrets kept by this process under a handle (``credentials=HANDLE``
    in their place); other URLs and paths as they are. ``pinned=True``: with the pin that
    keeps the handle's entry while it lives (else only the recently sealed ones are kept)."""
def redact_secrets(text: AnyStr) -> AnyStr:
    """``text`` with every credential in a URL replaced by ``***`` (the values of secret query
    keys, compared without case, and the password of a URL's user part), as in every
    error's message and printout; public as ``shardload.redact_secrets``."""
class PathTraits:
    """What the store that serves a path is like (shardload/location.hpp's PathTraits)."""
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...  # made by path_traits() only
    @property
    def kernel_files(self) -> bool: ...
    @property
    def round_trips(self) -> bool: ...
    @property
    def flat_keys(self) -> bool: ...
    @property
    def listable(self) -> bool: ...
    @property
    def writable(self) -> bool: ...
    @property
    def uploads(self) -> bool: ...
    @property
    def options_in_query(self) -> bool: ...
    @property
    def query_sent(self) -> bool: ...
    @property
    def scheme_label(self) -> str: ...
    @property
    def storage_options(self) -> tuple[str, ...]: ...
def path_traits(path: _Path) -> PathTraits: ...
def join_key(dir: _Path, name: _Path) -> str:
    """``name`` in the directory ``dir``, a URL's options kept at the end (secrets sealed)."""
def split_options(path: _Path) -> tuple[str, str]:
    """``(name, options)``: a URL's key and its query; a local path and ``''``."""
def verify_on_host(path: _Path) -> list[tuple[int, str, str]]: ...
def host_load(
    layout: Layout, out: np.ndarray[Any, Any], threads: int = 0, overdecompose: int = 4,
    progress: Callable[[int, int, int], object] | None = None,
) -> dict[str, Any]:
    """Fills ``out`` (C-contiguous, the layout's dtype and bytes) with every row of ``layout``
    on the engine's threads (0: one per core), the GIL released; ``progress(tiles_done, tiles,
    rows_done)`` after each tile. {"tiles", "tile_rows", "threads", "fill_s"}"""
def default_host_threads() -> int:
    """The cores this process may run on."""
def host_save(
    array: np.ndarray[Any, Any], dest: bytes, num_shards: int, shard_rows: Sequence[int],
    format: str, overwrite: bool, manifest: bool, checksum: str, threads: int = 0,
) -> dict[str, Any]:
    """Writes a C-contiguous native-endian array as a sharded dataset (shardload.numpy.save)."""
def staged_save_begin(
    dest: bytes, shape: Sequence[int], dtype: str, shard_rows: Sequence[int], format: str,
    overwrite: bool, manifest: bool, checksum: str,
) -> tuple[Any, ...]:
    """Checks dest, makes the staging directory and the shard files (shardload.dask.save);
    returns the picklable handle that the writers, the commit and the abort take."""
def staged_save_write(handle: tuple[Any, ...], lo: int, hi: int,
                      array: np.ndarray[Any, Any]) -> None:
    """Writes global rows [lo, hi) (a C-contiguous native-endian array) into the shards."""
def staged_save_commit(handle: tuple[Any, ...]) -> None:
    """Metadata, manifest and the one rename into place; on an error nothing is published."""
def staged_save_abort(handle: tuple[Any, ...]) -> None:
    """Removes the staging directory; idempotent."""
def _process_state() -> dict[str, Any]:
    """{"posix_io": the address of libshardload's I/O backend, "readers": the names of the
    readers registered in C++}"""
def register_python_reader(
    name: str,
    probe: Callable[[str], tuple[int, str, tuple[int, ...]]],
    read_into: Callable[[str, int, int, Any], None],
    extensions: Sequence[str],
) -> None:
    """Registers a trampoline reader in libshardload's registry (shardload.register_reader);
    ValueError when the registry refuses the name or an extension."""
def plan(
    rows: Sequence[int], processors: int, overdecompose: int = 1, unit_rows: int = 0,
    units_aligned: bool = False,
) -> dict[str, Any]:
    """{"tile_rows": int, "tiles": int, "uniform": bool,
    "pieces": [[(shard, lo, hi, dst_row), ...] per tile]}"""
def unit_grid(layout: Layout) -> tuple[int, bool]:
    """The layout's decode unit grid as the plan sees it: (unit_rows, units_aligned),
    unit_rows 0 when no shard has units."""
def shard_units(layout: Layout) -> list[tuple[int, int]]:
    """Each shard's (decode_rows, first_row): its units hold file rows [k*u, (k+1)*u) (0: no
    units), and its view starts at file row first_row."""
