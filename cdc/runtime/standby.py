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
for the task to end). On the embedded log nothing of this runs: one process reads the log.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Protocol

from cdc.config.models import KafkaLogConfig, SinkConfig
from cdc.config.pipeline import Pipeline
from cdc.contracts import plugins
from cdc.contracts.errors import CdcError
from cdc.metrics.observers import SinkObserver
from cdc.metrics.registry import STANDBY
from cdc.runtime.sink_task import SinkTask
from cdc.support.logging import Logger
from cdc.support.retry import Stopped, is_retriable, retry_until_stopped

#: How long one serving of the lease waits: also how soon a stop or a lost lease is seen.
RENEW_S = 0.2
#: A standby asks who leads at most this often until it knows (an admin request each time).
ASK_LEADER_EVERY = 10


class Lease(Protocol):
    """What the gate needs of a lease (:class:`cdc.log.kafka.leadership.KafkaLease`)."""

    group: str
    held: bool

    def renew(self, timeout_s: float) -> None: ...

    def leader(self) -> str | None: ...

    def close(self) -> None: ...


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


class Gate:
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
        self.term = threading.Event()
        self._open_lease = open_lease
        self._stop = stop
        self._logger = logger
        self._observer = observer
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    def serve(self, task: SinkTask) -> None:
        """Stand by and lead in turn until the pipeline stops."""
        try:
            join = functools.partial(self._open_lease, self._lost)
            lease = retry_until_stopped(join, self._stop, self._logger, "sink.lease_retrying")
        except Stopped:
            return
        try:
            while not self._stop.is_set():
                if self._stand_by(lease):
                    self._lead(lease, task)
        finally:
            try:
                self._end_term()  # the store is closed before the lease is let go
            finally:
                lease.close()

    def _stand_by(self, lease: Lease) -> bool:
        """Serve the lease until it is this worker's (True) or the pipeline stops (False)."""
        announced, asked = False, 0
        while not self._stop.is_set():
            self._renew(lease)
            if lease.held:
                return True
            if not announced and asked % ASK_LEADER_EVERY == 0:
                leader = lease.leader()
                if leader is not None:  # another member holds it: this one is a standby
                    self._announce(lease, leader)
                    announced = True
            asked += 1
        return False

    def _announce(self, lease: Lease, leader: str) -> None:
        self._logger.info("sink.standby", leader=leader, group=lease.group)
        if self._observer is not None:
            self._observer.state(STANDBY)

    def _lead(self, lease: Lease, task: SinkTask) -> None:
        """Run the task until the pipeline stops or the lease is lost."""
        self._logger.info("sink.leading", group=lease.group)
        self.term.clear()
        thread = threading.Thread(target=self._run, args=(task,), name="sink-leader")
        self._thread = thread
        thread.start()
        # The lease's loss ends the term inside renew (self._thread is None by then).
        while thread.is_alive() and lease.held:
            if self._stop.is_set():
                self.term.set()
            self._renew(lease)
        self._end_term()

    def _run(self, task: SinkTask) -> None:
        try:
            task.serve()
        except BaseException as exc:  # handed to the gate's thread, which fails the pipeline
            self._failure = exc

    def _lost(self) -> None:
        """Inside the lease's revocation: stop the task and wait until the store is closed."""
        try:
            self._logger.warning("sink.lease_lost", reason="another worker takes over the sink")
            self._end_term()
        except BaseException as exc:  # must not raise inside librdkafka's callback
            self._failure = self._failure or exc

    def _end_term(self) -> None:
        self.term.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _renew(self, lease: Lease) -> None:
        try:
            lease.renew(RENEW_S)
        except CdcError as exc:  # the cluster away: librdkafka reconnects by itself
            if not is_retriable(exc):
                raise
            self._logger.warning("sink.lease_unavailable", error=str(exc))
            self._stop.wait(1.0)
