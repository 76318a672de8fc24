"""Read-your-writes fences (``cdc.fence.wait``, ``cdc wait``) on a real pipeline.

An application writes a row to PostgreSQL, waits on the Redis sink, then reads the row from
Redis and finds it: 1,000 times in a row, against one ``cdc run``. Then what the fence answers
in the other cases: a position already passed returns at once, a stopped pipeline times out
(exit 1), bad arguments exit 2; and the consistent position each sink publishes advances in
``cdc status``, ``/metrics`` and ``/readyz``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
import redis

from cdc import fence
from connectors.postgres.lsn import Lsn
from tests.e2e.cli_helpers import cdc, http_get, start_run, stop, wait_for
from tests.services.ports import LOOPBACK, free_port

WRITES = 1000


def _pipeline(tmp_path: Path, name: str, dsn: str, url: str, listen: str) -> Path:
    """One pipeline a test: the Redis server is the session's, and the sink keeps its offsets
    there under the pipeline's name."""
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        f"""version: 1
name: {name}
source: {{type: postgres, dsn: '{dsn}', tables: [public.notes]}}
log: {{type: embedded, path: '{tmp_path / "log"}'}}
sinks:
  - {{name: cache, type: redis, url: '{url}'}}
metrics: {{listen: '{listen}'}}
"""
    )
    return path


