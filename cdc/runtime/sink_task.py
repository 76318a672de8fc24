"""The sink task: read from the committed offset, write, flush, then commit the offset.

Checkpoint order, enforced here and nowhere else: ``sink.write(batch)``, ``sink.flush()``
(durable on return), then ``consumer.commit(next offsets)``. A flush that fails means no commit,
so the batch is read again after a restart; sinks make that replay harmless.

Backpressure: the log is the buffer between the source and every sink, and it lives on disk. A
sink task holds at most one batch (``max_records``) in memory; while its sink is down or slow it
retries that batch with backoff and reads nothing more, so memory stays bounded however far it
falls behind, and other sinks, each in its own task, keep going.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

import orjson

from cdc.errors import RecordError
from cdc.log.base import Consumer, Log, StoredRecord, TopicPartition
from cdc.logging import Logger
from cdc.runtime.retry import Backoff, Decision, Stopped, classify, retry_until_stopped
from cdc.runtime.source_task import dead_letter_record
from cdc.sink import Sink, SinkRecord, sink_offsets


class SinkRecordStop(RecordError):
    """A record a sink cannot apply, under the ``fail`` policy."""


def decode_records(records: Sequence[StoredRecord]) -> list[SinkRecord]:
    """Parse keys and values once, for every sink."""
    loads = orjson.loads
    return [
        SinkRecord(
            r.topic,
            r.partition,
            r.offset,
            None if r.key is None else loads(r.key),
            None if r.value is None else loads(r.value),
        )
        for r in records
    ]


def group_name(pipeline: str, sink: str) -> str:
    """The consumer group of a sink; ``cdc status`` reads lag through it."""
    return f"{pipeline}.sink.{sink}"


class SinkTask:
    """Runs one sink until ``stop`` is set or a fatal error happens."""

    def __init__(
        self,
        pipeline: str,
        name: str,
        log: Log,
        factory: Callable[[], Sink],
        topics: Sequence[str],
        stop: threading.Event,
        logger: Logger,
        bad_records: str = "fail",
        max_records: int = 5000,
        poll_timeout_s: float = 0.2,
    ) -> None:
        self._pipeline = pipeline
        self._name = name
        self._log = log
        self._factory = factory
        self._topics = list(topics)
        self._stop = stop
        self._logger = logger
        self._bad_records = bad_records
        self._max_records = max_records
        self._poll_timeout_s = poll_timeout_s
        self._sink: Sink | None = None
        self._consumer: Consumer | None = None
        self.records_applied = 0

    def run(self) -> None:
        """Open the sink (retrying while it is unreachable) and apply batches until stopped.

        Raises:
            CdcError: a fatal error; nothing after the last flushed batch was committed.
        """
        try:
            self._sink = retry_until_stopped(
                self._open_sink, self._stop, self._logger, "sink.unavailable"
            )
            self._consumer = self._log.consumer(
                group_name(self._pipeline, self._name),
                self._topics,
                start_offsets=self._start_offsets,
            )
            self._logger.info("sink.opened", topics=self._topics)
            while not self._stop.is_set():
                self.step()
        except Stopped:
            return
        finally:
            self._close()

    def step(self) -> int:
        """Poll one batch and apply it; returns how many records were applied."""
        assert self._consumer is not None
        stored = self._consumer.poll(self._max_records, self._poll_timeout_s)
        if not stored:
            return 0
        batch = decode_records(stored)
        self._apply(batch)
        offsets = sink_offsets(batch)
        consumer = self._consumer
        # The batch is durable in the sink; a commit that fails (broker away) is retried until
        # it lands or the task stops, in which case the batch is replayed harmlessly.
        retry_until_stopped(
            lambda: consumer.commit(offsets), self._stop, self._logger, "sink.commit_retrying"
        )
        self.records_applied += len(batch)
        return len(batch)

    def _open_sink(self) -> Sink:
        sink = self._factory()
        sink.open()
        return sink

    def _start_offsets(self, partitions: list[TopicPartition]) -> Mapping[TopicPartition, int]:
        assert self._sink is not None
        stored = self._sink.stored_offsets() or {}
        return {tp: offset for tp, offset in stored.items() if tp in partitions}

    def _apply(self, batch: list[SinkRecord]) -> None:
        """Write and flush ``batch``, retrying the whole batch on retriable errors."""
        backoff = Backoff()
        while True:
            try:
                self._write_and_flush(batch)
                return
            except Exception as exc:
                decision = classify(exc)
                if decision is Decision.SKIP and isinstance(exc, RecordError):
                    batch = self._handle_bad_record(batch, exc)
                    continue
                if decision is not Decision.RETRY:
                    raise
                delay = backoff.next_delay()
                self._logger.warning("sink.retrying", error=str(exc), retry_in_s=round(delay, 2))
                if self._stop.wait(delay):
                    raise Stopped() from exc

    def _write_and_flush(self, batch: list[SinkRecord]) -> None:
        assert self._sink is not None
        self._sink.write(batch)
        self._sink.flush()

    def _handle_bad_record(self, batch: list[SinkRecord], exc: RecordError) -> list[SinkRecord]:
        bad = exc.record
        if self._bad_records != "dead_letter" or not isinstance(bad, SinkRecord):
            raise SinkRecordStop(
                f"sink {self._name} cannot apply a record: {exc.reason} (set bad_records: "
                "dead_letter to route such records to the dead-letter topic)"
            ) from exc
        self._logger.warning(
            "record.dead_lettered", topic=bad.topic, offset=bad.offset, reason=exc.reason
        )
        with_reason = dead_letter_record(
            self._pipeline,
            f"sink:{self._name}",
            bad.topic,
            bad.key,
            exc.reason,
            {"offset": bad.offset, "value": bad.value},
        )
        tx = self._log.begin()
        tx.append([with_reason])
        tx.commit()
        return [r for r in batch if r is not bad]

    def _close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
        if self._sink is not None:
            self._sink.close()
