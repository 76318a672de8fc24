"""The view task: reads a view's tables from the log, keeps its join state, and writes a
document per root row that changed, exactly once.

Checkpoint, in one log transaction: the view's schema (when it changed), the state rows the
batch changed, the view's counters, the documents, and the consumer group's next offsets. After
a crash all of them are there or none is, so the state topic always matches the offsets it was
read to, and no document is written twice or lost.

The rows and indexes a batch works on are in a local SQLite store (:mod:`cdc.views.store`), a
cache of the state topic with bounded memory: its transaction commits after the log's, with the
batch's commit token (also in the batch's counters record). At a start
(:meth:`ViewTask._open_store`) a store that is missing, stale (a crash between the two commits)
or for another definition is rebuilt from the state topic.

A truncate of a table is applied as its rows' deletes, by its position: the rows older than it
leave the store and the state topic (tombstones appended a piece at a time), the documents they
were in are written again (deleted, for the root's), and its position stays as the table's
floor, below which a change read later is not applied (docs/views.md, "TRUNCATE").
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from cdc.config.pipeline import Pipeline
from cdc.config.views import ViewConfig
from cdc.contracts.errors import LogFatal, SourceMisconfigured
from cdc.contracts.schema import TableSchema
from cdc.contracts.sink import SinkRecord
from cdc.log.base import Consumer, Log, LogTransaction, Record, StoredRecord, TopicPartition
from cdc.runtime.factories import source_record_rows
from cdc.runtime.schemas import SchemaCatalog
from cdc.runtime.sink_control import RETRYING, RUNNING, STOPPED
from cdc.runtime.sink_task import RecordRows, decode_records
from cdc.support.logging import Logger
from cdc.support.redact import redact
from cdc.support.retry import Backoff, Stopped, is_retriable, retry
from cdc.views import records as out
from cdc.views.health import ViewHealth
from cdc.views.join import Key, Pos, canonical_key
from cdc.views.progress import input_topics, last_token
from cdc.views.standby import Claim, TermFenced, ViewGate, view_gate, view_transactional_id
from cdc.views.states import STANDBY, STARTING
from cdc.views.store import ViewStore, lock_retriable

if TYPE_CHECKING:
    from cdc.metrics import Telemetry
    from cdc.metrics.views import ViewObserver

#: How often a view's lag is sampled for its metric: reading the end offsets and the group's
#: offsets is a few SQLite reads on the embedded log, round trips to the brokers on Kafka.
LAG_EVERY_S = {"embedded": 1.0, "kafka": 5.0}


class ViewMisconfigured(SourceMisconfigured):
    """A view's ``on`` names a column its table lacks (found once the schemas are known)."""


