"""The Kafka log's transactions: records and source offsets committed in one Kafka transaction.

A :class:`TransactionalWriter` owns one transactional producer; one transaction at a time uses
it (Kafka allows no more per producer), so ``begin`` waits while another thread's transaction on
the same writer is open. Error handling follows librdkafka's transactional API rules:

- ``commit_transaction`` failing with a *retriable* error is called again, until the transaction
  timeout; after that the producer is discarded, and a fresh one's ``init_transactions`` settles
  the transaction on the broker (committed or aborted: the stored source offsets tell which).
- an *abortable* error aborts the transaction and raises
:class:`~cdc.contracts.errors.LogUnavailable`, so
  the runtime re-reads the source from the stored offsets;
- a *fatal* error (above all a fenced producer) raises :class:`~cdc.contracts.errors.LogFatal`.

A source transaction with latest images (:mod:`cdc.log.kafka.image_sync`) feeds them every record it
appends, writes a fresh commit mark to the offsets topic just before committing, and commits the
images with that mark only once Kafka committed; an abort or a failed commit rolls them back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaPartition

from cdc.contracts import positions
from cdc.contracts.errors import LogError, LogFatal, LogUnavailable, RecordTooLarge
from cdc.log.base import Record, TopicPartition, TransactionContext
from cdc.log.kafka.common import (
    FENCED,
    POS_HEADER,
    TRUNCATE_KEY,
    ConnectionWatch,
    describe,
    error_of,
    translate,
)
from cdc.log.kafka.image_sync import MARK_KEY, SourceImages, mark_value
from cdc.log.offsets import encode_offset

# Serve delivery reports after this many records produced, so their memory is freed as we go.
_POLL_EVERY = 1000
_COMMIT_ATTEMPT_S = 10.0
_ABORT_TIMEOUT_S = 10.0


class TransactionLog(Protocol):
    """What a transaction needs of its log; :class:`~cdc.log.kafka.log.KafkaLog` has it."""

    @property
    def offsets_topic(self) -> str:
        """The topic source offsets are produced to."""

    @property
    def committed_positions(self) -> positions.CommittedPositions:
        """The positions this log's committed transactions stored, in this process."""

    def prepare(self, records: Sequence[Record]) -> Mapping[str, int]:
        """Every record's size checked; the partition each topic's records are produced to
        (librdkafka's "unassigned": its murmur2 partitioner places them).

        Raises:
            RecordTooLarge: a record is over the client's or its topic's limit.
        """

    def wait_visible(self, last: dict[tuple[str, int], int]) -> None:
        """Wait until readers see each partition's records up to its ``last`` offset."""


class WriterSpent(LogFatal):
    """A once-only writer's producer is gone: its holder must win its lease again before a
    new one claims the id (:meth:`~cdc.log.kafka.log.KafkaLog.claim_writer`)."""


