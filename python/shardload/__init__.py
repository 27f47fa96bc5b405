"""shardload: load a dataset stored as many shard files into one array.

:func:`discover` finds and validates the shards; :func:`load` reads them in
parallel into one distributed ``cupynumeric.ndarray`` under Legate. Host
reads of a row range (``layout.read(lo, hi)``) work without Legate.
"""

from __future__ import annotations

# First, before anything loads Legate: the stand-in driver and a CPU configuration where this
# machine has no NVIDIA driver (see _runtime).
from . import _runtime

_runtime.prepare_process()


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("shardload")
    except metadata.PackageNotFoundError:
        pass
    # A development tree, used through the venv's .pth: CMakeLists.txt is the one source.
    import re
    from pathlib import Path

    cmake = Path(__file__).resolve().parents[2] / "CMakeLists.txt"
    try:
        found = re.search(r"project\(shardload VERSION ([0-9.]+)", cmake.read_text())
    except OSError:
        found = None
    return found.group(1) if found else "unknown"


__version__ = _version()

from ._errors import (  # noqa: E402
    Error,
    LayoutError,
    OutOfMemoryError,
    ShardReadError,
    SourceNotFoundError,
)
from ._layout import Layout, ManifestState  # noqa: E402
from ._info import LoadInfo, LoadProgress  # noqa: E402
from ._discover import discover  # noqa: E402
from ._api import load  # noqa: E402
from ._readers import register_reader, registered_readers  # noqa: E402
from ._batches import BatchIterator, batches  # noqa: E402
from ._manifest import ChecksumMismatch, discover_once, index, verify  # noqa: E402
from ._errors import DestinationExistsError, RuntimeStartError, ShardWriteError  # noqa: E402
from ._save import SaveInfo, save  # noqa: E402
from ._core import redact_secrets  # noqa: E402

__all__ = [
    "__version__",
    "BatchIterator",
    "batches",
    "Error",
    "Layout",
    "LayoutError",
    "LoadInfo",
    "LoadProgress",
    "OutOfMemoryError",
    "ShardReadError",
    "SourceNotFoundError",
    "discover",
    "load",
    "register_reader",
    "registered_readers",
    "ChecksumMismatch",
    "index",
    "verify",
    "discover_once",
    "DestinationExistsError",
    "SaveInfo",
    "ShardWriteError",
    "save",
    "RuntimeStartError",
    "ManifestState",
    "redact_secrets",
]
