"""A batch's changes as Bulk API actions: one per key, the newest by source position.

Changes are taken in log order. A truncate cuts the batch: what came before it is sent first,
then the table is truncated, and the changes after it follow. Within a part, each document
keeps its newest change by the full position (only the newest can take effect at the server).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from cdc.contracts.errors import RecordError
from sinks.keyed import Change, Kind, Pos, Table, any_type_text, counted_position
from sinks.opensearch.versions import version

#: OpenSearch's longest ``_id``, in bytes.
MAX_ID = 512
#: OpenSearch's metadata fields, which a document may not hold (MongoDB's ``_id`` above all).
#: A column of such a name is stored as ``_cdc`` + its name, and read back under its own.
RESERVED = frozenset(
    {
        "_id",
        "_index",
        "_source",
        "_routing",
        "_version",
        "_seq_no",
        "_primary_term",
        "_field_names",
        "_ignored",
        "_doc_count",
        "_meta",
        "_type",
        "_size",
        "_data_stream_timestamp",
    }
)
STORED_PREFIX = "_cdc"


def stored_name(column: str) -> str:
    """The field a column is stored under."""
    return STORED_PREFIX + column if column in RESERVED else column


def stored_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its metadata-named columns renamed (the common row is returned as is)."""
    if RESERVED.isdisjoint(row):
        return row
    return {stored_name(k): v for k, v in row.items()}


def source_row(doc: dict[str, Any]) -> dict[str, Any]:
    """The row a stored document holds (the inverse of :func:`stored_row`)."""
    renamed = [k for k in doc if k.startswith(STORED_PREFIX + "_")]
    if not renamed:
        return doc
    return {
        k.removeprefix(STORED_PREFIX) if k.removeprefix(STORED_PREFIX) in RESERVED else k: v
        for k, v in doc.items()
    }


def doc_id(key: Mapping[str, Any], any_type: bool = False) -> str:
    """The document id of a record key: a one-column key's value as text (a string as it is;
    under ``any_type``, a MongoDB ``_id``, one that reads as JSON as a JSON string, so the
    string "5" and the number 5 are two documents: :func:`sinks.keyed.any_type_text`), a
    composite key the JSON array of its values in key-column order; a longer id than OpenSearch
    takes is its SHA-256."""
    values = list(key.values())
    if len(values) == 1:
        value = values[0]
        if isinstance(value, str):
            text = any_type_text(value) if any_type else value
        else:
            text = orjson.dumps(value).decode()
    else:
        text = orjson.dumps(values).decode()
    if len(text.encode()) > MAX_ID:
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return text


@dataclass
class Part:
    """The newest change of each document of a run of changes, and a truncate ending it."""

    latest: dict[tuple[Table, str], Change] = field(default_factory=dict)
    truncate: Change | None = None


def _typed(table: Table) -> bool:
    return False


def parts(changes: Sequence[Change], any_type: Callable[[Table], bool] = _typed) -> list[Part]:
    """``changes`` cut at each truncate, keeping each document's newest change per part;
    ``any_type`` says which tables have an any-type key (:func:`doc_id`).

    Raises:
        RecordError: a change of a table without a key (it has no document to address).
    """
    out = [Part()]
    for change in changes:
        kind = change.kind
        if kind is Kind.TOMBSTONE:
            found = as_delete(change)
            if found is None:
                continue  # a tombstone without a position: its delete did the work
            change = found
        elif kind is Kind.TRUNCATE:
            out[-1].truncate = change
            out.append(Part())
            continue
        if not change.key:
            raise RecordError("a change without a key cannot be a document", change.record)
        slot = (change.table, doc_id(change.key, any_type(change.table)))
        held = out[-1].latest.get(slot)
        if held is None or _newer(change, held):
            out[-1].latest[slot] = change
    return out


def as_delete(change: Change) -> Change | None:
    """A tombstone as the delete it follows: compaction may have removed that delete while the
    sink was behind, and the tombstone carries its position. ``None``: one written before
    tombstones carried a position.

    Raises:
        RecordError: a position that is not two counts.
    """
    record = change.record
    if record.pos is None:
        return None
    return change._replace(kind=Kind.DELETE, pos=counted_position(record))


def _newer(change: Change, held: Change) -> bool:
    assert change.pos is not None and held.pos is not None
    if change.pos != held.pos:
        return change.pos > held.pos
    # At one position a tombstone is its delete's twin: the delete, which names its source's
    # connector (the version depends on it), is kept.
    return change.offset > held.offset and change.record.value is not None


def connector(change: Change, default: object) -> object:
    """The change's source connector; ``default`` (the table's) for a tombstone, which has no
    ``source`` block."""
    value = change.record.value
    source = value.get("source") if value is not None else None
    return source.get("connector") if isinstance(source, dict) else default


def action(index: str, doc: str, change: Change, source: object = None) -> tuple[bytes, Change]:
    """The NDJSON lines of one change (``index`` for an upsert, ``delete`` for a delete or a
    tombstone); ``source``: the connector of the table's published schema.

    A delete is sent by its key alone: the record's ``before`` (key plus placeholders under
    REPLICA IDENTITY DEFAULT) is never looked at. A tombstone goes under its delete's version:
    a 409 when the delete did it already, which counts as done.
    """
    position, sequence = change.pos or (0, 0)
    number, kind = version(position, sequence, connector(change, source))
    meta = {"_index": index, "_id": doc, "version": number, "version_type": kind}
    if change.kind is Kind.DELETE:
        return orjson.dumps({"delete": meta}) + b"\n", change
    row = stored_row(change.row or {})
    return orjson.dumps({"index": meta}) + b"\n" + orjson.dumps(row) + b"\n", change


def older_than(pos: Pos | None, watermark: Pos | None) -> bool:
    """A change at ``pos`` is no newer than a truncate at ``watermark``."""
    return watermark is not None and pos is not None and pos <= watermark
