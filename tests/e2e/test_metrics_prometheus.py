"""A real Prometheus scrapes a running ``cdc run``: lag, retained WAL, sink errors, stalls.

The pipeline streams a PostgreSQL table into the embedded log and two sinks (Redis and
DuckDB), with ``metrics.listen`` on and ``stall_after_s: 6``. Debian's Prometheus scrapes it
every 0.5 s, and the test asks Prometheus's HTTP API, as a dashboard or an alert would:
- the endpoint passes ``promtool check metrics``, and ``/healthz`` and ``/readyz`` answer 200;
- the source lag rises under a burst of 150,000 rows and returns to 0;
- retained WAL is reported for an active slot in ``reserved`` state, and each row is counted
  once as a source event and once as applied by each sink;
- a stopped Redis shows as sink errors and the ``retrying`` state, then, after 6 s without
  progress while its lag is above 0, as ``cdc_task_stalled`` 1 with ``/readyz`` 503 and one
  ``task.stalled`` error event; once Redis is back, all of it clears.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from tests.e2e.cli_helpers import http_get, start_run, stop, wait_for
from tests.services.ports import LOOPBACK, free_port
from tests.services.prometheus import LocalPrometheus, promtool_check
from tests.services.redis import LocalRedis, own_redis

BURST_ROWS = 150_000
BURST_TXS = 15


@pytest.fixture
def redis() -> Iterator[LocalRedis]:
    # Its own, since the test stops it; with the append-only file, so a restart keeps the
    # sink's data (without it the sink would rebuild it from the log).
    with own_redis(appendonly=True) as server:
        yield server


def _pipeline(tmp_path: Path, dsn: str, redis_url: str, listen: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        "\n".join(
            [
                "version: 1",
                "name: mon",
                "source:",
                "  type: postgres",
                f"  dsn: '{dsn}'",
                "  tables: [public.orders]",
                "  status_interval_s: 1",  # the idle slot follows the server's WAL each second
                "log:",
                "  type: embedded",
                f"  path: {tmp_path / 'log'}",
                "sinks:",
                f"  - {{name: cache, type: redis, url: '{redis_url}'}}",
                f"  - {{name: warehouse, type: duckdb, path: '{tmp_path / 'out.duckdb'}'}}",
                "metrics:",
                f"  listen: '{listen}'",
                "  stall_after_s: 6",
            ]
        )
        + "\n"
    )
    return path


class Scrape:
    """The pipeline's endpoint and the Prometheus that scrapes it."""

    def __init__(self, listen: str, prometheus: LocalPrometheus, run: Any, log: Path) -> None:
        self.base = f"http://{listen}"
        self.prometheus = prometheus
        self.run = run
        self.log = log

    def eventually(self, promql: str, test: Any, timeout: float = 60) -> None:
        seen: dict[str, Any] = {}

        def holds() -> bool:
            seen["value"] = self.prometheus.value(promql)
            return seen["value"] is not None and bool(test(seen["value"]))

        wait_for(holds, timeout, 0.25, process=self.run, log=self.log, last_seen=seen)

    def ready(self) -> tuple[int, dict[str, Any]]:
        status, body = http_get(f"{self.base}/readyz")
        return status, orjson.loads(body)


def test_prometheus_sees_lag_wal_sink_errors_and_a_stall(
    pg_db: str, redis: LocalRedis, tmp_path: Path
) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int8 PRIMARY KEY, note text, amount numeric)")
        conn.execute("INSERT INTO orders SELECT g, 'n', g FROM generate_series(1, 100) g")
    listen = f"{LOOPBACK}:{free_port()}"
    run = start_run(_pipeline(tmp_path, pg_db, redis.url, listen), tmp_path)
    try:
        with LocalPrometheus([listen], scrape_interval_s=0.5) as prometheus:
            scrape = Scrape(listen, prometheus, run, tmp_path / "run.log")
            _healthy_and_valid(scrape)
            _lag_rises_and_returns(scrape, pg_db)
            _wal_and_counts(scrape)
            _redis_stops_stalls_and_recovers(scrape, redis, pg_db)
        code, _ = stop(run, signal.SIGTERM, timeout=30)
        assert code == 0, (tmp_path / "run.log").read_text()[-4000:]
    finally:
        if run.poll() is None:
            run.kill()


