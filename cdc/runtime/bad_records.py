"""What a sink task does with a record its sink cannot apply, by the sink's ``bad_records``.

Under ``fail`` the sink stops (:class:`SinkRecordStop`, which :meth:`SinkTask.serve
<cdc.runtime.sink_task.SinkTask.serve>` records as the sink's error); under ``dead_letter`` the
record goes to the pipeline's dead-letter topic, once (:mod:`cdc.runtime.dead_letters`), and
the rest of its batch is written without it. Apart from the sink task because it is policy,
not checkpoint order: the task only retries the batch this hands back.
"""

from __future__ import annotations

from cdc.contracts.errors import RecordError
from cdc.contracts.sink import SinkRecord
from cdc.log.base import Log
from cdc.metrics.observers import SinkObserver
from cdc.runtime.dead_letters import DeadLetters
from cdc.runtime.source_task import dead_letter_record
from cdc.support.logging import Logger


class SinkRecordStop(RecordError):
    """A record a sink cannot apply, under the ``fail`` policy."""


class BadRecords:
    """A sink's bad records, handled by its ``policy`` (``fail`` or ``dead_letter``).

    Args:
        log: the pipeline's log (the dead-letter topic's).
        pipeline: the pipeline's name.
        sink: the sink's name; its dead letters' origin is ``sink:<name>``.
        policy: the sink's ``bad_records``.
        logger: the sink task's logger.
        observer: the process's metrics (``None``: off), told of each dead letter.
    """

    def __init__(
        self,
        log: Log,
        pipeline: str,
        sink: str,
        policy: str,
        logger: Logger,
        observer: SinkObserver | None = None,
    ) -> None:
        self._log, self._pipeline, self._name, self._policy = log, pipeline, sink, policy
        self._logger, self._observer = logger, observer
        self._letters = DeadLetters(log, pipeline, f"sink:{sink}")

    def drop(self, batch: list[SinkRecord], exc: RecordError) -> list[SinkRecord]:
        """``batch`` without the record ``exc`` names, dead-lettered (once) on the way.

        Raises:
            SinkRecordStop: the policy is ``fail``, or ``exc`` names no record of a sink.
        """
        bad = exc.record
        if self._policy != "dead_letter" or not isinstance(bad, SinkRecord):
            raise SinkRecordStop(
                f"sink {self._name} cannot apply a record: {exc.reason} (set bad_records: "
                "dead_letter to route such records to the dead-letter topic)"
            ) from exc
        if self._letters.holds(bad):
            # Read again (the sink's stored offsets end before it, a crash before the flush,
            # a reset table): it has its dead letter already.
            self._logger.info("record.dead_lettered_before", topic=bad.topic, offset=bad.offset)
            return [r for r in batch if r is not bad]
        self._logger.warning(
            "record.dead_lettered", topic=bad.topic, offset=bad.offset, reason=exc.reason
        )
        with_reason = dead_letter_record(
            self._pipeline,
            f"sink:{self._name}",
            bad.topic,
            bad.key,
            exc.reason,
            {"offset": bad.offset, "partition": bad.partition, "value": bad.value},
        )
        tx = self._log.begin()
        tx.append([with_reason])
        tx.commit()
        self._letters.add(bad)
        if self._observer is not None:
            self._observer.dead_lettered()
        return [r for r in batch if r is not bad]
