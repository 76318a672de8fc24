"""A record's latest image: the fields of its envelope's ``after`` that the image store keeps.

Every row of a snapshot or a stream on Kafka passes here (:mod:`cdc.log.kafka.images`), so the
envelope is not turned into Python objects: msgspec decodes it into a struct of the declared
fields only, skipping everything else unparsed (``source``, ``before``, the other columns), and
the kept fields' JSON text is copied as it is (``msgspec.Raw``). Parsing the whole value with
orjson, then encoding the kept fields again, cost about six times as much.

That fast path takes the envelopes the framework writes; anything else (not JSON, not an
object, an ``after`` that is not an object or null, an escaped ``op``) is decided by the
general path, which reads the value field by field with the same rules.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

import msgspec


class Change(Enum):
    """What one record does to its key's image."""

    PUT = "put"  # the record's projected fields replace the key's image
    DELETE = "delete"  # a delete or a tombstone: the key has no image
    SKIP = "skip"  # a truncate, or not an envelope: nothing changes


Projection = tuple[Change, bytes | None]
Projector = Callable[[bytes | None], Projection]

#: A field the envelope lacks (compared by identity: an explicit ``null`` is another object).
_ABSENT = msgspec.Raw(b"null")
_TRUNCATE = msgspec.Raw(b'"t"')
_SKIP: Projection = (Change.SKIP, None)
_DELETE: Projection = (Change.DELETE, None)


class _Envelope(msgspec.Struct):
    """What the general path reads of a change event."""

    after: msgspec.Raw = _ABSENT
    op: msgspec.Raw = _ABSENT
    payload: msgspec.Raw = _ABSENT  # schemas.enable: the JsonConverter's wrapping
    schema: msgspec.Raw = _ABSENT


_ENVELOPE = msgspec.json.Decoder(_Envelope)
_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ENCODER = msgspec.json.Encoder()


def project(value: bytes | None, fields: Sequence[str]) -> Projection:
    """What a record's value does to its key's image, and the image (``PUT`` only).

    The image is the JSON object of ``fields`` taken from the envelope's ``after`` (a field
    the row lacks is left out; a NULL stays a NULL, which is a value too).
    """
    return projector(tuple(fields))(value)


@functools.lru_cache(maxsize=256)
def projector(fields: tuple[str, ...]) -> Projector:
    """:func:`project` for one tuple of fields (a topic's), its decoder built once."""
    # Struct fields f0, f1, ... renamed to the columns: a column name need not be an identifier.
    names = [f"f{i}" for i in range(len(fields))]
    after_type = msgspec.defstruct(
        "After",
        [(name, msgspec.Raw | msgspec.UnsetType, msgspec.UNSET) for name in names],
        rename=dict(zip(names, fields, strict=True)),
        omit_defaults=True,  # a field the row lacks stays UNSET and is left out
    )
    envelope_type = msgspec.defstruct(
        "Envelope",
        [
            ("after", after_type | None, None),
            ("op", msgspec.Raw, _ABSENT),
            ("payload", msgspec.Raw, _ABSENT),
            ("schema", msgspec.Raw, _ABSENT),
        ],
    )
    decoder: Any = msgspec.json.Decoder(envelope_type)
    encode = _ENCODER.encode

    def fast(value: bytes | None) -> Projection:
        if value is None:
            return _DELETE
        try:
            doc = decoder.decode(value)
            if doc.payload is not _ABSENT and doc.schema is not _ABSENT:
                doc = decoder.decode(doc.payload)
        except msgspec.DecodeError:
            return _general(value, fields)
        op = doc.op
        if op == _TRUNCATE:
            return _SKIP
        if op is not _ABSENT and len(op) > 3:  # not an op as ours are ("c"): "t" escaped?
            return _general(value, fields)
        after = doc.after
        return _DELETE if after is None else (Change.PUT, encode(after))

    return fast


def _general(value: bytes, fields: Sequence[str]) -> Projection:
    """The projection of any value, read field by field (the fast path's fallback)."""
    try:
        doc = _ENVELOPE.decode(value)
        if doc.payload is not _ABSENT and doc.schema is not _ABSENT:
            doc = _ENVELOPE.decode(doc.payload)
    except msgspec.DecodeError:  # not JSON, or not an object
        return _SKIP
    if doc.op is not _ABSENT and msgspec.json.decode(doc.op) == "t":
        return _SKIP
    try:
        after = _OBJECT.decode(doc.after)
    except msgspec.ValidationError:  # absent, null, or not an object
        return _DELETE
    return Change.PUT, _ENCODER.encode({name: after[name] for name in fields if name in after})
