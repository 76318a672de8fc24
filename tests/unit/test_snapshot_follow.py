"""``cdc snapshot --wait``'s follow loop (cdc.metrics.snapshot_report.follow_request) over stored
progress as a source commits it, on a manual clock: the lines it prints, the outcome it returns,
the timeout, a cancel's wait (pure)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cdc.contracts import snapshot_offsets as so
from cdc.metrics.snapshot_report import FOLLOW_INTERVAL_S, follow_request
from cdc.testing import ManualClock

QUEUED = {so.RUN_KEY: {"id": "r1"}, "snapshot.request/r1": {"id": "r1", "table": "public.t"}}
TABLE = {"kind": "incremental", "request": "r1", "chunks_total": 2, "rows": 0, "done": []}


def running(done: list[list[int]], rows: int) -> dict[str, Any]:
    return {
        so.RUN_KEY: {"id": "r1"},
        so.table_key("public.t"): {**TABLE, "done": done, "rows": rows},
    }


def finished(key: str) -> dict[str, Any]:
    return running([[0, 1]], 2500) | {so.RUN_KEY: {"id": "r1", key: ["r1"]}}


def reads(*stored: Mapping[str, Any]) -> Callable[[], Mapping[str, Any]]:
    """The stored offsets one read after another, the last one from then on."""
    seen = list(stored)
    return lambda: seen.pop(0) if len(seen) > 1 else seen[0]


def test_it_prints_each_new_figure_once_and_returns_the_outcome() -> None:
    lines: list[str] = []
    clock = ManualClock()
    stored = reads(
        QUEUED,
        running([], 0),
        running([[0, 0]], 1000),
        running([[0, 0]], 1000),  # nothing new: no line
        finished("finished"),
    )
    outcome = follow_request(stored, "r1", None, lines.append, clock=clock)
    assert outcome == "done"
    assert lines == [
        "public.t: 0/? chunks, 0 rows",
        "public.t: 0/2 chunks, 0 rows",
        "public.t: 1/2 chunks, 1,000 rows",
        "public.t: 2/2 chunks, 2,500 rows",
    ]
    assert set(clock.sleeps) == {FOLLOW_INTERVAL_S}


def test_a_request_that_does_not_end_in_time_gives_none() -> None:
    clock = ManualClock()
    assert follow_request(reads(QUEUED), "r1", 3.0, lambda _: None, clock=clock) is None
    assert clock.now == 3.0  # looked once more at the deadline


def test_a_cancel_waits_for_the_cancel_whatever_else_the_request_reached() -> None:
    clock = ManualClock()
    stored = reads(finished("finished"), finished("finished"), finished("cancelled"))
    outcome = follow_request(stored, "r1", 10.0, lambda _: None, cancel=True, clock=clock)
    assert outcome == "cancelled"
    assert clock.now == 2 * FOLLOW_INTERVAL_S


def test_a_failure_is_an_outcome_with_its_reason() -> None:
    failure = {"id": "r1", "table": "public.t", "reason": "no such column"}
    stored = {so.RUN_KEY: {"id": "r1", "failed": [failure]}}
    outcome = follow_request(reads(stored), "r1", 1.0, lambda _: None, clock=ManualClock())
    assert outcome == "failed: no such column"
