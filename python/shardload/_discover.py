"""discover(): finding and validating the shards of a source, and what a source is given with
(``storage_options=`` for object storage, ``reader=`` for a Python reader)."""

from __future__ import annotations

import os
from typing import Any, Unpack

from . import _core, _readers
from ._args import _PATH_TYPES, DTypeLike, SourceLike, _source
from ._layout import Layout, _made
from ._options import (_SECRET_OPTIONS, _STORAGE_OPTIONS, DiscoverOptions, StorageOptions,
                       _astype, _decoded, _Options, _options)


class _SealedUrl(str):
    """A URL sealed by :func:`_with_storage_options` (a str) that keeps its credentials in the
    process's table while it lives: the table forgets an entry no object pins once newer ones
    were sealed, and a source of many URLs is sealed before its discovery pins them. Pickled as
    the str it is."""

    def __new__(cls, url: str, pin: object) -> "_SealedUrl":
        self = super().__new__(cls, url)
        self._pin = pin
        return self

    def __reduce__(self) -> tuple:
        return (str, (str(self),))


def _utf8_option(key: str, value: object) -> None:
    """A ValueError naming the option where its key or str value is not UTF-8 text (holds a
    lone surrogate, as os.fsdecode spells a byte that is not UTF-8): the query is UTF-8, and
    urlencode's UnicodeEncodeError named neither. A secret's value is not shown."""
    for text, what in ((key, "key"), (value, "value")):
        if not isinstance(text, str):
            continue
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            where = "storage_options" if what == "key" else f"storage_options[{key!r}]"
            secret = what == "value" and key in _SECRET_OPTIONS
            shown = "(not shown: a secret)" if secret else repr(text)
            held = "" if secret else f", {text[e.start]!r}"
            raise ValueError(f"{where}: the {what} {shown} is not UTF-8 text (it holds a lone "
                             f"surrogate{held}, such as os.fsdecode makes of a byte that is not "
                             "UTF-8); a URL's query is UTF-8") from None


# The options a URL takes in its query (the store option table's rows,
# _options.StorageOptions), which ``storage_options=`` spells as a dict.
def _with_storage_options(source: object, storage_options: object) -> object:
    """``source`` with ``storage_options`` added to the query of each s3:// URL in it
    (``s3://bucket/dir/?endpoint_override=host:port&scheme=http``), which configures the
    store for every object under it, and of each http(s):// URL where every option is a row
    http(s) takes (the rest of such a query goes to the server, so no other key is added
    there). TypeError for options that are not a dict of str keys and str / int / bool values
    (a float too for a row of seconds); ValueError for a source without such URLs. On s3:// a
    key no row names is left to the store, which refuses it naming the URL. Each URL made is
    sealed at once (``_core.seal_store_url``): its secrets, those of ``storage_options`` and
    the URL's own, are named by a handle in the string handed on."""
    if storage_options is None:
        return source
    if not isinstance(storage_options, dict):
        # The type alone: pairs or a query string would show secret_key's value.
        raise TypeError("storage_options: expected a dict of str keys and str values, found "
                        f"{type(storage_options).__name__}")
    for k, v in storage_options.items():
        if not isinstance(k, str) or not k:
            raise TypeError(f"storage_options: expected non-empty str keys, found {k!r}")
        seconds = _STORAGE_OPTIONS.get(k) == "number"
        if not isinstance(v, (str, int, bool, float) if seconds else (str, int, bool)):
            # The type alone: the value may be a secret (secret_key's, session_token's).
            takes = "a str, int, float or bool" if seconds else "a str, int or bool"
            raise TypeError(f"storage_options[{k!r}]: expected {takes}, found "
                            f"{type(v).__name__}")
        _utf8_option(k, v)
    if not storage_options:
        return source
    from urllib.parse import urlencode

    query = urlencode({k: (str(v).lower() if isinstance(v, bool) else str(v))
                       for k, v in storage_options.items()})

    def one(path: object) -> object:
        # Which options the URL's store takes from its query is the store's answer (a str's:
        # bytes are a local path's spelling here).
        traits = _core.path_traits(path) if isinstance(path, str) else None
        takes = traits.storage_options if traits is not None else ()
        # Where the rest of the query is the server's, only the store's rows may join it.
        not_taken = [k for k in storage_options if k not in takes] \
            if traits is not None and traits.query_sent else []
        if takes and not not_taken:
            # Sealed at once: the string handed on names the URL's secrets by handle.
            return _SealedUrl(*_core.seal_store_url(path + ("&" if "?" in path else "?") + query,
                                                    pinned=True))
        shown = _core.redact_secrets(os.fsdecode(path)) if isinstance(path, _PATH_TYPES) else path
        if not_taken:
            verb = "applies" if len(not_taken) == 1 else "apply"
            raise ValueError(f"storage_options: {', '.join(not_taken)} {verb} to s3:// URLs only "
                             f"(an {traits.scheme_label} URL takes {', '.join(takes)}), "
                             f"found {shown!r}")
        raise ValueError("storage_options: apply to s3:// URLs only (and the retry, time "
                         f"and request options to http(s):// URLs), found {shown!r}")

    if isinstance(source, (list, tuple)):
        return [one(p) for p in source]
    return one(source)


