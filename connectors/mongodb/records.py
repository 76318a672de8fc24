"""The parts of a record that Debezium's MongoDB connector shapes its own way.

* Key ``{"_id": <relaxed Extended JSON of _id>}`` (:func:`key`; Debezium's is ``{"id": "<that
  JSON as text>"}``, a documented deviation).
* ``after`` and ``before``: a JSON *string* holding the document in the driver's STRICT text
  (:mod:`connectors.mongodb.extjson`); ``before`` only with pre-images, so a delete's is null.
* ``updateDescription`` after ``after``: ``{removedFields, updatedFields, truncatedArrays}``
  for an ``update`` (null otherwise); empty lists are null, ``updatedFields`` is a JSON text.
* ``source``: no ``schema``/``table``/``txId``; after ``db`` come ``sequence`` (null),
  ``ts_us``, ``ts_ns``, ``collection``, ``ord`` (the cluster time's increment), ``lsid`` and
  ``txnNumber`` (in a transaction), and ``wallTime`` (MongoDB 6.0+).
* Under ``schemas.enable``, the Connect schemas of all of this: :mod:`connectors.mongodb.connect`.

In-process, key and rows stay readable mappings of relaxed Extended JSON values (what the
change event always held, :func:`connectors.mongodb.convert.document`): they are
:class:`cdc.envelope.encode.EncodedRow` objects, whose JSON (what the envelope writes) is Debezium's
form and whose values are worked out only when something reads them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Final

import orjson
from bson import json_util
from bson.json_util import JSONOptions

from cdc.contracts.events import Row
from cdc.envelope.encode import EncodedRow
from cdc.envelope.json_rows import RowEdit, register_row_editor
from connectors.mongodb.convert import document, to_json
from connectors.mongodb.extjson import STRICT, document_text, updated_fields_text

CONNECTOR: Final = "mongodb"
_RELAXED: Final = JSONOptions(json_mode=json_util.JSONMode.RELAXED, tz_aware=True, tzinfo=dt.UTC)


def key(doc_id: Any) -> Row:
    """The record key of a document whose ``_id`` is ``doc_id`` (as pymongo decodes it):
    ``{"_id": <relaxed Extended JSON>}``, the key DESIGN.md's contract gives MongoDB topics
    (Debezium's is ``{"id": "<that JSON as text>"}``: a documented deviation)."""
    return {"_id": to_json(doc_id)}


def row(doc: Mapping[str, Any]) -> EncodedRow:
    """``after``/``before`` of a document: the STRICT text as a JSON string."""
    return EncodedRow(orjson.dumps(document_text(doc)), doc, document)


def edit(current: Mapping[str, Any], change: RowEdit) -> Mapping[str, Any]:
    """``current`` with ``change`` applied to its document, in the form it came in (the row editor
    of :func:`cdc.envelope.json_rows.edit_row`, which transforms use).

    A row this source wrote (:func:`row`) is edited as its BSON document and written again as
    Debezium's STRICT text, so a renamed or added field keeps every value's exact type. A
    plain row (relaxed Extended JSON values, what ``cdc verify`` reads) is turned back into
    BSON values, edited, and returned as relaxed Extended JSON values again.
    """
    if isinstance(current, EncodedRow) and isinstance(current.raw, Mapping):
        return row(change(dict(current.raw)))
    values = current.values_dict() if isinstance(current, EncodedRow) else current
    doc = json_util.loads(orjson.dumps(dict(values)), json_options=_RELAXED)
    return document(change(dict(doc)))


register_row_editor(CONNECTOR, edit)


def update_description(change: Mapping[str, Any]) -> dict[str, Any] | None:
    """``updateDescription`` of an ``update`` event (``None`` for every other one)."""
    description = change.get("updateDescription")
    if change.get("operationType") != "update" or not isinstance(description, Mapping):
        return None
    removed = list(description.get("removedFields") or []) or None
    updated = description.get("updatedFields")
    truncated = [
        {"field": str(t["field"]), "size": int(t["newSize"])}
        for t in description.get("truncatedArrays") or []
    ]
    return {
        "removedFields": removed,
        "updatedFields": None if updated is None else updated_fields_text(updated),
        "truncatedArrays": truncated or None,
    }


def source_extra(
    collection: str,
    ts_ms: int,
    order: int,
    lsid: Mapping[str, Any] | None = None,
    txn_number: int | None = None,
    wall_ms: int | None = None,
) -> dict[str, Any]:
    """The ``source`` fields after ``db``, in Debezium's order."""
    in_txn = lsid is not None and txn_number is not None
    return {
        "sequence": None,
        "ts_us": ts_ms * 1000,
        "ts_ns": ts_ms * 1_000_000,
        "collection": collection,
        "ord": order,
        "lsid": STRICT.document(lsid) if in_txn and lsid is not None else None,
        "txnNumber": txn_number if in_txn else None,
        "wallTime": wall_ms,
    }
