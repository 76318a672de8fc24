"""The Iceberg sink's schema evolution, types, append mode, idle commits, errors without
secrets and ``cdc doctor``, against a real SQLite catalog and a local warehouse."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest
from pyiceberg.types import DecimalType, DoubleType, ListType, LongType, StringType

from cdc.contracts.errors import RecordError, SinkFatal, SinkUnavailable
from cdc.contracts.events import Op
from cdc.contracts.schema import Column
from cdc.contracts.sink import SinkContext
from cdc.envelope.options import READABLE
from cdc.records.values import Interval, decoder
from cdc.support.logging import get_logger
from cdc.testing.conformance import TYPED_COLUMNS
from sinks.iceberg import IcebergSink, IcebergSinkConfig
from sinks.iceberg.doctor import doctor
from tests.integration.duckdb_kit import PIPELINE, event, item
from tests.integration.test_iceberg_sink import ITEMS, Lake


def test_added_renamed_and_widened_columns_evolve_the_table(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    columns = [
        Column("id", "bigint", key=True, nullable=False, id=1),
        Column("name", "text", id=2),
        Column("qty", "integer", id=3),
        Column("price", "numeric(6,2)", id=4),
        Column("score", "real", id=5),
    ]
    lake.schemas.publish("items", *columns)
    row = {"id": 1, "name": "a", "qty": 1, "price": "12.50", "score": 1.5}
    lake.apply(event(Op.CREATE, {"id": 1}, {**row, "name": "old"}, 9))
    lake.apply(event(Op.UPDATE, {"id": 1}, row, 10))
    lake.schemas.publish(
        "items",
        columns[0],
        Column("title", "text", id=2),  # renamed: the same column id
        Column("qty", "bigint", id=3),
        Column("price", "numeric(12,2)", id=4),
        Column("score", "double precision", id=5),
        Column("tags", "text[]", id=6),
    )
    big = {"id": 2, "title": "b", "qty": 2**40, "price": "1234567890.25", "score": 0.1}
    lake.apply(event(Op.CREATE, {"id": 2}, {**big, "tags": ["x", None]}, 11))
    fields = {f.name: f.field_type for f in lake.table().schema().fields}
    assert fields["qty"] == LongType() and fields["score"] == DoubleType()
    assert fields["price"] == DecimalType(12, 2) and "name" not in fields
    assert isinstance(fields["tags"], ListType) and fields["tags"].element_type == StringType()
    rows = lake.rows()
    assert rows[1]["title"] == "a" and rows[1]["tags"] is None  # kept through the rename
    assert rows[2] == {**big, "price": Decimal("1234567890.25"), "tags": ["x", None]}
    # Written before the rename (in flight, or replayed): read under the new name.
    lake.apply(event(Op.UPDATE, {"id": 1}, row, 12))
    assert lake.rows()[1]["title"] == "a"


def test_a_change_iceberg_cannot_apply_stops_the_sink_with_the_reset_command(
    tmp_path: Path,
) -> None:
    lake = Lake(tmp_path)
    lake.apply(item(Op.CREATE, 1, 10, "a", 1))
    lake.schemas.publish("items", ITEMS[0], Column("name", "integer"), ITEMS[2])  # text -> int
    with pytest.raises(SinkFatal, match=r"cannot apply.*--reset-table"):
        lake.apply(item(Op.UPDATE, 1, 11, "a", 2))
    lake.schemas.publish("items", Column("sku", "text", key=True), *ITEMS[1:])  # a new key
    with pytest.raises(SinkFatal, match="the key became"):
        lake.apply(item(Op.UPDATE, 1, 12, "a", 2))


def test_every_common_type_is_stored_typed_and_read_back_by_its_meaning(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    extra = [("raw", "bytea", "AAE=", ""), ("ints", "integer[]", [1, None, 3], [])]
    typed = [*TYPED_COLUMNS, *extra]
    lake.schemas.publish("items", *ITEMS, *(Column(n, t) for n, t, _, _ in typed))
    row = {"id": 1, "name": "a", "qty": 1, **{n: v for n, _, v, _ in typed}}
    lake.apply(event(Op.CREATE, {"id": 1}, row, 10))
    stored = lake.rows()[1]
    for name, kind, value, _ in typed:
        assert decoder(kind, READABLE)(stored[name]) == decoder(kind, READABLE)(value), name
    assert stored["day"] == dt.date(2024, 2, 29) and stored["amount"] == Decimal("12.50")
    assert stored["tstz"] == dt.datetime(2024, 1, 2, 3, 4, 5, 500000, tzinfo=dt.UTC)
    assert decoder("interval", READABLE)(stored["span"]) == Interval(0, 1, 7_200_000_000)


def test_a_value_iceberg_cannot_hold_is_a_record_error_without_the_value(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.schemas.publish("items", *ITEMS, Column("day", "date"))
    row = {"id": 1, "name": "a", "qty": 1, "day": "infinity"}
    with pytest.raises(RecordError, match="column day") as raised:
        lake.apply(event(Op.CREATE, {"id": 1}, row, 10))
    assert "infinity" not in str(raised.value)
    row = {"id": 1, "name": "a", "qty": "s3cr3t", "day": None}  # masked into a string, say
    with pytest.raises(RecordError, match="column qty") as raised:
        lake.apply(event(Op.CREATE, {"id": 1}, row, 11))
    assert "s3cr3t" not in str(raised.value)


def test_append_mode_keeps_every_change_with_its_op_position_and_commit_time(
    tmp_path: Path,
) -> None:
    lake = Lake(tmp_path, mode="append")
    batch = lake.apply(
        item(Op.CREATE, 1, 10, "a", 1), item(Op.UPDATE, 1, 11, "b", 2), item(Op.DELETE, 1, 12)
    )
    lake.sink.write(batch)  # the runner retries a batch: nothing twice
    lake.sink.flush()
    lake.reopen()
    lake.sink.write(batch)  # a restart replays it: the offsets in the summary skip it
    lake.sink.flush()
    fields = ("id", "name", "_cdc_op", "_cdc_pos", "_cdc_commit_ts")
    rows = lake.table().scan(selected_fields=fields).to_arrow().sort_by("_cdc_pos").to_pylist()
    at = dt.datetime.fromtimestamp(1_700_000_000, dt.UTC)
    assert rows == [
        {
            "id": 1,
            "name": "a",
            "_cdc_op": "c",
            "_cdc_pos": 10,
            "_cdc_commit_ts": at + dt.timedelta(milliseconds=10),
        },
        {
            "id": 1,
            "name": "b",
            "_cdc_op": "u",
            "_cdc_pos": 11,
            "_cdc_commit_ts": at + dt.timedelta(milliseconds=11),
        },
        {
            "id": 1,
            "name": None,
            "_cdc_op": "d",
            "_cdc_pos": 12,
            "_cdc_commit_ts": at + dt.timedelta(milliseconds=12),
        },
    ]


def test_an_idle_sink_commits_its_buffer_once_the_interval_passed(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.apply(item(Op.CREATE, 1, 10, "a", 1))
    object.__setattr__(lake.config, "commit_interval_s", 3600.0)
    lake.apply(item(Op.UPDATE, 1, 11, "b", 2))
    lake.sink.probe()  # the runner's idle call: the interval has not passed
    assert lake.names() == {1: ("a", 1)}
    object.__setattr__(lake.config, "commit_interval_s", 0.0)
    lake.sink.probe()
    assert lake.names() == {1: ("b", 2)}


def test_a_clean_stop_commits_the_flushed_buffer_and_never_an_unflushed_write(
    tmp_path: Path,
) -> None:
    lake = Lake(tmp_path)
    lake.apply(item(Op.CREATE, 1, 10, "a", 1))
    object.__setattr__(lake.config, "commit_interval_s", 3600.0)
    lake.apply(item(Op.UPDATE, 1, 11, "b", 2))  # buffered; the runner commits the group's offset
    lake.reopen()  # a clean stop: close commits it
    assert lake.names() == {1: ("b", 2)}
    lake.sink.write(lake.records(item(Op.UPDATE, 1, 12, "c", 3)))  # its flush fails, or never ran
    lake.reopen()
    assert lake.names() == {1: ("b", 2)}


def test_catalog_errors_name_no_secret(tmp_path: Path) -> None:
    secret = "s3cr3t-pa55"
    config = IcebergSinkConfig(
        name="lake",
        catalog={
            "type": "sql",
            "uri": f"postgresql+psycopg://u:{secret}@127.0.0.1:1/x",
            "token": secret,
        },
        warehouse=str(tmp_path / "wh"),
    )
    sink = IcebergSink(
        config, SinkContext(PIPELINE, "lake", [], Lake(tmp_path).schemas, get_logger())
    )
    with pytest.raises((SinkUnavailable, SinkFatal)) as raised:
        sink.open()
    assert secret not in str(raised.value) and secret not in repr(config)
    checks = doctor(config, PIPELINE)
    assert not checks[0].ok and secret not in checks[0].detail


def test_doctor_passes_on_a_catalog_the_sink_can_use(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    checks = doctor(lake.config, PIPELINE)
    assert [(c.name, c.ok) for c in checks] == [
        ("reachable", True),
        ("version", True),
        ("permitted", True),
        ("position", True),
    ]
    assert not checks[-1].warning
