"""A live join view's processes on Kafka: one leads and runs the view, the others stand by.

A view's join state is one process's local store (:mod:`cdc.views.store`), a cache of its state
topic, and its consumer group's partitions must all be read by that one process: two members
would split them, each applying part of the changes to its own store, and the documents each
writes would miss the other's rows (and a store would fall behind the state topic the other
wrote, with nothing to tell it). So on Kafka every process that runs the view (each ``cdc run``
of the pipeline that runs the source) takes part in the view's lease
(:class:`cdc.log.kafka.leadership.KafkaLease`, the group ``<pipeline>.view.<view>.leader``, the
mechanism single-writer sinks use: :mod:`cdc.runtime.standby`) and runs the view's sessions
only while it holds it. A standby opens neither the store nor the view's consumer group; its
state is ``standby`` (``cdc status``, ``/readyz``: ready); when the lease comes to it, its first
session opens the store, which is rebuilt from the state topic when it does not hold the
topic's last batch (another process wrote since, or this machine never ran the view).

Order is the guarantee: the session ends, and its consumer and store are closed, before the
lease is released (a clean stop closes the lease last) or handed on (a revocation waits in the
lease's callback for the session to end). A leader paused past ``session_timeout_ms`` is fenced
by its transactions only once the new leader's consumer joined the view's group (they carry the
member's metadata, KIP-447): a batch it commits before that, or while still a member that has
not yet seen its lease lost, is missing from the new leader's store, checked at its start. Not
fenced by a transactional id yet (docs/views.md, "Not yet safe"). On the embedded log nothing of
this runs: one process reads the log.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from cdc.config.models import KafkaLogConfig
from cdc.config.pipeline import Pipeline
from cdc.config.views import ViewConfig
from cdc.contracts.errors import CdcError
from cdc.runtime.standby import ASK_LEADER_EVERY, RENEW_S, Lease
from cdc.support.logging import Logger
from cdc.support.retry import Stopped, is_retriable, retry_until_stopped


def view_gate(
    pipeline: Pipeline, view: ViewConfig, stop: threading.Event, logger: Logger
) -> ViewGate | None:
    """The gate of ``view`` on Kafka; ``None`` on the embedded log."""
    log = pipeline.log
    if not isinstance(log, KafkaLogConfig):
        return None
    from cdc.log.kafka.leadership import KafkaLease, view_lease_group  # Kafka's client only here

    group = view_lease_group(pipeline.name, view.name)

    def open_lease(on_lost: Callable[[], None]) -> Lease:
        return KafkaLease(log, pipeline.name, view.name, on_lost, group=group)

    return ViewGate(open_lease, stop, logger)


class ViewGate:
    """Runs a view's sessions while this process holds the view's lease.

    Args:
        open_lease: joins the lease, given the callback that ends the term when it is lost.
        stop: the pipeline's stop event.
        logger: the view's logger.

    The view task is built with :attr:`term` as its stop event: set when the pipeline stops or
    the lease is lost, cleared for each new term.
    """

    def __init__(
        self,
        open_lease: Callable[[Callable[[], None]], Lease],
        stop: threading.Event,
        logger: Logger,
    ) -> None:
        self.term = threading.Event()
        self._open_lease = open_lease
        self._stop = stop
        self._logger = logger
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    def serve(self, run: Callable[[], None], standing_by: Callable[[str], None]) -> None:
        """Stand by and lead in turn until the pipeline stops: ``run`` serves one term (until
        :attr:`term` is set); ``standing_by`` is told who leads while another process does."""
        try:
            join = functools.partial(self._open_lease, self._lost)
            lease = retry_until_stopped(join, self._stop, self._logger, "view.lease_retrying")
        except Stopped:
            return
        try:
            while not self._stop.is_set():
                if self._stand_by(lease, standing_by):
                    self._lead(lease, run)
        finally:
            try:
                self._end_term()  # the store is closed before the lease is let go
            finally:
                lease.close()

    def _stand_by(self, lease: Lease, standing_by: Callable[[str], None]) -> bool:
        """Serve the lease until it is this process's (True) or the pipeline stops (False)."""
        announced, asked = False, 0
        while not self._stop.is_set():
            self._renew(lease)
            if lease.held:
                return True
            if not announced and asked % ASK_LEADER_EVERY == 0:
                leader = lease.leader()
                if leader is not None:  # another member holds it: this one is a standby
                    self._logger.info("view.standby", leader=leader, group=lease.group)
                    standing_by(leader)
                    announced = True
            asked += 1
        return False

    def _lead(self, lease: Lease, run: Callable[[], None]) -> None:
        """Run a term until the pipeline stops or the lease is lost."""
        self._logger.info("view.leading", group=lease.group)
        self.term.clear()
        thread = threading.Thread(target=self._run, args=(run,), name="view-leader")
        self._thread = thread
        thread.start()
        # The lease's loss ends the term inside renew (self._thread is None by then).
        while thread.is_alive() and lease.held:
            if self._stop.is_set():
                self.term.set()
            self._renew(lease)
        self._end_term()

    def _run(self, run: Callable[[], None]) -> None:
        try:
            run()
        except BaseException as exc:  # handed to the gate's thread, which fails the pipeline
            self._failure = exc

    def _lost(self) -> None:
        """Inside the lease's revocation: end the term and wait until the store is closed."""
        try:
            self._logger.warning("view.lease_lost", reason="another process takes over the view")
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
            self._logger.warning("view.lease_unavailable", error=str(exc))
            self._stop.wait(1.0)
