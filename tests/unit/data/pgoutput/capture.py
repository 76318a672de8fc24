"""Capture the pgoutput and text-format fixtures of tests/unit from a real PostgreSQL 15.

Run against a throwaway cluster with ``wal_level=logical`` (it creates types, tables, a
publication, slots and a replication origin, and drops the slots at the end)::

    python tests/unit/data/pgoutput/capture.py "host=/tmp port=55432 user=postgres"

Each message is ``[lsn, xid, hex of the pgoutput bytes]`` as the slot function returns them.
Writes ``v1.json`` (protocol 1, every message kind but streaming), ``v1_binary.json`` (the same
changes with ``binary 'true'``), ``v2_stream.json`` (protocol 2, streamed transactions) and
``types.json`` (the text output of ``SELECT expr`` for every converted type, and
``format_type`` of columns).
The unit tests read these files; they never need a server.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).parent
TEXT_SETTINGS = (
    "SET DateStyle = 'ISO, MDY'; SET IntervalStyle = 'postgres'; SET bytea_output = 'hex'"
)

SCHEMA = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE TABLE customers (
    id int PRIMARY KEY, name text NOT NULL, email varchar(100), balance numeric(12,2),
    mood mood, score posint, tags text[], created_at timestamptz
);
CREATE TABLE orders_full (id bigint PRIMARY KEY, note text, qty int);
ALTER TABLE orders_full REPLICA IDENTITY FULL;
CREATE TABLE docs (id int PRIMARY KEY, body text, rev int);
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE truncate_me (id serial PRIMARY KEY);
CREATE TABLE bench_rows (
    id int PRIMARY KEY, name text, email text, amount numeric(10,2), active boolean,
    created_at timestamptz
);
CREATE TABLE stream_t (id int PRIMARY KEY, payload text, mood mood);
CREATE TABLE all_types (
    id int PRIMARY KEY, c_int2 int2, c_int8 int8, c_float4 float4, c_float8 float8,
    c_numeric numeric, c_numeric_ps numeric(12,2), c_bool bool, c_char char(5),
    c_varchar varchar(20),
    c_bytea bytea, c_date date, c_time time, c_time3 time(3), c_timetz timetz,
    c_timestamp timestamp, c_timestamptz timestamptz, c_timestamptz3 timestamptz(3),
    c_interval interval, c_interval_ym interval year to month, c_interval_s interval second(2),
    c_uuid uuid, c_json json, c_jsonb jsonb, c_money money, c_inet inet, c_cidr cidr,
    c_macaddr macaddr, c_bit bit(4), c_varbit varbit(8), c_box box, c_int4range int4range,
    c_mood mood, c_posint posint, c_int4_arr int4[], c_text_arr text[], c_int4_2d int4[][],
    c_varchar_arr varchar(10)[], c_numeric_arr numeric(5,1)[], c_box_arr box[], c_mood_arr mood[],
    c_timestamptz_arr timestamptz[], c_jsonb_arr jsonb[], c_oid oid, c_name name,
    c_xml xml, c_tsvector tsvector, c_pg_lsn pg_lsn, c_point point, c_char1 "char"
);
CREATE PUBLICATION pub FOR ALL TABLES;
"""

