"""Encode change events as Debezium-compatible schemaless JSON records.

The value is ``{"before", "after", "source", "op", "ts_ms"}``; a delete is followed by a
tombstone (same key, null value) so compaction can drop the key.

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

from cdc.events import ChangeEvent, Op, Row, SourceInfo, topic_name
from cdc.log.base import Record

CONNECTOR_VERSION = "0.1.0"

#: A record a source already wrote for an event (:attr:`ChangeEvent.encoded`):
#: ``(pipeline, topic, key JSON, value up to its top-level ts_ms number)``. A plain tuple, not
#: a named one: one is built per streamed change, and a ``NamedTuple`` costs eight times more.
PreEncoded = tuple[str, str, bytes, bytes]


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
    position, sequence = value["source"]["pos"]
    return position, sequence


# -- the record template -------------------------------------------------------------------


class RecordTemplate(NamedTuple):
    """A record value with what changes from change to change left open.

    ``prefix + after JSON + middle + sequence + "]" + extra + tail + ts_ms + "}"`` is the
    value, where ``extra`` is the rest of the ``source`` block (:func:`extra_json`). One is
    built per transaction (or snapshot chunk), table and operation, never per row.

    Attributes:
        prefix: ``{"before":<JSON>,"after":``.
        middle: ``,"source":{<fields>,"pos":[<position>,``.
        tail: ``,"op":"<op>","ts_ms":``.
    """

    prefix: bytes
    middle: bytes
    tail: bytes

    @classmethod
    def of(cls, op: Op, head: bytes, position: int, before: bytes = b"null") -> RecordTemplate:
        """The template of ``op`` changes whose ``source`` block starts with ``head``
        (:func:`source_head`) at ``position``, with ``before`` (JSON) as their old image."""
        return cls(
            b'{"before":%b,"after":' % before, b',"source":%b%d,' % (head, position), _OP_PARTS[op]
        )

    def value(self, after: bytes, sequence: int, extra: bytes, now_ms: int) -> bytes:
        """The whole record value."""
        return b"%b%b%b%d]%b%b%d}" % (
            self.prefix,
            after,
            self.middle,
            sequence,
            extra,
            self.tail,
            now_ms,
        )

    def value_at(self, after: bytes, sequence: int, lsn: int) -> bytes:
        """The value up to its ``ts_ms`` number (:data:`PreEncoded`), for a ``source`` extra of
        exactly ``{"lsn": lsn}``; :func:`finish` completes it."""
        return b'%b%b%b%d],"lsn":%d}%b' % (
            self.prefix,
            after,
            self.middle,
            sequence,
            lsn,
            self.tail,
        )

    def pieces(self, extra: bytes, now_ms: int) -> tuple[bytes, bytes, bytes]:
        """``(prefix, middle, tail)`` with ``prefix + after + middle + sequence + tail`` the
        value: for an encoder that writes a batch of rows at once (the native snapshot one)."""
        return self.prefix, self.middle, b"]%b%b%d}" % (extra, self.tail, now_ms)


def extra_json(extra: Mapping[str, Any]) -> bytes:
    """The ``source`` block after ``pos``: its connector-specific fields and closing brace."""
    if not extra:
        return b"}"
    return b"," + orjson.dumps(extra, default=_default)[1:]


def lsn_extra(lsn: int) -> bytes:
    """:func:`extra_json` of ``{"lsn": lsn}``, what PostgreSQL rows carry."""
    return b',"lsn":%d}' % lsn


def finish(value_head: bytes, now_ms: int) -> bytes:
    """A :data:`PreEncoded` value finished with its timestamp."""
    return b"%b%d}" % (value_head, now_ms)


# -- the source block ----------------------------------------------------------------------


def source_block(event: ChangeEvent, pipeline: str) -> dict[str, Any]:
    """The envelope's ``source`` block (the dict form; :func:`source_head` is the bytes)."""
    src = event.source
    block = _source_fields(src, pipeline)
    block["pos"] = write_pos(src.position, src.sequence)
    if src.extra:
        block.update(src.extra)
    return block


def _source_fields(src: SourceInfo, pipeline: str) -> dict[str, Any]:
    """The ``source`` block's fields before ``pos``, in the envelope's order."""
    return {
        "version": CONNECTOR_VERSION,
        "connector": src.connector,
        "name": pipeline,
        "ts_ms": src.ts_ms,
        "snapshot": src.snapshot,
        "db": src.db,
        "schema": src.schema,
        "table": src.table,
        "txId": src.tx_id,
    }


def source_head(src: SourceInfo, pipeline: str) -> bytes:
    """The ``source`` block up to its position: ``{"version":...,"txId":...,"pos":[``.

    The same for every change of one transaction (or snapshot chunk) and table, so a source
    that writes records itself encodes it once per transaction and table.
    """
    return orjson.dumps(_source_fields(src, pipeline), default=_default)[:-1] + b',"pos":['


# -- values --------------------------------------------------------------------------------


def encode_value(event: ChangeEvent, pipeline: str, now_ms: int | None = None) -> bytes:
    """The record value: the Debezium change-event envelope.

    The bytes are those of ``orjson.dumps`` of the envelope dict (:func:`encode_value_dict`,
    which ``tests/unit/test_envelope_fast.py`` holds this to), written through a
    :class:`RecordTemplate` around the ``source`` head, which is the same for every change of
    a transaction and table and so is encoded once; a row the source already encoded
    (:class:`EncodedRow`) is copied in as it is.
    """
    src = event.source
    position, sequence, extra = src.position, src.sequence, src.extra
    if (
        position.__class__ is not int
        or sequence.__class__ is not int
        or (extra and not _BASE_KEYS.isdisjoint(extra))
    ):
        return encode_value_dict(event, pipeline, now_ms)
    template = RecordTemplate.of(
        event.op, _cached_head(src, pipeline), position, row_json(event.before)
    )
    ts = now_ms if now_ms is not None else int(time.time() * 1000)
    return template.value(row_json(event.after), sequence, extra_json(extra), ts)


def _cached_head(src: SourceInfo, pipeline: str) -> bytes:
    """:func:`source_head`, remembered for the latest transaction and table."""
    global _last_head
    ident = (
        pipeline,
        src.connector,
        src.db,
        src.schema,
        src.table,
        src.ts_ms,
        src.snapshot,
        src.tx_id,
    )
    cached = _last_head  # one read: another thread may replace it, never half of it
    if cached[0] == ident:
        return cached[1]
    head = source_head(src, pipeline)
    _last_head = (ident, head)
    return head


def encode_value_dict(event: ChangeEvent, pipeline: str, now_ms: int | None = None) -> bytes:
    """:func:`encode_value` from the envelope as a dict: the reference, and the general case."""
    return exact(
        orjson.dumps(
            {
                "before": event.before,
                "after": event.after,
                "source": source_block(event, pipeline),
                "op": event.op.value,
                "ts_ms": now_ms if now_ms is not None else int(time.time() * 1000),
            },
            default=_default,
        )
    )


def value_head(op: Op, head: bytes, after: bytes, position: int, sequence: int, lsn: int) -> bytes:
    """A :data:`PreEncoded` value of an event without a ``before`` image whose ``source`` extra
    is exactly ``{"lsn": lsn}``: :meth:`RecordTemplate.value_at` of a template made for it."""
    return RecordTemplate.of(op, head, position).value_at(after, sequence, lsn)


_BASE_KEYS: Final = frozenset(
    ("version", "connector", "name", "ts_ms", "snapshot", "db", "schema", "table", "txId", "pos")
)
_OP_PARTS: Final = {op: b',"op":"' + op.value.encode() + b'","ts_ms":' for op in Op}
_last_head: tuple[tuple[Any, ...], bytes] = ((), b"")


def row_json(row: Any) -> bytes:
    """A row's JSON: the source's own for an :class:`EncodedRow`, else encoded now."""
    if row is None:
        return b"null"
    if row.__class__ is EncodedRow:
        json: bytes = row.json
        return json
    return orjson.dumps(row, default=_default)


# -- records -------------------------------------------------------------------------------


def to_records(event: ChangeEvent, pipeline: str, now_ms: int | None = None) -> list[Record]:
    """The records one event becomes: the change, plus a tombstone after a delete.

    A truncate has no key of its own; it is keyed by the table so it stays in order with the
    table's changes on partition of that key, and compaction keeps the last one.

    An event the source already encoded for this pipeline (:attr:`ChangeEvent.encoded`, never
    a delete) only gets its timestamp: the same bytes, without building them again.
    """
    encoded = event.encoded
    if encoded is not None and encoded[0] == pipeline:
        ts = now_ms if now_ms is not None else int(time.time() * 1000)
        return [Record(encoded[1], encoded[2], finish(encoded[3], ts))]
    src = event.source
    topic = topic_name(pipeline, src.schema, src.table)
    key = encode_key(event.key)
    value = encode_value(event, pipeline, now_ms)
    records = [Record(topic, key, value)]
    if event.op is Op.DELETE:
        records.append(Record(topic, key, None))
    return records


def batch_records(events: Iterable[ChangeEvent], pipeline: str, now_ms: int) -> list[Record]:
    """The records of a batch of events, in order: :func:`to_records` of each, in one loop."""
    records: list[Record] = []
    append, extend = records.append, records.extend
    for event in events:
        encoded = event.encoded
        if encoded is not None and encoded[0] == pipeline:
            append(Record(encoded[1], encoded[2], b"%b%d}" % (encoded[3], now_ms)))  # finish()
        else:
            extend(to_records(event, pipeline, now_ms))
    return records


def decode(data: bytes | None) -> Any:
    """Decode a JSON key or value; ``None`` (a tombstone) stays ``None``."""
    return None if data is None else orjson.loads(data)
