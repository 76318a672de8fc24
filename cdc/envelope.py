"""Encode change events as Debezium's JSON records.

The value is ``{"before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"}``
(Debezium 3.x's envelope), in the JsonConverter's ``{"schema", "payload"}`` wrapper under
``schemas.enable`` (:mod:`cdc.connect_schema`); a delete is followed by a tombstone (same key,
null value) so compaction can drop the key, unless ``tombstones.on.delete`` is off. The
``source`` block is Debezium's (``version`` ... ``ts_ns``, then the connector's fields), with
our ``pos`` last.

Values reach this module already JSON-shaped (converters run in the source), so encoding is one
``orjson.dumps`` per record. ``_default`` is a safety net for the few Python types that orjson
does not serialise itself, keeping decimals exact and bytes readable.

Every record value is written through one :class:`RecordTemplate`: this module's own
:func:`encode_value`, a source that writes its records itself (:data:`PreEncoded`, the
PostgreSQL stream) and the snapshot's native encoder, which is handed the template's pieces.
``source.pos`` is written by :func:`write_pos` (the dict form) and the template (the bytes
form), and read by :func:`read_pos`, which every sink uses.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any, Final, NamedTuple

import orjson

from cdc.connect_schema import TableSchemas, inferred_schemas
from cdc.envelope_options import READABLE, EnvelopeOptions
from cdc.events import ChangeEvent, Op, Row, SourceInfo, topic_name
from cdc.log.base import Record

CONNECTOR_VERSION = "0.1.0"

#: A record a source already wrote for an event (:attr:`ChangeEvent.encoded`):
#: ``(pipeline, topic, key JSON, value up to its top-level ts_ms number, its closing)``. A
#: plain tuple, not a named one: one is built per streamed change, and a ``NamedTuple`` costs
#: eight times more.
PreEncoded = tuple[str, str, bytes, bytes, bytes]


class EncodedRow(Mapping[str, Any]):
    """A row whose JSON the source already wrote (a native encoder); the envelope embeds the
    bytes as they are, and the values are worked out only if something reads them.

    Args:
        json: the row as a JSON object, exactly as ``orjson.dumps`` of its values would write.
        raw: what ``decode`` turns into the row's values (a tuple, the message bytes).
        decode: ``raw`` -> the row dict, on first access.
    """

    __slots__ = ("_decode", "_raw", "_values", "json")

    def __init__(self, json: bytes, raw: Any, decode: Callable[[Any], Row]) -> None:
        self.json = json
        self._raw = raw
        self._decode = decode
        self._values: Row | None = None

    @classmethod
    def of(cls, json: bytes, values: Row) -> EncodedRow:
        """A row whose values are known already (the Python encoder's)."""
        row = cls(json, None, _no_decode)
        row._values = values
        return row

    def values_dict(self) -> Row:
        """The row's values (decoded once)."""
        values = self._values
        if values is None:
            values = self._values = self._decode(self._raw)
        return values

    def __getitem__(self, name: str) -> Any:
        return self.values_dict()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values_dict())

    def __len__(self) -> int:
        return len(self.values_dict())

    def __repr__(self) -> str:
        return f"EncodedRow({self.json!r})"


def _no_decode(raw: Any) -> Row:
    raise AssertionError("an EncodedRow.of row has its values")


def _default(value: Any) -> Any:
    if value.__class__ is EncodedRow:  # the source wrote its JSON already
        return orjson.Fragment(value.json)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def dumps(value: Any) -> bytes:
    """JSON-encode with the envelope's rules (exact decimals, base64 bytes)."""
    return orjson.dumps(value, default=_default)


def encode_key(key: dict[str, Any]) -> bytes:
    """The record key: a JSON object of the primary-key columns, in key order."""
    return exact(orjson.dumps(key, default=_default))


def exact(data: bytes) -> bytes:
    """``data`` in a bytes object of its own size.

    orjson (3.12 and later) hands back even a 10-byte document in a 4 KiB buffer. That is
    harmless for a value used once, but record keys and values wait in batches, and a watermark
    window keeps its chunk's keys, so a 50,000-row chunk held 400 MB more than its data.
    """
    return memoryview(data).tobytes()


