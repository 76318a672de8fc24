"""The DuckDB sink: a table reset (``cdc sink --reset-table``) and tables with no rows yet."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from cdc.contracts.errors import SinkFatal
from cdc.contracts.events import Op, topic_name
from cdc.contracts.schema import Column, TableSchema, schema_record
from cdc.contracts.sink import SinkContext
from cdc.envelope import encode as envelope
from cdc.log.base import TopicPartition
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.schemas import SchemaCatalog
from cdc.runtime.sink_task import SinkTask, group_name
from cdc.support.logging import get_logger
from cdc.testing import wait_until
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig
from tests.integration.duckdb_kit import ITEM_COLUMNS, PIPELINE, TOPIC, Harness, event, item

OTHER = topic_name(PIPELINE, "public", "other")


@pytest.fixture
def hist(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "hist.duckdb", mode="history")
    yield harness
    harness.sink.close()


def tables(h: Harness) -> set[str]:
    found = h.sql("SELECT schema_name, table_name FROM duckdb_tables()")
    return {f"{s}.{t}" for s, t in found}


def test_an_incompatible_change_names_the_reset_that_repairs_it(hist: Harness) -> None:
    hist.apply(item(Op.CREATE, 1, 10, "a", 1))
    hist.schemas.publish("items", ITEM_COLUMNS[0], ITEM_COLUMNS[1], Column("qty", "text"))
    with pytest.raises(
        SinkFatal, match=r"^DuckDB sink wh: .*cdc sink FILE wh --reset-table public\.items"
    ):
        hist.apply(item(Op.CREATE, 2, 11, "b", 2))


def test_reset_drops_the_table_and_its_shape_and_keeps_the_rest(hist: Harness) -> None:
    hist.schemas.publish("other", Column("id", "bigint", key=True), Column("v", "text"))
    hist.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    hist.apply(item(Op.DELETE, 2, 12))
    hist.apply(event(Op.CREATE, {"id": 7}, {"id": 7, "v": "x"}, 13, table="other"))
    hist.schemas.publish("items", ITEM_COLUMNS[0], ITEM_COLUMNS[1], Column("qty", "text"))
    before = hist.sink.stored_offsets()
    partitions = [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)]
    hist.sink.reset_table(("public", "items"), partitions)
    # Recreated at once, empty, in the newest published shape; the shape is recorded anew.
    assert hist.rows() == {}
    assert hist.sql(
        "SELECT data_type FROM information_schema.columns WHERE table_schema = 'public' "
        "AND table_name = 'items' AND column_name = 'qty'"
    ) == [("VARCHAR",)]
    assert hist.sql(
        "SELECT source_type FROM _cdc.columns WHERE table_name = 'items' AND column_name = 'qty'"
    ) == [("text",)]
    assert hist.sql('SELECT count(*) FROM _cdc."public.items__deleted"') == [(0,)]
    # The old history is kept aside, renamed; a new one starts.
    kept = [t for t in tables(hist) if t.startswith("public.items__history_before_reset_")]
    assert len(kept) == 1 and "public.items__history" in tables(hist)
    assert hist.sql(f'SELECT count(*) FROM "public"."{kept[0].split(".", 1)[1]}"') == [(3,)]
    # Offsets: 0 for every partition of the reset topic; the other table's untouched.
    offsets = hist.sink.stored_offsets()
    assert {tp: offsets[tp] for tp in partitions} == dict.fromkeys(partitions, 0)
    assert offsets[TopicPartition(OTHER, 0)] == before[TopicPartition(OTHER, 0)]
    assert {k: r["v"] for k, r in hist.rows("other").items()} == {7: "x"}
    hist.reopen()  # durable
    assert hist.sink.stored_offsets()[TopicPartition(TOPIC, 1)] == 0
    # The rebuild: the same records again, now in the new shape, and a new row.
    hist.offsets.clear()
    hist.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    hist.apply(item(Op.DELETE, 2, 12))
    hist.apply(event(Op.CREATE, {"id": 3}, {"id": 3, "name": "c", "qty": "three"}, 20))
    assert {k: r["qty"] for k, r in hist.rows().items()} == {1: "1", 3: "three"}


def test_reset_of_a_table_the_sink_never_saw_creates_it(tmp_path: Path) -> None:
    h = Harness(tmp_path / "wh.duckdb")
    h.sink.close()
    config = DuckDBSinkConfig(name="wh", path=str(h.path))
    context = SinkContext(PIPELINE, "wh", [("public", "items")], h.schemas, get_logger())
    sink = DuckDBSink(config, context)
    sink.open()
    h.sink = sink
    sink.reset_table(("public", "items"), [TopicPartition(TOPIC, 0)])
    assert "public.items" in tables(h) and h.rows() == {}


def publish(log: EmbeddedLog, schema: TableSchema) -> None:
    tx = log.begin()
    tx.append([schema_record(PIPELINE, schema)])
    tx.commit()


def test_a_table_with_no_rows_gets_its_table_from_the_published_schema(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path / "log")
    _publish_the_schemas(log)
    path = tmp_path / "wh.duckdb"
    group = group_name(PIPELINE, "wh")
    consumed = "the schema records were never consumed"
    deadline = _run_the_sink_until(log, path, lambda: bool(log.committed_offsets(group)), consumed)
    _check_only_the_keyed_table_of_this_sink_exists(path)
    # The rows then arrive as usual.
    _append_a_row_to_the_empty_table(log)
    _run_the_sink_until(
        log,
        path,
        lambda: sum(log.committed_offsets(group).values()) >= 4,
        "the row was never applied",
        deadline=deadline + 30,
    )
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute('SELECT id, name FROM "public"."empty"').fetchall() == [(1, "a")]
    log.close()


#: The sink's tables: one with no rows yet, one without key columns, one never published.
MINE = [("public", "empty"), ("public", "unkeyed"), ("public", "items")]


def _publish_the_schemas(log: EmbeddedLog) -> None:
    empty = TableSchema("postgresql", "public", "empty", (*ITEM_COLUMNS, Column("at", "date")))
    unkeyed = TableSchema("postgresql", "public", "unkeyed", (Column("v", "text"),))
    elsewhere = TableSchema("postgresql", "public", "not_mine", ITEM_COLUMNS)
    for schema in (empty, unkeyed, elsewhere):
        publish(log, schema)


def _run_the_sink_until(
    log: EmbeddedLog, path: Path, done: Callable[[], bool], what: str, deadline: float | None = None
) -> float:
    """Runs the sink's task in a thread until ``done()``, then stops it.

    Returns:
        The deadline it kept to: 30 s after the task started, unless ``deadline`` is given.
    """
    config = DuckDBSinkConfig(name="wh", path=str(path))

    def new_sink() -> DuckDBSink:
        catalog = SchemaCatalog(log, PIPELINE, wait_s=0.1)
        return DuckDBSink(config, SinkContext(PIPELINE, "wh", MINE, catalog, get_logger()))

    topics = [topic_name(PIPELINE, s, t) for s, t in MINE]
    stop = threading.Event()
    task = SinkTask(PIPELINE, "wh", log, new_sink, topics, stop, get_logger(), poll_timeout_s=0.05)
    thread = threading.Thread(target=task.run, daemon=True)
    thread.start()
    if deadline is None:
        deadline = time.monotonic() + 30
    wait_until(done, deadline - time.monotonic(), describe=what)
    stop.set()
    thread.join(10)
    return deadline


def _check_only_the_keyed_table_of_this_sink_exists(path: Path) -> None:
    with duckdb.connect(str(path), read_only=True) as con:
        found = {
            t: con.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = 'public' AND table_name = ? ORDER BY ordinal_position",
                [t],
            ).fetchall()
            for (t,) in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'public'"
            ).fetchall()
        }
        assert con.execute('SELECT count(*) FROM "public"."empty"').fetchone() == (0,)
    # Created, typed, empty; a table without key columns waits for its first row (its key),
    # and a table of another sink is none of this one's business.
    assert set(found) == {"empty"}
    assert found["empty"][:4] == [
        ("id", "BIGINT"),
        ("name", "VARCHAR"),
        ("qty", "INTEGER"),
        ("at", "DATE"),
    ]


def _append_a_row_to_the_empty_table(log: EmbeddedLog) -> None:
    log.ensure_topics([topic_name(PIPELINE, "public", "empty")])
    tx = log.begin()
    row = {"id": 1, "name": "a", "qty": 1, "at": "2024-01-02"}
    tx.append(envelope.to_records(event(Op.CREATE, {"id": 1}, row, 10, table="empty"), PIPELINE))
    tx.commit()
