"""A cache that loses its data comes back by itself: ``cdc run`` keeps running, the Redis sink
rebuilds every table from the compacted log, and Redis equals the source again.

PostgreSQL streams into a log (embedded, and Kafka) and a Redis sink, while a writer keeps
inserting, updating and deleting rows. Redis then loses everything without the pipeline being
touched: a ``FLUSHALL``, a restart of a server that keeps nothing on disk, and a ``FLUSHALL``
while nothing changes (found by the sink's idle probe, not by a write). Each time
the test waits for Redis to equal the source row for row, and checks what an operator sees: a
``sink.rebuild.started`` and a ``sink.rebuild.finished`` event with the table and topic counts,
``cdc_sink_rebuilds_total`` counting the rebuild, and ``/readyz`` answering 200. The process is
never restarted.
"""

from __future__ import annotations

import random
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
import redis
from psycopg import sql

from tests.e2e.cli_helpers import http_get, start_run, stop, wait_for
from tests.services.ports import LOOPBACK, free_port
from tests.services.redis import LocalRedis, own_redis

TABLES = ("items", "notes")
ROWS = 300
# A name of its own: the Kafka broker is the session's, shared with other tests' topics.
NAME = f"lost_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def cache() -> Iterator[LocalRedis]:
    # Its own server, without persistence: the test flushes and restarts it.
    with own_redis(appendonly=False) as server:
        yield server


