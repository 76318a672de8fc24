"""The Iceberg sink and single records, against a real SQLite catalog, a local warehouse and the
embedded log: a tombstone read without its delete (compaction took the delete) is that delete,
in ``current`` and ``append`` mode; a bad record under ``bad_records: dead_letter`` leaves the
buffer and the records after it are committed."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.contracts.schema import Column, TableSchema, dead_letter_topic
from cdc.contracts.sink import SinkContext
from cdc.log.base import Log, TopicPartition
from cdc.runtime.sink_task import SinkTask, group_name
from cdc.support.logging import get_logger
from cdc.testing import wait_until
from cdc.testing.conformance import PIPELINE, TABLE, TOPIC, V1, SinkConformance, change
from sinks.iceberg import IcebergSink, read_rows
from tests.integration.duckdb_kit import PIPELINE as LAKE_PIPELINE
from tests.integration.duckdb_kit import event, item
from tests.integration.test_iceberg_sink import Lake, lake_config

FIELDS = ("id", "name", "_cdc_op", "_cdc_pos", "_cdc_commit_ts")


def changelog(lake: Lake) -> list[dict[str, Any]]:
    rows = lake.table().scan(selected_fields=FIELDS).to_arrow().to_pylist()
    return sorted(rows, key=lambda r: (r["_cdc_pos"], r["_cdc_op"]))


def test_append_mode_records_a_tombstone_as_its_delete_once(tmp_path: Path) -> None:
    lake = Lake(tmp_path, mode="append")
    lake.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    delete, tomb = lake.records(item(Op.DELETE, 1, 12))
    lake.sink.write([delete])  # the pair split by a commit: the changelog holds the delete
    lake.sink.flush()
    lake.sink.write([tomb])
    lake.sink.flush()
    _, compacted = lake.records(item(Op.DELETE, 2, 13))  # its delete compacted away
    _, old = lake.records(item(Op.DELETE, 3, 14))
    lake.sink.write([compacted, replace(old, pos=None)])  # one written before positions: skipped
    lake.sink.flush()
    assert [(r["id"], r["_cdc_op"], r["_cdc_pos"]) for r in changelog(lake)] == [
        (1, "c", 10),
        (2, "c", 11),
        (1, "d", 12),
        (2, "d", 13),
    ]
    # A tombstone has no commit time: NULL, not a guess; the delete's row has its own.
    assert [r["_cdc_commit_ts"] is None for r in changelog(lake)] == [False, False, False, True]
    assert changelog(lake)[-1]["name"] is None


def test_current_mode_a_tombstone_alone_deletes_its_key_of_a_composite_key_table(
    tmp_path: Path,
) -> None:
    lake = Lake(tmp_path)
    lines = (
        Column("order_id", "bigint", key=True, nullable=False),
        Column("line_no", "integer", key=True, nullable=False),
        Column("qty", "integer"),
    )
    lake.schemas.publish("lines", *lines)

    def line(op: Op, order: int, no: int, pos: int, qty: int = 0) -> ChangeEvent:
        key = {"order_id": order, "line_no": no}
        return event(op, key, None if op is Op.DELETE else {**key, "qty": qty}, pos, table="lines")

    lake.sink = _sink_of(lake, ("public", "lines"))
    lake.apply(line(Op.CREATE, 1, 1, 10, 5), line(Op.CREATE, 1, 2, 11, 6))
    _, tomb = lake.records(line(Op.DELETE, 1, 1, 12))
    _, old = lake.records(line(Op.DELETE, 1, 2, 13))
    lake.sink.write([tomb, replace(old, pos=None)])
    lake.sink.flush()
    assert {k: r["qty"] for k, r in lake.rows("lines").items()} == {(1, 2): 6}
    lake.reopen()
    lake.sink = _sink_of(lake, ("public", "lines"))
    lake.apply(line(Op.UPDATE, 1, 1, 11, 9))  # older than the tombstone: refused
    assert {k: r["qty"] for k, r in lake.rows("lines").items()} == {(1, 2): 6}


def _sink_of(lake: Lake, table: tuple[str, str]) -> IcebergSink:
    lake.sink.close()
    context = SinkContext(LAKE_PIPELINE, "lake", [table], lake.schemas, get_logger())
    sink = IcebergSink(lake.config, context)
    sink.open()
    return sink


def kit_task(kit: SinkConformance, log: Log, stop: threading.Event, **options: Any) -> SinkTask:
    config = lake_config(kit.kit_dir / "lake")
    return SinkTask(
        PIPELINE,
        "kit",
        log,
        lambda: IcebergSink(config, kit.context()),
        [TOPIC],
        stop,
        get_logger(sink="kit"),
        poll_timeout_s=0.05,
        **options,
    )


def run_until_committed(
    kit: SinkConformance, log: Log, offset: int, **options: Any
) -> BaseException | None:
    """Run a sink task in a thread until its group committed ``offset``; its error, if any."""
    stop, failed = threading.Event(), list[BaseException]()

    def body() -> None:
        try:
            kit_task(kit, log, stop, **options).run()
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    group = group_name(PIPELINE, "kit")
    try:
        wait_until(lambda: sum(log.committed_offsets(group).values()) >= offset or failed, 20)
    finally:
        stop.set()
        thread.join(30)
    return failed[0] if failed else None


def kit_rows(kit: SinkConformance) -> dict[int, tuple[Any, Any]]:
    config = lake_config(kit.kit_dir / "lake")
    found = read_rows(config, *TABLE, pipeline=PIPELINE)
    return {k["id"]: (r["name"], r["qty"]) for k, r in found}


def test_the_embedded_log_compacted_under_a_stopped_sink_deletes_the_key(tmp_path: Path) -> None:
    kit = SinkConformance()
    kit.setup_kit(tmp_path)
    log = kit.log()
    kit.fill_log(log, [change(1, Op.CREATE, 10, "a", 1), change(2, Op.CREATE, 11, "b", 2)])
    assert run_until_committed(kit, log, 2) is None
    assert kit_rows(kit) == {1: ("a", 1), 2: ("b", 2)}
    kit.fill_log(log, [change(1, Op.DELETE, 12), change(2, Op.UPDATE, 13, "b2", 3)])
    # The delete (offset 2) is superseded by its tombstone, as are both creates.
    assert log.compact()["superseded"] == 3
    assert run_until_committed(kit, log, 5) is None
    assert kit_rows(kit) == {2: ("b2", 3)}
    log.close()


def dated(key: int, pos: int, day: str | None) -> ChangeEvent:
    source = SourceInfo("kit", "kit", *TABLE, 0, pos, 0)
    return ChangeEvent(Op.CREATE, {"id": key}, None, {"id": key, "day": day}, source)


def letters(log: Log) -> list[dict[str, Any]]:
    found = log.consumer("check", [dead_letter_topic(PIPELINE)]).poll(100, 1.0)
    return [orjson.loads(r.value or b"{}") for r in found]


def test_a_bad_record_is_dead_lettered_once_and_the_other_keys_after_it_committed(
    tmp_path: Path,
) -> None:
    # Before, the bad record stayed in the buffer: every later commit met it again, and the
    # dead-letter topic grew without end while nothing after it was committed.
    kit = SinkConformance()
    kit.setup_kit(tmp_path)
    columns = (*V1.columns, Column("day", "date"))
    kit.schemas.current[TABLE] = TableSchema("kit", *TABLE, columns=columns, position=5)
    log = kit.log()
    # An Iceberg date cannot hold PostgreSQL's 'infinity'.
    kit.fill_log(log, [dated(1, 10, "infinity"), *(dated(k, 10 + k, None) for k in range(2, 6))])
    options = {"bad_records": "dead_letter", "max_records": 10}
    assert run_until_committed(kit, log, 5, **options) is None
    assert sorted(kit_rows(kit)) == [2, 3, 4, 5]
    assert [(d["key"], "column day" in d["reason"]) for d in letters(log)] == [({"id": 1}, True)]
    # The last record of the partition bad: the table's offsets (where a restart starts) still
    # move past it, so a restart does not read it, and dead-letter it, again.
    kit.fill_log(log, [dated(6, 20, "infinity")])
    assert run_until_committed(kit, log, 6, **options) is None
    assert [d["key"] for d in letters(log)] == [{"id": 1}, {"id": 6}]
    sink = IcebergSink(lake_config(kit.kit_dir / "lake"), kit.context())
    sink.open()
    assert sink.stored_offsets() == {TopicPartition(TOPIC, 0): 6}
    sink.close()
    log.close()


def test_the_group_commits_no_further_than_the_tables_hold(tmp_path: Path) -> None:
    """Under commit_interval_s the sink keeps applied records in its buffer; the runner commits
    the group's offsets (what cdc status's lag, verify's lag check and cdc wait read) only as
    far as the tables hold them (IcebergSink.durable_offsets), and moves them on when the idle
    probe commits the buffer. The former runner committed them at once: the group said
    caught up while the tables held nothing."""
    kit = SinkConformance()
    kit.setup_kit(tmp_path)
    log = kit.log()
    config = lake_config(kit.kit_dir / "lake").model_copy(update={"commit_interval_s": 2.0})
    stop = threading.Event()
    task = SinkTask(
        PIPELINE, "kit", log, lambda: IcebergSink(config, kit.context()), [TOPIC], stop,
        get_logger(sink="kit"), poll_timeout_s=0.05,
    )  # fmt: skip
    thread = threading.Thread(target=task.run, daemon=True)
    group = group_name(PIPELINE, "kit")
    samples: list[tuple[int, int, int]] = []

    def sample() -> bool:
        applied = task.records_applied
        committed = sum(log.committed_offsets(group).values())
        held = len(list(read_rows(config, *TABLE, pipeline=PIPELINE)))  # after: rows only grow
        samples.append((applied, committed, held))
        return committed >= 3

    try:
        thread.start()
        kit.fill_log(log, [change(1, Op.CREATE, 10, "a", 1)])  # a new partition: committed now
        wait_until(lambda: sum(log.committed_offsets(group).values()) >= 1, 20)
        kit.fill_log(log, [change(2, Op.CREATE, 11, "b", 2), change(3, Op.CREATE, 12, "c", 3)])
        wait_until(sample, 30)
    finally:
        stop.set()
        thread.join(30)
    assert all(committed <= held for _, committed, held in samples), samples
    # Applied but still buffered: the group waited for the commit.
    assert any(applied == 3 and committed == 1 for applied, committed, _ in samples), samples
    assert kit_rows(kit) == {1: ("a", 1), 2: ("b", 2), 3: ("c", 3)}
    log.close()
