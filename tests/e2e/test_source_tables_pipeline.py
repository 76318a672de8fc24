"""Tables added to or removed from ``source.tables`` after the first start, through ``cdc run``
on a real PostgreSQL 15 into a real Redis and DuckDB: an added table's existing rows reach the
sinks (read while a writer changes it), a removed one is no longer captured."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.e2e.cli_helpers import stop, wait_for
from tests.e2e.sinks_kit import (
    PIPELINE,
    Cache,
    Scene,
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
    options = {"snapshot_chunk_rows": 2000}
    pipeline = write_pipeline(tmp_path, pg_db, redis_url, prefix, ["public.t"], **options)
    scene = Scene(pg_db, tmp_path, pipeline, Cache(redis_url, prefix))
    try:
        _run_with_the_first_table_only(scene)
        write_pipeline(tmp_path, pg_db, redis_url, prefix, ["public.t", "public.u"], **options)
        _check_the_added_table_is_snapshotted_while_written(scene)
        # Removed: out of the publication, its changes no longer reach the log or the sinks.
        write_pipeline(tmp_path, pg_db, redis_url, prefix, ["public.u"], **options)
        _check_the_removed_table_is_no_longer_captured(scene)
    finally:
        drop_objects(pipeline, *scene.runs)


def _run_with_the_first_table_only(scene: Scene) -> None:
    scene.start()
    scene.wait_for_the_cache("public.t", 90)
    execute(scene.dsn, "UPDATE u SET n = 5 WHERE id <= 10")  # a change the log never sees
    assert stop(scene.process)[0] == 0


def _check_the_added_table_is_snapshotted_while_written(scene: Scene) -> None:
    tmp_path, dsn = scene.tmp_path, scene.dsn
    with Writer(dsn, 20_000, rate=300, table="u") as writer:
        scene.start()
        process, log = scene.process, scene.log
        wait_for(lambda: bool(snapshot_of(tmp_path, "public.u")), 90, process=process, log=log)
        wait_for(lambda: snapshot_of(tmp_path, "public.u").get("state") == "done", 120)
    scene.wait_for_the_cache("public.u", 90)
    assert writer.changes > 0
    [added] = run_log_events(tmp_path, "source.tables_added")
    assert added["tables"] == ["public.u"] and added["snapshot"] is True
    assert "public.u" in published(dsn)
    assert scene.cache.equals(dsn, "public.t")
    assert stop(scene.process)[0] == 0
    assert duckdb_rows(tmp_path / "out.duckdb", "public.u") == table_rows(dsn, "public.u")


def _check_the_removed_table_is_no_longer_captured(scene: Scene) -> None:
    tmp_path, dsn, pipeline = scene.tmp_path, scene.dsn, scene.pipeline
    before, ends = scene.cache.rows("public.t"), topic_ends(pipeline, tmp_path, scene.env)
    scene.start()
    wait_for(lambda: bool(run_log_events(tmp_path, "source.tables_removed")), 60)
    execute(dsn, "UPDATE t SET v = 'not captured'", "UPDATE u SET v = 'captured'")
    scene.wait_for_the_cache("public.u", 60)
    [removed] = run_log_events(tmp_path, "source.tables_removed")
    assert removed["tables"] == ["public.t"]
    assert "public.t" not in published(dsn)
    assert scene.cache.rows("public.t") == before
    assert stop(scene.process)[0] == 0
    after = topic_ends(pipeline, tmp_path, scene.env)
    assert after[f"{PIPELINE}.public.t"] == ends[f"{PIPELINE}.public.t"]  # stays, unchanged
    assert after[f"{PIPELINE}.public.u"] != ends[f"{PIPELINE}.public.u"]
