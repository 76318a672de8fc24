"""Drive a MongoSource directly into a real EmbeddedLog, as the runtime's source task does:
poll -> append (schemas + records) -> store offsets -> commit -> ack.

Where mongo-java-server (the default test server) differs from a real replica set, tests ask
:func:`is_real` (``CDC_TEST_MONGO_URI`` given) and say why in a comment:

* only collection-level ``watch()`` delivers events: :func:`scope` picks ``collection`` there;
* it keeps its oplog forever and accepts any well-formed token, so "history lost" is forced with
  an unparsable token there, and with a 1970 cluster time (before the oplog) on a real server;
* it reports no ``drop``/``rename``/``invalidate`` the way mongod does, and has no transactions.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pymongo
import structlog

from cdc import envelope
from cdc.events import ChangeEvent, topic_name
from cdc.log.base import LogTransaction
from cdc.log.embedded import EmbeddedLog
from cdc.schema import TableSchema, schema_record, schema_topic
from cdc.source import DeadLetter, SourceContext
from connectors.mongodb import MongoSource, MongoSourceConfig

PIPELINE = "mgt"


def is_real(server: Any) -> bool:
    """A real mongod (given by ``CDC_TEST_MONGO_URI``), not mongo-java-server."""
    return bool(getattr(server, "is_real_mongod", False))


def scope(server: Any) -> str:
    """mongo-java-server delivers events only to collection-level streams."""
    return "auto" if is_real(server) else "collection"


@contextmanager
def private_server(shared: Any) -> Iterator[Any]:
    """A server of the test's own when the shared one is mongo-java-server.

    mongo-java-server repairs each change event with a scan of its whole oplog, which it never
    trims, so a test writing tens of thousands of documents would slow every later test down.
    A real server (``CDC_TEST_MONGO_URI``) is used as it is.
    """
    if is_real(shared):
        yield shared
        return
    from tests.services.mongo import LocalMongo

    server = LocalMongo()
    server.start()
    try:
        yield server
    finally:
        server.close()


def new_db() -> str:
    return f"t_{uuid.uuid4().hex[:10]}"


class Harness:
    """A source, its log, and what it emitted so far."""

    def __init__(
        self,
        uri: str,
        log_dir: Path,
        tables: Sequence[str],
        *,
        on_bad_record: str = "fail",
        snapshot: str = "never",
        **options: Any,
    ) -> None:
        self.log = EmbeddedLog(log_dir)
        self.config = MongoSourceConfig.model_validate(
            {"dsn": uri, "tables": list(tables), "snapshot": snapshot, **options}
        )
        self.context = SourceContext(
            pipeline=PIPELINE,
            log=self.log,
            logger=structlog.get_logger(),
            on_bad_record=on_bad_record,
            snapshot_mode=snapshot,
        )
        self.source: MongoSource | None = None
        self.events: list[ChangeEvent] = []
        self.schemas: list[TableSchema] = []
        self.dead: list[DeadLetter] = []
        self.commits: list[dict[str, Any]] = []
        self._tx: LogTransaction | None = None

    def open(self) -> MongoSource:
        self.source = MongoSource(self.config, self.context)
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

    def run_until(self, done: Callable[[], bool], timeout_s: float = 30.0) -> list[ChangeEvent]:
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; {len(self.events)} events so far")
            self.step()
        return self.events

    def collect(self, count: int, timeout_s: float = 30.0) -> list[ChangeEvent]:
        """Step until at least ``count`` events arrived and their batch committed."""
        return self.run_until(lambda: len(self.events) >= count and self._tx is None, timeout_s)

    def stored(self) -> dict[str, Any]:
        entry: dict[str, Any] = self.log.source_offsets().get("mongodb", {})
        return entry


@contextmanager
def harness(uri: str, log_dir: Path, tables: Sequence[str], **options: Any) -> Iterator[Harness]:
    h = Harness(uri, log_dir, tables, **options)
    try:
        yield h
    finally:
        h.close()
        h.log.close()


@contextmanager
def database(uri: str) -> Iterator[pymongo.database.Database[dict[str, Any]]]:
    """A fresh database, dropped at exit."""
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(uri)
    name = new_db()
    try:
        yield client[name]
    finally:
        client.drop_database(name)
        client.close()
