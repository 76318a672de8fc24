"""Committing a group member's offsets asynchronously, the consumer served while it waits.

A synchronous commit blocks librdkafka's caller for as long as the group coordinator is away
(45 s and more when the broker is down) and serves no callback meanwhile: the consumer could
neither log the outage nor be stopped. So :class:`Committer` sends the commit asynchronously
and, until librdkafka hands the result to the ``on_commit`` setting, serves the consumer (its
error callback, rebalances) through the caller's ``serve``, which keeps the records that arrive.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from cdc.log.kafka.common import describe, error_of
from cdc.support.logging import get_logger
from cdc.support.retry import Backoff, Stopped, retry

#: A commit gives up (LogUnavailable) once the coordinator stayed unreachable this long.
COMMIT_RETRY_S = 30.0
#: While a commit waits for its result, the consumer is served in slices this long.
_SERVE_S = 0.1
#: Commit errors that mean the partitions moved to another member: it re-reads from the last
#: successful commit, which the sinks' idempotence makes harmless.
_REBALANCED = {
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError._ASSIGNMENT_LOST,
}

_logger = get_logger(component="kafka_log")

#: What one commit asked for: ``(topic, partition, offset)`` of every partition.
CommitKey = frozenset[tuple[str, int, int]]


def commit_key(partitions: Sequence[Any]) -> CommitKey:
    """The key of a commit of ``partitions`` (confluent-kafka ``TopicPartition`` objects)."""
    return frozenset((p.topic, p.partition, p.offset) for p in partitions or ())


class CommitResults:
    """Commit results by what each commit asked for.

    Results are matched by offsets, not by arrival order: a commit given up on (no answer in
    time) can answer later, in the middle of the next one's wait. A late result for the same
    offsets is as good as the awaited one; any other is dropped when the next commit starts.
    """

    def __init__(self) -> None:
        self._results: dict[CommitKey, KafkaError | None] = {}

    def expect(self) -> None:
        """A new commit starts: results of earlier ones no longer matter."""
        self._results.clear()

    def on_commit(self, err: KafkaError | None, partitions: Sequence[Any] | None) -> None:
        """librdkafka's ``on_commit``; it must not raise (it runs inside librdkafka's calls)."""
        try:
            if err is None:  # a partition's own error fails the commit too: it is not durable
                err = next((p.error for p in partitions or () if p.error is not None), None)
            self._results[commit_key(partitions or ())] = err
        except Exception:  # a bad argument must not break the client
            pass

    def take(self, key: CommitKey) -> tuple[bool, KafkaError | None]:
        """``(True, error or None)`` once the commit of ``key`` answered, else ``(False, None)``."""
        if key not in self._results:
            return False, None
        return True, self._results.pop(key)


class Committer:
    """Commits for one consumer; :attr:`on_commit` goes into the consumer's settings.

    Args:
        serve: serves the consumer for at most the given seconds (a ``poll``), keeping what it
            returns for the caller's next read.
    """

    def __init__(self, serve: Callable[[float], None]) -> None:
        self._serve = serve
        self._results = CommitResults()
        self.on_commit = self._results.on_commit
        self.sent = 0.0  # when the last attempt was sent (time.monotonic())

    def commit(
        self,
        consumer: Any,
        partitions: list[KafkaPartition],
        stop: threading.Event | None,
        wait_in_librdkafka: bool = False,
    ) -> bool:
        """Commit ``partitions``; False if a rebalance took them away (the commit is dropped).

        Args:
            wait_in_librdkafka: commit synchronously (inside a rebalance callback the consumer
                cannot be served).

        Raises:
            KafkaException: no answer within :data:`COMMIT_RETRY_S`, or a fatal error.
            Stopped: ``stop`` was set while the commit waited.
        """
        deadline = time.monotonic() + COMMIT_RETRY_S

        def once() -> bool:
            return self._once(consumer, partitions, deadline, stop, wait_in_librdkafka)

        return retry(once, _transient, Backoff.fixed(0.2), within_s=COMMIT_RETRY_S, stop=stop)

    def _once(
        self,
        consumer: Any,
        partitions: list[KafkaPartition],
        deadline: float,
        stop: threading.Event | None,
        wait_in_librdkafka: bool,
    ) -> bool:
        self._results.expect()
        self.sent = time.monotonic()
        try:
            if wait_in_librdkafka:
                consumer.commit(offsets=partitions, asynchronous=False)
                return True
            consumer.commit(offsets=partitions, asynchronous=True)
        except KafkaException as exc:
            return _dropped(error_of(exc), exc)
        err = self._await(commit_key(partitions), deadline, stop)
        return err is None or _dropped(err, KafkaException(err))

    def _await(
        self, key: CommitKey, deadline: float, stop: threading.Event | None
    ) -> KafkaError | None:
        """The commit's error (``None`` on success), serving the consumer until it arrives:
        librdkafka delivers the result, its errors and rebalances only inside its calls."""
        while True:
            answered, err = self._results.take(key)
            if answered:
                return err
            if stop is not None and stop.is_set():
                raise Stopped()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return KafkaError(
                    KafkaError._TIMED_OUT,
                    f"no answer from the group coordinator within {COMMIT_RETRY_S:.0f} s",
                )
            self._serve(min(remaining, _SERVE_S))


def _dropped(err: KafkaError | None, exc: KafkaException) -> bool:
    """False, with a warning, for a commit that a rebalance made moot; else ``exc`` is raised."""
    if err is None or err.code() not in _REBALANCED:
        raise exc
    _logger.warning("kafka.commit_dropped", reason=describe(err, exc))
    return False


def _transient(exc: Exception) -> bool:
    """A commit error worth another try: any but a fatal one."""
    if not isinstance(exc, KafkaException):
        return False
    err = error_of(exc)
    return err is None or not err.fatal()
