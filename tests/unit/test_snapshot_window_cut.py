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

from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.contracts.snapshot_offsets import table_key
from cdc.contracts.source import SourceBatch, SourceContext
from cdc.envelope.encode import encode_key
from cdc.log.base import Record
from cdc.testing import make_event
from connectors.postgres import PostgresSourceConfig
from connectors.postgres import pgoutput as pg
from connectors.postgres.assembly.relation_state import build_state
from connectors.postgres.catalog import TableInfo
from connectors.postgres.pgoutput import Relation, RelationColumn
from connectors.postgres.snapshot.channel import WATERMARK, Channel
from connectors.postgres.snapshot.incremental import ChunkJob, OpenWindow
from connectors.postgres.snapshot.reader import SnapshotTable
from connectors.postgres.snapshot.streaming import StreamSnapshots
from connectors.postgres.types import TypeRegistry
from snapshots.chunks import KeyChunk
from snapshots.progress import LogReporter
from snapshots.state import SnapshotState

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


def _streaming(inner: ScriptedInner, channel: Channel | None = None) -> StreamSnapshots:
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
        channel or Channel("p"),
    )


def _open_window(streaming: StreamSnapshots, keys: list[int], wid: str = "w1") -> None:
    columns = (RelationColumn(True, "id", 23, -1),)
    info = TableInfo("public", "items", 7, "d", ("id",))
    state = build_state(
        "p", info, Relation(7, "public", "items", "d", columns), TypeRegistry(), None, set(), 0
    )
    rows = {encode_key({"id": k}): ({"id": k}, encode_key({"id": k})) for k in keys}
    job = ChunkJob(SnapshotTable(info, state, ("id",)), KeyChunk(0, None, None), None)
    windows, reader = streaming._windows, streaming._reader
    windows.expect(wid, TABLE)
    reader.open_windows[wid] = OpenWindow(job, threading.Event())
    windows.deliver(wid, rows)


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
    assert second.commit_offsets[table_key(TABLE)]["done"] == [[0, 0]]  # the table's own key
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


def test_two_windows_closing_in_one_batch_cut_it_twice() -> None:
    a, b, c = (make_event(k, table="items") for k in (1, 2, 3))
    marks = [(0, "low:w1"), (0, "low:w2"), (1, "high:w1"), (2, "high:w2")]
    inner = ScriptedInner([([a, b, c], marks, None), ([], [], {"postgres": {"lsn": 7}})])
    streaming = _streaming(inner)
    _open_window(streaming, [1, 2, 3, 4], "w1")
    _open_window(streaming, [1, 2, 3, 5], "w2")

    parts = [streaming.poll(100, 0.0) for _ in range(4)]
    order = []  # what the runtime appends, in order
    for part in parts:
        order += [e.key["id"] for e in part.events] + [r.key for r in part.records]
    # w1 drops key 1 (changed inside it); w2 drops 1 and 2; key 3 changed after both closed.
    assert order == [1, b'{"id":2}', b'{"id":3}', b'{"id":4}', 2, b'{"id":3}', b'{"id":5}', 3]
    assert [p.commit_offsets is None for p in parts] == [True, True, True, False]
    assert parts[3].commit_offsets is not None
    assert parts[3].commit_offsets["postgres"] == {"lsn": 7}


def test_a_window_left_without_rows_does_not_cut_the_batch() -> None:
    a, b = make_event(1, table="items"), make_event(2, table="items")
    offsets = {"postgres": {"lsn": 9}}
    inner = ScriptedInner([([a, b], [(0, "low:w1"), (1, "high:w1")], offsets)])
    streaming = _streaming(inner)
    _open_window(streaming, [1], "w1")  # its only key changed inside it

    batch = streaming.poll(100, 0.0)
    assert [e.key["id"] for e in batch.events] == [1, 2] and not batch.records
    assert batch.commit_offsets is not None


def test_with_a_signal_table_a_hooks_watermark_keeps_its_place() -> None:
    # The low watermark is a row of the signal table (taken out of the batch); the high one a
    # logical message between keys 5 and 6, counted with that row still in the batch.
    signals = ("public", "cdc_signals")
    row = ChangeEvent(
        Op.CREATE,
        {"id": 1},
        None,
        {"id": 1, "kind": "wm", "payload": "low:w1"},
        SourceInfo("postgresql", "db", "public", "cdc_signals", 0, 50, 0),
    )
    five, six = make_event(5, table="items"), make_event(6, table="items")
    offsets = {"postgres": {"lsn": 60}}
    inner = ScriptedInner([([row, five, six], [(2, "high:w1")], offsets)])
    streaming = _streaming(inner, Channel("p", signals))
    _open_window(streaming, [5, 6, 7], "w1")

    first = streaming.poll(100, 0.0)
    assert [e.key["id"] for e in first.events] == [5]
    assert _keys(first.records) == [b'{"id":6}', b'{"id":7}']  # 6 changed after the window
    second = streaming.poll(100, 0.0)
    assert [e.key["id"] for e in second.events] == [6]
    assert second.commit_offsets is not None


def test_a_state_change_while_idle_is_committed_at_the_position_last_handed_on() -> None:
    offsets = {"postgres": {"lsn": 42}}
    inner = ScriptedInner([([make_event(1, table="items")], [], offsets)])
    streaming = _streaming(inner)
    assert streaming.poll(100, 0.0).commit_offsets is not None
    assert streaming.poll(100, 0.0).empty  # nothing changed since
    streaming._state.fail(TABLE, "r1", None, "division by zero")
    flushed = streaming.poll(100, 0.0)
    assert flushed.commit_offsets is not None
    assert flushed.commit_offsets["postgres"] == {"lsn": 42}
    assert flushed.commit_offsets["snapshot"]["failed"][0]["reason"] == "division by zero"
    assert not flushed.events and not flushed.records


def test_no_state_commit_inside_a_transaction_still_handed_on() -> None:
    inner = ScriptedInner(
        [
            ([make_event(1, table="items")], [], {"postgres": {"lsn": 42}}),
            ([make_event(2, table="items")], [], None),  # a large transaction, in pieces
        ]
    )
    streaming = _streaming(inner)
    streaming.poll(100, 0.0)
    assert streaming.poll(100, 0.0).commit_offsets is None
    streaming._state.fail(TABLE, "r1", None, "boom")
    assert streaming.poll(100, 0.0).empty
