"""Snapshot progress, as stored in the log's source offsets (see
:mod:`cdc.contracts.snapshot_offsets`).

Each table's progress and each queued request is stored under its own key, in the same log
transaction as the rows it describes, so after a crash it names exactly the chunks whose rows are
durable; a commit stores only what it changed (a chunk's commit: its table alone)::

    "snapshot": {
        "id": "9f0c...",                      # the snapshot run (initial) or latest request
        "consistent_point": 12345678,         # the exported snapshot's LSN (initial only)
        "failed": [{"id", "table", "where", "reason", "failed_ms"}],  # until cancelled
        "cancelled": ["<request id>", ...],   # the last few, for ``--wait`` and late windows
        "finished": ["<request id>", ...]}    # the last few, for ``cdc snapshot --wait``
    "snapshot.request/<id>": {"id", "table", "where", "seq"}   # queued, not yet planned
    "snapshot.table/public.t": {
        "kind": "initial" | "incremental", "request": "...", "method": "keyset" | "ctid",
        "where": null, "chunks": [{"i": 0, "lo": null, "hi": ["500"]}, ...],
        "chunks_total": 20, "done": [[0, 4], [7, 7]], "rows": 250000,
        "started_ms": ..., "updated_ms": ..., "rows_per_s": ..., "eta_s": ...}

Chunk boundaries are stored, not re-planned, because a resumed snapshot must read exactly the
ranges that are missing. A finished table's entry keeps its figures but no longer its plan
(``chunks`` emptied), and a key is deleted when what it holds goes (a request planned, failed
or cancelled, a table no longer captured, a new initial snapshot), so stored state stays
bounded by the captured tables. A log written before these keys (everything under
``"snapshot"``) is read as is and rewritten in this form by the first commit after a start.

Next to it, under ``"captured"``, the tables the log holds (snapshotted or streamed), so a start
can tell a table added to ``source.tables`` from one captured all along; it is a key of its own
because it is no snapshot progress (a pipeline that never snapshots stores it too).

A request ends done (``finished``), failed or cancelled. A failed one keeps only its reason: its
table entry goes, so a restart never replays it, and it stays listed until it is cancelled.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import orjson

from cdc.contracts import snapshot_offsets
from cdc.support.clock import now_ms
from cdc.support.redact import redact
from snapshots.chunks import (
    Chunk,
    add_done,
    chunk_from_json,
    chunk_to_json,
    done_count,
    rate_and_eta,
    remaining,
)

OFFSET_KEY = snapshot_offsets.RUN_KEY
CAPTURED_KEY = "captured"
FINISHED_KEPT = 20  # finished (and cancelled, and failed) requests kept, newest last

_T = TypeVar("_T")


def _copy(data: _T) -> _T:
    """A deep copy of stored (JSON) state, through its JSON (``copy.deepcopy`` costs 6.5x more)."""
    copied: _T = orjson.loads(orjson.dumps(data))
    return copied


def _open(entry: Mapping[str, Any]) -> bool:
    """The table has chunks left to read."""
    return bool(done_count(entry["done"]) < int(entry["chunks_total"]))


class SnapshotState:
    """The stored progress, guarded by a lock (reader threads and the poll thread share it)."""

    def __init__(
        self, data: Mapping[str, Any] | None = None, captured: Sequence[str] | None = None
    ) -> None:
        self._lock = threading.Lock()
        self._captured = None if captured is None else sorted(captured)
        self._captured_dirty = False
        self._data: dict[str, Any] = _copy(dict(data or {}))
        self._data.setdefault("tables", {})
        # The queued requests by id, in order (``seq``, stored, keeps it across restarts; one
        # stored before it existed takes its place in the old list).
        requests = self._data.pop("requests", None) or []
        self._queue = {r["id"]: {"seq": n, **r} for n, r in enumerate(requests, 1)}
        self._seq = 1 + max((int(r.get("seq", 0)) for r in self._queue.values()), default=0)
        # What the next commit stores: the run entry if it changed, the tables and the queued
        # requests changed since.
        self._run_dirty, self._tables_dirty, self._queue_dirty = False, set[str](), set[str]()
        # Per request, its tables with chunks left (scanning every table at each finished one
        # made a many-table snapshot quadratic).
        self._unread = Counter(
            e["request"] for e in self._data["tables"].values() if e.get("request") and _open(e)
        )
        self._data.setdefault("finished", [])
        self._data.setdefault("failed", [])
        self._data.setdefault("cancelled", [])
        # Every request that failed or was cancelled in this process. The stored lists keep only
        # the last few, but work queued in the reader may name any of them (a --cancel-all of a
        # hundred tables): it must still be seen as ended. Stored state needs no such set, since
        # an ended request leaves the queue and the tables there.
        self._ended_here: set[str] = set()

    @classmethod
    def from_offsets(cls, offsets: Mapping[str, Any]) -> SnapshotState:
        """The state stored in ``offsets``, in any stored form; one in the form from before
        per-table keys is stored again, in the new form, by the next commit."""
        captured = offsets.get(CAPTURED_KEY)
        state = cls(
            snapshot_offsets.progress(offsets),
            [str(t) for t in captured] if isinstance(captured, list) else None,
        )
        if snapshot_offsets.migrated(offsets):
            state._run_dirty = True
            state._tables_dirty.update(state._data["tables"])
            state._queue_dirty.update(state._queue)
        return state

    @property
    def dirty(self) -> bool:
        """The progress changed since the last commit stored it."""
        return self._run_dirty or bool(self._tables_dirty or self._queue_dirty)

    @property
    def pending(self) -> bool:
        """Something changed that the next commit must store (see :meth:`offsets`)."""
        return self.dirty or self._captured_dirty

    def offsets(self, progress: bool = False) -> dict[str, Any]:
        """What a commit stores: the run entry when it changed (or ``progress``), each table and
        queued request changed since the last call, the captured tables when they changed.
        Clears what it returns."""
        with self._lock:
            tables, queue = self._data["tables"], self._queue
            changed = {n: _copy(tables[n]) if n in tables else None for n in self._tables_dirty}
            queued = {i: dict(queue[i]) if i in queue else None for i in self._queue_dirty}
            run = None
            if progress or self._run_dirty:
                run = _copy({k: v for k, v in self._data.items() if k != "tables"})
            self._run_dirty, self._tables_dirty, self._queue_dirty = False, set(), set()
            stored = snapshot_offsets.encode(run, changed, queued)
            if self._captured_dirty:
                self._captured_dirty = False
                stored[CAPTURED_KEY] = list(self._captured or [])
        return stored

    def to_json(self) -> dict[str, Any]:
        """A deep copy of the whole progress, every table included (the form
        :func:`cdc.contracts.snapshot_offsets.progress` reads back)."""
        with self._lock:
            return _copy({**self._data, "requests": list(self._queue.values())})

    def _touch(self, name: str, delta: int) -> None:
        """Table ``name`` changes: stored with the next commit; ``delta`` its request's count of
        unread tables by its entry as it is now (-1 before a change, +1 after)."""
        self._tables_dirty.add(name)
        entry = self._data["tables"].get(name)
        if entry is not None and entry.get("request") and _open(entry):
            self._unread[entry["request"]] += delta

    # -- reading ---------------------------------------------------------------------------

    def unfinished(self) -> dict[str, list[Chunk]]:
        """Remaining chunks of every table not yet done, by table."""
        with self._lock:
            return {
                name: remaining([chunk_from_json(c) for c in entry["chunks"]], entry["done"])
                for name, entry in self._data["tables"].items()
                if _open(entry)
            }

    def table(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            entry = self._data["tables"].get(name)
            return _copy(entry) if entry is not None else None

    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return _copy(list(self._queue.values()))

    def failed(self) -> list[dict[str, Any]]:
        with self._lock:
            return _copy(self._data["failed"])

    def captured(self) -> list[str] | None:
        """The tables the log holds, or ``None`` when a state from before this was stored."""
        with self._lock:
            return None if self._captured is None else list(self._captured)

    def ended(self, request: str | None) -> bool:
        """The request failed or was cancelled: nothing more of it may be planned or read."""
        with self._lock:
            return self._ended(request)

    def _ended(self, request: str | None) -> bool:
        if request is None:
            return False
        return (
            request in self._ended_here
            or request in self._data["cancelled"]
            or any(f.get("id") == request for f in self._data["failed"])
        )

    # -- changes ---------------------------------------------------------------------------

    def begin_initial(self, snapshot_id: str, consistent_point: int) -> None:
        """Start a fresh initial snapshot; earlier progress is dropped."""
        with self._lock:
            kept = ("finished", "failed", "cancelled")
            self._tables_dirty.update(self._data["tables"])  # their keys are deleted
            self._queue_dirty.update(self._queue)
            self._queue = {}
            self._data = {
                "id": snapshot_id,
                "consistent_point": consistent_point,
                "tables": {},
                **{key: self._data[key] for key in kept if key in self._data},
            }
            self._unread.clear()
            self._run_dirty = True

    def set_captured(self, tables: Sequence[str]) -> None:
        with self._lock:
            if self._captured != sorted(tables):
                self._captured = sorted(tables)
                self._captured_dirty = True

    def add_request(self, request: Mapping[str, Any]) -> None:
        """Queue an incremental snapshot request until it is planned."""
        with self._lock:
            self._queue[request["id"]] = {**request, "seq": self._seq}
            self._seq += 1
            self._queue_dirty.add(request["id"])
            self._data["id"] = request["id"]
            self._run_dirty = True

    def plan_table(
        self,
        name: str,
        kind: str,
        method: str,
        chunks: Sequence[Chunk],
        *,
        request: str | None = None,
        where: str | None = None,
        purge: bool = False,
        keys: list[Any] | None = None,
    ) -> bool:
        """Record a table's chunk plan (and drop its request from the queue); ``purge``: the
        read also deletes the rows its table's filter now leaves out; ``keys``: a repair's keys
        (``cdc verify --repair``), each deleted if the read does not find it (both kept for a
        resume).

        Returns:
            False, and nothing recorded, when the request was cancelled or failed meanwhile.
        """
        with self._lock:
            if self._ended(request):
                return False
            self._touch(name, -1)
            stored = [chunk_to_json(c) for c in chunks]
            entry = snapshot_offsets.new_table(kind, request, method, where, stored, now_ms())
            self._data["tables"][name] = entry
            if purge:
                entry["purge"] = True
            if keys:
                entry["keys"] = keys
            self._touch(name, +1)
            self._unqueue(request)
            return True

    def chunk_done(self, name: str, index: int, rows: int) -> dict[str, Any]:
        """Mark a chunk done; returns the table's figures (for progress reporting)."""
        with self._lock:
            entry = self._data["tables"][name]
            self._touch(name, -1)
            entry["done"] = add_done(entry["done"], index)
            entry["rows"] += rows
            entry["updated_ms"] = now_ms()
            done = done_count(entry["done"])
            elapsed = (entry["updated_ms"] - entry["started_ms"]) / 1000
            rate, eta = rate_and_eta(entry["rows"], elapsed, done, entry["chunks_total"])
            entry["rows_per_s"] = round(rate, 1)
            entry["eta_s"] = None if eta is None else round(eta, 1)
            self._touch(name, +1)
            if done >= entry["chunks_total"]:
                entry["chunks"] = []  # the plan is no longer needed; keep the stored state small
                self._finish(entry.get("request"))
            return {k: v for k, v in entry.items() if k != "chunks"} | {"chunks_done": done}

    def _finish(self, request: str | None) -> None:
        if request is None or self._unread[request] > 0:
            return
        if request not in self._data["finished"]:  # a chunk read again ends it once
            self._data["finished"] = [*self._data["finished"], request][-FINISHED_KEPT:]
            self._run_dirty = True

    def finished(self, request: str) -> bool:
        with self._lock:
            return request in self._data["finished"]

    # -- failed and cancelled requests -----------------------------------------------------

    def fail(self, name: str, request: str | None, where: str | None, reason: str) -> str | None:
        """Mark ``request`` (of table ``name``) failed: its plan and queue entry go, so no
        restart replays it; the reason stays listed until it is cancelled.

        Returns:
            The id it is listed under, or ``None`` when it had ended already (cancelled).
        """
        with self._lock:
            if self._ended(request):
                return None
            ident = request or uuid.uuid4().hex
            self._ended_here.add(ident)
            entry = self._data["tables"].get(name)
            rows = 0
            if entry is not None and entry.get("request") == request:
                rows = entry.get("rows", 0)
                self._touch(name, -1)
                del self._data["tables"][name]
            self._unqueue(request)
            failure: dict[str, Any] = {"id": ident, "table": name, "where": where}
            failure |= {"reason": redact(reason), "rows": rows, "failed_ms": now_ms()}
            self._data["failed"] = [*self._data["failed"], failure][-FINISHED_KEPT:]
            self._run_dirty = True
            return ident

    def cancel(self, request: str | None, signal: str | None = None) -> list[dict[str, Any]]:
        """Drop ``request`` wherever it is (``None``: every request; an initial snapshot being
        resumed is cancelled only by its own id). The ids dropped, and the cancel ``signal``'s
        own, are listed as cancelled (what ``cdc snapshot --cancel --wait`` waits for).

        Returns:
            What was dropped: ``{"id", "table", "state"}`` each (``queued``, ``running`` or
            ``failed``).
        """
        with self._lock:
            dropped = self._drop_queued(request) + self._drop_running(request)
            kept = []
            for failure in self._data["failed"]:
                if request in (None, failure.get("id")):
                    dropped.append({"id": failure["id"], "table": failure["table"]})
                    dropped[-1]["state"] = "failed"
                else:
                    kept.append(failure)
            self._data["failed"] = kept
            ids = [d["id"] for d in dropped] + [i for i in (request, signal) if i is not None]
            self._ended_here.update(i for i in ids if i is not None)
            known = self._data["cancelled"]
            known = [*known, *(i for i in dict.fromkeys(ids) if i not in known)]
            self._data["cancelled"] = known[-FINISHED_KEPT:]
            self._run_dirty = True
            return dropped

    def _unqueue(self, request: str | None) -> dict[str, Any] | None:
        """Take ``request`` off the queue (its key is deleted with the next commit)."""
        if request is None or request not in self._queue:
            return None
        self._queue_dirty.add(request)
        return self._queue.pop(request)

    def _drop_queued(self, request: str | None) -> list[dict[str, Any]]:
        ids = list(self._queue) if request is None else [request]
        dropped = [q for q in map(self._unqueue, ids) if q is not None]
        return [{"id": q["id"], "table": q["table"], "state": "queued"} for q in dropped]

    def _drop_running(self, request: str | None) -> list[dict[str, Any]]:
        dropped = []
        for name, entry in list(self._data["tables"].items()):
            if done_count(entry["done"]) >= entry["chunks_total"]:
                continue  # finished: its rows are in the log, nothing to stop
            ident = entry.get("request")
            if request is None and entry.get("kind") != "incremental":
                continue
            if request is None or ident == request:
                self._touch(name, -1)
                del self._data["tables"][name]
                dropped.append({"id": ident, "table": name, "state": "running"})
        return dropped

    def forget(self, tables: Sequence[str]) -> None:
        """Drop everything of ``tables``, which are no longer captured: their progress, their
        queued and failed requests (nothing of them is read again)."""
        with self._lock:
            for name in tables:
                if name in self._data["tables"]:
                    self._touch(name, -1)
                    del self._data["tables"][name]
            for ident in [i for i, r in self._queue.items() if r.get("table") in tables]:
                self._unqueue(ident)
            self._data["failed"] = [r for r in self._data["failed"] if r.get("table") not in tables]
            self._run_dirty = True

    def cancelled(self, request: str) -> bool:
        with self._lock:
            return request in self._data["cancelled"]
