"""Drive a PostgresSource directly into a real EmbeddedLog, as the runtime's source task does:
poll -> append (schemas + records) -> store offsets -> commit -> ack."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import structlog

from cdc import envelope
from cdc.events import ChangeEvent, topic_name
from cdc.log.base import LogTransaction
from cdc.log.embedded import EmbeddedLog
from cdc.schema import TableSchema, schema_record, schema_topic
from cdc.source import DeadLetter, SourceContext
from connectors.postgres import PostgresSource, PostgresSourceConfig, drop_replication_objects

PIPELINE = "pgt"


def sql(dsn: str, *statements: str, params: Sequence[Any] | None = None) -> None:
    """Run statements in one autocommit connection (each its own transaction)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement, params)


def query(dsn: str, statement: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(statement, params).fetchall()


class Harness:
    """A source, its log, and what it emitted so far."""

    def __init__(
        self,
        dsn: str,
        log_dir: Path,
        tables: Sequence[str],
        *,
        on_bad_record: str = "fail",
        snapshot: str = "never",
        **options: Any,
    ) -> None:
        self.dsn = dsn
        self.log = EmbeddedLog(log_dir)
        self.config = PostgresSourceConfig.model_validate(
            {
                "type": "postgres",
                "dsn": dsn,
                "tables": list(tables),
                "snapshot": snapshot,
                **options,
            }
        )
        self.context = SourceContext(
            pipeline=PIPELINE,
            log=self.log,
            logger=structlog.get_logger(),
            on_bad_record=on_bad_record,
            snapshot_mode=snapshot,
        )
        self.source: PostgresSource | None = None
        self.events: list[ChangeEvent] = []
        self.schemas: list[TableSchema] = []
        self.dead: list[DeadLetter] = []
        self.commits: list[dict[str, Any]] = []
        self._tx: LogTransaction | None = None

    def open(self) -> PostgresSource:
        self.source = PostgresSource(self.config, self.context)
        self.source.open(self.log.source_offsets())
        topics = [topic_name(PIPELINE, s, t) for s, t in self.source.tables()]
        self.log.ensure_topics([*topics, schema_topic(PIPELINE)])
        return self.source

    def close(self) -> None:
        if self._tx is not None:
            self._tx.abort()
            self._tx = None
        if self.source is not None:
            self.source.close()
            self.source = None

    def step(self, timeout_s: float = 0.2, max_events: int = 5000) -> int:
        """One poll, appended and committed like the runtime does; returns events seen."""
        assert self.source is not None
        batch = self.source.poll(max_events, timeout_s)
        if batch.empty:
            return 0
        self._tx = self._tx or self.log.begin()
        records = [schema_record(PIPELINE, s) for s in batch.schemas]
        for event in batch.events:
            records.extend(envelope.to_records(event, PIPELINE))
        if records:
            self._tx.append(records)
        self.events.extend(batch.events)
        self.schemas.extend(batch.schemas)
        self.dead.extend(batch.dead_letters)
        if batch.commit_offsets is not None:
            self._tx.store_offsets(batch.commit_offsets)
            self._tx.commit()
            self._tx = None
            self.commits.append(dict(batch.commit_offsets))
            self.source.ack(batch.commit_offsets)
        return len(batch.events)

    def run_until(
        self, done: Callable[[], bool], timeout_s: float = 30.0, settle_s: float = 0.0
    ) -> list[ChangeEvent]:
        """Step until ``done()`` (then ``settle_s`` more), failing after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; {len(self.events)} events so far")
            self.step()
        end = time.monotonic() + settle_s
        while time.monotonic() < end:
            self.step()
        return self.events

    def collect(self, count: int, timeout_s: float = 30.0) -> list[ChangeEvent]:
        """Step until at least ``count`` events arrived and their transaction committed."""
        return self.run_until(lambda: len(self.events) >= count and self._tx is None, timeout_s)

    def drop(self) -> None:
        self.close()
        drop_replication_objects(self.config, PIPELINE)
        self.log.close()


@contextmanager
def harness(dsn: str, log_dir: Path, tables: Sequence[str], **options: Any) -> Iterator[Harness]:
    """A harness whose slot and publication are dropped at exit."""
    h = Harness(dsn, log_dir, tables, **options)
    try:
        yield h
    finally:
        h.drop()


def rows_of(events: Sequence[ChangeEvent], table: str) -> list[ChangeEvent]:
    return [e for e in events if e.source.table == table]


def slot_flush(dsn: str, slot: str = f"{PIPELINE}_slot") -> int:
    """The slot's confirmed_flush_lsn as an int (0 when missing)."""
    found = query(
        dsn,
        "SELECT (confirmed_flush_lsn - '0/0')::int8 FROM pg_replication_slots WHERE slot_name=%s",
        (slot,),
    )
    return int(found[0][0]) if found else 0
