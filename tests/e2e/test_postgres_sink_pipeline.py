"""PostgreSQL to PostgreSQL through the CLI: a random workload over every common type, a table
with a composite key and unchanged TOAST, primary-key updates, and two SIGKILLs of ``cdc run``
mid-work; then ``cdc verify`` and the target compared with the source row by row, typed, and
the history (``mode: history``) without a duplicate version.

The target is another database of the same server. The comparison copies each source table
byte for byte (binary ``COPY``) into the target database and compares every column with
``IS NOT DISTINCT FROM`` on the target's types, never as text: an enum or a domain is text in
the target (compared as its text), a ``timetz`` arrives in UTC (compared at UTC), and ``json``,
which has no equality, by its text (which Debezium's envelope carries unchanged).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql

from tests.e2e.cli_helpers import cdc, start_run, stop
from tests.e2e.shop_workload import DDL, Workload, create
from tests.e2e.test_pg_all_sinks import (
    kill_mid_work,
    table_records,
    wait_caught_up,
    wait_status,
)

TABLES = ("everything", "lines")


@pytest.fixture
def target_db(pg_server: Any) -> Iterator[str]:
    name = f"target_{uuid.uuid4().hex[:10]}"
    pg_server.create_database(name)
    try:
        yield pg_server.dsn_for(dbname=name)
    finally:
        pg_server.drop_database(name)


@pytest.fixture
def registered() -> None:
    """``cdc`` finds the ``postgres`` sink by its installed entry point, as a user's does (a
    checkout installed before it was added needs ``pip install -e .`` again)."""
    installed = {ep.name for ep in entry_points(group="cdc.sinks")}
    assert "postgres" in installed, f"the postgres sink is not installed: {sorted(installed)}"


def _pipeline(tmp_path: Path) -> Path:
    path = tmp_path / "shop.yaml"
    path.write_text(
        "version: 1\nname: shop\nsource:\n  type: postgres\n  dsn: ${PG_DSN}\n"
        "  tables: [public.everything, public.lines]\n  snapshot: initial\n"
        "  status_interval_s: 1\n"
        "sinks:\n"
        "  - name: replica\n    type: postgres\n    dsn: ${TARGET_DSN}\n    schema: replica\n"
        "    mode: history\n"
    )
    return path


def test_postgres_to_postgres_after_two_sigkills_equals_the_source_typed(
    pg_db: str, target_db: str, registered: None, tmp_path: Path
) -> None:
    create(pg_db, rows=1000)
    env = {"PG_DSN": pg_db, "TARGET_DSN": target_db}
    pipeline = _pipeline(tmp_path)
    workload = Workload(pg_db)
    workload.start()
    try:
        rng, records = random.Random(7), 0
        for _ in range(2):
            process = start_run(pipeline, tmp_path, env)
            records = kill_mid_work(process, workload, tmp_path, pipeline, env, records, rng)
        process = start_run(pipeline, tmp_path, env)
        more = records + 50  # the last run streams the workload too before it stops
        wait_status(process, tmp_path, pipeline, env, lambda r: table_records(r) >= more)
    finally:
        workload.stop()
    wait_caught_up(process, tmp_path, pipeline, env, pg_db, timeout=240)
    _verify(tmp_path, pipeline, env)
    assert stop(process)[0] == 0, (tmp_path / "run.log").read_text()[-3000:]
    _copy_source(pg_db, target_db)
    for table in TABLES:
        assert _differences(target_db, table) == {}, table
    with psycopg.connect(target_db, autocommit=True) as conn:
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM replica.everything), (SELECT count(*) FROM replica.lines)"
        ).fetchone()
        assert counts is not None and counts[0] > 900 and counts[1] > 150
        # The comparison sees a difference of one value in one row.
        conn.execute(
            "UPDATE replica.everything SET n = n + 1 WHERE id = "
            "(SELECT min(id) FROM replica.everything WHERE n IS NOT NULL)"
        )
    assert _differences(target_db, "everything") == {"n": 1}
    _assert_history_has_no_duplicates(target_db)
    cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)


def _assert_history_has_no_duplicates(target: str) -> None:
    """Three runs, two killed mid-work: each change is one version, and exactly the current
    rows are open versions."""
    with psycopg.connect(target) as conn:
        for table, key in (("everything", "id"), ("lines", "order_id, line_no")):
            duplicates = conn.execute(
                f"SELECT count(*) FROM (SELECT {key}, _cdc_pos, _cdc_seq FROM "  # test SQL
                f"replica.{table}__history GROUP BY {key}, _cdc_pos, _cdc_seq "
                "HAVING count(*) > 1) AS d".encode()
            ).fetchone()
            assert duplicates == (0,), table
            open_versions = conn.execute(
                f"SELECT count(*) FROM replica.{table}__history WHERE valid_to IS NULL".encode()
            ).fetchone()
            current = conn.execute(f"SELECT count(*) FROM replica.{table}".encode()).fetchone()
            assert open_versions == current, table


def _verify(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> None:
    result = cdc("verify", str(pipeline), "--json", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    report = orjson.loads(result.stdout)
    assert {(r["sink"], r["ok"]) for r in report} == {("replica", True)}, report


def _copy_source(source: str, target: str) -> None:
    """The source's tables, byte for byte, into the target database's ``public`` schema."""
    with psycopg.connect(source) as src, psycopg.connect(target, autocommit=True) as dst:
        dst.execute(DDL)
        for table in TABLES:
            name = sql.Identifier("public", table)
            with (
                src.cursor().copy(sql.SQL("COPY {} TO STDOUT (FORMAT binary)").format(name)) as out,
                dst.cursor().copy(
                    sql.SQL("COPY {} FROM STDIN (FORMAT binary)").format(name)
                ) as into,
            ):
                for block in out:
                    into.write(block)


def _differences(target: str, table: str) -> dict[str, int]:
    """By column, how many keys differ between ``public.<table>`` and ``replica.<table>``."""
    with psycopg.connect(target) as conn:
        types = dict(
            conn.execute(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE "
                "attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
                "AND attname NOT LIKE '\\_cdc\\_%%'",
                [f"replica.{table}"],
            ).fetchall()
        )
        keys = [r[0] for r in conn.execute(_KEYS, [f"replica.{table}"])]
        counts = {}
        for column, kind in types.items():
            found = conn.execute(_differing(table, keys, column, kind)).fetchone()
            if found is not None and found[0]:
                counts[column] = int(found[0])
    return counts


_KEYS = (
    "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
    "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary"
)


def _differing(table: str, keys: list[str], column: str, kind: str) -> sql.Composed:
    name = sql.Identifier(column)
    left: sql.Composable = sql.SQL("e.{}::{}").format(name, sql.SQL(kind))
    right: sql.Composable = sql.SQL("t.{}").format(name)
    if kind == "json":  # no equality operator: its text is its value
        left, right = sql.SQL("{}::text").format(left), sql.SQL("{}::text").format(right)
    if kind == "time with time zone":  # Debezium's encoding keeps the instant, in UTC
        left = sql.SQL("({} AT TIME ZONE 'UTC')").format(left)
        right = sql.SQL("({} AT TIME ZONE 'UTC')").format(right)
    on = sql.SQL(" AND ").join(sql.SQL("e.{k} = t.{k}").format(k=sql.Identifier(k)) for k in keys)
    missing = sql.SQL(" OR ").join(
        sql.SQL("{}.{} IS NULL").format(sql.Identifier(side), sql.Identifier(keys[0]))
        for side in ("e", "t")
    )
    return sql.SQL(
        "SELECT count(*) FROM public.{table} e FULL JOIN replica.{table} t ON {on} "
        "WHERE {missing} OR {left} IS DISTINCT FROM {right}"
    ).format(table=sql.Identifier(table), on=on, missing=missing, left=left, right=right)
