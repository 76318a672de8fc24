"""The stored form of snapshot progress in the source offsets: its one encoder and reader.

Each table's progress and each queued request is a source-offsets key of its own, next to one
small run-level entry::

    "snapshot":                  {"id", "consistent_point", "failed", "cancelled", "finished"}
    "snapshot.table/public.t":   {"kind", "request", "method", "where", "chunks",
                                  "chunks_total", "done", "rows", ...}   # one per table
    "snapshot.request/<id>":     {"id", "table", "where", "seq", ...}   # until it is planned

so a commit stores only the tables and requests it changed (a chunk's commit: its own table)
and, when it changed, the run entry, whose lists keep only the last few ids; one whose progress
goes is stored as ``None``, which both logs take as a deletion of the key. Before, every commit
rewrote the whole progress of every table and the whole queue under ``"snapshot"``, which made a
snapshot of many small tables quadratic (issue 26). ``seq`` orders the queue across restarts.

Two other forms are read, and merged under the keys of their own: the run entry holding
``"tables"`` and ``"requests"`` itself, as logs written before this form hold it (a source
rewrites it in the new form at its first commit after a start, :func:`migrated`), and as MongoDB
writes its read-only view (:func:`whole`), whose own entry is rewritten whole with every commit
anyway.

This module lives in ``cdc`` because ``cdc status``, ``cdc snapshot --wait`` and the metrics read
it, and ``cdc`` imports no ``snapshots`` module; ``snapshots.state`` writes through it.
Pure functions over plain JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RUN_KEY = "snapshot"
TABLE_PREFIX = "snapshot.table/"  # followed by the table's name as captured: ``schema.table``
REQUEST_PREFIX = "snapshot.request/"  # followed by a queued request's id


def table_key(table: str) -> str:
    """The source-offsets key of ``table``'s progress."""
    return TABLE_PREFIX + table


def is_progress_key(key: str) -> bool:
    """``key`` holds snapshot progress (the run entry, a table's, a queued request)."""
    return key == RUN_KEY or key.startswith((TABLE_PREFIX, REQUEST_PREFIX))


def without_progress(offsets: Mapping[str, Any]) -> dict[str, Any]:
    """``offsets`` less every snapshot progress key (the position and other bookkeeping)."""
    return {k: v for k, v in offsets.items() if not is_progress_key(k)}


def progress(offsets: Mapping[str, Any]) -> dict[str, Any] | None:
    """The whole progress as one mapping (the run entry with ``"tables"`` by table name and
    ``"requests"`` in queue order), from any stored form; ``None`` when nothing of a snapshot
    is stored. A key of its own wins over a run entry's copy (a log in the old form that a
    commit rewrote in part).
    """
    run = offsets.get(RUN_KEY)
    tables, queued = _own(offsets, TABLE_PREFIX), _own(offsets, REQUEST_PREFIX)
    if not isinstance(run, Mapping):
        if not tables and not queued:
            return None
        run = {}
    embedded = run.get("tables")
    tables = {**(embedded if isinstance(embedded, Mapping) else {}), **tables}
    old = [r for r in run.get("requests") or [] if r.get("id") not in queued]
    requests = old + sorted(queued.values(), key=lambda r: int(r.get("seq", 0)))
    return {**run, "tables": tables, "requests": requests}


def _own(offsets: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The entries stored under keys of their own with ``prefix``, by name."""
    return {
        key[len(prefix) :]: value
        for key, value in offsets.items()
        if key.startswith(prefix) and isinstance(value, Mapping)
    }


def folded(offsets: Mapping[str, Any]) -> dict[str, Any]:
    """``offsets`` with the progress as one run entry holding its ``"tables"`` (the form
    ``cdc status --json`` has always shown), whatever form it is stored in."""
    view = progress(offsets)
    out = without_progress(offsets)
    return out if view is None else {**out, RUN_KEY: view}


def migrated(offsets: Mapping[str, Any]) -> bool:
    """The run entry is in a form that holds its tables or requests itself (written before
    keys of their own): the next commit must store each under its own key."""
    run = offsets.get(RUN_KEY)
    return isinstance(run, Mapping) and ("tables" in run or "requests" in run)


def encode(
    run: Mapping[str, Any] | None,
    tables: Mapping[str, Mapping[str, Any] | None],
    requests: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """The offsets storing ``run`` (``None``: unchanged; its ``"tables"`` and ``"requests"``
    are left out), each of ``tables`` by name and each queued request of ``requests`` by id
    (``None``: deleted)."""
    stored: dict[str, Any] = {table_key(name): entry for name, entry in tables.items()}
    stored.update((REQUEST_PREFIX + ident, r) for ident, r in (requests or {}).items())
    if run is not None:
        stored[RUN_KEY] = {k: v for k, v in run.items() if k not in ("tables", "requests")}
    return stored


def whole(view: Mapping[str, Any]) -> dict[str, Any]:
    """The offsets storing ``view`` (run entry with its ``"tables"``) under the run key alone:
    for a source that rewrites its whole state with every commit anyway (MongoDB's mirror)."""
    return {RUN_KEY: dict(view)}
