"""The DuckDB sink: schema evolution, history mode, crash safety, and the real sink task."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from cdc.contracts.errors import RecordError, SinkFatal
from cdc.contracts.events import Op
from cdc.contracts.schema import Column, dead_letter_topic
from cdc.contracts.sink import SinkContext
from cdc.envelope import encode as envelope
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.sink_task import SinkTask, group_name
from cdc.support.logging import get_logger
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig, read_rows
from tests.integration.duckdb_kit import ITEM_COLUMNS, PIPELINE, TOPIC, Harness, event, item

ITEMS = "public.items"


@pytest.fixture
def wh(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "wh.duckdb")
    yield harness
    harness.sink.close()


@pytest.fixture
def hist(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "hist.duckdb", mode="history")
    yield harness
    harness.sink.close()


def column_types(h: Harness, table: str = "items") -> dict[str, str]:
    return dict(
        h.sql(
            "SELECT column_name, data_type FROM information_schema.columns "
            f"WHERE table_schema = 'public' AND table_name = '{table}'"
        )
    )


# -- schema evolution ---------------------------------------------------------------------------


def test_added_column_is_added_and_dropped_column_stays(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    wh.schemas.publish("items", *ITEM_COLUMNS, Column("note", "text"))
    wh.apply(item(Op.CREATE, 2, 11, "b", 2, note="hi"))
    assert wh.rows()[2]["note"] == "hi" and wh.rows()[1]["note"] is None
    wh.schemas.publish("items", ITEM_COLUMNS[0], ITEM_COLUMNS[2], Column("note", "text"))
    wh.apply(event(Op.CREATE, {"id": 3}, {"id": 3, "qty": 3, "note": "no name"}, 12))
    assert "name" in column_types(wh)
    assert wh.rows()[3] == {"id": 3, "name": None, "qty": 3, "note": "no name"}
    assert wh.rows()[2]["name"] == "b"  # old values are kept


@pytest.mark.parametrize(
    ("old", "new", "value", "duck_type"),
    [
        ("integer", "bigint", 2**40, "BIGINT"),
        ("smallint", "integer", 2**20, "INTEGER"),
        ("real", "double precision", 1e300, "DOUBLE"),
        ("character varying(5)", "text", "a much longer text", "VARCHAR"),
        ("numeric(6,2)", "numeric(10,3)", "1234567.125", "DECIMAL(10,3)"),
        ("integer[]", "bigint[]", [2**40], "BIGINT[]"),
    ],
)
def test_widening_type_change_is_applied(
    wh: Harness, old: str, new: str, value: object, duck_type: str
) -> None:
    wh.schemas.publish("w", Column("id", "bigint", key=True), Column("v", old))
    small = [1] if old.endswith("[]") else ("1.5" if "numeric" in old else 1)
    wh.apply(event(Op.CREATE, {"id": 1}, {"id": 1, "v": small}, 10, table="w"))
    wh.schemas.publish("w", Column("id", "bigint", key=True), Column("v", new))
    wh.apply(event(Op.CREATE, {"id": 2}, {"id": 2, "v": value}, 11, table="w"))
    assert column_types(wh, "w")["v"] == duck_type
    rows = {k: r["v"] for k, r in wh.rows("w").items()}
    assert rows[2] == (Decimal(value) if isinstance(value, str) and "numeric" in old else value)
    wh.reopen()  # the new type is remembered
    wh.apply(event(Op.UPDATE, {"id": 2}, {"id": 2, "v": value}, 12, table="w"))


def test_widening_a_key_column(wh: Harness) -> None:
    wh.schemas.publish("k", Column("id", "integer", key=True), Column("v", "text"))
    wh.apply(event(Op.CREATE, {"id": 1}, {"id": 1, "v": "a"}, 10, table="k"))
    wh.apply(event(Op.DELETE, {"id": 1}, None, 11, table="k"))
    wh.schemas.publish("k", Column("id", "bigint", key=True), Column("v", "text"))
    wh.apply(event(Op.CREATE, {"id": 2**40}, {"id": 2**40, "v": "b"}, 12, table="k"))
    assert list(wh.rows("k")) == [2**40]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("integer", "text"),
        ("bigint", "integer"),
        ("numeric(10,2)", "numeric(10,4)"),
        ("text", "character varying(10)"),
        ("timestamp without time zone", "timestamp with time zone"),
    ],
)
def test_other_type_change_stops_the_sink_with_a_clear_error(
    wh: Harness, old: str, new: str
) -> None:
    wh.schemas.publish("w", Column("id", "bigint", key=True), Column("v", old))
    wh.apply(event(Op.CREATE, {"id": 1}, {"id": 1, "v": None}, 10, table="w"))
    wh.schemas.publish("w", Column("id", "bigint", key=True), Column("v", new))
    with pytest.raises(SinkFatal) as caught:
        wh.apply(event(Op.CREATE, {"id": 2}, {"id": 2, "v": None}, 11, table="w"))
    message = str(caught.value)
    assert "public.w" in message and "column v" in message
    assert repr(old) in message and repr(new) in message
    assert wh.sink.stored_offsets() == {(f"{PIPELINE}.public.w", 0): 1}  # nothing committed


# -- history mode -------------------------------------------------------------------------------


def versions(h: Harness) -> list[tuple[object, ...]]:
    return h.sql(
        "SELECT id, name, op, __cdc_position, valid_to IS NULL, "
        "coalesce(valid_to = valid_from, false) FROM public.items__history "
        "ORDER BY id, __cdc_position"
    )


def test_history_keeps_every_version(hist: Harness) -> None:
    hist.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.UPDATE, 1, 11, "b", 2))
    hist.apply(item(Op.CREATE, 2, 12, "x", 1), item(Op.UPDATE, 1, 13, "c", 3))
    hist.apply(item(Op.DELETE, 2, 14))
    assert versions(hist) == [
        (1, "a", "c", 10, False, False),
        (1, "b", "u", 11, False, False),
        (1, "c", "u", 13, True, False),
        (2, "x", "c", 12, False, False),
        (2, None, "d", 14, False, True),  # the delete: a closed version of its own
    ]
    # each version ends where the next one starts
    chained = hist.sql(
        "SELECT count(*) FROM public.items__history a JOIN public.items__history b "
        "ON a.id = b.id AND a.valid_to = b.valid_from AND a.__cdc_position < b.__cdc_position"
    )
    assert chained == [(3,)]
    assert {k: r["name"] for k, r in hist.rows().items()} == {1: "c"}


def test_history_replays_add_no_duplicates(hist: Harness) -> None:
    events = [
        item(Op.CREATE, 1, 10, "a", 1),
        item(Op.UPDATE, 1, 11, "b", 2),
        item(Op.DELETE, 1, 12),
    ]
    batch = hist.apply(*events)
    hist.reopen()
    hist.write(batch)  # same offsets
    hist.write(hist.records(*events))  # fresh offsets: guarded by position
    hist.apply(item(Op.UPDATE, 1, 11, "late", 9))
    assert [v[:3] for v in versions(hist)] == [(1, "a", "c"), (1, "b", "u"), (1, None, "d")]


def test_history_truncate_closes_open_versions(hist: Harness) -> None:
    hist.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    hist.apply(event(Op.TRUNCATE, {}, None, 20), item(Op.CREATE, 3, 21, "c", 3))
    assert hist.sql("SELECT id FROM public.items__history WHERE valid_to IS NULL") == [(3,)]
    assert [k for k in hist.rows()] == [3]


def test_history_column_names_must_be_free(hist: Harness) -> None:
    hist.schemas.publish("ops", Column("id", "bigint", key=True), Column("op", "text"))
    with pytest.raises(SinkFatal, match="history mode"):
        hist.apply(event(Op.CREATE, {"id": 1}, {"id": 1, "op": "x"}, 10, table="ops"))


# -- exactly once -------------------------------------------------------------------------------


def test_a_failing_flush_leaves_no_partial_effect(wh: Harness) -> None:
    wh.schemas.publish("prices", Column("id", "bigint", key=True), Column("p", "numeric(4,2)"))
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    before = wh.sink.stored_offsets()
    good = wh.records(item(Op.UPDATE, 1, 11, "changed", 2), item(Op.CREATE, 2, 12, "new", 2))
    bad = wh.records(event(Op.CREATE, {"id": 1}, {"id": 1, "p": "999.99"}, 13, table="prices"))
    with pytest.raises(RecordError):
        wh.write(good + bad)  # items applied first in the transaction, then prices fails
    assert {k: r["name"] for k, r in wh.rows().items()} == {1: "a"}
    assert wh.sink.stored_offsets() == before
    wh.reopen()
    assert wh.sink.stored_offsets() == before
    assert wh.rows("prices") == {}  # even its creation was rolled back


CRASH = """
import os, signal, sys, orjson
from cdc.support.logging import get_logger
from cdc.contracts.sink import SinkContext, SinkRecord
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig, sink as sink_module
from tests.integration.duckdb_kit import Harness, item
from cdc.contracts.events import Op

