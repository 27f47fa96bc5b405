"""The package's exceptions. The C++ side raises them (python/src/errors.hpp) from the one
mapping of a status to an exception, shardload::throw_status."""

from __future__ import annotations


class Error(Exception):
    """Base of every exception shardload raises for a bad dataset, a failed read or a load
    that does not fit; ``str(e)`` is the message, which names the file and what was found."""

    def __str__(self) -> str:
        # OSError's own __str__ would show errno and filename instead of the message.
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()

    def __reduce__(self) -> tuple:
        # OSError pickles a one-argument error as its args alone, so an error sent from another
        # process (a dask.distributed worker) would arrive without its filename and errno.
        state = dict(self.__dict__)
        if isinstance(self, OSError):
            for name in ("errno", "filename", "filename2"):
                if getattr(self, name) is not None:
                    state[name] = getattr(self, name)
        return (type(self), self.args, state or None)


class LayoutError(Error, ValueError):
    """The shards do not form a valid dataset (missing, mismatched, malformed); a ValueError."""


class ShardReadError(Error, OSError):
    """Reading a shard failed: an I/O error, a file changed since discovery, or data found
    damaged (or null) while reading; an OSError whose ``filename`` is the file, where known."""


class SourceNotFoundError(LayoutError, FileNotFoundError):
    """The source (a directory, a numbered pattern's directory) does not exist: a LayoutError
    and a FileNotFoundError, with ``filename`` the missing path."""


class OutOfMemoryError(Error, MemoryError):
    """The dataset does not fit the memory Legate has for the processors of the load (checked
    before anything is allocated); a MemoryError."""


class ShardWriteError(Error, OSError):
    """Saving failed: the destination cannot be created or written, something that is not a
    regular file is in the way, or a write failed; an OSError whose ``filename`` is the file,
    where known. Nothing of the new dataset is visible when it is raised."""


class DestinationExistsError(ShardWriteError, FileExistsError):
    """The save's destination is not empty and ``overwrite=False``, or it holds files that no
    save writes (which ``overwrite=True`` refuses to delete): a ShardWriteError and a
    FileExistsError."""


class RuntimeStartError(Error, RuntimeError):
    """Legate did not start (a configuration this machine cannot run, a missing library): the
    message gives Legate's own first line and the fix; the full report is ``legate_report``."""

    def __init__(self, message: str, legate_report: str = "") -> None:
        super().__init__(message)
        self.legate_report = legate_report
