"""A batch in which a watermark window closes is cut at the high watermark.

The window's rows are handed on as records (appended after the batch's events), so what the
stream brought after the high watermark must come in the next poll, and only that last part may
carry the commit offsets. The inner source here is a scripted stand-in for PostgresSource (no
server: the weaving is pure bookkeeping over the batches it returns); the watermark state, the
snapshot state and the record encoding are the real ones.
"""

from __future__ import annotations

import threading
from typing import Any

import structlog

from cdc.envelope import encode_key
from cdc.events import ChangeEvent
from cdc.log.base import Record
from cdc.source import SourceBatch, SourceContext
from cdc.testing import make_event
from connectors.postgres import PostgresSourceConfig
from connectors.postgres import pgoutput as pg
from connectors.postgres.catalog import TableInfo
from connectors.postgres.pgoutput import Relation, RelationColumn
from connectors.postgres.relations import build_state
from connectors.postgres.types import TypeRegistry
from snapshots.channel import WATERMARK, Channel
from snapshots.chunks import KeyChunk
from snapshots.incremental import ChunkJob, OpenWindow
from snapshots.progress import LogReporter
from snapshots.reader import SnapshotTable
from snapshots.state import SnapshotState
from snapshots.streaming import StreamSnapshots

TABLE = "public.items"


class ScriptedInner:
    """Batches with watermark messages at given places, as PostgresSource's hooks report them."""

    def __init__(self, script: list[tuple[list[ChangeEvent], list[tuple[int, str]], Any]]) -> None:
        self.message_hooks: dict[str, Any] = {}
        self.pending_events = 0
        self._script = script

    def poll(self, max_events: int, timeout_s: float) -> SourceBatch:
        if not self._script:
            return SourceBatch()
        events, marks, offsets = self._script.pop(0)
        hook = self.message_hooks[Channel("p").prefix(WATERMARK)]
        for index, content in marks:
            self.pending_events = index
            message = pg.LogicalMessage(True, 100 + index, "p.wm", content.encode())
            hook(message, 100 + index)
        return SourceBatch(events=events, commit_offsets=offsets)


def _streaming(inner: ScriptedInner) -> StreamSnapshots:
    config = PostgresSourceConfig.model_validate(
        {"type": "postgres", "dsn": "postgresql://u@localhost:1/db", "tables": [TABLE]}
    )
    logger = structlog.get_logger()
    context = SourceContext(pipeline="p", log=None, logger=logger)  # type: ignore[arg-type]
    state = SnapshotState()
    state.plan_table(TABLE, "incremental", "keyset", [KeyChunk(0, None, None)], request="r1")
    return StreamSnapshots(
        config,
        context,
        inner,
        state,
        LogReporter(logger),
        logger,
        Channel("p"),  # type: ignore[arg-type]
    )


def _open_window(streaming: StreamSnapshots, keys: list[int]) -> None:
    columns = (RelationColumn(True, "id", 23, -1),)
    info = TableInfo("public", "items", 7, "d", ("id",))
    state = build_state(
        "p", info, Relation(7, "public", "items", "d", columns), TypeRegistry(), None, set(), 0
    )
    rows = {encode_key({"id": k}): ({"id": k}, {"id": k}, encode_key({"id": k})) for k in keys}
    job = ChunkJob(SnapshotTable(info, state, ("id",)), KeyChunk(0, None, None), None)
    windows, reader = streaming._windows, streaming._reader
    windows.expect("w1", TABLE)
    reader.open_windows["w1"] = OpenWindow(job, threading.Event())
    windows.deliver("w1", rows)


def _keys(records: Any) -> list[bytes | None]:
    return [r.key for r in records]


def test_the_batch_is_cut_at_a_closing_window_and_commits_only_at_its_end() -> None:
    changed, later = make_event(5, table="items"), make_event(6, table="items")
    offsets = {"postgres": {"lsn": 999}}
    inner = ScriptedInner([([changed, later], [(0, "low:w1"), (1, "high:w1")], offsets)])
    streaming = _streaming(inner)
    _open_window(streaming, [5, 7])

    first = streaming.poll(100, 0.0)
    assert [e.key for e in first.events] == [{"id": 5}]  # before the high watermark
    assert _keys(first.records) == [b'{"id":7}']  # key 5 changed inside the window: dropped
    assert all(isinstance(r, Record) and r.topic == "p.public.items" for r in first.records)
    assert first.commit_offsets is None  # the same log transaction goes on

    second = streaming.poll(100, 0.0)
    assert [e.key for e in second.events] == [{"id": 6}]  # after it, in the next poll
    assert not second.records
    assert second.commit_offsets is not None
    assert second.commit_offsets["postgres"] == {"lsn": 999}
    assert second.commit_offsets["snapshot"]["tables"][TABLE]["done"] == [[0, 0]]
    assert streaming.poll(100, 0.0).empty  # nothing held back any more


def test_a_window_closing_last_needs_no_cut() -> None:
    event = make_event(1, table="items")
    offsets = {"postgres": {"lsn": 500}}
    inner = ScriptedInner([([event], [(0, "low:w1"), (1, "high:w1")], offsets)])
    streaming = _streaming(inner)
    _open_window(streaming, [2, 3])

    batch = streaming.poll(100, 0.0)
    assert [e.key for e in batch.events] == [{"id": 1}]
    assert _keys(batch.records) == [b'{"id":2}', b'{"id":3}']
    assert batch.commit_offsets is not None and batch.commit_offsets["postgres"] == {"lsn": 500}
    assert streaming.poll(100, 0.0).empty
