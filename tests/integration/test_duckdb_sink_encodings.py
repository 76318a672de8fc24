"""The DuckDB sink keeps types faithful under every envelope encoding.

Fed the records the real Debezium 3.6.1 wrote for one workload under five settings
(tests/debezium/expected), through the runner's decoding (``{"schema", "payload"}`` unwrapped),
the sink holds the same tables under each, except where a setting itself keeps less (a double,
ms times, µs intervals), compared at what that setting keeps.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.contracts.errors import RecordError
from cdc.contracts.schema import Column, TableSchema
from cdc.contracts.sink import SinkContext, SinkRecord
from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.log.base import StoredRecord
from cdc.runtime.sink_task import decode_records
from cdc.support.logging import get_logger
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig, read_rows
from tests.integration.duckdb_kit import Schemas
from tests.unit.test_values import EXPECTED, SETTINGS

PIPELINE = "dbz"
TABLES = ("tricky", "tricky_full")

# The tricky table as PostgreSQL's format_type names its columns (what a source publishes).
FORMAT_TYPES = {
    "id": "integer",
    "region": "text",
    "c_int2": "smallint",
    "c_int4": "integer",
    "c_int8": "bigint",
    "c_numeric": "numeric(12,2)",
    "c_numeric_var": "numeric",
    "c_float8": "double precision",
    "c_float4": "real",
    "c_text": "text",
    "c_varchar": "character varying(20)",
    "c_bytea": "bytea",
    "c_uuid": "uuid",
    "c_date": "date",
    "c_time": "time without time zone",
    "c_time3": "time(3) without time zone",
    "c_timetz": "time with time zone",
    "c_timestamp": "timestamp without time zone",
    "c_timestamp3": "timestamp(3) without time zone",
    "c_timestamptz": "timestamp with time zone",
    "c_interval": "interval",
    "c_json": "json",
    "c_jsonb": "jsonb",
    "c_mood": "mood",
    "c_int_arr": "integer[]",
    "c_int_2d": "integer[]",
    "c_bool": "boolean",
    "c_toast": "text",
    # The workload's money, hstore and special dates (infinity, BC).
    "c_money": "money",
    "c_hstore": "hstore",
    "c_date_x": "date",
    "c_timestamp_x": "timestamp without time zone",
    "c_timestamp3_x": "timestamp(3) without time zone",
    "c_timestamptz_x": "timestamp with time zone",
}


def _schemas() -> Schemas:
    schemas = Schemas()
    for table in TABLES:
        columns = tuple(
            Column(name, kind, key=name in ("id", "region"), nullable=name not in ("id", "region"))
            for name, kind in FORMAT_TYPES.items()
        )
        schemas.tables[("public", table)] = TableSchema("postgresql", "public", table, columns)
    return schemas


def _stored(setting: str) -> list[StoredRecord]:
    """Debezium's records as the log holds them, with the ``source.pos`` every sink needs."""
    out = []
    offsets: dict[str, int] = {}
    for n, line in enumerate((EXPECTED / f"{setting}.jsonl").read_text().splitlines()):
        raw = orjson.loads(line)
        value = raw["value"]
        payload = value["payload"] if isinstance(value, dict) and "payload" in value else value
        if payload is not None:
            payload["source"]["pos"] = [n + 1, 0]
        topic = raw["topic"]
        offset = offsets.get(topic, 0)
        offsets[topic] = offset + 1
        key = orjson.dumps(raw["key"]) if raw["key"] is not None else b"{}"
        encoded = None if value is None else orjson.dumps(value)
        out.append(StoredRecord(topic, 0, offset, key, encoded, 0))
    return out


def _table(tmp_path: Path, setting: str, options: EnvelopeOptions) -> dict[str, dict[Any, Any]]:
    path = tmp_path / f"{setting}.duckdb"
    config = DuckDBSinkConfig(name="wh", path=str(path))  # type: ignore[call-arg]
    context = SinkContext(PIPELINE, "wh", [], _schemas(), get_logger(sink="wh"), options)
    sink = DuckDBSink(config, context)
    sink.open()
    try:
        _write_dead_lettering(sink, decode_records(_stored(setting)))
    finally:
        sink.close()
    out: dict[str, dict[Any, Any]] = {}
    for table in TABLES:
        out[table] = {(k["id"], k["region"]): row for k, row in read_rows(path, "public", table)}
    return out


