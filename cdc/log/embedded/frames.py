"""Value frames: the bytes a large batch's values all start and end with, stored once.

The records of a snapshot piece (thousands of rows of one table, read at one moment) are
Debezium envelopes that differ only inside ``after``: ``{"before":null,"after":{`` before it,
and the ``source`` block, ``op`` and timestamps after it (~300 of a ~550-byte value), are the
same for all of them. The native appender finds the prefix and suffix that a few values
spread over a batch share (after their value head, :mod:`cdc.log.embedded.heads`), stores them
once in ``value_frames`` and each record that has both only what lies between, with the
frame's id (``records.frame_id``); a record that does not fit (a row held back from an earlier
piece, a marked first row) is stored whole. The log writes about a third of the bytes, which
is what its commits and checkpoints spend their time on.
Readers get the value back byte for byte: ``prefix + stored + suffix`` (inside the head).

A frame is stored only for a batch of at least :data:`MIN_RECORDS` records sharing at least
:data:`MIN_BYTES`, so there is at most one frame row for every ``MIN_RECORDS`` records
appended. A frame is inserted in the writing transaction, so it commits with its records or not
at all; readers cache only frames read outside a write transaction (committed, so never
changed: an aborted frame's id may be used again, a committed one never is: ``AUTOINCREMENT``).

Frames go with their last record (:func:`collect`): compaction deletes the records a frame was
kept for, and a log that keeps updating the same keys would otherwise keep a frame for every
batch it ever appended. A frame's records are one append's, so they sit in one partition at the
offsets that append took, which the frame row keeps: whether any is left is one seek and a short
scan of that range on the primary key, with no index on ``frame_id`` for appends to keep up to
date. The check runs in the transaction that deleted the records, under the write lock, so an
append's frame (uncommitted, its records with it) is never seen, let alone collected; a reader
resolves a record's frame in the read transaction it read the record in (:mod:`.shared`), so
it never looks up a frame that went with a record it still holds.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from typing import Final, NamedTuple

#: The fewest records of one append that get a frame, and the fewest bytes it must hold.
MIN_RECORDS: Final = 1000
MIN_BYTES: Final = 64
#: The most frames a reader keeps. A long-running reader meets a new frame every few thousand
#: records, and a consumer reads its range in order, so the frames it needs next are the ones
#: it read last: the cache starts again when full rather than growing with the log's history.
CACHED: Final = 256

# The frame's records are those of partition (topic_id, partition) at offsets
# [first_offset, end_offset) whose frame_id is this id.
VALUE_FRAMES: Final = """CREATE TABLE IF NOT EXISTS value_frames (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        prefix BLOB NOT NULL,
        suffix BLOB NOT NULL,
        topic_id INTEGER NOT NULL,
        partition INTEGER NOT NULL,
        first_offset INTEGER NOT NULL,
        end_offset INTEGER NOT NULL
    )"""
_INSERT = (
    "INSERT INTO value_frames (prefix, suffix, topic_id, partition, first_offset, end_offset)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
_FRAME = "SELECT prefix, suffix FROM value_frames WHERE id = ?"
# A frame none of whose records is left.
_COLLECT = """
    DELETE FROM value_frames AS f
    WHERE f.id = ? AND NOT EXISTS (
        SELECT 1 FROM records AS r
        WHERE r.topic_id = f.topic_id AND r.partition = f.partition
          AND r.offset >= f.first_offset AND r.offset < f.end_offset AND r.frame_id = f.id
    )
"""
# Schema version 4 kept no range and no AUTOINCREMENT: the table is made again (a few rows, one
# for every thousand records appended), the ranges taken from the records in one pass (a full
# scan, once); frames no record uses are left out, and ids go on above the highest one given.
_MIGRATE = (
    "ALTER TABLE value_frames RENAME TO value_frames_4",
    VALUE_FRAMES,
    """INSERT INTO value_frames
        SELECT f.id, f.prefix, f.suffix, r.topic_id, r.partition, r.low, r.high
        FROM value_frames_4 AS f JOIN (
            SELECT frame_id, topic_id, partition, min(offset) AS low, max(offset) + 1 AS high
            FROM records WHERE frame_id IS NOT NULL GROUP BY frame_id
        ) AS r ON r.frame_id = f.id""",
    "DELETE FROM sqlite_sequence WHERE name = 'value_frames'",
    """INSERT INTO sqlite_sequence (name, seq)
        SELECT 'value_frames', coalesce(max(id), 0) FROM value_frames_4""",
    "DROP TABLE value_frames_4",
)


class Range(NamedTuple):
    """Where a frame's records are: one partition's offsets ``[first, end)``."""

    topic_id: int
    partition: int
    first: int
    end: int


def store(conn: sqlite3.Connection, prefix: bytes, suffix: bytes, where: Range) -> int:
    """The id of a new frame for the records at ``where``, inserted in ``conn``'s open
    transaction."""
    cursor = conn.execute(_INSERT, (prefix, suffix, *where))
    frame_id = cursor.lastrowid
    assert frame_id is not None  # an INSERT into a rowid table always sets it
    return frame_id


def collect(conn: sqlite3.Connection, frame_ids: Iterable[int | None]) -> int:
    """Delete the frames of ``frame_ids`` (those of records just deleted, in ``conn``'s open
    write transaction) that no record uses any more; how many went."""
    return sum(conn.execute(_COLLECT, (i,)).rowcount for i in set(frame_ids) if i is not None)


def migrate_from_4(conn: sqlite3.Connection) -> None:
    """Version 4's frames with their records' ranges (in ``conn``'s open transaction)."""
    for statement in _MIGRATE:
        conn.execute(statement)


class ValueFrames:
    """Committed frames by id, read once per process."""

    def __init__(self) -> None:
        #: At most :data:`CACHED` frames.
        self._by_id: dict[int, tuple[bytes, bytes]] = {}
        self._lock = threading.Lock()

    def framed(
        self, conn: sqlite3.Connection, frame_id: int, stored: bytes, *, committed: bool
    ) -> bytes:
        """The value (or head payload) stored as ``stored`` in frame ``frame_id``; read in a
        read transaction (``committed``: the frame may be kept) or a write transaction."""
        frame = self._by_id.get(frame_id)
        if frame is None:
            row = conn.execute(_FRAME, (frame_id,)).fetchone()
            if row is None:
                raise sqlite3.DatabaseError(f"value frame {frame_id} is missing from value_frames")
            frame = (bytes(row[0]), bytes(row[1]))
            if committed:
                with self._lock:
                    if len(self._by_id) >= CACHED:
                        self._by_id.clear()
                    self._by_id[frame_id] = frame
        return b"%b%b%b" % (frame[0], stored, frame[1])
