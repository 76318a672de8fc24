"""Turn decoded pgoutput messages into change events, in commit order, in bounded batches.

Positions: an event's ``source.position`` is its transaction's commit LSN (``Begin.final_lsn``,
the start of the commit record), known from the transaction's first message, so the events of
a large transaction delivered in several batches all carry it. The offsets stored at commit are
the commit record's *end* LSN: ``START_REPLICATION`` from there skips that transaction. Both
order transactions identically.

The assembler has no I/O of its own: the source feeds it messages and hands it a
:class:`CatalogReader` for the rare lookups (types, NOT NULL flags, TOAST fallback reads).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Protocol

from cdc.envelope import EncodedRow, RecordTemplate, encode_key, source_head
from cdc.events import ChangeEvent, Op, Row, SourceInfo
from cdc.logging import Logger
from cdc.schema import TableSchema
from cdc.source import DeadLetter, SourceBatch
from connectors.postgres import pgoutput as pg
from connectors.postgres.catalog import TableInfo
from connectors.postgres.encoding import NEW_TUPLE_AT
from connectors.postgres.fast import log_selected
from connectors.postgres.lsn import Lsn
from connectors.postgres.pgoutput import tuple_at
from connectors.postgres.protocol import pg_time_to_unix_ms
from connectors.postgres.relations import CONNECTOR, RelationState, build_state
from connectors.postgres.shapes import ShapeTracker
from connectors.postgres.toast import ToastFiller, fill_from, key_identity, missing_columns
from connectors.postgres.types import ConversionError, TypeRegistry

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
        hooks: logical-message handlers by prefix (snapshot watermarks); ``ignored`` prefixes
            (the heartbeat) are dropped silently.
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
    ) -> None:
        self._pipeline, self._db, self._tables = pipeline, db, tables
        self._key_columns, self._catalog, self._toast = key_columns, catalog, toast
        self._fail = on_bad_record != "dead_letter"
        self._logger = logger
        log_selected(logger)
        self.hooks: dict[str, MessageHook] = {}
        #: Follows shape changes (published column ids, re-snapshots); ``None``: not followed.
        self.shapes: ShapeTracker | None = None
        self._ignored_prefixes = frozenset(ignored_prefixes)
        self.registry = TypeRegistry()
        self._relations: dict[int, RelationState] = {}
        self._skipped: set[int] = set()  # published relations that are not captured here
        self._published: dict[tuple[str, str], TableSchema] = {}
        self.in_tx = False
        self._xid = self._final_lsn = self._ts_ms = self._seq = 0
        self._events: list[ChangeEvent] = []
        # The batch's latest event per key, built only when a TOAST fill asks (see _recent).
        self._recent_index: dict[Hashable, ChangeEvent] = {}
        self._indexed = 0
        self._schemas: list[TableSchema] = []
        self._next_schemas: list[TableSchema] = []
        self._dead: list[DeadLetter] = []
        self._commit_lsn: int | None = None
        # The transaction's record template per topic and message tag (see fast_change).
        self._templates: dict[tuple[str, int], RecordTemplate] = {}
        self.cut = False  # the batch must end before the next event (a shape change)
        self._handlers: dict[type, Callable[[Any, int], None]] = {
            pg.Begin: self._begin,
            pg.Commit: self._commit,
            pg.Relation: self._relation,
            pg.Insert: self._insert,
            pg.Update: self._update,
            pg.Delete: self._delete,
            pg.Truncate: self._truncate,
            pg.LogicalMessage: self._message,
            pg.TypeInfo: self._type,
            pg.Origin: _ignore,
        }

    # -- batches ---------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Events waiting in the current batch."""
        return len(self._events)

    @property
    def events(self) -> list[ChangeEvent]:
        """The current batch's events (a new list after each ``take``)."""
        return self._events

    @property
    def has_output(self) -> bool:
        """The current batch has something to return (events, schemas, letters, a commit)."""
        return bool(self._events or self._schemas or self._dead or self._commit_lsn)

    def take(self) -> SourceBatch:
        """The batch built so far; its offsets are set only at a transaction boundary."""
        committed = None if self.in_tx or self._commit_lsn is None else self._commit_lsn
        batch = SourceBatch(
            events=self._events,
            commit_offsets=None if committed is None else Lsn(committed).to_offsets(),
            schemas=self._schemas,
            dead_letters=tuple(self._dead),
        )
        self._events, self._schemas, self._dead = [], self._next_schemas, []
        self._recent_index.clear()
        self._indexed = 0
        self._next_schemas = []
        self.cut = False
        if committed is not None:
            self._commit_lsn = None
        return batch

    def handle(self, message: pg.PgOutputMessage, lsn: int) -> None:
        """Apply one decoded message; ``lsn`` is its WAL position (0 when not known)."""
        handler = self._handlers.get(type(message))
        if handler is None:
            raise pg.ProtocolError(f"unexpected message outside streaming: {message!r}")
        handler(message, lsn)

    # -- transaction framing ---------------------------------------------------------------

    def _begin(self, msg: pg.Begin, lsn: int) -> None:
        self.in_tx = True
        self._xid, self._final_lsn = msg.xid, msg.final_lsn
        self._ts_ms = pg_time_to_unix_ms(msg.commit_ts_us)
        self._seq = 0
        self._templates.clear()

    def begin_streamed(self, xid: int, commit_lsn: int, commit_ts_us: int) -> None:
        """Start replaying a transaction the server streamed before its commit."""
        self._begin(pg.Begin(commit_lsn, commit_ts_us, xid), commit_lsn)

    def _commit(self, msg: pg.Commit, lsn: int) -> None:
        self.commit(msg.end_lsn)

    def commit(self, end_lsn: int) -> None:
        """End the current transaction at ``end_lsn``, its commit record's end."""
        self.in_tx = False
        self._commit_lsn = end_lsn

    def _message(self, msg: pg.LogicalMessage, lsn: int) -> None:
        if msg.prefix in self._ignored_prefixes:
            return
        hook = self.hooks.get(msg.prefix)
        if hook is not None:
            hook(msg, lsn)

    def _type(self, msg: pg.TypeInfo, lsn: int) -> None:
        if msg.oid not in self.registry:
            self._catalog.load_types(self.registry, [msg.oid])

    # -- relations -------------------------------------------------------------------------

    def _relation(self, msg: pg.Relation, lsn: int) -> None:
        info = self._tables.get((msg.namespace or "pg_catalog", msg.name))
        if info is None:
            self._skipped.add(msg.oid)
            self._relations.pop(msg.oid, None)
            return
        missing = self.registry.missing(c.type_oid for c in msg.columns)
        if missing:
            self._catalog.load_types(self.registry, missing)
        shapes = self.shapes
        state = build_state(
            self._pipeline,
            info,
            msg,
            self.registry,
            self._key_columns.get(info.name),
            self._catalog.not_null(info.oid),
            self._final_lsn,
            self._catalog.array_dims(info.oid),
            None if shapes is None else shapes.ids(info.oid, msg),
        )
        self._relations[msg.oid] = state
        self._skipped.discard(msg.oid)
        if shapes is not None:
            shapes.observe(info.oid, state.table_schema)
        self._publish(state.table_schema)
        self._toast.track(state.topic, self._catalog.toastable_columns(info.schema, info.table))

    def _publish(self, schema: TableSchema) -> None:
        name = (schema.schema, schema.table)
        if schema.same_shape(self._published.get(name)):
            return
        self._published[name] = schema
        if self._events:
            # Events of the old shape go out in their own batch, ahead of the new schema.
            self._next_schemas.append(schema)
            self.cut = True
        else:
            self._schemas.append(schema)

    def _state(self, oid: int) -> RelationState | None:
        state = self._relations.get(oid)
        if state is None and oid not in self._skipped:
            raise pg.ProtocolError(f"change for relation {oid} before its Relation message")
        return state

    # -- changes ---------------------------------------------------------------------------

    def _emit(
        self,
        op: Op,
        rel: RelationState,
        key: Row,
        before: Row | None,
        after: Row | EncodedRow | None,
        lsn: int,
        extra: dict[str, Any] | None = None,
    ) -> None:
        source = self._next_source(rel, lsn)
        if extra:
            source.extra.update(extra)
        self._events.append(ChangeEvent(op, key, before, after, source))

    def _next_source(self, rel: RelationState, lsn: int) -> SourceInfo:
        """The ``source`` of the transaction's next change (it takes the next sequence)."""
        seq = self._seq
        self._seq = seq + 1
        return SourceInfo(
            CONNECTOR,
            self._db,
            rel.info.schema,
            rel.info.table,
            self._ts_ms,
            self._final_lsn,
            seq,
            "false",
            self._xid,
            {"lsn": lsn or self._final_lsn},
        )

    def fast_change(self, message: bytes, lsn: int) -> bool:
        """Apply an Insert, or an Update without an old tuple, from its message bytes through
        the relation's row encoder (either implementation: the encoder itself falls back);
        ``False`` when it is not such a message, or its tuple has an unchanged TOAST value to
        fill, and the caller then decodes the message for :meth:`handle`.

        Both paths keep the same order and sequence numbers. This one also writes the event's
        record (:attr:`ChangeEvent.encoded`) through the transaction's
        :class:`~cdc.envelope.RecordTemplate` of the table, built once per transaction.
        """
        tag = message[0]
        if (tag != _INSERT and tag != _UPDATE) or len(message) <= NEW_TUPLE_AT:
            return False
        if message[NEW_TUPLE_AT - 1] != _NEW:
            return False
        rel = self._relations.get(_U32(message, 1)[0])
        if rel is None:
            return False
        op = Op.CREATE if tag == _INSERT else Op.UPDATE
        try:
            encoded = rel.encoder.encode_tuple(message)
        except ConversionError as exc:
            self._bad(rel, tuple_at(message, NEW_TUPLE_AT), op.value, lsn, exc)
            return True
        if encoded is None:
            return False
        key, after, key_json = encoded
        source = self._next_source(rel, lsn)
        template = self._templates.get((rel.topic, tag))
        if template is None:
            template = self._template(rel.topic, tag, op, source)
        value = template.value_at(after.json, source.sequence, source.extra["lsn"])
        record = (self._pipeline, rel.topic, key_json, value)
        self._events.append(ChangeEvent(op, key, None, after, source, record))
        return True

    def _template(self, topic: str, tag: int, op: Op, source: SourceInfo) -> RecordTemplate:
        head = source_head(source, self._pipeline)
        template = self._templates[(topic, tag)] = RecordTemplate.of(op, head, source.position)
        return template

    def _insert(self, msg: pg.Insert, lsn: int) -> None:
        rel = self._state(msg.relation_oid)
        if rel is None:
            return
        new = msg.new
        try:
            after = rel.convert(new)
        except ConversionError as exc:
            self._bad(rel, new, "c", lsn, exc)
            return
        extra = self._fill(rel, after, None, after, new) if pg.UNCHANGED in new else None
        key = {k: after[k] for k in rel.key}
        self._emit(Op.CREATE, rel, key, None, after, lsn, extra)

    def _update(self, msg: pg.Update, lsn: int) -> None:
        rel = self._state(msg.relation_oid)
        if rel is None:
            return
        after = self._convert(rel, msg.new, "u", lsn)
        old = None if msg.old is None else self._convert(rel, msg.old, "u", lsn)
        if after is None or (msg.old is not None and old is None):
            return
        key = {k: after[k] for k in rel.key}
        old_key = key if old is None else {k: old[k] for k in rel.key}
        extra = None
        if pg.UNCHANGED in msg.new:
            image = old if msg.old_kind == "O" else None
            extra = self._fill(rel, after, image, old_key, msg.new)
        if old_key != key:
            # A key change: the old key's record must disappear, the new one appear.
            before = old if msg.old_kind == "O" else old_key
            self._emit(Op.DELETE, rel, old_key, before, None, lsn)
            self._emit(Op.CREATE, rel, key, None, after, lsn, extra)
            return
        before = old if msg.old_kind == "O" else None
        self._emit(Op.UPDATE, rel, key, before, after, lsn, extra)

    def _delete(self, msg: pg.Delete, lsn: int) -> None:
        rel = self._state(msg.relation_oid)
        if rel is None:
            return
        old = self._convert(rel, msg.old, "d", lsn)
        if old is None:
            return
        key = {k: old[k] for k in rel.key}
        before = old if msg.old_kind == "O" else key
        if msg.old_kind == "O" and pg.UNCHANGED in msg.old:
            before = {k: v for k, v in old.items() if v is not pg.UNCHANGED}
        self._emit(Op.DELETE, rel, key, before, None, lsn)

    def _truncate(self, msg: pg.Truncate, lsn: int) -> None:
        for oid in msg.relation_oids:
            rel = self._state(oid)
            if rel is not None:
                self._emit(Op.TRUNCATE, rel, {}, None, None, lsn)

    def _convert(self, rel: RelationState, values: pg.TupleData, op: str, lsn: int) -> Row | None:
        try:
            return rel.convert(values)
        except ConversionError as exc:
            self._bad(rel, values, op, lsn, exc)
            return None

    def _bad(
        self, rel: RelationState, values: pg.TupleData, op: str, lsn: int, exc: ConversionError
    ) -> None:
        """Fail with the table and position named, or keep the change as a dead letter."""
        if self._fail:
            where = f"table {rel.info.name}, LSN {Lsn(lsn or self._final_lsn)!s}"
            raise ConversionError(
                exc.type_name, exc.value, f"{exc.reason} ({where})", exc.column
            ) from exc
        self._dead.append(self._dead_letter(rel, values, op, lsn, str(exc)))

    def _dead_letter(
        self, rel: RelationState, values: pg.TupleData, op: str, lsn: int, reason: str
    ) -> DeadLetter:
        names = [c.name for c in rel.relation.columns]
        raw = {
            n: (None if v is None or v is pg.UNCHANGED else v if isinstance(v, str) else v.hex())
            for n, v in zip(names, values, strict=False)
        }
        return DeadLetter(
            table=rel.info.name,
            key={k: raw.get(k) for k in rel.key},
            reason=reason,
            payload={
                "op": op,
                "lsn": str(Lsn(lsn or self._final_lsn)),
                "xid": self._xid,
                "values": raw,
            },
        )

    # -- TOAST -----------------------------------------------------------------------------

    def _recent(self, rel: RelationState, key: Row) -> tuple[bool, Mapping[str, Any] | None]:
        """The key's latest image in the batch being built, if the batch changed it.

        The batch's events are indexed by key on the first call, and only the new ones on each
        later call: a bulk update of a TOASTed table asks once per row, and a scan per call
        would cost the square of the batch size.
        """
        events, index = self._events, self._recent_index
        for event in events[self._indexed :]:
            if event.op is not Op.TRUNCATE:
                source = event.source
                index[key_identity(source.schema, source.table, event.key)] = event
        self._indexed = len(events)
        latest = index.get(key_identity(rel.schema, rel.table, key))
        if latest is None:
            return False, None
        after = latest.after
        return True, after.values_dict() if isinstance(after, EncodedRow) else after

    def _fill(
        self,
        rel: RelationState,
        row: Row,
        image: Row | None,
        lookup_key: Row,
        raw: pg.TupleData,
    ) -> dict[str, Any] | None:
        """Fill unchanged TOAST values of ``row``; the extra ``source`` fields to record.

        ``lookup_key`` is the key the previous image is stored under (the old key when the
        update changes it); ``raw`` is the new tuple, whose key the row has now.
        """
        missing = fill_from(row, image, missing_columns(row))
        if missing:
            found, recent = self._recent(rel, lookup_key)
            if not found:
                recent = self._toast.previous(rel.topic, encode_key(lookup_key))
            missing = fill_from(row, recent, missing)
        if not missing:
            return None
        text = self._catalog.read_row(rel.schema, rel.table, missing, rel.key_text(raw))
        self._toast.fell_back(rel.info.name, missing, gone=text is None)
        if text is None:
            for name in missing:
                row[name] = None
            return {"toast_unavailable": missing}
        values: list[Any] = [None] * len(rel.relation.columns)
        for name, value in zip(missing, text, strict=True):
            values[rel.index[name]] = value
        read = rel.convert(tuple(values))
        for name in missing:
            row[name] = read[name]
        return {"toast_fallback": True, "toast_fallback_columns": missing}


_INSERT, _UPDATE, _NEW = ord("I"), ord("U"), ord("N")
_U32 = struct.Struct(">I").unpack_from


def _ignore(message: Any, lsn: int) -> None:
    return None
