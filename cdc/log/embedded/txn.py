"""The embedded log's write transaction: records and source offsets, durable together."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING

from cdc.contracts import positions
from cdc.contracts.errors import LogError
from cdc.log.base import Record, TopicPartition, TransactionContext
from cdc.log.embedded import frames
from cdc.log.embedded.heads import Known, head_of
from cdc.log.embedded.store import (
    ADVANCE_PARTITION,
    DELETE_SOURCE_OFFSET,
    SELECT_NEXT_OFFSET,
    UPSERT_CONSUMER_OFFSET,
    UPSERT_SOURCE_OFFSET,
    TopicMeta,
    translated,
)
from cdc.log.offsets import decode_offset, encode_offset
from cdc.log.partitioner import partition_for
from cdc.support.clock import now_ms

if TYPE_CHECKING:
    from cdc.log.embedded.shared import LogState

#: Each ``(topic id, partition)``'s first new offset and its records, in order.
Placed = dict[tuple[int, int], tuple[int, list[Record]]]


class EmbeddedTransaction(TransactionContext):
    """One ``BEGIN IMMEDIATE`` transaction on the calling thread's connection.

    Holding SQLite's write lock from ``begin`` to ``commit`` is what keeps offsets right when
    another process (``cdc snapshot``) appends to the same log: each partition's next offset is
    read under the lock on first use, then counted up in Python for the rest of the transaction.
    Appended rows go straight into SQLite, which spills uncommitted pages to the WAL file, so a
    transaction of any size takes bounded memory.

    Use it from the thread that called :meth:`EmbeddedLog.begin`. As a context manager it commits
    on success and aborts on an exception. After a failed ``append`` the transaction can only be
    aborted, because SQLite may hold part of the failed batch.

    Args:
        state: the log's parts: topics are looked up and created in its catalog, and a commit
            wakes the polls waiting on its append signal.
        conn: the calling thread's connection (``state.connections.get()``).
    """

    def __init__(self, state: LogState, conn: sqlite3.Connection) -> None:
        self._catalog = state.catalog
        self._appends = state.appends
        self._conn = conn
        self._appender = state.appender
        self._heads = state.heads
        # Heads stored by this transaction, by topic id: shared with the log on commit.
        self._new_heads: dict[int, dict[bytes, int]] = {}
        self._next: dict[tuple[int, int], int] = {}
        self._first: dict[tuple[int, int], int] = {}
        self._topics: dict[str, TopicMeta] = {}  # created by this transaction, cached on commit
        self._state = "open"
        if conn.in_transaction:
            raise LogError("embedded log: this thread already has an open transaction")
        with translated("starting a transaction"):
            conn.execute("BEGIN IMMEDIATE")

    def append(self, records: Sequence[Record]) -> None:
        """Append records; offsets follow the order of ``records`` within each partition.

        A record for a topic that does not exist yet creates it, with the log's partition count,
        inside this transaction (so an abort removes it again).

        Raises:
            LogUnavailable: the database is locked beyond the busy timeout.
            LogFatal: the database cannot be written (disk full, read-only, corrupt).
        """
        self._check_open()
        if not records:
            return
        try:
            ts = now_ms()
            for (tid, partition), (first, members) in self._by_partition(records).items():
                self._insert(tid, partition, first, ts, members)
        except BaseException:
            self._state = "failed"
            raise

    def store_offsets(self, offsets: positions.Offsets) -> None:
        """Upsert source offsets as JSON in this transaction; a ``None`` value deletes the key.

        Raises:
            PositionMovedBackwards: ``offsets`` carry a position before the stored one (read
                here, under the write lock); nothing is stored and the transaction can only
                be aborted (see :mod:`cdc.contracts.positions`).
        """
        self._check_open()
        upserts = [(k, encode_offset(v)) for k, v in offsets.items() if v is not None]
        deletes = [(k,) for k, v in offsets.items() if v is None]
        position = positions.carried(offsets)
        try:
            if position is not None:
                stored = {}
                with translated("reading source offsets"):
                    for key, _ in upserts:
                        row = self._conn.execute(
                            "SELECT value FROM source_offsets WHERE key = ?", (key,)
                        ).fetchone()
                        if row is not None:
                            stored[key] = decode_offset(row[0])
                positions.check_forward(position, stored)
            with translated("storing source offsets"):
                self._conn.executemany(UPSERT_SOURCE_OFFSET, upserts)
                self._conn.executemany(DELETE_SOURCE_OFFSET, deletes)
        except BaseException:
            self._state = "failed"
            raise

    def store_group_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int], consumer: object = None
    ) -> None:
        """Commit a consumer group's next offsets with this transaction: a task that reads the
        log and writes to it (a live join view, :mod:`cdc.views`) then does both exactly once.
        ``consumer`` (the group's member) is not needed here: SQLite's write lock is the fence.
        """
        self._check_open()
        rows = [(group, tp.topic, tp.partition, off) for tp, off in offsets.items()]
        try:
            with translated("storing consumer offsets"):
                self._conn.executemany(UPSERT_CONSUMER_OFFSET, rows)
        except BaseException:
            self._state = "failed"
            raise

    def commit(self) -> None:
        """Advance the partitions' high-water marks and commit; durable on return.

        With ``durability="full"`` the WAL is synced before this returns; with ``"normal"`` a
        power loss (not a process crash) may lose the last transactions.
        """
        self._check_open()
        advances = [
            (nxt, nxt - self._first[tp], nxt - self._first[tp], tp[0], tp[1])
            for tp, nxt in self._next.items()
        ]
        try:
            with translated("committing"):
                self._conn.executemany(ADVANCE_PARTITION, advances)
                self._conn.execute("COMMIT")
        except BaseException:
            self._state = "failed"
            with suppress(LogError):  # the commit's own error is the one to report
                self.abort()
            raise
        self._state = "committed"
        self._catalog.remember(self._topics)
        for topic_id, heads in self._new_heads.items():
            self._heads.remember(heads, topic_id)
        self._appends.notify()

    def abort(self) -> None:
        """Roll back everything appended and stored; a no-op once committed or aborted."""
        if self._state in ("committed", "aborted"):
            return
        self._state = "aborted"
        if self._conn.in_transaction:
            with translated("aborting"):
                self._conn.execute("ROLLBACK")

    def _check_open(self) -> None:
        if self._state != "open":
            raise LogError(f"embedded log: the transaction is {self._state}")

    def _insert(self, tid: int, partition: int, first: int, ts: int, records: list[Record]) -> None:
        """One partition's records at consecutive offsets from ``first``, each wrapped value
        without its head (:mod:`cdc.log.embedded.heads`), through the log's appender."""
        where = frames.Range(tid, partition, first, first + len(records))
        self._appender.insert(self._conn, self, where, ts, records)

    def known(self, topic_id: int) -> Known:
        """The heads a value of the topic may be stored without: the committed ones and this
        transaction's."""
        known = self._heads.known(topic_id)
        new = self._new_heads.get(topic_id)
        return known + list(new.items()) if new else known

    def store_head(self, topic_id: int, value: bytes | None) -> None:
        head = None if value is None else head_of(value)
        if head is None:  # cannot happen: the appender flags only wrapped values
            raise LogError("embedded log: a value flagged as wrapped has no head")
        with translated("storing a value head"):
            head_id = self._heads.store(self._conn, head)
        self._new_heads.setdefault(topic_id, {})[head] = head_id

    def _by_partition(self, records: Sequence[Record]) -> Placed:
        """The records of each ``(topic id, partition)``, in order, and the partition's first
        new offset; the transaction's next offsets move past them."""
        topic = records[0].topic
        groups: dict[tuple[int, int], list[Record]] = {}
        if all(r.topic == topic for r in records):
            meta = self._meta(topic)
            if meta.partitions == 1:  # the common shape: one table's batch, one partition
                groups[meta.id, 0] = list(records)
            else:
                count = meta.partitions
                for record in records:
                    tp = (meta.id, partition_for(record.key, count))
                    groups.setdefault(tp, []).append(record)
        else:
            for record in records:
                meta = self._meta(record.topic)
                tp = (meta.id, partition_for(record.key, meta.partitions))
                groups.setdefault(tp, []).append(record)
        placed: Placed = {}
        for tp, members in groups.items():
            first = self._next_offset(tp)
            self._next[tp] = first + len(members)
            placed[tp] = (first, members)
        return placed

    def _next_offset(self, tp: tuple[int, int]) -> int:
        offset = self._next.get(tp)
        if offset is None:
            with translated("reading the next offset"):
                offset = int(self._conn.execute(SELECT_NEXT_OFFSET, tp).fetchone()[0])
            self._first[tp] = offset
            self._next[tp] = offset
        return offset

    def _meta(self, topic: str) -> TopicMeta:
        meta = self._topics.get(topic) or self._catalog.lookup(self._conn, topic)
        if meta is None:
            meta = self._catalog.create(self._conn, topic)
            self._topics[topic] = meta
        return meta
