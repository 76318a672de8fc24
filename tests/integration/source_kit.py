"""Drive a source directly into a real EmbeddedLog, as the runtime's source task does:
poll -> append (schemas + records) -> store offsets -> commit -> ack.

``pg_source_kit`` and ``mongo_kit`` subclass :class:`SourceHarness` with their source's config.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import structlog

from cdc.contracts.events import ChangeEvent, topic_name
from cdc.contracts.schema import TableSchema, schema_record, schema_topic
from cdc.contracts.source import DeadLetter, Source, SourceContext
from cdc.envelope import encode as envelope
from cdc.log.base import LogTransaction
from cdc.log.embedded import EmbeddedLog
from cdc.testing import wait_until

S = TypeVar("S", bound=Source)


class SourceHarness(Generic[S]):
    """A source, its log, and what it emitted so far; subclasses build the source."""

    def __init__(self, pipeline: str, log_dir: Path, on_bad_record: str, snapshot: str) -> None:
        self.pipeline = pipeline
        self.log = EmbeddedLog(log_dir)
        self.context = SourceContext(
            pipeline=pipeline,
            log=self.log,
            logger=structlog.get_logger(),
            on_bad_record=on_bad_record,
            snapshot_mode=snapshot,
        )
        self.source: S | None = None
        self.events: list[ChangeEvent] = []
        self.schemas: list[TableSchema] = []
        self.dead: list[DeadLetter] = []
        self.commits: list[dict[str, Any]] = []
        self._tx: LogTransaction | None = None

    def new_source(self) -> S:
        """A fresh source of the harness's config."""
        raise NotImplementedError

    def open(self) -> S:
        self.source = self.new_source()
        self.source.open(self.log.source_offsets())
        topics = [topic_name(self.pipeline, s, t) for s, t in self.source.tables()]
        self.log.ensure_topics([*topics, schema_topic(self.pipeline)])
        return self.source

    def close(self) -> None:
        if self._tx is not None:
            self._tx.abort()
            self._tx = None
        if self.source is not None:
            self.source.close()
            self.source = None

    def step(self, timeout_s: float = 0.2, max_events: int = 5000) -> int:
        """One poll, appended and committed like the runtime does; returns the changes seen
        (events, and records the source wrote itself, which ``self.events`` does not hold)."""
        assert self.source is not None
        batch = self.source.poll(max_events, timeout_s)
        if batch.empty:
            return 0
        self._tx = self._tx or self.log.begin()
        records = [schema_record(self.pipeline, s) for s in batch.schemas]
        for event in batch.events:
            records.extend(envelope.to_records(event, self.pipeline))
        records += batch.records
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
        return len(batch.events) + len(batch.records)

    def run_until(
        self, done: Callable[[], bool], timeout_s: float = 30.0, settle_s: float = 0.0
    ) -> list[ChangeEvent]:
        """Step until ``done()`` (then ``settle_s`` more), failing after ``timeout_s``."""

        def stepped() -> bool:
            if done():
                return True
            self.step()
            return done()

        # No pause between looks: a step itself waits for the source's next batch.
        wait_until(stepped, timeout_s, 0, describe=lambda: f"done ({len(self.events)} events)")
        end = time.monotonic() + settle_s
        while time.monotonic() < end:
            self.step()
        return self.events

    def collect(self, count: int, timeout_s: float = 30.0) -> list[ChangeEvent]:
        """Step until at least ``count`` events arrived and their transaction committed."""
        return self.run_until(lambda: len(self.events) >= count and self._tx is None, timeout_s)
