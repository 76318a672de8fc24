"""The DuckDB sink against a real DuckDB file (embedded, so every test runs it for real).

Records are built as the runner builds them: events encoded by :mod:`cdc.envelope`, then
decoded with orjson. Schema evolution, history mode and crash safety are in
``test_duckdb_sink_more.py``.
"""

from __future__ import annotations

import base64
import math
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest

from cdc import envelope
from cdc.errors import RecordError, SinkFatal, SinkUnavailable
from cdc.events import ChangeEvent, Op, SourceInfo, topic_name
from cdc.logging import get_logger
from cdc.schema import Column, TableSchema
from cdc.sink import Sink, SinkContext, SinkRecord
from cdc.testing.conformance import SinkConformance
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig, DuckDBSinkPlugin, read_rows

PIPELINE = "shop"


class TestDuckDBConformance(SinkConformance):
    @pytest.fixture(autouse=True)
    def _file(self, tmp_path: Path) -> None:
        self.path = tmp_path / "kit.duckdb"

    def make_sink(self, context: SinkContext) -> Sink:
        return DuckDBSink(DuckDBSinkConfig(name="kit", path=str(self.path)), context)

    def current_rows(self) -> dict[int, dict[str, Any]]:
        if not self.path.exists():
            return {}
        return {key["id"]: row for key, row in read_rows(self.path, "public", "kit_items")}


# -- a small harness ----------------------------------------------------------------------------


@dataclass
class Schemas:
    tables: dict[tuple[str, str], TableSchema] = field(default_factory=dict)

    def get(self, schema: str, table: str) -> TableSchema | None:
        return self.tables.get((schema, table))

    def publish(self, table: str, *columns: Column, schema: str = "public") -> None:
        self.tables[(schema, table)] = TableSchema("postgresql", schema, table, columns)


def event(
    op: Op,
    key: dict[str, Any],
    row: dict[str, Any] | None,
    pos: int,
    seq: int = 0,
    table: str = "items",
    schema: str = "public",
    ts_ms: int = 1_700_000_000_000,
) -> ChangeEvent:
    source = SourceInfo("postgresql", "db", schema, table, ts_ms + pos, pos, seq)
    if op is Op.DELETE:
        return ChangeEvent(op, key, row or key, None, source)
    if op is Op.TRUNCATE:
        return ChangeEvent(op, {}, None, None, source)
    return ChangeEvent(op, key, None, row, source)


def item(op: Op, key: int, pos: int, name: str = "", qty: int = 0, **extra: Any) -> ChangeEvent:
    """A change of ``public.items``; a delete carries only the key, as by default in PostgreSQL."""
    if op is Op.DELETE:
        return event(op, {"id": key}, None, pos)
    return event(op, {"id": key}, {"id": key, "name": name, "qty": qty, **extra}, pos)


class Harness:
    """A sink over one DuckDB file; ``apply`` writes and flushes events as the runner would."""

    def __init__(self, path: Path, mode: str = "current") -> None:
        self.path = path
        self.mode = mode
        self.schemas = Schemas()
        self.schemas.publish("items", *ITEM_COLUMNS)
        self.offsets: dict[tuple[str, int], int] = {}
        self.sink = self.new_sink()

    def new_sink(self) -> DuckDBSink:
        config = DuckDBSinkConfig(name="wh", path=str(self.path), mode=self.mode)  # type: ignore[arg-type]
        context = SinkContext(PIPELINE, "wh", [], self.schemas, get_logger(sink="wh"))
        sink = DuckDBSink(config, context)
        sink.open()
        return sink

    def reopen(self) -> None:
        self.sink.close()
        self.sink = self.new_sink()

    def records(self, *events: ChangeEvent, partition: int = 0) -> list[SinkRecord]:
        out = []
        for e in events:
            for r in envelope.to_records(e, PIPELINE, now_ms=0):
                tp = (r.topic, partition)
                offset = self.offsets.get(tp, 0)
                self.offsets[tp] = offset + 1
                value = None if r.value is None else orjson.loads(r.value)
                out.append(
                    SinkRecord(r.topic, partition, offset, orjson.loads(r.key or b"{}"), value)
                )
        return out

    def apply(self, *events: ChangeEvent, partition: int = 0) -> list[SinkRecord]:
        records = self.records(*events, partition=partition)
        self.write(records)
        return records

    def write(self, records: list[SinkRecord]) -> None:
        self.sink.write(records)
        self.sink.flush()

    def rows(self, table: str = "items", schema: str = "public") -> dict[Any, dict[str, Any]]:
        out = {}
        for key, row in read_rows(self.path, schema, table):
            out[key["id"] if "id" in key else orjson.dumps(key)] = row
        return out

    def sql(self, query: str) -> list[tuple[Any, ...]]:
        con = self.sink._con
        result: list[tuple[Any, ...]] = con.execute(query).fetchall()
        return result


