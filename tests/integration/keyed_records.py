"""Records for the Redis and search sink tests, built the way the runner builds them.

Events go through :mod:`cdc.envelope.encode` (as the source task encodes them) and back through
``orjson.loads`` (as :func:`cdc.runtime.sink_task.decode_records` decodes them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from cdc.contracts.events import ChangeEvent, Op, SourceInfo, topic_name
from cdc.contracts.schema import Column, TableSchema
from cdc.contracts.sink import Sink, SinkContext, SinkRecord
from cdc.envelope import encode as envelope
from cdc.log.base import Log
from cdc.runtime.sink_task import SinkTask, group_name
from cdc.support.logging import get_logger
from cdc.testing import wait_until

PIPELINE = "shop"
ITEMS = ("public", "items")
ORDERS = ("public", "orders")
#: Values no keyed sink may apply: an unknown op, no or a bad position, an upsert without a row.
NOT_ENVELOPES: list[dict[str, Any]] = [
    {"op": "x", "source": {"pos": [1, 0]}, "after": {}},
    {"op": ["c"], "source": {"pos": [1, 0]}, "after": {}},
    {"op": "c", "after": {"id": 1}},
    {"op": "c", "source": {"pos": [1]}, "after": {"id": 1}},
    {"op": "c", "source": {"pos": ["1", 0]}, "after": {"id": 1}},
    {"op": "c", "source": {"pos": [-1, 0]}, "after": {"id": 1}},
    {"op": "u", "source": {"pos": [1, 0]}, "after": None},
]

ITEMS_SCHEMA = TableSchema(
    "test",
    *ITEMS,
    columns=(
        Column("id", "bigint", key=True, nullable=False),
        Column("name", "text"),
        Column("body", "character varying(200)"),
        Column("price", "numeric(10,2)"),
        Column("qty", "integer"),
        Column("at", "timestamp with time zone"),
    ),
)
ORDERS_SCHEMA = TableSchema(
    "test",
    *ORDERS,
    columns=(
        Column("region", "text", key=True, nullable=False),
        Column("no", "integer", key=True, nullable=False),
        Column("note", "text"),
    ),
)


class Schemas:
    """A schema lookup the tests change (an added column)."""

    def __init__(self) -> None:
        self.current = {ITEMS: ITEMS_SCHEMA, ORDERS: ORDERS_SCHEMA}

    def get(self, schema: str, table: str) -> TableSchema | None:
        return self.current.get((schema, table))


def context(schemas: Schemas | None = None, sink: str = "s1") -> SinkContext:
    return SinkContext(PIPELINE, sink, [ITEMS, ORDERS], schemas or Schemas(), get_logger(sink=sink))


def event(
    op: Op,
    key: dict[str, Any],
    pos: int,
    table: tuple[str, str] = ITEMS,
    seq: int = 0,
    **row: Any,
) -> ChangeEvent:
    """A change of ``table`` at source position ``(pos, seq)``; ``row`` adds to the key."""
    source = SourceInfo("test", "db", table[0], table[1], 0, pos, seq)
    if op is Op.DELETE:
        return ChangeEvent(op, key, dict(key), None, source)
    if op is Op.TRUNCATE:
        return ChangeEvent(op, {}, None, None, source)
    return ChangeEvent(op, key, None, {**key, **row}, source)


def item(op: Op, id_: int, pos: int, **row: Any) -> ChangeEvent:
    return event(op, {"id": id_}, pos, ITEMS, **row)


class Records:
    """Turns events into records with increasing offsets on partition 0 of each topic."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def __call__(self, *events: ChangeEvent) -> list[SinkRecord]:
        out = []
        for ev in events:
            for record in envelope.to_records(ev, PIPELINE, now_ms=0):
                offset = self._next.get(record.topic, 0)
                self._next[record.topic] = offset + 1
                value = None if record.value is None else orjson.loads(record.value)
                key = orjson.loads(record.key) if record.key is not None else None
                out.append(SinkRecord(record.topic, 0, offset, key, value, pos=record.pos))
        return out

    def tombstone(self, key: dict[str, Any], table: tuple[str, str] = ITEMS) -> SinkRecord:
        topic = topic_name(PIPELINE, *table)
        offset = self._next.get(topic, 0)
        self._next[topic] = offset + 1
        return SinkRecord(topic, 0, offset, key, None)


def apply(sink: Sink, records: Sequence[SinkRecord]) -> None:
    sink.write(records)
    sink.flush()


def fill_log(log: Log, events: Sequence[ChangeEvent]) -> None:
    """Append ``events`` to the log in one transaction, as the source task would."""
    log.ensure_topics([topic_name(PIPELINE, *ITEMS), topic_name(PIPELINE, *ORDERS)])
    tx = log.begin()
    tx.append([r for e in events for r in envelope.to_records(e, PIPELINE, now_ms=0)])
    tx.commit()


class TaskThread:
    """A real :class:`SinkTask` running in a thread; ``error`` holds what stopped it."""

    def __init__(self, log: Log, factory: Callable[[], Sink], name: str = "s1") -> None:
        self.log = log
        self.name = name
        self.stop = threading.Event()
        self.error: BaseException | None = None
        topics = [topic_name(PIPELINE, *ITEMS), topic_name(PIPELINE, *ORDERS)]
        self.task = SinkTask(
            PIPELINE,
            name,
            log,
            factory,
            topics,
            self.stop,
            get_logger(sink=name),
            max_records=50,
            poll_timeout_s=0.05,
        )
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.task.run()
        except BaseException as exc:
            self.error = exc

    def committed(self) -> int:
        return sum(self.log.committed_offsets(group_name(PIPELINE, self.name)).values())

    def wait_committed(self, count: int, timeout_s: float = 60) -> None:

        def reached() -> bool:
            if self.committed() >= count:
                return True
            assert self.error is None, f"the sink task stopped: {self.error!r}"
            return False

        wait_until(reached, timeout_s, describe=lambda: f"{count} commits ({self.committed()})")

    def wait_stopped(self, timeout_s: float = 30) -> BaseException | None:
        self.thread.join(timeout_s)
        assert not self.thread.is_alive()
        return self.error

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
