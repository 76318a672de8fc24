"""Snapshot progress as ``cdc status`` and ``cdc snapshot --wait`` show it.

Read from the stored source offsets (:mod:`cdc.contracts.snapshot_offsets`, written by the source
with each chunk's records), so it works from any process while the pipeline runs. Rates and ETAs are
the ones the source stored at its last finished chunk; ``age_s`` says how old they are. Requests
that failed are listed with their reason until ``cdc snapshot --cancel`` removes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.table import Column, Table

from cdc.contracts.snapshot_offsets import SnapshotProgress, TableProgress, read
from cdc.support.clock import SYSTEM_CLOCK, Clock, now_ms
from cdc.support.wait import WaitTimeout, wait_until

FOLLOW_INTERVAL_S = 0.5  # how often --wait reads the stored progress again


def snapshot_report(offsets: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per table: kind, chunks done of total, rows, rows/s, ETA, request id."""
    return report_rows(read(offsets))


def report_rows(state: SnapshotProgress | None) -> list[dict[str, Any]]:
    """The rows of :func:`snapshot_report` (``cdc status --json``'s ``"snapshot"``), from the
    typed progress; tables first, then queued, then failed requests."""
    if state is None:
        return []
    now = now_ms()
    return (
        [_table(t, now) for t in state.tables]
        + [{"table": q.table, "request": q.id, "state": "queued"} for q in state.queued]
        + [
            {
                "table": f.table,
                "request": f.id,
                "state": "failed",
                "reason": f.reason,
                "where": f.where,
                "rows": f.rows,
                "failed_ms": f.failed_ms,
            }
            for f in state.failed
        ]
    )


def _table(table: TableProgress, now: int) -> dict[str, Any]:
    updated = now if table.updated_ms is None else table.updated_ms
    return {
        "table": table.table,
        "kind": table.kind,
        "method": table.method,
        "chunks_done": table.chunks_done,
        "chunks_total": table.chunks_total,
        "rows": table.rows,
        "rows_per_s": table.rows_per_s,
        "eta_s": None if table.done else table.eta_s,
        "state": "done" if table.done else "running",
        "request": table.request,
        "age_s": round((now - updated) / 1000, 1),
    }


def request_outcome(offsets: Mapping[str, Any], request_id: str) -> str | None:
    """How request ``request_id`` ended: ``done``, ``failed: <reason>``, ``cancelled``, or
    ``None`` while it has not."""
    state = read(offsets)
    return None if state is None else state.outcome(request_id)


def open_requests(offsets: Mapping[str, Any]) -> dict[str, str]:
    """Request id to state (``queued``, ``running``, ``failed``) of every request that a
    cancel can still drop."""
    return {
        str(row["request"]): str(row["state"])
        for row in snapshot_report(offsets)
        if row.get("request") and row["state"] != "done"
    }


def request_finished(offsets: Mapping[str, Any], request_id: str) -> bool:
    """The stored offsets record request ``request_id`` as done."""
    state = read(offsets)
    return state is not None and request_id in state.finished


def print_snapshots(report: list[dict[str, Any]], console: Console | None = None) -> None:
    """The report as a table (nothing when no snapshot was ever stored)."""
    if not report:
        return
    headers = ("snapshot table", "kind", "state", "chunks", "rows", "rows/s", "ETA")
    table = Table(*(Column(h, overflow="fold") for h in headers))  # a name folds, never cut
    for row in report:
        eta = row.get("eta_s")
        rate = row.get("rows_per_s")
        table.add_row(
            str(row["table"]),
            str(row.get("kind") or "-"),
            str(row["state"]),
            f"{row.get('chunks_done', 0)}/{row.get('chunks_total', '?')}",
            f"{row.get('rows', 0):,}",
            "-" if rate is None else f"{rate:,.0f}",
            "-" if eta is None else f"{eta:,.0f} s",
        )
    console = console or Console()
    console.print(table)
    for row in report:  # the ids `cdc snapshot --cancel` takes, each on its own line
        if row.get("request") and row["state"] != "done":
            reason = f": {row['reason']}" if row.get("reason") else ""
            line = f"  request {row['request']} {row['table']} {row['state']}{reason}"
            console.print(line, markup=False, highlight=False)


def follow_request(
    read_offsets: Callable[[], Mapping[str, Any]],
    request_id: str,
    timeout_s: float | None,
    echo: Callable[[str], None],
    cancel: bool = False,
    clock: Clock = SYSTEM_CLOCK,
) -> str | None:
    """Wait until request ``request_id`` ends, printing its progress (``cdc snapshot --wait``).

    Args:
        read_offsets: the stored source offsets, read again each time.
        timeout_s: ``None``: wait as long as it takes.
        cancel: wait for the request's cancel to be applied (``request_id`` may then be the
            cancel signal's own id, for ``--cancel-all``), whatever state it is in until then.

    Returns:
        The outcome (see :func:`request_outcome`), or ``None`` at the timeout.
    """
    shown = [""]

    def ended() -> str | None:
        state = read(read_offsets())
        line = _request_line(state, request_id)
        if line and line != shown[0]:
            echo(line)
            shown[0] = line
        outcome = None if state is None else state.outcome(request_id)
        return None if cancel and outcome != "cancelled" else outcome

    limit = math.inf if timeout_s is None else timeout_s
    what = f"snapshot request {request_id}"
    try:
        return wait_until(ended, limit, FOLLOW_INTERVAL_S, clock=clock, describe=what)
    except WaitTimeout:
        return None


def _request_line(state: SnapshotProgress | None, request_id: str) -> str:
    """The request's tables' chunks and rows, one line (a queued one's chunks are unknown)."""
    if state is None:
        return ""
    tables = [
        f"{t.table}: {t.chunks_done}/{t.chunks_total} chunks, {t.rows:,} rows"
        for t in state.tables
        if t.request == request_id
    ]
    queued = [f"{q.table}: 0/? chunks, 0 rows" for q in state.queued if q.id == request_id]
    return ", ".join(tables + queued)
