"""Snapshots inside a running stream: watermark windows, signals, and their stored progress.

The inner source calls the message hooks while it assembles a batch; each hook notes where in
the batch its message fell (:attr:`PostgresSource.pending_events`). When ``poll`` gets the batch
it replays events and markers in stream order: events feed the open windows, a high watermark
closes its window and its rows follow everything before it, a signal queues a table.

A closed window's rows are written as records at once (:attr:`SourceBatch.records`, which the
runtime appends after the batch's events), so the batch is cut at the high watermark: what the
stream brought after it is handed on by the next ``poll``, before anything new, and only that
last part carries the commit offsets, so the runtime commits both parts in one transaction.

Progress rides on the batch's commit: the stored snapshot state
(:mod:`cdc.contracts.snapshot_offsets`) changes only together with the records it describes (a
signal with the transaction that carried it, a chunk's ``done`` with its rows), so after a crash
neither a request nor a chunk is lost or claimed without its rows.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
import psycopg

from cdc.config.pipeline import redact_url
from cdc.contracts import snapshot_offsets
from cdc.contracts.events import ChangeEvent, Op
from cdc.contracts.positions import Offsets, rebuilt
from cdc.contracts.schema import TableSchema
from cdc.contracts.source import DeadLetter, SourceBatch, SourceContext
from cdc.envelope.encode import encode_key
from cdc.log.base import Record
from cdc.support.clock import now_ms
from cdc.support.logging import Logger
from connectors.postgres import pgoutput as pg
from connectors.postgres.assembly.connect import relation_schemas
from connectors.postgres.catalog import Catalog
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.lsn import OFFSET_KEY
from connectors.postgres.publication.filters import PLAIN, table_filters
from connectors.postgres.replication.connection import session_conninfo
from connectors.postgres.snapshot.channel import (
    SIGNAL,
    WATERMARK,
    Change,
    Channel,
    Marker,
    signal_rows,
)
from connectors.postgres.snapshot.incremental import WatermarkReader, Work
from connectors.postgres.snapshot.initial import describe_one
from connectors.postgres.snapshot.reader import SnapshotTable, plan
from connectors.postgres.snapshot.rows import KeyedRow, Transforms
from connectors.postgres.snapshot.where import check_where_text
from connectors.postgres.snapshot.window_rows import ChunkJob, window_records
from connectors.postgres.snapshot.written import WrittenChange, written_changes
from connectors.postgres.source import PostgresSource
from connectors.postgres.types import TypeRegistry
from snapshots.chunks import chunk_from_json, remaining
from snapshots.progress import Reporter
from snapshots.state import CAPTURED_KEY, SnapshotState
from snapshots.watermark import HIGH, LOW, Watermarks, parse


@dataclass
class _Rest:
    """What a batch cut at a closed window still holds: its changes after the high watermark,
    their markers (indexes into ``events``), the batch's commit offsets and commit time."""

    events: list[Change]
    markers: list[Marker]
    offsets: Offsets | None
    ts_ms: int | None


@dataclass
class _Woven:
    """A batch after its markers: the events up to a closed window, the window's records, and
    what follows it (``None`` when nothing does)."""

    events: list[Change]
    records: list[Record] = field(default_factory=list)
    rest: tuple[list[Change], list[Marker]] | None = None


