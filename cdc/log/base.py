"""The log interface: topics of keyed records, partitions, offsets, consumer groups, and an
atomic "append records + store source offsets" transaction.

Two implementations share these semantics: :mod:`cdc.log.embedded` (SQLite in WAL mode, the
default) and :mod:`cdc.log.kafka` (Apache Kafka). Offsets are Kafka's: the offset of a record is
its index in its partition, and a *committed* offset is the next offset to read.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from operator import length_hint
from types import TracebackType
from typing import Any, NamedTuple, Protocol, Self

from cdc.contracts.positions import Offsets


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(slots=True)  # not frozen: built once per change, see cdc/contracts/events.py
class Record:
    """A record to append; the log picks its partition from the key."""

    topic: str
    key: bytes | None
    value: bytes | None  # None is a tombstone
    pos: bytes | None = None
    """The change's source position, ``[position, sequence]`` as JSON
    (:func:`cdc.envelope.encode.write_pos`), beside the value, not in it: a Kafka header
    ``cdc.pos``, the embedded log's ``pos`` column. ``None``: none (a tombstone, a schema
    record)."""


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record read back from the log."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    pos: bytes | None = None
    """:attr:`Record.pos` as appended (``None`` too for a record appended before the log kept
    it: its value's ``source.pos`` holds it, :func:`cdc.envelope.encode.record_pos`)."""


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as ``cdc topics`` shows it."""

    name: str
    partitions: int
    config: dict[str, str]
    start_offsets: dict[int, int] = field(default_factory=dict)
    end_offsets: dict[int, int] = field(default_factory=dict)
    record_count: int = 0


class LogTransaction(Protocol):
    """Records and source offsets that become durable together or not at all.

    A transaction may span many ``append`` calls (a large source transaction is appended in
    bounded batches); nothing of it is visible to consumers before ``commit`` returns.
    """

    def append(self, records: Sequence[Record]) -> None: ...

    def store_offsets(self, offsets: Offsets) -> None:
        """Store source offsets (JSON values; ``None`` deletes a key) with this transaction."""
        ...

    def commit(self) -> None:
        """Make everything appended and stored durable; on return it survives a crash."""
        ...

    def abort(self) -> None: ...


class TransactionContext:
    """Mixin for transaction classes: ``with log.begin() as tx:`` commits when the body ends
    normally with the transaction still open, and aborts otherwise."""

    _state: str

    def commit(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None and self._state == "open":
            self.commit()
        else:
            self.abort()


def fitting(values: Iterable[bytes | None], max_bytes: int) -> int:
    """How many of ``values``, in order, fill about ``max_bytes``: all of them, or up to and
    including the one whose bytes reach it (at least one). A tombstone (``None``) counts 0.

    Counted in C (``length_hint`` is a value's length, 0 for ``None``): no Python call a value.
    """
    sums = list(accumulate(map(length_hint, values)))
    return min(len(sums), bisect_left(sums, max_bytes) + 1)


PartitionsCallback = Callable[[list[TopicPartition]], None]
StartOffsets = Callable[[list[TopicPartition]], Mapping[TopicPartition, int]]


class Consumer(Protocol):
    """A member of a consumer group, reading its assigned partitions in offset order."""

    def poll(
        self, max_records: int, timeout_s: float, max_bytes: int | None = None
    ) -> list[StoredRecord]:
        """Up to ``max_records`` records, waiting at most ``timeout_s`` for the first one.

        ``max_bytes``: stop once the records' values hold about this many bytes (the one that
        reaches it included: at least one record); ``None``: the count alone. A sink reads with
        both, so a read after its values grew holds about ``max_bytes``, not its count of them
        (:mod:`cdc.runtime.read_size`).
        """
        ...

    def commit(
        self, offsets: Mapping[TopicPartition, int], stop: threading.Event | None = None
    ) -> None:
        """Commit the next offsets to read for the group; durable on return.

        ``stop``, once set, ends a commit that waits on an unreachable log with
        :class:`cdc.support.retry.Stopped` (the offsets may or may not be committed then).
        """
        ...

    def assignment(self) -> list[TopicPartition]: ...

    def close(self) -> None: ...


class Log(Protocol):
    """A durable, partitioned, compacted log."""

    def ensure_topics(self, names: Sequence[str]) -> None:
        """Create missing topics, compacted, with the log's configured partition count."""
        ...

    def partition_for(self, topic: str, key: bytes | None) -> int: ...

    def begin(self) -> LogTransaction: ...

    def claim_source(self) -> None:
        """Make the calling thread the pipeline's one source writer, before it reads offsets.

        A log that fences writers (Kafka) fences any older instance of this pipeline's source
        here, so that no zombie can commit after :meth:`source_offsets` was read, and so the
        first transaction does not pay for the set-up. Read-only callers (``cdc status``) must
        not call it.
        """
        ...

    def source_offsets(self) -> dict[str, Any]:
        """Every source offset stored so far (the last value of each key)."""
        ...

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        start_offsets: StartOffsets | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> Consumer:
        """Join ``group`` reading ``topics``.

        Args:
            group: the consumer group; its committed offsets survive restarts.
            topics: topics to read; missing ones are created.
            start_offsets: called with newly assigned partitions; offsets it returns override
                the group's committed ones (sinks that keep offsets with their data).
            on_revoke: called before partitions are taken away, so the caller can flush and
                commit what it has done.
        """
        ...

    def committed_offsets(self, group: str) -> dict[TopicPartition, int]: ...

    def groups(self) -> list[str]: ...

    def topics(self) -> list[TopicInfo]: ...

    def end_offsets(self, topic: str) -> dict[int, int]: ...

    def read(self, topic: str, partition: int, offset: int, max_records: int) -> list[StoredRecord]:
        """Records of one partition from ``offset`` on, in offset order (no group involved)."""
        ...

    def keep_latest(self, fields: Mapping[str, Sequence[str]]) -> None:
        """Declare the topics the source will look keys up in, and the ``after`` fields it needs
        of them (the complete set: topics declared before and missing now are forgotten).

        Called by the source on its thread, after :meth:`source_offsets`. A log that can look
        any key up (embedded) ignores it; the Kafka log keeps those fields of each key's latest
        record in a local store from then on, restored from the topics where it lacks them
        (:mod:`cdc.log.kafka.image_sync`).
        """
        ...

    def defer_key_index(self) -> bool:
        """Start a bulk load (an initial snapshot, writing each key once): a log that keeps a
        key index may drop it until :meth:`build_key_index`, which builds it in one pass,
        cheaper than keeping it up to date record by record; whether it did. Called on the
        writer's thread, outside its transaction. A log without such an index (Kafka) returns
        ``False``.
        """
        ...

    def build_key_index(self) -> None:
        """End a bulk load: build what :meth:`defer_key_index` dropped (a no-op when nothing
        was, and on a log without a key index)."""
        ...

    def latest_value(self, topic: str, key: bytes) -> bytes | None:
        """The newest value of ``key`` (``None`` if absent or tombstoned) that the calling
        thread sees: committed, or appended by the transaction it has open.

        The PostgreSQL source relies on the second part: it asks from the thread that appends
        its batches, in the middle of a large transaction, and needs the image an earlier,
        uncommitted batch of that transaction appended
        (``connectors/postgres/assembly/toast.py``).

        A log that keeps only declared fields (Kafka, :meth:`keep_latest`) returns
        ``{"after": {those fields}}`` instead of the whole value.

        Raises:
            NotImplementedError: where the log cannot look keys of ``topic`` up (Kafka: a topic
                not declared with :meth:`keep_latest`, or a thread other than the source's).
        """
        ...

    def close(self) -> None: ...