# -- source.pos ----------------------------------------------------------------------------


def write_pos(position: Any, sequence: Any) -> list[Any]:
    """``source.pos`` as the dict envelope holds it: ``[position, sequence]``.

    It orders the changes of one key totally, so a sink can skip any record whose ``pos`` is
    not newer than what it holds. :class:`RecordTemplate` writes the same in bytes.
    """
    return [position, sequence]


def read_pos(value: Mapping[str, Any]) -> tuple[Any, Any]:
    """``source.pos`` of a decoded record value, unchecked: each sink checks the types its
    policy needs.

    Raises:
        KeyError, TypeError, ValueError: no ``source.pos``, or not a pair.
    """
    source = value.get("source")
    if source is None and "payload" in value:  # the schemas.enable wrapper
        source = value["payload"]["source"]
    position, sequence = source["pos"]  # type: ignore[index]
    return position, sequence


# -- the record template -------------------------------------------------------------------


class RecordTemplate(NamedTuple):
    """A record value with what changes from change to change left open.

    The value is ``prefix + after + head + order + mid + extra + pos + sequence + tail +
    stamp(now) + close``: ``order`` is the JSON of ``source.sequence`` (Debezium's, per
    change), ``extra`` the connector's fields after ``txId`` (``,"lsn":...``, per change,
    :func:`extra_json`), ``sequence`` our ``pos`` sequence. One is built per transaction (or
    snapshot chunk), table and operation, never per row.

    Attributes:
        prefix: ``[{"schema":<S>,"payload":]{"before":<JSON>,"after":``.
        head: ``,"source":{"version":...,"db":...,"sequence":``.
        mid: ``,"ts_us":...,"ts_ns":...,"schema":...,"table":...,"txId":...``.
        pos: ``,"pos":[<position>,``.
        tail: ``]},"transaction":null,"op":"<op>","ts_ms":``.
        close: ``}``, or ``}}`` inside the schema wrapper.
    """

    prefix: bytes
    head: bytes
    mid: bytes
    pos: bytes
    tail: bytes
    close: bytes

    @classmethod
    def of(
        cls,
        op: Op,
        src: SourceInfo,
        pipeline: str,
        before: bytes = b"null",
        schemas: TableSchemas | None = None,
    ) -> RecordTemplate:
        """The template of ``op`` changes with ``src``'s transaction-wide fields, ``before``
        (JSON) as their old image, and ``schemas`` (``schemas.enable``) or none."""
        head, mid = source_parts(src, pipeline)
        prefix = b'{"before":%b,"after":' % before
        close = b"}"
        if schemas is not None:
            prefix, close = schemas.value_prefix + prefix, b"}}"
        position = _json(src.position)
        return cls(prefix, head, mid, b',"pos":[%b,' % position, _OP_PARTS[op], close)

    def value(self, after: bytes, order: bytes, extra: bytes, sequence: int, now_ms: int) -> bytes:
        """The whole record value."""
        return b"%b%b%b%b%b%b%b%d%b%b%b" % (
            self.prefix,
            after,
            self.head,
            order,
            self.mid,
            extra,
            self.pos,
            sequence,
            self.tail,
            stamp(now_ms),
            self.close,
        )

    def value_at(self, after: bytes, order: bytes, extra: bytes, sequence: int) -> bytes:
        """The value up to its ``ts_ms`` number (:data:`PreEncoded`); :func:`finish` completes
        it with :attr:`close`."""
        return b"%b%b%b%b%b%b%b%d%b" % (
            self.prefix,
            after,
            self.head,
            order,
            self.mid,
            extra,
            self.pos,
            sequence,
            self.tail,
        )

    def pieces(self, order: bytes, extra: bytes, now_ms: int) -> tuple[bytes, bytes, bytes]:
        """``(prefix, middle, tail)`` with ``prefix + after + middle + sequence + tail`` the
        value, for rows sharing ``order`` and ``extra`` (a snapshot chunk's): for an encoder
        that writes a batch of rows at once (the native snapshot one)."""
        middle = b"%b%b%b%b%b" % (self.head, order, self.mid, extra, self.pos)
        return self.prefix, middle, b"%b%b%b" % (self.tail, stamp(now_ms), self.close)

    def marked(self, value: bytes, other: RecordTemplate) -> bytes:
        """``value``, written through this template, with ``other``'s ``source`` head (the same
        but for ``source.snapshot``): the first and last rows of a snapshot."""
        at = value.rfind(self.head)
        return value[:at] + other.head + value[at + len(self.head) :]


