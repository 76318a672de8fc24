"""The metrics that are read, not counted: on a bounded interval, from a thread of its own.

Each sample reads, on side connections (never the tasks' own):
- the source plugin's ``probe(config, pipeline)`` when it has one (PostgreSQL: the slot's
  retained WAL, ``active``, ``wal_status``, and whether the server has WAL past the slot's
  position), for ``cdc_source_retained_wal_bytes``, ``cdc_source_slot_*`` and the source's
  stall alarm;
- each sink's lag, the log's end offsets against the sink's committed ones (as ``cdc status``
  reads them), for ``cdc_sink_lag_records`` and the sinks' stall alarms;
- each live join view's lag for the views' stall alarms, as ``cdc_view_lag_records`` holds it:
  the view lag sampler (:mod:`cdc.metrics.views`) reads it every second (Kafka: 5 s), so it is
  not read twice;
- the snapshot's chunk counts from the stored source offsets, for ``cdc_snapshot_chunks``.

A failed read is logged (once per kind of failure in a row) and the sample goes on: a metric
must never stop a pipeline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cdc.contracts import snapshot_offsets
from cdc.log.base import Log, TopicPartition
from cdc.metrics.health import Health
from cdc.metrics.observers import SOURCE_TASK, sink_task
from cdc.metrics.registry import WAL_STATUSES, Metrics
from cdc.support.logging import Logger
from cdc.support.redact import redact
from cdc.views.health import view_task

#: ``probe(config, pipeline)`` of a source plugin: a mapping with any of ``retained_wal_bytes``
#: (int), ``slot_active`` (bool), ``wal_status`` (str), ``position`` (a number: the slot's
#: confirmed position) and ``behind`` (bool: the server has changes past the position).
SourceProbe = Callable[[], Mapping[str, Any]]


class Sampler:
    """Samples every ``interval_s`` until ``stop`` is set.

    Args:
        sinks: ``{sink name: (consumer group, its topics)}``.
    """

    def __init__(
        self,
        metrics: Metrics,
        health: Health,
        pipeline: str,
        log: Log,
        probe: SourceProbe | None,
        sinks: Mapping[str, tuple[str, Sequence[str]]],
        interval_s: float,
        logger: Logger,
    ) -> None:
        self._m = metrics
        self._health = health
        self._pipeline = pipeline
        self._log = log
        self._probe = probe
        self._sinks = sinks
        self._interval_s = interval_s
        self._logger = logger
        self._failing: set[str] = set()
        self._last_position: Any = None

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self._interval_s):
            self.sample()

    def sample(self) -> None:
        if self._probe is not None:
            self._guarded("source", self._sample_source)
        self._guarded("sinks", self._sample_sinks)
        self._guarded("views", self._sample_views)
        self._guarded("snapshot", self._sample_snapshot)
        self._health.evaluate()

    def _guarded(self, what: str, read: Callable[[], None]) -> None:
        try:
            read()
        except Exception as exc:
            if what not in self._failing:  # once per failure in a row, not every interval
                self._logger.warning("metrics.sample_failed", part=what, error=redact(str(exc)))
            self._failing.add(what)
        else:
            self._failing.discard(what)

    def _sample_source(self) -> None:
        assert self._probe is not None
        found = self._probe()
        pipeline = self._pipeline
        if "retained_wal_bytes" in found:
            self._m.retained_wal.labels(pipeline).set(found["retained_wal_bytes"] or 0)
        if "slot_active" in found:
            self._m.slot_active.labels(pipeline).set(bool(found["slot_active"]))
        status = found.get("wal_status")
        if status is not None:
            for each in WAL_STATUSES:
                self._m.slot_wal_status.labels(pipeline, each).set(each == status)
        position = found.get("position")
        if position is not None and position != self._last_position:
            if self._last_position is not None:  # the slot moved: the source made progress
                self._health.progress(SOURCE_TASK)
            self._last_position = position
        self._health.waiting(SOURCE_TASK, bool(found.get("behind")))

    def _sample_sinks(self) -> None:
        existing = {info.name for info in self._log.topics()}
        for sink, (group, topics) in self._sinks.items():
            committed = self._log.committed_offsets(group)
            total = 0
            for topic in topics:
                ends = self._log.end_offsets(topic) if topic in existing else {}
                for partition, end in ends.items():
                    lag = max(0, end - committed.get(TopicPartition(topic, partition), 0))
                    total += lag
                    self._m.sink_lag.labels(self._pipeline, sink, topic, str(partition)).set(lag)
            self._health.waiting(sink_task(sink), total > 0)

    def _sample_views(self) -> None:
        # The series of the views this process runs (each exists from its view task's start).
        for family in self._m.view_lag.collect():
            for sample in family.samples:
                if sample.labels.get("pipeline") == self._pipeline:
                    self._health.waiting(view_task(sample.labels["view"]), sample.value > 0)

    def _sample_snapshot(self) -> None:
        state = snapshot_offsets.read(self._log.source_offsets())
        for table in state.tables if state is not None else ():  # queued or failed: no chunks
            done, total = table.chunks_done, table.chunks_total
            chunks = self._m.snapshot_chunks
            chunks.labels(self._pipeline, table.table, "done").set(done)
            chunks.labels(self._pipeline, table.table, "pending").set(max(0, total - done))
