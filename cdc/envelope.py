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
from decimal import Decimal
from typing import Any

import orjson

from cdc.events import ChangeEvent, EncodedRow, Op, topic_name
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
    return orjson.dumps(key, default=_default)


def source_block(event: ChangeEvent, pipeline: str) -> dict[str, Any]:
    """The envelope's ``source`` block.

    ``pos`` is ``[position, sequence]``: it orders the changes of one key totally, so a sink can
    skip any record whose ``pos`` is not newer than what it holds.
    """
    src = event.source
    block: dict[str, Any] = {
        "version": CONNECTOR_VERSION,
        "connector": src.connector,
        "name": pipeline,
        "ts_ms": src.ts_ms,
        "snapshot": src.snapshot,
        "db": src.db,
        "schema": src.schema,
        "table": src.table,
        "txId": src.tx_id,
        "pos": [src.position, src.sequence],
    }
    if src.extra:
        block.update(src.extra)
    return block


def encode_value(event: ChangeEvent, pipeline: str, now_ms: int | None = None) -> bytes:
    """The record value: the Debezium change-event envelope."""
    return orjson.dumps(
        {
            "before": event.before,
            "after": event.after,
            "source": source_block(event, pipeline),
            "op": event.op.value,
            "ts_ms": now_ms if now_ms is not None else int(time.time() * 1000),
        },
        default=_default,
    )


def to_records(event: ChangeEvent, pipeline: str, now_ms: int | None = None) -> list[Record]:
    """The records one event becomes: the change, plus a tombstone after a delete.

    A truncate has no key of its own; it is keyed by the table so it stays in order with the
    table's changes on partition of that key, and compaction keeps the last one.
    """
    topic = topic_name(pipeline, event.source.schema, event.source.table)
    key = encode_key(event.key)
    value = encode_value(event, pipeline, now_ms)
    records = [Record(topic=topic, key=key, value=value)]
    if event.op is Op.DELETE:
        records.append(Record(topic=topic, key=key, value=None))
    return records


def decode(data: bytes | None) -> Any:
    """Decode a JSON key or value; ``None`` (a tombstone) stays ``None``."""
    return None if data is None else orjson.loads(data)
