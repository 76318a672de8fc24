"""The source position a sink's store holds, written beside its offsets.

A sink that keeps its offsets with its data can keep, in the same transaction, the source
position that data is consistent up to (:class:`cdc.contracts.sink.PositionedSink`). The sink
task knows the position before the batch commits: the tracker's samples ``(P, E)``
(:class:`~cdc.runtime.consistency.ConsistencyTracker`) were taken before the batch was read,
and once the batch's offsets ``O`` pass ``E`` on every partition the store
holds every change up to ``P``. So the newest such ``P`` is handed to the sink before each
write, and the flush stores it with ``O``: the store never claims a position its data does not
hold.

``O`` covers every partition of the sink's topics, not only the batch's: the offsets the
consumer started from (the sink's stored ones over the group's committed ones, as
:meth:`cdc.runtime.sink_task.SinkTask._start_offsets` reads), moved on by every committed batch.
On Kafka a worker does not see the others' progress after it started: its claim lags, never
leads.

A sample is taken before the records of a batch reached the task, so the position stored
with the batch is often one before its changes; while the sink is idle the position moves on
(the tracker samples, idle offers move the source's position), and it is stored alone, with
the offsets unchanged, at most every ``every_s``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from cdc.contracts.sink import SinkRecord, sink_offsets
from cdc.log.base import Log, TopicPartition
from cdc.runtime.consistency import ConsistencyTracker
from cdc.support.logging import Logger


class StorePosition:
    """Hands a sink the position to store with its offsets (see the module docstring).

    Args:
        tracker: the sink task's tracker, whose samples say what offsets reach which position
            (``None``: a source without positions; nothing is stored).
        log: the pipeline's log (the group's committed offsets, at each start).
        group: the sink's consumer group.
        logger: the sink task's logger.
        every_s: the least time between two idle writes of the position alone.
    """

    def __init__(
        self,
        tracker: ConsistencyTracker | None,
        log: Log,
        group: str,
        logger: Logger,
        every_s: float = 1.0,
    ) -> None:
        self._tracker, self._log, self._group, self._logger = tracker, log, group, logger
        self._every_s = every_s
        self._offsets: dict[TopicPartition, int] = {}
        self._stored: str | None = None  # the position the store holds, as far as known
        self._handed: str | None = None  # handed with the pending batch
        self._last = -every_s

    def start(self, stored: Mapping[TopicPartition, int]) -> None:
        """The consumer starts (again, after a reset) from ``stored`` over the group's
        committed offsets."""
        if self._tracker is not None:
            self._offsets = {**self._log.committed_offsets(self._group), **stored}
        self._stored = self._handed = None

    def hand(self, sink: Any, batch: Sequence[SinkRecord]) -> None:
        """Before ``batch`` is written: tell ``sink`` the position its offsets reach."""
        self._handed = None
        store = getattr(sink, "set_consistent_position", None)
        if store is None or self._tracker is None:
            return
        reached = self._tracker.reached({**self._offsets, **sink_offsets(batch)})
        if reached is not None:
            self._handed = str(reached)
            store(self._handed)

    def committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        """The batch with ``offsets`` is durable in the sink, its position with it."""
        self._offsets.update(offsets)
        if self._handed is not None:
            self._stored, self._last = self._handed, time.monotonic()

    def idle(self, sink: Any) -> None:
        """While nothing is read: store a newer position alone, at most every ``every_s``.

        Best effort: a failure is logged and the next batch or idle turn stores it.
        """
        store = getattr(sink, "set_consistent_position", None)
        if store is None or self._tracker is None or time.monotonic() - self._last < self._every_s:
            return
        reached = self._tracker.reached(self._offsets)
        if reached is None or str(reached) == self._stored:
            return
        self._last = time.monotonic()
        try:
            store(str(reached))
            sink.flush()
        except Exception as exc:
            self._logger.info("sink.position_not_stored", error=str(exc))
            return
        self._stored = str(reached)
