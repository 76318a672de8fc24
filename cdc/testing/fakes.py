"""Fakes that inject faults, for testing the runtime's checkpoint order and retries.

They stand in for real sources and sinks only where the behaviour under test is the runtime's
own (what it commits, when it acks, how it retries); real connectors are tested against real
servers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cdc.contracts.errors import RecordError, SinkFatal, SinkUnavailable
from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.contracts.positions import Offsets
from cdc.contracts.sink import SinkRecord
from cdc.contracts.source import SourceBatch
from cdc.log.base import TopicPartition


def make_event(
    key: int,
    op: Op = Op.CREATE,
    position: int = 1,
    sequence: int = 0,
    table: str = "items",
    **columns: Any,
) -> ChangeEvent:
    """A small change event of ``public.<table>`` keyed by ``id``."""
    after = None if op is Op.DELETE else {"id": key, **columns}
    before = {"id": key} if op is Op.DELETE else None
    source = SourceInfo("fake", "db", "public", table, 0, position, sequence)
    return ChangeEvent(op, {"id": key}, before, after, source)


@dataclass
class ScriptedSource:
    """Returns scripted batches in order; an exception in the script is raised from ``poll``.

    ``drained`` is set once the script has nothing more to hand out: on the poll that finds it
    empty, or on the poll that raises its last item, an exception (with ``replay``, a reopen
    after a retriable one may hand out batches again).

    ``acked`` records every ack, ``opened_with`` the offsets of every ``open``. With ``replay``,
    a reopen hands out again the batches given since the last ack, as a real source resumes
    from its stored offsets after the runtime rolled their transaction back.
    """

    script: list[SourceBatch | BaseException]
    table_names: list[tuple[str, str]] = field(default_factory=lambda: [("public", "items")])
    acked: list[dict[str, Any]] = field(default_factory=list)
    opened_with: list[dict[str, Any]] = field(default_factory=list)
    closed: int = 0
    drained: threading.Event = field(default_factory=threading.Event)
    replay: bool = False
    _unacked: list[SourceBatch] = field(default_factory=list)

    def tables(self) -> list[tuple[str, str]]:
        return self.table_names

    def open(self, stored_offsets: Offsets) -> None:
        self.opened_with.append(dict(stored_offsets))
        if self.replay:
            self.script[:0], self._unacked = self._unacked, []

    def poll(self, max_events: int, timeout_s: float) -> SourceBatch:
        if not self.script:
            self.drained.set()
            self.drained.wait(timeout_s)
            return SourceBatch()
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            if not self.script:
                # A fatal error stops the runtime before any later poll could find it empty.
                self.drained.set()
            raise item
        self._unacked.append(item)
        return item

    def ack(self, offsets: Offsets) -> None:
        self.acked.append(dict(offsets))
        self._unacked.clear()

    def close(self) -> None:
        self.closed += 1


@dataclass
class FlakySink:
    """A sink kept in memory whose failures are scripted.

    Attributes:
        fail_flushes: the next N flushes raise ``SinkUnavailable`` (retriable).
        fatal_flush: every flush raises ``SinkFatal``.
        down: while ``down()`` is true, opens and writes raise ``SinkUnavailable``; ``refused``
            counts them, which shows a test the runtime kept trying while it was down.
        bad_keys: keys whose records raise ``RecordError`` from ``write``.
    """

    fail_flushes: int = 0
    fatal_flush: bool = False
    down: Callable[[], bool] = lambda: False
    bad_keys: set[int] = field(default_factory=set)
    pending: list[SinkRecord] = field(default_factory=list)
    flushed: list[SinkRecord] = field(default_factory=list)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    flush_attempts: int = 0
    refused: int = 0
    resets: list[tuple[str, str]] = field(default_factory=list)

    def open(self) -> None:
        if self.down():
            self.refused += 1
            raise SinkUnavailable("fake sink is down")

    def stored_offsets(self) -> Mapping[TopicPartition, int] | None:
        return None

    def write(self, records: Sequence[SinkRecord]) -> None:
        if self.down():
            self.refused += 1
            raise SinkUnavailable("fake sink is down")
        for record in records:
            if record.key and record.key.get("id") in self.bad_keys:
                raise RecordError(f"cannot apply key {record.key}", record)
        self.pending.extend(records)

    def flush(self) -> None:
        self.flush_attempts += 1
        if self.fatal_flush:
            raise SinkFatal("fake sink flush failed for good")
        if self.fail_flushes > 0:
            self.fail_flushes -= 1
            self.pending.clear()
            raise SinkUnavailable("fake sink flush failed")
        for record in self.pending:
            key = str(record.key)
            if record.value is None or record.value.get("op") == "d":
                self.rows.pop(key, None)
            else:
                self.rows[key] = record.value["after"]
        self.flushed.extend(self.pending)
        self.pending.clear()

    def close(self) -> None:
        self.pending.clear()

    def reset_table(self, table: tuple[str, str], partitions: Sequence[TopicPartition]) -> None:
        """Forget every row (the fake does not tell tables apart)."""
        self.rows.clear()
        self.resets.append(table)
