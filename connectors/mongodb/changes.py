"""Change-stream events to :class:`ChangeEvent`, as pure functions over the event documents.

Operation types:

* ``insert`` -> ``c``; ``update`` and ``replace`` -> ``u``; ``delete`` -> ``d``. ``after`` is
  ``fullDocument`` (``updateLookup``: the document when the change was read; ``required``: the
  exact post-image). ``before`` is ``fullDocumentBeforeChange`` when pre-images are on, else
  null (a delete's too), and an ``update`` carries ``updateDescription``, as Debezium's
  MongoDB connector writes them (:mod:`connectors.mongodb.records`).
* An ``update`` whose looked-up document is gone (deleted since) has no ``after``: it is left
  out and logged, because the ``delete`` that removed the document follows in the stream.
* ``drop`` of a captured collection, and ``rename`` away from one, become a truncate (``t``) of
  its topic, so sinks empty the table as the collection is now empty. Debezium emits nothing
  for these and leaves sinks stale; an explicit truncate keeps ``cdc verify`` honest.
* ``rename`` *into* a captured collection brings documents the stream never saw inserted: it
  is logged with the advice to re-snapshot the collection.
* ``dropDatabase`` is logged (the server sends a ``drop`` for each collection before it).
* ``invalidate`` ends the stream; the source resumes with ``startAfter`` its token.

A collection's filters (:mod:`connectors.mongodb.filters`) apply before anything is encoded:
the row filter decides the operation (an update may become a create or a delete), the images
and ``updateDescription`` lose the fields left out and have the masked ones masked, and a hashed
``_id`` makes the key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from cdc.contracts.events import ChangeEvent, Op, Row, SourceInfo
from connectors.mongodb import records
from connectors.mongodb.filters import CollectionFilter
from connectors.mongodb.positions import position

CONNECTOR = records.CONNECTOR
_DATA_OPS = {"insert": Op.CREATE, "update": Op.UPDATE, "replace": Op.UPDATE, "delete": Op.DELETE}
Collection = tuple[str, str]
Filters = Mapping[Collection, CollectionFilter]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one change-stream event means for the source.

    Attributes:
        events: change events to publish (possibly none).
        control: ``invalidate`` when the stream ended; else ``None``.
        notice: ``(log event name, fields)`` to log, for the operations worth a line.
        documents: the filtered documents of ``events`` (their field names make the schema).
    """

    events: list[ChangeEvent] = field(default_factory=list)
    control: str | None = None
    notice: tuple[str, dict[str, Any]] | None = None
    documents: Sequence[Mapping[str, Any]] = ()


class BadChange(ValueError):
    """A data change the converter cannot make sense of (no key, no document...)."""


def namespace(change: Mapping[str, Any], field_name: str = "ns") -> Collection | None:
    ns = change.get(field_name)
    if not isinstance(ns, Mapping) or "db" not in ns:
        return None
    return str(ns["db"]), str(ns.get("coll", ""))


def source_info(
    change: Mapping[str, Any], coll: Collection, sequence: int, snapshot: str = "false"
) -> SourceInfo:
    """The ``source`` block: position from ``clusterTime``, transaction fields when present.

    ``ts_ms`` is ``wallTime`` (MongoDB 6.0+), else the cluster time's second, as Debezium has it.
    """
    cluster_time = change["clusterTime"]
    txn = change.get("txnNumber")
    wall = change.get("wallTime")
    wall_ms = int(wall.timestamp() * 1000) if wall is not None else None
    ts_ms = wall_ms if wall_ms is not None else cluster_time.time * 1000
    lsid = change.get("lsid")
    extra = records.source_extra(
        coll[1],
        ts_ms,
        cluster_time.inc,
        lsid if isinstance(lsid, Mapping) else None,
        None if txn is None else int(txn),
        wall_ms,
    )
    return SourceInfo(
        connector=CONNECTOR,
        db=coll[0],
        schema=coll[0],
        table=coll[1],
        ts_ms=ts_ms,
        position=position(cluster_time),
        sequence=sequence,
        snapshot=snapshot,
        tx_id=None if txn is None else int(txn),
        extra=extra,
        table_fields=False,
    )


def convert(
    change: Mapping[str, Any],
    captured: set[Collection],
    sequence: int,
    filters: Filters | None = None,
) -> Outcome:
    """The outcome of one change-stream event.

    Args:
        change: the event as pymongo decodes it.
        captured: the configured collections.
        sequence: the event's index among the stream's events of the same ``clusterTime``.
        filters: the filters of the collections that have any.

    Raises:
        BadChange: a data change without the fields every such event has.
    """
    kind = str(change.get("operationType"))
    coll = namespace(change)
    if kind in _DATA_OPS:
        if coll is None or coll not in captured:
            return Outcome()
        table_filter = filters.get(coll) if filters else None
        if table_filter is not None:
            return _filtered_change(change, kind, coll, sequence, table_filter)
        return _data_change(change, kind, coll, sequence)
    if kind == "invalidate":
        return Outcome(control="invalidate", notice=("stream.invalidated", {}))
    if kind == "drop":
        return _dropped(change, coll, captured, sequence)
    if kind == "rename":
        return _renamed(change, coll, captured, sequence)
    if kind == "dropDatabase":
        db = coll[0] if coll else None
        return Outcome(notice=("database.dropped", {"db": db}))
    return Outcome(notice=("stream.event_ignored", {"operation": kind}))


