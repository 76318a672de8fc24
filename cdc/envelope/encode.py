"""Encode change events as Debezium's JSON records.

The value is ``{"before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"}``
(Debezium 3.x's envelope), in the JsonConverter's ``{"schema", "payload"}`` wrapper under
``schemas.enable`` (:mod:`cdc.envelope.connect_schema`); a delete is followed by a tombstone (same
key, null value) so compaction can drop the key, unless ``tombstones.on.delete`` is off. The
``source`` block is Debezium's (``version`` ... ``ts_ns``, then the connector's fields): the
value is Debezium's bytes. The record's source position, ``[position, sequence]``, what sinks
order and de-duplicate by, travels beside the value (:attr:`Record.pos`: a Kafka header
``cdc.pos``, a column of the embedded log).

Values reach this module already JSON-shaped (converters run in the source), so encoding is one
``orjson.dumps`` per record. Its parts live in :mod:`cdc.envelope.json_rows` (rows a source wrote
already, the JSON rules for decimals and bytes) and :mod:`cdc.envelope.template` (the record
template and the ``source`` block); both are re-exported here, so ``cdc.envelope.encode.X`` keeps
working. The position is written by :func:`write_pos` (and :meth:`RecordTemplate.pos`), and
read by :func:`record_pos`, which the sink runtime uses
(:attr:`cdc.contracts.sink.SinkRecord.position`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from cdc.contracts.events import ChangeEvent, Op, topic_name
from cdc.envelope.connect_schema import TableSchemas, inferred_schemas
from cdc.envelope.json_rows import EncodedRow, dumps, exact, json_of, row_json
from cdc.envelope.json_rows import json_default as _default
from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.envelope.template import (
    _OP_PARTS,
    CONNECTOR_VERSION,
    RecordTemplate,
    extra_json,
    finish,
    order_json,
    source_block,
    source_parts,
    stamp,
    write_pos,
)
from cdc.log.base import Record

__all__ = [
    "CONNECTOR_VERSION",
    "EncodedRow",
    "RecordTemplate",
    "batch_records",
    "decode",
    "dumps",
    "encode_key",
    "encode_value",
    "encode_value_dict",
    "exact",
    "extra_json",
    "finish",
    "order_json",
    "payload",
    "read_pos",
    "record_pos",
    "row_json",
    "source_block",
    "source_parts",
    "stamp",
    "to_records",
    "write_pos",
]


def encode_key(key: dict[str, Any]) -> bytes:
    """The record key: a JSON object of the primary-key columns, in key order."""
    return exact(orjson.dumps(key, default=_default))


# -- the position ---------------------------------------------------------------------------


def record_pos(pos: bytes | None, value: Mapping[str, Any] | None) -> tuple[Any, Any]:
    """A stored record's source position: its ``pos`` (the Kafka header ``cdc.pos``, the
    embedded log's column), else, for a record written before the position moved beside the
    value, the value's ``source.pos`` (:func:`read_pos`).

    Unchecked: each sink checks the types its policy needs.

    Raises:
        KeyError, TypeError, ValueError: neither holds a position (a tombstone written before
            tombstones carried their delete's position has none), or not a pair.
    """
    if pos is not None:
        position, sequence = orjson.loads(pos)
        return position, sequence
    if value is None:
        raise ValueError("a tombstone without a source position")
    return read_pos(value)


def read_pos(value: Mapping[str, Any]) -> tuple[Any, Any]:
    """``source.pos`` of a decoded record value: where records written before the position
    moved beside the value (:func:`record_pos`) hold it.

    Raises:
        KeyError, TypeError, ValueError: no ``source.pos``, or not a pair.
    """
    source = value.get("source")
    if source is None and "payload" in value:  # the schemas.enable wrapper
        source = value["payload"]["source"]
    position, sequence = source["pos"]  # type: ignore[index]
    return position, sequence


# -- the record template -------------------------------------------------------------------

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
    extra = src.extra
    if (
        event.transaction is not None
        or event.fields
        or not src.table_fields  # the MongoDB envelope's other tail (encode_value_dict)
        or (extra and not _BASE_KEYS.isdisjoint(extra))
    ):
        return encode_value_dict(event, pipeline, now_ms, schemas)
    template = _cached_template(event, pipeline, schemas)
    ts = now_ms if now_ms is not None else int(time.time() * 1000)
    return template.value(row_json(event.after), order_json(src.order), extra_json(extra), ts)


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
    return RecordTemplate(prefix, head, mid, json_of(src.position), _OP_PARTS[event.op], close)


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
    if event.source.table_fields:
        value["transaction"] = event.transaction
        value["op"] = event.op.value
        value.update(ts_ms=now, ts_us=now * 1000, ts_ns=now * 1_000_000)
    else:
        # A connector whose source block is all its own (MongoDB's) has Debezium's older
        # envelope tail: op, ts_ms, then transaction, and no ts_us/ts_ns.
        value.update(op=event.op.value, ts_ms=now, transaction=event.transaction)
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
    )
)
_last_parts: tuple[tuple[Any, ...], tuple[bytes, bytes]] = ((), (b"", b""))


# -- records -------------------------------------------------------------------------------


def to_records(
    event: ChangeEvent,
    pipeline: str,
    now_ms: int | None = None,
    options: EnvelopeOptions = READABLE,
) -> list[Record]:
    """The records one event becomes: the change, plus a tombstone after a delete (unless
    ``tombstones.on.delete`` is off).

    A truncate has no key of its own: its key is null, as Debezium's (the embedded log puts
    it on partition 0; a Kafka broker refuses a keyless record on a compacted topic, so the
    Kafka log writes it keyed ``{}``, :meth:`cdc.log.kafka.log.KafkaLog.prepare`).

    An event the source already encoded for this pipeline (:attr:`ChangeEvent.encoded`, never
    a delete) only gets its timestamps: the same bytes, without building them again.
    ``skipped.operations`` is applied by :func:`batch_records`, not here.
    """
    encoded = event.encoded
    if encoded is not None and encoded[0] == pipeline:
        ts = now_ms if now_ms is not None else int(time.time() * 1000)
        return [Record(encoded[1], encoded[2], finish(encoded[3], ts, encoded[4]), encoded[5])]
    src = event.source
    pos = write_pos(src.position, src.sequence)
    topic = topic_name(pipeline, *event.topic_table)
    schemas = schemas_of(event, topic, options)
    key: bytes | None = None
    if event.op is not Op.TRUNCATE:
        key = encode_key(event.key)
        if schemas is not None:
            key = schemas.wrap_key(key)
    value = encode_value(event, pipeline, now_ms, schemas)
    records = [Record(topic, key, value, pos)]
    if event.op is Op.DELETE and options.tombstones_on_delete:
        # The tombstone carries its delete's position: a sink that reads it without the delete
        # (compaction keeps only a key's latest record, and may run while the sink is behind)
        # applies it as that delete, guarded by the position as any change is.
        records.append(Record(topic, key, None, pos))
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
    # The key's shape too: its schema is inferred from it, and its types may vary per record.
    shapes = (*_shape(row), None, *_shape(event.key), None, *_shape(src.extra))
    ident = (topic, src.connector, src.table_fields, *shapes)
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
            value = b"%b%b%b" % (encoded[3], ts, encoded[4])
            append(Record(encoded[1], encoded[2], value, encoded[5]))
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
