"""The results of a group member's asynchronous offset commits.

A synchronous commit blocks librdkafka's caller for as long as the group coordinator is away
(45 s and more when the broker is down) and serves no callback meanwhile: the consumer could
neither log the outage nor be stopped. So :class:`~cdc.log.kafka.consumer.KafkaConsumer`
commits asynchronously and serves the consumer while it waits; librdkafka hands each result to
the ``on_commit`` setting, inside those calls, and :class:`CommitResults` keeps it until the
waiting commit takes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError

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
