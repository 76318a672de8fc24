"""An accepted envelope change, through the CLI, on real PostgreSQL and Redis: every reader
decodes each record with the encoding it was written under.

Rows are written under Debezium's defaults (precise decimals as base64, epoch days, µs times and
intervals, schemas), then ``cdc run --accept-envelope-change`` goes on under the readable
settings with hex bytes. A DuckDB sink that was there all along, one added after the change
(it reads the whole log: both encodings in one batch) and Redis hold every row of both eras
right, and ``cdc verify`` finds each equal to the source; on the embedded and the Kafka log.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg
import pytest
import yaml

from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE, EnvelopeOptions
from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.sinks_kit import Cache, execute, redis_url, status

__all__ = ["redis_url"]  # the fixture

TABLE = "public.typed"
BEFORE = DEBEZIUM_DEFAULTS
AFTER = READABLE.model_copy(update={"binary_handling_mode": "hex"})
COLUMNS = (
    "id int PRIMARY KEY, price numeric(12,2), ratio numeric, day date, stamp timestamp, "
    "at_time time, span interval, blob bytea, note text"
)
TYPED = "id, price, ratio, day, stamp, at_time, span, blob, note"


def _row(n: int) -> str:
    return (
        f"({n}, {n}234567.8{n}, {n}.14159265358979, '2024-02-2{n}', "
        f"'2024-02-2{n} 13:45:30.12345{n}', '13:45:3{n}.5', '{n} days 04:05:06', "
        f"'\\xdeadbeef0{n}', 'row {n}')"
    )


def _pipeline(tmp_path: Path, log: dict[str, Any], options: EnvelopeOptions, late: bool) -> Path:
    sinks: list[dict[str, Any]] = [
        {"name": "cache", "type": "redis", "url": "${REDIS_URL}", "key_prefix": "${PREFIX}"},
        {"name": "warehouse", "type": "duckdb", "path": str(tmp_path / "warehouse.duckdb")},
    ]
    if late:  # added after the change: it reads both encodings from the start of the log
        sinks.append({"name": "late", "type": "duckdb", "path": str(tmp_path / "late.duckdb")})
    data = {
        "version": 1,
        "name": log.pop("name"),
        "envelope": options.properties(),
        "source": {"type": "postgres", "dsn": "${PG_DSN}", "tables": [TABLE]},
        "log": log,
        "sinks": sinks,
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(params=["embedded", "kafka"])
def scene(request: pytest.FixtureRequest, pg_db: str, redis_url: str, tmp_path: Path) -> Any:
    name = f"chg{uuid.uuid4().hex[:8]}"
    if request.param == "embedded":
        log: dict[str, Any] = {"type": "embedded", "path": str(tmp_path / "log")}
    else:
        server: Any = request.getfixturevalue("kafka_server")
        log = {"type": "kafka", "bootstrap_servers": server.bootstrap_servers, "partitions": 3}
    execute(pg_db, f"CREATE TABLE {TABLE} ({COLUMNS})", f"INSERT INTO {TABLE} VALUES {_row(1)}")
    env = {"PG_DSN": pg_db, "REDIS_URL": redis_url, "PREFIX": uuid.uuid4().hex[:8]}
    made: list[Path] = []
    yield env, {"name": name, **log}, made
    for pipeline in made:
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)


def _verified(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    result = cdc("verify", str(pipeline), "--json", "--wait", "60", cwd=tmp_path, env=env)
    assert result.stdout, result.stderr
    report: list[dict[str, Any]] = orjson.loads(result.stdout)
    assert result.returncode == 0, report
    return report


def test_rows_of_both_encodings_are_read_right(scene: Any, tmp_path: Path) -> None:
    env, log, made = scene
    pipeline = _pipeline(tmp_path, dict(log), BEFORE, late=False)
    made.append(pipeline)
    run = start_run(pipeline, tmp_path, env)
    try:
        execute(env["PG_DSN"], f"INSERT INTO {TABLE} VALUES {_row(2)}, {_row(3)}")
        wait_for(lambda: set(_redis_rows(env)) == {1, 2, 3}, 90, process=run)
        states = [(r["sink"], r["state"]) for r in _verified(tmp_path, pipeline, env)]
        assert sorted(states) == [("cache", "ok"), ("warehouse", "ok")]
    finally:
        assert stop(run)[0] == 0
    before = _redis_rows(env)
    assert before[1]["price"] != "1234567.81"  # precise: base64 of the unscaled value

    _pipeline(tmp_path, dict(log), AFTER, late=True)
    run = start_run(pipeline, tmp_path, env, "--accept-envelope-change")
    try:
        execute(
            env["PG_DSN"],
            f"INSERT INTO {TABLE} VALUES {_row(4)}",
            f"UPDATE {TABLE} SET note = 'three' WHERE id = 3",
        )
        wait_for(lambda: _redis_rows(env).get(3, {}).get("note") == "three", 90, process=run)
        report = _verified(tmp_path, pipeline, env)
        assert sorted((r["sink"], r["state"]) for r in report) == [
            ("cache", "ok"),
            ("late", "ok"),
            ("warehouse", "ok"),
        ]
        stored = status(pipeline, tmp_path, env)["envelope"]["stored"]
        assert stored["options"] == AFTER.encoding() and stored["since"]
    finally:
        assert stop(run)[0] == 0
    source = _source_rows(env["PG_DSN"])
    assert set(source) == {1, 2, 3, 4}
    for sink in ("warehouse", "late"):
        assert _duckdb_rows(tmp_path / f"{sink}.duckdb") == source, sink
    after = _redis_rows(env)
    assert after[1] == before[1] and after[2] == before[2]  # as written, under the old one
    assert after[4]["price"] == "4234567.84" and after[4]["blob"] == "deadbeef04"
    assert after[4]["day"] == "2024-02-24Z"


def _source_rows(dsn: str) -> dict[int, tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT {TYPED} FROM {TABLE}").fetchall()  # type: ignore[arg-type]
    return {row[0]: tuple(row) for row in rows}


def _duckdb_rows(path: Path) -> dict[int, tuple[Any, ...]]:
    with duckdb.connect(str(path), read_only=True) as db:
        rows = db.execute(f'SELECT {TYPED} FROM "public"."typed"').fetchall()
    # numeric without a typmod is text in DuckDB; bytea a BLOB (bytes, as psycopg gives)
    return {
        row[0]: (row[0], row[1], Decimal(row[2]), *row[3:7], bytes(row[7]), row[8]) for row in rows
    }


def _redis_rows(env: dict[str, str]) -> dict[int, dict[str, Any]]:
    return Cache(env["REDIS_URL"], env["PREFIX"]).rows(TABLE)
