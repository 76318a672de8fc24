"""Snapshot progress as ``cdc status`` and ``cdc snapshot --wait`` show it.

Read from the stored source offsets (:mod:`cdc.contracts.snapshot_offsets`, written by the source
with each chunk's records), so it works from any process while the pipeline runs. Rates and ETAs are
the ones the source stored at its last finished chunk; ``age_s`` says how old they are. Requests
that failed are listed with their reason until ``cdc snapshot --cancel`` removes them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.table import Column, Table

from cdc.contracts.snapshot_offsets import progress
from cdc.support.clock import now_ms


def _done(entry: Mapping[str, Any]) -> int:
    return sum(int(last) - int(first) + 1 for first, last in entry.get("done") or [])


def snapshot_report(offsets: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per table: kind, chunks done of total, rows, rows/s, ETA, request id."""
    state = progress(offsets)
    if state is None:
        return []
    return _tables(state, now_ms()) + _queued(state) + _failed(state)


def _tables(state: Mapping[str, Any], now: int) -> list[dict[str, Any]]:
    report = []
    for name, entry in sorted((state.get("tables") or {}).items()):
        done, total = _done(entry), int(entry.get("chunks_total", 0))
        report.append(
            {
                "table": name,
                "kind": entry.get("kind"),
                "method": entry.get("method"),
                "chunks_done": done,
                "chunks_total": total,
                "rows": entry.get("rows", 0),
                "rows_per_s": entry.get("rows_per_s"),
                "eta_s": None if done >= total else entry.get("eta_s"),
                "state": "done" if done >= total else "running",
                "request": entry.get("request"),
                "age_s": round((now - int(entry.get("updated_ms", now))) / 1000, 1),
            }
        )
    return report


def _queued(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"table": r.get("table"), "request": r.get("id"), "state": "queued"}
        for r in state.get("requests") or []
    ]


def _failed(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "table": f.get("table"),
            "request": f.get("id"),
            "state": "failed",
            "reason": f.get("reason"),
            "where": f.get("where"),
            "rows": f.get("rows", 0),
            "failed_ms": f.get("failed_ms"),
        }
        for f in state.get("failed") or []
    ]


def request_outcome(offsets: Mapping[str, Any], request_id: str) -> str | None:
    """How request ``request_id`` ended: ``done``, ``failed: <reason>``, ``cancelled``, or
    ``None`` while it has not."""
    state = progress(offsets)
    if state is None:
        return None
    if request_id in (state.get("cancelled") or []):
        return "cancelled"
    if request_id in (state.get("finished") or []):
        return "done"
    for failure in state.get("failed") or []:
        if failure.get("id") == request_id:
            return f"failed: {failure.get('reason')}"
    return None


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
    state = progress(offsets)
    return state is not None and request_id in (state.get("finished") or [])


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
) -> str | None:
    """Wait until request ``request_id`` ends, printing its progress (``cdc snapshot --wait``).

    Args:
        read_offsets: the stored source offsets, read again each time.
        cancel: wait for the request's cancel to be applied (``request_id`` may then be the
            cancel signal's own id, for ``--cancel-all``), whatever state it is in until then.

    Returns:
        The outcome (see :func:`request_outcome`), or ``None`` at the timeout.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    last = ""
    while True:
        offsets = read_offsets()
        rows = [r for r in snapshot_report(offsets) if r.get("request") == request_id]
        line = ", ".join(
            f"{r['table']}: {r.get('chunks_done', 0)}/{r.get('chunks_total', '?')} chunks, "
            f"{r.get('rows', 0):,} rows"
            for r in rows
            if r["state"] != "failed"
        )
        if line and line != last:
            echo(line)
            last = line
        outcome = request_outcome(offsets, request_id)
        if cancel and outcome != "cancelled":
            outcome = None
        if outcome is not None:
            return outcome
        if deadline is not None and time.monotonic() > deadline:
            return None
        time.sleep(0.5)