class ViewTask:
    """Maintains one view until ``stop`` is set.

    Args:
        index: the view's place in ``views:``, for the YAML path of a misconfigured column.
        rows: the source's read-side decoding of its records, as sinks get it.
        store_dir: where the view's local store lives (default: ``views/`` in the pipeline's
            local state directory, beside the embedded log or the Kafka log's state).
        observer: the view's metrics (``None``: metrics are off).
        health: what it tells ``/readyz`` and the stall alarm (``None``: metrics are off).
        state_changed: set when its :meth:`report` changes (the heartbeat's ``changed``).
        gate: on Kafka, the view's lease (:mod:`cdc.views.standby`): the task runs while this
            process holds it, and ``stop`` must be the gate's ``term``.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        view: ViewConfig,
        index: int,
        log: Log,
        stop: threading.Event,
        logger: Logger,
        rows: RecordRows | None = None,
        max_records: int = 2000,
        poll_timeout_s: float = 0.2,
        store_dir: Path | None = None,
        observer: ViewObserver | None = None,
        health: ViewHealth | None = None,
        state_changed: threading.Event | None = None,
        gate: ViewGate | None = None,
    ) -> None:
        self._name = pipeline.name
        self._gate = gate
        self._state_changed = state_changed
        self._view = view
        self._index = index
        self._log = log
        self._stop = stop
        self._logger = logger
        self._rows = rows
        self._max_records = max_records
        self._poll_timeout_s = poll_timeout_s
        self._tables = dict(zip(input_topics(pipeline, view), view.inputs(), strict=True))
        self._observer = observer
        self._health = health
        self._catalog = SchemaCatalog(log, pipeline.name)
        self._published: TableSchema | None = None
        directory = store_dir if store_dir is not None else pipeline.state_path() / "views"
        self._store_path = directory / f"{view.name}.sqlite"
        self.rebuilds = 0  # of the local store by this task, for tests and logs
        self.documents_written = 0  # by this task, for its owner's progress
        self._state: str = STARTING
        self._reason: str | None = None
        # On Kafka, the term's claim of the view's transactional id (cdc.views.standby).
        self._claim: Claim | None = None
        self._term_commits = 0  # batches committed by this term (TermFenced says how many)

    def report(self) -> dict[str, str | None]:
        """The task's state, which its process's beats carry to ``cdc status``: ``starting``,
        ``running`` (a session opened its store and consumer), ``retrying`` (with the error),
        ``stopped`` (by the error, which ends the process too; redacted) or ``standby`` (on
        Kafka, another process runs the view: the reason names it)."""
        return {"state": self._state, "reason": self._reason}

    def _set_state(
        self, state: str, error: BaseException | None = None, note: str | None = None
    ) -> None:
        reason = note if error is None else redact(str(error))
        if (state, reason) != (self._state, self._reason):
            self._state, self._reason = state, reason
            if self._state_changed is not None:
                self._state_changed.set()  # the process's next beat carries it at once

    def serve(self) -> None:
        """Run until the pipeline stops; retriable errors start a fresh session. On Kafka,
        only while this process holds the view's lease (standing by meanwhile)."""
        if self._gate is None:
            self._term()
        else:
            self._gate.serve(self._term, self._standing_by)

    def _standing_by(self, leader: str | None) -> None:
        said = f"{leader} runs it" if leader else "another process takes over (not yet known which)"
        self._set_state(STANDBY, None, said)
        if self._health is not None:
            self._health.standby()

    def _term(self) -> None:
        """Sessions until ``stop`` (the pipeline's, or the lease's term) is set.

        Raises:
            TermFenced: on Kafka, the term's claim of the view's transactional id was fenced
                by a newer holder, or its producer is gone (a new one is made only by a new
                term, once the lease is won again).
        """
        self._term_commits = 0
        try:
            retry(self._session, is_retriable, Backoff(), on_retry=self._retrying, stop=self._stop)
        except Stopped:
            return
        except Exception as exc:
            if self._claim is not None and self._claim.spent:
                raise TermFenced(
                    f"views: {self._view.name}'s transactions ({self._claim.transactional_id}) "
                    "were fenced (by a newer holder of its lease, or by the broker: a "
                    "transaction open longer than log.transaction_timeout_ms) or their "
                    f"producer is gone, so its term ends: {exc}",
                    self._term_commits,
                ) from exc
            self._set_state(STOPPED, exc)
            if self._health is not None:
                self._health.stopped(exc)
            raise
        finally:
            claim, self._claim = self._claim, None
            if claim is not None:
                claim.close()

    def _claim_writer(self) -> None:
        """On Kafka, claim the view's transactional id once a term, before the store is
        checked against the state topic: an older holder's batch is then either committed
        (and in the state topic the check reads) or fenced; never committed after the check."""
        if self._claim is not None:
            if self._claim.spent:  # a new claim needs a new term, so the lease won again
                raise LogFatal(f"views: the claim of {self._claim.transactional_id} is spent")
            return
        claim = getattr(self._log, "claim_writer", None)
        if claim is not None:
            self._claim = claim(view_transactional_id(self._name, self._view.name))

    def _begin(self) -> LogTransaction:
        """A batch's transaction: on Kafka with the term's claim (a spent claim raises)."""
        return self._log.begin() if self._claim is None else self._claim.begin()

    def _retrying(self, exc: Exception, failures: int, delay: float) -> None:
        self._logger.warning("view.retrying", error=str(exc), retry_in_s=round(delay, 2))
        self._set_state(RETRYING, exc)
        if self._health is not None:
            self._health.retrying(exc)

    def _session(self) -> None:
        # Published again once a session: the last session's may have been in a transaction
        # that its failure aborted.
        self._published = None
        self._claim_writer()
        with lock_retriable(self._store_path):
            store = self._open_store()
            try:
                self._serve(store)
            finally:
                store.close()

    def _serve(self, store: ViewStore) -> None:
        high, seq = store.counters()
        consumer = self._log.consumer(out.view_group(self._name, self._view), list(self._tables))
        self._logger.info("view.started", view=self._view.name, high=high)
        self._set_state(RUNNING)
        if self._health is not None:
            self._health.serving()
        try:
            while not self._stop.is_set():
                batch = consumer.poll(self._max_records, self._poll_timeout_s)
                if batch:
                    high, seq = self._apply(store, batch, high, seq, consumer)
                elif self._health is not None:
                    self._health.caught_up()
        finally:
            consumer.close()

    # -- the state ---------------------------------------------------------------------------

    def _open_store(self) -> ViewStore:
        """The local store, rebuilt from the state topic unless it holds the topic's last
        batch (its commit token) for this definition of the view."""
        topic = out.state_topic(self._name, self._view)
        self._log.ensure_topics([topic, out.view_topic(self._name, self._view)])
        store = ViewStore(self._store_path, self._view)
        try:
            token = last_token(self._log, topic)
            if store.matches(token):
                return store
            self._logger.info("view.store_rebuilding", view=self._view.name)
            store.reset()
            store.begin()
            high, seq = None, 0
            for key, value in self._state_records(topic):
                if key == out.META_KEY:
                    counters = orjson.loads(value) if value is not None else {}
                    high = tuple(counters["high"]) if counters.get("high") else None
                    seq = int(counters.get("seq", 0))
                elif key.startswith(out.FLOOR_PREFIX):
                    if value is not None:
                        store.load_floor(*out.parse_floor(key, value))
                elif value is None:
                    table, row_key = out.parse_state_key(key)
                    store.load(table, row_key, None, (0, 0))
                else:
                    store.load(*out.parse_state(key, value))
            store.commit(token, high, seq)
            self.rebuilds += 1
            return store
        except BaseException:
            store.rollback()
            store.close()
            raise

    def _state_records(self, topic: str) -> Iterator[tuple[bytes, bytes | None]]:
        """The state topic's records in each partition's order (a key's last record wins)."""
        for partition, end in self._log.end_offsets(topic).items():
            offset = 0
            while offset < end:
                if self._stop.is_set():  # the term ended (lease lost): its revocation waits
                    raise Stopped()
                chunk = self._log.read(topic, partition, offset, 2000)
                if not chunk:
                    break
                yield from ((r.key, r.value) for r in chunk if r.key is not None)
                offset = chunk[-1].offset + 1
                if self._health is not None:
                    self._health.rebuilding()  # a long rebuild is no stall

    # -- a batch -----------------------------------------------------------------------------

    def _apply(
        self,
        store: ViewStore,
        batch: list[StoredRecord],
        high: Pos | None,
        seq: int,
        consumer: Consumer,
    ) -> tuple[Pos | None, int]:
        """Apply a batch and commit its documents, state and offsets together, then the
        store; the new high-water position and sequence."""
        store.begin()
        token = uuid.uuid4().hex
        try:
            before = 0 if high is None else high[0]
            pending = _Pending(self._begin)
            try:
                changes, high = self._changes(store, batch, high, pending)
                tx = pending.get()
                tx.append(changes + self._schema_records(store.any_touched()))
                at = 0 if high is None else high[0]
                if at != before:
                    seq = 0  # a new high-water position: the documents' sequence starts again
                seq, written = self._documents(store, tx, at, seq)
                tx.append([out.meta_record(self._name, self._view, high or (0, 0), seq, token)])
                self._store_offsets(tx, _next_offsets(batch), consumer)
                tx.commit()
            except BaseException:
                pending.abort()
                raise
            # After the log's commit: a crash here leaves the store a token behind the state
            # topic, which the next start sees (and rebuilds).
            store.commit(token, high, seq)
        except BaseException:
            store.rollback()
            raise
        self._term_commits += 1
        self.documents_written += written
        if self._observer is not None:
            self._observer.committed(len(batch), written, high)
        if self._health is not None:
            self._health.committed()
        return high, seq

    def _changes(
        self, store: ViewStore, batch: list[StoredRecord], high: Pos | None, pending: _Pending
    ) -> tuple[list[Record], Pos | None]:
        """Apply the batch's changes to the store: the state records of those that changed a
        row not yet in the transaction, and the new high-water position."""
        changes: list[Record] = []
        for record in decode_records(batch, None, self._rows):
            table = self._tables[record.topic]
            at = _truncate(record)
            if at is not None:
                # Its tombstones after the state records before it: a row it removes may be
                # one the batch changed, and a key's last record in the topic must win.
                tx = pending.get()
                tx.append(changes)
                changes = []
                self._truncate(store, tx, table, at)
                high = at if high is None or _newer(at, high) else high
                continue
            change = _change(record)
            if change is None:
                continue
            key, row, pos = change
            if not store.apply(table, key, row, pos):
                continue
            high = pos if high is None or _newer(pos, high) else high
            changes.append(out.state_record(self._name, self._view, table, key, row, pos))
        return changes, high

    def _truncate(self, store: ViewStore, tx: LogTransaction, table: str, at: Pos) -> None:
        """Apply a truncate: its rows' state tombstones a piece at a time, then its floor."""
        floor = store.floor(table)
        if floor is not None and not _newer(at, floor):
            return  # a replay (or an older truncate read after a newer one)
        for gone in store.truncate(table, at):
            tx.append([out.state_record(self._name, self._view, table, k, None, at) for k in gone])
        tx.append([out.floor_record(self._name, self._view, table, at)])

    def _documents(self, store: ViewStore, tx: Any, at: Any, seq: int) -> tuple[int, int]:
        """Append the document of each touched root key, a piece at a time; the sequence and
        the documents written."""
        written = 0
        for piece in store.touched():
            docs: list[Record] = []
            for key, doc in piece:
                # A document's position is (high-water position, sequence): the first never
                # moves back and the second grows until the first moves, so a key's next
                # document sorts after its last in every sink's position guard. The sequence
                # stays small (OpenSearch packs it into 16 bits of its version).
                seq += 1
                docs += out.document_records(self._name, self._view, key, doc, (at, seq))
            tx.append(docs)
            written += len(piece)
        return seq, written

    def _store_offsets(
        self, tx: Any, offsets: dict[TopicPartition, int], consumer: Consumer
    ) -> None:
        """The group's offsets in the documents' transaction (on Kafka, with the member's
        metadata: a zombie view is fenced)."""
        store = getattr(tx, "store_group_offsets", None)
        if store is None:
            raise LogFatal("views: this log cannot commit a group's offsets with its records")
        store(out.view_group(self._name, self._view), offsets, consumer)

    def _schema_records(self, touched: bool) -> list[Record]:
        """The view's schema, before its first document and whenever the root's changed."""
        if not touched:
            return []
        schema, _, table = self._view.root.partition(".")
        root = self._catalog.get(schema, table)
        if root is None:
            raise LogFatal(f"views: no schema was published for {self._view.root}")
        try:
            shaped = out.view_schema(self._view, root)
        except ValueError as exc:
            raise ViewMisconfigured(f"views[{self._index}].embed: {exc}") from exc
        if shaped.same_shape(self._published):
            return []
        self._check_columns(root)
        self._published = shaped
        return [out.view_schema_record(self._name, shaped)]

    def _check_columns(self, root: TableSchema) -> None:
        """Each ``on`` column exists in its table, where the table's schema is known."""
        root_columns = {c.name for c in root.columns}
        for e_index, embed in enumerate(self._view.embed):
            schema, _, name = embed.from_table.partition(".")
            child = self._catalog.get(schema, name)
            child_columns = None if child is None else {c.name for c in child.columns}
            for parent, column in embed.on.items():
                where = f"views[{self._index}].embed[{e_index}].on.{parent}"
                if parent not in root_columns:
                    raise ViewMisconfigured(f"{where}: {self._view.root} has no column {parent!r}")
                if child_columns is not None and column not in child_columns:
                    raise ViewMisconfigured(f"{where}: {embed.from_table} has no column {column!r}")