# One transaction per list item; comments in the tests refer to these by their order.
V1_TRANSACTIONS = [
    # 0: insert with a custom enum and domain column (the server sends 'Y' for both)
    "INSERT INTO customers VALUES (1, 'Ada', 'ada@example.com', 1234.50, 'happy', 7, "
    "'{a,\"b c\",NULL}', '2024-01-02 03:04:05.123456+00')",
    # 1: update without key change (no old tuple), then with a key change ('K')
    "UPDATE customers SET name = 'Ada L', mood = NULL WHERE id = 1; "
    "UPDATE customers SET id = 2 WHERE id = 1",
    # 2: REPLICA IDENTITY FULL: update and delete carry the whole old row ('O')
    "INSERT INTO orders_full VALUES (10, 'first', 1); "
    "UPDATE orders_full SET qty = 5 WHERE id = 10; DELETE FROM orders_full WHERE id = 10",
    # 3: delete by primary key ('K')
    "DELETE FROM customers WHERE id = 2",
    # 4: a TOASTed value stays unchanged ('u') when another column changes
    "INSERT INTO docs VALUES (1, repeat('0123456789', 1000), 1)",
    "UPDATE docs SET rev = 2 WHERE id = 1",
    # 6: truncates, with options and without
    "TRUNCATE truncate_me, orders_full RESTART IDENTITY CASCADE",
    "TRUNCATE truncate_me",
    # 8: a transactional logical message next to a change
    "INSERT INTO truncate_me VALUES (1); "
    "SELECT pg_logical_emit_message(true, 'cdc-test', 'hello, transactional')",
    # 9: a non-transactional one with binary content
    "SELECT pg_logical_emit_message(false, 'cdc-test', '\\x00ff01'::bytea)",
    # 10: every converted type, edge values
    "INSERT INTO all_types (id, c_int2, c_int8, c_float4, c_float8, c_numeric, c_numeric_ps, "
    "c_bool, c_char, c_varchar, c_bytea, c_date, c_time, c_time3, c_timetz, c_timestamp, "
    "c_timestamptz, "
    "c_timestamptz3, c_interval, c_interval_ym, c_interval_s, c_uuid, c_json, c_jsonb, c_money, "
    "c_inet, c_cidr, c_macaddr, c_bit, c_varbit, c_box, c_int4range, c_mood, c_posint, c_int4_arr, "
    "c_text_arr, c_int4_2d, c_varchar_arr, c_numeric_arr, c_box_arr, c_mood_arr, "
    "c_timestamptz_arr, c_jsonb_arr, c_oid, c_name, c_xml, c_tsvector, c_pg_lsn, c_point, c_char1) "
    "VALUES (1, -32768, 9223372036854775807, 1.5, 'NaN', "
    "'12345678901234567890.123456789', 1234.5, true, 'ab', 'héllo', '\\x00ff10', "
    "'2024-02-29', '23:59:59.999999', '12:00:00.1234', '04:05:06.789+05:30', "
    "'2024-01-02 03:04:05.5', '2024-01-02 03:04:05.123456+05:30', '2024-06-30 23:59:59.999+00', "
    "'1 year 2 mons 3 days 04:05:06.5', '1 year 2 mons', '1.25 seconds', "
    '\'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\', \'{"a": [1, 2.5, null], "b": "x"}\', '
    "'{\"big\": 123456789012345678901234567890, \"f\": 0.1}', 1234.56, '192.168.0.1/24', "
    "'10.0.0.0/8', '08:00:2b:01:02:03', B'1010', B'101', '((1,1),(0,0))', '[1,10)', 'ok', 5, "
    '\'{1,2,NULL}\', \'{"a,b","c\\"d",NULL,"NULL",""}\', \'{{1,2},{3,4}}\', \'{abc,def}\', '
    "'{1.5,NULL}', '{(1,1),(0,0);(3,3),(2,2)}', '{sad,happy}', "
    "'{\"2024-01-02 03:04:05+00\",infinity}', ARRAY['{\"k\": 1}'::jsonb, '[]'::jsonb], "
    "4294967295, 'a name', '<a>x</a>', 'fat cat', '16/B374D848', '(1.5,-2)', 'z'), "
    "(2, NULL, NULL, '-Infinity', 'Infinity', 'NaN', NULL, false, NULL, NULL, '\\x', "
    "'infinity', NULL, NULL, NULL, '-infinity', 'infinity', NULL, "
    "'-1 years -2 mons +3 days -04:05:06.25', NULL, '-0.5 seconds', NULL, 'null', '123', NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, 'empty', NULL, NULL, '{}', '{}', '[0:1][1:1]={{7},{8}}', "
    "NULL, '{NaN}', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    # 11: six-column rows for bench/pgoutput_decode.py
    "INSERT INTO bench_rows SELECT i, 'name ' || i, 'user' || i || '@example.com', i * 1.25, "
    "i % 2 = 0, timestamptz '2024-01-01 00:00:00+00' + i * interval '1 minute' "
    "FROM generate_series(1, 200) AS i",
]

V2_TRANSACTIONS = [
    # 0: a small transaction: not streamed, but framed as in protocol 2
    "INSERT INTO stream_t VALUES (0, 'small', 'ok')",
    # 1: streamed and committed; includes every data message kind inside stream blocks
    "INSERT INTO stream_t SELECT i, NULL, 'happy' FROM generate_series(1, 600) AS i; "
    "UPDATE stream_t SET payload = 'updated' WHERE id = 1; DELETE FROM stream_t WHERE id = 2; "
    "TRUNCATE truncate_me; "
    "SELECT pg_logical_emit_message(true, 'cdc-test', 'inside a streamed transaction')",
    # 2: streamed, a subtransaction rolled back (StreamAbort with subxid != xid), then commit
    "INSERT INTO stream_t SELECT i, NULL, 'sad' FROM generate_series(10001, 10500) AS i; "
    "SAVEPOINT sp; "
    "INSERT INTO stream_t SELECT i, NULL, 'sad' FROM generate_series(20001, 20500) AS i; "
    "ROLLBACK TO SAVEPOINT sp; "
    "INSERT INTO stream_t VALUES (30000, 'after rollback', NULL)",
]
V2_ABORTED = "INSERT INTO stream_t SELECT i, NULL, 'ok' FROM generate_series(40001, 40600) AS i"
# An abort does not flush WAL and decoding stops at the flush position: commit after it.
V2_FLUSH = "INSERT INTO stream_t VALUES (50000, 'after the aborted transaction', NULL)"