class StreamSnapshots:
    """Watermark snapshots of one streaming session."""

    def __init__(
        self,
        config: PostgresSourceConfig,
        context: SourceContext,
        inner: PostgresSource,
        state: SnapshotState,
        progress: Reporter,
        logger: Logger,
        channel: Channel,
    ) -> None:
        self._config, self._pipeline = config, context.pipeline
        self._options = context.envelope
        self._prefix = f"{context.pipeline}."  # of the topics of the records the stream writes
        self._filters = table_filters(config)
        self._transforms = Transforms(context.transforms, context.on_bad_record)
        self._inner, self._state, self._progress = inner, state, progress
        self._logger = logger
        self._lock = threading.Lock()
        self._windows: Watermarks[KeyedRow] = Watermarks()
        self._markers: list[Marker] = []
        self._rest: _Rest | None = None  # a batch cut at a closed window, to hand on next
        # The shape sinks last got per table, from the stream or a window (see _close_window).
        self._published: dict[str, TableSchema] = {}
        self._moved: set[str] = set()  # windows during which the stream's shape changed
        # The source offsets of the last batch handed on, and whether a log transaction is
        # still open after it: a commit of the state alone may repeat them (see _flush_state).
        self._last_offsets: dict[str, Any] | None = None
        self._mid_transaction = False
        self._db = ""
        self._dsn = config.dsn.get_secret_value()
        self._signal_table = channel.table  # (schema, table) or None
        self._reader = WatermarkReader(
            self._dsn,
            config.connect_timeout_s,
            channel,
            self._windows,
            self._lock,
            state,
            logger,
            refresh=self._refresh,
            piece_bytes=config.max_batch_bytes,
        )
        self._hook_into(inner, channel)

    @property
    def reader(self) -> WatermarkReader:
        """The background chunk reader (tests set its ``before_read`` hook)."""
        return self._reader

    def _hook_into(self, inner: PostgresSource, channel: Channel) -> None:
        """The inner source hands its watermark and signal messages to this object, and asks it
        to re-snapshot a table whose rows DDL rewrote unlogged."""
        inner.message_hooks[channel.prefix(WATERMARK)] = self._on_watermark
        inner.message_hooks[channel.prefix(SIGNAL)] = self._on_signal
        inner.resnapshot = self._resnapshot

    def started(self, offsets: Offsets) -> None:
        """The stream is open from ``offsets`` (the stored ones, or the initial snapshot's):
        learn the database name for the events."""
        if offsets.get(OFFSET_KEY) is not None:
            self._last_offsets = {OFFSET_KEY: offsets[OFFSET_KEY]}
        catalog = self._catalog()
        try:
            self._db = catalog.database()
        finally:
            catalog.close()

    # -- queueing work ---------------------------------------------------------------------

    def resume_unfinished(self) -> None:
        """Read the remaining chunks of every unfinished table with watermarks."""
        for name, chunks in self._state.unfinished().items():
            entry = self._state.table(name) or {}
            where, request = entry.get("where"), entry.get("request")
            purge, keys = bool(entry.get("purge")), tuple(entry.get("keys") or ())
            self._logger.info("snapshot.resuming", table=name, chunks_left=len(chunks))

            def planner(
                name: str = name,
                where: Any = where,
                request: Any = request,
                purge: bool = purge,
                keys: tuple[Any, ...] = keys,
            ) -> list[ChunkJob]:
                table = self._describe(name)
                current = self._state.table(name) or {"chunks": [], "done": []}
                chunks = [chunk_from_json(c) for c in current["chunks"]]
                todo = remaining(chunks, current["done"])
                return [ChunkJob(table, c, where, request, purge, keys) for c in todo]

            kind = entry.get("kind", "incremental")
            fresh = self._planner(name, request, where, purge, kind, keys)
            work = Work(request, name, where, planner, initial=kind == "initial", replan=fresh)
            self._reader.submit(work)

    def queue(
        self,
        table: str,
        reason: str,
        where: str | None = None,
        ident: str | None = None,
        purge: bool = False,
        keys: list[Any] | None = None,
    ) -> str:
        """Store a request to re-read ``table``; :meth:`resume_requests` (at open) reads it.
        ``purge``: delete the rows the table's row filter leaves out too (its filter changed);
        ``keys``: a repair's keys, each deleted if the read does not find it.

        Returns:
            The request id (``ident``, or a new one).
        """
        ident = ident or uuid.uuid4().hex
        if not self._reads(table):
            self._logger.warning(
                "snapshot.not_requested",
                table=table,
                reason=f"its ops leave out r (source.tables), so no snapshot reads it ({reason})",
            )
            return ident
        request: dict[str, Any] = {"id": ident, "type": "snapshot", "table": table}
        request.update(where=where, reason=reason)
        if purge:
            request["purge"] = True
        if keys:
            request["keys"] = keys
        self._state.add_request(request)
        return ident

    def _reads(self, table: str) -> bool:
        """Whether snapshots read ``table`` (its ``ops`` keep ``r``)."""
        found = self._filters.get(table)
        return found is None or found.allows("r")

    def request(
        self,
        table: str,
        reason: str,
        where: str | None = None,
        ident: str | None = None,
        keys: list[Any] | None = None,
    ) -> str:
        """Re-snapshot ``table`` while streaming: the path every online snapshot takes (``cdc
        snapshot``, a table added to ``source.tables``). Call it from the poll thread; the
        request is stored with the next committed batch, and a failure of it is marked in the
        state, never raised.

        Returns:
            The request id.
        """
        ident = self.queue(table, reason, where, ident, keys=keys)
        if not self._reads(table):
            return ident
        self._logger.info("snapshot.requested", table=table, request=ident, reason=reason)
        request = {"id": ident, "table": table, "where": where, "keys": keys}
        self._reader.submit(self._request_work(request))
        return ident

    def request_all(self, reason: str) -> None:
        """Queue every captured table (``always``, or a position that cannot be honoured)."""
        for table in self._config.table_names:
            self.queue(table, reason)
        self._logger.warning("snapshot.requested_all", reason=reason)

    def resume_requests(self) -> None:
        """Plan and read every stored request not yet planned."""
        for request in self._state.requests():
            self._reader.submit(self._request_work(request))

    def _request_work(self, request: dict[str, Any]) -> Work:
        ident, name, where = request["id"], request["table"], request.get("where")
        purge, keys = bool(request.get("purge")), tuple(request.get("keys") or ())
        return Work(ident, name, where, self._planner(name, ident, where, purge, keys=keys))

    def _planner(
        self,
        name: str,
        ident: Any,
        where: Any,
        purge: bool,
        kind: str = "incremental",
        keys: tuple[Any, ...] = (),
    ) -> Callable[[], list[ChunkJob]]:
        """Plans request ``ident`` of table ``name`` afresh: describe, chunk, store the plan."""

        def planner() -> list[ChunkJob]:
            if where is not None:
                check_where_text(where, signal=True)
            table = self._describe(name)
            with self._reader_plan_connection() as conn:
                chunks = plan(conn, table, self._config.snapshot_chunk_rows)
            method = "keyset" if table.chunk_key else "ctid"
            stored = list(keys) or None
            if not self._state.plan_table(
                table.name,
                kind,
                method,
                chunks,
                request=ident,
                where=where,
                purge=purge,
                keys=stored,
            ):
                return []  # cancelled while it was planned
            self._logger.info(
                "snapshot.planned", table=table.name, chunks=len(chunks), request=ident
            )
            return [ChunkJob(table, c, where, ident, purge, keys) for c in chunks]

        return planner

    def _resnapshot(self, table: str, reason: str) -> None:
        """Re-read ``table`` as ``cdc snapshot --table`` does: DDL rewrote rows unlogged. Not
        twice while a request waits to be planned; never under ``snapshot: never``, whose sinks
        hold only the rows changed since the start."""
        if table not in self._config.table_names:
            return  # the signal table
        if self._config.snapshot == "never":
            self._logger.warning(
                "snapshot.not_requested",
                table=table,
                reason=f"snapshot: never; rows already in the sinks stay stale ({reason})",
                fix=f"run `cdc snapshot PIPELINE_FILE --table {table}`",
            )
            return
        if any(r["table"] == table and not r.get("where") for r in self._state.requests()):
            return
        if self._unread_plan(table):
            return
        self.request(table, reason)

    def _unread_plan(self, table: str) -> bool:
        """A whole-table re-read of ``table`` is planned and none of its chunks was read yet (none
        done, no window open): every chunk will be read after this DDL, which is committed, so a
        burst of DDL (a rename, then a retype) needs no second full read."""
        entry = self._state.table(table)
        if entry is None or entry.get("kind") != "incremental" or entry.get("where"):
            return False
        if (
            not entry.get("chunks_total")
            or entry.get("done")
            or self._state.ended(entry.get("request"))
        ):
            return False
        with self._lock:
            return not any(w.job.table.name == table for w in self._reader.open_windows.values())

    # -- hooks (called inside the inner poll) -----------------------------------------------

    def _on_watermark(self, message: pg.LogicalMessage, lsn: int) -> None:
        parsed = parse(message.content)
        if parsed is not None:
            self._markers.append((self._inner.pending_events, parsed[0], parsed[1], lsn))

    def _on_signal(self, message: pg.LogicalMessage, lsn: int) -> None:
        payload = message.content.decode("utf-8", "replace")
        self._markers.append((self._inner.pending_events, SIGNAL, payload, lsn))

    # -- poll ------------------------------------------------------------------------------

    def poll(self, max_events: int, timeout_s: float) -> SourceBatch:
        failure = self._reader.failure
        if failure is not None:
            raise failure
        rest, self._rest = self._rest, None
        if rest is not None:  # the part of a batch after a closed window goes first
            return self._woven(rest.events, rest.markers, [], rest.offsets, (), _NONE, rest.ts_ms)
        batch = self._inner.poll(max_events, timeout_s)
        if batch.empty:
            return self._flush_state() or batch
        markers, self._markers = self._markers, []
        changes: list[Change] = list(batch.events)
        written = _Written(batch.records, batch.record_ops)
        if written.ops is not None and (markers or len(self._windows) or self._signal_table):
            # Records the stream wrote, seen one by one only when the windows need them.
            changes = [*written_changes(written.records, written.ops, self._prefix)]
            written = _NONE
        schemas = list(batch.schemas)
        if self._signal_table is not None:
            changes, markers = signal_rows(changes, markers, self._signal_table)
            schemas = [s for s in schemas if (s.schema, s.table) != self._signal_table]
        self._shapes_from_stream(schemas)
        offsets, letters = batch.commit_offsets, batch.dead_letters
        return self._woven(changes, markers, schemas, offsets, letters, written, batch.ts_ms)

    def _shapes_from_stream(self, schemas: Sequence[TableSchema]) -> None:
        """Note the shapes the stream publishes, and flag the windows they overtook: a window
        read before a change the stream shows before its high watermark has rows of the older
        shape, whose schema must not follow the stream's. A batch's schemas precede its events,
        not necessarily its markers: every open window of the table is flagged, to be safe.
        """
        for schema in schemas:
            name = f"{schema.schema}.{schema.table}"
            self._published[name] = schema
            with self._lock:
                self._moved.update(
                    wid for wid, w in self._reader.open_windows.items() if w.job.table.name == name
                )

    def _woven(
        self,
        changes: list[Change],
        markers: list[Marker],
        schemas: list[TableSchema],
        offsets: Offsets | None,
        dead_letters: Sequence[DeadLetter],
        written: _Written,
        ts_ms: int | None,
    ) -> SourceBatch:
        """The batch to hand on, with its markers applied; cut after a closed window.
        ``written``: the records the stream wrote, handed on as they are."""
        window: list[Record] = []
        if markers or len(self._windows):
            woven = self._weave(changes, markers, schemas)
            changes, window = woven.events, woven.records
            if woven.rest is not None:
                self._rest = _Rest(*woven.rest, offsets, ts_ms)
                offsets = None  # more of the same log transaction follows
        events, records, ops = _handed_on(changes, written, window)
        if offsets is not None:
            trimmed = snapshot_offsets.without_progress(offsets)  # the position alone
            trimmed.pop(CAPTURED_KEY, None)
            self._last_offsets = rebuilt(offsets, trimmed)
            if self._state.pending:
                offsets = rebuilt(offsets, {**offsets, **self._state.offsets()})
        self._mid_transaction = offsets is None
        return SourceBatch(events, offsets, schemas, dead_letters, records, ops, ts_ms)

    def _flush_state(self) -> SourceBatch | None:
        """A commit of the snapshot state alone, at the position last handed on: a request
        that failed or was cancelled while no WAL arrives must still reach ``cdc status``.

        Only between log transactions: never inside one the stream is still handing on.
        """
        if not self._state.pending or self._last_offsets is None:
            return None
        if self._mid_transaction or self._rest is not None:
            return None
        offsets = {**self._last_offsets, **self._state.offsets()}
        return SourceBatch(commit_offsets=rebuilt(self._last_offsets, offsets))

    def _weave(
        self, events: list[Change], markers: Sequence[Marker], schemas: list[TableSchema]
    ) -> _Woven:
        out: list[Change] = []
        done = 0
        for n, (index, kind, payload, lsn) in enumerate(markers):
            self._observe(events[done:index], out)
            done = max(done, min(index, len(events)))
            if kind == LOW:
                with self._lock:
                    self._windows.low(payload)
            elif kind == HIGH:
                records = self._close_window(payload, lsn, schemas)
                if records:  # they follow every event before the mark, and precede the rest
                    after = [(i - done, k, p, at) for i, k, p, at in markers[n + 1 :]]
                    if done < len(events) or after:
                        return _Woven(out, records, (events[done:], after))
                    return _Woven(out, records)
            else:
                self._signal(payload)
        self._observe(events[done:], out)
        return _Woven(out)

    def _observe(self, events: Sequence[Change], out: list[Change]) -> None:
        if len(self._windows):
            wrapped = self._options.schemas_enable
            with self._lock:
                for event in events:
                    if isinstance(event, WrittenChange):
                        self._observe_written(event, wrapped)
                    elif event.op is Op.TRUNCATE:
                        self._windows.observe_truncate(event.table_id)
                    else:
                        self._windows.observe(event.table_id, _key_json(event, wrapped))
        out.extend(events)

    def _observe_written(self, change: WrittenChange, wrapped: bool) -> None:
        if change.truncate:
            self._windows.observe_truncate(change.table_id)
        elif not change.tombstone:  # a tombstone's delete was seen just before it
            self._windows.observe(change.table_id, change.window_key(wrapped))

    def _close_window(self, wid: str, lsn: int, schemas: list[TableSchema]) -> list[Record]:
        with self._lock:
            closed = self._windows.high(wid)
            window = self._reader.open_windows.pop(wid, None)
        if closed is None or window is None:
            return []
        table, rows = closed
        job = window.job
        now = now_ms()
        options = self._options
        connect = relation_schemas(job.table.state, options) if options.schemas_enable else None
        records = window_records(
            job,
            rows,
            pipeline=self._pipeline,
            db=self._db,
            position=lsn,
            ts_ms=now,
            now_ms=now,
            schemas=connect,
            options=options,
            transforms=self._transforms,
        )
        # The rows are in the shape of their read: publish it unless the sinks have it already
        # or the stream moved on during the window (the tracker then re-reads if rows changed).
        shape = job.table.state.table_schema
        if wid not in self._moved and not shape.same_shape(self._published.get(table)):
            self._published[table] = shape
            schemas.append(shape)
        self._moved.discard(wid)
        figures = self._state.chunk_done(table, job.chunk.index, len(rows))
        self._progress.chunk_done(table, job.chunk.index, len(rows), figures)
        window.done.set()
        return records

    def _signal(self, payload: str) -> None:
        """A signal of ``cdc snapshot`` (:mod:`.signal`), in stream order."""
        try:
            signal = orjson.loads(payload)
            kind = signal.get("type", "snapshot")
            target = signal["request"] if kind == "cancel" else signal["table"]
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            self._logger.warning("snapshot.signal_ignored", reason="not a request", payload=payload)
            return
        if kind == "cancel":
            self._cancel(target, signal.get("id"))
        elif kind != "snapshot":
            self._logger.warning(
                "snapshot.signal_ignored", reason=f"unknown type {kind!r}", payload=payload
            )
        elif target not in self._config.table_names:
            self._logger.warning(
                "snapshot.signal_ignored", reason=f"{target} is not captured", payload=payload
            )
        else:
            keys = signal.get("keys")  # cdc verify --repair
            self.request(target, "cdc snapshot", signal.get("where"), signal.get("id"), keys)

    def _cancel(self, request: str | None, signal: str | None) -> None:
        """Drop ``request`` (``None``: every request) wherever it is, then stop reading it."""
        dropped = self._state.cancel(request, signal)
        self._reader.drop_ended()
        self._logger.info(
            "snapshot.cancelled",
            request=request or "all",
            dropped=dropped,
            note="rows already written stay: they are upserts of the rows as they were read",
        )

    # -- helpers ---------------------------------------------------------------------------

    def _catalog(self) -> Catalog:
        return Catalog(self._dsn, redact_url(self._dsn), self._config.connect_timeout_s)

    def _describe(self, name: str, quiet: bool = False) -> SnapshotTable:
        catalog = self._catalog()
        try:
            schema, _, table = name.partition(".")
            role = catalog.check_role()
            info = catalog.table(schema, table, role)
            return describe_one(
                catalog,
                TypeRegistry(self._options),
                self._config,
                self._pipeline,
                info,
                self._logger,
                quiet,
                self._inner.filters.get(name, PLAIN),  # bound: a rename keeps its mask
            )
        finally:
            catalog.close()

    def _refresh(self, table: SnapshotTable) -> SnapshotTable:
        """``table`` as the catalog describes it now (before each chunk's read)."""
        return self._describe(table.name, quiet=True)

    def _reader_plan_connection(self) -> psycopg.Connection[Any]:
        conninfo = session_conninfo(self._dsn, self._config.connect_timeout_s)
        return psycopg.connect(conninfo, autocommit=True)

    def close(self) -> None:
        self._reader.close()


