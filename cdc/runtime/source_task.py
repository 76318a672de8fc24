"""The source task: poll the source, append to the log with the source offsets, then ack.

Order, and why: records and offsets go into one log transaction, so after a crash both are
there or neither is; only after ``commit`` returns does the source learn it may release the
position (PostgreSQL: the slot's flush LSN). Acking earlier could lose changes; acking later only
retains a little more WAL.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cdc.contracts.errors import CdcError, RecordTooLarge, SourceFatal, SourceUnavailable
from cdc.contracts.events import ChangeEvent
from cdc.contracts.positions import Offsets
from cdc.contracts.schema import (
    TableSchema,
    dead_letter_topic,
    schema_record,
    schema_topic,
    source_shape_record,
)
from cdc.contracts.source import DeadLetter, Source, SourceBatch
from cdc.envelope import encode as envelope
from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.log.base import Log, LogTransaction, Record
from cdc.metrics.lag import LagClock
from cdc.metrics.observers import SourceObserver
from cdc.runtime.transactions import TransactionMetadata
from cdc.runtime.transformed import apply_chain
from cdc.support.logging import Logger
from cdc.support.retry import Backoff, Decision, Stopped, classify
from cdc.transforms.chain import EMPTY, TransformChain

SourceFactory = Callable[[], Source]


class BadRecordStop(SourceFatal):
    """A record could not be converted and the pipeline's policy is to fail."""