class TransactionalWriter:
    """A transactional producer, created on first use and replaced after fatal errors.

    Args:
        config: librdkafka producer settings (without ``transactional.id``).
        transactional_id: the id the broker fences by: a newer producer with the same id
            aborts this one's open transaction and makes its next call fail.
        timeout_s: the transaction timeout, which bounds every wait here.
        once: make one producer only (:meth:`KafkaLog.claim_writer`): once it is discarded
            (fenced, failed, or a commit of unknown outcome), :meth:`producer` raises
            :class:`WriterSpent` instead of making a new one, whose ``init_transactions``
            would fence the id's newer holder back.
    """

    def __init__(
        self,
        config: dict[str, Any],
        transactional_id: str,
        timeout_s: float,
        once: bool = False,
    ) -> None:
        self.transactional_id = transactional_id
        self.once = once
        self.spent = False  # a once-only writer whose producer was discarded
        self.timeout_s = timeout_s
        self.servers = str(config.get("bootstrap.servers"))
        self.watch = ConnectionWatch("producer", transactional_id=transactional_id)
        self._config = {**config, "transactional.id": transactional_id, **self.watch.settings()}
        self.lock = threading.Lock()
        self.owner: int | None = None  # the thread whose transaction holds the lock
        self._producer: Any = None

    def producer(self) -> Any:
        """The producer, with ``init_transactions`` done (which fences older instances)."""
        if self._producer is None:
            if self.spent:
                raise WriterSpent(
                    f"kafka log ({self.servers}): the producer of transactional.id "
                    f"{self.transactional_id!r} is gone (fenced or failed); a new one would "
                    "fence the id's newer holder, so none is made"
                )
            producer = Producer(self._config)
            try:
                producer.init_transactions(self.timeout_s)
            except KafkaException as exc:
                raise self.translate(exc, "initialising transactions") from exc
            self.watch.reached()
            self._producer = producer
        return self._producer

    def discard(self) -> None:
        """Drop the producer; the next transaction's ``init_transactions`` settles what it left."""
        producer, self._producer = self._producer, None
        if producer is not None:
            self.spent = self.once
            with suppress(Exception):
                producer.purge(in_queue=True, in_flight=True, blocking=False)
            with suppress(Exception):  # serves the purged messages' callbacks, even if purge failed
                producer.poll(0)

    def close(self) -> None:
        """Discard the producer (an open transaction is aborted by the broker or the next init)."""
        self.discard()

    def translate(self, exc: BaseException, doing: str) -> LogFatal | LogUnavailable:
        """Like :func:`kafka_common.translate`, with a clear message for a fenced producer."""
        err = error_of(exc)
        if err is not None and err.code() in FENCED:
            self.discard()
            newer = (
                "the newer holder of its lease; this term ends"
                if self.once
                else "a second instance of this pipeline's source; this one stops"
            )
            return LogFatal(
                f"kafka log ({self.servers}): this producer was fenced while {doing}: another "
                f"process started with transactional.id {self.transactional_id!r} ({newer})"
            )
        if err is not None and err.fatal():
            self.discard()
        return translate(exc, doing, self.servers)