ITEM_COLUMNS = (
    Column("id", "bigint", key=True, nullable=False),
    Column("name", "text"),
    Column("qty", "integer"),
)
TOPIC = topic_name(PIPELINE, "public", "items")


@pytest.fixture
def wh(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path / "out" / "wh.duckdb")
    yield harness
    harness.sink.close()


def names(h: Harness) -> dict[int, tuple[str, int]]:
    return {k: (r["name"], r["qty"]) for k, r in h.rows().items()}


# -- every type ---------------------------------------------------------------------------------

ALL_TYPES = (
    ("id", "bigint", "BIGINT", 1),
    ("i2", "smallint", "SMALLINT", -32768),
    ("i4", "integer", "INTEGER", 2147483647),
    ("n", "numeric(12,2)", "DECIMAL(12,2)", "1234567890.12"),
    ("nu", "numeric", "VARCHAR", "NaN"),
    ("r", "real", "FLOAT", 1.5),
    ("d", "double precision", "DOUBLE", "Infinity"),
    ("b", "boolean", "BOOLEAN", True),
    ("t", "text", "VARCHAR", "héllo, 'q' \"dq\""),
    ("vc", "character varying(20)", "VARCHAR", "abc"),
    ("ch", "character(3)", "VARCHAR", "ab "),
    ("by", "bytea", "BLOB", base64.b64encode(b"\x00\x01\xff").decode()),
    ("dt", "date", "DATE", "2024-02-29"),
    ("tm", "time without time zone", "TIME", "13:14:15.123456"),
    ("ttz", "time with time zone", "TIME WITH TIME ZONE", "13:14:15+02:00"),
    ("ts", "timestamp without time zone", "TIMESTAMP", "2024-01-02T03:04:05.678901"),
    ("tstz", "timestamp with time zone", "TIMESTAMP WITH TIME ZONE", "2024-01-02T03:04:05.5Z"),
    ("iv", "interval", "INTERVAL", "P1Y2M3DT4H5M6.5S"),
    ("u", "uuid", "UUID", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    ("j", "json", "JSON", {"a": [1, {"b": None}], "c": "x"}),
    ("jb", "jsonb", "JSON", [1, "x", None, {"k": 1.5}]),
    ("ai", "integer[]", "INTEGER[]", [1, None, 3]),
    ("at", "text[]", "VARCHAR[]", ["a,b", None, 'q"', "{}"]),
    ("an", "numeric(5,2)[]", "DECIMAL(5,2)[]", ["1.50", None]),
    ("atz", "timestamp with time zone[]", "TIMESTAMP WITH TIME ZONE[]", ["2024-01-01T00:00:00Z"]),
    ("mood", "mood", "VARCHAR", "happy"),
    ("dom", "posint", "VARCHAR", 42),
    ("ajb", "jsonb[]", "JSON[]", [{"a": 1}, None, [1, 2]]),
    ("aby", "bytea[]", "BLOB[]", ["AAH/", None]),
    ("au", "uuid[]", "UUID[]", ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]),
    ("aiv", "interval[]", "INTERVAL[]", ["P1D", "PT1.5S"]),
    ("ad", "date[]", "DATE[]", ["2024-01-01", None]),
    ("ai2", "integer[][]", "INTEGER[][]", [[1, 2], [3, None]]),
    ("amood", "mood[]", "VARCHAR[]", ["sad", "ok"]),
    ("money", "money", "VARCHAR", "$1,234.56"),
    ("inet", "inet", "VARCHAR", "192.168.0.1/24"),
)

