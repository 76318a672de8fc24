"""The streaming phase: read every change stream in turn, cut batches at transaction ends.

A batch ends a unit of work (``commit_offsets`` set) unless ``max_events`` or ``max_bytes``
(about the bytes of its changes' documents, :mod:`cdc.config.batch_bytes`) was reached inside a
MongoDB transaction (events carrying the same ``lsid`` and ``txnNumber``): then the batch is
handed on without offsets and the next poll continues with the same stream, so a transaction's
changes become visible in the log together. Events of one transaction come from the oplog's one
``applyOps`` entry back to back, so an empty read means the transaction is complete.

After a stream's empty read its reader adopts the server's post-batch resume token (what it
scanned of the oplog, changes of other collections included), also while other streams are
busy, so every stream's stored point keeps up with the cluster time: a fence on the cluster
time (``cdc wait --now``, :mod:`.fence`) is reached by quiet streams too. When no stream has
changes, the moved points are stored alone at most every ``idle_commit_s``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from pymongo import errors as px

from cdc.config.batch_bytes import BATCH_BYTES
from cdc.contracts.errors import RecordError, SourceUnavailable
from cdc.contracts.events import ChangeEvent
from cdc.contracts.schema import TableSchema
from cdc.contracts.source import DeadLetter
from cdc.envelope.json_rows import EncodedRow
from cdc.support.logging import Logger
from connectors.mongodb import changes, errors, positions
from connectors.mongodb.convert import to_json
from connectors.mongodb.fields import FieldTracker
from connectors.mongodb.stream import StreamReader

#: The default least time between two commits of moved idle points (``idle_commit_interval_s``).
IDLE_COMMIT_S = 0.2


@dataclass
class Collected:
    """What one poll gathered."""

    events: list[ChangeEvent] = field(default_factory=list)
    schemas: dict[tuple[str, str], TableSchema] = field(default_factory=dict)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    #: About the bytes of the events' documents (their JSON), what ``max_bytes`` bounds.
    size: int = 0

    def full(self, limit: int, max_bytes: int) -> bool:
        """No more events fit (at most ``limit`` events, about ``max_bytes`` bytes)."""
        return len(self.events) >= limit or self.size >= max_bytes


def transaction_of(change: Mapping[str, Any]) -> bytes | None:
    """An identity of the change's transaction, ``None`` outside one."""
    txn = change.get("txnNumber")
    if txn is None:
        return None
    return orjson.dumps([to_json(change.get("lsid")), int(txn)])


