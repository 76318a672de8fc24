"""The snapshot: collections read in ``_id`` ranges by worker threads, handed to ``poll``.

State (stored under ``mongodb.snapshot`` with every batch's records, so a restart resumes each
range after its last committed ``_id``)::

    {"id": "...", "position": 7310..., "reason": "...", "started_ms": ...,
     "collections": {"db.coll": {"ranges": [{"lo", "hi", "last", "done"}, ...],
                                 "rows": 12000, "rows_per_s": ..., "eta_s": ...}}}

Workers only read; the poll thread alone updates the state, after it handed a batch on, so the
stored state never runs ahead of the stored records. The queue between them is bounded: memory
stays at about ``2 * workers`` batches whatever the collection's size, and a batch holds at most
``snapshot_batch`` documents and about ``max_batch_bytes`` of their BSON (2,000 documents of 1 MB
would be 2 GB a batch).

A collection's filters narrow each read (``find`` with the row filter and the projection,
:mod:`connectors.mongodb.filters`); the source checks and masks each document again. A
collection re-read because its filters changed is *swept*: read without the row filter, so the
source deletes the documents that no longer match (:func:`sweep`). A
collection whose ``_id`` is masked is read as one range that stores no ``_id`` (a boundary or
the last one read would put the raw value in the log's offsets): a restart reads it again
from its start, which the sinks absorb.
"""

from __future__ import annotations

import contextlib
import queue
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import bson
from bson.codec_options import CodecOptions
from pymongo import MongoClient

from cdc.config.batch_bytes import BATCH_BYTES
from cdc.contracts import snapshot_offsets
from cdc.support.clock import now_ms
from connectors.mongodb import ranges, repair
from connectors.mongodb.filters import CollectionFilter
from snapshots.chunks import rate_and_eta, to_ranges

Doc = dict[str, Any]

#: A BSON document's first four bytes: its length, little-endian.
_LENGTH = struct.Struct("<i").unpack_from


@dataclass(frozen=True, slots=True)
class Batch:
    """Documents of one range, in ``_id`` order; ``done`` when the range has no more."""

    table: str
    index: int
    docs: list[Doc]
    done: bool


def plan_collection(
    client: MongoClient[Doc], table: str, range_docs: int, masked_key: bool = False
) -> list[Doc]:
    """Ranges of ``table`` from one walk over its ``_id`` index (ids only, never documents);
    one range, marked to store no ``_id``, when the ``_id`` is masked."""
    if masked_key:
        return [{**entry, "restart": True} for entry in ranges.plan([])]
    db, coll = table.split(".", 1)
    bounds: list[Any] = []
    cursor = client[db][coll].find({}, {"_id": 1}).sort("_id", 1).batch_size(10_000)
    first: Any = None
    previous: Any = None
    for count, doc in enumerate(cursor, 1):
        if count == 1:
            first = doc["_id"]
        if count % range_docs == 0:
            bounds.append(doc["_id"])
        previous = doc["_id"]
    if bounds and bounds[-1] == previous:
        bounds.pop()  # the last range would be empty
    return ranges.plan(bounds, one_type=ranges.bracket(first) == ranges.bracket(previous))


def new_state(
    snapshot_id: str,
    position: int,
    reason: str,
    planned: dict[str, list[Doc]],
    request: str | None = None,
) -> Doc:
    """A fresh snapshot's stored state (``request``: the id of a ``cdc snapshot`` request)."""
    now = now_ms()
    return {
        "id": snapshot_id,
        "request": request,
        "position": position,
        "reason": reason,
        "started_ms": now,
        "collections": {
            table: {"ranges": plan, "rows": 0, "started_ms": now, "rows_per_s": 0.0}
            for table, plan in planned.items()
        },
    }


def repair_plan() -> list[Doc]:
    """The one range of a repair (:mod:`connectors.mongodb.repair`), read again whole after a
    restart: it reads a few documents by ``_id``, and its deletes need to have seen every one
    of them (no resume point in the middle)."""
    return [{**entry, "restart": True} for entry in ranges.plan([])]


