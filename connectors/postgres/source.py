"""The PostgreSQL source: logical replication with pgoutput over the streaming protocol.

Lifecycle, and why in this order: ``open`` checks the server and the role, makes sure the
publication and the slot exist (or fails loudly when a stored position can no longer be
honoured), then starts streaming from the stored commit LSN; PostgreSQL skips every
transaction that committed at or before it, so a restart gives no duplicate and no gap.
``poll`` returns whole transactions (several small ones per batch, a large one in bounded
pieces with ``commit_offsets=None`` until its commit). ``ack`` is the only place the flush LSN
advances: WAL is released only once the log holds everything before it.

Reconnects: a lost connection raises ``SourceUnavailable`` from ``poll``. The runtime then
rolls back the open log transaction, calls ``close`` and ``open(stored_offsets)`` with backoff,
so a session always resumes from what is durable, even in the middle of a large transaction.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Mapping
from typing import Any

import psycopg

from cdc.config import redact_url
from cdc.errors import SourceFatal, SourceUnavailable
from cdc.events import topic_name
from cdc.source import SourceBatch, SourceContext
from connectors.postgres import pgoutput as pg
from connectors.postgres.catalog import Catalog, TableInfo
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.inprogress import StreamedTransactions
from connectors.postgres.lifecycle import (
    check_slot,
    create_slot,
    ensure_publication,
    lost_slot,
    slot_in_use,
)
from connectors.postgres.protocol import (
    parse_keepalive,
    standby_status_update,
    str_to_lsn,
)
from connectors.postgres.relations import check_keyable
from connectors.postgres.replication import ReplicationCommandError, ReplicationConnection
from connectors.postgres.shapes import Resnapshot, ShapeTracker, published_schemas
from connectors.postgres.stream import Assembler, MessageHook, offsets_for
from connectors.postgres.toast import ToastFiller

_KEEPALIVE_TAG = ord("k")
_XLOG_TAG = ord("w")
_XLOG_HEADER_SIZE = 25  # tag, WAL start, WAL end, send time
_WAL_START = struct.Struct("!Q").unpack_from
_STREAMING_MIN_VERSION = 140000


def stored_lsn(offsets: Mapping[str, Any]) -> int | None:
    """The commit LSN stored by this source, if any."""
    entry = offsets.get("postgres")
    if isinstance(entry, Mapping) and isinstance(entry.get("lsn"), int):
        return int(entry["lsn"])
    return None


class PostgresSource:
    """Streams one database's changes for the configured tables (see the module docstring)."""

    def __init__(self, config: PostgresSourceConfig, context: SourceContext) -> None:
        self._config, self._context = config, context
        self._dsn = config.dsn.get_secret_value()
        self._where = redact_url(self._dsn)
        self.slot = config.slot_name(context.pipeline)
        self.publication = config.publication_name(context.pipeline)
        self._logger = context.logger.bind(slot=self.slot, publication=self.publication)
        self._heartbeat_prefix = f"{context.pipeline}.heartbeat"
        self._catalog: Catalog | None = None
        self._repl: ReplicationConnection | None = None
        self._assembler: Assembler | None = None
        self._streams: StreamedTransactions | None = None
        self._replay: Any = None
        self._decoder = pg.Decoder()
        self._toast = ToastFiller(context.log, self._logger)
        self._acked = self._received = self._wal_end = self._idle_offered = 0
        self._last_status = self._last_heartbeat = self._last_idle = 0.0
        self._reply_wanted = False
        #: Logical-message handlers by prefix, installed at ``open`` (the watermarks and signals
        #: of :mod:`snapshots`); each is called as ``hook(message, lsn)`` during ``poll``.
        self.message_hooks: dict[str, MessageHook] = {}
        #: Queues a re-snapshot of a table whose DDL changed rows without logging them
        #: (:mod:`connectors.postgres.shapes`); installed by the snapshot layer.
        self.resnapshot: Resnapshot | None = None

    def tables(self) -> list[tuple[str, str]]:
        """``(schema, table)`` of every captured table."""
        return self._config.table_pairs()

    @property
    def pending_events(self) -> int:
        """Events assembled so far for the batch ``poll`` will return next (message hooks use
        it to place a message among the batch's events)."""
        return 0 if self._assembler is None else self._assembler.pending

    # -- open ------------------------------------------------------------------------------

    def open(self, stored_offsets: Mapping[str, Any]) -> None:
        """Check, prepare the publication and slot, and start streaming after the stored LSN.

        Raises:
            SourceFatal: a problem a human must fix (named in the message).
            SourceUnavailable: the server cannot be reached (retried by the runtime).
        """
        stored = stored_lsn(stored_offsets)
        self._catalog = catalog = Catalog(self._dsn, self._where, self._config.connect_timeout_s)
        version = catalog.check_server()
        role = catalog.check_role()
        tables = self._describe(catalog, role)
        self.declare_toast(catalog)
        ensure_publication(catalog, self.publication, list(tables.values()), role, self._logger)
        database = catalog.database()
        state = check_slot(catalog, self.slot, database)
        self._repl = repl = ReplicationConnection(
            self._dsn, self._where, self._config.connect_timeout_s
        )
        if state is None:
            start = self._new_slot(repl, stored)
        else:
            start = self._resume_point(str_to_lsn(state.confirmed_flush or "0/0"), stored)
        self._start(repl, start, version)
        self._assembler = Assembler(
            self._context.pipeline,
            database,
            tables,
            self._config.key_columns,
            catalog,
            self._toast,
            self._context.on_bad_record,
            self._logger,
            [self._heartbeat_prefix],
        )
        self._assembler.hooks.update(self.message_hooks)
        known = published_schemas(self._context.log, self._context.pipeline, list(tables))
        self._assembler.shapes = ShapeTracker(catalog, known, self._logger, self.resnapshot)
        self._logger.info("source.streaming", start_lsn=start, database=database)

    def declare_toast(self, catalog: Catalog) -> None:
        """Tell the log which columns of which topics the TOAST fill will look up, before any
        record of this session is written (a snapshot's too): the Kafka log keeps their latest
        values from then on, and restores from the topics what its store lacks."""
        pipeline = self._context.pipeline
        self._toast.declare(
            {
                topic_name(pipeline, schema, table): catalog.toastable_columns(schema, table)
                for schema, table in self.tables()
            }
        )

    def _describe(self, catalog: Catalog, role: str) -> dict[tuple[str, str], TableInfo]:
        tables = {}
        for schema, table in self.tables():
            info = catalog.table(schema, table, role)
            check_keyable(info, self._config.key_columns.get(info.name))
            tables[(schema, table)] = info
        return tables

    def _new_slot(self, repl: ReplicationConnection, stored: int | None) -> int:
        if stored is not None:
            if self._context.snapshot_mode != "when_needed":
                raise lost_slot(self.slot, offsets_for(stored)["postgres"]["lsn_str"])
            self._logger.warning(
                "slot.recreated",
                reason="the slot disappeared while a position was stored; changes between "
                "that position and the new slot are not streamed (snapshot: when_needed "
                "re-snapshots them)",
                stored_lsn=stored,
            )
        created = create_slot(repl, self.slot, self._logger)
        return str_to_lsn(created.consistent_point)

    def _resume_point(self, confirmed: int, stored: int | None) -> int:
        if stored is None:
            self._logger.warning("slot.reused_without_position", confirmed_flush=confirmed)
            return confirmed
        if stored < confirmed:
            # The server will not go back before confirmed_flush; whatever lies between is gone.
            self._logger.warning("slot.ahead_of_log", stored_lsn=stored, confirmed=confirmed)
        return max(stored, confirmed)

    def _start(self, repl: ReplicationConnection, start: int, version: int) -> None:
        options = {"proto_version": "1", "publication_names": self.publication, "messages": "true"}
        if self._config.stream_in_progress and version >= _STREAMING_MIN_VERSION:
            options.update(proto_version="2", streaming="on")
            self._streams = StreamedTransactions()
        try:
            repl.start(self.slot, start, options)
        except ReplicationCommandError as exc:
            if exc.sqlstate == "55006":  # object_in_use: another walsender holds the slot
                raise slot_in_use(self.slot, None) from exc
            raise SourceFatal(f"cannot stream from slot {self.slot!r}: {exc}") from exc
        # Never report a flush position below the slot's: PostgreSQL 15 would move it back.
        self._acked = self._received = start
        self._last_status = self._last_heartbeat = time.monotonic()
        # Nothing of an earlier session carries over: the server resends from ``start``.
        self._decoder, self._replay = pg.Decoder(), None
        self._wal_end = self._idle_offered = 0
        self._reply_wanted = False

    # -- poll ------------------------------------------------------------------------------

    def poll(self, max_events: int, timeout_s: float) -> SourceBatch:
        """Changes in commit order: whole transactions, or bounded pieces of a large one.

        Raises:
            SourceUnavailable: the connection was lost (the runtime reopens from the log).
            ConversionError: a value cannot be converted and ``bad_records`` is ``fail``.
        """
        asm = self._assembler
        if asm is None:
            raise SourceUnavailable("the PostgreSQL source is not open")
        limit = max(1, min(max_events, self._config.max_batch_events))
        deadline = time.monotonic() + timeout_s
        while True:
            self._housekeeping()
            if asm.cut or asm.pending >= limit:
                return asm.take()
            if self._drain(asm, limit):
                continue
            if asm.has_output and (not asm.in_tx or time.monotonic() >= deadline):
                return asm.take()
            idle = self._idle_batch()
            if idle is not None or time.monotonic() >= deadline:
                return idle or SourceBatch()
            item = self._next(max(0.0, deadline - time.monotonic()))
            if item is not None:
                asm.handle(*item)

    def _drain(self, asm: Assembler, limit: int) -> int:
        """Apply the messages already received, without waiting, until the batch is full.

        The hot loop: one iteration per change, so it keeps to locals and skips the clocks.
        """
        if self._streams is not None or self._repl is None:
            return self._drain_slowly(asm, limit)
        read, decode, handle = self._repl.read, self._decoder, asm.handle
        fast = asm.fast_change
        events = asm.events
        handled = 0
        # Bounded by messages too: a long run that makes no event (keepalives, other tables'
        # changes) must still return to poll's housekeeping (status updates, heartbeats).
        while not asm.cut and len(events) < limit and handled < limit:
            data = read(0.0)
            if data is None:
                break
            if data[0] != _XLOG_TAG:
                self._keepalive(data)
                continue
            # The XLogData header inline (protocol.parse_xlog_data does the same with a frame
            # object, which costs more than the parse itself).
            lsn = _WAL_START(data, 1)[0]
            if lsn > self._received:
                self._received = lsn
            payload = bytes(data[_XLOG_HEADER_SIZE:])
            if not fast(payload, lsn):
                handle(decode(payload), lsn)
            handled += 1
        return handled

    def _drain_slowly(self, asm: Assembler, limit: int) -> int:
        handled = 0
        while not asm.cut and asm.pending < limit:
            item = self._next(0.0)
            if item is None:
                break
            asm.handle(*item)
            handled += 1
        return handled

    def _next(self, wait_s: float) -> tuple[pg.PgOutputMessage, int] | None:
        """The next message to apply, from a streamed transaction's replay or the socket."""
        assert self._repl is not None
        deadline = time.monotonic() + wait_s
        while True:
            if self._replay is not None:
                item: tuple[pg.PgOutputMessage, int] | None = next(self._replay, None)
                if item is not None:
                    return item
                self._replay = None
            data = self._repl.read(max(0.0, deadline - time.monotonic()))
            if data is None:
                return None
            if data[0] != _XLOG_TAG:
                self._keepalive(data)
                continue
            lsn = _WAL_START(data, 1)[0]
            if lsn > self._received:
                self._received = lsn
            payload = data[_XLOG_HEADER_SIZE:]
            message = self._decoder(payload)
            if self._streams is not None and self._streams.accept(message, lsn, payload):
                continue
            if type(message) is pg.StreamCommit and self._streams is not None:
                assert isinstance(message, pg.StreamCommit)
                self._replay = self._streams.replay(message)
                continue
            return message, lsn

    def _keepalive(self, data: memoryview) -> None:
        keepalive = parse_keepalive(data)
        if keepalive.wal_end > self._wal_end:
            self._wal_end = keepalive.wal_end
        if keepalive.reply_requested:
            # The server waits on us (a shutdown waits until we confirm all it sent): offer
            # the position at once and report it as soon as it is acked.
            self._reply_wanted = True
            self._send_status()

    def _idle_batch(self) -> SourceBatch | None:
        """Offsets for WAL the server passed while no captured table changed.

        Safe because the server sends a transaction only when it decodes its commit: every
        commit not yet received lies beyond the keepalive's position, and the slot's restart
        point stays before any transaction still running.
        """
        asm = self._assembler
        assert asm is not None
        if asm.in_tx or asm.has_output or self._replay is not None:
            return None
        if self._streams is not None and self._streams.open:
            return None
        position = self._wal_end
        if position <= max(self._acked, self._idle_offered):
            return None
        now = time.monotonic()
        if now - self._last_idle < self._config.status_interval_s and not self._reply_wanted:
            return None
        self._idle_offered, self._last_idle = position, now
        return SourceBatch(commit_offsets=offsets_for(position))

    # -- ack, status, heartbeat ------------------------------------------------------------

    def ack(self, offsets: Mapping[str, Any]) -> None:
        """The offsets are durable in the log: the flush LSN may advance to them."""
        lsn = stored_lsn(offsets)
        if lsn is not None and lsn > self._acked:
            self._acked = lsn
            if self._reply_wanted:
                self._reply_wanted = False
                self._send_status()

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if now - self._last_status >= self._config.status_interval_s:
            self._send_status()
        interval = self._config.heartbeat_interval_s
        if interval is not None and now - self._last_heartbeat >= interval:
            self._last_heartbeat = now
            self._heartbeat()

    def _send_status(self) -> None:
        assert self._repl is not None
        flush = self._acked
        self._repl.send(standby_status_update(max(self._received, flush), flush, flush))
        self._last_status = time.monotonic()
        self._logger.debug("slot.status_sent", flush_lsn=flush)

    def _heartbeat(self) -> None:
        assert self._catalog is not None
        try:
            self._catalog.emit_message(self._heartbeat_prefix, "")
        except psycopg.errors.InsufficientPrivilege as exc:
            self._config = self._config.model_copy(update={"heartbeat_interval_s": None})
            self._logger.warning("heartbeat.disabled", reason=str(exc))

    def close(self) -> None:
        """Report the final flush position and disconnect."""
        repl, self._repl = self._repl, None
        if repl is not None:
            if repl.streaming:
                try:
                    self._repl = repl
                    self._send_status()
                except SourceUnavailable:
                    pass  # the connection is gone; the next session resumes from the log
                finally:
                    self._repl = None
            repl.close()
        if self._streams is not None:
            self._streams.close()
            self._streams = None
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None
        self._assembler = None