def _key_json(event: ChangeEvent, wrapped: bool) -> bytes:
    """The event's key as a window's rows are keyed: ``encode_key``'s JSON. The record key its
    source wrote is those bytes (see ``tests/unit/test_pg_row_encoder.py``) unless the envelope
    ``wrapped`` it (``schemas.enable``): a wrapped key would match no row of the window, and
    the stale row read before the change would follow it to the sinks."""
    encoded = event.encoded
    return encode_key(event.key) if encoded is None or wrapped else encoded[2]


@dataclass(frozen=True)
class _Written:
    """Records the stream wrote for its changes, and the operation of each (``ops`` ``None``:
    none, the stream handed on events)."""

    records: Sequence[Record] = ()
    ops: Sequence[str] | None = None


_NONE = _Written()


def _handed_on(
    changes: list[Change], written: _Written, window: list[Record]
) -> tuple[list[ChangeEvent], list[Record], list[str] | None]:
    """The events, records and record operations of a batch to hand on: the stream's changes
    (events, or the records it wrote, woven or as they came), then a closed window's rows.
    A batch's changes are all of one kind, so the first tells which."""
    if not changes or not isinstance(changes[0], WrittenChange):
        events = cast(list[ChangeEvent], changes)
        if written.ops is None:
            return events, [*written.records, *window], None  # window rows alone: op r
        return events, [*written.records, *window], [*written.ops, *("r" for _ in window)]
    ours = cast(list[WrittenChange], changes)
    records = [*(c.record for c in ours), *window]
    return [], records, [*(c.op for c in ours), *("r" for _ in window)]
