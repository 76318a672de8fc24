"""The stored form of snapshot progress in the source offsets: its one encoder and reader.

Each table's progress is a source-offsets key of its own, next to one small run-level entry::

    "snapshot":                    {"id", "consistent_point", "requests", "failed",
                                    "cancelled", "finished"}
    "snapshot.table/public.t":     {"kind", "request", "method", "where", "chunks",
                                    "chunks_total", "done", "rows", ...}   # one per table

so a commit stores only the tables it changed (a chunk's commit: its own table) and, when it
changed, the run entry; a table whose progress goes is stored as ``None``, which both logs take
as a deletion of the key. Before, every commit rewrote the whole progress of every table under
``"snapshot"``, which made a snapshot of many small tables quadratic (issue 26).

Two other forms are read, and merged under the per-table keys: the run entry holding
``"tables"`` itself, as logs written before this form hold it (a source rewrites it in the new
form at its first commit after a start, :func:`migrated`), and as MongoDB writes its read-only
view (:func:`whole`), whose own entry is rewritten whole with every commit anyway.

This module lives in ``cdc`` because ``cdc status``, ``cdc snapshot --wait`` and the metrics read
it, and ``cdc`` imports no ``snapshots`` module; ``snapshots.state`` writes through it.
Pure functions over plain JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RUN_KEY = "snapshot"
TABLE_PREFIX = "snapshot.table/"  # followed by the table's name as captured: ``schema.table``


def table_key(table: str) -> str:
    """The source-offsets key of ``table``'s progress."""
    return TABLE_PREFIX + table


def is_progress_key(key: str) -> bool:
    """``key`` holds snapshot progress (the run entry or a table's)."""
    return key == RUN_KEY or key.startswith(TABLE_PREFIX)


def without_progress(offsets: Mapping[str, Any]) -> dict[str, Any]:
    """``offsets`` less every snapshot progress key (the position and other bookkeeping)."""
    return {k: v for k, v in offsets.items() if not is_progress_key(k)}


def progress(offsets: Mapping[str, Any]) -> dict[str, Any] | None:
    """The whole progress as one mapping (the run entry with ``"tables"``, by table name), from
    any stored form; ``None`` when nothing of a snapshot is stored. A table's own key wins over
    an entry of a run entry's ``"tables"`` (a log in the old form that a commit rewrote in
    part).
    """
    run = offsets.get(RUN_KEY)
    tables = {
        key[len(TABLE_PREFIX) :]: value
        for key, value in offsets.items()
        if key.startswith(TABLE_PREFIX) and isinstance(value, Mapping)
    }
    if not isinstance(run, Mapping):
        return {"tables": tables} if tables else None
    embedded = run.get("tables")
    merged = dict(embedded) if isinstance(embedded, Mapping) else {}
    return {**run, "tables": {**merged, **tables}}


def folded(offsets: Mapping[str, Any]) -> dict[str, Any]:
    """``offsets`` with the progress as one run entry holding its ``"tables"`` (the form
    ``cdc status --json`` has always shown), whatever form it is stored in."""
    view = progress(offsets)
    out = without_progress(offsets)
    return out if view is None else {**out, RUN_KEY: view}


def migrated(offsets: Mapping[str, Any]) -> bool:
    """The run entry is in a form that names its tables itself (written before per-table keys):
    the next commit must store every table under its own key."""
    run = offsets.get(RUN_KEY)
    return isinstance(run, Mapping) and "tables" in run


def encode(
    run: Mapping[str, Any] | None, tables: Mapping[str, Mapping[str, Any] | None]
) -> dict[str, Any]:
    """The offsets storing ``run`` (``None``: unchanged; its ``"tables"`` are left out) and
    each of ``tables`` (``None``: its progress is deleted)."""
    stored: dict[str, Any] = {table_key(name): entry for name, entry in tables.items()}
    if run is not None:
        stored[RUN_KEY] = {k: v for k, v in run.items() if k != "tables"}
    return stored


def whole(view: Mapping[str, Any]) -> dict[str, Any]:
    """The offsets storing ``view`` (run entry with its ``"tables"``) under the run key alone:
    for a source that rewrites its whole state with every commit anyway (MongoDB's mirror)."""
    return {RUN_KEY: dict(view)}
