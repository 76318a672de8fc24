"""Continuous verification inside ``cdc run`` (the ``verify:`` section) on real PostgreSQL and
Redis: ``cdc_verify_mismatched_keys`` is 0 while the cache agrees, counts the keys tampered with
in Redis once the rotation over the hash ranges reaches them, and is 0 again after ``cdc verify
--repair``; ``cdc_verify_last_full_pass_timestamp_seconds`` moves on with each full pass.

The table holds 400 rows and ``sample_keys`` is 100: after its first full pass the verifier cuts
the hash space into four ranges, one a round, so the tampered keys are found by rotation. With
the roles split (``--role source`` and a ``--role sinks`` worker), the sinks worker verifies its
sinks and the source process verifies nothing.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg
import redis

from tests.e2e.cli_helpers import cdc, http_get, start_run, stop, wait_for
from tests.services.ports import LOOPBACK, free_port

ROWS = 400


def write_pipeline(tmp_path: Path, name: str, listen: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: postgres\n  dsn: ${{PG_DSN}}\n"
        "  tables: [public.items]\n  snapshot: initial\n  status_interval_s: 1\n"
        "sinks:\n  - name: cache\n    type: redis\n    url: ${REDIS_URL}\n"
        f"metrics:\n  listen: {listen}\n"
        "verify:\n  interval_s: 0.5\n  sample_keys: 100\n"
    )
    return path


def _metric(url: str, name: str) -> float | None:
    status, body = http_get(url)
    if status != 200:
        return None
    pattern = re.compile(rf"^{name}\{{[^}}]*sink=\"cache\"[^}}]*\}} (\S+)$", re.M)
    found = pattern.search(body.decode())
    return float(found.group(1)) if found else None


def _items(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id integer PRIMARY KEY, name text)")
        conn.execute(
            "INSERT INTO public.items SELECT g, 'n' || g FROM generate_series(1, %s) g", (ROWS,)
        )


def test_the_mismatch_metric_counts_tampered_keys_until_repaired(
    pg_db: str, redis_server: Any, tmp_path: Path
) -> None:
    redis_server.start()
    name = f"cv_{uuid.uuid4().hex[:6]}"
    _items(pg_db)
    listen = f"{LOOPBACK}:{free_port()}"
    url = f"http://{listen}/metrics"
    env = {"PG_DSN": pg_db, "REDIS_URL": redis_server.url}
    pipeline = write_pipeline(tmp_path, name, listen)
    run = start_run(pipeline, tmp_path, env)
    log = tmp_path / "run.log"
    mismatched, full_pass = (
        "cdc_verify_mismatched_keys",
        "cdc_verify_last_full_pass_timestamp_seconds",
    )
    try:
        # Two full passes: the first at one range, the next over the four ranges it chose.
        wait_for(lambda: _metric(url, full_pass) is not None, 90, 0.2, run, log)
        first = _metric(url, full_pass)
        wait_for(lambda: (_metric(url, full_pass) or 0) > (first or 0), 90, 0.2, run, log)
        assert _metric(url, mismatched) == 0
        _tamper(redis_server.url, name)
        wait_for(lambda: _metric(url, mismatched) == 3, 90, 0.2, run, log)
        repaired = cdc("verify", str(pipeline), "--repair", "--json", cwd=tmp_path, env=env)
        assert repaired.returncode == 0, repaired.stdout + repaired.stderr
        (repair,) = orjson.loads(repaired.stdout)["repaired"]
        assert sorted(k["id"] for k in repair["sinks"]["cache"]["keys"]) == [7, 8, 9001]
        wait_for(lambda: _metric(url, mismatched) == 0, 90, 0.2, run, log)
        lines = log.read_text().splitlines()
        passes = [orjson.loads(line) for line in lines if "verify.full_pass" in line]
        assert {p["ranges"] for p in passes} == {1, 4}  # then four ranges, one a round
    finally:
        stop(run)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)


def test_a_sinks_worker_verifies_its_sinks_when_the_roles_are_split(
    pg_db: str, redis_server: Any, tmp_path: Path
) -> None:
    redis_server.start()
    name = f"cvr_{uuid.uuid4().hex[:6]}"
    _items(pg_db)
    sinks_listen, source_listen = (f"{LOOPBACK}:{free_port()}" for _ in range(2))
    url = f"http://{sinks_listen}/metrics"
    env = {"PG_DSN": pg_db, "REDIS_URL": redis_server.url}
    pipeline = write_pipeline(tmp_path, name, sinks_listen)
    log = tmp_path / "run.log"
    full_pass = "cdc_verify_last_full_pass_timestamp_seconds"
    # The sinks worker first: before the source has published the table's schema, its rounds
    # compare nothing, so no pass is full (a pass once counted then, with no count exported).
    sinks = start_run(pipeline, tmp_path, env, "--role", "sinks", "--sink", "cache")
    source = None
    try:
        wait_for(lambda: http_get(url)[0] == 200, 60, 0.2, sinks, log)
        time.sleep(2.0)  # four rounds at interval_s 0.5
        assert _metric(url, full_pass) is None
        assert _metric(url, "cdc_verify_mismatched_keys") is None
        source = start_run(
            pipeline, tmp_path, env, "--role", "source", "--metrics-listen", source_listen
        )
        client = redis.Redis.from_url(redis_server.url)
        cached = f"{name}:public.items:*"
        wait_for(lambda: len(list(client.scan_iter(cached))) == ROWS, 90, 0.2, sinks, log)
        wait_for(lambda: _metric(url, full_pass) is not None, 90, 0.2, sinks, log)
        assert _metric(url, "cdc_verify_mismatched_keys") == 0
        _tamper(redis_server.url, name)
        wait_for(lambda: _metric(url, "cdc_verify_mismatched_keys") == 3, 90, 0.2, sinks, log)
        # The source process verifies nothing: its endpoint has no verify samples.
        source_url = f"http://{source_listen}/metrics"
        assert http_get(source_url)[0] == 200
        assert _metric(source_url, full_pass) is None
        assert _metric(source_url, "cdc_verify_mismatched_keys") is None
        assert source.poll() is None
    finally:
        stop(sinks)
        if source is not None:
            stop(source)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)


def _tamper(url: str, pipeline: str) -> None:
    client = redis.Redis.from_url(url)
    prefix = f"{pipeline}:public.items:"
    assert client.delete(f"{prefix}7") == 1
    client.set(f"{prefix}8", orjson.dumps({"id": 8, "name": "tampered"}))
    client.set(f"{prefix}9001", orjson.dumps({"id": 9001, "name": "added"}))
