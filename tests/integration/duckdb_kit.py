"""A small harness for the DuckDB sink tests: events built as the runner builds them, a sink over
one DuckDB file, and its rows read back.

Records are events encoded by :mod:`cdc.envelope.encode`, then decoded with orjson, as the runner
does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from cdc.contracts.events import ChangeEvent, Op, SourceInfo, topic_name
from cdc.contracts.schema import Column, TableSchema
from cdc.contracts.sink import SinkContext, SinkRecord
from cdc.envelope import encode as envelope
from cdc.support.logging import get_logger
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig, read_rows

PIPELINE = "shop"


@dataclass
class Schemas:
    tables: dict[tuple[str, str], TableSchema] = field(default_factory=dict)

    def get(self, schema: str, table: str) -> TableSchema | None:
        return self.tables.get((schema, table))

    def publish(self, table: str, *columns: Column, schema: str = "public") -> None:
        self.tables[(schema, table)] = TableSchema("postgresql", schema, table, columns)


def event(
    op: Op,
    key: dict[str, Any],
    row: dict[str, Any] | None,
    pos: int,
    seq: int = 0,
    table: str = "items",
    schema: str = "public",
    ts_ms: int = 1_700_000_000_000,
) -> ChangeEvent:
    source = SourceInfo("postgresql", "db", schema, table, ts_ms + pos, pos, seq)
    if op is Op.DELETE:
        return ChangeEvent(op, key, row or key, None, source)
    if op is Op.TRUNCATE:
        return ChangeEvent(op, {}, None, None, source)
    return ChangeEvent(op, key, None, row, source)


def item(op: Op, key: int, pos: int, name: str = "", qty: int = 0, **extra: Any) -> ChangeEvent:
    """A change of ``public.items``; a delete carries only the key, as by default in PostgreSQL."""
    if op is Op.DELETE:
        return event(op, {"id": key}, None, pos)
    return event(op, {"id": key}, {"id": key, "name": name, "qty": qty, **extra}, pos)


class Harness:
    """A sink over one DuckDB file; ``apply`` writes and flushes events as the runner would."""

    def __init__(self, path: Path, mode: str = "current") -> None:
        self.path = path
        self.mode = mode
        self.schemas = Schemas()
        self.schemas.publish("items", *ITEM_COLUMNS)
        self.offsets: dict[tuple[str, int], int] = {}
        self.sink = self.new_sink()

    def new_sink(self) -> DuckDBSink:
        config = DuckDBSinkConfig(name="wh", path=str(self.path), mode=self.mode)  # type: ignore[arg-type]
        context = SinkContext(PIPELINE, "wh", [], self.schemas, get_logger(sink="wh"))
        sink = DuckDBSink(config, context)
        sink.open()
        return sink

    def reopen(self) -> None:
        self.sink.close()
        self.sink = self.new_sink()

    def records(self, *events: ChangeEvent, partition: int = 0) -> list[SinkRecord]:
        out = []
        for e in events:
            for r in envelope.to_records(e, PIPELINE, now_ms=0):
                tp = (r.topic, partition)
                offset = self.offsets.get(tp, 0)
                self.offsets[tp] = offset + 1
                value = None if r.value is None else orjson.loads(r.value)
                out.append(
                    SinkRecord(
                        r.topic, partition, offset, orjson.loads(r.key or b"{}"), value, pos=r.pos
                    )
                )
        return out

    def apply(self, *events: ChangeEvent, partition: int = 0) -> list[SinkRecord]:
        records = self.records(*events, partition=partition)
        self.write(records)
        return records

    def write(self, records: list[SinkRecord]) -> None:
        self.sink.write(records)
        self.sink.flush()

    def rows(self, table: str = "items", schema: str = "public") -> dict[Any, dict[str, Any]]:
        out = {}
        for key, row in read_rows(self.path, schema, table):
            out[key["id"] if "id" in key else orjson.dumps(key)] = row
        return out

    def sql(self, query: str) -> list[tuple[Any, ...]]:
        con = self.sink._con
        result: list[tuple[Any, ...]] = con.execute(query).fetchall()
        return result


ITEM_COLUMNS = (
    Column("id", "bigint", key=True, nullable=False),
    Column("name", "text"),
    Column("qty", "integer"),
)
TOPIC = topic_name(PIPELINE, "public", "items")


def names(h: Harness) -> dict[int, tuple[str, int]]:
    return {k: (r["name"], r["qty"]) for k, r in h.rows().items()}