# name -> (SQL expression, TimeZone for the session or None)
TYPE_CASES: dict[str, tuple[str, str | None]] = {
    "int2_min": ("(-32768)::int2", None),
    "int4": ("2147483647::int4", None),
    "int8_max": ("9223372036854775807::int8", None),
    "oid": ("4294967295::oid", None),
    "numeric_big": ("'12345678901234567890.000000000012345'::numeric", None),
    "numeric_scaled": ("1234.5::numeric(12,2)", None),
    "numeric_nan": ("'NaN'::numeric", None),
    "numeric_inf": ("'Infinity'::numeric", None),
    "numeric_neg_inf": ("'-Infinity'::numeric", None),
    "float4": ("1.1::float4", None),
    "float8": ("0.1::float8", None),
    "float8_exp": ("1e300::float8", None),
    "float8_neg_zero": ("'-0'::float8", None),
    "float8_nan": ("'NaN'::float8", None),
    "float8_inf": ("'Infinity'::float8", None),
    "float4_neg_inf": ("'-Infinity'::float4", None),
    "bool_true": ("true", None),
    "bool_false": ("false", None),
    "text": ("'héllo wörld'::text", None),
    "varchar": ("'abc'::varchar(10)", None),
    "bpchar": ("'ab'::char(5)", None),
    "name": ("'a_name'::name", None),
    "char": ("'z'::\"char\"", None),
    "bytea": ("'\\x00ff10'::bytea", None),
    "bytea_empty": ("''::bytea", None),
    "date": ("'2024-02-29'::date", None),
    "date_infinity": ("'infinity'::date", None),
    "date_bc": ("'0044-03-15 BC'::date", None),
    "date_far": ("'12345-06-07'::date", None),
    "time": ("'04:05:06'::time", None),
    "time_frac": ("'23:59:59.999999'::time", None),
    "timetz": ("'04:05:06.789+05:30'::timetz", None),
    "timetz_hours": ("'04:05:06-08'::timetz", None),
    "timestamp": ("'2024-01-02 03:04:05'::timestamp", None),
    "timestamp_frac": ("'2024-01-02 03:04:05.5'::timestamp", None),
    "timestamp_bc": ("'0044-03-15 12:00:00 BC'::timestamp", None),
    "timestamp_infinity": ("'infinity'::timestamp", None),
    "timestamptz_utc": ("'2024-01-02 03:04:05.123456+00'::timestamptz", "UTC"),
    "timestamptz_kolkata": ("'2024-01-02 03:04:05.123456+00'::timestamptz", "Asia/Kolkata"),
    "timestamptz_new_york": ("'2024-01-01 02:00:00+00'::timestamptz", "America/New_York"),
    "timestamptz_st_johns": ("'2024-07-01 00:00:00.5+00'::timestamptz", "America/St_Johns"),
    "timestamptz_lmt": ("'1900-01-01 00:00:00+00'::timestamptz", "Europe/Amsterdam"),
    "timestamptz_neg_inf": ("'-infinity'::timestamptz", "UTC"),
    "timestamptz_far": ("'10000-01-01 00:30:00+00'::timestamptz", "Asia/Kolkata"),
    "interval_full": ("'1 year 2 mons 3 days 04:05:06.5'::interval", None),
    "interval_mixed": ("'-1 years -2 mons +3 days -04:05:06.25'::interval", None),
    "interval_neg_day": ("'-1 days +02:03:00'::interval", None),
    "interval_zero": ("'0'::interval", None),
    "interval_neg_frac": ("'-0.5 seconds'::interval", None),
    "interval_days": ("'3 days'::interval", None),
    "interval_hours": ("'100 hours'::interval", None),
    "uuid": ("'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'::uuid", None),
    "json": ('\'{"a": [1, 2.5, null], "b": "x"}\'::json', None),
    "jsonb": ('\'{"b": {"c": true}, "a": [1, "two"]}\'::jsonb', None),
    "jsonb_big": ('\'{"big": 123456789012345678901234567890, "exact": 1.10}\'::jsonb', None),
    "jsonb_precise": ("'[0.1000000000000000055511151231257827, 3]'::jsonb", None),
    "money": ("1234.56::money", None),
    "inet": ("'192.168.0.1/24'::inet", None),
    "cidr": ("'10.0.0.0/8'::cidr", None),
    "macaddr": ("'08:00:2b:01:02:03'::macaddr", None),
    "int4range": ("'[1,10)'::int4range", None),
    "box": ("'((1,1),(0,0))'::box", None),
    "point": ("'(1.5,-2)'::point", None),
    "bit": ("B'1010'::bit(4)", None),
    "mood": ("'happy'::mood", None),
    "posint": ("5::posint", None),
    "int4_arr": ("'{1,2,NULL}'::int4[]", None),
    "int4_arr_empty": ("'{}'::int4[]", None),
    "int4_arr_2d": ("'{{1,2},{3,4}}'::int4[]", None),
    "int4_arr_bounds": ("'[0:1]={1,2}'::int4[]", None),
    "int4_arr_2d_bounds": ("'[0:1][1:1]={{7},{8}}'::int4[]", None),
    "text_arr_quoted": (
        "ARRAY['a,b', 'c\"d', NULL, 'NULL', '', 'back\\slash', ' sp ', '{x}']::text[]",
        None,
    ),
    "text_arr_unicode": ("ARRAY['héllo', 'wörld']::text[]", None),
    "varchar_arr": ("'{abc,def}'::varchar(10)[]", None),
    "numeric_arr": ("'{1.5,NULL,NaN}'::numeric[]", None),
    "float8_arr": ("'{1.5,NaN,-Infinity}'::float8[]", None),
    "bool_arr": ("'{t,f,NULL}'::bool[]", None),
    "box_arr": ("'{(1,1),(0,0);(3,3),(2,2)}'::box[]", None),
    "mood_arr": ("'{sad,happy}'::mood[]", None),
    "posint_arr": ("'{1,2}'::posint[]", None),
    "timestamptz_arr": ("'{\"2024-01-02 03:04:05+05:30\",infinity}'::timestamptz[]", "UTC"),
    "date_arr": ("'{2024-01-01,NULL}'::date[]", None),
    "interval_arr": ("ARRAY['1 day'::interval, '-00:00:01']", None),
    "jsonb_arr": ("ARRAY['{\"k\": 1}'::jsonb, '[]'::jsonb]", None),
    "bytea_arr": ("ARRAY['\\x01'::bytea, NULL]", None),
    "uuid_arr": ("ARRAY['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid]", None),
    "int4range_arr": ("ARRAY['[1,3)'::int4range, 'empty']", None),
    "composite_arr": ("ARRAY[ROW(1, 'a b')::pair, ROW(2, NULL)::pair]", None),
    "bool_arr_2d": ("'{{t},{f}}'::bool[]", None),
}
EXTRA_TYPES = "CREATE TYPE pair AS (n int, s text);"


