"""Snapshot progress as ``cdc status`` and ``cdc snapshot --wait`` show it.

Read from the stored source offsets (``"snapshot"``, written by the source with each chunk's
records), so it works from any process while the pipeline runs. Rates and ETAs are the ones the
source stored at its last finished chunk; ``age_s`` says how old they are.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

OFFSET_KEY = "snapshot"


def _done(entry: Mapping[str, Any]) -> int:
    return sum(int(last) - int(first) + 1 for first, last in entry.get("done") or [])


def snapshot_report(offsets: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per table: kind, chunks done of total, rows, rows/s, ETA, request id."""
    state = offsets.get(OFFSET_KEY)
    if not isinstance(state, Mapping):
        return []
    now_ms = int(time.time() * 1000)
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
                "age_s": round((now_ms - int(entry.get("updated_ms", now_ms))) / 1000, 1),
            }
        )
    pending = [
        {"table": r.get("table"), "request": r.get("id"), "state": "queued"}
        for r in state.get("requests") or []
    ]
    return report + pending


def request_finished(offsets: Mapping[str, Any], request_id: str) -> bool:
    """The stored offsets record request ``request_id`` as done."""
    state = offsets.get(OFFSET_KEY)
    return isinstance(state, Mapping) and request_id in (state.get("finished") or [])


def print_snapshots(report: list[dict[str, Any]], console: Console | None = None) -> None:
    """The report as a table (nothing when no snapshot was ever stored)."""
    if not report:
        return
    table = Table("snapshot table", "kind", "state", "chunks", "rows", "rows/s", "ETA")
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
    (console or Console()).print(table)
