"""Bulk loads into the embedded log: the key index dropped while a snapshot writes, built once.

Why: keeping ``records_by_key`` up to date costs SQLite 1.1-1.5 us a record on every append, a
third of the log's write cost, while ``CREATE INDEX`` over the same records sorts them and fills
the b-tree bottom-up at about 0.6 us a record. An initial snapshot writes each key once into a
log that holds (next to) nothing, and nothing looks a key up while it runs: streaming, and with
it the TOAST fill, starts only once it is done. So the snapshot drops the index when it starts
(:func:`defer`) and builds it when it ends (:func:`build`), before the stream appends a record.

What holds meanwhile:

* Appends and range reads do not use the index; records, offsets and the atomic
  records-plus-offsets commit are untouched, so a chunk and its progress still commit together.
* A key lookup (:meth:`EmbeddedLog.latest_value`) builds the index first: correct whenever it
  comes, and from any process.
* Compaction waits while this process loads in bulk (nothing to gain: every key is written
  once); a pass in a process that is not loading builds the index first. After a crash in the
  middle of a snapshot the index is missing in a log no process is loading, so the next
  compaction pass (or key lookup) builds it: nothing stays unindexed for good.
* Only a log holding at most :data:`DEFER_UP_TO_RECORDS` live records is loaded this way:
  building the index again covers every record of every topic, which would cost a large
  log more than the snapshot saves.

The index's absence is SQLite's own schema state, so this is no format change: any version of
cdc reads such a log (key lookups scan until the index is back).
"""

from __future__ import annotations

import sqlite3

from cdc.log.embedded.store import KEY_INDEX, KEY_INDEX_NAME, translated, write_transaction

#: The most live records a log may hold for a snapshot to drop its key index.
DEFER_UP_TO_RECORDS = 100_000

_PRESENT = "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?"
_LIVE = "SELECT coalesce(sum(record_count), 0) FROM partitions"
_DROP = f"DROP INDEX IF EXISTS {KEY_INDEX_NAME}"


def indexed(conn: sqlite3.Connection) -> bool:
    """Whether the key index exists (as of ``conn``'s view of the schema)."""
    with translated("looking the key index up"):
        return conn.execute(_PRESENT, (KEY_INDEX_NAME,)).fetchone() is not None


def defer(conn: sqlite3.Connection) -> bool:
    """Drop the key index if the log holds at most :data:`DEFER_UP_TO_RECORDS` live records;
    whether it is absent now. ``conn`` must not be inside a transaction."""
    with write_transaction(conn, "deferring the key index"):
        if conn.execute(_LIVE).fetchone()[0] > DEFER_UP_TO_RECORDS:
            return False
        conn.execute(_DROP)
    return True


def build(conn: sqlite3.Connection) -> bool:
    """Create the key index if it is missing; whether this call built it.

    Inside ``conn``'s open transaction it becomes part of it (committed or rolled back with
    it); otherwise it runs in a write transaction of its own.
    """
    if indexed(conn):
        return False
    if conn.in_transaction:
        with translated("building the key index"):
            conn.execute(KEY_INDEX)
        return True
    with write_transaction(conn, "building the key index"):
        conn.execute(KEY_INDEX)
    return True
