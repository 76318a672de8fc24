"""A snapshot batch's documents as change events, under their collection's filters, and the
entry a finished snapshot leaves (pure functions over the stored state)."""

from __future__ import annotations

import time
from typing import Any

from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.support.clock import now_ms
from connectors.mongodb import records, repair
from connectors.mongodb.filters import CollectionFilter
from connectors.mongodb.snapshot import Batch
from snapshots.state import FINISHED_KEPT

Doc = dict[str, Any]


def row_info(db: str, coll: str, position: int, snapshot_flag: str) -> SourceInfo:
    """A snapshot row's ``source``: read now, ``ord`` 0, as Debezium writes it."""
    ts = now_ms()
    extra = records.source_extra(coll, ts, 0)
    return SourceInfo(
        records.CONNECTOR,
        db,
        db,
        coll,
        ts,
        position,
        0,
        snapshot_flag,
        extra=extra,
        table_fields=False,
    )


def filtered(docs: list[Doc], table_filter: CollectionFilter | None) -> list[tuple[Any, Doc]]:
    """``(key, document)`` of the snapshot documents that pass the filter, filtered and masked
    (the server ran the filter already: this is the check that never trusts it)."""
    if table_filter is None:
        return [(records.key(doc["_id"]), doc) for doc in docs]
    return [
        (table_filter.key(doc["_id"]), table_filter.document(doc))
        for doc in docs
        if table_filter.matches(doc)
    ]


def events(
    batch: Batch, state: Doc, table_filter: CollectionFilter | None
) -> tuple[list[ChangeEvent], list[Doc]]:
    """The change events of ``batch`` and the documents they hold (for the schema): a read
    (``r``) of each document that passes the filter, and in a swept collection
    (:func:`connectors.mongodb.snapshot.sweep`) a delete of each that does not."""
    db, coll = batch.table.split(".", 1)
    info = row_info(db, coll, state["position"], "true")
    fields = {"updateDescription": None}
    docs = filtered(batch.docs, table_filter)
    out = [
        ChangeEvent(Op.READ, key, None, records.row(doc), info, None, fields) for key, doc in docs
    ]
    collection = state["collections"][batch.table]
    # A repair's deletes wait for its whole range (:func:`repaired`): one of a key's values
    # may pass the filter in another batch.
    if table_filter is not None and collection.get("sweep") and collection.get("ids") is None:
        for doc in batch.docs:  # no longer matching: a sink may hold it from before
            if not table_filter.matches(doc):
                key = table_filter.key(doc["_id"])
                out.append(ChangeEvent(Op.DELETE, key, None, None, info, None, fields))
    return out, [doc for _, doc in docs]


def repaired(
    batch: Batch, state: Doc, found: set[bytes], table_filter: CollectionFilter | None = None
) -> list[ChangeEvent]:
    """The deletes a repair (:mod:`connectors.mongodb.repair`) adds to ``batch``: none until
    its range is read, then, at the snapshot's position, one of each ``_id`` value of each key
    none of whose values a document of the range had that passes the row filter (``found``:
    what the range's batches read so far, this one included; the range is read again whole
    after a restart, and ``found`` with it). A value read but left out by the filter is
    deleted with the others (the collection is swept), unless another value of its key passed:
    a sink may not tell them apart."""
    ids = state["collections"][batch.table].get("ids")
    if ids is None:
        return []
    passing = batch.docs if table_filter is None else filter(table_filter.matches, batch.docs)
    found.update(repair.identity(doc["_id"]) for doc in passing)
    if not batch.done:
        return []
    db, coll = batch.table.split(".", 1)
    info = row_info(db, coll, state["position"], "true")
    fields = {"updateDescription": None}
    out = []
    for group in ids:
        values = [repair.decode(text) for text in group]
        if any(repair.identity(value) in found for value in values):
            continue  # a sink may not tell the key's values apart: none is deleted
        for value in values:
            key = records.key(value) if table_filter is None else table_filter.key(value)
            out.append(ChangeEvent(Op.DELETE, key, None, None, info, None, fields))
    return out


def finished(entry: Doc, state: Doc) -> Doc:
    """Record in ``entry`` that the snapshot ``state`` is done; returns its ``last_snapshot``."""
    rows = {t: info["rows"] for t, info in state["collections"].items()}
    elapsed = max(time.time() - state["started_ms"] / 1000, 1e-3)
    entry.pop("snapshot", None)
    request = state.get("request")
    if request is not None:
        done = [*entry.get("finished_requests", []), request]
        entry["finished_requests"] = done[-FINISHED_KEPT:]
    last: Doc = {
        "id": state["id"],
        "request": request,
        "position": state["position"],
        "reason": state["reason"],
        "finished_ms": now_ms(),
        "rows": rows,
        "seconds": round(elapsed, 1),
    }
    entry["last_snapshot"] = last
    return last
