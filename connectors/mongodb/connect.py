"""The Kafka Connect schemas of MongoDB records (``schemas.enable: true``), as Debezium 3.6's
MongoDB connector writes them (``tests/debezium_mongo/expected/schemas.jsonl``).

The value schema is the same for every collection but its names: ``<topic>.Envelope`` (no
version) holding ``before``/``after`` as ``io.debezium.data.Json`` strings,
``updateDescription`` (``…changestream.updatedescription`` with its ``…truncatedarray``
items), the ``io.debezium.connector.mongo.Source`` struct (the common fields, then
``collection``, ``ord`` (int32), ``lsid``, ``txnNumber``, ``wallTime``, and our ``pos``, an
optional array as in the PostgreSQL source's schema), then ``op`` and ``ts_ms`` (both
optional) and the ``transaction`` block last. It is built once per collection.

The key is DESIGN.md's ``{"_id": <relaxed Extended JSON>}``, not Debezium's ``{"id": "<text>"}``
(a documented deviation), so its schema ``<topic>.Key`` describes the field ``_id`` as the
JSON it holds: ``int64`` for an integer, ``string`` for a string, a struct for ``{"$oid": …}``
or a compound ``_id``. A Connect schema has no "any" type, so a collection whose ``_id``\\ s
differ in kind gets one key schema per kind: cached per collection and kind, never per record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from cdc.contracts.events import ChangeEvent, topic_name
from cdc.envelope.connect_schema import TRANSACTION, TableSchemas, infer, named, source_struct
from cdc.envelope.connect_schema import field_schema as _f

_JSON: Final = {"type": "string", "optional": True, "name": "io.debezium.data.Json", "version": 1}
_CHANGESTREAM: Final = "io.debezium.connector.mongodb.changestream"


UPDATE_DESCRIPTION: Final = named(
    {
        "type": "struct",
        "fields": [
            _f("array", "removedFields", True, items={"type": "string", "optional": False}),
            named(_JSON, "updatedFields"),
            _f(
                "array",
                "truncatedArrays",
                True,
                items={
                    "type": "struct",
                    "fields": [_f("string", "field", False), _f("int32", "size", False)],
                    "optional": False,
                    "name": f"{_CHANGESTREAM}.truncatedarray",
                    "version": 1,
                },
            ),
        ],
        "optional": True,
        "name": f"{_CHANGESTREAM}.updatedescription",
        "version": 1,
    },
    "updateDescription",
)

#: The MongoDB connector's source fields after ``ts_ns`` (``connectors.mongodb.records``).
MONGO_SOURCE: Final = (
    _f("string", "collection", False),
    _f("int32", "ord", False),
    _f("string", "lsid", True),
    _f("int64", "txnNumber", True),
    _f("int64", "wallTime", True),
)

SOURCE: Final = source_struct("mongo", MONGO_SOURCE)
"""``io.debezium.connector.mongo.Source``, with our ``pos`` last."""


def value_schema(topic: str) -> dict[str, Any]:
    """The envelope schema of ``topic``'s change events."""
    return {
        "type": "struct",
        "fields": [
            named(_JSON, "before"),
            named(_JSON, "after"),
            UPDATE_DESCRIPTION,
            SOURCE,
            _f("string", "op", True),
            _f("int64", "ts_ms", True),
            TRANSACTION,
        ],
        "optional": False,
        "name": f"{topic}.Envelope",
    }


def key_schema(topic: str, doc_id: Any) -> dict[str, Any]:
    """The key schema of a key whose ``_id`` is ``doc_id`` (relaxed Extended JSON)."""
    field = named({**infer(doc_id), "optional": doc_id is None}, "_id")
    return {"type": "struct", "fields": [field], "optional": False, "name": f"{topic}.Key"}


def _kind(value: Any) -> Any:
    """What the key schema of ``value`` depends on: its JSON shape."""
    if value.__class__ is dict:
        return tuple([(k, _kind(v)) for k, v in value.items()])
    if value.__class__ is list:
        return ("[]", _kind(value[0]) if value else None)
    return value.__class__


class Schemas:
    """The Connect schemas of one pipeline's MongoDB topics, built once and kept."""

    _LIMIT: Final = 10_000  # _id kinds that never repeat: bound the cache

    def __init__(self, pipeline: str) -> None:
        self._pipeline = pipeline
        self._values: dict[tuple[str, str], bytes] = {}
        self._tables: dict[tuple[str, str, Any], TableSchemas] = {}

    def of(self, db: str, collection: str, key: Mapping[str, Any]) -> TableSchemas:
        """The schemas of a record of ``db.collection`` keyed ``key`` (``{}``: a truncate)."""
        doc_id = key.get("_id")
        ident = (db, collection, _kind(doc_id) if key else ())
        found = self._tables.get(ident)
        if found is None:
            found = self._tables[ident] = self._build(db, collection, key)
        return found

    def attach(self, events: Iterable[ChangeEvent]) -> None:
        """Give each event its record's schemas (:attr:`ChangeEvent.connect`)."""
        of = self.of
        for event in events:
            src = event.source
            event.connect = of(src.schema, src.table, event.key)

    def _build(self, db: str, collection: str, key: Mapping[str, Any]) -> TableSchemas:
        if len(self._tables) > self._LIMIT:
            self._tables.clear()
        topic = topic_name(self._pipeline, db, collection)
        value = self._values.get((db, collection))
        if value is None:
            value = self._values[(db, collection)] = orjson.dumps(value_schema(topic))
        keys = orjson.dumps(key_schema(topic, key["_id"])) if key else None
        return TableSchemas(value, keys)
