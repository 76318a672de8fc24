"""The handover of a copy built with ``--rebuild --into`` is exact for a partition that was
empty when the copy was built: the old sink went on reading it (its consumer group's offset
moved on), and the copy, swapped in, must still read it from its start, never from the old
sink's group. Real PostgreSQL and DuckDB, an embedded log of four partitions."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg

from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.rebuild_kit import duckdb_sink, pipeline_file, source_rows, warehouse_rows
from tests.e2e.sinks_kit import status

LOG = {"type": "embedded", "partitions": 4}


def _caught_up(tmp_path: Path, pipeline: Path, env: dict[str, str], records: int) -> bool:
    sink = status(pipeline, tmp_path, env)["sinks"][0]
    ends = sum(t["end"] for t in sink["topics"] if t["topic"].endswith(".public.items"))
    return bool(sink["lag"] == 0 and sink["state"] == "running" and ends >= records)


def test_a_partition_empty_at_the_rebuild_is_read_from_its_start_after_the_swap(
    pg_db: str, tmp_path: Path
) -> None:
    name = f"ho_{uuid.uuid4().hex[:6]}"
    old, copy = tmp_path / "old.duckdb", tmp_path / "copy.duckdb"
    pipeline = pipeline_file(
        tmp_path, name, [duckdb_sink("wh", old)], {**LOG, "path": str(tmp_path / "log")}
    )
    env = {"PG_DSN": pg_db}
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, v text NOT NULL, n int)")
        conn.execute("INSERT INTO public.items VALUES (1, 'one', 0)")  # one partition of four
    run = start_run(pipeline, tmp_path, env)
    log = tmp_path / "run.log"
    try:
        wait_for(lambda: _caught_up(tmp_path, pipeline, env, 1), 90, 0.3, run, log)
        built = cdc("sink", str(pipeline), "wh", "--rebuild", "--into", str(copy),
                    cwd=tmp_path, env=env)  # fmt: skip
        assert built.returncode == 0, built.stderr
        with psycopg.connect(pg_db, autocommit=True) as conn:  # every partition gets rows
            conn.execute("INSERT INTO public.items SELECT g, md5(g::text), 0 "
                         "FROM generate_series(2, 60) g")  # fmt: skip
        wait_for(lambda: _caught_up(tmp_path, pipeline, env, 60), 90, 0.3, run, log)
    finally:
        assert stop(run)[0] == 0, log.read_text()[-3000:]
    swapped = pipeline_file(
        tmp_path, name, [duckdb_sink("wh", copy)], {**LOG, "path": str(tmp_path / "log")}
    )
    run = start_run(swapped, tmp_path, env)
    try:
        wait_for(lambda: _caught_up(tmp_path, swapped, env, 60), 90, 0.3, run, log)
    finally:
        code, _ = stop(run)
        cdc("drop", str(swapped), "--yes", cwd=tmp_path, env=env)
    assert code == 0, log.read_text()[-3000:]
    assert warehouse_rows(copy) == warehouse_rows(old) == source_rows(pg_db)