def _data_change(change: Mapping[str, Any], kind: str, coll: Collection, sequence: int) -> Outcome:
    try:
        key = records.key(change["documentKey"]["_id"])
        info = source_info(change, coll, sequence)
    except (KeyError, TypeError, AttributeError) as exc:
        raise BadChange(f"{kind} event without {exc}") from exc
    pre = change.get("fullDocumentBeforeChange")
    # A Mapping where the event has a Row: read like one, written as Debezium's text.
    before = cast(Row, records.row(pre)) if isinstance(pre, Mapping) else None
    full = change.get("fullDocument")
    after = records.row(full) if isinstance(full, Mapping) else None
    op = _DATA_OPS[kind]
    fields = {"updateDescription": records.update_description(change)}
    if op is Op.DELETE:
        return Outcome([ChangeEvent(op, key, before, None, info, fields=fields)])
    if after is None:
        return _gone(kind, coll, key)
    docs = [d for d in (full, pre) if isinstance(d, Mapping)]
    return Outcome([ChangeEvent(op, key, before, after, info, fields=fields)], documents=docs)


def _gone(kind: str, coll: Collection, key: Row) -> Outcome:
    """An update whose looked-up document is gone: left out (its delete follows)."""
    if kind == "update":
        notice = ("update.skipped_document_gone", {"table": f"{coll[0]}.{coll[1]}", "key": key})
        return Outcome(notice=notice)
    raise BadChange(f"{kind} event without fullDocument")


def _filtered_change(
    change: Mapping[str, Any],
    kind: str,
    coll: Collection,
    sequence: int,
    table_filter: CollectionFilter,
) -> Outcome:
    """A data change under its collection's filters (see the module docstring)."""
    try:
        key = table_filter.key(change["documentKey"]["_id"])
        info = source_info(change, coll, sequence)
    except (KeyError, TypeError, AttributeError) as exc:
        raise BadChange(f"{kind} event without {exc}") from exc
    pre, full = _image(change, "fullDocumentBeforeChange"), _image(change, "fullDocument")
    op = table_filter.op(kind, full, pre)
    if op is None:
        return Outcome()
    if op is not Op.DELETE and full is None:
        return _gone(kind, coll, key)
    old = table_filter.document(pre) if pre is not None and op is not Op.CREATE else None
    new = table_filter.document(full) if full is not None and op is not Op.DELETE else None
    fields: dict[str, Any] = {"updateDescription": None}
    if kind == "update" and op is Op.UPDATE:
        description = change.get("updateDescription")
        if isinstance(description, Mapping):
            description = table_filter.update_description(description)
        fields["updateDescription"] = records.update_description(
            {"operationType": kind, "updateDescription": description}
        )
    # A Mapping where the event has a Row: read like one, written as Debezium's text.
    before = cast(Row, records.row(old)) if old is not None else None
    after = records.row(new) if new is not None else None
    docs = [d for d in (new, old) if d is not None]
    return Outcome([ChangeEvent(op, key, before, after, info, fields=fields)], documents=docs)


def _image(change: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    doc = change.get(name)
    return doc if isinstance(doc, Mapping) else None


def _truncate(change: Mapping[str, Any], coll: Collection, sequence: int) -> ChangeEvent:
    info = source_info(change, coll, sequence)
    return ChangeEvent(Op.TRUNCATE, {}, None, None, info, fields={"updateDescription": None})


def _dropped(
    change: Mapping[str, Any], coll: Collection | None, captured: set[Collection], sequence: int
) -> Outcome:
    if coll is None or coll not in captured:
        return Outcome()
    notice = ("collection.dropped", {"table": f"{coll[0]}.{coll[1]}", "emitted": "truncate"})
    return Outcome([_truncate(change, coll, sequence)], notice=notice)


def _renamed(
    change: Mapping[str, Any], coll: Collection | None, captured: set[Collection], sequence: int
) -> Outcome:
    target = namespace(change, "to")
    fields: dict[str, Any] = {
        "from": None if coll is None else f"{coll[0]}.{coll[1]}",
        "to": None if target is None else f"{target[0]}.{target[1]}",
    }
    events = []
    if coll is not None and coll in captured:
        events.append(_truncate(change, coll, sequence))
        fields["emitted"] = "truncate"
    if target is not None and target in captured:
        fields["advice"] = (
            f"documents renamed into {fields['to']} were never streamed as inserts; re-snapshot "
            f"it with `cdc snapshot FILE --table {fields['to']}`"
        )
    return Outcome(events, notice=("collection.renamed", fields))
