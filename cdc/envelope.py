"""Encode change events as Debezium-compatible schemaless JSON records.

The value is ``{"before", "after", "source", "op", "ts_ms"}``; a delete is followed by a
tombstone (same key, null value) so compaction can drop the key.

Values reach this module already JSON-shaped (converters run in the source), so encoding is one
``orjson.dumps`` per record. ``_default`` is a safety net for the few Python types that orjson
does not serialise itself, keeping decimals exact and bytes readable.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterable
from decimal import Decimal
from typing import Any, Final, NamedTuple

import orjson

from cdc.events import ChangeEvent, EncodedRow, Op, SourceInfo, topic_name
from cdc.log.base import Record

CONNECTOR_VERSION = "0.1.0"


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


def source_block(event: ChangeEvent, pipeline: str) -> dict[str, Any]:
    """The envelope's ``source`` block.

    ``pos`` is ``[position, sequence]``: it orders the changes of one key totally, so a sink can
    skip any record whose ``pos`` is not newer than what it holds.
    """
    src = event.source
    block = _source_fields(src, pipeline)
    block["pos"] = [src.position, src.sequence]
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


def encode_value(event: ChangeEvent, pipeline: str, now_ms: int | None = None) -> bytes:
    """The record value: the Debezium change-event envelope.

    The bytes are those of ``orjson.dumps`` of the envelope dict (:func:`encode_value_dict`,
    which ``tests/unit/test_envelope_fast.py`` holds this to), put together from pieces: the
    ``source`` block's head is the same for every change of a transaction, so it is encoded once
    per transaction and table rather than rebuilt as a dict per change, and a row the source
    already encoded (:class:`~cdc.events.EncodedRow`) is copied in as it is.
    """
    global _last_head
    src = event.source
    position, sequence, extra = src.position, src.sequence, src.extra
    if (
        position.__class__ is not int
        or sequence.__class__ is not int
        or (extra and not _BASE_KEYS.isdisjoint(extra))
    ):
        return encode_value_dict(event, pipeline, now_ms)
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
        head = cached[1]
    else:
        head = source_head(src, pipeline)
        _last_head = (ident, head)
    tail = b"]}" if not extra else b"]," + orjson.dumps(extra, default=_default)[1:]
    return b"".join(
        (
            b'{"before":',
            _row_json(event.before),
            b',"after":',
            _row_json(event.after),
            b',"source":',
            head,
            b"%d,%d" % (position, sequence),
            tail,
            _OP_PARTS[event.op],
            b"%d}" % (now_ms if now_ms is not None else int(time.time() * 1000)),
        )
    )


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


def source_head(src: SourceInfo, pipeline: str) -> bytes:
    """The ``source`` block up to its position: ``{"version":...,"txId":...,"pos":[``.

    The same for every change of one transaction (or snapshot chunk) and table, so a source
    that writes records itself (:func:`value_head`) encodes it once per transaction and table.
    """
    return orjson.dumps(_source_fields(src, pipeline), default=_default)[:-1] + b',"pos":['


def value_head(op: Op, head: bytes, after: bytes, position: int, sequence: int, lsn: int) -> bytes:
    """A record value up to the number of its top-level ``ts_ms``, for :attr:`ChangeEvent.encoded`.

    For an event without a ``before`` image whose ``source`` extra is exactly ``{"lsn": lsn}``
    (what the PostgreSQL source's inserts, updates and snapshot rows carry): ``head`` is
    :func:`source_head` of its source, ``after`` its row's JSON. :func:`to_records` appends the
    timestamp; the bytes equal :func:`encode_value_dict`'s (``tests/unit/test_envelope_fast.py``).
    """
    return _VALUE_HEADS[op] % (after, head, position, sequence, lsn)


class RecordParts(NamedTuple):
    """A record value around its row JSON and sequence: see :func:`record_parts`."""

    prefix: bytes
    middle: bytes
    tail: bytes


def record_parts(op: Op, head: bytes, position: int, lsn: int, now_ms: int) -> RecordParts:
    """:func:`value_head` finished with its timestamp, split around the two things that vary
    from row to row: ``prefix + row JSON + middle + b"%d" % sequence + tail`` is the value of
    ``value_head(op, head, row JSON, position, sequence, lsn)`` finished with ``now_ms``.

    For a source that writes a batch of records at once (the snapshot's native encoder).
    """
    middle = b',"source":%b%d,' % (head, position)
    return RecordParts(_AFTER_AT, middle, b'],"lsn":%d}%b%d}' % (lsn, _OP_PARTS[op], now_ms))


_BASE_KEYS: Final = frozenset(
    ("version", "connector", "name", "ts_ms", "snapshot", "db", "schema", "table", "txId", "pos")
)
_OP_PARTS: Final = {op: b',"op":"' + op.value.encode() + b'","ts_ms":' for op in Op}
_AFTER_AT: Final = b'{"before":null,"after":'
_VALUE_HEADS: Final = {
    op: _AFTER_AT + b'%b,"source":%b%d,%d],"lsn":%d}' + _OP_PARTS[op] for op in Op
}
_last_head: tuple[tuple[Any, ...], bytes] = ((), b"")


def _row_json(row: Any) -> bytes:
    if row is None:
        return b"null"
    if row.__class__ is EncodedRow:
        json: bytes = row.json
        return json
    return orjson.dumps(row, default=_default)


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
        return [Record(encoded[1], encoded[2], b"%b%d}" % (encoded[3], ts))]
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
            append(Record(encoded[1], encoded[2], b"%b%d}" % (encoded[3], now_ms)))
        else:
            extend(to_records(event, pipeline, now_ms))
    return records


def decode(data: bytes | None) -> Any:
    """Decode a JSON key or value; ``None`` (a tombstone) stays ``None``."""
    return None if data is None else orjson.loads(data)
