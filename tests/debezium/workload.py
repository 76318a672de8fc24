"""The differential workload: one tricky schema, its changes, and the five settings combinations.

Two tables of every common type (with ``money``, ``hstore``, and dates and timestamps at
``infinity``, ``-infinity`` and BC) with a composite primary key, ``tricky`` (REPLICA IDENTITY
DEFAULT) and ``tricky_full`` (FULL), three rows in each (the snapshot); then, one transaction
per statement, an insert, an update, a primary-key update, an update that leaves a TOASTed
value unchanged and a delete on each, a truncate of ``tricky`` and a last insert (so a skipped
truncate is seen skipped, not late). Last, an online re-snapshot of both tables (Debezium's
incremental snapshot; ``cdc snapshot --table``).

``capture.py`` records Debezium's records of it into ``expected/``; the differential test
(``tests/integration/test_debezium_differential.py``) runs it through Debezium and ``cdc`` at
once. Settings are Debezium properties; :func:`envelope_block` gives ours under the same names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql

from cdc.envelope.options import DEBEZIUM_DEFAULTS

#: Settings combinations: name -> Debezium properties over the harness's defaults.
SETTINGS: dict[str, dict[str, str]] = {
    # Debezium's own defaults (precise decimals, adaptive times, numeric intervals, bytes),
    # with the JsonConverter's default schemas.enable=true, said explicitly.
    "defaults": {
        "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
    },
    # The readable settings issue 14 makes our default, and truncates not skipped.
    "readable": {
        "decimal.handling.mode": "string",
        "time.precision.mode": "isostring",
        "interval.handling.mode": "string",
        "binary.handling.mode": "base64",
        "skipped.operations": "none",
        "key.converter.schemas.enable": "false",
        "value.converter.schemas.enable": "false",
    },
    # The same readable settings with the Connect schemas: the semantic type names they carry.
    "readable_schemas": {
        "decimal.handling.mode": "string",
        "time.precision.mode": "isostring",
        "interval.handling.mode": "string",
        "binary.handling.mode": "base64",
        "skipped.operations": "none",
        "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
    },
    # The other modes: Kafka Connect's own temporal types, doubles, hex bytes, hstore as a map
    # (json, Debezium's default, in the others).
    "connect_double_hex": {
        "decimal.handling.mode": "double",
        "hstore.handling.mode": "map",
        "time.precision.mode": "connect",
        "binary.handling.mode": "hex",
        "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
    },
    # Microsecond times for time(3) too, URL-safe base64, ISO intervals, precise decimals.
    "micro_urlsafe": {
        "time.precision.mode": "adaptive_time_microseconds",
        "binary.handling.mode": "base64-url-safe",
        "interval.handling.mode": "string",
        "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true",
    },
}

TABLES = ("tricky", "tricky_full")
#: The two wide tables as both sides name them (the values table, :data:`VALUES_TABLE`, aside).
QUALIFIED = tuple(f"public.{t}" for t in TABLES)
#: Every value form of ``numeric`` and ``timestamptz(p)``: its records are kept in
#: ``expected/values/<setting>.jsonl``, the wide tables' in ``expected/<setting>.jsonl``.
VALUES_TABLE = "tricky_values"
#: Every captured table, in the include lists' (and snapshots') order.
CAPTURED = (*QUALIFIED, f"public.{VALUES_TABLE}")
#: Debezium's signal table (its incremental snapshots' requests and watermarks).
SIGNAL_TABLE = "debezium_signal"
#: The key of the last streamed change: once it is on a topic, every streamed change is.
LAST_KEY = {"id": 9, "region": "zz"}

COLUMNS = """
    id int4 NOT NULL, region text NOT NULL,
    c_int2 int2, c_int4 int4, c_int8 int8,
    c_numeric numeric(12,2), c_numeric_var numeric, c_float8 float8, c_float4 float4,
    c_text text, c_varchar varchar(20), c_bytea bytea, c_uuid uuid,
    c_date date, c_time time, c_time3 time(3), c_timetz timetz,
    c_timestamp timestamp, c_timestamp3 timestamp(3), c_timestamptz timestamptz,
    c_interval interval, c_json json, c_jsonb jsonb, c_mood mood,
    c_int_arr int4[], c_int_2d int4[][], c_bool bool, c_toast text,
    c_money money, c_hstore hstore,
    c_date_x date, c_timestamp_x timestamp, c_timestamp3_x timestamp(3),
    c_timestamptz_x timestamptz,
    PRIMARY KEY (id, region)
