"""Compaction of the embedded log: keep the latest record per key, expire old tombstones.

Work is cut into short write transactions of at most :data:`CHUNK_RECORDS` records each, so an
append (or another process's ``cdc snapshot``) waits for one chunk at most, never for a whole
pass. Offsets of surviving records never change and partitions' high-water marks are untouched,
so offsets are never reused. A chunk deletes, in its own transaction, the value frames that
went with the last of their records (:func:`cdc.log.embedded.frames.collect`).
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

from cdc.log.embedded import frames
from cdc.log.embedded.bulk import indexed
from cdc.log.embedded.store import translated, write_transaction

CHUNK_RECORDS = 5_000
# maybe_compact() runs a pass once this many records were appended since the last one...
MIN_DIRTY = 10_000
# ...and they are more than this share of the live records (fewer: too little to gain).
DIRTY_RATIO = 0.5

_PARTITIONS = "SELECT topic_id, partition, next_offset, dirty FROM partitions"
_START = "SELECT min(offset) FROM records WHERE topic_id = ? AND partition = ?"
_CHUNK_END = (
    "SELECT offset FROM records WHERE topic_id = ? AND partition = ? AND offset >= ?"
    " ORDER BY offset LIMIT 1 OFFSET ?"
)
# A keyed record is superseded when its partition holds a newer record with the same key; the
# key index answers the EXISTS with one seek. The frames of the records it deletes may be
# left without a record (a tombstone has no value, so no frame).
_DELETE_SUPERSEDED = """
    DELETE FROM records
    WHERE topic_id = ?1 AND partition = ?2 AND offset >= ?3 AND offset < ?4
      AND key IS NOT NULL
      AND EXISTS (
        SELECT 1 FROM records AS newer
        WHERE newer.topic_id = ?1 AND newer.partition = ?2
          AND newer.key = records.key AND newer.offset > records.offset
      )
    RETURNING frame_id
"""
# Runs after the superseded delete of the same chunk, so a tombstone still here is its key's
# latest record: dropping it drops the key.
_DELETE_TOMBSTONES = """
    DELETE FROM records
    WHERE topic_id = ?1 AND partition = ?2 AND offset >= ?3 AND offset < ?4
      AND key IS NOT NULL AND value IS NULL AND ts_ms < ?5
"""
_SHRINK = (
    "UPDATE partitions SET record_count = record_count - ? WHERE topic_id = ? AND partition = ?"
)
_CLEAN = "UPDATE partitions SET dirty = max(dirty - ?, 0) WHERE topic_id = ? AND partition = ?"
_TOTALS = "SELECT coalesce(sum(dirty), 0), coalesce(sum(record_count), 0) FROM partitions"


class _Unindexed(Exception):
    """The key index is missing (a bulk load dropped it): without it, each superseded check
    would scan the whole partition, so the pass stops."""


class _Partition(NamedTuple):
    topic_id: int
    partition: int
    end: int
    dirty: int


def needs_compaction(conn: sqlite3.Connection) -> bool:
    """Cheap check (two sums over the partitions table) for :meth:`EmbeddedLog.maybe_compact`."""
    with translated("checking for compaction"):
        dirty, live = conn.execute(_TOTALS).fetchone()
    return bool(dirty > MIN_DIRTY and dirty > live * DIRTY_RATIO)


def compact(conn: sqlite3.Connection, tombstone_cutoff_ms: int) -> dict[str, int]:
    """One compaction pass over every partition of every topic.

    Args:
        conn: the calling thread's connection, not inside a transaction.
        tombstone_cutoff_ms: tombstones with an older timestamp are removed.

    Returns:
        ``{"superseded": n, "tombstones": m}``: the records removed of each kind; a pass that
        finds the key index missing (:mod:`cdc.log.embedded.bulk`) stops with what it did.
    """
    with translated("listing partitions"):
        partitions = [_Partition(*row) for row in conn.execute(_PARTITIONS).fetchall()]
    totals = {"superseded": 0, "tombstones": 0}
    for part in partitions:
        try:
            _compact_partition(conn, part, tombstone_cutoff_ms, totals)
        except _Unindexed:
            break
    return totals


def _compact_partition(
    conn: sqlite3.Connection, part: _Partition, cutoff_ms: int, totals: dict[str, int]
) -> None:
    # Only records below the end seen at the start are visited; later appends wait for the next
    # pass (and stay counted as dirty, since only this pass's dirty count is subtracted).
    with translated("compacting"):
        start = conn.execute(_START, (part.topic_id, part.partition)).fetchone()[0]
    low = part.end if start is None else start
    while low < part.end:
        high, removed = _compact_chunk(conn, part, low, cutoff_ms)
        totals["superseded"] += removed[0]
        totals["tombstones"] += removed[1]
        low = high
    with write_transaction(conn, "compacting"):
        conn.execute(_CLEAN, (part.dirty, part.topic_id, part.partition))


def _compact_chunk(
    conn: sqlite3.Connection, part: _Partition, low: int, cutoff_ms: int
) -> tuple[int, tuple[int, int]]:
    tid, partition = part.topic_id, part.partition
    with write_transaction(conn, "compacting"):
        if not indexed(conn):  # checked under the write lock: a load drops it under it too
            raise _Unindexed
        row = conn.execute(_CHUNK_END, (tid, partition, low, CHUNK_RECORDS)).fetchone()
        high = part.end if row is None else min(row[0], part.end)
        args = (tid, partition, low, high)
        deleted = conn.execute(_DELETE_SUPERSEDED, args).fetchall()
        frames.collect(conn, (frame_id for (frame_id,) in deleted))
        superseded = len(deleted)
        tombstones = conn.execute(_DELETE_TOMBSTONES, (*args, cutoff_ms)).rowcount
        conn.execute(_SHRINK, (superseded + tombstones, tid, partition))
    return high, (superseded, tombstones)
