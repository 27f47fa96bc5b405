"""Starting the Legate runtime, once, from the main thread (SIGINT given back to Python's
handler), and the checks every Legate entry point makes first: the ``legate`` extra installed,
the main thread, dimensions a Legate array can have."""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import sys
import threading
from typing import Sequence

from . import _runtime
from ._core import Layout
from ._errors import RuntimeStartError

logger = logging.getLogger("shardload")


# Realm installs a SIGINT handler that prints a backtrace and aborts the
# process (Legate asks for it through REALM_BACKTRACE), so Ctrl-C would kill
# a Python session even while it idles. shardload gives SIGINT back to the
# handler Python had, once, when it first sees the runtime started; the
# freeze-on-error debugging modes, which need Realm's handler, keep it.
_FREEZE_VARIABLES = ("REALM_FREEZE_ON_ERROR", "LEGION_FREEZE_ON_ERROR")
_runtime_ready = False


def _import_h5py_first() -> None:
    """Imports h5py, when it is installed, before cuPyNumeric starts.

    cuPyNumeric loads its library with RTLD_GLOBAL, which puts Legate's own HDF5 into the
    process's global symbol scope; an h5py imported after that binds to that HDF5 instead of
    its own and fails ("ValueError: Not a datatype"). Imported first, h5py keeps its own, so
    ``import h5py`` after ``shardload.load`` works. Nothing can be done once cuPyNumeric was
    imported before shardload started it: then h5py must be imported before cuPyNumeric.
    """
    if "h5py" in sys.modules or "cupynumeric" in sys.modules:
        return
    if importlib.util.find_spec("h5py") is None:
        return
    try:
        import h5py  # noqa: F401
    except Exception as e:  # a broken h5py must not stop a load that does not need it
        logger.debug("importing h5py before cuPyNumeric failed: %r", e)


def _import_cupynumeric() -> None:
    """Starts the Legate runtime (cuPyNumeric starts it on import). A start that fails raises
    one RuntimeStartError of a few lines, not Legate's report of a hundred lines and more."""
    try:
        with _runtime.held_start_output():
            import cupynumeric  # noqa: F401
    except Exception as e:
        raise RuntimeStartError(_runtime.start_failure(e), str(e)) from None


def _start_runtime() -> None:
    global _runtime_ready
    if _runtime_ready:
        return
    _require_legate("starting Legate")
    _import_h5py_first()
    previous = signal.getsignal(signal.SIGINT)
    if previous is None or any(os.environ.get(v, "0") not in ("", "0")
                               for v in _FREEZE_VARIABLES):
        _import_cupynumeric()
        _runtime_ready = True
        return
    # While the runtime starts, a Ctrl-C is held back: noted by a handler
    # that does not interrupt the import, or left pending by the mask (which
    # the runtime's threads inherit, so they never take SIGINT later either),
    # then delivered to the restored handler once the runtime is up.
    noted: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        _import_cupynumeric()
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    _runtime_ready = True
    if noted:
        signal.raise_signal(signal.SIGINT)


# How the usual launchers (Open MPI's mpirun, MPICH / PMI, Slurm's srun, MVAPICH) tell a process
# how many processes its job has. Seen with a value above 1, the runtime is asked for its ranks.
_JOB_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS",
                       "MV2_COMM_WORLD_SIZE")


def _job_ranks() -> int:
    """The number of Legate ranks of this job. A process that no launcher started as one of
    several is alone: the runtime is not started to ask."""
    if not any(os.environ.get(v, "").strip() not in ("", "0", "1") for v in _JOB_SIZE_VARIABLES):
        return 1
    _start_runtime()
    from legate.core import get_legate_runtime

    return int(get_legate_runtime().node_count)


def _first_rank() -> bool:
    """Whether this process is its job's first Legate rank (a process alone is)."""
    if _job_ranks() == 1:
        return True
    from legate.core import get_legate_runtime

    return int(get_legate_runtime().node_id) == 0


def _require_legate(what: str) -> None:
    """Refuses a call that runs under Legate where the ``legate`` extra is not installed, with
    an ImportError naming the call and the extra (instead of a loader error about liblegate)."""
    if not _runtime.legate_installed():
        raise ImportError(f"{what} {_runtime.LEGATE_MISSING}", name="legate")


def _check_thread(what: str) -> None:
    """Refuses a call from a thread other than the main one, and one without Legate installed;
    ``what`` names the call (each Legate entry point calls this first)."""
    _require_legate(what)
    current = threading.current_thread()
    if current is not threading.main_thread():
        raise RuntimeError(
            f"{what} was called from thread {current.name!r}; it works only in the main "
            "thread: Legate takes launches only from the thread that started its runtime, and "
            "elsewhere it aborts the process (discover() and Layout.read() work in any thread)")


def _check_legate_dims(layout: Layout) -> None:
    """Refuses a layout of more dimensions than a Legate array can have, before the runtime
    starts: the launchers' own check (``shardload::check_legate_dims``), so that the message
    is theirs and no Legate error report comes first. Host reads (:meth:`Layout.read`) take
    any number of dimensions."""
    from . import _legate

    if len(layout.shape) > _legate.MAX_DIMS:
        _legate.check_layout_dims(layout)  # raises LayoutError


def _check_shape_dims(shape: Sequence[int], what: str, *, write: bool = False) -> None:
    """:func:`_check_legate_dims` for an array's shape; ``what`` names the array. A
    ValueError with ``write``, else a LayoutError."""
    from . import _legate

    if len(shape) > _legate.MAX_DIMS:
        _legate.check_dims([int(d) for d in shape], what, write)