def stamp(now_ms: int) -> bytes:
    """The envelope's ``ts_ms`` number and its ``ts_us``/``ts_ns`` (wall clock, from ms)."""
    return b'%d,"ts_us":%d,"ts_ns":%d' % (now_ms, now_ms * 1000, now_ms * 1_000_000)


def extra_json(extra: Mapping[str, Any]) -> bytes:
    """The ``source`` fields after ``txId`` as they follow it: ``,"lsn":...`` (or nothing)."""
    if not extra:
        return b""
    return b"," + orjson.dumps(extra, default=_default)[1:-1]


#: PostgreSQL's ``source`` fields after ``lsn``: always null here (no xmin, no origins).
PG_TAIL: Final = b',"xmin":null,"origin":null,"origin_lsn":null'


def lsn_extra(lsn: int) -> bytes:
    """:func:`extra_json` of PostgreSQL's ``{"lsn": lsn, "xmin": None, "origin": None,
    "origin_lsn": None}``."""
    return b',"lsn":%d%b' % (lsn, PG_TAIL)


def pg_order(last_commit: int | None, lsn: int) -> str:
    """PostgreSQL's ``source.sequence``: ``["<last commit lsn>","<lsn>"]`` (Debezium's)."""
    if last_commit is None:
        return f'[null,"{int(lsn)}"]'
    return f'["{int(last_commit)}","{int(lsn)}"]'


def order_json(order: str | None) -> bytes:
    """``source.sequence`` as JSON (a string holding JSON, or null)."""
    return b"null" if order is None else orjson.dumps(order)


def finish(value_head: bytes, now_ms: int, close: bytes = b"}") -> bytes:
    """A :data:`PreEncoded` value finished with its timestamps."""
    return b"%b%b%b" % (value_head, stamp(now_ms), close)


# -- the source block ----------------------------------------------------------------------


def source_block(event: ChangeEvent, pipeline: str) -> dict[str, Any]:
    """The envelope's ``source`` block (the dict form; :func:`source_parts` is the bytes)."""
    src = event.source
    block = _source_common(src, pipeline)
    block.update(_source_table(src))
    if src.extra:
        block.update(src.extra)
    block["pos"] = write_pos(src.position, src.sequence)
    return block


def _source_common(src: SourceInfo, pipeline: str) -> dict[str, Any]:
    """The fields every Debezium ``source`` block starts with, in its order."""
    ts_us = src.ts_us if src.ts_us is not None else src.ts_ms * 1000
    return {
        "version": CONNECTOR_VERSION,
        "connector": src.connector,
        "name": pipeline,
        "ts_ms": src.ts_ms,
        "snapshot": src.snapshot,
        "db": src.db,
        "sequence": src.order,
        "ts_us": ts_us,
        "ts_ns": ts_us * 1000,
    }


def _source_table(src: SourceInfo) -> dict[str, Any]:
    if not src.table_fields:
        return {}
    return {"schema": src.schema, "table": src.table, "txId": src.tx_id}


