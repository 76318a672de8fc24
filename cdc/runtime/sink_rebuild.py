"""What an operator sees of a whole-sink rebuild: the sink's store lost its data (a cache that
restarted empty), and its task reset every table to read the log again from the start.

The rebuild itself is a table reset per table (:mod:`cdc.runtime.sink_resets`); this only
reports it as one: ``sink.rebuild.started`` with the table and topic counts,
``sink.rebuild.progress`` lines while it reads (at most one every :data:`PROGRESS_EVERY_S`),
and ``sink.rebuild.finished`` once every table read up to the log's end as of its reset.

A store is found to have lost its data by the sink's next write, or, while nothing changes, by
:class:`StoreProbe`, so a cache emptied at a quiet time is refilled then, not at the next change.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from cdc.contracts.errors import CdcError, SinkDataLost
from cdc.log.base import TopicPartition
from cdc.support.logging import Logger

PROGRESS_EVERY_S = 5.0
PROBE_EVERY_S = 5.0


class StoreProbe:
    """Asks an idle sink's store, at most every ``every_s``, whether it still holds its data:
    the sink's optional ``probe()``, which raises :class:`SinkDataLost` when it does not."""

    def __init__(self, every_s: float = PROBE_EVERY_S) -> None:
        self._every_s = every_s
        self._last = time.monotonic()

    def lost(self, sink: object) -> SinkDataLost | None:
        """What the store lost, if a probe is due and finds it so."""
        probe = getattr(sink, "probe", None)
        now = time.monotonic()
        if probe is None or now - self._last < self._every_s:
            return None
        self._last = now
        try:
            probe()
        except SinkDataLost as exc:
            return exc
        except CdcError:
            pass  # the store is away: the next batch retries it and reports it
        return None


class WholeRebuild:
    """One rebuild of every table of a sink, made of the table resets ``requests``.

    Args:
        requests: the reset request of each table, by request id: ``(table, topic)``.
    """

    def __init__(self, logger: Logger, requests: Mapping[str, tuple[str, str]], reason: str):
        self._logger = logger
        self._requests = dict(requests)
        self._targets: dict[str, dict[int, int]] = {}  # by request id, once the reset is applied
        self._done: set[str] = set()
        self._started = time.monotonic()
        self._last_line = self._started
        topics = len({topic for _, topic in self._requests.values()})
        logger.warning(
            "sink.rebuild.started", tables=len(self._requests), topics=topics, reason=reason
        )

    def owns(self, request_id: str) -> bool:
        return request_id in self._requests

    def reset(self, request_id: str, targets: Mapping[int, int]) -> None:
        """The table of ``request_id`` was reset; its rebuild ends at ``targets``."""
        self._targets[request_id] = dict(targets)

    def done(self, request_id: str) -> None:
        self._done.add(request_id)

    def finished(self) -> bool:
        return self._done >= self._requests.keys()

    def note(self, progress: Mapping[TopicPartition, int]) -> None:
        """After each durable batch: a progress line now and then, the end once finished."""
        read, total = self._offsets(progress)
        now = time.monotonic()
        if self.finished():
            self._logger.info(
                "sink.rebuild.finished",
                tables=len(self._requests),
                topics=len({topic for _, topic in self._requests.values()}),
                offsets=total,
                duration_s=round(now - self._started, 2),
            )
        elif now - self._last_line >= PROGRESS_EVERY_S:
            self._last_line = now
            self._logger.info(
                "sink.rebuild.progress",
                tables_done=len(self._done),
                tables=len(self._requests),
                offsets_read=read,
                offsets_total=total,
                percent=round(100 * read / total, 1) if total else 100.0,
            )

    def _offsets(self, progress: Mapping[TopicPartition, int]) -> tuple[int, int]:
        """Offsets read so far and in all, over the tables already reset."""
        read = total = 0
        for request_id, targets in self._targets.items():
            topic = self._requests[request_id][1]
            done = request_id in self._done
            for partition, target in targets.items():
                total += target
                reached = progress.get(TopicPartition(topic, partition), 0)
                read += target if done else min(target, reached)
        return read, total
