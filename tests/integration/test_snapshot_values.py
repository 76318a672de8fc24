"""Snapshot rows and streamed rows of the same values are identical: the snapshot reads COPY text
under the stream's session settings and converts it with the stream's converters."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.integration.snapshot_kit import execute, pipeline

COLUMNS = """
    id int PRIMARY KEY, i2 int2, i8 int8, num numeric(20, 6), nan numeric, f4 float4, f8 float8,
    b bool, t text, vc varchar(10), c char(3), by bytea, d date, tm time, ttz timetz,
    ts timestamp, tstz timestamptz, iv interval, u uuid, j json, jb jsonb, ia int[],
    ta text[], m mood, dom posint, tabbed text
"""
VALUES = """
    2, 12345678901234, 123456.789012, 'NaN', 1.5, 'Infinity', true, 'a''b\\c', 'vc', 'ab',
    '\\x00ff10', '2024-02-29', '12:34:56.789', '12:00:00+05:30', '2024-01-01 10:00:00.5',
    '2024-01-01 10:00:00+02', '1 year 2 mons 3 days 04:05:06.5', gen_random_uuid(),
    '{"a": [1, 2.50, null]}', '{"big": 12345678901234567890, "x": "y"}',
    '{1,NULL,3}', '{"a b","c,d",NULL}', 'happy', 7, E'tab\\there\\nnewline'
"""


@pytest.mark.pgcore
def test_snapshot_and_stream_values_are_identical(pg_db: str, tmp_path: Path) -> None:
    execute(
        pg_db,
        "CREATE TYPE mood AS ENUM ('sad', 'happy')",
        "CREATE DOMAIN posint AS int CHECK (VALUE > 0)",
        f"CREATE TABLE t ({COLUMNS})",
        f"INSERT INTO t VALUES (1, {VALUES})",
    )
    with pipeline(pg_db, tmp_path / "log", ["public.t"]) as p:
        p.start()
        p.wait(lambda: p.snapshot_done() and bool(p.sources) and p.sources[0].streaming)
        execute(
            pg_db,
            "INSERT INTO t SELECT 2, i2, i8, num, nan, f4, f8, b, t, vc, c, by, d, "
            "tm, ttz, ts, tstz, iv, u, j, jb, ia, ta, m, dom, tabbed FROM t WHERE id = 1",
        )
        p.wait(lambda: 2 in p.topic_state("public.t"))
        state = p.topic_state("public.t")
    snapshot_row, streamed_row = state[1], state[2]
    assert snapshot_row.pop("id") == 1
    assert streamed_row.pop("id") == 2
    assert snapshot_row == streamed_row
    assert snapshot_row["tabbed"] == "tab\there\nnewline"
    assert orjson.loads(snapshot_row["jb"])["x"] == "y"  # a JSON text (io.debezium.data.Json)
