"""The embedded log's consumer: every partition of its topics, positions kept in memory."""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from operator import itemgetter, length_hint
from typing import TYPE_CHECKING, Any

from cdc.contracts.errors import LogError
from cdc.log.base import PartitionsCallback, StartOffsets, StoredRecord, TopicPartition, fitting
from cdc.log.embedded.store import (
    SELECT_RANGE,
    UPSERT_CONSUMER_OFFSET,
    Whole,
    stored_records,
    translated,
    write_transaction,
)

if TYPE_CHECKING:
    from cdc.log.embedded.shared import LogState

# Another process's commit cannot signal this one, so an idle poll re-checks at this interval.
POLL_INTERVAL_S = 0.02
DATA_VERSION = "PRAGMA data_version"
SELECT_COMMITTED = 'SELECT topic, partition, next_offset FROM consumer_offsets WHERE "group" = ?'
# A consumer reads each page once, in offset order, which the system's page cache serves as
# well; at the writer's cache size (store.CACHE_KIB) each sink's connection kept 32 MiB of pages
# it never reads again (measured: +32 MB RSS a sink after a 100k-row transaction).
READER_CACHE = "PRAGMA cache_size = -4096"
#: Rows a read bounded by bytes takes first from a partition, before it knows their size: then
#: as many as fit at that size (one step at the values' size, ~2 for small ones).
FIRST_STEP = 8


def committed_offsets(conn: sqlite3.Connection, group: str) -> dict[TopicPartition, int]:
    """The group's committed next offsets."""
    with translated("reading consumer offsets"):
        rows = conn.execute(SELECT_COMMITTED, (group,)).fetchall()
    return {TopicPartition(t, p): off for t, p, off in rows}


