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

This module is the format's one codec: every entry is built here (:func:`new_table`,
:func:`mirrored_table`, :func:`encode`, :func:`whole`) and read here, into the typed views
(:func:`read`: :class:`SnapshotProgress`, :class:`TableProgress`) that ``cdc status``,
``cdc snapshot --wait``, the live display and the metrics use; ``snapshots.state`` (PostgreSQL's
progress) and MongoDB's mirror write through it, and nothing else parses it. It lives in ``cdc``
because ``cdc`` imports no ``snapshots`` module. Pure functions over plain JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


def stream_offsets(offsets: Mapping[str, Any]) -> dict[str, Any]:
    """``offsets`` less every snapshot progress: its keys, and a source's own running snapshot
    inside its entry (MongoDB keeps one there, range by range, under ``"snapshot"``): where the
    stream is, as ``cdc status`` and the live display show it."""
    return {
        key: {k: v for k, v in value.items() if k != RUN_KEY}
        if isinstance(value, Mapping)
        else value
        for key, value in without_progress(offsets).items()
    }


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


def new_table(
    kind: str,
    request: str | None,
    method: str,
    where: str | None,
    chunks: list[dict[str, Any]],
    now: int,
) -> dict[str, Any]:
    """A table's entry as its chunk plan is stored (``chunks`` in their stored form), before
    any chunk is read."""
    return {
        "kind": kind,
        "request": request,
        "method": method,
        "where": where,
        "chunks": chunks,
        "chunks_total": len(chunks),
        "done": [],
        "rows": 0,
        "started_ms": now,
        "updated_ms": now,
        "rows_per_s": 0.0,
        "eta_s": None,
    }


def mirrored_table(
    *,
    kind: str,
    method: str,
    chunks_total: int,
    done: list[list[int]],
    rows: int,
    rows_per_s: float | None,
    eta_s: float | None,
    updated_ms: int,
    request: str | None,
) -> dict[str, Any]:
    """A table's entry in a read-only mirror (:func:`whole`): the figures alone, no plan."""
    return {
        "kind": kind,
        "method": method,
        "chunks_total": chunks_total,
        "done": done,
        "rows": rows,
        "rows_per_s": rows_per_s,
        "eta_s": eta_s,
        "updated_ms": updated_ms,
        "request": request,
    }


def whole(
    tables: Mapping[str, Mapping[str, Any]],
    finished: Sequence[str],
    failed: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The offsets storing ``tables`` (each a :func:`mirrored_table`), the ``finished`` request
    ids and the ``failed`` requests (``{id, table, reason, rows, failed_ms}``) under the run key
    alone: for a source that rewrites its whole state with every commit anyway (MongoDB's
    mirror)."""
    run: dict[str, Any] = {"tables": dict(tables), "requests": [], "finished": list(finished)}
    if failed:
        run["failed"] = [dict(f) for f in failed]
    return {RUN_KEY: run}


# -- the typed views every reader uses (cdc status, cdc snapshot --wait, the live display,
# the metrics) -------------------------------------------------------------------------------


def done_count(done: Sequence[Sequence[int]] | None) -> int:
    """How many chunks the stored ``done`` ranges (sorted, merged ``[first, last]``) hold."""
    return sum(int(last) - int(first) + 1 for first, last in done or [])


@dataclass(frozen=True, slots=True)
class TableProgress:
    """One table's stored progress: its figures as of its last finished chunk.

    Attributes:
        eta_s: the estimate as stored (a report shows none once the table is done).
        updated_ms: when the source stored the figures (``None`` if it did not say).
    """

    table: str
    kind: str | None
    method: str | None
    request: str | None
    chunks_done: int
    chunks_total: int
    rows: int
    rows_per_s: float | None
    eta_s: float | None
    updated_ms: int | None

    @property
    def done(self) -> bool:
        """Every planned chunk is read."""
        return self.chunks_done >= self.chunks_total


@dataclass(frozen=True, slots=True)
class QueuedRequest:
    """A request the source has not planned yet."""

    id: str | None
    table: str | None


@dataclass(frozen=True, slots=True)
class FailedRequest:
    """A request that failed, listed with its (redacted) reason until it is cancelled."""

    id: str | None
    table: str | None
    where: str | None
    reason: str | None
    rows: int
    failed_ms: int | None


@dataclass(frozen=True, slots=True)
class SnapshotProgress:
    """The whole stored progress, typed: tables by name, the queue in order, and the last few
    request ids that finished, failed or were cancelled."""

    tables: tuple[TableProgress, ...]
    queued: tuple[QueuedRequest, ...]
    failed: tuple[FailedRequest, ...]
    finished: tuple[str, ...]
    cancelled: tuple[str, ...]

    def outcome(self, request: str) -> str | None:
        """How ``request`` ended: ``done``, ``failed: <reason>``, ``cancelled``, or ``None``
        while it has not."""
        if request in self.cancelled:
            return "cancelled"
        if request in self.finished:
            return "done"
        for failure in self.failed:
            if failure.id == request:
                return f"failed: {failure.reason}"
        return None


def read(offsets: Mapping[str, Any]) -> SnapshotProgress | None:
    """The stored progress, typed, from any stored form; ``None`` when nothing of a snapshot is
    stored."""
    view = progress(offsets)
    if view is None:
        return None
    return SnapshotProgress(
        tables=tuple(_table(n, e) for n, e in sorted((view.get("tables") or {}).items())),
        queued=tuple(QueuedRequest(r.get("id"), r.get("table")) for r in view["requests"]),
        failed=tuple(map(_failure, view.get("failed") or [])),
        finished=tuple(view.get("finished") or []),
        cancelled=tuple(view.get("cancelled") or []),
    )


def _table(name: str, entry: Mapping[str, Any]) -> TableProgress:
    updated = entry.get("updated_ms")
    return TableProgress(
        table=name,
        kind=entry.get("kind"),
        method=entry.get("method"),
        request=entry.get("request"),
        chunks_done=done_count(entry.get("done")),
        chunks_total=int(entry.get("chunks_total", 0)),
        rows=int(entry.get("rows", 0)),
        rows_per_s=entry.get("rows_per_s"),
        eta_s=entry.get("eta_s"),
        updated_ms=None if updated is None else int(updated),
    )


def _failure(entry: Mapping[str, Any]) -> FailedRequest:
    return FailedRequest(
        id=entry.get("id"),
        table=entry.get("table"),
        where=entry.get("where"),
        reason=entry.get("reason"),
        rows=int(entry.get("rows", 0)),
        failed_ms=entry.get("failed_ms"),
    )
