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
appended (compaction removes records, not frames: the table holds well under 0.1% of the bytes
ever appended). A frame is inserted in the writing transaction, so it commits with its records
or not at all; readers cache only frames read outside a transaction (committed, so never
changed: an aborted frame's id may be used again).
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Final

#: The fewest records of one append that get a frame, and the fewest bytes it must hold.
MIN_RECORDS: Final = 1000
MIN_BYTES: Final = 64
#: The most frames a reader keeps. A long-running reader meets a new frame every few thousand
#: records, and a consumer reads its range in order, so the frames it needs next are the ones
#: it read last: the cache starts again when full rather than growing with the log's history.
CACHED: Final = 256

VALUE_FRAMES: Final = """CREATE TABLE IF NOT EXISTS value_frames (
        id INTEGER PRIMARY KEY,
        prefix BLOB NOT NULL,
        suffix BLOB NOT NULL
    )"""
_INSERT = "INSERT INTO value_frames (prefix, suffix) VALUES (?, ?)"
_FRAME = "SELECT prefix, suffix FROM value_frames WHERE id = ?"


def store(conn: sqlite3.Connection, prefix: bytes, suffix: bytes) -> int:
    """The id of a new frame, inserted in ``conn``'s open transaction."""
    cursor = conn.execute(_INSERT, (prefix, suffix))
    frame_id = cursor.lastrowid
    assert frame_id is not None  # an INSERT into a rowid table always sets it
    return frame_id


class ValueFrames:
    """Committed frames by id, read once per process."""

    def __init__(self) -> None:
        #: At most :data:`CACHED` frames.
        self._by_id: dict[int, tuple[bytes, bytes]] = {}
        self._lock = threading.Lock()

    def framed(self, conn: sqlite3.Connection, frame_id: int, stored: bytes) -> bytes:
        """The value (or head payload) stored as ``stored`` in frame ``frame_id``."""
        frame = self._by_id.get(frame_id)
        if frame is None:
            row = conn.execute(_FRAME, (frame_id,)).fetchone()
            if row is None:
                raise sqlite3.DatabaseError(f"value frame {frame_id} is missing from value_frames")
            frame = (bytes(row[0]), bytes(row[1]))
            if not conn.in_transaction:
                with self._lock:
                    if len(self._by_id) >= CACHED:
                        self._by_id.clear()
                    self._by_id[frame_id] = frame
        return b"%b%b%b" % (frame[0], stored, frame[1])
