"""MongoDB documents often have one-letter fields (``t``, ``s``, ``d``, ``w``). The DuckDB sink's
merge SQL uses those letters as table aliases, and DuckDB then reads ``t._id`` inside
``EXISTS (SELECT 1 FROM __cdc_win w WHERE t._id = w._id)`` as a field of the *column* ``t`` of
``__cdc_win``: the old row was not deleted and the key ended up twice. The sink's aliases are
now ``__cdc_``-prefixed; this guards against a regression."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import structlog

from cdc.contracts.schema import Column, TableSchema
from cdc.contracts.sink import SinkContext, SinkRecord
from sinks.duckdb.config import DuckDBSinkConfig
from sinks.duckdb.reader import read_rows
from sinks.duckdb.sink import DuckDBSink

SCHEMA = TableSchema("mongodb", "shop", "orders", (Column("_id", "", True, False), Column("t", "")))


class Schemas:
    def get(self, schema: str, table: str) -> TableSchema:
        return SCHEMA


def record(offset: int, op: str, row: dict[str, Any], pos: int) -> SinkRecord:
    value = {"before": None, "after": row, "op": op, "ts_ms": 1, "source": {"pos": [pos, 0]}}
    value["source"] |= {"schema": "shop", "table": "orders"}
    return SinkRecord("mg.shop.orders", 0, offset, {"_id": row["_id"]}, value)


def test_a_field_named_t_does_not_duplicate_keys(tmp_path: Path) -> None:
    config = DuckDBSinkConfig(name="wh", type="duckdb", path=str(tmp_path / "x.duckdb"))
    context = SinkContext("mg", "wh", [("shop", "orders")], Schemas(), structlog.get_logger())
    sink = DuckDBSink(config, context)
    sink.open()
    try:
        sink.write([record(0, "r", {"_id": 1, "t": 5}, 10)])
        sink.flush()
        sink.write([record(1, "u", {"_id": 1, "t": 6}, 20)])
        sink.flush()
    finally:
        sink.close()
    rows = list(read_rows(tmp_path / "x.duckdb", "shop", "orders"))
    assert len(rows) == 1
