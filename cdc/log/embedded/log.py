"""The embedded log: a durable, partitioned, compacted log in one SQLite database (WAL mode).

The default log: no server to run, one directory (``log.sqlite3`` inside it). It has the Kafka
log's semantics: records of one key go to one partition (Kafka's murmur2 partitioner), offsets
per partition only grow and are never reused, consumers of a group resume from its committed
offsets, and one transaction makes records and source offsets durable together.

Concurrency: each thread gets its own connection. SQLite allows one writer at a time across all
processes; readers never block and never see uncommitted data. A second process writing the
same log (``cdc snapshot``) waits for the write lock for up to 60 s, then gets
:class:`~cdc.contracts.errors.LogUnavailable`. Consumers do not rebalance: each gets every partition
of its topics (see :class:`~cdc.log.embedded.consumer.EmbeddedConsumer`).

Errors from SQLite are translated at this boundary: a lock that outlasts the busy timeout is
:class:`~cdc.contracts.errors.LogUnavailable`; corruption, a full or read-only disk and other
failures are
:class:`~cdc.contracts.errors.LogFatal`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import orjson

from cdc.contracts.errors import LogError, LogFatal, LogUnavailable
from cdc.log.base import PartitionsCallback, StartOffsets, StoredRecord, TopicInfo, TopicPartition
from cdc.log.embedded import appender, bulk, keys
from cdc.log.embedded import compaction as embedded_compaction
from cdc.log.embedded.consumer import EmbeddedConsumer, committed_offsets
from cdc.log.embedded.frames import ValueFrames
from cdc.log.embedded.heads import ValueHeads
from cdc.log.embedded.shared import AppendSignal, Connections, LogState, TopicCatalog
from cdc.log.embedded.store import (
    BUSY_TIMEOUT_MS,
    DB_FILE,
    SELECT_RANGE,
    Durability,
    TopicMeta,
    migrate,
    read_snapshot,
    stored_records,
    translated,
)
from cdc.log.embedded.txn import EmbeddedTransaction
from cdc.log.offsets import decode_offset
from cdc.log.partitioner import partition_for
from cdc.support import clock

# The key's newest offset from the key index, then its record. Asked in one query (``... AND key
# = ? ORDER BY offset DESC LIMIT 1``), SQLite's planner walks the primary key backwards instead
# and reads the partition's records until it meets the key: 3 ms for a key 20,000 records back.
_LATEST = (
    "SELECT value, head_id, frame_id FROM records"
    " WHERE topic_id = ?1 AND partition = ?2 AND offset = (SELECT max(offset) FROM records"
    " WHERE topic_id = ?1 AND partition = ?2 AND key = ?3)"
)
_START_OFFSET = "SELECT min(offset) FROM records WHERE topic_id = ? AND partition = ?"


class EmbeddedLog:
    """A :class:`~cdc.log.base.Log` in a local directory.

    Args:
        path: the log's directory; created if missing. The database is ``path/log.sqlite3``.
        partitions: partition count of topics this log creates (existing topics keep theirs).
        durability: ``"full"`` syncs the WAL on every commit (survives power loss);
            ``"normal"`` survives a process crash but may lose the last commits on power loss.
        tombstone_retention_ms: how long compaction keeps a tombstone after its timestamp, so
            consumers that lag by less than this still see the delete.
        busy_timeout_ms: how long a write waits for another writer's lock before
            :class:`~cdc.contracts.errors.LogUnavailable`; generous, since ``cdc snapshot`` may hold
            it.
    """

    def __init__(
        self,
        path: Path,
        partitions: int = 1,
        durability: Durability = "full",
        tombstone_retention_ms: int = 86_400_000,
        *,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
    ) -> None:
        if partitions < 1:
            raise LogError(f"embedded log: partitions must be at least 1, not {partitions}")
        if durability not in ("full", "normal"):
            raise LogError(f"embedded log: unknown durability {durability!r}")
        self.path = Path(path)
        self.partitions = partitions
        self.durability: Durability = durability
        self.tombstone_retention_ms = tombstone_retention_ms
        self.busy_timeout_ms = busy_timeout_ms
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LogFatal(f"embedded log: cannot create {self.path}: {exc.strerror}") from exc
        self._connections = Connections(self.path / DB_FILE, durability, busy_timeout_ms)
        self._catalog = TopicCatalog(partitions, tombstone_retention_ms)
        try:
            conn = self._conn()
            migrate(conn)
            chosen = appender.choose(conn, self._connections.database)  # once, at open
        except BaseException:
            self._connections.close()
            raise
        # What transactions and consumers get instead of the log itself.
        self._state = LogState(
            self._connections, self._catalog, AppendSignal(), ValueHeads(), ValueFrames(), chosen
        )
        # This process is loading in bulk without the key index (see :mod:`.bulk`); and whether
        # the index was seen since (a key lookup checks once, not each time).
        self._loading = False
        self._indexed = False

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran."""
        return self._connections.closed

    # -- writing -------------------------------------------------------------------------------

    def ensure_topics(self, names: Sequence[str]) -> None:
        """Create missing topics (compacted, with this log's partition count)."""
        self._catalog.ensure(self._conn(), names)

    def begin(self) -> EmbeddedTransaction:
        """Start a write transaction on the calling thread (waits for other writers)."""
        return EmbeddedTransaction(self._state, self._conn())

    def defer_key_index(self) -> bool:
        """Start a bulk load: drop the key index while a snapshot writes each key once, if the
        log is small enough (:mod:`cdc.log.embedded.bulk`); whether it did. Compaction waits
        until :meth:`build_key_index`. Call it outside a transaction of this thread."""
        conn = self._conn()
        if conn.in_transaction:
            raise LogError("embedded log: cannot defer the key index inside a transaction")
        self._indexed = False
        self._loading = bulk.defer(conn)
        return self._loading

    def build_key_index(self) -> None:
        """End a bulk load: build the key index in one pass if it is missing (inside this
        thread's open transaction, if there is one)."""
        self._loading = False  # even if the build fails: compaction then builds it first
        bulk.build(self._conn())
        self._indexed = True

    def partition_for(self, topic: str, key: bytes | None) -> int:
        """The partition of ``key`` in ``topic`` (a topic not created yet: this log's count)."""
        meta = self._catalog.lookup(self._conn(), topic)
        return partition_for(key, meta.partitions if meta else self.partitions)

    # -- reading -------------------------------------------------------------------------------

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        start_offsets: StartOffsets | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> EmbeddedConsumer:
        """Join ``group`` reading every partition of ``topics`` (created if missing).

        There is no rebalancing between consumers: each one is assigned every partition, and
        ``on_revoke`` is called only when the consumer closes.
        """
        return EmbeddedConsumer(self._state, group, topics, start_offsets, on_revoke)

    def read(self, topic: str, partition: int, offset: int, max_records: int) -> list[StoredRecord]:
        """Committed records of one partition from ``offset`` on, in offset order.

        Raises:
            LogError: the topic or partition does not exist.
        """
        meta = self._meta(topic)
        if not 0 <= partition < meta.partitions:
            raise LogError(f"embedded log: topic {topic!r} has no partition {partition}")
        conn = self._conn()
        with translated("reading records"), self._state.reading(conn) as whole:
            rows = conn.execute(SELECT_RANGE, (meta.id, partition, offset, max_records))
            return stored_records(topic, partition, rows.fetchall(), whole)

    def end_offsets(self, topic: str) -> dict[int, int]:
        """The next offset of each partition (the high-water mark, kept across compaction)."""
        meta = self._meta(topic)
        with translated("reading offsets"):
            rows = self._conn().execute(
                "SELECT partition, next_offset FROM partitions WHERE topic_id = ?", (meta.id,)
            )
            return dict(rows.fetchall())

    def topics(self) -> list[TopicInfo]:
        """Every topic with its partitions' start and end offsets and live record count."""
        conn = self._conn()
        with translated("listing topics"), read_snapshot(conn):
            rows = conn.execute("SELECT id, name, partitions, config FROM topics ORDER BY name")
            return [self._topic_info(conn, *row) for row in rows.fetchall()]

    def _topic_info(
        self, conn: sqlite3.Connection, tid: int, name: str, count: int, config: str
    ) -> TopicInfo:
        start: dict[int, int] = {}
        end: dict[int, int] = {}
        live = 0
        rows = conn.execute(
            "SELECT partition, next_offset, record_count FROM partitions WHERE topic_id = ?"
            " ORDER BY partition",
            (tid,),
        )
        for partition, next_offset, record_count in rows.fetchall():
            first = conn.execute(_START_OFFSET, (tid, partition)).fetchone()[0]
            start[partition] = next_offset if first is None else first
            end[partition] = next_offset
            live += record_count
        return TopicInfo(name, count, orjson.loads(config), start, end, live)

    def claim_source(self) -> None:
        """Nothing to claim: SQLite serialises writers, and one process owns the file."""

    def source_offsets(self) -> dict[str, Any]:
        """Every source offset stored so far, decoded from JSON."""
        with translated("reading source offsets"):
            rows = self._conn().execute("SELECT key, value FROM source_offsets").fetchall()
        return {key: decode_offset(value) for key, value in rows}

    def keep_latest(self, fields: Mapping[str, Sequence[str]]) -> None:
        """Nothing to do: every key's latest value can be looked up here."""

    def latest_value(self, topic: str, key: bytes) -> bytes | None:
        """The newest value of ``key`` (``None`` if absent or tombstoned): committed, or
        appended by this thread's open transaction, which runs on the same connection."""
        meta = self._catalog.lookup(self._conn(), topic)
        if meta is None:
            return None
        args = (meta.id, partition_for(key, meta.partitions), key)
        if not self._indexed:
            self.build_key_index()  # without it, the lookup would scan the whole partition
        conn = self._conn()
        with translated("looking a key up"), self._state.reading(conn) as whole:
            row = conn.execute(_LATEST, args).fetchone()
            if row is None:
                return None
            value, head_id, frame_id = row
            if value is None or (head_id is None and frame_id is None):
                return cast(bytes | None, value)
            return whole(head_id, frame_id, value)

    def key_records(self, topic: str, key: bytes) -> list[StoredRecord] | None:
        """Every committed record of ``key`` in ``topic`` (``cdc trace``), through the key
        index; ``None`` while there is none (:mod:`cdc.log.embedded.keys`)."""
        return keys.key_records(self._conn(), self._catalog, self._state, topic, key)

    def committed_offsets(self, group: str) -> dict[TopicPartition, int]:
        """The group's committed next offsets."""
        return committed_offsets(self._conn(), group)

    def groups(self) -> list[str]:
        """Every consumer group that committed offsets, sorted."""
        with translated("listing consumer groups"):
            rows = self._conn().execute('SELECT DISTINCT "group" FROM consumer_offsets ORDER BY 1')
            return [group for (group,) in rows.fetchall()]

    # -- compaction ----------------------------------------------------------------------------

    def compact(self, now_ms: int | None = None) -> dict[str, int]:
        """Keep only the latest record of each key; drop tombstones older than the retention.

        Records without a key are kept. Runs in short transactions (see
        :mod:`cdc.log.embedded.compaction`), so appends are not held up for long.

        Args:
            now_ms: the time tombstone ages are measured at (default: now).

        Returns:
            ``{"superseded": n, "tombstones": m}``: how many records of each kind were removed.
        """
        conn = self._conn()
        if conn.in_transaction:
            raise LogError("embedded log: cannot compact inside this thread's open transaction")
        now = clock.now_ms() if now_ms is None else now_ms
        if not self._loading:
            bulk.build(conn)  # a load that ended without it (a crash): superseded needs it
        return embedded_compaction.compact(conn, now - self.tombstone_retention_ms)

    def maybe_compact(self, now_ms: int | None = None) -> dict[str, int] | None:
        """Compact if enough was appended since the last pass; a cheap no-op otherwise.

        A pass that finds the write lock held past the busy timeout (a long ``cdc snapshot``
        transaction) stops quietly: the chunks done so far stay done, and the next call resumes.

        Returns:
            What :meth:`compact` removed, or ``None`` when no pass was due or it was cut short.
        """
        if self._loading or not embedded_compaction.needs_compaction(self._conn()):
            return None  # a bulk load writes each key once: nothing to compact until it ends
        try:
            return self.compact(now_ms)
        except LogUnavailable:
            return None  # compaction can always wait; the writer holding the lock cannot

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close every thread's connection; wakes waiting polls. Stop using the log first."""
        if self._connections.close():
            self._state.appends.close()

    def __enter__(self) -> EmbeddedLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        return self._connections.get()

    def _meta(self, topic: str) -> TopicMeta:
        return self._catalog.meta(self._conn(), topic)
