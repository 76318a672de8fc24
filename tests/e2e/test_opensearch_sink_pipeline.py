"""PostgreSQL to OpenSearch through the CLI: a random workload over every common type and a table
with a composite key, two SIGKILLs of ``cdc run`` mid-work, then ``cdc verify`` (every document
against every source row, by column type), the document counts, ``cdc search`` and the sink's
metrics under the contract's names.
"""

from __future__ import annotations

import random
import uuid
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import orjson
import psycopg
import urllib3

from sinks.opensearch.config import OpenSearchSinkConfig
from tests.e2e.cli_helpers import cdc, start_run, stop
from tests.e2e.shop_workload import Workload, create
from tests.e2e.test_pg_all_sinks import (
    kill_mid_work,
    table_records,
    wait_caught_up,
    wait_status,
)
from tests.integration.test_opensearch_sink import auth_yaml
from tests.services.opensearch import OpenSearchServer, sink_options
from tests.services.ports import LOOPBACK, free_port

# cdc_sink_errors_total and cdc_sink_lag_records have a series only once there is an error or
# the sampler's first lag reading; the runtime's sink task feeds them for every sink alike.
METRICS = ("cdc_sink_applied_total", "cdc_sink_state")


def _pipeline(tmp_path: Path, server: OpenSearchServer, prefix: str, listen: str) -> Path:
    config = OpenSearchSinkConfig(name="search", **sink_options(server))
    path = tmp_path / "shop.yaml"
    path.write_text(
        "version: 1\nname: shop\nsource:\n  type: postgres\n  dsn: ${PG_DSN}\n"
        "  tables: [public.everything, public.lines]\n  snapshot: initial\n"
        "  status_interval_s: 1\n"
        "sinks:\n"
        f"  - name: search\n    type: opensearch\n    url: {config.url}\n{auth_yaml(config)}"
        f"    index: '{prefix}-{{pipeline}}.{{schema}}.{{table}}'\n"
        f"    offsets_index: {prefix}-offsets\n    replicas: 0\n"
        f"metrics:\n  listen: '{listen}'\n"
    )
    return path


def test_postgres_to_opensearch_after_two_sigkills_verifies(
    pg_db: str, opensearch_server: Any, tmp_path: Path
) -> None:
    installed = {ep.name for ep in entry_points(group="cdc.sinks")}
    assert "opensearch" in installed, f"the opensearch sink is not installed: {installed}"
    create(pg_db, rows=600)
    env = {"PG_DSN": pg_db}
    listen = f"{LOOPBACK}:{free_port()}"
    pipeline = _pipeline(tmp_path, opensearch_server, f"e{uuid.uuid4().hex[:8]}", listen)
    workload = Workload(pg_db)
    workload.start()
    try:
        rng, records = random.Random(11), 0
        for _ in range(2):
            process = start_run(pipeline, tmp_path, env)
            records = kill_mid_work(process, workload, tmp_path, pipeline, env, records, rng)
        process = start_run(pipeline, tmp_path, env)
        more = records + 50
        wait_status(process, tmp_path, pipeline, env, lambda r: table_records(r) >= more)
    finally:
        workload.stop()
    wait_caught_up(process, tmp_path, pipeline, env, pg_db, timeout=240)
    result = cdc("verify", str(pipeline), "--json", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    report = orjson.loads(result.stdout)
    assert {(r["sink"], r["ok"]) for r in report} == {("search", True)}, report
    _assert_metrics(listen)
    assert stop(process)[0] == 0, (tmp_path / "run.log").read_text()[-3000:]
    _assert_counts(pg_db, pipeline, tmp_path, env)


def _assert_metrics(listen: str) -> None:
    """The runtime's sink task reports the sink under the contract's names."""
    text = urllib3.request("GET", f"http://{listen}/metrics").data.decode()
    for name in METRICS:
        assert _series(text, name), name
    applied = [float(line.rsplit(" ", 1)[1]) for line in _series(text, "cdc_sink_applied_total")]
    assert sum(applied) > 0, text[:2000]
    running = [line for line in _series(text, "cdc_sink_state") if 'state="running"' in line]
    assert [line.rsplit(" ", 1)[1] for line in running] == ["1.0"], text[:2000]


def _series(text: str, name: str) -> list[str]:
    """The sample lines of metric ``name`` for this sink."""
    return [
        line
        for line in text.splitlines()
        if line.startswith(name + "{") and 'sink="search"' in line
    ]


def _assert_counts(dsn: str, pipeline: Path, tmp_path: Path, env: dict[str, str]) -> None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM public.everything").fetchone()
    assert row is not None and row[0] > 500
    hits = cdc(
        "search", str(pipeline), "public.everything", "*", "--limit", "3", cwd=tmp_path, env=env
    )
    assert hits.returncode == 0, hits.stderr
    assert len(hits.stdout.splitlines()) == 3