EXPECTED = {
    "id": 1,
    "i2": -32768,
    "i4": 2147483647,
    "n": Decimal("1234567890.12"),
    "nu": "NaN",
    "r": 1.5,
    "d": math.inf,
    "b": True,
    "t": "héllo, 'q' \"dq\"",
    "vc": "abc",
    "ch": "ab ",
    "by": b"\x00\x01\xff",
    "dt": date(2024, 2, 29),
    "tm": time(13, 14, 15, 123456),
    "ttz": time(13, 14, 15, tzinfo=timezone(timedelta(hours=2))),
    "ts": datetime(2024, 1, 2, 3, 4, 5, 678901),
    "tstz": datetime(2024, 1, 2, 3, 4, 5, 500000, tzinfo=UTC),
    # Python has no months: DuckDB hands over 14 months as 14 * 30 days.
    "iv": timedelta(days=14 * 30 + 3, hours=4, minutes=5, seconds=6.5),
    "u": uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    "j": {"a": [1, {"b": None}], "c": "x"},
    "jb": [1, "x", None, {"k": 1.5}],
    "ai": [1, None, 3],
    "at": ["a,b", None, 'q"', "{}"],
    "an": [Decimal("1.50"), None],
    "atz": [datetime(2024, 1, 1, tzinfo=UTC)],
    "mood": "happy",
    "dom": "42",
    "ajb": [{"a": 1}, None, [1, 2]],
    "aby": [b"\x00\x01\xff", None],
    "au": [uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")],
    "aiv": [timedelta(days=1), timedelta(seconds=1.5)],
    "ad": [date(2024, 1, 1), None],
    "ai2": [[1, 2], [3, None]],
    "amood": ["sad", "ok"],
    "money": "$1,234.56",
    "inet": "192.168.0.1/24",
}


def test_every_type_is_stored_faithfully_and_nulls_stay_null(wh: Harness) -> None:
    wh.schemas.publish("everything", *(Column(n, t, key=n == "id") for n, t, _, _ in ALL_TYPES))
    full = {n: v for n, _, _, v in ALL_TYPES}
    nulls = {n: None for n, _, _, _ in ALL_TYPES} | {"id": 2}
    wh.apply(
        event(Op.CREATE, {"id": 1}, full, 10, table="everything"),
        event(Op.CREATE, {"id": 2}, nulls, 11, table="everything"),
    )
    types = dict(
        wh.sql(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name = 'everything'"
        )
    )
    assert {n: types[n] for n, _, _, _ in ALL_TYPES} == {n: d for n, _, d, _ in ALL_TYPES}
    rows = wh.rows("everything")
    got = rows[1]
    for name, expected in EXPECTED.items():
        assert got[name] == expected, name
    assert rows[2] == nulls
    # DuckDB's own view of the interval keeps months and days apart, as PostgreSQL does.
    parts = wh.sql(
        "SELECT datepart('month', iv) + 12 * datepart('year', iv), datepart('day', iv), "
        "datepart('microseconds', iv) FROM public.everything WHERE id = 1"
    )
    assert parts == [(14, 3, 6_500_000)]


BC_TSTZ = "0044-03-15 (BC) 12:00:00+00"


def test_infinite_and_bc_dates_and_timestamps_are_kept(wh: Harness) -> None:
    wh.schemas.publish(
        "dates",
        Column("id", "bigint", key=True),
        Column("d", "date"),
        Column("ts", "timestamp without time zone"),
        Column("tstz", "timestamp with time zone"),
    )
    inf = {"id": 1, "d": "infinity", "ts": "infinity", "tstz": "-infinity"}
    # BC values come as PostgreSQL's text (ISO-8601 has no BC); DuckDB must not read them AD.
    bc = {
        "id": 2,
        "d": "0044-03-15 BC",
        "ts": "0044-03-15 12:00:00 BC",
        "tstz": "0044-03-15 12:00:00+00 BC",
    }
    wh.apply(
        event(Op.CREATE, {"id": 1}, inf, 5, table="dates"),
        event(Op.CREATE, {"id": 2}, bc, 6, table="dates"),
    )
    assert wh.sql(
        "SELECT id, isinf(d), isinf(ts), tstz = '-infinity'::TIMESTAMPTZ, year(d), d::VARCHAR, "
        f"ts::VARCHAR, tstz = '{BC_TSTZ}'::TIMESTAMPTZ FROM public.dates ORDER BY id"
    ) == [
        (1, True, True, True, None, "infinity", "infinity", False),
        (2, False, False, False, -43, "0044-03-15 (BC)", "0044-03-15 (BC) 12:00:00", True),
    ]
    # read back in the source's own text, since Python's datetime cannot hold these
    assert wh.rows("dates") == {1: inf, 2: bc}


def test_a_value_that_does_not_fit_is_a_record_error_naming_it(wh: Harness) -> None:
    wh.schemas.publish("prices", Column("id", "bigint", key=True), Column("p", "numeric(6,2)"))
    good = event(Op.CREATE, {"id": 1}, {"id": 1, "p": "12.50"}, 5, table="prices")
    bad = event(Op.CREATE, {"id": 2}, {"id": 2, "p": "NaN"}, 6, table="prices")
    records = wh.records(good, bad)
    with pytest.raises(RecordError) as caught:
        wh.write(records)
    assert caught.value.record is records[1]
    assert "column p" in caught.value.reason and "DECIMAL(6,2)" in caught.value.reason
    assert wh.sink.stored_offsets() == {}
    wh.write([records[0]])  # what the runner does after dead-lettering the bad one
    assert wh.rows("prices") == {1: {"id": 1, "p": Decimal("12.50")}}


@pytest.mark.parametrize(
    ("source_type", "bad"),
    [
        ("integer", "x"),
        ("smallint", 70000),
        ("integer[]", [[1, 2]]),
        ("bytea", "not base64!"),
        ("bytea[]", ["not base64!"]),
        ("uuid", "nope"),
        ("interval", "infinity"),
        ("timestamp with time zone", "yesterday-ish"),
        ("date[]", ["2024-13-01"]),
    ],
)
def test_each_kind_of_bad_value_names_its_record(wh: Harness, source_type: str, bad: Any) -> None:
    wh.schemas.publish("bad", Column("id", "bigint", key=True), Column("v", source_type))
    records = wh.records(
        event(Op.CREATE, {"id": 1}, {"id": 1, "v": None}, 5, table="bad"),
        event(Op.CREATE, {"id": 2}, {"id": 2, "v": bad}, 6, table="bad"),
    )
    with pytest.raises(RecordError) as caught:
        wh.write(records)
    assert caught.value.record is records[1]
    assert caught.value.reason.startswith("column v")


@pytest.mark.parametrize("pos", [["x", 0], [1, "0"], [1.5, 0]])
def test_a_position_that_is_not_two_integers_is_a_record_error(wh: Harness, pos: Any) -> None:
    records = wh.records(item(Op.CREATE, 1, 5, "a", 1), item(Op.CREATE, 2, 6, "b", 2))
    records[1].value["source"]["pos"] = pos  # type: ignore[index]
    with pytest.raises(RecordError, match="must be integers") as caught:
        wh.write(records)
    assert caught.value.record is records[1]
    wh.write([records[0]])  # what the runner does after dead-lettering the bad one
    assert set(wh.rows("items")) == {1}


def test_a_column_missing_from_the_schema_is_a_record_error(wh: Harness) -> None:
    records = wh.records(item(Op.CREATE, 1, 5, "a", 1, surprise=1))
    with pytest.raises(RecordError, match="surprise"):
        wh.write(records)


# -- upsert, delete, truncate -------------------------------------------------------------------


def test_upsert_update_delete_and_tombstone(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    wh.apply(item(Op.UPDATE, 1, 12, "a2", 10), item(Op.DELETE, 2, 13))
    assert names(wh) == {1: ("a2", 10)}
    # the tombstone that follows a delete is in the batch and changes nothing
    assert [r.value for r in wh.records(item(Op.DELETE, 3, 14))][1] is None
    wh.apply(item(Op.CREATE, 2, 20, "b again", 3))
    assert names(wh) == {1: ("a2", 10), 2: ("b again", 3)}


def test_newest_change_per_key_wins_within_a_batch(wh: Harness) -> None:
    wh.apply(
        item(Op.CREATE, 1, 10, "v1", 1),
        item(Op.UPDATE, 1, 12, "v3", 3),
        item(Op.UPDATE, 1, 11, "v2", 2),  # older, from another partition in real life
        item(Op.CREATE, 2, 13, "x", 1),
        item(Op.DELETE, 2, 14),
    )
    assert names(wh) == {1: ("v3", 3)}


def test_truncate_deletes_older_rows_and_keeps_newer_ones(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    truncate = event(Op.TRUNCATE, {}, None, 20)
    wh.apply(truncate, item(Op.CREATE, 3, 21, "c", 3))
    assert names(wh) == {3: ("c", 3)}
    wh.apply(item(Op.UPDATE, 1, 15, "late", 9))  # older than the truncate: ignored
    assert names(wh) == {3: ("c", 3)}


def test_truncate_on_another_partition_is_ordered_by_position(wh: Harness) -> None:
    rows = wh.records(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 30, "b", 2), partition=1)
    truncate = wh.records(event(Op.TRUNCATE, {}, None, 20), partition=0)
    wh.write(rows + truncate)
    assert names(wh) == {2: ("b", 2)}


# -- replays and ordering -----------------------------------------------------------------------


def test_replay_of_a_batch_is_idempotent_even_without_offsets(wh: Harness) -> None:
    batch = wh.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.UPDATE, 1, 11, "a2", 2))
    wh.reopen()
    wh.write(batch)  # skipped by offset
    fresh = wh.records(item(Op.CREATE, 1, 10, "a", 1), item(Op.UPDATE, 1, 11, "a2", 2))
    wh.write(fresh)  # new offsets (a re-read topic): skipped by position
    assert names(wh) == {1: ("a2", 2)}
    assert wh.sql("SELECT count(*) FROM public.items") == [(1,)]


