"""Reading the Kafka log: consumer-group members for sinks, and a group-less partition reader.

Both read with ``isolation.level=read_committed``: records of open or aborted transactions are
never returned. In that mode offsets have gaps, because every transaction ends with a commit
marker that takes an offset of each partition it wrote; a committed offset is still "the next
offset to read", and the group member commits past trailing markers (see
:meth:`KafkaConsumer.commit`) so that an idle sink shows no lag.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from cdc.errors import LogError, LogFatal, LogUnavailable
from cdc.log.base import PartitionsCallback, StartOffsets, StoredRecord, TopicPartition
from cdc.log.kafka.commits import Committer
from cdc.log.kafka.common import (
    POS_HEADER,
    ConnectionWatch,
    translate,
    translated,
)
from cdc.logging import get_logger

_READ_TIMEOUT_S = 20.0
#: While the connection is lost and nothing arrives, ask for metadata this often, so that an
#: idle member notices (and logs) when the cluster is back.
_PROBE_EVERY_S = 2.0
_MAX_CONSUME = 10_000  # librdkafka's consume() refuses batches over a million

_logger = get_logger(component="kafka_log")

RecordsCallback = Callable[[list[StoredRecord]], None]


def stored(msg: Any) -> StoredRecord:
    """A consumed message as the log interface returns it, its position from the ``cdc.pos``
    header (``None`` for a record without one)."""
    pos = next((data for name, data in msg.headers() or () if name == POS_HEADER), None)
    return StoredRecord(
        msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp()[1], pos
    )


def _records(messages: Sequence[Any]) -> list[StoredRecord]:
    out = []
    for msg in messages:
        err = msg.error()
        if err is None:
            out.append(stored(msg))
        elif err.fatal():
            raise LogFatal(f"kafka log: consumer failed: {err.name()}: {err.str()}")
        elif err.code() != KafkaError._PARTITION_EOF:
            # Broker restarts and leader moves surface here; librdkafka reconnects by itself.
            _logger.warning("kafka.consumer_error", error=err.name(), detail=err.str())
    return out


class KafkaConsumer:
    """A member of a Kafka consumer group; Kafka spreads the topics' partitions over members.

    Args:
        config: librdkafka consumer settings, including ``group.id``.
        topics: topics to subscribe to (they must exist).
        start_offsets: called on every assignment; offsets it returns replace the committed ones.
        on_revoke: called with partitions before they are taken away (rebalance or close).
    """

    def __init__(
        self,
        config: dict[str, Any],
        topics: Sequence[str],
        start_offsets: StartOffsets | None,
        on_revoke: PartitionsCallback | None,
    ) -> None:
        self._servers = str(config.get("bootstrap.servers"))
        self._start_offsets = start_offsets
        self._on_revoke = on_revoke
        self._returned: dict[TopicPartition, int] = {}  # next offset after what poll returned
        self._committed: dict[TopicPartition, int] = {}
        # Fetched while a commit waited for its result, not returned yet: poll returns them first.
        self._pending: list[StoredRecord] = []
        self._committer = Committer(self._serve)
        self._revoking = False  # inside on_revoke
        self._closed = False
        self._group = str(config.get("group.id"))
        self._topics = list(dict.fromkeys(topics))
        self._watch = ConnectionWatch("consumer", group=self._group)
        self._last_probe = 0.0
        self._consumer = Consumer(
            {**config, **self._watch.settings(), "on_commit": self._committer.on_commit}
        )
        self._consumer.subscribe(
            self._topics,
            on_assign=self._assigned,
            on_revoke=self._revoked,
            on_lost=self._lost,
        )

    def poll(self, max_records: int, timeout_s: float) -> list[StoredRecord]:
        """Up to ``max_records`` committed records, waiting at most ``timeout_s`` for the first.

        Rebalance callbacks (``start_offsets``, ``on_revoke``) run inside this call.
        """
        self._check_open()
        out = self._take_pending(max_records) or self._fetch(max_records, timeout_s)
        for record in out:
            self._returned[TopicPartition(record.topic, record.partition)] = record.offset + 1
        return out

    def _take_pending(self, max_records: int) -> list[StoredRecord]:
        out = self._pending[:max_records]
        del self._pending[:max_records]
        return out

    def _fetch(self, max_records: int, timeout_s: float) -> list[StoredRecord]:
        deadline = time.monotonic() + timeout_s
        out: list[StoredRecord] = []
        with translated("polling", self._servers):
            while not out:
                remaining = deadline - time.monotonic()
                msg = self._consumer.poll(max(0.0, remaining))
                if msg is not None:
                    out = _records([msg])
                if not out and time.monotonic() >= deadline:
                    self._probe()
                    self._commit_past_markers()
                    return []
            # What the first fetch brought is queued already: take it without waiting.
            want = min(max_records - len(out), _MAX_CONSUME)
            if want > 0:
                out += _records(self._consumer.consume(want, 0))
        # Records prove nothing about the connection: librdkafka may have fetched them before
        # an outage began. While it is lost, ask the cluster instead.
        self._probe()
        return out

    def commit(
        self, offsets: Mapping[TopicPartition, int], stop: threading.Event | None = None
    ) -> None:
        """Commit the group's next offsets; durable on return.

        The commit is sent asynchronously and awaited while the consumer is served: its error
        callback reports an outage meanwhile, rebalances run, and records it fetches are kept
        for the next :meth:`poll`.

        Where ``offsets`` covers everything poll returned for a partition, the commit moves on
        past transaction markers that follow, so a caught-up group shows no lag. If the
        partitions were meanwhile given to another member, the commit is dropped with a
        warning: that member resumes from the previous commit (at-least-once).

        Raises:
            LogUnavailable: the group coordinator stayed unreachable for 30 s.
            LogFatal: a fatal consumer error.
            Stopped: ``stop`` was set while the commit waited (it may land or not).
        """
        self._check_open()
        targets = {tp: self._past_markers(tp, offset) for tp, offset in offsets.items()}
        if targets:
            self._commit(targets, stop)

    def assignment(self) -> list[TopicPartition]:
        """The partitions this member holds now."""
        self._check_open()
        return [TopicPartition(p.topic, p.partition) for p in self._consumer.assignment()]

    def close(self) -> None:
        """Leave the group (``on_revoke`` runs first, so the caller can commit what it did)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            _logger.warning("kafka.consumer_close_failed", error=str(exc))

    # -- internals -----------------------------------------------------------------------------

    def _assigned(self, consumer: Any, partitions: list[Any]) -> None:
        self._log_partitions("kafka.partitions_assigned", consumer, partitions)
        if self._start_offsets is not None:
            tps = [TopicPartition(p.topic, p.partition) for p in partitions]
            chosen = self._start_offsets(tps)
            for p in partitions:
                offset = chosen.get(TopicPartition(p.topic, p.partition))
                if offset is not None:
                    p.offset = offset
        consumer.assign(partitions)

    def _lost(self, consumer: Any, partitions: list[Any]) -> None:
        # The group moved on without this member (a session timeout, an outage): the
        # partitions may already be another member's.
        self._log_partitions("kafka.partitions_lost", consumer, partitions)
        self._release(consumer, partitions)

    def _revoked(self, consumer: Any, partitions: list[Any]) -> None:
        self._log_partitions("kafka.partitions_revoked", consumer, partitions)
        self._release(consumer, partitions)

    def _release(self, consumer: Any, partitions: list[Any]) -> None:
        tps = [TopicPartition(p.topic, p.partition) for p in partitions]
        try:
            if self._on_revoke is not None:
                self._revoking = True
                self._on_revoke(tps)
        finally:
            self._revoking = False
            for tp in tps:
                self._returned.pop(tp, None)
                self._committed.pop(tp, None)
            # Fetched during a commit's wait and never returned: their new owner reads them.
            released = set(tps)
            self._pending = [
                r for r in self._pending if TopicPartition(r.topic, r.partition) not in released
            ]
            consumer.unassign()

    def _log_partitions(self, event: str, consumer: Any, partitions: list[Any]) -> None:
        # Must not raise: it runs inside librdkafka's rebalance callback.
        try:
            member = consumer.memberid()
        except (KafkaException, RuntimeError):
            member = None
        log = _logger.warning if event == "kafka.partitions_lost" else _logger.info
        log(
            event,
            group=self._group,
            member=member,
            partitions=sorted(f"{p.topic}[{p.partition}]" for p in partitions),
        )

    def _probe(self) -> None:
        """While the connection is lost, ask the cluster for metadata now and then: an answer
        means it is back, even if no record arrives."""
        now = time.monotonic()
        if not self._watch.lost or now - self._last_probe < _PROBE_EVERY_S:
            return
        self._last_probe = now
        try:
            self._consumer.list_topics(self._topics[0], timeout=1.0)
        except KafkaException:
            return
        self._watch.reached()

    def _past_markers(self, tp: TopicPartition, offset: int) -> int:
        # With records of ``tp`` pending, the position is past records not yet returned.
        if offset != self._returned.get(tp) or any(
            r.topic == tp.topic and r.partition == tp.partition for r in self._pending
        ):
            return offset
        position = self._consumer.position([KafkaPartition(tp.topic, tp.partition)])[0].offset
        return max(offset, position)

    def _commit_past_markers(self) -> None:
        """When idle, commit positions that moved past markers only (nothing left to apply)."""
        moved = {}
        for tp, done in self._committed.items():
            if done == self._returned.get(tp):
                position = self._past_markers(tp, done)
                if position > done:
                    moved[tp] = position
        if moved:
            self._commit(moved)

    def _commit(
        self, offsets: Mapping[TopicPartition, int], stop: threading.Event | None = None
    ) -> None:
        partitions = [KafkaPartition(tp.topic, tp.partition, off) for tp, off in offsets.items()]
        try:
            # Inside on_revoke (librdkafka's call) the consumer cannot be served: wait in it.
            committed = self._committer.commit(self._consumer, partitions, stop, self._revoking)
        except KafkaException as exc:
            raise translate(exc, "committing consumer offsets", self._servers) from exc
        if not committed:
            return
        self._watch.reached(since=self._committer.sent)
        held = {TopicPartition(p.topic, p.partition) for p in self._consumer.assignment()}
        # Partitions revoked while the commit waited are another member's business now.
        kept = {tp: offset for tp, offset in offsets.items() if tp in held}
        self._committed.update(kept)
        for tp, offset in kept.items():
            if self._returned.get(tp, 0) < offset:
                self._returned[tp] = offset

    def _serve(self, timeout_s: float) -> None:
        """Serve the consumer while a commit waits; a record it returns waits for ``poll``."""
        msg = self._consumer.poll(timeout_s)
        if msg is not None:
            self._pending += _records([msg])

    def _check_open(self) -> None:
        if self._closed:
            raise LogError("kafka log: the consumer is closed")


