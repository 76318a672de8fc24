"""Snapshot progress: what is stored in the log's source offsets under ``"snapshot"``.

The whole state is rewritten with every commit that changes it, in the same log transaction as
the rows it describes, so after a crash it names exactly the chunks whose rows are durable::

    {"snapshot": {
        "id": "9f0c...",                      # the snapshot run (initial) or latest request
        "consistent_point": 12345678,         # the exported snapshot's LSN (initial only)
        "requests": [{"id": ..., "table": "public.t", "where": null}],  # not yet planned
        "tables": {"public.t": {
            "kind": "initial" | "incremental", "request": "...", "method": "keyset" | "ctid",
            "where": null, "chunks": [{"i": 0, "lo": null, "hi": ["500"]}, ...],
            "chunks_total": 20, "done": [[0, 4], [7, 7]], "rows": 250000,
            "started_ms": ..., "updated_ms": ..., "rows_per_s": ..., "eta_s": ...}},
        "finished": ["<request id>", ...]}}   # the last few, for ``cdc snapshot --wait``

Chunk boundaries are stored, not re-planned, because a resumed snapshot must read exactly the
ranges that are missing.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from snapshots.chunks import (
    Chunk,
    add_done,
    chunk_from_json,
    chunk_to_json,
    done_count,
    rate_and_eta,
    remaining,
)

OFFSET_KEY = "snapshot"
FINISHED_KEPT = 20  # finished request ids kept, newest last


def now_ms() -> int:
    return int(time.time() * 1000)


class SnapshotState:
    """The stored progress, guarded by a lock (reader threads and the poll thread share it)."""

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, Any] = copy.deepcopy(dict(data or {}))
        self._data.setdefault("tables", {})
        self._data.setdefault("requests", [])
        self._data.setdefault("finished", [])
        self.dirty = False

    @classmethod
    def from_offsets(cls, offsets: Mapping[str, Any]) -> SnapshotState:
        entry = offsets.get(OFFSET_KEY)
        return cls(entry if isinstance(entry, Mapping) else None)

    def to_json(self) -> dict[str, Any]:
        """A deep copy to store; clears ``dirty``."""
        with self._lock:
            self.dirty = False
            return copy.deepcopy(self._data)

    # -- reading ---------------------------------------------------------------------------

    def unfinished(self) -> dict[str, list[Chunk]]:
        """Remaining chunks of every table not yet done, by table."""
        with self._lock:
            return {
                name: remaining([chunk_from_json(c) for c in entry["chunks"]], entry["done"])
                for name, entry in self._data["tables"].items()
                if done_count(entry["done"]) < entry["chunks_total"]
            }

    def table(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            entry = self._data["tables"].get(name)
            return copy.deepcopy(entry) if entry is not None else None

    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._data["requests"])

    # -- changes ---------------------------------------------------------------------------

    def begin_initial(self, snapshot_id: str, consistent_point: int) -> None:
        """Start a fresh initial snapshot; earlier progress is dropped."""
        with self._lock:
            self._data = {
                "id": snapshot_id,
                "consistent_point": consistent_point,
                "tables": {},
                "requests": [],
                "finished": self._data.get("finished", []),
            }
            self.dirty = True

    def add_request(self, request: Mapping[str, Any]) -> None:
        """Queue an incremental snapshot request until it is planned."""
        with self._lock:
            self._data["requests"].append(dict(request))
            self._data["id"] = request["id"]
            self.dirty = True

    def plan_table(
        self,
        name: str,
        kind: str,
        method: str,
        chunks: Sequence[Chunk],
        *,
        request: str | None = None,
        where: str | None = None,
    ) -> None:
        """Record a table's chunk plan (and drop its request from the queue)."""
        with self._lock:
            self._data["tables"][name] = {
                "kind": kind,
                "request": request,
                "method": method,
                "where": where,
                "chunks": [chunk_to_json(c) for c in chunks],
                "chunks_total": len(chunks),
                "done": [],
                "rows": 0,
                "started_ms": now_ms(),
                "updated_ms": now_ms(),
                "rows_per_s": 0.0,
                "eta_s": None,
            }
            if request is not None:
                queue = self._data["requests"]
                self._data["requests"] = [r for r in queue if r.get("id") != request]
            self.dirty = True

    def chunk_done(self, name: str, index: int, rows: int) -> dict[str, Any]:
        """Mark a chunk done; returns the table's figures (for progress reporting)."""
        with self._lock:
            entry = self._data["tables"][name]
            entry["done"] = add_done(entry["done"], index)
            entry["rows"] += rows
            entry["updated_ms"] = now_ms()
            done = done_count(entry["done"])
            elapsed = (entry["updated_ms"] - entry["started_ms"]) / 1000
            rate, eta = rate_and_eta(entry["rows"], elapsed, done, entry["chunks_total"])
            entry["rows_per_s"] = round(rate, 1)
            entry["eta_s"] = None if eta is None else round(eta, 1)
            if done >= entry["chunks_total"]:
                entry["chunks"] = []  # the plan is no longer needed; keep the stored state small
                self._finish(entry.get("request"))
            self.dirty = True
            return {k: v for k, v in entry.items() if k != "chunks"} | {"chunks_done": done}

    def _finish(self, request: str | None) -> None:
        if request is None:
            return
        pending = any(
            e.get("request") == request and done_count(e["done"]) < e["chunks_total"]
            for e in self._data["tables"].values()
        )
        if not pending:
            self._data["finished"] = [*self._data["finished"], request][-FINISHED_KEPT:]

    def finished(self, request: str) -> bool:
        with self._lock:
            return request in self._data["finished"]