def test_older_change_after_newer_is_ignored_also_after_a_delete(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    wh.apply(item(Op.UPDATE, 1, 30, "c", 3))
    wh.apply(item(Op.UPDATE, 1, 20, "b", 2))
    assert names(wh) == {1: ("c", 3)}
    wh.apply(item(Op.DELETE, 1, 40))
    wh.apply(item(Op.UPDATE, 1, 35, "zombie", 4))
    assert names(wh) == {}
    wh.apply(item(Op.CREATE, 1, 50, "reborn", 5))
    assert names(wh) == {1: ("reborn", 5)}


def test_offsets_are_stored_with_the_data(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.DELETE, 1, 11))
    assert wh.sink.stored_offsets() == {(TOPIC, 0): 3}
    wh.reopen()
    assert wh.sink.stored_offsets() == {(TOPIC, 0): 3}
    assert wh.sql("SELECT * FROM _cdc.offsets") == [(TOPIC, 0, 3)]


def test_schemaless_tables_keep_key_and_document(wh: Harness) -> None:
    key = {"_id": {"$oid": "65a1b2c3d4e5f60718293a4b"}}
    doc = {**key, "name": "x", "tags": ["a", "b"], "n": {"$numberDecimal": "1.5"}}
    wh.apply(event(Op.CREATE, key, doc, 10, schema="app", table="users"))
    wh.apply(event(Op.UPDATE, key, {**doc, "name": "y"}, 11, schema="app", table="users"))
    rows = list(read_rows(wh.path, "app", "users"))
    assert rows == [(key, {**doc, "name": "y"})]
    wh.apply(event(Op.DELETE, key, None, 12, schema="app", table="users"))
    assert list(read_rows(wh.path, "app", "users")) == []