def discover(
    source: SourceLike,
    *,
    astype: DTypeLike | None = None,
    storage_options: StorageOptions | None = None,
    **options: Unpack[DiscoverOptions],
) -> Layout:
    """Finds and validates the shards of a dataset without reading their data.

    Every argument is checked before any file is opened: a wrong type is a
    TypeError naming the parameter (a numpy integer counts as an int, a bool
    does not; nothing is truncated or split), a bad value a ValueError. The
    options left out (None) take their defaults; an empty string or list is
    refused rather than read as "left out".

    Args:
        source: a directory of numbered shards (default ``shard_0000.npy`` ...),
            a numbered pattern such as ``"dir/part-{:05d}.npy"``, a glob such as
            ``"dir/*.npy"`` (ordered naturally), or an ordered list (or tuple)
            of paths. Paths are str, bytes or os.PathLike, converted with
            os.fsencode, so names that are not UTF-8 work (``layout.paths``
            gives them back as os.fsdecode does). An existing directory or
            file is taken as such even when its name holds ``{`` ``*`` ``?``
            or ``[``; a path holding a NUL character is refused (ValueError).
            Each may also be a URL: ``s3://bucket/prefix/...`` (listed for a
            directory or glob) or ``http(s)://host/...`` (a directory, ending in
            ``/``, through its manifest, since HTTP has no listing); see
            docs/object_storage.md.
        pattern: the numbering of the files in a directory source (default
            ``shard_{:04d}`` with the format's extension).
        format: ``"auto"`` (from the extension or the store's metadata),
            ``"npy"``, ``"raw"``, ``"hdf5"``, ``"parquet"``, ``"arrow"``, ``"zarr"``,
            ``"npz"``.
        dtype: raw: the element type stored in the files. A str
            (``"float32"``, ``">f4"``), a numpy dtype or a numpy type
            (``np.float32``); a numpy dtype states a byte order only when it
            is not the machine's (``np.dtype(">f4")``). The other formats
            give their own (a ``dtype`` they are given is refused); for
            parquet/arrow ``dtype`` is a deprecated spelling of ``astype``.
        trailing_shape: raw: the shape of one row, a tuple of ints (``()`` for
            1-D data; an int n means ``(n,)``). ``shape=`` is its deprecated
            spelling.
        header_bytes: raw: bytes to skip at the start of each file (an int >= 0).
        footer_bytes: raw: bytes to skip at the end of each file (an int >= 0), such as
            the record length that ends a Fortran unformatted file's record
            (``header_bytes=4, footer_bytes=4`` reads one such record per file).
        dataset: hdf5: the dataset in each file; zarr: the array in each store;
            npz: the array in each archive (default: its only one). A name that is
            not UTF-8 is given as os.listdir and os.fsdecode give it (``'x\\udcff'``
            for the bytes ``b'x\\xff'``) and names those bytes, as a path does.
        columns: parquet/arrow: a list of column names (default: every numeric
            one); a bare str is refused, not split into letters. A name that is
            not UTF-8 is taken as ``dataset`` takes one.
        fill_value: parquet/arrow: the value for nulls (default: nulls are an
            error); a bool, int or float. It travels as a float64, so an int
            beyond 2**53 that float64 cannot hold exactly is refused; whether
            the dtype (after ``astype``) holds it the reader checks: 1.5 or 300
            for uint8 is refused, and so is a finite value that would turn inf
            (``1e300`` for float32, ``70000`` for float16); a float dtype may
            round it, and takes ``inf``, ``-inf`` and ``nan`` as written.
        trust_manifest: a directory source with a manifest (``DIR/shardload.manifest``,
            written by :func:`shardload.index`) is discovered from it when it was made with
            the same format options and every shard still matches it (npy, raw, Zarr: the
            header or metadata read and compared; HDF5, Parquet, Arrow, npz: size and times,
            one stat per file); else the files are probed and ``layout.manifest_status`` says
            why. True takes the manifest without touching any shard at all. See
            docs/manifest.md.
        probe_threads: threads probing the shards (an int from 0 to 1024; default 0: several
            for many npy or raw shards on a local file system, else one). More help on a
            network file system, where each probe waits on the server; the layout and the
            first bad shard reported are the same whatever the count.
        astype: parquet/arrow only: the type the columns are decoded into (the layout's
            dtype); numeric, native, one Legate has (see :func:`load`). For the other
            formats the files give the dtype, and ``astype`` is a ValueError here (pass it to
            :func:`load` or :func:`batches`, which cast the array).
        storage_options: object storage: options added to the query of each ``s3://`` URL
            in the source (typed by ``StorageOptions``: one key per row of the store
            option table, retries and time limits, ``access_key`` / ``secret_key`` /
            ``anonymous``, and Arrow's S3 URI options ``endpoint_override``, ``scheme``,
            ``region``, ...; docs/object_storage.md, "Store options"), e.g.
            ``{"endpoint_override": "127.0.0.1:9000", "scheme": "http"}``; without
            credentials among them, those of the AWS environment and credentials chain.
            An ``http(s)://`` URL takes the rows marked ``http(s)`` (retries, time limits,
            request sizes) likewise; any other key is a ValueError there.
            Every format (npy, raw, HDF5, Parquet, Arrow, Zarr, npz) is read from
            ``s3://`` and ``http(s)://`` URLs (see docs/object_storage.md).

    Returns:
        The layout: shard paths, rows per shard, dtype, shape, byte count.
        ``layout.read(lo, hi)`` reads rows [lo, hi) into a numpy array on the
        host (no Legate) and raises ShardReadError when reading fails.

    Raises:
        TypeError: an argument has the wrong type; the message names it.
        ValueError: an argument has a bad value (unknown format or dtype,
            negative size, empty string).
        LayoutError: the source or one of its files is not a valid dataset;
            the message names the file and what was expected and found.
    """
    source = _with_storage_options(_source(source), storage_options)
    checked = _options("discover", options)
    return _decoded(lambda o, dt: _discover(source, o, dt), checked, _astype(astype),
                    "discover", cast_after=False)


def _discover(source: object, options: _Options, dtype: str | None = None) -> Layout:
    """discover() of checked options in this process; ``dtype`` as in
    :meth:`_Options.format_args`."""
    return _made(_core.discover(source, options.pattern, options.format_args(dtype),
                                options.discovery))


def _reader_options(where: str, reader: str, source: object, given: dict[str, Any],
                    storage_options: object) -> dict[str, Any]:
    """The discovery options of ``reader=NAME``: a Python reader is a registered format, so
    reader=NAME is format=NAME, and a directory source without a pattern means the reader's
    numbered files. Only ``pattern`` may come with it (TypeError naming the others)."""
    found = _readers._reader(reader)
    passed = [n for n in given if n != "pattern"]
    passed += [name for name, value in (("storage_options", storage_options),
                                        ("a Layout", isinstance(source, Layout) or None))
               if value is not None]
    if passed:
        raise TypeError(f"{where}: {', '.join(passed)} cannot be passed with reader=, whose "
                        "functions say what the files hold")
    pattern = _readers._pattern(source, given.get("pattern"), found)
    return {"format": found.name, **({} if pattern is None else {"pattern": pattern})}
