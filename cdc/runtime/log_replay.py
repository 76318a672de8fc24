"""The log as a rebuild into a copy reads it (``cdc sink FILE NAME --rebuild --into ...``).

The copy is built by the sink's own task (:class:`cdc.runtime.sink_task.SinkTask`), so it
applies exactly what the streaming sink applies, in the same batches and under the same
checkpoint order. Only its reads differ, through :class:`ReplayLog`: each partition is read
from the offset the *copy* stores (0 for a new one) up to the offset after its last record when
the rebuild began, with no consumer group. The running sink's group is never touched, and the
copy's offsets are exactly what it applied: swapped in as the sink, it streams on from there.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, cast

from cdc.contracts.errors import LogUnavailable
from cdc.log.base import (
    Consumer,
    Log,
    PartitionsCallback,
    StartOffsets,
    StoredRecord,
    TopicPartition,
    fitting,
)
from cdc.runtime.catch_up import ends_of


class ReplayLog:
    """A :class:`~cdc.log.base.Log` whose consumers read to the end as of their start, then
    set ``finished``; everything else is the wrapped log's (dead letters, encodings).

    It joins no group, so it reports no committed offsets: the task's progress display
    (:mod:`cdc.runtime.catch_up`) then counts from the copy's stored offsets."""

    def __init__(self, log: Log, finished: threading.Event) -> None:
        self._log, self.finished = log, finished

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def as_log(self) -> Log:
        return cast(Log, self)

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        start_offsets: StartOffsets | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> Consumer:
        """A reader of ``topics`` from ``start_offsets`` (the copy's stored ones; else 0) to
        the end now; ``group`` is not joined."""
        ends = ends_of(self._log, topics)
        starts = dict(start_offsets(list(ends))) if start_offsets is not None else {}
        return _ToEnd(self._log, starts, ends, self.finished)

    def committed_offsets(self, group: str) -> dict[TopicPartition, int]:
        return {}


class _ToEnd:
    """Reads each partition in turn, in offset order, up to its end; commits nothing (the copy
    keeps its offsets with its data)."""

    def __init__(
        self,
        log: Log,
        starts: Mapping[TopicPartition, int],
        ends: Mapping[TopicPartition, int],
        finished: threading.Event,
    ) -> None:
        self._log, self._ends, self._finished = log, ends, finished
        self._next = {tp: starts.get(tp, 0) for tp in ends}
        self._todo = [tp for tp in sorted(ends) if self._next[tp] < ends[tp]]

    def poll(
        self, max_records: int, timeout_s: float, max_bytes: int | None = None
    ) -> list[StoredRecord]:
        """The next records of the current partition; none once every partition is read to
        its end (``finished`` is set then: the task applied every batch read before)."""
        while self._todo:
            tp = self._todo[0]
            try:
                records = self._log.read(tp.topic, tp.partition, self._next[tp], max_records)
            except LogUnavailable:
                return []  # the log is away: the task polls again
            end = self._ends[tp]
            records = [r for r in records if r.offset < end]
            if records and max_bytes is not None:
                records = records[: fitting((r.value for r in records), max_bytes)]
            if not records:
                self._todo.pop(0)
                continue
            self._next[tp] = records[-1].offset + 1
            if self._next[tp] >= end:
                self._todo.pop(0)
            return records
        self._finished.set()
        return []

    def commit(
        self, offsets: Mapping[TopicPartition, int], stop: threading.Event | None = None
    ) -> None:
        """Nothing to commit: the batch is durable in the copy with its offsets."""

    def assignment(self) -> list[TopicPartition]:
        return list(self._ends)

    def close(self) -> None:
        """Nothing is held open."""