# -- opening ------------------------------------------------------------------------------------


def _open(path: Path) -> None:
    context = SinkContext(PIPELINE, "wh", [], Schemas(), get_logger(sink="wh"))
    DuckDBSink(DuckDBSinkConfig(name="wh", path=str(path)), context).open()


def test_unusable_paths_are_fatal(tmp_path: Path) -> None:
    with pytest.raises(SinkFatal, match="is a directory"):
        _open(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(SinkFatal, match="cannot create"):
        _open(tmp_path / "file" / "wh.duckdb")
    (tmp_path / "junk.duckdb").write_bytes(b"not a database" * 1000)
    with pytest.raises(SinkFatal):
        _open(tmp_path / "junk.duckdb")


HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
print("held", flush=True)
time.sleep(60)
"""


def test_a_file_locked_by_another_process_is_unavailable_and_still_readable(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    wh.sink.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(wh.path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(SinkUnavailable, match="one writing process"):
            _open(wh.path)
        config = DuckDBSinkConfig(name="wh", path=str(wh.path))
        rows = list(DuckDBSinkPlugin.read_rows(config, "public", "items"))
        assert rows == [({"id": 1}, {"id": 1, "name": "a", "qty": 1})]
    finally:
        holder.kill()
        holder.wait()
    wh.sink = wh.new_sink()


def test_read_rows_in_the_writing_process(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    assert list(read_rows(wh.path, "public", "items")) == [
        ({"id": 1}, {"id": 1, "name": "a", "qty": 1})
    ]
    assert list(read_rows(wh.path, "public", "absent")) == []
    wh.apply(item(Op.CREATE, 2, 11, "b", 2))  # the writer is unharmed by the reader
    assert len(wh.rows()) == 2


def test_plugin_is_registered() -> None:
    from cdc import plugins

    assert plugins.load(plugins.SINK_GROUP, "duckdb") is DuckDBSinkPlugin
    assert duckdb.__version__


def test_read_rows_of_a_foreign_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "other.duckdb"
    duckdb.connect(str(path)).close()
    with pytest.raises(SinkFatal, match="not written by this sink"):
        list(read_rows(path, "public", "items"))
    with pytest.raises(SinkFatal, match="no database file"):
        list(read_rows(tmp_path / "missing.duckdb", "public", "items"))
