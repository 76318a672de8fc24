"""The embedded log's SQLite layer: schema, connections, error translation, row decoding.

Everything that knows SQL text for the schema, pragmas and error codes lives here, so the log,
transaction, consumer and compaction modules only run prepared statements. The statements are
module constants: :mod:`sqlite3` caches prepared statements by their text, so the hot paths
(append, poll) never re-parse SQL.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Literal, NamedTuple

from cdc.contracts.errors import LogError, LogFatal, LogUnavailable
from cdc.log.base import StoredRecord
from cdc.log.embedded import frames
from cdc.support.retry import Backoff, retry

DB_FILE = "log.sqlite3"
SCHEMA_VERSION = 5
BUSY_TIMEOUT_MS = 60_000
# Per connection; also where a large uncommitted transaction spills to the WAL file, so it bounds
# the memory a 1,000,000-row source transaction takes.
CACHE_KIB = 32 * 1024
# 16 KiB pages: appends of ~300-byte records with the key index cost 6.3 instead of 9.5 us a
# record with random keys (4.7 instead of 5.0 with sequential ones), range reads are ~15% faster,
# and a one-record commit takes 0.22 instead of 0.18 ms (measured here, SQLite 3.40, WAL, FULL).
PAGE_SIZE = 16 * 1024
# A checkpointed WAL file is truncated back to this size, so one large transaction does not leave
# a huge file behind for good.
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024
# No auto_vacuum: the pages compaction frees go to SQLite's freelist and the next appends take
# them again, so the file stays at the most the log held between two passes. Measured
# (bench/scale.py soak, 12 min of 5,000 updates/s over 10k keys, a pass a minute): 15,358
# pages from minute 5 on, 1-14k of them free at each sample. Incremental vacuum would give
# pages back only for the next minute's appends to take again, and write pointer-map pages.

Durability = Literal["full", "normal"]

# A value written with ``schemas.enable`` is ``{"schema":<S>,"payload":<P>}``, where the head up
# to the payload is the same few KB for every record of a table version. The log keeps each
# head once and a record only its payload and the head's id (``records.head_id``, NULL for a
# value stored whole): the bytes written per record drop ~7x, and SQLite's CPU with them
# (:mod:`cdc.log.embedded.heads`). Readers get the whole value back, byte for byte.
VALUE_HEADS = """CREATE TABLE value_heads (
        id INTEGER PRIMARY KEY,
        head BLOB NOT NULL UNIQUE
    )"""

# A key's records, for compaction and latest-by-key lookups. A bulk load drops it and builds it
# again in one pass (:mod:`cdc.log.embedded.bulk`): SQLite's CREATE INDEX sorts and fills the
# b-tree bottom-up, at about 0.6 us a record, where keeping it up to date costs 1.1-1.5 us a
# record on every append.
KEY_INDEX_NAME = "records_by_key"
KEY_INDEX = (
    "CREATE INDEX IF NOT EXISTS records_by_key ON records (topic_id, partition, key, offset)"
)

# The records table is WITHOUT ROWID: rows are clustered by (topic, partition, offset), so a
# consumer's range read is one sequential b-tree scan, and an append updates two b-trees
# (records and the key index) instead of three. Measured with bench/log_throughput.py against a
# rowid table with the same primary key: append and read rates were equal within the noise of
# this 2-core machine (1M records: ~192k/s and ~600k/s either way), so fewer b-trees won.
SCHEMA = (
    """CREATE TABLE topics (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        partitions INTEGER NOT NULL,
        config TEXT NOT NULL
    )""",
    # next_offset is the high-water mark: it survives compaction deleting a partition's newest
    # records, so offsets are never reused. record_count and dirty feed topics() and
    # maybe_compact() without a COUNT(*) over the records.
    """CREATE TABLE partitions (
        topic_id INTEGER NOT NULL,
        partition INTEGER NOT NULL,
        next_offset INTEGER NOT NULL,
        record_count INTEGER NOT NULL,
        dirty INTEGER NOT NULL,
        PRIMARY KEY (topic_id, partition)
    ) WITHOUT ROWID""",
    """CREATE TABLE records (
        topic_id INTEGER NOT NULL,
        partition INTEGER NOT NULL,
        offset INTEGER NOT NULL,
        key BLOB,
        value BLOB,
        ts_ms INTEGER NOT NULL,
        head_id INTEGER,
        pos BLOB,
        frame_id INTEGER,
        PRIMARY KEY (topic_id, partition, offset)
    ) WITHOUT ROWID""",
    KEY_INDEX,
    VALUE_HEADS,
    frames.VALUE_FRAMES,
    """CREATE TABLE source_offsets (
        key TEXT PRIMARY KEY,
        value BLOB NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE consumer_offsets (
        "group" TEXT NOT NULL,
        topic TEXT NOT NULL,
        partition INTEGER NOT NULL,
        next_offset INTEGER NOT NULL,
        PRIMARY KEY ("group", topic, partition)
    ) WITHOUT ROWID""",
)

_COLUMNS = "topic_id, partition, offset, key, value, ts_ms, head_id, pos"
#: A record without a frame (``executemany``), and with one (the native appender).
INSERT_RECORD = f"INSERT INTO records ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
INSERT_FRAMED = f"INSERT INTO records ({_COLUMNS}, frame_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
SELECT_RANGE = (
    "SELECT offset, key, value, ts_ms, head_id, pos, frame_id FROM records"
    " WHERE topic_id = ? AND partition = ? AND offset >= ? ORDER BY offset LIMIT ?"
)
SELECT_NEXT_OFFSET = "SELECT next_offset FROM partitions WHERE topic_id = ? AND partition = ?"
ADVANCE_PARTITION = (
    "UPDATE partitions SET next_offset = ?, record_count = record_count + ?, dirty = dirty + ?"
    " WHERE topic_id = ? AND partition = ?"
)
SELECT_TOPIC = "SELECT id, partitions FROM topics WHERE name = ?"
INSERT_TOPIC = "INSERT OR IGNORE INTO topics (name, partitions, config) VALUES (?, ?, ?)"
INSERT_PARTITION = (
    "INSERT OR IGNORE INTO partitions VALUES (?, ?, 0, 0, 0)"  # a new partition starts at 0
)
UPSERT_SOURCE_OFFSET = (
    "INSERT INTO source_offsets (key, value) VALUES (?, ?)"
    " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
DELETE_SOURCE_OFFSET = "DELETE FROM source_offsets WHERE key = ?"
UPSERT_CONSUMER_OFFSET = (
    'INSERT INTO consumer_offsets ("group", topic, partition, next_offset) VALUES (?, ?, ?, ?)'
    ' ON CONFLICT ("group", topic, partition) DO UPDATE SET next_offset = excluded.next_offset'
)


def _slot_setters() -> tuple[Callable[[StoredRecord, Any], None], ...] | None:
    names = tuple(f.name for f in dataclasses.fields(StoredRecord))
    plain = "__slots__" in vars(StoredRecord) and not hasattr(StoredRecord, "__post_init__")
    fields = ("topic", "partition", "offset", "key", "value", "timestamp_ms", "pos")
    if names != fields or not plain:
        return None
    return tuple(getattr(StoredRecord, name).__set__ for name in names)


_SETTERS = _slot_setters()


#: ``whole(head_id, frame_id, stored)``: the value stored without its head and frame.
Whole = Callable[[int | None, int | None, bytes], bytes]


def stored_records(topic: str, partition: int, rows: list[Any], whole: Whole) -> list[StoredRecord]:
    """``StoredRecord`` objects for ``(offset, key, value, ts_ms, head_id, pos, frame_id)``
    rows of one partition; ``whole`` gives back a value stored without its head or frame.

    The frozen dataclass's ``__init__`` goes through ``object.__setattr__`` per field and costs
    more than SQLite's fetch; setting the slots directly halves the cost of a read. Used only
    while ``StoredRecord`` is exactly the plain slotted dataclass checked above, otherwise the
    normal constructor runs.
    """
    if _SETTERS is None:
        return [
            StoredRecord(
                topic, partition, o, k, v if h is None and f is None else whole(h, f, v), t, p
            )
            for o, k, v, t, h, p, f in rows
        ]
    set_topic, set_partition, set_offset, set_key, set_value, set_ts, set_pos = _SETTERS
    new = object.__new__
    out: list[StoredRecord] = []
    append = out.append
    for offset, key, value, ts, head_id, pos, frame_id in rows:
        record = new(StoredRecord)
        set_topic(record, topic)
        set_partition(record, partition)
        set_offset(record, offset)
        set_key(record, key)
        framed = head_id is not None or frame_id is not None
        set_value(record, whole(head_id, frame_id, value) if framed else value)
        set_ts(record, ts)
        set_pos(record, pos)
        append(record)
    return out


class TopicMeta(NamedTuple):
    """A topic's row id and partition count; both fixed once the topic exists."""

    id: int
    partitions: int


# Primary result codes (extended codes carry these in their low byte).
_UNAVAILABLE = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def translate(exc: sqlite3.Error, doing: str) -> LogError:
    """The framework error for a SQLite error: a lock is retriable, everything else is not.

    Corruption, a read-only or full disk, an I/O error or a misuse of the API cannot be fixed by
    trying again, so they stop the pipeline with a clear message instead of looping.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    name = getattr(exc, "sqlite_errorname", type(exc).__name__)
    if code is None and "locked" in str(exc):
        return LogUnavailable(f"embedded log: {doing} failed: {exc} ({name})")
    return translate_code(code, f"{exc} ({name})", doing)


def translate_code(code: int | None, detail: str, doing: str) -> LogError:
    """:func:`translate` for a SQLite result code and its message (the native appender's)."""
    message = f"embedded log: {doing} failed: {detail}"
    if code is not None and code & 0xFF in _UNAVAILABLE:
        return LogUnavailable(message)
    return LogFatal(message)


@contextmanager
def translated(doing: str) -> Iterator[None]:
    """Translate :class:`sqlite3.Error` raised inside the block (``raise ... from exc``)."""
    try:
        yield
    except sqlite3.Error as exc:
        raise translate(exc, doing) from exc


@contextmanager
def write_transaction(conn: sqlite3.Connection, doing: str) -> Iterator[sqlite3.Connection]:
    """A short ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on error."""
    with translated(doing):
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with suppress(sqlite3.Error):  # the first error is the one to report
                    conn.execute("ROLLBACK")
            raise


@contextmanager
def read_snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """Run several reads against one consistent snapshot (or the thread's open transaction)."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def connect(
    path: Path, durability: Durability, busy_timeout_ms: int = BUSY_TIMEOUT_MS
) -> sqlite3.Connection:
    """A connection with the log's pragmas, in autocommit mode (transactions are explicit).

    ``check_same_thread`` is off only so :meth:`EmbeddedLog.close` can close every thread's
    connection; each connection is still used by one thread at a time.
    """
    with translated("opening the database"):
        conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, cached_statements=64
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            # Only a new, empty database takes it (before WAL mode writes the header); an
            # existing log keeps the page size it was created with.
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            _enable_wal(conn)
            sync = "FULL" if durability == "full" else "NORMAL"
            conn.execute(f"PRAGMA synchronous = {sync}")
            conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
            conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
        except BaseException:
            conn.close()
            raise
    return conn


def _enable_wal(conn: sqlite3.Connection) -> None:
    # Switching to WAL needs an exclusive moment that the busy handler does not always cover when
    # several processes open a new log at once, so retry briefly.
    mode = retry(
        lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone()[0],
        _busy,
        Backoff.fixed(0.05),
        attempts=50,
    )
    if str(mode).lower() != "wal":
        raise LogFatal(f"embedded log: cannot use WAL mode (journal_mode is {mode})")


def _busy(exc: Exception) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode & 0xFF in _UNAVAILABLE


def migrate(conn: sqlite3.Connection) -> None:
    """Create the schema in a new database; refuse a database written by a newer version.

    ``PRAGMA user_version`` holds the schema version; a future version adds its migration steps
    here, each under the same write lock so two processes never migrate at once. A database
    already at this version is left alone without taking the write lock: opening a log to read
    it (``cdc status``, ``cdc tail``, a test's poll) must not queue behind a busy writer, which
    under a snapshot's back-to-back commits could hold it off for seconds.
    """
    with translated("reading the schema version"):
        if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
    with write_transaction(conn, "creating the schema"):
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise LogFatal(
                f"embedded log: schema version {version} is newer than this version "
                f"of cdc understands ({SCHEMA_VERSION})"
            )
        if version == 0:
            for statement in SCHEMA:
                conn.execute(statement)
        if version == 1:  # before value heads: every value is stored whole (head_id NULL)
            conn.execute("ALTER TABLE records ADD COLUMN head_id INTEGER")
            conn.execute(VALUE_HEADS)
        if version in (1, 2):
            # Before the position moved beside the value: the records' pos is NULL, and
            # readers take it from the value's source.pos (cdc.envelope.encode.record_pos).
            conn.execute("ALTER TABLE records ADD COLUMN pos BLOB")
        if version in (1, 2, 3):  # before value frames: no record has one (frame_id NULL)
            conn.execute("ALTER TABLE records ADD COLUMN frame_id INTEGER")
            conn.execute(frames.VALUE_FRAMES)
        if version == 4:  # frames without their records' ranges, never collected
            frames.migrate_from_4(conn)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
