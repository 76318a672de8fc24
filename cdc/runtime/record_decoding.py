"""Stored records decoded once into the :class:`~cdc.contracts.sink.SinkRecord`\\ s sinks take.

Apart from :mod:`cdc.runtime.sink_task` because more than the sink task reads records this way:
the views task, ``cdc trace`` and the generator source decode keys and values alike, and none
of them needs a sink's run loop to do it.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any, cast

import orjson

from cdc.contracts.sink import SinkRecord
from cdc.log.base import StoredRecord
from cdc.log.eras import Era, Eras

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
    # Every sink's hot path: a record costs the two orjson.loads calls and one construction,
    # with :func:`payload_of` inlined (its result for every key and value, without its call).
    written = [None] * len(records) if eras is None else eras.of(records)
    loads, wrapped, new = orjson.loads, _WRAPPED_3RD, _new_record
    decoded: list[SinkRecord] = []
    append = decoded.append
    for r, era in zip(records, written, strict=True):
        key, value = r.key, r.value
        if key is not None:
            if key[2:3] == wrapped:  # maybe {"schema":...,"payload":...}: payload_of's way
                key = payload_of(key)
            else:
                key = loads(key)
                if key.__class__ is dict and "payload" in key:
                    key = unwrap(key)
        if value is not None:
            if value[2:3] == wrapped:
                value = payload_of(value)
            else:
                value = loads(value)
                if value.__class__ is dict and "payload" in value:
                    value = unwrap(value)
        if rows is not None:
            key, value = rows(r.topic, key, value)
        append(new(r.topic, r.partition, r.offset, key, value, era, r.pos))
    return decoded


class _Unfrozen:
    """A :class:`SinkRecord` under construction: the same slots, without the frozen dataclass's
    ``__init__`` (an ``object.__setattr__`` call a field, over twice the cost of plain stores).
    The instance becomes a :class:`SinkRecord` at the end of ``__init__`` (``__class__``
    assignment, allowed between classes of one layout): the caller gets a SinkRecord equal to
    the one ``SinkRecord(...)`` builds, frozen from then on."""

    __slots__ = SinkRecord.__slots__

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: Any,
        value: Any,
        era: Era | None,
        pos: bytes | None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.era = era
        self.pos = pos
        self.__class__ = SinkRecord  # type: ignore[assignment]


# A field added to SinkRecord and not to __init__ above would be left unset: fail at import.
_SET = list(inspect.signature(_Unfrozen.__init__).parameters)[1:]
if [f.name for f in dataclasses.fields(SinkRecord)] != _SET:
    raise TypeError("_Unfrozen.__init__ must set every field of SinkRecord, in its order")

#: ``SinkRecord(topic, partition, offset, key, value, era, pos)``, built the cheaper way.
_new_record = cast(
    Callable[[str, int, int, Any, Any, "Era | None", "bytes | None"], SinkRecord], _Unfrozen
)


_WRAPPED = b'{"schema":{'
_PAYLOAD = b',"payload":'
#: The third byte of a wrapped key or value: any other is parsed whole, with no call to check.
_WRAPPED_3RD = _WRAPPED[2:3]


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
