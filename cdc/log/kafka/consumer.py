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
from operator import attrgetter
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from cdc.contracts.errors import LogError, LogUnavailable
from cdc.log.base import (
    PartitionsCallback,
    StartOffsets,
    StoredRecord,
    TopicPartition,
    fitting,
)
from cdc.log.kafka.brokerless import BrokerlessWatch
from cdc.log.kafka.commits import Committer
from cdc.log.kafka.common import ConnectionWatch, translate, translated
from cdc.log.kafka.messages import MAX_CONSUME, records_of
from cdc.support.logging import get_logger

#: While the connection is lost and nothing arrives, ask for metadata this often, so that an
#: idle member notices (and logs) when the cluster is back.
_PROBE_EVERY_S = 2.0
#: At close, how long a retired client still closing (see ``_rejoin``) is waited for.
_RETIRED_CLOSE_WAIT_S = 5.0
_VALUE = attrgetter("value")

_logger = get_logger(component="kafka_log")


class ClientReplaced(Exception):
    """The librdkafka client was replaced while a call waited on it (see ``_rejoin``)."""


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
        self._brokerless = BrokerlessWatch()
        self._last_probe = 0.0
        self._config = config
        self._closing: list[threading.Thread] = []  # retired clients being closed
        self._consumer = self._join()

    def _join(self) -> Consumer:
        """A new librdkafka consumer, subscribed: it joins the group.

        Its callbacks act only while it is the current client: a retired one (see
        :meth:`_rejoin`) closing on another thread must not answer the new one's commit (results
        are matched by offsets, and the retry asks for the same ones) nor report its outage.
        """
        callbacks = {
            **self._watch.settings(),
            **self._brokerless.settings(),
            "on_commit": self._committer.on_commit,
        }
        consumer: Consumer | None = None
        current = {
            name: _while(lambda: consumer is getattr(self, "_consumer", None), callback)
            for name, callback in callbacks.items()
            if callable(callback)
        }
        consumer = Consumer({**self._config, **callbacks, **current})
        consumer.subscribe(
            self._topics,
            on_assign=self._assigned,
            on_revoke=self._revoked,
            on_lost=self._lost,
        )
        return consumer

    def poll(
        self, max_records: int, timeout_s: float, max_bytes: int | None = None
    ) -> list[StoredRecord]:
        """Up to ``max_records`` committed records (and about ``max_bytes`` of values),
        waiting at most ``timeout_s`` for the first.

        Rebalance callbacks (``start_offsets``, ``on_revoke``) run inside this call.
        """
        self._check_open()
        out = self._take_pending(max_records) or self._fetch(max_records, timeout_s)
        if max_bytes is not None:  # the rest is held, first in line for the next poll
            cut = fitting(map(_VALUE, out), max_bytes)
            self._pending[:0] = out[cut:]
            del out[cut:]
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
                    out = records_of([msg])
                elif self._brokerless.stuck():
                    self._rejoin()
                if not out and time.monotonic() >= deadline:
                    self._probe()
                    self._commit_past_markers()
                    return []
            # What the first fetch brought is queued already: take it without waiting.
            want = min(max_records - len(out), MAX_CONSUME)
            if want > 0:
                out += records_of(self._consumer.consume(want, 0))
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
        past transaction markers that follow, so a caught-up group shows no lag; it also moves
        on every other partition of this member whose consumer has served only markers since
        its last commit (no extra request: a busy sink's idle partitions would otherwise sit
        before their last marker until a poll comes back empty). If the
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
            self._commit({**self._markers_passed(), **targets}, stop)

    def group_metadata(self) -> Any:
        """This member's group metadata (generation and member id), for a transaction that
        commits the group's offsets with its records: the broker then fences a zombie member
        (KIP-447). A live join view commits so (:mod:`cdc.views.task`)."""
        self._check_open()
        return self._consumer.consumer_group_metadata()

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
        for thread in self._closing:  # a retired client still closing: give it a moment
            thread.join(_RETIRED_CLOSE_WAIT_S)
            if thread.is_alive():
                _logger.warning("kafka.consumer_close_pending", group=self._group)

    # -- internals -----------------------------------------------------------------------------

    def _assigned(self, consumer: Any, partitions: list[Any]) -> None:
        if consumer is not self._consumer:
            return  # a client being retired (see _rejoin)
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
        if consumer is not self._consumer:
            return
        # The group moved on without this member (a session timeout, an outage): the
        # partitions may already be another member's.
        self._log_partitions("kafka.partitions_lost", consumer, partitions)
        self._release(consumer, partitions)

    def _revoked(self, consumer: Any, partitions: list[Any]) -> None:
        if consumer is not self._consumer:
            return
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
            self._forget(partitions)
            consumer.unassign()

    def _forget(self, partitions: list[Any]) -> None:
        """Drop what this member tracked of ``partitions``: they are another member's now."""
        released = {TopicPartition(p.topic, p.partition) for p in partitions}
        for tp in released:
            self._returned.pop(tp, None)
            self._committed.pop(tp, None)
        # Fetched during a commit's wait and never returned: their new owner reads them.
        self._pending = [
            r for r in self._pending if TopicPartition(r.topic, r.partition) not in released
        ]

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
        moved = self._markers_passed()
        if moved:
            self._commit(moved)

    def _markers_passed(self) -> dict[TopicPartition, int]:
        """The partitions whose position moved past markers only since their last commit
        (everything poll returned is committed), at that position."""
        moved = {}
        for tp, done in self._committed.items():
            if done == self._returned.get(tp):
                position = self._past_markers(tp, done)
                if position > done:
                    moved[tp] = position
        return moved

    def _commit(
        self, offsets: Mapping[TopicPartition, int], stop: threading.Event | None = None
    ) -> None:
        partitions = [KafkaPartition(tp.topic, tp.partition, off) for tp, off in offsets.items()]
        try:
            # Inside on_revoke (librdkafka's call) the consumer cannot be served: wait in it.
            committed = self._committer.commit(self._consumer, partitions, stop, self._revoking)
        except KafkaException as exc:
            raise translate(exc, "committing consumer offsets", self._servers) from exc
        except ClientReplaced as exc:
            # Not committed: the caller commits again, on the new client.
            raise LogUnavailable(
                f"kafka log ({self._servers}): committing consumer offsets failed: {exc}"
            ) from exc
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
        """Serve the consumer while a commit waits; a record it returns waits for ``poll``.

        Raises:
            ClientReplaced: the client knew no broker and was replaced (:meth:`_rejoin`): the
                commit it waited for can never be answered.
        """
        msg = self._consumer.poll(timeout_s)
        if msg is not None:
            self._pending += records_of([msg])
        elif self._brokerless.stuck():
            self._rejoin()
            raise ClientReplaced("the consumer knew no broker and was replaced")

    def _rejoin(self) -> None:
        """Replace a client that knows no broker with a new one, which bootstraps again.

        A broker that shuts down cleanly answers metadata without itself, and librdkafka drops
        every broker an answer leaves out: a client of a one-broker cluster then knows none,
        sends nothing, reports nothing and never goes back to ``bootstrap.servers``
        (confluentinc/librdkafka#5301), so its sink would wait for good. The group forgets
        the old member after its session timeout; what it had not committed is read again
        from the last commit, which the sinks' positions make harmless.
        """
        old = self._consumer
        _logger.warning(
            "kafka.consumer_rejoining", group=self._group, reason="the client knows no broker"
        )
        self._forget([*self._returned, *self._committed])
        self._pending.clear()
        self._consumer = self._join()
        self._brokerless.reset()
        # Closing waits for a coordinator the old client cannot reach: not on this thread.
        closing = threading.Thread(target=_close_quietly, args=(old,), daemon=True)
        closing.start()
        self._closing = [t for t in self._closing if t.is_alive()] + [closing]

    def _check_open(self) -> None:
        if self._closed:
            raise LogError("kafka log: the consumer is closed")


def _while(holds: Callable[[], bool], callback: Callable[..., None]) -> Callable[..., None]:
    """``callback``, called only while ``holds()``."""

    def guarded(*args: Any) -> None:
        if holds():
            callback(*args)

    return guarded


def _close_quietly(consumer: Any) -> None:
    try:
        consumer.close()
    except (KafkaException, RuntimeError) as exc:
        _logger.warning("kafka.consumer_close_failed", error=str(exc))
