"""Deletes under REPLICA IDENTITY DEFAULT into DuckDB, current and history mode, through the CLI
on a real PostgreSQL.

A delete's ``before`` then holds the key and Debezium's placeholders (``0``, ``""``) for the
other NOT NULL columns; every NOT NULL numeric, temporal, uuid, interval and json column of the
table would refuse them. The deletes share their transaction with inserts and updates (one
deletes a row inserted in it), under the readable envelope and under Debezium's defaults. Both
sinks keep running, ``cdc verify`` finds them equal to the source, the current table holds the
source's typed values, and the history records each delete as a tombstone: its key, NULL
elsewhere.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg
import pytest
import yaml

from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE
from tests.e2e.cli_helpers import cdc, start_run, stop
from tests.e2e.sinks_kit import execute

PIPELINE = "dels"
TYPED = (
    "amount numeric(10,2) NOT NULL, day date NOT NULL, at time NOT NULL, "
    "stamp timestamp NOT NULL, stamp_tz timestamptz NOT NULL, clock_tz timetz NOT NULL, "
    "uid uuid NOT NULL, span interval NOT NULL, doc json NOT NULL, docb jsonb NOT NULL"
)
NAMES = ("amount", "day", "at", "stamp", "stamp_tz", "clock_tz", "uid", "span", "doc", "docb")
QUOTED = ", ".join(f'"{name}"' for name in NAMES)  # ``at`` is a keyword of DuckDB's


def _values(n: int) -> str:
    """A row's values after its id: distinct per ``n``, none a placeholder."""
    return (
        f"{n}.25, '2024-02-{n:02d}', '13:45:{n:02d}.5', '2024-02-29 13:45:{n:02d}.123456', "
        f"'2024-02-29 13:45:{n:02d}.5+00', '13:45:{n:02d}+02', '{uuid.UUID(int=n)}', "
        f"'{n} days 04:05:06.5', '{{\"n\": {n}}}', '{{\"m\": [{n}, null]}}'"
    )


def _pipeline(tmp_path: Path, dsn: str, envelope: dict[str, Any]) -> Path:
    data = {
        "version": 1,
        "name": PIPELINE,
        "envelope": envelope,
        "source": {"type": "postgres", "dsn": dsn, "tables": ["public.acct"]},
        "log": {"type": "embedded", "path": str(tmp_path / "log")},
        "sinks": [
            {"name": "current", "type": "duckdb", "path": str(tmp_path / "current.duckdb")},
            {
                "name": "history",
                "type": "duckdb",
                "path": str(tmp_path / "history.duckdb"),
                "mode": "history",
            },
        ],
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _verify(tmp_path: Path, pipeline: Path) -> list[dict[str, Any]]:
    result = cdc("verify", str(pipeline), "--json", "--wait", "60", cwd=tmp_path)
    assert result.stdout, result.stderr
    report: list[dict[str, Any]] = orjson.loads(result.stdout)
    assert result.returncode == 0, (report, result.stderr[-3000:])
    return report


def _source(dsn: str) -> dict[int, dict[str, Any]]:
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return {r["id"]: r for r in cur.execute(f"SELECT id, {', '.join(NAMES)} FROM acct")}


def _duckdb(path: Path, query: str) -> list[dict[str, Any]]:
    with duckdb.connect(str(path), read_only=True) as db:
        db.execute("SET TimeZone = 'UTC'")
        cursor = db.execute(query)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _assert_current_equals(dsn: str, path: Path) -> None:
    expected = _source(dsn)
    got = {r["id"]: r for r in _duckdb(path, f"SELECT id, {QUOTED} FROM public.acct")}
    assert got.keys() == expected.keys()
    for key, row in expected.items():
        mine = got[key]
        for name in NAMES:
            value = mine[name]
            if name in ("doc", "docb"):
                value = orjson.loads(value)
            assert value == row[name], (key, name, value, row[name])


@pytest.mark.parametrize("envelope", ["readable", "debezium"])
def test_deletes_beside_inserts_and_updates_keep_duckdb_running(
    pg_db: str, tmp_path: Path, envelope: str
) -> None:
    options = (READABLE if envelope == "readable" else DEBEZIUM_DEFAULTS).encoding()
    execute(
        pg_db,
        f"CREATE TABLE acct (id int PRIMARY KEY, {TYPED}, note text)",
        "ALTER TABLE acct REPLICA IDENTITY DEFAULT",
        *(f"INSERT INTO acct VALUES ({n}, {_values(n)}, 'n{n}')" for n in range(1, 6)),
    )
    pipeline = _pipeline(tmp_path, pg_db, options)
    run = start_run(pipeline, tmp_path)
    try:
        _verify(tmp_path, pipeline)  # the snapshot is in both sinks
        with psycopg.connect(pg_db) as conn:  # one transaction
            conn.execute(f"INSERT INTO acct VALUES (6, {_values(6)}, 'n6')")
            conn.execute(f"INSERT INTO acct VALUES (7, {_values(7)}, NULL)")
            conn.execute("UPDATE acct SET amount = 99.99, note = 'u' WHERE id = 2")
            conn.execute("DELETE FROM acct WHERE id IN (1, 6)")
            conn.execute("UPDATE acct SET doc = '[1]' WHERE id = 7")
        execute(pg_db, "DELETE FROM acct WHERE id = 3")  # a transaction of one delete
        report = _verify(tmp_path, pipeline)
        assert sorted((r["sink"], r["state"]) for r in report) == [
            ("current", "ok"),
            ("history", "ok"),
        ]
        assert run.poll() is None, "cdc run stopped"
    finally:
        assert stop(run)[0] == 0
    _assert_current_equals(pg_db, tmp_path / "current.duckdb")
    _assert_current_equals(pg_db, tmp_path / "history.duckdb")
    tombstones = _duckdb(
        tmp_path / "history.duckdb",
        f"SELECT id, note, {QUOTED} FROM public.acct__history WHERE op = 'd' ORDER BY id",
    )
    assert [r["id"] for r in tombstones] == [1, 3, 6]
    assert all(value is None for r in tombstones for k, value in r.items() if k != "id")