class _Pending:
    """A batch's log transaction, begun at its first use: a batch of changes is applied to the
    store before it, outside the embedded log's write lock; a truncate begins it, to append
    its rows' state tombstones a piece at a time."""

    def __init__(self, begin: Callable[[], LogTransaction]) -> None:
        self._begin = begin
        self._tx: LogTransaction | None = None

    def get(self) -> LogTransaction:
        if self._tx is None:
            self._tx = self._begin()
        return self._tx

    def abort(self) -> None:
        if self._tx is not None:
            self._tx.abort()


def _change(record: SinkRecord) -> tuple[Key, dict[str, Any] | None, Pos] | None:
    """A record as ``(key, row or None for a delete, position)``; ``None`` for what no row
    changes by (a record without a key or a position, a truncate: :func:`_truncate`)."""
    if record.key is None:
        return None
    value = record.value
    if value is not None and value.get("op") == "t":
        return None
    try:
        pos = record.position
    except (KeyError, TypeError, ValueError):
        return None  # a tombstone written before tombstones carried their delete's position
    row = None if value is None or value.get("op") == "d" else value.get("after")
    return canonical_key(record.key), row, tuple(pos)


def _truncate(record: SinkRecord) -> Pos | None:
    """A truncate's position; ``None`` for any other record (or a truncate without one)."""
    value = record.value
    if value is None or value.get("op") != "t":
        return None
    try:
        return tuple(record.position)
    except (KeyError, TypeError, ValueError):
        return None


