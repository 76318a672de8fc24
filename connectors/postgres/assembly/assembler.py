"""Turn decoded pgoutput messages into change events, in commit order, in bounded batches.

Positions: an event's ``source.position`` is its transaction's commit LSN (``Begin.final_lsn``,
the start of the commit record), known from the transaction's first message, so the events of
a large transaction delivered in several batches all carry it. The offsets stored at commit are
the commit record's *end* LSN: ``START_REPLICATION`` from there skips that transaction. Both
order transactions identically.

The assembler has no I/O of its own: the source feeds it messages and hands it a
:class:`CatalogReader` for the rare lookups (types, NOT NULL flags, TOAST fallback reads). It
turns changes into events; its parts (:mod:`connectors.postgres.assembly`) keep the transaction,
the relations, the batch, the dead letters and the TOAST fill.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import Any, Protocol

from cdc.contracts.events import ChangeEvent, Op, Row, SourceInfo
from cdc.contracts.source import SourceBatch
from cdc.envelope import encode as envelope
from cdc.envelope.encode import encode_key
from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.envelope.template import stamp
from cdc.log.base import Record
from cdc.support.logging import Logger
from cdc.transforms.base import TransformError
from cdc.transforms.chain import EMPTY, TransformChain
from connectors.postgres import pgoutput as pg
from connectors.postgres.assembly.bad import BadRecords
from connectors.postgres.assembly.batch import Batch
from connectors.postgres.assembly.connect import key_only_before, relation_schemas
from connectors.postgres.assembly.fill import ToastFill
from connectors.postgres.assembly.relation_state import CONNECTOR, RelationState
from connectors.postgres.assembly.relations import Relations
from connectors.postgres.assembly.shapes import ShapeTracker
from connectors.postgres.assembly.toast import ToastFiller
from connectors.postgres.assembly.transaction import Transaction
from connectors.postgres.assembly.unwritten import Unwritten
from connectors.postgres.catalog import TableInfo
from connectors.postgres.lsn import Lsn
from connectors.postgres.pgoutput import tuple_at
from connectors.postgres.publication.filters import TableFilter
from connectors.postgres.types import ConversionError, TypeRegistry
from connectors.postgres.types.encoder import NEW_TUPLE_AT
from connectors.postgres.types.row_encoder import log_selected

MessageHook = Callable[[pg.LogicalMessage, int], None]


class CatalogReader(Protocol):
    """The catalog lookups the assembler needs."""

    def load_types(self, registry: TypeRegistry, oids: Sequence[int]) -> None:
        """Add the types ``oids`` (and what they build on) to ``registry``."""
        ...

    def not_null(self, oid: int) -> set[str]:
        """The NOT NULL columns of table ``oid``."""
        ...

    def array_dims(self, oid: int) -> dict[str, int]:
        """Declared dimensions of the multi-dimensional array columns of table ``oid``."""
        ...

    def read_row(
        self, schema: str, table: str, columns: Sequence[str], key: dict[str, str | None]
    ) -> tuple[str | None, ...] | None:
        """The current text of ``columns`` of the row with ``key``, or ``None``."""
        ...

    def toastable_columns(self, schema: str, table: str) -> list[str]:
        """The columns of the table whose values PostgreSQL can store out of line."""
        ...


class Assembler:
    """Builds batches from messages.

    Args:
        pipeline: pipeline name (topics).
        db: database name (``source.db``).
        tables: captured tables by ``(schema, table)``.
        key_columns: configured key columns by ``schema.table``.
        catalog: catalog lookups.
        toast: previous images for unchanged TOAST values.
        on_bad_record: ``fail`` or ``dead_letter``.
        logger: bound logger.
        options: the pipeline's envelope options (how values are written).
        ignored_prefixes: logical-message prefixes dropped silently (the heartbeat's); the
            others go to :attr:`hooks` by prefix (snapshot watermarks).
        options: the pipeline's envelope options (schemas, transaction metadata).
        last_commit: the end LSN of the last commit stored (``source.sequence``'s first LSN
            on a restart, as Debezium's stored ``lsn_commit``); ``None`` on a first start.
        filters: each table's filters (columns, masks) by ``schema.table``.
        transforms: the pipeline's transforms (which see events before they are encoded).
        topic_of: ``(schema, table)`` -> the topic its records go to (routed by transforms).
    """

    def __init__(
        self,
        pipeline: str,
        db: str,
        tables: Mapping[tuple[str, str], TableInfo],
        key_columns: Mapping[str, Sequence[str]],
        catalog: CatalogReader,
        toast: ToastFiller,
        on_bad_record: str,
        logger: Logger,
        ignored_prefixes: Sequence[str] = (),
        options: EnvelopeOptions = READABLE,
        last_commit: Lsn | None = None,
        filters: Mapping[str, TableFilter] | None = None,
        transforms: TransformChain = EMPTY,
        topic_of: Callable[[str, str], str] | None = None,
        write_records: bool = False,
    ) -> None:
        self._pipeline, self._toast, self._options = pipeline, toast, options
        self._schemas = options.schemas_enable
        self._chain = transforms
        # Transaction blocks are added per event by the runtime, and transforms see events
        # before they are encoded: no pre-encoded records then.
        self._pre_encode = not (options.provide_transaction_metadata or transforms)
        # Each change written as its record at once, no event built (SourceContext.write_records).
        self._records = write_records and self._pre_encode
        unwritten = Unwritten(filters or {}, options)
        self._unwritten = unwritten if unwritten else None  # tested per row: None costs no call
        self._now_ms, self._stamp = 0, b""
        self._restamp()
        log_selected(logger)
        self.hooks: dict[str, MessageHook] = {}
        self._ignored_prefixes = frozenset(ignored_prefixes)
        self._tx = Transaction(pipeline, db)
        self._tx.last_commit = last_commit
        self._batch = Batch()
        self._relations = Relations(
            pipeline, tables, key_columns, catalog, toast, self._batch, options, filters, topic_of
        )
        self._bad = BadRecords(on_bad_record, self._batch, self._tx)
        locate = self._located if self._schemas or transforms else None
        self._fill = ToastFill(catalog, toast, self._batch, locate, self._records).fill
        self._handlers = self._dispatch()
        #: The batch must end before the next event (a shape change). A copy of the batch's
        #: flag, kept as a plain attribute: the source reads it once per message.
        self.cut = False

    def _located(self, rel: RelationState, key: Row) -> tuple[str, bytes] | None:
        """The topic and record key of ``key``'s records (the TOAST lookup's): its record key
        in the ``schemas.enable`` wrapper, and where the transforms send it, found by running
        an empty ``r`` event of the key through them (``None``: they drop it)."""
        schemas = relation_schemas(rel, self._options, self.registry) if self._schemas else None
        if not self._chain:  # the usual case: the relation's topic, the key wrapped
            assert schemas is not None
            return rel.topic, schemas.wrap_key(encode_key(key))
        source = SourceInfo(CONNECTOR, "", rel.schema, rel.table, 0, 0)
        event = ChangeEvent(Op.READ, dict(key), None, {}, source, connect=schemas)
        try:
            events = self._chain.apply(event)
        except TransformError:
            return None  # the change itself meets the same error, and its policy
        if not events:
            return None
        record = envelope.to_records(events[0], self._pipeline, 0, self._options)[0]
        return record.topic, record.key or b""

    def _dispatch(self) -> dict[type, Callable[[Any, int], None]]:
        relations = self._relations
        return {
            pg.Begin: self._begin,
            pg.Commit: self._commit,
            pg.Relation: self._relation,
            pg.Insert: self._insert,
            pg.Update: self._update,
            pg.Delete: self._delete,
            pg.Truncate: self._truncate,
            pg.LogicalMessage: self._message,
            pg.TypeInfo: lambda msg, lsn: relations.on_type(msg),
            pg.Origin: _ignore,
        }

    def _relation(self, msg: pg.Relation, lsn: int) -> None:
        self._relations.on_relation(msg, self._tx.final_lsn)
        self.cut = self._batch.cut

    # -- state -----------------------------------------------------------------------------

    @property
    def registry(self) -> TypeRegistry:
        """The types of the captured relations."""
        return self._relations.registry

    @property
    def shapes(self) -> ShapeTracker | None:
        """Follows shape changes (published column ids, re-snapshots); ``None``: not followed."""
        return self._relations.shapes

    @shapes.setter
    def shapes(self, shapes: ShapeTracker | None) -> None:
        self._relations.shapes = shapes

    @property
    def last_commit(self) -> Lsn | None:
        """The end of the latest commit seen (or stored): what the offsets keep as
        ``lsn_commit``."""
        return self._tx.last_commit

    @property
    def in_tx(self) -> bool:
        """Inside a transaction (a batch taken now has no offsets to store)."""
        return self._tx.in_tx

    # -- batches ---------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Changes waiting in the current batch (records, a delete's tombstone too)."""
        return len(self.changes)

    @property
    def changes(self) -> Sized:
        """The current batch's changes: its records when the assembler writes them, else its
        events (a new list after each ``take``)."""
        return self._batch.records if self._records else self._batch.events

    @property
    def writes_records(self) -> bool:
        """Each change is written as its record at once (:attr:`Batch.records`), no event."""
        return self._records

    @property
    def batch(self) -> Batch:
        """The batch being built (the source's read loop adds its messages' bytes to it)."""
        return self._batch

    @property
    def events(self) -> list[ChangeEvent]:
        """The current batch's events (a new list after each ``take``)."""
        return self._batch.events

    @property
    def has_output(self) -> bool:
        """The current batch has something to return (events, schemas, letters, a commit)."""
        return self._batch.has_output(self._tx.commit_lsn)

    def take(self) -> SourceBatch:
        """The batch built so far; its offsets are set only at a transaction boundary."""
        committed = self._tx.take_commit()
        self.cut = False
        if self._records:
            self._restamp()  # the next batch's records: written from now on
        return self._batch.take(None if committed is None else committed.to_offsets(committed))

    def _restamp(self) -> None:
        """The envelope's ``ts_ms`` (and ``ts_us``, ``ts_ns``) of the records written next:
        when the connector processed the change, as Debezium has it. Read per transaction
        and per batch, not per change."""
        self._now_ms = int(time.time() * 1000)
        self._stamp = stamp(self._now_ms)

    def handle(self, message: pg.PgOutputMessage, lsn: int) -> None:
        """Apply one decoded message; ``lsn`` is its WAL position (0 when not known)."""
        handler = self._handlers.get(type(message))
        if handler is None:
            raise pg.ProtocolError(f"unexpected message outside streaming: {message!r}")
        handler(message, lsn)

    # -- transaction framing ---------------------------------------------------------------

    def _begin(self, msg: pg.Begin, lsn: int) -> None:
        self._tx.begin(msg.xid, msg.final_lsn, msg.commit_ts_us)
        if self._records:
            self._restamp()

    def begin_streamed(self, xid: int, commit_lsn: int, commit_ts_us: int) -> None:
        """Start replaying a transaction the server streamed before its commit."""
        self._tx.begin(xid, commit_lsn, commit_ts_us)

    def _commit(self, msg: pg.Commit, lsn: int) -> None:
        self.commit(msg.end_lsn)

    def commit(self, end_lsn: int) -> None:
        """End the current transaction at ``end_lsn``, its commit record's end."""
        self._tx.commit(end_lsn)

    def _message(self, msg: pg.LogicalMessage, lsn: int) -> None:
        if msg.prefix in self._ignored_prefixes:
            return
        hook = self.hooks.get(msg.prefix)
        if hook is not None:
            hook(msg, lsn)

    # -- changes ---------------------------------------------------------------------------

    def _emit(
        self,
        op: Op,
        rel: RelationState,
        key: Row,
        before: Row | None,
        after: Row | None,
        lsn: int,
        extra: dict[str, Any] | None = None,
    ) -> None:
        source = self._tx.next_source(rel, lsn)
        if extra:
            source.extra.update(extra)
        event = ChangeEvent(op, key, before, after, source)
        if self._schemas:
            event.connect = relation_schemas(rel, self._options, self.registry)
        if not self._records:
            self._batch.events.append(event)
        elif self._unwritten is None or self._unwritten.writes(rel.info.name, op.value):
            written = envelope.to_records(event, self._pipeline, self._now_ms, self._options)
            self._batch.add(written, op.value, source.ts_ms)

    def change_from_bytes(self, message: bytes, lsn: int) -> bool:
        """Apply an Insert, or an Update without an old tuple, from its message bytes through
        the relation's row encoder (either implementation: the encoder itself falls back);
        ``False`` when it is not such a message, or its tuple has an unchanged TOAST value to
        fill, and the caller then decodes the message for :meth:`handle`.

        Both paths keep the same order and sequence numbers. This one writes the change's
        record through the transaction's :class:`~cdc.envelope.encode.RecordTemplate` of the
        table, built once per transaction: as the batch's record (:meth:`_write_row`), or as
        the event's (:attr:`ChangeEvent.encoded`).
        """
        tag = message[0]
        if (tag != _INSERT and tag != _UPDATE) or len(message) <= NEW_TUPLE_AT:
            return False
        if not self._pre_encode or message[_NEW_AT] != _NEW:
            return False
        rel = self._relations.by_oid.get(_U32(message, 1)[0])
        if rel is None or rel.project is not None:
            return False  # not captured, or the server sends columns the filter leaves out
        op = _CREATE if tag == _INSERT else _UPDATED
        if self._records:
            return self._write_row(message, rel, tag, op, lsn)
        try:
            encoded = rel.encoder.encode_tuple(message)
        except ConversionError as exc:
            self._bad.bad(rel, tuple_at(message, NEW_TUPLE_AT), op.value, lsn, exc)
            return True
        if encoded is None:
            return False
        key, after, row_json, key_json = encoded
        tx = self._tx
        source = tx.next_source(rel, lsn)
        lsn = lsn or tx.final_lsn  # as next_source has it
        schemas = relation_schemas(rel, self._options, self.registry) if self._schemas else None
        w = tx.writers.get((rel.topic, tag))
        if w is None:
            w = tx.writer(rel.topic, tag, op, source, schemas)
        if schemas is not None:
            key_json = schemas.wrap_key(key_json)
        value = b"%b%b%b%d%b%d%b" % (w.prefix, row_json, w.head, lsn, w.mid, lsn, w.tail)
        pos = b"[%b,%d]" % (w.position, source.sequence)
        record = (self._pipeline, rel.topic, key_json, value, w.close, pos)
        self._batch.events.append(ChangeEvent(op, key, None, after, source, record))
        return True

    def _write_row(self, message: bytes, rel: RelationState, tag: int, op: Op, lsn: int) -> bool:
        """:meth:`change_from_bytes` writing the change as the batch's record at once: no
        event, no ``source`` built for it (only for the first change of its transaction,
        table and operation, whose record template it shapes)."""
        try:
            encoded = rel.encoder.encode_json(message)
        except ConversionError as exc:
            self._bad.bad(rel, tuple_at(message, NEW_TUPLE_AT), op.value, lsn, exc)
            return True
        if encoded is None:
            return False
        row_json, key_json = encoded
        tx = self._tx
        w = tx.writers.get((rel.topic, tag))
        schemas = relation_schemas(rel, self._options, self.registry) if self._schemas else None
        if w is None:
            w = tx.writer(rel.topic, tag, op, tx.next_source(rel, lsn), schemas)
            seq = tx.seq - 1  # the sequence next_source took
        else:
            seq = tx.seq
            tx.seq = seq + 1
        code = "c" if tag == _INSERT else "u"  # op.value costs a property call
        if self._unwritten is not None and not self._unwritten.writes(rel.info.name, code):
            return True  # left out, as the runtime leaves out such an event
        if schemas is not None:
            key_json = schemas.wrap_key(key_json)
        lsn = lsn or tx.final_lsn  # as next_source has it
        value = b"%b%b%b%d%b%d%b%b%b" % (
            w.prefix,
            row_json,
            w.head,
            lsn,
            w.mid,
            lsn,
            w.tail,
            self._stamp,
            w.close,
        )
        batch = self._batch
        batch.records.append(Record(rel.topic, key_json, value, b"[%b,%d]" % (w.position, seq)))
        batch.ops.append(code)
        batch.ts_ms = tx.ts_ms
        return True

    def _insert(self, msg: pg.Insert, lsn: int) -> None:
        rel = self._relations.get(msg.relation_oid)
        if rel is None:
            return
        new = rel.captured(msg.new)
        after = self._bad.convert(rel, new, "c", lsn)
        if after is None:
            return
        extra = self._fill(rel, after, None, after, new) if pg.UNCHANGED in new else None
        key = {k: after[k] for k in rel.key}
        self._emit(Op.CREATE, rel, key, None, after, lsn, extra)

    def _update(self, msg: pg.Update, lsn: int) -> None:
        rel = self._relations.get(msg.relation_oid)
        if rel is None:
            return
        new = rel.captured(msg.new)
        old_values = None if msg.old is None else rel.captured(msg.old)
        after = self._bad.convert(rel, new, "u", lsn)
        old = None if old_values is None else self._bad.convert(rel, old_values, "u", lsn)
        if after is None or (old_values is not None and old is None):
            return
        key = {k: after[k] for k in rel.key}
        old_key = key if old is None else {k: old[k] for k in rel.key}
        extra = None
        if pg.UNCHANGED in new:
            image = old if msg.old_kind == "O" else None
            extra = self._fill(rel, after, image, old_key, new)
        if old_key != key:
            # A key change: the old key's record must disappear, the new one appear.
            before = old if msg.old_kind == "O" else self._key_only(rel, old_key)
            self._emit(Op.DELETE, rel, old_key, before, None, lsn)
            self._emit(Op.CREATE, rel, key, None, after, lsn, extra)
            return
        before = old if msg.old_kind == "O" else None
        self._emit(Op.UPDATE, rel, key, before, after, lsn, extra)

    def _delete(self, msg: pg.Delete, lsn: int) -> None:
        rel = self._relations.get(msg.relation_oid)
        if rel is None:
            return
        values = rel.captured(msg.old)
        old = self._bad.convert(rel, values, "d", lsn)
        if old is None:
            return
        key = {k: old[k] for k in rel.key}
        before = old if msg.old_kind == "O" else self._key_only(rel, key)
        if msg.old_kind == "O" and pg.UNCHANGED in values:
            before = {k: v for k, v in old.items() if v is not pg.UNCHANGED}
        self._emit(Op.DELETE, rel, key, before, None, lsn)

    def _key_only(self, rel: RelationState, key: Row) -> Row:
        """A key-only old image as Debezium writes it: every column (see key_only_before)."""
        before = dict(key_only_before(rel, self._options, self.registry))
        before.update(key)
        return before

    def _truncate(self, msg: pg.Truncate, lsn: int) -> None:
        for oid in msg.relation_oids:
            rel = self._relations.get(oid)
            if rel is not None:
                self._emit(Op.TRUNCATE, rel, {}, None, None, lsn)


_INSERT, _UPDATE, _NEW = ord("I"), ord("U"), ord("N")
_NEW_AT = NEW_TUPLE_AT - 1  # the new tuple's "N" tag
# An enum member read through its class costs ~150 ns on Python 3.11: once here, not per row.
_CREATE, _UPDATED = Op.CREATE, Op.UPDATE
_U32 = struct.Struct(">I").unpack_from


def _ignore(message: Any, lsn: int) -> None:
    return None
