"""The sink task: read from the committed offset, write, flush, then commit the offset.

Checkpoint order, enforced here and nowhere else: ``sink.write(batch)``, ``sink.flush()``
(durable on return), then ``consumer.commit(next offsets)``. A flush that fails means no commit,
so the batch is read again after a restart; sinks make that replay harmless.

Backpressure: the log is the buffer between the source and every sink, and it lives on disk. A
sink task holds at most one batch (``max_records``, about ``max_bytes``:
:mod:`cdc.runtime.read_size`) in memory; while its sink is down or slow it retries that batch
with backoff and reads nothing more, so memory stays bounded however far it falls behind, and
other sinks, each in its own task, keep going.

Isolation: :meth:`SinkTask.serve` runs the sink so that an error stops this sink only. It is
recorded as ``stopped``, with the error, in the control topic (``cdc status`` shows it); its
offsets stay where the last durable batch left them, so nothing is lost; and the task waits for
a table reset (``cdc sink FILE NAME --reset-table T``), which starts it again, or for the
pipeline to stop. The next start of the pipeline tries the sink again too.

A store that lost its data (:class:`~cdc.contracts.errors.SinkDataLost`: a cache restarted empty)
does not stop the sink: the task resets every table, as ``--reset-table`` does, and reads the
compacted log again from the start (:meth:`SinkTask._rebuild_from_log`).

Around this loop, each in its own module: records decoded for sinks
(:mod:`cdc.runtime.record_decoding`), records a sink cannot apply
(:mod:`cdc.runtime.bad_records`), the catch-up display (:mod:`cdc.runtime.catch_up`), the
consistent position (:mod:`cdc.runtime.consistency`) and the one stored with the sink's offsets
(:mod:`cdc.runtime.store_position`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cdc.config.batch_bytes import BATCH_BYTES
from cdc.contracts.errors import RecordError, SinkDataLost
from cdc.contracts.schema import schema_topic
from cdc.contracts.sink import Sink, SinkRecord, sink_offsets
from cdc.log.base import Consumer, Log, TopicPartition
from cdc.log.encoding import EncodingFollower
from cdc.log.eras import Eras
from cdc.metrics.observers import SinkObserver
from cdc.runtime import catch_up
from cdc.runtime.bad_records import BadRecords, SinkRecordStop
from cdc.runtime.consistency import ConsistencyTracker
from cdc.runtime.control_watcher import ControlWatcher
from cdc.runtime.read_size import ReadSize
from cdc.runtime.record_decoding import RecordRows, decode_records, payload_of, unwrap
from cdc.runtime.sink_control import RETRYING, RUNNING, STOPPED
from cdc.runtime.sink_names import group_name
from cdc.runtime.sink_rebuild import StoreProbe
from cdc.runtime.sink_resets import TableResets
from cdc.runtime.store_position import StorePosition
from cdc.support.clock import now_ms
from cdc.support.logging import Logger
from cdc.support.retry import Backoff, Decision, Stopped, classify, retry_until_stopped

# Decoding and bad records live in their own modules; their names stay importable from here,
# where the views task, cdc trace, the generator source, sinks' docs and tests have long
# imported them.
__all__ = [
    "RecordRows",
    "SinkRecordStop",
    "SinkTask",
    "decode_records",
    "group_name",
    "payload_of",
    "unwrap",
]


class SinkTask:
    """Runs one sink until ``stop`` is set or a fatal error happens.

    Args:
        topics: the topics of the sink's tables.
        control: the process's watcher of the control topic, for the sink's state and
            table resets (``None``: no state is recorded and no reset is applied).
        tables: ``(schema, table)`` of each of ``topics``, in the same order (default:
            read from the topic names, ``<pipeline>.<schema>.<table>``).
        observer: the process's metrics (``None``: off), told once per batch.
        rows: the source's read-side decoding of its records (:data:`RecordRows`), if any.
        consistency: follows the source position the sink is consistent up to (``None``: a
            source without positions).
    """

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
        max_bytes: int = BATCH_BYTES,
        poll_timeout_s: float = 0.2,
        control: ControlWatcher | None = None,
        tables: Sequence[tuple[str, str]] | None = None,
        observer: SinkObserver | None = None,
        rows: RecordRows | None = None,
        consistency: ConsistencyTracker | None = None,
    ) -> None:
        self._observer = observer
        self._consistency = consistency
        self._held = StorePosition(consistency, log, group_name(pipeline, name), logger)
        self._rows = rows
        self._pipeline = pipeline
        self._name = name
        self._log = log
        self._factory = factory
        self._topics = list(topics)
        self._stop = stop
        self._logger = logger
        self._bad_records = BadRecords(log, pipeline, name, bad_records, logger, observer)
        #: The count of each read, bounded by ``max_records`` and about ``max_bytes``.
        self.read_size = ReadSize(max_records, max_bytes)
        self._poll_timeout_s = poll_timeout_s
        self._sink: Sink | None = None
        self._consumer: Consumer | None = None
        self._catch_up: catch_up.CatchUp | None = None
        self._eras: Eras | None = None
        self._encoding = EncodingFollower(log, pipeline)
        self._control = control
        self._resets = None if control is None else self._table_resets(control, tables)
        self._probe = StoreProbe()  # while idle: did the store lose its data?
        self.records_applied = 0
        self.failure: BaseException | None = None
        self._retrying = False  # recorded as retrying in the control topic, for cdc status
        self._group_at: dict[TopicPartition, int] = {}  # what this task last committed
        self._group_aligned = False  # the group's offsets set to the store's (_align_group)

    def _table_resets(
        self, control: ControlWatcher, tables: Sequence[tuple[str, str]] | None
    ) -> TableResets:
        prefix = f"{self._pipeline}."
        names = tables or [
            (s, t) for s, _, t in (x.removeprefix(prefix).partition(".") for x in self._topics)
        ]
        by_name = {
            f"{s}.{t}": ((s, t), topic) for (s, t), topic in zip(names, self._topics, strict=True)
        }
        return TableResets(control, self._log, self._name, by_name, self._logger)

    def serve(self) -> None:
        """Run the sink until the pipeline stops; an error stops this sink only (see above)."""
        while True:
            try:
                self.run()
                return
            except Exception as exc:
                self.failure = exc
                self._logger.error("sink.stopped", error=str(exc), error_type=type(exc).__name__)
                self._record_state(STOPPED, exc)
                if self._observer is not None:
                    self._observer.state("stopped", exc)
            if not self._wait_for_reset():
                return
            self._logger.info("sink.restarting", reason="a table reset was requested")
            self.failure = None

    def _wait_for_reset(self) -> bool:
        """Wait while stopped: True when a table reset is requested, False when stopping."""
        while not self._stop.wait(0.2):
            if self._resets is not None and self._resets.pending():
                return True
        return False

    def _record_state(self, state: str, error: BaseException | None = None) -> None:
        """Post the sink's state: the watcher writes it, the sink does not wait for the log."""
        if self._control is not None:
            name, since = self._name, now_ms()
            self._control.post(lambda c: c.set_state(name, state, error, since))

    def _wait_for_control(self) -> None:
        """Before the first batch: the watcher's first read, so a reset requested while
        nothing ran is applied before anything is read."""
        while self._control is not None and not self._control.ready.wait(0.2):
            if self._stop.is_set():
                raise Stopped()

    def run(self) -> None:
        """Open the sink (retrying while it is unreachable) and apply batches until stopped.

        Raises:
            CdcError: a fatal error; nothing after the last flushed batch was committed.
        """
        try:
            self._sink = retry_until_stopped(
                self._open_sink, self._stop, self._logger, "sink.unavailable"
            )
            self._wait_for_control()
            self._apply_resets()
            self._subscribe()
            self._logger.info("sink.opened", topics=self._topics)
            self._retrying = False
            self._record_state(RUNNING)
            if self._observer is not None:
                self._observer.opened()
            while not self._stop.is_set():
                self.step()
                if self._resets is not None and self._resets.pending():
                    self._reset_tables()
        except Stopped:
            return
        finally:
            self._close()

    def _subscribe(self) -> None:
        """A new consumer, starting where the sink's stored offsets (or the group) say."""
        assert self._sink is not None
        topics = list(self._topics)
        retry_until_stopped(
            self._follow_encoding, self._stop, self._logger, "sink.encoding_retrying"
        )
        if getattr(self._sink, "reads_schemas", False):
            topics.append(schema_topic(self._pipeline))
        group = group_name(self._pipeline, self._name)
        self._consumer = self._log.consumer(group, topics, start_offsets=self._start_offsets)
        self._group_at = {}  # after a reset, the group's offsets may go back with the store's
        self._group_aligned = False
        self._align_group()
        # Far behind the log (a new sink, a reset, a rebuild): progress lines with an ETA.
        stored = self._sink.stored_offsets() or {}
        self._held.start(stored)
        self._catch_up = catch_up.for_sink(self._log, self._logger, group, topics, stored)

    def _reset_tables(self) -> None:
        """Between batches (nothing pending): apply the requested resets, then read again from
        the offsets the sink now stores (0 for every partition of a reset table)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self._apply_resets()
        self._subscribe()

    def _apply_resets(self) -> None:
        """Apply the requested table resets to the open sink, retrying while the log or the
        sink is away (applied ones are marked so: a retry does only what is left)."""
        resets, sink = self._resets, self._sink
        if resets is None or sink is None:
            return
        retry_until_stopped(
            lambda: resets.apply(sink), self._stop, self._logger, "sink.reset_retrying"
        )

    def step(self) -> int:
        """Poll one batch and apply it; returns how many records were applied."""
        assert self._consumer is not None
        size = self.read_size
        stored = self._consumer.poll(size.count, self._poll_timeout_s, size.max_bytes)
        if not self._group_aligned:
            self._align_group()
        if not stored:
            if self._catch_up is not None:
                self._catch_up.idle()
            self._rebuild_from_log(self._probe.lost(self._sink))
            self._commit_group(self._durable_moved())  # what its own schedule committed
            self._track()
            self._held.idle(self._sink)
            return 0
        self.read_size.read(stored)
        # After the poll: a change is stored before what it encodes. A log that is away
        # (a broker restart) is waited for, as a commit is.
        retry_until_stopped(
            self._follow_encoding, self._stop, self._logger, "sink.encoding_retrying"
        )
        batch = decode_records(stored, self._eras, self._rows)
        try:
            self._apply(batch)
        except SinkDataLost as exc:
            self._rebuild_from_log(exc)
            return 0
        offsets = sink_offsets(batch)
        # The batch is durable in the sink (or, for a sink that commits on its own schedule,
        # as much of it as its durable_offsets say).
        # A timed commit inside this flush may have made other partitions durable too: a busy
        # partition must not hold the others' lag up until the task is idle.
        self._commit_group({**self._durable_moved(), **self._durable(offsets)})
        self.records_applied += len(batch)
        self._held.committed(offsets)
        if self._retrying:  # the store is back: status says running again, as /readyz does
            self._retrying = False
            self._record_state(RUNNING)
        if self._observer is not None:
            self._observer.applied(batch)
        if self._resets is not None:
            self._resets.applied(offsets)
        if self._catch_up is not None:
            self._catch_up.note(offsets)
        self._track()
        return len(batch)

    def _align_group(self) -> None:
        """Commit the sink's stored offsets of its assigned partitions to its group, once a
        subscription (at once on the embedded log; on Kafka after the first poll's assignment).

        A sink that stores its offsets resumes from them, not from the group's; but ``cdc
        status``'s lag, ``cdc verify``'s lag check and ``cdc wait`` read the group's. When they
        differ (a copy built with ``--rebuild --into`` swapped in, whose group is the old
        sink's; a store restored from a backup), the group said caught up, or further, until
        the first batch was committed: a copy swapped in showed lag 0 before it applied a row.
        """
        assert self._sink is not None and self._consumer is not None
        assigned = set(self._consumer.assignment())
        if not assigned:
            return  # Kafka: not assigned yet
        stored = self._sink.stored_offsets() or {}
        self._commit_group({tp: o for tp, o in stored.items() if tp in assigned})
        self._group_aligned = True

    def _commit_group(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit the group's ``offsets``. A commit that fails (the broker away) is retried
        until it lands or the task stops, in which case the batch is replayed harmlessly."""
        consumer = self._consumer
        if not offsets or consumer is None:
            return
        retry_until_stopped(
            lambda: consumer.commit(offsets, self._stop),
            self._stop,
            self._logger,
            "sink.commit_retrying",
        )
        self._group_at.update(offsets)

    def _durable(self, offsets: Mapping[TopicPartition, int]) -> Mapping[TopicPartition, int]:
        """``offsets``, no further than the store holds them durably.

        A sink whose flush may leave records buffered, to commit them on its own schedule
        (Iceberg's ``commit_interval_s``), says what its store holds in ``durable_offsets()``
        (:class:`cdc.contracts.sink.Sink`). It resumes from its own stored offsets, so the
        group's are not what makes it exactly-once; but ``cdc status``'s lag, ``cdc verify``'s
        lag check and ``cdc wait`` read the group's, which must not lead the store's data.
        """
        durable_of = getattr(self._sink, "durable_offsets", None)
        if durable_of is None:
            return offsets
        durable, topics = durable_of() or {}, set(self._topics)
        capped = {  # the schema topic's records are no data: as they are
            tp: offset if tp.topic not in topics else min(offset, durable[tp])
            for tp, offset in offsets.items()
            if tp.topic not in topics or tp in durable
        }
        return {tp: o for tp, o in capped.items() if o > self._group_at.get(tp, -1)}

    def _durable_moved(self) -> Mapping[TopicPartition, int]:
        """While idle: the durable offsets of a sink that commits on its own schedule, where
        they moved past what the group last committed (its commit came while idle)."""
        durable_of = getattr(self._sink, "durable_offsets", None)
        if durable_of is None:
            return {}
        topics = set(self._topics)
        durable = durable_of() or {}
        return {
            tp: o
            for tp, o in durable.items()
            if tp.topic in topics and o > self._group_at.get(tp, -1)
        }

    @property
    def consistent_position(self) -> Any:
        """The source position this sink holds every change up to (``None``: not known)."""
        return None if self._consistency is None else self._consistency.position

    def _track(self) -> None:
        """Move the consistent position on (:mod:`cdc.runtime.consistency`), at its pace."""
        tracker = self._consistency
        if tracker is not None and tracker.tick() and self._observer is not None:
            self._observer.consistent(tracker.position)

    def _rebuild_from_log(self, exc: SinkDataLost | None) -> None:
        """The store lost what it held (``exc``; ``None``: it did not): reset every table, so
        that the run loop reads every topic from its start before anything else (the compacted
        log holds each key's latest record). Nothing of a failed batch was committed; it is
        read again with the rest.

        Raises:
            SinkDataLost: no control topic to report the resets through (the sink stops).
        """
        if exc is None:
            return
        if self._resets is None:
            raise exc
        self._resets.rebuild_all(str(exc))
        if self._observer is not None:
            self._observer.rebuild_started()

    def _follow_encoding(self) -> None:
        """The log's encodings, read again when an envelope change was stored since."""
        newest = self._encoding.newest if self._encoding.refresh() else None
        if newest is not None:
            self._eras = Eras(newest)
            if self._consumer is not None:  # not at the start: a change made while running
                self._logger.info("sink.envelope_followed", encodings=len(self._eras.all))

    def _open_sink(self) -> Sink:
        sink = self._factory()
        try:
            sink.open()
        except Exception as exc:
            self._note_retry(exc)  # the store away at start: status says so, as /readyz does
            raise
        return sink

    def _note_retry(self, exc: BaseException) -> None:
        """Record ``retrying`` with the reason, once per outage (the log is not flooded)."""
        if not self._retrying and classify(exc) is Decision.RETRY:
            self._retrying = True
            self._record_state(RETRYING, exc)

    def _start_offsets(self, partitions: list[TopicPartition]) -> Mapping[TopicPartition, int]:
        assert self._sink is not None
        stored = self._sink.stored_offsets() or {}
        return {tp: offset for tp, offset in stored.items() if tp in partitions}

    def _apply(self, batch: list[SinkRecord]) -> None:
        """Write and flush ``batch``, retrying the whole batch on retriable errors."""
        backoff = Backoff()  # one for the batch: a dead-lettered record does not reset it
        while True:
            write = functools.partial(self._write_and_flush, batch)
            try:
                retry_until_stopped(write, self._stop, self._logger, "sink.retrying", backoff)
                return
            except RecordError as exc:
                if classify(exc) is not Decision.SKIP:
                    raise
                batch = self._bad_records.drop(batch, exc)

    def _write_and_flush(self, batch: list[SinkRecord]) -> None:
        assert self._sink is not None
        try:
            self._held.hand(self._sink, batch)
            self._sink.write(batch)
            self._sink.flush()
        except Exception as exc:
            # A lost store is no failed write: it is counted as a rebuild.
            if self._observer is not None and not isinstance(exc, SinkDataLost):
                self._observed_error(self._observer, exc)
            self._note_retry(exc)
            raise

    @staticmethod
    def _observed_error(observer: SinkObserver, exc: Exception) -> None:
        """Count a failed write by kind; a retried one puts the sink in ``retrying``."""
        decision = classify(exc)
        if decision is Decision.RETRY:
            observer.error("unavailable")
            observer.state("retrying", exc)
        else:
            observer.error("record" if decision is Decision.SKIP else "fatal")

    def _close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._sink is not None:
            self._sink.close()
            self._sink = None
