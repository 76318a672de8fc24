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
lease's callback for the session to end); :class:`cdc.runtime.lease_gate.LeaseGate`, which
single-writer sinks share, keeps it.

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

import threading
from collections.abc import Callable
from typing import Protocol

from cdc.config.models import KafkaLogConfig
from cdc.config.pipeline import Pipeline
from cdc.config.views import ViewConfig
from cdc.contracts.errors import LogFatal
from cdc.log.base import LogTransaction
from cdc.runtime.lease_gate import Lease, LeaseGate
from cdc.support.logging import Logger


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


class ViewGate(LeaseGate):
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
        super().__init__(
            open_lease, stop, logger, kind="view", lost_reason="another process takes over the view"
        )
        self._told: Callable[[str | None], None] = lambda leader: None
        self._fenced_idle = 0  # terms in a row fenced before they committed a batch

    def serve(self, run: Callable[[], None], standing_by: Callable[[str | None], None]) -> None:
        """Stand by and lead in turn until the pipeline stops: ``run`` serves one term (until
        :attr:`term` is set, or it raises :class:`TermFenced`); ``standing_by`` is told who
        leads while another process does, and ``None`` when a term ends while the pipeline goes
        on (a standby from then, not running until the new holder is known)."""
        self._told = standing_by
        self._serve(run)

    def _standing_by(self, leader: str | None) -> None:
        self._told(leader)

    def _term_failure(self, exc: BaseException) -> BaseException | None:
        if not isinstance(exc, TermFenced):
            return exc
        # A newer holder runs the view: no failure of the pipeline's. The gate leaves the lease
        # group and joins anew, so that only the coordinator's say gives it a next term, whose
        # claim would fence the holder that fenced this one.
        self._logger.warning("view.fenced", error=str(exc), committed=exc.committed)
        self._rejoin = True
        self._fenced_idle = 0 if exc.committed else self._fenced_idle + 1
        if self._fenced_idle < FENCED_TERMS_LIMIT:
            return None
        return LogFatal(
            f"{exc} ({self._fenced_idle} terms in a row were fenced before they "
            "committed a batch: a batch takes longer than log.transaction_timeout_ms, "
            "or another process keeps claiming the view's transactional id)"
        )