def _scanned(topic: str, messages: Sequence[Any], todo: dict[int, int]) -> list[StoredRecord]:
    """The records of ``messages`` below each partition's end; a partition is done (dropped
    from ``todo``) at its end or at its EOF event."""
    out = []
    for msg in messages:
        if msg.topic() != topic:
            continue
        err = msg.error()
        if err is not None and err.code() == KafkaError._PARTITION_EOF:
            todo.pop(msg.partition(), None)
            continue
        for record in _records([msg]):
            end = todo.get(record.partition)
            if end is None:
                continue
            if record.offset < end:
                out.append(record)
            if record.offset >= end - 1:
                del todo[record.partition]
    return out


class PartitionReader:
    """Reads one partition from an offset with an assigned consumer: no group, no commits.

    One consumer serves every read (creating one costs a broker round trip or two); a lock makes
    reads from several threads take turns.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self._servers = str(config.get("bootstrap.servers"))
        self._consumer = Consumer(config)
        self._lock = threading.Lock()

    def read(
        self, topic: str, partition: int, offset: int, max_records: int, end: int
    ) -> list[StoredRecord]:
        """Records from ``offset`` on, at most ``max_records``, stopping at ``end`` (the LSO)."""
        if offset >= end or max_records <= 0:
            return []
        with self._lock, translated(f"reading {topic}[{partition}]", self._servers):
            self._consumer.assign([KafkaPartition(topic, partition, offset)])
            try:
                return self._fetch(topic, partition, offset, max_records, end)
            finally:
                # Stop the background prefetch: it would hold memory for nobody.
                self._consumer.unassign()

    def scan(self, topic: str, ends: Mapping[int, int], batch: int, apply: RecordsCallback) -> None:
        """Hand every record of ``topic`` below ``ends`` (per partition, the LSOs) to ``apply``,
        in lists of at most ``batch``, each partition in offset order: one pass over the whole
        topic, without the round trips of a :meth:`read` per batch.
        """
        todo = {partition: end for partition, end in ends.items() if end > 0}
        if not todo:
            return
        with self._lock, translated(f"reading {topic}", self._servers):
            self._consumer.assign([KafkaPartition(topic, p, 0) for p in todo])
            try:
                self._scan(topic, todo, min(batch, _MAX_CONSUME), apply)
            finally:
                self._consumer.unassign()

    def _scan(self, topic: str, todo: dict[int, int], batch: int, apply: RecordsCallback) -> None:
        deadline = time.monotonic() + _READ_TIMEOUT_S
        while todo:
            messages = self._consumer.consume(batch, 0.2)
            if not messages:
                if time.monotonic() > deadline:
                    raise LogUnavailable(
                        f"kafka log ({self._servers}): no answer reading {topic} within "
                        f"{_READ_TIMEOUT_S:.0f} s"
                    )
                continue
            deadline = time.monotonic() + _READ_TIMEOUT_S
            out = _scanned(topic, messages, todo)
            if out:
                apply(out)

    def _fetch(
        self, topic: str, partition: int, offset: int, max_records: int, end: int
    ) -> list[StoredRecord]:
        out: list[StoredRecord] = []
        deadline = time.monotonic() + _READ_TIMEOUT_S
        while len(out) < max_records:
            first = self._consumer.poll(0.2)
            if first is None:
                if time.monotonic() > deadline:
                    raise LogUnavailable(
                        f"kafka log ({self._servers}): no answer reading {topic}[{partition}] "
                        f"within {_READ_TIMEOUT_S:.0f} s"
                    )
                continue
            batch = [first, *self._consumer.consume(min(max_records, _MAX_CONSUME), 0)]
            for msg in batch:
                if msg.topic() != topic or msg.partition() != partition:
                    continue
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    return out[:max_records]
                for record in _records([msg]):
                    if record.offset >= offset:
                        out.append(record)
            if out and out[-1].offset >= end - 1:
                break
        return out[:max_records]

    def close(self) -> None:
        """Close the reader's consumer (it never joined a group: nothing to leave)."""
        with self._lock:
            try:
                self._consumer.close()
            except (KafkaException, RuntimeError) as exc:
                _logger.warning("kafka.reader_close_failed", error=str(exc))