def _healthy_and_valid(scrape: Scrape) -> None:
    wait_for(
        lambda: scrape.ready()[0] == 200 if _up(scrape) else False, 60, 0.2, scrape.run, scrape.log
    )
    assert http_get(f"{scrape.base}/healthz")[0] == 200
    status, text = http_get(f"{scrape.base}/metrics")
    assert status == 200
    checked = promtool_check("metrics", stdin=text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert b"cdc_source_events_total" in text and b"cdc_sink_state" in text
    wait_for(scrape.prometheus.targets_up, 60, 0.25, scrape.run, scrape.log)


def _up(scrape: Scrape) -> bool:
    try:
        return http_get(f"{scrape.base}/healthz")[0] == 200
    except OSError:
        return False  # not listening yet


def _lag_rises_and_returns(scrape: Scrape, dsn: str) -> None:
    step = BURST_ROWS // BURST_TXS
    with psycopg.connect(dsn, autocommit=True) as conn:
        for low in range(1000, 1000 + BURST_ROWS, step):
            conn.execute(
                "INSERT INTO orders SELECT g, md5(g::text), g"
                " FROM generate_series(%s::int8, %s::int8) g",
                (low, low + step - 1),
            )
    scrape.eventually("max_over_time(cdc_source_lag_seconds[5m])", lambda v: v > 0.2)
    scrape.eventually("cdc_source_lag_seconds", lambda v: v == 0)


def _wal_and_counts(scrape: Scrape) -> None:
    total = 100 + BURST_ROWS
    scrape.eventually("cdc_source_retained_wal_bytes", lambda v: v > 0)
    scrape.eventually("cdc_source_slot_active", lambda v: v == 1)
    scrape.eventually('cdc_source_slot_wal_status{status="reserved"}', lambda v: v == 1)
    scrape.eventually('sum(cdc_source_events_total{table="public.orders"})', lambda v: v == total)
    scrape.eventually('cdc_snapshot_rows_total{table="public.orders"}', lambda v: v == 100)
    for sink in ("cache", "warehouse"):
        applied = f'sum(cdc_sink_applied_total{{sink="{sink}"}})'
        scrape.eventually(applied, lambda v: v == total)
        scrape.eventually(f'sum(cdc_sink_lag_records{{sink="{sink}"}})', lambda v: v == 0)
        count = f'cdc_end_to_end_latency_seconds_count{{sink="{sink}"}}'
        scrape.eventually(count, lambda v: v > 0)
    scrape.eventually("cdc_log_append_seconds_count", lambda v: v > 0)


def _redis_stops_stalls_and_recovers(scrape: Scrape, redis: LocalRedis, dsn: str) -> None:
    # Only the stalls from here on: during the burst a sink's offset commit can wait for the
    # embedded log's write lock, which the source holds for a backlog's transaction, for longer
    # than this test's 6 s (that is a stall too, and cleared once the lock is free).
    scrape.eventually("sum(cdc_task_stalled)", lambda v: v == 0)
    seen = len(scrape.log.read_text().splitlines())
    redis.stop()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO orders VALUES (500, 'after redis stopped', 1)")
    cache = 'sink="cache"'
    scrape.eventually(f'cdc_sink_errors_total{{{cache},kind="unavailable"}}', lambda v: v > 0)
    scrape.eventually(f'cdc_sink_state{{{cache},state="retrying"}}', lambda v: v == 1)
    scrape.eventually('cdc_task_stalled{task="sink:cache"}', lambda v: v == 1)
    status, body = scrape.ready()
    assert status == 503 and any("sink:cache" in r for r in body["reasons"]), body
    assert scrape.prometheus.value('cdc_task_stalled{task="sink:warehouse"}') == 0
    lines = scrape.log.read_text().splitlines()[seen:]
    stalled = [line for line in lines if "task.stalled" in line]
    assert len(stalled) == 1 and "sink:cache" in stalled[0], stalled

    redis.start()
    scrape.eventually('cdc_task_stalled{task="sink:cache"}', lambda v: v == 0)
    scrape.eventually(f'cdc_sink_state{{{cache},state="running"}}', lambda v: v == 1)
    wait_for(lambda: scrape.ready()[0] == 200, 60, 0.25, scrape.run, scrape.log)
