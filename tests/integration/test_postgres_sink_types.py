"""Every common type from a PostgreSQL source into the PostgreSQL sink, compared typed.

The source table's rows are read as the stream encodes them (the connector's own reader, under
the readable envelope and under Debezium's defaults), applied by the sink into another database
of the server, and compared there with a byte-exact copy of the source table (binary ``COPY``):
column by column with ``IS NOT DISTINCT FROM`` on the target's types, never as text. Two known
conversions are compared as what they are: ``money`` becomes ``numeric``, and a ``timetz``
arrives in UTC (Debezium's encoding keeps the instant, not the offset), so it is compared at UTC.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from cdc.cli.verify.compare import compare_table
from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.contracts.schema import Column, TableSchema
from cdc.contracts.sink import SinkContext
from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE, EnvelopeOptions
from cdc.records.values import decoder
from cdc.support.logging import get_logger
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.plugin import PostgresSourcePlugin
from sinks.postgres import PostgresSink, PostgresSinkConfig, PostgresSinkPlugin
from tests.integration.duckdb_kit import PIPELINE, Schemas
from tests.integration.postgres_sink_kit import records_of

COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "bigint PRIMARY KEY"),
    ("i2", "smallint"),
    ("i4", "integer"),
    ("i8", "bigint"),
    ("n", "numeric(12,2)"),
    ("nu", "numeric"),
    ("r4", "real"),
    ("f8", "double precision"),
    ("b", "boolean"),
    ("t", "text"),
    ("vc", "varchar(20)"),
    ("ch", "char(5)"),
    ("by", "bytea"),
    ("d", "date"),
    ("tm", "time"),
    ("tmz", "timetz"),
    ("ts", "timestamp"),
    ("ts3", "timestamp(3)"),
    ("tsz", "timestamptz"),
    ("iv", "interval"),
    ("u", "uuid"),
    ("j", "json"),
    ("jb", "jsonb"),
    ("ip", "inet"),
    ("net", "cidr"),
    ("mac", "macaddr"),
    ("m", "money"),
    ("mood", "mood"),
    ("tags", "text[]"),
    ("grid", "integer[]"),
    ("amounts", "numeric(8,3)[]"),
    ("days", "date[]"),
    ("stamps", "timestamptz[]"),
    ("spans", "interval[]"),
    ("blobs", "bytea[]"),
    ("ids", "uuid[]"),
)
ROWS = (
    "(1, 1, 2, 3, 12.50, 1e30, 1.5, 2.25, true, 'text ''quoted'' \\ back', 'varying', 'ab', "
    "'\\x00ff10'::bytea, '2024-02-29', '13:14:15.123456', '13:14:15+02', "
    "'2024-01-02 03:04:05.678901', '2024-01-02 03:04:05.678', '2024-01-02 03:04:05.5+01', "
    "'1 year 2 mons -3 days 04:05:06.5', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', "
    "'{\"a\": [1, 2],  \"b\": null}', '{\"b\": {\"c\": null}}', '192.168.0.1/24', '10.0.0.0/8', "
    "'08:00:2b:01:02:03', 12.34, 'happy', ARRAY['x', 'y,z', NULL, '\"q\"'], "
    "'{{1,2},{3,4}}', '{1.5,NULL,-2.125}', '{2024-01-01,infinity}', "
    "ARRAY['2024-01-02 03:04:05+00'::timestamptz], '{P1D,PT-1S}', ARRAY['\\x01'::bytea, NULL], "
    "ARRAY['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12'::uuid])",
    "(2, -32768, -2147483648, -9223372036854775808, -0.01, 'NaN', 'Infinity', '-Infinity', "
    "false, '', 'x', 'abcde', '\\x'::bytea, 'infinity', '24:00:00', '00:00:00-12', "
    "'-infinity', '0044-03-15 12:00:00 BC', 'infinity', '-1 mons', "
    "'00000000-0000-0000-0000-000000000000', 'null', '\"str\"', '::1', '::/0', "
    "'ff:ff:ff:ff:ff:ff', -0.5, 'sad', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')",
    "(3, " + ", ".join(["NULL"] * (36 - 1)) + ")",
    "(4, 0, 0, 0, 0, '-Infinity', 'NaN', 'NaN', NULL, 'ünïcødé ✓', NULL, NULL, NULL, "
    "'0044-03-15 BC', '00:00:00', NULL, '10000-01-01 00:00:00', NULL, "
    "'0001-01-01 00:00:00+00 BC', '0', NULL, '[]', '[1, 2.5, \"x\"]', NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
)


@pytest.fixture
def target_db(pg_server: Any) -> Iterator[str]:
    """A second database on the server: the sink's target."""
    name = "target_types"
    pg_server.create_database(name)
    try:
        yield pg_server.dsn_for(dbname=name)
    finally:
        pg_server.drop_database(name)