harness = Harness.__new__(Harness)
harness.__init__(__import__("pathlib").Path(sys.argv[1]))
real = sink_module.DuckDBSink._apply

def apply_then_die(self, batch):
    real(self, batch)
    os.kill(os.getpid(), signal.SIGKILL)  # after the data, before offsets and COMMIT

sink_module.DuckDBSink._apply = apply_then_die
harness.offsets = {("shop.public.items", 0): 1}
harness.apply(item(Op.CREATE, 2, 20, "lost", 2))
"""


def test_a_crash_between_write_and_commit_leaves_no_effect(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    wh.sink.close()
    crashed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CRASH), str(wh.path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    assert crashed.returncode == -9, crashed.stderr
    wh.sink = wh.new_sink()
    assert wh.sink.stored_offsets() == {(TOPIC, 0): 1}
    assert {k: r["name"] for k, r in wh.rows().items()} == {1: "a"}


def test_through_the_sink_task_with_dead_letters(wh: Harness, tmp_path: Path) -> None:
    wh.schemas.publish("prices", Column("id", "bigint", key=True), Column("p", "numeric(4,2)"))
    log = EmbeddedLog(tmp_path / "log")
    events = [
        item(Op.CREATE, 1, 10, "a", 1),
        event(Op.CREATE, {"id": 1}, {"id": 1, "p": "1.25"}, 11, table="prices"),
        event(Op.CREATE, {"id": 2}, {"id": 2, "p": "NaN"}, 12, table="prices"),
        item(Op.UPDATE, 1, 13, "b", 2),
    ]
    topics = [TOPIC, f"{PIPELINE}.public.prices"]
    log.ensure_topics(topics)
    tx = log.begin()
    tx.append([r for e in events for r in envelope.to_records(e, PIPELINE, now_ms=0)])
    tx.commit()
    wh.sink.close()
    stop = threading.Event()
    task = SinkTask(
        PIPELINE, "wh", log, wh.new_sink, topics, stop, get_logger(), bad_records="dead_letter"
    )
    wh.sink = wh.new_sink()
    wh.sink.close()
    thread = threading.Thread(target=task.run)
    thread.start()
    while sum(log.committed_offsets(group_name(PIPELINE, "wh")).values()) < 4:
        thread.join(0.05)
    stop.set()
    thread.join(10)
    wh.sink = wh.new_sink()
    assert {k: r["name"] for k, r in wh.rows().items()} == {1: "b"}
    assert {k: r["p"] for k, r in wh.rows("prices").items()} == {1: Decimal("1.25")}
    dead = log.read(dead_letter_topic(PIPELINE), 0, 0, 10)
    assert len(dead) == 1 and "NaN" in orjson.loads(dead[0].value or b"{}")["reason"]
    log.close()


def test_changed_key_columns_stop_the_sink(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    wh.schemas.publish("items", ITEM_COLUMNS[0], Column("name", "text", key=True), ITEM_COLUMNS[2])
    with pytest.raises(SinkFatal, match="key columns changed"):
        wh.apply(item(Op.CREATE, 2, 11, "b", 2))


def test_read_rows_beside_a_writer_with_other_settings(tmp_path: Path) -> None:
    h = Harness(tmp_path / "wh.duckdb")
    h.sink.close()
    config = DuckDBSinkConfig(name="wh", path=str(h.path), threads=1)
    sink = DuckDBSink(config, SinkContext(PIPELINE, "wh", [], h.schemas, get_logger()))
    sink.open()
    h.sink = sink
    h.apply(item(Op.CREATE, 1, 10, "a", 1))
    # DuckDB refuses a second instance with other settings in one process: read a copy.
    assert list(read_rows(h.path, "public", "items")) == [
        ({"id": 1}, {"id": 1, "name": "a", "qty": 1})
    ]
    h.apply(item(Op.UPDATE, 1, 11, "b", 1))
    sink.close()