class EmbeddedConsumer:
    """A consumer-group member that is assigned every partition of its topics.

    The embedded log does not rebalance: two consumers of one group, in one process or two, both
    read everything, so run one consumer per group (one sink runner per sink). The group's
    committed offsets are shared, durable and survive restarts.

    Positions start at ``start_offsets(...)`` where it returns one, else at the group's committed
    offset, else at 0 (the earliest record still in the log); ``poll`` advances them in memory and
    ``commit`` stores what the caller says is done. Use a consumer from one thread at a time.

    Args:
        state: the log's parts: connections to read through, the catalog that creates missing
            topics, and the append signal an idle poll waits on.
        group: the consumer group.
        topics: the topics to read (created if missing).
        start_offsets: see :meth:`cdc.log.base.Log.consumer`.
        on_revoke: called with the whole assignment when the consumer closes.
    """

    def __init__(
        self,
        state: LogState,
        group: str,
        topics: Sequence[str],
        start_offsets: StartOffsets | None,
        on_revoke: PartitionsCallback | None,
    ) -> None:
        self._connections = state.connections
        self._appends = state.appends
        self._reading = state.reading
        conn = self._connections.get()
        with translated("opening a consumer"):  # its thread only reads (and commits offsets)
            conn.execute(READER_CACHE)
        state.catalog.ensure(conn, topics)
        self._group = group
        self._on_revoke = on_revoke
        self._plan: list[tuple[TopicPartition, int]] = [
            (TopicPartition(topic, p), meta.id)
            for topic in dict.fromkeys(topics)
            for meta in [state.catalog.meta(conn, topic)]
            for p in range(meta.partitions)
        ]
        self._positions = self._initial_positions(start_offsets)
        self._turn = 0
        self._closed = False
        # (connection, PRAGMA data_version, the log's commit count) when a fetch last found every
        # partition read to its end: while all stay the same, an idle poll skips the partition
        # reads. data_version moves on other connections' commits, the count on this process's.
        self._caught_up_at: tuple[int, int, int] | None = None

    def _initial_positions(self, start_offsets: StartOffsets | None) -> dict[TopicPartition, int]:
        committed = committed_offsets(self._connections.get(), self._group)
        positions = {tp: committed.get(tp, 0) for tp, _ in self._plan}
        if start_offsets is not None:
            chosen = start_offsets(list(positions))
            positions.update((tp, off) for tp, off in chosen.items() if tp in positions)
        return positions

    def poll(
        self, max_records: int, timeout_s: float, max_bytes: int | None = None
    ) -> list[StoredRecord]:
        """Up to ``max_records`` committed records (and about ``max_bytes`` of their stored
        values, :meth:`cdc.log.base.Consumer.poll`), waiting at most ``timeout_s`` for one.

        Each partition's records come in offset order; partitions take turns being read first,
        so a busy partition does not starve the others. An append committed in this process
        wakes the wait at once; one from another process is seen within ~20 ms.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_open()
            seen = self._appends.generation
            records = self._fetch(max_records, max_bytes)
            remaining = deadline - time.monotonic()
            if records or remaining <= 0:
                return records
            self._appends.wait(seen, min(remaining, POLL_INTERVAL_S))

    def commit(
        self, offsets: Mapping[TopicPartition, int], stop: threading.Event | None = None
    ) -> None:
        """Store the group's next offsets to read; durable on return (a local store: there is
        no server to wait on, so ``stop`` has nothing to end)."""
        self._check_open()
        rows = [(self._group, tp.topic, tp.partition, off) for tp, off in offsets.items()]
        with write_transaction(self._connections.get(), "committing consumer offsets") as conn:
            conn.executemany(UPSERT_CONSUMER_OFFSET, rows)

    def assignment(self) -> list[TopicPartition]:
        """Every partition of the consumer's topics."""
        return [tp for tp, _ in self._plan]

    def position(self, tp: TopicPartition) -> int:
        """The next offset ``poll`` reads from ``tp``."""
        return self._positions[tp]

    def close(self) -> None:
        """Leave the group: ``on_revoke`` runs with the whole assignment first, like Kafka's."""
        if self._closed:
            return
        try:
            if self._on_revoke is not None and not self._connections.closed:
                self._on_revoke(self.assignment())
        finally:
            self._closed = True

    def _fetch(self, max_records: int, max_bytes: int | None) -> list[StoredRecord]:
        conn = self._connections.get()
        with translated("reading records"):
            # Read before the fetch, so a commit that lands during it changes the version.
            version = (id(conn), conn.execute(DATA_VERSION).fetchone()[0], self._appends.generation)
            if version == self._caught_up_at:
                return []  # nothing committed since every partition was read to its end
            read = _Read(max_records, max_bytes)
            with self._reading(conn) as whole:
                out = self._fetch_in(conn, read, whole)
        if read.records > 0 and read.bytes > 0:  # not stopped by either bound: all read
            self._caught_up_at = version
        return out

    def _fetch_in(self, conn: sqlite3.Connection, read: _Read, whole: Whole) -> list[StoredRecord]:
        out: list[StoredRecord] = []
        count = len(self._plan)
        for i in range(count):
            if read.records <= 0 or read.bytes <= 0:
                break
            tp, tid = self._plan[(self._turn + i) % count]
            bounds = (tid, tp.partition, self._positions[tp], read.records)
            batch = read.take(conn.execute(SELECT_RANGE, bounds))
            if batch:
                self._positions[tp] = batch[-1][0] + 1
                out += stored_records(tp.topic, tp.partition, batch, whole)
        self._turn = (self._turn + 1) % max(count, 1)
        return out

    def _check_open(self) -> None:
        if self._closed:
            raise LogError("embedded log: the consumer is closed")
        if self._connections.closed:
            raise LogError("embedded log: the log is closed")


_VALUE_COLUMN = itemgetter(2)  # of a SELECT_RANGE row


class _Read:
    """What one fetch may still take: ``records`` and ``bytes`` of stored values (a value
    stored in a frame counts its own part only: about its bytes)."""

    __slots__ = ("bytes", "records")

    def __init__(self, max_records: int, max_bytes: int | None) -> None:
        self.records = max_records
        self.bytes = sys.maxsize if max_bytes is None else max_bytes

    def take(self, rows: sqlite3.Cursor) -> list[Any]:
        """The rows of one partition's range that fit: all at once without a byte bound;
        with one, a few first, then as many as fit at their size, each step sized in C."""
        if self.bytes == sys.maxsize:
            batch = rows.fetchall()
            self.records -= len(batch)
            return batch
        out: list[Any] = []
        step = min(self.records, FIRST_STEP)
        while step > 0:
            fetched = rows.fetchmany(step)
            values = list(map(_VALUE_COLUMN, fetched))
            size = sum(map(length_hint, values))
            if size >= self.bytes:  # the one that reaches the bound is the last
                fetched = fetched[: fitting(values, self.bytes)]
                self.records, self.bytes = self.records - len(fetched), 0
                rows.close()
                return out + fetched
            out += fetched
            self.records, self.bytes = self.records - len(fetched), self.bytes - size
            if len(fetched) < step:
                break  # the partition's end
            fit = self.bytes * len(fetched) // size if size else self.records
            step = min(self.records, max(1, fit))
        return out
