"""A PostgreSQL table with columns ``email`` and ``"Email"`` through ``cdc run``: the DuckDB sink,
which cannot hold both in one table (DuckDB ignores the case of identifiers), stops naming the
table, both columns and the fix; the other sink (jsonl) goes on and holds every row.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import yaml

from tests.e2e.cli_helpers import start_run, stop, wait_for
from tests.e2e.sinks_kit import execute


def _stops(log: Path) -> list[dict[str, object]]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [orjson.loads(line[line.index("{") :]) for line in lines if '"sink.stopped"' in line]


def _lines(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def test_case_twins_stop_the_duckdb_sink_alone_naming_both_columns(
    pg_db: str, tmp_path: Path
) -> None:
    execute(
        pg_db,
        'CREATE TABLE users (id int PRIMARY KEY, email text, "Email" text)',
        "INSERT INTO users VALUES (1, 'a@x', 'A@X'), (2, 'b@x', NULL)",
    )
    data = {
        "version": 1,
        "name": "twins",
        "source": {"type": "postgres", "dsn": pg_db, "tables": ["public.users"]},
        "log": {"type": "embedded", "path": str(tmp_path / "log")},
        "sinks": [
            {"name": "warehouse", "type": "duckdb", "path": str(tmp_path / "wh.duckdb")},
            {"name": "files", "type": "jsonl", "path": str(tmp_path / "files")},
        ],
    }
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(yaml.safe_dump(data, sort_keys=False))
    log = tmp_path / "run.log"
    topic_file = tmp_path / "files" / "twins.public.users.jsonl"
    run = start_run(pipeline, tmp_path)
    try:
        wait_for(lambda: bool(_stops(log)), 60, process=run, log=log)
        execute(pg_db, "INSERT INTO users VALUES (3, 'c@x', 'C@X')")
        wait_for(lambda: len(_lines(topic_file)) == 3, 60, process=run, log=log)
    finally:
        code, _ = stop(run)
    assert code == 1  # a sink stopped: the run was not clean
    (stopped,) = _stops(log)
    assert stopped["sink"] == "warehouse"
    message = str(stopped["error"])
    for part in (
        "table public.users: columns 'email' and 'Email' differ only by case",
        "Fix: rename one of them in the source",
    ):
        assert part in message, (part, message)
    rows = {line["key"]["id"]: line["value"]["after"] for line in _lines(topic_file)}  # type: ignore[index]
    assert rows[1] == {"id": 1, "email": "a@x", "Email": "A@X"} and set(rows) == {1, 2, 3}