def _make_source(dsn: str) -> None:
    columns = ", ".join(f"{n} {t}" for n, t in COLUMNS)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TYPE mood AS ENUM ('happy', 'sad')")
        conn.execute(f"CREATE TABLE every ({columns})".encode())
        for row in ROWS:
            conn.execute(f"INSERT INTO every VALUES {row}".encode())


def _schema(dsn: str) -> TableSchema:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'every'::regclass AND attnum > 0 ORDER BY attnum"
        ).fetchall()
    columns = tuple(Column(n, t, key=n == "id", nullable=n != "id") for n, t in rows)
    return TableSchema("postgresql", "public", "every", columns)


def _apply(source: str, target: str, options: EnvelopeOptions) -> None:
    config = PostgresSourceConfig(dsn=source, tables=["public.every"])
    rows = list(PostgresSourcePlugin.read_rows(config, "public", "every", envelope=options))
    schemas = Schemas({("public", "every"): _schema(source)})
    context = SinkContext(
        PIPELINE, "typed", [("public", "every")], schemas, get_logger(), envelope=options
    )
    sink = PostgresSink(PostgresSinkConfig(name="typed", dsn=target, schema="replica"), context)
    sink.open()
    events = [
        ChangeEvent(
            Op.READ, key, None, row, SourceInfo("postgresql", "db", "public", "every", 0, 10 + i, 0)
        )
        for i, (key, row) in enumerate(rows)
    ]
    sink.write(records_of(events, {}))
    sink.flush()
    sink.close()


def _copy_expected(source: str, target: str) -> None:
    """The source table, byte for byte, as ``public.expected`` of the target database."""
    columns = ", ".join(f"{n} {t}" for n, t in COLUMNS)
    with psycopg.connect(source) as src, psycopg.connect(target, autocommit=True) as dst:
        dst.execute("CREATE TYPE mood AS ENUM ('happy', 'sad')")
        dst.execute(f"CREATE TABLE expected ({columns})".encode())
        with (
            src.cursor().copy("COPY every TO STDOUT (FORMAT binary)") as out,
            dst.cursor().copy("COPY expected FROM STDIN (FORMAT binary)") as into,
        ):
            for block in out:
                into.write(block)


def _differences(target: str) -> dict[str, list[int]]:
    """The ids whose column differs, by column, compared on the target's types."""
    found: dict[str, list[int]] = {}
    with psycopg.connect(target) as conn:
        types = dict(
            conn.execute(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'replica.every'::regclass AND attnum > 0"
            ).fetchall()
        )
        for name, _ in COLUMNS:
            ids = conn.execute(_differing(name, types[name])).fetchall()
            if ids:
                found[name] = [i for (i,) in ids]
    return found


def _differing(name: str, target_type: str) -> sql.Composed:
    column = sql.Identifier(name)
    left = sql.SQL("e.{}::{}").format(column, sql.SQL(target_type))
    right = sql.SQL("t.{}").format(column)
    if target_type in ("json", "xml"):  # no equality operator: their text is their value
        left, right = sql.SQL("{}::text").format(left), sql.SQL("{}::text").format(right)
    if target_type == "time with time zone":
        left = sql.SQL("({} AT TIME ZONE 'UTC')").format(left)
        right = sql.SQL("({} AT TIME ZONE 'UTC')").format(right)
    return sql.SQL(
        "SELECT coalesce(e.id, t.id) FROM public.expected e FULL JOIN replica.every t "
        "ON e.id = t.id WHERE e.id IS NULL OR t.id IS NULL OR {} IS DISTINCT FROM {} ORDER BY 1"
    ).format(left, right)