class Writer:
    """Inserts, updates and deletes rows of both tables until stopped."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.changes = 0
        self.error: BaseException | None = None

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.error is None, self.error

    def _run(self) -> None:
        rng = random.Random(25)
        try:
            with psycopg.connect(self._dsn, autocommit=True) as conn:
                while not self._stop.wait(0.02):
                    table, key = rng.choice(TABLES), rng.randint(1, ROWS + 100)
                    self._change(conn, table, key, rng.random())
                    self.changes += 1
        except BaseException as exc:  # reported by __exit__
            self.error = exc

    @staticmethod
    def _change(conn: psycopg.Connection[Any], table: str, key: int, dice: float) -> None:
        name = sql.Identifier(table)
        if dice < 0.2:
            conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(name), (key,))
            return
        conn.execute(
            sql.SQL(
                "INSERT INTO {} VALUES (%s, %s, 1) ON CONFLICT (id) DO UPDATE "
                "SET note = excluded.note, n = {}.n + 1"
            ).format(name, name),
            (key, f"note {dice:.6f}"),
        )


def _pipeline(tmp_path: Path, dsn: str, url: str, listen: str, log: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        "\n".join(
            [
                "version: 1",
                f"name: {NAME}",
                "source:",
                "  type: postgres",
                f"  dsn: '{dsn}'",
                f"  tables: [{', '.join(f'public.{t}' for t in TABLES)}]",
                f"log: {log}",
                "sinks:",
                f"  - {{name: cache, type: redis, url: '{url}'}}",
                "metrics:",
                f"  listen: '{listen}'",
            ]
        )
        + "\n"
    )
    return path


def _log_section(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> str:
    if kind == "embedded":
        return f"{{type: embedded, path: '{tmp_path / 'log'}'}}"
    server = request.getfixturevalue("kafka_server")
    server.ensure_serving()  # asked for by name here, so tests/conftest.py does not check it
    return f"{{type: kafka, bootstrap_servers: '{server.bootstrap_servers}', partitions: 3}}"


def _source(dsn: str) -> dict[str, dict[str, Any]]:
    rows = {}
    with psycopg.connect(dsn) as conn:
        for table in TABLES:
            query = sql.SQL("SELECT id, note, n FROM {}").format(sql.Identifier(table))
            for key, note, n in conn.execute(query):
                rows[f"{NAME}:public.{table}:{key}"] = {"id": key, "note": note, "n": n}
    return rows


def _cached(url: str) -> dict[str, dict[str, Any]]:
    client = redis.Redis.from_url(url)
    try:
        keys = [k for t in TABLES for k in client.scan_iter(f"{NAME}:public.{t}:*", count=1000)]
        values = client.mget(keys) if keys else []
        return {k.decode(): orjson.loads(v) for k, v in zip(keys, values, strict=True) if v}
    finally:
        client.close()


def _rebuilds(listen: str) -> float:
    _, body = http_get(f"http://{listen}/metrics")
    for line in body.decode().splitlines():
        if line.startswith("cdc_sink_rebuilds_total{") and 'sink="cache"' in line:
            return float(line.rsplit(" ", 1)[1])
    return -1.0


def _events(log: Path, name: str) -> list[dict[str, Any]]:
    found = []
    for line in log.read_text().splitlines():
        if line.startswith("{") and f'"{name}"' in line:
            event = orjson.loads(line)
            if event.get("event") == name:
                found.append(event)
    return found


class Scene:
    def __init__(self, run: Any, log: Path, dsn: str, cache: LocalRedis, listen: str) -> None:
        self.run, self.log, self.dsn, self.cache, self.listen = run, log, dsn, cache, listen

    def wait(self, what: Any, timeout: float = 120) -> None:
        wait_for(what, timeout, 0.25, self.run, self.log)

    def converged(self) -> None:
        """Redis equals the source, and the sink is ready (after the writer stopped)."""
        seen: dict[str, Any] = {}

        def equal() -> bool:
            source, cached = _source(self.dsn), _cached(self.cache.url)
            seen["missing"] = sorted(set(source) - set(cached))[:5]
            seen["extra"] = sorted(set(cached) - set(source))[:5]
            seen["differ"] = [k for k in source if k in cached and cached[k] != source[k]][:5]
            return source == cached

        wait_for(equal, 120, 0.5, self.run, self.log, seen)
        self.wait(lambda: http_get(f"http://{self.listen}/readyz")[0] == 200)

    def rebuilt(self, times: int) -> None:
        """The ``times``-th rebuild started and finished, and was counted."""
        self.wait(lambda: len(_events(self.log, "sink.rebuild.finished")) >= times)
        started = _events(self.log, "sink.rebuild.started")
        finished = _events(self.log, "sink.rebuild.finished")
        assert len(started) == times and len(finished) == times, (started, finished)
        for event in (started[-1], finished[-1]):
            assert event["sink"] == "cache" and event["tables"] == 2 and event["topics"] == 2
        assert "lost this sink's data" in started[-1]["reason"]
        assert _rebuilds(self.listen) == times
        assert not _events(self.log, "sink.stopped")
        assert self.run.poll() is None


@pytest.mark.parametrize("log_kind", ["embedded", "kafka"])
def test_a_cache_that_lost_its_data_is_rebuilt_while_the_pipeline_runs(
    request: pytest.FixtureRequest, pg_db: str, cache: LocalRedis, tmp_path: Path, log_kind: str
) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        for table in TABLES:
            name = sql.Identifier(table)
            conn.execute(
                sql.SQL("CREATE TABLE {} (id int8 PRIMARY KEY, note text, n int)").format(name)
            )
            conn.execute(
                sql.SQL("INSERT INTO {} SELECT g, 'first', 0 FROM generate_series(1, %s) g").format(
                    name
                ),
                (ROWS,),
            )
    listen = f"{LOOPBACK}:{free_port()}"
    log = _log_section(request, log_kind, tmp_path)
    run = start_run(_pipeline(tmp_path, pg_db, cache.url, listen, log), tmp_path)
    scene = Scene(run, tmp_path / "run.log", pg_db, cache, listen)
    try:
        scene.converged()
        assert _rebuilds(listen) == 0
        with Writer(pg_db) as writer:
            scene.wait(lambda: writer.changes > 50)
            redis.Redis.from_url(cache.url).flushall()
            scene.wait(lambda: len(_events(scene.log, "sink.rebuild.finished")) >= 1)
        scene.converged()
        scene.rebuilt(1)
        with Writer(pg_db) as writer:
            scene.wait(lambda: writer.changes > 50)
            cache.restart()  # nothing on disk: it comes back empty
            scene.wait(lambda: len(_events(scene.log, "sink.rebuild.finished")) >= 2)
        scene.converged()
        scene.rebuilt(2)
        # While nothing changes: the sink's idle probe finds the loss, no write is needed.
        redis.Redis.from_url(cache.url).flushall()
        scene.wait(lambda: len(_events(scene.log, "sink.rebuild.finished")) >= 3, 30)
        scene.converged()
        scene.rebuilt(3)
        code, _ = stop(run, signal.SIGTERM, timeout=30)
        assert code == 0, scene.log.read_text()[-4000:]
    finally:
        if run.poll() is None:
            run.kill()
