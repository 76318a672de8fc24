"""What a whole-sink rebuild reports: started with the counts, progress lines, then finished.

The end to end behaviour (Redis loses its data, ``cdc run`` rebuilds it) is
tests/e2e/test_redis_data_loss.py; here only the report's arithmetic and pacing, with a logger
that records the events it is given.
"""

from __future__ import annotations

from typing import Any

import pytest

from cdc.log.base import TopicPartition
from cdc.runtime import sink_rebuild
from cdc.runtime.sink_rebuild import WholeRebuild


class Events:
    """Records ``logger.<level>(event, **fields)`` calls."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, **fields: self.seen.append((event, fields))

    def named(self, event: str) -> list[dict[str, Any]]:
        return [fields for name, fields in self.seen if name == event]


def test_a_rebuild_reports_its_counts_progress_and_end(monkeypatch: pytest.MonkeyPatch) -> None:
    events = Events()
    requests = {"r1": ("public.a", "p.public.a"), "r2": ("public.b", "p.public.b")}
    whole = WholeRebuild(events, requests, "redis lost this sink's data")  # type: ignore[arg-type]
    [started] = events.named("sink.rebuild.started")
    assert started == {"tables": 2, "topics": 2, "reason": "redis lost this sink's data"}

    whole.reset("r1", {0: 60, 1: 40})
    whole.reset("r2", {0: 100})
    monkeypatch.setattr(sink_rebuild, "PROGRESS_EVERY_S", 0.0)
    whole.note({TopicPartition("p.public.a", 0): 60, TopicPartition("p.public.b", 0): 25})
    [line] = events.named("sink.rebuild.progress")
    assert line["offsets_read"] == 85 and line["offsets_total"] == 200
    assert line["percent"] == 42.5 and line["tables_done"] == 0

    whole.done("r1")
    whole.done("r2")
    assert whole.finished()
    whole.note({TopicPartition("p.public.b", 0): 100})
    [end] = events.named("sink.rebuild.finished")
    assert end["tables"] == 2 and end["topics"] == 2 and end["offsets"] == 200


def test_progress_lines_are_paced(monkeypatch: pytest.MonkeyPatch) -> None:
    events = Events()
    whole = WholeRebuild(events, {"r1": ("public.a", "p.public.a")}, "lost")  # type: ignore[arg-type]
    whole.reset("r1", {0: 10})
    for _ in range(5):  # within the first PROGRESS_EVERY_S: no line
        whole.note({TopicPartition("p.public.a", 0): 5})
    assert not events.named("sink.rebuild.progress")
    assert not events.named("sink.rebuild.finished")
