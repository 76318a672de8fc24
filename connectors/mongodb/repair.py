"""``cdc verify --repair`` on MongoDB: re-read given keys of a collection, and delete those it
no longer has, as a blocking snapshot request of its own.

A repair request is a snapshot request (a document in the signal collection) that carries the
``_id`` values to read, as canonical Extended JSON texts (``ids``, one list per key: the values
it can stand for, below): the exact BSON values, and strings, which any server stores as they
are (a ``$``-named field would not be everywhere).
The source carries it out as any ``cdc snapshot`` request (:meth:`MongoSource._requested`):
it pauses the streams at the request, reads ``{_id: {$in: ids}}`` of the collection, hands on
each found document as a snapshot read and, for each key none of whose ``_id`` values it found,
a delete of each of them (the envelope adds its tombstone), all at the request's own position.

Why that is correct while the collection keeps changing: the request's position is newer than
every change the streams delivered before it and older than every change after it, and the
streams resume from the request once the read is done. A document changed or deleted after
the request may be read in its newer state (or found missing), but that change streams again
after the repair's records, with a newer position, and wins in every sink; a document inserted
after the request was not deleted by mistake either: its insert follows the repair's delete.
So each key ends in its current state, as after any change. A found document that the row
filter leaves out is deleted too (the collection is swept, :func:`snapshot.sweep`), as
PostgreSQL's repair deletes a key its row filter leaves out.

``cdc verify`` names each key by its canonical JSON (:mod:`cdc.records.normalize`): a MongoDB
field has no column type, so its value keeps its JSON type (relaxed Extended JSON: an ObjectId
is ``{"$oid": ...}``, and the number ``5`` and the string ``"5"`` are two keys, as they are two
documents and two rows in every sink). :func:`candidates` turns a key back into the ``_id`` it
stands for. A request still carries a list of values per key (a request stored by an earlier
version may hold several, from when verify wrote every scalar as its text): the values of a key
are deleted only when none of them is found passing the row filter.

A document ``_id`` comes back from verify with its fields sorted (verify's keys are JSON with
sorted fields), and MongoDB compares documents in their own field order: it is read field by
field (:func:`query`) and told apart from others by its sorted JSON (:func:`identity`). One the
collection no longer has is deleted under the sorted key: a sink that compares keys as JSON
values (PostgreSQL's ``jsonb``) deletes it; one that compares their text may keep the row, and
verify still names it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson
from bson import json_util
from bson.codec_options import DatetimeConversion
from bson.errors import BSONError
from bson.json_util import JSONOptions

from connectors.mongodb import records

KEY: Final = "_id"
#: A date ``_id`` outside Python's years 1-9999 exists (the source decodes dates with
#: ``DATETIME_AUTO``): kept as a ``DatetimeMS`` rather than refused.
_RELAXED: Final = JSONOptions(
    json_mode=json_util.JSONMode.RELAXED,
    tz_aware=True,
    tzinfo=dt.UTC,
    datetime_conversion=DatetimeConversion.DATETIME_AUTO,
)
_CANONICAL: Final = json_util.CANONICAL_JSON_OPTIONS.with_options(
    datetime_conversion=DatetimeConversion.DATETIME_AUTO
)


class BadKey(ValueError):
    """A key that names no ``_id`` value."""


def candidates(key: Mapping[str, Any]) -> list[Any]:
    """The ``_id`` values (as pymongo takes them) whose key ``cdc verify`` writes as ``key``.

    Raises:
        BadKey: ``key`` is not ``{"_id": value}``, or its value cannot be an ``_id``.
    """
    if set(key) != {KEY}:
        raise BadKey(f'{orjson.dumps(key).decode()} is not a MongoDB key ({{"_id": ...}})')
    value = key[KEY]
    if isinstance(value, list):
        raise BadKey(f"{orjson.dumps(key).decode()}: an array is never an _id")
    if isinstance(value, dict):
        try:
            return [json_util.loads(orjson.dumps(value), json_options=_RELAXED)]
        except (ValueError, TypeError, BSONError) as exc:
            raise BadKey(f"{orjson.dumps(key).decode()}: {exc}") from None
    return [value]  # a raw JSON value (a string, None, a number, a boolean): itself


def request_ids(keys: Iterable[Mapping[str, Any]]) -> list[list[str]]:
    """Per key, once each, the ``_id`` values it can stand for as canonical Extended JSON
    texts (what a repair request and its stored state hold).

    Raises:
        BadKey: a key names no ``_id`` value.
    """
    groups: dict[tuple[str, ...], None] = {}
    for key in keys:
        groups[tuple(encode(value) for value in candidates(key))] = None
    return [list(group) for group in groups]


def encode(value: Any) -> str:
    """An ``_id`` as canonical Extended JSON text (its exact BSON type kept)."""
    return json_util.dumps({"v": value}, json_options=json_util.CANONICAL_JSON_OPTIONS)


def decode(text: str) -> Any:
    """The inverse of :func:`encode`."""
    return json_util.loads(text, json_options=_CANONICAL)["v"]


def query(ids: Iterable[Iterable[str]]) -> dict[str, Any]:
    """The ``find`` filter of a repair's stored ``ids``.

    A document ``_id`` is matched field by field (``_id.a``, ``_id.b``...), not as a value:
    MongoDB compares embedded documents in their field order, and verify's key has its fields
    sorted (the document's own order is not in it). A match with more fields is read too,
    harmlessly (a read of its current state).
    """
    values = [decode(text) for group in ids for text in group]
    plain = [v for v in values if not _is_document(v)]
    fields = [_paths(v, KEY) for v in values if _is_document(v)]
    if not fields:
        return {KEY: {"$in": plain}}
    return {"$or": [{KEY: {"$in": plain}}, *fields]}


def _is_document(value: Any) -> bool:
    return isinstance(value, Mapping) and len(value) > 0


def _paths(document: Mapping[str, Any], at: str) -> dict[str, Any]:
    """Equalities on ``document``'s leaf fields under ``at`` (nested documents flattened)."""
    out: dict[str, Any] = {}
    for name, value in document.items():
        if _is_document(value):
            out.update(_paths(value, f"{at}.{name}"))
        else:
            out[f"{at}.{name}"] = value
    return out


def well_formed(ids: Any) -> bool:
    """``ids`` is a list of lists of texts, as :func:`request_ids` makes it."""
    return isinstance(ids, list) and all(
        isinstance(group, list) and all(isinstance(text, str) for text in group) for group in ids
    )


def identity(doc_id: Any) -> bytes:
    """What tells two ``_id`` values apart in the sinks: their record key's JSON, its
    document fields sorted (a key read back from verify has lost their order)."""
    return orjson.dumps(records.key(doc_id), option=orjson.OPT_SORT_KEYS)


def groups_by_identity(ids: Iterable[Iterable[str]]) -> dict[bytes, int]:
    """Each stored ``_id`` value's identity, to the number of the key (group) it stands for."""
    return {identity(decode(text)): number for number, group in enumerate(ids) for text in group}
