"""The DuckDB sink decodes each record with the encoding it was written under, when one batch
holds records from both sides of an accepted envelope change (cdc.log.eras)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.contracts.errors import RecordError
from cdc.contracts.schema import Column
from cdc.contracts.sink import SinkContext
from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE
from cdc.log.base import StoredRecord
from cdc.log.encoding import DEBEZIUM, StoredEncoding
from cdc.log.eras import Eras
from cdc.runtime.sink_task import decode_records
from cdc.support.logging import get_logger
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig, read_rows
from tests.integration.duckdb_kit import Schemas

TOPIC = "p.public.t"
HEX = READABLE.model_copy(update={"binary_handling_mode": "hex"})
COLUMNS = (
    Column("code", "numeric(12,2)", key=True, nullable=False),
    Column("day", "date"),
    Column("stamp", "timestamp without time zone"),
    Column("blob", "bytea"),
)
# One row, as Debezium's defaults write it and as the readable settings with hex bytes do.
DEFAULTS_ROW = {"code": "AJY=", "day": 19782, "stamp": 1709214330123456, "blob": "3q2+7w=="}
HEX_ROW = {
    "code": "1.50",
    "day": "2024-02-29Z",
    "stamp": "2024-02-29T13:45:30.123456Z",
    "blob": "deadbeef",
}


def _record(offset: int, row: dict[str, Any], op: str = "c") -> StoredRecord:
    source = {"schema": "public", "table": "t", "pos": [offset + 1, 0]}
    value = {"before": None, "after": row, "op": op, "source": source}
    key = orjson.dumps({"code": row["code"]})
    return StoredRecord(TOPIC, 0, offset, key, orjson.dumps(value), 0)


def _sink(tmp_path: Path, mode: str = "current") -> tuple[DuckDBSink, Path]:
    schemas = Schemas()
    schemas.publish("t", *COLUMNS)
    path = tmp_path / "eras.duckdb"
    config = DuckDBSinkConfig(name="wh", path=str(path), mode=mode)  # type: ignore[call-arg]
    context = SinkContext("p", "wh", [], schemas, get_logger(sink="wh"), HEX)
    return DuckDBSink(config, context), path


ERAS = Eras(
    StoredEncoding(
        DEBEZIUM,
        HEX.encoding(),
        {TOPIC: {"0": 2}},
        ({"name": DEBEZIUM, "options": DEBEZIUM_DEFAULTS.encoding(), "since": {}},),
    )
)


@pytest.mark.parametrize("mode", ["current", "history"])
def test_one_batch_of_both_encodings_holds_the_right_values(tmp_path: Path, mode: str) -> None:
    stored = [
        _record(0, DEFAULTS_ROW),
        _record(1, {**DEFAULTS_ROW, "code": "AJc=", "day": 0}),  # 1.51, 1970-01-01
        _record(2, {**HEX_ROW, "day": "2024-03-01Z"}, "u"),  # key 1.50 again, written as text
        _record(3, {**HEX_ROW, "code": "2.00", "blob": "00ff"}),
    ]
    sink, path = _sink(tmp_path, mode)
    sink.open()
    try:
        sink.write(decode_records(stored, ERAS))
        sink.flush()
    finally:
        sink.close()
    read = list(read_rows(path, "public", "t"))
    rows = {k["code"]: row for k, row in read}
    assert len(read) == len(rows)  # key 1.50, once as base64 and once as text: one row
    stamp = dt.datetime(2024, 2, 29, 13, 45, 30, 123456)
    assert rows == {
        Decimal("1.50"): {
            "code": Decimal("1.50"),
            "day": dt.date(2024, 3, 1),
            "stamp": stamp,
            "blob": b"\xde\xad\xbe\xef",
        },
        Decimal("1.51"): {
            "code": Decimal("1.51"),
            "day": dt.date(1970, 1, 1),
            "stamp": stamp,
            "blob": b"\xde\xad\xbe\xef",
        },
        Decimal("2.00"): {
            "code": Decimal("2.00"),
            "day": dt.date(2024, 2, 29),
            "stamp": stamp,
            "blob": b"\x00\xff",
        },
    }


def test_without_the_eras_the_older_records_are_misread(tmp_path: Path) -> None:
    """The same batch decoded with the newest options only (what the sinks did before)."""
    sink, _ = _sink(tmp_path)
    sink.open()
    try:
        records = decode_records([_record(0, DEFAULTS_ROW), _record(2, HEX_ROW, "u")])
        with pytest.raises(RecordError, match="is not a bytea") as refused:
            sink.write(records)
            sink.flush()
        assert refused.value.record is records[0]  # the defaults' base64 bytes, read as hex
    finally:
        sink.close()
