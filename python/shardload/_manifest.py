"""Manifests: a dataset's layout written next to its shards, and checks of their checksums.

:func:`index` writes ``DIR/shardload.manifest`` (atomically); :func:`shardload.discover` and
:func:`shardload.load` then take the layout from it while the request has the options it was
indexed with and the shards still match it (npy, raw, Zarr: their headers or metadata read
and compared; HDF5, Parquet, Arrow, npz: sizes and times), or without looking at the shards at
all with ``trust_manifest=True``.
:func:`verify` checks the shards against the manifest's checksums in a parallel Legate task.
:func:`discover_once` discovers in one Legate task for a whole multi-rank job. The design and
the container format are in docs/manifest.md.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Unpack

from . import _core
from ._args import DTypeLike, _bool, _found, _int, _source
from ._discover import _discover, _with_storage_options
from ._layout import Layout, _made
from ._legate_start import _check_thread, _job_ranks, _start_runtime
from ._options import DiscoverOptions, StorageOptions, _astype, _decoded, _Options, _options

__all__ = ["ChecksumMismatch", "index", "verify", "discover_once", "MANIFEST_NAME"]

MANIFEST_NAME = "shardload.manifest"
_CHECKSUMS = ("none", "xxh3")


@dataclasses.dataclass(frozen=True)
class ChecksumMismatch:
    """One shard whose bytes differ from the manifest's checksum, that cannot be read, or that
    the directory holds and the manifest does not list: ``shard`` (its index in the layout; for
    a shard not in the manifest, in the directory's listing), ``path`` (a str, as os.fsdecode
    gives it) and ``what`` (``"xxh3 0x... expected, found 0x..."``, why it cannot be read,
    ``"not in the manifest: added after indexing ..."``, or for a shard's linked file, ``path``
    that file, ``"linked file of ...: changed after indexing ..."``)."""

    shard: int
    path: str
    what: str

    def __repr__(self) -> str:
        # ``path`` stays the URL to open; shown, it is redacted as every message's is.
        return (f"ChecksumMismatch(shard={self.shard!r}, "
                f"path={_core.redact_secrets(self.path)!r}, what={self.what!r})")


def _directory(source: object, storage_options: object = None) -> str | bytes:
    if not isinstance(source, (str, bytes, os.PathLike)):
        raise TypeError(f"source: expected a directory (str, bytes or os.PathLike), found "
                        f"{_found(source)}")
    path = os.fspath(source)
    _core.check_source(path)  # as discover() spells it out: a mistyped URL is no directory
    traits = _core.path_traits(path)
    if not traits.writable:
        # The store's answer, as write_manifest's (an HTTP server takes no upload).
        raise ValueError(f"{_core.printable_redacted(os.fsdecode(path))}: a manifest cannot be "
                         "written over HTTP (no upload, and no listing to index); index a local "
                         f"or s3:// copy of the objects and serve its {MANIFEST_NAME} beside them")
    if not traits.kernel_files:
        # A prefix in a store: discovery says whether keys are under it.
        return _with_storage_options(path, storage_options)  # type: ignore[return-value]
    _with_storage_options(path, storage_options)  # refuses options for a local path
    if not os.path.isdir(path):
        shown = _core.printable_redacted(os.fsdecode(path))
        raise ValueError(f"{shown}: not a directory; a manifest is written into the directory "
                         "of the shards")
    return path


def index(
    source: str | bytes | os.PathLike,
    *,
    checksum: str = "none",
    astype: DTypeLike | None = None,
    storage_options: StorageOptions | None = None,
    **options: Unpack[DiscoverOptions],
) -> str:
    """Discovers a directory of shards by probing every file and writes its manifest.

    The manifest, ``DIR/shardload.manifest``, holds every shard's path (relative to DIR),
    rows, format data and snapshot (size, mtime, ctime, inode), the format options given,
    and with ``checksum="xxh3"`` an XXH3-64 checksum of each file. It is written to a
    temporary file in DIR, synced and renamed over the old one: a reader sees the old
    manifest or the new one, never part of one. An existing manifest is not consulted.
    It is written only where it describes the directory when it lands: the directory is listed
    and its shards stat'ed again around the rename (an overwrite of it, or a shard added or
    replaced, while this ran is a LayoutError, "changed while indexing", and the old manifest
    stays).
    On several ranks (a Legate job), one rank probes and writes and every rank returns the
    same path or raises the same error.
    For an ``s3://`` prefix the manifest is one object, ``PREFIX/shardload.manifest``,
    uploaded whole (the store shows the old object or the new one), holding the keys
    relative to the prefix and each object's size and ETag, never the store's options.

    Args:
        source: the directory that holds the shards, or an ``s3://bucket/prefix/``.
        checksum: ``"none"`` or ``"xxh3"`` (``"crc32c"`` is refused: no maintained CRC32C
            library is packaged for this build).
        pattern, format, dtype, trailing_shape, header_bytes, dataset, columns, fill_value,
            astype: as for :func:`shardload.discover`; they are recorded, and a later
            discovery that asks for other options probes the files instead.
        trust_manifest: checked as for :func:`shardload.discover`, and must be False: the
            files are probed, and an existing manifest is never consulted (ValueError).
        storage_options: object storage: options added to the query of an ``s3://`` source,
            as for :func:`shardload.discover`.

    Returns:
        The path of the manifest written.

    Raises:
        TypeError, ValueError: a bad argument (a source that is not a directory).
        LayoutError: the shards do not form a dataset, the directory changed while it was
            indexed, or the manifest cannot be written (the message names the file).
        ShardReadError: a file changed while its checksum was computed.
    """
    checked = _options("index", options)
    if checked.trust_manifest:
        raise ValueError("trust_manifest: index() probes every file to write a new manifest, "
                         "so no manifest can be trusted here; leave it out")
    cast = _astype(astype)
    directory = _directory(source, storage_options)
    if not isinstance(checksum, str):
        raise TypeError(f"checksum: expected a str, found {_found(checksum)}")
    if checksum not in _CHECKSUMS + ("crc32c",):
        raise ValueError(f"checksum: expected one of {', '.join(_CHECKSUMS)}, found "
                         f"{checksum!r}")

    if _job_ranks() > 1:
        # One rank probes and one writes (with checksums, reads every shard): the others
        # get its layout and its outcome, instead of each doing the whole job again.
        from . import _legate

        layout = _decoded(
            lambda o, dt: _discover_once(directory, o, dt, use_manifest=False), checked, cast,
            "index", cast_after=False)
        pattern = checked.pattern
        return _legate.write_manifest_once(layout, os.fsencode(directory), checksum,
                                           os.fsencode(pattern) if pattern else b"")

    def probe(o: _Options, dtype: str | None) -> Layout:
        # The files themselves: the manifest being replaced must not describe the dataset.
        return _made(_core.discover(directory, o.pattern, o.format_args(dtype), o.discovery,
                                    False))

    layout = _decoded(probe, checked, cast, "index", cast_after=False)
    return _core.write_manifest(layout, directory, checksum, checked.pattern)


def verify(source: str | bytes | os.PathLike, *, groups: int | None = None,
           on_host: bool = False,
           storage_options: StorageOptions | None = None) -> list[ChecksumMismatch]:
    """Checks every shard against the checksums of its manifest, and the directory's shards
    against the manifest's list of them (as discovery's check lists them).

    Args:
        source: the directory of the shards (its ``shardload.manifest``) or a manifest file;
            or an ``s3://``, ``http://`` or ``https://`` directory URL (ending in ``/``) or
            manifest object URL, whose objects are hashed through ranged reads.
        groups: points of the Legate launch, each hashing a range of shards (default four
            per CPU, at most one per shard).
        on_host: True hashes the files in this process instead (no Legate).
        storage_options: object storage: options added to the query of an ``s3://`` source,
            as for :func:`shardload.discover`.

    Returns:
        A :class:`ChecksumMismatch` for every shard whose checksum differs or that cannot be
        read, and for every shard the directory holds that the manifest does not list
        (``what`` "not in the manifest: added after indexing ...", ``shard`` its index in the
        directory's listing), and for every linked file (an HDF5 shard's external storage or
        virtual-dataset source file) whose snapshot differs from the manifest's (``what``
        "linked file of ...: changed after indexing ...", ``shard`` the shard's index), in
        shard order; an empty list when every checksum matches and the directory holds the
        manifest's shards and linked files as indexed. The same records, paths as str, with or
        without ``on_host``.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: ``groups`` < 1.
        LayoutError: the manifest is missing, damaged, or holds no checksums.
    """
    if not isinstance(source, (str, bytes, os.PathLike)):
        raise TypeError(f"source: expected a path, found {_found(source)}")
    _core.check_source(os.fspath(source))  # as discover() spells it out
    host = _bool("on_host", on_host)
    n = 0 if groups is None else _int("groups", groups)
    if groups is not None and n < 1:
        raise ValueError(f"groups: expected an int >= 1, found {n}")
    path = os.fsencode(_with_storage_options(  # type: ignore[arg-type]
        os.fspath(source), storage_options))
    if not _core.path_traits(path).kernel_files:
        # A directory URL means its manifest; the store's options (a URL's query) stay after
        # the key, as storage joins them.
        if not _core.split_options(path)[0].endswith("/" + MANIFEST_NAME):
            path = os.fsencode(_core.join_key(path, MANIFEST_NAME))
    elif os.path.isdir(path):
        path = os.path.join(path, os.fsencode(MANIFEST_NAME))
    if host:
        return [ChecksumMismatch(i, os.fsdecode(p), w)
                for i, p, w in _core.verify_on_host(path)]
    from . import _legate

    _check_thread("shardload.verify")
    _start_runtime()
    _shards, _groups, bad = _legate.verify(path, n)
    return [ChecksumMismatch(i, os.fsdecode(p), w) for i, p, w in bad]


def discover_once(
    source: str | bytes | os.PathLike,
    *,
    astype: DTypeLike | None = None,
    storage_options: StorageOptions | None = None,
    **options: Unpack[DiscoverOptions],
) -> Layout:
    """Discovers a dataset in one Legate task for the whole job.

    Under control replication every rank runs the program, and :func:`shardload.discover`
    would probe every shard on every rank. Here one point task discovers (from the manifest
    when there is a usable one) and every rank reads the encoded layout it produced, so the
    files are touched by one processor and every rank holds the same layout, snapshots
    included. Pass the result to :func:`shardload.load`. Starts the Legate runtime.

    Args:
        source: a directory, numbered pattern, glob or file (str, bytes or os.PathLike).
        options: discover()'s keywords (DiscoverOptions: pattern, format, the format and
            discovery options), astype and storage_options: as for
            :func:`shardload.discover`.

    Raises:
        TypeError, ValueError: a bad argument.
        LayoutError: as :func:`shardload.discover`.
    """
    if not isinstance(source, (str, bytes, os.PathLike)):
        raise TypeError(f"source: expected a path (str, bytes or os.PathLike), found "
                        f"{_found(source)}")
    source = _with_storage_options(source, storage_options)  # type: ignore[assignment]
    checked = _options("discover_once", options)
    cast = _astype(astype)
    _check_thread("shardload.discover_once")
    return _decoded(lambda o, dt: _discover_once(source, o, dt), checked, cast,
                    "discover_once", cast_after=False)


def _discover_once(source: str | bytes | os.PathLike, options: _Options,
                   dtype: str | None = None, *, use_manifest: bool = True) -> Layout:
    """discover_once() of checked options; ``dtype`` as in ``_Options.format_args``;
    ``use_manifest=False`` probes the files whatever manifest the directory has."""
    from . import _legate

    _start_runtime()
    pattern = options.pattern
    return _made(_legate.discover_once(
        os.fsencode(source), os.fsencode(pattern) if pattern else b"", options.discovery,
        options.format_args(dtype), use_manifest=use_manifest))


def _discover_for_job(source: object, options: _Options, dtype: str | None = None) -> Layout:
    """discover() in a process of its own; discover_once() on several ranks, so that one rank
    touches the files and every rank gets the same layout, or the same error (ranks that each
    discovered could disagree, one raising while the others went on into the launch).
    ``dtype`` as in :meth:`_Options.format_args`."""
    source = _source(source)
    if isinstance(source, (str, bytes, os.PathLike)) and _job_ranks() > 1:
        return _discover_once(source, options, dtype)
    return _discover(source, options, dtype)