#: What Debezium's default encodings lose, by column: ``precise`` decimals hold no NaN or
#: infinity (rows 2 and 4), and ``numeric`` intervals fold months into microseconds at 30.4375
#: days a month (rows 1 and 2 have months). The readable envelope loses nothing.
DEBEZIUM_LOSSES = {"nu": [2, 4], "iv": [1, 2]}


@pytest.mark.parametrize(
    ("options", "losses"),
    [(READABLE, {}), (DEBEZIUM_DEFAULTS, DEBEZIUM_LOSSES)],
    ids=["readable", "debezium"],
)
def test_every_type_round_trips_typed(
    pg_db: str, target_db: str, options: EnvelopeOptions, losses: dict[str, list[int]]
) -> None:
    _make_source(pg_db)
    _apply(pg_db, target_db, options)
    _copy_expected(pg_db, target_db)
    assert _differences(target_db) == losses


def test_target_columns_keep_the_source_types(pg_db: str, target_db: str) -> None:
    _make_source(pg_db)
    _apply(pg_db, target_db, READABLE)
    with psycopg.connect(target_db) as conn:
        types = dict(
            conn.execute(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'replica.every'::regclass AND attnum > 0"
            ).fetchall()
        )
    assert types["n"] == "numeric(12,2)"
    assert types["jb"] == "jsonb"
    assert types["grid"] == "integer[]"
    assert types["tsz"] == "timestamp with time zone"
    assert types["ts3"] == "timestamp(3) without time zone"
    assert types["mood"] == "text"  # an enum is its text
    assert types["m"] == "numeric"
    assert types["u"] == "uuid" and types["by"] == "bytea" and types["b"] == "boolean"


def test_read_back_for_verify_equals_the_source_decoded(pg_db: str, target_db: str) -> None:
    """What ``cdc verify`` does: the sink's rows (``rows_decoded``) against the source's rows
    decoded from the envelope, compared by its own table comparison."""
    _make_source(pg_db)
    _apply(pg_db, target_db, READABLE)
    schema = _schema(pg_db)
    decoders = {c.name: decoder(c.type, READABLE) for c in schema.columns}
    config = PostgresSourceConfig(dsn=pg_db, tables=["public.every"])
    source = [
        (key, {n: decoders[n](v) for n, v in row.items()})
        for key, row in PostgresSourcePlugin.read_rows(config, "public", "every")
    ]
    target_config = PostgresSinkConfig(name="typed", dsn=target_db, schema="replica")
    sink = list(PostgresSinkPlugin.read_rows(target_config, "public", "every"))
    # A 2-D array and the time 24:00:00 decode alike on both sides, and verify compares them.
    assert {k["id"]: (r["grid"], r["tm"]) for k, r in sink} == {
        k["id"]: (r["grid"], r["tm"]) for k, r in source
    }
    result = compare_table(
        "public.every", "typed", schema, lambda: source, lambda: sink, attempts=1
    )
    assert (result.missing, result.extra, result.different) == ([], [], [])
    assert result.source_count == result.sink_count == 4
    assert result.state == "ok"
    assert PostgresSinkPlugin.rows_decoded


def test_into_another_server(pg_db: str) -> None:
    """The target on a server of its own (a second local cluster): the same typed equality.
    (CI's versions lane runs these tests on PostgreSQL 14 to 18.)"""
    from tests.services.postgres import LocalPostgres

    _make_source(pg_db)
    with LocalPostgres() as other:
        target = other.dsn_for(dbname=other.create_database("replica_db"))
        _apply(pg_db, target, READABLE)
        _copy_expected(pg_db, target)
        assert _differences(target) == {}