def _execute_all(conn: psycopg.Connection[Any], script: str) -> None:
    for statement in filter(None, (s.strip() for s in script.split(";\n"))):
        conn.execute(statement)


def _changes(conn: psycopg.Connection[Any], slot: str, *options: str) -> list[dict[str, Any]]:
    placeholders = ", ".join(["%s"] * len(options))
    rows = conn.execute(
        f"SELECT lsn::text, xid::text::int8, data FROM "
        f"pg_logical_slot_peek_binary_changes(%s, NULL, NULL, {placeholders})",
        (slot, *options),
    ).fetchall()
    return [[lsn, xid, bytes(data).hex()] for lsn, xid, data in rows]


def _write(name: str, payload: dict[str, Any]) -> None:
    """Pretty JSON, except one line per message or case so the files stay small and diffable."""
    lines = []
    for key, value in payload.items():
        if isinstance(value, list):
            items = ",\n  ".join(json.dumps(item, ensure_ascii=False) for item in value)
            lines.append(f"{json.dumps(key)}: [\n  {items}\n ]")
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    text = "{\n " + ",\n ".join(lines) + "\n}\n"
    (HERE / name).write_text(text, encoding="utf-8")


def _run_v1(conn: psycopg.Connection[Any], version: str) -> None:
    conn.execute("SELECT pg_create_logical_replication_slot('cap_v1', 'pgoutput')")
    for statement in V1_TRANSACTIONS[:10]:
        with conn.transaction():
            _execute_all(conn, statement.replace("; ", ";\n"))
    # The origin must be set up in the session before the transaction it marks.
    conn.execute("SELECT pg_replication_origin_create('origin_a')")
    conn.execute("SELECT pg_replication_origin_session_setup('origin_a')")
    with conn.transaction():
        conn.execute(
            "SELECT pg_replication_origin_xact_setup('0/1234ABCD', '2024-01-01 00:00:00+00')"
        )
        conn.execute("INSERT INTO truncate_me VALUES (2)")
    conn.execute("SELECT pg_replication_origin_session_reset()")
    for statement in V1_TRANSACTIONS[10:]:
        with conn.transaction():
            conn.execute(statement)
    options = ("proto_version", "1", "publication_names", "pub", "messages", "true")
    base = {
        "server_version": version,
        "slot_options": dict(zip(options[::2], options[1::2], strict=True)),
    }
    _write("v1.json", {**base, "messages": _changes(conn, "cap_v1", *options)})
    binary = (*options, "binary", "true")
    base["slot_options"]["binary"] = "true"
    _write("v1_binary.json", {**base, "messages": _changes(conn, "cap_v1", *binary)})
    conn.execute("SELECT pg_drop_replication_slot('cap_v1')")


