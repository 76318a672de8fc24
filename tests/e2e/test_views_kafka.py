"""Live join views on the Kafka log: the view's documents, state and consumer offsets commit
in one Kafka transaction (its offsets sent with the member's metadata), so after a SIGKILL of
``cdc run`` mid-workload the view still equals the join run on the source (one kill: the
embedded log's test takes two; a Kafka restart costs seconds of group joins)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson

from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.views_kit import (
    ViewReader,
    Workload,
    cached,
    kill_mid_work,
    setup,
    source_join,
    write_pipeline,
)


def test_view_on_kafka_equals_the_source_join_after_a_sigkill(
    pg_db: str, redis_server: Any, kafka_server: Any, tmp_path: Path
) -> None:
    name = f"kviews_{uuid.uuid4().hex[:8]}"
    setup(pg_db, customers=30, orders=80, items=200)
    log = f"{{type: kafka, bootstrap_servers: '{kafka_server.bootstrap_servers}', partitions: 3}}"
    pipeline = write_pipeline(tmp_path, pg_db, redis_server.url, name, log)
    reader = ViewReader(pipeline)
    view = reader.config.views[0]
    workload = Workload(pg_db, seed=11)
    process = start_run(pipeline, tmp_path)
    workload.start()
    try:
        kill_mid_work(process, workload, reader, tmp_path)
        process = start_run(pipeline, tmp_path)
        wait_for(lambda: workload.count > 200, 120, 0.1, process, tmp_path / "run.log")
    finally:
        workload.stop_event.set()
        workload.join(30)
    seen: dict[str, Any] = {}

    def converged() -> bool:
        expected = source_join(pg_db, view)
        docs = reader.documents()
        seen.update(expected=len(expected), topic=len(docs))
        return docs == expected and cached(pipeline, redis_server.url, name) == expected

    try:
        wait_for(converged, 240, 1.0, process, tmp_path / "run.log", seen)
    finally:
        code, _ = stop(process, timeout=30)
    assert code == 0, (tmp_path / "run.log").read_text()[-3000:]
    verified = cdc("verify", str(pipeline), "--json", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    (report,) = orjson.loads(verified.stdout)
    assert report["table"] == "views.order_docs" and report["state"] == "ok"
    cdc("drop", str(pipeline), "--yes", cwd=tmp_path)