@pytest.fixture
def scene(pg_db: str, redis_server: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
    listen = f"{LOOPBACK}:{free_port()}"
    name = f"fence_{uuid.uuid4().hex[:8]}"
    path = _pipeline(tmp_path, name, pg_db, redis_server.url, listen)
    run = start_run(path, tmp_path)
    try:
        wait_for(
            lambda: http_get(f"http://{listen}/readyz")[0] == 200,
            60,
            0.1,
            run,
            tmp_path / "run.log",
        )
        yield {
            "path": path,
            "run": run,
            "dsn": pg_db,
            "url": redis_server.url,
            "listen": listen,
            "name": name,
        }
    finally:
        if run.poll() is None:
            stop(run)
        cdc("drop", str(path), "--yes", cwd=tmp_path)


def _key(scene: dict[str, Any], n: int) -> str:
    return f"{scene['name']}:public.notes:{n}"


def test_each_write_is_read_back_from_the_cache_after_the_fence(scene: dict[str, Any]) -> None:
    cache = redis.Redis.from_url(scene["url"])
    missing = []
    with (
        psycopg.connect(scene["dsn"], autocommit=True) as conn,
        fence.Fences(scene["path"]) as fences,
    ):
        for n in range(WRITES):
            conn.execute("INSERT INTO notes VALUES (%s, %s)", (n, f"note {n}"))
            fences.wait("cache", timeout_s=30)
            value = cache.get(_key(scene, n))
            if value is None or orjson.loads(value)["body"] != f"note {n}":
                missing.append(n)
        # The one-call form, which loads the file and opens the log each time, is the same fence.
        conn.execute("UPDATE notes SET body = 'changed' WHERE id = 0")
        reached = fence.wait(scene["path"], "cache")
    assert not missing, f"{len(missing)} of {WRITES} writes not in the cache after the fence"
    assert orjson.loads(cache.get(_key(scene, 0)) or b"{}")["body"] == "changed"
    assert str(reached).count("/") == 1  # the LSN, as cdc status prints it


def test_a_passed_position_returns_at_once_and_a_stopped_pipeline_times_out(
    scene: dict[str, Any], tmp_path: Path
) -> None:
    path, dsn = str(scene["path"]), scene["dsn"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO notes VALUES (1, 'one')")
        before = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
    first = cdc("wait", path, "--sink", "cache", "--now", "--timeout-s", "30", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    started = time.monotonic()
    again = cdc(
        "wait", path, "--sink", "cache", "--position", str(before), "--timeout-s", "0", cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() >= "0/" and time.monotonic() - started < 30
    assert stop(scene["run"])[0] == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO notes VALUES (2, 'two')")
    stopped = cdc("wait", path, "--sink", "cache", "--now", "--timeout-s", "1", cwd=tmp_path)
    assert stopped.returncode == 1, (stopped.stdout, stopped.stderr)
    assert "timed out" in stopped.stderr


def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "version: 1\nname: fenceargs\nsource: {type: postgres, dsn: 'host=/nonexistent', "
        f"tables: [public.t]}}\nlog: {{type: embedded, path: '{tmp_path / 'log'}'}}\n"
        "sinks: [{name: cache, type: redis, url: 'redis://127.0.0.1:1/0'}]\n"
    )
    cases = [
        ("--sink", "cache", "--position", "not-an-lsn"),
        ("--sink", "nosuch", "--position", "0/1"),
        ("--sink", "cache", "--position", "0/1", "--now"),
    ]
    for args in cases:
        result = cdc("wait", str(path), *args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "error:" in result.stderr
    with pytest.raises(fence.FenceError, match="no sink 'nosuch'"):
        fence.wait(path, "nosuch", "0/1")


def test_a_fence_after_writes_the_sink_does_not_take_returns_without_a_captured_change(
    scene: dict[str, Any],
) -> None:
    """WAL that holds no captured change still moves the stored position (the source stores
    offsets on the server's keepalives), promptly: a fence after a write to another table
    returns well within its timeout, and in less than the status interval (10 s)."""
    with psycopg.connect(scene["dsn"], autocommit=True) as conn:
        conn.execute("CREATE TABLE other (id int PRIMARY KEY)")
        conn.execute("INSERT INTO other VALUES (-1)")
        with fence.Fences(scene["path"]) as fences:
            # A session's first idle offer waits the status interval (10 s): the first fence
            # on WAL without a captured change may wait that long.
            fences.wait("cache", timeout_s=30)
            for n in range(20):
                conn.execute("INSERT INTO other VALUES (%s)", (n,))
                fences.wait("cache", timeout_s=3)


def _metric(listen: str) -> int | None:
    _, body = http_get(f"http://{listen}/metrics")
    for line in body.decode().splitlines():
        if line.startswith("cdc_sink_consistent_position{") and 'sink="cache"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return None


def _published(scene: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """What ``cdc status --json`` and ``/readyz`` say of the cache's consistent position."""
    status = orjson.loads(cdc("status", str(scene["path"]), "--json", cwd=tmp_path).stdout)
    beats = [p.get("consistent", {}).get("cache") for p in status["processes"]]
    ready = orjson.loads(http_get(f"http://{scene['listen']}/readyz")[1])
    return {
        "status": status["sinks"][0]["consistent_position"],
        "beat": next((b for b in beats if b), None),
        "readyz": ready.get("consistent_positions", {}).get("cache"),
        "metric": _metric(scene["listen"]),
    }


def test_the_consistent_position_advances_in_status_metrics_and_readyz(
    scene: dict[str, Any], tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}

    def all_at(position: Lsn) -> bool:
        seen.update(_published(scene, tmp_path))
        texts = [seen["status"], seen["beat"], seen["readyz"]]
        return all(t and Lsn.parse(t) >= position for t in texts) and seen["metric"] >= position

    positions = []
    with psycopg.connect(scene["dsn"], autocommit=True) as conn:
        for n in (1, 2):
            conn.execute("INSERT INTO notes VALUES (%s, 'x')", (n,))
            reached = Lsn.parse(str(fence.wait(scene["path"], "cache")))
            # The beat goes out every 5 s: the status and /readyz come first.
            wait_for(lambda r=reached: all_at(r), 30, 0.2, scene["run"], tmp_path / "run.log", seen)
            positions.append(reached)
    assert positions[0] < positions[1]  # the second insert's commit is past the first's


def test_a_fence_set_before_the_first_start_waits_for_the_whole_initial_snapshot(
    pg_db: str, redis_server: Any, tmp_path: Path
) -> None:
    """Rows written before the pipeline's first start reach the sinks through the initial
    snapshot, whose position is stored with its first chunk: a fence on a position taken
    before the start returns only once every chunk is applied."""
    rows = 2000
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
        conn.execute(
            "INSERT INTO notes SELECT n, 'note ' || n FROM generate_series(1, %s) n", (rows,)
        )
        before = str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])  # type: ignore[index]
    name = f"fence_{uuid.uuid4().hex[:8]}"
    path = _pipeline(tmp_path, name, pg_db, redis_server.url, f"{LOOPBACK}:{free_port()}")
    path.write_text(
        path.read_text().replace(
            "tables: [public.notes]", "tables: [public.notes], snapshot_chunk_rows: 50"
        )
    )
    run = start_run(path, tmp_path)
    try:
        fence.wait(path, "cache", before, timeout_s=60)
        cache = redis.Redis.from_url(redis_server.url)
        found = sum(
            1 for v in cache.mget([f"{name}:public.notes:{n}" for n in range(1, rows + 1)]) if v
        )
        assert found == rows
    finally:
        stop(run)
        cdc("drop", str(path), "--yes", cwd=tmp_path)


def test_fences_on_the_kafka_log(
    request: pytest.FixtureRequest, pg_db: str, redis_server: Any, tmp_path: Path
) -> None:
    """The same fence on Kafka: the end offsets count transaction markers, which the sink's
    group commits past once it has read everything."""
    server = request.getfixturevalue("kafka_server")
    server.ensure_serving()
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
    name = f"fence_{uuid.uuid4().hex[:8]}"
    path = _pipeline(tmp_path, name, pg_db, redis_server.url, f"{LOOPBACK}:{free_port()}")
    kafka = f"{{type: kafka, bootstrap_servers: '{server.bootstrap_servers}', partitions: 3}}"
    path.write_text(
        path.read_text().replace(
            f"log: {{type: embedded, path: '{tmp_path / 'log'}'}}", f"log: {kafka}"
        )
    )
    run = start_run(path, tmp_path)
    cache = redis.Redis.from_url(redis_server.url)
    try:
        with psycopg.connect(pg_db, autocommit=True) as conn, fence.Fences(path) as fences:
            for n in range(10):
                conn.execute("INSERT INTO notes VALUES (%s, %s)", (n, f"note {n}"))
                fences.wait("cache", timeout_s=60)
                assert cache.get(f"{name}:public.notes:{n}") is not None, n
    finally:
        stop(run)
        cdc("drop", str(path), "--yes", cwd=tmp_path)
