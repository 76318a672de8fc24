"""The PostgreSQL source with snapshots: what the ``postgres`` entry point builds.

It wraps :class:`connectors.postgres.source.PostgresSource`:

* ``open`` decides what this start needs (:func:`connectors.postgres.snapshot.modes.decide`).
  For a consistent initial snapshot it creates the slot with an exported snapshot and starts the
  parallel readers; otherwise it opens the stream at once and queues any watermark work (a
  resumed snapshot's remaining chunks, ``snapshot: always``, ``cdc snapshot`` requests).
* ``poll`` first returns snapshot pieces; the log commits when a chunk is complete, storing the
  chunk progress and the position ``{"postgres": {"lsn": consistent_point}}``. When every chunk
  is in the log it releases the exported snapshot and streams from that point. While streaming
  it weaves the rows of closed watermark windows into the stream's batches, at their high
  watermark.
* ``ack`` goes to the stream once it runs; snapshot commits need no acknowledgement.

The state records the tables the log holds (``captured``). A table added to ``source.tables``
since is snapshotted while streaming, as ``cdc snapshot`` would, unless the mode is ``never``
(:func:`snapshots.modes.added_tables`); a removed one is taken out of the publication.
"""

from __future__ import annotations

from collections import Counter

from cdc.config.pipeline import redact_url
from cdc.contracts.errors import CdcError, SourceUnavailable
from cdc.contracts.positions import Offsets
from cdc.contracts.schema import TableSchema
from cdc.contracts.source import SourceBatch, SourceContext
from cdc.envelope.template import RecordTemplate
from cdc.log.base import Record
from cdc.transforms.filters import TableEntry
from connectors.postgres.catalog import Catalog, SlotState
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.lifecycle import (
    UNREAD,
    Unread,
    drop_from_publication,
    publication_tables,
)
from connectors.postgres.lsn import Lsn
from connectors.postgres.snapshot.channel import Channel, choose, ensure_table
from connectors.postgres.snapshot.initial import ExportedSnapshot, start_exported
from connectors.postgres.snapshot.markers import ChunkEnd, SnapshotMarks
from connectors.postgres.snapshot.modes import StartState, decide
from connectors.postgres.snapshot.parallel import (
    ChunkFailed,
    ExportedSnapshotReader,
    ReadSettings,
)
from connectors.postgres.snapshot.rows import Transforms, read_template
from connectors.postgres.snapshot.streaming import StreamSnapshots
from connectors.postgres.source import PostgresSource
from snapshots.modes import Action, added_tables, table_changes
from snapshots.progress import Reporter, reporter
from snapshots.state import SnapshotState

#: Most snapshot pieces (of up to 5,000 rows) in one log transaction.
COMMIT_EVERY_PIECES = 10