def _newer(pos: Pos, than: Pos) -> bool:
    return tuple(pos) > tuple(than)


def _next_offsets(batch: list[StoredRecord]) -> dict[TopicPartition, int]:
    offsets: dict[TopicPartition, int] = {}
    for record in batch:
        tp = TopicPartition(record.topic, record.partition)
        offsets[tp] = max(offsets.get(tp, 0), record.offset + 1)
    return offsets


def view_tasks(
    pipeline: Pipeline,
    log: Log,
    stop: threading.Event,
    logger: Logger,
    telemetry: Telemetry | None = None,
    state_changed: threading.Event | None = None,
) -> dict[str, ViewTask]:
    """A task for each of the pipeline's views, by name (none when it declares none); with
    ``telemetry``, each with its metrics, and their lag sampled (:mod:`cdc.metrics.views`);
    ``state_changed``: set when a task's state changes (:class:`ViewTask`)."""
    rows = source_record_rows(pipeline) if pipeline.views else None
    tasks = {}
    for index, view in enumerate(pipeline.views):
        bound = logger.bind(view=view.name)
        # On Kafka, one process runs the view: the holder of its lease (cdc.views.standby).
        gate = view_gate(pipeline, view, stop, bound)
        tasks[view.name] = ViewTask(
            pipeline,
            view,
            index,
            log,
            stop if gate is None else gate.term,
            bound,
            rows,
            observer=None if telemetry is None else telemetry.view(view.name),
            health=None if telemetry is None else ViewHealth(telemetry.health, view.name),
            state_changed=state_changed,
            gate=gate,
        )
    if telemetry is not None and tasks:
        inputs = {
            v.name: (out.view_group(pipeline.name, v), input_topics(pipeline, v))
            for v in pipeline.views
        }
        telemetry.sample_views(log, inputs, LAG_EVERY_S.get(pipeline.log.type, 5.0))
    return tasks
