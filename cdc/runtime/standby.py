"""A single-writer sink's workers on Kafka: one leads and runs the sink, the others stand by.

A sink plugin that sets ``single_writer = True`` (:class:`cdc.contracts.sink.SinkPlugin`) has a
store that takes one writer: a DuckDB file, a Tantivy index. On Kafka, every ``cdc sink`` worker
of such a sink holds a :class:`Gate`: it takes part in the sink's lease
(:mod:`cdc.log.kafka.leadership`) and runs the :class:`~cdc.runtime.sink_task.SinkTask` only
while it leads. A standby opens neither the store nor the sink's consumer group; it says so
once per standby period (``sink.standby``, with who leads), in ``cdc_sink_state{state="standby"}``
and ``cdc status`` (the lease group's members), and takes over when the lease comes to it.

Order is the guarantee: the task is stopped, and its store closed, before the lease is released
(a clean stop closes the lease last) or handed on (a revocation waits in the lease's callback
for the task to end); :class:`cdc.runtime.lease_gate.LeaseGate`, which live join views share,
keeps it. On the embedded log nothing of this runs: one process reads the log.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from cdc.config.models import KafkaLogConfig, SinkConfig
from cdc.config.pipeline import Pipeline
from cdc.contracts import plugins
from cdc.metrics.observers import SinkObserver
from cdc.metrics.registry import STANDBY
from cdc.runtime.lease_gate import Lease, LeaseGate
from cdc.runtime.sink_task import SinkTask
from cdc.support.logging import Logger


def leased(pipeline: Pipeline, config: SinkConfig) -> bool:
    """Whether ``config``'s store may be opened only by the worker holding its lease: a
    single-writer sink on Kafka (on the embedded log one process reads the log)."""
    return isinstance(pipeline.log, KafkaLogConfig) and plugins.single_writer(config.type)


def gate_for(
    pipeline: Pipeline,
    config: SinkConfig,
    stop: threading.Event,
    logger: Logger,
    observer: SinkObserver | None,
) -> Gate | None:
    """The gate of a single-writer sink on Kafka; ``None`` for any other sink or log."""
    log = pipeline.log
    if not isinstance(log, KafkaLogConfig) or not leased(pipeline, config):
        return None
    from cdc.log.kafka.leadership import KafkaLease  # the Kafka client only where it runs

    def open_lease(on_lost: Callable[[], None]) -> Lease:
        return KafkaLease(log, pipeline.name, config.name, on_lost)

    return Gate(open_lease, stop, logger, observer)


class Gate(LeaseGate):
    """Runs a sink task while this worker holds the sink's lease.

    Args:
        open_lease: joins the lease, given the callback that stops the task when it is lost.
        stop: the pipeline's stop event.
        logger: the sink's logger.
        observer: the sink's metrics (``None``: off).

    The task is built with :attr:`term` as its stop event: set when the pipeline stops or
    leadership is lost, cleared for each new term.
    """

    def __init__(
        self,
        open_lease: Callable[[Callable[[], None]], Lease],
        stop: threading.Event,
        logger: Logger,
        observer: SinkObserver | None,
    ) -> None:
        super().__init__(
            open_lease, stop, logger, kind="sink", lost_reason="another worker takes over the sink"
        )
        self._observer = observer

    def serve(self, task: SinkTask) -> None:
        """Stand by and lead in turn until the pipeline stops."""
        self._serve(task.serve)

    def _standing_by(self, leader: str | None) -> None:
        # Said once another worker is known to lead; a term's end alone changes no state here.
        if leader is not None and self._observer is not None:
            self._observer.state(STANDBY)
