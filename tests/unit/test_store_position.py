"""Which source position a sink task hands its sink to store with a batch's offsets, on a real
embedded log (:mod:`cdc.runtime.store_position`).

A source's offsets here are ``{"pos": n}``, stored in the same transaction as that step's
records, as in ``test_consistency.py``. The sink records what it is handed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdc.contracts.positions import Offsets
from cdc.contracts.sink import SinkRecord
from cdc.log.base import Record, TopicPartition
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.consistency import ConsistencyTracker
from cdc.runtime.store_position import StorePosition
from cdc.support.logging import get_logger

TOPIC, GROUP = "p.public.t", "p.sink.cache"
TP = TopicPartition(TOPIC, 0)


def decode(offsets: Offsets) -> Any:
    return offsets.get("pos")


def commit(log: EmbeddedLog, records: int, pos: int) -> None:
    tx = log.begin()
    tx.append([Record(TOPIC, f"k{pos}.{i}".encode(), b"{}") for i in range(records)])
    tx.store_offsets({"pos": pos})
    tx.commit()


def batch(first: int, last: int) -> list[SinkRecord]:
    """The records at offsets ``first`` to ``last`` of the topic's partition 0."""
    return [SinkRecord(TOPIC, 0, o, {"id": o}, {"id": o}) for o in range(first, last + 1)]


class Recorder:
    """A sink that keeps what it is handed (only what :class:`StorePosition` calls)."""

    def __init__(self) -> None:
        self.handed: list[str] = []
        self.flushes = 0

    def set_consistent_position(self, position: str) -> None:
        self.handed.append(position)

    def flush(self) -> None:
        self.flushes += 1


class Plain:
    """A sink without positions (the example plugin's kind): nothing is handed."""

    def flush(self) -> None:
        raise AssertionError("an idle turn flushes only a sink that stores positions")


@pytest.fixture
def log(tmp_path: Path) -> Any:
    log = EmbeddedLog(tmp_path / "log")
    log.ensure_topics([TOPIC])
    yield log
    log.close()


def held(log: EmbeddedLog) -> tuple[ConsistencyTracker, StorePosition]:
    tracker = ConsistencyTracker(log, GROUP, [TOPIC], decode, every_s=0)
    return tracker, StorePosition(tracker, log, GROUP, get_logger(), every_s=0)


def test_a_batch_is_handed_the_newest_sampled_position_its_offsets_reach(log: EmbeddedLog) -> None:
    tracker, positions = held(log)
    sink = Recorder()
    commit(log, 3, pos=1)  # offsets 0-2
    tracker.tick()  # sample (1, end 3)
    commit(log, 2, pos=2)  # offsets 3-4: stored, not sampled yet
    positions.start({})
    positions.hand(sink, batch(0, 1))
    assert sink.handed == []  # offset 2 of pos 1 is not in the batch: nothing is claimed
    positions.hand(sink, batch(0, 2))
    # Position 2 is stored in the log already, but no sample says which offsets hold it.
    assert sink.handed == ["1"]
    positions.committed({TP: 3})
    tracker.tick()  # sample (2, end 5)
    positions.hand(sink, batch(3, 4))
    assert sink.handed == ["1", "2"]


def test_while_idle_a_newer_position_is_stored_alone_once(log: EmbeddedLog) -> None:
    tracker, positions = held(log)
    sink = Recorder()
    commit(log, 3, pos=1)
    positions.start({})
    tracker.tick()
    positions.hand(sink, batch(0, 2))
    positions.committed({TP: 3})
    commit(log, 0, pos=7)  # an idle offer: a position with no records
    tracker.tick()
    positions.idle(sink)
    assert (sink.handed, sink.flushes) == (["1", "7"], 1)
    positions.idle(sink)  # nothing newer: no write
    assert (sink.handed, sink.flushes) == (["1", "7"], 1)


def test_after_a_reset_nothing_older_is_claimed(log: EmbeddedLog) -> None:
    tracker, positions = held(log)
    sink = Recorder()
    commit(log, 3, pos=1)
    tracker.tick()
    positions.start({})
    positions.hand(sink, batch(0, 2))
    positions.committed({TP: 3})
    consumer = log.consumer(GROUP, [TOPIC])
    consumer.commit({TP: 3})  # the group's offset stays; the sink's stored one wins
    consumer.close()
    tracker.tick()
    positions.start({TP: 0})  # the table was reset: read again from offset 0
    positions.idle(sink)
    positions.hand(sink, batch(0, 1))
    assert sink.handed == ["1"]  # only the first batch's; the tracker's own position stays 1
    assert tracker.position == 1
    positions.hand(sink, batch(0, 2))
    assert sink.handed == ["1", "1"]


def test_a_sink_without_positions_is_left_alone(log: EmbeddedLog) -> None:
    tracker, positions = held(log)
    commit(log, 1, pos=1)
    tracker.tick()
    positions.start({})
    positions.hand(Plain(), batch(0, 0))
    positions.committed({TP: 1})
    positions.idle(Plain())