class KafkaTransaction(TransactionContext):
    """One Kafka transaction: appended records and stored offsets commit or abort together.

    As a context manager it commits on success and aborts on an exception.

    Args:
        log: what the transaction needs of its log (records prepared, commits made visible).
        writer: the producer to use.
        images: the source's latest images, fed by this transaction (source writer only).
    """

    def __init__(
        self, log: TransactionLog, writer: TransactionalWriter, images: SourceImages | None = None
    ) -> None:
        if writer.owner == threading.get_ident():
            raise LogError("kafka log: this thread already has an open transaction")
        self._log = log
        self._writer = writer
        self._state = "open"
        self._failure: tuple[KafkaError, str, bytes | None] | None = None
        # A record reported delivered at no offset: committing could lose it (seen here: the
        # broker had not kept it), so the transaction is aborted and replayed instead.
        self._unplaced: tuple[str, bytes | None] | None = None
        self._last: dict[tuple[str, int], int] = {}  # highest delivered offset per partition
        self._images: SourceImages | None = None
        self._offsets: dict[str, Any] = {}  # what store_offsets stored, for the images' digest
        writer.lock.acquire()
        writer.owner = threading.get_ident()
        self._held = True
        try:
            self._producer = writer.producer()
            self._producer.begin_transaction()
        except KafkaException as exc:
            self._release()
            raise writer.translate(exc, "beginning a transaction") from exc
        except BaseException:
            self._release()
            raise
        if images is not None:
            try:
                images.began()
            except BaseException:
                self.abort()
                raise
            self._images = images

    def append(self, records: Sequence[Record]) -> None:
        """Produce records to their murmur2 partitions; visible to readers only after commit.

        Raises:
            RecordTooLarge: a record exceeds the broker's or client's size limit; nothing of
                ``records`` was produced and the transaction stays usable.
            LogUnavailable: the brokers cannot take the records now.
            LogFatal: the producer was fenced or failed for good.
        """
        self._check_open()
        placement = self._log.prepare(records)  # checks sizes before producing anything
        try:
            for start in range(0, len(records), _POLL_EVERY):
                self._produce_records(records[start : start + _POLL_EVERY], placement)
                # Serve delivery reports as we go, so their memory is freed.
                self._producer.poll(0)
                self._raise_failure()
            if self._images is not None:
                self._images.appended(records)
        except BaseException:
            self._state = "failed"
            raise

    def store_offsets(self, offsets: positions.Offsets) -> None:
        """Produce offsets to the offsets topic in this transaction (``None``: a tombstone).

        Raises:
            PositionMovedBackwards: ``offsets`` carry a position before the last one this
                log committed in this process (reading the offsets topic per commit would cost
                a round trip); nothing is produced and the transaction can only be aborted
                (see :mod:`cdc.contracts.positions`).
        """
        self._check_open()
        topic = self._log.offsets_topic
        position = positions.carried(offsets)
        try:
            if position is not None:
                self._log.committed_positions.check(position, lambda: self._state == "committed")
            for key, value in offsets.items():
                encoded = encode_offset(value)
                self._produce(topic, 0, key.encode(), encoded)
        except BaseException:
            self._state = "failed"
            raise
        self._offsets.update(offsets)

    def store_group_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int], consumer: Any = None
    ) -> None:
        """Send a consumer group's next offsets in this transaction: a task that reads the log
        and writes to it (a live join view, :mod:`cdc.views`) then does both exactly once.
        ``consumer``: the group's member (a :class:`~cdc.log.kafka.consumer.KafkaConsumer`),
        whose metadata lets the broker fence a zombie member.
        """
        self._check_open()
        metadata = getattr(consumer, "group_metadata", None)
        if metadata is None:
            raise LogError(f"kafka log: the offsets of group {group!r} need its consumer")
        partitions = [KafkaPartition(tp.topic, tp.partition, off) for tp, off in offsets.items()]
        try:
            self._producer.send_offsets_to_transaction(
                partitions, metadata(), self._writer.timeout_s
            )
        except KafkaException as exc:
            self._state = "failed"
            raise self._writer.translate(exc, "sending consumer offsets") from exc

    def commit(self) -> None:
        """Commit; on return the records and offsets are durable and visible to readers.

        Raises:
            LogUnavailable: the transaction was aborted, or its outcome is not known yet; the
                stored source offsets say what is durable.
            RecordTooLarge: the broker refused a record for its size; the transaction was aborted.
            LogFatal: the producer was fenced or failed for good.
        """
        self._check_open()
        mark = None
        try:
            if self._images is not None:
                mark = self._images.new_mark()
                self._produce(self._log.offsets_topic, 0, MARK_KEY.encode(), mark_value(mark))
            self._commit()
            self._state = "committed"
            self._writer.watch.reached()
        finally:
            if self._state == "open":
                self._state = "failed"
            if self._state != "committed" and self._images is not None:
                self._images.rolled_back()
            self._release()
        if self._images is not None and mark is not None:
            self._images.committed(mark, self._offsets)
        # The broker writes the commit markers after answering: wait for them, so that on
        # return readers see the records, as with the embedded log.
        self._log.wait_visible(self._last)

    def abort(self) -> None:
        """Abort; a no-op once committed or aborted. Never raises for broker trouble."""
        if self._state in ("committed", "aborted"):
            return
        self._state = "aborted"
        if self._images is not None:
            self._images.rolled_back()
        if not self._held:
            return
        try:
            self._producer.abort_transaction(_ABORT_TIMEOUT_S)
        except KafkaException:
            # Whatever it left open, the next init_transactions (or the broker's timeout) aborts.
            self._writer.discard()
        finally:
            self._release()

    # -- internals -----------------------------------------------------------------------------

    def _produce_records(self, records: Sequence[Record], placement: Mapping[str, int]) -> None:
        """The loop every row of a snapshot or a stream goes through: no call of ours a record,
        and ``produce``'s arguments positional (keywords cost a dict a call)."""
        produce, delivered, header = self._producer.produce, self._delivered, POS_HEADER
        for r in records:
            key = TRUNCATE_KEY if r.key is None else r.key
            headers = None if r.pos is None else [(header, r.pos)]
            try:
                # (topic, value, key, partition, callback, on_delivery, timestamp, headers):
                # timestamp 0 is librdkafka's "now".
                produce(r.topic, r.value, key, placement[r.topic], delivered, None, 0, headers)
            except BufferError:  # the local queue is full: _produce waits for room
                self._produce(r.topic, placement[r.topic], key, r.value, r.pos)
            except KafkaException as exc:
                raise self._writer.translate(exc, f"producing to {r.topic}") from exc

    def _produce(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        pos: bytes | None = None,
    ) -> None:
        producer = self._producer
        headers = None if pos is None else [(POS_HEADER, pos)]
        while True:
            try:
                producer.produce(
                    topic, value, key, partition, on_delivery=self._delivered, headers=headers
                )
                break
            except BufferError:
                # The local queue is full: memory stays bounded by waiting for deliveries.
                producer.poll(0.05)
                self._raise_failure()
            except KafkaException as exc:
                raise self._writer.translate(exc, f"producing to {topic}") from exc

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        # Must not raise: librdkafka calls it inside produce/poll/commit_transaction, and on
        # Python 3.11 confluent-kafka 2.16 re-raises a callback's error as a SystemError.
        if err is None:
            offset = msg.offset()
            if offset is None:  # "delivered", at an offset the broker did not report
                if self._unplaced is None:
                    self._unplaced = (msg.topic(), msg.key())
                return
            tp = (msg.topic(), msg.partition())
            if offset > self._last.get(tp, -1):
                self._last[tp] = offset
        elif self._failure is None:
            self._failure = (err, msg.topic(), msg.key())

    def _raise_failure(self) -> None:
        if self._failure is None:
            return
        err, topic, key = self._failure
        if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            raise RecordTooLarge(
                f"kafka log: the broker refused a record of {topic} with key {key!r} as too "
                f"large ({err.str()})"
            )
        raise LogUnavailable(
            f"kafka log ({self._writer.servers}): a record of {topic} was not delivered: "
            f"{describe(err, KafkaException(err))}"
        )

    def _commit(self) -> None:
        deadline = time.monotonic() + self._writer.timeout_s
        # Every delivery report first: commit_transaction succeeds even after a record came
        # back "delivered" without an offset, so that has to be caught before it.
        # A fenced or failed producer may fail the flush (confluent-kafka 2.16 on Python 3.11
        # even as a SystemError from inside a delivery callback): commit_transaction below
        # raises the producer's real error, which is what the caller must see.
        with suppress(KafkaException, SystemError):
            self._producer.flush(self._writer.timeout_s)
        if self._unplaced is not None:
            self._abort_unplaced(*self._unplaced)
        while True:
            remaining = deadline - time.monotonic()
            try:
                self._producer.commit_transaction(max(0.1, min(remaining, _COMMIT_ATTEMPT_S)))
                return
            except KafkaException as exc:
                err = error_of(exc)
                if err is not None and err.retriable() and time.monotonic() < deadline:
                    continue  # librdkafka's rule: call commit_transaction again
                if err is not None and err.txn_requires_abort():
                    self._abort_after(exc)
                if err is not None and (err.fatal() or err.code() in FENCED):
                    raise self._writer.translate(exc, "committing") from exc
                self._writer.discard()
                raise LogUnavailable(
                    f"kafka log ({self._writer.servers}): the commit did not complete within "
                    f"{self._writer.timeout_s:.0f} s ({describe(err, exc)}); its outcome shows "
                    "in the stored source offsets"
                ) from exc

    def _abort_unplaced(self, topic: str, key: bytes | None) -> None:
        """Abort a transaction holding a record reported delivered at no offset."""
        self._state = "aborted"
        try:
            self._producer.abort_transaction(_ABORT_TIMEOUT_S)
        except KafkaException:
            self._writer.discard()
        raise LogUnavailable(
            f"kafka log ({self._writer.servers}): a record of {topic} with key {key!r} was "
            "reported delivered at no offset, so the transaction was aborted rather than risk "
            "committing without it; the source resumes from the stored offsets"
        )

    def _abort_after(self, exc: KafkaException) -> None:
        """Abort after an abortable commit error and raise what the caller should see."""
        self._state = "aborted"
        try:
            self._producer.abort_transaction(_ABORT_TIMEOUT_S)
        except KafkaException:
            self._writer.discard()
        self._raise_failure()
        raise LogUnavailable(
            f"kafka log ({self._writer.servers}): the transaction was aborted "
            f"({describe(error_of(exc), exc)}); the source resumes from the stored offsets"
        ) from exc

    def _check_open(self) -> None:
        if self._state != "open":
            raise LogError(f"kafka log: the transaction is {self._state}")

    def _release(self) -> None:
        if self._held:
            self._held = False
            self._writer.owner = None
            self._writer.lock.release()
        # librdkafka holds this transaction's delivery callback (a bound method), which holds
        # the producer: a cycle through C that the garbage collector cannot see. A discarded
        # producer (fenced: a view's term ends and the process goes on) stayed alive with its
        # threads for as long as the process did.
        self._producer = None
