"""A live progress display for people at a terminal: ``cdc run`` during a snapshot and
``cdc snapshot --wait``.

Only when stderr is a terminal; otherwise nothing changes and the log events are the record.
The display reads the stored source offsets (:mod:`cdc.metrics.snapshot_report`) through a log of
its own, on a thread of its own, about twice a second: it never touches the running pipeline's
objects. While a snapshot runs it shows, per table, the chunks, rows, rows/s and ETA; once no
snapshot is left it says so in one line that stays, and shows the stream instead: its stored
position and how long ago that moved (the offsets carry no commit times, and "moving" is what
a person at 3 a.m. asks first).

Log events still appear: rich's ``Live`` swaps ``sys.stderr`` for a proxy that prints them
above the display (:func:`cdc.support.logging.configure` writes to whatever ``sys.stderr`` is).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from cdc.config.pipeline import Pipeline
from cdc.contracts.snapshot_offsets import stream_offsets
from cdc.metrics.snapshot_report import snapshot_report
from cdc.support.logging import get_logger
from cdc.support.redact import redact

REFRESH_S = 0.5
#: Roles of ``cdc run`` whose process runs the source (``sinks`` has no snapshot to show).
SOURCE_ROLES = ("all", "source")

_logger = get_logger(component="progress")


def enabled() -> bool:
    """A person is watching: stderr is a terminal."""
    return sys.stderr.isatty()


def progress_echo(echo: Callable[[str], None], shown: bool = True) -> Callable[[str], None]:
    """``echo`` for progress lines, or nothing where the live display shows them."""
    return _quiet if shown and enabled() else echo


def _quiet(_line: str) -> None:
    pass


_claimed = False


def claimed() -> bool:
    """This process's terminal shows :class:`ProgressDisplay`: a source's own progress bar
    (``snapshots.progress``) stays off it, or two displays would overwrite each other."""
    return _claimed


class TerminalProgress:
    """The display as a context: ``with`` shows it for the body's duration. Made before the
    pipeline starts, so that the terminal is claimed before any source opens.

    Args:
        role: ``cdc run``'s role; ``sinks`` runs no source, and gets no display.
        request: only this snapshot request's tables (``cdc snapshot --wait``).
        show: ``False``: no display (the call sites stay one ``with``).
    """

    def __init__(
        self, pipeline: Pipeline, role: str = "all", request: str | None = None, show: bool = True
    ) -> None:
        global _claimed
        wanted = show and role in SOURCE_ROLES and enabled()
        self._display = ProgressDisplay(pipeline, request) if wanted else None
        _claimed = _claimed or wanted

    def __enter__(self) -> TerminalProgress:
        if self._display is not None:
            self._display.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._display is not None:
            self._display.stop()

    def follow_lag(self, lag: Callable[[], float]) -> None:
        """Show the stream's lag (``cdc run``'s own source: :class:`cdc.metrics.lag.LagClock`)."""
        if self._display is not None:
            self._display.stream.lag = lag


class ProgressDisplay:
    """The live display's thread: open a log, read its offsets, render, until stopped."""

    def __init__(self, pipeline: Pipeline, request: str | None = None) -> None:
        self._pipeline = pipeline
        self._request = request
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self.stream = StreamWatch()
        self._snapshot_seen = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        from cdc.log.factory import open_log  # here: the thread opens, reads and closes it

        try:
            log = open_log(self._pipeline)
        except Exception as exc:  # a display must never take the pipeline down
            _logger.warning("progress.unavailable", error=str(exc))
            return
        console = Console(stderr=True)
        try:
            # stdout stays as it is: it may carry a command's output to a pipe.
            live = Live(console=console, transient=True, auto_refresh=False, redirect_stdout=False)
            with live:
                while True:
                    self._refresh(live, log)
                    if self._stop.wait(REFRESH_S):
                        return
        finally:
            log.close()

    def _refresh(self, live: Live, log: Any) -> None:
        try:
            offsets = log.source_offsets()
        except Exception as exc:  # the log is away for a moment: say so, try again
            note = f"progress: cannot read the log ({redact(str(exc))})"
            live.update(Text(note, style="yellow"))
            live.refresh()
            return
        rows = [r for r in snapshot_report(offsets) if self._wanted(r)]
        active = [r for r in rows if r["state"] in ("running", "queued")]
        if active:
            self._snapshot_seen = True
            live.update(snapshot_table(rows), refresh=True)
            return
        if self._snapshot_seen:  # it just ended: a line that stays above the display
            self._snapshot_seen = False
            live.console.print(snapshot_summary(rows))
        live.update(self.stream.render(offsets), refresh=True)

    def _wanted(self, row: Mapping[str, Any]) -> bool:
        return self._request is None or row.get("request") == self._request


def snapshot_table(rows: list[dict[str, Any]]) -> RenderableType:
    """Per table: state, chunks done of total, rows, rows/s, ETA."""
    table = Table("table", "state", "chunks", "rows", "rows/s", "ETA", title="snapshot")
    for row in rows:
        rate, eta = row.get("rows_per_s"), row.get("eta_s")
        table.add_row(
            str(row["table"]),
            str(row["state"]),
            f"{row.get('chunks_done', 0)}/{row.get('chunks_total', '?')}",
            f"{row.get('rows', 0):,}",
            "-" if rate is None else f"{rate:,.0f}",
            "-" if eta is None else _duration(float(eta)),
        )
    failed = [r for r in rows if r["state"] == "failed"]
    notes = [Text(f"failed: {r['table']}: {r.get('reason')}", style="red") for r in failed]
    return Group(table, *notes)


def snapshot_summary(rows: list[dict[str, Any]]) -> Text:
    done = [r for r in rows if r["state"] == "done"]
    total = sum(int(r.get("rows", 0)) for r in done)
    names = ", ".join(str(r["table"]) for r in done) or "no table"
    return Text(f"snapshot done: {names} ({total:,} rows)", style="green")


class StreamWatch:
    """The stream's stored position and when this display last saw it move."""

    def __init__(self) -> None:
        self._position: Any = None
        self._moved = time.monotonic()
        #: The stream's lag in seconds, when this process runs the source (else ``None``).
        self.lag: Callable[[], float] | None = None

    def render(self, offsets: Mapping[str, Any]) -> Text:
        position = stream_offsets(offsets)
        if not position:
            return Text("waiting for the source's first position...")
        if position != self._position:
            self._position, self._moved = position, time.monotonic()
        idle = time.monotonic() - self._moved
        where = f"position {_readable(position)}, moved {_duration(idle)} ago"
        if self.lag is None:
            return Text(f"streaming: {where}")
        return Text(f"streaming: lag {self.lag():.1f} s, {where}")


def _readable(position: Mapping[str, Any]) -> str:
    """``lsn_str`` where the source stores one (PostgreSQL), else the value as stored."""
    parts = []
    for key, value in sorted(position.items()):
        if isinstance(value, Mapping):  # a source's own entry; other keys are bookkeeping
            parts.append(f"{key} {value.get('lsn_str') or value}")
    return "; ".join(parts) or "stored"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"
