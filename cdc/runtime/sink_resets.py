"""Table resets inside a sink's task: drop a table in the sink, then rebuild it from the log.

``cdc sink FILE NAME --reset-table T`` only records a request in the control topic
(:mod:`cdc.runtime.sink_control`), which the process's watcher follows
(:mod:`cdc.runtime.control_watcher`). The sink's own task applies it, so nothing else ever writes
to the sink's store behind its back: right after opening the sink (a pipeline that was not
running applies it when it starts), or between two batches of a running sink, or by starting a
sink that an error had stopped. Applying means ``sink.reset_table`` (the sink forgets the table
and stores offset 0 for every partition of its topic), then reading the topic again from its
start: the compacted log holds the latest record of every key, which rebuilds the table.

A rebuild is *done* once the task has applied, in each partition of the topic, the last record
that was there at the reset (not the end offset: on Kafka a transaction marker may follow it).

The same resets rebuild a whole sink whose store lost its data (:meth:`TableResets.rebuild_all`,
a cache that restarted empty): the task requests one for each of its tables itself, and
:mod:`cdc.runtime.sink_rebuild` reports them as one rebuild.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping

from cdc.contracts.errors import CdcError
from cdc.contracts.sink import Sink
from cdc.log.base import Log, TopicPartition
from cdc.log.offsets import last_offsets
from cdc.runtime.control_watcher import ControlWatcher
from cdc.runtime.sink_control import APPLIED, DONE, FAILED, PENDING, Reset
from cdc.runtime.sink_rebuild import WholeRebuild
from cdc.support.clock import now_ms
from cdc.support.logging import Logger
from cdc.support.retry import Decision, classify


class TableResets:
    """The resets of one sink: applies requested ones and reports finished rebuilds.

    What it learns of requests comes from the process's :class:`ControlWatcher` and what it
    reports goes through it, so the sink's thread never waits on the control topic; requests
    it has applied are remembered here, since the watcher shows them as applied only after its
    next read.

    Args:
        tables: the sink's tables by ``"schema.table"``, each with its topic.
    """

    def __init__(
        self,
        watcher: ControlWatcher,
        log: Log,
        sink_name: str,
        tables: Mapping[str, tuple[tuple[str, str], str]],
        logger: Logger,
    ) -> None:
        self._watcher = watcher
        self._log = log
        self._sink_name = sink_name
        self._tables = tables
        self._logger = logger
        self._handled: set[str] = set()  # applied, failed or done by this task
        self._rebuilding: dict[str, Reset] = {}
        self._progress: dict[TopicPartition, int] = {}
        self._own: list[Reset] = []  # requested by the task itself (rebuild_all)
        self._whole: WholeRebuild | None = None

    def pending(self) -> bool:
        """Whether a reset waits to be applied (as of the watcher's last read)."""
        return bool(self._requested())

    def _requested(self) -> list[Reset]:
        requested = [*self._watcher.pending(self._sink_name), *self._own]
        return [r for r in requested if r.id not in self._handled]

    def rebuild_all(self, reason: str) -> None:
        """The sink's store lost its data: request a reset of every table, which the next
        :meth:`apply` does as it does requested ones.

        Requested here, not in the control topic: the sink's thread never waits on the log,
        and a store that lost its data must not wait for a round trip through it. The resets
        are still reported there (applied, then done), so ``cdc status`` shows them.
        """
        requested = now_ms()
        self._own = [
            Reset(uuid.uuid4().hex[:12], self._sink_name, table, PENDING, requested)
            for table in self._tables
        ]
        by_id = {r.id: (r.table, self._tables[r.table][1]) for r in self._own}
        self._whole = WholeRebuild(self._logger, by_id, reason)

    def apply(self, sink: Sink) -> int:
        """Apply every requested reset to the open ``sink``; returns how many were applied.

        Raises:
            CdcError: a retriable error of the log or the sink (try again: what was applied
                is remembered), or a fatal one of the sink (the request is marked failed).
        """
        for request in self._watcher.rebuilding(self._sink_name):
            if request.id not in self._handled:
                self._rebuilding.setdefault(request.id, request)
        applied = 0
        for request in self._requested():
            applied += self._apply_one(sink, request)
        self._own = [r for r in self._own if r.id not in self._handled]
        # A rebuild that an earlier run of the task finished without saying so is done now.
        self.applied(sink.stored_offsets() or {})
        return applied

    def _apply_one(self, sink: Sink, request: Reset) -> int:
        found = self._tables.get(request.table)
        if found is None:
            self._fail(request, f"sink {self._sink_name} does not hold table {request.table}")
            return 0
        if sink.stored_offsets() is None:
            self._fail(request, "the sink keeps no offsets with its data, so it cannot be reset")
            return 0
        table, topic = found
        self._log.ensure_topics([topic])
        targets = last_offsets(self._log, topic)
        partitions = [TopicPartition(topic, p) for p in sorted(targets)]
        try:
            sink.reset_table(table, partitions)
        except CdcError as exc:
            if classify(exc) is not Decision.RETRY:
                self._fail(request, f"the sink could not reset the table: {exc}")
            raise
        self._logger.info("sink.table_reset", table=request.table, request=request.id)
        self._handled.add(request.id)
        for tp in partitions:
            self._progress.pop(tp, None)
        self._watcher.post(lambda c: c.update_reset(request, APPLIED, targets=targets))
        self._rebuilding[request.id] = dataclasses.replace(request, state=APPLIED, targets=targets)
        if self._whole is not None and self._whole.owns(request.id):
            self._whole.reset(request.id, targets)
        return 1

    def _fail(self, request: Reset, reason: str) -> None:
        self._logger.error("sink.reset_failed", table=request.table, request=request.id, why=reason)
        self._handled.add(request.id)
        self._post(request, FAILED, reason)

    def applied(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Note a batch the task made durable (the next offset per partition), and report the
        rebuilds it finished."""
        if not self._rebuilding:
            return
        for tp, offset in offsets.items():
            self._progress[tp] = max(offset, self._progress.get(tp, 0))
        whole = self._whole
        for request_id, request in list(self._rebuilding.items()):
            if self._reached(request):
                self._logger.info("sink.table_rebuilt", table=request.table, request=request_id)
                self._post(request, DONE)
                self._handled.add(request_id)
                del self._rebuilding[request_id]
                if whole is not None and whole.owns(request_id):
                    whole.done(request_id)
        if whole is not None:
            whole.note(self._progress)
            if whole.finished():
                self._whole = None

    def _post(self, request: Reset, state: str, reason: str | None = None) -> None:
        self._watcher.post(lambda c: c.update_reset(request, state, reason))

    def _reached(self, request: Reset) -> bool:
        found = self._tables.get(request.table)
        if found is None:
            return True
        topic = found[1]
        return all(
            self._progress.get(TopicPartition(topic, partition), 0) >= target
            for partition, target in (request.targets or {}).items()
        )
