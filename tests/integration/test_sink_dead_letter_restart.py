"""One dead letter per bad record, through restarts, over a real embedded log and DuckDB file.

DuckDB keeps its offsets with its data: those of the records it wrote. A dead-lettered record
that ends a batch is not among them, so the sink task, which resumes from them, reads it again
after a restart; it was dead-lettered a second time (and after every restart that followed).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from cdc.contracts.events import Op
from cdc.contracts.schema import Column, dead_letter_topic
from cdc.envelope import encode as envelope
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.sink_task import SinkTask, group_name
from cdc.support.logging import get_logger
from cdc.support.wait import wait_until
from sinks.duckdb import DuckDBSink
from tests.integration.duckdb_kit import PIPELINE, Harness, event

PRICES = f"{PIPELINE}.public.prices"


@pytest.fixture
def wh(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "wh.duckdb")
    harness.schemas.publish("prices", Column("id", "bigint", key=True), Column("p", "numeric(4,2)"))
    harness.sink.close()  # the task opens its own: one writer of the file at a time
    yield harness


def _append(log: EmbeddedLog, *prices: tuple[int, str, int]) -> None:
    tx = log.begin()
    for key, price, pos in prices:
        change = event(Op.CREATE, {"id": key}, {"id": key, "p": price}, pos, table="prices")
        tx.append(envelope.to_records(change, PIPELINE, now_ms=0))
    tx.commit()


def _run_until(log: EmbeddedLog, wh: Harness, committed: int) -> None:
    """A sink task (a fresh start) run until the group committed ``committed`` records."""
    stop = threading.Event()
    task = SinkTask(
        PIPELINE, "wh", log, wh.new_sink, [PRICES], stop, get_logger(), bad_records="dead_letter"
    )
    thread = threading.Thread(target=task.run)
    thread.start()
    try:
        group = group_name(PIPELINE, "wh")
        wait_until(lambda: sum(log.committed_offsets(group).values()) >= committed, 30)
    finally:
        stop.set()
        thread.join(10)


def _dead_letters(log: EmbeddedLog) -> list[tuple[str, int]]:
    topic = dead_letter_topic(PIPELINE)
    letters = [orjson.loads(r.value or b"{}") for r in log.read(topic, 0, 0, 100)]
    return [(d["origin"], d["payload"]["offset"]) for d in letters]


def test_a_bad_record_ending_a_batch_is_dead_lettered_once_across_restarts(
    wh: Harness, tmp_path: Path
) -> None:
    log = EmbeddedLog(tmp_path / "log")
    try:
        log.ensure_topics([PRICES, dead_letter_topic(PIPELINE)])
        _append(log, (1, "1.25", 10), (2, "NaN", 11))  # the NaN ends the batch
        _run_until(log, wh, 2)
        sink = wh.new_sink()
        assert isinstance(sink, DuckDBSink)
        assert sink.stored_offsets() == {(PRICES, 0): 1}  # before the dead-lettered record
        sink.close()
        _append(log, (3, "2.50", 12))
        _run_until(log, wh, 3)  # a restart: the NaN is read again, and fails again
        _append(log, (4, "NaN", 13), (5, "3.75", 14))
        _run_until(log, wh, 5)  # a new bad record is dead-lettered as ever
        assert _dead_letters(log) == [("sink:wh", 1), ("sink:wh", 3)]
        wh.sink = wh.new_sink()
        assert {k: str(r["p"]) for k, r in wh.rows("prices").items()} == {
            1: "1.25",
            3: "2.50",
            5: "3.75",
        }
        wh.sink.close()
    finally:
        log.close()
