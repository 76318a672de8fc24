"""Offsets in the log: the stored source offsets' one codec, and where a topic's partitions end.

Source offsets are stored key by key, each key's value as its JSON, and a ``None`` value
deletes the key: rows of the embedded log's ``source_offsets`` table, records of the Kafka log's
offsets topic (a tombstone). :func:`encode_offset` and :func:`decode_offset` are those bytes'
one writer and reader, :func:`stored_after` what a store leaves, for both logs.

The *end offset* is the next offset a reader gets; a consumer group that has read everything
commits it (the Kafka consumer commits past trailing transaction markers). The offset *after the
last record* is what a task that applies records reaches; on Kafka a marker may follow it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from cdc.contracts.errors import LogError, LogFatal, LogUnavailable
from cdc.log.base import Log


def encode_offset(value: Any) -> bytes | None:
    """The stored bytes of one source-offsets value; ``None``: the key is deleted."""
    return None if value is None else orjson.dumps(value)


def decode_offset(stored: bytes | str) -> Any:
    """The value :func:`encode_offset` stored."""
    return orjson.loads(stored)


def stored_after(stored: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``stored`` once a transaction stored ``changes``, as a read gives them back (each value
    through its stored bytes, so a tuple comes back a list; ``None`` deletes its key)."""
    out = dict(stored)
    for key, value in changes.items():
        encoded = encode_offset(value)
        if encoded is None:
            out.pop(key, None)
        else:
            out[key] = decode_offset(encoded)
    return out


def end_offsets(log: Log, topic: str) -> dict[int, int]:
    """Per partition, the end offset; none for a topic that does not exist yet.

    Raises:
        LogUnavailable, LogFatal: the log's own errors, unchanged.
    """
    try:
        return log.end_offsets(topic)
    except (LogUnavailable, LogFatal):
        raise
    except LogError:
        return {}  # no such topic yet: nothing was ever appended to it


def last_offsets(log: Log, topic: str, span: int = 16) -> dict[int, int]:
    """Per partition, the offset after its last record (0 if it holds none).

    Not the end offset: on Kafka, transaction markers take offsets after the last record, and
    no consumer ever reads past them to the end.
    """
    out = {}
    for partition, end in log.end_offsets(topic).items():
        out[partition] = _after_last(log, topic, partition, end, span)
    return out


def _after_last(log: Log, topic: str, partition: int, end: int, span: int) -> int:
    start = end
    while start > 0:
        start = max(0, start - span)
        records = log.read(topic, partition, start, end - start)
        if records:
            return records[-1].offset + 1
        span *= 4
    return 0
