"""A reference sink kept in memory: the smallest sink that passes the conformance kit.

It shows what the kit asks of a sink: upsert by key, a position guard that also remembers
deletes, offsets made durable together with the data, and nothing applied before ``flush``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cdc.contracts.sink import SinkRecord
from cdc.log.base import TopicPartition


@dataclass
class MemoryStore:
    """What survives a sink instance: rows and positions per (topic, key), and offsets."""

    rows: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    positions: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)


def record_pos(record: SinkRecord) -> tuple[int, int]:
    """A change record's source position (:attr:`SinkRecord.position`) as a comparable tuple."""
    position, sequence = record.position
    return int(position), int(sequence)


class MemorySink:
    """Applies records to a :class:`MemoryStore` at flush."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._pending: list[SinkRecord] = []

    def open(self) -> None:
        self._pending = []

    def stored_offsets(self) -> Mapping[TopicPartition, int] | None:
        return dict(self._store.offsets)

    def write(self, records: Sequence[SinkRecord]) -> None:
        self._pending.extend(records)

    def flush(self) -> None:
        for record in self._pending:
            self._apply(record)
            self._store.offsets[record.tp] = record.offset + 1
        self._pending = []

    def close(self) -> None:
        self._pending = []

    def reset_table(self, table: tuple[str, str], partitions: Sequence[TopicPartition]) -> None:
        topics = {tp.topic for tp in partitions}
        for held in (self._store.rows, self._store.positions):
            for ident in [i for i in held if i[0] in topics]:
                del held[ident]
        self._store.offsets.update(dict.fromkeys(partitions, 0))

    def _apply(self, record: SinkRecord) -> None:
        value = record.value
        if value is None and record.pos is None:
            return  # an old tombstone, without its delete's position: the delete did the work
        ident = (record.topic, repr(sorted((record.key or {}).items())))
        pos = record_pos(record)
        # A tombstone is its delete (same key, same position), which compaction may have taken.
        op = "d" if value is None else value["op"]
        if op == "t":
            self._truncate(record.topic)
            return
        if ident in self._store.positions and self._store.positions[ident] >= pos:
            return  # a replayed or late change: what we hold is newer
        self._store.positions[ident] = pos
        if value is None or op == "d":
            self._store.rows.pop(ident, None)
        else:
            self._store.rows[ident] = dict(value["after"])

    def _truncate(self, topic: str) -> None:
        for ident in [i for i in self._store.rows if i[0] == topic]:
            del self._store.rows[ident]
