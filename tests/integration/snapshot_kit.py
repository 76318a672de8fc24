"""Run the snapshotting PostgreSQL source through the real runtime source task into a real
embedded log, in a thread; read the topics back as the per-key state they describe."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import psycopg
import structlog

from cdc.events import topic_name
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.source_task import SourceTask
from cdc.source import SourceContext
from connectors.postgres import PostgresSourceConfig, drop_replication_objects
from connectors.postgres.snapshot.source import SnapshottingPostgresSource

PIPELINE = "snp"


def execute(dsn: str, *statements: str, params: Sequence[Any] | None = None) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement, params)  # type: ignore[arg-type]


def table_state(dsn: str, table: str, key: str = "id") -> dict[Any, dict[str, Any]]:
    """The table as ``{key: row}``, with values as the source's converters produce them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT to_jsonb(t) FROM {table} t").fetchall()  # test-only SQL
    return {row[0][key]: row[0] for row in rows}


class Pipeline:
    """A source task running in a thread; ``sources`` are the sources it built, in order."""

    def __init__(self, dsn: str, log_dir: Path, tables: Sequence[str], **options: Any) -> None:
        self.dsn = dsn
        self.tables = list(tables)
        self.log = EmbeddedLog(log_dir)
        self.config = PostgresSourceConfig.model_validate(
            {"type": "postgres", "dsn": dsn, "tables": self.tables, **options}
        )
        self.context = SourceContext(
            pipeline=PIPELINE,
            log=self.log,
            logger=structlog.get_logger(),
            snapshot_mode=self.config.snapshot,
        )
        self.sources: list[SnapshottingPostgresSource] = []
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def _factory(self) -> SnapshottingPostgresSource:
        source = SnapshottingPostgresSource(self.config, self.context)
        self.sources.append(source)
        return source

    def start(self) -> None:
        self.stop_event.clear()
        self.task = SourceTask(
            PIPELINE, self.log, self._factory, self.stop_event, structlog.get_logger()
        )

        def body() -> None:
            try:
                self.task.run()
            except BaseException as exc:
                self.error = exc

        self._thread = threading.Thread(target=body, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None

    def offsets(self) -> dict[str, Any]:
        return self.log.source_offsets()

    def snapshot_state(self) -> dict[str, Any]:
        return dict(self.offsets().get("snapshot") or {})

    def topic_state(self, table: str) -> dict[Any, dict[str, Any]]:
        """Latest ``after`` per key (tombstones remove), keyed by the key's single value."""
        schema, _, name = table.partition(".")
        topic = topic_name(PIPELINE, schema, name)
        state: dict[Any, dict[str, Any]] = {}
        for partition in sorted(self.log.end_offsets(topic)):
            offset = 0
            while True:
                records = self.log.read(topic, partition, offset, 10_000)
                if not records:
                    break
                for record in records:
                    key = orjson.loads(record.key or b"null")
                    single = next(iter(key.values())) if len(key) == 1 else orjson.dumps(key)
                    if record.value is None:
                        state.pop(single, None)
                    else:
                        state[single] = orjson.loads(record.value)["after"]
                offset = records[-1].offset + 1
        return state

    def wait(self, done: Callable[[], bool], timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            if self.error is not None:
                raise AssertionError(f"pipeline failed: {self.error}") from self.error
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; snapshot state {self.snapshot_state()}")
            time.sleep(0.1)

    def snapshot_done(self) -> bool:
        state = self.snapshot_state()
        tables = state.get("tables") or {}
        return bool(tables) and all(
            sum(b - a + 1 for a, b in t["done"]) == t["chunks_total"] for t in tables.values()
        )

    def matches(self, table: str) -> bool:
        """The topic's per-key state equals the table."""
        return self.topic_state(table) == table_state(self.dsn, table)


@contextmanager
def pipeline(dsn: str, log_dir: Path, tables: Sequence[str], **options: Any) -> Iterator[Pipeline]:
    """A pipeline whose slot and publication are dropped at exit."""
    p = Pipeline(dsn, log_dir, tables, **options)
    try:
        yield p
    finally:
        p.stop()
        drop_replication_objects(p.config, PIPELINE)
        p.log.close()