"""

ROW_1 = """(1, 'eu', 32767, 2147483647, 9223372036854775807,
    1234567890.12, 3.14159265358979, 'Infinity', 1.5,
    E'hello "world"\\n\\ttab', 'vc', '\\x00ff10', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
    '2024-02-29', '13:45:30.123456', '13:45:30.123', '13:45:30.5+02',
    '2024-02-29 13:45:30.123456', '2024-02-29 13:45:30.123', '2024-02-29 13:45:30.5+00',
    '1 year 2 mons 3 days 04:05:06.789', '{"a": [1, 2.50, null]}', '{"b": {"c": true}}', 'happy',
    '{1,2,3}', '{{1,2},{3,4}}', true, 'short',
    1234567.89, '"a"=>"1", "b"=>NULL, "q\\"uote"=>"back\\\\slash", "é"=>""',
    'infinity', 'infinity', 'infinity', 'infinity')"""

ROW_2 = """(2, 'us', -32768, -2147483648, -9223372036854775808,
    'NaN', 'NaN', 'NaN', '-Infinity',
    '', '', '\\x', '00000000-0000-0000-0000-000000000000',
    '1969-12-31', '00:00:00', '23:59:59.999', '23:59:59-05:30',
    '1969-12-31 23:59:59.999999', '1969-12-31 23:59:59.999', '2024-06-30 23:59:59.999999-07',
    '-1 day -1 second', '[]', '"str"', 'sad',
    '{}', '{{5,6,7},{8,9,10}}', false, repeat('x', 10000),
    -92233720368547758.08, '',
    '-infinity', '-infinity', '-infinity', '-infinity')"""

ROW_4 = """(4, 'mid', 0, 0, 0,
    -0.01, 100000000000000000000, 0, 0,
    'unicode é 😀', 'x', '\\x0102030405060708090a0b0c0d0e0f10',
    'ffffffff-ffff-ffff-ffff-ffffffffffff',
    '2000-01-01', '23:59:59.999999', '00:00:00', '00:00:00+00',
    '9999-12-31 23:59:59.999999', '2000-01-01 00:00:00', '2000-01-01 00:00:00+00',
    '0', '{"u": "é"}', '{}', 'ok',
    '{NULL,-1}', '{{NULL}}', NULL, NULL,
    0, '"k"=>"v"',
    '0044-03-15 BC', '0044-03-15 13:45:30.123456 BC', '0001-01-01 00:00:00.5 BC',
    '0001-12-31 23:59:59.999999+00 BC')"""

ROW_3 = "(3, 'ap', NULL, NULL, NULL, NULL, NULL, '-Infinity', NULL, NULL, NULL, NULL, NULL, " + (
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL)"
)

#: The 2-D arrays of the rows above, as JSON (Debezium loses them: one null per row).
MULTI_DIMENSIONAL = ([[1, 2], [3, 4]], [[5, 6, 7], [8, 9, 10]], [[None]])

#: Streamed changes of one table; {t} is the table. Records: c, u, d+tombstone+c, u, d+tombstone.
STREAM = [
    "INSERT INTO {t} VALUES " + ROW_3,
    "UPDATE {t} SET c_int4 = 42, c_numeric = 0.10, c_numeric_var = -0.000123, c_text = 'updated',"
    " c_interval = '1 mon -2 days 03:00:00', c_timestamptz = '2000-01-01 00:00:00+00',"
    " c_bytea = '\\xdeadbeef', c_json = '{\"k\": 1}', c_money = -0.01,"
    ' c_hstore = \'"x"=>NULL, "y"=>"2"\', c_date_x = \'4713-01-01 BC\','
    " c_timestamp_x = 'infinity', c_timestamp3_x = '0100-02-28 23:59:59.999 BC',"
    " c_timestamptz_x = '0044-03-15 12:00:00+02 BC' WHERE id = 3",
    "UPDATE {t} SET region = 'apac' WHERE id = 3 AND region = 'ap'",
    "UPDATE {t} SET c_int2 = 7 WHERE id = 2",
    "DELETE FROM {t} WHERE id = 1",
]
#: Records of one table's STREAM.
STREAM_RECORDS = 8
SNAPSHOT_RECORDS = 6
#: Rows an online re-snapshot of both tables reads after the stream (tricky: 9; full: 2, 3, 4).
RESNAPSHOT_RECORDS = 4

# The values table: numeric without a scale (Debezium's VariableScaleDecimal: its scale is the
# number's own without trailing zeros), with one (kept), big, negative, zero, NaN and the
# infinities; timestamptz without a precision and with 0, 1 and 3 (Debezium pads the fraction
# to the column's precision); then a truncate (Debezium's key: null).
VALUES_COLUMNS = """
    id int4 PRIMARY KEY, n1 numeric, n2 numeric, n3 numeric, n4 numeric(12,4),
    tz timestamptz, tz0 timestamptz(0), tz1 timestamptz(1), tz3 timestamptz(3)
