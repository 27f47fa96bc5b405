"""What a load reports: :class:`LoadInfo` (returned with ``info=True``) and :class:`LoadProgress`
(given to ``progress=``), the same for every front end."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Callable, Optional

@dataclasses.dataclass(frozen=True)
class LoadInfo:
    """What a load did, returned by ``load(..., info=True)``.

    The plan: ``target`` (``"GPU"``, ``"OMP"`` or ``"CPU"``), ``processors`` (P),
    ``overdecompose`` (K), ``tile_rows`` and ``tiles`` (the launch). The size: ``total_rows``
    and ``bytes`` of the array. The times, in seconds of the wall clock:

    - ``discovery_s``: finding and checking the shards (0.0 when a Layout was passed);
    - ``startup_s``: starting the Legate runtime (0.0 after the first load);
    - ``launch_s``: from the call into the adapter to the launch (planning, the memory check,
      creating the array);
    - ``fill_s``: from the launch until every tile is filled (the load waits for every tile's
      error record);
    - ``total_s``: the whole call, argument checks included.

    ``gb_per_s`` is ``bytes / 1e9 / total_s``: the whole call, as for :class:`SaveInfo`.

    ``remote_retries``: requests to object storage (``s3://``) that were retried during the
    call, discovery and fill, after a 5xx, a SlowDown, a reset connection or a timeout (see
    docs/object_storage.md); counted in this process. 0 for local files.
    """

    target: str
    processors: int
    overdecompose: int
    tile_rows: int
    tiles: int
    total_rows: int
    bytes: int
    discovery_s: float
    startup_s: float
    launch_s: float
    fill_s: float
    total_s: float
    remote_retries: int = 0

    @property
    def gb_per_s(self) -> float:
        """Bytes per second of the whole call (``total_s``), in GB (1e9 bytes)."""
        return self.bytes / 1e9 / self.total_s if self.total_s > 0 else 0.0

    @property
    def rows(self) -> int:
        """Deprecated spelling of :attr:`total_rows`."""
        warnings.warn("LoadInfo.rows is deprecated; use LoadInfo.total_rows",
                      DeprecationWarning, stacklevel=2)
        return self.total_rows


@dataclasses.dataclass(frozen=True)
class LoadProgress:
    """One report to ``load(..., progress=callback)``, at the end of a stage.

    ``stage`` is ``"discovered"`` (the shards are found and checked), ``"started"`` (the
    runtime is up; also on loads after the first), ``"launching"`` (the launch is about to be
    submitted) or ``"filled"`` (every tile is filled). ``tiles_done`` of ``tiles`` and
    ``bytes_done`` of ``bytes`` say how far the data is; ``tiles`` is None until the plan is
    known, which is only when the load returns from Legate. ``elapsed_s`` counts from the
    call.

    Legate gives the caller no signal as a tile completes (the launch is one operation that
    returns when all of its tasks have finished), so ``tiles_done`` and ``bytes_done`` go
    from 0 to all at once, at ``"filled"``: progress is reported at stage boundaries only.
    """

    stage: str
    tiles_done: int
    tiles: Optional[int]
    bytes_done: int
    bytes: int
    elapsed_s: float


ProgressCallback = Callable[[LoadProgress], object]


class ProgressBar:
    """``progress=True``: a bar of the bytes filled on stderr (tqdm: the ecosystem's habit, on
    a terminal and in notebooks), fed :class:`LoadProgress` reports; closed at ``"filled"`` or
    by :meth:`close` (after an error). ``where`` names the call in its label and errors. It
    shows the bytes, their rate (GB/s) and, given ``total_rows``, the rows filled (the bytes
    over the bytes of a row: every row has the same size)."""

    @staticmethod
    def require(where: str) -> None:
        """Raises the ImportError of a bar without tqdm. A job of several processes calls it
        on each, though only one draws: every process then fails alike (a Legate rank that
        went on alone would wait for the others for ever)."""
        try:
            import tqdm.auto  # noqa: F401
        except ImportError:
            raise ImportError(f"{where}: progress=True draws its bar with tqdm, which is not "
                              "installed (pip install tqdm)") from None

    def __init__(self, total_bytes: int, where: str, total_rows: Optional[int] = None) -> None:
        ProgressBar.require(where)
        from tqdm.auto import tqdm

        self._rows = total_rows
        self._total = total_bytes
        self._bar = tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1000,
                         desc=where, leave=False,
                         postfix=None if total_rows is None else f"0/{total_rows} rows")

    def __call__(self, report: LoadProgress) -> None:
        if self._rows is not None:
            rows = report.bytes_done * self._rows // self._total if self._total else self._rows
            self._bar.set_postfix_str(f"{rows}/{self._rows} rows", refresh=False)
        self._bar.update(report.bytes_done - self._bar.n)
        if report.stage == "filled":
            self._bar.refresh()  # the full bar, whatever the redraw interval held back
            self._bar.close()

    def close(self) -> None:
        self._bar.close()

