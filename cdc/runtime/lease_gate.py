"""Lead in turn on Kafka: one member of a lease group runs its work, the others stand by.

Two kinds of work take one writer on Kafka: a single-writer sink's store
(:mod:`cdc.runtime.standby`) and a live join view's local store (:mod:`cdc.views.standby`).
Both hold the same :class:`LeaseGate`, so the order that is their guarantee lives in one place:
a term (the work, in its own thread) ends, and its store is closed, before the lease is released
(a clean stop closes the lease last) or handed on (a revocation waits, in the lease's callback,
for the term to end). What differs between them (the log events' prefix, who is told of a
standby, a term that ends fenced) are the hooks a subclass overrides.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Protocol

from cdc.contracts.errors import CdcError
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


class LeaseGate:
    """Runs terms of some work while this member holds a lease.

    Args:
        open_lease: joins the lease, given the callback that ends the term when it is lost.
        stop: the pipeline's stop event.
        logger: the work's logger.
        kind: the log events' prefix (``sink``: ``sink.leading``, ``sink.standby``...), and the
            term thread's name (``sink-leader``).
        lost_reason: what ``<kind>.lease_lost`` says.

    The work is built with :attr:`term` as its stop event: set when the pipeline stops or the
    lease is lost, cleared for each new term.
    """

    def __init__(
        self,
        open_lease: Callable[[Callable[[], None]], Lease],
        stop: threading.Event,
        logger: Logger,
        *,
        kind: str,
        lost_reason: str,
    ) -> None:
        self.term = threading.Event()
        self._open_lease = open_lease
        self._stop = stop
        self._logger = logger
        self._kind = kind
        self._lost_reason = lost_reason
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._rejoin = False  # the last term asked to leave the lease group and join anew

    # Hooks: a subclass's differences.

    def _standing_by(self, leader: str | None) -> None:
        """Another member leads (``leader``), or a term ended while the pipeline goes on
        (``None``: the new holder not known yet)."""

    def _term_failure(self, exc: BaseException) -> BaseException | None:
        """What a term's ``exc`` is for the serving thread, which raises it (``None``: the term
        just ended; set :attr:`_rejoin` to take the lease only from the coordinator's say)."""
        return exc

    # The loop.

    def _serve(self, run: Callable[[], None]) -> None:
        """Stand by and lead in turn until the pipeline stops: ``run`` serves one term (until
        :attr:`term` is set)."""
        join = functools.partial(self._open_lease, self._lost)
        lease: Lease | None = None
        try:
            while not self._stop.is_set():
                if lease is None:
                    try:
                        lease = retry_until_stopped(
                            join, self._stop, self._logger, f"{self._kind}.lease_retrying"
                        )
                    except Stopped:
                        return
                if self._stand_by(lease):
                    self._lead(lease, run)
                    if not self._stop.is_set():
                        self._standing_by(None)
                if self._rejoin:
                    # Its lease may still look held (a paused process learns of its loss later):
                    # leave the group and join it anew, so that only the coordinator's say gives
                    # it a next term.
                    self._rejoin = False
                    self._logger.warning(f"{self._kind}.lease_rejoining", group=lease.group)
                    left, lease = lease, None
                    left.close()
        finally:
            try:
                self._end_term()  # the store is closed before the lease is let go
            finally:
                if lease is not None:
                    lease.close()

    def _stand_by(self, lease: Lease) -> bool:
        """Serve the lease until it is this member's (True) or the pipeline stops (False)."""
        announced, asked = False, 0
        while not self._stop.is_set():
            self._renew(lease)
            if lease.held:
                return True
            if not announced and asked % ASK_LEADER_EVERY == 0:
                leader = lease.leader()
                if leader is not None:  # another member holds it: this one is a standby
                    self._logger.info(f"{self._kind}.standby", leader=leader, group=lease.group)
                    self._standing_by(leader)
                    announced = True
            asked += 1
        return False

    def _lead(self, lease: Lease, run: Callable[[], None]) -> None:
        """Run a term until the pipeline stops or the lease is lost."""
        self._logger.info(f"{self._kind}.leading", group=lease.group)
        self.term.clear()
        self._rejoin = False
        thread = threading.Thread(target=self._run, args=(run,), name=f"{self._kind}-leader")
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
            self._failure = self._term_failure(exc)

    def _lost(self) -> None:
        """Inside the lease's revocation: end the term and wait until the store is closed."""
        try:
            self._logger.warning(f"{self._kind}.lease_lost", reason=self._lost_reason)
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
            self._logger.warning(f"{self._kind}.lease_unavailable", error=str(exc))
            self._stop.wait(1.0)
