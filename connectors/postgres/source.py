"""The PostgreSQL source: logical replication with pgoutput over the streaming protocol.

Lifecycle, and why in this order: ``open`` checks the server (PostgreSQL 14 or later, and the
options its version offers: :mod:`connectors.postgres.replication.versions`) and the role,
makes sure the publication and the slot exist (or fails loudly when a stored position can no
longer be honoured), then starts streaming from the stored commit LSN; PostgreSQL skips every
transaction that committed at or before it, so a restart gives no duplicate and no gap.
``poll`` returns whole transactions (several small ones per batch, a large one in bounded
pieces with ``commit_offsets=None`` until its commit). ``ack`` is the only place the flush LSN
advances: WAL is released only once the log holds everything before it.

Reconnects: a lost connection raises ``SourceUnavailable`` from ``poll``. The runtime then
rolls back the open log transaction, calls ``close`` and ``open(stored_offsets)`` with backoff,
so a session always resumes from what is durable, even in the middle of a large transaction.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping

from cdc.config.pipeline import redact_url
from cdc.contracts.errors import SourceFatal, SourceUnavailable
from cdc.contracts.positions import Offsets
from cdc.contracts.source import SourceBatch, SourceContext
from connectors.postgres.assembly.assembler import Assembler, MessageHook
from connectors.postgres.assembly.relation_state import check_keyable
from connectors.postgres.assembly.shapes import Resnapshot, ShapeTracker, published_schemas
from connectors.postgres.assembly.toast import ToastFiller
from connectors.postgres.catalog import Catalog, SlotState, TableInfo
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.lifecycle import (
    UNREAD,
    Unread,
    check_slot,
    create_slot,
    ensure_failover,
    lost_slot,
    slot_in_use,
)
from connectors.postgres.lsn import Lsn
from connectors.postgres.publication.filters import TableFilter, bind_filters, table_filters
from connectors.postgres.publication.row_filters import prepare_publication, wanted_specs
from connectors.postgres.replication.connection import (
    ReplicationCommandError,
    ReplicationConnection,
)
from connectors.postgres.replication.flush import Flush, Heartbeat, IdleOffers
from connectors.postgres.replication.inprogress import StreamedTransactions
from connectors.postgres.replication.versions import check_supported, stream_options
from connectors.postgres.replication.wal import WalReader


class Session:
    """One open streaming session: the connections, and what reads and reports on them."""

    def __init__(
        self, catalog: Catalog, repl: ReplicationConnection, flush: Flush, wal: WalReader
    ) -> None:
        self.catalog, self.repl, self.flush, self.wal = catalog, repl, flush, wal
        self.assembler: Assembler | None = None

    def close(self) -> None:
        """Report the final flush position and disconnect."""
        if self.repl.streaming:
            # The connection may be gone; the next session resumes from the log then.
            with contextlib.suppress(SourceUnavailable):
                self.flush.send()
        self.repl.close()
        self.wal.close()
        self.catalog.close()


class PostgresSource:
    """Streams one database's changes for the configured tables (see the module docstring)."""

    def __init__(self, config: PostgresSourceConfig, context: SourceContext) -> None:
        self._config, self._context = config, context
        self.slot = config.slot_name(context.pipeline)
        self.publication = config.publication_name(context.pipeline)
        self._logger = context.logger.bind(slot=self.slot, publication=self.publication)
        self._toast = ToastFiller(context.log, self._logger)
        self._last_commit: Lsn | None = None  # the stored lsn_commit (source.sequence)
        heartbeat = f"{context.pipeline}.heartbeat"
        self._heartbeat = Heartbeat(heartbeat, config.heartbeat_interval_s, self._logger)
        self._idle = IdleOffers(config.status_interval_s, config.idle_commit_interval_s)
        self._session: Session | None = None
        self._filters = table_filters(config)
        #: Logical-message handlers by prefix, installed at ``open`` (the watermarks and signals
        #: of :mod:`snapshots`); each is called as ``hook(message, lsn)`` during ``poll``.
        self.message_hooks: dict[str, MessageHook] = {}
        #: Queues a re-snapshot of a table whose DDL changed rows without logging them
        #: (:mod:`connectors.postgres.assembly.shapes`); installed by the snapshot layer.
        self.resnapshot: Resnapshot | None = None

    @property
    def filters(self) -> Mapping[str, TableFilter]:
        """Each table's filter, bound to the table once the source opened (the snapshot
        layer's re-reads take them from here, so a renamed column keeps its mask there too)."""
        return self._filters

    def tables(self) -> list[tuple[str, str]]:
        """``(schema, table)`` of every captured table."""
        return self._config.table_pairs()

    @property
    def pending_events(self) -> int:
        """Changes assembled so far for the batch ``poll`` will return next, its events or its
        records (message hooks use it to place a message among them)."""
        asm = None if self._session is None else self._session.assembler
        return 0 if asm is None else asm.pending

    # -- open ------------------------------------------------------------------------------

    def open(self, stored_offsets: Offsets, slot: SlotState | Unread | None = UNREAD) -> None:
        """Check, prepare the publication and slot, and start streaming after the stored LSN.

        Args:
            stored_offsets: what the log holds.
            slot: the slot as this start already read it (the snapshot layer does), so it is
                not read again; read here when not given.

        Raises:
            SourceFatal: a problem a human must fix (named in the message).
            SourceUnavailable: the server cannot be reached (retried by the runtime).
        """
        stored = Lsn.from_offsets(stored_offsets)
        self._last_commit = Lsn.commit_from_offsets(stored_offsets)
        dsn = self._config.dsn.get_secret_value()
        catalog = Catalog(dsn, redact_url(dsn), self._config.connect_timeout_s)
        try:
            self._session = self._connect(catalog, stored, slot)
        except BaseException:
            catalog.close()
            raise

    def _connect(
        self, catalog: Catalog, stored: Lsn | None, slot: SlotState | Unread | None
    ) -> Session:
        options = self.check_server(catalog)
        role = catalog.check_role()
        tables = self._describe(catalog, role)
        self._bind_filters(catalog, tables)
        self.declare_toast(catalog)
        prepare_publication(
            catalog, self.publication, list(tables.values()), role, self._logger, self._filters
        )
        database = catalog.database()
        state = check_slot(catalog, self.slot, database, slot)
        dsn = self._config.dsn.get_secret_value()
        repl = ReplicationConnection(dsn, redact_url(dsn), self._config.connect_timeout_s)
        try:
            start = self._start_point(repl, state, stored)
            ensure_failover(catalog, repl, self.slot, self._config.slot_failover, self._logger)
            session = self._start(catalog, repl, start, options)
        except BaseException:
            repl.close()
            raise
        session.assembler = self._assembler(catalog, database, tables, self._last_commit)
        self._logger.info(
            "source.streaming",
            start_lsn=int(start),
            database=database,
            proto_version=int(options["proto_version"]),
            streaming=options.get("streaming", "off"),
            origin=options.get("origin", "any"),
        )
        return session

    def check_server(self, catalog: Catalog) -> dict[str, str]:
        """Check the server and return the pgoutput options this configuration asks it for.

        Called before anything is created (the snapshot layer calls it first too), so a server
        too old for the source or for an option stops the start with the version it needs.

        Raises:
            SourceFatal: logical decoding is off, the server is older than PostgreSQL 14, or
                an option needs a later version.
        """
        version = catalog.check_server()
        check_supported(version, redact_url(self._config.dsn.get_secret_value()))
        return stream_options(
            version,
            self.publication,
            stream_in_progress=self._config.stream_in_progress,
            skip_replicated=self._config.skip_replicated,
        )

    def _assembler(
        self,
        catalog: Catalog,
        database: str,
        tables: dict[tuple[str, str], TableInfo],
        last_commit: Lsn | None = None,
    ) -> Assembler:
        asm = Assembler(
            self._context.pipeline,
            database,
            tables,
            self._config.key_columns,
            catalog,
            self._toast,
            self._context.on_bad_record,
            self._logger,
            [self._heartbeat.prefix],
            self._context.envelope,
            last_commit,
            self._filters,
            transforms=self._context.transforms,
            topic_of=self.topic_of,
            write_records=self._context.write_records,
        )
        asm.hooks.update(self.message_hooks)
        known = published_schemas(self._context.log, self._context.pipeline, list(tables))
        asm.shapes = ShapeTracker(catalog, known, self._logger, self.resnapshot)
        return asm

    def declare_toast(self, catalog: Catalog) -> None:
        """Tell the log which columns of which topics the TOAST fill will look up, before any
        record of this session is written (a snapshot's too): the Kafka log keeps their latest
        values from then on, and restores from the topics what its store lacks."""
        fields: dict[str, list[str]] = {}
        for schema, table in self.tables():
            topic = self.topic_of(schema, table)
            columns = self._filters[f"{schema}.{table}"].kept(
                catalog.toastable_columns(schema, table)
            )
            fields[topic] = list(dict.fromkeys([*fields.get(topic, []), *columns]))
        self._toast.declare(fields)

    def topic_of(self, schema: str, table: str) -> str:
        """The topic a table's records go to (another table's, where a transform routes it)."""
        return self._context.transforms.topic(self._context.pipeline, schema, table)

    def _bind_filters(self, catalog: Catalog, tables: Mapping[tuple[str, str], TableInfo]) -> None:
        """Bind the filters before anything is read: from here a renamed column keeps its
        mask or exclusion (:mod:`connectors.postgres.publication.filters`)."""
        known = published_schemas(self._context.log, self._context.pipeline, list(tables))
        published = {
            f"{schema}.{table}": {c.name: c.id for c in shape.columns if c.id is not None}
            for (schema, table), shape in known.items()
        }
        oids = {info.name: info.oid for info in tables.values()}
        # Where the column list leaves excluded columns out, their absence from a Relation
        # message is no sign that the stream is behind a rename of theirs.
        specs = wanted_specs(catalog, list(tables.values()), self._filters)
        pushed = [name for name, spec in specs.items() if spec.columns is not None]
        self._filters = bind_filters(catalog, self._filters, oids, self._logger, published, pushed)

    def _describe(self, catalog: Catalog, role: str) -> dict[tuple[str, str], TableInfo]:
        tables = {}
        for schema, table in self.tables():
            info = catalog.table(schema, table, role)
            check_keyable(info, self._config.key_columns.get(info.name))
            tables[(schema, table)] = info
        return tables

    def _start_point(
        self, repl: ReplicationConnection, state: SlotState | None, stored: Lsn | None
    ) -> Lsn:
        if state is None:
            return self._new_slot(repl, stored)
        return self._resume_point(Lsn.parse(state.confirmed_flush or "0/0"), stored)

    def _new_slot(self, repl: ReplicationConnection, stored: Lsn | None) -> Lsn:
        if stored is not None:
            if self._context.snapshot_mode != "when_needed":
                raise lost_slot(self.slot, stored)
            self._logger.warning(
                "slot.recreated",
                reason="the slot disappeared while a position was stored; changes between "
                "that position and the new slot are not streamed (snapshot: when_needed "
                "re-snapshots them)",
                stored_lsn=int(stored),
            )
        created = create_slot(repl, self.slot, self._logger, failover=self._config.slot_failover)
        return Lsn.parse(created.consistent_point)

    def _resume_point(self, confirmed: Lsn, stored: Lsn | None) -> Lsn:
        if stored is None:
            self._logger.warning("slot.reused_without_position", confirmed_flush=int(confirmed))
            return confirmed
        if stored < confirmed:
            # The server will not go back before confirmed_flush; whatever lies between is gone.
            self._logger.warning(
                "slot.ahead_of_log", stored_lsn=int(stored), confirmed=int(confirmed)
            )
        return max(stored, confirmed)

    def _start(
        self, catalog: Catalog, repl: ReplicationConnection, start: Lsn, options: dict[str, str]
    ) -> Session:
        streams = StreamedTransactions(self._logger) if "streaming" in options else None
        try:
            repl.start(self.slot, start, options)
        except ReplicationCommandError as exc:
            if exc.sqlstate == "55006":  # object_in_use: another walsender holds the slot
                raise slot_in_use(self.slot, None) from exc
            raise SourceFatal(f"cannot stream from slot {self.slot!r}: {exc}") from exc
        flush = Flush(repl, start, self._config.status_interval_s, self._logger)
        self._heartbeat.start(catalog)
        self._idle.restart()
        wal = WalReader(repl, flush, streams, self._config.max_batch_bytes)
        return Session(catalog, repl, flush, wal)

    # -- poll ------------------------------------------------------------------------------

    def poll(self, max_events: int, timeout_s: float) -> SourceBatch:
        """Changes in commit order: whole transactions, or bounded pieces of a large one.

        Raises:
            SourceUnavailable: the connection was lost (the runtime reopens from the log).
            ConversionError: a value cannot be converted and ``bad_records`` is ``fail``.
        """
        session = self._session
        if session is None or session.assembler is None:
            raise SourceUnavailable("the PostgreSQL source is not open")
        asm, wal = session.assembler, session.wal
        limit = max(1, min(max_events, self._config.max_batch_events))
        deadline = time.monotonic() + timeout_s
        while True:
            now = time.monotonic()
            session.flush.due(now)
            self._heartbeat.due(now)
            if asm.cut or asm.pending >= limit or asm.batch.size >= wal.max_bytes:
                return asm.take()
            if wal.drain(asm, limit):
                continue
            if asm.has_output and (not asm.in_tx or time.monotonic() >= deadline):
                return asm.take()
            idle = self._idle_batch(session, asm)
            if idle is not None or time.monotonic() >= deadline:
                return idle or SourceBatch()
            # Woken for the next ping too, while idle (Flush.ping): a fence waits on its answer.
            now = time.monotonic()
            wal.drain(asm, limit, min(max(0.0, deadline - now), session.flush.ping_in(now)))

    def _idle_batch(self, session: Session, asm: Assembler) -> SourceBatch | None:
        """Offsets for WAL the server passed while no captured table changed (see
        :class:`connectors.postgres.replication.flush.IdleOffers`)."""
        if asm.in_tx or asm.has_output or session.wal.replaying:
            return None
        position = self._idle.offer(session.flush)
        if position is None:
            session.flush.ping(time.monotonic())
            return None
        return SourceBatch(commit_offsets=position.to_offsets(asm.last_commit))

    # -- ack, close ------------------------------------------------------------------------

    def ack(self, offsets: Offsets) -> None:
        """The offsets are durable in the log: the flush LSN may advance to them.

        Raises:
            PositionMovedBackwards: they are before the previous ``ack`` of this session.
        """
        if self._session is not None:
            self._session.flush.ack(offsets)

    def close(self) -> None:
        """Report the final flush position and disconnect."""
        session, self._session = self._session, None
        if session is not None:
            session.close()
