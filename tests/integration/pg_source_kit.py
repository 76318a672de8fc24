"""Drive a PostgresSource directly into a real EmbeddedLog (see tests.integration.source_kit)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from cdc.contracts.events import ChangeEvent
from connectors.postgres import PostgresSource, PostgresSourceConfig, drop_replication_objects
from tests.integration.source_kit import SourceHarness

PIPELINE = "pgt"


def sql(dsn: str, *statements: str, params: Sequence[Any] | None = None) -> None:
    """Run statements in one autocommit connection (each its own transaction)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement, params)


def query(dsn: str, statement: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(statement, params).fetchall()


class Harness(SourceHarness[PostgresSource]):
    """A PostgreSQL source, its log, and what it emitted so far."""

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
        super().__init__(PIPELINE, log_dir, on_bad_record, snapshot)
        self.dsn = dsn
        self.config = PostgresSourceConfig.model_validate(
            {
                "type": "postgres",
                "dsn": dsn,
                "tables": list(tables),
                "snapshot": snapshot,
                **options,
            }
        )

    def new_source(self) -> PostgresSource:
        return PostgresSource(self.config, self.context)

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
