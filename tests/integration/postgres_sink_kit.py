"""A small harness for the PostgreSQL sink tests: events built as the runner builds them, a sink
over schema ``replica`` of a target database, and SQL against that database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import psycopg

from cdc.contracts.events import ChangeEvent, topic_name
from cdc.contracts.schema import Column
from cdc.contracts.sink import SinkContext, SinkRecord
from cdc.envelope import encode as envelope
from cdc.support.logging import get_logger
from sinks.postgres import PostgresSink, PostgresSinkConfig
from tests.integration.duckdb_kit import PIPELINE, Schemas

SCHEMA = "replica"


class Harness:
    """A sink over ``dsn``'s schema ``replica``; ``public.items`` (id, name, qty) published."""

    def __init__(self, dsn: str, sink: str = "wh", **options: Any) -> None:
        self.dsn = dsn
        self.config = PostgresSinkConfig(name=sink, dsn=dsn, schema=SCHEMA, **options)
        self.schemas = Schemas()
        self.schemas.publish(
            "items",
            Column("id", "bigint", key=True, nullable=False),
            Column("name", "text"),
            Column("qty", "integer"),
        )
        self.next_offset: dict[tuple[str, int], int] = {}
        self.sink = self._open()

    def _open(self) -> PostgresSink:
        tables = [(s, t) for s, t in self.schemas.tables] or [("public", "items")]
        context = SinkContext(
            PIPELINE, self.config.name, tables, self.schemas, get_logger(sink=self.config.name)
        )
        sink = PostgresSink(self.config, context)
        sink.open()
        return sink

    def reopen(self) -> None:
        self.sink.close()
        self.sink = self._open()

    def close(self) -> None:
        self.sink.close()

    def records(self, *events: ChangeEvent, partition: int = 0) -> list[SinkRecord]:
        return records_of(events, self.next_offset, partition)

    def write(self, records: Sequence[SinkRecord]) -> None:
        self.sink.write(records)
        self.sink.flush()

    def apply(self, *events: ChangeEvent) -> list[SinkRecord]:
        records = self.records(*events)
        self.write(records)
        return records

    def sql(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(query.encode(), params)  # tests' own literal SQL
            return cur.fetchall() if cur.description else []

    def names(self, table: str = "items") -> dict[int, tuple[Any, Any]]:
        rows = self.sql(f"SELECT id, name, qty FROM {SCHEMA}.{table}")
        return {r[0]: (r[1], r[2]) for r in rows}


def records_of(
    events: Sequence[ChangeEvent], next_offset: dict[tuple[str, int], int], partition: int = 0
) -> list[SinkRecord]:
    """``events`` as the runner hands them over: encoded, decoded, at the next offsets of
    ``partition`` (``next_offset`` is advanced)."""
    out = []
    for event in events:
        topic = topic_name(PIPELINE, event.source.schema, event.source.table)
        for record in envelope.to_records(event, PIPELINE, now_ms=0):
            offset = next_offset.get((topic, partition), 0)
            next_offset[(topic, partition)] = offset + 1
            value = None if record.value is None else orjson.loads(record.value)
            key = orjson.loads(record.key or b"null")
            out.append(SinkRecord(topic, partition, offset, key, value, pos=record.pos))
    return out
