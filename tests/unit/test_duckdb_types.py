"""The DuckDB sink's pure parts: type mapping, widening rules, value fixes, batch planning."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from cdc.contracts.errors import RecordError
from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.contracts.sink import SinkRecord
from cdc.envelope import encode as envelope
from cdc.log.base import TopicPartition
from sinks.duckdb.plan import plan
from sinks.duckdb.types import bc_to_duckdb, duckdb_type, is_widening, iso_duration_to_duckdb


@pytest.mark.parametrize(
    ("source", "duck"),
    [
        ("smallint", "SMALLINT"),
        ("integer", "INTEGER"),
        ("bigint", "BIGINT"),
        ("numeric(12,2)", "DECIMAL(12,2)"),
        ("numeric(38,0)", "DECIMAL(38,0)"),
        ("numeric(39,2)", "VARCHAR"),
        ("numeric", "VARCHAR"),
        ("numeric(5,-2)", "VARCHAR"),
        ("real", "REAL"),
        ("double precision", "DOUBLE"),
        ("boolean", "BOOLEAN"),
        ("text", "VARCHAR"),
        ("character varying(20)", "VARCHAR"),
        ("character(3)", "VARCHAR"),
        ("bpchar", "VARCHAR"),
        ("bytea", "BLOB"),
        ("date", "DATE"),
        ("time without time zone", "TIME"),
        ("time(3) with time zone", "TIMETZ"),
        ("timestamp without time zone", "TIMESTAMP"),
        ("timestamp(3) with time zone", "TIMESTAMPTZ"),
        ("interval", "INTERVAL"),
        ("interval day to second(3)", "INTERVAL"),
        ("uuid", "UUID"),
        ("json", "JSON"),
        ("jsonb", "JSON"),
        ("integer[]", "INTEGER[]"),
        ("text[]", "VARCHAR[]"),
        ("numeric(5,2)[]", "DECIMAL(5,2)[]"),
        ("integer[][]", "INTEGER[][]"),
        ("bytea[][]", "JSON"),
        ("mood", "VARCHAR"),
        ('"bit"', "VARCHAR"),
        ("", "JSON"),
    ],
)
def test_type_mapping(source: str, duck: str) -> None:
    assert duckdb_type(source) == duck


@pytest.mark.parametrize(
    ("old", "new", "widens"),
    [
        ("smallint", "integer", True),
        ("integer", "bigint", True),
        ("bigint", "integer", False),
        ("integer", "numeric(12,2)", True),
        ("bigint", "numeric(12,2)", False),
        ("real", "double precision", True),
        ("double precision", "real", False),
        ("numeric(10,2)", "numeric(12,3)", True),
        ("numeric(10,2)", "numeric(10,3)", False),
        ("numeric(10,2)", "numeric", True),
        ("numeric", "numeric(10,2)", False),
        ("character varying(5)", "character varying(6)", True),
        ("character varying(5)", "character varying(4)", False),
        ("character varying(5)", "text", True),
        ("text", "character varying(5)", False),
        ("json", "jsonb", True),
        ("timestamp(3) without time zone", "timestamp without time zone", True),
        ("timestamp without time zone", "timestamp with time zone", False),
        ("integer[]", "bigint[]", True),
        ("integer", "text", False),
        ("mood", "other_enum", False),
    ],
)
def test_widening(old: str, new: str, widens: bool) -> None:
    assert is_widening(old, new) is widens


def test_value_fixes() -> None:
    assert iso_duration_to_duckdb("P1Y2M3DT4H5M6.5S") == (
        "1 years 2 months 3 days 4 hours 5 minutes 6.5 seconds"
    )
    assert iso_duration_to_duckdb("P-1DT-2H") == "-1 days -2 hours"
    assert iso_duration_to_duckdb("PT0S") == "0 seconds"
    assert iso_duration_to_duckdb("infinity") == "infinity"  # DuckDB refuses it: a record error
    assert bc_to_duckdb("0044-03-15 BC") == "0044-03-15 (BC)"
    assert bc_to_duckdb("0044-03-15 12:00:00+00 BC") == "0044-03-15 (BC) 12:00:00+00"


def _records(*events: ChangeEvent) -> list[SinkRecord]:
    out = []
    for event in events:
        for r in envelope.to_records(event, "p", now_ms=0):
            value = None if r.value is None else orjson.loads(r.value)
            key = orjson.loads(r.key or b"{}")
            out.append(SinkRecord(r.topic, 0, len(out), key, value, pos=r.pos))
    return out


def _event(op: Op, key: int, pos: int) -> ChangeEvent:
    source = SourceInfo("pg", "db", "public", "t", 0, pos)
    if op is Op.TRUNCATE:
        return ChangeEvent(op, {}, None, None, source)
    row = {"id": key, "v": pos}
    return ChangeEvent(
        op, {"id": key}, row if op is Op.DELETE else None, None if op is Op.DELETE else row, source
    )


def test_plan_skips_applied_offsets_tombstones_and_what_a_truncate_covers() -> None:
    records = _records(
        _event(Op.CREATE, 1, 10),  # offset 0: already applied
        _event(Op.CREATE, 2, 11),
        _event(Op.DELETE, 2, 12),  # + tombstone
        _event(Op.TRUNCATE, 0, 20),
        _event(Op.CREATE, 3, 21),
        _event(Op.UPDATE, 4, 15),  # arrives late but is older than the truncate
    )
    batches, offsets = plan(records, {TopicPartition("p.public.t", 0): 1})
    batch = batches[("public", "t")]
    assert offsets == {TopicPartition("p.public.t", 0): len(records)}
    assert batch.truncate is not None and batch.truncate.pos == (20, 0)
    assert list(zip(batch.ops, [row["id"] for row in batch.rows], strict=True)) == [("c", 3)]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda value, pos: ({k: v for k, v in value.items() if k != "source"}, pos), "envelope"),
        (lambda value, pos: (value, b"[1, 2"), "envelope"),
        (lambda value, pos: (value, b"[1, 2, 3]"), "envelope"),
        (lambda value, pos: (value, b'["1", 2]'), "integers"),
        (lambda value, pos: ({**value, "source": {**value["source"], "ts_ms": 1.5}}, pos), "ts_ms"),
    ],
)
def test_plan_names_a_record_it_cannot_read(change: Any, reason: str) -> None:
    records = _records(_event(Op.CREATE, 1, 10), _event(Op.CREATE, 2, 11))
    value, pos = change(records[1].value, records[1].pos)
    records[1] = dataclasses.replace(records[1], value=value, pos=pos)
    with pytest.raises(RecordError, match=reason) as caught:
        plan(records, {})
    assert caught.value.record is records[1]
