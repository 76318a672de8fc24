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
lease's callback for the session to end).

A leader paused past ``session_timeout_ms`` (a stopped process, a long stall) still believes it
leads when it wakes, until its lease's callback tells it otherwise, and may be mid-batch. So
each term's transactions use the view's own transactional id (:func:`view_transactional_id`),
claimed at the start of the term (:meth:`cdc.log.kafka.log.KafkaLog.claim_writer`), before the
store is checked against the state topic: the claim fences every older holder's producer, whose
open transaction is aborted and whose commit then fails. The fenced term ends
(:class:`TermFenced`) without a new producer (which would fence the new holder back), and the
gate leaves the lease group and joins it anew: the process runs the view again only once the
coordinator gives it the lease. On the embedded log nothing of this runs: one process reads the
log.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Protocol

from cdc.config.models import KafkaLogConfig
from cdc.config.pipeline import Pipeline
from cdc.config.views import ViewConfig
from cdc.contracts.errors import CdcError, LogFatal
from cdc.log.base import LogTransaction
from cdc.runtime.standby import ASK_LEADER_EVERY, RENEW_S, Lease
from cdc.support.logging import Logger
from cdc.support.retry import Stopped, is_retriable, retry_until_stopped


def view_transactional_id(pipeline: str, view: str) -> str:
    """The transactional id every term of ``view`` claims (apart from the source's
    ``cdc-<pipeline>``): a term's claim fences the view's older holders, and no other's."""
    return f"cdc-{pipeline}.view.{view}"


class Claim(Protocol):
    """A term's claim of the view's transactional id (:mod:`cdc.log.kafka.claim`)."""

    @property
    def transactional_id(self) -> str: ...

    @property
    def spent(self) -> bool: ...

    def begin(self) -> LogTransaction: ...

    def close(self) -> None: ...


class TermFenced(LogFatal):
    """The view's transactions were fenced (a newer holder claimed its transactional id, or
    the broker aborted a transaction open longer than ``log.transaction_timeout_ms``) or their
    producer is gone: the term ends, and a new one needs the lease won again. ``committed``:
    how many batches the term committed before."""

    def __init__(self, message: str, committed: int) -> None:
        super().__init__(message)
        self.committed = committed


#: Terms in a row fenced before they committed a batch, after which the view stops (and the
#: pipeline with it) instead of taking the lease again: a takeover fences a term once; terms
#: that never get a batch through are a batch slower than ``log.transaction_timeout_ms``, or a
#: process that keeps claiming the view's id, and each round would be a new producer for nothing.
FENCED_TERMS_LIMIT = 3


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
        self._fenced = False  # the last term ended fenced (TermFenced)
        self._fenced_idle = 0  # terms in a row fenced before they committed a batch

    def serve(self, run: Callable[[], None], standing_by: Callable[[str | None], None]) -> None:
        """Stand by and lead in turn until the pipeline stops: ``run`` serves one term (until
        :attr:`term` is set, or it raises :class:`TermFenced`); ``standing_by`` is told who
        leads while another process does."""
        join = functools.partial(self._open_lease, self._lost)
        lease: Lease | None = None
        try:
            while not self._stop.is_set():
                if lease is None:
                    lease = retry_until_stopped(
                        join, self._stop, self._logger, "view.lease_retrying"
                    )
                if self._stand_by(lease, standing_by):
                    self._lead(lease, run)
                    if not self._stop.is_set():
                        # The term is over (lease lost, or fenced): a standby from now, not
                        # running until the new holder is known (None: not known yet).
                        standing_by(None)
                if self._fenced:
                    # Its lease may still look held (a paused process learns of its loss later):
                    # leave the group and join it anew, so that only the coordinator's say gives
                    # it a next term, whose claim would fence the holder that fenced this one.
                    self._fenced = False
                    self._logger.warning("view.lease_rejoining", group=lease.group)
                    left: Lease = lease
                    lease = None
                    left.close()
        except Stopped:
            return
        finally:
            try:
                self._end_term()  # the store is closed before the lease is let go
            finally:
                if lease is not None:
                    lease.close()

    def _stand_by(self, lease: Lease, standing_by: Callable[[str | None], None]) -> bool:
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
        self._fenced = False
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
        except TermFenced as exc:  # a newer holder runs the view: no failure of the pipeline's
            self._logger.warning("view.fenced", error=str(exc), committed=exc.committed)
            self._fenced = True
            self._fenced_idle = 0 if exc.committed else self._fenced_idle + 1
            if self._fenced_idle >= FENCED_TERMS_LIMIT:
                self._failure = LogFatal(
                    f"{exc} ({self._fenced_idle} terms in a row were fenced before they "
                    "committed a batch: a batch takes longer than log.transaction_timeout_ms, "
                    "or another process keeps claiming the view's transactional id)"
                )
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