class StreamSet:
    """The open change streams of a source, polled round-robin."""

    def __init__(
        self,
        readers: list[StreamReader],
        captured: set[tuple[str, str]],
        tracker: FieldTracker,
        on_bad_record: str,
        logger: Logger,
        where: str,
        signal: tuple[str, str] | None = None,
        pipeline: str = "",
        filters: changes.Filters | None = None,
        max_bytes: int = BATCH_BYTES,
        idle_commit_s: float = IDLE_COMMIT_S,
    ) -> None:
        self.readers = readers
        self._idle_commit_s = idle_commit_s
        #: A reader adopted a newer idle point that no returned batch's offsets hold yet.
        self._idle_moved = False
        self._max_bytes = max_bytes
        self._filters = dict(filters or {})
        self._signal = signal
        self._pipeline = pipeline
        #: Snapshot requests read from the signal collection: ``(request document, position)``.
        self.signals: list[tuple[dict[str, Any], int]] = []
        self._captured = captured
        self._tracker = tracker
        self._on_bad_record = on_bad_record
        self._logger = logger
        self._where = where
        self._turn = 0
        self._in_txn = False
        self._last_commit = time.monotonic()

    def poll(self, limit: int) -> Collected | None:
        """Events of the streams, or ``None`` when nothing happened and nothing is due.

        The caller attaches the offsets to what is returned unless :attr:`in_transaction` is
        set (an empty :class:`Collected` is an idle commit of the streams' points).
        """
        out = Collected()
        for _ in range(len(self.readers)):
            reader = self.readers[self._turn]
            self._in_txn = self._drain(reader, out, limit)
            if self._in_txn or out.full(limit, self._max_bytes) or self.signals:
                return self._handed(out)
            self._turn = (self._turn + 1) % len(self.readers)
        if out.events or out.dead_letters:
            return self._handed(out)
        if self._idle_moved and time.monotonic() - self._last_commit >= self._idle_commit_s:
            return self._handed(out)  # offsets only: a quiet stream's point keeps up
        return None

    def _handed(self, out: Collected) -> Collected:
        """``out``, noting that its offsets (unless cut inside a transaction) store every
        reader's point."""
        if not self._in_txn:
            self._idle_moved = False
            self._last_commit = time.monotonic()
        return out

    @property
    def in_transaction(self) -> bool:
        return self._in_txn

    def _drain(self, reader: StreamReader, out: Collected, limit: int) -> bool:
        """Read ``reader`` until it is empty or ``out`` is full; ``True`` if cut inside a
        transaction."""
        current: bytes | None = None
        while True:
            change = self._next(reader)
            if change is None:
                # Drained: the server's post-batch token covers what this read scanned.
                self._idle_moved = reader.idle_point() or self._idle_moved
                return False
            txn = transaction_of(change)
            if out.full(limit, self._max_bytes):
                reader.push_back(change)
                return txn is not None and txn == current
            self._apply(reader, change, out)
            current = txn
            if self.signals:
                return False  # the batch ends at a request: the source acts on it first

    def _next(self, reader: StreamReader) -> dict[str, Any] | None:
        try:
            return reader.next()
        except px.OperationFailure as exc:
            if errors.cannot_resume(exc):
                # Reopen from the stored point: ``open`` decides between failing and a
                # re-snapshot with the whole picture, and nothing read since is half-handled.
                raise SourceUnavailable(
                    f"change stream {reader.spec.id} lost its resume point: {exc}"
                ) from exc
            raise errors.translate(exc, self._where, "reading a change stream") from exc
        except px.PyMongoError as exc:
            raise errors.translate(exc, self._where, "reading a change stream") from exc

    def _apply(self, reader: StreamReader, change: dict[str, Any], out: Collected) -> None:
        sequence = reader.advance(change)
        if self._signal is not None and changes.namespace(change) == self._signal:
            self._take_signal(change)
            return
        try:
            outcome = changes.convert(change, self._captured, sequence, self._filters)
        except changes.BadChange as exc:
            self._bad(change, str(exc), out)
            return
        if outcome.notice is not None:
            name, fields = outcome.notice
            self._logger.warning(name, stream=reader.spec.id, **fields)
        for event in outcome.events:
            table = (event.source.schema, event.source.table)
            # The change's own (filtered) documents: their field names, without decoding rows.
            schema = self._tracker.observe(table, outcome.documents)
            if schema is not None:
                out.schemas[table] = schema
            out.events.append(event)
            out.size += _document_bytes(event)
        if outcome.control == "invalidate":
            try:
                reader.restart_after_invalidate(change)
            except px.PyMongoError as exc:
                raise errors.translate(exc, self._where, "reopening after invalidate") from exc

    def _take_signal(self, change: dict[str, Any]) -> None:
        request = change.get("fullDocument")
        if change.get("operationType") != "insert" or not isinstance(request, dict):
            return
        if request.get("type") != "snapshot":
            reason = "not a snapshot request"
            self._logger.warning("signal.ignored", request=to_json(request), reason=reason)
            return
        if request.get("pipeline") not in (None, self._pipeline):
            return  # another pipeline's request in a shared signal collection
        # A repair's _id values stay out of the log line (up to thousands, and data).
        shown = {k: v for k, v in request.items() if k != "ids"}
        ids = request.get("ids")
        keys = len(ids) if isinstance(ids, list) else None
        self._logger.info("signal.received", request=to_json(shown), keys=keys)
        self.signals.append((request, positions.position(change["clusterTime"])))

    def _bad(self, change: dict[str, Any], reason: str, out: Collected) -> None:
        ns = changes.namespace(change)
        table = f"{ns[0]}.{ns[1]}" if ns else "?"
        table_filter = self._filters.get(ns) if ns else None
        if table_filter is not None:  # a dead letter holds nothing the filters leave out
            change = table_filter.scrub(change)
        key = change.get("documentKey")
        key_json = to_json(key) if key is not None else None
        if self._on_bad_record != "dead_letter":
            raise RecordError(f"MongoDB change on {table} (key {key_json}): {reason}")
        out.dead_letters.append(DeadLetter(table, key_json, reason, to_json(change)))

    def close(self) -> None:
        for reader in self.readers:
            reader.close()


def _document_bytes(event: ChangeEvent) -> int:
    """About the bytes ``event`` holds: its documents' JSON (the source wrote it already)."""
    size = 0
    for row in (event.before, event.after):
        if isinstance(row, EncodedRow):
            size += len(row.json)
    return size
