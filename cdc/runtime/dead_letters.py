"""A sink's dead letters, one per record: a record already dead-lettered is not again.

A sink that keeps its offsets with its data (DuckDB, PostgreSQL, OpenSearch, Iceberg) stores
those of the records it wrote; a dead-lettered record was not handed to it, so when it ends a
batch the stored offsets end before it, and the runner, which resumes from them, reads it again
after a restart (or a reset of its table). A crash between the dead letter's append and the
batch's flush replays it too. In every case the record fails again: the dead-letter topic is
where the runner finds it was dead-lettered already, by ``(topic, partition, offset)``, whatever
the sink (a third party's too) and whatever the log.
"""

from __future__ import annotations

from typing import Any

import orjson

from cdc.contracts.schema import dead_letter_topic
from cdc.contracts.sink import SinkRecord
from cdc.log.base import Log

Origin = tuple[str, int, int]
"""``(topic, partition, offset)`` of a dead-lettered record."""

_READ = 1000


class DeadLetters:
    """The records ``origin`` (``sink:<name>``) dead-lettered, read from the topic as needed.

    The topic is read on the first bad record, then only its new entries on a later one that
    is not known yet (another worker may have dead-lettered it before a rebalance)."""

    def __init__(self, log: Log, pipeline: str, origin: str) -> None:
        self._log, self._topic, self._origin = log, dead_letter_topic(pipeline), origin
        self._known: set[Origin] = set()
        self._next: dict[int, int] = {}  # partition -> next offset to read

    def holds(self, record: SinkRecord) -> bool:
        """Whether ``record`` was dead-lettered by this origin already."""
        origin = (record.topic, record.partition, record.offset)
        if origin not in self._known:
            self._read_new()
        return origin in self._known

    def add(self, record: SinkRecord) -> None:
        """``record`` was just dead-lettered (its entry is read again later, harmlessly)."""
        self._known.add((record.topic, record.partition, record.offset))

    def _read_new(self) -> None:
        log, topic = self._log, self._topic
        if not self._next:  # the first read: the topic exists from then on (a letter's too)
            log.ensure_topics([topic])
        for partition, end in log.end_offsets(topic).items():
            offset = self._next.get(partition, 0)
            while offset < end:
                records = log.read(topic, partition, offset, _READ)
                if not records:
                    break
                for stored in records:
                    self._note(stored.value)
                offset = records[-1].offset + 1
            self._next[partition] = offset

    def _note(self, value: bytes | None) -> None:
        letter: Any = None if value is None else _loads(value)
        if not isinstance(letter, dict) or letter.get("origin") != self._origin:
            return
        payload = letter.get("payload")
        if not isinstance(payload, dict):
            return
        partition, offset = payload.get("partition"), payload.get("offset")
        # A letter written before letters named their partition cannot be told apart.
        if isinstance(partition, int) and isinstance(offset, int):
            self._known.add((str(letter.get("table")), partition, offset))


def _loads(value: bytes) -> Any:
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
