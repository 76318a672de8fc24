"""Run the snapshotting PostgreSQL source through the real runtime source task into a real
embedded log, in a thread; read the topics back as the per-key state they describe."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import psycopg
import structlog

from cdc.contracts import plugins
from cdc.contracts.events import topic_name
from cdc.contracts.snapshot_offsets import progress
from cdc.contracts.source import SourceContext
from cdc.envelope.encode import payload
from cdc.envelope.options import EnvelopeOptions
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.source_task import SourceTask
from cdc.testing import wait_until
from cdc.transforms.chain import TransformChain, build_chain
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

    def __init__(
        self,
        dsn: str,
        log_dir: Path,
        tables: Sequence[str | dict[str, Any]],
        transforms: Sequence[dict[str, Any]] = (),
        bad_records: str = "fail",
        envelope: dict[str, Any] | None = None,
        write_records: bool = False,
        **options: Any,
    ) -> None:
        self.dsn = dsn
        self.envelope = EnvelopeOptions.model_validate(envelope or {})
        self.log = EmbeddedLog(log_dir)
        self.config = PostgresSourceConfig.model_validate(
            {"type": "postgres", "dsn": dsn, "tables": list(tables), **options}
        )
        self.tables = self.config.table_names
        self.chain = _chain(transforms, self.tables)
        self.bad_records = bad_records
        self.context = SourceContext(
            pipeline=PIPELINE,
            log=self.log,
            logger=structlog.get_logger(),
            snapshot_mode=self.config.snapshot,
            on_bad_record=bad_records,
            envelope=self.envelope,
            transforms=self.chain,
            write_records=write_records,  # as cdc run has it: the stream writes records
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
            PIPELINE,
            self.log,
            self._factory,
            self.stop_event,
            structlog.get_logger(),
            bad_records=self.bad_records,
            envelope_options=self.envelope,
            transforms=self.chain,
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
        return dict(progress(self.offsets()) or {})

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
                    key = payload(orjson.loads(record.key or b"null"))  # schemas.enable: unwrap
                    single = next(iter(key.values())) if len(key) == 1 else orjson.dumps(key)
                    if record.value is None:
                        state.pop(single, None)
                    else:
                        state[single] = payload(orjson.loads(record.value))["after"]
                offset = records[-1].offset + 1
        return state

    def topic_records(self, table: str, raw_topic: bool = False) -> list[dict[str, Any]]:
        """Every record of ``table``'s topic (``raw_topic``: of the topic so named) in order:
        its value with ``key`` set to the record key (``op`` ``None`` for a tombstone)."""
        schema, _, name = table.partition(".")
        topic = table if raw_topic else topic_name(PIPELINE, schema, name)
        if topic not in {t.name for t in self.log.topics()}:
            return []
        out: list[dict[str, Any]] = []
        for partition in sorted(self.log.end_offsets(topic)):
            offset = 0
            while records := self.log.read(topic, partition, offset, 10_000):
                for record in records:
                    value = orjson.loads(record.value) if record.value else {"op": None}
                    out.append({**value, "key": orjson.loads(record.key or b"null")})
                offset = records[-1].offset + 1
        return out

    def wait(
        self,
        done: Callable[[], bool],
        timeout_s: float = 60,
        what: Callable[[], str] | None = None,
    ) -> None:
        """Until ``done()``; a pipeline that failed ends the wait at once. ``what``: says, on
        timeout, how far it got (default: the snapshot's state)."""

        def ended() -> bool:
            if done():
                return True
            if self.error is not None:
                raise AssertionError(f"pipeline failed: {self.error}") from self.error
            return False

        wait_until(
            ended, timeout_s, 0.1, describe=what or (lambda: f"snapshot {self.snapshot_state()}")
        )

    def snapshot_done(self) -> bool:
        state = self.snapshot_state()
        tables = state.get("tables") or {}
        return bool(tables) and all(
            sum(b - a + 1 for a, b in t["done"]) == t["chunks_total"] for t in tables.values()
        )

    def matches(self, table: str) -> bool:
        """The topic's per-key state equals the table."""
        return self.topic_state(table) == table_state(self.dsn, table)


def _chain(configs: Sequence[dict[str, Any]], tables: Sequence[str]) -> TransformChain:
    """The transforms of ``configs`` (``transforms:`` items), validated as a pipeline file's."""
    models = [
        plugins.load(plugins.TRANSFORM_GROUP, c["type"]).config_model.model_validate(c)
        for c in configs
    ]
    return build_chain(models, PIPELINE, tables)


@contextmanager
def pipeline(
    dsn: str, log_dir: Path, tables: Sequence[str | dict[str, Any]], **options: Any
) -> Iterator[Pipeline]:
    """A pipeline whose slot and publication are dropped at exit."""
    p = Pipeline(dsn, log_dir, tables, **options)
    try:
        yield p
    finally:
        p.stop()
        drop_replication_objects(p.config, PIPELINE)
        p.log.close()
