"""Stored records decoded once into the :class:`~cdc.contracts.sink.SinkRecord`\\ s sinks take.

Apart from :mod:`cdc.runtime.sink_task` because more than the sink task reads records this way:
the views task, ``cdc trace`` and the generator source decode keys and values alike, and none
of them needs a sink's run loop to do it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from cdc.contracts.sink import SinkRecord
from cdc.log.base import StoredRecord
from cdc.log.eras import Eras

#: A source's own read-side decoding (its plugin's optional ``record_rows``): a decoded
#: record's ``(key, value)`` turned into the rows sinks store, e.g. MongoDB's Extended JSON
#: texts into objects (``connectors/mongodb/extended_json.py``).
RecordRows = Callable[[str, Any, Any], tuple[Any, Any]]


def decode_records(
    records: Sequence[StoredRecord], eras: Eras | None = None, rows: RecordRows | None = None
) -> list[SinkRecord]:
    """Parse keys and values once, for every sink.

    Under ``schemas.enable: true`` a key and a value are the JsonConverter's ``{"schema",
    "payload"}``: sinks are given the payload (the schema describes what the pipeline's
    envelope options and the published :class:`~cdc.contracts.schema.TableSchema` already say).
    ``rows``, the source's :data:`RecordRows` (``None``: its records are rows already), then
    makes each record rows. ``eras``, the log's stored encodings, gives each record the one it
    was written under (:attr:`SinkRecord.era`; ``None``: the sink decodes with the pipeline's
    options).
    """
    parse = payload_of
    written = [None] * len(records) if eras is None else eras.of(records)
    decoded = []
    for r, era in zip(records, written, strict=True):
        key = None if r.key is None else parse(r.key)
        value = None if r.value is None else parse(r.value)
        if rows is not None:
            key, value = rows(r.topic, key, value)
        decoded.append(SinkRecord(r.topic, r.partition, r.offset, key, value, era, r.pos))
    return decoded


_WRAPPED = b'{"schema":{'
_PAYLOAD = b',"payload":'


def payload_of(data: bytes) -> Any:
    """A key or value parsed, and unwrapped from ``{"schema", "payload"}`` (:func:`unwrap`).

    A wrapped value's schema is a few KB against a few hundred bytes of payload, so only the
    payload is parsed: the text after the first ``,"payload":`` up to the closing brace. That
    text parses only when the document is exactly ``{"schema":<S>,"payload":<P>}`` (a Connect
    schema has no ``payload`` key; anything after ``<P>`` makes it invalid), and anything else
    is parsed whole, so the result is always :func:`unwrap`'s.
    """
    if data.startswith(_WRAPPED) and data.endswith(b"}"):
        at = data.find(_PAYLOAD)
        if at > 0:
            try:
                return orjson.loads(memoryview(data)[at + len(_PAYLOAD) : -1])
            except orjson.JSONDecodeError:
                pass
    parsed = orjson.loads(data)
    # Only a dict holding "payload" can be a wrapper: the common case skips unwrap's call.
    return unwrap(parsed) if parsed.__class__ is dict and "payload" in parsed else parsed


def unwrap(data: Any) -> Any:
    """The payload of a ``{"schema", "payload"}`` document; anything else as it is."""
    if data.__class__ is dict and len(data) == 2 and "payload" in data and "schema" in data:
        return data["payload"]
    return data