class SourceTask:
    """Runs one source until ``stop`` is set or a fatal error happens.

    Args:
        pipeline: pipeline name, for topic names.
        log: the log to append to.
        factory: builds a fresh source (after a retriable failure the old one is closed and a
            new one opened from the stored offsets, so a reconnect always resumes from what is
            durable).
        stop: set to stop.
        logger: bound to pipeline and source.
        max_events: most events per poll (bounds memory for huge transactions).
        poll_timeout_s: longest a poll blocks, which bounds how fast a stop is noticed.
        bad_records: the pipeline's policy; under ``dead_letter`` a record the log refuses for
            its size is replaced by a dead letter instead of stopping the pipeline.
        first_start_timeout_s: how long a pipeline that has never run (no stored offsets, and
            the source not opened yet in this process) retries an unreachable source before
            it stops with the error; once it has run, an unreachable source is retried with
            backoff for as long as it takes. ``None``: always retried.
        observer: the process's metrics (``None``: off), told once per batch.
        lag: the source's lag (:mod:`cdc.metrics.lag`), fed once per batch; read by the
            metrics and the terminal display.
        transforms: the pipeline's transforms, applied to each batch's events and schemas
            before they are encoded (:mod:`cdc.transforms`).
        table_ops: the operations captured of each table (``schema.table``) whose entry limits
            them (``ops:``); the others' events are dropped before the transforms.
        stored_with_first_commit: offsets stored with the first commit of each session beside
            the source's (the transforms' fingerprint, :mod:`cdc.runtime.fingerprints`).
    """

    def __init__(
        self,
        pipeline: str,
        log: Log,
        factory: SourceFactory,
        stop: threading.Event,
        logger: Logger,
        max_events: int = 5000,
        poll_timeout_s: float = 0.2,
        bad_records: str = "fail",
        first_start_timeout_s: float | None = None,
        envelope_options: EnvelopeOptions = READABLE,
        observer: SourceObserver | None = None,
        lag: LagClock | None = None,
        transforms: TransformChain = EMPTY,
        table_ops: Mapping[str, frozenset[str]] | None = None,
        stored_with_first_commit: Offsets | None = None,
    ) -> None:
        self._observer = observer
        self._chain = transforms
        self._ops = dict(table_ops or {})
        self._with_first_commit = dict(stored_with_first_commit or {})
        self.lag = lag if lag is not None else LagClock()
        self._pipeline = pipeline
        self._options = envelope_options
        self._transactions: TransactionMetadata | None = None
        if envelope_options.provide_transaction_metadata:
            self._transactions = TransactionMetadata(pipeline, envelope_options)
        self._first_start_timeout_s = first_start_timeout_s
        self._has_run = False  # offsets were stored, or the source opened in this process
        self._bad_records = bad_records
        self._log = log
        self._factory = factory
        self._stop = stop
        self._logger = logger
        self._max_events = max_events
        self._poll_timeout_s = poll_timeout_s
        self.committed_batches = 0
        self.events_appended = 0
        self.last_commit_ms: int | None = None

    def run(self) -> None:
        """Run sessions until stopped; retriable errors reconnect with backoff.

        Raises:
            CdcError: a fatal error, after the open transaction was rolled back.
        """
        backoff = Backoff()
        started = time.monotonic()
        while not self._stop.is_set():
            try:
                self._session(backoff)
            except Stopped:
                return
            except Exception as exc:
                decision = classify(exc)
                if decision is Decision.SKIP:
                    raise BadRecordStop(
                        f"{exc} (set bad_records: dead_letter to route such records to the "
                        f"{dead_letter_topic(self._pipeline)} topic instead)"
                    ) from exc
                if decision is Decision.FAIL:
                    raise
                delay = backoff.next_delay()
                remaining = self._first_start_remaining(exc, started)
                if remaining is not None:
                    delay = min(delay, remaining)
                self._logger.warning("source.retrying", error=str(exc), retry_in_s=round(delay, 2))
                if self._stop.wait(delay):
                    return

    def _first_start_remaining(self, exc: Exception, started: float) -> float | None:
        """Seconds the first start still waits for an unreachable source (None: no limit).

        A pipeline that never ran has nothing to resume: an unreachable source then is most
        likely a wrong address or a server not started, which the user must hear about, not
        an outage to sit out.

        Raises:
            SourceFatal: the first start waited ``first_start_timeout_s`` in vain.
        """
        timeout = self._first_start_timeout_s
        if timeout is None or self._has_run or not isinstance(exc, SourceUnavailable):
            return None
        remaining = timeout - (time.monotonic() - started)
        if remaining <= 0:
            raise SourceFatal(
                f"{exc} (gave up after {timeout:g} s, source.connect_timeout_s: the pipeline has "
                "not run before, so its first start needs a reachable source; once it has run, "
                "an unreachable source is retried with backoff)"
            ) from exc
        return remaining

    def _session(self, backoff: Backoff) -> None:
        source = self._factory()
        tx: LogTransaction | None = None
        unstored = self._with_first_commit
        try:
            self._log.claim_source()  # fences an older writer before the offsets are read
            offsets = self._log.source_offsets()
            self._has_run = self._has_run or bool(offsets)
            source.open(offsets)
            self._has_run = True
            self._log.ensure_topics(self._topics(source.tables()))
            self._logger.info("source.opened")
            observer = self._observer
            if observer is not None:
                observer.opened()
            while not self._stop.is_set():
                batch = source.poll(self._max_events, self._poll_timeout_s)
                if batch.empty:
                    self.lag.idle()
                    continue
                started = time.perf_counter()
                if tx is None:
                    tx = self._log.begin()
                self._append(tx, batch)
                if batch.commit_offsets is not None:
                    tx.store_offsets(batch.commit_offsets)
                    if unstored:
                        tx.store_offsets(unstored)
                    tx.commit()
                    unstored = {}
                    tx = None
                    self._committed(batch.commit_offsets)
                    if observer is not None:
                        observer.committed(batch.commit_offsets, time.perf_counter() - started)
                    source.ack(batch.commit_offsets)
                    backoff.reset()
                # Not kept through the next poll: two batches of large values alive at once
                # would double the task's peak.
                del batch
        finally:
            if tx is not None:
                _abort_quietly(tx)
            source.close()

    def _topics(self, tables: Sequence[tuple[str, str]]) -> list[str]:
        topics = list(dict.fromkeys(self._chain.topic(self._pipeline, s, t) for s, t in tables))
        if self._transactions is not None:
            topics.append(self._transactions.topic)
        return [*topics, schema_topic(self._pipeline), dead_letter_topic(self._pipeline)]

    def _append(self, tx: LogTransaction, batch: SourceBatch) -> None:
        records = self._schema_records(batch.schemas)
        now_ms = int(time.time() * 1000)
        events, letters = self._captured(batch.events)
        if self._transactions is not None:
            ends = batch.commit_offsets is not None
            records += self._transactions.records(events, now_ms, ends)
        else:
            records += envelope.batch_records(events, self._pipeline, now_ms, self._options)
        records += batch.records
        records.extend(self._dead_letter(d) for d in (*batch.dead_letters, *letters))
        if records:
            self._append_records(tx, records)
        self._appended(batch)
        if self._observer is not None:
            self._observer.appended(batch.events, batch.records, records, batch.record_ops)
            if batch.dead_letters:
                self._observer.dead_letters("bad_value", len(batch.dead_letters))
            if letters:
                self._observer.dead_letters("transform", len(letters))

    def _appended(self, batch: SourceBatch) -> None:
        """Count a batch's changes (a tombstone is none) and feed the lag clock their commit
        time."""
        written, ops = batch.records, batch.record_ops
        tombstones = 0 if ops is None else ops.count("")
        self.events_appended += len(batch.events) + len(written) - tombstones
        ts_ms = batch.events[-1].source.ts_ms if batch.events else batch.ts_ms
        if ts_ms is not None:
            self.lag.appended(ts_ms)

    def _schema_records(self, schemas: Sequence[TableSchema]) -> list[Record]:
        """The records publishing ``schemas``: as the transforms shape the tables, and where
        they changed one, the source's own shape beside it (what the source compares with)."""
        records = []
        for schema in schemas:
            shaped = self._chain.schema(schema) if self._chain else schema
            transformed = shaped != schema
            records.append(schema_record(self._pipeline, shaped, transformed=transformed))
            if transformed:
                records.append(source_shape_record(self._pipeline, schema))
        return records

    def _captured(
        self, events: Sequence[ChangeEvent]
    ) -> tuple[Sequence[ChangeEvent], list[DeadLetter]]:
        """``events`` without the operations their table's ``ops`` leave out, through the
        transforms; an event a transform fails on becomes a dead letter under
        ``bad_records: dead_letter`` (under ``fail`` its error stops the source)."""
        ops = self._ops
        if ops:
            events = [e for e in events if e.op.value in ops.get(e.table_id, e.op.value)]
        if not self._chain:
            return events, []
        return apply_chain(self._chain, events, self._bad_records)

    def _append_records(self, tx: LogTransaction, records: list[Record]) -> None:
        try:
            tx.append(records)
        except RecordTooLarge:
            if self._bad_records != "dead_letter":
                raise
            # The log refuses a batch before writing any of it, so retrying record by record
            # appends nothing twice and finds the offenders.
            for record in records:
                try:
                    tx.append([record])
                except RecordTooLarge as exc:
                    tx.append([self._too_large(record, exc)])

    def _too_large(self, record: Record, exc: RecordTooLarge) -> Record:
        self._logger.warning("record.dead_lettered", topic=record.topic, reason=str(exc))
        if self._observer is not None:
            self._observer.dead_letters("too_large")
        key = None if record.key is None else envelope.decode(record.key)
        payload = {"topic": record.topic, "bytes": len(record.value or b"")}
        return dead_letter_record(self._pipeline, "source", record.topic, key, str(exc), payload)

    def _dead_letter(self, letter: DeadLetter) -> Record:
        self._logger.warning("record.dead_lettered", table=letter.table, reason=letter.reason)
        return letter_record(self._pipeline, letter)

    def _committed(self, offsets: Offsets) -> None:
        self.committed_batches += 1
        self.last_commit_ms = int(time.time() * 1000)
        self._logger.debug("checkpoint.committed", offsets=dict(offsets))


def letter_record(pipeline: str, letter: DeadLetter) -> Record:
    """The dead-letter record of a source's :class:`DeadLetter`."""
    return dead_letter_record(
        pipeline, "source", letter.table, letter.key, letter.reason, letter.payload
    )


def dead_letter_record(
    pipeline: str,
    origin: str,
    table: str,
    key: Any,
    reason: str,
    payload: Any,
) -> Record:
    """A dead-letter entry: keyed like the record it replaces, with the reason and the payload."""
    value = {
        "origin": origin,
        "table": table,
        "key": key,
        "reason": reason,
        "payload": payload,
        "ts_ms": int(time.time() * 1000),
    }
    # A unique key: the topic is compacted, and no dead letter may hide an earlier one.
    key_bytes = envelope.dumps({"table": table, "key": key, "id": uuid.uuid4().hex})
    return Record(topic=dead_letter_topic(pipeline), key=key_bytes, value=envelope.dumps(value))


def _abort_quietly(tx: LogTransaction) -> None:
    # The transaction was never committed: a failed rollback leaves nothing behind either.
    with contextlib.suppress(CdcError):
        tx.abort()
