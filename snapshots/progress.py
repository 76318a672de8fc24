"""Progress you can see: a rich progress bar on a terminal, ``snapshot.chunk_done`` log lines
otherwise. The composite source calls the reporter from its poll thread when a chunk's rows are
handed to the log; ``cdc status`` reads the same figures from the stored offsets instead."""

from __future__ import annotations

import sys
from typing import Any, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from cdc.metrics import progress
from cdc.support.logging import Logger


class Reporter(Protocol):
    def chunk_done(self, table: str, chunk: int, rows: int, figures: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class LogReporter:
    """One structured line per finished chunk."""

    def __init__(self, logger: Logger) -> None:
        self._logger = logger

    def chunk_done(self, table: str, chunk: int, rows: int, figures: dict[str, Any]) -> None:
        self._logger.info(
            "snapshot.chunk_done",
            table=table,
            chunk=chunk,
            rows=rows,
            chunks_done=figures["chunks_done"],
            chunks_total=figures["chunks_total"],
            table_rows=figures["rows"],
            rows_per_s=figures["rows_per_s"],
            eta_s=figures["eta_s"],
            kind=figures["kind"],
        )

    def close(self) -> None:
        return None


class RichReporter:
    """A progress bar per table: chunks done of total, rows, rows/s and time left."""

    def __init__(self) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rows]} rows, {task.fields[rate]} rows/s"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self._tasks: dict[str, Any] = {}
        self._progress.start()

    def chunk_done(self, table: str, chunk: int, rows: int, figures: dict[str, Any]) -> None:
        task = self._tasks.get(table)
        if task is None:
            task = self._tasks[table] = self._progress.add_task(
                f"snapshot {table}", total=figures["chunks_total"], rows=0, rate=0
            )
        self._progress.update(
            task,
            completed=figures["chunks_done"],
            rows=f"{figures['rows']:,}",
            rate=f"{figures['rows_per_s']:,.0f}",
        )

    def close(self) -> None:
        self._progress.stop()


class SilentReporter:
    """Nothing: ``cdc run``'s own display (:mod:`cdc.metrics.progress`) shows the stored figures."""

    def chunk_done(self, table: str, chunk: int, rows: int, figures: dict[str, Any]) -> None:
        return None

    def close(self) -> None:
        return None


def reporter(logger: Logger) -> Reporter:
    """The bar on a terminal (unless ``cdc run`` shows its display there), log lines
    otherwise."""
    if sys.stderr.isatty():
        return SilentReporter() if progress.claimed() else RichReporter()
    return LogReporter(logger)
