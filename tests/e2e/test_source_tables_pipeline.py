"""Tables added to or removed from ``source.tables`` after the first start, through ``cdc run``
on a real PostgreSQL 15 into a real Redis and DuckDB: an added table's existing rows reach the
sinks (read while a writer changes it), a removed one is no longer captured."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from tests.e2e.cli_helpers import start_run, stop, wait_for
from tests.e2e.sinks_kit import (
    PIPELINE,
    Cache,
    create_table,
    duckdb_rows,
    execute,
    published,
    redis_url,
    snapshot_of,
    table_rows,
    topic_ends,
    write_pipeline,
)
from tests.e2e.snapshot_helpers import Writer, run_log_events
from tests.e2e.test_snapshot_pipeline import drop_objects

__all__ = ["redis_url"]  # a fixture


def test_a_table_added_later_is_snapshotted_and_a_removed_one_stops(
    pg_db: str, redis_url: str, tmp_path: Path
) -> None:
    create_table(pg_db, "t", 500)
    create_table(pg_db, "u", 20_000)  # not captured at first: its rows predate the pipeline
    prefix = f"added{uuid.uuid4().hex[:8]}"
    env, cache, log = {}, Cache(redis_url, prefix), tmp_path / "run.log"
    options = {"snapshot_chunk_rows": 2000}
    pipeline = write_pipeline(tmp_path, pg_db, redis_url, prefix, ["public.t"], **options)
    runs: list[subprocess.Popen[str]] = []
    try:
        runs.append(process := start_run(pipeline, tmp_path, env))
        wait_for(lambda: cache.equals(pg_db, "public.t"), 90, process=process, log=log)
        execute(pg_db, "UPDATE u SET n = 5 WHERE id <= 10")  # a change the log never sees
        assert stop(process)[0] == 0
        write_pipeline(tmp_path, pg_db, redis_url, prefix, ["public.t", "public.u"], **options)
        with Writer(pg_db, 20_000, rate=300, table="u") as writer:
            runs.append(process := start_run(pipeline, tmp_path, env))
            wait_for(lambda: bool(snapshot_of(tmp_path, "public.u")), 90, process=process, log=log)
            wait_for(lambda: snapshot_of(tmp_path, "public.u").get("state") == "done", 120)
        wait_for(lambda: cache.equals(pg_db, "public.u"), 90, process=process, log=log)
        assert writer.changes > 0
        [added] = run_log_events(tmp_path, "source.tables_added")
        assert added["tables"] == ["public.u"] and added["snapshot"] is True
        assert "public.u" in published(pg_db)
        assert cache.equals(pg_db, "public.t")
        assert stop(process)[0] == 0
        assert duckdb_rows(tmp_path / "out.duckdb", "public.u") == table_rows(pg_db, "public.u")
        # Removed: out of the publication, its changes no longer reach the log or the sinks.
        write_pipeline(tmp_path, pg_db, redis_url, prefix, ["public.u"], **options)
        before, ends = cache.rows("public.t"), topic_ends(pipeline, tmp_path, env)
        runs.append(process := start_run(pipeline, tmp_path, env))
        wait_for(lambda: bool(run_log_events(tmp_path, "source.tables_removed")), 60)
        execute(pg_db, "UPDATE t SET v = 'not captured'", "UPDATE u SET v = 'captured'")
        wait_for(lambda: cache.equals(pg_db, "public.u"), 60, process=process, log=log)
        [removed] = run_log_events(tmp_path, "source.tables_removed")
        assert removed["tables"] == ["public.t"]
        assert "public.t" not in published(pg_db)
        assert cache.rows("public.t") == before
        assert stop(process)[0] == 0
        after = topic_ends(pipeline, tmp_path, env)
        assert after[f"{PIPELINE}.public.t"] == ends[f"{PIPELINE}.public.t"]  # stays, unchanged
        assert after[f"{PIPELINE}.public.u"] != ends[f"{PIPELINE}.public.u"]
    finally:
        drop_objects(pipeline, *runs)
