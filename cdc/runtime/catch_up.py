"""A sink catching up with the log: how much it has read, how fast, and when it will be done.

A sink added to a pipeline (a new consumer group, nothing stored: every topic read from offset
0), a sink rebuilt in place (its tables reset) or into a copy (``cdc sink --rebuild --into``),
and a sink that was stopped for a while all start behind the log's end. :class:`CatchUp` takes
the offsets it starts from and the offset after each partition's last record at that moment,
and reports ``<event>.started``, ``<event>.progress`` (at most every :data:`PROGRESS_EVERY_S`:
records read, records/s, ETA) and ``<event>.finished``. Counts are offsets, so records that
compaction removed or Kafka's transaction markers count as read: the ETA is about the offsets
left, which is what the sink still has to go through.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from cdc.contracts.errors import CdcError
from cdc.log.base import Log, TopicPartition
from cdc.log.offsets import end_offsets, last_offsets
from cdc.support.logging import Logger

PROGRESS_EVERY_S = 5.0
#: Fewer records behind than this at the start is no catch-up worth reporting.
REPORT_FROM = 1000


class CatchUp:
    """Progress towards ``ends`` (per partition, the offset after its last record at the start).

    Args:
        starts: the offset each partition is read from (absent: 0).
        event: the log lines' prefix (``sink.catch_up``, ``sink.rebuild_into``).
        quiet_below: behind by fewer records than this, nothing is logged.
    """

    def __init__(
        self,
        logger: Logger,
        starts: Mapping[TopicPartition, int],
        ends: Mapping[TopicPartition, int],
        event: str = "sink.catch_up",
        quiet_below: int = REPORT_FROM,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger, self._event, self._clock = logger, event, clock
        self._ends = {tp: end for tp, end in ends.items() if end > starts.get(tp, 0)}
        self._starts = {tp: starts.get(tp, 0) for tp in self._ends}
        self._reached = dict(self._starts)
        self.total = sum(end - self._starts[tp] for tp, end in self._ends.items())
        self.read = 0
        self._began = self._last_line = clock()
        self._loud = self.total >= quiet_below
        self.done = self.total == 0
        if self._loud:
            logger.info(f"{event}.started", records_behind=self.total, partitions=len(self._ends))

    def note(self, offsets: Mapping[TopicPartition, int]) -> None:
        """After a durable batch (the next offset per partition): a line now and then, and the
        last one once every partition reached its end."""
        if self.done:
            return
        for tp, offset in offsets.items():
            end = self._ends.get(tp)
            if end is not None:
                self._reached[tp] = max(self._reached[tp], min(offset, end))
        self.read = sum(self._reached[tp] - self._starts[tp] for tp in self._ends)
        now = self._clock()
        if self.read >= self.total:
            self.done = True
            self._finished(now)
        elif self._loud and now - self._last_line >= PROGRESS_EVERY_S:
            self._last_line = now
            self._logger.info(f"{self._event}.progress", **self.figures(now))

    def idle(self) -> None:
        """A poll found nothing more to read. On Kafka the end offsets counted a transaction
        marker after each partition's last record, which no consumer reaches: at most one
        offset a partition left is the end."""
        if not self.done and self.total - self.read <= len(self._ends):
            self.read, self.done = self.total, True
            self._finished(self._clock())

    def figures(self, now: float | None = None) -> dict[str, float | int | None]:
        """Records read and in all, records/s since the start, percent, ETA in seconds."""
        elapsed = max((self._clock() if now is None else now) - self._began, 1e-6)
        rate = self.read / elapsed
        left = self.total - self.read
        return {
            "records_read": self.read,
            "records_total": self.total,
            "records_per_s": round(rate, 1),
            "percent": round(100 * self.read / self.total, 1) if self.total else 100.0,
            "eta_s": round(left / rate, 1) if rate > 0 else None,
        }

    def _finished(self, now: float) -> None:
        if self._loud:
            figures = self.figures(now)
            self._logger.info(
                f"{self._event}.finished",
                records=self.total,
                duration_s=round(now - self._began, 2),
                records_per_s=figures["records_per_s"],
            )


def ends_of(log: Log, topics: Sequence[str]) -> dict[TopicPartition, int]:
    """Per partition of ``topics``, the offset after its last record now.

    Raises:
        CdcError: the log's errors.
    """
    return {
        TopicPartition(topic, partition): end
        for topic in topics
        for partition, end in last_offsets(log, topic).items()
    }


def measure(
    log: Log,
    logger: Logger,
    topics: Sequence[str],
    starts: Mapping[TopicPartition, int],
    event: str = "sink.catch_up",
) -> CatchUp | None:
    """A :class:`CatchUp` from ``starts`` to the log's end now; ``None`` when the log cannot
    say (the display is best effort: the sink reads on without it)."""
    try:
        ends = ends_of(log, topics)
    except CdcError as exc:
        logger.debug(f"{event}.unmeasured", error=str(exc))
        return None
    return CatchUp(logger, starts, ends, event)


def for_sink(
    log: Log,
    logger: Logger,
    group: str,
    topics: Sequence[str],
    stored: Mapping[TopicPartition, int],
) -> CatchUp | None:
    """The catch-up of a sink task that starts reading ``topics``: from its ``stored`` offsets,
    else its group's committed ones, else 0 (a new sink), as its consumer does.

    Up to the end offsets (one cheap request a topic on Kafka, where finding each partition's
    last record takes a read each): :meth:`CatchUp.idle` ends it past a trailing marker."""
    try:
        starts = {**log.committed_offsets(group), **stored}
        ends = {
            TopicPartition(topic, partition): end
            for topic in topics
            for partition, end in end_offsets(log, topic).items()
        }
    except CdcError as exc:
        logger.debug("sink.catch_up.unmeasured", error=str(exc))
        return None
    return CatchUp(logger, starts, ends)
