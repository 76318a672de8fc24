"""An initial snapshot of many tables through ``cdc run`` on a real PostgreSQL 15 and the
embedded log, killed with SIGKILL part way and resumed: each table's progress is a stored key of
its own, the resumed run reads exactly the chunks that are missing (also from a log holding the
progress in its form from before per-table keys), and the stored progress stays bounded."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql

from cdc.contracts import snapshot_offsets as so
from cdc.log.embedded import EmbeddedLog
from cdc.testing import wait_until
from tests.e2e.cli_helpers import start_run
from tests.e2e.snapshot_helpers import (
    PIPELINE,
    chunks_done,
    offsets,
    run_log_events,
    snapshot_tables,
    topic_state,
)
from tests.e2e.test_snapshot_pipeline import drop_objects, settle_and_stop

TABLES = [f"m{i:02d}" for i in range(40)]
# 15 chunks a table, 600 in all: the kill lands part way (the exported snapshot reads about a
# hundred a second), and the resumed run reads the rest with watermarks, some 30 a second.
ROWS, CHUNK_ROWS = 1_500, 100


def create_tables(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in TABLES:
            table = sql.Identifier(name)
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(table))
            insert = "INSERT INTO {} SELECT g, md5(g::text) FROM generate_series(1, %s) g"
            conn.execute(sql.SQL(insert).format(table), (ROWS,))


def write_pipeline(tmp_path: Path, dsn: str) -> Path:
    tables = ", ".join(f"public.{t}" for t in TABLES)
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        f"version: 1\nname: {PIPELINE}\nsource:\n  type: postgres\n  dsn: '{dsn}'\n"
        f"  tables: [{tables}]\n  snapshot_chunk_rows: {CHUNK_ROWS}\n  snapshot_workers: 1\n"
        f"log:\n  type: embedded\n  path: {tmp_path / 'log'}\n"
    )
    return path


def done_pairs(log_dir: Path) -> set[tuple[str, int]]:
    return {(t, c) for t, e in snapshot_tables(log_dir).items() for c in chunks_done(e)}


def finished(log_dir: Path) -> bool:
    tables = snapshot_tables(log_dir)
    return len(tables) == len(TABLES) and all(
        len(chunks_done(e)) == e["chunks_total"] for e in tables.values()
    )


def to_old_form(log_dir: Path) -> None:
    """Store the progress as logs written before per-table keys hold it: all of it under
    ``"snapshot"``, no table key."""
    log = EmbeddedLog(log_dir)
    try:
        stored = log.source_offsets()
        tables = [k for k in stored if k.startswith(so.TABLE_PREFIX)]
        assert tables and "tables" not in stored[so.RUN_KEY]
        tx = log.begin()
        tx.store_offsets({so.RUN_KEY: so.progress(stored), **dict.fromkeys(tables)})
        tx.commit()
        assert so.migrated(log.source_offsets())
    finally:
        log.close()


def topic_matches(dsn: str, log_dir: Path, name: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = sql.SQL("SELECT id, v FROM {}").format(sql.Identifier(name))
        rows = {i: {"id": i, "v": v} for i, v in conn.execute(query).fetchall()}
    return topic_state(log_dir, f"{PIPELINE}.public.{name}") == rows


def check_bounded(stored: dict[str, Any]) -> None:
    """Every table its own small key; no plan kept for a finished table."""
    keys = [k for k in stored if k.startswith(so.TABLE_PREFIX)]
    assert len(keys) == len(TABLES) and "tables" not in stored[so.RUN_KEY]
    for key in keys:
        assert stored[key]["chunks"] == []
        assert len(orjson.dumps(stored[key])) < 400
    assert len(orjson.dumps(stored[so.RUN_KEY])) < 400


@pytest.mark.parametrize("stored_form", ["per_table", "old_single_key"])
def test_a_killed_snapshot_of_many_tables_resumes_exactly_the_missing_chunks(
    pg_db: str, tmp_path: Path, stored_form: str
) -> None:
    create_tables(pg_db)
    pipeline = write_pipeline(tmp_path, pg_db)
    log_dir = tmp_path / "log"
    runs: list[subprocess.Popen[str]] = []
    try:
        process = start_run(pipeline, tmp_path)
        runs.append(process)
        wait_until(lambda: len(done_pairs(log_dir)) >= 30, 120, 0.05, describe="some chunks")
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        done_before = done_pairs(log_dir)
        total = sum(e["chunks_total"] for e in snapshot_tables(log_dir).values())
        assert 0 < len(done_before) < total and total >= 500
        if stored_form == "old_single_key":
            to_old_form(log_dir)
            assert done_pairs(log_dir) == done_before  # read the same from the old form
        first_run = len(run_log_events(tmp_path, "snapshot.chunk_done"))
        process = start_run(pipeline, tmp_path)
        runs.append(process)
        wait_until(lambda: finished(log_dir), 180, 0.25, describe="the resumed snapshot")
        settle_and_stop(process, pg_db, log_dir)
        resumed = {
            (e["table"], e["chunk"])
            for e in run_log_events(tmp_path, "snapshot.chunk_done")[first_run:]
        }
        assert not resumed & done_before, "finished chunks read again"
        assert resumed | done_before == done_pairs(log_dir)
        assert len(done_pairs(log_dir)) == total
        assert run_log_events(tmp_path, "snapshot.decision")[-1]["action"] == "resume"
        assert all(topic_matches(pg_db, log_dir, name) for name in TABLES)
        check_bounded(offsets(log_dir))
    finally:
        drop_objects(pipeline, *runs)