def _run_v2(conn: psycopg.Connection[Any], version: str) -> None:
    conn.execute("SELECT pg_create_logical_replication_slot('cap_v2', 'pgoutput')")
    for statement in V2_TRANSACTIONS:
        with conn.transaction():
            _execute_all(conn, statement.replace("; ", ";\n"))
    try:
        with conn.transaction():
            conn.execute(V2_ABORTED)
            raise _Rollback
    except _Rollback:
        pass
    conn.execute(V2_FLUSH)
    conn.execute("SET logical_decoding_work_mem = '64kB'")
    options = ("proto_version", "2", "publication_names", "pub", "messages", "true")
    options += ("streaming", "on")
    payload = {
        "server_version": version,
        "slot_options": dict(zip(options[::2], options[1::2], strict=True)),
        "logical_decoding_work_mem": "64kB",
        "messages": _changes(conn, "cap_v2", *options),
    }
    _write("v2_stream.json", payload)
    conn.execute("SELECT pg_drop_replication_slot('cap_v2')")


class _Rollback(Exception):
    pass


def _run_types(conn: psycopg.Connection[Any], version: str) -> None:
    conn.execute(EXTRA_TYPES)
    cases = [_type_case(conn, name, expr, zone) for name, (expr, zone) in TYPE_CASES.items()]
    columns = conn.execute(
        "SELECT attname::text, atttypid::int8, atttypmod, format_type(atttypid, atttypmod) "
        "FROM pg_attribute WHERE attrelid = 'all_types'::regclass AND attnum > 0 ORDER BY attnum"
    ).fetchall()
    oids = [oid for _, oid, _, _ in columns] + [case["oid"] for case in cases]
    from connectors.postgres.types import TYPE_QUERY

    catalog = conn.execute(TYPE_QUERY, (sorted(set(oids)),)).fetchall()
    _write(
        "types.json",
        {
            "server_version": version,
            "session": TEXT_SETTINGS,
            "cases": cases,
            "columns": [
                dict(zip(("name", "oid", "typmod", "format_type"), c, strict=True)) for c in columns
            ],
            "catalog": [list(row) for row in catalog if row[0] >= 16384],
        },
    )


def _type_case(
    conn: psycopg.Connection[Any], name: str, expr: str, zone: str | None
) -> dict[str, Any]:
    """One value's text output, its type's OID and ``format_type``, in time zone ``zone``."""
    conn.execute(f"SET TimeZone = '{zone or 'UTC'}'")
    cur = conn.execute(
        f"SELECT {expr}, pg_typeof({expr})::oid::int8, format_type(pg_typeof({expr}), NULL)"
    )
    # The raw text results are the types' output functions, what pgoutput sends. Not
    # 'expr::text': that casts bool to 'true' and strips bpchar's padding.
    result = cur.pgresult
    assert result is not None
    text, oid, formatted = (
        None if raw is None else bytes(raw).decode()
        for raw in (result.get_value(0, i) for i in range(3))
    )
    oid = int(oid) if oid is not None else None
    return {
        "name": name,
        "expr": expr,
        "timezone": zone,
        "oid": oid,
        "format_type": formatted,
        "text": text,
    }


def main(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        _execute_all(conn, TEXT_SETTINGS.replace("; ", ";\n"))
        _execute_all(conn, SCHEMA)
        _run_v1(conn, version)
        _run_v2(conn, version)
        _run_types(conn, version)


if __name__ == "__main__":
    main(sys.argv[1])