def add_repair(state: Doc, table: str, ids: list[list[str]]) -> None:
    """Make ``table``'s reading in ``state`` a repair of the ``_id`` values ``ids`` (per key,
    canonical Extended JSON texts): only they are read, swept (a document the row filter
    leaves out is deleted, :func:`sweep`), and those of a key none of whose values is found
    are deleted (:func:`connectors.mongodb.snapshot_rows.repaired`)."""
    info = state["collections"][table]
    info["ids"] = [list(group) for group in ids]
    info["sweep"] = True


def add_collection(state: Doc, table: str, plan: list[Doc]) -> None:
    """Add ``table``'s ranges to an unfinished snapshot (a collection added to the config); its
    rows take the snapshot's position, which every change streamed after it outranks."""
    now = now_ms()
    state["collections"][table] = {"ranges": plan, "rows": 0, "started_ms": now, "rows_per_s": 0.0}


def sweep(state: Doc, tables: Iterable[str]) -> None:
    """Read ``tables`` whole in this snapshot, so that the source can delete the documents its
    row filter no longer lets through (re-read after the filters changed): a sink may hold
    them from before."""
    for table in tables:
        info = state["collections"].get(table)
        if info is not None:
            info["sweep"] = True


def pending(state: Doc) -> list[tuple[str, int, Doc]]:
    """``(table, index, range)`` of every range not yet done."""
    return [
        (table, i, entry)
        for table, info in state["collections"].items()
        for i, entry in enumerate(info["ranges"])
        if not entry["done"]
    ]


def record(state: Doc, batch: Batch) -> dict[str, Any]:
    """Mark ``batch`` handed on; returns the table's progress figures."""
    info = state["collections"][batch.table]
    entry = info["ranges"][batch.index]
    if batch.docs and not entry.get("restart"):
        entry["last"] = ranges.encode(batch.docs[-1]["_id"])
    entry["done"] = entry["done"] or batch.done
    info["rows"] += len(batch.docs)
    elapsed = max(time.time() - info["started_ms"] / 1000, 1e-3)
    done = sum(1 for r in info["ranges"] if r["done"])
    total = len(info["ranges"])
    rate, eta_s = rate_and_eta(info["rows"], elapsed, done, total)
    info["rows_per_s"] = round(rate, 1)
    eta = info["eta_s"] = None if eta_s is None else round(eta_s, 1)
    return {
        "chunks_done": done,
        "chunks_total": total,
        "rows": info["rows"],
        "rows_per_s": info["rows_per_s"],
        "eta_s": eta,
        "kind": "initial",
    }


def mirror(entry: Doc) -> Doc:
    """The snapshot as every source's progress is stored for ``cdc status`` (a read-only mirror
    in :mod:`cdc.contracts.snapshot_offsets`' form, whole: per table ``chunks_total``, ``done``
    ranges, rows, rows/s, ETA), derived from the running snapshot, else the last finished one:
    the offsets items to store beside ``entry``; none before any snapshot."""
    now = now_ms()
    running = entry.get("snapshot")
    tables: Doc = {}
    if running:
        request = running.get("request")
        for table, info in running["collections"].items():
            done = [i for i, r in enumerate(info["ranges"]) if r["done"]]
            tables[table] = _mirrored(len(info["ranges"]), done, info, now, request)
            if "ids" in info:
                tables[table]["method"] = "_id keys"
    elif entry.get("last_snapshot"):
        last = entry["last_snapshot"]
        for table, rows in last["rows"].items():
            info = {"rows": rows, "rows_per_s": None}
            tables[table] = _mirrored(1, [0], info, now, last.get("request"))
    failed = entry.get("failed_requests", [])
    if not tables and not failed:
        return {}
    return snapshot_offsets.whole(tables, entry.get("finished_requests", []), failed)


def _mirrored(total: int, done: list[int], info: Doc, now: int, request: str | None) -> Doc:
    return snapshot_offsets.mirrored_table(
        kind="initial" if request is None else "blocking",
        method="_id ranges",
        chunks_total=total,
        done=to_ranges(done),
        rows=info["rows"],
        rows_per_s=info.get("rows_per_s"),
        eta_s=info.get("eta_s"),
        updated_ms=now,
        request=request,
    )