class SnapshottingPostgresSource:
    """A :class:`PostgresSource` that snapshots as the pipeline's ``snapshot`` mode asks."""

    def __init__(self, config: PostgresSourceConfig, context: SourceContext) -> None:
        self._config, self._context = config, context
        self._dsn = config.dsn.get_secret_value()
        self._logger = context.logger.bind(snapshot_mode=config.snapshot)
        self._inner = PostgresSource(config, context)
        self._channel = Channel(context.pipeline)
        self._state = SnapshotState()
        self._exported: ExportedSnapshot | None = None
        self._reader: ExportedSnapshotReader | None = None
        self._marks: SnapshotMarks | None = None
        self._failed: ChunkFailed | None = None  # raised once the rows read are in the log
        self._stream: StreamSnapshots | None = None
        self._schemas_due: list[TableSchema] = []
        self._reporter: Reporter | None = None
        self.chunks_read = 0  # chunks whose rows this session handed to the log (tests, bench)
        self.streaming = False  # the stream is open (after any exported snapshot)
        self._uncommitted = 0  # snapshot pieces appended since the last commit
        self._added: list[str] = []  # tables added to source.tables since the last start
        # The slot as this start read it, handed to the stream so it is read once per start
        # (unread again once an exported snapshot created it).
        self._slot: SlotState | Unread | None = UNREAD
        self._bulk = False  # the log's key index is dropped while the exported snapshot writes

    def tables(self) -> list[tuple[str, str]]:
        return self._config.table_pairs()

    @property
    def stream(self) -> StreamSnapshots | None:
        """The snapshots inside the stream, once it is open (tests reach its reader)."""
        return self._stream

    # -- open ------------------------------------------------------------------------------

    def open(self, stored_offsets: Offsets) -> None:
        """Decide this start's snapshot work and begin it (see the module docstring).

        Raises:
            SourceFatal: a problem a human must fix (named in the message).
            SourceUnavailable: the server cannot be reached (retried by the runtime).
        """
        self._state = SnapshotState.from_offsets(stored_offsets)
        start = self._probe(stored_offsets)
        decision = decide(self._config.snapshot, start)
        self._logger.info("snapshot.decision", action=decision.action.value, reason=decision.reason)
        self._reporter = reporter(self._logger)
        added = self._announce_added(decision.action)
        self._state.set_captured(self._config.table_names)  # stored with the next commit
        if decision.action is Action.EXPORT:
            self._open_exported(start.slot_exists)
            return
        self._open_stream(stored_offsets)
        assert self._stream is not None
        if decision.action is Action.RESUME:
            self._stream.resume_unfinished()
        elif decision.action is Action.WATERMARK_ALL:
            self._stream.request_all(decision.reason)
        for table in added:
            self._stream.queue(table, "added to source.tables")
        refiltered = set(self._context.refiltered)
        for table in self._context.resnapshot:
            if table not in added:
                # A changed row filter may now leave out rows the sinks hold: delete those too.
                purge = table in refiltered and self._config.table_entry(table).where is not None
                reason = "its filters or the pipeline's transforms changed"
                self._stream.queue(table, reason, purge=purge)
        self._stream.resume_requests()

    def _announce_added(self, action: Action) -> list[str]:
        """Log what this start does about the tables added to ``source.tables``; returns those
        to snapshot while streaming (as the mode says)."""
        if not self._added:
            return []
        plan = added_tables(self._config.snapshot, action)
        log = self._logger.info if plan.snapshot else self._logger.warning
        log("source.tables_added", tables=self._added, snapshot=plan.snapshot, reason=plan.reason)
        return self._added if plan.snapshot else []

    def _probe(self, stored_offsets: Offsets) -> StartState:
        stored = Lsn.from_offsets(stored_offsets)
        catalog = Catalog(self._dsn, redact_url(self._dsn), self._config.connect_timeout_s)
        try:
            self._inner.check_server(catalog)  # a version the source lacks stops it here
            self._slot = slot = catalog.slot(self._config.slot_name(self._context.pipeline))
            self._channel = choose(catalog.conn, self._config, self._context.pipeline)
            self._use_channel(catalog)
            # Before any snapshot row is written: the Kafka log keeps their TOAST-able values.
            self._inner.declare_toast(catalog)
            if stored is not None:  # a first start captures what it finds
                self._table_changes(catalog)
        finally:
            catalog.close()
        confirmed = None
        if slot is not None and slot.confirmed_flush:
            confirmed = Lsn.parse(slot.confirmed_flush)
        unfinished = bool(self._state.unfinished() or self._state.requests())
        return StartState(stored, slot is not None, confirmed, unfinished)

    def _table_changes(self, catalog: Catalog) -> None:
        """Compare ``source.tables`` with the tables the log holds; stop capturing the removed.

        A state stored before the log recorded its tables falls back to the publication: a
        configured table it lacks was never captured (the source adds every table it captures).
        """
        publication = self._config.publication_name(self._context.pipeline)
        captured = self._state.captured()
        if captured is None:
            captured = self._published_captured(catalog, publication)
        changes = table_changes(self._config.table_names, captured)
        self._added = changes.added
        if changes.removed:
            pairs = [(t.partition(".")[0], t.partition(".")[2]) for t in changes.removed]
            drop_from_publication(catalog, publication, pairs, self._logger)
            self._state.forget(changes.removed)
            self._logger.warning(
                "source.tables_removed",
                tables=changes.removed,
                reason="no longer in source.tables: their changes are not captured from now on; "
                "their topics and the rows in the sinks stay",
            )

    def _published_captured(self, catalog: Catalog, publication: str) -> list[str]:
        published = publication_tables(catalog, publication)
        if published is None:
            return list(self._config.table_names)  # nothing to tell: take them all as captured
        return [".".join(pair) for pair in self._config.table_pairs() if pair in published]

    def _use_channel(self, catalog: Catalog) -> None:
        """With a signal table, create it and stream it too (its rows never reach a topic)."""
        table_id = self._channel.table_id
        if table_id is None:
            return
        ensure_table(catalog.conn, self._channel)
        self._logger.info("snapshot.signal_table", table=table_id)
        if table_id not in self._config.table_names:
            tables = [*self._config.tables, TableEntry(name=table_id)]
            inner_config = self._config.model_copy(update={"tables": tables})
            self._inner = PostgresSource(inner_config, self._context)

    def _open_exported(self, slot_exists: bool) -> None:
        pipeline = self._context.pipeline
        self._slot = UNREAD  # about to be (re)created with the snapshot
        exported = start_exported(
            self._config,
            pipeline,
            self._state,
            self._logger,
            slot_exists,
            self._channel.table,
            self._context.envelope,
        )
        self._exported = exported
        # Each key is written once: the log may build its key index in one pass at the end.
        self._bulk = self._context.log.defer_key_index()
        settings = self._read_settings(exported)
        self._marks = _marks(exported, settings)
        self._start_reader(exported, settings)

    def _read_settings(self, exported: ExportedSnapshot) -> ReadSettings:
        """How the snapshot's rows are read and written: at the slot's consistent point."""
        return ReadSettings(
            dsn=self._dsn,
            connect_timeout_s=self._config.connect_timeout_s,
            pipeline=self._context.pipeline,
            db=exported.database,
            position=exported.consistent_point - 1,  # see .rows: streams sort after
            ts_ms=exported.ts_ms,
            piece_rows=min(5000, self._config.max_batch_events),
            piece_bytes=self._config.max_batch_bytes,
            options=self._context.envelope,
            lsn=exported.consistent_point,
            tx_id=exported.tx_id,
            transforms=Transforms(self._context.transforms, self._context.on_bad_record),
        )

    def _start_reader(self, exported: ExportedSnapshot, settings: ReadSettings) -> None:
        """Start reading the exported snapshot's chunks with the configured workers."""
        self._reader = ExportedSnapshotReader(
            settings,
            exported.snapshot_name,
            exported.work,
            self._config.snapshot_workers,
            self._logger,
        )
        self._schemas_due = [t.state.table_schema for t in exported.tables]
        self._reader.start()
        self._logger.info(
            "snapshot.started",
            consistent_point=int(exported.consistent_point),
            tables=[t.name for t in exported.tables],
            chunks=len(exported.work),
            workers=self._config.snapshot_workers,
        )

    def _open_stream(self, stored_offsets: Offsets) -> None:
        assert self._reporter is not None
        self._stream = StreamSnapshots(
            self._config,
            self._context,
            self._inner,
            self._state,
            self._reporter,
            self._logger,
            self._channel,
        )
        slot, self._slot = self._slot, UNREAD
        self._inner.open(stored_offsets, slot)
        self._stream.started(stored_offsets)
        self.streaming = True

    # -- poll ------------------------------------------------------------------------------

    def poll(self, max_events: int, timeout_s: float) -> SourceBatch:
        """Snapshot pieces first, then the stream with any watermark windows woven in."""
        if self._failed is not None:
            raise self._failed
        if self._reader is not None:
            return self._poll_exported(timeout_s)
        if self._stream is None:
            raise SourceUnavailable("the PostgreSQL source is not open")
        return self._stream.poll(max_events, timeout_s)

    def _poll_exported(self, timeout_s: float) -> SourceBatch:
        reader, exported = self._reader, self._exported
        assert reader is not None and exported is not None
        if reader.finished:
            return self._finish_exported(exported)
        try:
            piece = reader.next(timeout_s)
        except ChunkFailed as exc:
            return self._stop_exported(exc, exported)
        schemas, self._schemas_due = self._schemas_due, []
        if piece is None and not schemas:
            return SourceBatch()
        records: list[Record] = []
        if piece is not None:
            assert self._marks is not None
            records, ends = self._marks.feed(piece)
            self._chunks_done(ends)
        self._uncommitted += 1
        # A commit per finished chunk (and per first batch, and every few pieces to bound the log
        # transaction): fewer fsyncs than one per piece, and progress moves only at a commit.
        if not (schemas or self._uncommitted >= COMMIT_EVERY_PIECES or (piece and piece.last)):
            return SourceBatch(records=records, schemas=schemas)
        self._uncommitted = 0
        offsets = exported.consistent_point.to_offsets()
        offsets = offsets.with_items(self._state.offsets(progress=True))
        return SourceBatch(records=records, commit_offsets=offsets, schemas=schemas)

    def _stop_exported(self, exc: ChunkFailed, exported: ExportedSnapshot) -> SourceBatch:
        """A chunk failed: first store the rows held for their markers and the chunks they
        end (so a resumed snapshot skips them), then fail on the next poll."""
        assert self._marks is not None
        records, ends = self._marks.flush()
        if not records and not ends:
            raise exc
        self._failed = exc
        self._chunks_done(ends)
        offsets = exported.consistent_point.to_offsets()
        offsets = offsets.with_items(self._state.offsets(progress=True))
        return SourceBatch(records=records, commit_offsets=offsets)

    def _chunks_done(self, ends: list[ChunkEnd]) -> None:
        """Chunks whose rows are all handed to the log (stored as done with the next commit)."""
        assert self._reporter is not None
        for table, chunk, rows in ends:
            figures = self._state.chunk_done(table, chunk, rows)
            self.chunks_read += 1
            self._reporter.chunk_done(table, chunk, rows, figures)

    def _finish_exported(self, exported: ExportedSnapshot) -> SourceBatch:
        """Every chunk is read: write the last row of all (held back for its ``last``
        marker), release the snapshot and stream from its point."""
        assert self._reader is not None and self._marks is not None
        records, ends = self._marks.finish()
        self._chunks_done(ends)
        self._marks = None
        self._reader.close()
        self._reader = None
        exported.release()
        self._exported = None
        self._end_bulk()  # before the stream, whose TOAST fill looks keys up
        offsets = exported.consistent_point.to_offsets()
        self._logger.info("snapshot.finished", consistent_point=int(exported.consistent_point))
        self._open_stream(offsets)
        offsets = offsets.with_items(self._state.offsets(progress=True))
        return SourceBatch(records=records, commit_offsets=offsets)

    # -- ack, close ------------------------------------------------------------------------

    def ack(self, offsets: Offsets) -> None:
        """Forward to the stream once it runs; snapshot commits pin nothing to release."""
        if self._stream is not None:
            self._inner.ack(offsets)

    def close(self) -> None:
        """Stop readers, release the exported snapshot, close the stream."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._exported is not None:
            self._exported.release()
            self._exported = None
        self._end_bulk(closing=True)
        if self._stream is not None:
            self._stream.close()
        self._inner.close()
        if self._reporter is not None:
            self._reporter.close()

    def _end_bulk(self, closing: bool = False) -> None:
        """Build the log's key index again if this snapshot dropped it. While closing, a
        failure is logged only: the log's next compaction pass or key lookup builds it."""
        if not self._bulk:
            return
        self._bulk = False
        try:
            self._context.log.build_key_index()
        except CdcError as exc:
            if not closing:
                raise
            self._logger.warning("snapshot.key_index_deferred", error=str(exc))
            return
        self._logger.info("snapshot.key_index_built")


def _marks(exported: ExportedSnapshot, settings: ReadSettings) -> SnapshotMarks:
    """The ``source.snapshot`` markers of ``exported``'s rows, as ``settings`` writes them."""
    tables = {t.name: t for t in exported.tables}
    chunks = Counter(table.name for table, _ in exported.work)

    def template_of(name: str, flag: str) -> RecordTemplate:
        s = settings
        return read_template(
            s.db, tables[name], s.position, flag, s.ts_ms, s.pipeline, tx_id=s.tx_id
        )

    return SnapshotMarks(dict(chunks), template_of)
