"""Capture the real Debezium's records for one tricky workload, under five settings combinations.

Starts a throwaway PostgreSQL (Debian's 15, ``wal_level=logical``), and for each setting below a
fresh database with two tables of every common type and a composite primary key, ``tricky``
(REPLICA IDENTITY DEFAULT) and ``tricky_full`` (FULL), three rows in each. Debezium 3.6.1 then
snapshots them and streams an insert, an update, a primary-key update, an update that leaves a
TOASTed value unchanged and a delete on each, a truncate of ``tricky`` and a last insert (so a
skipped truncate is seen skipped, not late). Its records go to ``expected/<setting>.jsonl``,
each line exactly as the runner wrote it (the JsonConverter's bytes). The differential tests of
issue 14 compare ours with these::

    .venv/bin/python tests/debezium/capture.py            # every setting
    .venv/bin/python tests/debezium/capture.py readable   # one

The snapshot rows' ``ts_ms``/``ts_us``/``ts_ns``, ``source.ts_*``, ``txId``, ``lsn`` and
``sequence`` differ from run to run; so do the streamed ones' times and positions.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.services.debezium import DebeziumRun  # noqa: E402
from tests.services.postgres import LocalPostgres  # noqa: E402

HERE = Path(__file__).parent
EXPECTED = HERE / "expected"

#: Settings combinations: name -> properties over the harness's defaults.
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
    # The other modes: Kafka Connect's own temporal types, doubles, hex bytes.
    "connect_double_hex": {
        "decimal.handling.mode": "double",
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

COLUMNS = """
    id int4 NOT NULL, region text NOT NULL,
    c_int2 int2, c_int4 int4, c_int8 int8,
    c_numeric numeric(12,2), c_numeric_var numeric, c_float8 float8, c_float4 float4,
    c_text text, c_varchar varchar(20), c_bytea bytea, c_uuid uuid,
    c_date date, c_time time, c_time3 time(3), c_timetz timetz,
    c_timestamp timestamp, c_timestamp3 timestamp(3), c_timestamptz timestamptz,
    c_interval interval, c_json json, c_jsonb jsonb, c_mood mood,
    c_int_arr int4[], c_int_2d int4[][], c_bool bool, c_toast text,
    PRIMARY KEY (id, region)