def _write_dead_lettering(sink: DuckDBSink, records: list[SinkRecord]) -> None:
    """As the runner under ``bad_records: dead_letter``: a refused record is left out.

    A NaN cannot be a DuckDB DECIMAL: under string and double it fails its record (row 2),
    under precise Debezium has already made it null.
    """
    records = [r for r in records if r.value is None or r.value["op"] != "t"]
    while True:
        try:
            sink.write(records)
            sink.flush()
            return
        except RecordError as exc:
            records = [r for r in records if r is not exc.record]


# The keys left after the workload; row 2's numeric(12,2) is NaN, which DuckDB's DECIMAL
# cannot hold (its records fail, except under precise, where Debezium wrote null).
NAN_ROW = (2, "us")
FINAL = {
    "tricky": {(4, "mid"), NAN_ROW, (3, "apac"), (9, "zz")},
    "tricky_full": {(4, "mid"), NAN_ROW, (3, "apac")},
}


def _kept(options: EnvelopeOptions, name: str, value: Any) -> Any:
    """A readable table's value at the precision ``options`` keep."""
    if value is None:
        return None
    if options.time_precision_mode == "connect" and name in ("c_time", "c_timestamp"):
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    if options.time_precision_mode == "connect" and name == "c_timestamp_x":
        if isinstance(value, str):  # a BC timestamp, kept as PostgreSQL's text: ms too
            return re.sub(r"(\.\d{3})\d+", r"\1", value)
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    if options.decimal_handling_mode == "double" and name == "c_numeric_var" and not _nan(value):
        return format(Decimal(repr(float(value))), "f")  # numeric without typmod: text
    return value


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s != "readable"])
def test_every_setting_gives_the_readable_tables(tmp_path: Path, setting: str) -> None:
    options = SETTINGS[setting]
    want, got = _table(tmp_path, "readable", READABLE), _table(tmp_path, setting, options)
    for table in TABLES:
        precise = options.decimal_handling_mode == "precise"
        assert set(want[table]) == FINAL[table] - {NAN_ROW}
        assert set(got[table]) == (FINAL[table] if precise else FINAL[table] - {NAN_ROW})
        if precise:
            assert got[table][(2, "us")]["c_numeric"] is None  # Debezium's NaN under precise
        for key, readable in want[table].items():
            mine = got[table][key]
            for name, expected in readable.items():
                if name == "c_interval" and options.interval_handling_mode == "numeric":
                    continue  # µs: months and days folded in (asserted below)
                if name in ("c_numeric", "c_numeric_var") and _nan(expected):
                    assert mine[name] is None or _nan(mine[name]), (setting, name)
                    continue
                assert _same(mine[name], _kept(options, name, expected)), (setting, table, name)


def _nan(value: Any) -> bool:
    return isinstance(value, Decimal | str) and str(value).lower() == "nan"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and a != a:
        return b != b
    return bool(a == b)


def test_the_readable_table_holds_the_values_inserted(tmp_path: Path) -> None:
    first = _table(tmp_path, "readable", READABLE)["tricky_full"][(4, "mid")]
    assert first["c_numeric"] == Decimal("-0.01")
    assert first["c_numeric_var"] == "100000000000000000000"  # numeric without typmod: text
    assert first["c_date"] == dt.date(2000, 1, 1)
    assert first["c_time"] == dt.time(23, 59, 59, 999999)
    assert first["c_timestamp"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
    assert first["c_bytea"] == bytes(range(1, 17))
    assert first["c_json"] == {"u": "é"}
    assert first["c_jsonb"] == {}
    assert first["c_int_arr"] == [None, -1]


def test_numeric_intervals_are_their_microseconds(tmp_path: Path) -> None:
    rows = _table(tmp_path, "defaults", SETTINGS["defaults"])["tricky_full"]
    assert rows[(2, "us")]["c_interval"] == dt.timedelta(microseconds=-86401000000)
    assert rows[(2, "us")]["c_date"] == dt.date(1969, 12, 31)
    assert rows[(2, "us")]["c_timestamp"] == dt.datetime(1969, 12, 31, 23, 59, 59, 999999)
    bytes_row = rows[(4, "mid")]
    assert bytes_row["c_bytea"] == bytes(range(1, 17))
    assert bytes_row["c_numeric"] == Decimal("-0.01")
