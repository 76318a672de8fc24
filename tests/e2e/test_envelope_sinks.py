"""Every sink under each envelope encoding, through the CLI, on real PostgreSQL and Redis.

One table of the types whose encoding the ``envelope:`` block changes runs through ``cdc run``
into Redis, DuckDB and the search index, under the readable settings, Debezium's defaults
(precise decimals, epoch days and µs, µs intervals, schemas) and connect/double/hex. DuckDB holds
the same typed values under each, Redis and search hold the row as the envelope carries it
(without the schema wrapper), and ``cdc verify`` finds every sink equal to the source. A log
written under one encoding refuses a run under another, until the change is accepted.
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE, EnvelopeOptions
from sinks.duckdb import read_rows as duckdb_rows
from sinks.search import SearchSinkConfig, SearchSinkPlugin
from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.sinks_kit import Cache, execute, redis_url, status, three_sinks_pipeline

__all__ = ["redis_url"]  # the fixture

PIPELINE = "env"
TABLE = "public.typed"
CONNECT_DOUBLE_HEX = DEBEZIUM_DEFAULTS.model_copy(
    update={
        "decimal_handling_mode": "double",
        "time_precision_mode": "connect",
        "binary_handling_mode": "hex",
    }
)
SETTINGS = {"readable": READABLE, "debezium": DEBEZIUM_DEFAULTS, "connect": CONNECT_DOUBLE_HEX}

COLUMNS = (
    "id int PRIMARY KEY, price numeric(12,2), ratio numeric, day date, at_time time, "
    "at_ms time(3), stamp timestamp, stamp_tz timestamptz, clock_tz timetz, span interval, "
    "blob bytea, doc jsonb, note text"
)
ROW = (
    "(1, 1234567890.12, 3.14159265358979, '2024-02-29', '13:45:30.123456', '13:45:30.123', "
    "'2024-02-29 13:45:30.123456', '2024-02-29 13:45:30.5+00', '13:45:30.5+02', "
    "'1 year 2 mons 3 days 04:05:06.789', '\\xdeadbeef', '{\"a\": [1, 2.5]}', 'one')"
)
UTC = dt.UTC


@pytest.fixture
def scene(pg_db: str, redis_url: str, tmp_path: Path) -> Any:
    execute(pg_db, f"CREATE TABLE {TABLE} ({COLUMNS})", f"INSERT INTO {TABLE} VALUES {ROW}")
    env = {"PG_DSN": pg_db, "REDIS_URL": redis_url, "PREFIX": uuid.uuid4().hex[:8]}
    made: list[Path] = []
    yield env, made
    for pipeline in made:
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)


def _verified(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    result = cdc("verify", str(pipeline), "--json", "--wait", "60", cwd=tmp_path, env=env)
    assert result.stdout, result.stderr
    report: list[dict[str, Any]] = orjson.loads(result.stdout)
    assert result.returncode == 0, report
    return report


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_every_sink_reads_the_encoding(scene: Any, tmp_path: Path, setting: str) -> None:
    env, made = scene
    options = SETTINGS[setting]
    pipeline = three_sinks_pipeline(tmp_path, PIPELINE, TABLE, options)
    made.append(pipeline)
    run = start_run(pipeline, tmp_path, env)
    try:
        execute(env["PG_DSN"], f"UPDATE {TABLE} SET note = 'two' WHERE id = 1")
        report = _verified(tmp_path, pipeline, env)
        assert sorted((r["sink"], r["state"]) for r in report) == [
            ("cache", "ok"),
            ("search", "ok"),
            ("warehouse", "ok"),
        ]
        _check_duckdb_is_typed(tmp_path, options)
        _check_redis_and_search_hold_the_envelope_row(tmp_path, pipeline, env)
        stored = status(pipeline, tmp_path, env)["envelope"]
        assert stored["stored"]["options"] == options.encoding() and stored["matches_file"]
    finally:
        assert stop(run)[0] == 0


def _check_duckdb_is_typed(tmp_path: Path, options: EnvelopeOptions) -> None:
    ((_, row),) = duckdb_rows(tmp_path / "out.duckdb", "public", "typed")
    connect = options.time_precision_mode == "connect"
    assert row["price"] == Decimal("1234567890.12")
    assert row["day"] == dt.date(2024, 2, 29)
    assert row["at_time"] == dt.time(13, 45, 30, 123000 if connect else 123456)
    assert row["at_ms"] == dt.time(13, 45, 30, 123000)
    assert row["stamp"] == dt.datetime(2024, 2, 29, 13, 45, 30, 123000 if connect else 123456)
    assert row["stamp_tz"] == dt.datetime(2024, 2, 29, 13, 45, 30, 500000, tzinfo=UTC)
    assert row["blob"] == b"\xde\xad\xbe\xef"
    assert row["doc"] == {"a": [1, 2.5]}
    assert row["note"] == "two"


def _check_redis_and_search_hold_the_envelope_row(
    tmp_path: Path, pipeline: Path, env: dict[str, str]
) -> None:
    tail = cdc(
        "tail",
        str(pipeline),
        f"{PIPELINE}.{TABLE}",
        "--from-beginning",
        "--timeout-s",
        "0.5",
        cwd=tmp_path,
        env=env,
    )
    assert tail.returncode == 0, tail.stderr
    value = orjson.loads(tail.stdout.splitlines()[-1])["value"]
    after = value.get("payload", value)["after"]
    cached = Cache(env["REDIS_URL"], env["PREFIX"]).rows(TABLE)
    assert cached == {1: after}
    config = SearchSinkConfig(name="search", path=str(tmp_path / "search"))  # type: ignore[call-arg]
    indexed = dict(
        (k["id"], row) for k, row in SearchSinkPlugin.read_rows(config, "public", "typed")
    )
    assert indexed == {1: after}


def test_a_log_refuses_another_encoding_until_it_is_accepted(scene: Any, tmp_path: Path) -> None:
    env, made = scene
    pipeline = three_sinks_pipeline(tmp_path, PIPELINE, TABLE, READABLE)
    made.append(pipeline)
    run = start_run(pipeline, tmp_path, env)
    wait_for(lambda: _topic_has_records(tmp_path, pipeline, env), 60, process=run)
    assert stop(run)[0] == 0
    three_sinks_pipeline(tmp_path, PIPELINE, TABLE, DEBEZIUM_DEFAULTS)
    refused = cdc("run", str(pipeline), cwd=tmp_path, env=env, timeout=60)
    assert refused.returncode == 2, refused.stderr
    for text in (
        "envelope.decimal.handling.mode: the log was written with 'string', "
        "the file says 'precise'",
        "envelope.schemas.enable",
        "--accept-envelope-change",
        "log.path",
    ):
        assert text in refused.stderr
    assert not status(pipeline, tmp_path, env)["envelope"]["matches_file"]
    accepted = start_run(pipeline, tmp_path, env, "--accept-envelope-change")
    wait_for(
        lambda: status(pipeline, tmp_path, env)["envelope"]["matches_file"], 60, process=accepted
    )
    assert stop(accepted)[0] == 0
    stored = status(pipeline, tmp_path, env)["envelope"]["stored"]
    (since,) = stored["since"].values()  # where the new encoding starts: after the one record
    assert sum(since.values()) == 1
    assert [p["options"] for p in stored["previous"]] == [READABLE.encoding()]
    assert "envelope.encoding_changed" in (tmp_path / "run.log").read_text()


def _topic_has_records(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> bool:
    topics = status(pipeline, tmp_path, env)["topics"]
    return any(t["topic"] == f"{PIPELINE}.{TABLE}" and t["records"] > 0 for t in topics)