def source_parts(src: SourceInfo, pipeline: str) -> tuple[bytes, bytes]:
    """The ``source`` block's bytes around its ``sequence``: ``(head, mid)``
    (:class:`RecordTemplate`), the same for every change of one transaction and table."""
    common = orjson.dumps(_source_common(src, pipeline), default=_default)
    at = common.index(b',"sequence":')
    head = b',"source":' + common[:at] + b',"sequence":'
    rest = common[common.index(b',"ts_us":') : -1]
    table = _source_table(src)
    if table:
        rest += b"," + orjson.dumps(table, default=_default)[1:-1]
    return head, rest


def _json(value: Any) -> bytes:
    if value.__class__ is int:
        return b"%d" % value
    return orjson.dumps(value, default=_default)


# -- values --------------------------------------------------------------------------------


def encode_value(
    event: ChangeEvent,
    pipeline: str,
    now_ms: int | None = None,
    schemas: TableSchemas | None = None,
) -> bytes:
    """The record value: the Debezium change-event envelope, in ``schemas``' wrapper if given.

    The bytes are those of ``orjson.dumps`` of the envelope dict (:func:`encode_value_dict`,
    which ``tests/unit/test_envelope_fast.py`` holds this to), written through a
    :class:`RecordTemplate` around the ``source`` head, which is the same for every change of
    a transaction and table and so is encoded once; a row the source already encoded
    (:class:`EncodedRow`) is copied in as it is.
    """
    src = event.source
    sequence, extra = src.sequence, src.extra
    if (
        sequence.__class__ is not int
        or event.transaction is not None
        or event.fields
        or (extra and not _BASE_KEYS.isdisjoint(extra))
    ):
        return encode_value_dict(event, pipeline, now_ms, schemas)
    template = _cached_template(event, pipeline, schemas)
    ts = now_ms if now_ms is not None else int(time.time() * 1000)
    return template.value(
        row_json(event.after), order_json(src.order), extra_json(extra), sequence, ts
    )


def _cached_template(
    event: ChangeEvent, pipeline: str, schemas: TableSchemas | None
) -> RecordTemplate:
    """The event's template; the ``source`` parts are remembered for the latest transaction
    and table."""
    global _last_parts
    src = event.source
    ident = (
        pipeline,
        src.connector,
        src.db,
        src.schema,
        src.table,
        src.ts_ms,
        src.ts_us,
        src.snapshot,
        src.tx_id,
        src.table_fields,
    )
    cached = _last_parts  # one read: another thread may replace it, never half of it
    if cached[0] != ident:
        cached = _last_parts = (ident, source_parts(src, pipeline))
    head, mid = cached[1]
    prefix = b'{"before":%b,"after":' % row_json(event.before)
    close = b"}"
    if schemas is not None:
        prefix, close = schemas.value_prefix + prefix, b"}}"
    pos = b',"pos":[%b,' % _json(src.position)
    return RecordTemplate(prefix, head, mid, pos, _OP_PARTS[event.op], close)


def encode_value_dict(
    event: ChangeEvent,
    pipeline: str,
    now_ms: int | None = None,
    schemas: TableSchemas | None = None,
) -> bytes:
    """:func:`encode_value` from the envelope as a dict: the reference, and the general case."""
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    value: dict[str, Any] = {"before": event.before, "after": event.after}
    if event.fields:
        value.update(event.fields)
    value["source"] = source_block(event, pipeline)
    value["transaction"] = event.transaction
    value["op"] = event.op.value
    value.update(ts_ms=now, ts_us=now * 1000, ts_ns=now * 1_000_000)
    data = orjson.dumps(value, default=_default)
    return exact(data if schemas is None else schemas.wrap_value(data))


_BASE_KEYS: Final = frozenset(
    (
        "version",
        "connector",
        "name",
        "ts_ms",
        "snapshot",
        "db",
        "sequence",
        "ts_us",
        "ts_ns",
        "schema",
        "table",
        "txId",
        "pos",
    )
)
_OP_PARTS: Final = {
    op: b']},"transaction":null,"op":"' + op.value.encode() + b'","ts_ms":' for op in Op
}
_last_parts: tuple[tuple[Any, ...], tuple[bytes, bytes]] = ((), (b"", b""))