"""

ROW_1 = """(1, 'eu', 32767, 2147483647, 9223372036854775807,
    1234567890.12, 3.14159265358979, 'Infinity', 1.5,
    E'hello "world"\\n\\ttab', 'vc', '\\x00ff10', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
    '2024-02-29', '13:45:30.123456', '13:45:30.123', '13:45:30.5+02',
    '2024-02-29 13:45:30.123456', '2024-02-29 13:45:30.123', '2024-02-29 13:45:30.5+00',
    '1 year 2 mons 3 days 04:05:06.789', '{"a": [1, 2.50, null]}', '{"b": {"c": true}}', 'happy',
    '{1,2,3}', '{{1,2},{3,4}}', true, 'short')"""

ROW_2 = """(2, 'us', -32768, -2147483648, -9223372036854775808,
    'NaN', 'NaN', 'NaN', '-Infinity',
    '', '', '\\x', '00000000-0000-0000-0000-000000000000',
    '1969-12-31', '00:00:00', '23:59:59.999', '23:59:59-05:30',
    '1969-12-31 23:59:59.999999', '1969-12-31 23:59:59.999', '2024-06-30 23:59:59.999999-07',
    '-1 day -1 second', '[]', '"str"', 'sad',
    '{}', '{{5,6,7},{8,9,10}}', false, repeat('x', 10000))"""

ROW_4 = """(4, 'mid', 0, 0, 0,
    -0.01, 100000000000000000000, 0, 0,
    'unicode é 😀', 'x', '\\x0102030405060708090a0b0c0d0e0f10',
    'ffffffff-ffff-ffff-ffff-ffffffffffff',
    '2000-01-01', '23:59:59.999999', '00:00:00', '00:00:00+00',
    '9999-12-31 23:59:59.999999', '2000-01-01 00:00:00', '2000-01-01 00:00:00+00',
    '0', '{"u": "é"}', '{}', 'ok',
    '{NULL,-1}', '{{NULL}}', NULL, NULL)"""

ROW_3 = "(3, 'ap', NULL, NULL, NULL, NULL, NULL, '-Infinity', NULL, NULL, NULL, NULL, NULL, " + (
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
)

#: Streamed changes of one table; {t} is the table. Records: c, u, d+tombstone+c, u, d+tombstone.
STREAM = [
    "INSERT INTO {t} VALUES " + ROW_3,
    "UPDATE {t} SET c_int4 = 42, c_numeric = 0.10, c_numeric_var = -0.000123, c_text = 'updated',"
    " c_interval = '1 mon -2 days 03:00:00', c_timestamptz = '2000-01-01 00:00:00+00',"
    " c_bytea = '\\xdeadbeef', c_json = '{\"k\": 1}' WHERE id = 3",
    "UPDATE {t} SET region = 'apac' WHERE id = 3 AND region = 'ap'",
    "UPDATE {t} SET c_int2 = 7 WHERE id = 2",
    "DELETE FROM {t} WHERE id = 1",
]
#: Records of one table's STREAM.
STREAM_RECORDS = 8
SNAPSHOT_RECORDS = 6


def prepare(dsn: str) -> None:
    """Creates the type, the two tables and their snapshot rows."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        for table in ("tricky", "tricky_full"):
            conn.execute(f"CREATE TABLE {table} ({COLUMNS})")
            conn.execute(f"ALTER TABLE {table} ALTER COLUMN c_toast SET STORAGE EXTERNAL")
            conn.execute(f"INSERT INTO {table} VALUES {ROW_1}, {ROW_4}, {ROW_2}")
        conn.execute("ALTER TABLE tricky_full REPLICA IDENTITY FULL")


def stream(dsn: str) -> None:
    """Makes the streamed changes, one transaction per statement."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("tricky", "tricky_full"):
            for statement in STREAM:
                conn.execute(statement.replace("{t}", table))
        conn.execute("TRUNCATE tricky")
        conn.execute("INSERT INTO tricky (id, region, c_int4) VALUES (9, 'zz', 9)")


def capture(pg: LocalPostgres, setting: str) -> Path:
    """Runs one setting on its own database and writes its expected file."""
    dbname = pg.create_database(f"dbz_{setting}")
    dsn = pg.dsn_for(dbname=dbname)
    prepare(dsn)
    props = {
        "slot.name": f"dbz_{setting}",
        "publication.name": f"dbz_{setting}",
        "table.include.list": "public.tricky,public.tricky_full",
        **SETTINGS[setting],
    }
    truncates = 0 if "skipped.operations" not in props else 1
    expect = SNAPSHOT_RECORDS + 2 * STREAM_RECORDS + truncates + 1
    with (
        tempfile.TemporaryDirectory(prefix=f"dbz-{setting}-") as tmp,
        DebeziumRun(dsn, props, tmp, max_records=expect) as run,
    ):
        run.wait_streaming(dsn, 180)
        run.wait_for(SNAPSHOT_RECORDS, 60)
        stream(dsn)
        run.wait_for(expect, 120)
        lines = run.lines()[:expect]
    EXPECTED.mkdir(exist_ok=True)
    out = EXPECTED / f"{setting}.jsonl"
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    pg.drop_database(dbname)
    return out


def main(argv: list[str]) -> int:
    settings = argv or list(SETTINGS)
    with LocalPostgres() as pg:
        for setting in settings:
            out = capture(pg, setting)
            print(f"{out.relative_to(ROOT)}: {len(out.read_text().splitlines())} records")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