class Scanner:
    """Worker threads reading the pending ranges of a snapshot state into a bounded queue."""

    def __init__(
        self,
        client: MongoClient[Doc],
        state: Doc,
        workers: int,
        batch: int,
        filters: dict[str, CollectionFilter] | None = None,
        max_bytes: int = BATCH_BYTES,
    ) -> None:
        self._client = client
        self._max_bytes = max_bytes
        self._filters = filters or {}  # by db.collection
        self._sweeping = {t for t, info in state["collections"].items() if info.get("sweep")}
        self._ids = {t: info["ids"] for t, info in state["collections"].items() if "ids" in info}
        self._work = pending(state)
        self._batch = batch
        self._queue: queue.Queue[Batch | BaseException] = queue.Queue(maxsize=2 * workers)
        self._stop = threading.Event()
        self._next = 0
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, name=f"mongo-snapshot-{n}", daemon=True)
            for n in range(min(workers, len(self._work)))
        ]
        self.remaining = len(self._work)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def take(self, timeout_s: float) -> Batch | None:
        """The next batch, ``None`` after ``timeout_s`` without one.

        Raises:
            pymongo.errors.PyMongoError: a worker's read failed (the caller translates it).
        """
        try:
            item = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if isinstance(item, BaseException):
            raise item
        if item.done:
            self.remaining -= 1
        return item

    def close(self, wait_s: float = 5.0) -> None:
        """Stop the workers; a worker still blocked in a read after ``wait_s`` is left behind
        (a daemon thread that only reads; closing the client ends its read)."""
        self._stop.set()
        deadline = time.monotonic() + wait_s
        while any(t.is_alive() for t in self._threads) and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):  # unblock a worker waiting on a full queue
                self._queue.get(timeout=0.05)

    def _claim(self) -> tuple[str, int, Doc] | None:
        with self._lock:
            if self._next >= len(self._work):
                return None
            self._next += 1
            return self._work[self._next - 1]

    def _run(self) -> None:
        while not self._stop.is_set():
            work = self._claim()
            if work is None:
                return
            try:
                for batch in self._read(*work):
                    if not self._put(batch):
                        return
            except Exception as exc:  # any failure ends the scan through take(), never a hang
                self._put(exc)
                return

    def _read(self, table: str, index: int, entry: Doc) -> Iterator[Batch]:
        db, coll = table.split(".", 1)
        query, projection = ranges.resume_filter(entry), None
        table_filter = self._filters.get(table)
        if table_filter is not None:
            projection = table_filter.projection()
            if table not in self._sweeping:
                query = table_filter.find_filter(query)
        ids = self._ids.get(table)
        if ids is not None:  # a repair: only these _id values
            query = {"$and": [query, repair.query(ids)]} if query else repair.query(ids)
        collection = self._client[db][coll]
        # Raw batches: each server reply's documents undecoded, so their sizes are read from
        # their BSON length prefixes before any is decoded (no encoding again to size them).
        cursor = collection.find_raw_batches(query, projection).sort("_id", 1)
        # Typed as a cursor of documents; a raw batch cursor yields each reply's bytes.
        replies = cast("Iterable[bytes]", cursor.batch_size(self._batch))
        yield from self._batches(replies, collection.codec_options, table, index)

    def _batches(
        self, replies: Iterable[bytes], options: CodecOptions[Doc], table: str, index: int
    ) -> Iterator[Batch]:
        """The documents of ``replies`` (each one reply's, concatenated) in batches of at most
        ``snapshot_batch`` documents and about ``max_bytes`` of BSON (at least one document)."""
        docs: list[Doc] = []
        count = size = 0
        for raw in replies:
            view, at, start, end = memoryview(raw), 0, 0, len(raw)
            while at < end:
                (length,) = _LENGTH(raw, at)
                at, count, size = at + length, count + 1, size + length
                if count >= self._batch or size >= self._max_bytes:
                    docs.extend(bson.decode_all(view[start:at], options))
                    yield Batch(table, index, docs, False)
                    docs, count, size, start = [], 0, 0, at
            docs.extend(bson.decode_all(view[start:], options))
        yield Batch(table, index, docs, True)

    def _put(self, item: Batch | BaseException) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False
