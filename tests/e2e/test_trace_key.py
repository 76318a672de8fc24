"""``cdc trace`` on a real PostgreSQL, embedded log, DuckDB and Redis: one key through several
versions, one of them dead-lettered by DuckDB (NaN into numeric(6,2)), an older version replayed
into the log after a newer one was applied (both sinks skip it, as stale), a row the row filter
leaves out, a tampered DuckDB row (the divergent hop: log -> sink warehouse), a source change
the log has not seen (source -> log), and a bad TABLE or KEY (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest
import yaml

from cdc.log.base import Record
from cdc.log.embedded import EmbeddedLog
from tests.e2e.cli_helpers import cdc, start_run, status_json, stop, wait_for
from tests.e2e.sinks_kit import execute
from tests.services.ports import free_port

TOPIC = "tr.public.items"


def _pipeline(tmp_path: Path, dsn: str, redis_url: str) -> Path:
    data = {
        "version": 1,
        "name": "tr",
        "bad_records": "dead_letter",
        "source": {
            "type": "postgres",
            "dsn": dsn,
            "tables": [{"name": "public.items", "mask": {"secret": "redact"}, "where": "id < 100"}],
        },
        "log": {"type": "embedded", "path": str(tmp_path / "log")},
        "sinks": [
            {"name": "warehouse", "type": "duckdb", "path": str(tmp_path / "wh.duckdb")},
            {"name": "cache", "type": "redis", "url": redis_url},
        ],
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _caught_up(tmp_path: Path, pipeline: Path, records: int) -> bool:
    try:
        report = status_json(pipeline, tmp_path)
    except Exception:  # as the command's exit 1: the log not there yet
        return False
    ends = [t for t in report["topics"] if t["topic"] == TOPIC]
    written = sum(int(o) for t in ends for o in t["end_offsets"].values())
    return written >= records and all(s["lag"] == 0 for s in report["sinks"])


def _run_until(tmp_path: Path, pipeline: Path, records: int) -> None:
    run = start_run(pipeline, tmp_path)
    try:
        wait_for(
            lambda: _caught_up(tmp_path, pipeline, records),
            timeout=90,
            interval=0.3,
            process=run,
            log=tmp_path / "run.log",
        )
    finally:
        code = stop(run)[0]
    log = (tmp_path / "run.log").read_text()
    assert code == 0, log[-6000:]


def _trace(tmp_path: Path, pipeline: Path, key: str, *extra: str) -> Any:
    result = cdc("trace", str(pipeline), "public.items", key, *extra, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return orjson.loads(result.stdout) if "--json" in extra else result.stdout


def _replay_oldest_update(tmp_path: Path) -> int:
    """Append a copy of key 1's first update after its newer versions: a replay the sinks must
    skip by position. Returns its offset."""
    log = EmbeddedLog(tmp_path / "log")
    try:
        records = log.key_records(TOPIC, b'{"id":1}')
        assert records is not None
        first_update = next(r for r in records if r.value and b'"op":"u"' in r.value)
        tx = log.begin()
        tx.append([Record(TOPIC, first_update.key, first_update.value, first_update.pos)])
        tx.commit()
        return int(log.end_offsets(TOPIC)[first_update.partition]) - 1
    finally:
        log.close()


@pytest.mark.pgany
def test_trace_shows_the_path_a_stale_version_a_dead_letter_and_the_divergent_hop(
    pg_db: str, redis_server: Any, tmp_path: Path
) -> None:
    redis_server.start()
    execute(
        pg_db,
        "CREATE TABLE items (id integer PRIMARY KEY, label text, price numeric(6,2), secret text)",
        "INSERT INTO items SELECT g, 'l' || g, 1.25, 's' || g FROM generate_series(1, 5) g",
    )
    pipeline = _pipeline(tmp_path, pg_db, redis_server.url)
    _run_until(tmp_path, pipeline, 5)
    # DuckDB merges a batch's newest change per key: the NaN is dead-lettered as the newest.
    execute(
        pg_db,
        "UPDATE items SET label = 'v2' WHERE id = 1",
        "UPDATE items SET price = 'NaN' WHERE id = 1",
        "INSERT INTO items VALUES (500, 'filtered', 1, 'x')",
    )
    _run_until(tmp_path, pipeline, 7)
    execute(pg_db, "UPDATE items SET label = 'v3', price = 2.5 WHERE id = 1")
    _run_until(tmp_path, pipeline, 8)
    replayed = _replay_oldest_update(tmp_path)
    _run_until(tmp_path, pipeline, 9)

    report = _trace(tmp_path, pipeline, "1", "--json")
    _check_path(report, replayed)
    text = _trace(tmp_path, pipeline, '{"id": 1}')
    for part in ("SKIPPED (stale)", "DEAD-LETTERED", "older position", "no divergence"):
        assert part in text, (part, text)
    _check_filtered(_trace(tmp_path, pipeline, "500", "--json"))
    _check_tampered(tmp_path, pipeline)
    execute(pg_db, "UPDATE items SET label = 'unseen' WHERE id = 1")  # no pipeline runs
    assert _trace(tmp_path, pipeline, "1", "--json")["diverged_at"] == "source → log"
    _check_bad_arguments(tmp_path, pipeline)


def _check_path(report: dict[str, Any], replayed: int) -> None:
    versions = report["versions"]
    assert [v["op"] for v in versions] == ["r", "u", "u", "u", "u"], versions
    assert versions[-1]["offset"] == replayed
    assert versions[-1]["position"] == versions[1]["position"] < versions[3]["position"]
    assert all(v["commit_ts_ms"] for v in versions[1:])
    nan_offset = versions[2]["offset"]
    # Exactly one, though the restarts read it again (DuckDB's stored offsets end before a
    # batch's last record when that record was dead-lettered; the runner finds its letter).
    letters = [(d["origin"], d["offset"]) for d in report["dead_letters"]]
    assert letters == [("sink:warehouse", nan_offset)], report["dead_letters"]
    assert report["source"]["row"]["label"] == "v3"
    assert report["source"]["read_by"] == "key lookup"
    assert report["source"]["masked"] == ["secret"]
    assert report["diverged_at"] is None
    sinks = {s["sink"]: s for s in report["sinks"]}
    warehouse, cache = sinks["warehouse"], sinks["cache"]
    assert [v["verdict"] for v in warehouse["versions"]] == [
        "replaced",
        "replaced",
        "dead_lettered",
        "held",
        "stale",
    ]
    assert "older position" in warehouse["versions"][-1]["why"]
    assert warehouse["position"] == versions[3]["position"]
    assert [v["verdict"] for v in cache["versions"]] == [
        "replaced",
        "replaced",
        "replaced",
        "held",
        "stale",
    ]
    assert (warehouse["state"], cache["state"]) == ("consistent", "consistent")
    assert cache["row"]["secret"] != "s1"  # the masked value, never the source's


def _check_filtered(report: dict[str, Any]) -> None:
    assert report["versions"] == []
    assert report["source"]["row"] is None
    assert report["source"]["excluded_by"] == {"where": ["id < 100"]}
    assert report["source"]["exists"] is True
    assert [s["holds"] for s in report["sinks"]] == ["nothing", "nothing"]
    assert report["diverged_at"] is None


def _check_tampered(tmp_path: Path, pipeline: Path) -> None:
    with duckdb.connect(str(tmp_path / "wh.duckdb")) as con:
        con.execute("UPDATE public.items SET label = 'tampered' WHERE id = 1")
    report = _trace(tmp_path, pipeline, "1", "--json")
    assert report["diverged_at"] == "log → sink warehouse"
    warehouse = next(s for s in report["sinks"] if s["sink"] == "warehouse")
    assert warehouse["state"] == "divergent"
    assert "label" in warehouse["why"]
    assert "diverged at: log → sink warehouse" in _trace(tmp_path, pipeline, "1")


def _check_bad_arguments(tmp_path: Path, pipeline: Path) -> None:
    for table, key in (("public.nope", "1"), ("public.items", '{"nope": 1}')):
        result = cdc("trace", str(pipeline), table, key, cwd=tmp_path)
        assert result.returncode == 2, (table, key, result.stdout, result.stderr)
        assert "error:" in result.stderr
    # A store that cannot be reached (nothing listens on the cache's port): exit 1.
    data = yaml.safe_load(pipeline.read_text())
    data["sinks"][1]["url"] = f"redis://127.0.0.1:{free_port()}/0"
    away = tmp_path / "away.yaml"
    away.write_text(yaml.safe_dump(data, sort_keys=False))
    result = cdc("trace", str(away), "public.items", "1", cwd=tmp_path)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "error:" in result.stderr
