"""The MongoDB source: an optional snapshot in ``_id`` ranges, then change streams.

``open`` connects, checks every collection exists, and decides the snapshot (see
:func:`decide`). A snapshot first records where the streams will start (their resume token or
cluster time), then reads the collections in parallel; its rows carry a position just before that
point, so any change streamed afterwards wins over them in the sinks' version guard, and changes
that overlap the scan are harmless. The streams open once the snapshot is done.

Every batch's ``commit_offsets`` hold the whole ``mongodb`` entry (stream points, snapshot
progress, notes), stored by the runtime in the same log transaction as the batch's records:
MongoDB keeps no state for a change stream, so the log is the only place a position lives, and
``ack`` has nothing to release (it checks that no stream's point moved back).

History lost (the oplog no longer holds a stored point, error 286, or the server refuses the
token): by default ``open`` fails and says how to recover; with ``snapshot: when_needed`` the
collections of that stream are snapshotted again from a fresh start point, and a note is kept
in the offsets (``history_lost``), which ``cdc status`` shows.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from bson.errors import BSONError
from pymongo import MongoClient
from pymongo import errors as px

from cdc.config.pipeline import redact_url
from cdc.contracts.positions import Offsets, PositionedOffsets, position_in, require_forward
from cdc.contracts.source import SourceBatch, SourceContext
from cdc.support.clock import now_ms
from connectors.mongodb import changes, errors, positions, repair, snapshot, snapshot_rows
from connectors.mongodb.client import (
    check_collections,
    connect,
    load_schemas,
    replica_set_or_mongos,
)
from connectors.mongodb.config import MongoSourceConfig
from connectors.mongodb.connect import Schemas
from connectors.mongodb.fields import FieldTracker
from connectors.mongodb.filters import CollectionFilter, collection_filters, stream_stages
from connectors.mongodb.plan import StreamSpec, plan_streams
from connectors.mongodb.stream import StreamReader, start_point
from connectors.mongodb.streaming import Collected, StreamSet
from connectors.mongodb.tables import (
    announce_added,
    announce_filters,
    captured_changes,
    resnapshot_due,
    without_reads,
)
from snapshots.progress import Reporter, reporter
from snapshots.state import FINISHED_KEPT

Doc = dict[str, Any]


def decide(mode: str, entry: Mapping[str, Any]) -> str | None:
    """The reason to start a new snapshot now, or ``None`` (pure; see the modes in the docs)."""
    if entry.get("snapshot"):
        return None  # an unfinished snapshot is resumed in every mode
    if not entry.get("streams"):
        return None if mode == "never" else "no stored position: the pipeline starts with one"
    if mode == "always":
        return "snapshot mode always"
    return None


class MongoSource:
    """Captures the configured collections (see the module docstring)."""

    def __init__(self, config: MongoSourceConfig, context: SourceContext) -> None:
        self._config, self._context = config, context
        self._where = redact_url(config.dsn.get_secret_value())
        self._logger = context.logger.bind(source="mongodb", server=self._where)
        self._collections = config.collections()
        self._specs = plan_streams(config.watched(), config.stream_scope)
        self._tracker = FieldTracker(changes.CONNECTOR)
        self._filters = collection_filters(
            config.tables, config.mask_key_bytes(), config.full_document == "required"
        )
        self._client: MongoClient[Doc] | None = None
        self._entry: Doc = {}
        self._scanner: snapshot.Scanner | None = None
        #: The identities of the ``_id`` values a repair's range read so far, by table.
        self._found: dict[str, set[bytes]] = {}
        self._reporter: Reporter | None = None
        self._streams: StreamSet | None = None
        self._unsaved = False
        self._acked: positions.MongoPosition | None = None  # the session's last ack
        # Debezium's fixed MongoDB schemas, not ones inferred from the values.
        self._connect = Schemas(context.pipeline) if context.envelope.schemas_enable else None

    def tables(self) -> list[tuple[str, str]]:
        """``(db, collection)`` of every captured collection."""
        return list(self._collections)

    # -- open ------------------------------------------------------------------------------

    def open(self, stored_offsets: Offsets) -> None:
        """Connect, check, and resume the snapshot or the streams from ``stored_offsets``.

        Raises:
            SourceUnavailable: the server cannot be reached (the runtime retries).
            SourceFatal: a standalone server, a missing collection, lost history (unless
                ``snapshot: when_needed``), refused credentials.
        """
        self._entry = positions.stored(stored_offsets)
        self._entry.setdefault("streams", {})
        self._acked = None
        self._client = connect(self._config, self._where)
        check_collections(self._client, self._config, self._where)
        schemas = load_schemas(self._context.log, self._context.pipeline, self._collections)
        for schema in schemas:
            self._tracker.restore(schema)
        known = self._entry.get("captured")
        published = {f"{s.schema}.{s.table}" for s in schemas}
        added = captured_changes(self._entry, self._config.table_names, published, self._logger)
        self._unsaved = self._entry["captured"] != known  # stored even with nothing to stream
        announce_filters(self._filters.values(), self._config.full_document, self._logger)
        redo = resnapshot_due(self._config, self._context, stored_offsets, added, self._logger)
        reason = decide(self._context.snapshot_mode, self._entry)
        if reason is not None:
            if added:
                announce_added(added, self._context.snapshot_mode, True, self._logger)
            self._begin_snapshot(self._collections, reason)
        elif added or redo:
            self._snapshot_added(added, redo)
        elif not self._entry["streams"]:
            self._record_start_points(self._specs)
            # Stored at the first poll: a restart before any change must resume from here,
            # not from a later "now" that would skip the changes in between.
            self._unsaved = True
        if self._entry.get("snapshot"):
            self._start_scanner()
        else:
            self._open_streams()

    def _snapshot_added(self, added: list[str], redo: list[str]) -> None:
        """Snapshot the added collections as the mode says, and those to re-read because their
        filters or the transforms changed (``redo``): with the unfinished snapshot when one is
        stored, else in one of their own (the streams wait for it, as always)."""
        wanted = list(redo)
        if (
            added
            and announce_added(added, self._context.snapshot_mode, False, self._logger).snapshot
        ):
            wanted = added + wanted
        wanted = without_reads(wanted, self._config, self._logger)
        if not wanted:
            return
        running = self._entry.get("snapshot")
        if not running:
            pairs = [(t.split(".", 1)[0], t.split(".", 1)[1]) for t in wanted]
            reason = "filters or transforms changed" if not added else "added to source.tables"
            self._begin_snapshot(pairs, reason)
        else:
            for name in wanted:
                snapshot.add_collection(running, name, self._plan(name))
        if self._entry.get("snapshot"):
            snapshot.sweep(self._entry["snapshot"], redo)

    def _plan(self, table: str) -> list[Doc]:
        assert self._client is not None
        table_filter = self._filter(table)
        masked = table_filter is not None and table_filter.masked_key
        return snapshot.plan_collection(
            self._client, table, self._config.snapshot_range_docs, masked
        )

    def _filter(self, table: str) -> CollectionFilter | None:
        db, _, coll = table.partition(".")
        return self._filters.get((db, coll))

    def _record_start_points(self, specs: list[StreamSpec]) -> None:
        """Store where ``specs`` start streaming: now."""
        for spec in specs:
            self._entry["streams"][spec.id] = positions.stream_entry(*self._start_point(spec))

    def _begin_snapshot(self, collections: list[tuple[str, str]], reason: str) -> None:
        """Plan a snapshot of ``collections`` at the current start point of their streams.

        Streams with a stored point keep it (``always`` re-reads while changes since that point
        still stream, and lose to the newer rows); the others start from the point recorded now.
        A collection whose ``ops`` leave out ``r`` is not read: only its stream's point is.
        """
        assert self._client is not None
        specs = [s for s in self._specs if set(s.collections) & set(collections)]
        names = without_reads([f"{d}.{c}" for d, c in collections], self._config, self._logger)
        collections = [c for c in collections if f"{c[0]}.{c[1]}" in names]
        stored, times = self._entry["streams"], []
        for spec in specs:
            token, when = self._start_point(spec)
            if spec.id not in stored:
                stored[spec.id] = positions.stream_entry(token, when)
            if when is not None:
                times.append(when)
        # Without a cluster time from the server, the wall clock's second is still no later
        # than anything the streams will deliver.
        start = min(times) if times else int(time.time()) << 32
        if not collections:
            self._unsaved = True  # the recorded points, stored at the first poll
            return
        planned = {name: self._plan(name) for name in names}
        # One below the start point: a change streamed from that point wins over the rows.
        state = snapshot.new_state(uuid.uuid4().hex, max(start - 1, 0), reason, planned)
        self._entry["snapshot"] = state
        self._logger.info(
            "snapshot.started",
            reason=reason,
            tables=sorted(planned),
            ranges=sum(len(p) for p in planned.values()),
            position=state["position"],
        )

    def _start_point(self, spec: StreamSpec) -> tuple[Doc | None, int | None]:
        assert self._client is not None
        try:
            return start_point(self._client, spec)
        except px.PyMongoError as exc:
            raise errors.translate(exc, self._where, "opening a change stream") from exc

    def _start_scanner(self) -> None:
        assert self._client is not None
        state = self._entry["snapshot"]
        todo = snapshot.pending(state)
        self._logger.info("snapshot.resuming" if todo else "snapshot.empty", ranges=len(todo))
        self._scanner = snapshot.Scanner(
            self._client,
            state,
            self._config.snapshot_workers,
            self._config.snapshot_batch,
            {f.name: f for f in self._filters.values()},
            self._config.max_batch_bytes,
        )
        self._reporter = reporter(self._logger)
        self._found = {}  # every pending range is read from its start or its stored point
        self._scanner.start()

    def _open_streams(self) -> None:
        assert self._client is not None
        readers: list[StreamReader] = []
        lost: list[tuple[StreamSpec, px.OperationFailure]] = []
        masked = frozenset(c for c, f in self._filters.items() if f.masked_key)
        real = self._real_server()
        for spec in self._specs:
            stages = stream_stages(spec.collections, self._filters, spec.coll is not None, real)
            reader = StreamReader(self._client, spec, self._config, stages, masked)
            entry = self._entry["streams"].get(spec.id) or self._fallback_entry(spec)
            try:
                reader.open(entry)
            except px.OperationFailure as exc:
                if not errors.cannot_resume(exc):
                    raise errors.translate(exc, self._where, "opening a change stream") from exc
                lost.append((spec, exc))
                continue
            except px.PyMongoError as exc:
                raise errors.translate(exc, self._where, "opening a change stream") from exc
            readers.append(reader)
        if lost:
            for reader in readers:
                reader.close()
            self._history_lost(lost)
            return
        self._forget_unplanned_streams(readers)
        self._streams = StreamSet(
            readers,
            set(self._collections),
            self._tracker,
            self._context.on_bad_record,
            self._logger,
            self._where,
            self._config.signal(),
            self._context.pipeline,
            self._filters,
            self._config.max_batch_bytes,
            self._config.idle_commit_interval_s,
        )
        self._logger.info("source.streaming", streams=[r.spec.id for r in readers])

    def _real_server(self) -> bool:
        assert self._client is not None
        if not any(f.query is not None for f in self._filters.values()):
            return False  # nothing to ask it for
        try:
            return replica_set_or_mongos(self._client)
        except px.PyMongoError as exc:
            raise errors.translate(exc, self._where, "connecting") from exc

    def _forget_unplanned_streams(self, readers: list[StreamReader]) -> None:
        """Drop the stored points of streams no longer planned (their collections were removed,
        or the scope changed): a point kept would be resumed from if they came back, long after
        the oplog dropped it. Only once every planned stream is open: until then a new stream
        may still start from the earliest of them (see :meth:`_fallback_entry`)."""
        planned = {r.spec.id for r in readers}
        for stream in [sid for sid in self._entry["streams"] if sid not in planned]:
            del self._entry["streams"][stream]
            self._logger.info("stream.forgotten", stream=stream, reason="no longer planned")
            self._unsaved = True

    def _fallback_entry(self, spec: StreamSpec) -> Doc:
        """A stream with no stored point (its collections were added): start from the earliest
        point stored for any other stream, so nothing after it is missed."""
        times = [e.get("cluster_time") for e in self._entry["streams"].values()]
        known = [t for t in times if isinstance(t, int)]
        self._logger.warning("stream.no_stored_point", stream=spec.id)
        return positions.stream_entry(None, min(known) if known else None)

    def _history_lost(self, lost: list[tuple[StreamSpec, px.OperationFailure]]) -> None:
        names = [f"{d}.{c}" for spec, _ in lost for d, c in spec.collections]
        reasons = "; ".join(f"{spec.id}: {exc}" for spec, exc in lost)
        if self._context.snapshot_mode != "when_needed":
            raise errors.HistoryLost(
                f"MongoDB at {self._where}: the change stream cannot resume from the stored "
                f"position of {', '.join(names)} ({reasons}). The oplog no longer holds the "
                "changes since then (or the stored resume token is unusable), so changes may "
                "have been missed. To recover, set `snapshot: when_needed` in the pipeline's "
                "source section to re-snapshot the affected collections and continue, or delete "
                "the pipeline's stored offsets (the log) to start over with an initial snapshot; "
                "a larger oplog (replSetResizeOplog) keeps this from happening again.",
            )
        self._logger.warning(
            "history.lost", tables=names, reason=reasons, action="re-snapshot (when_needed)"
        )
        # The signal collection shares streams but is never snapshotted: its requests are not rows.
        captured = set(self._collections)
        collections = [c for spec, _ in lost for c in spec.collections if c in captured]
        action = "re-snapshot" if collections else "restart from now"
        note = {"at_ms": now_ms(), "tables": names, "reason": reasons[:500]}
        positions.add_history_lost(self._entry, note | {"action": action})
        for spec, _ in lost:
            self._entry["streams"].pop(spec.id, None)
            positions.count_restart(self._entry, spec.id)
        if not collections:  # only the signal collection's stream
            self._record_start_points([spec for spec, _ in lost])
            self._unsaved = True
            return
        self._begin_snapshot(collections, "history lost: the oplog no longer holds the position")
        if self._entry.get("snapshot"):
            self._start_scanner()

    # -- poll ------------------------------------------------------------------------------

    def poll(self, max_events: int, timeout_s: float) -> SourceBatch:
        """Snapshot batches first, then stream changes (see the module docstring).

        Raises:
            SourceUnavailable: the server went away (the runtime reopens from the log).
            SourceFatal: the stream cannot continue.
        """
        if self._scanner is not None:
            return self._poll_snapshot(timeout_s)
        if self._streams is None:
            self._open_streams()
            if self._streams is None:
                return SourceBatch()
        if self._unsaved:
            self._unsaved = False
            return SourceBatch(commit_offsets=self.offsets())
        limit = max(1, min(max_events, self._config.max_batch_events))
        collected = self._streams.poll(limit)
        if collected is None:
            return SourceBatch()
        if self._streams.signals:
            self.offsets()  # the streams' points, up to and including the request
            # Taken off the list: a request that is ignored must not be acted on at every poll.
            self._requested(*self._streams.signals.pop(0))
        offsets = None if self._streams and self._streams.in_transaction else self.offsets()
        return self._batch(collected, offsets)

    def _requested(self, request: Doc, position: int) -> None:
        """Re-read a collection now (``cdc snapshot``), or some of its documents by ``_id``
        (``cdc verify --repair``, :mod:`.repair`): pause the streams, scan, resume.

        The rows get the request's own position: newer than every change streamed before it,
        older than every change after it, which streams again once the scan is done. So a
        document changed after the request but read (or found missing) in its newer state
        still ends in the state its last change gives it.
        """
        table, request_id = str(request.get("table")), str(request.get("_id"))
        if table not in self._config.table_names:
            self._ignored(request_id, table, "not a captured table")
            return
        if not without_reads([table], self._config, self._logger):
            self._ignored(request_id, table, "its ops leave out r: no snapshot reads it")
            return
        ids = request.get("ids")
        refused = None if ids is None else self._unrepairable(table, ids)
        if refused is not None:
            self._ignored(request_id, table, refused)
            return
        assert self._client is not None and self._streams is not None
        self._streams.close()
        self._streams = None
        if ids is None:
            planned = {table: self._plan(table)}
            reason = f"requested by cdc snapshot ({request_id})"
        else:
            planned = {table: snapshot.repair_plan()}
            reason = f"requested by cdc verify --repair ({request_id})"
        state = snapshot.new_state(uuid.uuid4().hex, position, reason, planned, request_id)
        if ids is not None:
            snapshot.add_repair(state, table, list(ids))
        self._entry["snapshot"] = state
        self._logger.info(
            "snapshot.started",
            reason=reason,
            tables=[table],
            position=position,
            keys=None if ids is None else len(ids),
        )
        self._start_scanner()

    def _ignored(self, request_id: str, table: str, reason: str) -> None:
        """Log a request not carried out, and store it as failed with ``reason``, so that
        ``cdc snapshot --wait`` and ``cdc verify --repair`` end with it instead of waiting out
        their timeout."""
        self._logger.warning("signal.ignored", table=table, reason=reason)
        failure = {"id": request_id, "table": table, "reason": reason, "rows": 0}
        kept = [*self._entry.get("failed_requests", []), {**failure, "failed_ms": now_ms()}]
        self._entry["failed_requests"] = kept[-FINISHED_KEPT:]

    def _unrepairable(self, table: str, ids: Any) -> str | None:
        """Why a repair request's ``ids`` cannot be read, if so."""
        table_filter = self._filter(table)
        if table_filter is not None and table_filter.masked_key:
            return "_id is hashed: a repair would store raw _id values"
        if not repair.well_formed(ids):
            return "ids is not a list of lists of Extended JSON texts"
        try:
            repair.query(ids)
        except (ValueError, TypeError, KeyError, BSONError) as exc:
            return f"ids holds what is no _id: {exc}"
        return None

    def _batch(self, collected: Collected, offsets: Doc | None) -> SourceBatch:
        if self._connect is not None:
            self._connect.attach(collected.events)
        return SourceBatch(
            events=collected.events,
            commit_offsets=offsets,
            schemas=list(collected.schemas.values()),
            dead_letters=collected.dead_letters,
        )

    def _poll_snapshot(self, timeout_s: float) -> SourceBatch:
        assert self._scanner is not None
        try:
            batch = self._scanner.take(timeout_s)
        except px.PyMongoError as exc:
            raise errors.translate(exc, self._where, "reading a snapshot") from exc
        if batch is None:
            return SourceBatch()
        state = self._entry["snapshot"]
        collected = Collected()
        db, coll = batch.table.split(".", 1)
        table_filter = self._filters.get((db, coll))
        events, docs = snapshot_rows.events(batch, state, table_filter)
        found = self._found.setdefault(batch.table, set())
        collected.events = events + snapshot_rows.repaired(batch, state, found, table_filter)
        schema = self._tracker.observe((db, coll), docs)
        if schema is not None:
            collected.schemas[(db, coll)] = schema
        figures = snapshot.record(state, batch)
        if batch.done and self._reporter is not None:
            self._reporter.chunk_done(batch.table, batch.index, len(batch.docs), figures)
        if self._scanner.remaining == 0:
            if collected.events:  # Debezium marks the snapshot's last row "last"
                last = snapshot_rows.row_info(db, coll, state["position"], "last")
                collected.events[-1].source = last
            self._finish_snapshot(state)
        return self._batch(collected, self.offsets())

    def _finish_snapshot(self, state: Doc) -> None:
        last = snapshot_rows.finished(self._entry, state)
        rows, seconds = sum(last["rows"].values()), last["seconds"]
        self._logger.info("snapshot.finished", rows=rows, seconds=seconds)
        self._close_scanner()

    def offsets(self) -> PositionedOffsets:
        """The whole ``mongodb`` entry as of what was handed on so far."""
        entry = dict(self._entry)
        streams = dict(entry.get("streams", {}))
        if self._streams is not None:
            streams.update((r.spec.id, r.entry()) for r in self._streams.readers)
        entry["streams"] = streams
        self._entry["streams"] = streams
        position = positions.MongoPosition.from_entries(streams, entry.get(positions.RESTARTS_KEY))
        offsets = PositionedOffsets({positions.OFFSET_KEY: entry}, position)
        # A read-only mirror for `cdc status`, never read back; stored whole, as the entry is.
        offsets.update(snapshot.mirror(entry))
        return offsets

    # -- ack, close ------------------------------------------------------------------------

    def ack(self, offsets: Offsets) -> None:
        """Nothing to release (the resume point lives only in the log); no stream's point may
        move back from the previous ``ack`` of this session.

        Raises:
            PositionMovedBackwards: one did.
        """
        position = position_in(offsets, positions.MongoPosition)
        if position is not None:
            require_forward(self._acked, position, "acknowledged")
            self._acked = position

    def _close_scanner(self) -> None:
        if self._scanner is not None:
            self._scanner.close()
            self._scanner = None
        if self._reporter is not None:
            self._reporter.close()
            self._reporter = None

    def close(self) -> None:
        self._close_scanner()
        if self._streams is not None:
            self._streams.close()
            self._streams = None
        if self._client is not None:
            self._client.close()
            self._client = None
