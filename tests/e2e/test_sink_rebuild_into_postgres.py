"""``cdc sink FILE NAME --rebuild --into schema=NEW`` for the PostgreSQL sink: a copy in another
schema of the same target database, built from the log, equals the sink that streamed
(``schema`` is the field's YAML name, an alias of the model's ``schema_``). Real PostgreSQL as
source and target, embedded log."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from sinks.postgres.plugin import PostgresSinkPlugin
from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.rebuild_kit import TABLE, create_items, pipeline_file, source_rows, workload


def _replica_rows(dsn: str, schema: str) -> dict[int, dict[str, Any]]:
    config = PostgresSinkPlugin.config_model.model_validate(
        {"name": "replica", "type": "postgres", "dsn": dsn, "schema": schema}
    )
    rows = PostgresSinkPlugin.read_rows(config, *TABLE.split("."), pipeline="p")
    return {int(r["id"]): {"id": r["id"], "v": r["v"], "n": r["n"]} for _, r in rows}


def test_a_postgres_copy_in_another_schema_equals_the_streamed_sink(
    pg_db: str, tmp_path: Path
) -> None:
    name = f"rp_{uuid.uuid4().hex[:6]}"
    sink = {"name": "replica", "type": "postgres", "dsn": "${PG_DSN}", "schema": "replica"}
    pipeline = pipeline_file(tmp_path, name, [sink])
    env = {"PG_DSN": pg_db}
    create_items(pg_db, 400)
    run = start_run(pipeline, tmp_path, env)
    log = tmp_path / "run.log"
    try:
        workload(pg_db, seed=51, changes=120)
        want = source_rows(pg_db)
        wait_for(lambda: _replica_rows(pg_db, "replica") == want, 90, 0.3, run, log)
        built = cdc("sink", str(pipeline), "replica", "--rebuild", "--into", "schema=copy",
                    cwd=tmp_path, env=env)  # fmt: skip
        assert built.returncode == 0, built.stderr
    finally:
        code, _ = stop(run)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)
    assert code == 0, log.read_text()[-3000:]
    assert _replica_rows(pg_db, "copy") == _replica_rows(pg_db, "replica") == want
