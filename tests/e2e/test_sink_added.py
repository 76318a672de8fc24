"""A sink added to a pipeline's file is built from the compacted log (a new consumer group reads
every topic from offset 0), with no source re-snapshot: beside a running ``cdc run`` of the old
file (``cdc sink NEW_FILE NEWSINK``), and at the restart of a stopped pipeline with the new
file. Each new sink then equals the source after a workload, logs its catch-up (records read,
records/s, ETA), and the table's topic holds no second snapshot. Real PostgreSQL, Redis, DuckDB.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from tests.e2e.cli_helpers import cdc, cdc_env, start_run, stop, topic_records, wait_for
from tests.e2e.rebuild_kit import (
    cache_rows,
    create_items,
    duckdb_sink,
    pipeline_file,
    redis_sink,
    source_rows,
    warehouse_rows,
    workload,
)
from tests.e2e.sinks_kit import status

ROWS = 3000  # over the catch-up display's threshold (cdc.runtime.catch_up.REPORT_FROM)


def _caught_up(tmp_path: Path, pipeline: Path, env: dict[str, str]) -> bool:
    report = status(pipeline, tmp_path, env)
    return all(s["lag"] == 0 and s["state"] == "running" for s in report["sinks"])


def _start_sink(pipeline: Path, sink: str, cwd: Path, env: dict[str, str]) -> Any:
    out = (cwd / f"{sink}.log").open("a")
    return subprocess.Popen(
        [sys.executable, "-m", "cdc.cli.main", "--log-json", "sink", str(pipeline), sink],
        cwd=cwd, stdout=out, stderr=subprocess.STDOUT, text=True, env=cdc_env(env),
    )  # fmt: skip


def test_a_sink_added_to_a_running_then_a_stopped_pipeline_is_built_from_the_log(
    pg_db: str, redis_server: Any, tmp_path: Path
) -> None:
    redis_server.start()
    name, prefix, url = f"sa_{uuid.uuid4().hex[:6]}", f"sa{uuid.uuid4().hex[:6]}", ""
    url = str(redis_server.url)
    env = {"PG_DSN": pg_db}
    old = [duckdb_sink("wh", tmp_path / "wh.duckdb")]
    first = pipeline_file(tmp_path, name, old, file="old.yaml")
    added = pipeline_file(tmp_path, name, [*old, redis_sink("late", url, prefix)], file="new.yaml")
    topic = f"{name}.public.items"
    create_items(pg_db, ROWS)
    run = start_run(first, tmp_path, env)
    log = tmp_path / "run.log"
    late = None
    try:
        wait_for(lambda: _caught_up(tmp_path, first, env), 90, 0.3, run, log)
        workload(pg_db, seed=21)
        late = _start_sink(added, "late", tmp_path, env)
        workload(pg_db, seed=22)
        want = source_rows(pg_db)
        wait_for(lambda: cache_rows(url, prefix) == want, 90, 0.3, run, log)
    finally:
        if late is not None:
            assert stop(late)[0] == 0, (tmp_path / "late.log").read_text()[-3000:]
        code, _ = stop(run)
    assert code == 0, log.read_text()[-3000:]
    lines = (tmp_path / "late.log").read_text()
    assert "sink.catch_up.started" in lines and "sink.catch_up.finished" in lines, lines[-3000:]
    _added_while_stopped(tmp_path, name, env, added, topic, url, prefix)


def _added_while_stopped(
    tmp_path: Path, name: str, env: dict[str, str], added: Path, topic: str, url: str, prefix: str
) -> None:
    before = topic_records(added, topic, tmp_path, env)
    sinks = [
        duckdb_sink("wh", tmp_path / "wh.duckdb"),
        redis_sink("late", url, prefix),
        duckdb_sink("later", tmp_path / "later.duckdb"),
    ]
    third = pipeline_file(tmp_path, name, sinks, file="third.yaml")
    run = start_run(third, tmp_path, env)
    log = tmp_path / "run.log"
    try:
        workload(env["PG_DSN"], seed=23, changes=40)
        want = source_rows(env["PG_DSN"])
        wait_for(lambda: cache_rows(url, prefix) == want, 90, 0.3, run, log)
        wait_for(lambda: _caught_up(tmp_path, third, env), 90, 0.3, run, log)
        # 40 changes (and their tombstones) came in: no second snapshot of the table's rows.
        assert topic_records(third, topic, tmp_path, env) - before <= 80
    finally:
        code, _ = stop(run)
        cdc("drop", str(third), "--yes", cwd=tmp_path, env=env)
    assert code == 0, log.read_text()[-3000:]
    assert warehouse_rows(tmp_path / "later.duckdb") == want
    assert warehouse_rows(tmp_path / "wh.duckdb") == want