def row_json(row: Any) -> bytes:
    """A row's JSON: the source's own for an :class:`EncodedRow`, else encoded now."""
    if row is None:
        return b"null"
    if row.__class__ is EncodedRow:
        json: bytes = row.json
        return json
    return orjson.dumps(row, default=_default)


# -- records -------------------------------------------------------------------------------


def to_records(
    event: ChangeEvent,
    pipeline: str,
    now_ms: int | None = None,
    options: EnvelopeOptions = READABLE,
) -> list[Record]:
    """The records one event becomes: the change, plus a tombstone after a delete (unless
    ``tombstones.on.delete`` is off).

    A truncate has no key of its own; it is keyed ``{}`` (a compacted topic refuses a null
    key: a documented deviation from Debezium's null) so it stays in order with the table's
    changes on partition of that key, and compaction keeps the last one.

    An event the source already encoded for this pipeline (:attr:`ChangeEvent.encoded`, never
    a delete) only gets its timestamps: the same bytes, without building them again.
    ``skipped.operations`` is applied by :func:`batch_records`, not here.
    """
    encoded = event.encoded
    if encoded is not None and encoded[0] == pipeline:
        ts = now_ms if now_ms is not None else int(time.time() * 1000)
        return [Record(encoded[1], encoded[2], finish(encoded[3], ts, encoded[4]))]
    src = event.source
    topic = topic_name(pipeline, src.schema, src.table)
    schemas = schemas_of(event, topic, options)
    key = encode_key(event.key)
    if schemas is not None:
        key = schemas.wrap_key(key)
    value = encode_value(event, pipeline, now_ms, schemas)
    records = [Record(topic, key, value)]
    if event.op is Op.DELETE and options.tombstones_on_delete:
        records.append(Record(topic, key, None))
    return records


def schemas_of(event: ChangeEvent, topic: str, options: EnvelopeOptions) -> TableSchemas | None:
    """The Connect schemas of ``event``'s record under ``options`` (``None``: no wrapper)."""
    if not options.schemas_enable:
        return None
    if event.connect is not None:
        return event.connect
    row = event.after if event.after is not None else event.before or {}
    if row.__class__ is EncodedRow:
        row = row.values_dict()
    src = event.source
    ident = (topic, src.connector, src.table_fields, *_shape(row), *_shape(src.extra))
    found = _INFERRED.get(ident)
    if found is None:
        found = inferred_schemas(topic, src.connector, row, event.key, src.extra, src.table_fields)
        if len(_INFERRED) > 10_000:  # a source whose shapes never repeat: bound the cache
            _INFERRED.clear()
        _INFERRED[ident] = found
    return found


def _shape(values: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple((k, v.__class__) for k, v in values.items())


_INFERRED: dict[tuple[Any, ...], TableSchemas] = {}


def batch_records(
    events: Iterable[ChangeEvent],
    pipeline: str,
    now_ms: int,
    options: EnvelopeOptions = READABLE,
) -> list[Record]:
    """The records of a batch of events, in order: :func:`to_records` of each, in one loop,
    without the operations ``skipped.operations`` names."""
    records: list[Record] = []
    append, extend = records.append, records.extend
    ts = stamp(now_ms)
    skipped = options.skipped
    for event in events:
        if skipped and event.op in skipped:
            continue
        encoded = event.encoded
        if encoded is not None and encoded[0] == pipeline:
            append(Record(encoded[1], encoded[2], b"%b%b%b" % (encoded[3], ts, encoded[4])))
        else:
            extend(to_records(event, pipeline, now_ms, options))
    return records


def decode(data: bytes | None) -> Any:
    """Decode a JSON key or value; ``None`` (a tombstone) stays ``None``."""
    return None if data is None else orjson.loads(data)


def payload(data: Any) -> Any:
    """A decoded key or value without its ``{"schema", "payload"}`` wrapper, if it has one."""
    if data.__class__ is dict and len(data) == 2 and "payload" in data and "schema" in data:
        return data["payload"]
    return data
