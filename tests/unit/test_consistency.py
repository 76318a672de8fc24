"""The consistent position a sink task publishes, and the fence's wait, on a real embedded log.

A source's offsets here are ``{"pos": n}`` (a plain position: ``int`` orders itself), stored in
the same transaction as that step's records, as a source does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdc.contracts import snapshot_offsets
from cdc.contracts.positions import Offsets
from cdc.fence import Fence, FenceTimeout
from cdc.log.base import Record, TopicPartition
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.consistency import ConsistencyTracker

TOPIC, GROUP = "p.public.t", "p.sink.cache"
TP = TopicPartition(TOPIC, 0)


def decode(offsets: Offsets) -> Any:
    return offsets.get("pos")


def commit(log: EmbeddedLog, records: int, pos: int) -> None:
    """``records`` records of one source transaction, and its position, in one commit."""
    tx = log.begin()
    tx.append([Record(TOPIC, f"k{pos}.{i}".encode(), b"{}") for i in range(records)])
    tx.store_offsets({"pos": pos})
    tx.commit()


def applied(log: EmbeddedLog, offset: int) -> None:
    """The sink made everything below ``offset`` durable and committed it."""
    consumer = log.consumer(GROUP, [TOPIC])
    consumer.commit({TP: offset})
    consumer.close()


@pytest.fixture
def log(tmp_path: Path) -> Any:
    log = EmbeddedLog(tmp_path / "log")
    log.ensure_topics([TOPIC])
    yield log
    log.close()


def test_the_position_follows_the_samples_the_committed_offsets_pass(log: EmbeddedLog) -> None:
    tracker = ConsistencyTracker(log, GROUP, [TOPIC], decode, every_s=0)
    assert not tracker.tick() and tracker.position is None  # nothing stored yet
    commit(log, 3, pos=1)  # offsets 0-2
    assert not tracker.tick() and tracker.position is None  # sample (1, end 3), nothing applied
    applied(log, 3)
    assert tracker.tick() and tracker.position == 1
    commit(log, 2, pos=2)  # offsets 3-4
    tracker.tick()  # sample (2, end 5)
    commit(log, 2, pos=3)  # offsets 5-6
    tracker.tick()  # sample (3, end 7)
    applied(log, 5)  # the sink holds pos 2's records, not yet pos 3's
    assert tracker.tick() and tracker.position == 2
    applied(log, 7)
    assert tracker.tick() and tracker.position == 3
    assert not tracker.tick() and tracker.position == 3  # idle and caught up: stays


def test_a_position_stored_without_records_is_reached_when_caught_up(log: EmbeddedLog) -> None:
    """An idle keepalive's offsets (no records): the caught-up sink is consistent up to them."""
    commit(log, 1, pos=1)
    applied(log, 1)
    commit(log, 0, pos=9)
    tracker = ConsistencyTracker(log, GROUP, [TOPIC], decode, every_s=0)
    assert tracker.tick() and tracker.position == 9


def test_the_fence_waits_for_the_position_then_for_the_sink(log: EmbeddedLog) -> None:
    fence = Fence(log, GROUP, [TOPIC])
    commit(log, 2, pos=1)
    with pytest.raises(FenceTimeout, match="stored position 1 to reach 2"):
        fence.wait(decode, 2, timeout_s=0.05)
    commit(log, 2, pos=2)
    with pytest.raises(FenceTimeout, match="apply 4 more record"):
        fence.wait(decode, 2, timeout_s=0.05)
    applied(log, 3)
    with pytest.raises(FenceTimeout, match="apply 1 more record"):
        fence.wait(decode, 2, timeout_s=0.05)
    applied(log, 4)
    assert fence.wait(decode, 2, timeout_s=0) == 2
    assert fence.wait(decode, 1, timeout_s=0) == 2  # an earlier position: at once


def test_no_position_counts_while_an_initial_snapshot_is_unfinished(log: EmbeddedLog) -> None:
    """The position is stored when a snapshot starts; its rows (changes committed before it)
    come chunk by chunk after: no fence passes, no consistent position, until the last one."""
    chunks: list[dict[str, Any]] = [{"first": 1}, {"first": 2}]
    entry = snapshot_offsets.new_table("initial", "s1", "keyset", None, chunks, 0)
    key = snapshot_offsets.table_key("public.t")
    tx = log.begin()
    tx.store_offsets({"pos": 5, key: entry})
    tx.commit()
    tracker = ConsistencyTracker(log, GROUP, [TOPIC], decode, every_s=0)
    assert not tracker.tick() and tracker.position is None
    with pytest.raises(FenceTimeout, match="stored position None to reach 2"):
        Fence(log, GROUP, [TOPIC]).wait(decode, 2, timeout_s=0.05)
    commit(log, 0, pos=5)  # a re-snapshot's table does not hold fences back
    tx = log.begin()
    tx.store_offsets({key: {**entry, "kind": "incremental"}})
    tx.commit()
    assert Fence(log, GROUP, [TOPIC]).wait(decode, 2, timeout_s=0) == 5
    tx = log.begin()
    tx.store_offsets({key: {**entry, "done": [[0, 1]]}})  # the initial one, finished
    tx.commit()
    assert tracker.tick() and tracker.position == 5