"""
_STAMPS = "{0}, {0}, {0}, {0}"
VALUES_ROWS = [
    f"(1, 12.3400, 100, 0, 1.5000, {_STAMPS.format(repr('2024-06-30 09:59:59+00'))})",
    f"(2, 2.5 / 1, -5.10, 1e-20, -0.0001, {_STAMPS.format(repr('2000-01-01 07:59:59.999+00'))})",
    f"(3, 'NaN', -0.000, 1.0 / 3, 'NaN', {_STAMPS.format(repr('2000-01-01 10:00:00.1+00'))})",
]
VALUES_STREAM = [
    "INSERT INTO tricky_values VALUES (4, 'Infinity', '-Infinity',"
    " 123456789012345678901234567890.1234500, -99999999.9999,"
    f" {_STAMPS.format(repr('2024-06-30 23:59:59.999999-07'))})",
    "INSERT INTO tricky_values VALUES (5, -1234.5600, 1e5, -0.00000100, 0,"
    f" {_STAMPS.format(repr('infinity'))})",
    "INSERT INTO tricky_values VALUES (6, NULL, NULL, NULL, NULL,"
    f" {_STAMPS.format(repr('0044-03-15 12:00:00+02 BC'))})",
    "UPDATE tricky_values SET n1 = 0.10, n2 = 7.000, n3 = -1.0 / 3,"
    " tz3 = '2024-01-01 00:00:00.12+00', tz1 = '2024-01-01 00:00:00.16+00' WHERE id = 1",
    "DELETE FROM tricky_values WHERE id = 2",
    "TRUNCATE tricky_values",
    "INSERT INTO tricky_values VALUES (7, 42.4200, 10, -10, 10.0100,"
    f" {_STAMPS.format(repr('2024-06-30 09:59:59.5+00'))})",
]
VALUES_SNAPSHOT_RECORDS = 3
#: Records of VALUES_STREAM but the truncate: 3 inserts, an update, d+tombstone, an insert.
VALUES_STREAM_RECORDS = 7
#: Rows its online re-snapshot reads: 7.
VALUES_RESNAPSHOT_RECORDS = 1


def truncates(properties: Mapping[str, str]) -> int:
    """Truncate records the stream gives under these properties (Debezium skips ``t``)."""
    return 1 if properties.get("skipped.operations", "t") == "none" else 0


def streamed_records(properties: Mapping[str, str], values: bool = False) -> int:
    """Records of the streamed changes under these properties (``values``: with the values
    table's, :func:`stream`'s ``values``)."""
    wide = 2 * STREAM_RECORDS + truncates(properties) + 1
    return wide + (VALUES_STREAM_RECORDS + truncates(properties) if values else 0)


def snapshot_records(values: bool = False) -> int:
    """Records of the initial snapshot (``values``: with the values table's)."""
    return SNAPSHOT_RECORDS + (VALUES_SNAPSHOT_RECORDS if values else 0)


def resnapshot_records(values: bool = False) -> int:
    """Rows of the online re-snapshot (``values``: with the values table's)."""
    return RESNAPSHOT_RECORDS + (VALUES_RESNAPSHOT_RECORDS if values else 0)


def prepare(dsn: str) -> None:
    """Creates the type, the hstore extension, the two tables and their snapshot rows, and
    Debezium's signal table."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        conn.execute("CREATE EXTENSION hstore")
        for table in TABLES:
            conn.execute(f"CREATE TABLE {table} ({COLUMNS})")
            conn.execute(f"ALTER TABLE {table} ALTER COLUMN c_toast SET STORAGE EXTERNAL")
            conn.execute(f"INSERT INTO {table} VALUES {ROW_1}, {ROW_4}, {ROW_2}")
        conn.execute("ALTER TABLE tricky_full REPLICA IDENTITY FULL")
        conn.execute(f"CREATE TABLE {VALUES_TABLE} ({VALUES_COLUMNS})")
        conn.execute(f"INSERT INTO {VALUES_TABLE} VALUES {', '.join(VALUES_ROWS)}")
        # Debezium's documented layout: id, type, data.
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL,"
                " data varchar(2048))"
            ).format(sql.Identifier(SIGNAL_TABLE))
        )


def stream(dsn: str, values: bool = False) -> None:
    """Makes the streamed changes, one transaction per statement (``values``: the values
    table's too, before the last change, :data:`LAST_KEY`)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in TABLES:
            for statement in STREAM:
                conn.execute(statement.replace("{t}", table))
        for statement in VALUES_STREAM if values else ():
            conn.execute(statement)
        conn.execute("TRUNCATE tricky")
        conn.execute("INSERT INTO tricky (id, region, c_int4) VALUES (9, 'zz', 9)")


def signal_incremental_snapshot(dsn: str, signal_id: str = "resnapshot-1") -> None:
    """Asks Debezium for an incremental snapshot of both tables (an ``execute-snapshot`` row)."""
    data = json.dumps({"data-collections": list(CAPTURED), "type": "incremental"})
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("INSERT INTO {} (id, type, data) VALUES (%s, 'execute-snapshot', %s)").format(
                sql.Identifier(SIGNAL_TABLE)
            ),
            (signal_id, data),
        )


def debezium_properties(setting: str, slot: str) -> dict[str, str]:
    """Debezium's properties for ``setting``: its own slot and publication, the signal table."""
    return {
        "slot.name": slot,
        "publication.name": slot,
        "table.include.list": ",".join(CAPTURED),
        "signal.data.collection": f"public.{SIGNAL_TABLE}",
        # Chunks of a few rows, so the re-snapshot reads several windows.
        "incremental.snapshot.chunk.size": "2",
        **SETTINGS[setting],
    }


def envelope_block(setting: str) -> dict[str, Any]:
    """Our ``envelope:`` block for ``setting``, under Debezium's names.

    Debezium's defaults first (what its properties leave unsaid is its default), then the
    setting's options; the two converters' ``schemas.enable`` become our one ``schemas.enable``.
    """
    props = SETTINGS[setting]
    block: dict[str, Any] = DEBEZIUM_DEFAULTS.properties()
    for name, value in props.items():
        if name.endswith("converter.schemas.enable"):
            continue
        block[name] = value
    key = props.get("key.converter.schemas.enable", "true")
    value = props.get("value.converter.schemas.enable", "true")
    if key != value:
        raise ValueError(f"{setting}: key and value schemas.enable differ; ours has one switch")
    block["schemas.enable"] = value == "true"
    return block
