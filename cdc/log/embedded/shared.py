"""What an embedded log shares with its transactions and consumers, as named parts.

The log owns one of each and hands them over in a :class:`LogState`: the per-thread
connections (:class:`Connections`), the topic cache with the SQL that creates topics
(:class:`TopicCatalog`), and the signal a commit gives waiting polls (:class:`AppendSignal`).
Transactions and consumers use these, never the log's own members, so what each depends on is
written in its constructor.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import orjson

from cdc.contracts.errors import LogError
from cdc.log.embedded.appender import Appender
from cdc.log.embedded.frames import ValueFrames
from cdc.log.embedded.heads import ValueHeads
from cdc.log.embedded.store import (
    INSERT_PARTITION,
    INSERT_TOPIC,
    SELECT_TOPIC,
    Durability,
    TopicMeta,
    Whole,
    connect,
    read_snapshot,
    translated,
    write_transaction,
)


class Connections:
    """One SQLite connection per thread, closed by :meth:`close` (a live thread's at its next
    :meth:`get`).

    Args:
        database: the database file.
        durability: see :class:`~cdc.log.embedded.log.EmbeddedLog`.
        busy_timeout_ms: how long a write waits for another writer's lock.
    """

    def __init__(self, database: Path, durability: Durability, busy_timeout_ms: int) -> None:
        self.database = database
        self._durability: Durability = durability
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._by_thread: dict[int, sqlite3.Connection] = {}
        self._lock = threading.Lock()
        self.closed = False

    def get(self) -> sqlite3.Connection:
        """The calling thread's connection, opened on first use.

        Raises:
            LogError: the log is closed (the calling thread's connection is closed then).
        """
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if self.closed:
            if conn is not None:
                self._local.conn = None
                self._close_own(conn)
            raise LogError("embedded log: the log is closed")
        if conn is None:
            conn = connect(self.database, self._durability, self._busy_timeout_ms)
            self._register(conn)
            self._local.conn = conn
        return conn

    def close(self) -> bool:
        """Close the log's connections; ``False`` if it was closed already.

        The calling thread's connection and those of threads that ended are closed now. A
        connection another live thread holds is left to that thread, which closes it at its
        next :meth:`get` (and gets :class:`LogError`): closing a connection while another
        thread is inside one of its statements crashes the process (CPython's sqlite3 frees
        the database handle under the running statement).
        """
        with self._lock:
            if self.closed:
                return False
            self.closed = True
            me, alive = threading.get_ident(), _alive_threads()
            closing = [c for i, c in self._by_thread.items() if i == me or i not in alive]
            self._by_thread = {i: c for i, c in self._by_thread.items() if i != me and i in alive}
        for conn in closing:
            conn.close()
        return True

    def _close_own(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            if self._by_thread.get(threading.get_ident()) is conn:
                del self._by_thread[threading.get_ident()]
        conn.close()

    def __len__(self) -> int:
        """How many threads hold an open connection."""
        return len(self._by_thread)

    def _register(self, conn: sqlite3.Connection) -> None:
        # Connections of threads that ended are closed here, so a process that starts threads
        # over and over does not pile up open connections until close().
        threading.current_thread()  # registers a thread that threading did not start
        me = threading.get_ident()
        with self._lock:
            # Which threads live is read under the lock: read before it, a thread that started
            # and registered in between looked ended, and its connection was closed under it.
            alive = _alive_threads()
            stale = [i for i in self._by_thread if i not in alive or i == me]
            for ident in stale:
                self._by_thread.pop(ident).close()
            self._by_thread[me] = conn


def _alive_threads() -> set[int | None]:
    return {thread.ident for thread in threading.enumerate()}


class TopicCatalog:
    """The topics of one log: looked up once and cached, created with the log's settings.

    Args:
        partitions: partition count of topics created here.
        tombstone_retention_ms: the ``delete.retention.ms`` recorded in a new topic's config.
    """

    def __init__(self, partitions: int, tombstone_retention_ms: int) -> None:
        self.partitions = partitions
        self.tombstone_retention_ms = tombstone_retention_ms
        self._topics: dict[str, TopicMeta] = {}
        self._lock = threading.Lock()

    def lookup(self, conn: sqlite3.Connection, topic: str) -> TopicMeta | None:
        """The topic's id and partition count, or ``None`` if it does not exist (yet)."""
        meta = self._topics.get(topic)
        if meta is not None:
            return meta
        # Another process may have created it; topics are never deleted, so caching is safe...
        with translated("looking a topic up"):
            row = conn.execute(SELECT_TOPIC, (topic,)).fetchone()
        if row is None:
            return None
        meta = TopicMeta(*row)
        if not conn.in_transaction:  # ...but inside one, the row may be its own, uncommitted
            with self._lock:
                self._topics[topic] = meta
        return meta

    def meta(self, conn: sqlite3.Connection, topic: str) -> TopicMeta:
        """Like :meth:`lookup`, for a topic that must exist.

        Raises:
            LogError: the topic does not exist.
        """
        meta = self.lookup(conn, topic)
        if meta is None:
            raise LogError(f"embedded log: unknown topic {topic!r}")
        return meta

    def create(self, conn: sqlite3.Connection, name: str) -> TopicMeta:
        """Insert a topic and its partitions; the caller holds the write transaction and
        :meth:`remember`\\ s the topic once it committed."""
        config = orjson.dumps(
            {
                "cleanup.policy": "compact",
                "delete.retention.ms": str(self.tombstone_retention_ms),
            }
        )
        with translated("creating a topic"):
            conn.execute(INSERT_TOPIC, (name, self.partitions, config.decode()))
            meta = TopicMeta(*conn.execute(SELECT_TOPIC, (name,)).fetchone())
            conn.executemany(INSERT_PARTITION, [(meta.id, p) for p in range(meta.partitions)])
        return meta

    def ensure(self, conn: sqlite3.Connection, names: Sequence[str]) -> None:
        """Create the missing topics of ``names`` in a transaction of their own."""
        missing = [name for name in dict.fromkeys(names) if self.lookup(conn, name) is None]
        if not missing:
            return
        created = {}
        with write_transaction(conn, "creating topics"):
            for name in missing:
                created[name] = self.create(conn, name)
        self.remember(created)

    def remember(self, topics: Mapping[str, TopicMeta]) -> None:
        """Cache topics whose creation committed."""
        if topics:
            with self._lock:
                self._topics.update(topics)


class AppendSignal:
    """Counts this process's commits and wakes the polls waiting for one.

    Another process's commit cannot signal this one: a poll re-checks at an interval as well.
    """

    def __init__(self) -> None:
        self.generation = 0  # read without the lock: a stale value only costs one more fetch
        self.closed = False
        self._appended = threading.Condition(threading.Lock())

    def notify(self) -> None:
        """A transaction committed: wake every waiting poll."""
        with self._appended:
            self.generation += 1
            self._appended.notify_all()

    def wait(self, seen: int, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` unless a commit came after ``seen`` or the log closed."""
        with self._appended:
            if self.generation == seen and not self.closed:
                self._appended.wait(timeout_s)

    def close(self) -> None:
        """The log closed: wake every waiting poll, and wait no more."""
        with self._appended:
            self.closed = True
            self._appended.notify_all()


@dataclass(frozen=True, slots=True)
class LogState:
    """The parts of an embedded log its transactions and consumers work with."""

    connections: Connections
    catalog: TopicCatalog
    appends: AppendSignal
    heads: ValueHeads
    frames: ValueFrames
    appender: Appender

    @contextmanager
    def reading(self, conn: sqlite3.Connection) -> Iterator[Whole]:
        """One read transaction (or the thread's open write transaction) to read records and
        their values in: ``whole`` for what it reads.

        Compaction deletes a frame with its last record, so a frame is looked up in the
        snapshot its record was read in, where both are still there.
        """
        committed = not conn.in_transaction  # a write transaction's frames may be aborted
        with read_snapshot(conn):
            yield partial(self.whole, conn, committed=committed)

    def whole(
        self,
        conn: sqlite3.Connection,
        head_id: int | None,
        frame_id: int | None,
        stored: bytes,
        *,
        committed: bool,
    ) -> bytes:
        """The value stored as ``stored`` without its frame and head (either may be none), read
        in a read transaction (``committed``) or a write transaction."""
        if frame_id is not None:
            stored = self.frames.framed(conn, frame_id, stored, committed=committed)
        if head_id is not None:
            stored = self.heads.whole(conn, head_id, stored)
        return stored
