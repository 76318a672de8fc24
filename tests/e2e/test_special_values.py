"""Values past the ordinary through ``cdc run`` and ``cdc verify``, on real PostgreSQL and Redis.

An unconstrained ``numeric`` holding ``NaN`` and the infinities, dates and timestamps BC, past
year 9999 and infinite, and ``jsonb`` scalars (a string, a number, a bool, JSON's ``null``
beside SQL NULL), snapshotted and streamed under each ``decimal.handling.mode``, into DuckDB,
Redis and the search index. Every sink keeps running, DuckDB holds each value faithfully
(PostgreSQL's text for the numeric, which DuckDB's DECIMAL cannot hold), ``cdc verify`` finds
every sink equal to the source, and when the source then changes one BC timestamp by a
microsecond and one JSON ``null`` into SQL NULL, it reports exactly those as different.
"""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE
from sinks.duckdb import read_rows as duckdb_rows
from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.sinks_kit import execute, redis_url, status, three_sinks_pipeline

__all__ = ["redis_url"]  # the fixture

#: The server's types decide what each sink holds: CI runs this on every full version too.
pytestmark = pytest.mark.pgtypes

PIPELINE = "sv"
TABLE = "public.special"
SETTINGS = {
    "string": READABLE,
    "precise": DEBEZIUM_DEFAULTS,
    "double": READABLE.model_copy(update={"decimal_handling_mode": "double"}),
}
COLUMNS = "id int PRIMARY KEY, n numeric, d date, ts timestamp, tstz timestamptz, doc jsonb"
SNAPSHOT = (
    "(1, 'Infinity', '0044-03-15 BC', '0044-03-15 13:45:30.123456 BC',"
    " '0044-03-15 10:00:00+00 BC', '\"str\"')",
    "(2, '-Infinity', '12345-01-01', '12345-01-01 00:00:00', '12345-06-30 12:00:00+00', '42')",
    "(3, 'NaN', 'infinity', 'infinity', 'infinity', 'true')",
)
STREAM = (
    "(4, 1.5, '-infinity', '-infinity', '-infinity', 'null')",
    "(5, NULL, NULL, NULL, NULL, NULL)",
    "(6, 0.25, '4713-01-01 BC', '0001-01-01 00:00:00.5 BC', '0044-03-15 12:00:00+02 BC',"
    ' \'{"b": [1, "x"], "a": null}\')',
    "(7, 'Infinity', '2024-02-29', '2024-02-29 13:45:30', '2024-02-29 13:45:30+00', '\"\"')",
)
SPECIAL = {1: "Infinity", 2: "-Infinity", 3: "NaN", 7: "Infinity"}


@pytest.fixture
def scene(pg_db: str, redis_url: str, tmp_path: Path) -> Any:
    execute(
        pg_db,
        f"CREATE TABLE {TABLE} ({COLUMNS})",
        f"INSERT INTO {TABLE} VALUES {', '.join(SNAPSHOT)}",
    )
    env = {"PG_DSN": pg_db, "REDIS_URL": redis_url, "PREFIX": uuid.uuid4().hex[:8]}
    made: list[Path] = []
    yield env, made
    for pipeline in made:
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)


def _verify(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> tuple[int, list[Any]]:
    result = cdc("verify", str(pipeline), "--json", "--wait", "60", cwd=tmp_path, env=env)
    assert result.stdout, result.stderr  # a report, never a traceback
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, orjson.loads(result.stdout)


def _applied(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> bool:
    sinks = status(pipeline, tmp_path, env)["sinks"]
    assert all(s.get("state") == "running" for s in sinks), sinks
    warehouse = tmp_path / "out.duckdb"
    return all(s["lag"] == 0 for s in sinks) and warehouse.exists()


@pytest.mark.parametrize("mode", list(SETTINGS))
def test_special_values_reach_every_sink_and_verify(scene: Any, tmp_path: Path, mode: str) -> None:
    env, made = scene
    pipeline = three_sinks_pipeline(tmp_path, PIPELINE, TABLE, SETTINGS[mode])
    made.append(pipeline)
    run = start_run(pipeline, tmp_path, env)
    try:
        execute(env["PG_DSN"], *(f"INSERT INTO {TABLE} VALUES {row}" for row in STREAM))
        code, report = _verify(tmp_path, pipeline, env)
        assert code == 0, orjson.dumps(report).decode()
        assert sorted((r["sink"], r["state"]) for r in report) == [
            ("cache", "ok"),
            ("search", "ok"),
            ("warehouse", "ok"),
        ]
        wait_for(lambda: _applied(tmp_path, pipeline, env), 30, process=run)
    finally:
        stopped = stop(run)[0]
    assert stopped == 0, (tmp_path / "run.log").read_text()[-3000:]
    _check_duckdb(tmp_path, mode)
    _check_differences_are_found(tmp_path, pipeline, env)


def _check_duckdb(tmp_path: Path, mode: str) -> None:
    rows = {k["id"]: r for k, r in duckdb_rows(tmp_path / "out.duckdb", "public", "special")}
    for key, text in SPECIAL.items():  # PostgreSQL's text; Debezium's precise mode has null
        assert rows[key]["n"] == (None if mode == "precise" else text), (key, rows[key])
    assert rows[4]["n"] == "1.5" and rows[5]["n"] is None
    assert rows[1]["ts"] == "0044-03-15 13:45:30.123456 BC"
    assert rows[1]["d"] == "0044-03-15 BC"
    assert rows[2]["d"] == "12345-01-01"
    assert rows[3]["ts"] == "infinity" and rows[4]["tstz"] == "-infinity"
    assert rows[7]["ts"] == dt.datetime(2024, 2, 29, 13, 45, 30)
    texts = {
        k["id"]: r["doc"]
        for k, r in duckdb_rows(tmp_path / "out.duckdb", "public", "special", json_text=True)
    }
    assert texts[1] == '"str"' and texts[2] == "42" and texts[3] == "true"
    assert texts[4] == "null" and texts[5] is None  # JSON's null is no SQL NULL
    assert texts[7] == '""'


def _check_differences_are_found(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> None:
    """With the pipeline stopped, the source changes; verify names those keys and columns."""
    execute(
        env["PG_DSN"],
        f"UPDATE {TABLE} SET ts = '0044-03-15 13:45:30.123457 BC' WHERE id = 1",
        f"UPDATE {TABLE} SET doc = NULL WHERE id = 4",
        f"UPDATE {TABLE} SET tstz = '12345-06-30 12:00:01+00' WHERE id = 2",
    )
    code, report = _verify(tmp_path, pipeline, env)
    assert code == 1, report
    for result in report:
        assert result["state"] == "different", result
        assert sorted(d["key"]["id"] for d in result["details"]) == [1, 2, 4], result
        columns = {d["key"]["id"]: sorted(d["columns"]) for d in result["details"]}
        assert columns == {1: ["ts"], 2: ["tstz"], 4: ["doc"]}, result
